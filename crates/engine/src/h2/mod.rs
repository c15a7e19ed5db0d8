//! HTTP/2 (RFC 9113) as a state machine that does no I/O: bytes from the
//! client go in (`Session::recv`), frames to send come out into a buffer,
//! and requests come out complete (`Session::take_ready`) for the same
//! handlers HTTP/1.1 calls. The connection driver in `conn.rs` owns the
//! socket, TLS and interest; it calls the handler and hands the response
//! back (`Session::respond`), and asks for DATA frames as flow control and
//! its output buffer allow (`Session::send`).
//!
//! Choices, where the RFC leaves them to us:
//! - Request bodies are collected whole (up to `body_bytes_max`) before the
//!   handler runs, as for HTTP/1.1; a larger one is answered 413 and the
//!   rest refused with RST_STREAM(NO_ERROR) (§8.1).
//! - PRIORITY frames and the priority of HEADERS are read and ignored
//!   (RFC 9113 §5.3.2 deprecates that scheme); streams are sent in the
//!   order they were opened.
//! - No server push (we never send PUSH_PROMISE).
//! - Every error names its cause in GOAWAY's debug data, as h2o does.
//!
//! Defences (each a limit in `limits.rs`, each tested in `tests.rs` on the
//! session and performed against a running server in the engine's
//! `tests/http2.rs`): concurrent streams (`Limits::h2_streams_max`,
//! REFUSED_STREAM past it); header blocks (fragments beyond
//! `head_bytes_max` end the connection with ENHANCE_YOUR_CALM, the
//! CONTINUATION flood); decoded header lists (past `head_bytes_max` a 431,
//! the HPACK bomb); control frames (SETTINGS, PING, RST_STREAM, PRIORITY,
//! WINDOW_UPDATE, empty DATA and CONTINUATION, and the RST_STREAMs a
//! client's mistakes earn: at most `H2_CONTROL_FRAMES_BASE` more than the
//! useful work done, which covers Rapid Reset and the reset flood); the
//! rest (slow readers, idle streams) by the driver's timeouts.

mod frame;
pub(crate) mod hpack;
pub(crate) mod huffman;
pub(crate) mod request;
pub(crate) mod splice;

use std::io;
use std::panic::{self, AssertUnwindSafe};

use frame::{Code, Header};
use request::Head;
use splice::{Slice, Splices, SPLICE_BYTES_MIN};

use crate::limits::{H2_CONN_WINDOW, H2_CONTROL_FRAMES_BASE};
use crate::response::{Body, FileRange, Response};

pub(crate) use frame::PREFACE;

/// The window each stream starts with for request bodies: the protocol's
/// default, so our SETTINGS need not change it.
const STREAM_WINDOW: i64 = frame::DEFAULT_WINDOW;
/// Our SETTINGS_HEADER_TABLE_SIZE: the protocol's default.
const HEADER_TABLE_BYTES: usize = 4096;
/// How many of the streams we reset last are remembered, so that frames
/// the client sent on them before it learnt are ignored (§5.1). The `h2`
/// crate keeps 10 (`max_concurrent_reset_streams`).
const RESET_IDS: usize = 16;

/// What a session is configured with, from `Limits`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Config {
    pub(crate) streams_max: u32,
    pub(crate) head_bytes_max: usize,
    pub(crate) n_headers_max: usize,
    pub(crate) body_bytes_max: u64,
}

