//! Forward authentication (issue 27; Caddy's `forward_auth`, nginx's
//! `auth_request`): before a request is answered, a subrequest asks an
//! authentication service (oauth2-proxy, Authelia) whether it may be, over
//! the proxy's own upstream connections on the worker's loop (`pool.rs`):
//! no thread per request, and the loop never waits.
//!
//! [`ForwardAuth::check`] runs where a handler runs. It writes the
//! subrequest (GET, no body: the client's fields, `Authorization` and
//! `Cookie` included, as Caddy passes them, plus `X-Forwarded-Method`,
//! `-Proto`, `-Host`, `-Uri` and `-For`, the last from
//! `Request::client_addr`), then lets the protected handler make what a
//! 2xx lets through, and holds it:
//! - an answer made now (files, an archive, a redirect) is kept, and sent
//!   only on a 2xx (as Basic authentication's guard keeps it);
//! - a proxy's upstream request (the [`Job`] it left in the outbox) is
//!   taken back out, and sent only on a 2xx, with the fields the route
//!   copies from the auth service's answer in place of any the client
//!   sent under those names (a client never forges `Remote-User`);
//! - work the caller can start later ([`Held::Decide`]: a password check
//!   for `_headers`' Basic-Auth) is started only on a 2xx.
//!
//! The subrequest is a job like any other, for the auth service's
//! upstream, with a [`Pending`] beside it; its answer, whatever made it
//! (the service, or the pool's own 502, 503 or 504 when the service is
//! down, full or silent), comes back through the pool's answers, where
//! [`Checks::sort`] takes it instead of the client: on a 2xx, what was
//! held goes on; otherwise the service's answer goes to the client (its
//! status, `Location`, `Set-Cookie`, `WWW-Authenticate`, body: how an
//! auth service sends a browser to its login page), except that a 5xx
//! is the engine's plain page, never the service's text. Every answer a
//! check decides is private (`Cache-Control: private`, RFC 9111 §3.5),
//! the upstream's after a 2xx included.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::{Job, More, Upstream};
use crate::codec::head::Framing;
use crate::handler::Reply;
use crate::request::Request;
use crate::responder::Responder;
use crate::response::Response;

/// What a route adds to an answer a check decides (its CORS fields, its
/// own fields), given by the caller for each request.
pub type Finish = Box<dyn FnOnce(Response) -> Response + Send>;

/// Work that waits for the auth service's verdict: called on the
/// worker's loop with `Ok(())` on a 2xx, or with the answer to send
/// instead (the service's refusal, or a 5xx). It owns the request's
/// [`Responder`] and answers through it.
pub type Decide = Box<dyn FnOnce(Result<(), Response>) + Send>;

/// What the protected handler made of the request, for
/// [`ForwardAuth::check`] to hold until the service answers.
pub enum Held {
    /// The handler's reply: an answer made now, or a proxy's deferral
    /// (its upstream request is taken back from the outbox).
    Reply(Reply),
    /// Work to start only once the request is allowed.
    Decide(Decide),
}

impl From<Reply> for Held {
    fn from(reply: Reply) -> Held {
        Held::Reply(reply)
    }
}

/// An authentication service asked about every request of a route.
/// Clone it freely (three `Arc`s).
///
/// ```no_run
/// use peregrine::proxy::{ForwardAuth, Proxy, Upstream};
/// use peregrine::{BodyUse, Handler, Reply, Request, Router, Server};
///
/// /// `/api/` behind an auth service that names the user.
/// struct Guarded {
///     auth: ForwardAuth,
///     api: Proxy,
/// }
///
/// impl Handler for Guarded {
///     fn call(&self, req: &Request<'_>) -> Reply {
///         self.auth.check(req, None, &mut || self.api.call(req).into())
///     }
///     fn body_use(&self, req: &Request<'_>) -> BodyUse {
///         self.api.body_use(req)
///     }
/// }
///
/// let auth = ForwardAuth::new(Upstream::parse("http://127.0.0.1:9091/verify").unwrap())
///     .copy_headers(["Remote-User"]);
/// let api = Proxy::new(Upstream::parse("http://127.0.0.1:9000").unwrap().prefix("/api/"));
/// let router = Router::new().route("GET", "/api/*rest", Guarded { auth, api });
/// Server::new().bind("127.0.0.1:8080").start(router).unwrap().wait().unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct ForwardAuth {
    up: Arc<Upstream>,
    /// The subrequest's target: the URL's path, or `uri`.
    target: Arc<str>,
    /// Names copied from a 2xx onto the request that goes on, as given.
    copy: Arc<[String]>,
}

