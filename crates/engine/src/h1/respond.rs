//! Queueing one HTTP/1.1 response: its head into the output buffer, its
//! body inline (small) or as the output's tail (large, sent by the driver
//! with writev or sendfile, or one chunk at a time).

use std::borrow::Cow;
use std::cell::RefCell;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Weak};

use crate::body::{Chunks, Next};
use crate::buffers::{Held, Output, Tail};
use crate::codec::write::{self as wire, BodyFraming, ConnField};
use crate::codec::Version;
use crate::date::DATE_LEN;
use crate::limits::INLINE_BODY_BYTES_MAX;
use crate::response::{Body, HeaderBlock, Response, SharedBytes};

/// What was sent, for the log and the connection state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sent {
    pub(crate) status: u16,
    pub(crate) body_bytes: u64,
    pub(crate) keep_alive: bool,
}

/// A handler's invalid response becomes a 500 that closes, logged. Out of
/// line: inlined, the log call's formatting sat as a 558-byte gap in the
/// answer's hot code (bench/runs/2026-11-27-req6).
#[cold]
#[inline(never)]
fn refuse_invalid(resp: &mut Response, why: crate::response::Invalid) {
    crate::log::error(format_args!(
        "handler returned an invalid response ({why}); answering 500"
    ));
    *resp = Response::error(500)
        .with_close()
        .with_reason(crate::access_log::Reason::InvalidResponse);
}

/// Queues a response: its head, and its body inline or as the tail.
/// `extra_fields` (complete `Name: value\r\n` lines, from the transport)
/// go at the end of the head unless the handler set the same field.
///
/// The response is taken by reference (its body is moved out) so that the
/// large struct is not copied on its way down (memcpy was 1-2 % of a
/// pipelined hello's CPU).
pub(crate) fn write_response(
    date: &[u8],
    out: &mut Output,
    resp: &mut Response,
    head_only: bool,
    version: Version,
    keep_alive: bool,
    extra_fields: &[u8],
) -> Sent {
    if let Some(why) = resp.invalid {
        refuse_invalid(resp, why);
    }
    let status = resp.status;
    let bodiless = status == 204 || status == 304;
    let mut keep_alive = keep_alive && !resp.close;
    let framing = match resp.body.len() {
        _ if bodiless => BodyFraming::Bodiless,
        Some(n) => BodyFraming::Length(n),
        None if version == Version::Http11 => BodyFraming::Chunked,
        None => {
            keep_alive = false;
            BodyFraming::Close
        }
    };
    let conn = match (keep_alive, version) {
        (false, _) => ConnField::Close,
        (true, Version::Http10) => ConnField::KeepAlive,
        (true, Version::Http11 | Version::Http2 | Version::Http3) => ConnField::Omit,
    };
    let head_start = out.buf.len();
    // Whether the body went out with the head, from the cache.
    let mut body_written = false;
    match (
        HeadKey::of(resp, framing, conn, extra_fields, head_only),
        <&[u8; DATE_LEN]>::try_from(date),
    ) {
        (Some(key), Ok(date)) => LAST_HEAD.with_borrow_mut(|last| {
            // The date is compared where the worker's cache keeps it, not
            // copied into the key: the copy's wide loads over its narrow
            // stores stalled (store forwarding), 1.6 % of a pipelined
            // hello's CPU (perf annotate of `answer_with`).
            if last.key == key && last.date == *date {
                out.buf.extend_from_slice(&last.bytes);
                body_written = key.body != HeadKey::NO_BODY;
            } else if last.seen != key {
                // A head unlike the last one written is not kept: kept, a
                // server answering other files in turn paid the copies on
                // every answer and copied none back (+160 Ir a request,
                // two archive entries in turn).
                wire::write_head(&mut out.buf, resp, date, framing, conn);
                last.seen = key;
            } else {
                // The second head in a row with this key (or the first of
                // a new date): kept, with the body when its bytes are
                // fixed (`HeadKey::body`), so that a hit is one copy
                // (callgrind c50: hello 1,960 -> 1,939 instructions a
                // request, archive 2,562 -> 2,537).
                wire::write_head(&mut out.buf, resp, date, framing, conn);
                if key.body != HeadKey::NO_BODY {
                    if let Some((_, bytes)) = resp.fixed_body() {
                        out.buf.extend_from_slice(bytes);
                        body_written = true;
                    }
                }
                last.bytes.clear();
                last.bytes.extend_from_slice(&out.buf[head_start..]);
                // The block's allocation is held (not its bytes: a `Weak`)
                // while its place is in the key, so no other block can be
                // given that address meanwhile; yet an archive generation
                // whose block this was is unmapped when its last answer
                // goes. A block whose buffer is refilled in place (the
                // proxy's) has no key: held, its refill would fail. The
                // hold replaced a compare of the block's bytes on every
                // hit (80-95 Ir an archive or file answer, callgrind).
                last.block = resp.block.as_ref().map(HeaderBlock::hold);
                last.key = key;
                last.date = *date;
            }
        }),
        // A relayed answer (the proxy's: its fields in a block refilled
        // in place, which the cache above never keeps) with its short
        // body beside them: written here in one pass.
        (None, Ok(date)) if is_relayed(resp, framing, conn, extra_fields, head_only) => {
            write_relayed(&mut out.buf, resp, date, framing);
            body_written = true;
        }
        _ => wire::write_head(&mut out.buf, resp, date, framing, conn),
    }
    if !extra_fields.is_empty() {
        // Before the blank line that ends the head: each line of the
        // transport's (HSTS, Alt-Svc) whose field the handler did not set.
        out.buf.truncate(out.buf.len() - 2);
        let given = resp.sets_lines(extra_fields);
        if given == 0 {
            out.buf.extend_from_slice(extra_fields);
        } else {
            let lines = extra_fields.split_inclusive(|&b| b == b'\n');
            for (i, line) in lines.enumerate() {
                if i >= 32 || given & (1 << i) == 0 {
                    out.buf.extend_from_slice(line);
                }
            }
        }
        out.buf.extend_from_slice(b"\r\n");
    }
    let body_bytes = match framing {
        BodyFraming::Length(n) if !head_only => n,
        _ => 0,
    };
    let sent = Sent {
        status,
        body_bytes,
        keep_alive,
    };
    if head_only || bodiless || body_written {
        return sent;
    }
    match resp.take_body() {
        // `take_body` gives a body beside the block as `Shared`.
        Body::Empty | Body::BesideBlock(_) => {}
        Body::Static(b) if b.len() <= INLINE_BODY_BYTES_MAX => out.buf.extend_from_slice(b),
        Body::Static(b) => {
            out.tail = Some(Tail::Shared {
                bytes: SharedBytes::new(Arc::new(b)),
                pos: 0,
            })
        }
        Body::Bytes(b) if b.len() <= INLINE_BODY_BYTES_MAX => out.buf.extend_from_slice(&b),
        Body::Bytes(b) => out.tail = Some(Tail::Bytes { data: b, pos: 0 }),
        Body::Shared(s) if s.range.len() <= INLINE_BODY_BYTES_MAX => out.buf.extend_from_slice(s.as_slice()),
        Body::Shared(s) => out.tail = Some(Tail::Shared { bytes: s, pos: 0 }),
        Body::File(f) if f.len <= INLINE_BODY_BYTES_MAX as u64 => {
            // Small files: read them next to the head, so both leave in one
            // write instead of a write and a sendfile.
            let at = out.buf.len();
            out.buf.resize(at + f.len as usize, 0);
            if f.file.read_exact_at(&mut out.buf[at..], f.offset).is_err() {
                out.buf.truncate(head_start);
                let body_bytes = wire::write_error(&mut out.buf, 500, "file could not be read", date, false);
                return Sent {
                    status: 500,
                    body_bytes,
                    keep_alive: false,
                };
            }
        }
        Body::File(f) => out.tail = Some(Tail::File { range: f, sent: 0 }),
        Body::Stream(chunks) => {
            out.tail = Some(Tail::Stream {
                chunks: Chunks::Iter(chunks),
                chunked: framing == BodyFraming::Chunked,
                trailers: false,
                held: None,
            });
        }
        Body::Channel(rx) => {
            out.tail = Some(Tail::Stream {
                chunks: Chunks::Channel(rx),
                chunked: framing == BodyFraming::Chunked,
                trailers: false,
                held: None,
            });
        }
    }
    sent
}

