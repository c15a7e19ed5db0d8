//! The HTTP/1.1 side of a connection: drives the sans-I/O `h1::H1`
//! machine over the read buffer, calls the handler for each request it
//! gives out, and hands its answers back to it. Every complete request in
//! the buffer is answered into one output buffer before anything is
//! written (one write per pipelined batch).

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::net::SocketAddr;

use super::dispatch::{self, Answering, Called};
use super::{refused_line, Conn, Ctx, Next, Proto, Stop, Transport};
use crate::body::BodySink;
use crate::buffers::ensure_output;
use crate::conn::dispatch::{Deferral, Sending};
use crate::h1::H1;
use crate::h1::{BodyStart, Env, Event, Feed, Link, Refusal, TimedOut, Wait};
use crate::handler::{BodyUse, Reply};
use crate::limits::BODY_READER_BYTES;
use crate::limits::HEADERS_ARRAY_MAX;
use crate::request::Request;
use crate::response::Response;

/// HTTP/1.1 in the connection's protocol slot: the machine, and the
/// request whose answer a deferred handler owes.
#[repr(C)]
pub(super) struct Http1 {
    pub(super) machine: H1,
    /// The WebSocket a handler accepted, whose 101 is queued: it takes
    /// the connection (`Stop::Switched`).
    pub(super) upgrade: Option<crate::ws::Upgrade>,
    /// The answer whose body (the output's tail) is being sent: its log
    /// line and metrics wait for the last byte (`Conn::end_sending`).
    pub(super) sending: Option<Box<Sending>>,
    /// The trailer section of the chunked request being handled, lent to
    /// its `Request` (`Request::trailers`). Kept here, not in a local of
    /// `process_h1`: a local with a destructor, live across the handler's
    /// call, cost a plain GET 17 instructions it never used (callgrind,
    /// hello-pipe16: 1,896 to 1,879 a request).
    /// Boxed, as `H1`'s: an inline `Vec` would give `Proto` its niche.
    pub(super) trailers: Option<Box<crate::message::trailers::Trailers>>,
    /// Last (`#[repr(C)]`, as `Conn`'s slot): 176 bytes read only by a
    /// deferred answer, apart from the machine every request reads.
    pub(super) deferral: Option<Deferral>,
}

impl Http1 {
    /// A connection's machine before its first request, which must come
    /// by `deadline` (the head timeout).
    pub(super) fn new(deadline: Option<std::time::Instant>) -> Self {
        let mut machine = H1::new();
        machine.set_deadline(deadline);
        Http1 {
            machine,
            deferral: None,
            upgrade: None,
            sending: None,
            trailers: None,
        }
    }
}

