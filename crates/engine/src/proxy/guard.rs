//! Which addresses an upstream named by untrusted content may be reached
//! at: the server-side request forgery fence of `_redirects` proxy rules.
//!
//! A site archive is built by CI from content anyone may edit, so the
//! origins its proxy rules name come from the operator's allow list, never
//! the site. A name on that list is still resolved by DNS, which whoever
//! runs the name's zone controls (DNS rebinding: `api.example.com` answers
//! 127.0.0.1 a minute later). So the addresses are checked where they are
//! used, at connect time, after every resolution (`pool.rs` asks the
//! guard for each address it would connect to): loopback, unspecified,
//! link-local, private (RFC 1918, RFC 4193), shared (RFC 6598),
//! multicast and broadcast addresses are refused unless the operator named
//! a network holding them; the cloud metadata services (169.254.169.254,
//! fd00:ec2::254) are refused whatever the operator said. IPv4 addresses
//! inside IPv6 (mapped, NAT64's 64:ff9b::/96, 6to4's 2002::/16) are judged
//! as the IPv4 address they carry.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::client_addr::Network;

/// The networks an operator let proxy rules reach besides public
/// addresses. Empty by default: public addresses only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressGuard {
    allowed: Vec<Network>,
}

impl AddressGuard {
    /// Public addresses, and those in `allowed` (`127.0.0.0/8`,
    /// `10.1.2.3`, `fd00::/8`) except the metadata services.
    pub fn new(allowed: Vec<Network>) -> AddressGuard {
        AddressGuard { allowed }
    }

    /// The networks allowed besides public addresses.
    pub fn allowed(&self) -> &[Network] {
        &self.allowed
    }

    /// Why `ip` may not be connected to, or `None` when it may.
    pub fn refusal(&self, ip: IpAddr) -> Option<&'static str> {
        let ip = ip.to_canonical();
        let why = special(ip)?;
        if is_metadata(ip) || !self.allowed.iter().any(|n| n.contains(ip)) {
            return Some(why);
        }
        None
    }
}

/// The cloud metadata services: AWS, GCP, Azure and others at
/// 169.254.169.254, AWS's IPv6 one at fd00:ec2::254. Never reachable from
/// site files, whatever the operator allows.
pub fn is_metadata(ip: IpAddr) -> bool {
    match embedded_v4(ip.to_canonical()) {
        IpAddr::V4(v4) => v4 == Ipv4Addr::new(169, 254, 169, 254),
        IpAddr::V6(v6) => v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
    }
}

/// What kind of non-public address `ip` is, or `None` for a public one.
pub fn special(ip: IpAddr) -> Option<&'static str> {
    if is_metadata(ip) {
        return Some("the cloud metadata service");
    }
    match embedded_v4(ip.to_canonical()) {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            if v4.is_loopback() {
                Some("a loopback address")
            } else if v4.is_unspecified() || a == 0 {
                Some("the unspecified address (this host)")
            } else if v4.is_link_local() {
                Some("a link-local address")
            } else if v4.is_private() {
                Some("a private address")
            } else if a == 100 && (b & 0xc0) == 64 {
                Some("a shared (carrier-grade NAT) address")
            } else if v4.is_multicast() || v4.is_broadcast() || a >= 240 {
                Some("a multicast, broadcast or reserved address")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Some("a loopback address")
            } else if v6.is_unspecified() {
                Some("the unspecified address (this host)")
            } else if (first & 0xffc0) == 0xfe80 {
                Some("a link-local address")
            } else if (first & 0xfe00) == 0xfc00 {
                Some("a private address")
            } else if v6.is_multicast() {
                Some("a multicast, broadcast or reserved address")
            } else {
                None
            }
        }
    }
}

/// The IPv4 address an IPv6 one carries by NAT64 (64:ff9b::/96) or 6to4
/// (2002::/16), which is where a packet to it ends up; else `ip`.
fn embedded_v4(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else {
        return ip;
    };
    let s = v6.segments();
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return IpAddr::V4(Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7])));
    }
    if s[0] == 0x2002 {
        return IpAddr::V4(Ipv4Addr::from((u32::from(s[1]) << 16) | u32::from(s[2])));
    }
    ip
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn special_addresses_are_refused_and_public_ones_pass() {
        let none = AddressGuard::default();
        for (addr, why) in [
            ("127.0.0.1", "loopback"),
            ("127.8.9.10", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("64:ff9b::7f00:1", "loopback"),
            ("2002:7f00:1::", "loopback"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("169.254.1.1", "link-local"),
            ("fe80::1", "link-local"),
            ("169.254.169.254", "metadata"),
            ("::ffff:169.254.169.254", "metadata"),
            ("64:ff9b::a9fe:a9fe", "metadata"),
            ("fd00:ec2::254", "metadata"),
            ("10.0.0.1", "private"),
            ("172.16.5.4", "private"),
            ("192.168.0.1", "private"),
            ("fd12::1", "private"),
            ("100.64.0.1", "shared"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("ff02::1", "multicast"),
        ] {
            let got = none.refusal(ip(addr));
            assert!(got.is_some_and(|w| w.contains(why)), "{addr}: {got:?}");
        }
        for public in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700::1111",
            "172.32.0.1",
            "100.128.0.1",
        ] {
            assert_eq!(none.refusal(ip(public)), None, "{public}");
        }
    }

    #[test]
    fn the_operator_opens_networks_but_never_the_metadata_service() {
        let g = AddressGuard::new(vec![
            "127.0.0.0/8".parse().unwrap(),
            "169.254.0.0/16".parse().unwrap(),
            "fd00::/8".parse().unwrap(),
        ]);
        assert_eq!(g.refusal(ip("127.0.0.1")), None);
        assert_eq!(g.refusal(ip("::ffff:127.0.0.1")), None);
        assert_eq!(g.refusal(ip("169.254.1.1")), None);
        assert_eq!(g.refusal(ip("fd00::5")), None);
        assert!(g.refusal(ip("::1")).is_some(), "::1 is not in 127.0.0.0/8");
        assert!(g.refusal(ip("10.0.0.1")).is_some());
        assert_eq!(g.refusal(ip("169.254.169.254")), Some("the cloud metadata service"));
        assert_eq!(g.refusal(ip("fd00:ec2::254")), Some("the cloud metadata service"));
    }
}
