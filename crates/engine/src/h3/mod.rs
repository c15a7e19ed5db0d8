//! HTTP/3 (RFC 9114) with QPACK (RFC 9204), as a state machine that does
//! no I/O: each stream's bytes from the client go in (`Session::handle_input`),
//! complete requests come out for the same handlers HTTP/1.1 and HTTP/2
//! call (`take_ready`, `parts`), and each stream's bytes to send come out
//! (`Session::poll_output`). QUIC itself (packets, loss, flow control, TLS)
//! is quinn-proto's, driven by `crate::quic`; the two meet only through
//! stream ids and byte slices.
//!
//! Choices, where the RFC leaves them to us:
//! - A request body goes as its handler says (`Handler::body_use`), as
//!   for HTTP/1.1 and HTTP/2: collected whole (up to `body_bytes_max`,
//!   within the worker's body budget), read as it arrives, or not read at
//!   all (answered at the head, the rest refused with STOP_SENDING). A
//!   larger one is answered 413 at once and the rest refused with
//!   STOP_SENDING (H3_NO_ERROR, §4.1.1). A head must come within
//!   `head_timeout`, a body at the minimum rate (`poll_timeout`, `handle_timeout`).
//! - `expect: 100-continue` gets an interim HEADERS (`:status` 100) once
//!   the driver knows the body will be read (`send_continue`), as over
//!   HTTP/2; another expectation gets 417.
//! - A malformed request (§4.1.2) gets a 400 naming the problem, then
//!   STOP_SENDING with H3_MESSAGE_ERROR; a header section over
//!   `head_bytes_max` a 431 (H3_EXCESSIVE_LOAD).
//! - No server push, no dynamic table (see `qpack`), no QPACK streams of
//!   our own (RFC 9204 §4.2 lets an endpoint that uses no table skip them).
//! - Responses go out as one DATA frame per chunk read (at most
//!   `H3_CHUNK_BYTES`), so a file is read as quinn-proto's send buffer
//!   takes it, never whole.

pub(crate) mod frame;
pub(crate) mod qpack;
pub(crate) mod stream;

#[cfg(test)]
mod tests;

use frame::Code;
use stream::{Error, RequestStream, UniKind, UniStream};

use crate::budget::BodyBudget;
use crate::limits::H3_CHUNK_BYTES;
use crate::message::pending::{Pending, Unsent};
use crate::message::{Parts, Sent};
use crate::min_rate::{MinRate, Rate};
use crate::response::Response;
use std::time::{Duration, Instant};

pub(crate) use stream::Config;

/// A client-initiated bidirectional stream id is a request stream (§6.1);
/// client unidirectional ids end in 0b10.
pub(crate) fn is_request_stream(id: u64) -> bool {
    id & 0x3 == 0
}

/// One request stream: its parser, and once answered, what is left to send.
struct Request {
    id: u64,
    parse: RequestStream,
    answer: Answer,
    /// Bytes to send, from `pos` on; refilled from `pending`.
    out: Vec<u8>,
    pos: usize,
    pending: Option<Pending>,
    /// Bytes of `pending` counted in the session's `unsent`.
    held: usize,
    /// The head was offered to the driver (`take_head`).
    offered: bool,
    /// An interim 100 (Continue) was queued (`send_continue`).
    continued: bool,
    /// When the stream's first bytes came: its head must be complete
    /// within `head_timeout`.
    opened: Instant,
    /// The body's minimum rate, once the head is complete.
    rate: Option<MinRate>,
    /// A WebSocket's stream (`Answer::Tunnel`): it is over, FIN after
    /// `out`.
    ended: bool,
}

impl Request {
    /// Its head or body is still coming from the client, and no answer
    /// has begun (a streamed body's handler may have the request): what
    /// the head and body timeouts watch.
    fn is_arriving(&self) -> bool {
        let answerable = match self.answer {
            Answer::None => true,
            Answer::Taken | Answer::Deferred(_) => self.parse.upload.is_some(),
            Answer::Sending | Answer::Tunnel => false,
        };
        answerable && !self.parse.fin && self.parse.refused.is_none()
    }

    /// Bytes of heap its buffers hold on to.
    fn retained_bytes(&self) -> usize {
        self.parse.retained_bytes() + self.out.capacity()
    }
}

/// Where a request's answer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    /// Waiting for the request (or its handler's turn).
    None,
    /// Handed out by `take_ready`.
    Taken,
    /// The handler answers later through a responder.
    Deferred(u64),
    /// The head is queued; the body is being sent.
    Sending,
    /// A 2xx accepted the extended CONNECT (RFC 9220): the stream carries
    /// a WebSocket both ways, its DATA payloads in `parse.body` (the
    /// input), its frames into `out` as DATA frames (`with_tunnel`).
    Tunnel,
}

/// A WebSocket stream's bytes, lent to the driver's WebSocket machine
/// (`Session::with_tunnel`).
pub(crate) struct TunnelIo<'t> {
    /// DATA payloads received and not yet read by the machine.
    pub(crate) input: &'t mut Vec<u8>,
    /// What the machine writes goes at the end, inside one DATA frame;
    /// bytes before `sent` have been taken by the QUIC stream.
    pub(crate) output: &'t mut Vec<u8>,
    pub(crate) sent: usize,
    /// The client has ended its side (FIN): the TCP close of RFC 6455.
    pub(crate) peer_done: bool,
}

/// The most a WebSocket stream's input holds unread: the driver reads no
/// more of the QUIC stream (so QUIC gives the client no more credit), as
/// HTTP/2 gives a WebSocket stream its window back only as its machine
/// reads. HTTP/2's stream window (65,535 bytes), so that a WebSocket
/// holds as much unread over either; a message larger than that is
/// gathered by the machine itself (its buffer drawn from the budget), and
/// quinn-proto's own buffer of the stream (its receive window, 256 KiB)
/// is there for every request stream.
pub(crate) const TUNNEL_INPUT_BYTES_MAX: usize = 65_535;

