//! Host names in one normal form, for the Host field, HTTP/2's and
//! HTTP/3's `:authority` and TLS's SNI alike, so that the choice of site,
//! the choice of certificate, the coalescing check and the proxy's Host
//! never disagree about which name a request is for: `Example.COM.` is
//! `example.com`, and cannot fall through to another site and skip its
//! rules (issue 24).
//!
//! The normal form ([`normalize`]):
//! - the port is removed: `Host = uri-host [ ":" port ]` (RFC 9110 §7.2);
//!   an empty port is no port ("URI producers and normalizers should omit
//!   the port component and its ':' delimiter if port is empty", RFC 3986
//!   §3.2.3); a port is digits, at most 65535;
//! - ASCII letters are lowercased ("The host subcomponent is
//!   case-insensitive", RFC 3986 §3.2.2);
//! - Unicode labels become A-labels by UTS 46, nontransitional, as
//!   browsers and the `url` crate do it (the `idna` crate): `bücher` is
//!   `xn--bcher-kva` and `faß` keeps its ß (`xn--fa-hia`); an `xn--`
//!   label, in any case, must decode to a valid U-label;
//! - one trailing dot, the root's, is removed: `example.com.` is
//!   `example.com`, `example.com..` is refused;
//! - an IPv6 literal keeps its brackets, its address written as
//!   [`Ipv6Addr`] writes it (`[0:0::1]` is `[::1]`); an IPv4 address is
//!   its dotted quad.
//!
//! Refused, by the rules rustls applies to a client's SNI before we see
//! it (`pki-types`'s `DnsName`), so that every name a certificate can be
//! chosen for is a name a site can be chosen for: an empty name or label;
//! a label over 63 bytes or a name over 253 (RFC 1035 §2.3.4: 255 bytes on
//! the wire, less a length byte and the root); a label that starts or ends
//! with `-` (RFC 952, RFC 1123 §2.1); a byte other than letters, digits,
//! `-`, `_` and the dots; and a last label that is a number (digits, or
//! `0x` and hex digits) unless the whole is a dotted-quad IPv4 address.
//! `*.example.com` is no host: wildcards are patterns of a [`HostMap`].
//!
//! Two choices:
//! - **`_` is a name byte.** RFC 1123's host names have none, but DNS
//!   names may (RFC 2181 §11), nginx and Caddy accept it in Host, and
//!   rustls and webpki accept it in SNI and in certificates: refusing it
//!   would refuse names that clients reach. No mapping makes or removes
//!   it, so it gives no second spelling of a name.
//! - **`127.1`, `0x7f.0.0.1` and `2130706433` are refused**, neither
//!   addresses nor names. `inet_aton` and the WHATWG URL parser read them
//!   as 127.0.0.1; as names they would choose another site than that
//!   address's, and a proxy passing one on would let its upstream read it
//!   as the address. No real name ends in a number (no top-level domain
//!   is numeric, RFC 3696 §2), so refusing costs nothing: it is WHATWG's
//!   "ends in a number" rule and pki-types's, without WHATWG's reading of
//!   the short forms.
//!
//! Percent-encoded bytes (`%41`) are refused too: no client sends them in
//! a host, and decoding them would be one more spelling.
//!
//! A name that is ASCII with no `xn--` label, nearly every one, is
//! lowercased as it is copied into a [`HostBuf`] and checked there, without
//! idna and without allocating ([`normalize_in`]); the others go through
//! idna's UTS 46 processing into the same buffer (which allocates only past
//! 253 characters or 8 labels, idna's inline buffers).

mod map;

pub use map::{HostMap, HostMapError};

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::net::{Ipv4Addr, Ipv6Addr};

use idna::uts46::{AsciiDenyList, ErrorPolicy, Hyphens, ProcessingError, ProcessingSuccess, Uts46};

/// Longest name, in bytes, without the root's dot (RFC 1035 §2.3.4).
pub const NAME_BYTES_MAX: usize = 253;

