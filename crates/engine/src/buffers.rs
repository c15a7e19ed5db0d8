//! A connection's buffers: bytes read and not yet consumed (`Input`), bytes
//! to write (`Output`, with an optional large `Tail` after them), and the
//! worker's pool they are lent from. The protocol machines read from an
//! `Input` and queue into an `Output`; only the driver touches the socket.

use crate::body::Chunks;
use crate::limits::{BUFFER_BYTES, H2_READ_BYTES, POOL_BUFFERS_MAX, UPSTREAM_CHUNKS_KEPT, UPSTREAM_READ_BYTES};
use crate::response::{FileRange, SharedBytes};

/// A worker's spare buffers. Read buffers keep their full length (their
/// bytes are initialised, with whatever the last connection left in them)
/// so reads need no `unsafe`; write buffers are kept empty.
#[derive(Default)]
pub(crate) struct BufPool {
    /// The read and the write buffer given back last, taken first. A
    /// worker runs one connection's turn at a time, so at 50 keep-alive
    /// connections each turn takes these two and gives them back: a slot
    /// filled and emptied, not a stack's length checked, moved and
    /// bounded (callgrind, hello-c50: NOTES of 2026-11-28-hc50). Counted
    /// in `POOL_BUFFERS_MAX` with the stacks below, which hold the rest.
    hot_read: Option<Vec<u8>>,
    hot_write: Option<Vec<u8>>,
    read: Vec<Vec<u8>>,
    write: Vec<Vec<u8>>,
    /// Read buffers of HTTP/2 connections (`H2_READ_BYTES`).
    h2_read: Vec<Vec<u8>>,
    /// Write buffers that grew past `BUFFER_BYTES` (see `give_write`).
    large_write: Vec<Vec<u8>>,
    /// Write buffers that grew a little (a pipelined batch of answers
    /// past `BUFFER_BYTES`), taken again before a new one is allocated.
    medium_write: Vec<Vec<u8>>,
    /// What the worker's connections hold against its budgets
    /// (`Limits::body_budget_bytes`, `Limits::output_budget_bytes`): each
    /// connection adds what it takes and takes back what it gives.
    pub(crate) bodies: usize,
    pub(crate) output: usize,
    /// Bytes of the reverse proxy's answers read ahead of their clients
    /// (queued in their channels, `body::channel_held`), counted in the
    /// output budget with `output`: an atomic because a channel is
    /// `Send`, though only this worker's threads move its bytes.
    pub(crate) read_ahead: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// The reverse proxy's read buffers of `UPSTREAM_READ_BYTES`, given
    /// back once their chunk was written (`give_chunk`), full length.
    chunks: Vec<Vec<u8>>,
}