/// One HTTP/2 connection's protocol state.
pub(crate) struct Session {
    cfg: Config,
    /// Bytes of the client preface matched so far.
    preface_seen: usize,
    /// The client's first frame (its SETTINGS) has arrived.
    settings_seen: bool,
    /// The connection's send window, and the client's settings.
    send_window: i64,
    peer_initial_window: i64,
    peer_frame_max: usize,
    /// What the client may still send on the connection, and what it has
    /// sent since the last WINDOW_UPDATE we gave.
    recv_window: i64,
    /// Open streams, in the order they were opened.
    /// Boxed: a stream is a few hundred bytes, and removing one from the
    /// middle moves the rest (32 streams answered in a batch moved 150 KB
    /// per batch unboxed: 28% of the CPU in h2load -m 32, measured).
    #[allow(clippy::vec_box)] // measured: see above
    streams: Vec<Box<Stream>>,
    /// Streams that ended, kept for their buffers.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Stream>>,
    n_ready: usize,
    /// The highest stream id the client has opened.
    last_stream: u32,
    /// The streams we sent RST_STREAM on last (a ring; 0 is no stream).
    reset_ids: [u32; RESET_IDS],
    n_resets: usize,
    /// A header block in progress (HEADERS without END_HEADERS).
    continuation: Option<Continuation>,
    block: Vec<u8>,
    decoder: hpack::Decoder,
    encoder: hpack::Encoder,
    /// For header blocks that only need decoding (trailers, refused streams).
    scratch: Head,
    /// GOAWAY sent, with an error: nothing more is read.
    failed: bool,
    /// GOAWAY(NO_ERROR) sent: streams after `last_stream` are ignored.
    draining: bool,
    /// The client sent GOAWAY: close once the streams are done.
    peer_gone: bool,
    /// Control frames received, and the work done that earns them.
    n_control: u64,
    n_responses: u64,
    bytes_sent: u64,
    /// Bytes of request frames (HEADERS, CONTINUATION, DATA) received:
    /// progress, for the timeout of a request that stalls.
    request_bytes: u64,
    /// DATA payloads of lasting bodies are queued in `splices` instead of
    /// being copied into the output buffer (`splice.rs`).
    splicing: bool,
    pub(crate) splices: Splices,
    /// The last response head that encoded without changing the HPACK
    /// table, and what it was made of.
    head_cache: HeadCache,
}

