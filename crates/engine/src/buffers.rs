//! A connection's buffers: bytes read and not yet consumed (`Input`), bytes
//! to write (`Output`, with an optional large `Tail` after them), and the
//! worker's pool they are lent from. The protocol machines read from an
//! `Input` and queue into an `Output`; only the driver touches the socket.

use crate::body::Chunks;
use crate::limits::{BUFFER_BYTES, H2_READ_BYTES, POOL_BUFFERS_MAX};
use crate::response::{FileRange, SharedBytes};

/// A worker's spare buffers. Read buffers keep their full length (their
/// bytes are initialised, with whatever the last connection left in them)
/// so reads need no `unsafe`; write buffers are kept empty.
#[derive(Default)]
pub(crate) struct BufPool {
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
}

impl BufPool {
    /// Bytes held against the output budget: queued answers and the
    /// proxy's read-ahead.
    pub(crate) fn output_held(&self) -> usize {
        self.output + self.read_ahead.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl BufPool {
    pub(crate) fn take_read(&mut self) -> Vec<u8> {
        self.read.pop().unwrap_or_else(|| vec![0; BUFFER_BYTES])
    }

    pub(crate) fn take_write(&mut self) -> Vec<u8> {
        match self.write.pop() {
            Some(buf) => buf,
            None => self.take_write_grown(),
        }
    }

    /// `take_write` with no plain buffer left: one that grew, else a new
    /// one. Out of line: inlined, its branch cost every HTTP/1.1 batch
    /// 6 to 9 instructions in the driver's code (callgrind, c50 rows).
    #[inline(never)]
    fn take_write_grown(&mut self) -> Vec<u8> {
        self.medium_write
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BUFFER_BYTES))
    }

    pub(crate) fn take_h2_read(&mut self) -> Vec<u8> {
        self.h2_read.pop().unwrap_or_else(|| vec![0; H2_READ_BYTES])
    }

    pub(crate) fn give_read(&mut self, buf: Vec<u8>) {
        if buf.len() == BUFFER_BYTES && self.read.len() < POOL_BUFFERS_MAX {
            self.read.push(buf);
        } else if buf.len() == H2_READ_BYTES && self.h2_read.len() < POOL_BUFFERS_MAX {
            self.h2_read.push(buf);
        }
    }

    pub(crate) fn give_write(&mut self, mut buf: Vec<u8>) {
        buf.clear();
        if buf.capacity() == BUFFER_BYTES && self.write.len() < POOL_BUFFERS_MAX {
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

/// Bytes read and not yet consumed: `buf[start..end]`. `buf` is empty while
/// the connection is idle. Requests are consumed by moving `start`; the
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
#[derive(Default)]
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
        self.pos >= self.buf.len() && matches!(&self.tail, Some(Tail::Stream { chunks, .. }) if chunks.is_parked())
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
    Stream {
        chunks: Chunks,
        chunked: bool,
        trailers: bool,
    },
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
}
