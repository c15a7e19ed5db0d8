//! A request's header block as HTTP/2 delivers it: the pseudo-fields and
//! fields checked against RFC 9113 §8.2–§8.3, then shown to handlers as
//! the `httparse::Header` list an HTTP/1.1 request gives them.

use super::fields::Field;

/// Where a stream keeps its decoded request head.
#[derive(Default)]
pub(crate) struct Head {
    /// Names and values, back to back; `fields` and the pseudo-fields hold
    /// spans into it.
    pub(crate) bytes: Vec<u8>,
    pub(crate) fields: Vec<Field>,
    pub(crate) method: Option<Field>,
    pub(crate) scheme: Option<Field>,
    pub(crate) path: Option<Field>,
    pub(crate) authority: Option<Field>,
    /// RFC 8441's `:protocol` (extended CONNECT: `websocket`).
    pub(crate) protocol: Option<Field>,
    pub(crate) content_length: Option<u64>,
    /// `expect: 100-continue`: the client may wait for an interim 100
    /// before it sends the body (RFC 9110 §10.1.1).
    pub(crate) expect_continue: bool,
    /// An `expect` other than `100-continue`: answered 417, as HTTP/1.1.
    pub(crate) expect_unmet: bool,
}

/// Why a request head is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Malformed (§8.1.1): a stream error of type PROTOCOL_ERROR.
    Malformed(&'static str),
}

