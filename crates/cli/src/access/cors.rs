//! A route's CORS policy (issue 27; the Fetch standard's CORS protocol):
//! which origins may read its answers from a script, with which methods
//! and request fields, what they may read, and how long a preflight may
//! be cached.
//!
//! - An origin is `scheme://host[:port]`, compared exactly (the scheme,
//!   host and port a browser serialises; a default port is left out, as
//!   a browser leaves it out). `*` is any origin but `null` (sandboxed
//!   documents, `file:` pages and some redirects all send `null`, so a
//!   wildcard that matched it would match them all); `null` can still be
//!   listed on its own. `*` with `credentials = true` is refused when read:
//!   browsers refuse that answer, and echoing every origin instead would
//!   hand every site the user's cookies.
//! - A preflight (`OPTIONS` with `Origin` and
//!   `Access-Control-Request-Method`) is answered here, before the
//!   handler: 204 with the `Access-Control-Allow-*` fields when the
//!   origin, method and fields are allowed, else 403 naming what was not
//!   (the browser fails the preflight either way; the body tells whoever
//!   reads the network panel).
//! - Any other request goes to the handler; if its origin is allowed, the
//!   answer gets `Access-Control-Allow-Origin` (and `-Credentials`,
//!   `-Expose-Headers` when configured). A proxy route's answers are
//!   another server's: its own CORS fields are dropped first, whatever
//!   the origin (`decorate_relayed`).
//! - Every answer of the route gets `Vary: Origin` (preflights also
//!   `Vary: Access-Control-Request-Method, Access-Control-Request-Headers`):
//!   whether the fields are there depends on the request's `Origin`, so a
//!   shared cache must not give one origin's answer to another. 304s and
//!   refusals included.

use peregrine::{Request, Response};

/// A route's `cors = { ... }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cors {
    /// Origins in their serialised form (lowercase, no default port);
    /// `*` is any but `null`.
    pub(crate) origins: Vec<String>,
    /// Methods a preflight may ask for (`Access-Control-Allow-Methods`),
    /// case-sensitive as methods are; `*`: any (without credentials).
    pub(crate) methods: Vec<String>,
    /// Request fields a preflight may ask for
    /// (`Access-Control-Allow-Headers`), lowercase; `*`: any (without
    /// credentials).
    pub(crate) headers: Vec<String>,
    /// Response fields a script may read beyond the safelisted ones
    /// (`Access-Control-Expose-Headers`).
    pub(crate) expose: Vec<String>,
    /// Whether a script may send cookies and read the answer
    /// (`Access-Control-Allow-Credentials: true`).
    pub(crate) credentials: bool,
    /// How long a browser may keep a preflight's answer
    /// (`Access-Control-Max-Age`, seconds); `None`: its own default (5 s).
    pub(crate) max_age: Option<u32>,
}

/// Methods a preflight may ask for when `methods` is not given: the
/// CORS-safelisted ones, which a simple request may use anyway.
pub(crate) const METHODS_DEFAULT: &[&str] = &["GET", "HEAD", "POST"];

/// The longest `max-age` taken: a day, beyond which Firefox caps it anyway
/// (Chromium at 2 hours).
pub(crate) const MAX_AGE_MAX_S: u32 = 86_400;

