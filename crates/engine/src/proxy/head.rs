//! The upstream request head, written in one pass into the job's buffer:
//! the request line and Host, the client's fields less the ones that do
//! not go on (hop-by-hop, those named in `Connection`, those this hop
//! writes afresh), then this hop's own fields and the framing.
//!
//! `codec::client::write_request_head` does the same for any client, from
//! a list of fields: the proxy used it with a `Vec` of the client's fields
//! filtered against a list of names, then its own appended, and the
//! filtering, the list and the codec's second look at every name made
//! `build_as` 6,000 of a proxied GET's 18,700 instructions (callgrind,
//! `proxy-c50`; 4,200 after, with the whole GET at 15,100). Here a name is looked up once, by its length and then
//! one comparison (`dropped`), and the bytes each field carries are
//! checked eight at a time (`value_ok`).
//!
//! What is checked is what the codec checks: a method that is a token, a
//! target of visible ASCII without `#`, a valid Host, field names that are
//! tokens and values without CR, LF, NUL or other control bytes but HTAB
//! (RFC 9110 §5.5): an HTTP/2 or HTTP/3 client's fields reach here
//! without the HTTP/1.1 parser's checks, and none of them may split the
//! upstream's head. An HTTP/1.x client's fields had those checks already
//! (`codec::head::parse_head`: httparse's token names and
//! `HEADER_VALUE_MAP`, or `codec::plain`, which accepts a subset of what
//! httparse accepts), so `start` is told so (`Fields::Parsed`) and does
//! not look at their bytes again (debug builds do); nor are this hop's own
//! values (`line`: an address, a constant, a request id of visible ASCII)
//! looked at, except for the bytes in them that came from an HTTP/2 or
//! HTTP/3 client (`close`'s `Fields`). Looking again was 730 of a proxied
//! GET's 14,860 instructions (callgrind, `proxy-c50`). One difference: `Connection` options remove only the
//! client's fields, never this hop's (issue 26: `Connection` "may not
//! name ... the fields the proxy adds"); through the codec, a client's
//! `Connection: Via` took this hop's `Via` out.

use crate::codec::client::{eq_lower, method_and_space, request_line_and_host, target_ok, version_and_host};
use crate::codec::head::{is_token, is_valid_host, list_elements, Framing};

/// Why a head could not be written: the request is refused (400).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Invalid;

/// Where a request's fields come from, so whether their bytes are to be
/// checked here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fields {
    /// The HTTP/1.x parser's: token names, field-value bytes.
    Parsed,
    /// An HTTP/2 or HTTP/3 client's (HPACK and QPACK carry any bytes):
    /// every name and value is checked as it is written.
    Unchecked,
}

impl Fields {
    /// The request's: only HTTP/1.0 and HTTP/1.1 requests come from the
    /// HTTP/1.x parser (the engine makes no other `Request` of theirs).
    pub(super) fn of(version: crate::Version) -> Fields {
        match version {
            crate::Version::Http10 | crate::Version::Http11 => Fields::Parsed,
            crate::Version::Http2 | crate::Version::Http3 => Fields::Unchecked,
        }
    }
}

/// Which of the client's fields `start` left out that the caller reads
/// again (`Via`, `Cookie`, the forwarding fields, `Upgrade`, `TE`): a request
/// without them (nearly every one) is not walked through again for each.
/// Bits of `Seen::VIA` and the others.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Seen(u16);

impl Seen {
    pub(super) const VIA: u16 = 1;
    pub(super) const COOKIE: u16 = 2;
    pub(super) const X_FORWARDED_FOR: u16 = 4;
    /// A field `dropped` names that the caller does not read again.
    const OTHER: u16 = 8;
    /// `Connection`: its options name fields that go with it (RFC 9110
    /// §7.6.1), which the caller looks for among those it writes again.
    pub(super) const CONNECTION: u16 = 16;
    /// `Upgrade`: the request may open a WebSocket (`tunnel::offer`).
    pub(super) const UPGRADE: u16 = 32;
    /// `TE`: the client may take trailer fields (`takes_trailers`).
    pub(super) const TE: u16 = 64;
    /// `Expect`: left out unless the caller keeps it (`keep_expect`: a
    /// 100-continue that goes on with its streamed body).
    const EXPECT: u16 = 128;
    /// `Forwarded`, `X-Forwarded-Host`, `X-Forwarded-Proto`: a trusted
    /// proxy's go on (`write_forwarding`).
    pub(super) const FORWARDED: u16 = 256;
    pub(super) const X_FORWARDED_HOST: u16 = 512;
    pub(super) const X_FORWARDED_PROTO: u16 = 1024;
    /// `Proxy-Authorization`: consumed by the proxy it is for (RFC 9110
    /// §11.7.2), so left out unless the route passes it
    /// (`Upstream::proxy_authorization`).
    pub(super) const PROXY_AUTHORIZATION: u16 = 2048;

