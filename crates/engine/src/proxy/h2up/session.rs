//! The client role of HTTP/2 (RFC 9113) for the proxy's `h2c://`
//! upstreams, as a state machine that does no I/O: the upstream's bytes go
//! in (`Session::recv`), what they meant comes out as `Event`s, and the
//! frames to write (our requests, their bodies, window updates, PING and
//! SETTINGS acknowledgments) are appended to `Session::out`, which the
//! driver (`mod.rs`) writes to the socket. It reuses the server side's
//! frame layout and HPACK (`h2/frame.rs`, `h2/hpack.rs`).
//!
//! Strictness, as for an HTTP/1.1 upstream: whatever breaks the framing
//! or the header compression (a frame too long, on the wrong stream, a
//! window overflow, a bad HPACK block, a PUSH_PROMISE we refused by
//! SETTINGS_ENABLE_PUSH 0, a header block larger than
//! `HEAD_BLOCK_BYTES_MAX`) is a connection error: `recv` says so and the
//! driver answers every stream 502 (or resets those already answered)
//! and closes. A malformed response (RFC 9113 §8.1.1: a missing or second
//! `:status`, a pseudo-field in trailers, an uppercase or
//! connection-specific field, DATA beyond its `content-length`) is a
//! stream error: RST_STREAM(PROTOCOL_ERROR) and `Event::Malformed`.
//!
//! Flow control both ways: what we may send is bounded by the upstream's
//! windows (`Session::window`); what it may send by ours, given back per
//! stream only as the driver hands the bytes on (`Session::consumed`), so
//! a slow client holds the upstream to `STREAM_WINDOW` bytes beyond its
//! channel, and per connection as soon as a DATA frame is read.

use std::collections::HashMap;

use crate::h2::frame::{self, Code, Header};
use crate::h2::hpack;
use crate::message::coding::write_integer;
use crate::message::fields::{Field, Sink};

/// The window each stream starts with for the upstream's answer (our
/// SETTINGS_INITIAL_WINDOW_SIZE): what an upstream may send ahead of a
/// stream whose client is slow, beyond the client's channel.
pub(crate) const STREAM_WINDOW: i64 = 256 * 1024;
/// The connection's window for answers: room for several streams at full
/// speed at once; every stream is bounded by its own window anyway.
pub(crate) const CONN_WINDOW: i64 = 4 * 1024 * 1024;
/// A response's header block (HEADERS and its CONTINUATIONs, compressed)
/// and its decoded field list are at most this long (the HTTP/1.1 client
/// role's `RESPONSE_HEAD_BYTES_MAX`); told to the upstream as
/// SETTINGS_MAX_HEADER_LIST_SIZE.
pub(crate) const HEAD_BLOCK_BYTES_MAX: usize = crate::codec::client::RESPONSE_HEAD_BYTES_MAX;
/// Streams open at once on one connection at most, whatever the
/// upstream's SETTINGS_MAX_CONCURRENT_STREAMS allows.
pub(crate) const STREAMS_MAX: u32 = 100;
/// Our frames are at most this long (SETTINGS_MAX_FRAME_SIZE: the default).
const FRAME_MAX: usize = frame::DEFAULT_FRAME_BYTES;
/// Bytes of frames waiting for the socket past which a flood of PINGs
/// or SETTINGS (whose acknowledgments we owe) ends the connection.
const OUT_BYTES_MAX: usize = 1024 * 1024;
/// Interim (1xx) heads one stream may have before its final one.
const INTERIMS_MAX: u8 = 8;

/// Fields a response never relays (RFC 9113 §8.2.2 forbids the
/// connection-specific ones outright: `check_fields` refuses them), and
/// those the engine writes itself.
const DROPPED: &[&[u8]] = &[b"content-length", b"date", b"server", b"trailer"];
/// Connection-specific fields: a message carrying one is malformed.
const CONNECTION_SPECIFIC: &[&[u8]] = &[
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"upgrade",
];