/// Longest label, in bytes (RFC 1035 §2.3.4).
pub const LABEL_BYTES_MAX: usize = 63;

/// Longest name handed to idna, in bytes. Every character of a name that
/// fits in 254 bytes as A-labels (with the root's dot) takes at least a
/// byte there and at most 4 in UTF-8, so longer input is a name too long,
/// or one padded with characters UTS 46 ignores (U+00AD), whose
/// processing we need not pay for.
const UNICODE_NAME_BYTES_MAX: usize = 4 * (NAME_BYTES_MAX + 1);

/// ASCII that UTS 46 must refuse before it maps anything: everything but
/// letters, digits, `-`, `.` (idna allows neither in the list) and `_`.
const ASCII_DENIED: AsciiDenyList = AsciiDenyList::new(true, "!\"#$%&'()*+,/:;<=>?@[\\]^`{|}~");

/// A host name in normal form (see the module's documentation), compared
/// and hashed as the string it is. Owned from [`normalize`]; borrowed from
/// a [`HostBuf`] by [`normalize_in`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostName<'a>(Cow<'a, str>);

impl HostName<'_> {
    /// The name: `example.com`, `xn--bcher-kva.example`, `127.0.0.1`,
    /// `[::1]`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether it is an IP address (`127.0.0.1`, `[::1]`), not a DNS name.
    pub fn is_ip(&self) -> bool {
        // A name in normal form ends in a number only if it is an IPv4
        // address.
        let s = self.0.as_bytes();
        s.first() == Some(&b'[') || s.rsplit(|&b| b == b'.').next().is_some_and(is_number)
    }

    /// A name already in normal form (an SNI the handshake normalised),
    /// taken as it is.
    pub(crate) fn from_normal(name: &str) -> HostName<'_> {
        HostName(Cow::Borrowed(name))
    }

    /// The name, owned (to keep past its [`HostBuf`]).
    pub fn into_owned(self) -> HostName<'static> {
        HostName(Cow::Owned(self.0.into_owned()))
    }
}

impl fmt::Display for HostName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why bytes are no host (see the module's documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostError {
    /// No name: `""`, `"."`, `":80"`.
    Empty,
    /// Two dots in a row, or a dot first: `a..b`, `.a`, `a.b..`.
    EmptyLabel,
    /// A label over [`LABEL_BYTES_MAX`] bytes.
    LabelTooLong,
    /// A name over [`NAME_BYTES_MAX`] bytes (as A-labels).
    NameTooLong,
    /// A byte other than letters, digits, `-`, `_` and `.`: a space, `*`,
    /// `%`, `@`, `/`, a second `:`.
    Byte,
    /// A label that starts or ends with `-`.
    Hyphen,
    /// A last label that is a number, in a name that is no dotted-quad
    /// IPv4 address: `127.1`, `0x7f.0.0.1`, `2130706433`.
    Numeric,
    /// A Unicode label UTS 46 refuses, an `xn--` label that does not
    /// decode to a valid one, or bytes that are not UTF-8.
    Idna,
    /// Brackets that hold no IPv6 address, or text after the `]`.
    IpLiteral,
    /// A port that is not digits or is over 65535.
    InvalidPort,
    /// A port where only a name belongs (a site's name, a certificate's).
    UnwantedPort,
}