/// A DATA frame's header with room for any length (an 8-byte varint,
/// RFC 9000 §16 lets a length take more bytes than it needs), written
/// before the machine runs and filled in after.
const TUNNEL_FRAME_HEAD: [u8; 9] = [frame::DATA as u8, 0xc0, 0, 0, 0, 0, 0, 0, 0];

/// What the driver must do for a stream after `handle_input` or `respond`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    None,
    /// Ask the client to stop sending on this stream (STOP_SENDING).
    StopSending(Code),
    /// Reset our side and stop reading (a stream error, §8).
    Reset(Code),
    /// Close the connection (a connection error, §8).
    Close(Code, &'static str),
}

/// The HTTP/3 side of one QUIC connection.
pub(crate) struct Session {
    cfg: Config,
    requests: Vec<Request>,
    unis: Vec<(u64, UniStream)>,
    /// The client's control and QPACK streams, once open (one each, §6.2.1).
    control: Option<u64>,
    encoder: Option<u64>,
    decoder: Option<u64>,
    /// Our control stream's bytes not yet written.
    control_out: Vec<u8>,
    /// The GOAWAY we sent: request streams from this id on are refused.
    goaway: Option<u64>,
    /// A first GOAWAY naming the largest id was sent (`go_away_soon`).
    goaway_soon: bool,
    /// One past the highest request stream id seen.
    next_request_id: u64,
    /// Request stream ids below `next_request_id` that nothing has come
    /// on yet. QUIC delivers each stream's bytes in order but the streams
    /// in any order: stream 4's request may come before stream 0's (a
    /// datagram lost or reordered), and stream 0 is then still new.
    unseen: Vec<u64>,
    n_ready: usize,
    /// Scratch for a head's encoding.
    scratch: Vec<u8>,
    /// Scratch for a field name lowercased.
    lower: Vec<u8>,
    /// Finished requests, kept with their buffers for the next streams
    /// (`tests/h3_alloc.rs` counts what a request costs), and the bytes
    /// their buffers hold.
    spare: Vec<Request>,
    spare_bytes: usize,
    /// Request bodies buffered in the streams, against the worker's budget.
    bodies: BodyBudget,
    /// What the answers' bodies hold in memory, unsent (waiting for
    /// QUIC's flow control or send buffer): queued output, against the
    /// worker's output budget.
    unsent: Unsent,
    /// The driver's clock (`set_now`), for when streams open.
    now: Instant,
    /// `head_timeout`, `body_timeout` and `min_rate_bytes_per_sec`.
    timeouts: Timeouts,
}

/// The timeouts a request stream is held to, from `Limits` (as HTTP/1.1
/// and HTTP/2: see `min_rate.rs`). QUIC's own idle timeout restarts with
/// every packet, a PING or an ACK too, so it cannot end a request that
/// trickles in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    pub(crate) head: Duration,
    pub(crate) body_grace: Duration,
    pub(crate) min_rate: u64,
}

/// Request streams skipped over that a session remembers as unseen at
/// most: the most streams a client may have open (quinn-proto refuses a
/// stream id past the limit we give it, at most
/// `Limits::H3_STREAMS_MAX_RANGE`'s end, with STREAM_LIMIT_ERROR).
const UNSEEN_MAX: usize = 1024;

/// Finished requests a session keeps for reuse: as many as a client may
/// have open at once by default (100) and more, within a budget of bytes
/// for their buffers; one holding more than `SPARE_BUFFER_BYTES_MAX` (a
/// large body's) is freed. With 16 kept, a client with 100 requests in
/// flight made most of them afresh: 9.3-10.5 allocations per request,
/// 2.4-3.0 with as many kept (tests/h3_alloc.rs).
const SPARE_REQUESTS_MAX: usize = 128;
const SPARE_BYTES_MAX: usize = 256 * 1024;
const SPARE_BUFFER_BYTES_MAX: usize = 64 * 1024;

impl Session {
    pub(crate) fn new(cfg: Config) -> Self {
        let mut control_out = Vec::with_capacity(32);
        frame::write_varint(&mut control_out, frame::STREAM_CONTROL);
        frame::write_settings(&mut control_out, cfg.head_bytes_max as u64, cfg.connect_protocol);
        Session {
            cfg,
            requests: Vec::new(),
            unis: Vec::new(),
            control: None,
            encoder: None,
            decoder: None,
            control_out,
            goaway: None,
            goaway_soon: false,
            next_request_id: 0,
            unseen: Vec::new(),
            n_ready: 0,
            scratch: Vec::new(),
            lower: Vec::new(),
            spare: Vec::new(),
            spare_bytes: 0,
            bodies: BodyBudget::default(),
            unsent: Unsent::default(),
            now: Instant::now(),
            timeouts: Timeouts {
                head: Duration::from_secs(10),
                body_grace: Duration::from_secs(20),
                min_rate: 500,
            },
        }
    }

    /// Removes the request at `at`, keeping it for reuse if it is small.
    fn forget(&mut self, at: usize) {
        let mut r = self.requests.swap_remove(at);
        // Dropped before its end: the reader gets UnexpectedEof.
        r.parse.upload = None;
        self.bodies.held -= r.parse.body.len();
        r.pending = None;
        self.unsent.held -= std::mem::take(&mut r.held);
        let bytes = r.retained_bytes();
        if bytes <= SPARE_BUFFER_BYTES_MAX
            && self.spare_bytes + bytes <= SPARE_BYTES_MAX
            && self.spare.len() < SPARE_REQUESTS_MAX
        {
            self.spare_bytes += bytes;
            self.spare.push(r);
        }
    }

