//! The PROXY protocol header, versions 1 and 2 (HAProxy's
//! `doc/proxy-protocol.txt`): what a TCP proxy sends before anything else
//! on a connection to say whose connection it relays. The connection's
//! first bytes in; a header and its length, "need more", or a named error
//! out.
//!
//! Strict, as the specification asks (§2.1: "Any sequence which does not
//! exactly match the protocol must be discarded and cause the receiver to
//! abort the connection. It is recommended to abort the connection as soon
//! as possible"): [`parse`] says [`Parsed::Partial`] only while the bytes
//! so far can still begin a valid header, so a client that speaks HTTP to
//! a listener that expects PROXY is refused at its first byte that differs
//! from both signatures, not after a timeout. The check of a prefix is a
//! subset of the check of a whole header (tested at every offset, and
//! fuzzed), so a valid header split anywhere is never refused early.
//!
//! What a header says is only to be believed from a trusted proxy (§2:
//! "The receiver SHOULD ensure proper access filtering so that only trusted
//! proxies are allowed to use this protocol"): that check is the caller's
//! (`client_addr::TrustedProxies::contains` on the socket's peer).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ops::Range;
use std::str::FromStr;

/// Longest PROXY header accepted, in bytes: for version 2, its 16 fixed
/// bytes and the length they announce (up to 65,535 more); longer is
/// [`ProxyError::TooLarge`]. nginx's bound (`NGX_PROXY_PROTOCOL_MAX_HEADER`)
/// is the same 4 KiB. What real senders write stays far below it: the
/// largest address block (AF_UNIX, 216 bytes) with HAProxy's TLVs at
/// their longest (an authority of 255 bytes, a unique ID of 128, the TLS
/// version, cipher, algorithms and client CN) is under 1 KiB, which leaves
/// room for the cloud load balancers' own TLVs. The header sits in the
/// connection's first read buffer (16 KiB), so the bound costs no memory;
/// it keeps a peer from making the connection wait for 64 KiB.
pub const PROXY_HEADER_BYTES_MAX: usize = 4096;

/// Longest version 1 line, CRLF included (§2.1: "If the CRLF sequence is
/// not found in the first 107 characters, the receiver should declare the
/// line invalid": `PROXY UNKNOWN` and two full IPv6 addresses and ports).
pub const V1_LINE_BYTES_MAX: usize = 107;

/// How a version 1 header starts: `PROXY` and exactly one space.
const V1_PREFIX: &[u8] = b"PROXY ";

/// How a version 2 header starts (§2.2), chosen to be refused by the
/// common protocols' parsers.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// The version 2 header's fixed part: the signature, the version and
/// command, the family and protocol, and the 16-bit length of the rest.
const V2_FIXED_BYTES: usize = 16;

/// TLV type: the protocol negotiated by ALPN (§2.2.1).
pub const TLV_ALPN: u8 = 0x01;
/// TLV type: the host name the client asked for, its TLS SNI (§2.2.2).
pub const TLV_AUTHORITY: u8 = 0x02;
/// TLV type: the CRC32C of the whole header (§2.2.3), checked by [`parse`].
pub const TLV_CRC32C: u8 = 0x03;
/// TLV type: padding, to be ignored (§2.2.4).
pub const TLV_NOOP: u8 = 0x04;
/// TLV type: an opaque ID of the connection, up to 128 bytes (§2.2.5).
pub const TLV_UNIQUE_ID: u8 = 0x05;

/// What the proxy says the connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// The proxy's own connection (a health check, version 2's LOCAL):
    /// the endpoints are the socket's.
    Local,
    /// A relayed connection (version 2's PROXY; every version 1 header):
    /// the endpoints are the header's, when it gives them.
    Proxy,
}

/// A valid PROXY header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyHeader {
    /// Whether the connection is relayed or the proxy's own.
    pub command: Command,
    /// The client's address and port: `Some` for a version 1 `TCP4` or
    /// `TCP6` line and for a version 2 PROXY of TCP over IPv4 or IPv6.
    /// `None` where the specification says to use the socket's endpoints
    /// instead: version 1 `UNKNOWN`, version 2 LOCAL (§2.2: "the receiver
    /// must accept this connection as valid and must use the real
    /// connection endpoints"), and version 2 AF_UNSPEC, AF_UNIX or
    /// datagrams (an HTTP server has no use for them: "The receiver should
    /// ignore address information").
    pub source: Option<SocketAddr>,
    /// The address the client connected to, under the same rules.
    pub destination: Option<SocketAddr>,
    /// Where the version 2 TLVs lie in the buffer given to [`parse`]
    /// (after the addresses, to the header's end; their framing checked),
    /// read with [`ProxyHeader::tlvs`]. Empty for version 1, LOCAL and
    /// AF_UNSPEC, whose address block has no defined length.
    pub tlvs: Range<usize>,
}

impl ProxyHeader {
    /// The header's TLVs as (type, value), read from `buf`, the bytes the
    /// header was parsed from. Their framing was checked by [`parse`];
    /// given other bytes, the iteration stops where they do not frame.
    pub fn tlvs<'b>(&self, buf: &'b [u8]) -> Tlvs<'b> {
        Tlvs {
            rest: buf.get(self.tlvs.clone()).unwrap_or_default(),
        }
    }
}

/// The TLVs of a version 2 header (type, value), in order.
#[derive(Clone, Debug)]
pub struct Tlvs<'b> {
    rest: &'b [u8],
}

