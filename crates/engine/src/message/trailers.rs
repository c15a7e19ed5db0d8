//! A response's trailer fields (RFC 9110 §6.5): a field block sent after
//! a streamed body's last byte. HTTP/1.1 sends it after the last chunk,
//! and only when the answer is chunked and the client said `TE: trailers`
//! (RFC 9112 §7.1.2; otherwise it is dropped, as nginx drops its own
//! trailers for such clients); HTTP/2 as a last HEADERS frame with
//! END_STREAM (RFC 9113 §8.1); HTTP/3 as a HEADERS frame after the DATA
//! (RFC 9114 §4.1). gRPC's `grpc-status` travels this way.
//!
//! "Many fields cannot be processed outside the header section because
//! their evaluation is necessary prior to receiving the content" (RFC
//! 9110 §6.5.1): framing, routing, connection-specific fields and the
//! others listed in `FORBIDDEN` are never sent in trailers. A handler that
//! names one is refused (`Trailers::new`); an upstream's are dropped
//! (`Trailers::relayed`). Names are kept lowercase: HTTP/2 and HTTP/3
//! require it, and HTTP/1.1 field names are case-insensitive.

use crate::codec::head::{is_token, trim_ows};

/// Fields a trailer section never carries (RFC 9110 §6.5.1, §6.5.2):
/// message framing, routing, request modifiers, authentication, response
/// control data, what says how to process the content, and the
/// connection-specific fields (RFC 9113 §8.2.2). Sorted by nothing: a
/// trailer section is rare and short.
const FORBIDDEN: &[&[u8]] = &[
    b"age",
    b"authorization",
    b"cache-control",
    b"connection",
    b"content-encoding",
    b"content-length",
    b"content-range",
    b"content-type",
    b"date",
    b"expect",
    b"expires",
    b"host",
    b"keep-alive",
    b"location",
    b"max-forwards",
    b"pragma",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"proxy-connection",
    b"range",
    b"retry-after",
    b"server",
    b"set-cookie",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
    b"vary",
    b"www-authenticate",
];

/// Whether `name` may not be sent as a trailer field (case-blind).
/// Pseudo-fields (`:status`) are not tokens, so never reach this.
pub(crate) fn is_forbidden(name: &[u8]) -> bool {
    FORBIDDEN.iter().any(|f| f.eq_ignore_ascii_case(name))
}

/// Trailer fields to send after a streamed body ([`crate::body::Sender::end_with_trailers`]).
///
/// ```
/// use peregrine::Trailers;
///
/// let t = Trailers::new(&[("grpc-status", "0"), ("X-Checksum", "abc")]).unwrap();
/// assert_eq!(t.as_bytes(), b"grpc-status: 0\r\nx-checksum: abc\r\n");
/// // Framing and routing fields are never trailers (RFC 9110 §6.5.1).
/// assert!(Trailers::new(&[("Content-Length", "5")]).is_err());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trailers(Vec<u8>);

impl Trailers {
    /// Checks and joins `fields`: an invalid name or value, or a field
    /// that may not be a trailer (`Content-Length`, `Host`, `TE`,
    /// `Connection`, ...), is an error naming it.
    pub fn new(fields: &[(&str, &str)]) -> Result<Trailers, String> {
        let mut t = Trailers::default();
        for (name, value) in fields {
            if !is_token(name.as_bytes()) {
                return Err(format!("invalid trailer field name {name:?}"));
            }
            if !crate::response::is_valid_value(value.as_bytes()) {
                return Err(format!("invalid value for trailer field {name}"));
            }
            if is_forbidden(name.as_bytes()) {
                return Err(format!("{name} may not be sent as a trailer field (RFC 9110 §6.5.1)"));
            }
            t.push(name.as_bytes(), value.as_bytes());
        }
        Ok(t)
    }