    /// The timeouts request streams are held to.
    pub(crate) fn set_timeouts(&mut self, timeouts: Timeouts) {
        self.timeouts = timeouts;
    }

    /// The driver's clock, before it feeds the session.
    pub(crate) fn set_now(&mut self, now: Instant) {
        self.now = now;
    }

    /// The earliest a request stream times out: a head not complete
    /// within `head_timeout`, a body's next rate check. None while no
    /// request is arriving (a streamed body whose reader is behind asks
    /// no rate: its clock restarts when it reads again).
    pub(crate) fn poll_timeout(&mut self) -> Option<Instant> {
        let (now, t) = (self.now, self.timeouts);
        let mut earliest: Option<Instant> = None;
        for r in &mut self.requests {
            if !r.is_arriving() {
                r.rate = None;
                continue;
            }
            let blocked = r.parse.upload.as_ref().is_some_and(crate::body::BodySink::is_blocked);
            let due = if r.parse.is_head_pending() {
                Some(r.opened + t.head)
            } else if blocked {
                r.rate = None;
                None
            } else {
                let received = r.parse.received();
                Some(
                    r.rate
                        .get_or_insert_with(|| MinRate::start(now, received, t.body_grace))
                        .deadline(),
                )
            };
            earliest = match (earliest, due) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        earliest
    }

    /// Ends the request streams whose head or body did not arrive in time:
    /// each is answered 408 (its rest refused with STOP_SENDING once
    /// answered). Returns how many.
    pub(crate) fn handle_timeout(&mut self) -> usize {
        let (now, t) = (self.now, self.timeouts);
        let mut ended = 0;
        for r in &mut self.requests {
            if !r.is_arriving() {
                continue;
            }
            let too_slow = if r.parse.is_head_pending() {
                r.opened + t.head <= now
            } else {
                let received = r.parse.received();
                r.rate.as_mut().is_some_and(|rate| {
                    rate.deadline() <= now && rate.check(now, received, t.min_rate) == Rate::TooSlow
                })
            };
            if !too_slow {
                continue;
            }
            ended += 1;
            if let Some(sink) = r.parse.upload.take() {
                sink.fail(std::io::ErrorKind::TimedOut, "request body not received in time");
            }
            self.bodies.held -= r.parse.body.len();
            r.parse.refuse_slow();
            // A streamed body's handler had the request: the 408 is
            // answered in its place, as a broken upload's 413 is.
            r.answer = Answer::None;
            self.n_ready += 1;
        }
        ended
    }

    /// The streams' buffered bodies, against the worker's budget: past
    /// it, a body is refused with 503.
    pub(crate) fn bodies(&mut self) -> &mut BodyBudget {
        &mut self.bodies
    }

    /// What the answers' bodies hold in memory and have not sent, against
    /// the worker's output budget (`message::pending::Unsent`).
    pub(crate) fn unsent(&mut self) -> &mut Unsent {
        &mut self.unsent
    }

    /// Bytes the answers' bodies hold in memory and have not sent.
    pub(crate) fn unsent_bytes(&self) -> usize {
        self.unsent.held
    }

    /// Some stream's request is complete and waits for its handler.
    pub(crate) fn has_ready(&self) -> bool {
        self.n_ready > 0
    }

    /// Our control stream's pending bytes (its type, SETTINGS, GOAWAY).
    pub(crate) fn control_output(&mut self) -> &mut Vec<u8> {
        &mut self.control_out
    }

    /// Takes bytes of stream `id` from the client; `fin` if it ends there.
    pub(crate) fn handle_input(&mut self, id: u64, data: &[u8], fin: bool) -> Action {
        if is_request_stream(id) {
            return self.recv_request(id, data, fin);
        }
        if id & 0x3 != 0x2 {
            // Not a client-initiated unidirectional stream: quinn-proto
            // never gives us data on our own unidirectional streams.
            return Action::None;
        }
        let at = match self.unis.iter().position(|(s, _)| *s == id) {
            Some(at) => at,
            None => {
                if self.unis.len() >= UNI_STREAMS_MAX {
                    return Action::StopSending(Code::StreamCreationError);
                }
                self.unis.push((id, UniStream::default()));
                self.unis.len() - 1
            }
        };
        let uni = &mut self.unis[at].1;
        let before = uni.kind;
        let result = uni.recv(data, fin);
        let kind = uni.kind;
        if before.is_none() {
            if let Some(kind) = kind {
                let slot = match kind {
                    UniKind::Control => Some(&mut self.control),
                    UniKind::QpackEncoder => Some(&mut self.encoder),
                    UniKind::QpackDecoder => Some(&mut self.decoder),
                    UniKind::Refused(_) => None,
                };
                if let Some(slot) = slot {
                    if slot.is_some() {
                        return Action::Close(Code::StreamCreationError, "a second control or QPACK stream");
                    }
                    *slot = Some(id);
                }
            }
        }
        match (result, kind) {
            (Err(Error::Conn(code, why) | Error::Stream(code, why)), _) => Action::Close(code, why),
            (Ok(()), Some(UniKind::Refused(code))) => {
                // Forget it; the driver stops it and discards what comes.
                self.unis.remove(at);
                Action::StopSending(code)
            }
            _ => Action::None,
        }
    }

    /// A critical stream was reset by the client (§6.2.1): connection error.
    pub(crate) fn on_reset(&mut self, id: u64) -> Action {
        if [self.control, self.encoder, self.decoder].contains(&Some(id)) {
            return Action::Close(Code::ClosedCriticalStream, "a critical stream was reset");
        }
        if let Some(at) = self.requests.iter().position(|r| r.id == id) {
            if self.requests[at].answer == Answer::None && self.requests[at].parse.is_ready() {
                self.n_ready -= 1;
            }
            // The client gave up on it; a deferred answer is dropped when
            // it comes.
            self.forget(at);
        }
        self.unis.retain(|(s, _)| *s != id);
        self.unseen.retain(|&u| u != id);
        Action::None
    }

    fn recv_request(&mut self, id: u64, data: &[u8], fin: bool) -> Action {
        let at = match self.requests.iter().position(|r| r.id == id) {
            Some(at) => at,
            None => {
                if id < self.next_request_id {
                    match self.unseen.iter().position(|&u| u == id) {
                        // Opened before, by a later stream's bytes (§2.1
                        // of RFC 9000: a stream opens the lower ones).
                        Some(at) => {
                            self.unseen.swap_remove(at);
                        }
                        // A stream already answered and forgotten: data
                        // after our STOP_SENDING, or a retransmission.
                        None => return Action::None,
                    }
                } else {
                    let mut skipped = self.next_request_id;
                    while skipped < id && self.unseen.len() < UNSEEN_MAX {
                        self.unseen.push(skipped);
                        skipped += 4;
                    }
                    self.next_request_id = id + 4;
                }
                if self.goaway.is_some_and(|g| id >= g) {
                    // §5.2: streams past our GOAWAY are not processed.
                    return Action::Reset(Code::RequestRejected);
                }
                let request = match self.spare.pop() {
                    Some(mut r) => {
                        self.spare_bytes -= r.retained_bytes();
                        r.id = id;
                        r.parse.reset();
                        r.answer = Answer::None;
                        r.out.clear();
                        r.pos = 0;
                        r.pending = None;
                        r.held = 0;
                        r.offered = false;
                        r.continued = false;
                        r.opened = self.now;
                        r.rate = None;
                        r.ended = false;
                        r
                    }
                    None => Request {
                        id,
                        parse: RequestStream::default(),
                        answer: Answer::None,
                        out: Vec::new(),
                        pos: 0,
                        pending: None,
                        held: 0,
                        offered: false,
                        continued: false,
                        opened: self.now,
                        rate: None,
                        ended: false,
                    },
                };
                self.requests.push(request);
                self.requests.len() - 1
            }
        };
        let r = &mut self.requests[at];
        let was_ready = r.parse.is_ready();
        let uploading = r.parse.upload.is_some();
        if r.answer != Answer::None && r.parse.refused.is_some() {
            // Answered early (413, 431): the rest is not read.
            return Action::None;
        }
        let held = r.parse.body.len();
        let recvd = r.parse.recv(data, fin, &self.cfg);
        self.bodies.held -= held;
        let grown = r.parse.body.len();
        if r.parse.tunnel {
            // A WebSocket's input: bounded by what the driver reads
            // (`recv_room`), counted in the budget as HTTP/2's is.
            self.bodies.held += grown;
        } else if grown > held && r.parse.refused.is_none() && !self.bodies.admits(grown) {
            // The worker holds its budget of buffered bodies: 503.
            r.parse.refuse_busy();
        } else {
            self.bodies.held += grown;
        }
        match recvd {
            Ok(()) => {}
            Err(Error::Conn(code, why)) => return Action::Close(code, why),
            Err(Error::Stream(code, _)) => {
                if r.answer == Answer::None && was_ready {
                    self.n_ready -= 1;
                }
                self.forget(at);
                return Action::Reset(code);
            }
        }
        if !was_ready && r.parse.is_ready() && r.answer == Answer::None {
            self.n_ready += 1;
        }
        if uploading && r.parse.refused.is_some() {
            // A body read as it arrives broke the limit (its reader has
            // failed): answer the refusal instead of the handler, unless
            // the answer has begun.
            match r.answer {
                Answer::Taken | Answer::Deferred(_) => {
                    r.answer = Answer::None;
                    self.n_ready += 1;
                }
                _ => return Action::Reset(Code::RequestCancelled),
            }
        }
        Action::None
    }

    /// The next stream whose head is complete and whose body is coming,
    /// not yet offered to its handler.
    pub(crate) fn take_head(&mut self) -> Option<u64> {
        let r = self
            .requests
            .iter_mut()
            .filter(|r| r.answer == Answer::None && !r.offered && r.parse.is_head_done())
            .min_by_key(|r| r.id)?;
        r.offered = true;
        Some(r.id)
    }

    /// Stream `id`'s body goes to `sink` as it arrives; its handler is
    /// being called now (it is not handed out again when complete).
    pub(crate) fn stream_body(&mut self, id: u64, sink: crate::body::BodySink) {
        let Some(at) = self.find(id) else { return };
        let r = &mut self.requests[at];
        if r.answer == Answer::None && r.parse.is_ready() {
            self.n_ready -= 1;
        }
        r.answer = Answer::Taken;
        sink.push(&r.parse.body);
        r.parse.body.clear();
        if r.parse.fin {
            sink.finish_with(r.parse.trailers.take());
        } else {
            r.parse.upload = Some(sink);
        }
    }

    /// How many bytes of stream `id` the driver may read now: a body read
    /// as it arrives stops at its reader's room (QUIC then grants the
    /// client no more credit), anything else has no bound here.
    pub(crate) fn recv_room(&self, id: u64) -> usize {
        let Some(at) = self.find(id) else { return usize::MAX };
        let parse = &self.requests[at].parse;
        match &parse.upload {
            Some(sink) => sink.room(),
            None if parse.tunnel => TUNNEL_INPUT_BYTES_MAX.saturating_sub(parse.body.len()),
            None => usize::MAX,
        }
    }

    /// The streams whose bodies go to readers (read again after a wake).
    pub(crate) fn uploads(&self, out: &mut Vec<u64>) {
        out.extend(self.requests.iter().filter(|r| r.parse.upload.is_some()).map(|r| r.id));
    }

    /// The next stream whose request is complete (or refused), oldest first.
    pub(crate) fn take_ready(&mut self) -> Option<u64> {
        if self.n_ready == 0 {
            return None;
        }
        let r = self
            .requests
            .iter_mut()
            .filter(|r| r.answer == Answer::None && r.parse.is_ready())
            .min_by_key(|r| r.id)?;
        r.answer = Answer::Taken;
        self.n_ready -= 1;
        Some(r.id)
    }

    /// The status to answer instead of calling the handler, if any, and
    /// the code to stop the client's sending with.
    pub(crate) fn refused(&self, id: u64) -> Option<(u16, &'static str, Code)> {
        self.find(id).and_then(|at| self.requests[at].parse.refused)
    }

    /// Whether the client's side of stream `id` is complete.
    pub(crate) fn recv_done(&self, id: u64) -> bool {
        self.find(id).is_some_and(|at| self.requests[at].parse.fin)
    }

    /// The request on stream `id`, for its handler.
    pub(crate) fn parts(&self, id: u64) -> Option<Parts<'_>> {
        let r = &self.requests[self.find(id)?];
        Parts::of(&r.parse.head, &r.parse.body, r.parse.trailers.as_ref())
    }