/// Whether `write_relayed` writes this answer: a 200 of an HTTP/1.1
/// keep-alive exchange whose only fields are its header block, with a
/// short body beside the block (`Response::prepared_beside`, as the
/// proxy relays an upstream's answer), not to a HEAD, and no transport
/// fields to add. Any other goes through `write_head`.
#[inline(always)]
fn is_relayed(resp: &Response, framing: BodyFraming, conn: ConnField, extra_fields: &[u8], head_only: bool) -> bool {
    resp.status == 200
        && conn == ConnField::Omit
        && extra_fields.is_empty()
        && !head_only
        && resp.headers.is_empty()
        && resp.content_type.is_none()
        && resp.block.is_some()
        && matches!(&resp.body, Body::BesideBlock(b) if b.len() <= INLINE_BODY_BYTES_MAX && framing == BodyFraming::Length(b.len() as u64))
}

/// The head `write_head` spells for a response `is_relayed` accepts, and
/// its body after it: one reservation for all of it, the pieces in
/// `write_head`'s order (status line, `Server`, `Date`, `Content-Length`,
/// the block's lines, the blank line). A proxied GET's answer went
/// through `write_head`'s general path and the body's own branch (the
/// test `a_relayed_answer_is_what_write_head_spells_with_its_body` pins
/// the two to the same bytes).
#[inline(always)]
fn write_relayed(out: &mut Vec<u8>, resp: &mut Response, date: &[u8; DATE_LEN], framing: BodyFraming) {
    let Some(block) = resp.block.as_ref() else { return };
    let lines = block.as_bytes();
    let BodyFraming::Length(n) = framing else { return };
    // The status line with `Server` and `Date`'s name (46 bytes), the date,
    // `Content-Length` at its longest (38), two line ends.
    out.reserve(46 + DATE_LEN + 38 + 4 + lines.len() + n as usize);
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\nServer: peregrine\r\nDate: ");
    out.extend_from_slice(date);
    out.extend_from_slice(b"\r\n");
    wire::write_length(out, n);
    out.extend_from_slice(lines);
    out.extend_from_slice(b"\r\n");
    // `take_body` gives a body beside the block as `Shared`.
    if let Body::Shared(s) = resp.take_body() {
        out.extend_from_slice(s.as_slice());
    }
}