impl<'b> Iterator for Tlvs<'b> {
    type Item = (u8, &'b [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let [kind, hi, lo, rest @ ..] = self.rest else {
            self.rest = &[];
            return None;
        };
        let len = usize::from(u16::from_be_bytes([*hi, *lo]));
        if len > rest.len() {
            self.rest = &[];
            return None;
        }
        let (value, rest) = rest.split_at(len);
        self.rest = rest;
        Some((*kind, value))
    }
}

/// The result of [`parse`] on bytes that are not (yet) an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A whole header: `len` bytes, after which the connection's own
    /// bytes begin.
    Complete {
        /// What the header says.
        header: ProxyHeader,
        /// The header's length in bytes, CRLF or TLVs included.
        len: usize,
    },
    /// The bytes so far begin a valid header; more are needed.
    Partial,
}

/// Why the bytes are not a PROXY header. Each one closes the connection
/// unanswered (§2.1: "cause the receiver to abort the connection").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyError {
    /// Neither `PROXY ` nor version 2's signature: the client did not send
    /// a PROXY header at all (plain HTTP, TLS, a port scanner).
    Missing,
    /// Version 1: no CRLF within [`V1_LINE_BYTES_MAX`] bytes.
    LineTooLong,
    /// Version 1: a CR not followed by LF, or a LF without its CR.
    LineEnding,
    /// Version 1: a protocol other than `TCP4`, `TCP6` and `UNKNOWN`.
    Protocol,
    /// Version 1: not exactly four fields after the protocol, each after
    /// exactly one space.
    Fields,
    /// Version 1: an address that is not one of the protocol's family.
    Address,
    /// Version 1: a port that is not a decimal number in 0..=65535
    /// without leading zeros.
    Port,
    /// Version 2: a version other than 2.
    Version,
    /// Version 2: a command other than LOCAL and PROXY.
    Command,
    /// Version 2, PROXY: an address family and protocol byte other than
    /// the seven the specification lists.
    Family,
    /// Version 2, PROXY: a length shorter than the family's addresses.
    AddressLength,
    /// Version 2: longer than [`PROXY_HEADER_BYTES_MAX`].
    TooLarge,
    /// Version 2: a TLV that runs past the header's end, or a CRC32C TLV
    /// that is not 4 bytes or is not the only one.
    Tlv,
    /// Version 2: the CRC32C TLV does not match the header (§2.2.3: "the
    /// receiver MUST treat the TCP connection providing the header as
    /// invalid").
    Checksum,
}

impl ProxyError {
    /// A short human-readable reason, for the error log.
    pub fn reason(self) -> &'static str {
        match self {
            ProxyError::Missing => "no PROXY protocol header",
            ProxyError::LineTooLong => "PROXY v1 line longer than 107 bytes",
            ProxyError::LineEnding => "PROXY v1 line not ended by CRLF",
            ProxyError::Protocol => "PROXY v1 protocol not TCP4, TCP6 or UNKNOWN",
            ProxyError::Fields => "PROXY v1 fields not four, separated by single spaces",
            ProxyError::Address => "PROXY v1 address invalid for its protocol",
            ProxyError::Port => "PROXY v1 port not a decimal in 0..=65535",
            ProxyError::Version => "PROXY v2 version not 2",
            ProxyError::Command => "PROXY v2 command not LOCAL or PROXY",
            ProxyError::Family => "PROXY v2 unknown address family or protocol",
            ProxyError::AddressLength => "PROXY v2 length shorter than its addresses",
            ProxyError::TooLarge => "PROXY v2 header too large",
            ProxyError::Tlv => "PROXY v2 malformed TLV",
            ProxyError::Checksum => "PROXY v2 CRC32C mismatch",
        }
    }
}

impl std::fmt::Display for ProxyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for ProxyError {}

/// Parses the PROXY header at the start of `buf`, version 1 or 2 (§2.2:
/// "A receiver may be configured to support both version 1 and version 2
/// of the protocol"). Bytes after the header are not looked at.
pub fn parse(buf: &[u8]) -> Result<Parsed, ProxyError> {
    match buf.first() {
        None => Ok(Parsed::Partial),
        Some(b'P') => parse_v1(buf),
        Some(b'\r') => parse_v2(buf),
        Some(_) => Err(ProxyError::Missing),
    }
}

/// Whether `buf` holds all of `prefix`; `Missing` as soon as it differs.
fn has_prefix(buf: &[u8], prefix: &[u8]) -> Result<bool, ProxyError> {
    let n = buf.len().min(prefix.len());
    if buf[..n] != prefix[..n] {
        return Err(ProxyError::Missing);
    }
    Ok(n == prefix.len())
}

// ---- Version 1 (§2.1) ----

/// The address family a version 1 protocol names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

fn parse_v1(buf: &[u8]) -> Result<Parsed, ProxyError> {
    if !has_prefix(buf, V1_PREFIX)? {
        return Ok(Parsed::Partial);
    }
    let window = &buf[..buf.len().min(V1_LINE_BYTES_MAX)];
    let Some(cr) = memchr::memchr2(b'\r', b'\n', window) else {
        if buf.len() >= V1_LINE_BYTES_MAX {
            return Err(ProxyError::LineTooLong);
        }
        check_v1_prefix(&buf[V1_PREFIX.len()..])?;
        return Ok(Parsed::Partial);
    };
    // "The receiver must not tolerate a single CR or LF character to end
    // the line when a complete CRLF sequence is expected."
    if window[cr] == b'\n' {
        return Err(ProxyError::LineEnding);
    }
    if cr + 2 > V1_LINE_BYTES_MAX {
        return Err(ProxyError::LineTooLong);
    }
    // The line is whole but for its LF: its fields can be judged now.
    let (source, destination) = parse_v1_fields(&buf[V1_PREFIX.len()..cr])?;
    match buf.get(cr + 1) {
        None => Ok(Parsed::Partial),
        Some(b'\n') => Ok(Parsed::Complete {
            header: ProxyHeader {
                command: Command::Proxy,
                source,
                destination,
                tlvs: 0..0,
            },
            len: cr + 2,
        }),
        Some(_) => Err(ProxyError::LineEnding),
    }
}