    /// An upstream's trailer section as the chunked decoder kept it
    /// (`name: value` lines, each ending in CRLF, checked by it): the
    /// forbidden fields and those its answer's `Connection` named are
    /// dropped, values trimmed of their whitespace.
    pub(crate) fn relayed(section: &[u8], named: &[&[u8]]) -> Trailers {
        let mut t = Trailers::default();
        for line in section.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            let (name, value) = (&line[..colon], trim_ows(&line[colon + 1..]));
            if !is_token(name)
                || !crate::response::is_valid_value(value)
                || is_forbidden(name)
                || named.iter().any(|n| n.eq_ignore_ascii_case(name))
            {
                continue;
            }
            t.push(name, value);
        }
        t
    }

    /// A client's trailer section as the engine received it, for its
    /// handler ([`crate::Request::trailers`], [`crate::body::BodyReader::trailers`]):
    /// HTTP/1.1's as the chunked decoder kept it, HTTP/2's and HTTP/3's
    /// trailing HEADERS as `(name, value)` pairs. The fields that may not
    /// be trailers are dropped, as from an upstream (a handler that ends
    /// its answer with what it was sent never sends one of them); `None`
    /// when nothing is left.
    pub(crate) fn received<'f>(fields: impl Iterator<Item = (&'f [u8], &'f [u8])>) -> Option<Trailers> {
        let mut t = Trailers::default();
        for (name, value) in fields {
            let value = trim_ows(value);
            if is_token(name) && crate::response::is_valid_value(value) && !is_forbidden(name) {
                t.push(name, value);
            }
        }
        (!t.is_empty()).then_some(t)
    }

    /// A chunked body's kept trailer section (`name: value\r\n` lines,
    /// checked by the decoder) as [`Trailers::received`] keeps it.
    pub(crate) fn received_section(section: &[u8]) -> Option<Trailers> {
        Trailers::received(section.split(|&b| b == b'\n').filter_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line.iter().position(|&b| b == b':')?;
            Some((&line[..colon], &line[colon + 1..]))
        }))
    }

    /// The fields of a client's trailer section that go on to an upstream
    /// (`proxy`): less, besides those no trailer carries, what a request's
    /// trailers may not change downstream (RFC 9110 §6.5.1: "request
    /// modifiers", authentication, "how to process the content"): every
    /// `Content-*`, every `If-*` conditional, `Cookie`, every `Proxy-*`,
    /// the fields this hop writes afresh (`Via`, `Forwarded`,
    /// `X-Forwarded-*`, `X-Request-ID`: a trailer must not undo the
    /// head's), and those the client's `Connection` named (`named`,
    /// lowercase). `None` when nothing is left: the request then goes as
    /// it would without trailers.
    pub(crate) fn forwarded(&self, named: &[Vec<u8>]) -> Option<Trailers> {
        let mut t = Trailers::default();
        for (name, value) in self.lines() {
            let starts = |p: &[u8]| name.len() >= p.len() && name[..p.len()].eq_ignore_ascii_case(p);
            let dropped = starts(b"content-")
                || starts(b"if-")
                || starts(b"proxy-")
                || starts(b"x-forwarded-")
                || [&b"cookie"[..], b"via", b"forwarded", b"x-request-id"]
                    .iter()
                    .any(|n| n.eq_ignore_ascii_case(name))
                || named.iter().any(|n| n.eq_ignore_ascii_case(name));
            if !dropped {
                t.push(name, value);
            }
        }
        (!t.is_empty()).then_some(t)
    }

    /// The fields as `(name, value)` byte pairs, names lowercase.
    fn lines(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.0
            .split(|&b| b == b'\n')
            .filter_map(|line| line.strip_suffix(b"\r"))
            .filter_map(|line| {
                let colon = line.iter().position(|&b| b == b':')?;
                Some((&line[..colon], line.get(colon + 2..).unwrap_or_default()))
            })
    }

    /// The fields in order, as `(name, raw value)`, names lowercase.
    ///
    /// ```
    /// use peregrine::Trailers;
    ///
    /// let t = Trailers::new(&[("X-Checksum", "abc"), ("grpc-status", "0")]).unwrap();
    /// let fields: Vec<_> = t.fields().collect();
    /// assert_eq!(fields, [("x-checksum", &b"abc"[..]), ("grpc-status", &b"0"[..])]);
    /// assert_eq!(t.field("X-CHECKSUM"), Some("abc"));
    /// ```
    pub fn fields(&self) -> impl Iterator<Item = (&str, &[u8])> {
        // Names are tokens: ASCII, so always UTF-8.
        self.lines()
            .filter_map(|(name, value)| Some((std::str::from_utf8(name).ok()?, value)))
    }

    /// The value of the first field named `name` (case-insensitive), if
    /// it is valid UTF-8.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    fn push(&mut self, name: &[u8], value: &[u8]) {
        self.0.extend(name.iter().map(u8::to_ascii_lowercase));
        self.0.extend_from_slice(b": ");
        self.0.extend_from_slice(value);
        self.0.extend_from_slice(b"\r\n");
    }

    /// The fields as complete `name: value\r\n` lines, names lowercase.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// No field.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_fields_are_refused_from_handlers_and_dropped_from_upstreams() {
        for name in [
            "Content-Length",
            "transfer-encoding",
            "Host",
            "TE",
            "Connection",
            "Trailer",
            "Keep-Alive",
        ] {
            assert!(Trailers::new(&[(name, "1")]).is_err(), "{name}");
        }
        assert!(
            Trailers::new(&[(":status", "200")]).is_err(),
            "a pseudo-field is no token"
        );
        assert!(
            Trailers::new(&[("x-a", "b\r\nc: d")]).is_err(),
            "no line break in a value"
        );
        let section =
            b"Grpc-Status: 0\r\nContent-Length: 9\r\nHost: evil\r\nX-Hop: 1\r\nX-Sum:  ab \t\r\nte: trailers\r\n";
        let t = Trailers::relayed(section, &[b"x-hop"]);
        assert_eq!(t.as_bytes(), b"grpc-status: 0\r\nx-sum: ab\r\n");
        assert!(Trailers::relayed(b"Content-Type: x\r\n", &[]).is_empty());
    }

    /// A client's trailers: the handler gets them less the forbidden
    /// fields; an upstream also less the request's own (issue 26's list:
    /// `Content-*`, `If-*`, `Cookie`, `Proxy-*`, this hop's fields, those
    /// the client's `Connection` named).
    #[test]
    fn a_clients_trailers_reach_the_handler_and_fewer_the_upstream() {
        let section = b"X-Checksum:  ab \r\nHost: evil\r\nContent-Length: 9\r\nContent-MD5: x\r\nIf-Match: *\r\n\
            Cookie: a=1\r\nProxy-Foo: 1\r\nX-Forwarded-For: 1.2.3.4\r\nVia: 1.1 x\r\nForwarded: for=x\r\n\
            X-Request-ID: 7\r\nX-Hop: 1\r\nAuthorization: x\r\nTE: trailers\r\nGrpc-Status: 0\r\n";
        let t = Trailers::received_section(section).unwrap();
        assert_eq!(
            t.as_bytes(),
            &b"x-checksum: ab\r\ncontent-md5: x\r\nif-match: *\r\ncookie: a=1\r\nproxy-foo: 1\r\n\
               x-forwarded-for: 1.2.3.4\r\nvia: 1.1 x\r\nforwarded: for=x\r\nx-request-id: 7\r\nx-hop: 1\r\n\
               grpc-status: 0\r\n"[..]
        );
        assert_eq!(t.field("X-CHECKSUM"), Some("ab"));
        assert_eq!(t.fields().count(), 11);
        let on = t.forwarded(&[b"x-hop".to_vec()]).unwrap();
        assert_eq!(on.as_bytes(), b"x-checksum: ab\r\ngrpc-status: 0\r\n");
        // Nothing left: the request goes as it would without trailers.
        assert!(Trailers::received_section(b"Content-Length: 1\r\n").is_none());
        let cookie_only = Trailers::received_section(b"Cookie: a\r\n").unwrap();
        assert!(cookie_only.forwarded(&[]).is_none());
        // HTTP/2's and HTTP/3's pairs, as their sessions checked them.
        let pairs: [(&[u8], &[u8]); 3] = [(b"x-a", b"1"), (b"te", b"trailers"), (b"x-b", b"")];
        let t = Trailers::received(pairs.into_iter()).unwrap();
        assert_eq!(t.as_bytes(), b"x-a: 1\r\nx-b: \r\n");
        assert_eq!(t.field("x-b"), Some(""));
    }
}
