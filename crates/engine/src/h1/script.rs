//! A driver for the HTTP/1.1 machine without a socket, for its unit tests
//! and its fuzz target (`fuzzing::h1_session`): bytes are fed in pieces as
//! reads would bring them, requests are answered by a fixed handler (an
//! echo of the method, target and body; `/later…` deferred; `/close…` with
//! `Connection: close`; `/big…` with a body sent as a tail; `/ignore…`
//! answered at its head, its body discarded), and what the
//! machine queues is "written" to `wire`. The driver asserts what the real
//! driver relies on: a request never uses more bytes than it was given, the
//! input never grows past the limits, nothing is written once the machine
//! closed.

use std::mem::MaybeUninit;
use std::time::Instant;

use super::{Env, Event, Feed, Link, Refusal, TimedOut, Wait, H1};
use crate::body::BodySink;
use crate::buffers::{Input, Output, Tail};
use crate::limits::HEADERS_ARRAY_MAX;
use crate::limits::{Limits, BUFFER_BYTES};
use crate::response::Response;

/// The `Date` the scripts' answers carry.
pub(crate) const DATE: &[u8; 29] = b"Mon, 01 Jan 2024 00:00:00 GMT";

/// A body larger than `INLINE_BODY_BYTES_MAX`, answered to `/big`: it goes
/// out as the output's tail.
pub(crate) static BIG: [u8; 40_000] = [b'b'; 40_000];

/// How a script ended, if it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// The last answer was queued (`Connection: close`, HTTP/1.0).
    Closing,
    /// An error answer was queued.
    Refused(Refusal),
    /// Not HTTP/1 while HTTP/2 was allowed: closed without an answer.
    NotHttp,
    /// A 101 was queued (`/upgrade…` asks for one): what follows is the
    /// new protocol's (`Script::switched`).
    Upgraded,
}

pub(crate) struct Script {
    pub(crate) h1: H1,
    input: Input,
    out: Output,
    /// Everything written, in order.
    pub(crate) wire: Vec<u8>,
    pub(crate) limits: Limits,
    pub(crate) now: Instant,
    pub(crate) h2_allowed: bool,
    pub(crate) draining: bool,
    /// Requests answered now or deferred, in order.
    pub(crate) n_requests: usize,
    /// A request is deferred and `answer_later` will answer it.
    pub(crate) deferred: bool,
    /// The deferred request is HEAD.
    deferred_head_only: bool,
    pub(crate) end: Option<End>,
    /// Whether each answer written was to a HEAD request, in order (error
    /// answers excepted).
    pub(crate) head_only: Vec<bool>,
    /// The read buffer's first size; it grows as the machine allows.
    first_buffer_bytes: usize,
    /// Bytes fed so far.
    bytes_in: u64,
    /// After an upgrade: the bytes the machine left unread, then every
    /// byte fed since, in order (what the new protocol would read).
    pub(crate) switched: Vec<u8>,
}

impl Script {
    /// The status of the error answer the script ended with, if it did.
    #[cfg(test)]
    pub(crate) fn refused(&self) -> Option<u16> {
        match self.end {
            Some(End::Refused(r)) => Some(r.status),
            _ => None,
        }
    }

    pub(crate) fn new(limits: Limits) -> Self {
        Script {
            h1: H1::new(),
            input: Input::default(),
            out: Output::default(),
            wire: Vec::new(),
            limits,
            now: Instant::now(),
            h2_allowed: false,
            draining: false,
            n_requests: 0,
            deferred: false,
            deferred_head_only: false,
            end: None,
            head_only: Vec::new(),
            first_buffer_bytes: BUFFER_BYTES,
            bytes_in: 0,
            switched: Vec::new(),
        }
    }

    /// A read buffer this small at first (to exercise its growth).
    pub(crate) fn with_buffer(mut self, bytes: usize) -> Self {
        self.first_buffer_bytes = bytes.max(1);
        self
    }

