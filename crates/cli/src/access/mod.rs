//! Access control of a route (issue 27): IP rules ([`ip`]), a rate limit
//! per client ([`rate`]), CORS ([`cors`]), Basic authentication
//! ([`basic`]) and forward authentication ([`forward`]), as one handler
//! wrapped around the route's own (files, an archive, a redirect; a proxy,
//! but never under `basic-auth`: the guard makes the answer before the
//! password is proven, and a proxy's would have reached the upstream;
//! `forward-auth` takes a proxy's upstream request back and holds it), so
//! that each works the same whatever answers,
//! over every protocol (the engine gives the one handler HTTP/1.1, HTTP/2
//! and HTTP/3 requests alike).
//!
//! The order, before the wrapped handler looks at anything (redirects,
//! lookup, conditionals, ranges), so a refused request is refused whether
//! or not its file exists, and never gets a 304, 206 or 404 first:
//! 1. IP rules: a client they refuse gets 403;
//! 2. the rate limit: a client whose bucket is empty gets 429 with
//!    `Retry-After` (preflights count: they are requests);
//! 3. a CORS preflight is answered (204 or 403): browsers send no
//!    credentials with one, so it comes before authentication;
//! 4. the route's `basic-auth`: 401 without the right credentials, 429
//!    after too many failures, the answer only once they are proven (off
//!    the event loop: `basic.rs`); or its `forward-auth` (never both,
//!    refused when read): the auth service is asked, and what the handler
//!    made (an answer, a proxy's upstream request, a `_headers` password
//!    check) is held until it says yes; else its answer (a redirect to a
//!    login page, a 401) goes to the client (`forward.rs`);
//! 5. the wrapped handler answers.
//!
//! With CORS, every answer — the refusals of 1, 2 and 4 included, so a
//! script can read its 429 — varies on `Origin` and carries the
//! `Access-Control-*` fields an allowed origin gets; the route's
//! `headers` come last ([`Finish`]). An answer sent from another thread
//! (a deferred check) gets the same from its [`basic::Guard`]; a proxy's
//! answers, which come from the worker's pool and never back through
//! here, get them from the proxy, offered with the call
//! (`peregrine::proxy::finishing`), in place of the upstream's fields of
//! the same names ([`Finish::relayed`]).
//!
//! Paths `_headers` protects (`Basic-Auth` lines) are checked by the file
//! or archive server itself, which asks a [`basic::Guard`] (its `Gate`)
//! before its own lookup: whether a path is protected is known only
//! there, and may change with an edit or a new archive.
//!
//! A route with none of these (nor `headers`) has no wrapper at all
//! ([`wrap`] returns its handler as it is): nothing is checked, nothing
//! is paid.

pub(crate) mod basic;
pub(crate) mod cors;
pub(crate) mod forward;
pub(crate) mod ip;
pub(crate) mod rate;

use std::sync::Arc;

use peregrine::{BodyUse, Handler, Reply, Request, Response};
use peregrine_files::auth::{self, Gate};

pub(crate) use basic::BasicAuth;
pub(crate) use cors::Cors;
pub(crate) use forward::ForwardAuth;
pub(crate) use ip::IpRules;
pub(crate) use rate::RateLimit;

/// A route's access rules, as read.
#[derive(Default)]
pub(crate) struct Rules<'a> {
    pub(crate) ip: Option<&'a IpRules>,
    pub(crate) rate_limit: Option<&'a RateLimit>,
    pub(crate) cors: Option<&'a Cors>,
    /// The route's `basic-auth` and the guard that checks it.
    pub(crate) basic: Option<(&'a BasicAuth, Arc<basic::Guard>)>,
    /// The route's `forward-auth`, as the engine asks it.
    pub(crate) forward: Option<peregrine::proxy::ForwardAuth>,
    /// The route's `headers`, added to every answer.
    pub(crate) headers: &'a [(String, String)],
}

