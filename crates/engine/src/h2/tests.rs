//! `Session` driven by scripted byte streams, as a client would send them,
//! with the frames it writes back parsed and checked: the exchange, flow
//! control both ways, the stream states, and each defence with the outcome
//! it promises.

use super::frame::{self, Code, Header, PREFACE};
use super::hpack;
use super::*;
use crate::response::{Body, Response};

const DATE: &[u8] = b"Mon, 23 Nov 2026 16:00:00 GMT";
/// A budget large enough never to stop `respond` or `send` early.
const BUDGET: usize = 1 << 24;

fn cfg() -> Config {
    Config {
        streams_max: 8,
        head_bytes_max: 4096,
        n_headers_max: 32,
        body_bytes_max: 1 << 20,
    }
}

// ---- Frames a client sends ----

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    frame::write_header(&mut f, payload.len(), kind, flags, stream);
    f.extend_from_slice(payload);
    f
}

fn settings(list: &[(u16, u32)]) -> Vec<u8> {
    let mut f = Vec::new();
    frame::write_settings(&mut f, list);
    f
}

fn client_preface() -> Vec<u8> {
    [PREFACE, &settings(&[])].concat()
}

fn ping(data: [u8; 8]) -> Vec<u8> {
    frame(frame::PING, 0, 0, &data)
}

fn window_update(stream: u32, increment: u32) -> Vec<u8> {
    frame(frame::WINDOW_UPDATE, 0, stream, &increment.to_be_bytes())
}

fn rst_stream(stream: u32, code: Code) -> Vec<u8> {
    frame(frame::RST_STREAM, 0, stream, &(code as u32).to_be_bytes())
}

fn goaway(last: u32, code: Code) -> Vec<u8> {
    frame(
        frame::GOAWAY,
        0,
        0,
        &[last.to_be_bytes(), (code as u32).to_be_bytes()].concat(),
    )
}

fn priority(stream: u32, dependency: u32) -> Vec<u8> {
    frame(
        frame::PRIORITY,
        0,
        stream,
        &[&dependency.to_be_bytes()[..], &[15]].concat(),
    )
}

fn data(stream: u32, end_stream: bool, bytes: &[u8]) -> Vec<u8> {
    let flags = if end_stream { frame::END_STREAM } else { 0 };
    frame(frame::DATA, flags, stream, bytes)
}

/// A complete header block in one HEADERS frame.
fn headers(stream: u32, end_stream: bool, block: &[u8]) -> Vec<u8> {
    let flags = frame::END_HEADERS | if end_stream { frame::END_STREAM } else { 0 };
    frame(frame::HEADERS, flags, stream, block)
}

/// The fields encoded with the module's own encoder: literals without
/// indexing, Huffman-coded where that is shorter.
fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (name, value) in fields {
        hpack::write_field(&mut b, name.as_bytes(), value.as_bytes());
    }
    b
}

/// A request's block: `:method`, `:scheme`, `:path`, `:authority`, then
/// `extra`.
fn request(method: &str, path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut fields = vec![
        (":method", method),
        (":scheme", "https"),
        (":path", path),
        (":authority", "example.com"),
    ];
    fields.extend_from_slice(extra);
    block(&fields)
}

fn get(stream: u32, path: &str) -> Vec<u8> {
    headers(stream, true, &request("GET", path, &[]))
}

/// A literal field without indexing and with a new name, written by hand
/// (RFC 7541 §6.2.2), so that names the encoder would lowercase get through.
fn literal(b: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    b.push(0);
    hpack::write_integer(b, 0, 7, name.len());
    b.extend_from_slice(name);
    hpack::write_integer(b, 0, 7, value.len());
    b.extend_from_slice(value);
}

/// Bytes from hex digits, spaces ignored (the RFC 7541 examples' form);
/// shared by the h2 modules' tests.
pub(super) fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

// ---- Frames the session writes ----

#[derive(Clone, Debug, PartialEq, Eq)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
    /// A HEADERS frame's fields, decoded in order by the peer's decoder
    /// (our encoder indexes: a block may refer to an earlier one's).
    fields: Option<Vec<(String, String)>>,
}

impl Frame {
    fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// The error code of RST_STREAM or GOAWAY.
    fn code(&self) -> u32 {
        let at = if self.kind == frame::GOAWAY { 4 } else { 0 };
        u32::from_be_bytes(self.payload[at..at + 4].try_into().unwrap())
    }

    /// GOAWAY's last stream id.
    fn last_stream(&self) -> u32 {
        assert_eq!(self.kind, frame::GOAWAY);
        u32::from_be_bytes(self.payload[..4].try_into().unwrap())
    }

    fn increment(&self) -> u32 {
        assert_eq!(self.kind, frame::WINDOW_UPDATE);
        u32::from_be_bytes(self.payload[..4].try_into().unwrap())
    }

    fn is_rst(&self, stream: u32, code: Code) -> bool {
        self.kind == frame::RST_STREAM && self.stream == stream && self.code() == code as u32
    }

    fn is_goaway(&self, code: Code) -> bool {
        self.kind == frame::GOAWAY && self.code() == code as u32
    }

    /// The decoded fields of a HEADERS frame: as the peer decoded them in
    /// order, or (for a frame parsed alone) with a fresh decoder.
    fn fields(&self) -> Vec<(String, String)> {
        assert_eq!(self.kind, frame::HEADERS);
        assert!(self.has(frame::END_HEADERS));
        self.fields
            .clone()
            .unwrap_or_else(|| decode(&mut hpack::Decoder::new(4096), &self.payload))
    }

    fn field(&self, name: &str) -> Option<String> {
        self.fields().into_iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    fn status(&self) -> u16 {
        self.field(":status").unwrap().parse().unwrap()
    }
}

fn decode(decoder: &mut hpack::Decoder, block: &[u8]) -> Vec<(String, String)> {
    let (mut bytes, mut fields) = (Vec::new(), Vec::new());
    let mut sink = hpack::Sink::new(&mut bytes, &mut fields, usize::MAX);
    decoder.decode(block, &mut sink).unwrap();
    let s = |(at, len): (u32, u32)| String::from_utf8(bytes[at as usize..(at + len) as usize].to_vec()).unwrap();
    fields.iter().map(|f| (s(f.name), s(f.value))).collect()
}

/// A HEADERS frame's block, without padding or priority (ours have none).
fn header_block(f: &Frame) -> &[u8] {
    assert!(!f.has(frame::PADDED) && !f.has(frame::PRIORITY_FLAG));
    &f.payload
}

/// Splits `out` into frames; it must hold whole frames only.
fn parse(mut out: &[u8]) -> Vec<Frame> {
    let mut frames = Vec::new();
    while !out.is_empty() {
        let h = Header::parse(out).expect("a whole frame header");
        let end = frame::HEADER_LEN + h.len;
        assert!(out.len() >= end, "a frame cut short");
        frames.push(Frame {
            kind: h.kind,
            flags: h.flags,
            stream: h.stream,
            payload: out[frame::HEADER_LEN..end].to_vec(),
            fields: None,
        });
        out = &out[end..];
    }
    frames
}

fn kinds(frames: &[Frame]) -> Vec<u8> {
    frames.iter().map(|f| f.kind).collect()
}

/// The body a stream's DATA frames carry, and whether one ended it.
fn body_of(frames: &[Frame], stream: u32) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    let mut ended = false;
    for f in frames.iter().filter(|f| f.stream == stream && f.kind == frame::DATA) {
        assert!(!ended, "DATA after END_STREAM");
        body.extend_from_slice(&f.payload);
        ended = f.has(frame::END_STREAM);
    }
    (body, ended)
}

// ---- The session, as the connection driver uses it ----

struct Peer {
    session: Session,
    /// The client's HPACK decoder, reading our HEADERS in order.
    decoder: hpack::Decoder,
    /// Bytes given to `recv` and not used yet (a partial frame).
    input: Vec<u8>,
    out: Vec<u8>,
}