impl ForwardAuth {
    /// How long the service may take to answer: an auth service answers
    /// from memory or a session store; one silent this long is down (504).
    pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

    /// Asks `upstream` (`Upstream::parse`: `http://HOST[:PORT]/PATH` or
    /// `unix:PATH`); the subrequest's target is the URL's path, else `/`.
    pub fn new(upstream: Upstream) -> ForwardAuth {
        let target = url_path(upstream.url()).unwrap_or("/").to_owned();
        let upstream = upstream.read_timeout(ForwardAuth::READ_TIMEOUT);
        ForwardAuth {
            up: Arc::new(upstream),
            target: target.into(),
            copy: Arc::from(Vec::new()),
        }
    }

    /// How long the service may be silent while it answers (past it, 504;
    /// [`ForwardAuth::READ_TIMEOUT`] by default).
    pub fn timeout(mut self, timeout: Duration) -> ForwardAuth {
        self.up = Arc::new((*self.up).clone().read_timeout(timeout));
        self
    }

    /// The subrequest's target (path and query), in place of the URL's
    /// path: the way to give one to a `unix:` service.
    pub fn uri(mut self, target: &str) -> ForwardAuth {
        self.target = target.into();
        self
    }

    /// Fields of a 2xx answer copied onto the request that goes on (for
    /// a proxy, its upstream request), replacing the client's of the same
    /// names, which are removed even when the answer has none.
    pub fn copy_headers<I, S>(mut self, names: I) -> ForwardAuth
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.copy = names.into_iter().map(Into::into).collect::<Vec<_>>().into();
        self
    }

    /// The service it asks.
    pub fn upstream(&self) -> &Upstream {
        &self.up
    }

    /// Asks the service about `req` and defers it; `inner` is called now
    /// (the request is gone once the service answers) and what it makes
    /// is held until then. `finish` is applied to the answers the check
    /// decides (the refusal, or the answer held) and not to an upstream's.
    ///
    /// A handler that deferred by another means than the proxy's (its
    /// answer would come from elsewhere, unheld) gets a 500 instead: its
    /// answer, if ever sent, goes nowhere.
    pub fn check(&self, req: &Request<'_>, finish: Option<Finish>, inner: &mut dyn FnMut() -> Held) -> Reply {
        let Some(outbox) = req.outbox() else {
            return Response::error(502).into();
        };
        let bytes = match self.subrequest(req) {
            Ok(bytes) => bytes,
            Err(status) => return Response::error(status).into(),
        };
        let before = outbox.borrow().len();
        // The cache looks a checked request up only once it is let
        // through (`cache::checked_miss`).
        CHECKING.set(true);
        let held = inner();
        CHECKING.set(false);
        let then = match held {
            Held::Reply(Reply::Now(resp)) => Then::Answer(req.defer(), resp),
            Held::Reply(Reply::Later) => {
                let mut queued = outbox.borrow_mut();
                match queued.pop() {
                    Some(job) if queued.len() == before => Then::Proxy(Box::new(job)),
                    other => {
                        queued.extend(other);
                        drop(queued);
                        crate::log::error(format_args!(
                            "forward auth: the handler deferred its answer outside the proxy; it cannot be held: 500"
                        ));
                        return Response::error(500).into();
                    }
                }
            }
            Held::Reply(Reply::Upgrade(_)) => {
                crate::log::warn(format_args!(
                    "forward auth: an upgrade cannot wait for the auth service: 501"
                ));
                return Response::error(501).into();
            }
            Held::Decide(decide) => Then::Decide(decide),
        };
        outbox.borrow_mut().push(Job {
            up: self.up.clone(),
            bytes,
            head_method: false,
            idempotent: true,
            retried: false,
            tried: None,
            chunked: false,
            expect_continue: false,
            responder: Responder::new(None, CHECK_TOKEN, next_check_id()),
            choice: None,
            trailers: false,
            more: Some(Box::new(More {
                auth: Some(Box::new(Pending {
                    then,
                    copy: self.copy.clone(),
                    finish,
                })),
                ..More::default()
            })),
        });
        Reply::Later
    }

    /// The subrequest's bytes: GET, no body, the client's fields less
    /// those written here, the framing and the copied names.
    fn subrequest(&self, req: &Request<'_>) -> Result<Vec<u8>, u16> {
        let mut fields: Vec<(&[u8], std::borrow::Cow<'_, [u8]>)> = req
            .headers()
            .filter(|(n, _)| {
                !n.starts_with(':')
                    && !n.to_ascii_lowercase().starts_with("x-forwarded-")
                    && !DROPPED.iter().any(|d| d.eq_ignore_ascii_case(n))
                    && !self.copy.iter().any(|c| same_name_loosely(c.as_bytes(), n.as_bytes()))
            })
            .map(|(n, v)| (n.as_bytes(), v.into()))
            .collect();
        if let Some(cookie) = super::joined_cookies(req) {
            fields.push((b"Cookie", cookie.into()));
        }
        let mut uri = req.path().to_owned();
        if let Some(q) = req.query() {
            uri.push('?');
            uri.push_str(q);
        }
        // A Unix peer's address is `UNIX_PEER`'s 0.0.0.0, impossible for
        // TCP (a PROXY header or a trusted proxy may name the client).
        let client = match req.client_addr().ip.to_canonical() {
            ip if ip.is_unspecified() => "unix".to_owned(),
            ip => ip.to_string(),
        };
        let host = req.host().unwrap_or("");
        let proto: &[u8] = if req.is_tls() { b"https" } else { b"http" };
        fields.push((b"X-Forwarded-Method", req.method().as_bytes().into()));
        fields.push((b"X-Forwarded-Proto", proto.into()));
        if !host.is_empty() {
            fields.push((b"X-Forwarded-Host", host.as_bytes().into()));
        }
        fields.push((b"X-Forwarded-Uri", uri.into_bytes().into()));
        fields.push((b"X-Forwarded-For", client.into_bytes().into()));
        // The client's Host, as Caddy's `forward_auth` keeps it; the
        // service's own when the client sent none.
        let host = if host.is_empty() { self.up.authority() } else { host };
        let mut bytes = Vec::with_capacity(512);
        crate::codec::client::write_request_head(
            &mut bytes,
            "GET",
            &self.target,
            host,
            fields.iter().map(|(n, v)| (n, v)),
            Framing::Empty,
        )
        .map_err(|_| 400u16)?;
        Ok(bytes)
    }
}

