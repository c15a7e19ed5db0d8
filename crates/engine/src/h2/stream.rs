//! The stream table: each open stream's state, the requests ready for
//! their handlers, and the streams waiting for a deferred answer.

use super::frame::{self, Code};
use super::{Session, STREAM_WINDOW};
use crate::body::BodySink;
use crate::message::head::Head;
use crate::message::pending::Pending;
use crate::message::trailers::Trailers;
use crate::message::Parts;

pub(super) struct Continuation {
    pub(super) stream: u32,
    pub(super) end_stream: bool,
    pub(super) self_dependent: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sending {
    /// The handler has not answered yet.
    Waiting,
    /// The handler will answer through a `Responder` with this id.
    Deferred(u64),
    /// The head is sent; `pending` holds the rest of the body.
    Body,
    /// A 2xx to an extended CONNECT is sent (RFC 8441): the stream carries
    /// a WebSocket's bytes both ways, in `tunnel`.
    Tunnel,
    /// The response is complete.
    Done,
}

pub(super) struct Stream {
    pub(super) id: u32,
    /// END_STREAM received: the request is complete.
    pub(super) recv_done: bool,
    pub(super) send: Sending,
    /// The request is complete and waits for its handler.
    pub(super) ready: bool,
    pub(super) head: Head,
    pub(super) body: Vec<u8>,
    pub(super) received: u64,
    pub(super) recv_window: i64,
    pub(super) send_window: i64,
    pub(super) pending: Option<Pending>,
    /// Bytes of `pending` counted in the session's `unsent`.
    pub(super) held: usize,
    /// Answer this status instead of calling the handler (431, 413).
    pub(super) refused: Option<(u16, &'static str)>,
    /// The head is complete, the body is coming, and the driver has not
    /// yet asked the handler whether it reads it as it arrives.
    pub(super) head_ready: bool,
    /// The body goes to a reader as it arrives (`body::streamed`); the
    /// stream's window is given back only as the reader takes it.
    pub(super) upload: Option<BodySink>,
    /// The client asked for `100 Continue` and has not had it yet
    /// (`Session::send_continue`).
    pub(super) continue_due: bool,
    /// Its handler ignores the body (`ignore_body`): it is answered when
    /// the body's first DATA frame (or its end) has come and passed its
    /// checks.
    pub(super) await_data: bool,
    /// The bytes of a WebSocket this stream carries (`Sending::Tunnel`).
    pub(super) tunnel: Option<Box<Tunnel>>,
    /// The trailer fields that ended a body collected whole (a streamed
    /// body's go to its reader), for the handler.
    pub(super) trailers: Option<Trailers>,
    /// The body's deadline while it arrives (`timeout.rs`).
    pub(super) clock: Option<super::timeout::BodyClock>,
}

/// A stream's WebSocket bytes, between the session and the WebSocket
/// machine the driver runs for it (`conn/ws.rs`).
#[derive(Default)]
pub(crate) struct Tunnel {
    /// DATA payloads received and not yet read by the machine: at most
    /// the stream's window, given back only as the machine reads.
    pub(crate) input: Vec<u8>,
    /// Frames for the client; those before `sent` are in DATA frames.
    pub(crate) output: Vec<u8>,
    pub(crate) sent: usize,
    /// The WebSocket is over: END_STREAM once `output` is sent.
    pub(crate) end: bool,
}

impl Tunnel {
    /// Bytes waiting for the client's window or the output budget.
    pub(crate) fn queued(&self) -> usize {
        self.output.len() - self.sent
    }
}

impl Stream {
    pub(super) fn new() -> Self {
        Stream {
            id: 0,
            recv_done: false,
            send: Sending::Waiting,
            ready: false,
            head: Head::default(),
            body: Vec::new(),
            received: 0,
            recv_window: 0,
            send_window: 0,
            pending: None,
            held: 0,
            refused: None,
            head_ready: false,
            upload: None,
            continue_due: false,
            await_data: false,
            tunnel: None,
            trailers: None,
            clock: None,
        }
    }
}

impl Session {
    /// The next stream whose request is complete, oldest first.
    pub(crate) fn take_ready(&mut self) -> Option<u32> {
        if self.n_ready == 0 {
            return None;
        }
        let s = self.streams.iter_mut().find(|s| s.ready)?;
        s.ready = false;
        self.n_ready -= 1;
        Some(s.id)
    }