/// A request as the handler would see it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    id: u32,
    method: String,
    target: String,
    host: Option<String>,
    fields: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Peer {
    /// A session that has not read anything; its own preface is in `out`.
    /// It sends lasting bodies as slices, as on a cleartext connection.
    fn raw(cfg: Config) -> Peer {
        let mut p = Peer {
            session: Session::new(cfg),
            decoder: hpack::Decoder::new(4096),
            input: Vec::new(),
            out: Vec::new(),
        };
        p.session.set_splicing(true);
        p.session.start(&mut p.out);
        p
    }

    /// A session past the preface and SETTINGS exchange, its output read.
    fn new(cfg: Config) -> Peer {
        let mut p = Peer::raw(cfg);
        p.feed(&client_preface());
        assert_eq!(
            kinds(&p.frames()),
            [frame::SETTINGS, frame::WINDOW_UPDATE, frame::SETTINGS]
        );
        p
    }

    fn feed(&mut self, bytes: &[u8]) {
        self.input.extend_from_slice(bytes);
        let used = self.session.recv(&self.input, &mut self.out);
        assert!(used <= self.input.len());
        self.input.drain(..used);
    }

    /// The frames written since the last call.
    fn frames(&mut self) -> Vec<Frame> {
        let mut wire = Vec::new();
        self.session.splices.flatten(&self.out, 0, &mut wire);
        self.session.splices.clear();
        let mut frames = parse(&wire);
        self.out.clear();
        for f in &mut frames {
            if f.kind == frame::HEADERS && f.has(frame::END_HEADERS) {
                f.fields = Some(decode(&mut self.decoder, header_block(f)));
            }
        }
        frames
    }

    fn ready(&mut self) -> Vec<u32> {
        std::iter::from_fn(|| self.session.take_ready()).collect()
    }

    fn seen(&self, id: u32) -> Seen {
        let p = self.session.parts(id).unwrap();
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let n = p.head.fill(&mut headers);
        Seen {
            id,
            method: p.method.to_string(),
            target: p.target.to_string(),
            host: p.host.map(str::to_string),
            fields: headers[..n]
                .iter()
                .map(|h| (h.name.to_string(), String::from_utf8(h.value.to_vec()).unwrap()))
                .collect(),
            body: p.body.to_vec(),
        }
    }

    fn respond(&mut self, id: u32, mut resp: Response) -> Option<Sent> {
        self.session
            .respond(id, &mut resp, false, DATE, b"", &mut self.out, BUDGET)
    }

    /// Takes every ready request and answers it the way `answer` says,
    /// returning what the handler saw.
    fn answer_ready(&mut self, answer: impl Fn(&Seen) -> Response) -> Vec<Seen> {
        let mut seen = Vec::new();
        while let Some(id) = self.session.take_ready() {
            let resp = match self.session.refused(id) {
                Some((status, _)) => Response::error(status),
                None => {
                    let s = self.seen(id);
                    let resp = answer(&s);
                    seen.push(s);
                    resp
                }
            };
            self.respond(id, resp).unwrap();
        }
        seen
    }

    fn send(&mut self) {
        self.session.send(&mut self.out, BUDGET);
    }
}

/// The answer the tests' handler gives: the method, target and body length.
fn echo(s: &Seen) -> Response {
    Response::text(format!("{} {} {}", s.method, s.target, s.body.len()))
}

// ---- The exchange ----

#[test]
fn preface_and_settings_are_exchanged_and_acknowledged() {
    let mut p = Peer::raw(cfg());
    let ours = p.frames();
    assert_eq!(kinds(&ours), [frame::SETTINGS, frame::WINDOW_UPDATE]);
    assert_eq!(ours[0].stream, 0);
    assert_eq!(
        ours[0].payload,
        [
            &frame::SETTINGS_MAX_CONCURRENT_STREAMS.to_be_bytes()[..],
            &8u32.to_be_bytes(),
            &frame::SETTINGS_MAX_HEADER_LIST_SIZE.to_be_bytes(),
            &4096u32.to_be_bytes(),
        ]
        .concat()
    );
    assert_eq!(ours[1].increment() as i64, H2_CONN_WINDOW - frame::DEFAULT_WINDOW);

    // The client's preface and SETTINGS: one empty SETTINGS with ACK.
    p.feed(PREFACE);
    assert!(p.out.is_empty());
    p.feed(&settings(&[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 1000), (0xff, 7)]));
    let ack = p.frames();
    assert_eq!(kinds(&ack), [frame::SETTINGS]);
    assert!(ack[0].has(frame::ACK));
    assert!(ack[0].payload.is_empty());
    // The client's ACK of our SETTINGS needs no answer.
    p.feed(&frame(frame::SETTINGS, frame::ACK, 0, &[]));
    assert!(p.out.is_empty());
    assert!(p.session.is_idle() && !p.session.is_done());
}

#[test]
fn a_bad_preface_or_a_first_frame_other_than_settings_ends_the_connection() {
    let mut p = Peer::raw(cfg());
    p.frames();
    p.feed(b"GET / HTTP/1.1\r\n\r\n");
    let f = p.frames();
    assert_eq!(f.len(), 1);
    assert!(f[0].is_goaway(Code::Protocol));
    assert!(p.session.is_done());

    let mut p = Peer::raw(cfg());
    p.frames();
    p.feed(&[PREFACE, &ping([0; 8])].concat());
    let f = p.frames();
    assert!(f[0].is_goaway(Code::Protocol), "{f:?}");
    assert!(p.session.is_done());
}

#[test]
fn a_get_is_answered_with_headers_then_data_and_end_stream() {
    let mut p = Peer::new(cfg());
    p.feed(&get(1, "/hello?x=1"));
    assert!(p.out.is_empty());
    assert_eq!(p.ready(), [1]);
    let s = p.seen(1);
    assert_eq!(
        (s.method.as_str(), s.target.as_str(), s.host.as_deref()),
        ("GET", "/hello?x=1", Some("example.com"))
    );
    assert!(s.fields.is_empty() && s.body.is_empty());

    let sent = p.respond(1, Response::text("hello")).unwrap();
    assert_eq!((sent.status, sent.body_bytes), (200, 5));
    let f = p.frames();
    assert_eq!(kinds(&f), [frame::HEADERS, frame::DATA]);
    assert!(f.iter().all(|f| f.stream == 1));
    assert!(f[0].has(frame::END_HEADERS) && !f[0].has(frame::END_STREAM));
    assert_eq!(f[0].status(), 200);
    assert_eq!(f[0].field("content-length").as_deref(), Some("5"));
    assert_eq!(f[0].field("content-type").as_deref(), Some("text/plain; charset=utf-8"));
    assert_eq!(f[0].field("date").as_deref(), Some(std::str::from_utf8(DATE).unwrap()));
    assert_eq!(f[0].field("server").as_deref(), Some("peregrine"));
    assert_eq!(f[1].payload, b"hello");
    assert!(f[1].has(frame::END_STREAM));
    assert!(p.session.is_idle());
    // The stream is gone: a second answer finds nothing.
    assert!(p.respond(1, Response::text("again")).is_none());
}

#[test]
fn head_and_bodiless_answers_end_the_stream_with_headers() {
    let mut p = Peer::new(cfg());
    p.feed(&headers(1, true, &request("HEAD", "/", &[])));
    p.feed(&get(3, "/none"));
    p.feed(&get(5, "/empty"));
    assert_eq!(p.ready(), [1, 3, 5]);
    let sent = p
        .session
        .respond(
            1,
            &mut Response::text("twelve bytes"),
            true,
            DATE,
            b"",
            &mut p.out,
            BUDGET,
        )
        .unwrap();
    assert_eq!((sent.status, sent.body_bytes), (200, 0));
    p.respond(3, Response::new(204)).unwrap();
    p.respond(5, Response::text("")).unwrap();
    let f = p.frames();
    assert_eq!(kinds(&f), [frame::HEADERS; 3]);
    assert!(f.iter().all(|f| f.has(frame::END_STREAM)));
    // HEAD: the length of the body a GET would get (RFC 9110 §9.3.2).
    assert_eq!(f[0].field("content-length").as_deref(), Some("12"));
    assert_eq!((f[1].status(), f[1].field("content-length")), (204, None));
    assert_eq!(f[2].field("content-length").as_deref(), Some("0"));
    assert!(p.session.is_idle());
}

/// RFC 7541 Appendix C.3 and C.4: three requests on one connection, each
/// relying on the dynamic table the one before built, without and with
/// Huffman coding.
#[test]
fn rfc7541_request_examples_decode_across_streams() {
    for blocks in RFC7541_REQUEST_BLOCKS {
        let mut p = Peer::new(cfg());
        for (i, b) in blocks.iter().enumerate() {
            p.feed(&headers(2 * i as u32 + 1, true, &hex(b)));
        }
        assert!(p.out.is_empty());
        assert_eq!(p.ready(), [1, 3, 5]);
        let seen: Vec<_> = [1, 3, 5].map(|id| p.seen(id)).into();
        for s in &seen {
            assert_eq!((s.method.as_str(), s.host.as_deref()), ("GET", Some("www.example.com")));
        }
        assert_eq!(seen[0].target, "/");
        assert!(seen[0].fields.is_empty());
        assert_eq!(seen[1].fields, [("cache-control".to_string(), "no-cache".to_string())]);
        assert_eq!(seen[2].target, "/index.html");
        assert_eq!(seen[2].fields, [("custom-key".to_string(), "custom-value".to_string())]);
    }
}

