//! Entry points for the fuzz targets in `fuzz/`: crate-private state
//! machines driven the way their drivers drive them, with the invariants
//! the drivers rely on asserted. Not part of the API; hidden from the docs.

use std::collections::HashMap;

use crate::h1::script::{answers, End, Script};
use crate::h1::{TimedOut, Wait};
use crate::h2::{Config, Session, PREFACE};
use crate::limits::{Limits, BUFFER_BYTES};
use crate::response::Response;

/// What the client sends before the fuzzer's bytes: the preface and an
/// empty SETTINGS frame, so that every input starts past them.
const CLIENT_START: [u8; 9] = [0, 0, 0, 4, 0, 0, 0, 0, 0];
/// The limits: small, so that inputs reach them.
const CFG: Config = Config {
    streams_max: 4,
    head_bytes_max: 1024,
    n_headers_max: 8,
    body_bytes_max: 2048,
    discard_bytes_max: 4096,
    connect_protocol: true,
};
/// The bodies the streams are answered with are slices of this: the
/// largest is more than the client's initial window.
static BODY: [u8; 70_000] = [b'x'; 70_000];
const BODY_LENS: [usize; 4] = [0, 5, 3000, 70_000];
/// The largest frame the session writes beyond the budget it is given: a
/// DATA frame that starts below it may be 1 KiB long, after a HEADERS
/// frame of our short heads.
const BUDGET_SLACK: usize = 1024 + 9 + 512;
/// What the session may write in answer to `n` bytes read: at most 13
/// bytes (RST_STREAM, WINDOW_UPDATE) per frame of 9 or more, then one
/// connection WINDOW_UPDATE and one GOAWAY with its debug text.
fn recv_output_max(n: usize) -> usize {
    2 * n + 256
}

/// Drives an HTTP/2 `Session` as the connection driver does, on
/// `data[1..]` sent after a valid preface and SETTINGS. `data[0]` chooses
/// how the bytes are split into reads (bits 0-3), whether every other
/// stream is answered later through `defer` (bit 4), whether the server
/// starts a graceful shutdown after the first read (bit 5), whether GET
/// answers are sent as to HEAD (bit 6) and whether the output budget is
/// 1 KiB or 16 KiB (bit 7). Panics if an invariant breaks: `handle_input` uses no
/// more than it was given; the output is whole frames, bounded by the
/// bytes read and the budget; no frame follows a GOAWAY for an error;
/// each stream's HEADERS come before its DATA, which add up to its
/// content-length and stop at END_STREAM; a stream that wants to send
/// does; nothing is written once the session is done.
#[doc(hidden)]
pub fn h2_session(data: &[u8]) {
    let Some((&seed, rest)) = data.split_first() else {
        return;
    };
    let budget = if seed & 0x80 != 0 { 16 * 1024 } else { 1024 };
    let mut d = Driver {
        session: Session::new(CFG),
        out: Vec::new(),
        check: Check::default(),
        deferred: Vec::new(),
        n_deferred: 0,
        defer_some: seed & 0x10 != 0,
        head_only: seed & 0x40 != 0,
        budget,
    };
    d.session.start(&mut d.out);
    d.write_out();

    let input = [PREFACE, &CLIENT_START, rest].concat();
    let piece_max = 1usize << (seed & 0x0f);
    let mut rng = u32::from(seed).wrapping_mul(0x9e37_79b9) | 1;
    let mut read = Vec::new();
    let mut at = 0;
    let mut first = true;
    while at < input.len() && !d.session.is_done() {
        // xorshift32: the same seed splits the same way.
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        let n = 1 + rng as usize % piece_max;
        let end = input.len().min(at + n);
        read.extend_from_slice(&input[at..end]);
        at = end;
        let used = d.session.handle_input(&read, &mut d.out);
        assert!(used <= read.len(), "recv used more than it was given");
        assert!(
            d.out.len() <= recv_output_max(used),
            "{} bytes written for {used} read",
            d.out.len()
        );
        read.drain(..used);
        if first && seed & 0x20 != 0 {
            d.session.go_away(&mut d.out);
        }
        first = false;
        d.write_out();
        d.turn();
    }
    // The client stops sending; the server finishes what it can.
    let mut n_turns = 0;
    while !d.session.is_done() && d.turn() {
        n_turns += 1;
        assert!(n_turns < 10_000, "the session never stops wanting to send");
    }
    if d.session.is_done() {
        d.session.send(&mut d.out, budget);
        assert!(d.session.take_ready().is_none(), "a request ready after the end");
        for id in &d.deferred {
            assert!(d.session.deferred_stream(*id).is_none(), "a stream left after the end");
        }
        assert!(d.out.is_empty(), "output after the end");
    }
}

/// The session and what the driver keeps beside it.
struct Driver {
    session: Session,
    out: Vec<u8>,
    check: Check,
    /// Deferred answers not given yet, oldest first.
    deferred: Vec<u64>,
    n_deferred: u64,
    defer_some: bool,
    head_only: bool,
    budget: usize,
}

