//! Calling the handler, for both protocols: the one place that catches a
//! panicking handler, turns `Reply::Later` into a `Deferral` (what the log
//! and metrics need when the answer comes), and records answers in the
//! access log and the metrics. HTTP/1.1 keeps at most one `Deferral` per
//! connection, HTTP/2 one per deferred stream; both finish it here.

use std::cell::Cell;
use std::net::SocketAddr;
use std::panic::{self, AssertUnwindSafe};
use std::time::Instant;

use super::{micros_between, Ctx};
use crate::access_log::{Line, LogRequest, LogWriter, Reason, UpstreamLog};
use crate::handler::{BodyUse, Handler, Reply};
use crate::request::{DeferSlot, Request};
use crate::response::Response;

/// What the handler gave.
pub(crate) enum Called<'r> {
    /// An answer to send now (it stays in the caller's `Handled`).
    Now(&'r mut Response),
    /// The answer will come through a `Responder` with this record's id.
    Later(Deferral),
}

/// Where the handler's reply lands: owned by the caller, so that the
/// response is not moved again on its way to the output (each move of
/// the large struct was a memcpy: 2-4 % of a pipelined hello's CPU).
pub(crate) type Handled = std::thread::Result<Reply>;

/// A request whose answer comes later: what is needed to match the answer
/// and to log it.
pub(crate) struct Deferral {
    pub(crate) id: u64,
    /// When the request was ready.
    pub(crate) started: Instant,
    /// The method's metrics label.
    pub(crate) method_idx: usize,
    pub(crate) head_only: bool,
    /// The site it went to.
    pub(crate) site: Option<u16>,
    pub(crate) log: Option<LogRequest>,
}

/// Where `req.defer()` records its promise: set it as the request's
/// `defer` before `call`.
pub(crate) fn slot<'w>(ctx: &Ctx<'w>, token: usize) -> DeferSlot<'w> {
    DeferSlot {
        mailbox: ctx.mailbox,
        token,
        next_id: ctx.next_defer_id,
        id: Cell::new(None),
        outbox: ctx.outbox,
    }
}

/// The handler of `req`: the redirect handler on a listener that
/// redirects to HTTPS, else its site's (which records the site on `req`),
/// or what answers a host no site serves.
#[inline]
fn handler<'w>(ctx: &Ctx<'w>, redirect: bool, req: &Request<'_>) -> &'w dyn Handler {
    match (redirect, ctx.redirect) {
        (true, Some(redirect)) => redirect,
        _ => ctx.sites.handler_for(req),
    }
}

/// The access log a request of `site` goes to: the site's own, else the
/// server's.
#[inline]
pub(crate) fn log_of<'c>(ctx: &'c mut Ctx<'_>, site: Option<u16>) -> Option<&'c mut LogWriter> {
    if let Some(site) = site {
        if let Some(Some(own)) = ctx.site_logs.get_mut(usize::from(site)) {
            return Some(own);
        }
    }
    ctx.log.as_deref_mut()
}

/// Calls the handler for `req` (the redirect handler on a redirecting
/// listener), catching a panic. Then `settle` what it gave.
#[inline]
pub(crate) fn call(ctx: &Ctx<'_>, redirect: bool, req: &Request<'_>) -> Handled {
    let handler = handler(ctx, redirect, req);
    if !req.method_registered && !takes_unknown_method(handler, req) {
        return Ok(Reply::Now(method_not_implemented()));
    }
    panic::catch_unwind(AssertUnwindSafe(|| handler.call(req)))
}

/// Whether `handler` takes `req`, whose method is not in IANA's registry
/// (`Handler::takes_unknown_method`); a panic says no. Out of line: a
/// registered method does not come here, and the check that it is one is
/// a flag the codec set (`Head::method_registered`).
#[cold]
#[inline(never)]
fn takes_unknown_method(handler: &dyn Handler, req: &Request<'_>) -> bool {
    panic::catch_unwind(AssertUnwindSafe(|| handler.takes_unknown_method(req))).unwrap_or(false)
}

/// The engine's answer to a method it does not know, for a handler that
/// does not take it (RFC 9110 §9.1).
#[cold]
fn method_not_implemented() -> Response {
    Response::error(501).with_reason(Reason::NotImplemented)
}

