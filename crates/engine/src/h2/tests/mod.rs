//! `Session` driven by scripted byte streams, as a client would send them,
//! with the frames it writes back parsed and checked: the exchange, flow
//! control both ways, the stream states, and each defence with the outcome
//! it promises.

use super::frame::{self, Code, Header, PREFACE};
use super::hpack;
use super::*;
use crate::message::coding::write_integer;
use crate::message::Sent;
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
        discard_bytes_max: 1 << 20,
        connect_protocol: false,
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
    write_integer(b, 0, 7, name.len());
    b.extend_from_slice(name);
    write_integer(b, 0, 7, value.len());
    b.extend_from_slice(value);
}

pub(super) use crate::message::coding::hex;

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
    let mut sink = crate::message::fields::Sink::new(&mut bytes, &mut fields, usize::MAX);
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
    /// Bytes given to `handle_input` and not used yet (a partial frame).
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
    /// The trailer section the handler gets, as lines.
    trailers: Vec<u8>,
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
        let used = self.session.handle_input(&self.input, &mut self.out);
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
            trailers: p.trailers.map(|t| t.as_bytes().to_vec()).unwrap_or_default(),
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

/// RFC 7541 Appendix C.3 (no Huffman) and C.4 (Huffman): three request
/// header blocks on one connection, each relying on the table the last one
/// built.
pub(in crate::h2) const RFC7541_REQUEST_BLOCKS: [[&str; 3]; 2] = [
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

mod bodies;
mod defences;
mod exchange;
mod flow;
mod head_cache;
mod slices;
mod states;
mod timeouts;
mod tunnels;