/// One connection's worth of client bytes using most frame types: a GET,
/// a POST with a padded, prioritised HEADERS and a body in two DATA
/// frames, a head in HEADERS + CONTINUATION, a body with trailers, cookies
/// split for compression, PING, PRIORITY, WINDOW_UPDATE, SETTINGS, a
/// SETTINGS ACK, an unknown frame type, and GOAWAY.
fn script() -> Vec<u8> {
    let mut s = client_preface();
    s.extend(get(1, "/a"));
    s.extend(ping(*b"12345678"));
    let mut padded = vec![3]; // pad length
    padded.extend_from_slice(&[0, 0, 0, 1, 200]); // depends on 1, weight 201
    padded.extend(request("POST", "/b", &[("content-length", "20")]));
    padded.extend_from_slice(&[0; 3]);
    s.extend(frame(
        frame::HEADERS,
        frame::END_HEADERS | frame::PADDED | frame::PRIORITY_FLAG,
        3,
        &padded,
    ));
    let head = request("GET", "/c", &[("cookie", "a=1"), ("accept", "*/*"), ("cookie", "b=2")]);
    let (first, rest) = head.split_at(10);
    s.extend(frame(frame::HEADERS, frame::END_STREAM, 5, first));
    s.extend(frame(frame::CONTINUATION, frame::END_HEADERS, 5, rest));
    s.extend(data(3, false, b"0123456789"));
    s.extend(priority(7, 3));
    s.extend(window_update(0, 1000));
    s.extend(frame(0xfa, 0x3, 0, b"ignored"));
    s.extend(headers(7, false, &request("PUT", "/d", &[])));
    s.extend(data(7, false, b"abc"));
    s.extend(settings(&[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20)]));
    s.extend(data(3, true, b"abcdefghij"));
    s.extend(frame(frame::SETTINGS, frame::ACK, 0, &[]));
    s.extend(window_update(7, 50));
    s.extend(headers(7, true, &block(&[("x-trailer", "t")])));
    s.extend(goaway(0, Code::NoError));
    s
}

/// Feeds `script` in the pieces `cuts` gives, answering each request as
/// soon as it is ready; returns the requests and the frames written, the
/// connection's own in order and each stream's in order.
fn run_script(script: &[u8], cuts: &[usize]) -> (Vec<Seen>, Vec<Frame>, Vec<Vec<Frame>>) {
    let mut p = Peer::raw(cfg());
    let mut seen = Vec::new();
    let mut out = Vec::new();
    let mut at = 0;
    for cut in cuts.iter().copied().chain([script.len()]) {
        p.feed(&script[at..cut]);
        at = cut;
        seen.extend(p.answer_ready(echo));
        // HEADERS compare by their decoded fields: with the encoder's
        // dynamic table, the bytes depend on which answers went first.
        out.extend(p.frames().into_iter().map(|mut f| {
            if f.fields.is_some() {
                f.payload.clear();
            }
            f
        }));
    }
    assert!(p.input.is_empty());
    assert!(p.session.is_done());
    seen.sort_by_key(|s| s.id);
    let connection = out.iter().filter(|f| f.stream == 0).cloned().collect();
    let streams = [1, 3, 5, 7]
        .map(|id| out.iter().filter(|f| f.stream == id).cloned().collect())
        .into();
    (seen, connection, streams)
}

#[test]
fn the_same_bytes_split_at_every_offset_give_the_same_requests_and_output() {
    let script = script();
    let whole = run_script(&script, &[]);
    let (seen, connection, streams) = &whole;
    assert_eq!(seen.len(), 4);
    let targets: Vec<_> = seen.iter().map(|s| (s.id, s.target.as_str())).collect();
    assert_eq!(targets, [(1, "/a"), (3, "/b"), (5, "/c"), (7, "/d")]);
    assert_eq!(seen[1].body, b"0123456789abcdefghij");
    assert_eq!(
        seen[2].fields,
        [
            ("cookie".to_string(), "a=1; b=2".to_string()),
            ("accept".to_string(), "*/*".to_string())
        ]
    );
    assert_eq!(seen[3].body, b"abc");
    // Our SETTINGS and WINDOW_UPDATE, the ACK of the client's two
    // SETTINGS, the PING's answer; nothing for the rest.
    let acks: Vec<_> = connection.iter().map(|f| (f.kind, f.flags)).collect();
    assert_eq!(
        acks,
        [
            (frame::SETTINGS, 0),
            (frame::WINDOW_UPDATE, 0),
            (frame::SETTINGS, frame::ACK),
            (frame::PING, frame::ACK),
            (frame::SETTINGS, frame::ACK)
        ]
    );
    assert_eq!(connection[3].payload, b"12345678");
    for (id, frames) in [1, 3, 5, 7].iter().zip(streams) {
        assert_eq!(kinds(frames), [frame::HEADERS, frame::DATA], "stream {id}");
        assert_eq!(frames[0].status(), 200);
    }
    assert_eq!(body_of(&streams[1], 3), (b"POST /b 20".to_vec(), true));

    for cut in 0..=script.len() {
        assert!(run_script(&script, &[cut]) == whole, "split at {cut}");
    }
    let every_byte: Vec<_> = (1..script.len()).collect();
    assert!(run_script(&script, &every_byte) == whole, "one byte at a time");
}

// ---- Request bodies ----

/// Sends `body` on stream `id` as a client would, within the windows the
/// server gives, and returns the WINDOW_UPDATEs it got back.
fn upload(p: &mut Peer, id: u32, body: &[u8]) -> Vec<Frame> {
    let (mut stream_window, mut conn_window) = (frame::DEFAULT_WINDOW, H2_CONN_WINDOW);
    let mut updates = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let n = rest
            .len()
            .min(frame::DEFAULT_FRAME_BYTES)
            .min(stream_window.min(conn_window) as usize);
        assert!(n > 0, "the server never opened the window again");
        let (chunk, tail) = rest.split_at(n);
        p.feed(&data(id, tail.is_empty(), chunk));
        rest = tail;
        stream_window -= n as i64;
        conn_window -= n as i64;
        for f in p.frames() {
            assert_eq!(f.kind, frame::WINDOW_UPDATE, "{f:?}");
            if f.stream == 0 {
                conn_window += i64::from(f.increment());
            } else {
                assert_eq!(f.stream, id);
                stream_window += i64::from(f.increment());
            }
            updates.push(f);
        }
    }
    updates
}

#[test]
fn a_request_body_is_collected_and_the_windows_are_given_back() {
    let mut p = Peer::new(cfg());
    let body: Vec<u8> = (0..700_000u32).map(|i| (i % 251) as u8).collect();
    p.feed(&headers(
        1,
        false,
        &request("POST", "/up", &[("content-length", "700000")]),
    ));
    assert!(p.session.is_receiving());
    let updates = upload(&mut p, 1, &body);
    // The stream's window once half of it is used; the connection's once
    // half of its 1 MiB is.
    let first = &updates[0];
    assert_eq!((first.stream, first.increment()), (1, 3 * 16_384));
    assert!(updates.iter().any(|f| f.stream == 0));
    assert_eq!(p.ready(), [1]);
    assert!(!p.session.is_receiving());
    assert!(p.seen(1).body == body);
}

#[test]
fn a_body_that_breaks_its_content_length_resets_only_its_stream() {
    let mut p = Peer::new(cfg());
    // More than announced.
    p.feed(&headers(1, false, &request("POST", "/", &[("content-length", "3")])));
    p.feed(&data(1, false, b"abcd"));
    // Fewer than announced.
    p.feed(&headers(3, false, &request("POST", "/", &[("content-length", "3")])));
    p.feed(&data(3, true, b"ab"));
    // A length but no body at all.
    p.feed(&headers(5, true, &request("POST", "/", &[("content-length", "3")])));
    // Trailers before the announced length.
    p.feed(&headers(7, false, &request("POST", "/", &[("content-length", "3")])));
    p.feed(&data(7, false, b"ab"));
    p.feed(&headers(7, true, &block(&[("x-t", "1")])));
    let f = p.frames();
    assert!(f[0].is_rst(1, Code::Protocol), "{f:?}");
    assert!(f[1].is_rst(3, Code::Protocol), "{f:?}");
    assert!(f[2].is_rst(5, Code::Protocol), "{f:?}");
    assert!(f[3].is_rst(7, Code::Protocol), "{f:?}");
    assert_eq!(f.len(), 4);
    assert!(p.ready().is_empty() && p.session.is_idle());
    // The connection goes on.
    p.feed(&headers(9, false, &request("POST", "/", &[("content-length", "3")])));
    p.feed(&data(9, true, b"abc"));
    assert_eq!(p.answer_ready(echo)[0].body, b"abc");
}