impl Head {
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.fields.clear();
        self.method = None;
        self.scheme = None;
        self.path = None;
        self.authority = None;
        self.protocol = None;
        self.content_length = None;
        self.expect_continue = false;
        self.expect_unmet = false;
    }

    pub(crate) fn span(&self, (at, len): (u32, u32)) -> &[u8] {
        &self.bytes[at as usize..(at + len) as usize]
    }

    /// Sorts the decoded fields into pseudo-fields and fields, checking
    /// each rule of §8.2 and §8.3.1. `fields` holds everything decoded.
    /// With `extended_connect` (SETTINGS_ENABLE_CONNECT_PROTOCOL sent),
    /// a CONNECT may name a `:protocol` and then carries `:scheme` and
    /// `:path` as other requests do (RFC 8441 §4); without it, `:protocol`
    /// is unknown, and the request malformed.
    pub(crate) fn check_request(&mut self, extended_connect: bool) -> Result<(), Refusal> {
        let mut regular_seen = false;
        let mut kept = 0;
        let mut n_cookies = 0;
        let mut host = None;
        for i in 0..self.fields.len() {
            let f = self.fields[i];
            let name = self.span(f.name);
            let value = self.span(f.value);
            // A field from the HPACK tables was checked once already.
            if !f.checked {
                if name.is_empty() {
                    return Err(Refusal::Malformed("empty field name"));
                }
                if !value_is_valid(value) {
                    return Err(Refusal::Malformed("invalid field value"));
                }
            }
            if name[0] == b':' {
                if regular_seen {
                    return Err(Refusal::Malformed("pseudo-field after a field"));
                }
                let slot = match name {
                    b":method" => &mut self.method,
                    b":scheme" => &mut self.scheme,
                    b":path" => &mut self.path,
                    b":authority" => &mut self.authority,
                    b":protocol" if extended_connect => &mut self.protocol,
                    _ => return Err(Refusal::Malformed("unknown pseudo-field")),
                };
                if slot.replace(f).is_some() {
                    return Err(Refusal::Malformed("repeated pseudo-field"));
                }
                continue;
            }
            regular_seen = true;
            if !f.checked && !name.iter().all(|&b| is_lower_tchar(b)) {
                return Err(Refusal::Malformed("field name not a lowercase token"));
            }
            match name {
                b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade" => {
                    return Err(Refusal::Malformed("connection-specific field"));
                }
                b"te" if value != b"trailers" => return Err(Refusal::Malformed("TE other than trailers")),
                b"content-length" => {
                    let n = parse_length(value).ok_or(Refusal::Malformed("invalid content-length"))?;
                    if self.content_length.is_some_and(|m| m != n) {
                        return Err(Refusal::Malformed("conflicting content-length"));
                    }
                    self.content_length = Some(n);
                }
                b"expect" => {
                    // RFC 9110 §10.1.1: "The only expectation defined by
                    // this specification is "100-continue" (with no
                    // defined parameters)", compared case-insensitively.
                    if value.eq_ignore_ascii_case(b"100-continue") {
                        self.expect_continue = true;
                    } else {
                        self.expect_unmet = true;
                    }
                }
                b"cookie" => n_cookies += 1,
                b"host" => host = Some(f),
                _ => {}
            }
            self.fields[kept] = f;
            kept += 1;
        }
        self.fields.truncate(kept);
        let method = self.method.ok_or(Refusal::Malformed("no :method"))?;
        let method = self.span(method.value);
        if method.is_empty() || !method.iter().all(|&b| crate::codec::head::is_token(&[b])) {
            return Err(Refusal::Malformed("invalid :method"));
        }
        if self.protocol.is_some() && method != b"CONNECT" {
            return Err(Refusal::Malformed(":protocol on a request other than CONNECT"));
        }
        if method == b"CONNECT" && self.protocol.is_none() {
            // §8.5: only :method and :authority.
            if self.scheme.is_some() || self.path.is_some() || self.authority.is_none() {
                return Err(Refusal::Malformed(
                    "CONNECT with :scheme or :path, or without :authority",
                ));
            }
        } else {
            let path = self.path.ok_or(Refusal::Malformed("no :path"))?;
            let scheme = self.scheme.ok_or(Refusal::Malformed("no :scheme"))?;
            // RFC 9113 §8.3.1 (RFC 9114 §4.3.1): a scheme with a
            // mandatory authority, as http and https have, needs
            // :authority or Host; without either the request names no
            // origin (HTTP/1.1's answer to a missing Host is a 400 too).
            // The scheme is read only then (every request from a browser
            // has :authority).
            if self.authority.is_none() && host.is_none() {
                let scheme = self.span(scheme.value);
                if scheme.eq_ignore_ascii_case(b"http") || scheme.eq_ignore_ascii_case(b"https") {
                    return Err(Refusal::Malformed("neither :authority nor Host"));
                }
            }
            let path = self.span(path.value);
            if path.is_empty() {
                return Err(Refusal::Malformed("empty :path"));
            }
            if !(path[0] == b'/' || (path == b"*" && method == b"OPTIONS")) {
                return Err(Refusal::Malformed(":path neither absolute nor *"));
            }
            if !path.iter().all(|&b| (0x21..0x7f).contains(&b)) {
                return Err(Refusal::Malformed("invalid byte in :path"));
            }
        }
        if let Some(a) = self.authority {
            let authority = self.span(a.value);
            if !authority.iter().all(|&b| (0x21..0x7f).contains(&b) && b != b'@') {
                return Err(Refusal::Malformed("invalid :authority"));
            }
            // RFC 9113 §8.3.1 (and RFC 9114 §4.3.1): a Host naming another
            // origin than :authority makes the request malformed; the
            // handler would otherwise see one host and the log another.
            if host.is_some_and(|h| !self.span(h.value).eq_ignore_ascii_case(authority)) {
                return Err(Refusal::Malformed("Host differs from :authority"));
            }
        }
        if n_cookies > 1 {
            self.join_cookies();
        }
        Ok(())
    }

    /// §8.2.3: cookie fields split for compression are joined with "; "
    /// into one, as an HTTP/1.1 request would carry them.
    fn join_cookies(&mut self) {
        let start = self.bytes.len() as u32;
        self.bytes.extend_from_slice(b"cookie");
        let mut first = true;
        for i in 0..self.fields.len() {
            let f = self.fields[i];
            if self.span(f.name) != b"cookie" {
                continue;
            }
            if !first {
                self.bytes.extend_from_slice(b"; ");
            }
            first = false;
            let (at, len) = f.value;
            self.bytes.extend_from_within(at as usize..(at + len) as usize);
        }
        let joined = Field {
            name: (start, 6),
            value: (start + 6, self.bytes.len() as u32 - start - 6),
            checked: true,
        };
        let mut placed = false;
        self.fields.retain_mut(|f| {
            if self.bytes[f.name.0 as usize..(f.name.0 + f.name.1) as usize] != *b"cookie" {
                return true;
            }
            if placed {
                return false;
            }
            placed = true;
            *f = joined;
            true
        });
    }

    /// Checks a trailer section (§8.1): no pseudo-fields, lowercase token
    /// names, valid values.
    pub(crate) fn check_trailers(&self, fields: &[Field]) -> Result<(), Refusal> {
        for f in fields {
            let name = self.span(f.name);
            if name.first() == Some(&b':') {
                return Err(Refusal::Malformed("pseudo-field in trailers"));
            }
            if name.is_empty() || !name.iter().all(|&b| is_lower_tchar(b)) {
                return Err(Refusal::Malformed("field name not a lowercase token"));
            }
            // §8.2.1, as for the head's fields: the handler (and an
            // upstream, through the proxy) gets these.
            if !value_is_valid(self.span(f.value)) {
                return Err(Refusal::Malformed("invalid field value in trailers"));
            }
        }
        Ok(())
    }

    /// The pseudo-field's value as text (checked ASCII above).
    pub(crate) fn text(&self, f: Option<Field>) -> Option<&str> {
        f.and_then(|f| std::str::from_utf8(self.span(f.value)).ok())
    }

    /// Fills `out` with the fields as `httparse::Header`s; returns how many.
    pub(crate) fn fill<'a>(&'a self, out: &mut [httparse::Header<'a>]) -> usize {
        let mut n = 0;
        for f in &self.fields {
            if n == out.len() {
                break;
            }
            // Names were checked to be ASCII tokens.
            let Ok(name) = std::str::from_utf8(self.span(f.name)) else {
                continue;
            };
            out[n] = httparse::Header {
                name,
                value: self.span(f.value),
            };
            n += 1;
        }
        n
    }
}