impl Cors {
    /// A policy from its keys as written; refuses what browsers would
    /// refuse or what would mean more than it says.
    pub(crate) fn new(
        origins: &[String],
        methods: Option<&[String]>,
        headers: &[String],
        expose: &[String],
        credentials: bool,
        max_age: Option<i64>,
    ) -> Result<Cors, String> {
        if origins.is_empty() {
            return Err(
                "origins: an empty list: give the origins that may read this route, e.g. [\"https://app.example.com\"]"
                    .into(),
            );
        }
        let origins = origins.iter().map(|o| origin(o)).collect::<Result<Vec<_>, _>>()?;
        let methods: Vec<String> = match methods {
            Some([]) => return Err("methods: an empty list".into()),
            Some(m) => m.to_vec(),
            None => METHODS_DEFAULT.iter().map(|m| m.to_string()).collect(),
        };
        for m in &methods {
            if m != "*" && !is_token(m) {
                return Err(format!("methods: {m:?} is not a method"));
            }
        }
        for (key, list) in [("headers", headers), ("expose", expose)] {
            for h in list {
                if h != "*" && !is_token(h) {
                    return Err(format!("{key}: {h:?} is not a field name"));
                }
            }
        }
        if credentials {
            for (key, list) in [
                ("origins", &origins),
                ("methods", &methods),
                ("headers", &headers.to_vec()),
            ] {
                if list.iter().any(|v| v == "*") {
                    return Err(format!(
                        "{key}: \"*\" with credentials = true: browsers take `*` literally when credentials are \
                         allowed (and a wildcard origin with cookies would let every site read the user's \
                         answers): list the {key} instead"
                    ));
                }
            }
            if expose.iter().any(|v| v == "*") {
                return Err(
                    "expose: \"*\" with credentials = true: browsers take `*` literally then; list the \
                            fields instead"
                        .into(),
                );
            }
        }
        let max_age = match max_age {
            None => None,
            Some(s) => Some(
                u32::try_from(s)
                    .ok()
                    .filter(|s| *s <= MAX_AGE_MAX_S)
                    .ok_or_else(|| format!("max-age {s}: seconds from 0 to {MAX_AGE_MAX_S}"))?,
            ),
        };
        Ok(Cors {
            origins,
            methods,
            headers: headers.iter().map(|h| h.to_ascii_lowercase()).collect(),
            expose: expose.to_vec(),
            credentials,
            max_age,
        })
    }

    /// What to answer `Access-Control-Allow-Origin` for a request's
    /// `Origin`: the origin itself, `*` for the wildcard (without
    /// credentials), or `None`: not allowed.
    pub(crate) fn allowed(&self, origin: &str) -> Option<String> {
        if self.origins.iter().any(|o| o.eq_ignore_ascii_case(origin)) {
            return Some(origin.to_owned());
        }
        let wild = origin != "null" && self.origins.iter().any(|o| o == "*");
        wild.then(|| "*".to_owned())
    }

    /// Whether `req` is a preflight: `OPTIONS` with `Origin` and
    /// `Access-Control-Request-Method`. An `OPTIONS` without them is an
    /// ordinary request, for the handler.
    pub(crate) fn is_preflight(req: &Request<'_>) -> bool {
        req.method() == "OPTIONS"
            && req.header("origin").is_some()
            && req.header("access-control-request-method").is_some()
    }

    /// The answer to a preflight with this `Origin`, requested method
    /// and requested fields (`Access-Control-Request-Headers`, a list).
    pub(crate) fn preflight(&self, origin: &str, method: &str, fields: Option<&str>) -> Response {
        let vary = "Origin, Access-Control-Request-Method, Access-Control-Request-Headers";
        let refuse = |why: String| {
            Response::new(403)
                .with_header("Vary", vary)
                .with_content_type("text/plain; charset=utf-8")
                .with_body(format!("403 Forbidden: CORS preflight refused: {why}\n"))
        };
        let Some(allow_origin) = self.allowed(origin) else {
            return refuse(format!("origin {origin} is not allowed"));
        };
        if !self.methods.iter().any(|m| m == "*" || m == method) {
            return refuse(format!("method {method} is not allowed"));
        }
        let any_field = self.headers.iter().any(|h| h == "*");
        for field in fields
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|f| !f.is_empty())
        {
            if !any_field && !self.headers.iter().any(|h| h.eq_ignore_ascii_case(field)) {
                return refuse(format!("request field {field} is not allowed"));
            }
        }
        let mut resp = Response::new(204)
            .with_header("Vary", vary)
            .with_header("Access-Control-Allow-Origin", allow_origin)
            .with_header("Access-Control-Allow-Methods", self.methods.join(", "));
        if !self.headers.is_empty() {
            resp = resp.with_header("Access-Control-Allow-Headers", self.headers.join(", "));
        }
        if self.credentials {
            resp = resp.with_header("Access-Control-Allow-Credentials", "true");
        }
        if let Some(secs) = self.max_age {
            resp = resp.with_header("Access-Control-Max-Age", secs.to_string());
        }
        resp
    }

    /// `resp`, an answer to a request with this `Origin` (if any), with
    /// `Vary: Origin` and, for an allowed origin, the
    /// `Access-Control-*` fields.
    pub(crate) fn decorate(&self, resp: Response, origin: Option<&str>) -> Response {
        self.allow(resp.with_header("Vary", "Origin"), origin)
    }

    /// `decorate` for an answer whose fields are another server's (a
    /// proxy route's upstream, or its auth service): its own
    /// `Access-Control-*` fields go first, for the route's policy alone
    /// says who may read the answer (two `Access-Control-Allow-Origin`
    /// fields make a browser refuse it; an upstream's `*` must not open
    /// it to an origin the route does not allow), and `Origin` joins the
    /// `Vary` it has (`Response::with_vary`: not listed twice).
    pub(crate) fn decorate_relayed(&self, resp: Response, origin: Option<&str>) -> Response {
        self.allow(resp.without_headers(ANSWER_FIELDS).with_vary("Origin"), origin)
    }

    /// `resp` with the `Access-Control-*` fields `origin` gets, if it is
    /// allowed.
    fn allow(&self, mut resp: Response, origin: Option<&str>) -> Response {
        let Some(allow_origin) = origin.and_then(|o| self.allowed(o)) else {
            return resp;
        };
        resp = resp.with_header("Access-Control-Allow-Origin", allow_origin);
        if self.credentials {
            resp = resp.with_header("Access-Control-Allow-Credentials", "true");
        }
        if !self.expose.is_empty() {
            resp = resp.with_header("Access-Control-Expose-Headers", self.expose.join(", "));
        }
        resp
    }
}