    /// Reads `bytes` as the socket would bring them: into the buffer's
    /// room (made by the machine when it is full), processing after each
    /// read. Bytes after the end are dropped, as the lingering close does.
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) {
        if self.end == Some(End::Upgraded) {
            self.switched.extend_from_slice(bytes);
            return;
        }
        while !bytes.is_empty() && self.end.is_none() {
            if self.input.buf.is_empty() {
                self.input.buf = vec![0; self.first_buffer_bytes];
            }
            let env = env_of(&self.limits, self.now, self.draining, self.h2_allowed);
            if let Err(refusal) = self.h1.make_room(&mut self.input, &mut self.out, &env, usize::MAX) {
                self.input.discard();
                self.end = Some(End::Refused(refusal));
                self.flush();
                return;
            }
            let cap = self
                .limits
                .head_bytes_max
                .saturating_add(usize::try_from(self.limits.body_bytes_max).unwrap_or(usize::MAX))
                .saturating_add(BUFFER_BYTES)
                .max(self.first_buffer_bytes);
            assert!(self.input.buf.len() <= cap, "the read buffer grew past the limits");
            let room = self.input.buf.len() - self.input.end;
            assert!(room > 0, "make_room made no room");
            let n = room.min(bytes.len());
            self.input.buf[self.input.end..self.input.end + n].copy_from_slice(&bytes[..n]);
            self.input.end += n;
            self.bytes_in += n as u64;
            bytes = &bytes[n..];
            self.process();
        }
        if self.end == Some(End::Upgraded) {
            self.switched.extend_from_slice(bytes);
        }
    }

    /// Answers the deferred request (`/later…`) and goes on.
    pub(crate) fn answer_later(&mut self) {
        assert!(self.deferred, "nothing is deferred");
        self.deferred = false;
        let env = env_of(&self.limits, self.now, self.draining, self.h2_allowed);
        let sent = self.h1.answer(&mut self.out, &mut Response::text("later"), &env, b"");
        assert!(sent.is_some(), "the machine was not waiting for the answer");
        self.head_only.push(self.deferred_head_only);
        if self.h1.is_closing() {
            self.end = Some(End::Closing);
        }
        self.flush();
        if self.end.is_none() {
            self.process();
        }
    }

    /// The deadline passed: the clock moves to the machine's deadline (the
    /// real driver calls this only then), and on while the machine says
    /// `Again` with no byte arriving meanwhile.
    pub(crate) fn time_out(&mut self) -> TimedOut {
        for _ in 0..16 {
            if let Wait::Until(Some(deadline)) = self.wait(false) {
                self.now = self.now.max(deadline);
            }
            let env = env_of(&self.limits, self.now, self.draining, self.h2_allowed);
            let link = self.link(false);
            let timed_out = self.h1.handle_timeout(&mut self.out, &env, link);
            if let TimedOut::Refused(refusal) = timed_out {
                self.input.discard();
                self.end = Some(End::Refused(refusal));
            }
            self.flush();
            if timed_out != TimedOut::Again {
                return timed_out;
            }
        }
        panic!("a request without progress was never timed out");
    }

    /// The deadline passed, at the script's time as it is: one call, as
    /// the real driver makes it.
    #[cfg(test)]
    pub(crate) fn time_out_once(&mut self) -> TimedOut {
        let env = env_of(&self.limits, self.now, self.draining, self.h2_allowed);
        let link = self.link(false);
        let timed_out = self.h1.handle_timeout(&mut self.out, &env, link);
        if let TimedOut::Refused(refusal) = timed_out {
            self.input.discard();
            self.end = Some(End::Refused(refusal));
        }
        self.flush();
        timed_out
    }

    /// What the machine asks for once the driver waits.
    pub(crate) fn wait(&mut self, peer_closed: bool) -> Wait {
        let env = env_of(&self.limits, self.now, self.draining, self.h2_allowed);
        let link = self.link(peer_closed);
        self.h1.poll_timeout(&env, link)
    }

    fn link(&self, peer_closed: bool) -> Link {
        Link {
            peer_closed,
            fresh: self.n_requests == 0 && self.input.is_empty(),
            handshaking: false,
            input_empty: self.input.is_empty(),
            unconsumed: self.input.end - self.input.start,
            bytes_in: self.bytes_in,
        }
    }

    /// Bytes received and not consumed.
    pub(crate) fn unconsumed(&self) -> usize {
        self.input.end - self.input.start
    }

    /// Answers what is complete in the input, as `conn/h1.rs` does.
    fn process(&mut self) {
        loop {
            if self.out.tail.is_some() {
                self.flush();
            }
            let env = env_of(&self.limits, self.now, self.draining, self.h2_allowed);
            let Script {
                h1,
                input,
                out,
                n_requests,
                deferred,
                deferred_head_only,
                end,
                head_only,
                switched,
                ..
            } = self;
            if h1.is_uploading() {
                match h1.feed(input, out, &env) {
                    Feed::Done => {}
                    Feed::Input => break,
                    Feed::Full => panic!("a discarded body never fills a reader"),
                    Feed::Refused(refusal) => {
                        input.discard();
                        *end = Some(End::Refused(refusal));
                        break;
                    }
                    Feed::Closing => {
                        input.discard();
                        *end = Some(End::Closing);
                        break;
                    }
                }
            }
            let mut headers = [const { MaybeUninit::uninit() }; HEADERS_ARRAY_MAX];
            let given = input.end - input.start;
            let data = &mut input.buf[input.start..input.end];
            let mut head = None;
            match h1.poll(data, &mut headers, &env, out, &mut head, |h| *h) {
                Event::Request { body, consumed } => {
                    let head = head.expect("a request's head");
                    assert!(consumed <= given, "a request used more bytes than were read");
                    assert!(
                        consumed >= head.head_len + body.len(),
                        "a request used fewer bytes than it has"
                    );
                    *n_requests += 1;
                    let target = head.target;
                    // What the handler would get of a chunked body's trailer
                    // section (`Request::trailers`), echoed in its answer.
                    let trailers = match head.framing {
                        crate::codec::Framing::Chunked => h1.take_trailers(),
                        _ => None,
                    };
                    if target.starts_with("/upgrade") {
                        // The fields as a WebSocket answer would add them.
                        // A 101 has no body; the 400 that refuses an upgrade
                        // has one, except in answer to HEAD.
                        head_only.push(head.method == "HEAD");
                        if h1
                            .upgrade(out, "websocket", b"Sec-WebSocket-Accept: x\r\n", &env)
                            .is_none()
                        {
                            let text = format!("no upgrade for {} {}", head.method, target);
                            h1.respond(out, &mut Response::new(400).with_body(text), &env, b"");
                            if h1.is_closing() {
                                *end = Some(End::Closing);
                            }
                        }
                    } else if target.starts_with("/later") {
                        h1.defer();
                        *deferred = true;
                        *deferred_head_only = head.method == "HEAD";
                    } else {
                        let mut response = if target.starts_with("/big") {
                            Response::new(200).with_body(&BIG[..])
                        } else {
                            let mut text = format!(
                                "{} {} {}:{}",
                                head.method,
                                target,
                                body.len(),
                                String::from_utf8_lossy(body)
                            );
                            if let Some(t) = &trailers {
                                text.push_str(" | ");
                                text.push_str(&String::from_utf8_lossy(t.as_bytes()));
                            }
                            let r = Response::text(text);
                            if target.starts_with("/close") {
                                r.with_close()
                            } else {
                                r
                            }
                        };
                        head_only.push(head.method == "HEAD");
                        h1.respond(out, &mut response, &env, b"");
                        if h1.is_closing() {
                            *end = Some(End::Closing);
                        }
                    }
                    input.start += consumed;
                }
                Event::Input | Event::Deferred => break,
                Event::Again => {}
                // The script's handler buffers bodies, except `/ignore…`'s:
                // those are answered at the head and discarded.
                Event::BodyAhead(start) if head.is_some_and(|h| h.target.starts_with("/ignore")) => {
                    let head = head.expect("a request's head");
                    *n_requests += 1;
                    let text = format!("ignored {} {}", head.method, head.target);
                    head_only.push(head.method == "HEAD");
                    input.start += h1.stream_body(start, BodySink::discard(), false, &env, out);
                    h1.respond(out, &mut Response::text(text), &env, b"");
                    if h1.is_closing() {
                        *end = Some(End::Closing);
                        break;
                    }
                }
                Event::BodyAhead(_) => h1.buffer_body(),
                Event::Closing => {
                    *end = Some(End::Closing);
                    break;
                }
                Event::Upgraded => {
                    *end = Some(End::Upgraded);
                    switched.extend_from_slice(&input.buf[input.start..input.end]);
                    input.discard();
                    break;
                }
                Event::Refused(refusal) => {
                    input.discard();
                    *end = Some(End::Refused(refusal));
                    break;
                }
                Event::NotHttp => {
                    input.discard();
                    *end = Some(End::NotHttp);
                    break;
                }
            }
        }
        self.flush();
    }

    /// "Writes" what is queued.
    fn flush(&mut self) {
        let out = &mut self.out;
        self.wire.extend_from_slice(&out.buf[out.pos..]);
        out.buf.clear();
        out.pos = 0;
        match out.tail.take() {
            None => {}
            Some(Tail::Bytes { data, pos }) => self.wire.extend_from_slice(&data[pos..]),
            Some(Tail::Shared { bytes, pos }) => self.wire.extend_from_slice(&bytes.as_slice()[pos..]),
            Some(Tail::File { .. } | Tail::Stream { .. }) => panic!("the script's handler sends no files or streams"),
        }
    }
}