impl Conn {
    /// Answers the complete requests in the read buffer.
    #[inline(always)]
    pub(super) fn process_h1(&mut self, ctx: &mut Ctx<'_>) -> Stop {
        let env = ctx.h1;
        let Conn {
            input,
            output,
            proto,
            transport,
            peer,
            proxy_source,
            redirect,
            token,
            work_left,
            drained,
            peer_closed,
            ..
        } = self;
        let origin = crate::request::Origin {
            peer: *peer,
            proxy_source,
            trust: ctx.trust,
        };
        let Proto::H1(Http1 {
            machine: h1,
            deferral: awaited,
            upgrade,
            sending,
            trailers,
        }) = proto
        else {
            return Stop::Closing;
        };
        // Where a handler's `Request::defer` records its promise: one for
        // the call, its id cleared for each request (a deferred request
        // ends the loop: the requests behind it wait).
        let slot = dispatch::slot(ctx, *token);
        loop {
            if h1.is_uploading() {
                // A body being read: its code after the bodiless path's.
                crate::h1::cold_path();
                ensure_output(output, ctx.pool);
                let fed = h1.feed(input, output, env);
                if let Some(m) = ctx.metrics {
                    m.body_bytes_discarded.add(h1.take_discarded());
                }
                match fed {
                    Feed::Done => {}
                    Feed::Input => return Stop::Input,
                    // Stop reading: the client's bytes wait in the socket
                    // (TCP's window closes) until the reader makes room
                    // and wakes the connection.
                    Feed::Full => return Stop::Deferred,
                    Feed::Refused(refusal) => {
                        input.discard();
                        record_refused(ctx, origin.connection_addr(), refusal);
                        return Stop::Closing;
                    }
                    Feed::Closing => {
                        input.discard();
                        return Stop::Closing;
                    }
                }
            }
            if output.tail.is_some() || output.queued() > ctx.limits.write_buffer_bytes_max {
                return Stop::Output;
            }
            if Self::over_output_budget(ctx, output.queued()) {
                crate::h1::cold_path();
                if let Some(m) = ctx.metrics {
                    m.output_budget_waits.add(1);
                }
                return Stop::Output;
            }
            if input.is_empty() {
                // What `poll` would say of no bytes in this state,
                // without its call and its event: after each answer of a
                // client that sends one request at a time (hello-c50).
                if h1.is_idle() {
                    if trailers.is_some() {
                        *trailers = None;
                    }
                    return Stop::Input;
                }
            } else {
                if *work_left == 0 {
                    return Stop::Turn;
                }
                *work_left -= 1;
            }
            ensure_output(output, ctx.pool);
            let mut headers = [const { MaybeUninit::uninit() }; HEADERS_ARRAY_MAX];
            // Where `poll` puts the request it finds, made by the parse
            // from the head's values where they are computed: a head
            // carried in the event was copied twice on its way here
            // (hello-c50 1,644 -> 1,615 instructions a request, callgrind,
            // bench/runs/2026-11-28-loop10), and a head written to a place
            // of its own, then copied into the `Request`, was stored twice
            // (bench/runs/2026-11-28-hreq).
            let mut made = None;
            let data = &mut input.buf[input.start..input.end];
            let make = |head: &_| Request::of_head(head, &[], &origin);
            match h1.poll(data, &mut headers, env, output, &mut made, make) {
                Event::Request { body, consumed } => {
                    // `poll` put the request there with the event.
                    let Some(req) = &mut made else {
                        return Stop::Closing;
                    };
                    slot.id.set(None);
                    req.body = body;
                    // Only a chunked body can end with trailers.
                    if h1.has_trailers() {
                        *trailers = h1.take_trailers();
                        req.trailers = trailers.as_deref();
                    }
                    req.defer = Some(&slot);
                    // A plain connection's request keeps what `of_head`
                    // gave it, no TLS: the two calls and their stores were
                    // 7 instructions a request (callgrind, hello-pipe16).
                    if !matches!(transport, Transport::Plain) {
                        req.tls = transport.request_tls();
                        req.tls_facts = transport.tls_facts();
                    }
                    let req: &Request<'_> = req;
                    let extra_fields = transport.extra_fields();
                    // Nothing is queued behind a tail (checked above).
                    let queued = output.buf.len();
                    let tag = ctx.request_id_header;
                    let answered = dispatch::call_answering(ctx, *redirect, &slot, req, |response| {
                        if tag {
                            dispatch::tag_request_id(req.request_id().as_bytes(), response);
                        }
                        let sent = h1.respond(output, response, env, extra_fields);
                        (sent, response.reason)
                    });
                    let mut handled = match answered {
                        Answering::Now((sent, reason)) => {
                            record_sent(ctx, req, sent, reason, output, sending);
                            input.start += consumed;
                            // The last request read, answered, and the
                            // socket known to hold no more (`drained`, or
                            // the peer's FIN): the loop's next pass could
                            // only say `Input` (the driver writes, then
                            // finds nothing to read, whatever the output
                            // holds), and its checks were 25 instructions
                            // a request at c50 (callgrind, hello-c50).
                            if input.is_empty() && (*drained || *peer_closed) && h1.is_idle() {
                                if trailers.is_some() {
                                    *trailers = None;
                                }
                                return Stop::Input;
                            }
                            continue;
                        }
                        Answering::Broken((sent, reason)) => {
                            crate::h1::cold_path();
                            h1.close();
                            record_sent(ctx, req, sent, reason, output, sending);
                            input.start += consumed;
                            continue;
                        }
                        Answering::Interrupted(handled) => {
                            crate::h1::cold_path();
                            // The machine still awaits this answer: what
                            // was queued of it goes, the 500 comes instead.
                            output.buf.truncate(queued);
                            output.tail = None;
                            handled
                        }
                        Answering::Settle(handled) => handled,
                    };
                    if let Ok(Reply::Upgrade(_)) = &handled {
                        input.start += consumed;
                        if upgrade_h1(ctx, req, handled, h1, output, env, extra_fields, upgrade) {
                            return Stop::Switched;
                        }
                        continue;
                    }
                    match dispatch::settle(ctx, &slot, req, &mut handled) {
                        Called::Now(response) => {
                            dispatch::tag(ctx, req, response);
                            let sent = h1.respond(output, response, env, extra_fields);
                            record_sent(ctx, req, sent, response.reason, output, sending);
                        }
                        Called::Later(deferral) => {
                            h1.defer();
                            *awaited = Some(deferral);
                        }
                    }
                    input.start += consumed;
                }
                Event::BodyAhead(start) => {
                    // `poll` put the request there with the event.
                    let Some(req) = made else {
                        return Stop::Closing;
                    };
                    let ahead = Ahead {
                        transport,
                        redirect: *redirect,
                        token: *token,
                    };
                    ahead.call(ctx, req, start, h1, env, &mut input.start, output, sending, awaited);
                }
                Event::Input => {
                    // The last request's trailer section, lent to it only
                    // while its handler ran: not held by a connection
                    // waiting for its next request.
                    if trailers.is_some() {
                        *trailers = None;
                    }
                    return Stop::Input;
                }
                Event::Again => {}
                Event::Deferred => return Stop::Deferred,
                Event::Closing => return Stop::Closing,
                // A 101 queued without a WebSocket to take over cannot
                // happen (`Stop::Switched` comes first); close.
                Event::Upgraded => return Stop::Closing,
                Event::Refused(refusal) => {
                    input.discard();
                    record_refused(ctx, origin.connection_addr(), refusal);
                    return Stop::Closing;
                }
                Event::NotHttp => {
                    input.discard();
                    if let Some(m) = ctx.metrics {
                        m.record(b"-", 400, ctx.batch_us(ctx.now));
                    }
                    return Stop::Closing;
                }
            }
        }
    }

