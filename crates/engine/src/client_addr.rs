//! The client's address, decided once per request: the socket's peer,
//! unless the peer is a proxy the configuration trusts, in which case the
//! address the proxies say they relayed. One rule for every feature that
//! needs "the client" (the access log, rate limits, access rules), so that
//! none of them reads a header a client can write.
//!
//! The rule is nginx's `set_real_ip_from` with `real_ip_recursive on`, and
//! Caddy's `trusted_proxies` with `client_ip_headers`: the hops a request
//! came through are walked from the nearest outward (the socket's peer;
//! the source of the PROXY header the connection began with, if any; then
//! the elements of `X-Forwarded-For` or `Forwarded` from the right), and
//! the client is the first hop that is not a trusted proxy. Each element
//! was written by the hop to its right, so an element is believed only
//! while every hop to its right is trusted: whatever a client writes
//! itself stays to the left of the first untrusted address and is never
//! read. When every hop is trusted, the client is the left-most one.
//!
//! Where the walk cannot go on, it stops, and the client is the last hop
//! it could read (a trusted proxy: the one that wrote what could not be
//! read, or the peer):
//! - an element that is not an address (garbage, `unknown`, a host name):
//!   a trusted proxy wrote something we cannot place, and skipping it
//!   would believe what lies beyond, which nobody trusted vouched for (as
//!   nginx does, which stops at the last address it could parse);
//! - a `Forwarded` element whose `for` is `unknown` or obfuscated
//!   (`_hidden`, RFC 7239 §6.2–6.3), or that has no `for`: the proxy chose
//!   not to say;
//! - [`HOPS_MAX`] elements examined: a header of 10,000 addresses costs as
//!   much as one of 32. A client can only make the walk that long through
//!   a chain of proxies the configuration trusts.
//!
//! The address comes from `X-Forwarded-For` by default (what nginx and
//! Caddy read), or from `Forwarded` ([`AddrField`]); never both, since a
//! proxy that writes one seldom strips the other, which a client could
//! then fill in.
//!
//! A PROXY header is itself only to be accepted from a trusted peer (HAProxy's
//! `proxy-protocol.txt` §2: "only trusted proxies are allowed to use this
//! protocol"); that check is the caller's, with [`TrustedProxies::contains`]
//! on the peer before parsing it. Here, its source is the hop after the
//! peer: it is the client unless it too is trusted (a CDN in front of a
//! layer 4 load balancer), in which case the walk goes on into the field.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use crate::codec::head::{is_tchar, trim_ows};

/// Most elements of `X-Forwarded-For` or `Forwarded` examined for one
/// request, empty ones included. A chain of trusted proxies is a few
/// hops long; 32 is far beyond any real one.
pub const HOPS_MAX: usize = 32;

/// Most field lines of the chosen field read, the last ones (several lines
/// are one list, RFC 9110 §5.3): their places are kept on the stack, so
/// the walk allocates nothing. A request with more lines is walked over
/// its last 16, as if the list began there; as with [`HOPS_MAX`], only a
/// chain of trusted proxies that long could tell the difference.
const LINES_MAX: usize = 16;

/// A network of addresses: an address and a prefix length, `10.0.0.0/8`,
/// `fd00::/8`; a single address is a network of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Network {
    addr: IpAddr,
    prefix_len: u8,
}

impl Network {
    /// The network of the addresses whose first `prefix_len` bits are
    /// `addr`'s. Refused if `prefix_len` is longer than the address or
    /// `addr` has bits set after it (`10.0.0.1/8`: a typo for `10.0.0.0/8`
    /// or for `10.0.0.1/32`, which trust very different sets). An
    /// IPv4-mapped IPv6 network (`::ffff:10.0.0.0/104`) is taken as the
    /// IPv4 network it maps (`10.0.0.0/8`), since [`Network::contains`]
    /// sees mapped addresses as IPv4.
    pub fn new(addr: IpAddr, prefix_len: u8) -> Result<Network, NetworkError> {
        let (addr, prefix_len) = match addr {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) if prefix_len >= 96 => (IpAddr::V4(v4), prefix_len - 96),
                _ => (addr, prefix_len),
            },
            IpAddr::V4(_) => (addr, prefix_len),
        };
        let net = Network { addr, prefix_len };
        if prefix_len > net.bits() {
            return Err(NetworkError::PrefixLength);
        }
        if net.masked(addr) != Some(net.addr) {
            return Err(NetworkError::HostBits);
        }
        Ok(net)
    }

    /// The network's first address.
    pub fn addr(self) -> IpAddr {
        self.addr
    }

    /// How many leading bits the network's addresses share.
    pub fn prefix_len(self) -> u8 {
        self.prefix_len
    }

    /// Whether `ip` is in the network; an IPv4-mapped IPv6 address
    /// (`::ffff:10.0.0.1`, as a dual-stack socket shows an IPv4 peer) as
    /// the IPv4 address it maps.
    pub fn contains(self, ip: IpAddr) -> bool {
        self.masked(ip.to_canonical()) == Some(self.addr)
    }

    fn bits(self) -> u8 {
        match self.addr {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        }
    }

    /// `ip` with the bits after the prefix cleared, if it is of the
    /// network's family.
    fn masked(self, ip: IpAddr) -> Option<IpAddr> {
        let keep = u32::from(self.prefix_len);
        match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - keep).unwrap_or(0);
                Some(IpAddr::V4(Ipv4Addr::from(u32::from(ip) & mask)))
            }
            (IpAddr::V6(_), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - keep).unwrap_or(0);
                Some(IpAddr::V6(Ipv6Addr::from(u128::from(ip) & mask)))
            }
            _ => None,
        }
    }
}