#[test]
fn a_body_over_body_bytes_max_gets_413_and_the_rest_is_refused() {
    let mut p = Peer::new(Config {
        body_bytes_max: 100,
        ..cfg()
    });
    p.feed(&headers(1, false, &request("POST", "/", &[])));
    p.feed(&data(1, false, &[b'x'; 60]));
    assert!(p.ready().is_empty());
    p.feed(&data(1, false, &[b'x'; 60]));
    assert_eq!(p.session.refused(1), Some((413, "request body too large")));
    assert!(p.session.parts(1).unwrap().body.is_empty());
    p.answer_ready(echo);
    let f = p.frames();
    assert_eq!(f[0].status(), 413);
    // §8.1: the response is complete before the request, so the client
    // is told to stop with NO_ERROR.
    assert!(f.last().unwrap().is_rst(1, Code::NoError), "{f:?}");
    assert!(p.session.is_idle());
    // DATA still in flight is ignored (§5.1).
    p.feed(&data(1, true, b"late"));
    assert!(p.out.is_empty());
    p.feed(&get(3, "/next"));
    assert_eq!(p.answer_ready(echo).len(), 1);
}

#[test]
fn expect_100_continue_gets_an_interim_head_only_while_the_body_is_awaited() {
    let mut p = Peer::new(Config {
        body_bytes_max: 100,
        ..cfg()
    });
    let expect = ("expect", "100-continue");
    // Stream 1: the client waits; the driver chose to read the body.
    p.feed(&headers(
        1,
        false,
        &request("POST", "/", &[expect, ("content-length", "4")]),
    ));
    assert_eq!(p.session.take_head(), Some(1));
    assert!(p.frames().is_empty(), "nothing before the driver decides");
    p.session.send_continue(1, &mut p.out);
    let f = p.frames();
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].kind, f[0].stream, f[0].status()), (frame::HEADERS, 1, 100));
    assert!(!f[0].has(frame::END_STREAM), "an interim head does not end the stream");
    // Once only.
    p.session.send_continue(1, &mut p.out);
    assert!(p.frames().is_empty());
    p.feed(&data(1, true, b"abcd"));
    let seen = p.answer_ready(echo);
    assert_eq!(seen[0].body, b"abcd");
    let f = p.frames();
    assert_eq!((f[0].status(), f[0].stream), (200, 1));
    // Case does not matter (RFC 9110 §10.1.1).
    p.feed(&headers(3, false, &request("POST", "/", &[("expect", "100-Continue")])));
    p.session.send_continue(3, &mut p.out);
    assert_eq!(p.frames()[0].status(), 100);
    p.feed(&data(3, true, b"x"));
    p.answer_ready(echo);
    p.frames();
    // Stream 5: the body began to arrive before the decision: no 100.
    p.feed(&headers(5, false, &request("POST", "/", &[expect])));
    p.feed(&data(5, false, b"ab"));
    p.session.send_continue(5, &mut p.out);
    assert!(p.frames().is_empty());
    p.feed(&data(5, true, b"cd"));
    p.answer_ready(echo);
    assert_eq!(p.frames()[0].status(), 200);
    // Stream 7: a length over body_bytes_max is refused at once with the
    // final 413, never a 100; the rest of the body is refused (§8.1).
    p.feed(&headers(
        7,
        false,
        &request("POST", "/", &[expect, ("content-length", "101")]),
    ));
    assert_eq!(p.session.refused(7), Some((413, "request body too large")));
    p.session.send_continue(7, &mut p.out);
    assert!(p.frames().is_empty());
    p.answer_ready(echo);
    let f = p.frames();
    assert_eq!(f[0].status(), 413);
    assert!(f.last().unwrap().is_rst(7, Code::NoError), "{f:?}");
    // Stream 9: answered before its body was asked for (a handler that
    // did not take its reader): the final answer, then no 100.
    p.feed(&headers(9, false, &request("POST", "/", &[expect])));
    p.respond(9, Response::error(403)).unwrap();
    p.session.send_continue(9, &mut p.out);
    let f = p.frames();
    assert_eq!(f[0].status(), 403);
    assert!(f.iter().all(|f| f.kind != frame::HEADERS || f.status() != 100), "{f:?}");
    // Stream 11: an expectation we do not know gets 417, as on HTTP/1.1.
    p.feed(&headers(11, true, &request("GET", "/", &[("expect", "tea")])));
    assert_eq!(p.session.refused(11), Some((417, "unsupported expectation")));
    // A request without Expect never gets a 100.
    p.feed(&headers(13, false, &request("POST", "/", &[])));
    p.session.send_continue(13, &mut p.out);
    assert!(p.frames().is_empty());
}

// ---- Response flow control ----

#[test]
fn a_response_larger_than_the_window_waits_for_window_update() {
    let mut p = Peer::new(cfg());
    p.feed(&get(1, "/big"));
    p.ready();
    let body: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    p.respond(1, Response::text(body.clone()));
    let f = p.frames();
    let (sent, ended) = body_of(&f, 1);
    // The client never raised the connection's window or the stream's.
    assert_eq!((sent.len() as i64, ended), (frame::DEFAULT_WINDOW, false));
    assert!(f.iter().all(|f| f.payload.len() <= frame::DEFAULT_FRAME_BYTES));
    assert!(p.session.is_flow_blocked() && !p.session.wants_send());
    p.send();
    assert!(p.out.is_empty());

    // The stream's window alone is not enough: the connection's is shut.
    p.feed(&window_update(1, 100_000));
    assert!(!p.session.wants_send());
    p.feed(&window_update(0, 10_000));
    assert!(p.session.wants_send());
    p.send();
    let more = p.frames();
    assert_eq!(body_of(&more, 1), (body[65_535..75_535].to_vec(), false));
    p.feed(&window_update(0, 100_000));
    p.send();
    let rest = p.frames();
    assert_eq!(body_of(&rest, 1), (body[75_535..].to_vec(), true));
    assert!(p.session.is_idle());
}

#[test]
fn initial_window_size_changes_apply_to_open_streams() {
    let mut p = Peer::new(cfg());
    p.feed(&settings(&[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 100)]));
    p.feed(&get(1, "/"));
    p.ready();
    p.respond(1, Response::text(vec![b'a'; 1000]));
    let f = p.frames();
    assert_eq!(body_of(&f, 1).0.len(), 100);
    // +500 for the open stream.
    p.feed(&settings(&[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 600)]));
    assert_eq!(kinds(&p.frames()), [frame::SETTINGS]);
    p.send();
    assert_eq!(body_of(&p.frames(), 1).0.len(), 500);
    // -600: the window goes negative (§6.9.2) and takes a WINDOW_UPDATE of
    // more than 600 to reopen.
    p.feed(&settings(&[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 0)]));
    p.frames();
    p.feed(&window_update(1, 600));
    assert!(!p.session.wants_send());
    p.feed(&window_update(1, 400));
    p.send();
    assert_eq!(body_of(&p.frames(), 1), (vec![b'a'; 400], true));
    assert!(p.session.is_idle());
}

#[test]
fn a_larger_max_frame_size_gives_larger_data_frames() {
    let mut p = Peer::new(cfg());
    p.feed(&settings(&[
        (frame::SETTINGS_MAX_FRAME_SIZE, 40_000),
        (frame::SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20),
    ]));
    p.feed(&window_update(0, 1 << 20));
    p.feed(&get(1, "/"));
    p.ready();
    p.frames();
    p.respond(1, Response::text(vec![0; 100_000]));
    let sizes: Vec<_> = p.frames()[1..].iter().map(|f| f.payload.len()).collect();
    assert_eq!(sizes, [40_000, 40_000, 20_000]);
}

#[test]
fn the_output_stays_within_the_budget_given_to_send() {
    let budget = 20_000;
    let mut p = Peer::new(cfg());
    p.feed(&settings(&[(
        frame::SETTINGS_INITIAL_WINDOW_SIZE,
        frame::WINDOW_MAX as u32,
    )]));
    p.feed(&window_update(0, (frame::WINDOW_MAX - frame::DEFAULT_WINDOW) as u32));
    for id in [1, 3, 5, 7] {
        p.feed(&get(id, "/"));
    }
    p.frames();
    let bodies: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 300_000]).collect();
    let mut all = Vec::new();
    let mut n_writes = 0;
    loop {
        // As the driver does: answer while the buffer is below its budget,
        // send what the windows allow, write the buffer out, repeat.
        while p.out.len() < budget {
            let Some(id) = p.session.take_ready() else { break };
            let mut resp = Response::text(bodies[id as usize / 2].clone());
            p.session.respond(id, &mut resp, false, DATE, b"", &mut p.out, budget);
        }
        if p.session.wants_send() {
            p.session.send(&mut p.out, budget);
        }
        // A DATA frame may start below the budget and end 1 KiB past it.
        assert!(p.out.len() <= budget + 1024 + 200, "{}", p.out.len());
        if p.out.is_empty() {
            break;
        }
        all.extend(p.frames());
        n_writes += 1;
    }
    assert!(n_writes >= 4 * 300_000 / budget);
    for (i, id) in [1, 3, 5, 7].into_iter().enumerate() {
        assert!(body_of(&all, id) == (bodies[i].clone(), true), "stream {id}");
    }
    assert!(p.session.is_idle());
}

