//! HTTP/1.1 as a sans-I/O state machine (as hyper's `proto/h1`,
//! quinn-proto's `Connection`): bytes read go in, requests come out as
//! events, responses go into the connection's output queue (head bytes,
//! then a body inline or as a tail of shared bytes, a file range or a
//! stream), and the machine says when it wants waking. It never touches a
//! socket: `conn/` reads, writes, registers interest and calls the handler.
//!
//! The cycle, driven by `conn/h1.rs`:
//! 1. `poll` on the unconsumed bytes: `Event::Request` (its head written
//!    to the place the driver passes, its whole body, and how many bytes
//!    it used), or why nothing can go on
//!    (`Input`, `Deferred`, `Closing`, `Refused` after an error answer was
//!    queued, `NotHttp`).
//! 2. For a request, the driver calls the handler, then `respond` (queues
//!    the answer) or `defer` (the answer comes later through `answer`), and
//!    consumes the request's bytes. Pipelined requests are answered one
//!    after the other into the same output, which leaves in one write.
//! 3. When the driver waits, `poll_timeout` gives the deadline of the state (head,
//!    body or idle timeout) or says the connection is done; `handle_timeout`
//!    answers 408 when a request was not received in time.
//!
//! A handler that reads bodies as they arrive (`body::streamed`) is asked
//! about at the end of a head announcing a body (`Event::BodyAhead`): it is
//! called at once (`stream_body`), and the body goes to its reader through
//! `feed`, before anything else in the input is parsed, as far as the
//! reader has room; otherwise (`buffer_body`) the head is parsed again and
//! its body buffered as before.
//!
//! Invariants: answers leave in request order (a deferred request holds
//! the ones behind it in the input); after an error answer nothing else is
//! parsed (its framing cannot be trusted) and the machine is `Closing`.

mod respond;
#[doc(hidden)]
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod script;
#[cfg(test)]
mod tests;

use crate::access_log::Reason;
use std::mem::MaybeUninit;
use std::time::Instant;

pub(crate) use respond::{next_piece, write_response, Piece, Sent};

use crate::body::BodySink;
use crate::buffers::{Input, Output, Tail};
use crate::codec::chunked::TRAILER_BYTES_MAX;
use crate::codec::head::{parse_head_httparse, parse_head_into, parse_head_plain, Framed, Plain};
use crate::codec::write as wire;
use crate::codec::{ChunkedDecoder, Framing, Head, HeadError, Version};
use crate::limits::{Limits, BUFFER_BYTES, DISCARD_TIMEOUT};
use crate::message::trailers::Trailers;
use crate::min_rate::{MinRate, Rate};
use crate::response::Response;
use std::io;

/// What the machine needs from its surroundings: the same for a whole
/// worker turn (the worker builds one per turn, `Ctx::h1`).
#[derive(Clone, Copy)]
pub(crate) struct Env<'a> {
    pub(crate) limits: &'a Limits,
    /// The `Date` field's value, for the answers the machine writes itself.
    pub(crate) date: &'a [u8],
    pub(crate) now: Instant,
    /// `now` plus `limits.idle_timeout`: the deadline of a connection
    /// waiting for its next request, summed once per loop turn by the
    /// driver rather than once per request here.
    pub(crate) idle_until: Option<Instant>,
    /// Shutting down: answer with `Connection: close`.
    pub(crate) draining: bool,
    /// The listener also takes HTTP/2 by prior knowledge: first bytes that
    /// are not HTTP/1 at all end the connection without an answer.
    pub(crate) h2_allowed: bool,
}

/// Marks the path that calls it as rarely taken, so that the compiler
/// lays its code out after the common path's (`std::hint::cold_path`
/// needs Rust 1.95, above the crate's MSRV). A call of its own costs the
/// rare path a few instructions; `black_box` keeps the compiler from
/// deleting a call that does nothing, and with it the hint.
#[cold]
#[inline(never)]
pub(crate) fn cold_path() {
    std::hint::black_box(());
}

/// What `poll` found.
pub(crate) enum Event<'b> {
    /// A complete request, made of its head in `poll`'s `out` (its body
    /// is this one's): call the handler, then `respond` or `defer`, then
    /// consume `consumed` bytes of input.
    Request { body: &'b [u8], consumed: usize },
    /// More bytes are needed.
    Input,
    /// A head announcing a body was read: call again (the body may be
    /// here already).
    Again,
    /// A complete head announcing a body: the driver asks the handler
    /// whether it reads the body as it arrives, then calls `stream_body`
    /// (the handler is called now) or `buffer_body` (the body is awaited,
    /// as usual). Nothing is consumed yet. The request, made of the head,
    /// is in `poll`'s `out`; what `stream_body` needs of it is here.
    BodyAhead(BodyStart),
    /// A deferred answer is awaited; the input waits behind it.
    Deferred,
    /// The last answer is queued: send it, then close.
    Closing,
    /// An error answer was queued (the input must be dropped); the
    /// machine is now `Closing`.
    Refused(Refusal),
    /// A `101 Switching Protocols` is queued (`upgrade`): the bytes left
    /// in the input, after the request's, are the new protocol's first.
    /// The driver puts that protocol's machine in the connection's slot;
    /// this one reads nothing more.
    Upgraded,
    /// The first bytes are neither HTTP/1 nor the HTTP/2 preface: an
    /// invalid connection preface, closed without an answer (RFC 9113
    /// §3.4; an HTTP/1 400 would be read as a broken frame by an HTTP/2
    /// client). The machine is now `Closing`.
    NotHttp,
}

/// An error answer the machine queued itself, for the access log and the
/// metrics: its status and its body's length in bytes as sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) status: u16,
    pub(crate) body_bytes: u64,
    /// The limit or rule behind it, for the access log.
    pub(crate) reason: Reason,
}

/// The reason of a chunked body's error.
fn chunked_reason(e: crate::codec::chunked::ChunkedError) -> Reason {
    match e {
        crate::codec::chunked::ChunkedError::TooLarge => Reason::BodyTooLarge,
        _ => Reason::BadRequest,
    }
}