thread_local! {
    /// Set while [`ForwardAuth::check`] calls the protected handler.
    static CHECKING: Cell<bool> = const { Cell::new(false) };
}

/// Whether the handler running now is behind a forward-auth check: its
/// answer depends on who the service says the client is, which the
/// request's own fields do not show (an API key, the address, the fields
/// the check copies), so a proxy's cache treats it as a request with
/// credentials and looks it up only once it is let through
/// (`cache::granted`).
pub(crate) fn checking() -> bool {
    CHECKING.get()
}

/// Fields of the client's never sent to the service: those written here
/// or by the codec, and those of the body the subrequest does not have.
const DROPPED: &[&str] = &["forwarded", "cookie", "host", "content-length", "expect"];

/// The path of an `http://` URL, if it has one.
fn url_path(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("http://")?;
    rest.find('/').map(|i| &rest[i..])
}

/// The connection token of a subrequest's responder: no connection's (it
/// is never armed, and its answer is always taken by [`Checks::sort`]),
/// with ids of its own, so a check is known by its responder.
const CHECK_TOKEN: usize = usize::MAX;

fn next_check_id() -> u64 {
    thread_local! {
        static NEXT: Cell<u64> = const { Cell::new(0) };
    }
    NEXT.with(|n| {
        let id = n.get();
        n.set(id.wrapping_add(1));
        id
    })
}

