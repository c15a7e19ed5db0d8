//! Tests of the HTTP/3 framing, QPACK and the session: byte tables, and
//! whole streams fed split at every offset.

use super::frame::{self, Code, Piece, Reader};
use super::qpack;
use super::stream::{Config, Error, RequestStream, UniStream};
use super::{Action, Session};
use crate::message::fields::{Field, Sink};
use crate::response::Response;

const CFG: Config = Config {
    head_bytes_max: 4096,
    n_headers_max: 100,
    body_bytes_max: 1 << 20,
    connect_protocol: false,
};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Decodes a section into (name, value) pairs.
fn decode(block: &[u8]) -> Result<Vec<(String, String)>, qpack::QpackError> {
    let (mut bytes, mut fields, mut scratch) = (Vec::new(), Vec::<Field>::new(), Vec::new());
    let mut sink = Sink::new(&mut bytes, &mut fields, 1 << 20);
    qpack::decode(block, &mut sink, &mut scratch)?;
    let span = |(at, len): (u32, u32)| String::from_utf8_lossy(&bytes[at as usize..(at + len) as usize]).into_owned();
    Ok(fields.iter().map(|f| (span(f.name), span(f.value))).collect())
}

fn encode(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    qpack::Encoder::begin(&mut out);
    for (n, v) in fields {
        qpack::Encoder::field(&mut out, n.as_bytes(), v.as_bytes());
    }
    out
}

fn headers_frame(fields: &[(&str, &str)]) -> Vec<u8> {
    let block = encode(fields);
    let mut out = Vec::new();
    frame::write_header(&mut out, frame::HEADERS, block.len() as u64);
    out.extend_from_slice(&block);
    out
}

fn data_frame(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_header(&mut out, frame::DATA, data.len() as u64);
    out.extend_from_slice(data);
    out
}

const GET: [(&str, &str); 4] = [
    (":method", "GET"),
    (":scheme", "https"),
    (":authority", "example.com"),
    (":path", "/index.html"),
];

#[test]
fn varints_round_trip_at_each_length_boundary() {
    // RFC 9000 §A.1's examples, then the edges of each length.
    assert_eq!(
        frame::read_varint(&hex("c2197c5eff14e88c")),
        Some((151_288_809_941_952_652, 8))
    );
    assert_eq!(frame::read_varint(&hex("9d7f3e7d")), Some((494_878_333, 4)));
    assert_eq!(frame::read_varint(&hex("7bbd")), Some((15_293, 2)));
    assert_eq!(frame::read_varint(&hex("25")), Some((37, 1)));
    for v in [0, 63, 64, 16_383, 16_384, (1 << 30) - 1, 1 << 30, frame::VARINT_MAX] {
        let mut out = Vec::new();
        frame::write_varint(&mut out, v);
        assert_eq!(frame::read_varint(&out), Some((v, out.len())), "{v}");
        assert_eq!(frame::read_varint(&out[..out.len() - 1]), None, "{v} cut short");
    }
}

#[test]
fn the_frame_reader_gives_the_same_frames_split_at_every_offset() {
    let mut stream = headers_frame(&GET);
    frame::write_header(&mut stream, 0x21, 3); // a reserved type: ignored
    stream.extend_from_slice(b"xyz");
    stream.extend(data_frame(&[7; 100]));
    stream.extend(data_frame(&[]));
    let whole = pieces(&[&stream]);
    for at in 0..=stream.len() {
        assert_eq!(pieces(&[&stream[..at], &stream[at..]]), whole, "split at {at}");
    }
    let bytes: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(pieces(&bytes), whole, "one byte at a time");
}

/// Frames as (type, payload), from the inputs in order.
fn pieces(inputs: &[&[u8]]) -> Vec<(u64, Vec<u8>)> {
    let mut reader = Reader::default();
    let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
    for input in inputs {
        let mut input = *input;
        while let Some((piece, used)) = reader.next(input) {
            input = &input[used..];
            match piece {
                Piece::Start { kind, .. } => out.push((kind, Vec::new())),
                Piece::Payload(p) => out.last_mut().unwrap().1.extend_from_slice(p),
                Piece::End => {}
            }
        }
    }
    assert!(reader.at_boundary());
    out
}

#[test]
fn qpack_decodes_the_rfc_examples_and_every_representation_without_a_table() {
    // RFC 9204 Appendix B.1: a literal with a static name reference.
    assert_eq!(
        decode(&hex("0000 510b 2f69 6e64 6578 2e68 746d 6c")).unwrap(),
        [(":path".into(), "/index.html".into())]
    );
    // Indexed static (17: :method GET); literal names, plain and
    // Huffman-coded; a Huffman value; a non-zero Delta Base.
    let mut block = hex("00 05 d1 23 61 62 63 03 78 79 7a");
    let mut name = Vec::new();
    crate::message::coding::encode(b"custom-key", &mut name);
    qpack::write_integer(&mut block, 0x28, 3, name.len());
    block.extend_from_slice(&name);
    let mut value = Vec::new();
    crate::message::coding::encode(b"custom-value", &mut value);
    qpack::write_integer(&mut block, 0x80, 7, value.len());
    block.extend_from_slice(&value);
    let got = decode(&block).unwrap();
    assert_eq!(got[0], (":method".into(), "GET".into()));
    assert_eq!(got[1], ("abc".into(), "xyz".into()));
    assert_eq!(got[2], ("custom-key".into(), "custom-value".into()));
    assert_eq!(got.len(), 3);
}

#[test]
fn qpack_refuses_references_to_a_dynamic_table_it_did_not_allow() {
    for (bytes, why) in [
        ("02 00 80", "Required Insert Count 2"),
        ("00 00 80", "indexed field line, dynamic"),
        ("00 00 10", "indexed with post-base index"),
        ("00 00 00 01 61", "literal with post-base name reference"),
        ("00 00 41 01 61", "literal with dynamic name reference"),
    ] {
        assert!(decode(&hex(bytes)).is_err(), "{why}");
    }
    // Malformed: an index past the static table, a cut string, bad Huffman.
    assert!(decode(&hex("00 00 ff 24")).is_err());
    assert!(decode(&hex("00 00 51 05 61")).is_err());
    assert!(decode(&hex("00 00 51 81 ff")).is_err());
    assert!(decode(&hex("00")).is_err());
}