/// The whole answer `write_response` writes for the proxy's one-pass
/// relay (`proxy::pool::Relayed`, whose `Response` is `prepared_beside`
/// with its fields' block and a short body, no other field, a status
/// with a body), to a request that is not a HEAD, with no transport
/// fields: the head's first lines as `write_head` spells them (status
/// line, `Server`, `Date`, `Content-Length: body_len`, `Connection` as
/// `keep_alive` and `version` make it), then `rest`, the relayed field
/// lines, the blank line and the body, in one copy. Through
/// `write_response` it was the `Response`'s build, moves, checks and
/// drop, the head cache's key, the body's take and three copies (the
/// test `a_relayed_answer_written_whole_is_what_write_response_writes`
/// pins the two to the same bytes).
#[inline(always)]
pub(crate) fn write_relayed_whole(
    out: &mut Vec<u8>,
    date: &[u8; DATE_LEN],
    status: u16,
    (keep_alive, version): (bool, Version),
    body_len: usize,
    rest: &[u8],
) {
    if status != 200 {
        out.reserve(HEAD_FIRST_MAX + rest.len());
        wire::write_status_line(out, status);
        out.extend_from_slice(b"Server: peregrine\r\nDate: ");
        out.extend_from_slice(date);
        out.extend_from_slice(b"\r\n");
        wire::write_length(out, body_len as u64);
        write_conn_of(out, keep_alive, version);
        out.extend_from_slice(rest);
        return;
    }
    // A 200's first lines put together on the stack, each piece a copy of
    // a length known when compiling, and appended at once: appended piece
    // by piece, each was a call (four, and `write_length`'s, about 200
    // instructions of a proxied GET, callgrind `proxy-c50`).
    const FIRST: &[u8; 42] = b"HTTP/1.1 200 OK\r\nServer: peregrine\r\nDate: ";
    const DATE_AT: usize = FIRST.len();
    const LENGTH_AT: usize = DATE_AT + DATE_LEN + 2;
    let mut head = [0u8; HEAD_FIRST_MAX];
    head[..DATE_AT].copy_from_slice(FIRST);
    head[DATE_AT..DATE_AT + DATE_LEN].copy_from_slice(date);
    head[LENGTH_AT - 2..LENGTH_AT].copy_from_slice(b"\r\n");
    let line: &mut [u8; 38] = (&mut head[LENGTH_AT..LENGTH_AT + 38]).try_into().expect("38 bytes");
    let mut at = LENGTH_AT + wire::length_line(line, body_len as u64);
    match (keep_alive, version) {
        (true, Version::Http10) => {
            head[at..at + 24].copy_from_slice(b"Connection: keep-alive\r\n");
            at += 24;
        }
        (true, _) => {}
        (false, _) => {
            head[at..at + 19].copy_from_slice(b"Connection: close\r\n");
            at += 19;
        }
    }
    out.reserve(at + rest.len());
    out.extend_from_slice(&head[..at]);
    out.extend_from_slice(rest);
}

/// The longest first lines `write_relayed_whole` writes: a status line
/// (46), `Server` and `Date`'s name (25), the date, its line end,
/// `Content-Length` at its longest (38), `Connection` (24).
const HEAD_FIRST_MAX: usize = 46 + 25 + DATE_LEN + 2 + 38 + 24;

/// The `Connection` field `write_response` writes for an answer that
/// is `keep_alive` (or not) to a request of `version`.
#[inline(always)]
fn write_conn_of(out: &mut Vec<u8>, keep_alive: bool, version: Version) {
    wire::write_conn(
        out,
        match (keep_alive, version) {
            (false, _) => ConnField::Close,
            (true, Version::Http10) => ConnField::KeepAlive,
            (true, _) => ConnField::Omit,
        },
    );
}

thread_local! {
    /// The last response head written on this thread, and what it was
    /// written from. A server answering the same kind of response again
    /// and again (hello, an API's JSON, one archive entry or cached file
    /// with its pre-built `HeaderBlock`) copies one slice instead of
    /// spelling ten pieces (an archive answer's `write_head` was 346 Ir of
    /// its 3,392, callgrind).
    static LAST_HEAD: RefCell<LastHead> = const {
        RefCell::new(LastHead {
            key: HeadKey::NONE,
            seen: HeadKey::NONE,
            block: None,
            date: [0; DATE_LEN],
            bytes: Vec::new(),
        })
    };
}

struct LastHead {
    /// The key of the head in `bytes`; `HeadKey::NONE` until one is kept.
    key: HeadKey,
    /// The key of the last head written out, kept or not. A head is kept
    /// when its key is this one: the same answer twice in a row. Only a
    /// gate, never trusted for bytes (a block's address in it is not
    /// held, and may be another block's by the next answer).
    seen: HeadKey,
    /// The allocation of the key's header block, held so that its place
    /// names the same bytes as long as the key does.
    block: Option<Weak<dyn AsRef<[u8]> + Send + Sync>>,
    /// The `Date` value the head carries.
    date: [u8; DATE_LEN],
    bytes: Vec<u8>,
}

/// Everything but the date a head written by `write_head` depends on, for
/// a response with no fields but its content type or its header block:
/// equal keys and dates spell equal heads. Plain words, no `Option`s, and
/// one place for the content type or the block, so that comparing two
/// keys costs what it did before blocks were cached (hello's rows).
#[derive(Clone, Copy, PartialEq, Eq)]
struct HeadKey {
    status: u16,
    /// Where the head's own fields are. `(0, 0, 0)`: none (no string or
    /// buffer is at address 0). `(address, length, usize::MAX)`: a
    /// `&'static str` content type; the same address and length are the
    /// same bytes (a static never changes). `(address, start, end)`: a
    /// header block, its buffer's address and its range in it (an end is
    /// at most `isize::MAX`, never `usize::MAX`); a buffer is immutable
    /// (`SharedBytes`) but for one refilled in place, which has no place
    /// (`HeaderBlock::is_cacheable`), and `LastHead::block` keeps its
    /// address from being reused while the key lives.
    fields: (usize, usize, usize),
    framing: BodyFraming,
    conn: ConnField,
    /// The body, when its bytes are fixed by where they are and it goes
    /// inline (`Response::fixed_body`: a static's address and
    /// `usize::MAX`, or its range in the block's buffer, which `fields`
    /// names and `LastHead::block` holds), so that the cache keeps it
    /// after the head; `NO_BODY` otherwise (HEAD, bodiless, another body).
    body: (usize, usize),
}