    /// A deferred answer for this HTTP/1.1 connection. False if it is not
    /// the one awaited.
    pub(super) fn on_answer_h1(&mut self, ctx: &mut Ctx<'_>, id: u64, mut response: Response) -> bool {
        let Proto::H1(h1) = &mut self.proto else {
            return false;
        };
        if h1.deferral.as_ref().is_none_or(|d| d.id != id) {
            return false;
        }
        let Some(deferral) = h1.deferral.take() else {
            return false;
        };
        ensure_output(&mut self.output, ctx.pool);
        let env = ctx.h1;
        dispatch::tag_deferred(ctx, &deferral, &mut response);
        // A streamed answer (the proxy's) is timed to its producer's end.
        let body_end = match &response.body {
            crate::Body::Channel(rx) => Some(rx.end_watch()),
            _ => None,
        };
        let sent = h1
            .machine
            .answer(&mut self.output, &mut response, env, self.transport.extra_fields());
        let tail = self.output.tail.is_some().then_some(body_end);
        let sent = sent.map(|s| (s.status, s.body_bytes, response.reason));
        h1.sending = dispatch::finish(ctx, self.peer, deferral, sent, tail);
        true
    }

    /// The proxy's answer relayed in one pass (`proxy::pool::Relayed`:
    /// `status`, then `rest`, its field lines, blank line and body of
    /// `body_len` bytes) to the deferred request `id`: its head's first
    /// lines written and `rest` copied after them, the bytes
    /// `on_answer_h1` writes for the `Response` made of it
    /// (`h1/respond.rs`'s `write_relayed_whole`), then written out as
    /// after any answer. `None`, nothing done, for what only the general
    /// path does: another protocol, not the answer awaited, a request id
    /// to add, the transport's fields, a HEAD, a body being read (and
    /// what `H1::answer_relayed` declines).
    #[inline(always)]
    pub(crate) fn on_relayed(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: u64,
        status: u16,
        rest: &[u8],
        body_len: usize,
    ) -> Option<Next> {
        let Proto::H1(h1) = &mut self.proto else {
            return None;
        };
        let deferral = h1.deferral.as_ref().filter(|d| d.id == id)?;
        if (ctx.request_id_header && deferral.log.is_some()) || !self.transport.extra_fields().is_empty() {
            return None;
        }
        ensure_output(&mut self.output, ctx.pool);
        let sent = h1
            .machine
            .answer_relayed(&mut self.output, ctx.h1, status, rest, body_len)?;
        let deferral = h1.deferral.take()?;
        // As `on_answer_h1`: a body tail left by an earlier answer keeps
        // this one's record until it is written.
        let tail = self.output.tail.is_some().then_some(None);
        h1.sending = dispatch::finish(
            ctx,
            self.peer,
            deferral,
            Some((sent.status, sent.body_bytes, None)),
            tail,
        );
        let quiet = self.answered_quietly(ctx);
        Some(self.drive_from(ctx, quiet))
    }