/// Bytes a field name may hold in HTTP/2: token characters, no uppercase
/// (§8.2.1). A table: checked for every byte of every field name.
static LOWER_TCHAR: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_digit()
            || c.is_ascii_lowercase()
            || matches!(
                c,
                b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~'
            );
        b += 1;
    }
    t
};

fn is_lower_tchar(b: u8) -> bool {
    LOWER_TCHAR[usize::from(b)]
}

/// What `check_request` asks of every field before its meaning: a name
/// that is a pseudo-field or a lowercase token, and a valid value. The
/// HPACK decoder asks it once of each dynamic table entry.
pub(crate) fn field_is_valid(name: &[u8], value: &[u8]) -> bool {
    match name.first() {
        None => false,
        Some(b':') => value_is_valid(value),
        Some(_) => name.iter().all(|&b| is_lower_tchar(b)) && value_is_valid(value),
    }
}

/// §8.2.1: no NUL, CR or LF, and no whitespace at either end.
fn value_is_valid(v: &[u8]) -> bool {
    let edge = |b: Option<&u8>| !matches!(b, Some(b' ' | b'\t'));
    edge(v.first()) && edge(v.last()) && memchr::memchr3(0, b'\r', b'\n', v).is_none()
}

fn parse_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// A stream's request fields as `httparse::Header`s, for the `Request`
/// handed to the handler (HTTP/2's and HTTP/3's): on the stack up to 32,
/// else in a vector of at most `HEADERS_ARRAY_MAX`.
pub(crate) struct FieldArray<'h> {
    small: [httparse::Header<'h>; 32],
    large: Vec<httparse::Header<'h>>,
}

impl<'h> FieldArray<'h> {
    pub(crate) fn new() -> Self {
        FieldArray {
            small: [httparse::EMPTY_HEADER; 32],
            large: Vec::new(),
        }
    }

    /// `head`'s fields, filled in.
    pub(crate) fn fill(&mut self, head: &'h Head) -> &[httparse::Header<'h>] {
        let n_fields = head.fields.len();
        let headers: &mut [httparse::Header<'h>] = if n_fields <= self.small.len() {
            &mut self.small
        } else {
            self.large
                .resize(n_fields.min(crate::limits::HEADERS_ARRAY_MAX), httparse::EMPTY_HEADER);
            &mut self.large
        };
        let n = head.fill(headers);
        &headers[..n]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(fields: &[(&str, &str)]) -> Head {
        let mut h = Head::default();
        for (n, v) in fields {
            let at = h.bytes.len() as u32;
            h.bytes.extend_from_slice(n.as_bytes());
            h.bytes.extend_from_slice(v.as_bytes());
            h.fields.push(Field {
                name: (at, n.len() as u32),
                value: (at + n.len() as u32, v.len() as u32),
                checked: false,
            });
        }
        h
    }

    const BASE: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/"),
        (":authority", "a"),
    ];

    #[test]
    fn a_plain_request_passes_and_keeps_its_fields() {
        let mut h = head(&[
            BASE[0],
            BASE[1],
            BASE[2],
            BASE[3],
            ("accept", "*/*"),
            ("content-length", "0"),
        ]);
        h.check_request(false).unwrap();
        assert_eq!(h.fields.len(), 2);
        assert_eq!(h.text(h.path), Some("/"));
        assert_eq!(h.content_length, Some(0));
    }