/// What `call_answering` did.
pub(crate) enum Answering<T> {
    /// The handler answered now, and `answer` returned this.
    Now(T),
    /// The handler deferred, or panicked before answering: `settle` this.
    Settle(Handled),
    /// `answer` returned this, then the response's drop panicked: the
    /// answer is queued, the connection must close.
    Broken(T),
    /// A panic inside `answer` (a drop of the response's body there): what
    /// it queued of the answer must be taken back, then this settled.
    Interrupted(Handled),
}

/// Calls the handler for `req` (whose `defer` is `slot`) and gives an
/// answer it makes now to `answer` where the handler left it, inside
/// `catch_unwind`. `call` returns the reply through `catch_unwind`, which
/// copies it out right after the handler stored it: the copy's 16-byte
/// loads over the handler's narrower stores defeat store-to-load
/// forwarding, a stall that was a fifth of the HTTP/1.1 driver's own
/// samples in a pipelined hello (perf annotate). `answer` is engine code
/// that queues the response; a `Body::Channel` is bound to the connection
/// first, as `settle` does.
#[inline]
pub(crate) fn call_answering<T>(
    ctx: &Ctx<'_>,
    redirect: bool,
    slot: &DeferSlot<'_>,
    req: &Request<'_>,
    answer: impl FnOnce(&mut Response) -> T,
) -> Answering<T> {
    let handler = handler(ctx, redirect, req);
    // Settled as any other answer, not through `answer`: a second call
    // of it here kept the answer's writing from being inlined into the
    // common path (hello-c50 1,528 -> 1,579 instructions a request).
    if !req.method_registered && !takes_unknown_method(handler, req) {
        return Answering::Settle(Ok(Reply::Now(method_not_implemented())));
    }
    let (mut started, mut answered, mut other) = (false, None, None);
    let called = panic::catch_unwind(AssertUnwindSafe(|| {
        let mut reply = handler.call(req);
        if let Reply::Now(response) = &mut reply {
            if let crate::Body::Channel(rx) = &response.body {
                rx.bind(slot.mailbox, slot.token);
            }
            started = true;
            answered = Some(answer(response));
        } else {
            other = Some(reply);
        }
    }));
    match (called, answered) {
        (Ok(()), Some(t)) => Answering::Now(t),
        (Ok(()), None) => Answering::Settle(Ok(other.unwrap_or(Reply::Later))),
        (Err(_), Some(t)) => Answering::Broken(t),
        (Err(panic), None) if started => Answering::Interrupted(Err(panic)),
        (Err(panic), None) => Answering::Settle(Err(panic)),
    }
}

/// What the handler does with `req`'s body (asked when its head is
/// complete). A method the engine does not recognise, and the handler
/// does not take, is answered 501 without the handler: its body is
/// ignored. A panic counts as `Buffer`: the body is buffered and the
/// handler's `call` meets the same bug.
pub(crate) fn body_use(ctx: &Ctx<'_>, redirect: bool, req: &Request<'_>) -> BodyUse {
    // Answered 501 without the handler (`call_stream`, `call`).
    if is_unimplemented(ctx, redirect, req) {
        return BodyUse::Ignore;
    }
    let handler = handler(ctx, redirect, req);
    panic::catch_unwind(AssertUnwindSafe(|| handler.body_use(req))).unwrap_or(BodyUse::Buffer)
}

/// `req` is a stream's request the engine answers 501 without a handler
/// (`call_stream`, `call`): a plain CONNECT (an extended CONNECT,
/// `:protocol`, RFC 8441, is for the handler), or a method outside
/// IANA's registry that its handler does not take.
pub(crate) fn is_unimplemented(ctx: &Ctx<'_>, redirect: bool, req: &Request<'_>) -> bool {
    (req.protocol.is_none() && req.method() == "CONNECT")
        || (!req.method_registered && !takes_unknown_method(handler(ctx, redirect, req), req))
}

/// `call` for a request of HTTP/2 or HTTP/3, whose heads the codec has not
/// seen: a CONNECT is answered 501 before any handler runs, as HTTP/1.1's
/// is, and a method the server does not recognise reaches only a handler
/// that takes it (`call`; RFC 9110 §9.1).
pub(crate) fn call_stream(ctx: &Ctx<'_>, redirect: bool, req: &Request<'_>) -> Handled {
    // An extended CONNECT (`:protocol`, RFC 8441) is for the handler.
    if req.protocol.is_none() && req.method() == "CONNECT" {
        return Ok(Reply::Now(method_not_implemented()));
    }
    call(ctx, redirect, req)
}