    pub(crate) fn defer(&mut self, id: u64, defer_id: u64) {
        if let Some(at) = self.find(id) {
            self.requests[at].answer = Answer::Deferred(defer_id);
        }
    }

    /// The stream waiting for the deferred answer `defer_id`, if open.
    pub(crate) fn deferred_stream(&self, defer_id: u64) -> Option<u64> {
        self.requests
            .iter()
            .find(|r| r.answer == Answer::Deferred(defer_id))
            .map(|r| r.id)
    }

    /// Tells the client of stream `id` to send its body, if it asked to be
    /// told (`expect: 100-continue`): an interim HEADERS frame with
    /// `:status` 100 (§4.1, RFC 9110 §15.2.1), as HTTP/2 does. The driver
    /// calls this once it knows the body will be read: when it chose to
    /// collect the body, or when a streaming handler took its reader.
    /// Nothing is sent if the body has begun to arrive (RFC 9110 §10.1.1
    /// lets the server omit it then), once the stream is answered or
    /// refused, or twice.
    pub(crate) fn send_continue(&mut self, id: u64) {
        let Some(at) = self.find(id) else { return };
        let r = &mut self.requests[at];
        if !r.parse.head.expect_continue
            || r.continued
            || r.parse.received() > 0
            || r.parse.fin
            || r.parse.refused.is_some()
            || r.answer == Answer::Sending
        {
            return;
        }
        r.continued = true;
        let block = &mut self.scratch;
        block.clear();
        qpack::Encoder::begin(block);
        qpack::Encoder::status(block, 100);
        frame::write_header(&mut r.out, frame::HEADERS, block.len() as u64);
        r.out.extend_from_slice(block);
    }