/// The CORS fields of an answer (the Fetch standard's CORS protocol),
/// those of a preflight's included: a route with `cors` writes them, and
/// an upstream's of these names do not pass (`Cors::decorate_relayed`).
pub(crate) const ANSWER_FIELDS: &[&str] = &[
    "access-control-allow-origin",
    "access-control-allow-credentials",
    "access-control-expose-headers",
    "access-control-allow-methods",
    "access-control-allow-headers",
    "access-control-max-age",
];

/// An origin as written in `origins`, in its serialised form: `*`, `null`,
/// or `scheme://host[:port]` lowercased, without a default port, path,
/// user or trailing slash (a browser's `Origin` never has them, so one
/// written with them would never match).
fn origin(written: &str) -> Result<String, String> {
    if written == "*" || written == "null" {
        return Ok(written.to_owned());
    }
    let form = "expected scheme://host[:port], e.g. https://app.example.com or http://localhost:3000";
    let lower = written.to_ascii_lowercase();
    let Some((scheme, rest)) = lower.split_once("://") else {
        return Err(format!("origins: {written:?}: {form}"));
    };
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !scheme_ok {
        return Err(format!("origins: {written:?}: {scheme:?} is not a scheme ({form})"));
    }
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', '*', ' ']) {
        return Err(format!(
            "origins: {written:?}: an origin is only a scheme, a host and a port (no path, not even a \
             trailing /; no user; no wildcard in the host): {form}"
        ));
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, Some(p)),
        _ => (rest, None),
    };
    if host.is_empty() {
        return Err(format!("origins: {written:?}: no host ({form})"));
    }
    let default_port = match scheme {
        "http" => Some("80"),
        "https" => Some("443"),
        _ => None,
    };
    match port {
        Some(p) if p.parse::<u16>().is_err() => Err(format!("origins: {written:?}: {p:?} is not a port ({form})")),
        Some(p) if Some(p) == default_port => Ok(format!("{scheme}://{host}")),
        Some(p) => Ok(format!("{scheme}://{host}:{p}")),
        None => Ok(lower),
    }
}