/// What the handler gave for `req`, whose `defer` is `slot`: an answer
/// now, or a `Deferral`. A panic, or `Reply::Later` without
/// `Request::defer`, becomes a 500 that closes the connection.
#[inline]
pub(crate) fn settle<'r>(
    ctx: &mut Ctx<'_>,
    slot: &DeferSlot<'_>,
    req: &Request<'_>,
    handled: &'r mut Handled,
) -> Called<'r> {
    match handled {
        Ok(Reply::Now(_)) => {}
        Ok(Reply::Later) => match slot.id.get() {
            Some(id) => {
                if let Some(m) = ctx.metrics {
                    m.deferred_started.add(1);
                }
                return Called::Later(Deferral {
                    id,
                    started: ctx.now,
                    method_idx: crate::metrics::method_index(req.method().as_bytes()),
                    head_only: req.method() == "HEAD",
                    site: req.site.get(),
                    // Also what returns the id with the answer.
                    log: (ctx.request_id_header || log_of(ctx, req.site.get()).is_some()).then(|| log_request(req)),
                });
            }
            None => {
                crate::log::error(format_args!(
                    "handler returned Reply::Later without calling Request::defer"
                ));
                *handled = Ok(Reply::Now(
                    Response::error(500).with_close().with_reason(Reason::HandlerPanic),
                ));
            }
        },
        // HTTP/1.1 and HTTP/2 take an upgrade before settling
        // (`ws::upgrade` refuses HTTP/3's requests): one here is a bug.
        Ok(Reply::Upgrade(_)) => {
            crate::log::error(format_args!(
                "a handler's Reply::Upgrade for a request that cannot upgrade"
            ));
            *handled = Ok(Reply::Now(
                Response::error(500).with_close().with_reason(Reason::InvalidResponse),
            ));
        }
        // The panic hook has already printed the message.
        Err(_) => {
            *handled = Ok(Reply::Now(
                Response::error(500).with_close().with_reason(Reason::HandlerPanic),
            ))
        }
    }
    match handled {
        Ok(Reply::Now(response)) => {
            // A body written from another thread wakes this connection.
            if let crate::Body::Channel(rx) = &response.body {
                rx.bind(slot.mailbox, slot.token);
            }
            Called::Now(response)
        }
        Ok(Reply::Later | Reply::Upgrade(_)) | Err(_) => unreachable!("settled above"),
    }
}

/// Adds the request's id `id` to `response` as `X-Request-ID`
/// (`Server::request_id_header`), unless it has one already (an
/// upstream's own). Out of line: only servers that ask for it call it.
#[cold]
#[inline(never)]
pub(crate) fn tag_request_id(id: &[u8], response: &mut Response) {
    // Present whatever its bytes (an upstream's obs-text is not UTF-8):
    // never a second one.
    if response.header_bytes("x-request-id").is_some() {
        return;
    }
    // Ids are visible ASCII (`Request::request_id`).
    if let Ok(id) = std::str::from_utf8(id) {
        response.headers.push((
            std::borrow::Cow::Borrowed("X-Request-ID"),
            std::borrow::Cow::Owned(id.to_owned()),
        ));
    }
}

/// Adds `req`'s id to `response` when the server returns ids.
#[inline]
pub(crate) fn tag(ctx: &Ctx<'_>, req: &Request<'_>, response: &mut Response) {
    if ctx.request_id_header {
        tag_request_id(req.request_id().as_bytes(), response);
    }
}

/// Adds a deferred request's id to its answer when the server returns ids.
#[inline]
pub(crate) fn tag_deferred(ctx: &Ctx<'_>, deferral: &Deferral, response: &mut Response) {
    if ctx.request_id_header {
        if let Some(log) = &deferral.log {
            tag_request_id(log.id(), response);
        }
    }
}

/// Records an answer queued whole now (its last byte leaves with this
/// batch's write) in the access log and the metrics, at the batch's time.
///
/// Inlined as far as the test whether anything takes the record: a
/// server that neither logs nor counts paid a call for nothing, 34
/// instructions a request (callgrind, hello pipelined).
#[inline]
pub(crate) fn record(ctx: &mut Ctx<'_>, req: &Request<'_>, status: u16, body_bytes: u64, reason: Option<Reason>) {
    let site = req.site.get();
    if ctx.metrics.is_none() && log_of(ctx, site).is_none() {
        // Neither logs nor counts: no clock read.
        return;
    }
    record_taken(ctx, req, site, status, body_bytes, reason);
}

