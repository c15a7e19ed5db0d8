//! The plain-HTTP listener's only answer: 308 to the same path and query
//! over HTTPS (`Server::redirect_http`). 308 rather than 301 so that a
//! POST stays a POST (RFC 9110 §15.4.9).
//!
//! The host comes from the request (`Host`, or an absolute-form target),
//! so it is checked before it goes into `Location`: a DNS name or an IP
//! literal, nothing else; anything else gets a 400.

use crate::handler::{BodyUse, Handler, Reply};
use crate::request::Request;
use crate::response::Response;

/// Answers every request with a redirect to `https://HOST[:port]TARGET`.
pub(crate) struct HttpsRedirect {
    /// The TLS listener's port; left out of `Location` when it is 443.
    pub(crate) port: u16,
}

impl Handler for HttpsRedirect {
    /// The redirect is known from the head: a body is never read.
    fn body_use(&self, _req: &Request<'_>) -> BodyUse {
        BodyUse::Ignore
    }

    fn call(&self, req: &Request<'_>) -> Reply {
        let Some(host) = req.host().and_then(host_name) else {
            return Reply::Now(
                Response::new(400)
                    .with_content_type("text/plain; charset=utf-8")
                    .with_body(&b"400 Bad Request: the Host field names no host to redirect to over https\n"[..]),
            );
        };
        let mut location = String::with_capacity(16 + host.len() + req.target().len());
        location.push_str("https://");
        location.push_str(host);
        if self.port != 443 {
            location.push(':');
            location.push_str(itoa::Buffer::new().format(self.port));
        }
        let path = crate::request::origin_form(req.target());
        if !path.starts_with('/') {
            location.push('/');
        }
        location.push_str(path);
        Reply::Now(
            Response::new(308)
                .with_header("Location", location)
                .with_content_type("text/plain; charset=utf-8")
                .with_body(&b"308 Permanent Redirect: use https\n"[..]),
        )
    }
}

/// The host of a `Host` value without its port, if it is a plausible DNS
/// name (letters, digits, `-`, `.`, `_`) or a bracketed IPv6 literal.
fn host_name(host: &str) -> Option<&str> {
    let name = if host.starts_with('[') {
        let end = host.find(']')?;
        let inner = &host[1..end];
        let rest = &host[end + 1..];
        if !(rest.is_empty() || is_port(rest.strip_prefix(':')?)) {
            return None;
        }
        if inner.is_empty() || !inner.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
            return None;
        }
        &host[..=end]
    } else {
        let name = match host.split_once(':') {
            Some((name, port)) if is_port(port) => name,
            Some(_) => return None,
            None => host,
        };
        // DNS labels (RFC 1035 §2.3.4, with `_` as found in the wild and
        // one trailing dot of a fully qualified name): 1 to 63 bytes each,
        // no `-` at either end, so `a..b`, `.` and `-x` are no host.
        let labels = name.strip_suffix('.').unwrap_or(name);
        let label_ok = |l: &str| {
            (1..=63).contains(&l.len())
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if !labels.split('.').all(label_ok) {
            return None;
        }
        name
    };
    (!name.is_empty() && name.len() <= 254).then_some(name)
}

fn is_port(s: &str) -> bool {
    !s.is_empty() && s.len() <= 5 && s.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::origin_form;

    #[test]
    fn hosts_are_checked_and_stripped_of_their_port() {
        let table: &[(&str, Option<&str>)] = &[
            ("example.com", Some("example.com")),
            ("example.com:8080", Some("example.com")),
            ("EXAMPLE.com:80", Some("EXAMPLE.com")),
            ("127.0.0.1:80", Some("127.0.0.1")),
            ("[::1]:8080", Some("[::1]")),
            ("[::1]", Some("[::1]")),
            ("", None),
            (":80", None),
            ("example.com:", None),
            ("example.com:80:80", None),
            ("example.com:http", None),
            ("evil.com/x", None),
            ("evil.com\\x", None),
            ("a b", None),
            ("user@evil.com", None),
            ("[::1", None),
            ("[::1]x", None),
            ("[zz]", None),
            ("[]", None),
            ("example.com.", Some("example.com.")),
            ("xn--bcher-kva.example", Some("xn--bcher-kva.example")),
            ("_acme.example", Some("_acme.example")),
            ("a..b", None),
            (".", None),
            ("-", None),
            ("-a-.com", None),
            (".example.com", None),
            ("example..", None),
        ];
        for (given, want) in table {
            assert_eq!(host_name(given), *want, "{given:?}");
        }
    }

    #[test]
    fn targets_become_path_and_query() {
        assert_eq!(origin_form("/a/b?c=d"), "/a/b?c=d");
        assert_eq!(origin_form("http://h.test/a?b"), "/a?b");
        assert_eq!(origin_form("http://h.test"), "/");
        assert_eq!(origin_form("http://h.test?q"), "?q");
        assert_eq!(origin_form("*"), "/");
        assert_eq!(origin_form("h.test:443"), "/");
    }
}