    /// Whether a field of `kind` (`Seen::VIA` ...) was seen.
    pub(super) fn has(self, kind: u16) -> bool {
        self.0 & kind != 0
    }
}

/// Writes the request line, Host and the client's `fields` that go on to
/// `out`: `(name, value)`, less those whose names start with `:`
/// (pseudo-fields), those `dropped` names, those a `Connection` names,
/// `Expect` unless `keep_expect`, and those in `skip` (lower case). The
/// caller's own fields follow
/// (`put`, or `open` and `close`), then `finish`. On an error, what was
/// written is the caller's to drop. `host_parsed`: `host` is the
/// client's, from the HTTP/1.x parser, which refused a request whose
/// Host (or absolute-form authority) `is_valid_host` refuses
/// (`codec::head`): not looked at again (58 instructions of a proxied
/// GET, callgrind `proxy-c50`), except in debug builds.
#[allow(clippy::too_many_arguments)]
pub(super) fn start(
    out: &mut Vec<u8>,
    method: &str,
    target: &str,
    host: &[u8],
    host_parsed: bool,
    fields: &[httparse::Header<'_>],
    from: Fields,
    keep_expect: bool,
    skip: &[&str],
) -> Result<Seen, Invalid> {
    debug_assert!(!host_parsed || is_valid_host(host));
    if !method_ok(method) || !target_ok(target) || !(host_parsed || is_valid_host(host)) {
        return Err(Invalid);
    }
    // The codec's writer, inlined (its common methods as constants).
    request_line_and_host(out, method, target, host);
    client_fields(out, fields, from, keep_expect, skip)
}

/// A method the upstream request may carry: a token (RFC 9110 §9.1). The
/// common methods are tokens: not looked at byte by byte.
#[inline(always)]
fn method_ok(method: &str) -> bool {
    matches!(method, "GET" | "HEAD" | "POST") || is_token(method.as_bytes())
}

/// `start` for a request to a route's upstream (`Upstream`), the path
/// and query written straight into `out` and checked there (they went
/// through a buffer of their own first and were copied: 40 instructions
/// of a proxied GET, callgrind `proxy-c50`), and the Host line the
/// route's own (`Upstream::host_line`, made once when the route is)
/// when `host` is its authority. `None` where the route refuses the
/// path (`Upstream::upstream_path_to`).
#[allow(clippy::too_many_arguments)]
pub(super) fn start_routed(
    out: &mut Vec<u8>,
    up: &super::Upstream,
    method: &str,
    path: &str,
    query: Option<&str>,
    host: &[u8],
    host_parsed: bool,
    fields: &[httparse::Header<'_>],
    from: Fields,
    keep_expect: bool,
    skip: &[&str],
) -> Result<Seen, Invalid> {
    debug_assert!(!host_parsed || is_valid_host(host));
    if !method_ok(method) {
        return Err(Invalid);
    }
    method_and_space(out, method);
    let target_at = out.len();
    let plain = up.upstream_path_to(path, out).ok_or(Invalid)?;
    let query_at = out.len();
    if let Some(q) = query {
        out.push(b'?');
        out.extend_from_slice(q.as_bytes());
    }
    // RFC 9112 §3.2, as `target_ok`: visible ASCII, no fragment. A path
    // written the short way is such bytes (`PLAIN`): only the query is
    // looked at then.
    let check_at = if plain { query_at } else { target_at };
    debug_assert!(
        out[target_at..query_at]
            .iter()
            .all(|&b| (0x21..=0x7e).contains(&b) && b != b'#')
            || !plain
    );
    if !out[check_at..].iter().all(|&b| (0x21..=0x7e).contains(&b) && b != b'#') {
        return Err(Invalid);
    }
    if std::ptr::eq(host, up.authority().as_bytes()) {
        // The route's Host line, checked when it was made.
        out.extend_from_slice(up.host_line().ok_or(Invalid)?);
    } else {
        if !(host_parsed || is_valid_host(host)) {
            return Err(Invalid);
        }
        version_and_host(out, host);
    }
    client_fields(out, fields, from, keep_expect, skip)
}

/// The client's `fields` that go on, after the request line and Host
/// (`start`, `start_routed`).
#[inline(always)]
fn client_fields(
    out: &mut Vec<u8>,
    fields: &[httparse::Header<'_>],
    from: Fields,
    keep_expect: bool,
    skip: &[&str],
) -> Result<Seen, Invalid> {
    // RFC 9110 §7.6.1: the fields a `Connection` names go with it. Most
    // requests have none: one pass, each field looked up in none; when
    // one is met, what the pass wrote goes and a second pass looks each
    // field up in its options (a first pass only to look for one was
    // about 40 instructions of a proxied GET, callgrind).
    let at = out.len();
    let seen = fields_into(out, fields, from, keep_expect, skip, false)?;
    if !seen.has(Seen::CONNECTION) {
        return Ok(seen);
    }
    out.truncate(at);
    fields_into(out, fields, from, keep_expect, skip, true)
}

/// `start`'s pass over the client's fields; `has_connection`: options of
/// a `Connection` field are looked up. `Expect` is one of the names
/// looked up by length (`dropped_kind`), not a `skip` entry compared
/// with every field (about 8 instructions a field, callgrind
/// `proxy-c50`); `skip` is then empty for nearly every request.
#[inline(always)]
fn fields_into(
    out: &mut Vec<u8>,
    fields: &[httparse::Header<'_>],
    from: Fields,
    keep_expect: bool,
    skip: &[&str],
    has_connection: bool,
) -> Result<Seen, Invalid> {
    let mut seen = 0;
    for f in fields {
        let name = f.name.as_bytes();
        if name.first() == Some(&b':') {
            continue;
        }
        let kind = dropped_kind(name);
        if kind != 0 && !(kind == Seen::EXPECT && keep_expect) {
            seen |= kind;
            continue;
        }
        if !skip.is_empty() && skip.iter().any(|s| f.name.eq_ignore_ascii_case(s)) {
            continue;
        }
        // Issue 26: `Connection` may not name Authorization (Host and the
        // framing fields are written by this hop, never copied).
        if has_connection
            && !name.eq_ignore_ascii_case(b"authorization")
            && fields.iter().any(|c| {
                c.name.eq_ignore_ascii_case("connection")
                    && list_elements(c.value).any(|opt| opt.eq_ignore_ascii_case(name))
            })
        {
            continue;
        }
        match from {
            Fields::Parsed => line_inline(out, name, f.value),
            Fields::Unchecked => put(out, name, f.value)?,
        }
    }
    Ok(Seen(seen))
}

/// One field line, its name and value checked.
#[inline]
pub(super) fn put(out: &mut Vec<u8>, name: &[u8], value: &[u8]) -> Result<(), Invalid> {
    if !is_token(name) || !value_ok(value) {
        return Err(Invalid);
    }
    line(out, name, value);
    Ok(())
}

/// One field line whose name is a token and whose value is field-value
/// bytes already (the HTTP/1.x parser's, or this hop's own): not looked
/// at again, except in debug builds.
#[inline]
pub(super) fn line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    debug_assert!(is_token(name) && value_ok(value), "{name:?}: {value:?}");
    out.reserve(name.len() + value.len() + 4);
    crate::codec::write::push_field(out, name, value);
}

/// `line`, inlined into the pass over the client's fields (a call a
/// field, with its reservation, was about 20 instructions of a proxied
/// GET's one field, callgrind `proxy-c50`).
#[inline(always)]
fn line_inline(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    debug_assert!(is_token(name) && value_ok(value), "{name:?}: {value:?}");
    crate::codec::write::push_field(out, name, value);
}

/// Begins a field (`name`, a constant token) whose value the caller
/// writes in place; where the value starts, for `close`.
#[inline]
pub(super) fn open(out: &mut Vec<u8>, name: &str) -> usize {
    debug_assert!(is_token(name.as_bytes()));
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.len()
}

/// Ends the field `open` began, its value (from `value_at`) checked when
/// some of it came `from` a client whose bytes are unchecked.
#[inline]
pub(super) fn close(out: &mut Vec<u8>, value_at: usize, from: Fields) -> Result<(), Invalid> {
    match from {
        Fields::Unchecked if !value_ok(&out[value_at..]) => return Err(Invalid),
        Fields::Unchecked => {}
        Fields::Parsed => debug_assert!(value_ok(&out[value_at..])),
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// Checks the value of a field begun at `value_at` (by `open`) and not
/// yet ended, as `close` does, leaving its line open: the caller writes
/// the line's end with the next line's start.
#[inline]
pub(super) fn check(out: &[u8], value_at: usize, from: Fields) -> Result<(), Invalid> {
    match from {
        Fields::Unchecked if !value_ok(&out[value_at..]) => Err(Invalid),
        Fields::Unchecked => Ok(()),
        Fields::Parsed => {
            debug_assert!(value_ok(&out[value_at..]));
            Ok(())
        }
    }
}

/// Whether `finish` writes a framing field (else only the empty line).
#[inline]
pub(super) fn framed(method: &str, framing: Framing) -> bool {
    match framing {
        Framing::Length(_) | Framing::Chunked => true,
        Framing::Empty => matches!(method, "POST" | "PUT" | "PATCH"),
    }
}

/// The framing field and the empty line that ends the head.
pub(super) fn finish(out: &mut Vec<u8>, method: &str, framing: Framing) {
    match framing {
        Framing::Length(n) => content_length(out, n),
        Framing::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        // RFC 9110 §8.6: a POST carries Content-Length even when 0 (some
        // servers answer 411 without it), as the codec's writer does.
        Framing::Empty if matches!(method, "POST" | "PUT" | "PATCH") => content_length(out, 0),
        Framing::Empty => {}
    }
    out.extend_from_slice(b"\r\n");
}

fn content_length(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(b"Content-Length: ");
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Fields that never go on from the client: the hop-by-hop ones (RFC 9110
/// §7.6.1: Connection, Keep-Alive, Proxy-Connection, TE,
/// Transfer-Encoding, Upgrade), the two the head spells from its own
/// arguments (Host, Content-Length) and those this hop writes afresh
/// (`X-Forwarded-*`, `Forwarded`, `Via`, `X-Request-ID`, and `Cookie`,
/// joined from HTTP/2 crumbs), and `Proxy-Authorization`, written again
/// only where the route passes it. Found by length, then one or two
/// comparisons, not a walk through a list of names.
/// (`Expect` is found the same way, but goes on when the caller keeps
/// it: `fields_into`.)
#[cfg(test)]
fn dropped(name: &[u8]) -> bool {
    let kind = dropped_kind(name);
    kind != 0 && kind != Seen::EXPECT
}

/// `dropped`, as the `Seen` bit of the field's kind (0: not dropped).
#[inline(always)]
fn dropped_kind(name: &[u8]) -> u16 {
    let is = |n: &[u8]| eq_lower(name, n);
    let other = |yes: bool| if yes { Seen::OTHER } else { 0 };
    // By length and first letter (either case: `| 0x20` makes only `T`
    // and `t` a `t`), then one comparison: the names that go on (Accept,
    // User-Agent, Referer...) are told apart without one (a comparison
    // with `connection` and `keep-alive` for each User-Agent was about
    // 25 instructions of a proxied GET, callgrind `proxy-c50`).
    let Some(&first) = name.first() else { return 0 };
    match (name.len(), first | 0x20) {
        (2, b't') if is(b"te") => Seen::TE,
        (3, b'v') if is(b"via") => Seen::VIA,
        (4, b'h') => other(is(b"host")),
        (6, b'c') if is(b"cookie") => Seen::COOKIE,
        (6, b'e') if is(b"expect") => Seen::EXPECT,
        (7, b'u') if is(b"upgrade") => Seen::UPGRADE,
        (9, b'f') if is(b"forwarded") => Seen::FORWARDED,
        (10, b'c') if is(b"connection") => Seen::CONNECTION,
        (10, b'k') => other(is(b"keep-alive")),
        (12, b'x') => other(is(b"x-request-id")),
        (14, b'c') => other(is(b"content-length")),
        (15, b'x') if is(b"x-forwarded-for") => Seen::X_FORWARDED_FOR,
        (16, b'p') => other(is(b"proxy-connection")),
        (16, b'x') if is(b"x-forwarded-host") => Seen::X_FORWARDED_HOST,
        (17, b't') => other(is(b"transfer-encoding")),
        (17, b'x') if is(b"x-forwarded-proto") => Seen::X_FORWARDED_PROTO,
        (19, b'p') if is(b"proxy-authorization") => Seen::PROXY_AUTHORIZATION,
        _ => 0,
    }
}

/// field-value bytes only (RFC 9110 §5.5): HTAB, SP, VCHAR and obs-text;
/// no other control byte and no DEL. Eight bytes a step: a word with no
/// byte below 0x20 and none equal to 0x7f passes at once; one with either
/// is looked at byte by byte (HTAB is below 0x20 and allowed).
#[inline]
pub(super) fn value_ok(value: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let byte_ok = |b: u8| b == b'\t' || (b >= 0x20 && b != 0x7f);
    let mut chunks = value.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        // A byte below 0x20 (exact for thresholds up to 0x80), and a
        // byte equal to 0x7f (a zero byte of `w ^ 0x7f..`).
        let below = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
        let x = w ^ (ONES * 0x7f);
        let del = x.wrapping_sub(ONES) & !x & HIGH;
        if (below | del) != 0 && !c.iter().all(|&b| byte_ok(b)) {
            return false;
        }
    }
    chunks.remainder().iter().all(|&b| byte_ok(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h<'a>(name: &'a str, value: &'a [u8]) -> httparse::Header<'a> {
        httparse::Header { name, value }
    }

    /// A whole head, as `build_as` writes an HTTP/2 client's; `out` as it
    /// was on an error.
    #[allow(clippy::too_many_arguments)]
    fn write(
        out: &mut Vec<u8>,
        method: &str,
        target: &str,
        host: &str,
        fields: &[httparse::Header<'_>],
        skip: &[&str],
        ours: &[(&str, &[u8])],
        framing: Framing,
    ) -> Result<(), Invalid> {
        write_from(
            out,
            method,
            target,
            host,
            fields,
            Fields::Unchecked,
            skip,
            ours,
            framing,
        )
    }

    /// `write`, for fields `from` where the caller says.
    #[allow(clippy::too_many_arguments)]
    fn write_from(
        out: &mut Vec<u8>,
        method: &str,
        target: &str,
        host: &str,
        fields: &[httparse::Header<'_>],
        from: Fields,
        skip: &[&str],
        ours: &[(&str, &[u8])],
        framing: Framing,
    ) -> Result<(), Invalid> {
        let at = out.len();
        let written = (|| {
            let keep_expect = !skip.contains(&"expect");
            start(
                out,
                method,
                target,
                host.as_bytes(),
                false,
                fields,
                from,
                keep_expect,
                skip,
            )?;
            for &(name, value) in ours {
                let v = open(out, name);
                out.extend_from_slice(value);
                close(out, v, from)?;
            }
            finish(out, method, framing);
            Ok(())
        })();
        if written.is_err() {
            out.truncate(at);
        }
        written
    }

    #[test]
    fn value_ok_agrees_with_the_byte_rule_everywhere() {
        let byte_ok = |b: u8| b == b'\t' || (b >= 0x20 && b != 0x7f);
        // Every byte at every place of a 19-byte value (two words and a
        // tail), among bytes that pass and obs-text.
        for pos in 0..19 {
            for b in 0..=255u8 {
                let mut v = *b"abc\tdef\x80ghij kl\xffmnop";
                v[pos] = b;
                assert_eq!(value_ok(&v), byte_ok(b), "byte {b:#x} at {pos}");
            }
        }
        assert!(value_ok(b""));
        assert!(!value_ok(b"x\r\nInjected: 1"));
        assert!(!value_ok(b"01234567\0"));
    }

    #[test]
    fn dropped_names_any_case() {
        for n in [
            "TE",
            "Via",
            "HOST",
            "cookie",
            "Upgrade",
            "Forwarded",
            "Connection",
            "keep-alive",
            "X-Request-ID",
            "Content-Length",
            "x-forwarded-for",
            "Proxy-Connection",
            "X-Forwarded-Host",
            "Transfer-Encoding",
            "X-Forwarded-Proto",
            "Proxy-Authorization",
        ] {
            assert!(dropped(n.as_bytes()), "{n}");
        }
        for n in [
            "accept",
            "user-agent",
            "tf",
            "vias",
            "x-forwarded-port",
            "authorization",
            "expect",
            "",
            "Tf",
            "Pe",
            "4ost",
            "Hosts",
            "xonnection",
            "X-Forwarded-Fox",
        ] {
            assert!(!dropped(n.as_bytes()), "{n}");
        }
        // The first letter's filter keeps no name out that a comparison
        // would take: every byte in first place, against the comparison.
        for n in [
            "te",
            "via",
            "host",
            "cookie",
            "expect",
            "upgrade",
            "forwarded",
            "connection",
            "keep-alive",
            "x-request-id",
            "content-length",
            "x-forwarded-for",
            "proxy-connection",
            "x-forwarded-host",
            "transfer-encoding",
            "x-forwarded-proto",
            "proxy-authorization",
        ] {
            for b in 0..=255u8 {
                let mut name = n.as_bytes().to_vec();
                name[0] = b;
                let same = eq_lower(&name, n.as_bytes());
                assert_eq!(dropped_kind(&name) != 0, same, "{n} with {b:#04x} first");
            }
        }
    }

    #[test]
    fn one_pass_head() {
        let fields = [
            h("User-Agent", b"t"),
            h("Connection", b"keep-alive, X-Private, Via"),
            h("X-Private", b"no"),
            h("Keep-Alive", b"5"),
            h("Expect", b"100-continue"),
            h(":authority", b"x"),
            h("Accept", b"*/*"),
        ];
        // The same head whether the fields are checked or not.
        for from in [Fields::Unchecked, Fields::Parsed] {
            let mut out = b"kept".to_vec();
            write_from(
                &mut out,
                "GET",
                "/a?b",
                "up:81",
                &fields,
                from,
                &["expect"],
                &[("Via", b"1.1 me")],
                Framing::Empty,
            )
            .unwrap();
            assert_eq!(
                out, b"keptGET /a?b HTTP/1.1\r\nHost: up:81\r\nUser-Agent: t\r\nAccept: */*\r\nVia: 1.1 me\r\n\r\n",
                "{from:?}"
            );
        }
        let mut out = Vec::new();
        write(&mut out, "POST", "/", "", &[], &[], &[], Framing::Empty).unwrap();
        assert_eq!(out, b"POST / HTTP/1.1\r\nHost:\r\nContent-Length: 0\r\n\r\n");
        let mut out = Vec::new();
        write(&mut out, "PUT", "/", "h", &[], &[], &[], Framing::Chunked).unwrap();
        assert_eq!(out, b"PUT / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n");
    }

    /// `Expect` goes on only when the caller keeps it (a 100-continue
    /// streamed to the upstream), in any case of its name, where it came;
    /// `skip` still leaves out what it names.
    #[test]
    fn expect_goes_on_only_when_kept() {
        let fields = [
            h("A", b"1"),
            h("eXpEcT", b"100-continue"),
            h("Sec-WebSocket-Key", b"k"),
            h("B", b"2"),
        ];
        for from in [Fields::Unchecked, Fields::Parsed] {
            for (keep_expect, skip, want) in [
                (false, &[][..], &b"A: 1\r\nSec-WebSocket-Key: k\r\nB: 2\r\n"[..]),
                (
                    true,
                    &[],
                    b"A: 1\r\neXpEcT: 100-continue\r\nSec-WebSocket-Key: k\r\nB: 2\r\n",
                ),
                (false, &["sec-websocket-key"], b"A: 1\r\nB: 2\r\n"),
                (
                    true,
                    &["sec-websocket-key"],
                    b"A: 1\r\neXpEcT: 100-continue\r\nB: 2\r\n",
                ),
            ] {
                let mut out = Vec::new();
                let seen = start(&mut out, "GET", "/", b"h", false, &fields, from, keep_expect, skip).unwrap();
                let line = b"GET / HTTP/1.1\r\nHost: h\r\n";
                assert_eq!(
                    String::from_utf8_lossy(&out),
                    String::from_utf8_lossy(&[&line[..], want].concat()),
                    "{from:?} {keep_expect} {skip:?}"
                );
                // Not one of the fields the caller looks for again.
                for kind in [
                    Seen::VIA,
                    Seen::COOKIE,
                    Seen::X_FORWARDED_FOR,
                    Seen::FORWARDED,
                    Seen::X_FORWARDED_HOST,
                    Seen::X_FORWARDED_PROTO,
                    Seen::UPGRADE,
                    Seen::TE,
                ] {
                    assert!(!seen.has(kind), "{kind}");
                }
            }
        }
    }

    #[test]
    fn a_method_that_is_not_a_token_is_refused_constant_or_not() {
        // The common methods are not checked byte by byte: any other
        // method is, before a byte is written.
        for method in ["GE T", "GET\r\n", "", "P(ST"] {
            let mut out = Vec::new();
            let started = start(&mut out, method, "/", b"h", false, &[], Fields::Parsed, false, &[]);
            assert_eq!(started, Err(Invalid), "{method:?}");
            assert!(out.is_empty(), "{method:?}");
        }
        // The request line is the codec's (`request_line_and_host`, whose
        // bytes `codec::client`'s tests pin for every method).
        let mut out = Vec::new();
        start(
            &mut out,
            "PATCH",
            "/a?b",
            b"h:1",
            false,
            &[],
            Fields::Parsed,
            false,
            &[],
        )
        .unwrap();
        assert_eq!(out, b"PATCH /a?b HTTP/1.1\r\nHost: h:1\r\n");
    }

    /// A route's request line and Host (`start_routed`: the path written
    /// in place, the route's own Host line) are `start`'s bytes for the
    /// route's path, and what `start` refuses it refuses, writing nothing
    /// more the caller keeps (it drops `out` on an error).
    #[test]
    fn a_routes_start_is_starts_bytes_for_its_path() {
        use super::super::{HostHeader, Upstream};
        let routes = [
            Upstream::parse("http://127.0.0.1:9000").unwrap(),
            Upstream::parse("http://localhost:9000/v1/")
                .unwrap()
                .prefix("/api/")
                .host_header(HostHeader::Upstream),
            Upstream::parse("unix:/tmp/up.sock").unwrap(),
        ];
        let fields = [h("User-Agent", b"t"), h("Connection", b"x-a"), h("X-A", b"1")];
        for up in &routes {
            let authority = up.authority().as_bytes();
            assert_eq!(
                up.host_line().unwrap(),
                [&b" HTTP/1.1\r\nHost: "[..], authority, b"\r\n"].concat()
            );
            for method in ["GET", "HEAD", "POST", "PATCH", "G(T", ""] {
                for (path, query) in [
                    ("/api/x", None),
                    ("/api/a%20b", Some("q=1")),
                    ("/", Some("a#b")),
                    ("/%2F", None),
                ] {
                    for host in [&b"site.test"[..], b"", b"bad host", authority] {
                        for from in [Fields::Parsed, Fields::Unchecked] {
                            // The caller's choice: the client's Host, or the route's own.
                            let host: &[u8] = match (up.host_header_mode(), host.is_empty()) {
                                (HostHeader::Preserve, false) => host,
                                _ => authority,
                            };
                            let mut routed = b"x".to_vec();
                            let got = start_routed(
                                &mut routed,
                                up,
                                method,
                                path,
                                query,
                                host,
                                false,
                                &fields,
                                from,
                                false,
                                &[],
                            );
                            let mut want = b"x".to_vec();
                            let target = up.upstream_path(path).map(|p| match query {
                                Some(q) => format!("{p}?{q}"),
                                None => p,
                            });
                            let wanted = match &target {
                                Some(t) => start(&mut want, method, t, host, false, &fields, from, false, &[]),
                                None => Err(Invalid),
                            };
                            let case = format!(
                                "{} {method:?} {path} {query:?} {:?}",
                                up.url(),
                                String::from_utf8_lossy(host)
                            );
                            assert_eq!(got, wanted, "{case}");
                            if wanted.is_ok() {
                                assert_eq!(
                                    String::from_utf8_lossy(&routed),
                                    String::from_utf8_lossy(&want),
                                    "{case}"
                                );
                            }
                        }
                    }
                }
            }
        }
        // The route's Host line is the route's: a route made again for
        // another name (a reload) has its own.
        let renamed = Upstream::parse("http://127.0.0.1:9001").unwrap();
        let mut out = Vec::new();
        let host = renamed.authority().as_bytes();
        start_routed(
            &mut out,
            &renamed,
            "GET",
            "/",
            None,
            host,
            false,
            &[],
            Fields::Parsed,
            false,
            &[],
        )
        .unwrap();
        assert_eq!(out, b"GET / HTTP/1.1\r\nHost: 127.0.0.1:9001\r\n");
    }

    #[test]
    fn refuses_what_would_split_the_head() {
        // method, target, host, the client's fields, this hop's.
        type Case<'a> = (
            &'a str,
            &'a str,
            &'a str,
            &'a [httparse::Header<'a>],
            &'a [(&'a str, &'a [u8])],
        );
        let cases: [Case<'_>; 7] = [
            ("G T", "/", "h", &[], &[]),
            ("GET", "/a b", "h", &[], &[]),
            ("GET", "/a#b", "h", &[], &[]),
            ("GET", "/", "h\r\nX: 1", &[], &[]),
            ("GET", "/", "h", &[h("X", b"a\r\nY: b")], &[]),
            ("GET", "/", "h", &[h("X Y", b"a")], &[]),
            ("GET", "/", "h", &[], &[("X-Request-ID", b"a\nb")]),
        ];
        for (method, target, host, fields, ours) in cases {
            let mut out = b"kept".to_vec();
            assert_eq!(
                write(&mut out, method, target, host, fields, &[], ours, Framing::Empty),
                Err(Invalid),
                "{method} {target} {host}"
            );
            assert_eq!(out, b"kept");
        }
    }

    /// What `Fields::Parsed` relies on: the HTTP/1.x parser (the plain
    /// tokeniser and httparse alike) completes no head whose fields have
    /// a name `is_token` refuses or a value `value_ok` refuses, whatever
    /// byte is put in a name or a value, so an HTTP/1.x client's fields
    /// need no second look here.
    #[test]
    fn the_http1_parser_passes_only_fields_put_would_pass() {
        use crate::codec::head::{parse_head_with, Parsed};
        use std::mem::MaybeUninit;
        let limits = crate::limits::Limits::default();
        let mut n_complete = 0;
        for b in 0..=255u8 {
            let in_value = [b"GET / HTTP/1.1\r\nHost: h\r\nX: a".as_slice(), &[b], b"b\r\n\r\n"].concat();
            let in_name = [b"GET / HTTP/1.1\r\nHost: h\r\nX".as_slice(), &[b], b"Y: 1\r\n\r\n"].concat();
            for head in [in_value, in_name] {
                for plain in [true, false] {
                    let mut slots = [const { MaybeUninit::uninit() }; 8];
                    if let Ok(Parsed::Complete(h)) = parse_head_with(&head, &mut slots, &limits, plain) {
                        n_complete += 1;
                        for f in h.headers {
                            assert!(is_token(f.name.as_bytes()), "byte {b:#04x}: name {:?}", f.name);
                            assert!(value_ok(f.value), "byte {b:#04x}: value {:?}", f.value);
                        }
                    }
                }
            }
        }
        // Not vacuous: the visible bytes make complete heads.
        assert!(n_complete > 200, "{n_complete}");
    }
}