#[test]
fn the_encoder_uses_the_static_table_and_literals_and_decodes_back() {
    let fields = [
        (":status", "200"),
        (":status", "418"),
        ("content-type", "text/css"),
        ("content-type", "text/x-unknown"),
        ("x-custom", "value"),
        ("etag", "\"abc\""),
    ];
    let block = encode(&fields);
    // ":status 200" and "content-type text/css" are one byte each.
    assert_eq!(block[2], 0xc0 | 25);
    let got = decode(&block).unwrap();
    let want: Vec<(String, String)> = fields.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
    assert_eq!(got, want);
}

/// Feeds `stream` to a request parser in the given pieces, FIN after the last.
fn parse(inputs: &[&[u8]], cfg: &Config) -> (RequestStream, Result<(), Error>) {
    let mut r = RequestStream::default();
    for (i, input) in inputs.iter().enumerate() {
        if let Err(e) = r.recv(input, i + 1 == inputs.len(), cfg) {
            return (r, Err(e));
        }
    }
    (r, Ok(()))
}

#[test]
fn a_request_stream_split_at_every_offset_gives_the_same_request() {
    let mut stream = headers_frame(&[
        (":method", "POST"),
        (":scheme", "https"),
        (":authority", "example.com"),
        (":path", "/upload"),
        ("content-length", "11"),
        ("cookie", "a=1"),
        ("cookie", "b=2"),
    ]);
    stream.extend(data_frame(b"hello "));
    frame::write_header(&mut stream, 0x21, 2);
    stream.extend_from_slice(b"..");
    stream.extend(data_frame(b"world"));
    stream.extend(headers_frame(&[("x-trailer", "1"), ("host", "evil")]));
    for at in 0..=stream.len() {
        let (r, result) = parse(&[&stream[..at], &stream[at..]], &CFG);
        assert_eq!(result, Ok(()), "split at {at}");
        assert!(r.is_ready() && r.refused.is_none(), "split at {at}");
        assert_eq!(r.body, b"hello world");
        let parts = crate::message::Parts::of(&r.head, &r.body, r.trailers.as_ref()).unwrap();
        assert_eq!(
            (parts.method, parts.target, parts.host),
            ("POST", "/upload", Some("example.com"))
        );
        // The trailers are kept for the handler, less `host` (RFC 9110
        // §6.5.1).
        assert_eq!(parts.trailers.map(|t| t.as_bytes()), Some(&b"x-trailer: 1\r\n"[..]));
    }
}

#[test]
fn request_stream_errors_get_the_codes_of_rfc_9114() {
    let head = headers_frame(&GET);
    let mut settings = Vec::new();
    frame::write_settings(&mut settings, 100, false);
    let cases: Vec<(Vec<u8>, Error)> = vec![
        (data_frame(b"x"), Error::Conn(Code::FrameUnexpected, "")),
        (
            [head.clone(), settings].concat(),
            Error::Conn(Code::FrameUnexpected, ""),
        ),
        (
            [head.clone(), hex("02 00")].concat(),
            Error::Conn(Code::FrameUnexpected, ""),
        ),
        (
            [head.clone(), hex("00 05 61")].concat(),
            Error::Conn(Code::FrameError, ""),
        ),
        (hex("21 00"), Error::Stream(Code::RequestIncomplete, "")),
        (
            [head.clone(), headers_frame(&[("a", "b")]), headers_frame(&[("a", "b")])].concat(),
            Error::Conn(Code::FrameUnexpected, ""),
        ),
        (hex("01 03 05 00 80"), Error::Conn(Code::QpackDecompressionFailed, "")),
    ];
    for (bytes, want) in cases {
        let (_, got) = parse(&[&bytes], &CFG);
        let same = match (got, want) {
            (Err(Error::Conn(a, _)), Error::Conn(b, _)) | (Err(Error::Stream(a, _)), Error::Stream(b, _)) => a == b,
            _ => false,
        };
        assert!(same, "{bytes:02x?}: got {got:?}, want {want:?}");
    }
}

#[test]
fn requests_over_the_limits_or_malformed_are_refused_with_a_status() {
    let small = Config {
        head_bytes_max: 300,
        n_headers_max: 4,
        body_bytes_max: 10,
        connect_protocol: false,
    };
    let long = "v".repeat(400);
    let big_head = headers_frame(&[GET[0], GET[1], GET[2], GET[3], ("x-long", &long)]);
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (big_head, 431),
        (
            headers_frame(&[
                GET[0],
                GET[1],
                GET[2],
                GET[3],
                ("a", "1"),
                ("b", "2"),
                ("c", "3"),
                ("d", "4"),
                ("e", "5"),
            ]),
            431,
        ),
        (
            [headers_frame(&[GET[0], GET[1], GET[2], GET[3]]), data_frame(&[0; 11])].concat(),
            413,
        ),
        (
            headers_frame(&[GET[0], GET[1], GET[2], GET[3], ("content-length", "99")]),
            413,
        ),
        (
            headers_frame(&[GET[0], GET[1], GET[3]])
                .into_iter()
                .chain(data_frame(b""))
                .collect(),
            400,
        ),
        (
            headers_frame(&[GET[0], GET[1], GET[2], GET[3], ("connection", "close")]),
            400,
        ),
        (
            headers_frame(&[GET[0], GET[1], GET[2], GET[3], ("content-length", "3")]),
            400,
        ),
        (
            [
                headers_frame(&[GET[0], GET[1], GET[2], GET[3], ("content-length", "1")]),
                data_frame(b"ab"),
            ]
            .concat(),
            400,
        ),
    ];
    for (i, (bytes, status)) in cases.into_iter().enumerate() {
        let (r, result) = parse(&[&bytes], &small);
        assert_eq!(result, Ok(()), "case {i}");
        assert_eq!(r.refused.map(|r| r.0), Some(status), "case {i}");
    }
}