impl FromStr for Network {
    type Err = NetworkError;

    /// `ADDRESS` or `ADDRESS/PREFIX`: `192.168.1.7`, `10.0.0.0/8`, `::1`,
    /// `fd00::/8`. The prefix is decimal digits, without a sign or
    /// leading zeros.
    fn from_str(s: &str) -> Result<Network, NetworkError> {
        let (addr, prefix) = match s.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| NetworkError::Address)?;
        let prefix_len = match prefix {
            None => match addr {
                IpAddr::V4(_) => 32,
                IpAddr::V6(_) => 128,
            },
            Some(p) if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) => {
                return Err(NetworkError::PrefixLength)
            }
            Some(p) if p.len() > 1 && p.starts_with('0') => return Err(NetworkError::PrefixLength),
            Some(p) => p.parse().map_err(|_| NetworkError::PrefixLength)?,
        };
        Network::new(addr, prefix_len)
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

/// Why a network was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetworkError {
    /// The part before `/` is not an IPv4 or IPv6 address.
    Address,
    /// The part after `/` is not a number of bits the address has.
    PrefixLength,
    /// The address has bits set after the prefix (`10.0.0.1/8`).
    HostBits,
}

impl NetworkError {
    /// A short human-readable reason.
    pub fn reason(self) -> &'static str {
        match self {
            NetworkError::Address => "not an IP address",
            NetworkError::PrefixLength => "prefix length not 0-32 (IPv4) or 0-128 (IPv6)",
            NetworkError::HostBits => "address has bits set beyond the prefix length",
        }
    }
}

impl fmt::Display for NetworkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for NetworkError {}

/// The proxies whose word about the client is believed: networks,
/// IPv4 and IPv6. Empty by default: nobody is trusted, and the client is
/// always the socket's peer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    networks: Vec<Network>,
}

impl TrustedProxies {
    /// No trusted proxy.
    pub fn new() -> TrustedProxies {
        TrustedProxies::default()
    }

    /// Trusts `network` too.
    pub fn push(&mut self, network: Network) {
        self.networks.push(network);
    }

    /// The trusted networks, in the order given.
    pub fn networks(&self) -> &[Network] {
        &self.networks
    }

    /// Whether no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.networks.is_empty()
    }

    /// Whether `ip` is a trusted proxy's address: in one of the networks,
    /// an IPv4-mapped IPv6 address as the IPv4 address it maps (so IPv4
    /// clients are matched by IPv4 networks only, however the socket
    /// spells them). A linear scan: lists are a handful of networks (a
    /// CDN's published ranges are a few dozen).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.networks.iter().any(|net| net.contains(ip))
    }
}

impl FromIterator<Network> for TrustedProxies {
    fn from_iter<I: IntoIterator<Item = Network>>(iter: I) -> TrustedProxies {
        TrustedProxies {
            networks: iter.into_iter().collect(),
        }
    }
}

impl FromStr for TrustedProxies {
    type Err = TrustedProxiesError;

    /// Networks separated by commas or whitespace:
    /// `"10.0.0.0/8, 192.168.1.7 ::1 fd00::/8"`. An empty string trusts
    /// nobody.
    fn from_str(s: &str) -> Result<TrustedProxies, TrustedProxiesError> {
        s.split(|c: char| c == ',' || c.is_ascii_whitespace())
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                entry.parse().map_err(|error| TrustedProxiesError {
                    entry: entry.to_owned(),
                    error,
                })
            })
            .collect()
    }
}

/// A list of trusted proxies that did not parse: which entry, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedProxiesError {
    /// The entry as written.
    pub entry: String,
    /// What is wrong with it.
    pub error: NetworkError,
}

impl fmt::Display for TrustedProxiesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "trusted proxy `{}`: {}", self.entry, self.error)
    }
}

impl std::error::Error for TrustedProxiesError {}

/// Which request field names the hops before the trusted proxies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AddrField {
    /// `X-Forwarded-For: client, proxy1, proxy2`: addresses, optionally
    /// with a port (`192.0.2.1:4711`, `[2001:db8::1]:4711`). The default,
    /// as in nginx and Caddy: what most proxies write.
    #[default]
    XForwardedFor,
    /// `Forwarded: for=192.0.2.1, for="[2001:db8::1]:4711";proto=https`
    /// (RFC 7239): the `for` parameter of each element.
    Forwarded,
}