    /// Whether an answer's body is being sent, its record held (HTTP/1.1
    /// and HTTP/2).
    #[inline]
    pub(crate) fn is_sending(&self) -> bool {
        match &self.proto {
            Proto::H1(h1) => h1.sending.is_some(),
            Proto::H2(h2) => !h2.held.is_empty(),
            Proto::Ws(_) | Proto::Tunnel(_) => false,
        }
    }

    /// The bodies being sent that have left whole (every one with `all`:
    /// the connection closes before they could): their answers' log lines
    /// and metrics, timed now.
    #[cold]
    #[inline(never)]
    pub(crate) fn end_sending(&mut self, ctx: &mut Ctx<'_>, all: bool) {
        match &mut self.proto {
            Proto::H1(h1) => {
                if let Some(sending) = h1.sending.take() {
                    sending.end(ctx, self.peer);
                }
            }
            Proto::H2(_) => self.end_held_h2(ctx, all),
            Proto::Ws(_) | Proto::Tunnel(_) => {}
        }
    }

    /// The HTTP/1.1 deadline, or whether to close, once the connection
    /// waits. Inlined: `drive` calls it after every answer.
    #[inline(always)]
    pub(super) fn h1_wait(&mut self, ctx: &Ctx<'_>) -> Option<Next> {
        let facts = crate::h1::IdleFacts {
            peer_closed: self.peer_closed,
            handshaking: self.is_handshaking(),
            input_empty: self.input.is_empty(),
        };
        let Proto::H1(h1) = &mut self.proto else {
            return Some(Next::Close);
        };
        // The common wait without an `Env` or a `Link`: building an `Env`
        // here for it cost hello c50 24 instructions a request (1,982 ->
        // 1,958, callgrind).
        let wait = match h1.machine.idle_wait_of(ctx.idle_until, ctx.draining, facts) {
            Some(wait) => wait,
            None => self.h1_poll_timeout(ctx),
        };
        match wait {
            Wait::Close => Some(Next::Close),
            Wait::Until(deadline) => {
                self.state_deadline = deadline;
                None
            }
        }
    }

    /// The wait `h1_wait` does not find inline: the machine's own
    /// `poll_timeout`, with the whole `Link` and an `Env`. Out of line:
    /// rare after an answer.
    #[inline(never)]
    fn h1_poll_timeout(&mut self, ctx: &Ctx<'_>) -> Wait {
        let link = self.h1_link();
        let Proto::H1(h1) = &mut self.proto else {
            return Wait::Close;
        };
        h1.machine.poll_timeout(ctx.h1, link)
    }