impl HostError {
    /// A short human-readable reason.
    pub fn reason(self) -> &'static str {
        match self {
            HostError::Empty => "empty host",
            HostError::EmptyLabel => "empty label in host",
            HostError::LabelTooLong => "host label over 63 bytes",
            HostError::NameTooLong => "host name over 253 bytes",
            HostError::Byte => "byte in host other than letters, digits, '-', '_' and '.'",
            HostError::Hyphen => "host label starting or ending with '-'",
            HostError::Numeric => "host ending in a number that is no IPv4 address",
            HostError::Idna => "invalid internationalized host name",
            HostError::IpLiteral => "invalid IP literal in host",
            HostError::InvalidPort => "invalid port in host",
            HostError::UnwantedPort => "port where only a host name belongs",
        }
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for HostError {}

/// Room for one name in normal form, for [`normalize_in`]: a name, and
/// the root's dot before it is removed.
pub struct HostBuf([u8; NAME_BYTES_MAX + 1]);

impl HostBuf {
    /// An empty buffer.
    pub const fn new() -> Self {
        HostBuf([0; NAME_BYTES_MAX + 1])
    }
}

impl Default for HostBuf {
    fn default() -> Self {
        HostBuf::new()
    }
}

/// The host of an authority (a Host field's value, an `:authority`, a
/// URI's authority without userinfo) in normal form; see the module's
/// documentation.
///
/// ```
/// use peregrine::host::normalize;
/// assert_eq!(normalize(b"Example.COM.:8443").unwrap().as_str(), "example.com");
/// assert_eq!(normalize("bücher.example".as_bytes()).unwrap().as_str(), "xn--bcher-kva.example");
/// assert_eq!(normalize(b"[0:0::1]:443").unwrap().as_str(), "[::1]");
/// assert!(normalize(b"*.example.com").is_err());
/// ```
pub fn normalize(authority: &[u8]) -> Result<HostName<'static>, HostError> {
    let mut buf = HostBuf::new();
    normalize_in(authority, &mut buf).map(HostName::into_owned)
}

/// [`normalize`] into `buf`, allocating nothing for an ASCII name: for a
/// lookup on every request or handshake.
pub fn normalize_in<'b>(authority: &[u8], buf: &'b mut HostBuf) -> Result<HostName<'b>, HostError> {
    parse(authority, buf).map(|(name, _)| name)
}

/// [`normalize_in`] for a name that has no port: a site's name, a
/// certificate's, an SNI.
pub(crate) fn normalize_name<'b>(name: &[u8], buf: &'b mut HostBuf) -> Result<HostName<'b>, HostError> {
    match parse(name, buf)? {
        (name, false) => Ok(name),
        (_, true) => Err(HostError::UnwantedPort),
    }
}

/// The host in normal form, and whether a port (even empty) was there.
fn parse<'b>(authority: &[u8], buf: &'b mut HostBuf) -> Result<(HostName<'b>, bool), HostError> {
    let (host, port) = split_port(authority)?;
    let name = match host.first() {
        Some(b'[') => ip_literal(host, buf)?,
        _ => name(host, buf)?,
    };
    Ok((HostName(Cow::Borrowed(name)), port.is_some()))
}

/// The host and the port of an authority, the port checked: `port =
/// *DIGIT` (RFC 3986 §3.2.3), at most 65535.
fn split_port(authority: &[u8]) -> Result<(&[u8], Option<&[u8]>), HostError> {
    let colon = match authority.first() {
        // An IP literal's colons are inside its brackets; a port comes
        // right after the `]`.
        Some(b'[') => {
            let end = authority.iter().position(|&b| b == b']').ok_or(HostError::IpLiteral)? + 1;
            match authority.get(end) {
                None => return Ok((authority, None)),
                Some(b':') => end,
                Some(_) => return Err(HostError::IpLiteral),
            }
        }
        _ => match authority.iter().rposition(|&b| b == b':') {
            Some(colon) => colon,
            None => return Ok((authority, None)),
        },
    };
    let port = &authority[colon + 1..];
    let valid = port.len() <= 5
        && port.iter().all(u8::is_ascii_digit)
        && port.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0')) <= 65535;
    if !valid {
        return Err(HostError::InvalidPort);
    }
    Ok((&authority[..colon], Some(port)))
}