#[test]
fn the_control_stream_must_open_with_settings_and_stay_open() {
    let mut settings = vec![0x00];
    frame::write_settings(&mut settings, 100, false);
    let mut ok = UniStream::default();
    assert_eq!(ok.recv(&settings, false), Ok(()));
    assert_eq!(ok.recv(&hex("07 01 00"), false), Ok(()), "a client's GOAWAY");
    let code = |bytes: &[u8], fin: bool| match UniStream::default().recv(bytes, fin) {
        Err(Error::Conn(code, _)) => Some(code),
        _ => None,
    };
    assert_eq!(code(&hex("00 07 01 00"), false), Some(Code::MissingSettings));
    assert_eq!(
        code(&[settings.clone(), hex("04 00")].concat(), false),
        Some(Code::FrameUnexpected)
    );
    assert_eq!(
        code(&hex("00 04 02 02 00"), false),
        Some(Code::SettingsError),
        "an HTTP/2 setting"
    );
    assert_eq!(
        code(&hex("00 04 04 01 00 01 00"), false),
        Some(Code::SettingsError),
        "twice"
    );
    assert_eq!(
        code(&[settings.clone(), hex("00 00")].concat(), false),
        Some(Code::FrameUnexpected)
    );
    assert_eq!(code(&settings, true), Some(Code::ClosedCriticalStream));
    assert_eq!(code(&hex("02 20 20"), false), None, "capacity 0 is fine");
    assert_eq!(code(&hex("02 3f e1 1f"), false), Some(Code::QpackEncoderStreamError));
    assert_eq!(
        code(&hex("02 c0 00"), false),
        Some(Code::QpackEncoderStreamError),
        "an insert"
    );
    assert_eq!(code(&hex("03 44"), false), None, "stream cancellation");
    assert_eq!(
        code(&hex("03 84"), false),
        Some(Code::QpackDecoderStreamError),
        "section ack"
    );
    assert_eq!(
        code(&hex("03 01"), false),
        Some(Code::QpackDecoderStreamError),
        "insert count increment"
    );
}

/// Push IDs on the control stream keep their order (RFC 9114 §5.2,
/// §7.2.3, §7.2.7): a client's GOAWAY may not increase, MAX_PUSH_ID may
/// not decrease, and CANCEL_PUSH may name only a push ID allowed.
#[test]
fn push_ids_out_of_order_on_the_control_stream_are_id_errors() {
    let mut settings = vec![0x00];
    frame::write_settings(&mut settings, 100, false);
    let code = |frames: &str| match UniStream::default().recv(&[settings.clone(), hex(frames)].concat(), false) {
        Err(Error::Conn(code, _)) => Some(code),
        _ => None,
    };
    // GOAWAY (7), MAX_PUSH_ID (0x0d), CANCEL_PUSH (3), each one varint.
    assert_eq!(code("07 01 04  07 01 04  07 01 00"), None, "GOAWAY that holds or falls");
    assert_eq!(code("07 01 00  07 01 04"), Some(Code::IdError), "GOAWAY that rises");
    assert_eq!(
        code("0d 01 0a  0d 01 0a  0d 01 0b"),
        None,
        "MAX_PUSH_ID that holds or rises"
    );
    assert_eq!(
        code("0d 01 0a  0d 01 09"),
        Some(Code::IdError),
        "MAX_PUSH_ID that falls"
    );
    assert_eq!(code("03 01 03"), Some(Code::IdError), "CANCEL_PUSH with no MAX_PUSH_ID");
    assert_eq!(
        code("0d 01 02  03 01 03"),
        Some(Code::IdError),
        "CANCEL_PUSH past MAX_PUSH_ID"
    );
    assert_eq!(code("0d 01 03  03 01 03"), None, "CANCEL_PUSH within MAX_PUSH_ID");
}

#[test]
fn the_session_refuses_a_second_control_stream_and_client_pushes() {
    let mut s = Session::new(CFG);
    let mut settings = vec![0x00];
    frame::write_settings(&mut settings, 100, false);
    assert_eq!(s.handle_input(2, &settings, false), Action::None);
    assert!(matches!(
        s.handle_input(6, &settings, false),
        Action::Close(Code::StreamCreationError, _)
    ));
    // An unknown stream type is stopped, the connection goes on (§6.2).
    assert_eq!(
        s.handle_input(14, &hex("40 21"), false),
        Action::StopSending(Code::StreamCreationError)
    );
    assert!(matches!(s.on_reset(2), Action::Close(Code::ClosedCriticalStream, _)));
    // A push stream from the client is a connection error (§6.2.2).
    let mut s = Session::new(CFG);
    assert_eq!(s.handle_input(2, &settings, false), Action::None);
    assert!(matches!(
        s.handle_input(10, &[0x01, 0x00], false),
        Action::Close(Code::StreamCreationError, _)
    ));
}

/// A reserved frame type (0x1f * N + 0x21, §7.2.8) of 64 KiB on the control
/// stream, after SETTINGS, fed in pieces: ignored (§9), its payload not
/// kept; the stream goes on (a GOAWAY after it is read). Known control
/// frames over 16 KiB are still refused.
#[test]
fn a_large_reserved_frame_on_the_control_stream_is_skipped() {
    let mut s = Session::new(CFG);
    let mut stream = vec![0x00];
    frame::write_settings(&mut stream, 100, false);
    frame::write_header(&mut stream, 0x21 + 0x1f * 3, 64 * 1024);
    stream.extend(std::iter::repeat_n(0xab, 64 * 1024));
    frame::write_goaway(&mut stream, 0);
    for piece in stream.chunks(1000) {
        assert_eq!(s.handle_input(2, piece, false), Action::None);
    }
    // What the control stream held on to: nothing of the 64 KiB.
    let held: usize = s.unis.iter().map(|(_, u)| u.retained_bytes()).sum();
    assert!(held < 1024, "{held}");
    let mut s = Session::new(CFG);
    let mut stream = vec![0x00];
    frame::write_settings(&mut stream, 100, false);
    frame::write_header(&mut stream, frame::GOAWAY, 64 * 1024);
    assert!(matches!(
        s.handle_input(2, &stream, false),
        Action::Close(Code::ExcessiveLoad, _)
    ));
}