/// The fields of a whole version 1 line, after `PROXY ` and before CRLF.
fn parse_v1_fields(line: &[u8]) -> Result<(Option<SocketAddr>, Option<SocketAddr>), ProxyError> {
    // "For "UNKNOWN", the rest of the line before the CRLF may be omitted
    // by the sender, and the receiver must ignore anything presented
    // before the CRLF is found."
    if line == b"UNKNOWN" || line.starts_with(b"UNKNOWN ") {
        return Ok((None, None));
    }
    let (family, fields) = v1_protocol(line)?;
    let mut parts = fields.split(|&b| b == b' ');
    let (Some(src), Some(dst), Some(src_port), Some(dst_port), None) =
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ProxyError::Fields);
    };
    if [src, dst, src_port, dst_port].iter().any(|f| f.is_empty()) {
        return Err(ProxyError::Fields);
    }
    // In the line's order: addresses, then ports.
    let ip = |field: &[u8]| match family {
        Family::V4 => v1_addr::<Ipv4Addr>(field).map(IpAddr::V4),
        Family::V6 => v1_addr::<Ipv6Addr>(field).map(IpAddr::V6),
    };
    let (src, dst) = (ip(src)?, ip(dst)?);
    let (src_port, dst_port) = (v1_port(src_port)?, v1_port(dst_port)?);
    Ok((
        Some(SocketAddr::new(src, src_port)),
        Some(SocketAddr::new(dst, dst_port)),
    ))
}

/// `TCP4 ` or `TCP6 ` at the start of `line`, and what follows it.
fn v1_protocol(line: &[u8]) -> Result<(Family, &[u8]), ProxyError> {
    if let Some(rest) = line.strip_prefix(b"TCP4 ") {
        Ok((Family::V4, rest))
    } else if let Some(rest) = line.strip_prefix(b"TCP6 ") {
        Ok((Family::V6, rest))
    } else {
        Err(ProxyError::Protocol)
    }
}

/// An address in the protocol's family. IPv4: "exactly 4 integers in
/// the range [0..255] inclusive written in decimal representation
/// separated by exactly one dot ... Heading zeroes are not permitted",
/// which is what `Ipv4Addr::from_str` accepts (it refuses `01.2.3.4`).
/// IPv6: any form `Ipv6Addr::from_str` accepts (RFC 4291's, with `::`
/// and a trailing dotted quad, no zone), as `inet_pton` does for HAProxy;
/// the 107-byte line bounds it.
fn v1_addr<A: FromStr>(field: &[u8]) -> Result<A, ProxyError> {
    std::str::from_utf8(field)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(ProxyError::Address)
}

/// A port: "a decimal integer in the range [0..65535] inclusive. Heading
/// zeroes are not permitted" (so no sign either, which `u16::from_str`
/// would take).
fn v1_port(field: &[u8]) -> Result<u16, ProxyError> {
    if !is_port_prefix(field) || field.is_empty() {
        return Err(ProxyError::Port);
    }
    Ok(decimal(field) as u16)
}

/// The value of a run of at most five decimal digits.
fn decimal(digits: &[u8]) -> u32 {
    digits.iter().fold(0, |n, &d| n * 10 + u32::from(d - b'0'))
}

/// Whether `field` can begin a version 1 port: digits, no leading zero,
/// at most 65535.
fn is_port_prefix(field: &[u8]) -> bool {
    field.len() <= 5
        && field.iter().all(u8::is_ascii_digit)
        && !(field.len() > 1 && field[0] == b'0')
        && decimal(field) <= u32::from(u16::MAX)
}

/// Checks the part of a version 1 line received so far (after `PROXY `,
/// no CR or LF yet) as far as it goes: fields followed by their space are
/// judged whole, the last one as the beginning of a field. An IPv6
/// address still arriving is judged by its characters only; the rest
/// exactly.
fn check_v1_prefix(rest: &[u8]) -> Result<(), ProxyError> {
    if rest.starts_with(b"UNKNOWN") {
        return match rest.get(7) {
            None | Some(b' ') => Ok(()),
            Some(_) => Err(ProxyError::Protocol),
        };
    }
    let (family, fields) = match v1_protocol(rest) {
        Ok(found) => found,
        Err(_)
            if [&b"TCP4 "[..], b"TCP6 ", b"UNKNOWN"]
                .iter()
                .any(|p| p.starts_with(rest)) =>
        {
            return Ok(())
        }
        Err(e) => return Err(e),
    };
    let n_fields = fields.split(|&b| b == b' ').count();
    if n_fields > 4 {
        return Err(ProxyError::Fields);
    }
    for (field_idx, field) in fields.split(|&b| b == b' ').enumerate() {
        if field_idx + 1 < n_fields {
            // Followed by its space: whole.
            if field.is_empty() {
                return Err(ProxyError::Fields);
            }
            match (field_idx, family) {
                (0 | 1, Family::V4) => v1_addr::<Ipv4Addr>(field).map(drop)?,
                (0 | 1, Family::V6) => v1_addr::<Ipv6Addr>(field).map(drop)?,
                _ => v1_port(field).map(drop)?,
            }
        } else {
            let ok = match (field_idx, family) {
                (0 | 1, Family::V4) => is_ipv4_prefix(field),
                (0 | 1, Family::V6) => is_ipv6_prefix(field),
                _ => is_port_prefix(field),
            };
            if !ok {
                return Err(match field_idx {
                    0 | 1 => ProxyError::Address,
                    _ => ProxyError::Port,
                });
            }
        }
    }
    Ok(())
}

