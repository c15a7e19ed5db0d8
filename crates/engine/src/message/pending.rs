//! The part of a response body still to send, for HTTP/2's DATA frames
//! and HTTP/3's (`h3` sends from it too): bytes, a file range, or a
//! stream's chunks, taken a frame's worth at a time; and what such bodies
//! hold in memory, counted in the worker's output budget (`Unsent`).

use std::io;
use std::sync::Arc;

use crate::body::{Chunks, Next};
use crate::buffers::BufPool;
use crate::response::{Body, FileRange, Response, SharedBytes};

/// The part of a response body not sent yet (HTTP/3 sends from it too).
pub(crate) enum Pending {
    Bytes {
        body: Body,
        pos: usize,
    },
    File {
        range: FileRange,
        sent: u64,
    },
    Stream {
        chunks: Chunks,
        buf: Vec<u8>,
        pos: usize,
        done: bool,
    },
}

impl Pending {
    /// What a response to one stream sends (HTTP/2's and HTTP/3's): an
    /// invalid one is replaced by a 500; then its status, its body's
    /// length (none for 204 and 304), and whether a body follows the head
    /// (not for HEAD, 204, 304 or an empty body). The body is taken with
    /// `Pending::take` once the head is encoded.
    pub(crate) fn head_of(resp: &mut Response, head_only: bool) -> (u16, Option<u64>, bool) {
        if let Some(why) = resp.invalid {
            crate::log::error(format_args!(
                "handler returned an invalid response ({why}); answering 500"
            ));
            *resp = Response::error(500);
        }
        let status = resp.status;
        let bodiless = status == 204 || status == 304;
        let length = if bodiless { None } else { resp.body.len() };
        (status, length, !(head_only || bodiless || length == Some(0)))
    }

    /// The body still to send, taken out of `resp` after its head is
    /// encoded (a body beside the header block takes the block's
    /// reference with it); `None` if `head_of` said no body follows.
    pub(crate) fn take(resp: &mut Response, follows: bool) -> Option<Pending> {
        if follows {
            Pending::new(resp.take_body())
        } else {
            None
        }
    }

    fn new(body: Body) -> Option<Pending> {
        match body {
            // `Response::take_body` gives a body beside the block as `Shared`.
            Body::Empty | Body::BesideBlock(_) => None,
            Body::File(range) => Some(Pending::File { range, sent: 0 }),
            Body::Stream(chunks) => Some(Pending::Stream {
                chunks: Chunks::Iter(chunks),
                buf: Vec::new(),
                pos: 0,
                done: false,
            }),
            Body::Channel(rx) => Some(Pending::Stream {
                chunks: Chunks::Channel(rx),
                buf: Vec::new(),
                pos: 0,
                done: false,
            }),
            body => Some(Pending::Bytes { body, pos: 0 }),
        }
    }

    /// Appends up to `max` bytes of body to `out`; how many (0 and not
    /// done: a channel's producer has nothing yet, and wakes the
    /// connection when it has). An error ends the stream (a file that
    /// shrank, a body iterator that panicked, a producer that aborted).
    pub(crate) fn fill(&mut self, out: &mut Vec<u8>, max: usize) -> io::Result<usize> {
        match self {
            Pending::Bytes { body, pos } => {
                let bytes: &[u8] = match body {
                    Body::Static(b) => b,
                    Body::Bytes(b) => b,
                    Body::Shared(s) => s.as_slice(),
                    _ => &[],
                };
                let n = max.min(bytes.len() - *pos);
                out.extend_from_slice(&bytes[*pos..*pos + n]);
                *pos += n;
                Ok(n)
            }
            Pending::File { range, sent } => {
                let n = usize::try_from(range.len - *sent).map_or(max, |left| left.min(max));
                crate::sys::sendfile::pread_append(&range.file, out, n, range.offset + *sent)?;
                *sent += n as u64;
                Ok(n)
            }
            Pending::Stream { chunks, buf, pos, done } => {
                while *pos == buf.len() && !*done {
                    if chunks.is_parked() {
                        return Ok(0);
                    }
                    match chunks.next() {
                        Next::Chunk(chunk) => {
                            *buf = chunk;
                            *pos = 0;
                        }
                        Next::End => *done = true,
                        Next::Wait => return Ok(0),
                        Next::Failed => return Err(io::Error::other("the body could not be completed")),
                    }
                }
                let n = max.min(buf.len() - *pos);
                out.extend_from_slice(&buf[*pos..*pos + n]);
                *pos += n;
                Ok(n)
            }
        }
    }

