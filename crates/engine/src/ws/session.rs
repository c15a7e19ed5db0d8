//! One WebSocket's state machine (RFC 6455), sans-I/O like `h1::H1` and
//! `h2::Session`: client bytes in, whole messages out as events, frames
//! (pongs, pings, closes, the application's messages) queued into a byte
//! buffer, and the deadlines it wants. HTTP/1.1's upgrade and HTTP/2's
//! extended CONNECT (RFC 8441) feed the same machine; it knows nothing of
//! sockets or streams.
//!
//! A message that arrives whole in the input (one unfragmented frame, the
//! common case) is unmasked in place and handed out as a slice of the
//! input: no copy, no allocation. Fragments, and a frame that arrives in
//! pieces, are unmasked and appended to one buffer kept by the machine
//! (within the maximum message size), so a warm connection allocates
//! nothing per message either. Text is checked as UTF-8 as it arrives, so
//! an invalid byte fails the connection (1007) before the rest of its
//! message comes (Autobahn 6.4).
//!
//! With permessage-deflate agreed (RFC 7692), a message whose first frame
//! has RSV1 set is compressed: whole in the input, it is inflated from
//! there into the message buffer; in pieces, its compressed bytes are
//! kept in the message buffer until the last frame, then inflated at once
//! into a new one
//! (`ws/deflate.rs`: the worker's one stream, which holds no client's
//! half message). Either way the inflated size is held to the maximum
//! message size (1009 past it: a deflate bomb stops there), and text is
//! checked as UTF-8 once inflated.

use std::time::{Duration, Instant};

use super::deflate::{self, InflateError};
use super::frame::{self, Op, Parsed};

/// What a WebSocket may do, from `ws::Options` and the server's limits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Config {
    /// The largest message, in bytes (1009 past it).
    pub(crate) message_bytes_max: usize,
    /// The most frames one message may come in (1009 past it).
    pub(crate) fragments_max: u32,
    /// A ping after this long without a byte from the peer, and the
    /// connection dropped after two unanswered; `None`: never.
    pub(crate) ping_interval: Option<Duration>,
    /// How long a message may take between its first and last frames.
    pub(crate) message_timeout: Duration,
    /// permessage-deflate's terms, if agreed: RSV1 marks a compressed
    /// message, and what the application sends is compressed.
    pub(crate) deflate: Option<deflate::Params>,
}

/// How long we wait for the peer's Close after sending ours.
pub(crate) const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The most control frames (pings, pongs) a client may send per second
/// (1008 past it). Each costs a pong at most, which waits in the output
/// like any answer (the socket is not read while that is full), so the
/// budget bounds the CPU a flood takes, not memory.
pub(crate) const CONTROL_PER_SEC: u32 = 1000;

/// A data message's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Text,
    Binary,
}

impl Kind {
    pub(crate) fn op(self) -> Op {
        match self {
            Kind::Text => Op::Text,
            Kind::Binary => Op::Binary,
        }
    }
}

/// The message being assembled: its kind, and whether it came compressed
/// (its first frame had RSV1). One byte: the WebSocket fits in the room
/// HTTP/1.1's machine leaves (`conn/mod.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Assembling {
    Text,
    Binary,
    DeflatedText,
    DeflatedBinary,
}

impl Assembling {
    fn new(kind: Kind, compressed: bool) -> Self {
        match (kind, compressed) {
            (Kind::Text, false) => Assembling::Text,
            (Kind::Binary, false) => Assembling::Binary,
            (Kind::Text, true) => Assembling::DeflatedText,
            (Kind::Binary, true) => Assembling::DeflatedBinary,
        }
    }

    fn kind(self) -> Kind {
        match self {
            Assembling::Text | Assembling::DeflatedText => Kind::Text,
            Assembling::Binary | Assembling::DeflatedBinary => Kind::Binary,
        }
    }

    fn is_compressed(self) -> bool {
        matches!(self, Assembling::DeflatedText | Assembling::DeflatedBinary)
    }
}