// ---- Frames and stream states ----

#[test]
fn continuation_completes_a_header_block() {
    let mut p = Peer::new(cfg());
    let head = request("GET", "/long", &[("x-one", &"1".repeat(300)), ("x-two", "2")]);
    let (a, rest) = head.split_at(5);
    let (b, c) = rest.split_at(100);
    p.feed(&frame(frame::HEADERS, frame::END_STREAM, 1, a));
    p.feed(&frame(frame::CONTINUATION, 0, 1, b));
    assert!(p.ready().is_empty() && p.session.is_receiving() && !p.session.is_idle());
    p.feed(&frame(frame::CONTINUATION, frame::END_HEADERS, 1, c));
    assert_eq!(p.ready(), [1]);
    let s = p.seen(1);
    assert_eq!(s.target, "/long");
    assert_eq!(s.fields[0].1.len(), 300);
    assert!(p.out.is_empty());
}

#[test]
fn a_frame_inside_a_header_block_or_a_stray_continuation_ends_the_connection() {
    let head = request("GET", "/", &[]);
    for intruder in [
        ping([0; 8]),
        frame(frame::CONTINUATION, frame::END_HEADERS, 3, &head[3..]),
        get(3, "/"),
    ] {
        let mut p = Peer::new(cfg());
        p.feed(&frame(frame::HEADERS, frame::END_STREAM, 1, &head[..3]));
        p.feed(&intruder);
        let f = p.frames();
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].is_goaway(Code::Protocol));
        assert!(p.session.is_done());
    }
    let mut p = Peer::new(cfg());
    p.feed(&frame(frame::CONTINUATION, frame::END_HEADERS, 1, &head));
    assert!(p.frames()[0].is_goaway(Code::Protocol));
}

#[test]
fn ping_is_answered_with_its_payload_and_a_ping_ack_is_not() {
    let mut p = Peer::new(cfg());
    p.feed(&ping(*b"pingpong"));
    let f = p.frames();
    assert_eq!(kinds(&f), [frame::PING]);
    assert!(f[0].has(frame::ACK));
    assert_eq!((f[0].stream, &f[0].payload[..]), (0, &b"pingpong"[..]));
    p.feed(&frame(frame::PING, frame::ACK, 0, b"whatever"));
    assert!(p.out.is_empty());
    p.feed(&frame(frame::PING, 0, 0, b"short"));
    assert!(p.frames()[0].is_goaway(Code::FrameSize));
}

#[test]
fn priority_is_read_and_ignored() {
    let mut p = Peer::new(cfg());
    // On idle streams, open ones and closed ones alike.
    p.feed(&priority(11, 0));
    p.feed(&headers(1, false, &request("POST", "/", &[])));
    p.feed(&priority(1, 11));
    p.feed(&priority(3, 1));
    assert!(p.out.is_empty());
    p.feed(&data(1, true, b"x"));
    assert_eq!(p.answer_ready(echo).len(), 1);
    p.feed(&priority(1, 0));
    // HEADERS with the priority flag: the five bytes are skipped.
    let mut with_priority = vec![0x80, 0, 0, 1, 255];
    with_priority.extend(request("GET", "/p", &[]));
    p.feed(&frame(
        frame::HEADERS,
        frame::END_HEADERS | frame::END_STREAM | frame::PRIORITY_FLAG,
        13,
        &with_priority,
    ));
    assert_eq!(p.answer_ready(echo)[0].target, "/p");
    p.frames();
    // Depending on itself is a stream error (§5.3.1).
    p.feed(&priority(15, 15));
    assert_eq!(p.frames(), [parse(&rst_stream(15, Code::Protocol))[0].clone()]);
    assert!(!p.session.is_done());
}

#[test]
fn rst_stream_from_the_client_forgets_the_stream() {
    let mut p = Peer::new(cfg());
    p.feed(&headers(1, false, &request("POST", "/", &[])));
    p.feed(&get(3, "/"));
    p.feed(&rst_stream(1, Code::Cancel));
    p.feed(&rst_stream(3, Code::Cancel));
    assert!(p.ready().is_empty());
    assert!(p.session.is_idle() && p.out.is_empty());
    // A response already under way stops.
    p.feed(&get(5, "/"));
    p.ready();
    p.respond(5, Response::text(vec![0; 100_000]));
    p.feed(&rst_stream(5, Code::Cancel));
    p.frames();
    p.feed(&window_update(0, 100_000));
    p.feed(&window_update(5, 100_000));
    p.send();
    assert!(p.out.is_empty() && p.session.is_idle());
    // On a stream never opened, it is a connection error.
    p.feed(&rst_stream(7, Code::Cancel));
    assert!(p.frames()[0].is_goaway(Code::Protocol));
}

#[test]
fn frames_sent_before_our_rst_stream_arrived_are_ignored() {
    // §5.1: "An endpoint MUST ignore frames that it receives on closed
    // streams after it has sent a RST_STREAM frame."
    let mut p = Peer::new(Config {
        streams_max: 2,
        body_bytes_max: 10,
        ..cfg()
    });
    // Answered 413 before the body ended.
    p.feed(&headers(1, false, &request("POST", "/", &[])));
    p.feed(&data(1, false, &[0; 20]));
    p.answer_ready(echo);
    assert!(p.frames().last().unwrap().is_rst(1, Code::NoError));
    // Reset for breaking its content-length.
    p.feed(&headers(3, false, &request("POST", "/", &[("content-length", "1")])));
    p.feed(&data(3, false, b"ab"));
    assert!(p.frames()[0].is_rst(3, Code::Protocol));
    // Refused past streams_max.
    p.feed(&headers(5, false, &request("POST", "/", &[])));
    p.feed(&headers(7, false, &request("POST", "/", &[])));
    p.feed(&headers(9, false, &request("POST", "/", &[])));
    assert!(p.frames()[0].is_rst(9, Code::RefusedStream));
    // What the client had sent on them meanwhile: the rest of the bodies
    // and trailers.
    for id in [1, 3, 9] {
        p.feed(&data(id, false, b"more"));
        p.feed(&headers(id, true, &block(&[("x-t", "1")])));
    }
    assert!(p.out.is_empty(), "{:?}", p.frames());
    assert!(!p.session.is_done());
    // A stream closed both ways is another matter: DATA on it is a stream
    // error, HEADERS a connection error.
    p.feed(&data(5, true, b""));
    p.feed(&data(7, true, b""));
    assert_eq!(p.answer_ready(echo).len(), 2);
    p.frames();
    p.feed(&data(5, true, b"x"));
    assert_eq!(p.frames(), [parse(&rst_stream(5, Code::StreamClosed))[0].clone()]);
    p.feed(&headers(5, true, &block(&[("x-t", "1")])));
    assert!(p.frames()[0].is_goaway(Code::Protocol));
}

#[test]
fn goaway_from_the_client_closes_once_its_streams_are_answered() {
    let mut p = Peer::new(cfg());
    p.feed(&get(1, "/"));
    p.feed(&goaway(0, Code::NoError));
    assert!(!p.session.is_done());
    p.answer_ready(echo);
    assert!(p.session.is_done());
    assert_eq!(kinds(&p.frames()), [frame::HEADERS, frame::DATA]);
}

#[test]
fn go_away_drains_gracefully() {
    let mut p = Peer::new(cfg());
    p.feed(&get(1, "/one"));
    p.feed(&headers(
        3,
        false,
        &request("POST", "/three", &[("content-length", "6")]),
    ));
    p.feed(&data(3, false, b"abc"));
    p.session.go_away(&mut p.out);
    p.session.go_away(&mut p.out);
    let f = p.frames();
    assert_eq!(f.len(), 1);
    assert!(f[0].is_goaway(Code::NoError));
    assert_eq!(f[0].last_stream(), 3);
    assert!(!p.session.is_done());

    // A stream the client opened before it saw our GOAWAY is ignored,
    // with whatever follows it.
    p.feed(&headers(5, false, &request("POST", "/five", &[])));
    p.feed(&data(5, false, b"ignored"));
    p.feed(&window_update(5, 10));
    p.feed(&rst_stream(5, Code::Cancel));
    p.feed(&get(7, "/seven"));
    assert!(p.out.is_empty(), "{:?}", p.frames());

    // The streams in flight finish.
    let seen = p.answer_ready(echo);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].target, "/one");
    assert!(!p.session.is_done());
    p.feed(&data(3, true, b"def"));
    let seen = p.answer_ready(echo);
    assert_eq!((seen[0].target.as_str(), &seen[0].body[..]), ("/three", &b"abcdef"[..]));
    assert!(p.session.is_done());
    let f = p.frames();
    assert_eq!(body_of(&f, 1), (b"GET /one 0".to_vec(), true));
    assert_eq!(body_of(&f, 3), (b"POST /three 6".to_vec(), true));
}