/// `inner` behind the route's rules: `inner` itself when there are none.
pub(crate) fn wrap(inner: Arc<dyn Handler>, rules: Rules<'_>) -> Arc<dyn Handler> {
    if rules.ip.is_none()
        && rules.rate_limit.is_none()
        && rules.cors.is_none()
        && rules.basic.is_none()
        && rules.forward.is_none()
        && rules.headers.is_empty()
    {
        return inner;
    }
    Arc::new(Access {
        inner,
        ip: rules.ip.cloned(),
        rate: rules.rate_limit.map(|r| rate::Table::new(r.clone(), rate::ENTRIES_MAX)),
        cors: rules.cors.cloned(),
        basic: rules.basic.map(|(b, guard)| (b.users.clone(), guard)),
        forward: rules.forward,
        finish: Arc::new(Finish::new(rules.cors, rules.headers)),
    })
}

/// What a route adds to every answer it gives: the CORS fields for the
/// request's origin, then its `headers`. An answer made private by
/// authentication stays private: a route's `Cache-Control` is merged into
/// it without `public` (`auth::private_cache_control`).
#[derive(Clone, Default)]
pub(crate) struct Finish {
    cors: Option<Cors>,
    headers: Vec<(String, String)>,
}

impl Finish {
    pub(crate) fn new(cors: Option<&Cors>, headers: &[(String, String)]) -> Finish {
        Finish {
            cors: cors.cloned(),
            headers: headers.to_vec(),
        }
    }

    /// `resp` with the CORS fields for `origin` and the route's fields.
    pub(crate) fn apply(&self, resp: Response, origin: Option<&str>) -> Response {
        let resp = match &self.cors {
            Some(cors) => cors.decorate(resp, origin),
            None => resp,
        };
        self.fields(resp)
    }

    /// `resp` with the route's fields.
    fn fields(&self, resp: Response) -> Response {
        self.fields_as(resp, false)
    }

    /// Whether the route adds nothing to its answers (no `cors`, no
    /// `headers`).
    fn is_empty(&self) -> bool {
        self.cors.is_none() && self.headers.is_empty()
    }

    /// `resp`, an answer another server made (a proxy route's upstream,
    /// the proxy's own 502, 503 or 504 in its place, a forward-auth
    /// service's refusal), with the CORS fields for `origin` and the
    /// route's fields in place of its own of the same names, as Caddy's
    /// `header Name value` replaces them (nginx's `add_header` adds a
    /// second field instead): a browser refuses an answer with two
    /// `Access-Control-Allow-Origin`, and a field the route sets says
    /// what the route means. `Vary` is merged (`Response::with_vary`),
    /// and a private `Cache-Control` stays private (as for `apply`).
    pub(crate) fn relayed(&self, resp: Response, origin: Option<&str>) -> Response {
        let resp = match &self.cors {
            Some(cors) => cors.decorate_relayed(resp, origin),
            None => resp,
        };
        self.fields_as(resp, true)
    }

    /// `relayed` for the answer that comes later, from the worker's pool
    /// (`peregrine::proxy::finishing`), for a request from `origin`.
    pub(crate) fn hook(self: &Arc<Self>, origin: Option<&str>) -> peregrine::proxy::Finish {
        let (finish, origin) = (self.clone(), origin.map(str::to_owned));
        Box::new(move |resp: Response| finish.relayed(resp, origin.as_deref()))
    }

    /// `resp` with the route's fields, each in place of the answer's of
    /// that name when `replace` (`Vary` then merged).
    fn fields_as(&self, mut resp: Response, replace: bool) -> Response {
        if self.headers.is_empty() {
            return resp;
        }
        let private = resp.header("cache-control").is_some_and(auth::says_private);
        for (name, value) in &self.headers {
            if private && name.eq_ignore_ascii_case("cache-control") {
                let merged = auth::private_cache_control(Some(value));
                resp = resp
                    .without_header("cache-control")
                    .with_header("Cache-Control", merged);
            } else if replace && name.eq_ignore_ascii_case("vary") {
                for element in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                    resp = resp.with_vary(element);
                }
            } else if replace {
                resp = resp.without_header(name).with_header(name.clone(), value.clone());
            } else {
                resp = resp.with_header(name.clone(), value.clone());
            }
        }
        resp
    }
}