impl BufPool {
    /// Bytes held against the output budget: queued answers and the
    /// proxy's read-ahead.
    pub(crate) fn output_held(&self) -> usize {
        self.output + self.read_ahead.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl BufPool {
    /// A read buffer: the hot slot's, which `refill_read` fills first if
    /// it is empty. Taken from the slot either way: a slot or a call's
    /// result merged into one value was built on the stack, then copied
    /// (5 instructions more for each buffer taken, callgrind, hello-c50).
    #[inline(always)]
    pub(crate) fn take_read(&mut self) -> Vec<u8> {
        if self.hot_read.is_none() {
            self.refill_read();
        }
        self.hot_read.take().unwrap_or_else(|| vec![0; BUFFER_BYTES])
    }

    /// Fills the empty hot read slot (another connection holds its
    /// buffer): one from the stack, else a new one. Out of line, as
    /// `refill_write`.
    #[inline(never)]
    fn refill_read(&mut self) {
        self.hot_read = Some(self.read.pop().unwrap_or_else(|| vec![0; BUFFER_BYTES]));
    }

    /// A write buffer, as `take_read`.
    #[inline(always)]
    pub(crate) fn take_write(&mut self) -> Vec<u8> {
        if self.hot_write.is_none() {
            self.refill_write();
        }
        self.hot_write
            .take()
            .unwrap_or_else(|| Vec::with_capacity(BUFFER_BYTES))
    }

    /// Fills the empty hot write slot: a plain buffer from the stack, else
    /// one that grew, else a new one. Out of line: inlined, its branches
    /// cost every HTTP/1.1 batch 6 to 9 instructions in the driver's code
    /// (callgrind, c50 rows).
    #[inline(never)]
    fn refill_write(&mut self) {
        let buf = match self.write.pop() {
            Some(buf) => buf,
            None => self
                .medium_write
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(BUFFER_BYTES)),
        };
        self.hot_write = Some(buf);
    }

    pub(crate) fn take_h2_read(&mut self) -> Vec<u8> {
        self.h2_read.pop().unwrap_or_else(|| vec![0; H2_READ_BYTES])
    }

    /// Takes back a read buffer. A keep-alive connection gives its
    /// buffers back after every request it answers whole (`Conn::drive`),
    /// so the common case, a plain buffer into the empty hot slot, is
    /// tested in the caller's code (a call cost 31 instructions a request
    /// with its moves; callgrind, hello-c50); the rest is out of line.
    #[inline(always)]
    pub(crate) fn give_read(&mut self, buf: Vec<u8>) {
        if buf.len() == BUFFER_BYTES && self.hot_read.is_none() {
            self.hot_read = Some(buf);
        } else {
            self.give_read_other(buf);
        }
    }

    /// `give_read` with the hot slot taken: the stack keeps the rest of
    /// `POOL_BUFFERS_MAX`.
    #[inline(never)]
    fn give_read_other(&mut self, buf: Vec<u8>) {
        if buf.len() == BUFFER_BYTES && self.read.len() < POOL_BUFFERS_MAX - 1 {
            self.read.push(buf);
        } else if buf.len() == H2_READ_BYTES && self.h2_read.len() < POOL_BUFFERS_MAX {
            self.h2_read.push(buf);
        }
    }

    /// Takes back a write buffer: as `give_read`, the common case in the
    /// caller's code.
    #[inline(always)]
    pub(crate) fn give_write(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() == BUFFER_BYTES && self.hot_write.is_none() {
            buf.clear();
            self.hot_write = Some(buf);
        } else {
            self.give_write_other(buf);
        }
    }

    #[inline(never)]
    fn give_write_other(&mut self, mut buf: Vec<u8>) {
        buf.clear();
        if buf.capacity() == BUFFER_BYTES && self.write.len() < POOL_BUFFERS_MAX - 1 {
            self.write.push(buf);
        } else if buf.capacity() > BUFFER_BYTES
            && buf.capacity() <= MEDIUM_WRITE_BYTES_MAX
            && self.medium_write.len() < MEDIUM_WRITE_BUFFERS_MAX
        {
            self.medium_write.push(buf);
        } else if (BUFFER_BYTES..=LARGE_WRITE_BYTES_MAX).contains(&buf.capacity())
            && self.large_write.len() < LARGE_WRITE_BUFFERS_MAX
        {
            self.large_write.push(buf);
        }
    }

    /// A read buffer of `UPSTREAM_READ_BYTES` (full length, its bytes
    /// initialised) for the reverse proxy, which moves a full read of a
    /// long answer's body into its channel rather than copy it: one a
    /// client's connection gave back if there is one.
    pub(crate) fn take_chunk(&mut self) -> Vec<u8> {
        match self.chunks.pop() {
            Some(buf) => {
                self.output -= buf.capacity();
                buf
            }
            None => vec![0; UPSTREAM_READ_BYTES],
        }
    }

    /// Keeps a chunk that was written (a streamed body's, `Held`) for
    /// `take_chunk` if it is one of the proxy's read buffers, whole, and
    /// fewer than `UPSTREAM_CHUNKS_KEPT` are kept; counted in the output
    /// budget while kept. Others are freed.
    pub(crate) fn give_chunk(&mut self, buf: Vec<u8>) {
        if buf.len() == UPSTREAM_READ_BYTES
            && buf.capacity() == UPSTREAM_READ_BYTES
            && self.chunks.len() < UPSTREAM_CHUNKS_KEPT
        {
            self.output += buf.capacity();
            self.chunks.push(buf);
        }
    }

    /// A write buffer for an HTTP/2 connection, whose DATA frames are
    /// written into it: one that grew before if there is one.
    pub(crate) fn take_write_large(&mut self) -> Vec<u8> {
        match self.large_write.pop() {
            Some(buf) => buf,
            None => self.medium_write.pop().unwrap_or_else(|| self.take_write()),
        }
    }
}

/// Write buffers that grew (an HTTP/2 batch of DATA frames up to
/// `write_buffer_bytes_max`) are kept, a few per worker, up to this size:
/// a busy HTTP/2 connection then grows none per batch (measured: 3
/// allocations per 16 streams of 4 KiB answers before), and an idle worker
/// holds at most 8 × 1 MiB.
const LARGE_WRITE_BYTES_MAX: usize = 1024 * 1024;
const LARGE_WRITE_BUFFERS_MAX: usize = 8;
/// Write buffers that grew once or twice (HTTP/1.1: a pipelined batch of
/// answers past `BUFFER_BYTES`, as 16 archive answers of 1.2 KB) are kept
/// apart, and taken when no plain one is left: a pipelining connection
/// then grows none per batch. Before, each batch took a buffer, grew it
/// (a new allocation and a copy of its 16 KiB) and freed it, and the
/// plain pool, never given a 16 KiB buffer back, allocated another.
/// A batch's buffer comes back when it is written, so a few serve a
/// worker's pipelining clients; while a connection holds one, its size
/// counts against the output budget (`Conn::charge_output`), as any
/// write buffer's. An idle worker keeps at most 16 × 64 KiB of them.
const MEDIUM_WRITE_BYTES_MAX: usize = 4 * BUFFER_BYTES;
const MEDIUM_WRITE_BUFFERS_MAX: usize = 16;

/// Bytes read and not yet consumed: `buf[start..end]`. `buf` is empty (no
/// capacity, `start` and `end` 0) while the connection is idle. Requests are consumed by moving `start`; the
/// bytes are moved back to the front only when the buffer is full, never
/// per request.
#[derive(Default)]
pub(crate) struct Input {
    pub(crate) buf: Vec<u8>,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

impl Input {
    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Drops what is buffered (after an error, its framing is not trusted).
    pub(crate) fn discard(&mut self) {
        self.start = self.end;
    }
}

/// Bytes to send: `buf[pos..]`, then `tail`. `buf` is empty while idle.
/// The buffer first (`#[repr(C)]`): every answer writes it; the tail's
/// 80 bytes are read only when there is one.
#[derive(Default)]
#[repr(C)]
pub(crate) struct Output {
    pub(crate) buf: Vec<u8>,
    pub(crate) pos: usize,
    pub(crate) tail: Option<Tail>,
}

impl Output {
    /// Bytes queued in the buffer and not yet written.
    pub(crate) fn queued(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Everything queued is written and the rest of the body waits for
    /// the thread that writes it (`body::channel`).
    pub(crate) fn is_parked(&self) -> bool {
        self.pos >= self.buf.len()
            && matches!(&self.tail, Some(Tail::Stream { chunks, held: None, .. }) if chunks.is_parked())
    }

    /// Bytes this output holds against the output budget: its buffer,
    /// and a streamed body's chunk being written from its own.
    pub(crate) fn held_bytes(&self) -> usize {
        let chunk = match &self.tail {
            Some(Tail::Stream { held: Some(h), .. }) => h.data.capacity(),
            _ => 0,
        };
        self.buf.capacity() + chunk
    }
}

/// A large body sent after the bytes in the output buffer: by `writev`
/// (bytes), `sendfile` (files) or one chunk at a time (streams, taken from
/// their iterator or channel only once the chunk before has left).
pub(crate) enum Tail {
    Bytes {
        data: Vec<u8>,
        pos: usize,
    },
    Shared {
        bytes: SharedBytes,
        pos: usize,
    },
    File {
        range: FileRange,
        sent: u64,
    },
    /// `trailers`: the client takes trailer fields (`TE: trailers`), so
    /// a chunked body's go after its last chunk.
    ///
    /// `held`: the chunk being written, from its own buffer (HTTP/1.1
    /// over TCP or kernel TLS: `writev` of its framing in the output
    /// buffer, then its bytes, then its CRLF); `None` between chunks and
    /// under rustls, which copies the chunk into the output buffer.
    Stream {
        chunks: Chunks,
        chunked: bool,
        trailers: bool,
        held: Option<Held>,
    },
}

/// A streamed body's chunk written from where the producer left it, not
/// copied into the output buffer: `data`, then `end` (the chunk's CRLF
/// when chunked, else nothing). A 64 KiB chunk of a proxied answer cost
/// a memcpy and, on a 16 KiB write buffer, three reallocations as it
/// grew to 128 KiB.
pub(crate) struct Held {
    pub(crate) data: Vec<u8>,
    pub(crate) end: &'static [u8],
    /// Bytes of `data`, then of `end`, written.
    pub(crate) pos: usize,
}

impl Held {
    /// What is left to write: of the chunk, then of its end.
    pub(crate) fn rest(&self) -> (&[u8], &[u8]) {
        let n = self.data.len();
        if self.pos < n {
            (&self.data[self.pos..], self.end)
        } else {
            (&[], &self.end[self.pos - n..])
        }
    }