/// What the upstream's bytes meant, stream by stream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A 1xx head: its status and fields as `name: value\r\n` lines.
    Interim { stream: u32, status: u16, lines: Vec<u8> },
    /// The final head; `end`: no body follows (END_STREAM on it: a gRPC
    /// "trailers-only" answer carries its `grpc-status` here).
    Head {
        stream: u32,
        status: u16,
        lines: Vec<u8>,
        content_length: Option<u64>,
        end: bool,
    },
    /// Body bytes (padding removed); `end`: the last.
    Data { stream: u32, data: Vec<u8>, end: bool },
    /// The trailer section (the body's end), as lines.
    Trailers { stream: u32, lines: Vec<u8> },
    /// The upstream reset the stream.
    Reset { stream: u32, code: u32 },
    /// The answer was malformed: the stream was reset.
    Malformed { stream: u32, why: &'static str },
    /// The upstream goes away: streams above `last` were never processed.
    GoAway { last: u32, code: u32 },
}

/// Why the connection cannot go on (GOAWAY was written with `code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConnError {
    pub(crate) code: Code,
    pub(crate) why: &'static str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No final head yet (interims may come).
    Head,
    /// The final head came; DATA, then maybe trailers.
    Body,
}

struct Stream {
    phase: Phase,
    n_interims: u8,
    /// What we may still send on it.
    send_window: i64,
    /// What the upstream may still send on it, and what the driver has
    /// handed on since the last WINDOW_UPDATE.
    recv_window: i64,
    unacked: i64,
    /// END_STREAM sent (our request is whole).
    local_done: bool,
    content_length: Option<u64>,
    received: u64,
}

/// A header block being received (HEADERS without END_HEADERS, then
/// CONTINUATIONs).
#[derive(Clone, Copy)]
struct Continuation {
    stream: u32,
    end_stream: bool,
}

/// One upstream connection's protocol state.
pub(crate) struct Session {
    /// Frames to write, in order.
    pub(crate) out: Vec<u8>,
    /// The upstream's first frame (its SETTINGS) has come.
    settings_seen: bool,
    peer_streams_max: u32,
    peer_initial_window: i64,
    peer_frame_max: usize,
    send_window: i64,
    /// What the upstream may still send on the connection, and what it
    /// sent since our last WINDOW_UPDATE for it.
    recv_window: i64,
    conn_unacked: i64,
    next_id: u32,
    streams: HashMap<u32, Stream>,
    continuation: Option<Continuation>,
    block: Vec<u8>,
    decoder: hpack::Decoder,
    encoder: hpack::Encoder,
    /// Decoded fields of the last block (reused).
    bytes: Vec<u8>,
    fields: Vec<Field>,
    /// The upstream's GOAWAY: the last stream it processes.
    goaway: Option<u32>,
    /// A connection error was met: nothing more is read.
    failed: bool,
}

impl Session {
    /// A session whose preface, SETTINGS and connection window are in
    /// `out` already (a client may send them before the server's
    /// SETTINGS, RFC 9113 §3.4).
    pub(crate) fn new() -> Session {
        let mut out = Vec::with_capacity(128);
        out.extend_from_slice(frame::PREFACE);
        frame::write_settings(
            &mut out,
            &[
                (frame::SETTINGS_ENABLE_PUSH, 0),
                (frame::SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW as u32),
                (frame::SETTINGS_MAX_HEADER_LIST_SIZE, HEAD_BLOCK_BYTES_MAX as u32),
            ],
        );
        frame::write_window_update(&mut out, 0, (CONN_WINDOW - frame::DEFAULT_WINDOW) as u32);
        Session {
            out,
            settings_seen: false,
            // Until its SETTINGS say otherwise (§6.5.2: "initially, there
            // is no limit"); we open none before they come anyway.
            peer_streams_max: u32::MAX,
            peer_initial_window: frame::DEFAULT_WINDOW,
            peer_frame_max: frame::DEFAULT_FRAME_BYTES,
            send_window: frame::DEFAULT_WINDOW,
            recv_window: CONN_WINDOW,
            conn_unacked: 0,
            next_id: 1,
            streams: HashMap::new(),
            continuation: None,
            block: Vec::new(),
            decoder: hpack::Decoder::new(4096),
            encoder: hpack::Encoder::new(),
            bytes: Vec::new(),
            fields: Vec::new(),
            goaway: None,
            failed: false,
        }
    }