    /// The next stream whose head is complete and whose body is coming.
    pub(crate) fn take_head(&mut self) -> Option<u32> {
        if self.n_heads == 0 {
            return None;
        }
        let s = self.streams.iter_mut().find(|s| s.head_ready)?;
        s.head_ready = false;
        self.n_heads -= 1;
        Some(s.id)
    }

    /// Stream `id`'s handler ignores its body: what comes is dropped. The
    /// stream is answered (the handler called, with an empty body) early:
    /// at once if the client waits for `100 Continue`; with a declared
    /// content-length, once the body's first DATA frame has come and
    /// passed its checks, and no window is given beyond the stream's
    /// first; without one, at the body's end or past
    /// `discard_bytes_max`, window given as it is dropped. Not at the
    /// head alone: a request the client then breaks (a DATA frame past
    /// its content-length, trailers without END_STREAM, its own
    /// RST_STREAM) must get the stream error RFC 9113 asks for, not an
    /// answer (h2spec 5.1, 8.1, 8.1.2.6). Answered before the body's end,
    /// the stream is reset with NO_ERROR (§8.1).
    pub(crate) fn ignore_body(&mut self, id: u32) {
        let Some(idx) = self.find(id) else { return };
        let s = &mut self.streams[idx];
        if s.recv_done || s.ready {
            return; // complete already: answered as any request
        }
        self.bodies.held -= s.body.len();
        s.body = Vec::new();
        s.upload = Some(BodySink::discard());
        s.await_data = true;
        if std::mem::take(&mut s.continue_due) {
            s.await_data = false;
            s.ready = true;
            self.n_ready += 1;
        } else {
            self.data_came(idx, false);
        }
    }

    /// Body bytes of a stream whose body is ignored came (`ignore_body`),
    /// or its end: answer it if it is time.
    pub(super) fn data_came(&mut self, idx: usize, end: bool) {
        let discard_max = self.cfg.discard_bytes_max;
        let s = &mut self.streams[idx];
        let due = end || (s.received > 0 && s.head.content_length.is_some()) || s.received > discard_max;
        if due && std::mem::take(&mut s.await_data) && !s.ready && s.send == Sending::Waiting {
            s.ready = true;
            self.n_ready += 1;
        }
    }

    /// Window is given for a stream's body: read by a reader with room,
    /// or dropped while the stream waits, with no content-length, for its
    /// end (`ignore_body`).
    pub(super) fn grants_window(s: &Stream) -> bool {
        match &s.upload {
            Some(sink) if sink.is_discard() => s.await_data && s.head.content_length.is_none(),
            Some(sink) => sink.room() > 0,
            None => false,
        }
    }

    /// Stream `id`'s body goes to `sink` as it arrives (its handler is
    /// being called now, so it is not handed out again when complete); a
    /// discarding sink (`BodySink::discard`) drops it, and the stream gets
    /// no more window.
    pub(crate) fn stream_body(&mut self, id: u32, sink: BodySink) {
        let Some(idx) = self.find(id) else { return };
        let s = &mut self.streams[idx];
        // What arrived with the head, before the handler was asked.
        sink.push(&s.body);
        self.bodies.held -= s.body.len();
        s.body.clear();
        if s.ready {
            s.ready = false;
            self.n_ready -= 1;
        }
        if s.recv_done {
            sink.finish_with(s.trailers.take());
        } else {
            s.upload = Some(sink);
        }
    }