/// `record` for a request a log or the metrics take.
#[inline(never)]
fn record_taken(
    ctx: &mut Ctx<'_>,
    req: &Request<'_>,
    site: Option<u16>,
    status: u16,
    body_bytes: u64,
    reason: Option<Reason>,
) {
    let sites = ctx.sites;
    let label = site.and_then(|i| sites.label(i));
    let since = ctx.now;
    // One clock read per batch, for the log and the metrics both.
    let us = ctx.batch_us(since);
    let date = ctx.date;
    if let Some(log) = log_of(ctx, site) {
        // Made on the stack, only when a line is written.
        let id = req.request_id();
        log.record(&Line {
            clf_time: date.clf(),
            peer: req.client_addr().socket_addr(),
            method: req.method().as_bytes(),
            target: req.target().as_bytes(),
            version: req.version().as_str().as_bytes(),
            status,
            body_bytes,
            referer: req.header_bytes("referer"),
            user_agent: req.header_bytes("user-agent"),
            host: req.host,
            site: label,
            duration_us: Some(us),
            ttfb_us: Some(us),
            upstream: None,
            request_id: Some(id.as_bytes()),
            traceparent: crate::access_log::traceparent(req),
            tls: req.tls_facts,
            reason,
        });
    }
    if let Some(m) = ctx.metrics {
        m.record(req.method().as_bytes(), status, us);
        m.record_site(site, status);
    }
}

/// An answer whose body is still being sent after its head was queued
/// (a file, large bytes, a stream): what its log line and metrics need
/// once its last byte is written, or the connection closes before that
/// (`Sending::end`). Kept boxed by its connection (HTTP/1.1 sends one
/// such body at a time), so a connection grows by a pointer.
pub(crate) struct Sending {
    started: Instant,
    /// To the head queued: the time to the first byte.
    ttfb_us: u64,
    method_idx: usize,
    site: Option<u16>,
    status: u16,
    body_bytes: u64,
    reason: Option<Reason>,
    /// `None` when no access log takes the request.
    log: Option<LogRequest>,
    upstream: Option<UpstreamLog>,
    /// The end of a streamed body as its producer saw it: for the proxy,
    /// the upstream's last byte.
    body_end: Option<crate::body::EndWatch>,
}

/// A stream connection's answers whose bodies are being sent, by stream.
pub(crate) type Held = Vec<(u64, Box<Sending>)>;

/// The record of an answer queued now whose body is the output's tail:
/// written when the tail's last byte leaves (`Sending::end`). `None` on a
/// server that neither logs nor counts it.
pub(crate) fn hold(
    ctx: &mut Ctx<'_>,
    req: &Request<'_>,
    (status, body_bytes, reason): (u16, u64, Option<Reason>),
    body_end: Option<crate::body::EndWatch>,
) -> Option<Box<Sending>> {
    let site = req.site.get();
    let log = log_of(ctx, site).is_some().then(|| log_request(req));
    if log.is_none() && ctx.metrics.is_none() {
        // Neither logs nor counts: nothing to hold.
        return None;
    }
    let ttfb_us = ctx.batch_us(ctx.now);
    Some(Box::new(Sending {
        started: ctx.now,
        ttfb_us,
        method_idx: crate::metrics::method_index(req.method().as_bytes()),
        site,
        status,
        body_bytes,
        reason,
        log,
        upstream: None,
        body_end,
    }))
}