/// `[` IPv6 address `]`, written as `Ipv6Addr` writes it. RFC 3986's
/// IPvFuture (`[v1.x]`) and RFC 6874's zone IDs (`%25eth0`) are refused:
/// neither names a server of ours.
fn ip_literal<'b>(literal: &[u8], buf: &'b mut HostBuf) -> Result<&'b str, HostError> {
    let addr: Ipv6Addr = literal
        .strip_prefix(b"[")
        .and_then(|l| l.strip_suffix(b"]"))
        .and_then(|inside| std::str::from_utf8(inside).ok())
        .and_then(|inside| inside.parse().ok())
        .ok_or(HostError::IpLiteral)?;
    let mut sink = Sink {
        buf: &mut buf.0,
        len: 0,
        overflow: false,
    };
    // At most 47 bytes (`[ffff:…:255.255.255.255]`): it fits.
    write!(sink, "[{addr}]").map_err(|_| HostError::IpLiteral)?;
    if sink.overflow {
        return Err(HostError::IpLiteral);
    }
    ascii(sink.into_bytes())
}

/// A DNS name or an IPv4 address in normal form.
fn name<'b>(name: &[u8], buf: &'b mut HostBuf) -> Result<&'b str, HostError> {
    let len = if name.is_ascii() && !has_ace_label(name) {
        // Nearly every name: lowercase it as it is copied, no idna.
        let out = buf.0.get_mut(..name.len()).ok_or(HostError::NameTooLong)?;
        for (o, b) in out.iter_mut().zip(name) {
            *o = b.to_ascii_lowercase();
        }
        name.len()
    } else {
        to_ascii(name, &mut buf.0)?
    };
    let buf: &'b HostBuf = buf;
    let out = &buf.0[..len];
    let out = out.strip_suffix(b".").unwrap_or(out);
    check(out)?;
    ascii(out)
}

/// Whether a label of `name` starts with `xn--` (in any case): an A-label,
/// which idna must check.
fn has_ace_label(name: &[u8]) -> bool {
    name.split(|&b| b == b'.')
        .any(|label| label.get(..4).is_some_and(|p| p.eq_ignore_ascii_case(b"xn--")))
}

/// UTS 46's ToASCII of `name` into `out`, nontransitional (the only
/// processing idna 1 offers): the output's length. Lengths and the
/// alphabet are checked after, by `check`.
fn to_ascii(name: &[u8], out: &mut [u8; NAME_BYTES_MAX + 1]) -> Result<usize, HostError> {
    if name.len() > UNICODE_NAME_BYTES_MAX {
        return Err(HostError::NameTooLong);
    }
    let mut sink = Sink {
        buf: out,
        len: 0,
        overflow: false,
    };
    let done = Uts46::new().process(
        name,
        ASCII_DENIED,
        Hyphens::CheckFirstLast,
        ErrorPolicy::FailFast,
        |_, _, _| false, // every label as ASCII: ToASCII
        &mut sink,
        None,
    );
    let (written, overflow) = (sink.len, sink.overflow);
    match done {
        Ok(ProcessingSuccess::WroteToSink) if overflow => Err(HostError::NameTooLong),
        Ok(ProcessingSuccess::WroteToSink) => Ok(written),
        // Already in normal form: the input is the output.
        Ok(ProcessingSuccess::Passthrough) => {
            out.get_mut(..name.len())
                .ok_or(HostError::NameTooLong)?
                .copy_from_slice(name);
            Ok(name.len())
        }
        Err(ProcessingError::SinkError) => Err(HostError::NameTooLong),
        Err(ProcessingError::ValidityError) => Err(HostError::Idna),
    }
}

/// The rules of the module's documentation, on a lowercase ASCII name
/// without its root's dot.
fn check(name: &[u8]) -> Result<(), HostError> {
    if name.is_empty() {
        return Err(HostError::Empty);
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(HostError::NameTooLong);
    }
    let mut last: &[u8] = &[];
    for label in name.split(|&b| b == b'.') {
        let (Some(&first), Some(&end)) = (label.first(), label.last()) else {
            return Err(HostError::EmptyLabel);
        };
        if label.len() > LABEL_BYTES_MAX {
            return Err(HostError::LabelTooLong);
        }
        if !label
            .iter()
            .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(HostError::Byte);
        }
        if first == b'-' || end == b'-' {
            return Err(HostError::Hyphen);
        }
        last = label;
    }
    if is_number(last) && ascii(name)?.parse::<Ipv4Addr>().is_err() {
        return Err(HostError::Numeric);
    }
    Ok(())
}