    /// Up to `max` bytes of a lasting body (static or shared) as a slice,
    /// if at least `min` are left; `None` leaves them to `fill`.
    pub(crate) fn take_slice(&mut self, max: usize, min: usize) -> Option<Slice> {
        let Pending::Bytes { body, pos } = self else {
            return None;
        };
        let left = body.len().map_or(0, |n| n as usize - *pos);
        let n = max.min(left);
        if n < min || n == 0 {
            return None;
        }
        let slice = match body {
            Body::Static(b) => Slice::Static(&b[*pos..*pos + n]),
            Body::Shared(s) => {
                let start = s.range.start + *pos;
                Slice::Shared(SharedBytes {
                    buf: s.buf.clone(),
                    range: start..start + n,
                })
            }
            _ => return None,
        };
        *pos += n;
        Some(slice)
    }

    /// Nothing to send until the producer of a channel wakes the
    /// connection: no window is wanted for it, and no send timeout runs.
    pub(crate) fn is_parked(&self) -> bool {
        matches!(self, Pending::Stream { chunks, buf, pos, .. } if *pos == buf.len() && chunks.is_parked())
    }

    /// The trailer fields to send once the body is done, if any (a
    /// channel's, `Sender::end_with_trailers`).
    pub(crate) fn trailers(&self) -> Option<&crate::message::trailers::Trailers> {
        match self {
            Pending::Stream { chunks, done: true, .. } => chunks.trailers(),
            _ => None,
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        match self {
            Pending::Bytes { body, pos } => body.len() == Some(*pos as u64),
            Pending::File { range, sent } => *sent == range.len,
            Pending::Stream { buf, pos, done, .. } => *done && *pos == buf.len(),
        }
    }

    /// Bytes of memory this body holds for its answer alone, until it
    /// ends: owned bytes (a multipart answer, a handler's `Vec`) whole,
    /// the sent part too (the buffer is freed only with the body); a
    /// shared buffer only this answer holds (a handler's own `Arc`, not a
    /// cache entry or an archive's map, whose memory is theirs and held
    /// anyway); a stream's chunk while some of it is unsent. Files
    /// (read as they are sent) and `'static` bytes hold nothing. Counted
    /// once when the answer is queued, except a stream's, which changes
    /// with each chunk (`is_stream`).
    pub(crate) fn held_bytes(&self) -> usize {
        match self {
            Pending::Bytes {
                body: Body::Bytes(b), ..
            } => b.capacity(),
            Pending::Bytes {
                body: Body::Shared(s), ..
            } if Arc::strong_count(&s.buf) == 1 => (*s.buf).as_ref().len(),
            Pending::Stream { buf, pos, .. } if *pos < buf.len() => buf.capacity(),
            _ => 0,
        }
    }

    /// A stream's chunks: what it holds changes as they come and go.
    pub(crate) fn is_stream(&self) -> bool {
        matches!(self, Pending::Stream { .. })
    }
}

/// What the answer bodies of one connection's streams hold in memory and
/// have not sent (`Pending::held_bytes`): its queued output as much as
/// the bytes in its output buffer, so held against the worker's output
/// budget (`Limits::output_budget_bytes`, `BufPool::output`). The session
/// adds each body's bytes when it is queued and takes them back when it
/// ends; its driver charges the sum to the worker (`charge`) and, while
/// it is over the connection's share, answers no new stream.
#[derive(Default)]
pub(crate) struct Unsent {
    /// Bytes the streams' bodies hold now.
    pub(crate) held: usize,
    /// `held` as last charged to the worker.
    charged: usize,
}

impl Unsent {
    /// Holds what the bodies hold against the worker's output budget.
    #[inline]
    pub(crate) fn charge(&mut self, pool: &mut BufPool) {
        if self.held != self.charged {
            pool.output = pool.output - self.charged + self.held;
            self.charged = self.held;
        }
    }

    /// The connection is gone: what it held goes back to the worker.
    pub(crate) fn release(&mut self, pool: &mut BufPool) {
        pool.output -= std::mem::take(&mut self.charged);
    }
}

/// A piece of a body that outlives the response.
pub(crate) enum Slice {
    Static(&'static [u8]),
    Shared(SharedBytes),
}

impl Slice {
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Slice::Static(b) => b,
            Slice::Shared(s) => s.as_slice(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Slice::Static(b) => b.len(),
            Slice::Shared(s) => s.range.len(),
        }
    }

    /// Drops the first `n` bytes (written).
    pub(crate) fn advance(&mut self, n: usize) {
        match self {
            Slice::Static(b) => *b = &b[n..],
            Slice::Shared(s) => s.range.start += n,
        }
    }
}