    /// Gives back the windows of streams whose readers made room (after a
    /// reader's wake, and on every pass: a lock per upload stream).
    pub(crate) fn grant_uploads(&mut self, out: &mut Vec<u8>) {
        for s in &mut self.streams {
            if s.upload.is_some() && s.recv_window < STREAM_WINDOW / 2 && Session::grants_window(s) {
                frame::write_window_update(out, s.id, (STREAM_WINDOW - s.recv_window) as u32);
                s.recv_window = STREAM_WINDOW;
            }
        }
    }

    /// Some upload waits for its reader to make room: no body timeout
    /// runs for it (the reader owns that wait).
    pub(super) fn is_upload_blocked(s: &Stream) -> bool {
        s.upload.as_ref().is_some_and(BodySink::is_blocked)
    }

    /// A streamed body broke the limit: the reader fails, and the client
    /// gets 413 (or, if the answer has begun, the stream is reset).
    pub(super) fn upload_too_large(&mut self, idx: usize, out: &mut Vec<u8>) {
        let s = &mut self.streams[idx];
        if let Some(sink) = s.upload.take() {
            sink.fail(std::io::ErrorKind::InvalidData, "request body too large");
        }
        match s.send {
            super::stream::Sending::Waiting | super::stream::Sending::Deferred(_) => {
                s.refused = Some((413, "request body too large"));
                s.send = Sending::Waiting;
                if !s.ready {
                    s.ready = true;
                    self.n_ready += 1;
                }
            }
            _ => {
                let id = s.id;
                self.reset(out, id, Code::Cancel);
            }
        }
    }

    /// The status to answer instead of calling the handler, if any.
    pub(crate) fn refused(&self, id: u32) -> Option<(u16, &'static str)> {
        self.find(id).and_then(|idx| self.streams[idx].refused)
    }

    /// The request on stream `id`, for its handler.
    pub(crate) fn parts(&self, id: u32) -> Option<Parts<'_>> {
        let s = &self.streams[self.find(id)?];
        Parts::of(&s.head, &s.body, s.trailers.as_ref())
    }

    /// Marks stream `id` as answered later through the responder `defer_id`.
    pub(crate) fn defer(&mut self, id: u32, defer_id: u64) {
        if let Some(idx) = self.find(id) {
            self.streams[idx].send = Sending::Deferred(defer_id);
        }
    }

    /// The stream waiting for the deferred answer `defer_id`, if it is
    /// still open (the client may have reset it).
    pub(crate) fn deferred_stream(&self, defer_id: u64) -> Option<u32> {
        self.streams
            .iter()
            .find(|s| s.send == Sending::Deferred(defer_id))
            .map(|s| s.id)
    }

    /// Whether stream `id` still has some of its answer's body to queue.
    pub(crate) fn is_sending(&self, id: u32) -> bool {
        self.find(id).is_some_and(|idx| self.streams[idx].pending.is_some())
    }

    pub(super) fn find(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    pub(super) fn remove(&mut self, idx: usize) {
        let mut s = self.streams.remove(idx);
        if s.ready {
            self.n_ready -= 1;
            s.ready = false;
        }
        if s.head_ready {
            self.n_heads -= 1;
            s.head_ready = false;
        }
        s.pending = None;
        if s.held != 0 {
            self.unsent.held -= std::mem::take(&mut s.held);
        }
        // Dropped before its end: the reader gets UnexpectedEof.
        s.upload = None;
        if let Some(t) = s.tunnel.take() {
            self.bodies.held -= t.input.len();
        }
        self.bodies.held -= s.body.len();
        if s.body.capacity() > crate::limits::INLINE_BODY_BYTES_MAX {
            // A large body's memory goes back now, not with the spare.
            s.body = Vec::new();
        } else {
            s.body.clear();
        }
        // Kept up to the concurrency the client has used (bounded by
        // streams_max), so a warm connection reuses stream buffers.
        if self.spare.len() < self.cfg.streams_max as usize {
            self.spare.push(s);
        }
    }
}