fn env_of(limits: &Limits, now: Instant, draining: bool, h2_allowed: bool) -> Env<'_> {
    Env {
        limits,
        date: DATE,
        now,
        idle_until: now.checked_add(limits.idle_timeout),
        draining,
        h2_allowed,
    }
}

/// One answer read back from the wire.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) head: String,
    pub(crate) body: Vec<u8>,
}

/// Reads the answers back from `wire`: each a status line, fields, and a
/// body of its Content-Length (none for 100, or for answers to HEAD as
/// `head_only` says in order; a last error answer to a HEAD request may
/// also have none). Panics if the bytes are not such a sequence.
pub(crate) fn answers(wire: &[u8], head_only: &[bool]) -> Vec<Answer> {
    let mut answers = Vec::new();
    let mut at = 0;
    let mut n_final = 0;
    while at < wire.len() {
        let rest = &wire[at..];
        let end = rest
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("an answer's head ends with CRLF CRLF");
        let head = std::str::from_utf8(&rest[..end + 4]).expect("heads are text");
        assert!(
            head.starts_with("HTTP/1.1 "),
            "an answer starts with its status line: {head:?}"
        );
        let status: u16 = head[9..12].parse().expect("a three-digit status");
        at += end + 4;
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .map(|n| n.parse::<usize>().expect("a decimal length"));
        let mut body = Vec::new();
        if status != 100 {
            let skip = head_only.get(n_final).copied().unwrap_or(false)
                || (status >= 400 && at == wire.len() && n_final >= head_only.len());
            n_final += 1;
            if let (Some(n), false) = (length, skip) {
                assert!(wire.len() - at >= n, "a body shorter than its Content-Length");
                body = wire[at..at + n].to_vec();
                at += n;
            }
        }
        answers.push(Answer {
            status,
            head: head.to_owned(),
            body,
        });
    }
    answers
}