/// A token (RFC 9110 §5.6.2): what a method or field name is.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    fn cors(origins: &[&str], credentials: bool) -> Cors {
        Cors::new(
            &own(origins),
            None,
            &own(&["x-token"]),
            &own(&["etag"]),
            credentials,
            Some(600),
        )
        .unwrap()
    }

    #[test]
    fn origins_are_written_as_browsers_send_them() {
        assert_eq!(
            origin("HTTPS://App.Example.com:443").unwrap(),
            "https://app.example.com"
        );
        assert_eq!(origin("http://localhost:3000").unwrap(), "http://localhost:3000");
        assert_eq!(origin("http://[::1]:8080").unwrap(), "http://[::1]:8080");
        assert_eq!(origin("http://[::1]").unwrap(), "http://[::1]");
        for bad in [
            "app.example.com",
            "https://app.example.com/",
            "https://app.example.com/x",
            "https://*.example.com",
            "https://u@example.com",
            "https://example.com:99999",
            "https://",
        ] {
            assert!(origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn origins_match_exactly_and_the_wildcard_never_matches_null() {
        let c = cors(&["https://app.example.com", "http://localhost:3000"], false);
        assert_eq!(
            c.allowed("https://app.example.com").as_deref(),
            Some("https://app.example.com")
        );
        assert_eq!(
            c.allowed("http://localhost:3000").as_deref(),
            Some("http://localhost:3000")
        );
        for no in [
            "http://app.example.com",
            "https://app.example.com:8443",
            "https://evil.example.com",
            "null",
        ] {
            assert_eq!(c.allowed(no), None, "{no}");
        }
        let any = cors(&["*"], false);
        assert_eq!(any.allowed("https://x.test").as_deref(), Some("*"));
        assert_eq!(any.allowed("null"), None);
        let null = cors(&["null"], false);
        assert_eq!(null.allowed("null").as_deref(), Some("null"));
    }

    #[test]
    fn a_wildcard_with_credentials_is_refused() {
        let err = Cors::new(&own(&["*"]), None, &[], &[], true, None).unwrap_err();
        assert!(err.contains("\"*\" with credentials"), "{err}");
        let err = Cors::new(&own(&["https://a.test"]), None, &own(&["*"]), &[], true, None).unwrap_err();
        assert!(err.starts_with("headers:"), "{err}");
        assert!(Cors::new(&[], None, &[], &[], false, None).is_err());
        assert!(Cors::new(&own(&["*"]), None, &[], &[], false, Some(86_401)).is_err());
        assert!(Cors::new(&own(&["*"]), Some(&own(&["GE T"])), &[], &[], false, None).is_err());
    }

    fn field<'a>(resp: &'a Response, name: &str) -> Option<&'a str> {
        resp.header(name)
    }

    #[test]
    fn an_allowed_preflight_gets_204_with_the_fields() {
        let c = cors(&["https://app.example.com"], true);
        let r = c.preflight("https://app.example.com", "POST", Some("X-Token"));
        assert_eq!(r.status(), 204);
        assert_eq!(
            field(&r, "access-control-allow-origin"),
            Some("https://app.example.com")
        );
        assert_eq!(field(&r, "access-control-allow-methods"), Some("GET, HEAD, POST"));
        assert_eq!(field(&r, "access-control-allow-headers"), Some("x-token"));
        assert_eq!(field(&r, "access-control-allow-credentials"), Some("true"));
        assert_eq!(field(&r, "access-control-max-age"), Some("600"));
        assert!(field(&r, "vary").unwrap().starts_with("Origin"));
    }

    #[test]
    fn a_refused_preflight_gets_403_without_the_fields() {
        let c = cors(&["https://app.example.com"], false);
        for (origin, method, fields, why) in [
            ("https://evil.test", "GET", None, "origin"),
            ("https://app.example.com", "DELETE", None, "method DELETE"),
            ("https://app.example.com", "GET", Some("x-token, x-other"), "x-other"),
        ] {
            let r = c.preflight(origin, method, fields);
            assert_eq!(r.status(), 403);
            assert_eq!(field(&r, "access-control-allow-origin"), None);
            assert!(field(&r, "vary").unwrap().contains("Origin"));
            let peregrine::Body::Bytes(body) = r.body() else {
                panic!()
            };
            assert!(String::from_utf8_lossy(body).contains(why), "{why}");
        }
    }

    #[test]
    fn answers_vary_on_origin_and_allowed_ones_carry_the_fields() {
        let c = cors(&["https://app.example.com"], true);
        let r = c.decorate(Response::new(304), Some("https://app.example.com"));
        assert_eq!(field(&r, "vary"), Some("Origin"));
        assert_eq!(
            field(&r, "access-control-allow-origin"),
            Some("https://app.example.com")
        );
        assert_eq!(field(&r, "access-control-allow-credentials"), Some("true"));
        assert_eq!(field(&r, "access-control-expose-headers"), Some("etag"));
        for origin in [None, Some("https://evil.test")] {
            let r = c.decorate(Response::new(404), origin);
            assert_eq!(field(&r, "vary"), Some("Origin"));
            assert_eq!(field(&r, "access-control-allow-origin"), None);
        }
    }
}