/// What a subrequest decides, beside its job.
pub(crate) struct Pending {
    then: Then,
    copy: Arc<[String]>,
    finish: Option<Finish>,
}

/// What a 2xx lets through.
enum Then {
    /// An answer made before the check, and where it goes.
    Answer(Responder, Response),
    /// A proxy's upstream request (its responder inside).
    Proxy(Box<Job>),
    Decide(Decide),
}

/// A worker's checks in flight (owned by its `pool::Upstreams`), and what
/// the routes of its requests add to their answers.
#[derive(Default)]
pub(crate) struct Checks {
    /// By the subrequest's responder id.
    pending: HashMap<u64, Pending>,
    /// Upstream requests a 2xx let through, to submit.
    granted: Vec<Job>,
    /// The requests whose upstream answers are private (by their
    /// responder's connection token and id).
    private: HashSet<(usize, u64)>,
    /// What their routes add to the answers of requests (`More::finish`,
    /// by their responder's connection token and id): applied in `sort`,
    /// after the rest. Every job the pool takes is answered through
    /// `sort` (its upstream's answer or the pool's own) or hands its
    /// connection over as a tunnel (`forget`), so none stays.
    finishes: HashMap<(usize, u64), Finish>,
    /// Checks decided since the metrics were last told: allowed,
    /// refused, failed.
    counts: [u64; 3],
}

impl Checks {
    /// Notes a job's check, if it carries one, and what its route adds
    /// to its answer, if anything.
    pub(crate) fn admit(&mut self, job: &mut Job) {
        let Some(more) = job.more.as_mut() else {
            return;
        };
        if let Some(pending) = more.auth.take() {
            self.pending.insert(job.responder.key().1, *pending);
        }
        if let Some(finish) = more.finish.take() {
            self.finishes.insert(job.responder.key(), finish);
        }
    }

    /// Adds the checks decided since the last call to the worker's
    /// metrics.
    pub(crate) fn count(&mut self, metrics: Option<&crate::metrics::WorkerMetrics>) {
        if self.counts == [0; 3] {
            return;
        }
        let counts = std::mem::take(&mut self.counts);
        if let Some(m) = metrics {
            m.forward_auth_allowed.add(counts[0]);
            m.forward_auth_refused.add(counts[1]);
            m.forward_auth_failed.add(counts[2]);
        }
    }

    /// Whether `sort` would pass answers through untouched: no check in
    /// flight, no private answer to mark, no answer to finish.
    #[inline(always)]
    pub(crate) fn sorts_nothing(&self) -> bool {
        self.pending.is_empty() && self.private.is_empty() && self.finishes.is_empty()
    }

    /// Whether upstream requests wait for `take_granted`.
    pub(crate) fn has_granted(&self) -> bool {
        !self.granted.is_empty()
    }

    /// The upstream requests let through since the last call.
    pub(crate) fn take_granted(&mut self) -> Vec<Job> {
        std::mem::take(&mut self.granted)
    }

    /// The answer to `key` will not pass through `sort`: its upstream
    /// switched to WebSocket and the tunnel goes to the client directly
    /// (`Upstreams::take_handoffs`). Without this, each tunnel a check let
    /// through would leave its key in `private` for good.
    pub(crate) fn forget(&mut self, key: (usize, u64)) {
        if !self.private.is_empty() {
            self.private.remove(&key);
        }
        if !self.finishes.is_empty() {
            self.finishes.remove(&key);
        }
    }

