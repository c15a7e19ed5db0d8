//! The response writer: HEADERS from a response (HPACK-encoded, the last
//! head reused while the table is unchanged), then DATA frames as the
//! flow-control windows and the output budget allow.

use super::frame::{self, Code};
use super::hpack;
use super::splice::SPLICE_BYTES_MIN;
use super::stream::Sending;
use super::{Session, STREAM_WINDOW};
use crate::message::fields::for_each_line;
use crate::message::pending::Pending;
use crate::message::Sent;
use crate::response::Response;

/// A response head's HPACK block, and what it was made of: while the
/// encoder's table does not change, a response made of the same (the same
/// file asked again on the connection, a handler's fixed answer) encodes
/// to the same bytes, copied instead of looked up field by field. The
/// buffers are reused: no allocation once warm.
#[derive(Default)]
pub(super) struct HeadCache {
    valid: bool,
    generation: u64,
    status: u16,
    length: Option<u64>,
    content_type: Vec<u8>,
    has_content_type: bool,
    /// Holds the block, so its address is not reused while compared.
    block: Option<crate::response::HeaderBlock>,
    date: Vec<u8>,
    extra_fields: Vec<u8>,
    encoded: Vec<u8>,
}

impl HeadCache {
    /// Whether `resp`'s head (with `length`, `date` and `extra_fields`)
    /// is the one encoded, with the table as it was then.
    fn matches(&self, generation: u64, resp: &Response, length: Option<u64>, date: &[u8], extra: &[u8]) -> bool {
        self.valid
            && self.generation == generation
            && self.status == resp.status
            && self.length == length
            && resp.headers.is_empty()
            && self.has_content_type == resp.content_type.is_some()
            && resp
                .content_type
                .as_deref()
                .is_none_or(|ct| same_bytes(ct.as_bytes(), &self.content_type))
            && match (&self.block, &resp.block) {
                (None, None) => true,
                (Some(a), Some(b)) => a.same(b),
                _ => false,
            }
            && same_bytes(&self.date, date)
            && same_bytes(&self.extra_fields, extra)
    }

    /// Remembers `encoded` as `resp`'s head, if the head is cacheable.
    fn store(
        &mut self,
        generation: u64,
        resp: &Response,
        length: Option<u64>,
        date: &[u8],
        extra: &[u8],
        encoded: &[u8],
    ) {
        // Not a block whose buffer its owner refills in place (the proxy's):
        // holding it would make the owner allocate a new buffer each answer.
        self.valid = resp.headers.is_empty() && resp.block.as_ref().is_none_or(|b| b.is_cacheable());
        if !self.valid {
            self.block = None;
            return;
        }
        self.generation = generation;
        self.status = resp.status;
        self.length = length;
        self.has_content_type = resp.content_type.is_some();
        self.content_type.clear();
        if let Some(ct) = &resp.content_type {
            self.content_type.extend_from_slice(ct.as_bytes());
        }
        self.block.clone_from(&resp.block);
        self.date.clear();
        self.date.extend_from_slice(date);
        self.extra_fields.clear();
        self.extra_fields.extend_from_slice(extra);
        self.encoded.clear();
        self.encoded.extend_from_slice(encoded);
    }
}

/// `a == b` for the short strings of a head (a date, a media type), in
/// words and inline: as calls to libc's `memcmp`, the compares of
/// `HeadCache::matches` were 5.6 % of the server's CPU under h2load -c 50
/// -m 32 on a 4 KiB file (perf, DWARF call graphs).
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut x, mut y) = (a.chunks_exact(8), b.chunks_exact(8));
    let words = (&mut x).zip(&mut y).fold(0, |acc, (p, q)| {
        acc | (u64::from_ne_bytes(p.try_into().unwrap()) ^ u64::from_ne_bytes(q.try_into().unwrap()))
    });
    let tail = x
        .remainder()
        .iter()
        .zip(y.remainder())
        .fold(0, |acc, (p, q)| acc | (p ^ q));
    words == 0 && tail == 0
}