/// A chunked body's kept trailer section as its handler gets it. Out of
/// line and cold: most bodies have none, and the request path it sits
/// in is a GET's too.
#[cold]
#[inline(never)]
fn received_trailers(section: Vec<u8>) -> Option<Box<Trailers>> {
    Trailers::received_section(&section).map(Box::new)
}

/// What the driver should do once it waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Wait for bytes or an answer, until this deadline (none: forever).
    Until(Option<Instant>),
    /// The connection is done: close it.
    Close,
}

/// Facts about the connection the machine does not own.
#[derive(Clone, Copy)]
pub(crate) struct Link {
    /// The client sent FIN.
    pub(crate) peer_closed: bool,
    /// No byte of a request has arrived yet.
    pub(crate) fresh: bool,
    /// A TLS handshake is not finished: keep the deadline set at accept.
    pub(crate) handshaking: bool,
    pub(crate) input_empty: bool,
    /// Bytes received and not yet consumed (a partial head's length).
    pub(crate) unconsumed: usize,
    /// Bytes read on the connection so far: a body's progress, for its
    /// minimum rate.
    pub(crate) bytes_in: u64,
}

impl Link {
    /// What [`H1::idle_wait_of`] reads.
    #[inline(always)]
    pub(crate) fn idle_facts(&self) -> IdleFacts {
        IdleFacts {
            peer_closed: self.peer_closed,
            handshaking: self.handshaking,
            input_empty: self.input_empty,
        }
    }
}

/// The facts of a [`Link`] the common wait reads.
#[derive(Clone, Copy)]
pub(crate) struct IdleFacts {
    pub(crate) peer_closed: bool,
    pub(crate) handshaking: bool,
    pub(crate) input_empty: bool,
}

/// One HTTP/1.1 connection's protocol state.
pub(crate) struct H1 {
    state: State,
    /// No request has been parsed yet (the bytes may be HTTP/2's preface).
    first: bool,
    /// The deadline of the state: head or body timeout, idle timeout.
    deadline: Option<Instant>,
    /// When the head being received began (`State::Head`).
    head_since: Instant,
    /// The minimum rate of the body being received (`State::Body`, or an
    /// upload the reader keeps up with); started by `poll_timeout`.
    rate: Option<MinRate>,
    /// The driver chose to buffer the body of the head in the input: the
    /// next parse of it goes on as for any request.
    buffer_next: bool,
    /// A body being handed to a reader as it arrives, while its request
    /// is `Handling` or `Deferred`.
    upload: Option<Box<Upload>>,
    /// Bytes of bodies nobody reads thrown away since the driver last
    /// took the count (`take_discarded`), for the metrics.
    discarded: u64,
    /// The trailer section of the chunked body `poll` just handed out
    /// whole (`Event::Request`), for its handler (`take_trailers`).
    /// Boxed: a `Vec` here would lend `Proto` its capacity's niche for
    /// the connection's protocol tag, and every `Proto::H1` test on the
    /// request path would then compare a 64-bit constant (see
    /// `conn::h1::Http1::trailers`).
    trailers: Option<Box<Trailers>>,
}

/// A request body read as it arrives (`body::streamed`), or discarded
/// (`BodyUse::Ignore`: the sink drops it).
struct Upload {
    kind: UploadKind,
    sink: BodySink,
    /// The client asked for `100 Continue`: it may never send the body.
    expect_continue: bool,
    /// That `100 Continue` was queued (at once, or relayed later through
    /// `interim`).
    continued: bool,
    /// Discarding after the answer was queued: bytes that may still be
    /// thrown away, and until when, before the connection closes instead.
    after_answer: Option<(u64, Instant)>,
}

enum UploadKind {
    /// Bytes of a Content-Length body still to come.
    Length(u64),
    Chunked(ChunkedDecoder),
}

/// What `feed` did with the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Feed {
    /// The body is complete (or none was being read): go on.
    Done,
    /// All input was taken: read more.
    Input,
    /// The reader's buffer is full: stop reading until it wakes the
    /// connection.
    Full,
    /// The body broke a limit or its framing: an error answer was queued,
    /// the input must be dropped, the machine is `Closing`.
    Refused(Refusal),
    /// A body discarded after its answer broke `discard_bytes_max` or its
    /// framing: nothing more is read, the machine is `Closing` (the answer
    /// leaves, then the lingering close).
    Closing,
}

/// What `stream_body` needs of a head announcing a body.
#[derive(Clone, Copy)]
pub(crate) struct BodyStart {
    head_len: usize,
    framing: Framing,
    answer: Answer,
    expect_continue: bool,
}

impl BodyStart {
    fn of(head: &Framed, env: &Env<'_>) -> BodyStart {
        BodyStart {
            head_len: head.head_len,
            framing: head.framing,
            answer: Answer {
                head_only: head.head_only,
                version: head.version,
                keep_alive: head.keep_alive && !env.draining,
                trailers: head.te_trailers,
                // A head announcing a body: not switched after it.
                upgradable: false,
            },
            expect_continue: head.expect_continue,
        }
    }
}

/// Where the connection is in its request/response cycle.
enum State {
    /// Between requests, nothing of the next one received.
    Idle,
    /// Part of a request head received, since `deadline - head_timeout`.
    Head,
    /// The head is complete; the body is arriving.
    Body(Box<BodyWait>),
    /// A request was handed out by `poll`: `respond` or `defer` is next.
    Handling(Answer),
    /// The handler will answer through a `Responder`.
    Deferred(Answer),
    /// The last answer is queued; close once it is sent.
    Closing,
    /// A 101 is queued: the connection belongs to another protocol.
    Upgraded,
}

/// What an answer to the current request needs to know about it.
#[derive(Clone, Copy)]
struct Answer {
    head_only: bool,
    version: Version,
    keep_alive: bool,
    /// The client takes trailer fields (`TE: trailers`).
    trailers: bool,
    /// The request offered an upgrade (`Head::upgrade`) and has no body:
    /// it may be answered with a 101 (`upgrade`).
    upgradable: bool,
}

