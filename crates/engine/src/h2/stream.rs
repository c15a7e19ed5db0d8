//! The stream table: each open stream's state, the requests ready for
//! their handlers, and the streams waiting for a deferred answer.

use super::request::Head;
use super::{Pending, Session};

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
    /// Answer this status instead of calling the handler (431, 413).
    pub(super) refused: Option<(u16, &'static str)>,
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
            refused: None,
        }
    }
}

/// A request ready for its handler: borrowed from the session.
pub(crate) struct Parts<'s> {
    pub(crate) method: &'s str,
    /// `:path`, or `:authority` for CONNECT.
    pub(crate) target: &'s str,
    pub(crate) host: Option<&'s str>,
    pub(crate) head: &'s Head,
    pub(crate) body: &'s [u8],
}

impl<'s> Parts<'s> {
    /// The request a checked head and its body make (HTTP/3's too).
    pub(crate) fn of(head: &'s Head, body: &'s [u8]) -> Option<Parts<'s>> {
        let method = head.text(head.method)?;
        let target = head.text(head.path).or_else(|| head.text(head.authority))?;
        let host = head.text(head.authority).or_else(|| {
            head.fields
                .iter()
                .find(|f| head.span(f.name) == b"host")
                .and_then(|f| std::str::from_utf8(head.span(f.value)).ok())
        });
        Some(Parts {
            method,
            target,
            host,
            head,
            body,
        })
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

    /// The status to answer instead of calling the handler, if any.
    pub(crate) fn refused(&self, id: u32) -> Option<(u16, &'static str)> {
        self.find(id).and_then(|idx| self.streams[idx].refused)
    }

    /// The request on stream `id`, for its handler.
    pub(crate) fn parts(&self, id: u32) -> Option<Parts<'_>> {
        let s = &self.streams[self.find(id)?];
        Parts::of(&s.head, &s.body)
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

    pub(super) fn find(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    pub(super) fn remove(&mut self, idx: usize) {
        let mut s = self.streams.remove(idx);
        if s.ready {
            self.n_ready -= 1;
            s.ready = false;
        }
        s.pending = None;
        // Kept up to the concurrency the client has used (bounded by
        // streams_max), so a warm connection reuses stream buffers.
        if self.spare.len() < self.cfg.streams_max as usize {
            self.spare.push(s);
        }
    }
}