    /// Whether a new stream may be opened now: the upstream's SETTINGS
    /// came, it has not gone away, and both its limit and ours have room.
    pub(crate) fn can_open(&self) -> bool {
        self.settings_seen
            && !self.failed
            && self.goaway.is_none()
            && (self.streams.len() as u32) < self.peer_streams_max.min(STREAMS_MAX)
            && self.next_id < frame::STREAM_ID_MAX - 2
    }

    /// The upstream's SETTINGS came: it speaks HTTP/2.
    pub(crate) fn is_ready(&self) -> bool {
        self.settings_seen
    }

    /// Stream `id` is open (neither reset nor ended both ways).
    pub(crate) fn is_open(&self, id: u32) -> bool {
        self.streams.contains_key(&id)
    }

    /// The upstream said GOAWAY, or the connection failed: no new stream.
    pub(crate) fn is_closing(&self) -> bool {
        self.goaway.is_some() || self.failed
    }

    /// Opens a stream with a request head: the pseudo-fields, then
    /// `fields` (lowercased on the way; the caller left out the
    /// connection-specific ones), END_STREAM if `end` (no body). Its id.
    pub(crate) fn open<'f>(
        &mut self,
        method: &str,
        scheme: &str,
        authority: &str,
        path: &str,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
        end: bool,
    ) -> u32 {
        let id = self.next_id;
        self.next_id += 2;
        let mut block = std::mem::take(&mut self.block);
        block.clear();
        self.encoder.begin(&mut block);
        // Pseudo-fields by their static names (RFC 7541 Appendix A):
        // :authority 1, :method 2 (GET 2 and POST 3 whole), :path 4,
        // :scheme 6 (http 6, https 7 whole).
        match method {
            "GET" => block.push(0x80 | 2),
            "POST" => block.push(0x80 | 3),
            _ => pseudo(&mut block, 2, method.as_bytes()),
        }
        match scheme {
            "http" => block.push(0x80 | 6),
            _ => block.push(0x80 | 7),
        }
        pseudo(&mut block, 1, authority.as_bytes());
        pseudo(&mut block, 4, path.as_bytes());
        for (name, value) in fields {
            self.encoder.field(&mut block, name, value);
        }
        self.write_block(id, &block, end);
        self.block = block;
        self.streams.insert(
            id,
            Stream {
                phase: Phase::Head,
                n_interims: 0,
                send_window: self.peer_initial_window,
                recv_window: STREAM_WINDOW,
                unacked: 0,
                local_done: end,
                content_length: None,
                received: 0,
            },
        );
        id
    }

    /// A header block on `id`: HEADERS, then CONTINUATIONs past the
    /// upstream's frame size; END_STREAM if `end`.
    fn write_block(&mut self, id: u32, block: &[u8], end: bool) {
        let max = self.peer_frame_max;
        let mut chunks = block.chunks(max).peekable();
        let first = chunks.next().unwrap_or(&[]);
        let mut flags = if end { frame::END_STREAM } else { 0 };
        if chunks.peek().is_none() {
            flags |= frame::END_HEADERS;
        }
        frame::write_header(&mut self.out, first.len(), frame::HEADERS, flags, id);
        self.out.extend_from_slice(first);
        while let Some(c) = chunks.next() {
            let flags = if chunks.peek().is_none() { frame::END_HEADERS } else { 0 };
            frame::write_header(&mut self.out, c.len(), frame::CONTINUATION, flags, id);
            self.out.extend_from_slice(c);
        }
    }

    /// Ends `id`'s request with a trailer section: `fields` (lowercase,
    /// no pseudo-field: RFC 9113 §8.1 "Trailers MUST NOT include
    /// pseudo-header fields") in a HEADERS frame with END_STREAM. Not
    /// flow-controlled: it goes whatever the windows.
    pub(crate) fn send_trailers<'f>(&mut self, id: u32, fields: impl Iterator<Item = (&'f [u8], &'f [u8])>) {
        let Some(s) = self.streams.get_mut(&id) else { return };
        if s.local_done {
            return;
        }
        s.local_done = true;
        let mut block = std::mem::take(&mut self.block);
        block.clear();
        self.encoder.begin(&mut block);
        for (name, value) in fields {
            self.encoder.field(&mut block, name, value);
        }
        self.write_block(id, &block, true);
        self.block = block;
    }

    /// Bytes of body that may be sent on `id` now (both windows and one
    /// frame).
    pub(crate) fn window(&self, id: u32) -> usize {
        match self.streams.get(&id) {
            Some(s) if !s.local_done => {
                let w = s.send_window.min(self.send_window).max(0) as usize;
                w.min(self.peer_frame_max)
            }
            _ => 0,
        }
    }

    /// Sends `data` (at most `window(id)` bytes, which the caller checked)
    /// on `id`, END_STREAM if `end`.
    pub(crate) fn send_data(&mut self, id: u32, data: &[u8], end: bool) {
        let Some(s) = self.streams.get_mut(&id) else { return };
        if s.local_done {
            return;
        }
        debug_assert!(data.len() <= (s.send_window.min(self.send_window).max(0) as usize).min(self.peer_frame_max));
        s.send_window -= data.len() as i64;
        self.send_window -= data.len() as i64;
        frame::write_header(
            &mut self.out,
            data.len(),
            frame::DATA,
            if end { frame::END_STREAM } else { 0 },
            id,
        );
        self.out.extend_from_slice(data);
        if end {
            s.local_done = true;
        }
    }

    /// The driver handed `n` bytes of `id`'s body on: the upstream may
    /// send that much more (a WINDOW_UPDATE once half the window is back).
    pub(crate) fn consumed(&mut self, id: u32, n: usize) {
        let Some(s) = self.streams.get_mut(&id) else { return };
        s.unacked += n as i64;
        if s.unacked >= STREAM_WINDOW / 2 {
            frame::write_window_update(&mut self.out, id, s.unacked as u32);
            s.recv_window += s.unacked;
            s.unacked = 0;
        }
    }

    /// Resets `id` (the client went away, or its body broke): frames
    /// the upstream sent on it meanwhile are ignored.
    pub(crate) fn reset(&mut self, id: u32, code: Code) {
        if self.streams.remove(&id).is_some() {
            frame::write_rst_stream(&mut self.out, id, code);
        }
    }

    /// Forgets `id` once both sides ended it (no frame is written).
    fn close_if_done(&mut self, id: u32) {
        if self.streams.get(&id).is_some_and(|s| s.local_done) {
            self.streams.remove(&id);
        }
    }

    /// Ends the connection politely: GOAWAY(NO_ERROR), no new stream.
    pub(crate) fn go_away(&mut self) {
        if !self.failed {
            frame::write_goaway(&mut self.out, 0, Code::NoError, "");
            self.failed = true;
        }
    }

    /// Reads the frames whole in `input`, appends what they meant to
    /// `events`; the bytes consumed (the rest is a frame not yet whole).
    /// A connection error ends the session (its GOAWAY is in `out`).
    pub(crate) fn recv(&mut self, input: &[u8], events: &mut Vec<Event>) -> Result<usize, ConnError> {
        if self.failed {
            return Ok(input.len());
        }
        let mut at = 0;
        while let Some(h) = Header::parse(&input[at..]) {
            if h.len > FRAME_MAX {
                return Err(self.fail(Code::FrameSize, "a frame longer than our SETTINGS_MAX_FRAME_SIZE"));
            }
            let end = at + frame::HEADER_LEN + h.len;
            if end > input.len() {
                break;
            }
            let payload = &input[at + frame::HEADER_LEN..end];
            at = end;
            if let Err(e) = self.frame(h, payload, events) {
                return Err(self.fail(e.code, e.why));
            }
            if self.out.len() > OUT_BYTES_MAX {
                return Err(self.fail(Code::EnhanceYourCalm, "frames we must answer pile up unread"));
            }
        }
        Ok(at)
    }

    fn fail(&mut self, code: Code, why: &'static str) -> ConnError {
        if !self.failed {
            frame::write_goaway(&mut self.out, self.next_id.saturating_sub(2), code, why);
            self.failed = true;
        }
        ConnError { code, why }
    }

    fn frame(&mut self, h: Header, p: &[u8], events: &mut Vec<Event>) -> Result<(), ConnError> {
        let err = |code, why| Err(ConnError { code, why });
        if !self.settings_seen && h.kind != frame::SETTINGS {
            // §3.4: the server's preface is a SETTINGS frame.
            return err(Code::Protocol, "the first frame was not SETTINGS");
        }
        if let Some(c) = self.continuation {
            if h.kind != frame::CONTINUATION || h.stream != c.stream {
                return err(Code::Protocol, "a header block interrupted");
            }
        }
        match h.kind {
            frame::DATA => self.data(h, p, events),
            frame::HEADERS => {
                let mut p = p;
                if h.stream == 0 {
                    return err(Code::Protocol, "HEADERS on stream 0");
                }
                if h.flags & frame::PADDED != 0 {
                    p = unpad(p).ok_or(ConnError {
                        code: Code::Protocol,
                        why: "padding longer than the frame",
                    })?;
                }
                if h.flags & frame::PRIORITY_FLAG != 0 {
                    p = p.get(5..).ok_or(ConnError {
                        code: Code::FrameSize,
                        why: "HEADERS too short for its priority",
                    })?;
                }
                self.block.clear();
                self.block.extend_from_slice(p);
                let c = Continuation {
                    stream: h.stream,
                    end_stream: h.flags & frame::END_STREAM != 0,
                };
                self.head_fragment(c, h.flags & frame::END_HEADERS != 0, events)
            }
            frame::CONTINUATION => {
                let Some(c) = self.continuation else {
                    return err(Code::Protocol, "CONTINUATION without HEADERS");
                };
                self.block.extend_from_slice(p);
                self.head_fragment(c, h.flags & frame::END_HEADERS != 0, events)
            }
            frame::PRIORITY => match (h.stream, p.len()) {
                (0, _) => err(Code::Protocol, "PRIORITY on stream 0"),
                (_, 5) => Ok(()),
                _ => err(Code::FrameSize, "PRIORITY not 5 bytes"),
            },
            frame::RST_STREAM => {
                if h.stream == 0 {
                    return err(Code::Protocol, "RST_STREAM on stream 0");
                }
                if p.len() != 4 {
                    return err(Code::FrameSize, "RST_STREAM not 4 bytes");
                }
                self.check_known(h.stream)?;
                if self.streams.remove(&h.stream).is_some() {
                    let code = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
                    events.push(Event::Reset { stream: h.stream, code });
                }
                Ok(())
            }
            frame::SETTINGS => self.settings(h, p),
            frame::PUSH_PROMISE => err(Code::Protocol, "PUSH_PROMISE, which our SETTINGS refused"),
            frame::PING => {
                if h.stream != 0 {
                    return err(Code::Protocol, "PING on a stream");
                }
                if p.len() != 8 {
                    return err(Code::FrameSize, "PING not 8 bytes");
                }
                if h.flags & frame::ACK == 0 {
                    frame::write_ping_ack(&mut self.out, p);
                }
                Ok(())
            }
            frame::GOAWAY => {
                if h.stream != 0 {
                    return err(Code::Protocol, "GOAWAY on a stream");
                }
                if p.len() < 8 {
                    return err(Code::FrameSize, "GOAWAY shorter than 8 bytes");
                }
                let last = u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff;
                let code = u32::from_be_bytes([p[4], p[5], p[6], p[7]]);
                // A second GOAWAY may only lower it (§6.8).
                let last = self.goaway.map_or(last, |l| l.min(last));
                self.goaway = Some(last);
                let above: Vec<u32> = self.streams.keys().copied().filter(|&id| id > last).collect();
                for id in above {
                    self.streams.remove(&id);
                }
                events.push(Event::GoAway { last, code });
                Ok(())
            }
            frame::WINDOW_UPDATE => {
                if p.len() != 4 {
                    return err(Code::FrameSize, "WINDOW_UPDATE not 4 bytes");
                }
                let inc = i64::from(u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff);
                if h.stream == 0 {
                    if inc == 0 {
                        return err(Code::Protocol, "a WINDOW_UPDATE of 0");
                    }
                    self.send_window += inc;
                    if self.send_window > frame::WINDOW_MAX {
                        return err(Code::FlowControl, "the connection's window past 2^31-1");
                    }
                    return Ok(());
                }
                self.check_known(h.stream)?;
                let Some(s) = self.streams.get_mut(&h.stream) else {
                    return Ok(());
                };
                if inc == 0 {
                    return self.malformed(h.stream, "a stream WINDOW_UPDATE of 0", events);
                }
                s.send_window += inc;
                if s.send_window > frame::WINDOW_MAX {
                    frame::write_rst_stream(&mut self.out, h.stream, Code::FlowControl);
                    self.streams.remove(&h.stream);
                    events.push(Event::Malformed {
                        stream: h.stream,
                        why: "a stream's window past 2^31-1",
                    });
                }
                Ok(())
            }
            // Unknown types are ignored (§5.5).
            _ => Ok(()),
        }
    }

    /// A stream id the upstream names must be one we opened (odd, below
    /// the next): it cannot open streams, and push is off.
    fn check_known(&self, id: u32) -> Result<(), ConnError> {
        if id % 2 == 0 || id >= self.next_id {
            return Err(ConnError {
                code: Code::Protocol,
                why: "a frame on a stream we never opened",
            });
        }
        Ok(())
    }

    fn settings(&mut self, h: Header, p: &[u8]) -> Result<(), ConnError> {
        let err = |code, why| Err(ConnError { code, why });
        if h.stream != 0 {
            return err(Code::Protocol, "SETTINGS on a stream");
        }
        if h.flags & frame::ACK != 0 {
            if !p.is_empty() {
                return err(Code::FrameSize, "a SETTINGS acknowledgment with a payload");
            }
            return Ok(());
        }
        if p.len() % 6 != 0 {
            return err(Code::FrameSize, "SETTINGS not a multiple of 6 bytes");
        }
        for s in p.chunks_exact(6) {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let v = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                frame::SETTINGS_HEADER_TABLE_SIZE => self.encoder.set_table_size(v),
                frame::SETTINGS_ENABLE_PUSH if v > 1 => return err(Code::Protocol, "ENABLE_PUSH above 1"),
                frame::SETTINGS_MAX_CONCURRENT_STREAMS => self.peer_streams_max = v,
                frame::SETTINGS_INITIAL_WINDOW_SIZE => {
                    if i64::from(v) > frame::WINDOW_MAX {
                        return err(Code::FlowControl, "INITIAL_WINDOW_SIZE past 2^31-1");
                    }
                    // §6.9.2: every stream's window moves by the change.
                    let delta = i64::from(v) - self.peer_initial_window;
                    self.peer_initial_window = i64::from(v);
                    for s in self.streams.values_mut() {
                        s.send_window += delta;
                        if s.send_window > frame::WINDOW_MAX {
                            return err(Code::FlowControl, "a stream's window past 2^31-1");
                        }
                    }
                }
                frame::SETTINGS_MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_FRAME_BYTES as u32..=(1 << 24) - 1).contains(&v) {
                        return err(Code::Protocol, "MAX_FRAME_SIZE out of range");
                    }
                    // Ours are at most FRAME_MAX whatever it allows.
                    self.peer_frame_max = (v as usize).min(FRAME_MAX);
                }
                _ => {}
            }
        }
        self.settings_seen = true;
        frame::write_settings_ack(&mut self.out);
        Ok(())
    }

    fn data(&mut self, h: Header, p: &[u8], events: &mut Vec<Event>) -> Result<(), ConnError> {
        if h.stream == 0 {
            return Err(ConnError {
                code: Code::Protocol,
                why: "DATA on stream 0",
            });
        }
        self.check_known(h.stream)?;
        // The whole payload, padding included, counts against the windows
        // (§6.9.1).
        let len = p.len() as i64;
        self.recv_window -= len;
        if self.recv_window < 0 {
            return Err(ConnError {
                code: Code::FlowControl,
                why: "DATA beyond the connection's window",
            });
        }
        // The connection's window comes back at once: each stream is
        // bounded by its own, given back as its bytes are handed on.
        self.conn_unacked += len;
        if self.conn_unacked >= CONN_WINDOW / 2 {
            frame::write_window_update(&mut self.out, 0, self.conn_unacked as u32);
            self.recv_window += self.conn_unacked;
            self.conn_unacked = 0;
        }
        let data = if h.flags & frame::PADDED != 0 {
            unpad(p).ok_or(ConnError {
                code: Code::Protocol,
                why: "padding longer than the frame",
            })?
        } else {
            p
        };
        let end = h.flags & frame::END_STREAM != 0;
        let Some(s) = self.streams.get_mut(&h.stream) else {
            // A stream we reset or that ended: ignored (§5.1).
            return Ok(());
        };
        if s.phase != Phase::Body {
            return self.malformed(h.stream, "DATA before the final head", events);
        }
        s.recv_window -= len;
        if s.recv_window < 0 {
            frame::write_rst_stream(&mut self.out, h.stream, Code::FlowControl);
            self.streams.remove(&h.stream);
            events.push(Event::Malformed {
                stream: h.stream,
                why: "DATA beyond the stream's window",
            });
            return Ok(());
        }
        // Padding is handed on as nothing: its window comes back now.
        let padding = p.len() - data.len();
        if padding > 0 {
            s.unacked += padding as i64;
        }
        s.received += data.len() as u64;
        let overlong = s.content_length.is_some_and(|n| s.received > n);
        let short = end && s.content_length.is_some_and(|n| s.received != n);
        if overlong || short {
            return self.malformed(h.stream, "DATA that disagrees with content-length", events);
        }
        events.push(Event::Data {
            stream: h.stream,
            data: data.to_vec(),
            end,
        });
        if end {
            // The upstream's side is done; ours too unless its body still
            // goes (an early answer: the driver stops sending it).
            let id = h.stream;
            if let Some(s) = self.streams.get_mut(&id) {
                s.phase = Phase::Body;
            }
            self.finish_remote(id);
        }
        Ok(())
    }

    /// The upstream ended stream `id`: an answer cannot get more, so our
    /// side ends too (RFC 9113 §8.1: a server may answer before the
    /// request's end; the client then stops with RST_STREAM(NO_ERROR) if
    /// it was still sending).
    fn finish_remote(&mut self, id: u32) {
        match self.streams.get(&id) {
            Some(s) if s.local_done => {
                self.close_if_done(id);
            }
            Some(_) => {
                self.streams.remove(&id);
                frame::write_rst_stream(&mut self.out, id, Code::NoError);
            }
            None => {}
        }
    }

    /// A header block fragment came; decoded when whole.
    fn head_fragment(&mut self, c: Continuation, end_headers: bool, events: &mut Vec<Event>) -> Result<(), ConnError> {
        if self.block.len() > HEAD_BLOCK_BYTES_MAX {
            return Err(ConnError {
                code: Code::EnhanceYourCalm,
                why: "a header block over its limit",
            });
        }
        if !end_headers {
            self.continuation = Some(c);
            return Ok(());
        }
        self.continuation = None;
        self.check_known(c.stream)?;
        // Decoded even for a stream we reset: the table must stay in step
        // with the upstream's (RFC 9113 §4.3).
        let block = std::mem::take(&mut self.block);
        self.bytes.clear();
        self.fields.clear();
        let mut sink = Sink::new(&mut self.bytes, &mut self.fields, HEAD_BLOCK_BYTES_MAX);
        let decoded = self.decoder.decode(&block, &mut sink);
        let oversized = sink.oversized;
        self.block = block;
        if let Err(e) = decoded {
            return Err(ConnError {
                code: Code::Compression,
                why: e.0,
            });
        }
        let Some(s) = self.streams.get_mut(&c.stream) else {
            return Ok(());
        };
        if oversized {
            return self.malformed(c.stream, "a header list over its limit", events);
        }
        let phase = s.phase;
        let head = match check_fields(&self.bytes, &self.fields, phase == Phase::Body) {
            Ok(h) => h,
            Err(why) => return self.malformed(c.stream, why, events),
        };
        match (phase, head.status) {
            (Phase::Body, _) => {
                // Trailers: they end the stream (§8.1).
                if !c.end_stream {
                    return self.malformed(c.stream, "a second header block without END_STREAM", events);
                }
                if s.content_length.is_some_and(|n| s.received != n) {
                    return self.malformed(c.stream, "a body shorter than its content-length", events);
                }
                events.push(Event::Trailers {
                    stream: c.stream,
                    lines: head.lines,
                });
                self.finish_remote(c.stream);
            }
            (Phase::Head, Some(status)) if (100..200).contains(&status) => {
                if status == 101 || c.end_stream {
                    return self.malformed(c.stream, "101, or a 1xx that ends the stream", events);
                }
                s.n_interims += 1;
                if s.n_interims > INTERIMS_MAX {
                    return self.malformed(c.stream, "too many interim answers", events);
                }
                events.push(Event::Interim {
                    stream: c.stream,
                    status,
                    lines: head.lines,
                });
            }
            (Phase::Head, Some(status)) => {
                // A body is checked against its content-length (`data`);
                // a HEAD's answer may say the GET's with none.
                s.phase = Phase::Body;
                s.content_length = head.content_length.filter(|_| !c.end_stream);
                events.push(Event::Head {
                    stream: c.stream,
                    status,
                    lines: head.lines,
                    content_length: head.content_length,
                    end: c.end_stream,
                });
                if c.end_stream {
                    self.finish_remote(c.stream);
                }
            }
            (Phase::Head, None) => return self.malformed(c.stream, "a head without :status", events),
        }
        Ok(())
    }

    /// Stream `id`'s answer is malformed: reset, and the driver told.
    fn malformed(&mut self, id: u32, why: &'static str, events: &mut Vec<Event>) -> Result<(), ConnError> {
        if self.streams.remove(&id).is_some() {
            frame::write_rst_stream(&mut self.out, id, Code::Protocol);
            events.push(Event::Malformed { stream: id, why });
        }
        Ok(())
    }
}