#[test]
fn deferred_streams_are_answered_later_while_others_are_answered_now() {
    let mut p = Peer::new(cfg());
    for id in [1, 3, 5] {
        p.feed(&get(id, &format!("/{id}")));
    }
    assert_eq!(p.ready(), [1, 3, 5]);
    p.session.defer(1, 77);
    p.session.defer(5, 78);
    assert_eq!(p.session.deferred_stream(77), Some(1));
    assert_eq!(p.session.deferred_stream(78), Some(5));
    assert_eq!(p.session.deferred_stream(79), None);
    p.respond(3, Response::text("now")).unwrap();
    p.feed(&get(7, "/7"));
    p.answer_ready(echo);
    let f = p.frames();
    assert!(f.iter().all(|f| f.stream == 3 || f.stream == 7));
    assert!(!p.session.is_idle() && !p.session.is_receiving());

    // The client gives up on 5 meanwhile; its answer finds no stream.
    p.feed(&rst_stream(5, Code::Cancel));
    assert_eq!(p.session.deferred_stream(78), None);
    let id = p.session.deferred_stream(77).unwrap();
    p.respond(id, Response::text("later")).unwrap();
    assert_eq!(body_of(&p.frames(), 1), (b"later".to_vec(), true));
    assert!(p.session.is_idle());
}

/// Fields from the dynamic table skip the byte checks only if they passed
/// them when inserted: a bad entry stays bad in every request using it.
#[test]
fn a_malformed_field_in_the_dynamic_table_is_refused_each_time_it_is_used() {
    let mut p = Peer::new(cfg());
    // Literals with incremental indexing (§6.2.1), new names: each
    // becomes dynamic entry 62 in turn, then is referred to by index.
    let cases: [(&[u8], &[u8]); 4] = [
        (b"X-Upper", b"1"),
        (b"x-sp", b" lead"),
        (b"x-nul", b"a\0b"),
        (b"x-good", b"fine"),
    ];
    let mut id = 1;
    for (name, value) in cases {
        let good = name == b"x-good";
        let mut first = request("GET", "/", &[]);
        first.push(0x40);
        hpack::write_integer(&mut first, 0, 7, name.len());
        first.extend_from_slice(name);
        hpack::write_integer(&mut first, 0, 7, value.len());
        first.extend_from_slice(value);
        let mut again = request("GET", "/", &[]);
        again.push(0x80 | 62);
        for b in [first, again] {
            p.feed(&headers(id, true, &b));
            if good {
                assert_eq!(p.answer_ready(echo).len(), 1, "stream {id}");
                p.frames();
            } else {
                let f = p.frames();
                assert!(f.len() == 1 && f[0].is_rst(id, Code::Protocol), "stream {id}: {f:?}");
            }
            id += 2;
        }
    }
}

#[test]
fn malformed_requests_are_stream_errors() {
    let mut p = Peer::new(cfg());
    let mut upper = request("GET", "/", &[]);
    literal(&mut upper, b"X-Upper", b"1");
    let mut connection = request("GET", "/", &[]);
    literal(&mut connection, b"connection", b"close");
    let no_path = block(&[(":method", "GET"), (":scheme", "https")]);
    let other_host = request("GET", "/", &[("host", "other.example")]);
    for (i, b) in [upper, connection, no_path, other_host].iter().enumerate() {
        let id = 2 * i as u32 + 1;
        p.feed(&headers(id, true, b));
        assert_eq!(p.frames(), [parse(&rst_stream(id, Code::Protocol))[0].clone()]);
    }
    assert!(p.ready().is_empty());
    // A Host that names the same origin, in another case, is no mistake.
    p.feed(&headers(9, true, &request("GET", "/", &[("host", "Example.COM")])));
    assert_eq!(p.ready(), [9]);
    // An even stream id, or one lower than the last, ends the connection.
    p.feed(&get(4, "/"));
    assert!(p.frames()[0].is_goaway(Code::Protocol));
    let mut p = Peer::new(cfg());
    p.feed(&get(5, "/"));
    p.feed(&get(3, "/"));
    let f = p.frames();
    assert!(f[0].is_goaway(Code::Protocol) && f[0].last_stream() == 5);
}

#[test]
fn a_bad_header_block_is_a_compression_error() {
    let mut p = Peer::new(cfg());
    p.feed(&headers(1, true, &[0xbe])); // the dynamic table is empty
    let f = p.frames();
    assert!(f[0].is_goaway(Code::Compression), "{f:?}");
    assert!(p.session.is_done());
}

// ---- Defences ----

/// Feeds `frames` until the session fails; how many it took and the
/// frames it wrote.
fn flood(p: &mut Peer, unit: &[u8], n_max: usize) -> (usize, Vec<Frame>) {
    let mut out = Vec::new();
    for n in 1..=n_max {
        p.feed(unit);
        out.extend(p.frames());
        if p.session.is_done() {
            return (n, out);
        }
    }
    panic!("no GOAWAY after {n_max} repetitions");
}

/// The connection ended with GOAWAY(ENHANCE_YOUR_CALM) and wrote nothing
/// after it.
fn assert_calmed(frames: &[Frame]) {
    let last = frames.last().unwrap();
    assert!(last.is_goaway(Code::EnhanceYourCalm), "{last:?}");
    assert_eq!(frames.iter().filter(|f| f.kind == frame::GOAWAY).count(), 1);
}

#[test]
fn rapid_reset_gets_enhance_your_calm() {
    let mut p = Peer::new(cfg());
    let mut id = 1;
    let mut out = Vec::new();
    while !p.session.is_done() {
        assert!(id < 2 * 2000, "no GOAWAY");
        // What a client sends in one write: open, then cancel.
        p.feed(&[get(id, "/"), rst_stream(id, Code::Cancel)].concat());
        assert!(p.ready().is_empty());
        out.extend(p.frames());
        id += 2;
    }
    assert_eq!(id / 2, H2_CONTROL_FRAMES_BASE as u32 + 1);
    assert_calmed(&out);
}

#[test]
fn answered_streams_earn_their_resets() {
    // A client that cancels streams it has had answers to is not an
    // attacker: each answer earns four control frames.
    let mut p = Peer::new(cfg());
    for id in (1..6000).step_by(2) {
        p.feed(&get(id, "/"));
        p.answer_ready(echo);
        p.feed(&rst_stream(id, Code::Cancel));
        p.frames();
    }
    assert!(!p.session.is_done());
}

#[test]
fn a_continuation_flood_gets_enhance_your_calm_with_bounded_memory() {
    let cfg = cfg();
    // Large fragments: the block outgrows head_bytes_max.
    let mut p = Peer::new(cfg);
    p.feed(&frame(frame::HEADERS, 0, 1, &request("GET", "/", &[])));
    let (n, out) = flood(&mut p, &frame(frame::CONTINUATION, 0, 1, &[0x40; 1000]), 100);
    assert_eq!(n, 5);
    assert_calmed(&out);
    assert!(p.session.block.capacity() <= cfg.head_bytes_max + frame::DEFAULT_FRAME_BYTES);
    // Empty fragments: counted as control frames.
    let mut p = Peer::new(cfg);
    p.feed(&frame(frame::HEADERS, 0, 1, &request("GET", "/", &[])));
    let (n, out) = flood(&mut p, &frame(frame::CONTINUATION, 0, 1, &[]), 5000);
    assert_eq!(n as u64, H2_CONTROL_FRAMES_BASE + 1);
    assert_calmed(&out);
    // A HEADERS frame whose block alone is too large.
    let mut p = Peer::new(Config {
        head_bytes_max: 100,
        ..cfg
    });
    p.feed(&headers(1, true, &request("GET", "/", &[("x", &"y".repeat(200))])));
    assert_calmed(&p.frames());
}

