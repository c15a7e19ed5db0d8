//! The request path of the stream protocols, written once for HTTP/2 and
//! HTTP/3 (h2o's single `h2o_process_request`): a stream whose request is
//! complete goes to the handler and its answer to the session; a stream
//! whose head is complete and whose body is coming is offered to a
//! handler that reads bodies as they arrive; a deferred answer finds its
//! stream. Each session is seen through `Streams`, a view that holds it
//! with what it writes into (HTTP/2: the connection's output buffer;
//! HTTP/3: quinn-proto's streams), so the glue here cannot drift between
//! the two: the same log line, metrics and `100 Continue` decisions, and
//! every answer queued where the handler left it (moving the large
//! `Response` out was a memcpy per request, about 1 % of h2load's
//! profile).

use std::cell::RefCell;
use std::net::SocketAddr;

use super::dispatch::{self, Called, Deferral, Held};
use super::{refused_line, Ctx};
use crate::access_log::Reason;
use crate::body::BodySink;
use crate::codec::Version;
use crate::handler::{BodyUse, Reply};
use crate::limits::BODY_READER_BYTES;
use crate::message::head::FieldArray;
use crate::message::{Parts, Sent};
use crate::request::{Origin, Request};
use crate::response::Response;

/// A stream protocol's session as the request path sees it. Stream ids
/// are HTTP/3's width; HTTP/2's fit.
pub(crate) trait Streams {
    /// The version handlers and the access log see.
    const VERSION: Version;
    /// A body the handler ignores is answered at the head (HTTP/3: then
    /// STOP_SENDING), rather than left to the session, which makes the
    /// stream ready when it has seen enough of the body (HTTP/2, where
    /// the client's DATA frames must still be judged: h2spec expects
    /// their stream errors). A request the engine refuses before any
    /// handler (501: `dispatch::is_unimplemented`) is answered at its
    /// head on both.
    const IGNORED_BODY_ANSWERED_AT_HEAD: bool;

    /// The status stream `id` was refused with before any handler saw it
    /// (413, 431, a malformed request), if it was.
    fn refused(&self, id: u64) -> Option<u16>;
    /// Stream `id`'s request, if it has a method and a target.
    fn parts(&self, id: u64) -> Option<Parts<'_>>;
    /// Queues `resp` as stream `id`'s answer, where it lies. `None` if the
    /// stream is gone.
    fn respond(&mut self, id: u64, resp: &mut Response, head_only: bool, date: &[u8]) -> Option<Sent>;
    /// The body will be read: a client waiting for `100 Continue` is told.
    fn send_continue(&mut self, id: u64);
    /// Stream `id`'s body goes to `sink` as it arrives.
    fn stream_body(&mut self, id: u64, sink: BodySink);
    /// The session leaves stream `id`'s ignored body to itself (only
    /// without `IGNORED_BODY_ANSWERED_AT_HEAD`).
    fn ignore_body(&mut self, id: u64);
    /// Stream `id`'s answer will come through the mailbox as `defer_id`.
    fn defer(&mut self, id: u64, defer_id: u64);
    /// The stream a deferred answer is for, unless the client reset it.
    fn deferred_stream(&self, defer_id: u64) -> Option<u64>;
    /// Accepts stream `id`'s extended CONNECT with `resp` (a 2xx): the
    /// stream carries a WebSocket from now on (HTTP/2: RFC 8441; HTTP/3:
    /// RFC 9220). False if the stream is gone.
    fn tunnel(&mut self, id: u64, resp: &Response, date: &[u8]) -> bool;
    /// Stream `id` was answered now: what is left of its request is not
    /// read (HTTP/3's STOP_SENDING; HTTP/2 resets the stream itself once
    /// the answer is sent).
    fn stop_reading(&mut self, id: u64);
}