/// A label that an address parser would read as a number: digits, or
/// `0x` and hex digits (lowercase: the name is).
fn is_number(label: &[u8]) -> bool {
    match label {
        [b'0', b'x', hex @ ..] => hex.iter().all(u8::is_ascii_hexdigit),
        _ => label.iter().all(u8::is_ascii_digit),
    }
}

fn ascii(bytes: &[u8]) -> Result<&str, HostError> {
    std::str::from_utf8(bytes).map_err(|_| HostError::Byte)
}

/// Text written into a fixed buffer; full is an error (a name too long).
struct Sink<'b> {
    buf: &'b mut [u8],
    len: usize,
    /// More was written than `buf` holds: the name is too long. The
    /// sink never fails a write: idna 1.1 panics (`unreachable!`) when a
    /// sink fails in the middle of a Punycode label (found by the
    /// `host_name` fuzz target), so the overflow is noted and refused
    /// after the call instead.
    overflow: bool,
}

impl<'b> Sink<'b> {
    fn into_bytes(self) -> &'b [u8] {
        let buf: &'b [u8] = self.buf;
        &buf[..self.len]
    }
}

impl fmt::Write for Sink<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        match self.buf.get_mut(self.len..end) {
            Some(room) if !self.overflow => {
                room.copy_from_slice(s.as_bytes());
                self.len = end;
            }
            _ => self.overflow = true,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normal(authority: &str) -> Result<String, HostError> {
        let owned = normalize(authority.as_bytes()).map(|n| n.as_str().to_owned());
        let mut buf = HostBuf::new();
        let borrowed = normalize_in(authority.as_bytes(), &mut buf).map(|n| n.as_str().to_owned());
        assert_eq!(owned, borrowed, "{authority:?}");
        owned
    }

    #[test]
    fn spellings_of_a_name_have_one_normal_form() {
        let label63 = "a".repeat(63);
        let name253 = [&*label63, &label63, &label63, &"b".repeat(61)].join(".");
        let cases: &[(&str, &str)] = &[
            ("example.com", "example.com"),
            ("Example.COM.", "example.com"),
            ("EXAMPLE.com:8443", "example.com"),
            ("example.com.:80", "example.com"),
            ("example.com:", "example.com"),
            ("example.com:0", "example.com"),
            ("example.com:65535", "example.com"),
            ("localhost", "localhost"),
            ("a", "a"),
            // Unicode to A-labels (UTS 46, nontransitional: ß stays).
            ("bücher.example", "xn--bcher-kva.example"),
            ("BÜCHER.Example.:443", "xn--bcher-kva.example"),
            ("XN--BCHER-KVA.example", "xn--bcher-kva.example"),
            ("xn--bcher-kva.example.", "xn--bcher-kva.example"),
            ("faß.de", "xn--fa-hia.de"),
            ("ｅｘａｍｐｌｅ．ｃｏｍ", "example.com"),
            ("example。com", "example.com"),
            ("日本語.jp", "xn--wgv71a119e.jp"),
            // `_`, digits first, hyphens inside.
            ("under_score.example", "under_score.example"),
            ("_dmarc.Example.com", "_dmarc.example.com"),
            ("1password.com", "1password.com"),
            ("123.example", "123.example"),
            ("a-b--c.example", "a-b--c.example"),
            ("0x.example", "0x.example"),
            ("example.c0m", "example.c0m"),
            // Addresses.
            ("127.0.0.1", "127.0.0.1"),
            ("127.0.0.1:80", "127.0.0.1"),
            ("127.0.0.1.", "127.0.0.1"),
            ("１２７.０.０.１", "127.0.0.1"),
            ("[::1]", "[::1]"),
            ("[::1]:443", "[::1]"),
            ("[0:0::1]", "[::1]"),
            ("[0000:0000:0000:0000:0000:0000:0000:0001]:8443", "[::1]"),
            ("[2001:DB8::A]", "[2001:db8::a]"),
            ("[::FFFF:127.0.0.1]", "[::ffff:127.0.0.1]"),
            // The limits themselves.
            (&label63, &label63),
            (&name253, &name253),
        ];
        for (authority, want) in cases {
            assert_eq!(normal(authority).as_deref(), Ok(*want), "{authority:?}");
        }
        let with_dot = format!("{}.", name253.to_uppercase());
        assert_eq!(normal(&with_dot).as_deref(), Ok(&*name253));
    }