/// A response head's HPACK block, and what it was made of: while the
/// encoder's table does not change, a response made of the same (the same
/// file asked again on the connection, a handler's fixed answer) encodes
/// to the same bytes, copied instead of looked up field by field. The
/// buffers are reused: no allocation once warm.
#[derive(Default)]
struct HeadCache {
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
                .is_none_or(|ct| ct.as_bytes() == self.content_type)
            && match (&self.block, &resp.block) {
                (None, None) => true,
                (Some(a), Some(b)) => a.same(b),
                _ => false,
            }
            && self.date == date
            && self.extra_fields == extra
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
        self.valid = resp.headers.is_empty();
        if !self.valid {
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

struct Continuation {
    stream: u32,
    end_stream: bool,
    self_dependent: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sending {
    /// The handler has not answered yet.
    Waiting,
    /// The handler will answer through a `Responder` with this id.
    Deferred(u64),
    /// The head is sent; `pending` holds the rest of the body.
    Body,
    /// The response is complete.
    Done,
}

struct Stream {
    id: u32,
    /// END_STREAM received: the request is complete.
    recv_done: bool,
    send: Sending,
    /// The request is complete and waits for its handler.
    ready: bool,
    head: Head,
    body: Vec<u8>,
    received: u64,
    recv_window: i64,
    send_window: i64,
    pending: Option<Pending>,
    /// Answer this status instead of calling the handler (431, 413).
    refused: Option<(u16, &'static str)>,
}

impl Stream {
    fn new() -> Self {
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
        chunks: Box<dyn Iterator<Item = Vec<u8>> + Send>,
        buf: Vec<u8>,
        pos: usize,
        done: bool,
    },
}

impl Pending {
    /// What a response to one stream sends (HTTP/2's and HTTP/3's): an
    /// invalid one is replaced by a 500; then its status, its body's
    /// length (none for 204 and 304) and the body still to send (none for
    /// HEAD, 204, 304 or an empty body), taken out of `resp`.
    pub(crate) fn of(resp: &mut Response, head_only: bool) -> (u16, Option<u64>, Option<Pending>) {
        if let Some(why) = resp.invalid {
            crate::log::error(format_args!(
                "handler returned an invalid response ({why}); answering 500"
            ));
            *resp = Response::error(500);
        }
        let status = resp.status;
        let bodiless = status == 204 || status == 304;
        let length = if bodiless { None } else { resp.body.len() };
        let body = if head_only || bodiless || length == Some(0) {
            None
        } else {
            Pending::new(std::mem::replace(&mut resp.body, Body::Empty))
        };
        (status, length, body)
    }

    pub(crate) fn new(body: Body) -> Option<Pending> {
        match body {
            Body::Empty => None,
            Body::File(range) => Some(Pending::File { range, sent: 0 }),
            Body::Stream(chunks) => Some(Pending::Stream {
                chunks,
                buf: Vec::new(),
                pos: 0,
                done: false,
            }),
            body => Some(Pending::Bytes { body, pos: 0 }),
        }
    }

    /// Appends up to `max` bytes of body to `out`; how many. An error ends
    /// the stream (a file that shrank, a body iterator that panicked).
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
                    match panic::catch_unwind(AssertUnwindSafe(|| chunks.next())) {
                        Ok(Some(chunk)) => {
                            *buf = chunk;
                            *pos = 0;
                        }
                        Ok(None) => *done = true,
                        Err(_) => return Err(io::Error::other("body iterator panicked")),
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
                Slice::Shared(crate::response::SharedBytes {
                    buf: s.buf.clone(),
                    range: start..start + n,
                })
            }
            _ => return None,
        };
        *pos += n;
        Some(slice)
    }

    pub(crate) fn is_done(&self) -> bool {
        match self {
            Pending::Bytes { body, pos } => body.len() == Some(*pos as u64),
            Pending::File { range, sent } => *sent == range.len,
            Pending::Stream { buf, pos, done, .. } => *done && *pos == buf.len(),
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

/// What `respond` sent, for the access log and metrics.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sent {
    pub(crate) status: u16,
    pub(crate) body_bytes: u64,
}

impl Session {
    pub(crate) fn new(cfg: Config) -> Self {
        Session {
            cfg,
            preface_seen: 0,
            settings_seen: false,
            send_window: frame::DEFAULT_WINDOW,
            peer_initial_window: frame::DEFAULT_WINDOW,
            peer_frame_max: frame::DEFAULT_FRAME_BYTES,
            recv_window: frame::DEFAULT_WINDOW,
            streams: Vec::new(),
            spare: Vec::new(),
            n_ready: 0,
            last_stream: 0,
            reset_ids: [0; RESET_IDS],
            n_resets: 0,
            continuation: None,
            block: Vec::new(),
            decoder: hpack::Decoder::new(HEADER_TABLE_BYTES),
            encoder: hpack::Encoder::new(),
            scratch: Head::default(),
            failed: false,
            draining: false,
            peer_gone: false,
            n_control: 0,
            n_responses: 0,
            bytes_sent: 0,
            request_bytes: 0,
            splicing: false,
            splices: Splices::default(),
            head_cache: HeadCache::default(),
        }
    }

    /// Sends lasting bodies' DATA payloads as slices (`splice.rs`): the
    /// caller then writes `out` together with `splices`, and keeps `out`
    /// (neither cleared nor moved) while slices are queued.
    pub(crate) fn set_splicing(&mut self, on: bool) {
        self.splicing = on;
    }

    /// Bytes queued for the client: `out`'s and the slices'.
    fn queued(&self, out: &[u8]) -> usize {
        out.len() + self.splices.bytes()
    }

    /// Appends the server's connection preface: SETTINGS, and a
    /// WINDOW_UPDATE that opens the connection's window to `H2_CONN_WINDOW`.
    pub(crate) fn start(&mut self, out: &mut Vec<u8>) {
        frame::write_settings(
            out,
            &[
                (frame::SETTINGS_MAX_CONCURRENT_STREAMS, self.cfg.streams_max),
                (frame::SETTINGS_MAX_HEADER_LIST_SIZE, self.cfg.head_bytes_max as u32),
            ],
        );
        frame::write_window_update(out, 0, (H2_CONN_WINDOW - frame::DEFAULT_WINDOW) as u32);
        self.recv_window = H2_CONN_WINDOW;
    }

    /// Reads frames from `input`, appending what they call for to `out`;
    /// returns how many bytes were used. A partial frame is left for the
    /// next call: the caller keeps at least `READ_BYTES_MIN` of room.
    pub(crate) fn recv(&mut self, input: &[u8], out: &mut Vec<u8>) -> usize {
        if self.failed {
            return input.len();
        }
        let mut pos = 0;
        if self.preface_seen < PREFACE.len() {
            let n = (PREFACE.len() - self.preface_seen).min(input.len());
            if input[..n] != PREFACE[self.preface_seen..self.preface_seen + n] {
                self.fail(out, Code::Protocol, "invalid connection preface");
                return input.len();
            }
            self.preface_seen += n;
            pos = n;
        }
        while let Some(h) = Header::parse(&input[pos..]) {
            if h.len > frame::DEFAULT_FRAME_BYTES {
                // We never raise SETTINGS_MAX_FRAME_SIZE.
                self.fail(out, Code::FrameSize, "frame larger than SETTINGS_MAX_FRAME_SIZE");
                return input.len();
            }
            let end = pos + frame::HEADER_LEN + h.len;
            if end > input.len() {
                break;
            }
            self.frame(h, &input[pos + frame::HEADER_LEN..end], out);
            pos = end;
            if self.failed {
                return input.len();
            }
        }
        // Give the connection's window back once half of it is used.
        if self.recv_window < H2_CONN_WINDOW / 2 {
            frame::write_window_update(out, 0, (H2_CONN_WINDOW - self.recv_window) as u32);
            self.recv_window = H2_CONN_WINDOW;
        }
        pos
    }

    fn frame(&mut self, h: Header, payload: &[u8], out: &mut Vec<u8>) {
        if let Some(c) = &self.continuation {
            if h.kind != frame::CONTINUATION || h.stream != c.stream {
                return self.fail(
                    out,
                    Code::Protocol,
                    "frame other than CONTINUATION inside a header block",
                );
            }
        }
        if !self.settings_seen && h.kind != frame::SETTINGS {
            return self.fail(out, Code::Protocol, "first frame is not SETTINGS");
        }
        match h.kind {
            frame::DATA => {
                self.request_bytes += h.len as u64 + 1;
                self.on_data(h, payload, out)
            }
            frame::HEADERS => {
                self.request_bytes += h.len as u64 + 1;
                self.on_headers(h, payload, out)
            }
            frame::PRIORITY => {
                if h.stream == 0 {
                    return self.fail(out, Code::Protocol, "PRIORITY on stream 0");
                }
                if !self.cost(out) {
                    return;
                }
                if h.len != 5 {
                    self.reset(out, h.stream, Code::FrameSize);
                } else if u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff == h.stream
                {
                    self.reset(out, h.stream, Code::Protocol);
                }
            }
            frame::RST_STREAM => {
                if h.stream == 0 {
                    return self.fail(out, Code::Protocol, "RST_STREAM on stream 0");
                }
                if h.len != 4 {
                    return self.fail(out, Code::FrameSize, "RST_STREAM of a length other than 4");
                }
                if h.stream > self.last_stream {
                    if self.draining {
                        return; // a stream opened after our GOAWAY (§6.8)
                    }
                    return self.fail(out, Code::Protocol, "RST_STREAM on an idle stream");
                }
                if !self.cost(out) {
                    return;
                }
                if let Some(idx) = self.find(h.stream) {
                    self.remove(idx);
                }
            }
            frame::SETTINGS => self.on_settings(h, payload, out),
            frame::PUSH_PROMISE => self.fail(out, Code::Protocol, "PUSH_PROMISE from a client"),
            frame::PING => {
                if h.stream != 0 {
                    return self.fail(out, Code::Protocol, "PING on a stream");
                }
                if h.len != 8 {
                    return self.fail(out, Code::FrameSize, "PING of a length other than 8");
                }
                if h.flags & frame::ACK == 0 && self.cost(out) {
                    frame::write_ping_ack(out, payload);
                }
            }
            frame::GOAWAY => {
                if h.stream != 0 {
                    return self.fail(out, Code::Protocol, "GOAWAY on a stream");
                }
                if h.len < 8 {
                    return self.fail(out, Code::FrameSize, "GOAWAY shorter than 8 bytes");
                }
                self.peer_gone = true;
            }
            frame::WINDOW_UPDATE => self.on_window_update(h, payload, out),
            frame::CONTINUATION => {
                self.request_bytes += h.len as u64 + 1;
                self.on_continuation(h, payload, out)
            }
            // §5.5: unknown frame types are ignored.
            _ => {}
        }
    }

    fn on_settings(&mut self, h: Header, payload: &[u8], out: &mut Vec<u8>) {
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

    fn on_window_update(&mut self, h: Header, payload: &[u8], out: &mut Vec<u8>) {
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

    fn on_data(&mut self, h: Header, payload: &[u8], out: &mut Vec<u8>) {
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
        if s.refused.is_none() {
            if s.received > body_bytes_max {
                s.refused = Some((413, "request body too large"));
                s.body.clear();
                if !s.ready && s.send == Sending::Waiting {
                    s.ready = true;
                    self.n_ready += 1;
                }
            } else {
                s.body.extend_from_slice(data);
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

    fn on_headers(&mut self, h: Header, payload: &[u8], out: &mut Vec<u8>) {
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

    fn on_continuation(&mut self, h: Header, payload: &[u8], out: &mut Vec<u8>) {
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
    fn decode(&mut self, block: &[u8], head: &mut Head, out: &mut Vec<u8>) -> Option<bool> {
        head.clear();
        let mut sink = hpack::Sink::new(&mut head.bytes, &mut head.fields, self.cfg.head_bytes_max);
        match self.decoder.decode(block, &mut sink) {
            Ok(()) => Some(sink.oversized),
            Err(e) => {
                self.fail(out, Code::Compression, e.0);
                None
            }
        }
    }

    /// A complete header block for `id`: a new request, or trailers.
    fn on_block(&mut self, id: u32, end_stream: bool, self_dependent: bool, block: &[u8], out: &mut Vec<u8>) {
        if block.len() > self.cfg.head_bytes_max {
            return self.fail(out, Code::EnhanceYourCalm, "header block larger than head_bytes_max");
        }
        if let Some(idx) = self.find(id) {
            // Trailers (§8.1), or a mistake.
            let mut scratch = std::mem::take(&mut self.scratch);
            let decoded = self.decode(block, &mut scratch, out);
            let checked = scratch.check_trailers(&scratch.fields);
            self.scratch = scratch;
            if decoded.is_none() {
                return;
            }
            let s = &mut self.streams[idx];
            if s.recv_done {
                return self.reset(out, id, Code::StreamClosed);
            }
            if !end_stream || checked.is_err() {
                return self.reset(out, id, Code::Protocol);
            }
            s.recv_done = true;
            if s.head.content_length.is_some_and(|n| s.received != n) {
                return self.reset(out, id, Code::Protocol);
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
        } else if s.head.check_request().is_err() {
            self.spare.push(s);
            return self.reset(out, id, Code::Protocol);
        } else if s.head.fields.len() > self.cfg.n_headers_max {
            // Counted after the check, as HTTP/1.1 counts them: without the
            // pseudo-fields, and cookie crumbs joined into one (§8.2.3).
            s.refused = Some((431, "too many header fields"));
        }
        if end_stream && s.head.content_length.is_some_and(|n| n > 0) {
            self.spare.push(s);
            return self.reset(out, id, Code::Protocol);
        }
        s.id = id;
        s.recv_done = end_stream;
        s.send = Sending::Waiting;
        s.ready = end_stream || s.refused.is_some();
        s.body.clear();
        s.received = 0;
        s.recv_window = STREAM_WINDOW;
        s.send_window = self.peer_initial_window;
        s.pending = None;
        if s.ready {
            self.n_ready += 1;
        }
        self.streams.push(s);
    }

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

    /// Queues the response to stream `id`: its HEADERS now, its body as
    /// flow control allows and until `out` holds `budget` bytes (the rest
    /// through `send`). `extra_fields` are complete `Name: value\r\n`
    /// lines from the transport (HSTS). `None` if the stream is gone.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn respond(
        &mut self,
        id: u32,
        mut resp: Response,
        head_only: bool,
        date: &[u8],
        extra_fields: &[u8],
        out: &mut Vec<u8>,
        budget: usize,
    ) -> Option<Sent> {
        let idx = self.find(id)?;
        let (status, length, body) = Pending::of(&mut resp, head_only);
        let flags = if body.is_none() { frame::END_STREAM } else { 0 };
        let encoder = &mut self.encoder;
        let cache = &mut self.head_cache;
        write_head(out, id, flags, self.peer_frame_max, |block| {
            let generation = encoder.generation();
            if !encoder.has_update() && cache.matches(generation, &resp, length, date, extra_fields) {
                block.extend_from_slice(&cache.encoded);
                return;
            }
            let at = block.len();
            let fresh = !encoder.has_update();
            encoder.begin(block);
            hpack::write_status(block, status);
            encode_fields(encoder, block, &resp, date, length, extra_fields);
            if fresh && encoder.generation() == generation {
                cache.store(generation, &resp, length, date, extra_fields, &block[at..]);
            } else {
                cache.valid = false;
            }
        });
        self.n_responses += 1;
        let s = &mut self.streams[idx];
        s.pending = body;
        s.send = if s.pending.is_some() {
            Sending::Body
        } else {
            Sending::Done
        };
        let sent = Sent {
            status,
            body_bytes: if head_only { 0 } else { length.unwrap_or(0) },
        };
        if s.pending.is_some() {
            self.send_stream(idx, out, budget);
        }
        self.finish(out);
        Some(sent)
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
            }
            if self.streams.get(idx).is_some_and(|s| s.id == id) {
                idx += 1;
            }
        }
        self.finish(out);
    }

    /// Sends what the windows allow of one stream's body.
    fn send_stream(&mut self, idx: usize, out: &mut Vec<u8>, budget: usize) {
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
            if n == 0 && !done {
                // Nothing to send now (a zero window).
                out.truncate(at);
                return;
            }
            out[at..at + 3].copy_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]);
            if done {
                out[at + 4] = frame::END_STREAM;
            }
            s.send_window -= n as i64;
            self.send_window -= n as i64;
            self.bytes_sent += n as u64;
            if done {
                s.pending = None;
                s.send = Sending::Done;
                return;
            }
            if out.len() + self.splices.bytes() >= budget {
                return;
            }
        }
    }

    /// Removes the streams that are complete both ways; a stream answered
    /// before its request ended is told to stop sending (§8.1).
    fn finish(&mut self, out: &mut Vec<u8>) {
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

    /// What `respond` will report for `resp`, known before it is called
    /// (the access log reads the request, which borrows the session).
    pub(crate) fn sent_of(resp: &Response, head_only: bool) -> Sent {
        if resp.invalid.is_some() {
            return Sent {
                status: 500,
                body_bytes: if head_only {
                    0
                } else {
                    Response::error(500).body.len().unwrap_or(0)
                },
            };
        }
        let bodiless = resp.status == 204 || resp.status == 304;
        Sent {
            status: resp.status,
            body_bytes: if head_only || bodiless {
                0
            } else {
                resp.body.len().unwrap_or(0)
            },
        }
    }

    /// Request frames received so far (a count that grows with each
    /// HEADERS, CONTINUATION or DATA frame): progress, for the body
    /// timeout, which other frames (PING, SETTINGS) must not restart.
    pub(crate) fn request_progress(&self) -> u64 {
        self.request_bytes
    }

    /// Body bytes sent so far on the connection: progress, for the send
    /// timeout of a client that keeps its window closed.
    pub(crate) fn bytes_sent(&self) -> u64 {
        self.bytes_sent
    }

    /// Some stream has body bytes to send and the windows allow some.
    pub(crate) fn wants_send(&self) -> bool {
        self.send_window > 0 && self.streams.iter().any(|s| s.pending.is_some() && s.send_window > 0)
    }

    /// Some stream has body bytes that wait for the client's window.
    pub(crate) fn is_flow_blocked(&self) -> bool {
        self.streams.iter().any(|s| s.pending.is_some()) && !self.wants_send()
    }

    /// Some stream still waits for request bytes.
    pub(crate) fn is_receiving(&self) -> bool {
        self.continuation.is_some() || self.streams.iter().any(|s| !s.recv_done)
    }

    /// No stream is open.
    pub(crate) fn is_idle(&self) -> bool {
        self.streams.is_empty() && self.continuation.is_none()
    }

    /// The connection should close once its output is written: after a
    /// connection error, or after GOAWAY (either way) with no stream left.
    pub(crate) fn is_done(&self) -> bool {
        self.failed || ((self.draining || self.peer_gone) && self.streams.is_empty())
    }

    /// Starts a graceful shutdown: GOAWAY(NO_ERROR) naming the last stream
    /// that will be answered (§6.8).
    pub(crate) fn go_away(&mut self, out: &mut Vec<u8>) {
        if !self.draining && !self.failed {
            self.draining = true;
            frame::write_goaway(out, self.last_stream, Code::NoError, "");
        }
    }

    /// Ends the connection with an error: GOAWAY names the cause, and
    /// nothing follows it (§5.4.1: the connection is closed), so the open
    /// streams are dropped unanswered.
    pub(crate) fn fail(&mut self, out: &mut Vec<u8>, code: Code, why: &str) {
        if !self.failed {
            self.failed = true;
            frame::write_goaway(out, self.last_stream, code, why);
            while !self.streams.is_empty() {
                self.remove(self.streams.len() - 1);
            }
            self.continuation = None;
        }
    }

    /// Ends the connection after a timeout.
    pub(crate) fn time_out(&mut self, out: &mut Vec<u8>, why: &str) {
        self.fail(out, Code::NoError, why);
    }

    /// A stream error: RST_STREAM, and the stream is forgotten. Counted
    /// as a control frame: requests that each earn a RST_STREAM are the
    /// reset flood (CVE-2019-9514).
    fn reset(&mut self, out: &mut Vec<u8>, id: u32, code: Code) {
        self.write_rst(out, id, code);
        if let Some(idx) = self.find(id) {
            self.remove(idx);
        }
        self.cost(out);
    }

    /// Writes RST_STREAM and remembers the stream among the last reset.
    fn write_rst(&mut self, out: &mut Vec<u8>, id: u32, code: Code) {
        frame::write_rst_stream(out, id, code);
        self.reset_ids[self.n_resets % RESET_IDS] = id;
        self.n_resets = self.n_resets.wrapping_add(1);
    }

    /// We sent RST_STREAM on stream `id` lately.
    fn was_reset(&self, id: u32) -> bool {
        id != 0 && self.reset_ids.contains(&id)
    }

    /// Counts a control frame against the work done; too many end the
    /// connection with ENHANCE_YOUR_CALM. False if the connection has
    /// ended: the frame then gets no answer (nothing follows GOAWAY).
    fn cost(&mut self, out: &mut Vec<u8>) -> bool {
        self.n_control += 1;
        let earned = H2_CONTROL_FRAMES_BASE + 4 * self.n_responses + self.bytes_sent / 4096;
        if self.n_control > earned {
            self.fail(out, Code::EnhanceYourCalm, "too many control frames for the work done");
        }
        !self.failed
    }

    fn find(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    fn remove(&mut self, idx: usize) {
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

/// The payload of a frame without its padding (§6.1): `None` if the pad
/// length is as long as the frame or longer.
fn unpad(h: Header, payload: &[u8]) -> Option<&[u8]> {
    if h.flags & frame::PADDED == 0 {
        return Some(payload);
    }
    let (&pad, rest) = payload.split_first()?;
    rest.len().checked_sub(usize::from(pad)).map(|end| &rest[..end])
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
/// connection-specific fields: the engine never lets a handler set them).
fn encode_fields(
    enc: &mut hpack::Encoder,
    out: &mut Vec<u8>,
    resp: &Response,
    date: &[u8],
    length: Option<u64>,
    extra_fields: &[u8],
) {
    if !resp.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("server")) {
        enc.field(out, b"server", b"peregrine", true);
    }
    enc.date(out, date);
    if let Some(ct) = &resp.content_type {
        enc.field(out, b"content-type", ct.as_bytes(), true);
    }
    if let Some(n) = length {
        let mut digits = itoa::Buffer::new();
        enc.field(out, b"content-length", digits.format(n).as_bytes(), true);
    }
    for (name, value) in &resp.headers {
        enc.field(out, name.as_bytes(), value.as_bytes(), worth_indexing(name.as_bytes()));
    }
    if let Some(block) = &resp.block {
        for_each_line(block.as_bytes(), |name, value| {
            enc.field(out, name, value, worth_indexing(name));
        });
    }
    for_each_line(extra_fields, |name, value| {
        let given = std::str::from_utf8(name).is_ok_and(|name| resp.header(name).is_some());
        if !given {
            enc.field(out, name, value, true);
        }
    });
}

/// Fields worth a place in the dynamic table: all but those that never
/// repeat (`content-range`) or should not sit in a shared compression
/// context (`set-cookie`, RFC 7541 §7.1.3). Validators and lengths repeat
/// whenever a connection asks for a file again (h2load -c 50 -m 32 on a
/// 4 KiB file, one run each: 2.46 → 2.10 µs of server CPU per answer when
/// they were indexed too); the table's FIFO eviction bounds the churn of
/// the ones that do not repeat.
fn worth_indexing(name: &[u8]) -> bool {
    const ONCE: [&[u8]; 2] = [b"set-cookie", b"content-range"];
    !ONCE.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// Calls `f` with each `Name: value\r\n` line's name and trimmed value.
/// (The blocks are ours, each line ended by CRLF: a search for LF is
/// enough, and unlike `memmem` it builds no searcher per call, which was
/// 8% of an h2load run on `serve DIR`.)
pub(crate) fn for_each_line(mut lines: &[u8], mut f: impl FnMut(&[u8], &[u8])) {
    while let Some(end) = memchr::memchr(b'\n', lines) {
        let line = lines[..end].strip_suffix(b"\r").unwrap_or(&lines[..end]);
        if let Some(colon) = memchr::memchr(b':', line) {
            let value = line[colon + 1..].trim_ascii();
            f(&line[..colon], value);
        }
        lines = &lines[end + 1..];
    }
}

#[cfg(test)]
mod tests;