    #[test]
    fn malformed_requests_are_refused() {
        let cases: &[&[(&str, &str)]] = &[
            &[BASE[1], BASE[2]],                                                 // no :method
            &[BASE[0], BASE[2]],                                                 // no :scheme
            &[BASE[0], BASE[1]],                                                 // no :path
            &[BASE[0], BASE[1], (":path", "")],                                  // empty :path
            &[BASE[0], BASE[0], BASE[1], BASE[2]],                               // repeated
            &[BASE[0], BASE[1], BASE[2], BASE[3], (":status", "200")],           // response pseudo
            &[BASE[0], BASE[1], BASE[2], BASE[3], (":foo", "x")],                // unknown pseudo
            &[BASE[0], BASE[1], ("x", "y"), BASE[2]],                            // pseudo after field
            &[BASE[0], BASE[1], BASE[2], BASE[3], ("X-Upper", "y")],             // uppercase
            &[BASE[0], BASE[1], BASE[2], BASE[3], ("connection", "keep-alive")], // connection-specific
            &[BASE[0], BASE[1], BASE[2], BASE[3], ("te", "gzip")],               // TE
            &[BASE[0], BASE[1], BASE[2], BASE[3], ("x", "a\r\nb")],              // CRLF in value
            &[BASE[0], BASE[1], BASE[2], BASE[3], ("x", " padded")],             // leading space
            &[BASE[0], BASE[1], BASE[2], BASE[3], ("content-length", "1x")],     // bad length
            &[BASE[0], BASE[1], (":path", "/a b"), BASE[3]],                     // space in path
            &[(":method", "CONNECT"), BASE[1], BASE[2], BASE[3]],                // CONNECT with :path
            &[BASE[0], BASE[1], BASE[2]],                                        // no :authority, no Host
            &[BASE[0], (":scheme", "http"), BASE[2]],                            // the same, http
        ];
        for fields in cases {
            assert!(head(fields).check_request(false).is_err(), "{fields:?}");
        }
        // Host instead of :authority names the origin (RFC 9113 §8.3.1).
        head(&[BASE[0], BASE[1], BASE[2], ("host", "a")])
            .check_request(false)
            .unwrap();
    }

    #[test]
    fn extended_connect_needs_the_setting_and_its_pseudo_fields() {
        let connect = (":method", "CONNECT");
        let ws = (":protocol", "websocket");
        let whole = [connect, ws, BASE[1], BASE[2], BASE[3]];
        // RFC 8441 §4: without our SETTINGS_ENABLE_CONNECT_PROTOCOL,
        // :protocol is an unknown pseudo-field.
        assert!(head(&whole).check_request(false).is_err());
        let mut h = head(&whole);
        h.check_request(true).unwrap();
        assert_eq!(h.text(h.protocol), Some("websocket"));
        assert_eq!(h.text(h.path), Some("/"));
        let refused: &[&[(&str, &str)]] = &[
            &[connect, ws, BASE[2], BASE[3]], // no :scheme
            &[connect, ws, BASE[1], BASE[3]], // no :path
            &[BASE[0], ws, BASE[1], BASE[2]], // :protocol on a GET
            &[connect, ws, ws, BASE[1], BASE[2]],
        ];
        for fields in refused {
            assert!(head(fields).check_request(true).is_err(), "{fields:?}");
        }
        // A plain CONNECT keeps §8.5's form.
        head(&[connect, BASE[3]]).check_request(true).unwrap();
    }

    #[test]
    fn cookies_are_joined() {
        let mut h = head(&[
            BASE[0],
            BASE[1],
            BASE[2],
            BASE[3],
            ("cookie", "a=1"),
            ("x", "y"),
            ("cookie", "b=2"),
        ]);
        h.check_request(false).unwrap();
        let mut out = [httparse::EMPTY_HEADER; 8];
        let n = h.fill(&mut out);
        assert_eq!(n, 2);
        assert_eq!((out[0].name, out[0].value), ("cookie", &b"a=1; b=2"[..]));
        assert_eq!(out[1].name, "x");
    }

    #[test]
    fn the_name_table_is_the_token_rule_without_uppercase() {
        for b in 0..=255u8 {
            let want = crate::codec::head::is_tchar(b) && !b.is_ascii_uppercase();
            assert_eq!(is_lower_tchar(b), want, "byte {b:#x}");
        }
    }
}
