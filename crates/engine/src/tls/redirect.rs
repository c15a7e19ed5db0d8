//! The plain-HTTP listener's only answer: 308 to the same path and query
//! over HTTPS (`Server::redirect_http`). 308 rather than 301 so that a
//! POST stays a POST (RFC 9110 §15.4.9).
//!
//! The host comes from the request (`Host`, or an absolute-form target),
//! so it is checked before it goes into `Location`: put in the one normal
//! form of hosts (`host::normalize`: a DNS name as A-labels in lowercase,
//! or an IP address), as a site is chosen by it; anything else gets a 400.

use crate::handler::{BodyUse, Handler, Reply};
use crate::request::Request;
use crate::response::Response;

/// Answers every request with a redirect to `https://HOST[:port]TARGET`;
/// with ACME, also HTTP-01 challenges, and 503 for a name still waiting
/// for its first certificate.
pub(crate) struct HttpsRedirect {
    /// The TLS listener's port; left out of `Location` when it is 443.
    pub(crate) port: u16,
    /// The certificates, when some come from ACME (`TlsConfig::acme`).
    pub(crate) acme: Option<super::TlsConfig>,
}

/// Where HTTP-01 challenges are asked (RFC 8555 §8.3).
const CHALLENGE_PREFIX: &str = "/.well-known/acme-challenge/";

/// How long a client is told to wait for a site whose certificate is
/// being ordered: a minute, the first retry of the ACME process's back-off.
const WAITING_RETRY_AFTER_SECS: &str = "60";

/// An ACME token as this server answers one: `^[A-Za-z0-9_-]{22,128}$`
/// (base64url, RFC 8555 §8.3 asks for at least 128 bits).
pub(crate) fn is_token(token: &str) -> bool {
    (22..=128).contains(&token.len()) && (token.bytes()).all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl Handler for HttpsRedirect {
    /// The redirect is known from the head: a body is never read.
    fn body_use(&self, _req: &Request<'_>) -> BodyUse {
        BodyUse::Ignore
    }

    fn call(&self, req: &Request<'_>) -> Reply {
        let mut buf = crate::host::HostBuf::new();
        let Some(host) = req.host().and_then(|h| host_name(h, &mut buf)) else {
            return Reply::Now(
                Response::new(400)
                    .with_content_type("text/plain; charset=utf-8")
                    .with_body(&b"400 Bad Request: the Host field names no host to redirect to over https\n"[..]),
            );
        };
        if let Some(tls) = &self.acme {
            let store = tls.store();
            if let Some(token) = req.path().strip_prefix(CHALLENGE_PREFIX) {
                return Reply::Now(match store.http01.get(token).filter(|_| is_token(token)) {
                    Some(ka) => Response::new(200)
                        .with_content_type("application/octet-stream")
                        .with_body(ka.as_bytes().to_vec()),
                    None => Response::new(404)
                        .with_content_type("text/plain; charset=utf-8")
                        .with_body(&b"404 Not Found: no such ACME challenge\n"[..]),
                });
            }
            if store.is_waiting(&host) {
                return Reply::Now(
                    Response::new(503)
                        .with_header("Retry-After", WAITING_RETRY_AFTER_SECS)
                        .with_content_type("text/plain; charset=utf-8")
                        .with_body(&b"503 Service Unavailable: this site's certificate is being obtained\n"[..]),
                );
            }
        }
        let mut port = itoa::Buffer::new();
        let port = (self.port != 443).then(|| port.format(self.port));
        let location = crate::request::absolute_url("https", &host, port, req.target());
        Reply::Now(
            Response::new(308)
                .with_header("Location", location)
                .with_content_type("text/plain; charset=utf-8")
                .with_body(&b"308 Permanent Redirect: use https\n"[..]),
        )
    }
}

/// The host of a `Host` value in normal form (`host::normalize`, as a
/// site is chosen by it), without its port; `None` if it is no host.
fn host_name(host: &str, buf: &mut crate::host::HostBuf) -> Option<String> {
    crate::host::normalize_in(host.as_bytes(), buf)
        .ok()
        .map(|name| name.as_str().to_owned())
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
            ("EXAMPLE.com:80", Some("example.com")),
            ("127.0.0.1:80", Some("127.0.0.1")),
            ("[::1]:8080", Some("[::1]")),
            ("[::1]", Some("[::1]")),
            ("", None),
            (":80", None),
            ("example.com:", Some("example.com")), // an empty port (RFC 3986 §3.2.3)
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
            ("example.com.", Some("example.com")),
            ("bücher.example", Some("xn--bcher-kva.example")),
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
            let mut buf = crate::host::HostBuf::new();
            assert_eq!(host_name(given, &mut buf).as_deref(), *want, "{given:?}");
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