    /// The HTTP/1.1 deadline passed: a 408 for a request not received in
    /// time, else close (idle) or keep (a deferred answer has no timeout).
    pub(super) fn h1_time_out(&mut self, ctx: &mut Ctx<'_>) -> Next {
        ensure_output(&mut self.output, ctx.pool);
        let env = ctx.h1;
        let link = self.h1_link();
        let Proto::H1(h1) = &mut self.proto else {
            return Next::Close;
        };
        match h1.machine.handle_timeout(&mut self.output, env, link) {
            TimedOut::Refused(refusal) => {
                self.input.discard();
                record_refused(ctx, self.connection_addr(), refusal);
                if let Some(m) = ctx.metrics {
                    m.slow_requests.add(1);
                }
                self.drive(ctx)
            }
            TimedOut::Again => {
                if let Some(next) = self.h1_wait(ctx) {
                    return next;
                }
                self.deadline = self.state_deadline;
                Next::Keep
            }
            TimedOut::Keep => {
                self.deadline = None;
                self.state_deadline = None;
                Next::Keep
            }
            TimedOut::Close => {
                if let Transport::Tls(tls) = &self.transport {
                    if tls.is_handshaking() {
                        crate::tls::session::debug(self.peer, "handshake not finished within head_timeout");
                    }
                }
                Next::Close
            }
        }
    }

    /// A TLS handshake is under way.
    #[inline(always)]
    fn is_handshaking(&self) -> bool {
        matches!(&self.transport, Transport::Tls(tls) if tls.is_handshaking())
    }

    /// What the HTTP/1.1 machine needs to know of the connection.
    fn h1_link(&self) -> Link {
        Link {
            peer_closed: self.peer_closed,
            fresh: self.fresh,
            handshaking: self.is_handshaking(),
            input_empty: self.input.is_empty(),
            unconsumed: self.input.end - self.input.start,
            bytes_in: self.bytes_in,
        }
    }

    /// Makes room in the read buffer; false if the request cannot grow
    /// further (its error answer is queued). Out of line: only a full
    /// buffer comes here.
    #[inline(never)]
    pub(super) fn h1_make_room(&mut self, ctx: &mut Ctx<'_>) -> bool {
        ensure_output(&mut self.output, ctx.pool);
        let env = ctx.h1;
        // What is left of the worker's budget of buffered bodies.
        let grow_bytes_max = ctx.limits.body_budget_bytes.saturating_sub(ctx.pool.bodies);
        let before = self.input.buf.len();
        let Proto::H1(h1) = &mut self.proto else {
            return false;
        };
        let made = h1
            .machine
            .make_room(&mut self.input, &mut self.output, env, grow_bytes_max);
        // What the buffer grew by is held against the worker's budget
        // until the buffer is given back (`give_input`).
        let grown = self.input.buf.len().saturating_sub(before);
        self.input_charge += grown;
        ctx.pool.bodies += grown;
        match made {
            Ok(()) => true,
            Err(refusal) => {
                self.input.discard();
                record_refused(ctx, self.connection_addr(), refusal);
                if let (503, Some(m)) = (refusal.status, ctx.metrics) {
                    m.budget_refusals.add(1);
                }
                false
            }
        }
    }
}

/// What a request whose body follows its head needs of its connection
/// (`Event::BodyAhead`).
struct Ahead<'c> {
    transport: &'c Transport,
    redirect: bool,
    token: usize,
}

impl Ahead<'_> {
    /// Asks the handler what it does with the body, then either buffers
    /// it (the next `poll` hands the request out whole) or calls the handler now and
    /// streams or discards the body. Out of line: the path of a request
    /// with a body, kept out of the driver's code every bodiless request
    /// runs through (bench/runs/2026-11-27-req6).
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn call(
        &self,
        ctx: &mut Ctx<'_>,
        req: Request<'_>,
        start: BodyStart,
        h1: &mut H1,
        env: &Env<'_>,
        input_start: &mut usize,
        output: &mut crate::buffers::Output,
        sending: &mut Option<Box<Sending>>,
        awaited: &mut Option<Deferral>,
    ) {
        // Its own lifetime, within this call: the body's reader, a local,
        // is lent to it.
        let mut req: Request<'_> = req;
        req.tls = self.transport.request_tls();
        req.tls_facts = self.transport.tls_facts();
        let used = dispatch::body_use(ctx, self.redirect, &req);
        if used == BodyUse::Buffer {
            h1.buffer_body();
            return;
        }
        // The handler reads the body as it arrives, or not at
        // all: call it now, before the body.
        let (reader, sink) = if used == BodyUse::Stream {
            let (reader, sink) = crate::body::pipe(BODY_READER_BYTES);
            sink.bind(ctx.mailbox, self.token);
            (Some(reader), sink)
        } else {
            (None, BodySink::discard())
        };
        let offered = reader.is_some();
        let reader = RefCell::new(reader);
        if offered {
            req.reader = Some(&reader);
        }
        let slot = dispatch::slot(ctx, self.token);
        req.defer = Some(&slot);
        let mut handled = dispatch::call(ctx, self.redirect, &req);
        // A reader not taken is dropped: the body is discarded.
        let taken = offered && reader.borrow_mut().take().is_none();
        if !offered {
            if let Some(m) = ctx.metrics {
                m.bodies_ignored.add(1);
            }
        }
        let called = dispatch::settle(ctx, &slot, &req, &mut handled);
        // A reader that holds the 100 back relays it later
        // (`on_interim`: the proxy's upstream sent one).
        let continue_now = taken && !sink.is_continue_held();
        *input_start += h1.stream_body(start, sink, continue_now, env, output);
        match called {
            Called::Now(response) => {
                dispatch::tag(ctx, &req, response);
                let sent = h1.respond(output, response, env, self.transport.extra_fields());
                record_sent(ctx, &req, sent, response.reason, output, sending);
            }
            Called::Later(deferral) => {
                h1.defer();
                *awaited = Some(deferral);
            }
        }
    }
}