/// A route's handler behind its rules (the module's documentation says
/// in which order they run).
struct Access {
    inner: Arc<dyn Handler>,
    ip: Option<IpRules>,
    /// The route's buckets, shared by every worker.
    rate: Option<rate::Table>,
    cors: Option<Cors>,
    /// The route's users, and the guard that checks them.
    basic: Option<(Arc<peregrine_files::auth::Users>, Arc<basic::Guard>)>,
    /// The route's auth service.
    forward: Option<peregrine::proxy::ForwardAuth>,
    /// What the route adds to its answers (those its forward-auth checks
    /// decide, and a proxy's, included).
    finish: Arc<Finish>,
}

impl Access {
    /// The refusal of IP rules or the rate limit, if any.
    fn refusal(&self, req: &Request<'_>) -> Option<Response> {
        if self.ip.is_none() && self.rate.is_none() {
            return None;
        }
        let client = req.client_addr().ip;
        if let Some(ip) = &self.ip {
            if !ip.permits(client) {
                return Some(Response::error(403).with_reason(peregrine::Reason::Forbidden));
            }
        }
        if let Some(table) = &self.rate {
            let now = table.clock(peregrine::now());
            if let rate::Verdict::Refused(wait) = table.take(rate::key(client), now) {
                // Whole seconds (RFC 9110 §10.2.3), rounded up: a client
                // that waits as told finds a token.
                let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                return Some(
                    Response::error(429)
                        .with_header("Retry-After", secs.max(1).to_string())
                        .with_reason(peregrine::Reason::RateLimited),
                );
            }
        }
        None
    }
}

impl Handler for Access {
    fn call(&self, req: &Request<'_>) -> Reply {
        let origin = req.header("origin");
        if let Some(refusal) = self.refusal(req) {
            return Reply::Now(self.finish.apply(refusal, origin));
        }
        if let Some(cors) = &self.cors {
            if Cors::is_preflight(req) {
                let method = req.header("access-control-request-method").unwrap_or_default();
                let fields = req.header("access-control-request-headers");
                let preflight = cors.preflight(origin.unwrap_or_default(), method, fields);
                return Reply::Now(self.finish.fields(preflight));
            }
        }
        let reply = match (&self.basic, &self.forward) {
            // Files, archives and redirects answer at once: their answer
            // is made first and sent only once the credentials are proven.
            (Some((users, guard)), _) => guard.guard(req, users, &mut || match self.inner.call(req) {
                Reply::Now(resp) => resp,
                _ => Response::error(500),
            }),
            // The answers the check decides are finished by it (a
            // refusal at once, e.g. a 400, below), and so are those of
            // a proxy it lets through.
            (None, Some(check)) => forward::guard(check, &self.finish, req, &*self.inner),
            (None, None) if self.finish.is_empty() => self.inner.call(req),
            // A proxy's answers (its upstream's, later, through the
            // worker's pool; a cache hit now) are finished by the proxy,
            // which takes the hook (`finishing`): only the answers of
            // another handler (files, an archive, a redirect) come back
            // here to be finished.
            (None, None) => match peregrine::proxy::finishing(self.finish.hook(origin), || self.inner.call(req)) {
                (reply, Some(_unused)) => reply,
                (reply, None) => return reply,
            },
        };
        match reply {
            Reply::Now(resp) => Reply::Now(self.finish.apply(resp, origin)),
            // A deferred check's answer is finished by its guard, a
            // proxy's by the proxy (above); a handler that upgrades
            // answers itself.
            other => other,
        }
    }

    fn body_use(&self, req: &Request<'_>) -> BodyUse {
        self.inner.body_use(req)
    }