struct BodyWait {
    head_len: usize,
    /// The request is HEAD: an error answer must carry no body either.
    head_only: bool,
    kind: BodyKind,
}

enum BodyKind {
    Length(u64),
    /// Offsets are relative to the start of the request in the input.
    Chunked {
        decoder: ChunkedDecoder,
        read: usize,
        write: usize,
    },
}

impl H1 {
    pub(crate) fn new() -> Self {
        H1 {
            state: State::Idle,
            first: true,
            deadline: None,
            head_since: Instant::now(),
            rate: None,
            buffer_next: false,
            upload: None,
            discarded: 0,
            trailers: None,
        }
    }

    /// Whether a whole request or more may be parsed: not waiting for an
    /// answer, not closing.
    pub(crate) fn is_idle(&self) -> bool {
        matches!(self.state, State::Idle)
    }

    pub(crate) fn is_closing(&self) -> bool {
        matches!(self.state, State::Closing)
    }

    /// No request has been parsed yet.
    pub(crate) fn is_first(&self) -> bool {
        self.first
    }

    /// Stops: the answer queued last is the last one (the transport failed
    /// or refused the client).
    pub(crate) fn close(&mut self) {
        self.state = State::Closing;
    }

    /// Looks at the unconsumed input `data` for the next request. `headers`
    /// receives its fields; `make` makes what the driver keeps of its
    /// head (the handler's `Request`), put in `made` for `Event::Request`
    /// and `Event::BodyAhead` (else left as it was). Writes only the
    /// answers it makes itself (100 Continue, errors) into `out`.
    pub(crate) fn poll<'b, 'h, R>(
        &mut self,
        data: &'b mut [u8],
        headers: &'h mut [MaybeUninit<httparse::Header<'b>>],
        env: &Env<'_>,
        out: &mut Output,
        made: &mut Option<R>,
        make: impl Fn(&Head<'b, 'h>) -> R,
    ) -> Event<'b> {
        match self.state {
            State::Deferred(_) | State::Handling(_) => return Event::Deferred,
            State::Closing => return Event::Closing,
            State::Upgraded => return Event::Upgraded,
            State::Idle | State::Head | State::Body(_) => {}
        }
        if data.is_empty() {
            return Event::Input;
        }
        if let State::Body(_) = self.state {
            return self.continue_body(data, headers, env, out, made, make);
        }
        let data: &'b [u8] = data;
        // What is made of the head is written where the driver reads it
        // (`made`), not carried in the event: in the event, it was copied
        // from the parse's result and again out of the event (callgrind,
        // bench/runs/2026-11-28-loop10).
        // The plain parser's head goes on here, in registers; any other
        // is httparse's, out of line (`poll_httparse`).
        let head = match parse_head_plain(data, headers, env.limits, made, &make) {
            Plain::Taken(Ok(head)) => head,
            Plain::Taken(Err(e)) => return self.refuse_head(e, data, env, out),
            Plain::Declined(headers) => return self.poll_httparse(data, headers, env, out, made, make),
        };
        self.after_head(head, data, env, out)
    }

    /// `poll` for a head the plain parser did not take: httparse's, then
    /// the same steps. Out of line: rare, and its own copy of the rules.
    #[cold]
    #[inline(never)]
    fn poll_httparse<'b, 'h, R>(
        &mut self,
        data: &'b [u8],
        headers: &'h mut [MaybeUninit<httparse::Header<'b>>],
        env: &Env<'_>,
        out: &mut Output,
        made: &mut Option<R>,
        make: impl FnOnce(&Head<'b, 'h>) -> R,
    ) -> Event<'b> {
        match parse_head_httparse(data, headers, env.limits, made, make) {
            Ok(Some(head)) => self.after_head(head, data, env, out),
            Ok(None) => {
                // A head in pieces: rare from a client that writes each
                // request whole.
                if let State::Idle = self.state {
                    self.state = State::Head;
                    self.head_since = env.now;
                    self.deadline = env.now.checked_add(env.limits.head_timeout);
                }
                Event::Input
            }
            Err(e) => self.refuse_head(e, data, env, out),
        }
    }

    /// A head that broke the rules: its error answer (or none, for what
    /// is not HTTP/1 at all on a listener that takes HTTP/2's preface).
    #[cold]
    #[inline(never)]
    fn refuse_head<'b>(&mut self, e: HeadError, data: &[u8], env: &Env<'_>, out: &mut Output) -> Event<'b> {
        if e == HeadError::NotHttp && self.first && env.h2_allowed {
            self.state = State::Closing;
            return Event::NotHttp;
        }
        // A HEAD refused before its head parsed gets no body either
        // (RFC 9110 §9.3.2).
        Event::Refused(self.refuse(
            out,
            env,
            (e.status(), Reason::of_head(e)),
            e.reason(),
            data.starts_with(b"HEAD "),
        ))
    }

    /// What follows a whole head (`head`: its facts; what is made of it
    /// is in `poll`'s `made`): the request handed out if its body is
    /// here, else the wait for it, or the driver asked about it.
    #[inline(always)]
    fn after_head<'b>(&mut self, head: Framed, data: &'b [u8], env: &Env<'_>, out: &mut Output) -> Event<'b> {
        self.first = false;
        let has_body = match head.framing {
            Framing::Empty | Framing::Length(0) => false,
            Framing::Length(_) | Framing::Chunked => true,
        };
        if has_body && !std::mem::take(&mut self.buffer_next) {
            return Event::BodyAhead(BodyStart::of(&head, env));
        }
        let head_len = head.head_len;
        let head_only = head.head_only;
        match head.framing {
            Framing::Empty => self.handling(&head, &data[head_len..head_len], head_len, env),
            Framing::Length(n) if (data.len() - head_len) as u64 >= n => {
                let end = head_len + n as usize;
                self.handling(&head, &data[head_len..end], end, env)
            }
            framing => self.wait_for_body(
                framing,
                head_len,
                head.expect_continue && data.len() == head_len,
                head_only,
                env,
                out,
            ),
        }
    }

    /// A head whose body is still to come: wait for it (`State::Body`),
    /// sending `100 Continue` first if the client waits for one. Out of
    /// line: a bodiless request's path never comes here.
    #[inline(never)]
    fn wait_for_body<'b>(
        &mut self,
        framing: Framing,
        head_len: usize,
        expect_continue: bool,
        head_only: bool,
        env: &Env<'_>,
        out: &mut Output,
    ) -> Event<'b> {
        let kind = match framing {
            Framing::Length(n) => BodyKind::Length(n),
            // The trailer section is kept for the handler (a
            // `Vec` only once a trailer byte comes).
            _ => BodyKind::Chunked {
                decoder: ChunkedDecoder::keeping_trailers(env.limits.body_bytes_max, TRAILER_BYTES_MAX),
                read: head_len,
                write: head_len,
            },
        };
        self.state = State::Body(Box::new(BodyWait {
            head_len,
            head_only,
            kind,
        }));
        if expect_continue {
            // RFC 9110 §10.1.1: the client waits for this before
            // sending the body.
            out.buf.extend_from_slice(wire::CONTINUE);
        }
        // The body may be here already: the next call looks.
        Event::Again
    }

    /// The body of the head `poll` announced is buffered as usual: the
    /// next `poll` hands the request out once it is complete.
    pub(crate) fn buffer_body(&mut self) {
        self.buffer_next = true;
    }

    /// The body of the head `poll` announced goes to `sink` as it arrives
    /// (`feed`); the handler is called now (the driver consumes the head:
    /// `start.head_len` bytes). `reader_taken`: the handler took the
    /// reader, so a client waiting for `100 Continue` gets it.
    pub(crate) fn stream_body(
        &mut self,
        start: BodyStart,
        sink: BodySink,
        reader_taken: bool,
        env: &Env<'_>,
        out: &mut Output,
    ) -> usize {
        // A discarded body is not kept, so no size limit applies to it
        // until its answer is queued (then `discard_bytes_max`).
        let limit = if sink.is_discard() {
            u64::MAX
        } else {
            env.limits.body_bytes_max
        };
        let kind = match start.framing {
            Framing::Length(n) => UploadKind::Length(n),
            // A reader gets the trailer section with the end
            // (`BodyReader::trailers`); a discarded body's is not kept.
            _ if sink.is_discard() => UploadKind::Chunked(ChunkedDecoder::new(limit)),
            _ => UploadKind::Chunked(ChunkedDecoder::keeping_trailers(limit, TRAILER_BYTES_MAX)),
        };
        self.upload = Some(Box::new(Upload {
            kind,
            sink,
            after_answer: None,
            expect_continue: start.expect_continue,
            continued: start.expect_continue && reader_taken,
        }));
        self.state = State::Handling(start.answer);
        if start.expect_continue && reader_taken {
            // RFC 9110 §10.1.1: the client waits for this before sending
            // the body.
            out.buf.extend_from_slice(wire::CONTINUE);
        }
        start.head_len
    }

    /// The trailer section of the request `poll` just handed out, if its
    /// chunked body had one (the driver asks only for chunked bodies).
    pub(crate) fn take_trailers(&mut self) -> Option<Box<Trailers>> {
        self.trailers.take()
    }

    /// Whether the request `poll` just handed out has a trailer section
    /// to take (only a chunked body's can).
    #[inline(always)]
    pub(crate) fn has_trailers(&self) -> bool {
        self.trailers.is_some()
    }

    /// Bytes of unread bodies thrown away since the last call.
    pub(crate) fn take_discarded(&mut self) -> u64 {
        std::mem::take(&mut self.discarded)
    }

    /// A body is being handed to a reader (see `feed`).
    /// Idle after a request (not the first), no body being read: all it
    /// can do next is wait for input.
    pub(crate) fn is_between_requests(&self) -> bool {
        !self.first && matches!(self.state, State::Idle) && self.upload.is_none()
    }

    pub(crate) fn is_uploading(&self) -> bool {
        self.upload.is_some()
    }

    /// Hands the body bytes in `input` to the reader, as far as its room
    /// allows, consuming them.
    // Out of line (as `continue_body`): a body's path, kept out of the
    // driver's code every bodiless request runs through.
    #[inline(never)]
    pub(crate) fn feed(&mut self, input: &mut Input, out: &mut Output, env: &Env<'_>) -> Feed {
        let Some(up) = self.upload.as_mut() else {
            return Feed::Done;
        };
        loop {
            let data = &input.buf[input.start..input.end];
            let complete = match &mut up.kind {
                UploadKind::Length(left) => *left == 0,
                UploadKind::Chunked(decoder) => decoder.is_done(),
            };
            if complete {
                if let Some(mut up) = self.upload.take() {
                    let trailers = match &mut up.kind {
                        UploadKind::Chunked(decoder) => decoder.take_trailers(),
                        UploadKind::Length(_) => None,
                    };
                    up.sink
                        .finish_with(trailers.and_then(|section| Trailers::received_section(&section)));
                }
                return Feed::Done;
            }
            if data.is_empty() {
                return Feed::Input;
            }
            let room = up.sink.room();
            if room == 0 {
                return Feed::Full;
            }
            let consumed = match &mut up.kind {
                UploadKind::Length(left) => {
                    let n = data.len().min(room).min(usize::try_from(*left).unwrap_or(usize::MAX));
                    up.sink.push(&data[..n]);
                    input.start += n;
                    *left -= n as u64;
                    n
                }
                // A run of data may pass the room by less than a read
                // buffer: the reader's buffer is bounded all the same.
                UploadKind::Chunked(decoder) => match decoder.step(data) {
                    Ok(step) => {
                        up.sink.push(&data[step.data.clone()]);
                        input.start += step.consumed;
                        step.consumed
                    }
                    Err(_) if up.after_answer.is_some() => {
                        // The answer is queued: close after it.
                        self.upload = None;
                        self.state = State::Closing;
                        return Feed::Closing;
                    }
                    Err(e) => {
                        let kind = io::ErrorKind::InvalidData;
                        if let Some(up) = self.upload.take() {
                            up.sink.fail(kind, e.reason());
                        }
                        let head_only = matches!(self.state, State::Handling(a) | State::Deferred(a) if a.head_only);
                        let reason = chunked_reason(e);
                        return Feed::Refused(self.refuse(out, env, (e.status(), reason), e.reason(), head_only));
                    }
                },
            };
            if up.sink.is_discard() {
                self.discarded += consumed as u64;
            }
            if let Some((left, _)) = &mut up.after_answer {
                match left.checked_sub(consumed as u64) {
                    Some(rest) => *left = rest,
                    None => {
                        // More than `discard_bytes_max` after the answer
                        // (a chunked body): stop reading, close after it.
                        self.upload = None;
                        self.state = State::Closing;
                        return Feed::Closing;
                    }
                }
            }
        }
    }

    /// A request is complete: hand it out. Inlined into `poll` (and
    /// `continue_body`): the build that called it counted 1,405
    /// instructions a pipelined hello against 1,386 (callgrind,
    /// bench/runs/2026-11-27-req6, req6-1).
    #[inline(always)]
    fn handling<'b>(&mut self, head: &Framed, body: &'b [u8], consumed: usize, env: &Env<'_>) -> Event<'b> {
        self.rate = None;
        let answer = State::Handling(Answer {
            head_only: head.head_only,
            version: head.version,
            keep_alive: head.keep_alive && !env.draining,
            trailers: head.te_trailers,
            upgradable: head.upgrade && body.is_empty() && !matches!(head.framing, Framing::Chunked),
        });
        // The state left is `Idle` or `Head` (`poll`), or `Idle` after
        // `continue_body` dropped the body's wait.
        self.enter_from_bare(answer);
        Event::Request { body, consumed }
    }

    /// Checks whether the body being waited for is complete.
    /// Out of line: with its own copy of the head's parse, inlined it
    /// spread a bodiless request's hot code over more cache lines.
    #[inline(never)]
    fn continue_body<'b, 'h, R>(
        &mut self,
        data: &'b mut [u8],
        headers: &'h mut [MaybeUninit<httparse::Header<'b>>],
        env: &Env<'_>,
        out: &mut Output,
        made: &mut Option<R>,
        make: impl FnOnce(&Head<'b, 'h>) -> R,
    ) -> Event<'b> {
        let State::Body(wait) = &mut self.state else {
            return Event::Input;
        };
        let head_len = wait.head_len;
        let (body, consumed) = match &mut wait.kind {
            BodyKind::Length(n) => {
                let total = head_len + *n as usize;
                if data.len() < total {
                    return Event::Input;
                }
                (head_len..total, total)
            }
            BodyKind::Chunked { decoder, read, write } => match decoder.decode_in_place(data, read, write) {
                Ok(true) => {
                    self.trailers = decoder.take_trailers().and_then(received_trailers);
                    (head_len..*write, *read)
                }
                Ok(false) => return Event::Input,
                Err(e) => return Event::Refused(self.fail(out, env, (e.status(), chunked_reason(e)), e.reason())),
            },
        };
        let data: &'b [u8] = data;
        // The head was valid when it arrived and its bytes have not moved
        // relative to the request start; parse it again rather than keep a
        // self-referential borrow across reads.
        let Ok(Some(head)) = parse_head_into(&data[..head_len], headers, env.limits, true, made, make) else {
            return Event::Refused(self.fail(out, env, (500, Reason::BadRequest), "request head changed"));
        };
        // The wait is done with: dropped here, not by `handling`.
        self.state = State::Idle;
        self.handling(&head, &data[body], consumed, env)
    }

    /// Queues the handler's answer to the request `poll` gave out.
    pub(crate) fn respond(
        &mut self,
        out: &mut Output,
        response: &mut Response,
        env: &Env<'_>,
        extra_fields: &[u8],
    ) -> Sent {
        let State::Handling(answer) = self.state else {
            debug_assert!(false, "respond without a request");
            return Sent {
                status: 0,
                body_bytes: 0,
                keep_alive: false,
            };
        };
        self.answer_with(out, response, answer, env, extra_fields)
    }

    /// Switches protocols (RFC 9110 §7.8, hyper's `Conn::into_inner`,
    /// h2o's `h2o_http1_upgrade`): queues a `101 Switching Protocols` to
    /// `protocol` with the new protocol's `fields` (complete lines) as the
    /// answer to the request `poll` gave out (or deferred), and stops: the
    /// next `poll` says `Upgraded`, and the bytes after the request are the
    /// new protocol's. `None`, with nothing queued, if that request did not
    /// offer an upgrade (no `Connection: upgrade` with an `Upgrade` field,
    /// HTTP/1.0, or a body): the caller answers it otherwise.
    pub(crate) fn upgrade(&mut self, out: &mut Output, protocol: &str, fields: &[u8], env: &Env<'_>) -> Option<Sent> {
        let (State::Handling(answer) | State::Deferred(answer)) = self.state else {
            return None;
        };
        if !answer.upgradable || self.upload.is_some() {
            return None;
        }
        debug_assert!(
            crate::codec::head::is_token(protocol.split('/').next().unwrap_or_default().as_bytes()),
            "an upgrade names one protocol token: {protocol:?}"
        );
        self.rate = None;
        self.deadline = None;
        wire::write_switching(&mut out.buf, protocol, fields, env.date);
        self.state = State::Upgraded;
        Some(Sent {
            status: 101,
            body_bytes: 0,
            keep_alive: true,
        })
    }

    /// A 101 is queued: the connection is another protocol's.
    pub(crate) fn is_upgraded(&self) -> bool {
        matches!(self.state, State::Upgraded)
    }

    /// Queues an interim answer to the deferred request (a proxy relaying
    /// its upstream's): `100 Continue` only to a client that asked for it
    /// and has not had it, a `103 Early Hints` with `fields` (complete
    /// lines). Whether it was queued: never to an HTTP/1.0 client (RFC
    /// 9110 §15.2: "A server MUST NOT send a 1xx response to an HTTP/1.0
    /// client"), nor once the final answer is on its way.
    pub(crate) fn interim(&mut self, out: &mut Output, status: u16, fields: &[u8]) -> bool {
        let State::Deferred(answer) = self.state else {
            return false;
        };
        if answer.version != Version::Http11 {
            return false;
        }
        match status {
            100 => {
                let Some(up) = self.upload.as_mut() else {
                    return false;
                };
                if !up.expect_continue || std::mem::replace(&mut up.continued, true) {
                    return false;
                }
                out.buf.extend_from_slice(wire::CONTINUE);
            }
            103 => {
                out.buf.extend_from_slice(b"HTTP/1.1 103 Early Hints\r\n");
                out.buf.extend_from_slice(fields);
                out.buf.extend_from_slice(b"\r\n");
            }
            _ => return false,
        }
        true
    }

    /// The handler will answer later (`answer`); the input waits.
    pub(crate) fn defer(&mut self) {
        if let State::Handling(answer) = self.state {
            self.state = State::Deferred(answer);
        }
    }

    /// Queues the deferred answer. `None` if none is awaited.
    pub(crate) fn answer(
        &mut self,
        out: &mut Output,
        response: &mut Response,
        env: &Env<'_>,
        extra_fields: &[u8],
    ) -> Option<Sent> {
        let State::Deferred(answer) = self.state else {
            return None;
        };
        Some(self.answer_with(out, response, answer, env, extra_fields))
    }

    /// Queues the reverse proxy's answer relayed in one pass to the
    /// deferred request: `status`, then `rest` (its field lines, blank
    /// line and body of `body_len` bytes), written as `answer` writes
    /// the `Response` made of it (`write_relayed_whole`). `None`, nothing
    /// done: no request is deferred, or one only `answer` answers (a
    /// HEAD, a body still being read, a status that has no body).
    #[inline(always)]
    pub(crate) fn answer_relayed(
        &mut self,
        out: &mut Output,
        env: &Env<'_>,
        status: u16,
        rest: &[u8],
        body_len: usize,
    ) -> Option<Sent> {
        let State::Deferred(answer) = self.state else {
            return None;
        };
        let date = <&[u8; crate::date::DATE_LEN]>::try_from(env.date).ok()?;
        if answer.head_only
            || self.upload.is_some()
            || !(200..600).contains(&status)
            || status == 204
            || status == 304
            || body_len > crate::limits::INLINE_BODY_BYTES_MAX
        {
            return None;
        }
        let keep_alive = answer.keep_alive && !env.draining;
        self.rate = None;
        respond::write_relayed_whole(&mut out.buf, date, status, (keep_alive, answer.version), body_len, rest);
        self.enter_from_bare(if keep_alive { State::Idle } else { State::Closing });
        Some(Sent {
            status,
            body_bytes: body_len as u64,
            keep_alive,
        })
    }

    fn answer_with(
        &mut self,
        out: &mut Output,
        response: &mut Response,
        answer: Answer,
        env: &Env<'_>,
        extra_fields: &[u8],
    ) -> Sent {
        let mut keep_alive = answer.keep_alive && !env.draining;
        self.rate = None;
        if self.upload.is_some() {
            keep_alive = self.answer_upload(keep_alive, env);
        }
        let sent = write_response(
            env.date,
            out,
            response,
            answer.head_only,
            answer.version,
            keep_alive,
            extra_fields,
        );
        if let Some(Tail::Stream {
            chunked: true,
            trailers,
            ..
        }) = &mut out.tail
        {
            // RFC 9112 §7.1.2: trailers only to a client that said it
            // takes them; the others' are dropped.
            *trailers = answer.trailers;
        }
        // The state left is `Handling` (`respond`) or `Deferred` (`answer`).
        self.enter_from_bare(if sent.keep_alive { State::Idle } else { State::Closing });
        sent
    }

    /// A request whose body is being read is answered: the rest of the
    /// body is read and dropped if the connection can live on, else the
    /// reader is failed and the connection closes after the answer
    /// (false). Out of line: a bodiless request's answer never comes here.
    #[inline(never)]
    fn answer_upload(&mut self, mut keep_alive: bool, env: &Env<'_>) -> bool {
        if let Some(mut up) = self.upload.take() {
            let discard_max = env.limits.discard_bytes_max;
            let discardable = match &up.kind {
                UploadKind::Length(left) => *left <= discard_max,
                UploadKind::Chunked(_) => true,
            };
            if keep_alive && up.sink.is_discard() && discardable && !up.expect_continue {
                // A body nobody reads, answered at its head: the rest is
                // read and thrown away (at most `discard_bytes_max`,
                // within `DISCARD_TIMEOUT`), and the connection lives on,
                // as nginx's discarded bodies.
                up.after_answer = Some((discard_max, env.now + DISCARD_TIMEOUT));
                self.upload = Some(up);
            } else {
                // Answered before the body's end: the rest is not read
                // (the connection closes after the answer, lingering). A
                // client that asked for `100 Continue` may never send it.
                up.sink.fail(
                    io::ErrorKind::UnexpectedEof,
                    "the request was answered before its body's end",
                );
                keep_alive = false;
            }
        }
        keep_alive
    }

    /// Moves to `next` from a state that owns nothing (any but `Body`),
    /// without the old state's drop. With it, `handling` called `free` on
    /// a path no request takes, and saved six registers around that call
    /// on every request's path (16 instructions of a pipelined hello's,
    /// callgrind).
    #[inline(always)]
    fn enter_from_bare(&mut self, next: State) {
        let left = std::mem::replace(&mut self.state, next);
        debug_assert!(
            !matches!(left, State::Body(_)),
            "a body's wait is dropped where it ends"
        );
        // Forgetting a state that owns nothing frees nothing.
        std::mem::forget(left);
    }

    /// Queues an error answer and moves to closing. The caller drops the
    /// rest of the input: its framing cannot be trusted.
    #[cold]
    #[inline(never)]
    fn fail(&mut self, out: &mut Output, env: &Env<'_>, status: (u16, Reason), why: &'static str) -> Refusal {
        let head_only = matches!(&self.state, State::Body(wait) if wait.head_only);
        self.refuse(out, env, status, why, head_only)
    }

    /// Queues the error answer (without a body for a HEAD) and closes.
    /// `reason` names the limit or rule for the access log.
    #[cold]
    #[inline(never)]
    fn refuse(
        &mut self,
        out: &mut Output,
        env: &Env<'_>,
        (status, reason): (u16, Reason),
        why: &'static str,
        head_only: bool,
    ) -> Refusal {
        let body_bytes = wire::write_error(&mut out.buf, status, why, env.date, head_only);
        self.state = State::Closing;
        Refusal {
            status,
            body_bytes,
            reason,
        }
    }

    /// Makes room in `input` to read more into (its buffer is not empty):
    /// moves the unconsumed bytes to the front and reclaims a chunked
    /// body's framing, then grows the buffer geometrically, never past what
    /// the request still needs (a Content-Length body) or the limits allow,
    /// so a client announcing a large body costs memory only as its bytes
    /// arrive. `Err` with the error answer queued if the request cannot
    /// grow further. `grow_bytes_max`: how much the buffer may still grow,
    /// what is left of the worker's `body_budget_bytes` (an argument, not
    /// a fact of the `Env`, which is the same for a whole worker turn).
    pub(crate) fn make_room(
        &mut self,
        input: &mut Input,
        out: &mut Output,
        env: &Env<'_>,
        grow_bytes_max: usize,
    ) -> Result<(), Refusal> {
        if input.end < input.buf.len() {
            return Ok(());
        }
        if let State::Body(wait) = &mut self.state {
            if let BodyKind::Chunked { read, write, .. } = &mut wait.kind {
                if *read > *write {
                    let (from, to) = (input.start + *read, input.start + *write);
                    input.buf.copy_within(from..input.end, to);
                    input.end -= *read - *write;
                    *read = *write;
                }
            }
        }
        if input.start > 0 {
            input.buf.copy_within(input.start..input.end, 0);
            input.end -= input.start;
            input.start = 0;
        }
        if input.end < input.buf.len() {
            return Ok(());
        }
        let limits = env.limits;
        let max = limits
            .head_bytes_max
            .saturating_add(usize::try_from(limits.body_bytes_max).unwrap_or(usize::MAX))
            .saturating_add(BUFFER_BYTES);
        let doubled = input.buf.len().saturating_mul(2);
        let want = match &self.state {
            State::Body(wait) => match wait.kind {
                BodyKind::Length(n) => {
                    doubled.min(wait.head_len.saturating_add(usize::try_from(n).unwrap_or(usize::MAX)))
                }
                BodyKind::Chunked { .. } => doubled,
            },
            _ => doubled,
        };
        let new_len = want.max(input.buf.len() + 1).min(max);
        if new_len <= input.buf.len() {
            let (status, why) = match self.state {
                State::Body(_) => ((413, Reason::BodyTooLarge), "request body too large"),
                _ => ((431, Reason::HeaderTooLarge), "request head too large"),
            };
            return Err(self.fail(out, env, status, why));
        }
        if new_len - input.buf.len() > grow_bytes_max {
            // The worker holds its budget of buffered requests: this one
            // waits for nothing, it is refused (the client may retry).
            return Err(self.fail(out, env, (503, Reason::MemoryBudget), crate::budget::BUDGET_SPENT));
        }
        // Exactly: `resize` alone may double the capacity (a 1 MiB body
        // whose head made it pass 1 MiB by 70 bytes held 2 MiB).
        input.buf.reserve_exact(new_len - input.buf.len());
        input.buf.resize(new_len, 0);
        Ok(())
    }

    /// Called when the driver is about to wait: the deadline to wait
    /// until, or `Close` if the connection is done (the client left, or a
    /// shutdown found it between requests).
    ///
    /// The common wait, a keep-alive connection idle after its answers
    /// with nothing read and nothing to close for, is tested here, in the
    /// driver's code; every other state is `poll_timeout_other`'s, out of
    /// line. Out of line whole, the call was 41 instructions a request at
    /// hello c50; split so, hello c50 fell 2,018 -> 1,987 (callgrind).
    #[inline]
    pub(crate) fn poll_timeout(&mut self, env: &Env<'_>, link: Link) -> Wait {
        match self.idle_wait(env.idle_until, env.draining, &link) {
            Some(wait) => wait,
            None => self.poll_timeout_other(env, link),
        }
    }

    /// `poll_timeout`'s common wait alone, from the two facts of `Env` it
    /// reads (`idle_until`, `draining`): `None` if the state is another,
    /// for `poll_timeout` to decide. The driver asks this first, so that
    /// it builds no `Env` for the common wait.
    #[inline(always)]
    pub(crate) fn idle_wait(&mut self, idle_until: Option<Instant>, draining: bool, link: &Link) -> Option<Wait> {
        self.idle_wait_of(idle_until, draining, link.idle_facts())
    }

    /// [`H1::idle_wait`] from the three facts of the `Link` it reads, so
    /// that the driver builds no `Link` for the common wait (its stores
    /// were 6 instructions a request, callgrind hello-c50).
    #[inline(always)]
    pub(crate) fn idle_wait_of(
        &mut self,
        idle_until: Option<Instant>,
        draining: bool,
        facts: IdleFacts,
    ) -> Option<Wait> {
        // The `Idle if link.input_empty` arm below, when it neither
        // closes nor keeps a handshake's deadline.
        if matches!(self.state, State::Idle)
            && self.upload.is_none()
            && facts.input_empty
            && !facts.peer_closed
            && !draining
            && !facts.handshaking
        {
            self.deadline = idle_until;
            return Some(Wait::Until(self.deadline));
        }
        None
    }

    /// [`H1::poll_timeout`] in every state.
    #[inline(never)]
    fn poll_timeout_other(&mut self, env: &Env<'_>, link: Link) -> Wait {
        match self.state {
            // Still in the slot after its 101: nothing took the connection
            // over, so nothing speaks on it.
            State::Upgraded => return Wait::Close,
            // A body discarded after its answer: its own deadline.
            State::Idle if self.upload.is_some() => {
                if link.peer_closed {
                    return Wait::Close;
                }
                self.deadline = self
                    .upload
                    .as_ref()
                    .and_then(|up| up.after_answer)
                    .map(|(_, until)| until);
            }
            State::Idle if link.input_empty => {
                if link.peer_closed || (env.draining && !link.fresh) {
                    return Wait::Close;
                }
                // A handshake keeps the deadline set at accept
                // (`head_timeout`): a client that never finishes one is
                // closed then (a 408 cannot be sent before it).
                if !link.handshaking {
                    self.deadline = env.idle_until;
                }
            }
            State::Idle | State::Head | State::Body(_) if link.peer_closed => return Wait::Close,
            State::Head => self.deadline = self.head_deadline(env, link),
            // The client left mid-body: the reader gets UnexpectedEof
            // when the connection (and the upload) is dropped.
            State::Deferred(_) | State::Handling(_) if self.upload.is_some() && link.peer_closed => return Wait::Close,
            // The body's minimum rate; none while the reader's buffer is
            // full (the reader owns that wait), and its clock starts again
            // when the reader makes room.
            State::Deferred(_) | State::Handling(_) if self.upload.is_some() => {
                let blocked = self.upload.as_ref().is_some_and(|up| up.sink.is_blocked());
                self.deadline = if blocked {
                    self.rate = None;
                    None
                } else {
                    Some(self.body_rate(env, link).deadline())
                };
            }
            State::Body(_) => self.deadline = Some(self.body_rate(env, link).deadline()),
            // The application owns a deferred answer's deadline.
            State::Deferred(_) | State::Handling(_) => self.deadline = None,
            State::Idle | State::Closing => {}
        }
        Wait::Until(self.deadline)
    }

    /// The head's deadline: `head_timeout` from its first byte, a second
    /// more per `min_rate_bytes_per_sec` bytes of it received, at most
    /// `head_timeout_max`.
    fn head_deadline(&self, env: &Env<'_>, link: Link) -> Option<Instant> {
        let limits = env.limits;
        let extra = match limits.min_rate_bytes_per_sec {
            0 => std::time::Duration::ZERO,
            rate => std::time::Duration::from_secs(link.unconsumed as u64 / rate),
        };
        let allowed = (limits.head_timeout + extra).min(limits.head_timeout_max.max(limits.head_timeout));
        self.head_since.checked_add(allowed)
    }

    /// The rate clock of the body being received, started now if it was
    /// not running.
    fn body_rate(&mut self, env: &Env<'_>, link: Link) -> MinRate {
        *self
            .rate
            .get_or_insert_with(|| MinRate::start(env.now, link.bytes_in, env.limits.body_timeout))
    }

    /// Sets the deadline before the first `poll_timeout` (at accept).
    pub(crate) fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    /// The deadline passed. `Some(event)` if an answer was queued (a 408
    /// for a request not received in time), else whether to close.
    pub(crate) fn handle_timeout(&mut self, out: &mut Output, env: &Env<'_>, link: Link) -> TimedOut {
        let why = "request not received in time";
        match self.state {
            State::Head if self.head_deadline(env, link).is_some_and(|d| env.now < d) => TimedOut::Again,
            State::Body(_) | State::Deferred(_) | State::Handling(_)
                if self.rate.is_some() && self.upload_or_body() =>
            {
                let rate = env.limits.min_rate_bytes_per_sec;
                match self.rate.as_mut().map(|r| r.check(env.now, link.bytes_in, rate)) {
                    Some(Rate::TooSlow) => self.time_out_body(out, env, Reason::BodyMinRate),
                    _ => TimedOut::Again,
                }
            }
            State::Head => TimedOut::Refused(self.fail(out, env, (408, Reason::HeadTimeout), why)),
            State::Body(_) => TimedOut::Refused(self.fail(out, env, (408, Reason::BodyTimeout), why)),
            State::Deferred(_) | State::Handling(_) if self.upload.is_some() => {
                self.time_out_body(out, env, Reason::BodyTimeout)
            }
            State::Deferred(_) | State::Handling(_) => {
                self.deadline = None;
                TimedOut::Keep
            }
            State::Idle | State::Closing | State::Upgraded => TimedOut::Close,
        }
    }

    /// A body is arriving (buffered, or handed to a reader).
    fn upload_or_body(&self) -> bool {
        matches!(self.state, State::Body(_)) || self.upload.is_some()
    }

    /// The body stopped coming, or came too slowly: 408 (a reader fails).
    fn time_out_body(&mut self, out: &mut Output, env: &Env<'_>, reason: Reason) -> TimedOut {
        let why = "request not received in time";
        self.rate = None;
        TimedOut::Refused(if let Some(up) = self.upload.take() {
            up.sink
                .fail(io::ErrorKind::TimedOut, "request body not received in time");
            self.refuse(out, env, (408, reason), why, false)
        } else {
            self.fail(out, env, (408, reason), why)
        })
    }
}

/// What a timeout did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TimedOut {
    /// An error answer was queued; send it, then close.
    Refused(Refusal),
    /// Nothing to do (a deferred answer has no timeout).
    Keep,
    /// Not yet (the head's deadline moved as it grew, or the body kept its
    /// rate): ask `poll_timeout` for the next deadline.
    Again,
    /// Close now.
    Close,
}