/// Who a connection's requests come from.
#[derive(Clone, Copy)]
pub(crate) struct Client<'c> {
    /// The socket's peer (HTTP/3: the connection's current address).
    pub(crate) peer: SocketAddr,
    /// The source of the connection's PROXY header, if it gave one.
    pub(crate) proxy_source: Option<SocketAddr>,
    /// Over TLS, `Some` with the SNI name in normal form (`Request::tls`).
    pub(crate) tls: Option<Option<&'c str>>,
    /// Over TLS, its version and resumption, for the access log.
    pub(crate) tls_facts: Option<crate::access_log::TlsFacts>,
    /// The connection's token in the worker's mailbox.
    pub(crate) token: usize,
    /// Accepted on a listener that redirects to HTTPS.
    pub(crate) redirect: bool,
}

impl Client<'_> {
    /// Where the connection's requests come from, for `Request::origin`.
    fn origin<'t>(&'t self, trust: Option<&'t crate::client_addr::Trust>) -> Origin<'t> {
        Origin {
            peer: self.peer,
            proxy_source: &self.proxy_source,
            trust,
        }
    }
}

/// Calls the handler for stream `id`, whose request is complete, and
/// queues its answer (or records that it will come later in `deferred`).
/// A WebSocket the handler accepted on an extended CONNECT is returned,
/// for the driver to run on the stream.
#[inline]
pub(crate) fn answer<S: Streams>(
    ctx: &mut Ctx<'_>,
    s: &mut S,
    client: Client<'_>,
    (deferred, held): (&mut Vec<Deferral>, &mut Held),
    id: u64,
) -> Option<crate::ws::Upgrade> {
    let dates = ctx.date;
    let date = &dates.http()[..];
    if let Some(status) = s.refused(id) {
        let sent = s.respond(id, &mut Response::error(status), false, date);
        s.stop_reading(id);
        record_refused::<S>(ctx, client.proxy_source.unwrap_or(client.peer), status, sent);
        return None;
    }
    let Some(parts) = s.parts(id) else {
        // A stream without :method or :path passed the checks only as
        // CONNECT; answer what a malformed request gets.
        let sent = s.respond(id, &mut Response::error(400), false, date);
        record_refused::<S>(ctx, client.proxy_source.unwrap_or(client.peer), 400, sent);
        return None;
    };
    let mut fields = FieldArray::new();
    let headers = fields.fill(parts.head);
    let slot = dispatch::slot(ctx, client.token);
    let origin = client.origin(ctx.trust);
    let mut req = request::<S>(&origin, &parts, headers, parts.body);
    req.tls = client.tls;
    req.tls_facts = client.tls_facts;
    req.defer = Some(&slot);
    req.protocol = parts.protocol;
    req.trailers = parts.trailers;
    let head_only = parts.method == "HEAD";
    let mut handled = dispatch::call_stream(ctx, client.redirect, &req);
    if let Ok(Reply::Upgrade(_)) = &handled {
        // Logged as what it is answered: 200 (RFC 8441 §5), no body.
        dispatch::record(ctx, &req, 200, 0, None);
        return accept_upgrade(ctx, s, id, handled);
    }
    let response = match dispatch::settle(ctx, &slot, &req, &mut handled) {
        Called::Now(response) => response,
        Called::Later(deferral) => {
            s.defer(id, deferral.id);
            deferred.push(deferral);
            return None;
        }
    };
    if req.protocol.is_some() && (200..300).contains(&response.status) {
        // A 2xx opens the tunnel an extended CONNECT asks for (RFC 8441
        // §4), and only `ws::upgrade` makes one: another 2xx (a handler
        // that routes by path alone) would put a page where the client
        // expects WebSocket frames.
        *response = Response::error(501);
    }
    dispatch::tag(ctx, &req, response);
    let sent = Sent::of(response, head_only);
    record_sent(
        ctx,
        &req,
        sent,
        reason_of(response),
        is_large(response, head_only),
        (id, held),
    );
    s.respond(id, response, head_only, date);
    None
}