    #[test]
    fn what_is_no_host_is_refused_with_its_reason() {
        use HostError::*;
        let label64 = "a".repeat(64);
        let name254 = ["a".repeat(63), "a".repeat(63), "a".repeat(63), "b".repeat(62)].join(".");
        let long_unicode = "ü".repeat(600);
        let cases: &[(&str, HostError)] = &[
            ("", Empty),
            (".", Empty),
            (":80", Empty),
            ("a..b", EmptyLabel),
            (".example.com", EmptyLabel),
            ("example.com..", EmptyLabel),
            ("example.com..:80", EmptyLabel),
            (&label64, LabelTooLong),
            (&name254, NameTooLong),
            (&long_unicode, NameTooLong),
            ("exa mple.com", Byte),
            ("*.example.com", Byte),
            ("f*.example.com", Byte),
            ("example.com/", Byte),
            ("user@example.com", Byte),
            ("ex%41mple.com", Byte),
            ("a:b:80", Byte),
            ("::1", Byte),
            ("-example.com", Hyphen),
            ("example-.com", Hyphen),
            ("a.-b.com", Hyphen),
            ("-", Hyphen),
            ("-bücher.example", Idna),
            ("example.com:https", InvalidPort),
            ("example.com:65536", InvalidPort),
            ("example.com:080800", InvalidPort),
            ("example.com:-1", InvalidPort),
            ("example.com: 80", InvalidPort),
            ("[::1]:x", InvalidPort),
            ("127.1", Numeric),
            ("0x7f.1", Numeric),
            ("0x7f.0.0.1", Numeric),
            ("0X7F.0.0.1", Numeric),
            ("2130706433", Numeric),
            ("017700000001", Numeric),
            ("127.0.0.01", Numeric),
            ("256.0.0.1", Numeric),
            ("1.2.3.4.5", Numeric),
            ("example.123", Numeric),
            ("example.0x1f", Numeric),
            ("example.0x", Numeric),
            ("[::1", IpLiteral),
            ("[::1]x", IpLiteral),
            ("[::1].", IpLiteral),
            ("[]", IpLiteral),
            ("[127.0.0.1]", IpLiteral),
            ("[fe80::1%25eth0]", IpLiteral),
            ("[v1.x]", IpLiteral),
            ("xn--.example", Idna),
            ("xn--bcher-kva-.example", Idna),
            ("xn--abc.example", Idna),
            ("a\u{200d}b.example", Idna),
        ];
        for (authority, want) in cases {
            assert_eq!(normal(authority), Err(*want), "{authority:?}");
        }
        assert_eq!(normalize(b"\xff.example"), Err(Idna), "not UTF-8");
        assert_eq!(normalize(b"ex\x00ample"), Err(Byte));
    }

    #[test]
    fn only_names_refuse_a_port() {
        let mut buf = HostBuf::new();
        assert_eq!(
            normalize_name(b"Example.com.", &mut buf).map(|n| n.as_str().to_owned()),
            Ok("example.com".to_owned())
        );
        assert_eq!(
            normalize_name(b"example.com:443", &mut buf),
            Err(HostError::UnwantedPort)
        );
        assert_eq!(normalize_name(b"example.com:", &mut buf), Err(HostError::UnwantedPort));
        assert_eq!(normalize_name(b"[::1]:443", &mut buf), Err(HostError::UnwantedPort));
    }

