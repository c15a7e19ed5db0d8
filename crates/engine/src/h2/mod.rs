//! HTTP/2 (RFC 9113) as a state machine that does no I/O: bytes from the
//! client go in (`Session::recv`), frames to send come out into a buffer,
//! and requests come out complete (`Session::take_ready`) for the same
//! handlers HTTP/1.1 calls. The connection driver in `conn/h2.rs` owns
//! the socket, TLS and interest; it calls the handler and hands the
//! response back (`Session::respond`), and asks for DATA frames as flow
//! control and its output buffer allow (`Session::send`).
//!
//! The session is cut by concern: this file holds its state, the frame
//! loop, control frames and connection errors; `recv.rs` the frames that
//! carry requests (HEADERS, CONTINUATION, DATA) and the settings and
//! windows the client gives; `stream.rs` the stream table; `send.rs` the
//! response writer (HEADERS, then DATA as the windows allow); `timeout.rs`
//! the connection's deadlines (`poll_timeout`, `handle_timeout`);
//! `frame.rs` and `hpack.rs` the wire formats; `splice.rs` DATA payloads
//! written from shared buffers. What HTTP/3 shares with it (the request
//! head and its checks, Huffman, the body still to send) is `message/`.
//!
//! Choices, where the RFC leaves them to us:
//! - A request body goes as its handler says (`Handler::body_use`):
//!   collected whole (up to `body_bytes_max`, within the worker's body
//!   budget) before the handler runs; handed to a reader as it arrives;
//!   or dropped, the stream answered early (`Session::ignore_body`). A
//!   larger one is answered 413 and the rest refused with
//!   RST_STREAM(NO_ERROR) (§8.1); a Content-Length over the limit gets the
//!   413 at the head. `expect: 100-continue` gets an
//!   interim HEADERS (`:status` 100) once the driver knows the body will
//!   be read (`send_continue`); another expectation gets 417, as HTTP/1.1.
//! - PRIORITY frames and the priority of HEADERS are read and ignored
//!   (RFC 9113 §5.3.2 deprecates that scheme); streams are sent in the
//!   order they were opened.
//! - No server push (we never send PUSH_PROMISE).
//! - Extended CONNECT (RFC 8441) only where the server has WebSocket
//!   routes (`Config::connect_protocol`): such a request goes to its
//!   handler at its head, and a stream it accepts carries a WebSocket's
//!   bytes (`Tunnel`), its window given back as the WebSocket reads.
//! - Every error names its cause in GOAWAY's debug data, as h2o does.
//!
//! Defences (each a limit in `limits.rs`, each tested in `tests/defences.rs` on the
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

pub(crate) mod frame;
pub(crate) mod hpack;
mod recv;
mod send;
pub(crate) mod splice;
mod stream;
mod timeout;

use crate::message::head::Head;
use frame::{Code, Header};
use send::HeadCache;
use splice::Splices;
pub(crate) use stream::Tunnel;
use stream::{Continuation, Stream};

use crate::limits::{H2_CONN_WINDOW, H2_CONTROL_FRAMES_BASE};

use crate::budget::BodyBudget;
use crate::message::pending::Unsent;
pub(crate) use frame::PREFACE;
pub(crate) use timeout::{Expired, Timeouts};

/// The window each stream starts with for request bodies: the protocol's
/// default, so our SETTINGS need not change it.
const STREAM_WINDOW: i64 = frame::DEFAULT_WINDOW;
/// Our SETTINGS_HEADER_TABLE_SIZE: the protocol's default.
const HEADER_TABLE_BYTES: usize = 4096;
/// How many of the streams we reset last are remembered, so that frames
/// the client sent on them before it learnt are ignored (§5.1). The `h2`
/// crate keeps 10 (`max_concurrent_reset_streams`).
const RESET_IDS: usize = 16;

/// The payload of the PING sent with a shutdown's first GOAWAY, told
/// apart from any other by its ACK.
const GOAWAY_PING: &[u8; 8] = b"goaway\0\0";