impl FromStr for AddrField {
    type Err = String;

    /// `x-forwarded-for` or `forwarded`, in any case.
    fn from_str(s: &str) -> Result<AddrField, String> {
        [AddrField::XForwardedFor, AddrField::Forwarded]
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("{s:?} is not x-forwarded-for or forwarded"))
    }
}

impl AddrField {
    /// The field's name.
    pub fn name(self) -> &'static str {
        match self {
            AddrField::XForwardedFor => "x-forwarded-for",
            AddrField::Forwarded => "forwarded",
        }
    }

    /// What one element of the field names, if it names an address.
    fn node(self, element: &[u8]) -> Option<Node> {
        match self {
            AddrField::XForwardedFor => x_forwarded_for_node(element),
            AddrField::Forwarded => forwarded_node(element),
        }
    }

    fn via(self) -> Via {
        match self {
            AddrField::XForwardedFor => Via::XForwardedFor,
            AddrField::Forwarded => Via::Forwarded,
        }
    }
}

/// Where the client's address came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The socket's peer: it is not a trusted proxy, or no trusted proxy
    /// said more.
    Peer,
    /// The source of the connection's PROXY header.
    ProxyProtocol,
    /// An element of `X-Forwarded-For`.
    XForwardedFor,
    /// The `for` of an element of `Forwarded`.
    Forwarded,
}

/// The client of a request, as [`client_addr`] decided it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr {
    /// The client's address, as the socket or the proxy spelled it (an
    /// IPv4-mapped IPv6 address stays one; `IpAddr::to_canonical` maps it).
    pub ip: IpAddr,
    /// The client's port, when known: always from the socket and a PROXY
    /// header, when the element gives one from a field.
    pub port: Option<u16>,
    /// Where it came from.
    pub via: Via,
}

impl ClientAddr {
    /// The address and port as one socket address, port 0 when the
    /// proxy gave none (the access log writes `$remote_port` empty then,
    /// as nginx does for a port it does not know).
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port.unwrap_or(0))
    }
}

/// A server's rule for deciding its clients' addresses: whom it trusts,
/// and which field it reads behind them. `None` where a server trusts
/// nobody (the default), so that a request asks nothing more.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Trust {
    pub(crate) proxies: TrustedProxies,
    pub(crate) field: AddrField,
}

/// Decides the client of a request (the module's doc says how).
///
/// `peer` is the socket's peer; `proxy_source` the source of the PROXY
/// header the connection began with ([`ProxyHeader::source`]: `None`
/// without one, or when it gave no address, as for LOCAL or UNKNOWN);
/// `fields` the request's header fields in order, as
/// [`Request::headers`](crate::Request::headers) gives them, of which the
/// lines of `field` are read (names compared without case). Nothing is
/// read if `trusted` is empty or does not contain the peer. Allocates
/// nothing.
///
/// [`ProxyHeader::source`]: crate::codec::proxy::ProxyHeader::source
pub fn client_addr<'a, F>(
    peer: SocketAddr,
    proxy_source: Option<SocketAddr>,
    fields: F,
    field: AddrField,
    trusted: &TrustedProxies,
) -> ClientAddr
where
    F: IntoIterator<Item = (&'a str, &'a [u8])>,
{
    let mut client = ClientAddr {
        ip: peer.ip(),
        port: Some(peer.port()),
        via: Via::Peer,
    };
    // A Unix-domain client has no address (`UNIX_PEER`, 0.0.0.0:0): a
    // list trusting 0.0.0.0/0 must not make it a proxy.
    if crate::sys::stream::is_unix(peer) || !trusted.contains(client.ip) {
        return client;
    }
    if let Some(source) = proxy_source {
        client = ClientAddr {
            ip: source.ip(),
            port: Some(source.port()),
            via: Via::ProxyProtocol,
        };
        if !trusted.contains(client.ip) {
            return client;
        }
    }

    // The last LINES_MAX lines of the field, in a ring.
    let mut lines: [&[u8]; LINES_MAX] = [&[]; LINES_MAX];
    let mut n_lines = 0;
    for (name, value) in fields {
        if name.eq_ignore_ascii_case(field.name()) {
            lines[n_lines % LINES_MAX] = value;
            n_lines += 1;
        }
    }
    // From the right: the last line's last element first. Elements are
    // split at every comma, even one inside a quoted string of
    // `Forwarded` (a `for`, `by`, `proto` or `host` never holds one):
    // each half of a well-formed element cut there has a quoted string
    // left open, so is malformed, and the walk stops there.
    let mut n_hops = 0;
    for back in 0..n_lines.min(LINES_MAX) {
        let line = lines[(n_lines - 1 - back) % LINES_MAX];
        let mut end = line.len();
        loop {
            let start = memchr::memrchr(b',', &line[..end]).map_or(0, |comma| comma + 1);
            n_hops += 1;
            if n_hops > HOPS_MAX {
                return client;
            }
            // "a recipient MUST parse and ignore a reasonable number of
            // empty list elements" (RFC 9110 §5.6.1).
            let element = trim_ows(&line[start..end]);
            if !element.is_empty() {
                let Some((ip, port)) = field.node(element) else {
                    return client;
                };
                client = ClientAddr {
                    ip,
                    port,
                    via: field.via(),
                };
                if !trusted.contains(ip) {
                    return client;
                }
            }
            if start == 0 {
                break;
            }
            end = start - 1;
        }
    }
    client
}