impl Session {
    /// Queues the response to stream `id`: its HEADERS now, its body as
    /// flow control allows and until `out` holds `budget` bytes (the rest
    /// through `send`). `extra_fields` are complete `Name: value\r\n`
    /// lines from the transport (HSTS). `None` if the stream is gone.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn respond(
        &mut self,
        id: u32,
        resp: &mut Response,
        head_only: bool,
        date: &[u8],
        extra_fields: &[u8],
        out: &mut Vec<u8>,
        budget: usize,
    ) -> Option<Sent> {
        let idx = self.find(id)?;
        let (status, length, follows) = Pending::head_of(resp, head_only);
        let flags = if follows { 0 } else { frame::END_STREAM };
        let encoder = &mut self.encoder;
        let cache = &mut self.head_cache;
        write_head(out, id, flags, self.peer_frame_max, |block| {
            let generation = encoder.generation();
            if !encoder.has_update() && cache.matches(generation, resp, length, date, extra_fields) {
                block.extend_from_slice(&cache.encoded);
                return;
            }
            let at = block.len();
            let fresh = !encoder.has_update();
            encoder.begin(block);
            hpack::write_status(block, status);
            encode_fields(encoder, block, resp, date, length, extra_fields);
            if fresh && encoder.generation() == generation {
                cache.store(generation, resp, length, date, extra_fields, &block[at..]);
            } else {
                cache.valid = false;
            }
        });
        self.n_responses += 1;
        let s = &mut self.streams[idx];
        s.pending = Pending::take(resp, follows);
        s.send = if s.pending.is_some() {
            Sending::Body
        } else {
            Sending::Done
        };
        if let Some(p) = &s.pending {
            // Counted until the body ends (`send_stream`, `remove`).
            let held = p.held_bytes();
            if held != 0 {
                s.held = held;
                self.unsent.held += held;
            }
        }
        let sent = Sent {
            status,
            body_bytes: if head_only { 0 } else { length.unwrap_or(0) },
        };
        if s.pending.is_some() {
            self.send_stream(idx, out, budget);
        }
        // Only this stream can have become complete here (`send` finishes
        // the others): `finish`'s scan of every stream, per response, was
        // quadratic in the streams answered in a batch.
        if self
            .streams
            .get(idx)
            .is_some_and(|s| s.id == id && s.send == Sending::Done)
        {
            if !self.streams[idx].recv_done {
                self.write_rst(out, id, Code::NoError);
            }
            self.remove(idx);
        }
        Some(sent)
    }

    /// Accepts stream `id`'s extended CONNECT (RFC 8441): HEADERS with
    /// `resp`'s status (2xx) and fields, without END_STREAM and without
    /// a content-length (RFC 9110 §8.6), and the stream carries a
    /// WebSocket's bytes from now on (`tunnel`). What the client sent
    /// with its head is the WebSocket's first input. False if the stream
    /// is gone.
    pub(crate) fn accept_tunnel(
        &mut self,
        id: u32,
        resp: &Response,
        date: &[u8],
        extra_fields: &[u8],
        out: &mut Vec<u8>,
    ) -> bool {
        let Some(idx) = self.find(id) else { return false };
        let encoder = &mut self.encoder;
        write_head(out, id, 0, self.peer_frame_max, |block| {
            encoder.begin(block);
            hpack::write_status(block, resp.status);
            encode_fields(encoder, block, resp, date, None, extra_fields);
        });
        self.n_responses += 1;
        let s = &mut self.streams[idx];
        s.send = Sending::Tunnel;
        // The body collected so far stays counted in `bodies`, as input.
        s.tunnel = Some(Box::new(super::Tunnel {
            input: std::mem::take(&mut s.body),
            ..Default::default()
        }));
        true
    }

    /// Lends stream `id`'s WebSocket bytes to `f`, with whether the
    /// client has ended its side; what `f` reads of the input leaves the
    /// body budget. `None` if the stream is gone (the client reset it).
    pub(crate) fn with_tunnel<R>(&mut self, id: u32, f: impl FnOnce(&mut super::Tunnel, bool) -> R) -> Option<R> {
        let idx = self.find(id)?;
        let s = &mut self.streams[idx];
        let t = s.tunnel.as_deref_mut()?;
        let before = t.input.len();
        let r = f(t, s.recv_done);
        self.bodies.held -= before.saturating_sub(t.input.len());
        Some(r)
    }

    /// Bytes the WebSockets of this connection have waiting for the client.
    pub(crate) fn tunnels_queued(&self) -> usize {
        self.streams
            .iter()
            .filter_map(|s| s.tunnel.as_ref())
            .map(|t| t.queued())
            .sum()
    }

    /// The WebSocket on stream `id` is over: END_STREAM follows its last
    /// bytes.
    pub(crate) fn end_tunnel(&mut self, id: u32) {
        if let Some(t) = self.find(id).and_then(|idx| self.streams[idx].tunnel.as_deref_mut()) {
            t.end = true;
        }
    }

    /// The connection a stream's tunnel carried failed (a proxied
    /// WebSocket's upstream): RST_STREAM with CONNECT_ERROR (RFC 9113
    /// §8.5), and the stream is forgotten.
    pub(crate) fn reset_tunnel(&mut self, id: u32, out: &mut Vec<u8>) {
        self.end_tunnel_with(id, out, Code::ConnectError);
    }

    /// A stream's tunnel is closed by us (idle too long): RST_STREAM with
    /// CANCEL, and the stream is forgotten.
    pub(crate) fn cancel_tunnel(&mut self, id: u32, out: &mut Vec<u8>) {
        self.end_tunnel_with(id, out, Code::Cancel);
    }

    fn end_tunnel_with(&mut self, id: u32, out: &mut Vec<u8>, code: Code) {
        self.write_rst(out, id, code);
        if let Some(idx) = self.find(id) {
            self.remove(idx);
        }
    }

    /// Gives back the windows of WebSocket streams whose machines read
    /// what came: what the client may send and what waits unread stay
    /// within one stream window, so a client whose WebSocket is not read
    /// (its answers are not being taken) is not read either.
    pub(crate) fn grant_tunnels(&mut self, out: &mut Vec<u8>) {
        for s in &mut self.streams {
            let Some(t) = &s.tunnel else { continue };
            if s.recv_done {
                continue;
            }
            let room = STREAM_WINDOW - s.recv_window - t.input.len() as i64;
            if room >= STREAM_WINDOW / 2 {
                frame::write_window_update(out, s.id, room as u32);
                s.recv_window += room;
            }
        }
    }

    /// Tells the client of stream `id` to send its body, if it asked to be
    /// told (`expect: 100-continue`): an interim HEADERS with `:status`
    /// 100 and no END_STREAM (RFC 9113 §8.1). The driver calls this once it
    /// knows the body will be read: when it chose to collect the body, or
    /// when a streaming handler took its reader. Nothing is sent if the
    /// body has begun to arrive (RFC 9110 §10.1.1: the server "MAY omit
    /// sending a 100 (Continue) response if it has already received some
    /// or all of the content"), or once the stream is answered or refused.
    pub(crate) fn send_continue(&mut self, id: u32, out: &mut Vec<u8>) {
        let Some(idx) = self.find(id) else { return };
        let s = &mut self.streams[idx];
        if !std::mem::take(&mut s.continue_due)
            || s.received > 0
            || s.recv_done
            || s.refused.is_some()
            || !matches!(s.send, Sending::Waiting | Sending::Deferred(_))
        {
            return;
        }
        let encoder = &mut self.encoder;
        write_head(out, id, 0, self.peer_frame_max, |block| {
            // A pending table size update opens the first block sent after
            // it (RFC 7541 §4.2), interim or not.
            encoder.begin(block);
            hpack::write_status(block, 100);
        });
    }

    /// Sends stream `id` an interim answer other than 100 (a proxy
    /// relaying its upstream's `103 Early Hints`): HEADERS with `:status`
    /// and `fields` (complete lines, no connection-specific field), no
    /// END_STREAM (RFC 9113 §8.1). Nothing once the stream is answered
    /// or refused. Its fields are literals, not added to the table: hints
    /// are rarely sent twice alike; credential-bearing ones are sent never
    /// indexed.
    pub(crate) fn send_interim(&mut self, id: u32, status: u16, fields: &[u8], out: &mut Vec<u8>) {
        let Some(idx) = self.find(id) else { return };
        let s = &self.streams[idx];
        if s.refused.is_some() || !matches!(s.send, Sending::Waiting | Sending::Deferred(_)) {
            return;
        }
        let encoder = &mut self.encoder;
        write_head(out, id, 0, self.peer_frame_max, |block| {
            encoder.begin(block);
            hpack::write_status(block, status);
            for_each_line(fields, |name, value| match hpack::indexing(name) {
                hpack::Indexing::Never => hpack::write_never_indexed(block, name, value),
                _ => hpack::write_field(block, name, value),
            });
        });
    }

    /// Appends DATA frames while the windows allow, until `out` holds
    /// `budget` bytes.
    pub(crate) fn send(&mut self, out: &mut Vec<u8>, budget: usize) {
        // Not a `for` over the indexes: a body that fails removes its
        // stream.
        let mut idx = 0;
        while idx < self.streams.len() {
            if self.queued(out) >= budget || self.send_window <= 0 {
                break;
            }
            let id = self.streams[idx].id;
            if self.streams[idx].pending.is_some() {
                self.send_stream(idx, out, budget);
            } else if self.streams[idx].tunnel.is_some() {
                self.send_tunnel(idx, out, budget);
            }
            if self.streams.get(idx).is_some_and(|s| s.id == id) {
                idx += 1;
            }
        }
        self.finish(out);
    }

    /// Sends what the windows allow of one stream's body.
    pub(super) fn send_stream(&mut self, idx: usize, out: &mut Vec<u8>, budget: usize) {
        let frame_max = self.peer_frame_max;
        let s = &mut self.streams[idx];
        let Some(pending) = &mut s.pending else { return };
        loop {
            let window = s.send_window.min(self.send_window);
            let queued = out.len() + self.splices.bytes();
            let room = budget.saturating_sub(queued).max(1024);
            let max = usize::try_from(window.max(0)).unwrap_or(0).min(frame_max).min(room);
            if max == 0 && !matches!(pending, Pending::Stream { .. }) {
                return;
            }
            let at = out.len();
            frame::write_header(out, 0, frame::DATA, 0, s.id);
            let slice = if self.splicing {
                pending.take_slice(max, SPLICE_BYTES_MIN)
            } else {
                None
            };
            let filled = match slice {
                Some(slice) => {
                    let n = slice.as_slice().len();
                    self.splices.push(out.len(), slice);
                    Ok(n)
                }
                None => pending.fill(out, max),
            };
            let n = match filled {
                Ok(n) => n,
                Err(_) => {
                    out.truncate(at);
                    // The length was promised: end the stream instead.
                    let id = s.id;
                    self.write_rst(out, id, Code::Internal);
                    return self.remove(idx);
                }
            };
            let done = pending.is_done();
            if !done && pending.is_stream() {
                // A stream's chunk: held while some of it is unsent.
                let held = pending.held_bytes();
                self.unsent.held = self.unsent.held - s.held + held;
                s.held = held;
            }
            if n == 0 && !done {
                // Nothing to send now (a zero window).
                out.truncate(at);
                return;
            }
            // A body with trailer fields ends with them (§8.1: a last
            // HEADERS frame with END_STREAM), not with its last DATA.
            let trailers = if done { pending.trailers().cloned() } else { None };
            out[at..at + 3].copy_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]);
            if done && trailers.is_none() {
                out[at + 4] = frame::END_STREAM;
            } else if n == 0 {
                out.truncate(at);
            }
            s.send_window -= n as i64;
            self.send_window -= n as i64;
            self.bytes_sent += n as u64;
            self.n_data_sent += u64::from(n != 0);
            if done {
                s.pending = None;
                if s.held != 0 {
                    self.unsent.held -= std::mem::take(&mut s.held);
                }
                s.send = Sending::Done;
                if let Some(t) = trailers {
                    let (id, encoder) = (s.id, &mut self.encoder);
                    write_head(out, id, frame::END_STREAM, frame_max, |block| {
                        encoder.begin(block);
                        for_each_line(t.as_bytes(), |name, value| match hpack::indexing(name) {
                            hpack::Indexing::Never => hpack::write_never_indexed(block, name, value),
                            _ => hpack::write_field(block, name, value),
                        });
                    });
                }
                return;
            }
            if out.len() + self.splices.bytes() >= budget {
                return;
            }
        }
    }

    /// Sends what the windows allow of a WebSocket stream's frames, and
    /// END_STREAM after the last once the WebSocket is over.
    fn send_tunnel(&mut self, idx: usize, out: &mut Vec<u8>, budget: usize) {
        let frame_max = self.peer_frame_max;
        let s = &mut self.streams[idx];
        let Some(t) = s.tunnel.as_deref_mut() else { return };
        loop {
            let left = t.queued();
            if left == 0 {
                if t.end && s.send == Sending::Tunnel {
                    frame::write_header(out, 0, frame::DATA, frame::END_STREAM, s.id);
                    s.send = Sending::Done;
                }
                t.output.clear();
                t.sent = 0;
                if t.output.capacity() > 16 * 1024 {
                    // A burst's buffer goes back (many may be open).
                    t.output = Vec::new();
                }
                return;
            }
            let window = usize::try_from(s.send_window.min(self.send_window).max(0)).unwrap_or(0);
            let room = budget.saturating_sub(out.len() + self.splices.bytes()).max(1024);
            let n = left.min(window).min(frame_max).min(room);
            if n == 0 {
                return;
            }
            let last = t.end && n == left;
            let flags = if last { frame::END_STREAM } else { 0 };
            frame::write_header(out, n, frame::DATA, flags, s.id);
            out.extend_from_slice(&t.output[t.sent..t.sent + n]);
            t.sent += n;
            s.send_window -= n as i64;
            self.send_window -= n as i64;
            self.bytes_sent += n as u64;
            self.n_data_sent += u64::from(n != 0);
            if last {
                s.send = Sending::Done;
                t.output.clear();
                t.sent = 0;
                return;
            }
            if out.len() + self.splices.bytes() >= budget {
                return;
            }
        }
    }

    /// Removes the streams that are complete both ways; a stream answered
    /// before its request ended is told to stop sending (§8.1).
    pub(super) fn finish(&mut self, out: &mut Vec<u8>) {
        let mut idx = 0;
        while idx < self.streams.len() {
            let s = &self.streams[idx];
            if s.send == Sending::Done {
                if !s.recv_done {
                    let id = s.id;
                    self.write_rst(out, id, Code::NoError);
                }
                self.remove(idx);
            } else {
                idx += 1;
            }
        }
    }

    /// Some stream has body bytes to send and the windows allow some (a
    /// body parked on its producer has none).
    pub(crate) fn wants_send(&self) -> bool {
        let open = self.send_window > 0;
        self.streams.iter().any(|s| match &s.tunnel {
            None => open && s.pending.as_ref().is_some_and(|p| !p.is_parked()) && s.send_window > 0,
            // A WebSocket's bytes, or its END_STREAM (which needs no window).
            Some(t) => (open && t.queued() > 0 && s.send_window > 0) || (t.end && s.send == Sending::Tunnel),
        })
    }

    /// Some stream has body bytes that wait for the client's window.
    pub(crate) fn is_flow_blocked(&self) -> bool {
        self.streams.iter().any(|s| {
            s.pending.as_ref().is_some_and(|p| !p.is_parked()) || s.tunnel.as_ref().is_some_and(|t| t.queued() > 0)
        }) && !self.wants_send()
    }
}