#[test]
fn a_response_is_one_headers_frame_then_data_frames_of_a_chunk_each() {
    let mut s = Session::new(CFG);
    assert_eq!(s.handle_input(0, &headers_frame(&GET), true), Action::None);
    assert_eq!(s.take_ready(), Some(0));
    assert_eq!(s.take_ready(), None);
    let body = vec![b'x'; 40 * 1024];
    let sent = s
        .respond(
            0,
            &mut Response::text(body.clone()),
            false,
            b"Mon, 23 Nov 2026 19:00:00 GMT",
            b"Alt-Svc: h3=\":443\"\r\n",
        )
        .unwrap();
    assert_eq!((sent.status, sent.body_bytes), (200, 40 * 1024));
    let mut wire = Vec::new();
    loop {
        let (bytes, last) = s.poll_output(0).unwrap();
        let n = bytes.len().min(1000); // the stream takes a little at a time
        wire.extend_from_slice(&bytes[..n]);
        s.consumed(0, n);
        if n == 0 && last {
            break;
        }
    }
    let frames = pieces(&[&wire]);
    assert_eq!(frames[0].0, frame::HEADERS);
    let fields = decode(&frames[0].1).unwrap();
    assert_eq!(fields[0], (":status".into(), "200".into()));
    assert!(fields.contains(&("content-length".into(), "40960".into())));
    assert!(fields.contains(&("alt-svc".into(), "h3=\":443\"".into())));
    assert_eq!(frames.len(), 1 + 3, "16 + 16 + 8 KiB");
    let got: Vec<u8> = frames[1..].iter().flat_map(|f| f.1.clone()).collect();
    assert_eq!(got, body);
}

/// A body beside its header block (`Response::prepared_beside`) goes out
/// as the block with a `SharedBytes` body of the same buffer does: the
/// same HEADERS and DATA bytes; nothing keeps the buffer once sent.
#[test]
fn a_body_beside_its_block_sends_what_the_block_and_a_shared_body_send() {
    use crate::response::{Body, SharedBytes};
    let (whole, lines) = crate::response::beside_buffer(b"ETag: \"x\"\r\nCache-Control: max-age=60\r\n", 40_000);
    let block = || crate::response::beside_block(&whole, lines);
    for n in [0, 5, 40_000] {
        let body = lines..lines + n;
        let mut wires = Vec::new();
        for beside in [false, true] {
            let mut s = Session::new(CFG);
            assert_eq!(s.handle_input(0, &headers_frame(&GET), true), Action::None);
            assert_eq!(s.take_ready(), Some(0));
            let mut resp = if beside {
                Response::prepared_beside(200, block(), body.clone())
            } else {
                let shared = SharedBytes::slice(whole.clone(), body.clone()).unwrap();
                Response::prepared(200, block(), Body::Shared(shared))
            };
            let sent = s.respond(0, &mut resp, false, b"date", b"").unwrap();
            assert_eq!(sent.body_bytes, n as u64);
            let mut wire = Vec::new();
            loop {
                let (bytes, last) = s.poll_output(0).unwrap();
                let k = bytes.len();
                wire.extend_from_slice(bytes);
                s.consumed(0, k);
                if k == 0 && last {
                    break;
                }
            }
            let frames = pieces(&[&wire]);
            let fields = decode(&frames[0].1).unwrap();
            assert!(fields.contains(&("etag".into(), "\"x\"".into())), "{fields:?}");
            assert!(fields.contains(&("cache-control".into(), "max-age=60".into())));
            let got: Vec<u8> = frames[1..].iter().flat_map(|f| f.1.clone()).collect();
            assert_eq!(got, (*whole).as_ref()[body.clone()]);
            wires.push(wire);
        }
        assert_eq!(wires[0], wires[1], "{n} bytes");
    }
    assert_eq!(std::sync::Arc::strong_count(&whole), 1);
}

/// A block's value with obs-text that is not UTF-8 (an upstream's
/// Latin-1, relayed by the proxy: issue 26) goes out in QPACK with its
/// bytes as they are (RFC 9204 string literals are octets).
#[test]
fn a_blocks_obs_text_goes_out_as_its_bytes() {
    use crate::response::{HeaderBlock, SharedBytes};
    let lines: &'static [u8] = b"Content-Disposition: attachment; filename=\"caf\xe9.pdf\"\r\n";
    let block = HeaderBlock::from_lines(SharedBytes::new(std::sync::Arc::new(lines))).unwrap();
    let mut s = Session::new(CFG);
    assert_eq!(s.handle_input(0, &headers_frame(&GET), true), Action::None);
    assert_eq!(s.take_ready(), Some(0));
    let mut resp = Response::prepared(200, block, "ok");
    s.respond(0, &mut resp, false, b"date", b"").unwrap();
    let mut wire = Vec::new();
    loop {
        let (bytes, last) = s.poll_output(0).unwrap();
        let k = bytes.len();
        wire.extend_from_slice(bytes);
        s.consumed(0, k);
        if k == 0 && last {
            break;
        }
    }
    let frames = pieces(&[&wire]);
    let (mut bytes, mut fields, mut scratch) = (Vec::new(), Vec::<Field>::new(), Vec::new());
    let mut sink = Sink::new(&mut bytes, &mut fields, 1 << 20);
    qpack::decode(&frames[0].1, &mut sink, &mut scratch).unwrap();
    let span = |(at, len): (u32, u32)| &bytes[at as usize..(at + len) as usize];
    let got: Vec<(&[u8], &[u8])> = fields.iter().map(|f| (span(f.name), span(f.value))).collect();
    assert!(
        got.contains(&(
            &b"content-disposition"[..],
            &b"attachment; filename=\"caf\xe9.pdf\""[..]
        )),
        "{got:?}"
    );
}

#[test]
fn after_goaway_new_request_streams_are_rejected_and_open_ones_answered() {
    let mut s = Session::new(CFG);
    assert_eq!(s.handle_input(0, &headers_frame(&GET), false), Action::None);
    s.go_away();
    assert!(s.control_output().ends_with(&hex("07 01 04")), "GOAWAY naming stream 4");
    assert_eq!(
        s.handle_input(4, &headers_frame(&GET), true),
        Action::Reset(Code::RequestRejected)
    );
    assert_eq!(s.handle_input(0, &[], true), Action::None);
    assert_eq!(s.take_ready(), Some(0));
}

#[test]
fn a_first_goaway_names_the_largest_id_and_refuses_nothing_the_second_names_the_next() {
    let mut s = Session::new(CFG);
    assert_eq!(s.handle_input(0, &headers_frame(&GET), true), Action::None);
    s.go_away_soon();
    assert!(
        s.control_output().ends_with(&hex("07 08 ff ff ff ff ff ff ff fc")),
        "GOAWAY naming 2^62-4"
    );
    assert!(!s.is_going_away(), "not closing on it");
    // A request that crossed it is answered.
    assert_eq!(s.handle_input(4, &headers_frame(&GET), true), Action::None);
    assert_eq!(s.take_ready(), Some(0));
    assert_eq!(s.take_ready(), Some(4));
    s.go_away_soon();
    s.go_away();
    assert!(
        s.control_output().ends_with(&hex("07 01 08")),
        "then GOAWAY naming stream 8"
    );
    assert!(s.is_going_away());
    assert_eq!(
        s.handle_input(8, &headers_frame(&GET), true),
        Action::Reset(Code::RequestRejected)
    );
}

