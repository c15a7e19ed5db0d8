//! An HTTP/2 connection's deadlines, owned by the session as quinn-proto's
//! `Connection` owns its own (`poll_timeout` out, `handle_timeout` in):
//! the driver only arms a timer and says when it fired.
//!
//! These end the connection with GOAWAY:
//! - with no stream open, `idle` since the last request frame (HEADERS,
//!   CONTINUATION, DATA) or stream: PING, SETTINGS, WINDOW_UPDATE and
//!   PRIORITY never restart it, else a client could hold a connection for
//!   hours within its control-frame budget;
//! - a header block (or any frame but DATA) begun must be complete within
//!   `head`;
//! - while responses wait only for the client's window, `send` since the
//!   last DATA byte left.
//!
//! GOAWAY carries NO_ERROR only when no stream is open; one that abandons
//! streams says ENHANCE_YOUR_CALM, so that a client does not take them
//! for finished.
//!
//! A request body's deadline is its stream's own (`BodyClock`), as
//! HTTP/1.1 ends one request and nginx's `client_body_timeout` one
//! stream: a stream too slow is answered 408 (or, if its answer has
//! begun, reset with CANCEL) and the others go on. A body the server holds
//! (collected whole for its handler, or dropped while its answer waits)
//! must keep the minimum rate (`body_grace`, then `min_rate`,
//! `min_rate.rs`): a slow sender cannot hold that memory for long. A body
//! handed to a reader as it arrives (`body::streamed`: a proxied upload, a
//! gRPC client stream) holds no more than the reader's pipe however long
//! it lasts, and may send a small message now and then: it is ended only
//! by a silence longer than `body_grace`.
//!
//! Deferred answers have no timeout, as on HTTP/1.1, nor do a body whose
//! producer has nothing yet (`body::channel`) and an upload whose reader
//! is behind (`body::streamed`).

use std::time::{Duration, Instant};

use super::frame::{self, Code};
use super::stream::{Sending, Stream};
use super::Session;
use crate::limits::Limits;
use crate::min_rate::{MinRate, Rate};

/// The timeouts a session keeps (from `Limits`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    pub(crate) idle: Duration,
    pub(crate) head: Duration,
    pub(crate) body_grace: Duration,
    pub(crate) min_rate: u64,
    pub(crate) send: Duration,
}

impl Timeouts {
    pub(crate) fn of(limits: &Limits) -> Self {
        Timeouts {
            idle: limits.idle_timeout,
            head: limits.head_timeout,
            body_grace: limits.body_timeout,
            min_rate: limits.min_rate_bytes_per_sec,
            send: limits.send_timeout,
        }
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts::of(&Limits::default())
    }
}

/// Where each timeout runs from.
#[derive(Default)]
pub(super) struct Clock {
    /// Body bytes sent when the send timeout was last restarted.
    sent_mark: u64,
    /// While responses wait for the client's window: since when.
    blocked_since: Option<Instant>,
    /// When the connection last had a stream open or received a request
    /// frame, and the count of those bytes then (`None` before the first
    /// `poll_timeout`: the connection's start).
    active_since: Option<Instant>,
    active_mark: u64,
    /// Since when a header block (or a frame other than DATA) has been
    /// begun and not finished.
    block_since: Option<Instant>,
}

/// A request body's deadline while it arrives (see the module's text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BodyClock {
    /// A body the server holds: the minimum rate.
    Rate(MinRate),
    /// A body handed to its reader as it arrives: the last time it grew,
    /// and its length then.
    Quiet { since: Instant, mark: u64 },
}

impl BodyClock {
    fn deadline(&self, grace: Duration) -> Instant {
        match self {
            BodyClock::Rate(r) => r.deadline(),
            BodyClock::Quiet { since, .. } => *since + grace,
        }
    }
}

/// What `handle_timeout` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expired {
    /// No stream, and no request frame within the idle timeout: the
    /// connection is ended.
    Idle,
    /// A header block too slow: the connection is ended.
    SlowRequest(&'static str),
    /// The client kept its window closed past the send timeout: the
    /// connection is ended.
    WindowClosed,
    /// This many request bodies too slow: their streams are answered 408
    /// (ready for the driver) or reset; the connection goes on.
    SlowStreams(usize),
}

impl Expired {
    /// The connection is ended (GOAWAY written).
    pub(crate) fn ends_connection(self) -> bool {
        !matches!(self, Expired::SlowStreams(_))
    }
}

impl Session {
    /// Sets the timeouts (the defaults are `Limits::default()`'s).
    pub(crate) fn set_timeouts(&mut self, timeouts: Timeouts) {
        self.timeouts = timeouts;
    }