/// Appends a HEADERS frame, and CONTINUATION frames if the block is larger
/// than the client's frame size, with the block `encode` writes.
fn write_head(out: &mut Vec<u8>, id: u32, flags: u8, frame_max: usize, encode: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    frame::write_header(out, 0, frame::HEADERS, 0, id);
    encode(out);
    let len = out.len() - at - frame::HEADER_LEN;
    if len <= frame_max {
        out[at..at + 3].copy_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8]);
        out[at + 4] = flags | frame::END_HEADERS;
        return;
    }
    // Rare (a head over 16 KiB): split the block into frames.
    let block = out.split_off(at + frame::HEADER_LEN);
    out.truncate(at);
    let mut chunks = block.chunks(frame_max).peekable();
    let mut kind = frame::HEADERS;
    let mut first_flags = flags;
    while let Some(chunk) = chunks.next() {
        let end = if chunks.peek().is_none() { frame::END_HEADERS } else { 0 };
        frame::write_header(out, chunk.len(), kind, first_flags | end, id);
        out.extend_from_slice(chunk);
        kind = frame::CONTINUATION;
        first_flags = 0;
    }
}

/// Encodes a response's fields after `:status` (lowercase names, no
/// connection-specific fields: the engine never lets a handler set them),
/// each indexed or not as `hpack::indexing` says.
fn encode_fields(
    enc: &mut hpack::Encoder,
    out: &mut Vec<u8>,
    resp: &Response,
    date: &[u8],
    length: Option<u64>,
    extra_fields: &[u8],
) {
    if !resp.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("server")) {
        enc.field(out, b"server", b"peregrine");
    }
    enc.field(out, b"date", date);
    if let Some(ct) = &resp.content_type {
        enc.field(out, b"content-type", ct.as_bytes());
    }
    if let Some(n) = length {
        let mut digits = itoa::Buffer::new();
        enc.field(out, b"content-length", digits.format(n).as_bytes());
    }
    for (name, value) in &resp.headers {
        enc.field(out, name.as_bytes(), value.as_bytes());
    }
    if let Some(block) = &resp.block {
        for_each_line(block.as_bytes(), |name, value| enc.field(out, name, value));
    }
    let given = if extra_fields.is_empty() {
        0
    } else {
        resp.sets_lines(extra_fields)
    };
    let mut i = 0;
    for_each_line(extra_fields, |name, value| {
        if i >= 32 || given & (1 << i) == 0 {
            enc.field(out, name, value);
        }
        i += 1;
    });
}