/// Stream ids a client skipped over and never used keep a connection
/// from closing while it goes away (`is_idle`: their requests may still
/// come), but not from idling out (`quiet_mark`): a request on stream 16
/// alone must not hold a connection for as long as the client ACKs.
/// The mark moves with each request opened, late ones included.
#[test]
fn ids_skipped_over_do_not_keep_a_connection_from_idling_out() {
    let mut s = Session::new(CFG);
    assert_eq!(s.quiet_mark(), (true, 0));
    assert_eq!(s.handle_input(16, &headers_frame(&GET), true), Action::None);
    assert_eq!(s.take_ready(), Some(16));
    assert_eq!(s.quiet_mark(), (false, 1));
    s.remove(16);
    assert!(!s.is_idle(), "streams 0 to 12 may still come");
    assert_eq!(s.quiet_mark(), (true, 1));
    assert_eq!(s.handle_input(4, &headers_frame(&GET), true), Action::None);
    assert_eq!(s.quiet_mark(), (false, 2));
}

#[test]
fn a_request_stream_whose_bytes_come_after_a_later_streams_is_answered() {
    // Stream 4's request arrives first (stream 0's datagram was delayed):
    // stream 0 is opened by it but still new when its bytes come. Before,
    // it was taken for a stream already answered and dropped, and the
    // client waited for its answer until its idle timeout.
    let mut s = Session::new(CFG);
    assert_eq!(s.handle_input(8, &headers_frame(&GET), true), Action::None);
    assert_eq!(s.take_ready(), Some(8));
    assert_eq!(s.handle_input(0, &headers_frame(&GET), true), Action::None);
    assert_eq!(s.take_ready(), Some(0));
    assert_eq!(s.handle_input(4, &headers_frame(&GET)[..2], false), Action::None);
    assert_eq!(s.take_ready(), None);
    assert_eq!(s.handle_input(4, &headers_frame(&GET)[2..], true), Action::None);
    assert_eq!(s.take_ready(), Some(4));
    // Answered and forgotten, stream 0 gets nothing more: late bytes
    // (after a STOP_SENDING) are dropped, not taken for a new request.
    for id in [0, 4, 8] {
        s.remove(id);
    }
    assert_eq!(s.handle_input(0, &headers_frame(&GET), true), Action::None);
    assert_eq!(s.take_ready(), None);
    // A stream reset before its first byte is no longer awaited.
    assert_eq!(s.handle_input(20, &headers_frame(&GET), true), Action::None);
    assert_eq!(s.take_ready(), Some(20));
    assert_eq!(s.on_reset(12), Action::None);
    assert_eq!(s.handle_input(12, &headers_frame(&GET), true), Action::None);
    assert_eq!(s.take_ready(), None, "stream 12 was reset");
    assert_eq!(s.handle_input(16, &headers_frame(&GET), true), Action::None);
    assert_eq!(s.take_ready(), Some(16));
}

#[test]
fn after_goaway_a_request_stream_opened_but_not_yet_received_keeps_the_session_open() {
    // Stream 4's request came, stream 0's not yet: GOAWAY names stream 8,
    // so stream 0 is to be answered, and the connection must not close
    // (it closes once the session is idle) before it has been.
    let mut s = Session::new(CFG);
    assert_eq!(s.handle_input(4, &headers_frame(&GET), true), Action::None);
    s.go_away();
    assert!(s.control_output().ends_with(&hex("07 01 08")), "GOAWAY naming stream 8");
    assert_eq!(s.take_ready(), Some(4));
    s.remove(4);
    assert!(!s.is_idle(), "stream 0 is still to come");
    assert_eq!(s.handle_input(0, &headers_frame(&GET), true), Action::None);
    assert_eq!(s.take_ready(), Some(0));
    s.remove(0);
    assert!(s.is_idle());
    // One past the GOAWAY, opened by a later one's bytes, is refused when
    // it comes: it keeps nothing open.
    assert_eq!(
        s.handle_input(16, &headers_frame(&GET), true),
        Action::Reset(Code::RequestRejected)
    );
    assert!(s.is_idle(), "streams 8 and 12 are past the GOAWAY");
}

#[test]
fn the_fuzz_driver_runs_on_seeds() {
    let mut settings = vec![0x00];
    frame::write_settings(&mut settings, 100, false);
    let record = |which: u8, bytes: &[u8]| [&[which, bytes.len() as u8][..], bytes].concat();
    let get = headers_frame(&GET);
    let inputs = [
        [
            record(0x04, &settings),
            record(0x08, &get),
            record(0x09, &get),
            record(0x0a, &get),
        ]
        .concat(),
        [record(0x00, &get[..3]), record(0x08, &get[3..]), record(0x11, &[])].concat(),
        [record(0x04, &settings), record(0x14, &[]), record(0x08, &get)].concat(),
    ];
    for input in &inputs {
        super::fuzz_session(input);
    }
    // A WebSocket: its extended CONNECT, a frame's bytes in two records,
    // the client's FIN; and one reset after its first bytes.
    let connect = headers_frame(&WS_CONNECT);
    let frame = data_frame(&client_frame(0x1, b"echo me", true));
    let (a, b) = frame.split_at(5);
    super::fuzz_session(&[record(0x00, &connect), record(0x00, a), record(0x08, b)].concat());
    super::fuzz_session(&[record(0x01, &connect), record(0x01, a), record(0x11, &[])].concat());
}

/// Everything stream `id` has to send now, taken.
fn drain_output(s: &mut Session, id: u64) -> Vec<u8> {
    let (out, _) = s.poll_output(id).unwrap();
    let out = out.to_vec();
    s.consumed(id, out.len());
    out
}