#[test]
fn an_hpack_bomb_gets_431_and_the_connection_survives() {
    let cfg = Config {
        head_bytes_max: 8192,
        ..cfg()
    };
    let mut p = Peer::new(cfg);
    // Request 1 puts a 4 KB field in the dynamic table (literal with
    // incremental indexing, §6.2.1)...
    let mut b = request("GET", "/1", &[]);
    b.push(0x40);
    hpack::write_integer(&mut b, 0, 7, 5);
    b.extend_from_slice(b"x-big");
    hpack::write_integer(&mut b, 0, 7, 4000);
    b.extend_from_slice(&[b'a'; 4000]);
    p.feed(&headers(1, true, &b));
    assert_eq!(p.answer_ready(echo)[0].fields[0].1.len(), 4000);
    p.frames();
    // ... and request 3 names it 1000 times in 1000 bytes: 4 MB decoded.
    let mut bomb = request("GET", "/3", &[]);
    bomb.extend_from_slice(&[0x80 | 62; 1000]);
    p.feed(&headers(3, true, &bomb));
    assert_eq!(p.ready(), [3]);
    assert_eq!(p.session.refused(3), Some((431, "request header fields too large")));
    let idx = p.session.find(3).unwrap();
    assert!(p.session.streams[idx].head.bytes.len() <= cfg.head_bytes_max);
    p.respond(3, Response::error(431)).unwrap();
    assert_eq!(p.frames()[0].status(), 431);
    // The table is still in step with the client's: index 62 still works.
    let mut again = request("GET", "/5", &[]);
    again.push(0x80 | 62);
    p.feed(&headers(5, true, &again));
    let seen = p.answer_ready(echo);
    assert_eq!((seen[0].target.as_str(), seen[0].fields[0].1.len()), ("/5", 4000));
    assert!(!p.session.is_done());
}

#[test]
fn too_many_fields_get_431() {
    let mut p = Peer::new(Config {
        n_headers_max: 3,
        ..cfg()
    });
    let fields = [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")];
    p.feed(&headers(1, true, &request("GET", "/", &fields)));
    // The limit counts fields as HTTP/1.1 would: not the pseudo-fields,
    // and cookie crumbs (§8.2.3) as the one field they are joined into.
    p.feed(&headers(3, true, &request("GET", "/", &fields[..3])));
    let crumbs = [("cookie", "a=1"), ("cookie", "b=2"), ("cookie", "c=3"), ("x", "y")];
    p.feed(&headers(5, true, &request("GET", "/", &crumbs)));
    assert_eq!(p.session.refused(1), Some((431, "too many header fields")));
    assert_eq!(p.session.refused(3), None);
    assert_eq!(p.session.refused(5), None);
    let seen = p.answer_ready(echo);
    assert_eq!(seen.iter().map(|s| s.id).collect::<Vec<_>>(), [3, 5]);
    assert_eq!(seen[1].fields[0].1, "a=1; b=2; c=3");
    let f = p.frames();
    assert_eq!((f[0].stream, f[0].status()), (1, 431));
}

#[test]
fn control_frame_floods_get_enhance_your_calm() {
    let floods: [(&str, Vec<u8>); 5] = [
        ("SETTINGS", settings(&[(frame::SETTINGS_ENABLE_PUSH, 0)])),
        ("PING", ping([1; 8])),
        ("empty DATA", data(1, false, &[])),
        ("WINDOW_UPDATE", window_update(0, 1)),
        ("PRIORITY", priority(3, 0)),
    ];
    for (what, unit) in floods {
        let mut p = Peer::new(cfg());
        p.feed(&headers(1, false, &request("POST", "/", &[])));
        let (n, out) = flood(&mut p, &unit, 5000);
        // The first SETTINGS is free; every later one counts.
        assert_eq!(n as u64, H2_CONTROL_FRAMES_BASE + 1, "{what}");
        assert_calmed(&out);
        // Each frame before the last got its answer, and the last none.
        let n_acks = out.iter().filter(|f| f.kind != frame::GOAWAY).count();
        let answered = matches!(what, "SETTINGS" | "PING");
        assert_eq!(n_acks, if answered { n - 1 } else { 0 }, "{what}");
    }
}

#[test]
fn a_flood_of_requests_answered_with_rst_stream_gets_enhance_your_calm() {
    // CVE-2019-9514, the reset flood: requests each of which makes us
    // write RST_STREAM.
    let mut bad = request("GET", "/", &[]);
    literal(&mut bad, b"X-Upper", b"1");
    let mut p = Peer::new(cfg());
    let mut id = 1;
    let mut out = Vec::new();
    while !p.session.is_done() {
        assert!(id < 4 * 2000, "no GOAWAY");
        p.feed(&headers(id, true, &bad));
        out.extend(p.frames());
        id += 2;
    }
    assert_calmed(&out);
    // And DATA on closed streams.
    let mut p = Peer::new(cfg());
    p.feed(&get(1, "/"));
    p.answer_ready(echo);
    p.frames();
    let (_, out) = flood(&mut p, &data(1, true, &[]), 5000);
    assert_calmed(&out);
}

#[test]
fn streams_past_streams_max_are_refused() {
    let mut p = Peer::new(Config {
        streams_max: 2,
        ..cfg()
    });
    p.feed(&headers(1, false, &request("POST", "/", &[])));
    p.feed(&headers(3, false, &request("POST", "/", &[])));
    p.feed(&headers(5, false, &request("POST", "/", &[])));
    let f = p.frames();
    assert_eq!(f, [parse(&rst_stream(5, Code::RefusedStream))[0].clone()]);
    // Once a stream ends, a new one fits.
    p.feed(&data(1, true, b""));
    p.answer_ready(echo);
    p.frames();
    p.feed(&get(7, "/"));
    assert_eq!(p.answer_ready(echo)[0].id, 7);
    assert!(!p.session.is_done());
}

#[test]
fn a_failing_body_resets_its_stream_and_the_others_go_on() {
    // Two responses whose bodies fail after the first window's worth: the
    // first one's reset must not upset sending the second.
    let mut p = Peer::new(cfg());
    p.feed(&get(1, "/"));
    p.feed(&get(3, "/"));
    p.ready();
    for id in [1, 3] {
        let chunks = std::iter::once(vec![b'x'; 70_000]).chain(std::iter::from_fn(|| -> Option<Vec<u8>> {
            panic!("the body iterator fails (this panic is expected)")
        }));
        p.respond(id, Response::new(200).with_body(Body::Stream(Box::new(chunks))));
    }
    p.feed(&window_update(0, 1 << 20));
    p.feed(&window_update(1, 1 << 20));
    p.feed(&window_update(3, 1 << 20));
    p.send();
    p.send();
    let f = p.frames();
    assert!(f.iter().any(|f| f.is_rst(1, Code::Internal)), "{f:?}");
    assert!(f.iter().any(|f| f.is_rst(3, Code::Internal)), "{f:?}");
    assert!(p.session.is_idle());
}

#[test]
fn nothing_is_written_after_a_connection_error() {
    let mut p = Peer::new(cfg());
    // A complete request, then a frame that ends the connection.
    p.feed(&[get(1, "/"), frame(frame::PUSH_PROMISE, 0, 1, &[0; 4])].concat());
    let f = p.frames();
    assert_eq!(f.len(), 1);
    assert!(f[0].is_goaway(Code::Protocol));
    assert_eq!(f[0].last_stream(), 1);
    assert!(p.session.is_done());
    assert!(p.ready().is_empty());
    p.feed(&ping([0; 8]));
    p.send();
    assert!(p.out.is_empty());
}

// ---- DATA payloads as slices (splice.rs) ----

/// A body of `n` distinct-ish bytes that lives for good, as `kind` says.
fn lasting_body(kind: usize, n: usize) -> Body {
    let bytes: Vec<u8> = (0..n).map(|i| (i * 7 + i / 251) as u8).collect();
    if kind == 0 {
        Body::Static(Box::leak(bytes.into_boxed_slice()))
    } else {
        // A range inside a larger buffer, as an archive entry is.
        let mut whole = vec![0xee; 100];
        whole.extend_from_slice(&bytes);
        whole.extend_from_slice(&[0xdd; 50]);
        let whole: std::sync::Arc<dyn AsRef<[u8]> + Send + Sync> = std::sync::Arc::new(whole);
        Body::Shared(crate::response::SharedBytes::slice(whole, 100..100 + n).unwrap())
    }
}

/// Moves what `session` queued (`out` and its slices) to `wire`, as a
/// write would.
fn drain(session: &mut Session, out: &mut Vec<u8>, wire: &mut Vec<u8>) {
    session.splices.flatten(out, 0, wire);
    session.splices.clear();
    out.clear();
}

/// Runs the same exchange on a session that splices and one that copies
/// (small windows, a small frame size, a small budget: bodies cut at every
/// kind of boundary) and returns both sessions' bytes on the wire, and
/// whether the splicing one queued any slice.
fn spliced_and_copied(kind: usize, n: usize, budget: usize) -> (Vec<u8>, Vec<u8>, bool) {
    let mut wires = Vec::new();
    let mut any_slice = false;
    for splicing in [true, false] {
        let mut session = Session::new(cfg());
        session.set_splicing(splicing);
        let mut out = Vec::new();
        let mut wire = Vec::new();
        session.start(&mut out);
        let mut input = client_preface();
        input.extend(settings(&[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 5000)]));
        input.extend(get(1, "/a"));
        input.extend(get(3, "/b"));
        session.recv(&input, &mut out);
        for id in [1, 3] {
            assert_eq!(session.take_ready(), Some(id));
            let mut resp = Response::new(200).with_body(lasting_body(kind, n + id as usize));
            session.respond(id, &mut resp, false, DATE, b"", &mut out, budget);
            any_slice |= !session.splices.is_empty();
            assert!(out.len() + session.splices.bytes() <= budget + 1024 + 200);
            drain(&mut session, &mut out, &mut wire);
        }
        for _ in 0..100 {
            if session.is_idle() {
                break;
            }
            session.recv(&window_update(0, 3000), &mut out);
            session.recv(&window_update(1, 3000), &mut out);
            session.recv(&window_update(3, 3000), &mut out);
            while session.wants_send() {
                session.send(&mut out, budget);
                any_slice |= !session.splices.is_empty();
                assert!(out.len() + session.splices.bytes() <= budget + 1024 + 200);
                drain(&mut session, &mut out, &mut wire);
            }
        }
        assert!(session.is_idle(), "kind {kind}, {n} bytes: not all sent");
        wires.push(wire);
    }
    let copied = wires.pop().unwrap();
    let spliced = wires.pop().unwrap();
    (spliced, copied, any_slice)
}