    /// The pool's answers with the subrequests' taken out and decided:
    /// what goes to clients (the answers held, refusals), the upstream
    /// answers of checked requests made private, and then each answer
    /// whose route adds fields finished (`admit`).
    /// (Each with its access log figures; an answer a check makes has
    /// none: no upstream of the route was asked.)
    #[inline(always)]
    pub(crate) fn sort(&mut self, answers: Vec<super::pool::Answer>) -> Vec<super::pool::Answer> {
        // Inlined to this test: a worker without forward-auth checks in
        // flight passes its answers on without a call.
        if self.sorts_nothing() {
            return answers;
        }
        self.sort_checked(answers)
    }

    /// `sort`, with checks in flight or private answers to mark.
    #[inline(never)]
    fn sort_checked(&mut self, answers: Vec<super::pool::Answer>) -> Vec<super::pool::Answer> {
        let mut out = Vec::with_capacity(answers.len());
        for (responder, response, figures) in answers {
            let key = responder.key();
            if key.0 == CHECK_TOKEN {
                if let Some(pending) = self.pending.remove(&key.1) {
                    out.extend(self.decide(pending, response).map(|(r, a)| (r, a, None)));
                }
                continue;
            }
            let response = match self.private.remove(&key) {
                true => private(response),
                false => response,
            };
            // Last: a route's `Cache-Control` is merged into a private
            // one, not put in its place (the caller's finish knows how).
            let response = match self.finishes.remove(&key) {
                Some(finish) => finish(response),
                None => response,
            };
            out.push((responder, response, figures));
        }
        out
    }

    /// The service answered `answer`: what the check lets through, or
    /// its refusal.
    fn decide(&mut self, pending: Pending, answer: Response) -> Option<(Responder, Response)> {
        let Pending { then, copy, finish } = pending;
        let outcome = match answer.status() {
            200..=299 => 0,
            500.. => 2,
            _ => 1,
        };
        self.counts[outcome] += 1;
        if outcome == 0 {
            return match then {
                Then::Answer(responder, resp) => Some((responder, private(resp))),
                Then::Proxy(mut job) => {
                    let values = copied(&answer, &copy);
                    job.bytes = with_fields(&job.bytes, &copy, &values);
                    // A route's cache answers with the fields the upstream
                    // would get (a `public` entry only), marked and
                    // finished as the upstream's answer would be.
                    if let Some(stored) = super::cache::granted(&mut job, &copy, &values) {
                        let stored = private(stored);
                        let stored = match job.more.as_mut().and_then(|m| m.finish.take()) {
                            Some(finish) => finish(stored),
                            None => stored,
                        };
                        super::cache::unwatch(job.responder.key());
                        return Some((job.responder, stored));
                    }
                    self.private.insert(job.responder.key());
                    self.granted.push(*job);
                    None
                }
                Then::Decide(decide) => {
                    decide(Ok(()));
                    None
                }
            };
        }
        let status = answer.status();
        let refusal = if status >= 500 { Response::error(status) } else { answer };
        let refusal = private(refusal).with_reason(crate::Reason::Auth);
        let refusal = match finish {
            Some(finish) => finish(refusal),
            None => refusal,
        };
        match then {
            Then::Answer(responder, _) => Some((responder, refusal)),
            Then::Proxy(job) => {
                // Its upstream answer, which the cache may have watched
                // for (an unsafe method's invalidation), never comes.
                super::cache::unwatch(job.responder.key());
                Some((job.responder, refusal))
            }
            Then::Decide(decide) => {
                decide(Err(refusal));
                None
            }
        }
    }
}

/// The values of the fields named in `copy` in `answer`, each with its
/// name as given, in the answer's order.
fn copied(answer: &Response, copy: &[String]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    if copy.is_empty() {
        return out;
    }
    let lines = answer.block.as_ref().map_or(&[][..], |b| b.as_bytes());
    let given = answer.headers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes()));
    let block = lines.split(|&b| b == b'\n').filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        Some((&line[..colon], crate::codec::head::trim_ows(&line[colon + 1..])))
    });
    for (name, value) in given.chain(block) {
        if let Some(c) = copy.iter().find(|c| c.as_bytes().eq_ignore_ascii_case(name)) {
            out.push((c.clone(), value.to_vec()));
        }
    }
    out
}