#[test]
fn expect_100_continue_gets_one_interim_headers_frame_before_the_answer() {
    let post = [
        (":method", "POST"),
        (":scheme", "https"),
        (":authority", "example.com"),
        (":path", "/upload"),
        ("expect", "100-continue"),
    ];
    let interim = headers_frame(&[(":status", "100")]);
    let mut s = Session::new(CFG);
    assert_eq!(s.handle_input(0, &headers_frame(&post), false), Action::None);
    assert_eq!(s.take_head(), Some(0));
    let mut sending = Vec::new();
    s.sending(&mut sending);
    assert!(sending.is_empty(), "nothing to send before the driver says so");
    s.send_continue(0);
    s.send_continue(0);
    sending.clear();
    s.sending(&mut sending);
    assert_eq!(sending, [0]);
    // Taken in two pieces, the second with the answer.
    let (first, last) = s.poll_output(0).unwrap();
    assert_eq!((first, last), (&interim[..], false), "once");
    s.consumed(0, 1);
    assert_eq!(s.handle_input(0, &data_frame(b"hello"), true), Action::None);
    assert_eq!(s.take_ready(), Some(0));
    s.respond(0, &mut Response::text("ok"), false, b"date", b"");
    let out = drain_output(&mut s, 0);
    assert_eq!(&out[..interim.len() - 1], &interim[1..]);
    let mut reader = Reader::default();
    let Some((Piece::Start { kind, len }, used)) = reader.next(&out[interim.len() - 1..]) else {
        panic!("a frame after the interim one")
    };
    assert_eq!(kind, frame::HEADERS);
    let at = interim.len() - 1 + used;
    let fields = decode(&out[at..at + len as usize]).unwrap();
    assert_eq!(fields[0], (":status".to_owned(), "200".to_owned()));

    // Not once the body has begun to arrive, nor without the expectation.
    let mut s = Session::new(CFG);
    assert_eq!(s.handle_input(4, &headers_frame(&post), false), Action::None);
    assert_eq!(s.handle_input(4, &data_frame(b"he"), false), Action::None);
    s.send_continue(4);
    assert_eq!(drain_output(&mut s, 4), b"");
    assert_eq!(s.handle_input(8, &headers_frame(&post[..4]), false), Action::None);
    s.send_continue(8);
    assert_eq!(drain_output(&mut s, 8), b"");
}

#[test]
fn an_expectation_other_than_100_continue_is_refused_417() {
    let post = [
        (":method", "POST"),
        (":scheme", "https"),
        (":authority", "example.com"),
        (":path", "/"),
        ("expect", "a-pony"),
    ];
    let mut s = Session::new(CFG);
    assert_eq!(s.handle_input(0, &headers_frame(&post), false), Action::None);
    assert_eq!(s.take_ready(), Some(0));
    assert_eq!(s.refused(0).map(|r| r.0), Some(417));
}

#[test]
fn a_head_trickled_in_is_answered_408_at_head_timeout_and_a_slow_body_at_its_grace() {
    use std::time::{Duration, Instant};
    let t0 = Instant::now();
    let mut s = Session::new(CFG);
    s.set_now(t0);
    let head = headers_frame(&GET);
    // A byte of the head every second: QUIC's idle timeout never fires.
    for (i, b) in head[..head.len() - 1].iter().enumerate() {
        s.set_now(t0 + Duration::from_secs(i as u64 / 4));
        assert_eq!(s.handle_input(0, std::slice::from_ref(b), false), Action::None);
    }
    assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(10)));
    s.set_now(t0 + Duration::from_secs(10));
    assert_eq!(s.handle_timeout(), 1);
    assert_eq!(s.take_ready(), Some(0));
    assert_eq!(s.refused(0).map(|r| r.0), Some(408));
    // A body: 20 s of grace, then 500 B/s over each 5 s.
    let mut s = Session::new(CFG);
    s.set_now(t0);
    assert_eq!(s.handle_input(4, &head, false), Action::None);
    let first = s.poll_timeout().expect("a body is awaited");
    assert_eq!(first, t0 + Duration::from_secs(15));
    s.set_now(first);
    assert_eq!(s.handle_timeout(), 0, "the window's start is marked");
    assert_eq!(s.handle_input(4, &data_frame(b"x"), false), Action::None);
    let end = s.poll_timeout().expect("the grace's end");
    s.set_now(end);
    assert_eq!(s.handle_timeout(), 1);
    assert_eq!(s.take_ready(), Some(4));
    assert_eq!(s.refused(4).map(|r| r.0), Some(408));
}

const CONNECT_CFG: Config = Config {
    connect_protocol: true,
    ..CFG
};

/// RFC 9220 §3's extended CONNECT for a WebSocket.
const WS_CONNECT: [(&str, &str); 6] = [
    (":method", "CONNECT"),
    (":protocol", "websocket"),
    (":scheme", "https"),
    (":authority", "example.com"),
    (":path", "/chat"),
    ("sec-websocket-version", "13"),
];

/// The settings of our SETTINGS frame, from the control stream's bytes.
fn our_settings(s: &mut Session) -> Vec<(u64, u64)> {
    let out = s.control_output().clone();
    assert_eq!(out[0], frame::STREAM_CONTROL as u8);
    let frames = pieces(&[&out[1..]]);
    assert_eq!(frames[0].0, frame::SETTINGS);
    let mut payload = &frames[0].1[..];
    let mut settings = Vec::new();
    while !payload.is_empty() {
        let (id, n) = frame::read_varint(payload).unwrap();
        let (value, m) = frame::read_varint(&payload[n..]).unwrap();
        settings.push((id, value));
        payload = &payload[n + m..];
    }
    settings
}

#[test]
fn settings_enable_connect_protocol_only_when_websockets_are_served() {
    let on = our_settings(&mut Session::new(CONNECT_CFG));
    assert!(on.contains(&(frame::SETTINGS_ENABLE_CONNECT_PROTOCOL, 1)), "{on:?}");
    let off = our_settings(&mut Session::new(CFG));
    assert!(
        off.iter().all(|&(id, _)| id != frame::SETTINGS_ENABLE_CONNECT_PROTOCOL),
        "{off:?}"
    );
    // Both are well-formed SETTINGS, as the client checks them.
    let mut payload = Vec::new();
    for (id, v) in on {
        frame::write_varint(&mut payload, id);
        frame::write_varint(&mut payload, v);
    }
    assert_eq!(frame::check_settings(&payload), Ok(()));
}

