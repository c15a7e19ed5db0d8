//! A route's IP rules (issue 27): networks allowed and denied, judged on
//! the client's address (`Request::client_addr`: the peer, or what
//! trusted proxies say), a refusal answered 403.
//!
//! nginx's `allow`/`deny` are tried in the order written, first match
//! wins; a table has no order, so here the most specific network that
//! contains the address decides (the longest prefix, as a routing table
//! does), whichever list it is in. That reads the same both ways round:
//! `allow = ["10.0.0.0/8"], deny = ["10.0.0.5"]` lets the /8 in but one
//! host, and `deny = ["10.0.0.0/8"], allow = ["10.0.0.5"]` keeps the /8
//! out but one host. An address no network contains is allowed when
//! `allow` is empty (a deny list), refused otherwise (an allow list: as
//! nginx's rules ending in `deny all`). One network in both lists is
//! refused when the configuration is read: it would mean two things.

use std::net::IpAddr;

use peregrine::client_addr::Network;

/// A route's `ip = { allow = [...], deny = [...] }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IpRules {
    pub(crate) allow: Vec<Network>,
    pub(crate) deny: Vec<Network>,
}

impl IpRules {
    /// Rules from the networks as written (`10.0.0.0/8`, `::1`); at least
    /// one network, none in both lists.
    pub(crate) fn new(allow: &[String], deny: &[String]) -> Result<IpRules, String> {
        let parse = |list: &[String], name: &str| -> Result<Vec<Network>, String> {
            list.iter()
                .map(|s| {
                    s.trim()
                        .parse::<Network>()
                        .map_err(|e| format!("{name}: {s:?}: {e} (expected IP or IP/PREFIX, e.g. 10.0.0.0/8)"))
                })
                .collect()
        };
        let rules = IpRules {
            allow: parse(allow, "allow")?,
            deny: parse(deny, "deny")?,
        };
        if rules.allow.is_empty() && rules.deny.is_empty() {
            return Err("no network: give allow = [...] or deny = [...] (or both)".into());
        }
        if let Some(both) = rules.allow.iter().find(|n| rules.deny.contains(n)) {
            return Err(format!("{both} is both allowed and denied"));
        }
        Ok(rules)
    }

    /// Whether a client at `ip` may go on (the module's documentation
    /// says how).
    pub(crate) fn permits(&self, ip: IpAddr) -> bool {
        let longest = |list: &[Network]| list.iter().filter(|n| n.contains(ip)).map(|n| n.prefix_len()).max();
        match (longest(&self.allow), longest(&self.deny)) {
            (Some(a), Some(d)) => a > d,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => self.allow.is_empty(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allow: &[&str], deny: &[&str]) -> IpRules {
        let own = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        IpRules::new(&own(allow), &own(deny)).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_allow_list_refuses_everyone_else() {
        let r = rules(&["127.0.0.2", "10.0.0.0/8", "2001:db8::/32"], &[]);
        for yes in ["127.0.0.2", "10.1.2.3", "2001:db8::1", "::ffff:10.0.0.1"] {
            assert!(r.permits(ip(yes)), "{yes}");
        }
        for no in ["127.0.0.1", "127.0.0.3", "11.0.0.1", "::1", "2001:db9::1"] {
            assert!(!r.permits(ip(no)), "{no}");
        }
    }

    #[test]
    fn a_deny_list_lets_everyone_else_in() {
        let r = rules(&[], &["127.0.0.3", "::1"]);
        assert!(r.permits(ip("127.0.0.2")));
        assert!(!r.permits(ip("127.0.0.3")));
        assert!(!r.permits(ip("::1")));
        assert!(r.permits(ip("::2")));
    }

    /// The most specific network decides, whichever list holds it.
    #[test]
    fn the_longest_prefix_decides_either_way_round() {
        let r = rules(&["10.0.0.0/8"], &["10.0.0.5"]);
        assert!(r.permits(ip("10.0.0.4")));
        assert!(!r.permits(ip("10.0.0.5")));
        assert!(!r.permits(ip("192.168.0.1")));
        let r = rules(&["10.0.0.5"], &["10.0.0.0/8"]);
        assert!(!r.permits(ip("10.0.0.4")));
        assert!(r.permits(ip("10.0.0.5")));
        // Outside both: an allow list is given, so refused.
        assert!(!r.permits(ip("192.168.0.1")));
        let r = rules(&["0.0.0.0/0"], &["10.0.0.0/8"]);
        assert!(r.permits(ip("192.168.0.1")));
        assert!(!r.permits(ip("10.9.9.9")));
    }

    #[test]
    fn bad_networks_and_contradictions_are_refused() {
        let own = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let err = |a: &[&str], d: &[&str]| IpRules::new(&own(a), &own(d)).unwrap_err();
        assert!(err(&["10.0.0.1/8"], &[]).contains("bits set beyond"));
        assert!(err(&["example.com"], &[]).contains("not an IP address"));
        assert!(err(&[], &["::1/129"]).contains("prefix length"));
        assert!(err(&["10.0.0.0/8"], &["10.0.0.0/8"]).contains("both allowed and denied"));
        assert!(err(&[], &[]).contains("no network"));
    }
}