impl Driver {
    /// One turn after a read or a write: a deferred answer comes, ready
    /// streams are answered while the output is under budget, DATA is
    /// sent, the output written. False if there was nothing to do.
    fn turn(&mut self) -> bool {
        if let Some(defer_id) = (!self.deferred.is_empty()).then(|| self.deferred.remove(0)) {
            if let Some(id) = self.session.deferred_stream(defer_id) {
                self.answer(id);
            }
        }
        while self.out.len() < self.budget {
            let Some(id) = self.session.take_ready() else { break };
            if self.defer_some && id % 4 == 1 && self.session.refused(id).is_none() {
                self.n_deferred += 1;
                self.session.defer(id, self.n_deferred);
                self.deferred.push(self.n_deferred);
            } else {
                self.answer(id);
            }
        }
        let wants_send = self.session.wants_send();
        if wants_send {
            let before = self.out.len();
            self.session.send(&mut self.out, self.budget);
            assert!(
                before >= self.budget || self.out.len() > before,
                "a stream wants to send but sends nothing"
            );
        }
        assert!(
            self.out.len() <= self.budget + BUDGET_SLACK,
            "{} bytes queued",
            self.out.len()
        );
        let busy = !self.out.is_empty() || wants_send || !self.deferred.is_empty();
        self.write_out();
        busy
    }

    /// Answers stream `id` as the handler would, having read its request.
    fn answer(&mut self, id: u32) {
        let (mut resp, head_only) = if let Some((status, _)) = self.session.refused(id) {
            (Response::error(status), false)
        } else if let Some(parts) = self.session.parts(id) {
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let n = parts.head.fill(&mut headers);
            assert!(n <= CFG.n_headers_max, "more fields than n_headers_max");
            assert!(parts.body.len() as u64 <= CFG.body_bytes_max);
            let len = BODY_LENS[(id as usize / 2) % BODY_LENS.len()];
            let resp = match len {
                0 => Response::new(204),
                _ => Response::text(&BODY[..len]),
            };
            (resp, self.head_only || parts.method == "HEAD")
        } else {
            (Response::error(400), false)
        };
        let length = match resp.body() {
            _ if head_only || resp.status() == 204 => 0,
            body => body.len().unwrap_or(0),
        };
        let before = self.out.len();
        let date = b"Mon, 23 Nov 2026 16:00:00 GMT";
        let sent = self
            .session
            .respond(id, &mut resp, head_only, date, b"", &mut self.out, self.budget);
        assert!(sent.is_some(), "a ready stream could not be answered");
        assert!(self.out.len() > before, "an answer wrote nothing");
        self.check.expected.insert(id, (length, 0));
    }

    /// Checks the frames written since the last call and forgets them, as
    /// a write to the socket would.
    fn write_out(&mut self) {
        self.check.frames(&self.out);
        self.out.clear();
    }
}

/// What the frames written so far must agree with.
#[derive(Default)]
struct Check {
    /// A GOAWAY for an error was written: nothing may follow.
    failed: bool,
    /// Per answered stream: the body length promised, and sent so far.
    expected: HashMap<u32, (u64, u64)>,
    /// Streams whose HEADERS have been written, and those ended.
    headed: HashMap<u32, bool>,
    /// The client's HPACK table: every header block we write must decode
    /// against it, our dynamic table's insertions, evictions and size
    /// updates included, and open with `:status`.
    client_table: ClientTable,
}

/// A client's HPACK decoder, at the protocol's default table size (the
/// most our encoder uses, whatever the client allows).
struct ClientTable(crate::h2::hpack::Decoder);

impl Default for ClientTable {
    fn default() -> Self {
        ClientTable(crate::h2::hpack::Decoder::new(4096))
    }
}

impl ClientTable {
    fn decode(&mut self, block: &[u8]) {
        let (mut bytes, mut fields) = (Vec::new(), Vec::new());
        let mut sink = crate::message::fields::Sink::new(&mut bytes, &mut fields, 1 << 20);
        if let Err(e) = self.0.decode(block, &mut sink) {
            panic!("our header block does not decode: {e:?}");
        }
        let first = fields.first().expect("a header block without fields");
        let (at, len) = (first.name.0 as usize, first.name.1 as usize);
        assert_eq!(&bytes[at..at + len], b":status", "a header block not opened by :status");
    }
}

impl Check {
    fn frames(&mut self, mut out: &[u8]) {
        while !out.is_empty() {
            assert!(!self.failed, "a frame after GOAWAY for an error");
            assert!(out.len() >= 9, "a frame header cut short");
            let len = usize::from(out[0]) << 16 | usize::from(out[1]) << 8 | usize::from(out[2]);
            let (kind, flags) = (out[3], out[4]);
            let stream = u32::from_be_bytes([out[5], out[6], out[7], out[8]]);
            assert!(out.len() >= 9 + len, "a frame cut short");
            let payload = &out[9..9 + len];
            out = &out[9 + len..];
            let end_stream = flags & 0x1 != 0;
            match kind {
                // DATA
                0x0 => {
                    assert_eq!(self.headed.get(&stream), Some(&false), "DATA outside a response");
                    let (promised, sent) = self.expected.get_mut(&stream).expect("DATA on an unanswered stream");
                    *sent += len as u64;
                    assert!(*sent <= *promised, "more DATA than the content-length");
                    if end_stream {
                        assert_eq!(*sent, *promised, "END_STREAM before the content-length");
                        self.headed.insert(stream, true);
                    }
                }
                // HEADERS (our heads fit one frame)
                0x1 => {
                    assert!(self.headed.insert(stream, end_stream).is_none(), "a second HEADERS");
                    assert_ne!(flags & 0x4, 0, "HEADERS without END_HEADERS");
                    self.client_table.decode(payload);
                    if end_stream {
                        assert_eq!(self.expected.get(&stream).map(|e| e.0), Some(0), "a body cut off");
                    }
                }
                // GOAWAY
                0x7 => {
                    assert!(len >= 8);
                    self.failed = payload[4..8] != [0; 4];
                }
                0x3 | 0x4 | 0x6 | 0x8 => {}
                _ => panic!("a frame of type {kind} from the server"),
            }
        }
    }
}