/// What a session is configured with, from `Limits`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Config {
    pub(crate) streams_max: u32,
    pub(crate) head_bytes_max: usize,
    pub(crate) n_headers_max: usize,
    pub(crate) body_bytes_max: u64,
    /// A body nobody reads with no content-length: dropped as it comes,
    /// with window given for it, up to this; then answered early.
    pub(crate) discard_bytes_max: u64,
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL is sent: requests may carry
    /// `:protocol` (RFC 8441's extended CONNECT, for WebSockets).
    pub(crate) connect_protocol: bool,
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
    /// Streams whose head is complete and whose body is coming: the
    /// driver asks their handler whether it reads it as it arrives.
    n_heads: usize,
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
    /// The first GOAWAY of a graceful shutdown sent (naming 2^31-1) with
    /// a PING; the final one goes when the PING's ACK comes back.
    announced: bool,
    /// The client sent GOAWAY: close once the streams are done.
    peer_gone: bool,
    /// Control frames received, and the work done that earns them.
    n_control: u64,
    n_responses: u64,
    bytes_sent: u64,
    /// DATA frames sent with a payload: each earns the two WINDOW_UPDATEs
    /// (stream and connection) a client returns its window with.
    n_data_sent: u64,
    /// Bytes of request frames (HEADERS, CONTINUATION, DATA) received:
    /// progress, for the timeout of a request that stalls.
    request_bytes: u64,
    /// Request bodies buffered in the streams, against the worker's budget.
    bodies: BodyBudget,
    /// What the answers' bodies hold in memory, unsent (waiting for the
    /// client's window, or for the output buffer to drain): queued output,
    /// against the worker's output budget.
    unsent: Unsent,
    /// DATA payloads of lasting bodies are queued in `splices` instead of
    /// being copied into the output buffer (`splice.rs`).
    splicing: bool,
    pub(crate) splices: Splices,
    /// The last response head that encoded without changing the HPACK
    /// table, and what it was made of.
    head_cache: HeadCache,
    /// The timeouts, and where each runs from (`timeout.rs`).
    timeouts: Timeouts,
    clock: timeout::Clock,
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
            n_heads: 0,
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
            announced: false,
            peer_gone: false,
            n_control: 0,
            n_responses: 0,
            bytes_sent: 0,
            n_data_sent: 0,
            request_bytes: 0,
            bodies: BodyBudget::default(),
            unsent: Unsent::default(),
            splicing: false,
            splices: Splices::default(),
            head_cache: HeadCache::default(),
            timeouts: Timeouts::default(),
            clock: timeout::Clock::default(),
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
        let settings = [
            (frame::SETTINGS_MAX_CONCURRENT_STREAMS, self.cfg.streams_max),
            (frame::SETTINGS_MAX_HEADER_LIST_SIZE, self.cfg.head_bytes_max as u32),
            (frame::SETTINGS_ENABLE_CONNECT_PROTOCOL, 1),
        ];
        let n = if self.cfg.connect_protocol { 3 } else { 2 };
        frame::write_settings(out, &settings[..n]);
        frame::write_window_update(out, 0, (H2_CONN_WINDOW - frame::DEFAULT_WINDOW) as u32);
        self.recv_window = H2_CONN_WINDOW;
    }

    /// Reads frames from `input`, appending what they call for to `out`;
    /// returns how many bytes were used. A partial frame is left for the
    /// next call: the caller keeps at least `READ_BYTES_MIN` of room.
    pub(crate) fn handle_input(&mut self, input: &[u8], out: &mut Vec<u8>) -> usize {
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
                } else if h.flags & frame::ACK != 0 && payload == GOAWAY_PING && self.announced {
                    // A round trip since the first GOAWAY: every stream the
                    // client opened before it read that one has arrived.
                    self.go_away_now(out);
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

    /// Some stream still waits for request bytes.
    #[cfg(test)]
    pub(crate) fn is_receiving(&self) -> bool {
        self.continuation.is_some()
            || self
                .streams
                .iter()
                .any(|s| !s.recv_done && !Session::is_upload_blocked(s) && s.tunnel.is_none())
    }

    /// The streams' buffered bodies, against the worker's budget: past
    /// it, a body is refused with 503.
    pub(crate) fn bodies(&mut self) -> &mut BodyBudget {
        &mut self.bodies
    }

    /// What the answers' bodies hold in memory and have not sent, against
    /// the worker's output budget (`message::pending::Unsent`).
    pub(crate) fn unsent(&mut self) -> &mut Unsent {
        &mut self.unsent
    }

    /// Bytes the answers' bodies hold in memory and have not sent.
    #[inline]
    pub(crate) fn unsent_bytes(&self) -> usize {
        self.unsent.held
    }

    /// Some stream's request is complete and waits for its handler.
    pub(crate) fn has_ready(&self) -> bool {
        self.n_ready > 0
    }

    /// A header block is begun (HEADERS without END_HEADERS) and its
    /// CONTINUATIONs have not all come.
    pub(crate) fn in_header_block(&self) -> bool {
        self.continuation.is_some()
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

    /// Starts a graceful shutdown as RFC 9113 §6.8 advises: a first
    /// GOAWAY(NO_ERROR) naming 2^31-1 (no new streams, please) with a
    /// PING; when its ACK comes back, a round trip later, every request
    /// the client sent before it read the GOAWAY has arrived and is
    /// answered, and the final GOAWAY names the last one. A single GOAWAY
    /// naming the last stream seen refused a request crossing it on the
    /// wire, which clients such as curl report as failed rather than retry
    /// (seen at a binary upgrade under load). A client that never answers
    /// the PING is cut at the shutdown timeout, as any other.
    pub(crate) fn go_away(&mut self, out: &mut Vec<u8>) {
        if !self.draining && !self.failed && !self.announced {
            self.announced = true;
            frame::write_goaway(out, frame::STREAM_ID_MAX, Code::NoError, "");
            frame::write_ping(out, GOAWAY_PING);
        }
    }

    /// The final GOAWAY(NO_ERROR), naming the last stream that will be
    /// answered: streams after it are ignored.
    fn go_away_now(&mut self, out: &mut Vec<u8>) {
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
    /// Each DATA frame sent earns two: a client with a small receive
    /// window returns it after every frame, on the stream and on the
    /// connection (`nghttp -w 10`, a 1 KiB window, was cut off partway
    /// through a large file when only bytes sent earned them: about 1.75
    /// frames charged per 1 KiB DATA frame against 0.25 earned), while a
    /// WINDOW_UPDATE flood with no DATA asked for earns nothing.
    fn cost(&mut self, out: &mut Vec<u8>) -> bool {
        self.n_control += 1;
        let earned = H2_CONTROL_FRAMES_BASE + 4 * self.n_responses + self.bytes_sent / 4096 + 2 * self.n_data_sent;
        if self.n_control > earned {
            self.fail(out, Code::EnhanceYourCalm, "too many control frames for the work done");
        }
        !self.failed
    }
}

#[cfg(test)]
mod tests;