    /// An interim answer relayed to the deferred stream `id` (the reverse
    /// proxy's upstream sent `103 Early Hints`; its 100 goes through
    /// `send_continue`): a HEADERS frame with `status` and `fields`
    /// (complete lines) before the final one (§4.1: "a response MAY
    /// consist of ... one or more interim responses"). Nothing once the
    /// stream is answered, refused or gone.
    pub(crate) fn send_interim(&mut self, id: u64, status: u16, fields: &[u8]) {
        let Some(at) = self.find(id) else { return };
        let r = &mut self.requests[at];
        if r.parse.refused.is_some() || !matches!(r.answer, Answer::Deferred(_)) {
            return;
        }
        let block = &mut self.scratch;
        block.clear();
        qpack::Encoder::begin(block);
        qpack::Encoder::status(block, status);
        let lower = &mut self.lower;
        crate::message::fields::for_each_line(fields, |name, value| {
            // Field names are lowercase in HTTP/3 (§4.2); the upstream's
            // lines keep the case it sent.
            lower.clear();
            lower.extend(name.iter().map(u8::to_ascii_lowercase));
            qpack::Encoder::field(block, lower, value);
        });
        frame::write_header(&mut r.out, frame::HEADERS, block.len() as u64);
        r.out.extend_from_slice(block);
    }

    /// Accepts stream `id`'s extended CONNECT (RFC 9220 §3, RFC 8441 §5):
    /// HEADERS with `resp`'s status (a 2xx) and fields, without a
    /// content-length (RFC 9110 §8.6), and the stream carries a
    /// WebSocket's bytes from now on (`with_tunnel`). What the client sent
    /// with its head is the WebSocket's first input; a client that has
    /// ended its side already gets a WebSocket that ends at once (1006),
    /// as a TCP connection closed after its upgrade. False if the stream
    /// is gone or was refused.
    pub(crate) fn accept_tunnel(&mut self, id: u64, resp: &Response, date: &[u8], extra_fields: &[u8]) -> bool {
        let Some(at) = self.find(id) else { return false };
        let block = &mut self.scratch;
        block.clear();
        qpack::Encoder::begin(block);
        qpack::Encoder::status(block, resp.status);
        encode_fields(block, &mut self.lower, resp, date, None, extra_fields);
        let r = &mut self.requests[at];
        if r.parse.refused.is_some() {
            return false;
        }
        r.out.drain(..r.pos);
        r.pos = 0;
        frame::write_header(&mut r.out, frame::HEADERS, block.len() as u64);
        r.out.extend_from_slice(block);
        r.answer = Answer::Tunnel;
        // The body collected so far stays counted in `bodies`, as input.
        r.parse.tunnel = true;
        true
    }