/// Drives the HTTP/1.1 machine (`h1::H1`) as the connection driver does,
/// through `h1::script::Script`, on `data[1..]`. `data[0]` chooses how the
/// bytes are split into reads (bits 0-3), whether HTTP/2 is allowed on the
/// connection (bit 4), whether a shutdown starts after the first read
/// (bit 5), whether the read buffer starts at 16 bytes (bit 6) and whether
/// a deferred request is answered after each read or only at the end
/// (bit 7). Limits are small, so that inputs reach them. Panics if an
/// invariant breaks: a request uses no more bytes than were read, the read
/// buffer stays within the limits, the output is a sequence of whole
/// answers (one per request, plus one error answer if the machine refused
/// the input, with that status), nothing is written once the machine
/// closed, and a timeout answers only a request in progress.
#[doc(hidden)]
pub fn h1_session(data: &[u8]) {
    let Some((&seed, input)) = data.split_first() else {
        return;
    };
    let limits = Limits {
        head_bytes_max: 512,
        uri_bytes_max: 128,
        n_headers_max: 8,
        body_bytes_max: 1024,
        ..Limits::default()
    };
    let buffer = if seed & 0x40 != 0 { 16 } else { BUFFER_BYTES };
    let mut s = Script::new(limits).with_buffer(buffer);
    s.h2_allowed = seed & 0x10 != 0;
    let piece_max = 1usize << (seed & 0x0f);
    let mut rng = u32::from(seed).wrapping_mul(0x9e37_79b9) | 1;
    let mut at = 0;
    while at < input.len() && s.end.is_none() {
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        let end = input.len().min(at + 1 + rng as usize % piece_max);
        s.feed(&input[at..end]);
        at = end;
        if seed & 0x20 != 0 {
            s.draining = true;
        }
        if s.deferred && seed & 0x80 != 0 {
            s.answer_later();
        }
    }
    while s.deferred {
        s.answer_later();
    }
    let unfinished = s.end.is_none() && s.unconsumed() > 0;
    if s.end.is_none() {
        // Nothing is deferred now: a waiting connection has a deadline,
        // unless a shutdown found it between requests.
        match s.wait(false) {
            Wait::Until(Some(_)) => {}
            Wait::Until(None) => panic!("a connection waits without a deadline"),
            Wait::Close => assert!(s.draining && s.unconsumed() == 0, "closed with a request in progress"),
        }
        match s.time_out() {
            TimedOut::Refused(r) => assert!(unfinished && r.status == 408, "a 408 with no request in progress"),
            TimedOut::Close => assert!(!unfinished, "a request in progress closed without an answer"),
            TimedOut::Keep | TimedOut::Again => panic!("a timeout kept with nothing deferred"),
        }
    }
    let got = answers(&s.wire, &s.head_only);
    for a in got.iter().filter(|a| a.status == 100) {
        assert!(
            a.head == "HTTP/1.1 100 Continue\r\n\r\n" && a.body.is_empty(),
            "a malformed 100 Continue"
        );
    }
    let n_final = got.iter().filter(|a| a.status != 100).count();
    match s.end {
        Some(End::Refused(refusal)) => {
            assert_eq!(
                n_final,
                s.head_only.len() + 1,
                "one answer per request and one error answer"
            );
            assert_eq!(got.last().map(|a| a.status), Some(refusal.status));
            // What the access log says was sent is what was sent.
            assert_eq!(
                got.last().map(|a| a.body.len() as u64),
                Some(refusal.body_bytes),
                "the error body's length as logged"
            );
        }
        Some(End::NotHttp) => assert!(s.wire.is_empty(), "an answer to bytes that are not HTTP/1"),
        Some(End::Upgraded) => {
            assert_eq!(n_final, s.head_only.len(), "one answer per request");
            let last = got.last().expect("a 101 was written");
            assert_eq!(last.status, 101, "the switch is the last answer");
            assert!(
                last.head.contains("\r\nConnection: upgrade\r\nUpgrade: websocket\r\n"),
                "{:?}",
                last.head
            );
            // Every byte after the upgraded request is the new protocol's,
            // in order, whatever the machine had read of it.
            s.feed(&input[at..]);
            assert!(input.ends_with(&s.switched), "bytes after the switch lost or changed");
        }
        Some(End::Closing) | None => assert_eq!(n_final, s.head_only.len(), "one answer per request"),
    }
    if s.end.is_some() {
        let written = s.wire.len();
        s.feed(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(s.wire.len(), written, "bytes written after the end");
    }
}

/// Drives an HTTP/3 `h3::Session` on records of stream bytes, resets and
/// FINs, answering every ready request; see `crate::h3::fuzz_session` for
/// the input's layout and the invariants checked.
#[doc(hidden)]
pub fn h3_session(data: &[u8]) {
    crate::h3::fuzz_session(data);
}

/// Drives a WebSocket `Session` (`ws/session.rs`) on `data[1..]`, split
/// into reads of `data[0] % 31 + 1` bytes, as the connection driver does:
/// each read appended to the unread input, `poll` until it wants more,
/// a timeout at the end. Panics if an invariant breaks: `poll` uses no
/// more than it was given; a message is within the size limit and text is
/// UTF-8; what it writes is whole server frames (unmasked, no reserved
/// bits, control frames whole and short); once it has said `Closed` it
/// writes and reports nothing more, and a Close is its last frame.
pub fn ws_session(data: &[u8]) {
    use crate::ws::session::{Config, Event, Kind, Session};
    let Some((&split, data)) = data.split_first() else {
        return;
    };
    let step = usize::from(split % 31) + 1;
    // The high bit: permessage-deflate agreed (RSV1 marks a compressed
    // message, inflated within the same 300 bytes).
    let deflate = split & 0x80 != 0;
    let params = crate::ws::deflate::Params {
        window_bits: 9 + split % 7,
        window_asked: true,
    };
    let config = Config {
        message_bytes_max: 300,
        fragments_max: 8,
        ping_interval: Some(std::time::Duration::from_secs(30)),
        message_timeout: std::time::Duration::from_secs(20),
        deflate: deflate.then_some(params),
    };
    let mut echo = Vec::new();
    let now = std::time::Instant::now();
    let mut s = Session::new(config, now);
    let (mut input, mut start, mut out) = (Vec::new(), 0, Vec::new());
    let mut closed = false;
    for chunk in data.chunks(step) {
        input.extend_from_slice(chunk);
        loop {
            let written = out.len();
            let given = input.len() - start;
            let (used, event) = s.poll(&mut input[start..], &mut out, now);
            assert!(used <= given, "used {used} of {given}");
            let more = match event {
                Event::Message(kind, bytes) => {
                    assert!(!closed, "a message after the close");
                    assert!(bytes.len() <= 300, "a message of {} bytes", bytes.len());
                    if kind == Kind::Text {
                        assert!(std::str::from_utf8(bytes).is_ok(), "text that is not UTF-8");
                    }
                    if deflate {
                        // What the server compresses inflates to itself.
                        echo.clear();
                        crate::ws::deflate::write_message(&mut echo, kind.op(), bytes, params);
                        let head = match echo[1] {
                            126 => 4,
                            127 => 10,
                            _ => 2,
                        };
                        let body = &echo[head..];
                        if echo[0] & 0x40 != 0 {
                            let mut back = Vec::new();
                            crate::ws::deflate::inflate(body, &mut back, 300).expect("our own message inflates");
                            assert_eq!(back, bytes, "a compressed echo inflates to itself");
                        } else {
                            assert_eq!(body, bytes);
                        }
                    }
                    true
                }
                Event::Closed { code, .. } => {
                    assert!(!closed, "closed twice");
                    assert!((1000..5000).contains(&code), "close code {code}");
                    closed = true;
                    false
                }
                Event::Input => false,
                Event::Done => {
                    assert!(closed || s.is_closed(), "done before closed");
                    assert_eq!(out.len(), written, "written after the end");
                    false
                }
            };
            start += used;
            if !more {
                break;
            }
        }
    }
    let _ = s.handle_timeout(&mut out, now + std::time::Duration::from_secs(3600));
    // Every frame written is a whole, unmasked server frame; a Close ends
    // them.
    let mut rest = &out[..];
    while let [b0, b1, tail @ ..] = rest {
        // The session's own frames (pongs, closes) are never compressed.
        assert_eq!(b0 & 0x70, 0, "reserved bits in {b0:#x}");
        assert_eq!(b1 & 0x80, 0, "a masked server frame");
        let (len, tail) = match b1 & 0x7f {
            126 => (usize::from(u16::from_be_bytes([tail[0], tail[1]])), &tail[2..]),
            127 => (u64::from_be_bytes(tail[..8].try_into().unwrap()) as usize, &tail[8..]),
            n => (usize::from(n), tail),
        };
        let op = b0 & 0x0f;
        if op >= 8 {
            assert!(len <= 125 && b0 & 0x80 != 0, "a long or fragmented control frame");
        }
        rest = &tail[len..];
        if op == 8 {
            assert!(rest.is_empty(), "a frame after our Close");
        }
    }
}

/// The proxy's one-pass relay of the common answer
/// (`codec::client::relay_plain`) against the general parser and relay:
/// what the first takes, the second takes alike, and relays the same
/// lines of (`proxy::pool::plain_relay_agrees` asserts it).
pub fn relay_plain_agrees(data: &[u8]) -> bool {
    crate::proxy::pool::plain_relay_agrees(data)
}

/// The fields the proxy relays of an upstream's answer
/// (`proxy::pool::answer_fields`, which no longer refuses a value that
/// is not UTF-8): for every head the general parser takes, lines
/// `HeaderBlock::from_lines` takes too (token names, field-value bytes:
/// no CR, LF, NUL or other control byte but HTAB; obs-text kept), so the
/// block's promise (`from_checked_lines`) holds without the look.
pub fn relayed_answer_fields(data: &[u8]) {
    use crate::codec::client::{parse_response_head, ParsedResponse, RESPONSE_FIELDS_MAX};
    let mut fields = [const { std::mem::MaybeUninit::uninit() }; RESPONSE_FIELDS_MAX];
    if let Ok(ParsedResponse::Complete(head)) = parse_response_head(data, &mut fields, "GET") {
        let block = crate::proxy::pool::answer_fields(&head);
        let lines = crate::response::SharedBytes::new(std::sync::Arc::new(block.as_bytes().to_vec()));
        if let Err(why) = crate::response::HeaderBlock::from_lines(lines) {
            panic!(
                "relayed lines from_lines refuses: {why}: {:?}",
                block.as_bytes().escape_ascii().to_string()
            );
        }
    }
}

/// An upstream's trailer section (as `ResponseBodyDecoder::take_trailers`
/// gives it) as the proxy relays it (`Trailers::relayed`, no field named
/// by a Connection field), checked: every line `name: value` with a
/// lowercase token for a name, a value of field-value bytes without
/// surrounding whitespace, CRLF at its end, and no field that may not be
/// a trailer. The relayed lines, for the target to compare.
pub fn relayed_trailers(section: &[u8]) -> Vec<u8> {
    let t = crate::message::trailers::Trailers::relayed(section, &[]);
    let bytes = t.as_bytes();
    let mut rest = bytes;
    while !rest.is_empty() {
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("every line ends in CRLF");
        let line = &rest[..end];
        let colon = line.iter().position(|&b| b == b':').expect("a colon");
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        assert!(crate::codec::head::is_token(name), "{name:?}");
        assert!(!name.iter().any(u8::is_ascii_uppercase), "{name:?}");
        assert!(!crate::message::trailers::is_forbidden(name), "{name:?}");
        let value = value.strip_prefix(b" ").expect("a space after the colon");
        assert!(crate::response::is_valid_value(value), "{value:?}");
        assert_eq!(crate::codec::head::trim_ows(value), value);
        assert!(!value.contains(&b'\r') && !value.contains(&b'\n'));
        rest = &rest[end + 2..];
    }
    bytes.to_vec()
}

/// Drives the reverse proxy's HTTP/2 client session
/// (`proxy/h2up/session.rs`) on an upstream's bytes: `data[1..]` after a
/// valid SETTINGS frame, with three streams open (a GET, a POST whose
/// body is sent as the windows allow, a HEAD), cut into two reads at a
/// point `data[0]` chooses. Panics if an invariant breaks: the bytes
/// consumed are whole frames and what is left is less than one; cutting
/// the input elsewhere changes neither the events nor the verdict; each
/// stream's events come in order (interims, one head, data, trailers)
/// and none after its end or reset; the lines relayed are
/// `name: value` with lowercase token names, trailers without forbidden
/// fields; what the session writes is whole frames; after a connection
/// error nothing more comes out.
#[doc(hidden)]
pub fn h2_client(data: &[u8]) {
    let Some((&seed, input)) = data.split_first() else {
        return;
    };
    let at = usize::from(seed) * input.len() / 255;
    let one = h2_client_run(input, &[input.len()]);
    let two = h2_client_run(input, &[at, input.len()]);
    assert_eq!(one, two, "cut at {at}");
}

type ClientRun = (Vec<crate::proxy::h2up::Event>, Option<crate::proxy::h2up::ConnError>);

fn h2_client_run(input: &[u8], cuts: &[usize]) -> ClientRun {
    use crate::proxy::h2up::{Event, Session};
    let mut s = Session::new();
    let mut events = Vec::new();
    let mut settings = Vec::new();
    crate::h2::frame::write_settings(&mut settings, &[]);
    assert_eq!(s.recv(&settings, &mut events), Ok(settings.len()));
    s.open("GET", "http", "a", "/", std::iter::empty(), true);
    let fields = [(&b"content-type"[..], &b"application/grpc"[..])];
    s.open("POST", "http", "a", "/p", fields.into_iter(), false);
    s.open("HEAD", "http", "a", "/h", std::iter::empty(), true);
    let mut buf = Vec::new();
    let mut from = 0;
    let mut error = None;
    for &cut in cuts {
        buf.extend_from_slice(&input[from..cut]);
        from = cut;
        match s.recv(&buf, &mut events) {
            Ok(n) => {
                assert!(n <= buf.len());
                buf.drain(..n);
                if let (Some(h), None) = (crate::h2::frame::Header::parse(&buf), error) {
                    assert!(h.len + 9 > buf.len(), "a whole frame left unread");
                }
            }
            Err(e) => {
                assert!(error.is_none());
                error = Some(e);
                buf.clear();
            }
        }
        if error.is_some() {
            assert!(!s.can_open());
        }
    }
    // The POST's body, as the windows allow, and windows given back:
    // after the reads, so that both runs read the same.
    let mut body_left = 100_000usize;
    loop {
        let w = s.window(3).min(body_left);
        assert!(w <= crate::h2::frame::DEFAULT_FRAME_BYTES);
        if w == 0 {
            break;
        }
        body_left -= w;
        s.send_data(3, &vec![b'x'; w], body_left == 0);
    }
    for id in [1, 3, 5] {
        s.consumed(id, 200_000);
    }
    // What the session wrote: whole frames.
    let out = &s.out;
    let mut at = out.len().min(crate::h2::frame::PREFACE.len());
    assert_eq!(&out[..at], &crate::h2::frame::PREFACE[..at]);
    while at < out.len() {
        let h = crate::h2::frame::Header::parse(&out[at..]).expect("a whole frame header");
        at += 9 + h.len;
        assert!(at <= out.len(), "a frame cut short");
    }
    // Each stream's events in order.
    let mut phase: HashMap<u32, u8> = HashMap::new();
    for e in &events {
        let (stream, p) = match e {
            Event::Interim { stream, status, lines } => {
                assert!((100..200).contains(status) && *status != 101);
                check_lines(lines, false);
                (*stream, 1)
            }
            Event::Head {
                stream, status, lines, ..
            } => {
                assert!((200..600).contains(status));
                check_lines(lines, false);
                (*stream, 2)
            }
            Event::Data { stream, .. } => (*stream, 3),
            Event::Trailers { stream, lines } => {
                check_lines(lines, true);
                (*stream, 4)
            }
            Event::Reset { stream, .. } | Event::Malformed { stream, .. } => (*stream, 5),
            Event::GoAway { .. } => continue,
        };
        assert!([1, 3, 5].contains(&stream));
        let was = phase.get(&stream).copied().unwrap_or(0);
        assert!(was < 5, "an event after the stream's reset: {e:?}");
        assert!(p >= was && (p != 2 || was < 2), "out of order: {e:?} after phase {was}");
        assert!(was != 4 || p == 5, "after trailers");
        let ended = matches!(
            e,
            Event::Data { end: true, .. } | Event::Head { end: true, .. } | Event::Trailers { .. }
        );
        phase.insert(stream, if ended { 5 } else { p });
    }
    (events, error)
}

fn check_lines(lines: &[u8], trailers: bool) {
    let mut rest = lines;
    while !rest.is_empty() {
        let end = rest.windows(2).position(|w| w == b"\r\n").expect("CRLF");
        let line = &rest[..end];
        let colon = line.iter().position(|&b| b == b':').expect("a colon");
        let name = &line[..colon];
        assert!(crate::codec::head::is_token(name) && !name.iter().any(u8::is_ascii_uppercase));
        assert!(line[colon + 1..].starts_with(b" "));
        assert!(!trailers || !crate::message::trailers::is_forbidden(name), "{name:?}");
        rest = &rest[end + 2..];
    }
}

/// The proxy cache's reading of an upstream's answer (`proxy/cache/
/// control.rs`) on arbitrary bytes: NUL-separated, the `Cache-Control`
/// lines (split at `\n`), then `Date`, `Expires` and `Age`. Never
/// panics; every number within RFC 9111's cap; a conflicting directive
/// makes no freshness; `s-maxage` wins over `max-age`, which wins over
/// `Expires`; the same input reads the same.
pub fn cache_control(data: &[u8]) {
    use crate::proxy::cache::control::{delta_seconds, freshness, parse_into, Directives, DELTA_MAX};
    let mut parts = data.split(|&b| b == 0);
    let lines = parts.next().unwrap_or_default();
    let (date, expires, age) = (parts.next(), parts.next(), parts.next());
    let read = || {
        let mut d = Directives::default();
        for line in lines.split(|&b| b == b'\n') {
            parse_into(&mut d, line);
        }
        d
    };
    let d = read();
    assert_eq!(d, read(), "not deterministic");
    for n in [d.max_age, d.s_maxage, d.stale_while_revalidate, d.stale_if_error]
        .into_iter()
        .flatten()
    {
        assert!(n <= DELTA_MAX, "{n} past the cap");
    }
    // Received at a time after any date a test would pick, and before.
    for now in [0, 1_800_000_000, u64::MAX] {
        let f = freshness(&d, date, expires, age, now);
        if d.conflicting {
            assert!(f.is_none(), "a conflicting directive made {f:?}");
        }
        let Some(f) = f else { continue };
        assert!(f.lifetime <= DELTA_MAX && f.initial_age <= DELTA_MAX, "{f:?}");
        match (d.s_maxage, d.max_age) {
            (Some(s), _) => assert_eq!(f.lifetime, s),
            (None, Some(m)) => assert_eq!(f.lifetime, m),
            (None, None) => assert!(expires.is_some(), "fresh without a lifetime: {f:?}"),
        }
        if let Some(a) = age.and_then(|a| delta_seconds(crate::codec::head::trim_ows(a))) {
            assert!(f.initial_age >= a.min(DELTA_MAX), "{f:?} below Age {a}");
        }
    }
}

/// The request head parsed with the plain parser first (as served) and
/// by httparse alone: the same answer on every input, the same fields as
/// the same slices of it (`codec::plain` is a subset parser: what it
/// takes, httparse takes alike, and the rules after tokenising are one
/// code path), under small limits and the defaults.
pub fn request_head_plain(data: &[u8]) {
    use crate::codec::head::parse_head_with;
    use crate::codec::Parsed;
    use std::mem::MaybeUninit;
    let small = Limits {
        uri_bytes_max: 64,
        head_bytes_max: 512,
        n_headers_max: 4,
        body_bytes_max: 4096,
        ..Limits::default()
    };
    for limits in [small, Limits::default()] {
        let mut a = [const { MaybeUninit::uninit() }; 16];
        let mut b = [const { MaybeUninit::uninit() }; 16];
        let plain = parse_head_with(data, &mut a, &limits, true);
        let slow = parse_head_with(data, &mut b, &limits, false);
        match (&plain, &slow) {
            (Ok(Parsed::Complete(p)), Ok(Parsed::Complete(s))) => {
                // Field by field: the same bytes at the same place.
                let at = |v: &[u8]| v.as_ptr() as usize - data.as_ptr() as usize;
                assert_eq!(p.headers.len(), s.headers.len());
                for (x, y) in p.headers.iter().zip(s.headers) {
                    assert_eq!((x.name, at(x.value), x.value), (y.name, at(y.value), y.value));
                    // A field a file handler reads is among the names
                    // noted: a handler skips its pass only without one.
                    assert!(
                        noted_name(x.name).is_none_or(|n| p.field_names.intersects(n)),
                        "{} not noted in {:?}",
                        x.name,
                        p.field_names
                    );
                }
                assert_eq!(format!("{p:?}"), format!("{s:?}"));
            }
            (Ok(Parsed::Partial), Ok(Parsed::Partial)) => {}
            (Err(x), Err(y)) => assert_eq!(x, y),
            _ => panic!("plain {plain:?} against httparse {slow:?}"),
        }
    }
}

/// The `FieldNames` bit of a field a file handler reads, if `name` is one.
fn noted_name(name: &str) -> Option<crate::FieldNames> {
    use crate::FieldNames as N;
    [
        ("accept-encoding", N::ACCEPT_ENCODING),
        ("range", N::RANGE),
        ("if-range", N::IF_RANGE),
        ("if-match", N::IF_MATCH),
        ("if-none-match", N::IF_NONE_MATCH),
        ("if-modified-since", N::IF_MODIFIED_SINCE),
        ("if-unmodified-since", N::IF_UNMODIFIED_SINCE),
    ]
    .into_iter()
    .find(|(n, _)| name.eq_ignore_ascii_case(n))
    .map(|(_, bit)| bit)
}

/// The response head parsed with the plain parser first (as the proxy
/// reads upstream answers) and by httparse alone: the same answer on
/// every input, the same fields as the same slices of it (as
/// `request_head_plain` for requests), for each method whose framing
/// differs, with room for all fields and for fewer than some heads have.
pub fn response_head_plain(data: &[u8]) {
    use crate::codec::client::{parse_response_head_with, ParsedResponse};
    use std::mem::MaybeUninit;
    for method in ["GET", "HEAD", "CONNECT"] {
        for n_slots in [16, 2] {
            let mut a = [const { MaybeUninit::uninit() }; 16];
            let mut b = [const { MaybeUninit::uninit() }; 16];
            let plain = parse_response_head_with(data, &mut a[..n_slots], method, true);
            let slow = parse_response_head_with(data, &mut b[..n_slots], method, false);
            match (&plain, &slow) {
                (Ok(ParsedResponse::Complete(p)), Ok(ParsedResponse::Complete(s))) => {
                    let at = |v: &[u8]| v.as_ptr() as usize - data.as_ptr() as usize;
                    assert_eq!(p.headers.len(), s.headers.len());
                    for (x, y) in p.headers.iter().zip(s.headers) {
                        assert_eq!((x.name, at(x.value), x.value), (y.name, at(y.value), y.value));
                    }
                    assert_eq!(format!("{p:?}"), format!("{s:?}"));
                }
                (Ok(ParsedResponse::Partial), Ok(ParsedResponse::Partial)) => {}
                (Err(x), Err(y)) => assert_eq!(format!("{x:?}"), format!("{y:?}")),
                _ => panic!("{method}: plain {plain:?} against httparse {slow:?}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Heads the plain response parser takes, and heads it leaves to
    /// httparse, give httparse's answer (the fuzz target's check, on
    /// seeds), and the common one is the plain parser's.
    #[test]
    fn response_heads_parse_alike_either_way() {
        let heads: [&[u8]; 22] = [
            b"HTTP/1.1 200 OK\r\nServer: limit\r\nDate: Thu, 01 Jan 2026 00:00:00 GMT\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!",
            b"HTTP/1.1 200 OK\r\n\r\n",
            b"HTTP/1.0 404 Not Found\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 204\r\nX: a \t \r\n\r\n",
            b"HTTP/1.1 200  two spaces \r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"HTTP/1.1 099 Low\r\n\r\n",
            b"HTTP/1.1 999 High\r\n\r\n",
            b"HTTP/1.1 200 OK\nX: 1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX: 1\n\r\n",
            b"HTTP/1.1 200 \tOK\r\n\r\n",
            b"HTTP/1.1 200 O\xc3\xa9\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX: \xc3\xa9\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX : 1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n X: 1\r\n\r\n",
            b"HTTP/1.1 2x0 OK\r\n\r\n",
            b"HTTP/2.0 200 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Le",
        ];
        for head in heads {
            for end in 0..=head.len() {
                response_head_plain(&head[..end]);
            }
        }
        // Every seed with one byte replaced or inserted at each place, by
        // the bytes the two parsers decide on differently if at all.
        let bytes = [
            0u8, b'\t', b'\n', b'\r', b' ', b'0', b'9', b':', b'A', b'(', 0x7f, 0x80, 0xc3, 0xff,
        ];
        for head in heads {
            for at in 0..head.len() {
                for &b in &bytes {
                    let mut replaced = head.to_vec();
                    replaced[at] = b;
                    response_head_plain(&replaced);
                    let mut inserted = head.to_vec();
                    inserted.insert(at, b);
                    response_head_plain(&inserted);
                }
            }
        }
        let mut slots = [const { std::mem::MaybeUninit::uninit() }; 16];
        let Ok((status, fields)) = crate::codec::plain::parse_response(heads[0], &mut slots) else {
            panic!("the common head went to httparse");
        };
        assert_eq!(
            (status.minor, status.status, status.reason, fields.len()),
            (1, 200, "OK", 4)
        );
    }

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// `GET /` (static table entries 2, 7, 4) with `:authority: a`.
    const GET: &[u8] = &[0x82, 0x87, 0x84, 0x01, 0x01, b'a'];

    /// `payload` as a client compresses it (RFC 7692: the tail removed).
    fn deflated(payload: &[u8]) -> Vec<u8> {
        let mut c = flate2::Compress::new(flate2::Compression::default(), false);
        let mut out = Vec::with_capacity(payload.len() + 64);
        c.compress_vec(payload, &mut out, flate2::FlushCompress::Sync).unwrap();
        out.truncate(out.len() - 4);
        out
    }

    #[test]
    fn the_ws_driver_runs_its_seeds_every_way() {
        use test_support::ws::masked;
        let inputs = [
            [masked(0x81, b"hi"), masked(0x89, b"p"), masked(0x88, &[3, 232])].concat(),
            [masked(0x01, b"\xce"), masked(0x80, b"\xbb")].concat(),
            [masked(0x02, b"a"), masked(0x82, b"b")].concat(),
            masked(0x81, b"\xff"),
            // Compressed (RSV1): "hello hello hello" deflated, whole and
            // in two frames; a deflate bomb past the 300-byte limit.
            [masked(0xC1, &deflated(b"hello hello hello")), masked(0x89, b"p")].concat(),
            {
                let d = deflated(b"abcabcabcabcabcabc");
                [masked(0x42, &d[..3]), masked(0x80, &d[3..])].concat()
            },
            masked(0xC2, &deflated(&[0; 5000])),
        ];
        for input in inputs {
            // The seed's high bit agrees permessage-deflate.
            for seed in (0..=31u8).chain(128..=159) {
                ws_session(&[&[seed][..], &input].concat());
            }
        }
    }

    #[test]
    fn the_h1_driver_runs_its_seeds_every_way() {
        let inputs: [&[u8]; 8] = [
            b"",
            // Answered in the first read, then a shutdown: closed as idle
            // (the fuzzer's first find: the driver expected a deadline).
            b"POST / HTTP/1.1\r\nHost: a\r\nX: \xff\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\nHEAD /later HTTP/1.1\r\nHost: a\r\n\r\nGET /big HTTP/1.1\r\nHost: a\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /close HTTP/1.1\r\nHost: a\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.0\r\n\r\n",
            b"HEAD / HTTP/1.1\r\nHost: a\r\nContent-Length: 2000\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n",
            // CI's find: a HEAD to the upgrade path, a long URI, then a
            // malformed request line.
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\nHEAD /upgrade/b================================================/ HTTP/1.1\r\nHost: a\r\n\r\nHEAD /b==========================================================================================ater HTTP/1.1\r\nHost: a\r\n\r\nGET /bkgTHT P/1.1======= a\r\n\r\n",
        ];
        for input in inputs {
            for seed in 0..=255u8 {
                h1_session(&[&[seed][..], input].concat());
            }
        }
    }

    #[test]
    fn the_h2_driver_runs_its_seeds_every_way() {
        let inputs = [
            vec![],
            [frame(1, 5, 1, GET), frame(1, 5, 3, GET), frame(1, 5, 5, GET)].concat(),
            [
                frame(1, 4, 1, GET),
                frame(0, 0, 1, b"body"),
                frame(6, 0, 0, &[1; 8]),
                frame(0, 1, 1, b""),
                frame(8, 0, 0, &[0, 1, 0, 0]),
                frame(8, 0, 5, &[0, 1, 0, 0]),
                frame(1, 5, 5, GET),
                frame(8, 0, 5, &[0, 1, 0, 0]),
            ]
            .concat(),
            [
                frame(1, 5, 1, GET),
                frame(3, 0, 1, &[0, 0, 0, 8]),
                frame(0xff, 0, 0, b"?"),
            ]
            .concat(),
            [frame(1, 5, 1, GET), frame(1, 5, 1, GET)].concat(),
        ];
        for input in &inputs {
            for seed in 0..=255u8 {
                h2_session(&[&[seed][..], input].concat());
            }
        }
    }

    /// The client driver on its corpus (`fuzz/corpus/h2_client`), each
    /// input cut at every point a seed byte can choose.
    #[test]
    fn the_h2_client_driver_runs_its_seeds_every_way() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/corpus/h2_client");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let input = std::fs::read(entry.unwrap().path()).unwrap();
            for seed in 0..=255u8 {
                h2_client(&[&[seed][..], input.get(1..).unwrap_or_default()].concat());
            }
            n += 1;
        }
        assert!(n >= 5, "{n} seeds");
    }
}