/// Whether `response`'s body is sent after its batch (a file, a stream,
/// more than `INLINE_BODY_BYTES_MAX`): its record is then held until the
/// stream has sent its last byte.
#[inline]
fn is_large(response: &Response, head_only: bool) -> bool {
    !head_only
        && response.status != 204
        && response.status != 304
        && response
            .body
            .len()
            .is_none_or(|n| n > crate::limits::INLINE_BODY_BYTES_MAX as u64)
}

/// Records an answer about to be queued on stream `id`: now if it leaves
/// with its batch, else held (`held`) until its stream has sent it all.
#[inline]
fn record_sent(
    ctx: &mut Ctx<'_>,
    req: &Request<'_>,
    sent: Sent,
    reason: Option<Reason>,
    large: bool,
    (id, held): (u64, &mut Held),
) {
    if large {
        if let Some(sending) = dispatch::hold(ctx, req, (sent.status, sent.body_bytes, reason), None) {
            held.push((id, sending));
        }
    } else {
        dispatch::record(ctx, req, sent.status, sent.body_bytes, reason);
    }
}

/// Why the engine made `response` (an invalid one is answered 500).
#[inline]
fn reason_of(response: &Response) -> Option<Reason> {
    match response.invalid {
        Some(_) => Some(Reason::InvalidResponse),
        None => response.reason,
    }
}

/// The handler accepted a WebSocket (`ws::upgrade` checked the extended
/// CONNECT): its 200 goes out and the WebSocket is returned. Out of line:
/// no other request carries it.
#[cold]
#[inline(never)]
fn accept_upgrade<S: Streams>(
    ctx: &mut Ctx<'_>,
    s: &mut S,
    id: u64,
    handled: dispatch::Handled,
) -> Option<crate::ws::Upgrade> {
    let Ok(Reply::Upgrade(up)) = handled else {
        return None;
    };
    let response = up.0.handshake.response();
    let date = &ctx.date.http()[..];
    if s.tunnel(id, &response, date) {
        return Some(up);
    }
    // Only a bug gets here: the stream was just handed out, so it is
    // there to accept.
    s.respond(id, &mut Response::error(500), false, date);
    None
}

/// Stream `id`'s head is complete and its body is coming: if its handler
/// reads bodies as they arrive (`body::streamed`), or ignores them where
/// the protocol answers those at the head, calls it now; else tells a
/// client waiting for `100 Continue` that the body will be collected.
pub(crate) fn start_upload<S: Streams>(
    ctx: &mut Ctx<'_>,
    s: &mut S,
    client: Client<'_>,
    (deferred, held): (&mut Vec<Deferral>, &mut Held),
    id: u64,
) {
    if s.refused(id).is_some() {
        return; // answered without the handler (413 already, 431)
    }
    let Some(parts) = s.parts(id) else { return };
    let mut fields = FieldArray::new();
    let headers = fields.fill(parts.head);
    let origin = client.origin(ctx.trust);
    let mut req = request::<S>(&origin, &parts, headers, &[]);
    req.tls = client.tls;
    req.tls_facts = client.tls_facts;
    let (reader, sink) = match dispatch::body_use(ctx, client.redirect, &req) {
        BodyUse::Stream => {
            let (reader, sink) = crate::body::pipe(BODY_READER_BYTES);
            sink.bind(ctx.mailbox, client.token);
            (Some(reader), sink)
        }
        BodyUse::Ignore => {
            if let Some(m) = ctx.metrics {
                m.bodies_ignored.add(1);
            }
            // A request refused before any handler runs (a method not
            // implemented, a plain CONNECT) is answered at its head on
            // every version: no DATA frame can change its answer, and a
            // CONNECT's "body" may never end (HTTP/2 resets the stream
            // once the 501 is sent, §8.1).
            if !S::IGNORED_BODY_ANSWERED_AT_HEAD && !dispatch::is_unimplemented(ctx, client.redirect, &req) {
                s.ignore_body(id);
                return;
            }
            (None, BodySink::discard())
        }
        _ => {
            // The body is collected, then the handler called: a client
            // waiting for 100 Continue may send it.
            s.send_continue(id);
            return;
        }
    };
    let offered = reader.is_some();
    let reader = RefCell::new(reader);
    if offered {
        req.reader = Some(&reader);
    }
    let slot = dispatch::slot(ctx, client.token);
    req.defer = Some(&slot);
    let head_only = parts.method == "HEAD";
    let mut handled = dispatch::call_stream(ctx, client.redirect, &req);
    // A reader not taken is dropped: the body is discarded.
    let taken = offered && reader.borrow_mut().take().is_none();
    let mut called = dispatch::settle(ctx, &slot, &req, &mut handled);
    if let Called::Now(response) = &mut called {
        dispatch::tag(ctx, &req, response);
        let sent = Sent::of(response, head_only);
        record_sent(
            ctx,
            &req,
            sent,
            reason_of(response),
            is_large(response, head_only),
            (id, held),
        );
    }
    if taken && !sink.is_continue_held() {
        // The handler reads the body: a client waiting for 100 Continue
        // may send it (before any final answer below). A reader that
        // holds it back relays it later (`Conn::on_interim`, HTTP/3's
        // `quic::Conn::on_interim`).
        s.send_continue(id);
    }
    s.stream_body(id, sink);
    match called {
        Called::Now(response) => {
            let date = &ctx.date.http()[..];
            s.respond(id, response, head_only, date);
            // Answered before the body's end: the rest is not read.
            s.stop_reading(id);
        }
        Called::Later(deferral) => {
            s.defer(id, deferral.id);
            deferred.push(deferral);
        }
    }
}