/// What `poll` found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Event<'a> {
    /// A whole message (text is valid UTF-8).
    Message(Kind, &'a [u8]),
    /// More bytes are needed.
    Input,
    /// The WebSocket ended: the peer's Close (its code, 1005 if it gave
    /// none), or ours after a protocol error or a timeout. Said once; what
    /// is queued is the last to send, then the connection closes.
    Closed { code: u16, reason: &'a str },
    /// Ended, and already said so.
    Done,
}

/// What a passed deadline did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TimedOut {
    /// A ping is queued, or the deadline was not yet due.
    Keep,
    /// The WebSocket ended (said once): close once the output is sent.
    Closed { code: u16, reason: &'static str },
    /// Our Close went unanswered: close the connection now.
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Open,
    /// We sent a Close; the peer's must come by this time.
    CloseSent(Instant),
    /// Both Closes, or a failure: nothing more is read or sent.
    Closed,
}

/// A data frame whose payload is being read.
#[derive(Clone, Copy)]
struct InFrame {
    fin: bool,
    mask: [u8; 4],
    remaining: u64,
    offset: u64,
}

pub(crate) struct Session {
    config: Config,
    state: State,
    /// The message being assembled, and what was handed out last.
    msg: Vec<u8>,
    msg_kind: Option<Assembling>,
    fragments: u32,
    /// When the message being assembled must be whole.
    msg_deadline: Option<Instant>,
    utf8: Utf8,
    frame: Option<InFrame>,
    /// `msg` was handed out: cleared at the next `poll`.
    delivered: bool,
    /// When to ping, and how many pings are unanswered.
    ping_at: Option<Instant>,
    pings_out: u8,
    /// Control frames in the current second, and when it began.
    control_count: u32,
    control_since: Instant,
    /// The most `msg` may hold: what the worker's budget for buffered
    /// bodies and messages leaves this WebSocket (`set_room`).
    room: usize,
}

/// The largest message buffer kept between messages: one larger is
/// given back after its message.
const KEPT_BYTES_MAX: usize = 64 * 1024;

impl Session {
    pub(crate) fn new(config: Config, now: Instant) -> Self {
        Session {
            config,
            state: State::Open,
            msg: Vec::new(),
            msg_kind: None,
            fragments: 0,
            msg_deadline: None,
            utf8: Utf8::default(),
            frame: None,
            delivered: false,
            ping_at: config.ping_interval.and_then(|i| now.checked_add(i)),
            pings_out: 0,
            control_count: 0,
            control_since: now,
            room: usize::MAX,
        }
    }

    /// How much the message buffer may hold: a message that needs more is
    /// refused with 1013 (try again later).
    pub(crate) fn set_room(&mut self, room: usize) {
        self.room = room;
    }

    /// The WebSocket is gone: its buffer goes back, whatever it held.
    pub(crate) fn free(&mut self) {
        self.msg = Vec::new();
        self.frame = None;
        self.end_message();
    }

    /// The bytes the machine holds (its message buffers).
    pub(crate) fn held(&self) -> usize {
        self.msg.capacity()
    }

    /// permessage-deflate's terms, if agreed.
    pub(crate) fn deflate(&self) -> Option<deflate::Params> {
        self.config.deflate
    }

    /// Messages may still be sent (no Close sent or received).
    pub(crate) fn is_open(&self) -> bool {
        self.state == State::Open
    }

    /// Nothing more will be read or sent.
    pub(crate) fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// No message is half received: the machine holds no buffer.
    pub(crate) fn is_between_messages(&self) -> bool {
        self.frame.is_none() && self.msg_kind.is_none()
    }

    /// Gives back the message buffer (an idle connection holds none).
    pub(crate) fn release(&mut self) {
        if self.is_between_messages() {
            let msg = std::mem::take(&mut self.msg);
            if self.config.deflate.is_some() {
                deflate::give_back(msg);
            }
            self.delivered = false;
        }
    }

    /// Reads what `input` holds; returns how many bytes were used and the
    /// event. Pongs for pings go into `out`. Call again after `Message`
    /// with the input that is left.
    pub(crate) fn poll<'a>(&'a mut self, input: &'a mut [u8], out: &mut Vec<u8>, now: Instant) -> (usize, Event<'a>) {
        if self.delivered {
            self.delivered = false;
            self.msg.clear();
            if self.msg.capacity() > KEPT_BYTES_MAX {
                self.msg = Vec::new();
            }
        }
        let mut used = 0;
        loop {
            if self.state == State::Closed {
                return (used, Event::Done);
            }
            if let Some(f) = &mut self.frame {
                let n = f.remaining.min((input.len() - used) as u64) as usize;
                if n == 0 && f.remaining > 0 {
                    return (used, Event::Input);
                }
                let chunk = &mut input[used..used + n];
                frame::unmask(chunk, f.mask, f.offset);
                f.offset += n as u64;
                f.remaining -= n as u64;
                used += n;
                let (fin, done) = (f.fin, f.remaining == 0);
                if done {
                    self.frame = None;
                }
                if self.state != State::Open {
                    // After our Close, data is read and dropped.
                    if done && fin {
                        self.end_message();
                    }
                    continue;
                }
                if self.msg_kind.is_some_and(Assembling::is_compressed) {
                    self.msg.extend_from_slice(chunk);
                    if done && fin {
                        let kind = self.msg_kind.map_or(Kind::Binary, Assembling::kind);
                        self.end_message();
                        // The compressed bytes are inflated into a buffer
                        // of their own, which becomes the message's.
                        let raw = std::mem::take(&mut self.msg);
                        let inflated = self.inflate(kind, &raw, raw.capacity());
                        drop(raw);
                        if let Err((code, why)) = inflated {
                            return self.fail(out, now, used, code, why);
                        }
                        self.delivered = true;
                        return (used, Event::Message(kind, &self.msg));
                    }
                    continue;
                }
                if self.msg_kind.map(Assembling::kind) == Some(Kind::Text) && !self.utf8.feed(chunk) {
                    return self.fail(out, now, used, 1007, "invalid UTF-8 in a text message");
                }
                self.msg.extend_from_slice(chunk);
                if done && fin {
                    if self.msg_kind.map(Assembling::kind) == Some(Kind::Text) && !self.utf8.is_whole() {
                        return self.fail(out, now, used, 1007, "invalid UTF-8 in a text message");
                    }
                    let kind = self.msg_kind.map_or(Kind::Binary, Assembling::kind);
                    self.end_message();
                    self.delivered = true;
                    return (used, Event::Message(kind, &self.msg));
                }
                continue;
            }
            let head = match frame::parse(&input[used..], self.config.deflate.is_some()) {
                Parsed::Partial => return (used, Event::Input),
                Parsed::Bad(why) => return self.fail(out, now, used, 1002, why),
                Parsed::Head(head) => head,
            };
            let len = head.len as usize;
            if head.op.is_control() {
                if input.len() - used < head.size + len {
                    return (used, Event::Input);
                }
                self.heard(now);
                if now.duration_since(self.control_since) >= Duration::from_secs(1) {
                    self.control_since = now;
                    self.control_count = 0;
                }
                self.control_count += 1;
                if self.control_count > CONTROL_PER_SEC {
                    return self.fail(out, now, used, 1008, "too many control frames");
                }
                let start = used + head.size;
                used = start + len;
                frame::unmask(&mut input[start..used], head.mask, 0);
                match head.op {
                    Op::Ping => {
                        if self.state == State::Open {
                            frame::write(out, Op::Pong, &input[start..used]);
                        }
                    }
                    Op::Pong => self.pings_out = 0,
                    _ => {
                        let payload: &'a [u8] = &input[start..used];
                        return self.close_received(out, now, used, payload);
                    }
                }
                continue;
            }
            self.heard(now);
            let kind = match (head.op, self.msg_kind.map(Assembling::kind)) {
                (Op::Continuation, None) => {
                    return self.fail(out, now, used, 1002, "a continuation frame outside a message")
                }
                (Op::Continuation, Some(kind)) => kind,
                (_, Some(_)) => return self.fail(out, now, used, 1002, "a new message before the last one ended"),
                (op, None) => {
                    if op == Op::Text {
                        Kind::Text
                    } else {
                        Kind::Binary
                    }
                }
            };
            if head.rsv1 && head.op == Op::Continuation {
                // RFC 7692 §6.1: only a message's first frame says it.
                return self.fail(out, now, used, 1002, "RSV1 set on a continuation frame");
            }
            let compressed = match self.msg_kind {
                None => head.rsv1,
                Some(a) => a.is_compressed(),
            };
            // A compressed message's bound is on what it inflates to; its
            // compressed bytes may pass that by deflate's few bytes per
            // stored block, not more.
            let (total, max) = if compressed {
                (
                    self.msg.len() as u64 + head.len,
                    compressed_bytes_max(self.config.message_bytes_max),
                )
            } else {
                (self.msg.len() as u64 + head.len, self.config.message_bytes_max as u64)
            };
            if total > max {
                return self.fail(out, now, used, 1009, "the message is larger than this server takes");
            }
            if self.msg_kind.is_none() {
                if head.fin && self.state == State::Open && input.len() - used >= head.size + len {
                    // The whole message is here: hand it out in place.
                    let start = used + head.size;
                    used = start + len;
                    frame::unmask(&mut input[start..used], head.mask, 0);
                    if compressed {
                        // Inflated into the message buffer.
                        if let Err((code, why)) = self.inflate(kind, &input[start..used], 0) {
                            return self.fail(out, now, used, code, why);
                        }
                        self.delivered = true;
                        return (used, Event::Message(kind, &self.msg));
                    }
                    if kind == Kind::Text && std::str::from_utf8(&input[start..used]).is_err() {
                        return self.fail(out, now, used, 1007, "invalid UTF-8 in a text message");
                    }
                    return (used, Event::Message(kind, &input[start..used]));
                }
                self.msg_kind = Some(Assembling::new(kind, compressed));
                self.fragments = 0;
                self.utf8 = Utf8::default();
                self.msg_deadline = now.checked_add(self.config.message_timeout);
            }
            self.fragments += 1;
            if self.fragments > self.config.fragments_max {
                return self.fail(
                    out,
                    now,
                    used,
                    1009,
                    "a message in more fragments than this server takes",
                );
            }
            if self.state == State::Open {
                if total > self.room as u64 {
                    return self.fail(out, now, used, 1013, crate::budget::MESSAGES_SPENT);
                }
                self.msg.reserve(len.min(KEPT_BYTES_MAX));
            }
            used += head.size;
            self.frame = Some(InFrame {
                fin: head.fin,
                mask: head.mask,
                remaining: head.len,
                offset: 0,
            });
        }
    }

    /// The peer's Close, with its payload (unmasked): ours answers it
    /// (the same code, RFC 6455 §5.5.1) unless ours was sent first.
    fn close_received<'a>(
        &mut self,
        out: &mut Vec<u8>,
        now: Instant,
        used: usize,
        payload: &'a [u8],
    ) -> (usize, Event<'a>) {
        let (code, reason) = match payload {
            [] => (1005, ""),
            [_] => return self.fail(out, now, used, 1002, "a close frame with a one-byte body"),
            [hi, lo, reason @ ..] => {
                let code = u16::from_be_bytes([*hi, *lo]);
                if !is_valid_close_code(code) {
                    return self.fail(out, now, used, 1002, "an invalid close code");
                }
                match std::str::from_utf8(reason) {
                    Ok(reason) => (code, reason),
                    Err(_) => return self.fail(out, now, used, 1007, "invalid UTF-8 in a close reason"),
                }
            }
        };
        if self.state == State::Open {
            if code == 1005 {
                frame::write(out, Op::Close, b"");
            } else {
                frame::write(out, Op::Close, &code.to_be_bytes());
            }
        }
        self.state = State::Closed;
        self.frame = None;
        self.end_message();
        (used, Event::Closed { code, reason })
    }

    /// Inflates a whole compressed message (`kind` text: checked as
    /// UTF-8) into the message buffer, within the maximum message size
    /// (1009 past it) and what the worker's budget leaves besides the
    /// `holding` bytes the compressed message is in (1013).
    fn inflate(&mut self, kind: Kind, compressed: &[u8], holding: usize) -> Result<(), (u16, &'static str)> {
        let room = self.room.saturating_sub(holding);
        if self.msg.capacity() == 0 {
            self.msg = deflate::take_buffer();
        }
        let limit = self.config.message_bytes_max.min(room);
        match deflate::inflate(compressed, &mut self.msg, limit) {
            Ok(()) => {}
            Err(InflateError::TooLarge) if limit < self.config.message_bytes_max => {
                return Err((1013, crate::budget::MESSAGES_SPENT))
            }
            Err(InflateError::TooLarge) => return Err((1009, "the message inflates past what this server takes")),
            Err(InflateError::Invalid) => return Err((1002, "a compressed message that does not inflate")),
        }
        if kind == Kind::Text && std::str::from_utf8(&self.msg).is_err() {
            return Err((1007, "invalid UTF-8 in a text message"));
        }
        Ok(())
    }

    /// Ends the message being assembled (delivered or dropped).
    fn end_message(&mut self) {
        self.msg_kind = None;
        self.msg_deadline = None;
        self.fragments = 0;
    }

    /// A byte came from the peer: it is alive.
    fn heard(&mut self, now: Instant) {
        self.pings_out = 0;
        self.ping_at = self.config.ping_interval.and_then(|i| now.checked_add(i));
    }

    /// A protocol error: our Close with `code` is queued (unless one was
    /// sent), and the WebSocket is over.
    fn fail<'a>(
        &mut self,
        out: &mut Vec<u8>,
        _now: Instant,
        used: usize,
        code: u16,
        why: &'static str,
    ) -> (usize, Event<'a>) {
        if self.state == State::Open {
            write_close(out, code, why);
        }
        self.state = State::Closed;
        self.frame = None;
        self.end_message();
        (used, Event::Closed { code, reason: why })
    }

    /// Queues our Close; the peer's must come within the close timeout.
    /// False if one was already sent or received.
    pub(crate) fn close(&mut self, out: &mut Vec<u8>, code: u16, reason: &str, now: Instant) -> bool {
        if self.state != State::Open {
            return false;
        }
        write_close(out, code, reason);
        self.state = State::CloseSent(now.checked_add(CLOSE_TIMEOUT).unwrap_or(now));
        true
    }

    /// Queues a Close frame made elsewhere (`ws::Sender::close`), as
    /// `close` does.
    pub(crate) fn close_queued(&mut self, out: &mut Vec<u8>, frame: &[u8], now: Instant) {
        if self.state == State::Open {
            out.extend_from_slice(frame);
            self.state = State::CloseSent(now.checked_add(CLOSE_TIMEOUT).unwrap_or(now));
        }
    }

    /// The next deadline: a ping, a message's end, or the peer's Close.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Closed => None,
            State::CloseSent(by) => Some(by),
            State::Open => match (self.ping_at, self.msg_deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }

    /// A deadline may have passed.
    pub(crate) fn handle_timeout(&mut self, out: &mut Vec<u8>, now: Instant) -> TimedOut {
        match self.state {
            State::Closed => return TimedOut::Done,
            State::CloseSent(by) if now >= by => {
                self.state = State::Closed;
                return TimedOut::Done;
            }
            State::CloseSent(_) => return TimedOut::Keep,
            State::Open => {}
        }
        if self.msg_deadline.is_some_and(|d| now >= d) {
            let why = "a message not completed in time";
            let _ = self.fail(out, now, 0, 1008, why);
            return TimedOut::Closed {
                code: 1008,
                reason: why,
            };
        }
        if let (Some(at), Some(interval)) = (self.ping_at, self.config.ping_interval) {
            if now >= at {
                if self.pings_out >= 2 {
                    let why = "keepalive ping timeout";
                    let _ = self.fail(out, now, 0, 1011, why);
                    return TimedOut::Closed {
                        code: 1011,
                        reason: why,
                    };
                }
                frame::write(out, Op::Ping, b"");
                self.pings_out += 1;
                self.ping_at = now.checked_add(interval);
            }
        }
        TimedOut::Keep
    }
}