/// An upstream request (`head` + body, as `proxy::build` wrote it) with
/// the fields named in `copy` replaced by `values`.
fn with_fields(request: &[u8], copy: &[String], values: &[(String, Vec<u8>)]) -> Vec<u8> {
    let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") else {
        return request.to_vec();
    };
    let (head, rest) = request.split_at(end + 2);
    let mut out = Vec::with_capacity(request.len() + 64);
    for (i, line) in head.split_inclusive(|&b| b == b'\n').enumerate() {
        let named = |c: &String| {
            line.len() > c.len() && line[c.len()] == b':' && same_name_loosely(&line[..c.len()], c.as_bytes())
        };
        if i > 0 && copy.iter().any(named) {
            continue;
        }
        out.extend_from_slice(line);
    }
    for (name, value) in values {
        crate::codec::write::push_field(&mut out, name.as_bytes(), value);
    }
    out.extend_from_slice(rest);
    out
}

/// Whether two field names are the same to an application behind the
/// proxy: without regard to case, and `_` taken for `-`, as CGI, WSGI,
/// Rack and PHP map both to one variable (`HTTP_REMOTE_USER`). A client's
/// `Remote_User` must go where its `Remote-User` goes, or it passes for
/// the name the auth service vouches for (nginx drops every name with an
/// underscore by default, `underscores_in_headers off`).
pub(super) fn same_name_loosely(a: &[u8], b: &[u8]) -> bool {
    let fold = |c: u8| if c == b'_' { b'-' } else { c.to_ascii_lowercase() };
    a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| fold(x) == fold(y))
}