/// Whether `s` can begin a dotted quad: at most four groups of digits,
/// each at most 255 without a leading zero, all but the last whole.
fn is_ipv4_prefix(s: &[u8]) -> bool {
    let n_groups = s.split(|&b| b == b'.').count();
    n_groups <= 4
        && s.split(|&b| b == b'.').enumerate().all(|(group_idx, group)| {
            let whole = group_idx + 1 < n_groups;
            group.len() <= 3
                && (!whole || !group.is_empty())
                && group.iter().all(u8::is_ascii_digit)
                && !(group.len() > 1 && group[0] == b'0')
                && decimal(group) <= 255
        })
}

/// Whether `s` can begin an IPv6 address, judged by its characters and
/// length only (the longest form, six groups and a dotted quad, is 45).
fn is_ipv6_prefix(s: &[u8]) -> bool {
    s.len() <= 45 && s.iter().all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
}

// ---- Version 2 (§2.2) ----

fn parse_v2(buf: &[u8]) -> Result<Parsed, ProxyError> {
    if !has_prefix(buf, &V2_SIGNATURE)? {
        return Ok(Parsed::Partial);
    }
    // "The highest four bits contains the version ... the receiver must
    // only accept this value."
    let Some(&version_command) = buf.get(12) else {
        return Ok(Parsed::Partial);
    };
    if version_command >> 4 != 2 {
        return Err(ProxyError::Version);
    }
    // "other values are unassigned ... Receivers must drop connections
    // presenting unexpected values here."
    let command = match version_command & 0x0f {
        0 => Command::Local,
        1 => Command::Proxy,
        _ => return Err(ProxyError::Command),
    };
    let Some(&family) = buf.get(13) else {
        return Ok(Parsed::Partial);
    };
    // The address block's length, where it is defined. LOCAL: "discard
    // the protocol block including the family which is ignored".
    // AF_UNSPEC: "The receiver should ignore address information" (and
    // the block's length is not defined).
    let addrs_len = match (command, family) {
        (Command::Local, _) | (Command::Proxy, 0x00) => None,
        (Command::Proxy, 0x11 | 0x12) => Some(12),
        (Command::Proxy, 0x21 | 0x22) => Some(36),
        (Command::Proxy, 0x31 | 0x32) => Some(216),
        // "other values are unspecified and must not be emitted in
        // version 2 of this protocol and must be rejected as invalid by
        // receivers."
        (Command::Proxy, _) => return Err(ProxyError::Family),
    };
    let (Some(&hi), Some(&lo)) = (buf.get(14), buf.get(15)) else {
        return Ok(Parsed::Partial);
    };
    // "the length of the protocol header in bytes is always exactly 16 +
    // this value."
    let len = V2_FIXED_BYTES + usize::from(u16::from_be_bytes([hi, lo]));
    if len > PROXY_HEADER_BYTES_MAX {
        return Err(ProxyError::TooLarge);
    }
    let tlvs_at = match addrs_len {
        Some(n) if V2_FIXED_BYTES + n > len => return Err(ProxyError::AddressLength),
        Some(n) => V2_FIXED_BYTES + n,
        None => len,
    };
    // The TLVs that have arrived are checked now: a header that cannot
    // frame is refused before its end comes.
    let crc_at = check_tlvs(&buf[..buf.len().min(len)], tlvs_at, len)?;
    if buf.len() < len {
        return Ok(Parsed::Partial);
    }
    let header = &buf[..len];
    if let Some(at) = crc_at {
        let sent = u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]);
        if crc32c_zeroed(header, at) != sent {
            return Err(ProxyError::Checksum);
        }
    }
    let port = |at: usize| u16::from_be_bytes([header[at], header[at + 1]]);
    let v4 = |at: usize| Ipv4Addr::from(<[u8; 4]>::try_from(&header[at..at + 4]).expect("4 bytes"));
    let v6 = |at: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&header[at..at + 16]).expect("16 bytes"));
    // TCP only: "the addresses are followed by the source and destination
    // ports represented on 2 bytes each in network byte order."
    let (source, destination) = match (command, family) {
        (Command::Proxy, 0x11) => (
            Some(SocketAddr::V4(SocketAddrV4::new(v4(16), port(24)))),
            Some(SocketAddr::V4(SocketAddrV4::new(v4(20), port(26)))),
        ),
        (Command::Proxy, 0x21) => (
            Some(SocketAddr::V6(SocketAddrV6::new(v6(16), port(48), 0, 0))),
            Some(SocketAddr::V6(SocketAddrV6::new(v6(32), port(50), 0, 0))),
        ),
        _ => (None, None),
    };
    Ok(Parsed::Complete {
        header: ProxyHeader {
            command,
            source,
            destination,
            tlvs: tlvs_at..len,
        },
        len,
    })
}