impl HeadKey {
    /// No head: status 0 is never written (an invalid status is a 500).
    const NONE: HeadKey = HeadKey {
        status: 0,
        fields: (0, 0, 0),
        framing: BodyFraming::Bodiless,
        conn: ConnField::Omit,
        body: HeadKey::NO_BODY,
    };

    /// No body kept with the head. An empty range at 0 reads as this too:
    /// it has no bytes to keep.
    const NO_BODY: (usize, usize) = (0, 0);

    /// `None` if the head has fields that are not worth comparing: the
    /// handler's own, the transport's, an owned content type, a content
    /// type beside a block, a block refilled in place.
    #[inline]
    fn of(
        resp: &Response,
        framing: BodyFraming,
        conn: ConnField,
        extra_fields: &[u8],
        head_only: bool,
    ) -> Option<Self> {
        if !resp.headers.is_empty() || !extra_fields.is_empty() {
            return None;
        }
        let fields = match (&resp.content_type, &resp.block) {
            (None, None) => (0, 0, 0),
            (Some(Cow::Borrowed(s)), None) => (s.as_ptr() as usize, s.len(), usize::MAX),
            (None, Some(block)) => block.place()?,
            _ => return None,
        };
        let body = match (framing, resp.fixed_body_place()) {
            (BodyFraming::Length(n), Some(at)) if !head_only && n <= INLINE_BODY_BYTES_MAX as u64 => at,
            _ => HeadKey::NO_BODY,
        };
        Some(HeadKey {
            status: resp.status,
            fields,
            framing,
            conn,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATE: &[u8; DATE_LEN] = b"Mon, 01 Jan 2024 00:00:00 GMT";
    const LATER: &[u8; DATE_LEN] = b"Mon, 01 Jan 2024 00:00:01 GMT";

    fn head(mut resp: Response, date: &[u8], version: Version, keep_alive: bool) -> Vec<u8> {
        let mut out = Output::default();
        write_response(date, &mut out, &mut resp, true, version, keep_alive, b"");
        out.buf
    }

    fn spelled(resp: &Response, date: &[u8], framing: BodyFraming, conn: ConnField) -> Vec<u8> {
        let mut out = Vec::new();
        wire::write_head(&mut out, resp, date, framing, conn);
        out
    }

    #[test]
    fn a_repeated_head_is_the_one_spelled_out_whatever_changed() {
        let text = || Response::text("Hello");
        type Case<'a> = (Response, &'a [u8], Version, bool, BodyFraming, ConnField);
        let cases: [Case<'_>; 8] = [
            (
                text(),
                DATE,
                Version::Http11,
                true,
                BodyFraming::Length(5),
                ConnField::Omit,
            ),
            (
                text(),
                DATE,
                Version::Http11,
                true,
                BodyFraming::Length(5),
                ConnField::Omit,
            ),
            (
                text(),
                LATER,
                Version::Http11,
                true,
                BodyFraming::Length(5),
                ConnField::Omit,
            ),
            (
                text(),
                LATER,
                Version::Http11,
                false,
                BodyFraming::Length(5),
                ConnField::Close,
            ),
            (
                text(),
                LATER,
                Version::Http10,
                true,
                BodyFraming::Length(5),
                ConnField::KeepAlive,
            ),
            (
                Response::text("Hello!"),
                LATER,
                Version::Http11,
                true,
                BodyFraming::Length(6),
                ConnField::Omit,
            ),
            (
                Response::html("Hello"),
                LATER,
                Version::Http11,
                true,
                BodyFraming::Length(5),
                ConnField::Omit,
            ),
            (
                Response::text("Hello").with_status(404),
                LATER,
                Version::Http11,
                true,
                BodyFraming::Length(5),
                ConnField::Omit,
            ),
        ];
        for (resp, date, version, keep_alive, framing, conn) in cases {
            let want = spelled(&resp, date, framing, conn);
            assert_eq!(
                String::from_utf8(head(resp, date, version, keep_alive)).unwrap(),
                String::from_utf8(want).unwrap()
            );
        }
        // A content type with the same text at another address is another
        // key, and gives the same head.
        let owned = Response::text("Hello").with_content_type(String::from("text/plain; charset=utf-8"));
        let want = spelled(&owned, DATE, BodyFraming::Length(5), ConnField::Omit);
        assert_eq!(head(owned, DATE, Version::Http11, true), want);
    }

    /// Answers with header blocks (an archive's or a cached file's) share
    /// the head cache: whatever differs from the answer before (the block,
    /// its range, the status, the length, the date, a field of the
    /// handler's, HEAD) gives the head spelled out, never a stale one.
    #[test]
    fn a_repeated_block_head_is_the_one_spelled_out_whatever_changed() {
        use crate::response::HeaderBlock;
        let a = HeaderBlock::new(&[("Content-Type", "text/html"), ("ETag", "\"a\"")]).unwrap();
        let b = HeaderBlock::new(&[("Content-Type", "text/css"), ("ETag", "\"b\"")]).unwrap();
        // Two blocks in one buffer: the same address, other ranges.
        let whole: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(b"ETag: \"x\"\r\nETag: \"yy\"\r\n".to_vec());
        let x = HeaderBlock::from_lines(SharedBytes::slice(whole.clone(), 0..11).unwrap()).unwrap();
        let y = HeaderBlock::from_lines(SharedBytes::slice(whole.clone(), 11..23).unwrap()).unwrap();
        let cases = [
            (Response::prepared(200, a.clone(), "hello"), DATE, false),
            (Response::prepared(200, a.clone(), "hello"), DATE, false),
            (Response::prepared(200, a.clone(), "hello"), LATER, false),
            (Response::prepared(200, a.clone(), "hello!"), LATER, false),
            (Response::prepared(404, a.clone(), "hello!"), LATER, false),
            (Response::prepared(304, a.clone(), Body::Empty), LATER, false),
            (Response::prepared(200, b.clone(), "hello!"), LATER, false),
            (Response::prepared(200, a.clone(), "hello!"), LATER, true),
            (
                Response::prepared(206, a.clone(), "hel").with_header("Content-Range", "bytes 0-2/6"),
                LATER,
                false,
            ),
            (Response::prepared(200, a.clone(), "hello!"), LATER, true),
            (Response::prepared(200, x.clone(), "hello!"), LATER, true),
            (Response::prepared(200, y.clone(), "hello!"), LATER, true),
            (Response::prepared(200, x.clone(), "hello!"), LATER, true),
            (
                Response::prepared(200, x.clone(), "hello!").with_content_type("text/plain"),
                LATER,
                true,
            ),
        ];
        for (i, (resp, date, keep_alive)) in cases.into_iter().enumerate() {
            let conn = if keep_alive { ConnField::Omit } else { ConnField::Close };
            let framing = match resp.status {
                304 => BodyFraming::Bodiless,
                _ => BodyFraming::Length(resp.body.len().unwrap()),
            };
            let want = spelled(&resp, date, framing, conn);
            let got = head(resp, date, Version::Http11, keep_alive);
            assert_eq!(
                String::from_utf8(got).unwrap(),
                String::from_utf8(want).unwrap(),
                "case {i}"
            );
        }
    }

    /// A head kept with its body (a static's, or one beside its block)
    /// gives the bytes spelled out and copied, whatever changed from the
    /// answer before: the body's bytes at another address or place, its
    /// range in the same buffer, HEAD, a 304, the date.
    #[test]
    fn a_head_kept_with_its_body_gives_the_body_asked_for() {
        let (whole, lines) = crate::response::beside_buffer(b"ETag: \"x\"\r\n", 64);
        let block = || crate::response::beside_block(&whole, lines);
        // Two statics with the same bytes at two addresses, and another.
        static HELLO: [u8; 5] = *b"Hello";
        static HELLO_TOO: [u8; 5] = *b"Hello";
        let hello = || Response::text(&HELLO[..]);
        let cases: Vec<(Response, &[u8], bool)> = vec![
            (hello(), DATE, false),
            (hello(), DATE, false),
            (hello(), DATE, false),
            (Response::text(&HELLO_TOO[..]), DATE, false),
            (Response::text("World"), DATE, false),
            (Response::text("World"), DATE, false),
            (hello(), DATE, true),
            (hello(), DATE, false),
            (hello(), LATER, false),
            (hello(), LATER, false),
            (Response::prepared_beside(200, block(), lines..lines + 10), LATER, false),
            (Response::prepared_beside(200, block(), lines..lines + 10), LATER, false),
            (Response::prepared_beside(200, block(), lines..lines + 10), LATER, false),
            (
                Response::prepared_beside(200, block(), lines + 10..lines + 20),
                LATER,
                false,
            ),
            (
                Response::prepared_beside(200, block(), lines + 10..lines + 20),
                LATER,
                false,
            ),
            (Response::prepared_beside(200, block(), lines..lines + 10), LATER, false),
            (Response::prepared_beside(200, block(), lines..lines + 10), LATER, true),
            (Response::prepared_beside(304, block(), lines..lines), LATER, false),
            (Response::prepared_beside(200, block(), lines..lines + 10), LATER, false),
            (Response::prepared_beside(200, block(), lines..lines + 10), DATE, false),
            (Response::prepared_beside(200, block(), lines..lines + 10), DATE, false),
            (Response::prepared(200, block(), &HELLO[..]), DATE, false),
            (Response::prepared(200, block(), &HELLO[..]), DATE, false),
            (Response::prepared(200, block(), &HELLO[..]), DATE, false),
        ];
        for (i, (mut resp, date, head_only)) in cases.into_iter().enumerate() {
            let framing = match resp.status {
                304 => BodyFraming::Bodiless,
                _ => BodyFraming::Length(resp.body.len().unwrap()),
            };
            let mut want = spelled(&resp, date, framing, ConnField::Omit);
            if !head_only && resp.status != 304 {
                want.extend_from_slice(resp.fixed_body().unwrap().1);
            }
            let mut out = Output::default();
            write_response(date, &mut out, &mut resp, head_only, Version::Http11, true, b"");
            assert!(out.tail.is_none(), "case {i}");
            assert_eq!(
                String::from_utf8_lossy(&out.buf),
                String::from_utf8_lossy(&want),
                "case {i}"
            );
        }
        assert_eq!(Arc::strong_count(&whole), 1, "nothing keeps the buffer");
    }

    /// The cache holds a block's allocation, not its bytes: a buffer (an
    /// archive generation's map) is freed when its last answer goes; and a
    /// block made after it, whatever its address, is spelled out.
    #[test]
    fn the_head_cache_keeps_no_block_bytes_alive() {
        use crate::response::HeaderBlock;
        use std::sync::atomic::{AtomicUsize, Ordering};
        static DROPPED: AtomicUsize = AtomicUsize::new(0);
        struct Lines(Vec<u8>);
        impl AsRef<[u8]> for Lines {
            fn as_ref(&self) -> &[u8] {
                &self.0
            }
        }
        impl Drop for Lines {
            fn drop(&mut self) {
                DROPPED.fetch_add(1, Ordering::SeqCst);
            }
        }
        for (i, value) in ["\"first\"", "\"second\"", "\"third\""].into_iter().enumerate() {
            let lines = Lines(format!("ETag: {value}\r\n").into_bytes());
            let block = HeaderBlock::from_lines(SharedBytes::new(Arc::new(lines))).unwrap();
            for _ in 0..2 {
                let resp = Response::prepared(200, block.clone(), "x");
                let got = String::from_utf8(head(resp, DATE, Version::Http11, true)).unwrap();
                assert!(got.contains(&format!("\r\nETag: {value}\r\n")), "{got}");
            }
            drop(block);
            assert_eq!(DROPPED.load(Ordering::SeqCst), i + 1, "block {i} freed");
        }
    }

    /// A buffer refilled in place (the proxy's per-upstream-connection
    /// buffer, reused through `Arc::get_mut` once no answer holds it, its
    /// blocks made by `from_checked_lines`) keeps its address and range
    /// while its bytes change: the head comes from the new bytes, and the
    /// cache holds nothing that stops the reuse, not even a `Weak`.
    #[test]
    fn a_block_refilled_in_place_gives_its_new_head() {
        use crate::response::HeaderBlock;
        let mut buf: Arc<Vec<u8>> = Arc::new(b"ETag: \"aaaa\"\r\n".to_vec());
        for value in ["\"aaaa\"", "\"aaaa\"", "\"aaaa\"", "\"bbbb\"", "\"bbbb\"", "\"cccc\""] {
            {
                let bytes = Arc::get_mut(&mut buf).expect("no answer or cache holds the buffer");
                bytes.clear();
                bytes.extend_from_slice(format!("ETag: {value}\r\n").as_bytes());
            }
            let shared: Arc<dyn AsRef<[u8]> + Send + Sync> = buf.clone();
            let block = HeaderBlock::from_checked_lines(SharedBytes::new(shared));
            assert!(!block.is_cacheable());
            let got =
                String::from_utf8(head(Response::prepared(200, block, "x"), DATE, Version::Http11, true)).unwrap();
            assert!(got.contains(&format!("\r\nETag: {value}\r\n")), "{got}");
        }
    }

    #[test]
    fn each_transport_field_goes_out_unless_the_handler_set_it() {
        let extra = b"Strict-Transport-Security: max-age=63072000\r\nAlt-Svc: h3=\":443\"\r\n";
        let fields = |resp: Response| {
            let mut out = Output::default();
            write_response(DATE, &mut out, &mut { resp }, true, Version::Http11, true, extra);
            let head = String::from_utf8(out.buf).unwrap();
            assert!(head.ends_with("\r\n\r\n"), "{head}");
            let names: Vec<String> = head
                .lines()
                .skip(1)
                .filter_map(|l| l.split_once(':'))
                .map(|(n, v)| format!("{}={}", n.to_ascii_lowercase(), v.trim()))
                .filter(|f| f.starts_with("strict") || f.starts_with("alt-svc"))
                .collect();
            names
        };
        assert_eq!(
            fields(Response::text("x")),
            ["strict-transport-security=max-age=63072000", "alt-svc=h3=\":443\""]
        );
        // The handler's own Strict-Transport-Security wins; Alt-Svc still goes.
        assert_eq!(
            fields(Response::text("x").with_header("Strict-Transport-Security", "max-age=1")),
            ["strict-transport-security=max-age=1", "alt-svc=h3=\":443\""]
        );
        // The handler's own Alt-Svc wins; HSTS still goes, once each.
        assert_eq!(
            fields(Response::text("x").with_header("Alt-Svc", "clear")),
            ["alt-svc=clear", "strict-transport-security=max-age=63072000"]
        );
    }

    /// A relayed answer (a block refilled in place, as the proxy's, with
    /// its body beside it) is written by `write_relayed` when
    /// `is_relayed` takes it, else by the general path: either way the
    /// bytes `write_head` spells, then the body; and the head cache never
    /// keeps it.
    #[test]
    fn a_relayed_answer_is_what_write_head_spells_with_its_body() {
        let (whole, lines) = crate::response::beside_buffer(b"ETag: \"x\"\r\nVia: 1.1 p\r\n", 20_000);
        let refilled = || HeaderBlock::from_checked_lines(SharedBytes::slice(whole.clone(), 0..lines).unwrap());
        let relayed = |status: u16, n: usize| Response::prepared_beside(status, refilled(), lines..lines + n);
        // What `write_response` writes, and whether `write_relayed` did.
        let written = |mut resp: Response, head_only: bool, version: Version, keep_alive: bool, extra: &[u8]| {
            let framing = match resp.status {
                204 | 304 => BodyFraming::Bodiless,
                _ => BodyFraming::Length(resp.body.len().unwrap()),
            };
            let conn = match (keep_alive, version) {
                (false, _) => ConnField::Close,
                (true, Version::Http10) => ConnField::KeepAlive,
                (true, _) => ConnField::Omit,
            };
            let fast = is_relayed(&resp, framing, conn, extra, head_only);
            let mut out = Output::default();
            write_response(DATE, &mut out, &mut resp, head_only, version, keep_alive, extra);
            let mut bytes = out.buf;
            if let Some(Tail::Shared { bytes: s, pos: 0 }) = out.tail {
                bytes.extend_from_slice(s.as_slice());
            }
            (bytes, fast)
        };
        let spelled_with_body = |status: u16, n: usize, framing: BodyFraming, conn: ConnField, body: bool| {
            let mut want = spelled(&relayed(status, n), DATE, framing, conn);
            if body {
                want.extend_from_slice(&(*whole).as_ref()[lines..lines + n]);
            }
            want
        };
        for _ in 0..3 {
            for n in [
                0,
                1,
                9,
                10,
                13,
                99,
                100,
                999,
                1_000,
                4_096,
                9_999,
                10_000,
                INLINE_BODY_BYTES_MAX,
            ] {
                let want = spelled_with_body(200, n, BodyFraming::Length(n as u64), ConnField::Omit, true);
                assert_eq!(
                    written(relayed(200, n), false, Version::Http11, true, b""),
                    (want, true),
                    "{n}"
                );
            }
            // Past the inline bound, another status, HEAD, a close, an
            // HTTP/1.0 client, transport fields: the general path.
            let n = INLINE_BODY_BYTES_MAX + 1;
            let want = spelled_with_body(200, n, BodyFraming::Length(n as u64), ConnField::Omit, true);
            assert_eq!(
                written(relayed(200, n), false, Version::Http11, true, b""),
                (want, false)
            );
            let want = spelled_with_body(404, 13, BodyFraming::Length(13), ConnField::Omit, true);
            assert_eq!(
                written(relayed(404, 13), false, Version::Http11, true, b""),
                (want, false)
            );
            let want = spelled_with_body(304, 0, BodyFraming::Bodiless, ConnField::Omit, false);
            assert_eq!(
                written(relayed(304, 0), false, Version::Http11, true, b""),
                (want, false)
            );
            let want = spelled_with_body(200, 13, BodyFraming::Length(13), ConnField::Omit, false);
            assert_eq!(
                written(relayed(200, 13), true, Version::Http11, true, b""),
                (want, false)
            );
            let want = spelled_with_body(200, 13, BodyFraming::Length(13), ConnField::Close, true);
            assert_eq!(
                written(relayed(200, 13), false, Version::Http11, false, b""),
                (want, false)
            );
            let want = spelled_with_body(200, 13, BodyFraming::Length(13), ConnField::KeepAlive, true);
            assert_eq!(
                written(relayed(200, 13), false, Version::Http10, true, b""),
                (want, false)
            );
            let (bytes, fast) = written(relayed(200, 13), false, Version::Http11, true, b"Alt-Svc: clear\r\n");
            assert!(!fast);
            let mut tail = b"Alt-Svc: clear\r\n\r\n".to_vec();
            tail.extend_from_slice(&(*whole).as_ref()[lines..lines + 13]);
            assert!(bytes.ends_with(&tail));
        }
        // Nothing holds the buffer after: no cache kept it.
        assert_eq!(Arc::strong_count(&whole), 1);
        assert!(LAST_HEAD.with_borrow(|last| last.block.is_none()));
    }

    /// The proxy's one-pass answer queued whole (`write_relayed_whole`,
    /// from its field lines, blank line and body) is the bytes
    /// `write_response` writes for the `Response` made of the same buffer
    /// (`proxy::pool::Relayed::into_answer`: the lines as a refilled
    /// block, the body beside it): each status the relay takes, bodies
    /// from empty to the longest it takes, kept alive or closing,
    /// HTTP/1.1 and HTTP/1.0.
    #[test]
    fn a_relayed_answer_written_whole_is_what_write_response_writes() {
        let fields: &[u8] = b"Content-Type: text/plain\r\nETag: \"x\"\r\nVia: 1.1 p\r\n";
        let lines = fields.len();
        let mut n_cases = 0;
        for status in [200, 201, 203, 206, 299, 301, 302, 404, 418, 431, 500, 502, 503, 599] {
            for n in [0, 1, 9, 10, 13, 99, 100, 10_000, 16_383] {
                let mut bytes = fields.to_vec();
                bytes.extend_from_slice(b"\r\n");
                bytes.extend((0..n).map(|i| (i % 251) as u8));
                let bytes = Arc::new(bytes);
                for (keep_alive, version) in [
                    (true, Version::Http11),
                    (false, Version::Http11),
                    (true, Version::Http10),
                    (false, Version::Http10),
                ] {
                    let buf: Arc<dyn AsRef<[u8]> + Send + Sync> = bytes.clone();
                    let block = HeaderBlock::from_checked_lines(SharedBytes::slice(buf, 0..lines).unwrap());
                    let mut resp = Response::prepared_beside(status, block, lines + 2..lines + 2 + n);
                    let mut out = Output::default();
                    let sent = write_response(DATE, &mut out, &mut resp, false, version, keep_alive, b"");
                    assert!(out.tail.is_none(), "{status} {n}: inline");
                    assert_eq!((sent.body_bytes, sent.keep_alive), (n as u64, keep_alive));
                    let mut whole = Vec::new();
                    write_relayed_whole(&mut whole, DATE, status, (keep_alive, version), n, &bytes);
                    assert!(whole == out.buf, "{status} {n} {keep_alive} {version:?}");
                    n_cases += 1;
                }
            }
        }
        assert_eq!(n_cases, 14 * 9 * 4);
    }

    /// A body beside its header block (`Response::prepared_beside`) is
    /// written as the block with a `SharedBytes` body of the same buffer
    /// is, inline or as the tail; and nothing keeps the buffer after.
    #[test]
    fn a_body_beside_its_block_is_written_as_the_block_and_a_shared_body_are() {
        let (whole, lines) = crate::response::beside_buffer(b"ETag: \"x\"\r\n", 100_000);
        let block = || crate::response::beside_block(&whole, lines);
        let written = |mut resp: Response| {
            let mut out = Output::default();
            write_response(DATE, &mut out, &mut resp, false, Version::Http11, true, b"");
            let mut bytes = out.buf;
            match out.tail {
                Some(Tail::Shared { bytes: s, pos: 0 }) => bytes.extend_from_slice(s.as_slice()),
                None => {}
                Some(_) => panic!("another kind of tail"),
            }
            bytes
        };
        for n in [0, 17, INLINE_BODY_BYTES_MAX, INLINE_BODY_BYTES_MAX + 1, 100_000] {
            let body = lines..lines + n;
            let shared = SharedBytes::slice(whole.clone(), body.clone()).unwrap();
            let want = written(Response::prepared(200, block(), Body::Shared(shared)));
            assert!(want.ends_with(&(*whole).as_ref()[body.clone()]));
            assert_eq!(
                written(Response::prepared_beside(200, block(), body)),
                want,
                "{n} bytes"
            );
        }
        // A range outside the buffer is a 500, not a read out of it.
        let outside = Response::prepared_beside(200, block(), lines..lines + 100_001);
        assert!(written(outside).starts_with(b"HTTP/1.1 500 "));
        // A block put in the first one's place keeps the body's bytes.
        let replaced = Response::prepared_beside(200, block(), lines..lines + 5)
            .with_header_block(crate::response::HeaderBlock::new(&[("X-A", "1")]).unwrap());
        assert!(written(replaced).ends_with(b"X-A: 1\r\n\r\n\x00\x07\x0e\x15\x1c"));
        assert_eq!(Arc::strong_count(&whole), 1);
    }

    /// A streamed body's chunk is framed the same whether it is copied
    /// into the buffer or held (written after it, from its own): the
    /// bytes on the wire are the buffer, then the held chunk and its end.
    #[test]
    fn a_held_chunk_goes_out_as_a_copied_one_would() {
        for chunked in [true, false] {
            let mut wires = Vec::new();
            for hold in [false, true] {
                let (body, tx) = crate::body::channel(1 << 20);
                let Body::Channel(rx) = body else { unreachable!() };
                let mut chunks = Chunks::Channel(rx);
                tx.send(vec![b'x'; 300]).unwrap();
                tx.send("end").unwrap();
                drop(tx);
                let mut wire = Vec::new();
                loop {
                    let mut buf = Vec::new();
                    let mut held = None;
                    let piece = next_piece(&mut chunks, chunked, false, &mut buf, hold.then_some(&mut held));
                    wire.extend_from_slice(&buf);
                    if let Some(h) = &held {
                        assert!(hold, "held only when asked");
                        let (data, end) = h.rest();
                        wire.extend_from_slice(data);
                        wire.extend_from_slice(end);
                    }
                    if piece == Piece::Ended {
                        break;
                    }
                    assert_eq!(piece, Piece::Queued);
                }
                wires.push(wire);
            }
            assert_eq!(wires[0], wires[1], "chunked: {chunked}");
            let want: &[u8] = if chunked { b"12c\r\n" } else { b"xxx" };
            assert!(wires[0].starts_with(want));
            let end: &[u8] = if chunked { b"3\r\nend\r\n0\r\n\r\n" } else { b"xend" };
            assert!(wires[0].ends_with(end));
        }
    }
}

/// What `next_piece` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// The next chunk is queued.
    Queued,
    /// The body ended (its last-chunk queued, if chunked).
    Ended,
    /// The producer has nothing yet: it wakes the connection when it has.
    Wait,
    /// The application's iterator panicked, or the producer aborted: the
    /// body can no longer be completed.
    Failed,
}

/// Queues the next piece of a streamed body (the output's `Tail::Stream`)
/// into `buf`: a chunk, chunk-framed (RFC 9112 §7.1) or as it is for an
/// HTTP/1.0 client (delimited by the close), or the last-chunk at its
/// end, with the body's trailer fields if it has some and `trailers`
/// (the client said `TE: trailers`). The driver calls it only once the
/// piece before has left, so a producer on another thread is held back
/// by its channel's capacity, not by this buffer. With `held` (a writer
/// that can `writev`), a chunk is not copied: its framing goes into
/// `buf` and the chunk itself into `held`, written after it.
pub(crate) fn next_piece(
    chunks: &mut Chunks,
    chunked: bool,
    trailers: bool,
    buf: &mut Vec<u8>,
    held: Option<&mut Option<Held>>,
) -> Piece {
    match chunks.next() {
        Next::Chunk(chunk) => {
            // A zero-length chunk would be the last chunk.
            if chunk.is_empty() {
                return Piece::Queued;
            }
            if chunked {
                wire::write_chunk_start(buf, chunk.len());
            }
            let end: &'static [u8] = if chunked { wire::CHUNK_END } else { b"" };
            match held {
                Some(slot) => {
                    *slot = Some(Held {
                        data: chunk,
                        end,
                        pos: 0,
                    })
                }
                None => {
                    buf.extend_from_slice(&chunk);
                    buf.extend_from_slice(end);
                }
            }
            Piece::Queued
        }
        Next::End => {
            match chunks.trailers() {
                // RFC 9112 §7.1.2: last-chunk, trailer-section, CRLF.
                Some(t) if chunked && trailers => {
                    buf.extend_from_slice(b"0\r\n");
                    buf.extend_from_slice(t.as_bytes());
                    buf.extend_from_slice(b"\r\n");
                }
                _ if chunked => buf.extend_from_slice(wire::LAST_CHUNK),
                _ => {}
            }
            Piece::Ended
        }
        Next::Wait => Piece::Wait,
        Next::Failed => Piece::Failed,
    }
}