/// What an element names: an address, and a port if it gives one.
type Node = (IpAddr, Option<u16>);

/// An `X-Forwarded-For` element: an address, with a port if written as
/// `192.0.2.1:4711` or `[2001:db8::1]:4711` (which some proxies send; nginx
/// and Caddy accept both), a bracketed IPv6 address without one.
/// Anything else (`unknown`, a host name, an IPv6 zone) is `None`.
fn x_forwarded_for_node(element: &[u8]) -> Option<Node> {
    let s = std::str::from_utf8(element).ok()?;
    if let Some(rest) = s.strip_prefix('[') {
        let (ip, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            _ => Some(port(after.strip_prefix(':')?)?),
        };
        return Some((IpAddr::V6(ip.parse().ok()?), port));
    }
    if let Ok(ip) = s.parse() {
        return Some((ip, None));
    }
    let (ip, p) = s.split_once(':')?;
    Some((IpAddr::V4(ip.parse().ok()?), Some(port(p)?)))
}

/// A port: one to five decimal digits, at most 65535.
fn port(s: &str) -> Option<u16> {
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The client a `Forwarded` element names (RFC 7239 §4):
///
/// ```text
/// forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
/// forwarded-pair    = token "=" value
/// value             = token / quoted-string
/// ```
///
/// The `for` parameter (its name compared without case; twice is
/// malformed, §4: "Each parameter MUST NOT occur more than once per
/// forwarded-element"), as a node (§6):
///
/// ```text
/// node     = nodename [ ":" node-port ]
/// nodename = IPv4address / "[" IPv6address "]" / "unknown" / obfnode
/// ```
///
/// `None` for `unknown`, an obfuscated node, an element without `for`,
/// and anything malformed. A node with `:` or `[` must be quoted, as
/// those are not token characters; a quoted value is taken as written,
/// and a backslash escape in it (never needed by a node) makes it
/// malformed.
fn forwarded_node(element: &[u8]) -> Option<Node> {
    let mut rest = element;
    let mut node = None;
    while let Some(&b) = rest.first() {
        if b == b';' {
            rest = &rest[1..];
            continue;
        }
        let name_len = rest.iter().take_while(|&&b| is_tchar(b)).count();
        let (name, after) = rest.split_at(name_len);
        let after = after.strip_prefix(b"=")?;
        if name.is_empty() {
            return None;
        }
        let (value, after) = if after.first() == Some(&b'"') {
            quoted_string(after)?
        } else {
            let value_len = after.iter().take_while(|&&b| is_tchar(b)).count();
            if value_len == 0 {
                return None;
            }
            after.split_at(value_len)
        };
        if !(after.is_empty() || after[0] == b';') {
            return None;
        }
        if name.eq_ignore_ascii_case(b"for") && node.replace(value).is_some() {
            return None;
        }
        rest = after;
    }
    let node = std::str::from_utf8(node?).ok()?;
    let (ip, after) = match node.strip_prefix('[') {
        Some(rest) => {
            let (ip, after) = rest.split_once(']')?;
            (IpAddr::V6(ip.parse().ok()?), after)
        }
        None => {
            let (ip, after) = node.split_at(node.find(':').unwrap_or(node.len()));
            (IpAddr::V4(ip.parse().ok()?), after)
        }
    };
    // node-port = port / obfport; obfport = "_" 1*(ALPHA / DIGIT / "." / "_" / "-")
    let port = match after {
        "" => None,
        _ => {
            let p = after.strip_prefix(':')?;
            match p.strip_prefix('_') {
                Some(obfport)
                    if !obfport.is_empty()
                        && obfport
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) =>
                {
                    None
                }
                Some(_) => return None,
                None => Some(port(p)?),
            }
        }
    };
    Some((ip, port))
}