/// `resp` private to its user (RFC 9111 §3.5): `private` first, `public`
/// and `s-maxage` dropped, the other directives kept.
fn private(resp: Response) -> Response {
    let mut value = String::from("private");
    for d in resp.header("cache-control").unwrap_or_default().split(',') {
        let d = d.trim();
        let name = d.split('=').next().unwrap_or_default().trim();
        if d.is_empty()
            || ["public", "private", "s-maxage"]
                .iter()
                .any(|n| name.eq_ignore_ascii_case(n))
        {
            continue;
        }
        value.push_str(", ");
        value.push_str(d);
    }
    resp.without_header("cache-control").with_header("Cache-Control", value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::{HeaderBlock, SharedBytes};

    fn answer(status: u16, lines: &str) -> Response {
        let block = HeaderBlock::from_lines(SharedBytes::new(Arc::new(lines.as_bytes().to_vec()))).unwrap();
        Response::prepared(status, block, Vec::new())
    }

    fn copy(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    /// The client's `Remote-User` is gone whatever the service says; the
    /// service's values take its place; the body is untouched.
    #[test]
    fn copied_fields_replace_the_clients_and_only_those() {
        let request = b"POST /x HTTP/1.1\r\nHost: a\r\nremote-user: mallory\r\nRemote_User: eve\r\nRemote-Username: k\r\nX-A: 1\r\nContent-Length: 4\r\n\r\nbody";
        let names = copy(&["Remote-User", "Remote-Email"]);
        let ok = answer(200, "Remote-User: alice\r\nremote-email: a@x\r\nOther: 1\r\n");
        let got = with_fields(request, &names, &copied(&ok, &names));
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "POST /x HTTP/1.1\r\nHost: a\r\nRemote-Username: k\r\nX-A: 1\r\nContent-Length: 4\r\n\
             Remote-User: alice\r\nRemote-Email: a@x\r\n\r\nbody"
        );
        let silent = answer(204, "Other: 1\r\n");
        let got = with_fields(request, &names, &copied(&silent, &names));
        assert!(!String::from_utf8_lossy(&got)
            .to_ascii_lowercase()
            .contains("remote-user:"));
    }

    #[test]
    fn decided_answers_are_private() {
        let r = private(Response::error(200).with_header("Cache-Control", "public, max-age=60, s-maxage=9"));
        assert_eq!(r.header("cache-control"), Some("private, max-age=60"));
        assert_eq!(private(Response::error(302)).header("cache-control"), Some("private"));
    }

    /// A refusal is the service's answer, a 5xx the engine's page; a 2xx
    /// lets the held answer go, and a proxied request go on (its answer
    /// then private).
    #[test]
    fn a_check_lets_through_or_refuses() {
        let mut checks = Checks::default();
        let key = |id| Responder::new(None, CHECK_TOKEN, id);
        let pending = |then| Pending {
            then,
            copy: Arc::from(copy(&["Remote-User"])),
            finish: Some(Box::new(|r: Response| r.with_header("X-Finished", "1"))),
        };
        checks.pending.insert(
            1,
            pending(Then::Answer(Responder::new(None, 7, 1), Response::error(200))),
        );
        checks.pending.insert(
            2,
            pending(Then::Answer(Responder::new(None, 7, 2), Response::error(200))),
        );
        checks.pending.insert(
            3,
            pending(Then::Answer(Responder::new(None, 7, 3), Response::error(200))),
        );
        let denied = answer(302, "Location: /login\r\nSet-Cookie: s=1\r\n");
        let broken = answer(500, "X-Secret: upstream text\r\n");
        let out = checks.sort(vec![
            (key(1), answer(200, ""), None),
            (key(2), denied, None),
            (key(3), broken, None),
        ]);
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].1.status(), 200);
        assert_eq!(out[0].1.header("cache-control"), Some("private"));
        assert_eq!(out[0].1.header("x-finished"), None);
        assert_eq!(out[1].1.status(), 302);
        assert_eq!(out[1].1.header("location"), Some("/login"));
        assert_eq!(out[1].1.header("set-cookie"), Some("s=1"));
        assert_eq!(out[1].1.header("x-finished"), Some("1"));
        assert_eq!(out[2].1.status(), 500);
        assert_eq!(out[2].1.header("x-secret"), None);
        assert!(checks.pending.is_empty());
    }

    /// The subrequest: GET of the service's path, no body, the client's
    /// fields (cookie crumbs joined) less its forwarding fields and the
    /// copied names, then the forwarding fields written here.
    #[test]
    fn the_subrequest_carries_the_clients_fields_and_the_forwarding_ones() {
        let auth =
            ForwardAuth::new(Upstream::parse("http://127.0.0.1:9091/verify").unwrap()).copy_headers(["Remote-User"]);
        let fields = [
            ("authorization", "Bearer t0k"),
            ("cookie", "a=1"),
            ("cookie", "b=2"),
            ("remote-user", "mallory"),
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-uri", "/forged"),
            ("content-length", "4"),
            ("content-type", "text/plain"),
        ];
        let headers: Vec<httparse::Header<'_>> = fields
            .iter()
            .map(|(n, v)| httparse::Header {
                name: n,
                value: v.as_bytes(),
            })
            .collect();
        let origin = crate::request::Origin::peer("10.0.0.7:5000".parse().unwrap());
        let req = Request::new(
            "POST",
            "/app/x?y=1",
            crate::Version::Http2,
            &headers,
            Some("site.test"),
            b"body",
            &origin,
        );
        let bytes = String::from_utf8(auth.subrequest(&req).unwrap()).unwrap();
        assert_eq!(
            bytes,
            "GET /verify HTTP/1.1\r\nHost: site.test\r\nauthorization: Bearer t0k\r\n\
             content-type: text/plain\r\nCookie: a=1; b=2\r\nX-Forwarded-Method: POST\r\n\
             X-Forwarded-Proto: http\r\nX-Forwarded-Host: site.test\r\nX-Forwarded-Uri: /app/x?y=1\r\n\
             X-Forwarded-For: 10.0.0.7\r\n\r\n"
        );
    }

    #[test]
    fn the_target_is_the_urls_path() {
        assert_eq!(url_path("http://127.0.0.1:9091/api/verify"), Some("/api/verify"));
        assert_eq!(url_path("http://127.0.0.1:9091"), None);
        assert_eq!(url_path("unix:/run/a.sock"), None);
    }
}