    #[test]
    fn an_address_is_an_ip_and_a_name_is_not() {
        for (authority, ip) in [
            ("127.0.0.1", true),
            ("[::1]:80", true),
            ("[::ffff:1.2.3.4]", true),
            ("example.com", false),
            ("1.2.3.example", false),
            ("localhost", false),
        ] {
            assert_eq!(normalize(authority.as_bytes()).unwrap().is_ip(), ip, "{authority}");
        }
    }

    /// Many byte strings made of the pieces names are made of: none
    /// panics, and a normal form is its own normal form, within the
    /// limits, in the alphabet.
    #[test]
    fn the_normal_form_is_a_fixed_point() {
        const PIECES: &[&str] = &[
            "a",
            "Z",
            "0",
            "9",
            "-",
            "_",
            ".",
            ".",
            ":",
            "8",
            "0x",
            "ü",
            "ß",
            "Ü",
            "xn--",
            "XN--bcher-kva",
            "[",
            "]",
            "::1",
            "。",
            "．",
            " ",
            "*",
            "%",
            "127",
            "\u{200d}",
            "\u{ad}",
            "ｅ",
            "日本",
            "\u{301}",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut n_ok = 0;
        for _ in 0..20_000 {
            let len = next() % 12;
            let input: String = (0..len)
                .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
                .collect();
            let Ok(name) = normalize(input.as_bytes()) else {
                continue;
            };
            n_ok += 1;
            let s = name.as_str();
            assert_eq!(normalize(s.as_bytes()).as_ref(), Ok(&name), "{input:?}");
            assert!(s.len() <= NAME_BYTES_MAX, "{input:?}");
            assert!(
                s.bytes().all(|b| b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || b"-_.".contains(&b)
                    || (s.starts_with('[') && b"[]:".contains(&b))),
                "{input:?} → {s}"
            );
        }
        assert!(n_ok > 1_000, "only {n_ok} inputs were names");
    }

    /// A name whose Punycode overflows the output buffer in the middle of
    /// a label: idna 1.1 panics when its sink fails there, so the sink
    /// never fails and the name is refused after (found by fuzzing).
    #[test]
    fn a_name_that_overflows_in_the_middle_of_punycode_is_refused_not_a_panic() {
        let input = b"\x45\x62\x36\x2e\xca\x93\x31\x2e\x37\x2e\x35\x2e\x31\x2e\x37\x2e\x35\x2e\x36\x2e\xca\x93\x2e\x37\x2e\x35\x2e\x36\x2e\xca\x93\x5f\x45\x62\x36\x2e\xca\x93\x31\x5f\x2e\xca\x93\x2e\x37\x2e\x35\x2e\x36\x2e\xca\x93\x5f\x45\x62\x36\x2e\xca\x93\x36\x2e\xca\x93\x31\x2e\x37\x2e\x35\x2e\x31\x2e\x37\x2e\x35\x2e\x36\x2e\xca\x93\x31\x5f\x45\x62\x36\x2e\xca\x93\x31\x2e\x37\x2e\x35\x2e\x36\x2e\xca\x93\x45\x62\x36\x36\x2e\xca\x93\x2e\x37\x2e\x35\x2e\x36\x2e\xca\x93\x5f\x45\x62\x36\x2e\xca\x93\x36\x2e\xca\x93\x31\x2e\x37\x2e\x35\x2e\x31\x2e\x37\x2e\x35\x2e\x36\x2e\xca\x93\x31\x5f\x45\x62\x36\x2e\x62\x6b\x31\x2e\x37\x2e\x35\x2e\x36\x2e\xca\x93\x5f";
        assert!(normalize(input).is_err());
        assert!(normalize_in(input, &mut HostBuf::new()).is_err());
    }
}
