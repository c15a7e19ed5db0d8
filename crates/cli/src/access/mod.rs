//! Access control of a route (issue 27): IP rules ([`ip`]), a rate limit
//! per client ([`rate`]) and CORS ([`cors`]), as one handler wrapped
//! around the route's own (files, an archive, a redirect), so that each
//! works the same whatever answers, over every protocol (the engine gives
//! the one handler HTTP/1.1, HTTP/2 and HTTP/3 requests alike).
//!
//! The order, before the wrapped handler looks at anything (redirects,
//! lookup, conditionals, ranges), so a refused request is refused whether
//! or not its file exists, and never gets a 304, 206 or 404 first:
//! 1. IP rules: a client they refuse gets 403;
//! 2. the rate limit: a client whose bucket is empty gets 429 with
//!    `Retry-After` (preflights count: they are requests);
//! 3. a CORS preflight is answered (204 or 403);
//! 4. the wrapped handler answers.
//!
//! With CORS, every answer — the refusals of 1 and 2 included, so a
//! script can read its 429 — varies on `Origin` and carries the
//! `Access-Control-*` fields an allowed origin gets.
//!
//! A route with none of these has no wrapper at all ([`wrap`] returns its
//! handler as it is): nothing is checked, nothing is paid.

pub(crate) mod cors;
pub(crate) mod ip;
pub(crate) mod rate;

use std::sync::Arc;

use peregrine::{BodyUse, Handler, Reply, Request, Response};

pub(crate) use cors::Cors;
pub(crate) use ip::IpRules;
pub(crate) use rate::RateLimit;

/// `inner` behind the route's rules: `inner` itself when there are none.
pub(crate) fn wrap(
    inner: Arc<dyn Handler>,
    ip: Option<&IpRules>,
    rate_limit: Option<&RateLimit>,
    cors: Option<&Cors>,
) -> Arc<dyn Handler> {
    if ip.is_none() && rate_limit.is_none() && cors.is_none() {
        return inner;
    }
    Arc::new(Access {
        inner,
        ip: ip.cloned(),
        rate: rate_limit.map(|r| rate::Table::new(r.clone(), rate::ENTRIES_MAX)),
        cors: cors.cloned(),
    })
}

/// A route's handler behind its rules (the module's documentation says
/// in which order they run).
struct Access {
    inner: Arc<dyn Handler>,
    ip: Option<IpRules>,
    /// The route's buckets, shared by every worker.
    rate: Option<rate::Table>,
    cors: Option<Cors>,
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
                return Some(Response::error(403));
            }
        }
        if let Some(table) = &self.rate {
            let now = table.clock(peregrine::now());
            if let rate::Verdict::Refused(wait) = table.take(rate::key(client), now) {
                // Whole seconds (RFC 9110 §10.2.3), rounded up: a client
                // that waits as told finds a token.
                let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                return Some(Response::error(429).with_header("Retry-After", secs.max(1).to_string()));
            }
        }
        None
    }
}

impl Handler for Access {
    fn call(&self, req: &Request<'_>) -> Reply {
        let origin = req.header("origin");
        if let Some(refusal) = self.refusal(req) {
            let refusal = match &self.cors {
                Some(cors) => cors.decorate(refusal, origin),
                None => refusal,
            };
            return Reply::Now(refusal);
        }
        let Some(cors) = &self.cors else {
            return self.inner.call(req);
        };
        if Cors::is_preflight(req) {
            let method = req.header("access-control-request-method").unwrap_or_default();
            let fields = req.header("access-control-request-headers");
            return Reply::Now(cors.preflight(origin.unwrap_or_default(), method, fields));
        }
        match self.inner.call(req) {
            Reply::Now(resp) => Reply::Now(cors.decorate(resp, origin)),
            // Files, archives and redirects answer at once; a handler that
            // defers or upgrades (none yet behind a route) answers itself.
            other => other,
        }
    }

    fn body_use(&self, req: &Request<'_>) -> BodyUse {
        self.inner.body_use(req)
    }
}