/// A decoded field block, checked.
struct Checked {
    status: Option<u16>,
    lines: Vec<u8>,
    content_length: Option<u64>,
}

/// Checks a response's (or its trailers') fields (RFC 9113 §8.3.2, §8.2):
/// `:status` first and alone among pseudo-fields (none in trailers),
/// lowercase names, valid values, no connection-specific field (`te`
/// only as `trailers`), one content-length; the relayed ones as lines.
fn check_fields(bytes: &[u8], fields: &[Field], trailers: bool) -> Result<Checked, &'static str> {
    let span = |(at, len): (u32, u32)| &bytes[at as usize..(at + len) as usize];
    let mut status = None;
    let mut lines = Vec::with_capacity(bytes.len() + 4 * fields.len());
    let mut content_length = None;
    let mut regular = false;
    for f in fields {
        let (name, value) = (span(f.name), span(f.value));
        if !crate::message::head::field_is_valid(name, value) {
            return Err("an invalid field name or value");
        }
        if name.first() == Some(&b':') {
            if trailers || regular || name != b":status" || status.is_some() {
                return Err("a pseudo-field other than one leading :status");
            }
            let digits = value.len() == 3 && value.iter().all(u8::is_ascii_digit);
            let n = std::str::from_utf8(value).ok().and_then(|v| v.parse::<u16>().ok());
            match n {
                Some(n) if digits && (100..=599).contains(&n) => status = Some(n),
                _ => return Err("a :status that is not 100 to 599"),
            }
            continue;
        }
        regular = true;
        if CONNECTION_SPECIFIC.iter().any(|c| c.eq_ignore_ascii_case(name)) {
            return Err("a connection-specific field");
        }
        if name == b"te" {
            if value != b"trailers" {
                return Err("te other than trailers");
            }
            continue;
        }
        if name == b"content-length" {
            let n = std::str::from_utf8(value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or("a content-length that is not a number")?;
            if content_length.is_some_and(|m| m != n) {
                return Err("content-lengths that differ");
            }
            content_length = Some(n);
        }
        if DROPPED.contains(&name) {
            continue;
        }
        if trailers && crate::message::trailers::is_forbidden(name) {
            continue;
        }
        crate::codec::write::push_field(&mut lines, name, value);
    }
    Ok(Checked {
        status,
        lines,
        content_length,
    })
}

/// A padded payload's content (§6.1): `None` if the padding is longer.
fn unpad(p: &[u8]) -> Option<&[u8]> {
    let (&n, rest) = p.split_first()?;
    rest.len().checked_sub(usize::from(n)).map(|len| &rest[..len])
}

/// A literal field without indexing whose name is static index `index`
/// (RFC 7541 §6.2.2).
fn pseudo(out: &mut Vec<u8>, index: usize, value: &[u8]) {
    write_integer(out, 0, 4, index);
    hpack::write_string(out, value);
}

#[cfg(test)]
mod tests;