#[test]
fn lasting_bodies_leave_as_slices_with_the_same_bytes_as_copied() {
    for kind in [0, 1] {
        for n in [0, 17, 1000, 1023, 1024, 4096, 16_383, 16_384, 16_385, 40_000] {
            for budget in [3000, BUDGET] {
                let (spliced, copied, any_slice) = spliced_and_copied(kind, n, budget);
                assert_eq!(spliced, copied, "kind {kind}, {n} bytes, budget {budget}");
                // Both bodies (n+1, n+3 bytes) are at least the minimum: sliced.
                assert_eq!(any_slice, n + 1 >= splice::SPLICE_BYTES_MIN, "kind {kind}, {n} bytes");
                // And what the client reads is the bodies, whole and in order.
                let frames = parse(&spliced);
                for id in [1u32, 3] {
                    let want: Vec<u8> = match lasting_body(kind, n + id as usize) {
                        Body::Static(b) => b.to_vec(),
                        Body::Shared(s) => s.as_slice().to_vec(),
                        _ => unreachable!(),
                    };
                    assert_eq!(body_of(&frames, id), (want, true), "kind {kind}, {n} bytes");
                }
            }
        }
    }
}

#[test]
fn owned_and_file_bodies_are_copied_not_sliced() {
    let mut p = Peer::new(cfg());
    p.feed(&get(1, "/"));
    p.ready();
    p.respond(1, Response::text(vec![b'x'; 5000]));
    assert!(p.session.splices.is_empty());
    assert_eq!(body_of(&p.frames(), 1), (vec![b'x'; 5000], true));
}

#[test]
fn splices_are_written_in_order_whatever_the_writes_take() {
    use std::io::IoSlice;
    // buf: 9 bytes, slice A, 5 bytes, slice B, 3 bytes.
    let buf: Vec<u8> = (0..17u8).collect();
    let a: &'static [u8] = &[100; 7];
    let b: &'static [u8] = &[200; 4];
    let make = || {
        let mut s = splice::Splices::default();
        s.push(9, splice::Slice::Static(a));
        s.push(14, splice::Slice::Static(b));
        s
    };
    let mut want = Vec::new();
    make().flatten(&buf, 0, &mut want);
    assert_eq!(want.len(), 17 + 7 + 4);
    assert_eq!(&want[9..16], a);
    // Every write size, iovec count and cap: the bytes come out as flattened.
    for step in 1..=want.len() {
        for iov_len in [2, 3, 5, 16] {
            for max in [1, 4, 9, 10, 1000] {
                let mut s = make();
                let mut pos = 0;
                let mut got = Vec::new();
                while !s.is_empty() || pos < buf.len() {
                    let mut iov = vec![IoSlice::new(&[]); iov_len];
                    let k = s.gather(&buf, pos, &mut iov, max);
                    assert!(k > 0);
                    let all: Vec<u8> = iov[..k].iter().flat_map(|v| v.iter().copied()).collect();
                    assert!(!all.is_empty() && all.len() <= max);
                    let n = step.min(all.len());
                    got.extend_from_slice(&all[..n]);
                    s.advance(&mut pos, n);
                    assert_eq!(s.bytes() + buf.len() - pos, want.len() - got.len());
                }
                assert_eq!(got, want, "step {step}, {iov_len} iovecs, at most {max}");
            }
        }
    }
}

// ---- The response head cache ----

#[test]
fn a_repeated_head_is_copied_and_decodes_as_encoded_afresh() {
    let mut p = Peer::new(cfg());
    let block = crate::response::HeaderBlock::new(&[("etag", "\"4-abc\""), ("cache-control", "max-age=60")]).unwrap();
    let other = crate::response::HeaderBlock::new(&[("etag", "\"4-xyz\""), ("cache-control", "max-age=60")]).unwrap();
    let make = |b: &crate::response::HeaderBlock, ct: &'static str| {
        Response::new(200)
            .with_content_type(ct)
            .with_header_block(b.clone())
            .with_body(&b"four"[..])
    };
    let mut heads = Vec::new();
    let mut id = 1;
    let mut ask = |p: &mut Peer, mut resp: Response, date: &[u8]| {
        p.feed(&get(id, "/"));
        assert_eq!(p.ready(), [id]);
        p.session
            .respond(id, &mut resp, false, date, b"", &mut p.out, BUDGET)
            .unwrap();
        let f = p.frames();
        let h = f.iter().find(|f| f.kind == frame::HEADERS).unwrap();
        heads.push((header_block(h).to_vec(), h.fields.clone().unwrap()));
        id += 2;
    };
    let later: &[u8] = b"Mon, 23 Nov 2026 16:00:01 GMT";
    ask(&mut p, make(&block, "text/plain"), DATE); // 0: fields enter the table
    ask(&mut p, make(&block, "text/plain"), DATE); // 1: all indexed: cached
    ask(&mut p, make(&block, "text/plain"), DATE); // 2: from the cache
    ask(&mut p, make(&other, "text/plain"), DATE); // 3: another block
    ask(&mut p, make(&block, "text/html"), DATE); // 4: another type
    ask(&mut p, make(&block, "text/plain"), later); // 5: another date
    p.feed(&settings(&[(frame::SETTINGS_HEADER_TABLE_SIZE, 100)]));
    p.frames();
    ask(&mut p, make(&block, "text/plain"), later); // 6: the table shrank
    ask(&mut p, make(&block, "text/plain"), later); // 7
    let want = |etag: &str, ct: &str, date: &[u8]| {
        vec![
            (":status".to_string(), "200".to_string()),
            ("server".to_string(), "peregrine".to_string()),
            ("date".to_string(), String::from_utf8(date.to_vec()).unwrap()),
            ("content-type".to_string(), ct.to_string()),
            ("content-length".to_string(), "4".to_string()),
            ("etag".to_string(), etag.to_string()),
            ("cache-control".to_string(), "max-age=60".to_string()),
        ]
    };
    let fields: Vec<_> = heads.iter().map(|(_, f)| f.clone()).collect();
    for i in [0, 1, 2] {
        assert_eq!(fields[i], want("\"4-abc\"", "text/plain", DATE), "{i}");
    }
    assert_eq!(fields[3], want("\"4-xyz\"", "text/plain", DATE));
    assert_eq!(fields[4], want("\"4-abc\"", "text/html", DATE));
    for i in [5, 6, 7] {
        assert_eq!(fields[i], want("\"4-abc\"", "text/plain", later), "{i}");
    }
    // Once every field is in the table, the same head is the same bytes.
    assert_eq!(heads[1].0, heads[2].0);
    assert!(heads[1].0.len() < heads[0].0.len());
    // The size change is announced at the start of the next block (§4.2).
    assert_eq!(heads[6].0[0] & 0xe0, 0x20);
    assert_ne!(heads[7].0[0] & 0xe0, 0x20);
}

/// RFC 7541 Appendix C.3 (no Huffman) and C.4 (Huffman): three request
/// header blocks on one connection, each relying on the table the last one
/// built.
pub(super) const RFC7541_REQUEST_BLOCKS: [[&str; 3]; 2] = [
    [
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ],
    [
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ],
];