    /// When the session wants `handle_timeout` called: the earliest of its
    /// timeouts that run, as of `now`. `partial` is what the driver holds
    /// of a frame not yet whole (the session consumes whole frames only):
    /// its type is the fourth byte.
    pub(crate) fn poll_timeout(&mut self, now: Instant, partial: &[u8]) -> Option<Instant> {
        let t = self.timeouts;
        let flow_blocked = self.is_flow_blocked();
        let (bytes_sent, progress, idle) = (self.bytes_sent, self.request_bytes, self.is_idle());
        let header_block = self.in_header_block();
        let c = &mut self.clock;
        if flow_blocked {
            if c.blocked_since.is_none() || c.sent_mark != bytes_sent {
                c.blocked_since = Some(now);
                c.sent_mark = bytes_sent;
            }
        } else {
            c.blocked_since = None;
        }
        if !idle || progress != c.active_mark || c.active_since.is_none() {
            c.active_since = Some(now);
            c.active_mark = progress;
        }
        let frame_begun = !partial.is_empty() && partial.get(3) != Some(&frame::DATA);
        if header_block || frame_begun {
            c.block_since.get_or_insert(now);
        } else {
            c.block_since = None;
        }
        let deadlines = [
            c.active_since.filter(|_| idle).map(|since| since + t.idle),
            c.block_since.map(|since| since + t.head),
            c.blocked_since.map(|since| since + t.send),
        ];
        let mut earliest = deadlines.into_iter().flatten().min();
        for s in &mut self.streams {
            let Some(clock) = Session::body_clock(s, now, t.body_grace) else {
                continue;
            };
            let at = clock.deadline(t.body_grace);
            earliest = Some(earliest.map_or(at, |e| e.min(at)));
        }
        earliest
    }

    /// Stream `s`'s body clock as of `now`, started, switched or restarted
    /// as its state asks; `None` (and cleared) while no body is awaited
    /// from the client: its request complete, its answer refused already,
    /// a WebSocket, or a reader that is behind (no rate is asked of a
    /// client we do not read: the clock starts again when it catches up).
    fn body_clock(s: &mut Stream, now: Instant, grace: Duration) -> Option<&mut BodyClock> {
        let awaited = !(s.recv_done
            || s.tunnel.is_some()
            || Session::is_upload_blocked(s)
            || (s.refused.is_some() && s.send == Sending::Waiting));
        if !awaited {
            s.clock = None;
            return None;
        }
        let streamed = s.upload.as_ref().is_some_and(|sink| !sink.is_discard());
        let received = s.received;
        let fresh = || {
            if streamed {
                BodyClock::Quiet {
                    since: now,
                    mark: received,
                }
            } else {
                BodyClock::Rate(MinRate::start(now, received, grace))
            }
        };
        let clock = s.clock.get_or_insert_with(fresh);
        // Handed to a reader after the clock started (its handler called
        // on a later pass): the reader's rule from now on.
        if matches!(clock, BodyClock::Quiet { .. }) != streamed {
            *clock = fresh();
        }
        if let BodyClock::Quiet { since, mark } = clock {
            if *mark != received {
                (*since, *mark) = (now, received);
            }
        }
        Some(clock)
    }

    /// The deadline `poll_timeout` gave has passed: if one of the
    /// connection's timeouts has, ends the connection (GOAWAY into `out`);
    /// else ends the streams whose bodies are too slow (408, or
    /// RST_STREAM into `out`). Says which, or `None` (bodies keeping
    /// their rate): `poll_timeout` gives the next deadline.
    pub(crate) fn handle_timeout(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<Expired> {
        let t = self.timeouts;
        let idle = self.is_idle();
        let c = &mut self.clock;
        let expired = if c.block_since.is_some_and(|since| since + t.head <= now) {
            Expired::SlowRequest("request header block not received in time")
        } else if idle && c.active_since.is_some_and(|since| since + t.idle <= now) {
            Expired::Idle
        } else if c.blocked_since.is_some_and(|since| since + t.send <= now) {
            Expired::WindowClosed
        } else {
            let n = self.end_slow_streams(now, out);
            return (n != 0).then_some(Expired::SlowStreams(n));
        };
        let why = match expired {
            Expired::Idle => "idle timeout",
            Expired::SlowRequest(why) => why,
            Expired::WindowClosed => "client did not open its flow-control window in time",
            Expired::SlowStreams(_) => unreachable!("not a connection's timeout"),
        };
        // NO_ERROR would tell the client that every stream up to the last
        // it opened was seen through (§6.8).
        let code = if self.streams.is_empty() {
            Code::NoError
        } else {
            Code::EnhanceYourCalm
        };
        self.fail(out, code, why);
        Some(expired)
    }

    /// Ends each stream whose body missed its deadline (`BodyClock`);
    /// returns how many. One not yet answered gets 408 in place of its
    /// handler's answer (a streamed body's reader fails, as on a broken
    /// upload's 413); one whose answer has begun is reset with CANCEL.
    fn end_slow_streams(&mut self, now: Instant, out: &mut Vec<u8>) -> usize {
        let t = self.timeouts;
        let (mut n, mut idx) = (0, 0);
        while idx < self.streams.len() {
            let s = &mut self.streams[idx];
            let received = s.received;
            let slow = match Session::body_clock(s, now, t.body_grace) {
                Some(BodyClock::Rate(r)) => r.deadline() <= now && r.check(now, received, t.min_rate) == Rate::TooSlow,
                Some(BodyClock::Quiet { since, .. }) => *since + t.body_grace <= now,
                None => false,
            };
            if !slow {
                idx += 1;
                continue;
            }
            n += 1;
            s.clock = None;
            if let Some(sink) = s.upload.take() {
                sink.fail(std::io::ErrorKind::TimedOut, "request body not received in time");
            }
            if matches!(s.send, Sending::Waiting | Sending::Deferred(_)) {
                s.refused = Some((408, "request body not received in time"));
                s.send = Sending::Waiting;
                s.await_data = false;
                self.bodies.held -= s.body.len();
                s.body = Vec::new();
                if !s.ready {
                    s.ready = true;
                    self.n_ready += 1;
                }
                idx += 1;
            } else {
                let id = s.id;
                self.write_rst(out, id, Code::Cancel);
                self.remove(idx);
            }
        }
        n
    }
}