/// The most compressed bytes a message of at most `max` inflated bytes
/// may come in: deflate's stored blocks add 5 bytes per 64 KiB, and a
/// message at the limit that does not compress may still come compressed.
fn compressed_bytes_max(max: usize) -> u64 {
    max as u64 + max as u64 / 1024 + 1024
}

/// A Close frame with `code` and `reason` (cut to fit 125 bytes).
pub(crate) fn write_close(out: &mut Vec<u8>, code: u16, reason: &str) {
    let mut cut = reason.len().min(123);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut payload = [0u8; 125];
    payload[..2].copy_from_slice(&code.to_be_bytes());
    payload[2..2 + cut].copy_from_slice(&reason.as_bytes()[..cut]);
    frame::write(out, Op::Close, &payload[..2 + cut]);
}

/// A close code a peer may send (RFC 6455 §7.4; 1012-1014 registered by
/// IANA since; 3000-4999 for libraries and applications).
pub(crate) fn is_valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// UTF-8 checked as it arrives: the bytes of a sequence cut between two
/// chunks are carried to the next.
#[derive(Default, Clone, Copy)]
struct Utf8 {
    carry: [u8; 4],
    n: u8,
}

impl Utf8 {
    /// False at the first byte that cannot be UTF-8, whatever follows.
    fn feed(&mut self, mut bytes: &[u8]) -> bool {
        if self.n > 0 {
            let n = usize::from(self.n);
            let width = utf8_width(self.carry[0]);
            let need = (width - n).min(bytes.len());
            self.carry[n..n + need].copy_from_slice(&bytes[..need]);
            let have = n + need;
            match std::str::from_utf8(&self.carry[..have]) {
                Ok(_) => {}
                Err(e) if e.error_len().is_none() => {
                    self.n = have as u8;
                    return true;
                }
                Err(_) => return false,
            }
            self.n = 0;
            bytes = &bytes[need..];
        }
        match std::str::from_utf8(bytes) {
            Ok(_) => true,
            Err(e) if e.error_len().is_none() => {
                let rest = &bytes[e.valid_up_to()..];
                self.carry[..rest.len()].copy_from_slice(rest);
                self.n = rest.len() as u8;
                true
            }
            Err(_) => false,
        }
    }

    /// No sequence is left open.
    fn is_whole(&self) -> bool {
        self.n == 0
    }
}

/// How many bytes the sequence a lead byte begins takes (1 for a byte no
/// sequence begins with: `from_utf8` refuses it).
fn utf8_width(lead: u8) -> usize {
    match lead {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 1,
    }
}

#[cfg(test)]
mod tests;