    /// Lends stream `id`'s WebSocket bytes to `f` (see `TunnelIo`): what
    /// it writes leaves as one DATA frame, what it drains of the input
    /// leaves the body budget. `None` if the stream is gone (reset by the
    /// client, or stopped).
    pub(crate) fn with_tunnel<R>(&mut self, id: u64, f: impl FnOnce(&mut TunnelIo<'_>) -> R) -> Option<R> {
        let at = self.find(id)?;
        let r = &mut self.requests[at];
        if r.answer != Answer::Tunnel {
            return None;
        }
        if r.pos == r.out.len() {
            r.out.clear();
            r.pos = 0;
        } else if r.pos > 64 * 1024 && r.pos > r.out.len() / 2 {
            // What was taken goes, once it is most of the buffer.
            r.out.drain(..r.pos);
            r.pos = 0;
        }
        let head = r.out.len();
        r.out.extend_from_slice(&TUNNEL_FRAME_HEAD);
        let before = r.parse.body.len();
        let mut io = TunnelIo {
            input: &mut r.parse.body,
            output: &mut r.out,
            sent: r.pos,
            peer_done: r.parse.fin,
        };
        let result = f(&mut io);
        let len = (r.out.len() - head - TUNNEL_FRAME_HEAD.len()) as u64;
        if len == 0 {
            r.out.truncate(head);
        } else {
            r.out[head + 1..head + 9].copy_from_slice(&(0xc000_0000_0000_0000 | len).to_be_bytes());
        }
        self.bodies.held -= before.saturating_sub(r.parse.body.len());
        Some(result)
    }

    /// Bytes this connection's WebSockets have waiting for the client
    /// (their frames not yet taken by QUIC).
    pub(crate) fn tunnels_queued(&self) -> usize {
        self.requests
            .iter()
            .filter(|r| r.answer == Answer::Tunnel)
            .map(|r| r.out.len() - r.pos)
            .sum()
    }

    /// The WebSocket on stream `id` is over: FIN follows its last bytes.
    pub(crate) fn end_tunnel(&mut self, id: u64) {
        if let Some(at) = self.find(id) {
            if self.requests[at].answer == Answer::Tunnel {
                self.requests[at].ended = true;
            }
        }
    }

    /// Queues the response to stream `id`: its HEADERS frame now, its
    /// body as `poll_output` is asked for it. `extra_fields` are complete
    /// `Name: value\r\n` lines from the listener (HSTS, Alt-Svc). `None`
    /// if the stream is gone.
    pub(crate) fn respond(
        &mut self,
        id: u64,
        resp: &mut Response,
        head_only: bool,
        date: &[u8],
        extra_fields: &[u8],
    ) -> Option<Sent> {
        let at = self.find(id)?;
        let (status, length, follows) = Pending::head_of(resp, head_only);
        let block = &mut self.scratch;
        block.clear();
        qpack::Encoder::begin(block);
        qpack::Encoder::status(block, status);
        encode_fields(block, &mut self.lower, resp, date, length, extra_fields);
        let r = &mut self.requests[at];
        // After an interim response not yet all taken, if any.
        r.out.drain(..r.pos);
        r.pos = 0;
        frame::write_header(&mut r.out, frame::HEADERS, block.len() as u64);
        r.out.extend_from_slice(block);
        r.pending = Pending::take(resp, follows);
        if let Some(p) = &r.pending {
            // Counted until the body ends (`poll_output`, `forget`).
            r.held = p.held_bytes();
            self.unsent.held += r.held;
        }
        r.answer = Answer::Sending;
        Some(Sent {
            status,
            body_bytes: if head_only { 0 } else { length.unwrap_or(0) },
        })
    }

    /// What stream `id` has to send now (refilled from its body, one DATA
    /// frame of at most `H3_CHUNK_BYTES`), and whether that is the end of
    /// it. An error reading the body (a file that shrank) is `Err`: the
    /// driver resets the stream, since the length was promised.
    pub(crate) fn poll_output(&mut self, id: u64) -> Result<(&[u8], bool), ()> {
        let Some(at) = self.find(id) else {
            return Ok((&[], false));
        };
        let r = &mut self.requests[at];
        if r.answer == Answer::Tunnel {
            // A WebSocket's frames; FIN once it is over and all are taken.
            return Ok((&r.out[r.pos..], r.ended));
        }
        if r.answer != Answer::Sending {
            // An interim response before the answer, if any.
            return Ok((&r.out[r.pos..], false));
        }
        if r.pos == r.out.len() {
            r.out.clear();
            r.pos = 0;
        }
        // Up to a chunk's worth before any of it is taken: the HEADERS
        // frame and a small body's DATA frame leave in one write (quinn-
        // proto copies each write into a buffer of its own: one
        // allocation per request fewer).
        while r.pos == 0 && r.out.len() < H3_CHUNK_BYTES {
            let Some(pending) = &mut r.pending else { break };
            // Frame header room: a varint of at most 4 bytes for the
            // chunk's length, written once the length is known.
            let at = r.out.len();
            r.out.extend_from_slice(&[frame::DATA as u8, 0x80, 0, 0, 0]);
            let n = pending.fill(&mut r.out, H3_CHUNK_BYTES).map_err(|_| ())?;
            let len = (0x8000_0000u32 | n as u32).to_be_bytes();
            r.out[at + 1..at + 5].copy_from_slice(&len);
            if n == 0 {
                r.out.truncate(at);
            }
            if pending.is_stream() {
                // A stream's chunk: held while some of it is unsent.
                let held = pending.held_bytes();
                self.unsent.held = self.unsent.held - r.held + held;
                r.held = held;
            }
            if pending.is_done() {
                if let Some(t) = pending.trailers() {
                    // Trailers: a HEADERS frame after the DATA (§4.1),
                    // then the stream's end.
                    let block = &mut self.scratch;
                    block.clear();
                    qpack::Encoder::begin(block);
                    crate::message::fields::for_each_line(t.as_bytes(), |name, value| {
                        qpack::Encoder::field(block, name, value);
                    });
                    frame::write_header(&mut r.out, frame::HEADERS, block.len() as u64);
                    r.out.extend_from_slice(block);
                }
                r.pending = None;
                self.unsent.held -= std::mem::take(&mut r.held);
            }
            if n == 0 {
                break;
            }
        }
        let done = r.pending.is_none();
        Ok((&r.out[r.pos..], done))
    }

    /// `n` bytes of what `poll_output` gave were taken by the stream.
    pub(crate) fn consumed(&mut self, id: u64, n: usize) {
        if let Some(at) = self.find(id) {
            self.requests[at].pos += n;
        }
    }

    /// Stream `id` is finished (all sent, or reset): forget it.
    pub(crate) fn remove(&mut self, id: u64) {
        if let Some(at) = self.find(id) {
            let r = &self.requests[at];
            if r.answer == Answer::None && r.parse.is_ready() {
                self.n_ready -= 1;
            }
            self.forget(at);
        }
    }

    /// Streams answered or being answered, or with an interim response
    /// to send: the ids with bytes to send.
    pub(crate) fn sending(&self, out: &mut Vec<u64>) {
        out.extend(
            self.requests
                .iter()
                .filter(|r| r.answer == Answer::Sending || r.pos < r.out.len() || r.ended)
                .map(|r| r.id),
        );
    }

    /// The first step of a graceful shutdown (§5.2): a GOAWAY naming the
    /// largest id a server may name, so that the client opens no more
    /// requests, while those already on their way are still answered.
    /// `go_away` follows, once they have had time to arrive.
    pub(crate) fn go_away_soon(&mut self) {
        if !self.goaway_soon && self.goaway.is_none() {
            self.goaway_soon = true;
            frame::write_goaway(&mut self.control_out, GOAWAY_ID_MAX);
        }
    }

    /// Sends GOAWAY (once): requests already opened are finished, later
    /// ones refused (§5.2).
    pub(crate) fn go_away(&mut self) {
        if self.goaway.is_none() {
            let id = self.next_request_id;
            self.goaway = Some(id);
            frame::write_goaway(&mut self.control_out, id);
        }
    }

    pub(crate) fn is_going_away(&self) -> bool {
        self.goaway.is_some()
    }

    /// No request is open: none being read or answered, and none opened
    /// by a later stream's bytes whose own have not come yet (unless past
    /// our GOAWAY: it is refused when they come).
    pub(crate) fn is_idle(&self) -> bool {
        self.requests.is_empty() && !self.unseen.iter().any(|&u| self.goaway.is_none_or(|g| u < g))
    }

    /// No request stream is open, and how many were ever opened (a mark
    /// that moves with each new one): the driver's idle timeout runs
    /// while the first holds and the mark stays. Unlike `is_idle`, ids
    /// skipped over whose bytes never came do not count: they hold
    /// nothing, and naming stream 16 alone would keep a connection open
    /// for as long as the client PINGs.
    pub(crate) fn quiet_mark(&self) -> (bool, u64) {
        let opened = (self.next_request_id / 4).saturating_sub(self.unseen.len() as u64);
        (self.requests.is_empty(), opened)
    }

    /// Whether stream `id` is still being answered or read.
    pub(crate) fn is_open(&self, id: u64) -> bool {
        self.find(id).is_some()
    }

    fn find(&self, id: u64) -> Option<usize> {
        self.requests.iter().position(|r| r.id == id)
    }
}

/// The largest request stream id a server's GOAWAY may name (§5.2).
const GOAWAY_ID_MAX: u64 = (1 << 62) - 4;

/// Unidirectional streams a client may hold open with us: its control
/// and QPACK streams, and a few of types we ignore (GREASE).
pub(crate) const UNI_STREAMS_MAX: usize = 8;

/// Encodes a response's fields after `:status`, as HTTP/2 does (the same
/// fields, lowercase names, none connection-specific).
fn encode_fields(
    out: &mut Vec<u8>,
    lower: &mut Vec<u8>,
    resp: &Response,
    date: &[u8],
    length: Option<u64>,
    extra_fields: &[u8],
) {
    use qpack::Encoder as E;
    if !resp.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("server")) {
        E::field(out, b"server", b"peregrine");
    }
    E::field(out, b"date", date);
    if let Some(ct) = &resp.content_type {
        E::field(out, b"content-type", ct.as_bytes());
    }
    if let Some(n) = length {
        let mut digits = itoa::Buffer::new();
        E::field(out, b"content-length", digits.format(n).as_bytes());
    }
    let mut field = |out: &mut Vec<u8>, name: &[u8], value: &[u8]| {
        if name.iter().any(u8::is_ascii_uppercase) {
            lower.clear();
            lower.extend(name.iter().map(u8::to_ascii_lowercase));
            E::field(out, lower, value);
        } else {
            E::field(out, name, value);
        }
    };
    for (name, value) in &resp.headers {
        field(out, name.as_bytes(), value.as_bytes());
    }
    if let Some(block) = &resp.block {
        crate::message::fields::for_each_line(block.as_bytes(), |name, value| field(out, name, value));
    }
    let given = if extra_fields.is_empty() {
        0
    } else {
        resp.sets_lines(extra_fields)
    };
    let mut i = 0;
    crate::message::fields::for_each_line(extra_fields, |name, value| {
        if i >= 32 || given & (1 << i) == 0 {
            field(out, name, value);
        }
        i += 1;
    });
}

