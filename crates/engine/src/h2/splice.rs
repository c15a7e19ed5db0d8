//! DATA payloads sent from where they live: a response body that is
//! already in memory for good (a `Body::Static` literal, a `Body::Shared`
//! range of an archive or of the file cache) is not copied into the output
//! buffer. Its DATA frame's header goes into the buffer and the payload is
//! queued here as a slice, to leave with the buffer's bytes in one
//! `writev` (`conn/h2.rs`). Copying a 4 KiB body into the buffer was 13 %
//! of the server's CPU in h2load -c 50 -m 32 on a 4 KiB file (`perf`).
//!
//! Only on cleartext connections: under TLS the plaintext is copied into
//! rustls' records either way, and one `encrypt` call per piece would cut
//! records at every frame boundary.

use std::collections::VecDeque;
use std::io::IoSlice;

pub(crate) use crate::message::pending::Slice;

/// Bodies below this size are copied: an iovec and a reference count cost
/// more than copying a few hundred bytes, and small answers leave in one
/// piece with their HEADERS.
pub(crate) const SPLICE_BYTES_MIN: usize = 1024;

/// Bytes that go out after `buf[..at]` of the output buffer.
pub(crate) struct Spliced {
    at: usize,
    bytes: Slice,
}

/// The slices queued between the output buffer's bytes, in order. The
/// buffer must not be cleared or moved while any is queued: their places
/// are offsets into it.
#[derive(Default)]
pub(crate) struct Splices {
    list: VecDeque<Spliced>,
    /// Bytes of the slices not written yet.
    bytes: usize,
}

impl Splices {
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Bytes queued in slices (they count against the output budget).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Queues `bytes` to go out after `buf[..at]`.
    pub(crate) fn push(&mut self, at: usize, bytes: Slice) {
        debug_assert!(self.list.back().is_none_or(|s| s.at <= at));
        self.bytes += bytes.len();
        self.list.push_back(Spliced { at, bytes });
    }

    /// Fills `iov` with what is left to write, in order: `buf[pos..]` cut
    /// by the slices, at most `max` bytes. Returns how many entries were
    /// filled (fewer than everything if `iov` is too short or `max` is
    /// reached).
    pub(crate) fn gather<'a>(&'a self, buf: &'a [u8], pos: usize, iov: &mut [IoSlice<'a>], max: usize) -> usize {
        let mut at = pos;
        let mut k = 0;
        let mut room = max;
        let mut add = |iov: &mut [IoSlice<'a>], k: &mut usize, piece: &'a [u8]| {
            let piece = &piece[..piece.len().min(room)];
            room -= piece.len();
            iov[*k] = IoSlice::new(piece);
            *k += 1;
            room == 0
        };
        for s in &self.list {
            if k + 2 > iov.len() {
                return k;
            }
            if s.at > at {
                if add(iov, &mut k, &buf[at..s.at]) {
                    return k;
                }
                at = s.at;
            }
            if add(iov, &mut k, s.bytes.as_slice()) {
                return k;
            }
        }
        if at < buf.len() && k < iov.len() {
            add(iov, &mut k, &buf[at..]);
        }
        k
    }

    /// Marks `n` bytes written, in `gather`'s order: moves `pos` through
    /// the buffer and drops or shortens the slices.
    pub(crate) fn advance(&mut self, pos: &mut usize, mut n: usize) {
        while n > 0 {
            match self.list.front_mut() {
                Some(s) if *pos >= s.at => {
                    let len = s.bytes.len();
                    if n >= len {
                        n -= len;
                        self.bytes -= len;
                        self.list.pop_front();
                    } else {
                        s.bytes.advance(n);
                        self.bytes -= n;
                        n = 0;
                    }
                }
                Some(s) => {
                    let k = n.min(s.at - *pos);
                    *pos += k;
                    n -= k;
                }
                None => {
                    *pos += n;
                    n = 0;
                }
            }
        }
    }

    /// The bytes `buf[pos..]` and the slices stand for, in order, appended
    /// to `into` (tests compare them with what copying would have sent).
    #[cfg(test)]
    pub(crate) fn flatten(&self, buf: &[u8], pos: usize, into: &mut Vec<u8>) {
        let mut at = pos;
        for s in &self.list {
            into.extend_from_slice(&buf[at..s.at]);
            into.extend_from_slice(s.bytes.as_slice());
            at = s.at;
        }
        into.extend_from_slice(&buf[at..]);
    }

    /// Forgets every slice (the buffer was cleared: tests only).
    #[cfg(test)]
    pub(crate) fn clear(&mut self) {
        self.list.clear();
        self.bytes = 0;
    }
}
