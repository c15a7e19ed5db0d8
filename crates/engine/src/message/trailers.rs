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
}
