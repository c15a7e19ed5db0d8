//! Frames from the client: SETTINGS, WINDOW_UPDATE, DATA, and header
//! blocks (HEADERS and CONTINUATION) decoded into requests or trailers.

use super::frame::{self, Code, Header};
use super::stream::{Continuation, Sending, Stream};
use super::{Session, STREAM_WINDOW};
use crate::message::head::Head;
use crate::message::trailers::Trailers;

impl Session {
    pub(super) fn on_settings(&mut self, h: Header, payload: &[u8], out: &mut Vec<u8>) {
        if h.stream != 0 {
            return self.fail(out, Code::Protocol, "SETTINGS on a stream");
        }
        if h.flags & frame::ACK != 0 {
            if h.len != 0 {
                self.fail(out, Code::FrameSize, "SETTINGS ACK with a payload");
            }
            return;
        }
        if h.len % 6 != 0 {
            return self.fail(out, Code::FrameSize, "SETTINGS length not a multiple of 6");
        }
        if self.settings_seen && !self.cost(out) {
            return;
        }
        self.settings_seen = true;
        for s in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let value = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                frame::SETTINGS_ENABLE_PUSH if value > 1 => {
                    return self.fail(out, Code::Protocol, "SETTINGS_ENABLE_PUSH other than 0 or 1");
                }
                frame::SETTINGS_INITIAL_WINDOW_SIZE => {
                    if i64::from(value) > frame::WINDOW_MAX {
                        return self.fail(out, Code::FlowControl, "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1");
                    }
                    // §6.9.2: the change applies to every open stream's
                    // window, which may go negative.
                    let delta = i64::from(value) - self.peer_initial_window;
                    self.peer_initial_window = i64::from(value);
                    for s in &mut self.streams {
                        s.send_window += delta;
                        if s.send_window > frame::WINDOW_MAX {
                            return self.fail(out, Code::FlowControl, "a stream window above 2^31-1");
                        }
                    }
                }
                frame::SETTINGS_MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_FRAME_BYTES as u32..1 << 24).contains(&value) {
                        return self.fail(out, Code::Protocol, "SETTINGS_MAX_FRAME_SIZE out of range");
                    }
                    self.peer_frame_max = value as usize;
                }
                frame::SETTINGS_HEADER_TABLE_SIZE => self.encoder.set_table_size(value),
                // The others are advisory or concern push, which we never do.
                _ => {}
            }
        }
        frame::write_settings_ack(out);
    }

    pub(super) fn on_window_update(&mut self, h: Header, payload: &[u8], out: &mut Vec<u8>) {
        if h.len != 4 {
            return self.fail(out, Code::FrameSize, "WINDOW_UPDATE of a length other than 4");
        }
        let increment = i64::from(u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff);
        if !self.cost(out) {
            return;
        }
        if h.stream == 0 {
            if increment == 0 {
                return self.fail(out, Code::Protocol, "WINDOW_UPDATE of 0 on the connection");
            }
            self.send_window += increment;
            if self.send_window > frame::WINDOW_MAX {
                self.fail(out, Code::FlowControl, "connection window above 2^31-1");
            }
            return;
        }
        if h.stream > self.last_stream {
            if self.draining {
                return; // a stream opened after our GOAWAY (§6.8)
            }
            return self.fail(out, Code::Protocol, "WINDOW_UPDATE on an idle stream");
        }
        let Some(idx) = self.find(h.stream) else { return };
        if increment == 0 {
            return self.reset(out, h.stream, Code::Protocol);
        }
        let s = &mut self.streams[idx];
        s.send_window += increment;
        if s.send_window > frame::WINDOW_MAX {
            self.reset(out, h.stream, Code::FlowControl);
        }
    }

    pub(super) fn on_data(&mut self, h: Header, payload: &[u8], out: &mut Vec<u8>) {
        if h.stream == 0 {
            return self.fail(out, Code::Protocol, "DATA on stream 0");
        }
        let Some(data) = unpad(h, payload) else {
            return self.fail(out, Code::Protocol, "DATA padding longer than the frame");
        };
        let len = h.len as i64;
        if len > self.recv_window {
            return self.fail(out, Code::FlowControl, "DATA beyond the connection window");
        }
        self.recv_window -= len;
        if h.stream > self.last_stream {
            if self.draining {
                // §6.8: after our GOAWAY, the streams the client opened
                // meanwhile are ignored, their DATA counted in the window.
                return;
            }
            return self.fail(out, Code::Protocol, "DATA on an idle stream");
        }
        let end_stream = h.flags & frame::END_STREAM != 0;
        if data.is_empty() && !end_stream && !self.cost(out) {
            return;
        }
        let Some(idx) = self.find(h.stream) else {
            // Closed (§5.1): ignored if we reset it ("An endpoint MUST
            // ignore frames that it receives on closed streams after it has
            // sent a RST_STREAM frame"), else a stream error, counted like
            // `reset`'s.
            if !self.was_reset(h.stream) {
                frame::write_rst_stream(out, h.stream, Code::StreamClosed);
                self.cost(out);
            }
            return;
        };
        let body_bytes_max = self.cfg.body_bytes_max;
        let s = &mut self.streams[idx];
        if s.recv_done {
            return self.reset(out, h.stream, Code::StreamClosed);
        }
        if len > s.recv_window {
            return self.reset(out, h.stream, Code::FlowControl);
        }
        s.recv_window -= len;
        s.received += data.len() as u64;
        if s.head.content_length.is_some_and(|n| s.received > n) {
            return self.reset(out, h.stream, Code::Protocol);
        }
        if let Some(t) = &mut s.tunnel {
            // A WebSocket's bytes (RFC 8441): read by its machine, the
            // window given back as it reads (`grant_tunnels`).
            t.input.extend_from_slice(data);
            self.bodies.held += data.len();
            s.recv_done = end_stream;
            return;
        }
        if let Some(sink) = &s.upload {
            // Read as it arrives: handed over now, the window given back
            // only while the reader has room (`grant_uploads`). A body
            // nobody reads gets no window beyond the stream's first: the
            // client sends at most that, then waits for our RST_STREAM.
            if s.received > body_bytes_max && !sink.is_discard() {
                return self.upload_too_large(idx, out);
            }
            sink.push(data);
            let discarding = sink.is_discard();
            let grant = Session::grants_window(s);
            if end_stream {
                s.recv_done = true;
                if s.head.content_length.is_some_and(|n| s.received != n) {
                    return self.reset(out, h.stream, Code::Protocol);
                }
                if let Some(sink) = s.upload.take() {
                    sink.finish();
                }
                if s.send == Sending::Done {
                    return self.remove(idx);
                }
            } else if s.recv_window < STREAM_WINDOW / 2 && grant {
                frame::write_window_update(out, h.stream, (STREAM_WINDOW - s.recv_window) as u32);
                s.recv_window = STREAM_WINDOW;
            }
            if discarding {
                self.data_came(idx, end_stream);
            }
            return;
        }
        if s.refused.is_none() {
            let refused = if s.received > body_bytes_max {
                Some((413, "request body too large"))
            } else if !self.bodies.admits(data.len()) {
                Some((503, crate::budget::BUDGET_SPENT))
            } else {
                None
            };
            if let Some(refused) = refused {
                s.refused = Some(refused);
                self.bodies.held -= s.body.len();
                s.body = Vec::new();
                if !s.ready && s.send == Sending::Waiting {
                    s.ready = true;
                    self.n_ready += 1;
                }
            } else {
                s.body.extend_from_slice(data);
                self.bodies.held += data.len();
            }
        }
        if end_stream {
            s.recv_done = true;
            if s.head.content_length.is_some_and(|n| s.received != n) {
                return self.reset(out, h.stream, Code::Protocol);
            }
            if !s.ready && s.send == Sending::Waiting {
                s.ready = true;
                self.n_ready += 1;
            }
            if s.send == Sending::Done {
                self.remove(idx);
            }
        } else if s.recv_window < STREAM_WINDOW / 2 && s.refused.is_none() {
            frame::write_window_update(out, h.stream, (STREAM_WINDOW - s.recv_window) as u32);
            s.recv_window = STREAM_WINDOW;
        }
    }

    pub(super) fn on_headers(&mut self, h: Header, payload: &[u8], out: &mut Vec<u8>) {
        if h.stream == 0 {
            return self.fail(out, Code::Protocol, "HEADERS on stream 0");
        }
        let Some(mut fragment) = unpad(h, payload) else {
            return self.fail(out, Code::Protocol, "HEADERS padding longer than the frame");
        };
        let mut self_dependent = false;
        if h.flags & frame::PRIORITY_FLAG != 0 {
            if fragment.len() < 5 {
                return self.fail(out, Code::FrameSize, "HEADERS too short for its priority");
            }
            let dep = u32::from_be_bytes([fragment[0], fragment[1], fragment[2], fragment[3]]) & 0x7fff_ffff;
            self_dependent = dep == h.stream;
            fragment = &fragment[5..];
        }
        let end_stream = h.flags & frame::END_STREAM != 0;
        if h.flags & frame::END_HEADERS != 0 {
            self.on_block(h.stream, end_stream, self_dependent, fragment, out);
        } else {
            self.block.clear();
            self.block.extend_from_slice(fragment);
            self.continuation = Some(Continuation {
                stream: h.stream,
                end_stream,
                self_dependent,
            });
        }
    }

    pub(super) fn on_continuation(&mut self, h: Header, payload: &[u8], out: &mut Vec<u8>) {
        let Some(c) = &self.continuation else {
            return self.fail(out, Code::Protocol, "CONTINUATION outside a header block");
        };
        let (stream, end_stream, self_dependent) = (c.stream, c.end_stream, c.self_dependent);
        if !self.cost(out) {
            return;
        }
        self.block.extend_from_slice(payload);
        if self.block.len() > self.cfg.head_bytes_max {
            return self.fail(out, Code::EnhanceYourCalm, "header block larger than head_bytes_max");
        }
        if h.flags & frame::END_HEADERS != 0 {
            self.continuation = None;
            let block = std::mem::take(&mut self.block);
            self.on_block(stream, end_stream, self_dependent, &block, out);
            self.block = block;
        }
    }

    /// Decodes `block` into `head`; false (and the connection failed) if
    /// it cannot be decoded, true with whether it exceeded the list limit.
    pub(super) fn decode(&mut self, block: &[u8], head: &mut Head, out: &mut Vec<u8>) -> Option<bool> {
        head.clear();
        let mut sink = crate::message::fields::Sink::new(&mut head.bytes, &mut head.fields, self.cfg.head_bytes_max);
        match self.decoder.decode(block, &mut sink) {
            Ok(()) => Some(sink.oversized),
            Err(e) => {
                self.fail(out, Code::Compression, e.0);
                None
            }
        }
    }

    /// A complete header block for `id`: a new request, or trailers.
    pub(super) fn on_block(
        &mut self,
        id: u32,
        end_stream: bool,
        self_dependent: bool,
        block: &[u8],
        out: &mut Vec<u8>,
    ) {
        if block.len() > self.cfg.head_bytes_max {
            return self.fail(out, Code::EnhanceYourCalm, "header block larger than head_bytes_max");
        }
        if let Some(idx) = self.find(id) {
            // Trailers (§8.1), or a mistake.
            let mut scratch = std::mem::take(&mut self.scratch);
            let decoded = self.decode(block, &mut scratch, out);
            let checked = scratch.check_trailers(&scratch.fields);
            // Kept for the handler (or the body's reader): an allocation
            // only for a request that has them. A section past the list
            // limit is refused, never passed on cut short.
            let trailers = match decoded {
                Some(false) if checked.is_ok() => Trailers::received(
                    scratch
                        .fields
                        .iter()
                        .map(|f| (scratch.span(f.name), scratch.span(f.value))),
                ),
                _ => None,
            };
            self.scratch = scratch;
            let Some(oversized) = decoded else {
                return;
            };
            let s = &mut self.streams[idx];
            if s.recv_done {
                return self.reset(out, id, Code::StreamClosed);
            }
            if !end_stream || checked.is_err() {
                return self.reset(out, id, Code::Protocol);
            }
            if oversized {
                return self.reset(out, id, Code::EnhanceYourCalm);
            }
            s.recv_done = true;
            if s.head.content_length.is_some_and(|n| s.received != n) {
                return self.reset(out, id, Code::Protocol);
            }
            if let Some(sink) = s.upload.take() {
                sink.finish_with(trailers);
                // An ignored body that ended with its trailers.
                s.await_data = false;
            } else {
                s.trailers = trailers;
            }
            if !s.ready && s.send == Sending::Waiting {
                s.ready = true;
                self.n_ready += 1;
            }
            if s.send == Sending::Done {
                self.remove(idx);
            }
            return;
        }
        if id <= self.last_stream || id % 2 == 0 || self.draining {
            let mut scratch = std::mem::take(&mut self.scratch);
            let decoded = self.decode(block, &mut scratch, out);
            self.scratch = scratch;
            if decoded.is_none() || self.draining && id > self.last_stream && id % 2 == 1 {
                // After our GOAWAY, new streams are ignored (§6.8).
                return;
            }
            if id <= self.last_stream && self.was_reset(id) {
                // Trailers sent before our RST_STREAM arrived (§5.1).
                return;
            }
            return if id % 2 == 0 {
                self.fail(out, Code::Protocol, "even stream id from a client")
            } else if id == self.last_stream {
                self.fail(out, Code::StreamClosed, "HEADERS on a closed stream")
            } else {
                self.fail(out, Code::Protocol, "stream id lower than one already used")
            };
        }
        self.last_stream = id;
        let mut s = self.spare.pop().unwrap_or_else(|| Box::new(Stream::new()));
        // Decoded in place: `s` is ours, not borrowed from `self` (taking
        // the head out and back copied it twice: 3% of an h2load profile).
        let decoded = self.decode(block, &mut s.head, out);
        let Some(oversized) = decoded else { return };
        if self_dependent {
            self.spare.push(s);
            return self.reset(out, id, Code::Protocol);
        }
        if self.streams.len() >= self.cfg.streams_max as usize {
            self.spare.push(s);
            self.write_rst(out, id, Code::RefusedStream);
            self.cost(out);
            return;
        }
        s.refused = None;
        if oversized {
            s.refused = Some((431, "request header fields too large"));
        } else if s.head.check_request(self.cfg.connect_protocol).is_err() {
            self.spare.push(s);
            return self.reset(out, id, Code::Protocol);
        } else if s.head.fields.len() > self.cfg.n_headers_max {
            // Counted after the check, as HTTP/1.1 counts them: without the
            // pseudo-fields, and cookie crumbs joined into one (§8.2.3).
            s.refused = Some((431, "too many header fields"));
        } else if s.head.content_length.is_some_and(|n| n > self.cfg.body_bytes_max) {
            // Refused before the body, as HTTP/1.1 refuses it: a client
            // waiting for 100 Continue gets this final answer instead.
            s.refused = Some((413, "request body too large"));
        } else if s.head.expect_unmet {
            s.refused = Some((417, "unsupported expectation"));
        }
        if end_stream && s.head.content_length.is_some_and(|n| n > 0) {
            self.spare.push(s);
            return self.reset(out, id, Code::Protocol);
        }
        s.id = id;
        s.recv_done = end_stream;
        s.send = Sending::Waiting;
        // An extended CONNECT (a WebSocket, RFC 8441) goes to its handler
        // at its head: its "body" is the WebSocket, which only begins
        // once the handler accepts it.
        s.ready = end_stream || s.refused.is_some() || s.head.protocol.is_some();
        s.body.clear();
        s.received = 0;
        s.recv_window = STREAM_WINDOW;
        s.send_window = self.peer_initial_window;
        s.pending = None;
        s.upload = None;
        s.trailers = None;
        s.clock = None;
        s.continue_due = s.head.expect_continue && !end_stream && s.refused.is_none();
        // A body is coming: the driver asks the handler whether it reads
        // it as it arrives before the stream is complete.
        s.head_ready = !s.ready;
        if s.ready {
            self.n_ready += 1;
        }
        if s.head_ready {
            self.n_heads += 1;
        }
        self.streams.push(s);
    }
}

/// The payload of a frame without its padding (§6.1): `None` if the pad
/// length is as long as the frame or longer.
fn unpad(h: Header, payload: &[u8]) -> Option<&[u8]> {
    if h.flags & frame::PADDED == 0 {
        return Some(payload);
    }
    let (&pad, rest) = payload.split_first()?;
    rest.len().checked_sub(usize::from(pad)).map(|end| &rest[..end])
}