impl Sending {
    /// The body's last byte was written (or the connection closed first):
    /// the line and the metrics, timed now.
    pub(crate) fn end(self: Box<Self>, ctx: &mut Ctx<'_>, peer: SocketAddr) {
        let now = Instant::now();
        let us = micros_between(self.started, now);
        let Sending {
            ttfb_us,
            method_idx,
            site,
            status,
            mut body_bytes,
            reason,
            log,
            mut upstream,
            body_end,
            ..
        } = *self;
        // A streamed body cut short (the upstream closed early, the
        // client went away) counts the bytes taken to send, not the
        // length its head announced: nginx's `$body_bytes_sent`.
        if let Some(watch) = &body_end {
            body_bytes = body_bytes.min(watch.taken());
        }
        if let Some(up) = upstream.as_mut() {
            // A streamed answer: to the upstream's last byte, when it
            // ended whole.
            if up.response.is_none() {
                if let (Some(started), Some(end)) = (up.started, body_end.as_ref().and_then(|w| w.finished_at())) {
                    up.response = Some(end.saturating_duration_since(started));
                }
            }
        }
        let sites = ctx.sites;
        let label = site.and_then(|i| sites.label(i));
        let date = ctx.date;
        if let (Some(w), Some(req)) = (log_of(ctx, site), log.as_ref()) {
            w.record_owned(
                date.clf(),
                peer,
                req,
                label,
                (status, body_bytes, reason, upstream.as_ref()),
                (us, ttfb_us),
            );
        }
        if let Some(m) = ctx.metrics {
            m.record_index(method_idx, status, us);
            m.record_site(site, status);
        }
    }
}

/// A deferred answer arrived: counts it, and records it in the log and
/// the metrics if it was sent (`sent`: status and body bytes; `None` if
/// its stream is gone). An answer queued whole is recorded now; one whose
/// body is still to be sent (`tail`: `Some`, with the watch on a channel
/// body's end) is returned, to be ended when its last byte leaves.
pub(crate) fn finish(
    ctx: &mut Ctx<'_>,
    peer: SocketAddr,
    deferral: Deferral,
    sent: Option<(u16, u64, Option<Reason>)>,
    tail: Option<Option<crate::body::EndWatch>>,
) -> Option<Box<Sending>> {
    if let Some(m) = ctx.metrics {
        m.deferred_ended.add(1);
    }
    // The reverse proxy's figures, when the worker is handing over an
    // answer its upstream connections made (taken by the first answer
    // recorded, so they never reach another request's line).
    let upstream = ctx.upstream_log.take();
    let (status, body_bytes, reason) = sent?;
    let wanted = ctx.metrics.is_some() || log_of(ctx, deferral.site).is_some();
    let us = if wanted { ctx.batch_us(deferral.started) } else { 0 };
    if let Some(body_end) = tail.filter(|_| wanted) {
        return Some(Box::new(Sending {
            started: deferral.started,
            ttfb_us: us,
            method_idx: deferral.method_idx,
            site: deferral.site,
            status,
            body_bytes,
            reason,
            log: deferral.log,
            upstream,
            body_end,
        }));
    }
    let sites = ctx.sites;
    let label = deferral.site.and_then(|i| sites.label(i));
    let date = ctx.date;
    if let (Some(w), Some(req)) = (log_of(ctx, deferral.site), deferral.log.as_ref()) {
        w.record_owned(
            date.clf(),
            peer,
            req,
            label,
            (status, body_bytes, reason, upstream.as_ref()),
            (us, us),
        );
    }
    if let Some(m) = ctx.metrics {
        m.record_index(deferral.method_idx, status, us);
        m.record_site(deferral.site, status);
    }
    None
}

/// The owned copy of what the log line of a deferred request needs.
fn log_request(req: &Request<'_>) -> LogRequest {
    let id = req.request_id();
    let traceparent = crate::access_log::traceparent(req);
    let mut request_line = Vec::with_capacity(
        req.method().len() + req.target().len() + 10 + id.as_bytes().len() + traceparent.map_or(0, <[u8]>::len),
    );
    request_line.extend_from_slice(req.method().as_bytes());
    request_line.push(b' ');
    request_line.extend_from_slice(req.target().as_bytes());
    request_line.push(b' ');
    request_line.extend_from_slice(req.version().as_str().as_bytes());
    // The id and the traceparent after it, in the same allocation: the
    // record stays as small as a connection's state needs it.
    request_line.extend_from_slice(id.as_bytes());
    request_line.extend_from_slice(traceparent.unwrap_or_default());
    LogRequest {
        request_line,
        referer: req.header_bytes("referer").map(<[u8]>::to_vec),
        user_agent: req.header_bytes("user-agent").map(<[u8]>::to_vec),
        host: req.host.map(<[u8]>::to_vec),
        client: Some(req.client_addr().socket_addr()),
        id_len: u8::try_from(id.as_bytes().len()).unwrap_or(0),
        traceparent_len: traceparent.and_then(|t| u8::try_from(t.len()).ok()),
        tls: req.tls_facts,
    }
}