/// Drives a `Session` on arbitrary input, for the fuzz target
/// (`peregrine::fuzzing::h3_session`). `data` is a series of records:
/// a byte naming the stream (bits 0-2: request streams 0, 4, 8, 12 or the
/// client's unidirectional streams 2, 6, 10, 14; bit 3: FIN; bit 4: a
/// reset instead of data), a length byte, then that many bytes. Each
/// ready request is answered (a body of 0 to 40,000 bytes, some as to
/// HEAD); output is taken a random-sized piece at a time. Panics if an
/// invariant breaks: each answered stream's output is one HEADERS frame,
/// then DATA frames adding up to its content-length; nothing is sent
/// for a stream not answered; a closed session is not fed again. An
/// extended CONNECT (the setting is on) is accepted as a WebSocket whose
/// input is echoed as it comes and which ends when the client's side
/// does: its output is one HEADERS frame, then DATA frames carrying
/// exactly what was echoed.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn fuzz_session(data: &[u8]) {
    static BODY: [u8; 40_000] = [b'x'; 40_000];
    let cfg = Config {
        head_bytes_max: 1024,
        n_headers_max: 8,
        body_bytes_max: 2048,
        connect_protocol: true,
    };
    let mut s = Session::new(cfg);
    let mut rest = data;
    let mut n_answered = 0usize;
    // WebSocket streams: id, what they sent, the bytes echoed.
    let mut tunnels: Vec<(u64, Vec<u8>, u64)> = Vec::new();
    while rest.len() >= 2 {
        let (which, len) = (rest[0], usize::from(rest[1]));
        let bytes = &rest[2..(2 + len).min(rest.len())];
        rest = &rest[(2 + len).min(rest.len())..];
        let id = u64::from(which & 0x3) * 4 + if which & 0x4 != 0 { 2 } else { 0 };
        let action = if which & 0x10 != 0 {
            s.on_reset(id)
        } else {
            s.handle_input(id, bytes, which & 0x8 != 0)
        };
        if let Action::Close(..) = action {
            return;
        }
        while let Some(ready) = s.take_ready() {
            assert!(is_request_stream(ready));
            if s.refused(ready).is_none() && s.parts(ready).is_some_and(|p| p.protocol.is_some()) {
                assert!(s.accept_tunnel(ready, &Response::new(200), b"date", b""));
                tunnels.push((ready, Vec::new(), 0));
                continue;
            }
            let body_len = [0, 5, 16_385, 40_000][n_answered % 4];
            let head_only = n_answered % 3 == 2;
            n_answered += 1;
            let mut resp = Response::bytes("text/plain", crate::response::Body::Static(&BODY[..body_len]));
            let sent = s
                .respond(ready, &mut resp, head_only, b"date", b"")
                .expect("a ready stream is open");
            // Drain the stream, a piece at a time, and check its frames.
            let mut wire = Vec::new();
            let mut step = 1 + usize::from(which);
            loop {
                let (out, last) = s.poll_output(ready).expect("static bodies never fail");
                let n = out.len().min(step);
                wire.extend_from_slice(&out[..n]);
                s.consumed(ready, n);
                step = step * 3 + 1;
                if n == 0 && last {
                    break;
                }
            }
            s.remove(ready);
            let mut reader = frame::Reader::default();
            let mut input = &wire[..];
            let (mut n_headers, mut data_bytes) = (0, 0u64);
            while let Some((piece, used)) = reader.next(input) {
                input = &input[used..];
                match piece {
                    frame::Piece::Start { kind, len } => {
                        if kind == frame::HEADERS {
                            assert_eq!(data_bytes, 0, "HEADERS after DATA");
                            n_headers += 1;
                        } else {
                            assert_eq!(kind, frame::DATA);
                            data_bytes += len;
                        }
                    }
                    frame::Piece::Payload(_) | frame::Piece::End => {}
                }
            }
            assert!(reader.at_boundary(), "a cut frame");
            assert_eq!(n_headers, 1);
            assert_eq!(data_bytes, sent.body_bytes);
        }
        let mut i = 0;
        while i < tunnels.len() {
            let (id, wire, echoed) = &mut tunnels[i];
            let echo = s.with_tunnel(*id, |io| {
                let n = io.input.len();
                io.output.extend_from_slice(io.input);
                io.input.clear();
                (n, io.peer_done)
            });
            let Some((n, peer_done)) = echo else {
                // Reset by the client: gone.
                tunnels.swap_remove(i);
                continue;
            };
            *echoed += n as u64;
            if peer_done {
                s.end_tunnel(*id);
            }
            // All it has, taken; then whether that was its end.
            let (out, _) = s.poll_output(*id).expect("a tunnel's output is bytes");
            wire.extend_from_slice(out);
            let n = out.len();
            s.consumed(*id, n);
            let (out, last) = s.poll_output(*id).expect("a tunnel's output is bytes");
            assert!(out.is_empty(), "output after all was taken");
            if last {
                check_tunnel_wire(wire, *echoed);
                s.remove(*id);
                tunnels.swap_remove(i);
                continue;
            }
            i += 1;
        }
        for id in [0, 4, 8, 12] {
            if tunnels.iter().any(|t| t.0 == id) {
                continue;
            }
            assert_eq!(
                s.poll_output(id),
                Ok((&[][..], false)),
                "output for an unanswered stream"
            );
        }
    }
    for (_, wire, echoed) in &tunnels {
        check_tunnel_wire(wire, *echoed);
    }
}

/// A WebSocket stream's output, for the fuzz driver: one HEADERS frame,
/// then DATA frames carrying `echoed` bytes.
#[cfg(any(test, feature = "fuzzing"))]
fn check_tunnel_wire(wire: &[u8], echoed: u64) {
    let mut reader = frame::Reader::default();
    let mut input = wire;
    let (mut n_headers, mut data_bytes) = (0, 0u64);
    while let Some((piece, used)) = reader.next(input) {
        input = &input[used..];
        if let frame::Piece::Start { kind, len } = piece {
            if kind == frame::HEADERS {
                assert_eq!((n_headers, data_bytes), (0, 0), "a second HEADERS, or after DATA");
                n_headers += 1;
            } else {
                assert_eq!(kind, frame::DATA);
                data_bytes += len;
            }
        }
    }
    assert!(reader.at_boundary(), "a cut frame");
    assert_eq!(n_headers, 1);
    assert_eq!(data_bytes, echoed);
}
