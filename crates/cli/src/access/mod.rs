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
//! (a deferred check) gets the same from its [`basic::Guard`].
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
        forward: rules
            .forward
            .map(|check| (check, Arc::new(Finish::new(rules.cors, rules.headers)))),
        finish: Finish::new(rules.cors, rules.headers),
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
    fn fields(&self, mut resp: Response) -> Response {
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
    /// The route's auth service, and what the route adds to the answers
    /// its checks decide.
    forward: Option<(peregrine::proxy::ForwardAuth, Arc<Finish>)>,
    finish: Finish,
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
            // refusal at once, e.g. a 400, below).
            (None, Some((check, finish))) => forward::guard(check, finish, req, &*self.inner),
            (None, None) => self.inner.call(req),
        };
        match reply {
            Reply::Now(resp) => Reply::Now(self.finish.apply(resp, origin)),
            // A deferred check's answer is finished by its guard; a
            // handler that defers (a proxy route: never under
            // `basic-auth`, refused when read) or upgrades answers itself.
            other => other,
        }
    }

    fn body_use(&self, req: &Request<'_>) -> BodyUse {
        self.inner.body_use(req)
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
}
