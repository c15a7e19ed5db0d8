//! An HTTP/2 connection's deadlines, owned by the session as quinn-proto's
//! `Connection` owns its own (`poll_timeout` out, `handle_timeout` in):
//! the driver only arms a timer and says when it fired. Each timeout ends
//! the connection with GOAWAY:
//! - with no stream open, `idle` since the last request frame (HEADERS,
//!   CONTINUATION, DATA) or stream: PING, SETTINGS, WINDOW_UPDATE and
//!   PRIORITY never restart it, else a client could hold a connection for
//!   hours within its control-frame budget;
//! - a header block (or any frame but DATA) begun must be complete within
//!   `head`;
//! - while a request's body is arriving, the minimum rate of `body_grace`
//!   and `min_rate` over the request frames (`min_rate.rs`);
//! - while responses wait only for the client's window, `send` since the
//!   last DATA byte left.
//!
//! Deferred answers have no timeout, as on HTTP/1.1, nor do a body whose
//! producer has nothing yet (`body::channel`) and an upload whose reader
//! is behind (`body::streamed`).

use std::time::{Duration, Instant};

use super::frame::{self, Code};
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
    /// The minimum rate of request frames while some stream is receiving.
    rate: Option<MinRate>,
    /// When the connection last had a stream open or received a request
    /// frame, and the count of those bytes then (`None` before the first
    /// `poll_timeout`: the connection's start).
    active_since: Option<Instant>,
    active_mark: u64,
    /// Since when a header block (or a frame other than DATA) has been
    /// begun and not finished.
    block_since: Option<Instant>,
}

/// Why `handle_timeout` ended the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expired {
    /// No stream, and no request frame within the idle timeout.
    Idle,
    /// A request (its header block, or its body) too slow: this says which.
    SlowRequest(&'static str),
    /// The client kept its window closed past the send timeout.
    WindowClosed,
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
        let receiving = self.is_receiving();
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
        if receiving {
            c.rate
                .get_or_insert_with(|| MinRate::start(now, progress, t.body_grace));
        } else {
            c.rate = None;
        }
        let deadlines = [
            c.active_since.filter(|_| idle).map(|since| since + t.idle),
            c.block_since.map(|since| since + t.head),
            c.rate.map(|r| r.deadline()),
            c.blocked_since.map(|since| since + t.send),
        ];
        deadlines.into_iter().flatten().min()
    }

    /// The deadline `poll_timeout` gave has passed: if one of the timeouts
    /// has, ends the connection (GOAWAY into `out`) and says which; else
    /// (a body keeping its rate) `None`, and `poll_timeout` gives the next.
    pub(crate) fn handle_timeout(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<Expired> {
        let t = self.timeouts;
        let progress = self.request_bytes;
        let idle = self.is_idle();
        let c = &mut self.clock;
        let expired = if c.block_since.is_some_and(|since| since + t.head <= now) {
            Expired::SlowRequest("request header block not received in time")
        } else if c.rate.is_some_and(|r| r.deadline() <= now) {
            match c.rate.as_mut().map(|r| r.check(now, progress, t.min_rate)) {
                Some(Rate::TooSlow) => Expired::SlowRequest("request not received in time"),
                _ => return None,
            }
        } else if idle && c.active_since.is_some_and(|since| since + t.idle <= now) {
            Expired::Idle
        } else if c.blocked_since.is_some_and(|since| since + t.send <= now) {
            Expired::WindowClosed
        } else {
            return None;
        };
        let why = match expired {
            Expired::Idle => "idle timeout",
            Expired::SlowRequest(why) => why,
            Expired::WindowClosed => "client did not open its flow-control window in time",
        };
        self.fail(out, Code::NoError, why);
        Some(expired)
    }
}