/// Checks the framing of the TLVs in `buf[start..end]` as far as `buf`
/// goes (it may stop short of `end`): "The first byte is the Type of the
/// vector. The second two bytes represent the length in bytes of the
/// value". Each must end within the header, and the header must end at a
/// TLV's end. Returns where the CRC32C TLV's value is, if there is one.
fn check_tlvs(buf: &[u8], start: usize, end: usize) -> Result<Option<usize>, ProxyError> {
    let mut at = start;
    let mut crc_at = None;
    while at < end {
        if end - at < 3 {
            return Err(ProxyError::Tlv);
        }
        let Some(&[kind, hi, lo]) = buf.get(at..at + 3) else {
            break; // not here yet
        };
        let value_len = usize::from(u16::from_be_bytes([hi, lo]));
        let value_at = at + 3;
        if value_len > end - value_at {
            return Err(ProxyError::Tlv);
        }
        if kind == TLV_CRC32C {
            // "a 32-bit number"; two would be two claims about one header.
            if value_len != 4 || crc_at.is_some() {
                return Err(ProxyError::Tlv);
            }
            crc_at = Some(value_at);
        }
        at = value_at + value_len;
    }
    Ok(crc_at)
}

/// The CRC32C of `header` with the 4 bytes at `at` taken as zeros (§2.2.3:
/// "replace the 32 bits of the checksum field in the received PROXY header
/// with all '0's and calculate a CRC32c checksum value of the whole PROXY
/// header").
fn crc32c_zeroed(header: &[u8], at: usize) -> u32 {
    let crc = crc32c_update(!0, &header[..at]);
    let crc = crc32c_update(crc, &[0; 4]);
    !crc32c_update(crc, &header[at + 4..])
}

/// CRC32C (Castagnoli, RFC 4960 appendix B; reflected polynomial
/// 0x82F63B78) a byte at a time from a table. Written here rather than
/// taken from a crate: it is read once per connection over at most
/// [`PROXY_HEADER_BYTES_MAX`] bytes (a header of 100 bytes is a fraction
/// of a microsecond), so hardware CRC instructions would buy nothing, and
/// twenty lines cost less than a dependency with a build script.
fn crc32c_update(crc: u32, bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .fold(crc, |crc, &b| CRC32C_TABLE[usize::from(crc as u8 ^ b)] ^ (crc >> 8))
}