/// RFC 9220 §3 and RFC 9114 §4.3: a `:protocol` the setting did not allow
/// is an unknown pseudo-field; with it, an extended CONNECT still needs
/// :scheme, :path and an authority, and `:protocol` only goes with
/// CONNECT. Each is malformed: 400, then STOP_SENDING with
/// H3_MESSAGE_ERROR.
#[test]
fn malformed_extended_connects_are_refused_with_h3_message_error() {
    let without =
        |name: &str| -> Vec<(&str, &str)> { WS_CONNECT.iter().copied().filter(|(n, _)| *n != name).collect() };
    let mut get_with_protocol = GET.to_vec();
    get_with_protocol.insert(1, (":protocol", "websocket"));
    let cases: Vec<(Config, Vec<(&str, &str)>)> = vec![
        (CFG, WS_CONNECT.to_vec()),
        (CONNECT_CFG, without(":path")),
        (CONNECT_CFG, without(":scheme")),
        (CONNECT_CFG, without(":authority")),
        (CONNECT_CFG, get_with_protocol),
    ];
    for (cfg, fields) in cases {
        let mut s = Session::new(cfg);
        assert_eq!(s.handle_input(0, &headers_frame(&fields), false), Action::None);
        assert_eq!(s.take_ready(), Some(0), "{fields:?}: answered at its head");
        let (status, _, code) = s.refused(0).unwrap_or_else(|| panic!("{fields:?} was not refused"));
        assert_eq!((status, code), (400, Code::MessageError), "{fields:?}");
    }
    // Well formed, and allowed: handed to the handler at its head, with
    // its protocol; no body, no FIN awaited.
    let mut s = Session::new(CONNECT_CFG);
    assert_eq!(s.handle_input(0, &headers_frame(&WS_CONNECT), false), Action::None);
    assert_eq!(s.take_head(), None, "not offered as an upload");
    assert_eq!(s.take_ready(), Some(0));
    assert_eq!(s.refused(0), None);
    let parts = s.parts(0).unwrap();
    assert_eq!(
        (parts.method, parts.target, parts.protocol),
        ("CONNECT", "/chat", Some("websocket"))
    );
}

/// A client's masked frame (RFC 6455 §5.3).
fn client_frame(op: u8, payload: &[u8], fin: bool) -> Vec<u8> {
    let mut out = vec![if fin { 0x80 | op } else { op }];
    match payload.len() {
        n if n < 126 => out.push(0x80 | n as u8),
        n if n < 1 << 16 => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    let key = [0x37, 0xfa, 0x21, 0x3d];
    out.extend_from_slice(&key);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    out
}

/// Accepts stream 0's extended CONNECT and takes the 200's HEADERS frame.
fn accepted_websocket() -> Session {
    let mut s = Session::new(CONNECT_CFG);
    assert_eq!(s.handle_input(0, &headers_frame(&WS_CONNECT), false), Action::None);
    assert_eq!(s.take_ready(), Some(0));
    assert!(s.accept_tunnel(0, &Response::new(200), b"date", b""));
    let head = drain_output(&mut s, 0);
    let frames = pieces(&[&head]);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].0, frame::HEADERS);
    let fields = decode(&frames[0].1).unwrap();
    assert_eq!(fields[0], (":status".to_owned(), "200".to_owned()));
    assert!(fields.iter().all(|(n, _)| n != "content-length"), "{fields:?}");
    s
}

/// The WebSocket machine the driver runs (`ws::session`), echoing over
/// stream 0's tunnel: every message it reads goes back. Returns the
/// messages echoed.
fn echo(s: &mut Session, ws: &mut crate::ws::session::Session) -> Vec<Vec<u8>> {
    use crate::ws::session::Event;
    let now = std::time::Instant::now();
    s.with_tunnel(0, |io| {
        let mut echoed = Vec::new();
        let mut used = 0;
        loop {
            let (n, event) = ws.poll(&mut io.input[used..], io.output, now);
            used += n;
            match event {
                Event::Message(kind, bytes) => {
                    let msg = match kind {
                        crate::ws::session::Kind::Text => crate::ws::Message::Text(std::str::from_utf8(bytes).unwrap()),
                        crate::ws::session::Kind::Binary => crate::ws::Message::Binary(bytes),
                    };
                    echoed.push(bytes.to_vec());
                    io.output.extend_from_slice(&crate::ws::framed(msg));
                }
                Event::Input | Event::Closed { .. } | Event::Done => break,
            }
        }
        io.input.drain(..used);
        echoed
    })
    .expect("the tunnel is open")
}

fn ws_session() -> crate::ws::session::Session {
    let config = crate::ws::session::Config {
        message_bytes_max: 1 << 20,
        fragments_max: 100,
        ping_interval: None,
        message_timeout: std::time::Duration::from_secs(10),
        deflate: None,
    };
    crate::ws::session::Session::new(config, std::time::Instant::now())
}

/// The WebSocket's frames, from what the stream sent: the DATA frames'
/// payloads joined (each run of the machine is one DATA frame).
fn data_payloads(wire: &[u8]) -> Vec<u8> {
    pieces(&[wire])
        .into_iter()
        .inspect(|(kind, _)| assert_eq!(*kind, frame::DATA))
        .flat_map(|(_, p)| p)
        .collect()
}

/// After the 200, the stream's DATA payloads are the WebSocket's input,
/// split at every offset (a fragmented text message and a binary one),
/// and what the machine writes leaves as DATA frames: each message
/// echoed once, unmasked.
#[test]
fn a_websocket_over_an_accepted_extended_connect_echoes_its_frames() {
    let text = "h\u{e9}llo over HTTP/3";
    let mut input = client_frame(0x1, &text.as_bytes()[..3], false);
    input.extend(client_frame(0x0, &text.as_bytes()[3..], true));
    input.extend(client_frame(0x2, &[0xa5; 300], true));
    let stream = data_frame(&input);
    let mut want = crate::ws::framed(crate::ws::Message::Text(text));
    want.extend(crate::ws::framed(crate::ws::Message::Binary(&[0xa5; 300])));
    for at in 0..=stream.len() {
        let mut s = accepted_websocket();
        let mut ws = ws_session();
        let mut echoed = Vec::new();
        let mut wire = Vec::new();
        for piece in [&stream[..at], &stream[at..]] {
            assert_eq!(s.handle_input(0, piece, false), Action::None);
            echoed.extend(echo(&mut s, &mut ws));
            wire.extend(drain_output(&mut s, 0));
        }
        assert_eq!(echoed, [text.as_bytes().to_vec(), vec![0xa5; 300]], "split at {at}");
        assert_eq!(data_payloads(&wire), want, "split at {at}");
        assert_eq!(s.bodies().held, 0, "what the machine read left the budget");
        assert_eq!(s.poll_output(0), Ok((&[][..], false)), "the stream stays open");
    }
}