/// The handler accepted a WebSocket: the 101 is queued and `upgrade`
/// holds what takes the connection (true), or, should the request not
/// offer an upgrade after all, a 400. Out of line: rare, and its code
/// sat in the middle of every request's path.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn upgrade_h1(
    ctx: &mut Ctx<'_>,
    req: &Request<'_>,
    handled: dispatch::Handled,
    h1: &mut H1,
    output: &mut crate::buffers::Output,
    env: &Env<'_>,
    extra_fields: &[u8],
    upgrade: &mut Option<crate::ws::Upgrade>,
) -> bool {
    let Ok(Reply::Upgrade(accepted)) = handled else {
        unreachable!("matched by the caller")
    };
    let fields = accepted.0.handshake.fields();
    if let Some(sent) = h1.upgrade(output, "websocket", &fields, env) {
        dispatch::record(ctx, req, sent.status, sent.body_bytes, None);
        *upgrade = Some(accepted);
        return true;
    }
    // `ws::upgrade` checked the request: only a bug gets here.
    let mut refused = Response::error(400).with_close();
    let sent = h1.respond(output, &mut refused, env, extra_fields);
    dispatch::record(ctx, req, sent.status, sent.body_bytes, None);
    false
}

/// Records an answer just queued: now if it was queued whole (it leaves
/// with this batch), else its record is held in `sending` until its body,
/// the output's tail, has left. Always inlined: the build that called
/// it counted 1,404 instructions a pipelined hello against 1,377 with it
/// inlined (callgrind, bench/runs/2026-11-27-req6, req6-2 and req6-3).
#[inline(always)]
fn record_sent(
    ctx: &mut Ctx<'_>,
    req: &Request<'_>,
    sent: crate::h1::Sent,
    reason: Option<crate::Reason>,
    output: &crate::buffers::Output,
    sending: &mut Option<Box<Sending>>,
) {
    if output.tail.is_none() {
        dispatch::record(ctx, req, sent.status, sent.body_bytes, reason);
    } else {
        *sending = dispatch::hold(ctx, req, (sent.status, sent.body_bytes, reason), None);
    }
}

/// The log line (with the error body's bytes, as HTTP/2 and HTTP/3 log
/// theirs) and metrics of a request refused before a handler saw it.
#[cold]
#[inline(never)]
fn record_refused(ctx: &mut Ctx<'_>, peer: SocketAddr, refusal: Refusal) {
    let Refusal {
        status,
        body_bytes,
        reason,
    } = refusal;
    let us = ctx.batch_us(ctx.now);
    if let Some(log) = ctx.log.as_deref_mut() {
        log.record(&refused_line(
            ctx.date.clf(),
            peer,
            b"-",
            status,
            body_bytes,
            us,
            reason,
        ));
    }
    if let Some(m) = ctx.metrics {
        m.record(b"-", status, us);
    }
}
