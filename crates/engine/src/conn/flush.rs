//! The I/O side of a connection, shared by HTTP/1.1 and HTTP/2: writing
//! what the protocol queued (plain `write`/`writev`, `sendfile` after a
//! head sent with MSG_MORE, or TLS records), and the lingering close after an error.

use super::*;
use crate::h1::{self, Piece};
use crate::tls::ktls::Handover;

impl Conn {
    /// Writes what is queued until done or the socket is full. The
    /// common case, answers in the buffer and nothing after them over
    /// plain TCP, in the caller's code, without the tails' and
    /// transports' tests; the rest out of line.
    #[inline(always)]
    pub(super) fn flush(&mut self, pool: &mut BufPool) -> Flushed {
        if let (Transport::Plain, None, false) = (&self.transport, &self.output.tail, self.proto.is_h2()) {
            return self.flush_buffered();
        }
        self.flush_other(pool)
    }

    /// `flush` of a tail, TLS or HTTP/2.
    #[inline(never)]
    fn flush_other(&mut self, pool: &mut BufPool) -> Flushed {
        if let Transport::Tls(tls) = &self.transport {
            // Under kernel TLS (`tls/ktls.rs`) the socket takes plaintext:
            // the plain path below, sendfile included.
            if !tls.is_kernel() {
                return self.flush_tls(pool);
            }
        }
        if self.proto.is_h2() {
            // Frames, and DATA payloads as slices, by writev (conn/h2.rs).
            return self.flush_h2();
        }
        let out = &mut self.output;
        let mut progress = false;
        loop {
            let buffered = &out.buf[out.pos.min(out.buf.len())..];
            if out.tail.is_none() && buffered.is_empty() {
                out.buf.clear();
                out.pos = 0;
                return Flushed::All;
            }
            if !take_syscall(&mut self.work_left) {
                return Flushed::Turn;
            }
            let result = match (&mut out.tail, buffered.is_empty()) {
                (None, true) => unreachable!("checked above"),
                // A streamed body's chunk, from its own buffer: its
                // framing (or the head before it) in the output buffer,
                // the chunk, its CRLF, in one writev.
                (Some(Tail::Stream { held: Some(h), .. }), _) => {
                    let (data, end) = h.rest();
                    self.stream
                        .write_vectored(&[IoSlice::new(buffered), IoSlice::new(data), IoSlice::new(end)])
                }
                (Some(Tail::Bytes { data, pos }), false) => self
                    .stream
                    .write_vectored(&[IoSlice::new(buffered), IoSlice::new(&data[*pos..])]),
                (Some(Tail::Shared { bytes, pos }), false) => {
                    let rest = &bytes.as_slice()[*pos..];
                    self.stream
                        .write_vectored(&[IoSlice::new(buffered), IoSlice::new(rest)])
                }
                // The head before a file goes with MSG_MORE: the kernel
                // holds it to leave in the same segment as the file's
                // first bytes, which sendfile sends next (what TCP_CORK
                // did, as nginx's tcp_nopush, without its two
                // setsockopt calls per file).
                (Some(Tail::File { .. }), false) => crate::sys::socket::send_more(&self.stream, buffered),
                (_, false) => self.stream.write(buffered),
                (Some(Tail::Bytes { data, pos }), true) => self.stream.write(&data[*pos..]),
                (Some(Tail::Shared { bytes, pos }), true) => self.stream.write(&bytes.as_slice()[*pos..]),
                (Some(Tail::File { range, sent }), true) => {
                    match crate::sys::sendfile::sendfile(
                        &self.stream,
                        &range.file,
                        range.offset + *sent,
                        range.len - *sent,
                    ) {
                        // The file shrank under us: the promised length can no
                        // longer be sent, so the connection must close.
                        Ok(0) => return Flushed::Failed,
                        other => other,
                    }
                }
                (
                    Some(Tail::Stream {
                        chunks,
                        chunked,
                        trailers,
                        held,
                    }),
                    true,
                ) => {
                    out.buf.clear();
                    out.pos = 0;
                    // A parked connection gave its buffer back.
                    if out.buf.capacity() == 0 {
                        out.buf = pool.take_write();
                    }
                    // The next chunk is taken only now that the one before
                    // has left: a producer on another thread is held back
                    // by its channel's capacity, not by this buffer.
                    match h1::next_piece(chunks, *chunked, *trailers, &mut out.buf, Some(held)) {
                        Piece::Queued => {}
                        Piece::Ended => out.tail = None,
                        // Everything so far is written; the producer wakes
                        // the connection when it has more.
                        Piece::Wait => return Flushed::Parked,
                        // The application's iterator panicked, or the
                        // producer aborted: the body can no longer be
                        // completed, so the connection closes before its
                        // end.
                        Piece::Failed => return Flushed::Failed,
                    }
                    continue;
                }
            };
            match result {
                Ok(0) => return Flushed::Failed,
                Ok(mut n) => {
                    progress = true;
                    self.bytes_out += n as u64;
                    let from_buf = n.min(out.buf.len() - out.pos);
                    out.pos += from_buf;
                    n -= from_buf;
                    let done = match &mut out.tail {
                        Some(Tail::Bytes { data, pos }) => {
                            *pos += n;
                            *pos == data.len()
                        }
                        Some(Tail::Shared { bytes, pos }) => {
                            *pos += n;
                            *pos == bytes.range.len()
                        }
                        Some(Tail::File { range, sent }) => {
                            *sent += n as u64;
                            *sent == range.len
                        }
                        Some(Tail::Stream { held, .. }) => {
                            // A chunk written whole goes back to the pool
                            // (the proxy's read buffers are read into again).
                            if held.as_mut().is_some_and(|h| h.advance(n)) {
                                if let Some(h) = held.take() {
                                    pool.give_chunk(h.data);
                                }
                            }
                            false
                        }
                        None => false,
                    };
                    if done {
                        out.tail = None;
                    }
                    if out.pos == out.buf.len() {
                        out.buf.clear();
                        out.pos = 0;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Flushed::Blocked { progress },
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Flushed::Failed,
            }
        }
    }

    /// `flush` over plain TCP with no tail: the output buffer, in as
    /// many writes as the socket takes, as the general loop would. The
    /// first write, which nearly always takes the whole buffer (an answer,
    /// or a pipelined batch's), is tested inline; the loop for a partial
    /// write is out of line: inlined, its state held in stack slots cost
    /// every c50 answer 10 instructions (callgrind, hello-c50).
    #[inline(always)]
    fn flush_buffered(&mut self) -> Flushed {
        let out = &mut self.output;
        let buffered = &out.buf[out.pos.min(out.buf.len())..];
        if buffered.is_empty() {
            out.buf.clear();
            out.pos = 0;
            return Flushed::All;
        }
        if !take_syscall(&mut self.work_left) {
            return Flushed::Turn;
        }
        let len = buffered.len();
        match self.stream.write(buffered) {
            Ok(n) if n == len => {
                self.bytes_out += n as u64;
                out.buf.clear();
                out.pos = 0;
                Flushed::All
            }
            first => self.flush_buffered_rest(first),
        }
    }

    /// `flush_buffered` after its first write, whatever it did but take
    /// the whole buffer: the same loop.
    #[inline(never)]
    fn flush_buffered_rest(&mut self, first: io::Result<usize>) -> Flushed {
        let out = &mut self.output;
        let mut progress = false;
        let mut result = Some(first);
        loop {
            let buffered = &out.buf[out.pos.min(out.buf.len())..];
            if buffered.is_empty() {
                out.buf.clear();
                out.pos = 0;
                return Flushed::All;
            }
            let written = match result.take() {
                Some(first) => first,
                None => {
                    if !take_syscall(&mut self.work_left) {
                        return Flushed::Turn;
                    }
                    self.stream.write(buffered)
                }
            };
            match written {
                Ok(0) => return Flushed::Failed,
                Ok(n) => {
                    progress = true;
                    self.bytes_out += n as u64;
                    out.pos += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Flushed::Blocked { progress },
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Flushed::Failed,
            }
        }
    }

    /// Under TLS: encrypts queued plaintext while rustls has room
    /// (`TLS_SEND_BYTES_MAX`), writes the records, until done or the socket
    /// is full. A batch of pipelined answers is one record and one write.
    pub(super) fn flush_tls(&mut self, pool: &mut BufPool) -> Flushed {
        let closing = self.is_closing() && !self.is_sending();
        let h1 = matches!(self.proto, Proto::H1(_));
        let Transport::Tls(tls) = &mut self.transport else {
            unreachable!("called for TLS only")
        };
        let out = &mut self.output;
        let mut progress = false;
        let mut scratch: Vec<u8> = Vec::new();
        let mut to_kernel = false;
        let flushed = loop {
            // The kTLS hook (`tls/ktls.rs`): before a large file, the
            // records may go to the kernel; then `flush` sends the rest as
            // over TCP (the head with MSG_MORE, the file by sendfile).
            let hold = match kernel_handover(tls, out, h1, &self.stream, self.peer) {
                Handover::Done => {
                    to_kernel = true;
                    break Flushed::All;
                }
                Handover::Failed => break Flushed::Failed,
                // Nothing more for rustls: what it holds goes out first.
                Handover::AfterSending => true,
                Handover::No => false,
            };
            if !hold && !encrypt(tls, out, pool, &mut scratch) {
                break Flushed::Failed;
            }
            // The connection's last answer is all encrypted: its
            // close_notify goes in the same write, not one of its own
            // (`start_lingering` follows; `close` sends it only once).
            if closing && out.tail.is_none() && out.pos >= out.buf.len() && !out.is_parked() {
                tls.notify_close();
            }
            if !tls.wants_write() {
                if out.tail.is_none() && out.pos >= out.buf.len() {
                    out.buf.clear();
                    out.pos = 0;
                    break Flushed::All;
                }
                if out.is_parked() {
                    break Flushed::Parked;
                }
                // rustls took nothing and has nothing to send: only while
                // a handshake waits for the client. Wait for an event.
                break Flushed::Blocked { progress };
            }
            if self.work_left < SYSCALL_WORK {
                break Flushed::Turn;
            }
            self.work_left -= SYSCALL_WORK;
            match tls.write_tls(&mut self.stream) {
                Ok(0) => break Flushed::Failed,
                Ok(n) => {
                    progress = true;
                    self.bytes_out += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Flushed::Blocked { progress },
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break Flushed::Failed,
            }
        };
        if !scratch.is_empty() {
            pool.give_read(scratch);
        }
        if to_kernel {
            return self.flush(pool);
        }
        flushed
    }

    /// All output is sent after an error: half-close and drain.
    #[cold]
    #[inline(never)]
    pub(super) fn start_lingering(&mut self, ctx: &mut Ctx<'_>) -> Next {
        if let Transport::Tls(tls) = &mut self.transport {
            // close_notify before the FIN, as TLS asks (RFC 8446 §6.1).
            tls.close(&mut self.stream);
        }
        if self.peer_closed || self.stream.shutdown(Shutdown::Write).is_err() {
            return Next::Close;
        }
        // Nothing more will be written: stop waking up for writability.
        if !self.stop_writable_interest(ctx) {
            return Next::Close;
        }
        self.phase = Phase::Lingering { discarded: 0 };
        self.deadline = Some(ctx.now + LINGER_TIMEOUT);
        self.input.start = 0;
        self.input.end = 0;
        self.linger(ctx)
    }

    pub(super) fn linger(&mut self, ctx: &mut Ctx<'_>) -> Next {
        let Phase::Lingering { discarded } = &mut self.phase else {
            return Next::Close;
        };
        if self.input.buf.is_empty() {
            self.input.buf = ctx.pool.take_read();
        }
        loop {
            match self.stream.read(&mut self.input.buf) {
                Ok(0) => return Next::Close,
                Ok(n) => {
                    *discarded += n;
                    if *discarded > LINGER_BYTES_MAX {
                        return Next::Close;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Next::Close,
            }
        }
        self.give_input(ctx.pool);
        Next::Keep
    }
}

/// Whether an HTTP/1.1 answer's file body of `BODY_BYTES_MIN` or more is
/// next and its records go to the kernel (`TlsSession::give_to_kernel`).
fn kernel_handover(tls: &mut TlsSession, out: &Output, h1: bool, stream: &Stream, peer: SocketAddr) -> Handover {
    if !tls.listener.ktls || !h1 {
        return Handover::No;
    }
    match &out.tail {
        Some(Tail::File { range, sent }) if range.len - *sent >= crate::tls::ktls::BODY_BYTES_MIN => {
            tls.give_to_kernel(stream, peer)
        }
        _ => Handover::No,
    }
}

/// Feeds queued plaintext (buffer, then tail) to rustls until it is all
/// taken or rustls' outgoing buffer is full. False if the response cannot
/// be completed (the file shrank or failed, the stream panicked).
pub(super) fn encrypt(tls: &mut TlsSession, out: &mut Output, pool: &mut BufPool, scratch: &mut Vec<u8>) -> bool {
    loop {
        if out.pos < out.buf.len() {
            // A head with its body outside the buffer (in memory, or a
            // file read here: sendfile cannot carry records made in user
            // space) goes to rustls in one write with the body's first
            // bytes, so that they share a record: a head sealed alone is
            // one more AEAD seal, 22 more bytes and one more allocation of
            // rustls' per answer.
            let head = &out.buf[out.pos..];
            let Some(body) = body_start(&out.tail, head.len(), pool, scratch) else {
                return false;
            };
            let n = if body.is_empty() {
                tls.encrypt(head)
            } else {
                tls.encrypt_vectored(&[IoSlice::new(head), IoSlice::new(body)])
            };
            let offered = head.len() + body.len();
            let from_head = n.min(head.len());
            out.pos += from_head;
            if n > from_head && advance_tail(&mut out.tail, n - from_head) {
                out.tail = None;
            }
            // rustls' outgoing buffer is full: send first.
            if n < offered {
                return true;
            }
        }
        out.buf.clear();
        out.pos = 0;
        let done = match &mut out.tail {
            None => return true,
            Some(Tail::Bytes { data, pos }) => {
                *pos += tls.encrypt(&data[*pos..]);
                if *pos < data.len() {
                    return true;
                }
                true
            }
            Some(Tail::Shared { bytes, pos }) => {
                *pos += tls.encrypt(&bytes.as_slice()[*pos..]);
                if *pos < bytes.range.len() {
                    return true;
                }
                true
            }
            Some(Tail::File { range, sent }) => {
                if scratch.is_empty() {
                    *scratch = pool.take_read();
                }
                let want = usize::try_from(range.len - *sent).map_or(scratch.len(), |n| n.min(scratch.len()));
                let got = match range.file.read_at(&mut scratch[..want], range.offset + *sent) {
                    // The file shrank under us: the promised length can no
                    // longer be sent, so the connection must close.
                    Ok(0) => return false,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => return false,
                };
                // Bytes rustls does not take now are read again next time.
                let n = tls.encrypt(&scratch[..got]);
                *sent += n as u64;
                if n < got {
                    return true;
                }
                *sent == range.len
            }
            // As in `flush`: a chunk once the one before is encrypted.
            // rustls copies what it seals: the chunk is copied into the
            // output buffer (no `held`).
            Some(Tail::Stream {
                chunks,
                chunked,
                trailers,
                held: _,
            }) => {
                // A parked connection gave its buffer back.
                if out.buf.capacity() == 0 {
                    out.buf = pool.take_write();
                }
                match h1::next_piece(chunks, *chunked, *trailers, &mut out.buf, None) {
                    Piece::Queued => false,
                    Piece::Ended => true,
                    // Parked: `flush_tls` sees it once rustls has written.
                    Piece::Wait => return true,
                    Piece::Failed => return false,
                }
            }
        };
        if done {
            out.tail = None;
        }
    }
}

/// Plaintext bytes in one TLS record at most: "The length (in bytes) of
/// the following TLSPlaintext.fragment. The length MUST NOT exceed 2^14
/// bytes." (RFC 8446 §5.1; rustls makes records this full.)
const RECORD_PLAINTEXT_BYTES_MAX: usize = 16 * 1024;

/// The first bytes of a body waiting behind a head of `head_len` bytes,
/// as one slice: an in-memory tail's rest, or a file's next bytes read
/// into `scratch`, as many as fill the head's last record (then each read
/// of `scratch`, 16 KiB, fills one record; bytes rustls does not take are
/// read again). Empty for no tail or a stream (its chunks are queued one
/// at a time); `None` if the file cannot be read or shrank, so the
/// response cannot be completed.
fn body_start<'a>(
    tail: &'a Option<Tail>,
    head_len: usize,
    pool: &mut BufPool,
    scratch: &'a mut Vec<u8>,
) -> Option<&'a [u8]> {
    match tail {
        Some(Tail::Bytes { data, pos }) => Some(&data[*pos..]),
        Some(Tail::Shared { bytes, pos }) => Some(&bytes.as_slice()[*pos..]),
        Some(Tail::File { range, sent }) => {
            if scratch.is_empty() {
                *scratch = pool.take_read();
            }
            let room = RECORD_PLAINTEXT_BYTES_MAX - head_len % RECORD_PLAINTEXT_BYTES_MAX;
            let want = usize::try_from(range.len - *sent).map_or(scratch.len(), |n| n.min(scratch.len()).min(room));
            loop {
                match range.file.read_at(&mut scratch[..want], range.offset + *sent) {
                    // The file shrank under us: the promised length can
                    // no longer be sent.
                    Ok(0) if want > 0 => return None,
                    Ok(n) => return Some(&scratch[..n]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return None,
                }
            }
        }
        Some(Tail::Stream { .. }) | None => Some(&[]),
    }
}

/// Counts `n` more bytes of the tail as encrypted; true when it is all.
fn advance_tail(tail: &mut Option<Tail>, n: usize) -> bool {
    match tail {
        Some(Tail::Bytes { data, pos }) => {
            *pos += n;
            *pos == data.len()
        }
        Some(Tail::Shared { bytes, pos }) => {
            *pos += n;
            *pos == bytes.range.len()
        }
        Some(Tail::File { range, sent }) => {
            *sent += n as u64;
            *sent == range.len
        }
        Some(Tail::Stream { .. }) | None => false,
    }
}