/// The CRC of every byte value, computed when compiling.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    fn sock(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    fn complete(input: &[u8]) -> (ProxyHeader, usize) {
        match parse(input) {
            Ok(Parsed::Complete { header, len }) => (header, len),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(input)),
        }
    }

    /// A version 2 header: signature, `version_command`, `family`, the
    /// length of `body`, `body`.
    fn v2(version_command: u8, family: u8, body: &[u8]) -> Vec<u8> {
        let mut out = V2_SIGNATURE.to_vec();
        out.extend_from_slice(&[version_command, family]);
        out.extend_from_slice(&(body.len() as u16).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    fn tlv(kind: u8, value: &[u8]) -> Vec<u8> {
        let mut out = vec![kind];
        out.extend_from_slice(&(value.len() as u16).to_be_bytes());
        out.extend_from_slice(value);
        out
    }

    /// TCP over IPv4 from 192.168.0.1:56324 to 192.168.0.11:443 (the
    /// specification's example), then `tlvs`.
    fn tcp4_body(tlvs: &[u8]) -> Vec<u8> {
        let mut body = vec![192, 168, 0, 1, 192, 168, 0, 11];
        body.extend_from_slice(&56324u16.to_be_bytes());
        body.extend_from_slice(&443u16.to_be_bytes());
        body.extend_from_slice(tlvs);
        body
    }

    /// A TCP4 PROXY header whose TLVs end in a CRC32C TLV, filled in the
    /// way §2.2.3 tells a sender to: zeros, the CRC of the whole, in place.
    fn with_crc(tlvs_before: &[u8]) -> Vec<u8> {
        let mut tlvs = tlvs_before.to_vec();
        tlvs.extend_from_slice(&tlv(TLV_CRC32C, &[0; 4]));
        let mut header = v2(0x21, 0x11, &tcp4_body(&tlvs));
        let at = header.len() - 4;
        let crc = !crc32c_update(!0, &header);
        header[at..].copy_from_slice(&crc.to_be_bytes());
        header
    }

    /// Every valid header: its bytes, and the source and destination it gives.
    fn valid() -> Vec<(Vec<u8>, Option<SocketAddr>, Option<SocketAddr>)> {
        let v6_max = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
        let mut tcp6 = Vec::new();
        tcp6.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        tcp6.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        tcp6.extend_from_slice(&[0x12, 0x67, 0x01, 0xbb]);
        let mut unix = vec![b'/'; 216];
        unix.extend_from_slice(&tlv(TLV_NOOP, b""));
        vec![
            // §2.1's example and longest lines.
            (
                b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n".to_vec(),
                sock("192.168.0.1:56324"),
                sock("192.168.0.11:443"),
            ),
            (
                b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n".to_vec(),
                sock("255.255.255.255:65535"),
                sock("255.255.255.255:65535"),
            ),
            (
                b"PROXY TCP4 0.0.0.0 10.0.0.1 0 80\r\n".to_vec(),
                sock("0.0.0.0:0"),
                sock("10.0.0.1:80"),
            ),
            (
                b"PROXY TCP6 2001:db8::1 2001:db8::2 4711 443\r\n".to_vec(),
                sock("[2001:db8::1]:4711"),
                sock("[2001:db8::2]:443"),
            ),
            (
                format!("PROXY TCP6 {v6_max} {v6_max} 65535 65535\r\n").into_bytes(),
                sock(&format!("[{v6_max}]:65535")),
                sock(&format!("[{v6_max}]:65535")),
            ),
            (
                b"PROXY TCP6 ::ffff:192.0.2.1 ::1 1 2\r\n".to_vec(),
                sock("[::ffff:192.0.2.1]:1"),
                sock("[::1]:2"),
            ),
            (b"PROXY UNKNOWN\r\n".to_vec(), None, None),
            (
                format!("PROXY UNKNOWN {v6_max} {v6_max} 65535 65535\r\n").into_bytes(),
                None,
                None,
            ),
            (b"PROXY UNKNOWN anything at all\r\n".to_vec(), None, None),
            // Version 2: LOCAL, with and without an address block.
            (v2(0x20, 0x00, b""), None, None),
            (v2(0x20, 0x11, &tcp4_body(b"")), None, None),
            (v2(0x20, 0x99, b"ignored"), None, None),
            // PROXY: TCP over IPv4 and IPv6.
            (
                v2(0x21, 0x11, &tcp4_body(b"")),
                sock("192.168.0.1:56324"),
                sock("192.168.0.11:443"),
            ),
            (
                v2(0x21, 0x21, &tcp6),
                sock("[2001:db8::1]:4711"),
                sock("[2001:db8::2]:443"),
            ),
            // With TLVs, with a CRC32C.
            (
                v2(
                    0x21,
                    0x11,
                    &tcp4_body(&[tlv(TLV_AUTHORITY, b"example.com"), tlv(TLV_NOOP, b"")].concat()),
                ),
                sock("192.168.0.1:56324"),
                sock("192.168.0.11:443"),
            ),
            (
                with_crc(&tlv(TLV_UNIQUE_ID, b"id-1")),
                sock("192.168.0.1:56324"),
                sock("192.168.0.11:443"),
            ),
            // Families whose addresses are ignored.
            (v2(0x21, 0x00, b""), None, None),
            (v2(0x21, 0x12, &tcp4_body(b"")), None, None),
            (v2(0x21, 0x22, &tcp6), None, None),
            (v2(0x21, 0x31, &unix), None, None),
            (v2(0x21, 0x32, &unix[..216]), None, None),
        ]
    }

    #[test]
    fn valid_headers_parse_split_at_every_offset() {
        for (input, source, destination) in valid() {
            let with_request = [&input[..], b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"].concat();
            for whole in [&input[..], &with_request[..]] {
                let (header, len) = complete(whole);
                assert_eq!(len, input.len(), "{:?}", String::from_utf8_lossy(&input));
                assert_eq!(header.source, source, "{:?}", String::from_utf8_lossy(&input));
                assert_eq!(header.destination, destination);
                assert!(header.tlvs.end <= len);
            }
            for cut in 0..input.len() {
                assert_eq!(
                    parse(&input[..cut]),
                    Ok(Parsed::Partial),
                    "{:?} cut at {cut}",
                    String::from_utf8_lossy(&input)
                );
            }
        }
    }

    #[test]
    fn commands_are_reported() {
        assert_eq!(complete(&v2(0x20, 0x11, &tcp4_body(b""))).0.command, Command::Local);
        assert_eq!(complete(&v2(0x21, 0x11, &tcp4_body(b""))).0.command, Command::Proxy);
        assert_eq!(complete(b"PROXY UNKNOWN\r\n").0.command, Command::Proxy);
    }

    #[test]
    fn tlvs_are_kept_for_later() {
        let input = v2(
            0x21,
            0x11,
            &tcp4_body(
                &[
                    tlv(TLV_AUTHORITY, b"example.com"),
                    tlv(0xe0, b"\x01\x02"),
                    tlv(TLV_NOOP, b""),
                ]
                .concat(),
            ),
        );
        let (header, _) = complete(&input);
        assert_eq!(header.tlvs, 28..input.len());
        let tlvs: Vec<_> = header.tlvs(&input).collect();
        assert_eq!(
            tlvs,
            [
                (TLV_AUTHORITY, &b"example.com"[..]),
                (0xe0, b"\x01\x02"),
                (TLV_NOOP, b"")
            ]
        );
        let (header, _) = complete(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n");
        assert_eq!(header.tlvs(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n").count(), 0);
        // Other bytes than the header's: stops where they stop framing.
        assert_eq!(header.tlvs(&[]).count(), 0);
    }

    #[test]
    fn crc32c_matches_its_check_values() {
        // The catalogue's check value, and RFC 3720 B.4's.
        assert_eq!(!crc32c_update(!0, b"123456789"), 0xe306_9283);
        assert_eq!(!crc32c_update(!0, &[0; 32]), 0x8a91_36aa);
        assert_eq!(!crc32c_update(!0, &[0xff; 32]), 0x62a8_ab43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(!crc32c_update(!0, &ascending), 0x46dd_794e);
    }

    #[test]
    fn checksums_are_checked() {
        let good = with_crc(&tlv(TLV_AUTHORITY, b"example.com"));
        assert!(matches!(parse(&good), Ok(Parsed::Complete { .. })));
        // Any byte changed, in the addresses, a TLV or the checksum itself.
        for at in [16, 20, 24, 31, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 0x01;
            assert_eq!(parse(&bad), Err(ProxyError::Checksum), "byte {at}");
            // A prefix cannot be judged: the checksum covers the whole.
            assert_eq!(parse(&bad[..bad.len() - 1]), Ok(Parsed::Partial));
        }
    }

    #[test]
    fn a_checksum_computed_elsewhere_is_accepted() {
        // A TCP4 header with an AUTHORITY and a CRC32C TLV, its checksum
        // computed by an independent (bitwise, in Python) implementation.
        let header: &[u8] = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x21\
            \xc0\xa8\x00\x01\xc0\xa8\x00\x0b\xdc\x04\x01\xbb\
            \x02\x00\x0bexample.com\x03\x00\x04\xbb\x56\x88\x5c";
        let (parsed, len) = complete(header);
        assert_eq!(len, header.len());
        assert_eq!(parsed.source, sock("192.168.0.1:56324"));
        assert_eq!(
            parsed.tlvs(header).collect::<Vec<_>>(),
            [(TLV_AUTHORITY, &b"example.com"[..]), (TLV_CRC32C, b"\xbb\x56\x88\x5c")]
        );
    }

    #[test]
    fn plain_http_is_refused_at_the_first_byte_that_differs() {
        let cases: &[(&[u8], usize)] = &[
            (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 1),
            (b"POST / HTTP/1.1\r\n", 2),
            (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 3),
            (b"PUT / HTTP/1.1\r\n", 2),
            (b"PROXYTCP4 1.2.3.4 5.6.7.8 1 2\r\n", 6),
            (b"proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n", 1),
            // Empty lines before a request (RFC 9112 §2.2) start like
            // version 2's signature.
            (b"\r\n\r\nGET / HTTP/1.1\r\n", 5),
            (b"\r\nGET / HTTP/1.1\r\n", 3),
            // A TLS ClientHello.
            (b"\x16\x03\x01\x02\x00\x01", 1),
        ];
        for (input, refused_at) in cases {
            for n in 0..=input.len() {
                let want = if n < *refused_at {
                    Ok(Parsed::Partial)
                } else {
                    Err(ProxyError::Missing)
                };
                assert_eq!(parse(&input[..n]), want, "{:?} at {n}", String::from_utf8_lossy(input));
            }
        }
    }

    #[test]
    fn malformed_headers_are_refused() {
        let long_unknown = format!("PROXY UNKNOWN {}\r\n", "x".repeat(V1_LINE_BYTES_MAX));
        let table: Vec<(Vec<u8>, ProxyError)> = vec![
            // Version 1: line endings and length.
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n".to_vec(), ProxyError::LineEnding),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX".to_vec(), ProxyError::LineEnding),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\r\n".to_vec(), ProxyError::LineEnding),
            (b"PROXY UNKNOWN\n".to_vec(), ProxyError::LineEnding),
            (long_unknown.into_bytes(), ProxyError::LineTooLong),
            (
                format!("PROXY UNKNOWN {}\r\n", "x".repeat(V1_LINE_BYTES_MAX - 15)).into_bytes(),
                ProxyError::LineTooLong,
            ),
            // The protocol.
            (b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n".to_vec(), ProxyError::Protocol),
            (b"PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n".to_vec(), ProxyError::Protocol),
            (b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n".to_vec(), ProxyError::Protocol),
            (b"PROXY TCP4\r\n".to_vec(), ProxyError::Protocol),
            (b"PROXY UNKNOWNX\r\n".to_vec(), ProxyError::Protocol),
            (b"PROXY \r\n".to_vec(), ProxyError::Protocol),
            (b"PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n".to_vec(), ProxyError::Protocol),
            // The fields and their spaces.
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n".to_vec(), ProxyError::Fields),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n".to_vec(), ProxyError::Fields),
            (b"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n".to_vec(), ProxyError::Fields),
            (b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n".to_vec(), ProxyError::Fields),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n".to_vec(), ProxyError::Fields),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\t2\r\n".to_vec(), ProxyError::Fields),
            (b"PROXY TCP4 \r\n".to_vec(), ProxyError::Fields),
            // Addresses: of the other family, with leading zeros, out of range.
            (b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n".to_vec(), ProxyError::Address),
            (b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n".to_vec(), ProxyError::Address),
            (b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n".to_vec(), ProxyError::Address),
            (b"PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n".to_vec(), ProxyError::Address),
            (b"PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n".to_vec(), ProxyError::Address),
            (b"PROXY TCP4 1.2.3.4.5 5.6.7.8 1 2\r\n".to_vec(), ProxyError::Address),
            (b"PROXY TCP4 1.2.3.4 localhost 1 2\r\n".to_vec(), ProxyError::Address),
            (b"PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n".to_vec(), ProxyError::Address),
            (b"PROXY TCP6 [::1] ::1 1 2\r\n".to_vec(), ProxyError::Address),
            (b"PROXY TCP6 1::2::3 ::1 1 2\r\n".to_vec(), ProxyError::Address),
            (b"PROXY TCP6 00001:: ::1 1 2\r\n".to_vec(), ProxyError::Address),
            (b"PROXY TCP4 1.2.3.\xff 5.6.7.8 1 2\r\n".to_vec(), ProxyError::Address),
            // Ports.
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n".to_vec(), ProxyError::Port),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 080 2\r\n".to_vec(), ProxyError::Port),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 00 2\r\n".to_vec(), ProxyError::Port),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 +80 2\r\n".to_vec(), ProxyError::Port),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n".to_vec(), ProxyError::Port),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 0x50\r\n".to_vec(), ProxyError::Port),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 999999\r\n".to_vec(), ProxyError::Port),
            // Version 2: version, command, family.
            (v2(0x11, 0x11, &tcp4_body(b"")), ProxyError::Version),
            (v2(0x31, 0x11, &tcp4_body(b"")), ProxyError::Version),
            (v2(0x22, 0x11, &tcp4_body(b"")), ProxyError::Command),
            (v2(0x2f, 0x11, &tcp4_body(b"")), ProxyError::Command),
            (v2(0x21, 0x13, &tcp4_body(b"")), ProxyError::Family),
            (v2(0x21, 0x41, &tcp4_body(b"")), ProxyError::Family),
            (v2(0x21, 0x10, &tcp4_body(b"")), ProxyError::Family),
            (v2(0x21, 0x01, b""), ProxyError::Family),
            // Lengths.
            (v2(0x21, 0x11, &[0; 11]), ProxyError::AddressLength),
            (v2(0x21, 0x21, &[0; 35]), ProxyError::AddressLength),
            (v2(0x21, 0x31, &[0; 215]), ProxyError::AddressLength),
            (v2(0x21, 0x11, b""), ProxyError::AddressLength),
            (
                v2(0x21, 0x11, &vec![0; PROXY_HEADER_BYTES_MAX - V2_FIXED_BYTES + 1]),
                ProxyError::TooLarge,
            ),
            (v2(0x20, 0x00, &vec![0; 0xffff]), ProxyError::TooLarge),
            // TLVs: cut short, overrunning, a bad checksum TLV.
            (v2(0x21, 0x11, &tcp4_body(&[TLV_NOOP])), ProxyError::Tlv),
            (v2(0x21, 0x11, &tcp4_body(&[TLV_NOOP, 0])), ProxyError::Tlv),
            (v2(0x21, 0x11, &tcp4_body(&[TLV_NOOP, 0, 1])), ProxyError::Tlv),
            (
                v2(0x21, 0x11, &tcp4_body(&[TLV_AUTHORITY, 0xff, 0xff, b'a'])),
                ProxyError::Tlv,
            ),
            (
                v2(
                    0x21,
                    0x11,
                    &tcp4_body(&[tlv(TLV_NOOP, b""), vec![TLV_NOOP, 0]].concat()),
                ),
                ProxyError::Tlv,
            ),
            (v2(0x21, 0x11, &tcp4_body(&tlv(TLV_CRC32C, &[0; 3]))), ProxyError::Tlv),
            (v2(0x21, 0x11, &tcp4_body(&tlv(TLV_CRC32C, &[0; 5]))), ProxyError::Tlv),
            (
                v2(
                    0x21,
                    0x11,
                    &tcp4_body(&[tlv(TLV_CRC32C, &[0; 4]), tlv(TLV_CRC32C, &[0; 4])].concat()),
                ),
                ProxyError::Tlv,
            ),
            (
                v2(0x21, 0x11, &tcp4_body(&tlv(TLV_CRC32C, &[0; 4]))),
                ProxyError::Checksum,
            ),
        ];
        for (input, want) in &table {
            assert_eq!(parse(input), Err(*want), "{:?}", String::from_utf8_lossy(input));
            assert!(!want.reason().is_empty());
        }
    }

    #[test]
    fn errors_come_as_soon_as_the_bytes_show_them() {
        // (input, how many bytes show it is wrong, the error)
        let cases: Vec<(Vec<u8>, usize, ProxyError)> = vec![
            (b"PROXY TCP5 1.2.3.4".to_vec(), 10, ProxyError::Protocol),
            (b"PROXY TCP4 01.2".to_vec(), 13, ProxyError::Address),
            (b"PROXY TCP4 1.2.3.4.".to_vec(), 19, ProxyError::Address),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 ".to_vec(), 31, ProxyError::Fields),
            (b"PROXY TCP4 256".to_vec(), 14, ProxyError::Address),
            (b"PROXY TCP6 ::1g".to_vec(), 15, ProxyError::Address),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 65536".to_vec(), 32, ProxyError::Port),
            (v2(0x21, 0x11, &[0; 11]), 16, ProxyError::AddressLength),
            (v2(0x21, 0x11, &tcp4_body(&[TLV_NOOP, 0xff, 0xff])), 31, ProxyError::Tlv),
        ];
        for (input, shown_at, want) in &cases {
            for n in 0..*shown_at {
                assert_eq!(
                    parse(&input[..n]),
                    Ok(Parsed::Partial),
                    "{:?} at {n}",
                    String::from_utf8_lossy(input)
                );
            }
            assert_eq!(
                parse(&input[..*shown_at]),
                Err(*want),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
        // A v2 header longer than the bound is refused at its length.
        let mut big = V2_SIGNATURE.to_vec();
        big.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
        assert_eq!(parse(&big[..15]), Ok(Parsed::Partial));
        assert_eq!(parse(&big), Err(ProxyError::TooLarge));
        // A v1 line with no CRLF is refused at its 107th byte.
        let line = format!("PROXY UNKNOWN {}", "x".repeat(200));
        assert_eq!(parse(&line.as_bytes()[..V1_LINE_BYTES_MAX - 1]), Ok(Parsed::Partial));
        assert_eq!(
            parse(&line.as_bytes()[..V1_LINE_BYTES_MAX]),
            Err(ProxyError::LineTooLong)
        );
    }

    #[test]
    fn source_and_destination_keep_their_families() {
        let (header, _) = complete(b"PROXY TCP6 ::ffff:10.0.0.1 ::1 80 443\r\n");
        assert_eq!(
            header.source.map(|s| s.ip()),
            Some(IpAddr::V6("::ffff:10.0.0.1".parse().unwrap()))
        );
    }
}