/// A deferred answer arrived from another thread: queues it on its stream
/// and records it. False if this connection owes no such answer.
pub(crate) fn on_answer<S: Streams>(
    ctx: &mut Ctx<'_>,
    s: &mut S,
    peer: SocketAddr,
    (deferred, held): (&mut Vec<Deferral>, &mut Held),
    defer_id: u64,
    response: &mut Response,
) -> bool {
    let Some(at) = deferred.iter().position(|d| d.id == defer_id) else {
        return false;
    };
    let wait = deferred.swap_remove(at);
    dispatch::tag_deferred(ctx, &wait, response);
    let large = is_large(response, wait.head_only);
    let reason = reason_of(response);
    // A streamed answer (the proxy's) is timed to its producer's end.
    let body_end = match &response.body {
        crate::Body::Channel(rx) if large => Some(rx.end_watch()),
        _ => None,
    };
    // The client may have reset the stream meanwhile.
    let stream = s.deferred_stream(defer_id);
    let sent = match stream {
        Some(stream) => s.respond(stream, response, wait.head_only, &ctx.date.http()[..]),
        None => None,
    };
    let tail = large.then_some(body_end);
    if let (Some(sending), Some(stream)) = (
        dispatch::finish(ctx, peer, wait, sent.map(|s| (s.status, s.body_bytes, reason)), tail),
        stream,
    ) {
        held.push((stream, sending));
    }
    true
}

/// The request handlers see for a stream's `parts`, from `origin`.
fn request<'a, S: Streams>(
    origin: &'a Origin<'a>,
    parts: &Parts<'a>,
    headers: &'a [httparse::Header<'a>],
    body: &'a [u8],
) -> Request<'a> {
    Request::new(
        parts.method,
        parts.target,
        S::VERSION,
        headers,
        parts.host,
        body,
        origin,
    )
}

/// The log line and metrics of a request answered without its handler:
/// the bytes of the error's body that was sent, as for any answer.
fn record_refused<S: Streams>(ctx: &mut Ctx<'_>, peer: SocketAddr, status: u16, sent: Option<Sent>) {
    let us = ctx.batch_us(ctx.now);
    if let (Some(log), Some(sent)) = (ctx.log.as_deref_mut(), sent) {
        let version = S::VERSION.as_str().as_bytes();
        log.record(&refused_line(
            ctx.date.clf(),
            peer,
            version,
            sent.status,
            sent.body_bytes,
            us,
            Reason::of_refusal(sent.status),
        ));
    }
    if let Some(m) = ctx.metrics {
        m.record(b"-", status, us);
    }
}