    /// Counts `n` more bytes written; true once all is.
    pub(crate) fn advance(&mut self, n: usize) -> bool {
        self.pos += n;
        self.pos >= self.data.len() + self.end.len()
    }
}

/// Gives `output` a buffer from the pool if it has none.
pub(crate) fn ensure_output(output: &mut Output, pool: &mut BufPool) {
    if output.buf.capacity() == 0 {
        output.buf = pool.take_write();
        output.pos = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write buffer that grew a little (a pipelined batch) is taken again
    /// once no plain one is left, instead of a new one grown again; at most
    /// `MEDIUM_WRITE_BUFFERS_MAX` are kept, and larger ones go to HTTP/2's.
    #[test]
    fn given_buffers_are_kept_to_the_bound_whether_the_stack_has_room_or_grows() {
        let mut pool = BufPool::default();
        // The first given into the hot slot (the inline path), the rest
        // into the stacks (out of line): each kept until the bound, which
        // counts the slot, the last one given taken first.
        for _ in 0..POOL_BUFFERS_MAX + 3 {
            pool.give_read(vec![0; BUFFER_BYTES]);
            pool.give_write(Vec::with_capacity(BUFFER_BYTES));
        }
        assert_eq!(pool.kept(), (POOL_BUFFERS_MAX, POOL_BUFFERS_MAX));
        assert!(pool.hot_read.is_some() && pool.hot_write.is_some());
        let mut w = pool.take_write();
        w.extend_from_slice(b"answer");
        let at = w.as_ptr();
        pool.give_write(w);
        let again = pool.take_write();
        assert_eq!((again.as_ptr(), again.len()), (at, 0), "the same buffer, emptied");
        let r = pool.take_read();
        let at = r.as_ptr();
        pool.give_read(r);
        let r_again = pool.take_read();
        assert_eq!(r_again.as_ptr(), at);
        // A buffer of another size is not kept.
        pool.give_read(vec![0; 100]);
        pool.give_write(Vec::with_capacity(100));
        assert_eq!(pool.kept(), (POOL_BUFFERS_MAX - 1, POOL_BUFFERS_MAX - 1));
        // With the hot slots empty, the stacks give.
        let (r, w) = (pool.take_read(), pool.take_write());
        assert!(pool.hot_read.is_none() && pool.hot_write.is_none());
        assert_eq!(pool.kept(), (POOL_BUFFERS_MAX - 2, POOL_BUFFERS_MAX - 2));
        pool.give_read(r);
        pool.give_write(w);
        assert!(pool.hot_read.is_some() && pool.hot_write.is_some());
        assert_eq!(pool.kept(), (POOL_BUFFERS_MAX - 1, POOL_BUFFERS_MAX - 1));
    }

    impl BufPool {
        /// Plain read and write buffers kept: the hot slots and the stacks.
        fn kept(&self) -> (usize, usize) {
            (
                self.read.len() + usize::from(self.hot_read.is_some()),
                self.write.len() + usize::from(self.hot_write.is_some()),
            )
        }
    }

    #[test]
    fn a_grown_write_buffer_is_taken_again_within_its_bound() {
        let mut pool = BufPool::default();
        let mut grown = pool.take_write();
        grown.extend_from_slice(&[0; BUFFER_BYTES + 1]);
        let capacity = grown.capacity();
        assert!(capacity > BUFFER_BYTES && capacity <= MEDIUM_WRITE_BYTES_MAX);
        pool.give_write(grown);
        let again = pool.take_write();
        assert_eq!(again.capacity(), capacity);
        assert!(again.is_empty());
        // A plain buffer comes first while there is one.
        pool.give_write(again);
        pool.give_write(Vec::with_capacity(BUFFER_BYTES));
        assert_eq!(pool.take_write().capacity(), BUFFER_BYTES);
        assert_eq!(pool.take_write().capacity(), capacity);
        // Past 64 KiB, HTTP/2's class.
        pool.give_write(Vec::with_capacity(MEDIUM_WRITE_BYTES_MAX + 1));
        assert_eq!((pool.medium_write.len(), pool.large_write.len()), (0, 1));
        // Bounded: past its bound, the large class takes them (HTTP/2
        // takes either, `take_write_large`), and past both they are freed.
        for _ in 0..MEDIUM_WRITE_BUFFERS_MAX + LARGE_WRITE_BUFFERS_MAX + 5 {
            pool.give_write(Vec::with_capacity(2 * BUFFER_BYTES));
        }
        assert_eq!(pool.medium_write.len(), MEDIUM_WRITE_BUFFERS_MAX);
        assert_eq!(pool.large_write.len(), LARGE_WRITE_BUFFERS_MAX);
    }

    /// The proxy's read buffers come back once written and are read into
    /// again: at most `UPSTREAM_CHUNKS_KEPT`, whole ones only (a shorter
    /// chunk would be read into short), each counted in the output
    /// budget while kept.
    #[test]
    fn kept_read_buffers_are_bounded_whole_and_counted_in_the_output_budget() {
        let mut pool = BufPool::default();
        let first = pool.take_chunk();
        assert_eq!(
            (first.len(), first.capacity()),
            (UPSTREAM_READ_BYTES, UPSTREAM_READ_BYTES)
        );
        assert_eq!(pool.output, 0, "a new one is counted where it goes, not here");
        let mut short = first.clone();
        short.truncate(100);
        pool.give_chunk(short);
        pool.give_chunk(b"a chunk of an application's".to_vec());
        assert_eq!((pool.chunks.len(), pool.output), (0, 0), "not a whole read buffer");
        for _ in 0..UPSTREAM_CHUNKS_KEPT + 3 {
            pool.give_chunk(vec![7; UPSTREAM_READ_BYTES]);
        }
        assert_eq!(pool.chunks.len(), UPSTREAM_CHUNKS_KEPT);
        assert_eq!(pool.output, UPSTREAM_CHUNKS_KEPT * UPSTREAM_READ_BYTES);
        let again = pool.take_chunk();
        assert_eq!(again.len(), UPSTREAM_READ_BYTES);
        assert_eq!(pool.output, (UPSTREAM_CHUNKS_KEPT - 1) * UPSTREAM_READ_BYTES);
    }

    /// A held chunk is written from where it is, then its end (the CRLF
    /// of a chunk), however the writes split it.
    #[test]
    fn a_held_chunk_gives_its_rest_then_its_end() {
        let mut held = Held {
            data: b"hello".to_vec(),
            end: b"\r\n",
            pos: 0,
        };
        assert_eq!(held.rest(), (&b"hello"[..], &b"\r\n"[..]));
        assert!(!held.advance(3));
        assert_eq!(held.rest(), (&b"lo"[..], &b"\r\n"[..]));
        assert!(!held.advance(3));
        assert_eq!(held.rest(), (&b""[..], &b"\n"[..]));
        assert!(held.advance(1));
        let mut plain = Held {
            data: b"ab".to_vec(),
            end: b"",
            pos: 0,
        };
        assert!(plain.advance(2));
        assert_eq!(plain.rest(), (&b""[..], &b""[..]));
    }
}