    /// As the route's handler says: its rules apply to what it takes.
    fn takes_unknown_method(&self, req: &Request<'_>) -> bool {
        self.inner.takes_unknown_method(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Hello;

    impl Handler for Hello {
        fn call(&self, _req: &Request<'_>) -> Reply {
            Response::error(200).into()
        }
    }

    /// A route without rules keeps its own handler (nothing is paid); one
    /// rule, `forward-auth` included, puts the wrapper around it.
    #[test]
    fn only_routes_with_rules_are_wrapped() {
        let inner: Arc<dyn Handler> = Arc::new(Hello);
        let same = wrap(inner.clone(), Rules::default());
        assert!(Arc::ptr_eq(&same, &inner));
        let auth = peregrine::proxy::Upstream::parse("http://127.0.0.1:9091/verify").unwrap();
        let forward = Rules {
            forward: Some(peregrine::proxy::ForwardAuth::new(auth)),
            ..Rules::default()
        };
        assert!(!Arc::ptr_eq(&wrap(inner.clone(), forward), &inner));
    }

    fn upstream_answer(fields: &[(&str, &str)]) -> Response {
        Response::prepared(200, peregrine::HeaderBlock::new(fields).unwrap(), "hi")
    }

    fn values(resp: &Response, name: &str) -> Vec<String> {
        resp.header_values(name).map(str::to_owned).collect()
    }

    /// A relayed answer (a proxy route's): the route's CORS fields and
    /// `headers` in place of the upstream's of those names, for an
    /// allowed origin; none of the upstream's CORS fields for another;
    /// `Vary` joined, each element once.
    #[test]
    fn relayed_answers_get_the_routes_fields_in_place_of_the_upstreams() {
        let own = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let cors = Cors::new(&own(&["https://a.test"]), None, &[], &own(&["ETag"]), true, None).unwrap();
        let headers = vec![
            ("X-Route".to_owned(), "1".to_owned()),
            ("Vary".to_owned(), "Cookie".to_owned()),
        ];
        let finish = Finish::new(Some(&cors), &headers);
        let up = || {
            upstream_answer(&[
                ("Access-Control-Allow-Origin", "*"),
                ("Access-Control-Expose-Headers", "X-Up"),
                ("Access-Control-Max-Age", "60"),
                ("X-Route", "upstream"),
                ("Vary", "Accept-Encoding, origin"),
            ])
        };
        let r = finish.relayed(up(), Some("https://a.test"));
        assert_eq!(values(&r, "access-control-allow-origin"), ["https://a.test"]);
        assert_eq!(values(&r, "access-control-allow-credentials"), ["true"]);
        assert_eq!(values(&r, "access-control-expose-headers"), ["ETag"]);
        assert!(values(&r, "access-control-max-age").is_empty());
        assert_eq!(values(&r, "x-route"), ["1"]);
        // (The fields added come before the upstream's block on the wire.)
        assert_eq!(values(&r, "vary"), ["Cookie", "Accept-Encoding, origin"]);
        let r = finish.relayed(up(), Some("https://evil.test"));
        assert!(values(&r, "access-control-allow-origin").is_empty());
        assert!(values(&r, "access-control-expose-headers").is_empty());
        assert_eq!(values(&r, "x-route"), ["1"]);
        let r = finish.relayed(upstream_answer(&[("Vary", "Accept-Encoding")]), None);
        assert_eq!(values(&r, "vary"), ["Origin", "Cookie", "Accept-Encoding"]);
        // A private answer stays private whatever the route's fields say.
        let headers = vec![("Cache-Control".to_owned(), "public, max-age=60".to_owned())];
        let finish = Finish::new(None, &headers);
        let r = finish.relayed(upstream_answer(&[("Cache-Control", "private")]), None);
        assert_eq!(values(&r, "cache-control"), ["private, max-age=60"]);
        let r = finish.relayed(upstream_answer(&[("Cache-Control", "no-store")]), None);
        assert_eq!(values(&r, "cache-control"), ["public, max-age=60"]);
    }
}