/// A quoted-string at the start of `s` (RFC 9110 §5.6.4): its content as
/// written (escapes kept) and what follows its closing quote.
///
/// ```text
/// quoted-string = DQUOTE *( qdtext / quoted-pair ) DQUOTE
/// qdtext        = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text
/// quoted-pair   = "\" ( HTAB / SP / VCHAR / obs-text )
/// ```
fn quoted_string(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let is_text = |b: u8| b == b'\t' || (b >= 0x20 && b != 0x7f);
    let mut at = 1;
    loop {
        match *s.get(at)? {
            b'"' => return Some((&s[1..at], &s[at + 1..])),
            b'\\' if s.get(at + 1).is_some_and(|&b| is_text(b)) => at += 2,
            b'\\' => return None,
            b if is_text(b) => at += 1,
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trusted(list: &str) -> TrustedProxies {
        list.parse().unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn sock(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// The client of a request from `peer` with `fields` and no PROXY
    /// header, `trusted` the trusted list.
    fn decide(peer: &str, fields: &[(&str, &str)], field: AddrField, list: &str) -> ClientAddr {
        client_addr(
            sock(peer),
            None,
            fields.iter().map(|(n, v)| (*n, v.as_bytes())),
            field,
            &trusted(list),
        )
    }

    fn xff(peer: &str, values: &[&str], list: &str) -> ClientAddr {
        let fields: Vec<_> = values.iter().map(|v| ("X-Forwarded-For", *v)).collect();
        decide(peer, &fields, AddrField::XForwardedFor, list)
    }

    fn fwd(peer: &str, values: &[&str], list: &str) -> ClientAddr {
        let fields: Vec<_> = values.iter().map(|v| ("Forwarded", *v)).collect();
        decide(peer, &fields, AddrField::Forwarded, list)
    }

    fn from(ip_: &str, port: Option<u16>, via: Via) -> ClientAddr {
        ClientAddr { ip: ip(ip_), port, via }
    }

    #[test]
    fn networks_parse_from_strings() {
        let cases: &[(&str, &str, u8)] = &[
            ("10.0.0.0/8", "10.0.0.0", 8),
            ("192.168.1.7", "192.168.1.7", 32),
            ("::1", "::1", 128),
            ("fd00::/8", "fd00::", 8),
            ("0.0.0.0/0", "0.0.0.0", 0),
            ("::/0", "::", 0),
            ("2001:db8::/32", "2001:db8::", 32),
            ("::ffff:10.0.0.0/104", "10.0.0.0", 8),
            ("::ffff:192.0.2.1", "192.0.2.1", 32),
        ];
        for (s, addr, prefix_len) in cases {
            let net: Network = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!((net.addr(), net.prefix_len()), (ip(addr), *prefix_len), "{s}");
        }
        assert_eq!("10.0.0.0/8".parse::<Network>().unwrap().to_string(), "10.0.0.0/8");
    }

    #[test]
    fn malformed_networks_are_refused_with_their_reason() {
        let cases: &[(&str, NetworkError)] = &[
            ("", NetworkError::Address),
            ("10.0.0", NetworkError::Address),
            ("localhost", NetworkError::Address),
            ("10.0.0.0/", NetworkError::PrefixLength),
            ("10.0.0.0/33", NetworkError::PrefixLength),
            ("10.0.0.0/+8", NetworkError::PrefixLength),
            ("10.0.0.0/08", NetworkError::PrefixLength),
            ("10.0.0.0/8/8", NetworkError::PrefixLength),
            ("10.0.0.0/-1", NetworkError::PrefixLength),
            ("::/129", NetworkError::PrefixLength),
            ("::/1000", NetworkError::PrefixLength),
            ("10.0.0.1/8", NetworkError::HostBits),
            ("fd00::1/8", NetworkError::HostBits),
            ("[::1]", NetworkError::Address),
            ("10.0.0.0 /8", NetworkError::Address),
        ];
        for (s, want) in cases {
            assert_eq!(s.parse::<Network>(), Err(*want), "{s}");
        }
        let err = "10.0.0.0/8, 10.0.0.1/8".parse::<TrustedProxies>().unwrap_err();
        assert_eq!(err.entry, "10.0.0.1/8");
        assert_eq!(
            err.to_string(),
            "trusted proxy `10.0.0.1/8`: address has bits set beyond the prefix length"
        );
    }

    #[test]
    fn lists_parse_and_contain_their_networks() {
        let list = trusted("10.0.0.0/8, 192.168.1.7 ::1\tfd00::/8,,");
        assert_eq!(list.networks().len(), 4);
        for inside in [
            "10.0.0.1",
            "10.255.255.255",
            "192.168.1.7",
            "::1",
            "fd12:3456::1",
            "::ffff:10.1.2.3",
        ] {
            assert!(list.contains(ip(inside)), "{inside}");
        }
        for outside in [
            "11.0.0.1",
            "192.168.1.8",
            "::2",
            "fe00::1",
            "::ffff:11.0.0.1",
            "::a00:1",
        ] {
            assert!(!list.contains(ip(outside)), "{outside}");
        }
        assert!(TrustedProxies::default().is_empty());
        assert!("".parse::<TrustedProxies>().unwrap().is_empty());
        assert!(!TrustedProxies::new().contains(ip("127.0.0.1")));
        // A mapped network matches IPv4 addresses and mapped ones alike.
        let mapped = trusted("::ffff:10.0.0.0/104");
        assert!(mapped.contains(ip("10.1.1.1")) && mapped.contains(ip("::ffff:10.1.1.1")));
        // Every address, in its family.
        let all = trusted("0.0.0.0/0");
        assert!(all.contains(ip("1.2.3.4")) && all.contains(ip("::ffff:1.2.3.4")) && !all.contains(ip("::1")));
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_says() {
        let fields = [("X-Forwarded-For", "1.2.3.4"), ("Forwarded", "for=1.2.3.4")];
        let want = from("203.0.113.9", Some(5000), Via::Peer);
        for field in [AddrField::XForwardedFor, AddrField::Forwarded] {
            assert_eq!(decide("203.0.113.9:5000", &fields, field, "10.0.0.0/8"), want);
            assert_eq!(decide("203.0.113.9:5000", &fields, field, ""), want);
            let proxied = client_addr(
                sock("203.0.113.9:5000"),
                Some(sock("1.2.3.4:1234")),
                fields.iter().map(|(n, v)| (*n, v.as_bytes())),
                field,
                &trusted("10.0.0.0/8"),
            );
            assert_eq!(proxied, want);
        }
    }

    #[test]
    fn a_trusted_peer_without_a_field_is_the_client() {
        assert_eq!(
            xff("10.0.0.2:80", &[], "10.0.0.0/8"),
            from("10.0.0.2", Some(80), Via::Peer)
        );
        let other = decide(
            "10.0.0.2:80",
            &[("Via", "1.1 a")],
            AddrField::XForwardedFor,
            "10.0.0.0/8",
        );
        assert_eq!(other, from("10.0.0.2", Some(80), Via::Peer));
    }

    #[test]
    fn the_right_most_untrusted_address_is_the_client() {
        let want = from("1.2.3.4", None, Via::XForwardedFor);
        assert_eq!(xff("10.0.0.1:80", &["1.2.3.4, 10.0.0.2"], "10.0.0.0/8"), want);
        assert_eq!(xff("10.0.0.1:80", &["1.2.3.4"], "10.0.0.0/8"), want);
        // A client's own entries stay to the left, unread.
        assert_eq!(xff("10.0.0.1:80", &["6.6.6.6, 1.2.3.4"], "10.0.0.0/8"), want);
        assert_eq!(
            xff("10.0.0.1:80", &["10.0.0.9, 6.6.6.6, 1.2.3.4, 10.0.0.3"], "10.0.0.0/8"),
            want
        );
        // Names are compared without case; other fields are not read.
        let fields = [
            ("x-forwarded-for", "9.9.9.9"),
            ("X-Real-IP", "6.6.6.6"),
            ("Forwarded", "for=6.6.6.6"),
        ];
        assert_eq!(
            decide("10.0.0.1:80", &fields, AddrField::XForwardedFor, "10.0.0.0/8"),
            from("9.9.9.9", None, Via::XForwardedFor)
        );
    }

    #[test]
    fn an_all_trusted_chain_gives_its_left_most_address() {
        assert_eq!(
            xff("10.0.0.1:80", &["10.0.0.5, 10.0.0.4, 10.0.0.3"], "10.0.0.0/8"),
            from("10.0.0.5", None, Via::XForwardedFor)
        );
    }

    #[test]
    fn several_field_lines_are_one_list_in_order() {
        let want = from("1.2.3.4", None, Via::XForwardedFor);
        assert_eq!(
            xff("10.0.0.1:80", &["6.6.6.6", "1.2.3.4", "10.0.0.2"], "10.0.0.0/8"),
            want
        );
        assert_eq!(
            xff("10.0.0.1:80", &["6.6.6.6, 1.2.3.4", "10.0.0.3, 10.0.0.2"], "10.0.0.0/8"),
            want
        );
        assert_eq!(
            xff("10.0.0.1:80", &["1.2.3.4", ""], "10.0.0.0/8"),
            want,
            "an empty line is an empty list"
        );
        assert_eq!(
            xff("10.0.0.1:80", &["10.0.0.9", "10.0.0.8"], "10.0.0.0/8"),
            from("10.0.0.9", None, Via::XForwardedFor)
        );
        // More lines than kept: walked over the last LINES_MAX.
        let mut lines = vec!["6.6.6.6"];
        lines.extend(std::iter::repeat_n("10.0.0.7", LINES_MAX));
        assert_eq!(
            xff("10.0.0.1:80", &lines, "10.0.0.0/8"),
            from("10.0.0.7", None, Via::XForwardedFor)
        );
    }

    #[test]
    fn ipv6_and_ipv4_mapped_addresses() {
        assert_eq!(
            xff(
                "[2001:db8::10]:443",
                &["2001:db8:cafe::17, 2001:db8::11"],
                "2001:db8::/112"
            ),
            from("2001:db8:cafe::17", None, Via::XForwardedFor)
        );
        // A dual-stack socket's IPv4 peer is trusted by its IPv4 network,
        // and so is a mapped element.
        assert_eq!(
            xff("[::ffff:10.0.0.1]:80", &["1.2.3.4, ::ffff:10.0.0.2"], "10.0.0.0/8"),
            from("1.2.3.4", None, Via::XForwardedFor)
        );
        assert_eq!(
            xff("[::ffff:10.0.0.1]:80", &["::ffff:1.2.3.4"], "10.0.0.0/8"),
            from("::ffff:1.2.3.4", None, Via::XForwardedFor)
        );
        assert_eq!(
            xff("[::1]:80", &["1.2.3.4"], "::1"),
            from("1.2.3.4", None, Via::XForwardedFor)
        );
    }

    #[test]
    fn x_forwarded_for_elements_may_carry_a_port() {
        let list = "10.0.0.0/8";
        let cases: &[(&str, &str, Option<u16>)] = &[
            ("1.2.3.4:4711", "1.2.3.4", Some(4711)),
            ("[2001:db8::1]:4711", "2001:db8::1", Some(4711)),
            ("[2001:db8::1]", "2001:db8::1", None),
            (" 1.2.3.4 ", "1.2.3.4", None),
            ("\t1.2.3.4:0", "1.2.3.4", Some(0)),
        ];
        for (value, want, port) in cases {
            assert_eq!(
                xff("10.0.0.1:80", &[value], list),
                from(want, *port, Via::XForwardedFor),
                "{value}"
            );
        }
    }

    #[test]
    fn garbage_stops_the_walk_at_the_last_good_address() {
        let list = "10.0.0.0/8";
        // The right-most element is garbage: the peer.
        let peer = from("10.0.0.1", Some(80), Via::Peer);
        for value in [
            "garbage",
            "unknown",
            "1.2.3.4:65536",
            "1.2.3.4:",
            "1.2.3.4:+80",
            "1.2.3.04",
            "fe80::1%eth0",
            "[::1",
            "[::1]:",
            "[1.2.3.4]",
            "2001:db8::1:80:x",
            "1.2.3.4 5.6.7.8",
            "1.2.3.4;",
            "\u{e9}",
            "1.2.3.4\u{b}",
        ] {
            assert_eq!(xff("10.0.0.1:80", &[value], list), peer, "{value:?}");
        }
        // Past a trusted address: that address.
        assert_eq!(
            xff("10.0.0.1:80", &["1.2.3.4, garbage, 10.0.0.2"], list),
            from("10.0.0.2", None, Via::XForwardedFor)
        );
        // Empty elements are skipped.
        assert_eq!(
            xff("10.0.0.1:80", &["1.2.3.4, , ,10.0.0.2,"], list),
            from("1.2.3.4", None, Via::XForwardedFor)
        );
    }

    #[test]
    fn the_walk_is_bounded() {
        let list = "10.0.0.0/8";
        // Ten thousand trusted addresses: the walk stops after HOPS_MAX,
        // at the last it read.
        let mut chain: Vec<String> = (0..10_000).map(|i| format!("10.0.{}.{}", i / 250, i % 250)).collect();
        chain.insert(0, "6.6.6.6".to_owned());
        let line = chain.join(", ");
        let got = xff("10.0.0.1:80", &[&line], list);
        assert_eq!(got, from(&chain[chain.len() - HOPS_MAX], None, Via::XForwardedFor));
        // The HOPS_MAX-th element from the right is read, the next is not.
        let tail = &chain[chain.len() - HOPS_MAX..];
        let line = format!("6.6.6.6, {}", tail[1..].join(","));
        assert_eq!(
            xff("10.0.0.1:80", &[&line], list),
            from("6.6.6.6", None, Via::XForwardedFor)
        );
        let line = format!("6.6.6.6, {}", tail.join(","));
        assert_eq!(
            xff("10.0.0.1:80", &[&line], list),
            from(&tail[0], None, Via::XForwardedFor)
        );
        // Empty elements count.
        let line = format!("1.2.3.4{}", ",".repeat(HOPS_MAX));
        assert_eq!(
            xff("10.0.0.1:80", &[&line], list),
            from("10.0.0.1", Some(80), Via::Peer)
        );
        let line = format!("1.2.3.4{}", ",".repeat(HOPS_MAX - 1));
        assert_eq!(
            xff("10.0.0.1:80", &[&line], list),
            from("1.2.3.4", None, Via::XForwardedFor)
        );
    }

    #[test]
    fn forwarded_names_the_client_in_for() {
        let list = "10.0.0.0/8";
        let cases: &[(&[&str], &str, Option<u16>)] = &[
            (&["for=192.0.2.60;proto=http;by=203.0.113.43"], "192.0.2.60", None),
            (&["for=\"[2001:db8:cafe::17]:4711\""], "2001:db8:cafe::17", Some(4711)),
            (&["for=\"[2001:db8:cafe::17]\""], "2001:db8:cafe::17", None),
            (&["for=\"192.0.2.43:47011\""], "192.0.2.43", Some(47011)),
            (&["for=\"192.0.2.43:_abc\""], "192.0.2.43", None),
            (&["For=192.0.2.43"], "192.0.2.43", None),
            (&["FOR=\"192.0.2.43\""], "192.0.2.43", None),
            (&["proto=https;for=192.0.2.43;host=\"a;b=c\""], "192.0.2.43", None),
            (&[";for=192.0.2.43;;"], "192.0.2.43", None),
            (&["for=6.6.6.6, for=192.0.2.43, for=10.0.0.2"], "192.0.2.43", None),
            (
                &["for=6.6.6.6", "for=192.0.2.43", "for=10.0.0.2;by=10.0.0.1"],
                "192.0.2.43",
                None,
            ),
            (&["for=10.0.0.3, for=10.0.0.2"], "10.0.0.3", None),
        ];
        for (values, want, port) in cases {
            assert_eq!(
                fwd("10.0.0.1:80", values, list),
                from(want, *port, Via::Forwarded),
                "{values:?}"
            );
        }
    }

    #[test]
    fn forwarded_stops_at_unknown_hidden_or_malformed_nodes() {
        let list = "10.0.0.0/8";
        let peer = from("10.0.0.1", Some(80), Via::Peer);
        for value in [
            "for=unknown",
            "for=_hidden",
            "for=\"_hidden:_port\"",
            "for=\"unknown:80\"",
            "proto=https",
            "by=10.0.0.1",
            "for=1.2.3.4;for=5.6.7.8",
            "for=[2001:db8::1]",
            "for=2001:db8::1",
            "for=\"2001:db8::1\"",
            "for=1.2.3.4:80",
            "for=\"1.2.3.4:\"",
            "for=\"1.2.3.4:_\"",
            "for=\"1.2.3.4:_a/b\"",
            "for=\"1.2.3.4:65536\"",
            "for=\"1.2.3.4",
            "for=\"1.2.3.\\4\"",
            "for=\"[::1]x\"",
            "for = 1.2.3.4",
            "for=1.2.3.4 ;proto=http",
            "for=",
            "=1.2.3.4",
            "for=1.2.3.4;bad",
            "for=1.2.3.4\"",
            "for=\"1.2.3.4\"x",
            "for=\"1.2.3.4\u{1}\"",
            "for=x.example",
        ] {
            assert_eq!(fwd("10.0.0.1:80", &[value], list), peer, "{value:?}");
        }
        // Past trusted proxies: the last one read.
        assert_eq!(
            fwd("10.0.0.1:80", &["for=1.2.3.4, for=_hidden, for=10.0.0.2"], list),
            from("10.0.0.2", None, Via::Forwarded)
        );
        assert_eq!(
            fwd(
                "10.0.0.1:80",
                &["for=1.2.3.4, for=unknown;proto=http, for=\"10.0.0.2:1\""],
                list
            ),
            from("10.0.0.2", Some(1), Via::Forwarded)
        );
        // A quoted comma splits the element: both halves are malformed.
        assert_eq!(
            fwd("10.0.0.1:80", &["for=1.2.3.4;x=\"a, for=6.6.6.6\", for=10.0.0.2"], list),
            from("10.0.0.2", None, Via::Forwarded)
        );
    }

    #[test]
    fn the_proxy_header_source_is_the_hop_after_the_peer() {
        let fields = [("X-Forwarded-For", "6.6.6.6, 1.2.3.4")];
        let call = |peer: &str, source: Option<&str>, list: &str| {
            client_addr(
                sock(peer),
                source.map(sock),
                fields.iter().map(|(n, v)| (*n, v.as_bytes())),
                AddrField::XForwardedFor,
                &trusted(list),
            )
        };
        // The usual case: the source is the client; the field, written
        // by the client itself behind a layer 4 proxy, is not read.
        assert_eq!(
            call("10.0.0.1:80", Some("198.51.100.7:5555"), "10.0.0.0/8"),
            from("198.51.100.7", Some(5555), Via::ProxyProtocol)
        );
        // A trusted source (a CDN before a layer 4 balancer): the walk
        // goes on into the field.
        assert_eq!(
            call("10.0.0.1:80", Some("198.51.100.7:5555"), "10.0.0.0/8, 198.51.100.0/24"),
            from("1.2.3.4", None, Via::XForwardedFor)
        );
        // A header without an address (LOCAL, UNKNOWN): the peer is the next hop.
        assert_eq!(
            call("10.0.0.1:80", None, "10.0.0.0/8"),
            from("1.2.3.4", None, Via::XForwardedFor)
        );
        // An untrusted peer's header is never believed.
        assert_eq!(
            call("203.0.113.1:80", Some("198.51.100.7:5555"), "10.0.0.0/8"),
            from("203.0.113.1", Some(80), Via::Peer)
        );
    }

    #[test]
    fn quoted_strings_end_at_their_closing_quote() {
        assert_eq!(quoted_string(b"\"abc\";x"), Some((&b"abc"[..], &b";x"[..])));
        assert_eq!(quoted_string(b"\"a\\\"b\""), Some((&b"a\\\"b"[..], &b""[..])));
        assert_eq!(quoted_string(b"\"a\\\\\"b"), Some((&b"a\\\\"[..], &b"b"[..])));
        assert_eq!(quoted_string(b"\"abc"), None);
        assert_eq!(quoted_string(b"\"a\\"), None);
        assert_eq!(quoted_string(b"\"a\x7f\""), None);
    }
}