/// The client's FIN is the TCP close of RFC 6455 (`peer_done`); our end
/// of the WebSocket is a FIN after its last frames; the stream is then
/// forgotten. A reset instead ends it at once: the tunnel is gone.
#[test]
fn a_websocket_stream_ends_with_fin_both_ways_or_with_a_reset() {
    let mut s = accepted_websocket();
    let close = client_frame(0x8, &1000u16.to_be_bytes(), true);
    assert_eq!(s.handle_input(0, &data_frame(&close), true), Action::None);
    assert_eq!(
        s.with_tunnel(0, |io| (io.peer_done, io.input.len())),
        Some((true, close.len()))
    );
    let mut ws = ws_session();
    echo(&mut s, &mut ws);
    assert!(ws.is_closed(), "the Close was read and answered");
    s.end_tunnel(0);
    let (out, last) = s.poll_output(0).unwrap();
    assert!(last, "FIN after the last frames");
    let reply = data_payloads(out);
    assert_eq!(reply[..2], [0x88, 0x02], "our Close: {reply:02x?}");
    let n = out.len();
    s.consumed(0, n);
    assert_eq!(s.poll_output(0), Ok((&[][..], true)));
    s.remove(0);
    assert!(s.with_tunnel(0, |_| ()).is_none());
    assert!(s.is_idle());

    // An extended CONNECT whose stream ends with its head: accepted, a
    // WebSocket whose client has gone already (the driver says 1006).
    let mut s = Session::new(CONNECT_CFG);
    assert_eq!(s.handle_input(0, &headers_frame(&WS_CONNECT), true), Action::None);
    assert_eq!(s.take_ready(), Some(0));
    assert!(s.accept_tunnel(0, &Response::new(200), b"date", b""));
    assert_eq!(s.with_tunnel(0, |io| io.peer_done), Some(true));

    let mut s = accepted_websocket();
    assert_eq!(s.handle_input(0, &data_frame(b"\x81"), false), Action::None);
    assert_eq!(s.bodies().held, 1);
    assert_eq!(s.on_reset(0), Action::None);
    assert!(
        s.with_tunnel(0, |_| ()).is_none(),
        "the reset stream's WebSocket is gone"
    );
    assert_eq!(s.bodies().held, 0);
    assert!(s.is_idle());
}

/// A WebSocket's unread input is held to `TUNNEL_INPUT_BYTES_MAX`: the
/// driver reads no more of the stream (`recv_room` 0), so QUIC credits
/// the client no more, until the machine reads; and it counts in the
/// worker's budget meanwhile.
#[test]
fn a_websocket_streams_unread_input_is_bounded() {
    let mut s = accepted_websocket();
    assert_eq!(s.recv_room(0), super::TUNNEL_INPUT_BYTES_MAX);
    let chunk = vec![0u8; 64 * 1024];
    let mut fed = 0;
    while s.recv_room(0) > 0 {
        let n = s.recv_room(0).min(chunk.len());
        let mut bytes = Vec::new();
        frame::write_header(&mut bytes, frame::DATA, n as u64);
        bytes.extend_from_slice(&chunk[..n]);
        // The driver hands at most the room; the frame header is not input.
        assert_eq!(s.handle_input(0, &bytes, false), Action::None);
        fed += n;
    }
    assert_eq!(fed, super::TUNNEL_INPUT_BYTES_MAX);
    assert_eq!(s.bodies().held, fed);
    s.with_tunnel(0, |io| {
        io.input.drain(..1000);
    });
    assert_eq!(s.recv_room(0), 1000);
    assert_eq!(s.bodies().held, fed - 1000);
}

/// What the answers' bodies hold in memory unsent is counted
/// (`Session::unsent`, held against the worker's output budget, and over
/// the connection's share no new request is answered: `quic/conn.rs`)
/// from the answer until its body ends or its stream goes: owned bytes,
/// and a shared buffer only the answer holds; not a buffer something else
/// keeps anyway (a cache's entry), nor `'static` bytes.
#[test]
fn bodies_held_unsent_are_counted_until_they_end() {
    use crate::response::{Body, SharedBytes};
    use std::sync::Arc;
    let mut s = Session::new(CFG);
    for id in [0, 4, 8, 12] {
        assert_eq!(s.handle_input(id, &headers_frame(&GET), true), Action::None);
        assert_eq!(s.take_ready(), Some(id));
    }
    let owned = vec![b'x'; 40 * 1024];
    let capacity = owned.capacity();
    s.respond(0, &mut Response::text(owned), false, b"date", b"").unwrap();
    assert_eq!(s.unsent_bytes(), capacity);
    let cached: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(vec![b'y'; 40 * 1024]);
    let mut resp = Response::new(200).with_body(Body::Shared(SharedBytes::new(cached.clone())));
    s.respond(4, &mut resp, false, b"date", b"").unwrap();
    assert_eq!(s.unsent_bytes(), capacity, "the cache's buffer is not the answer's");
    let own: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(vec![b'z'; 10_000]);
    let mut resp = Response::new(200).with_body(Body::Shared(SharedBytes::new(own)));
    s.respond(8, &mut resp, false, b"date", b"").unwrap();
    assert_eq!(s.unsent_bytes(), capacity + 10_000);
    s.respond(12, &mut Response::text("static"), false, b"date", b"")
        .unwrap();
    assert_eq!(s.unsent_bytes(), capacity + 10_000);
    // Stream 0 sends its body: the last chunk taken, it holds nothing.
    loop {
        let (bytes, last) = s.poll_output(0).unwrap();
        let n = bytes.len();
        s.consumed(0, n);
        if n == 0 && last {
            break;
        }
    }
    assert_eq!(s.unsent_bytes(), 10_000);
    // Stream 8 goes (the client stopped it): what it held goes too.
    s.remove(8);
    assert_eq!(s.unsent_bytes(), 0);
}
