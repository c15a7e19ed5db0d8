//! The client session against byte tables of an upstream's frames.

use super::*;

/// A header block of `fields` as an upstream would send it (literals
/// without indexing; `:status` as the server side writes it).
fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (n, v) in fields {
        match (*n, v.parse::<u16>()) {
            (":status", Ok(s)) => hpack::write_status(&mut b, s),
            _ => {
                // Literal without indexing, new name (RFC 7541 §6.2.2).
                b.push(0);
                hpack::write_string(&mut b, n.as_bytes());
                hpack::write_string(&mut b, v.as_bytes());
            }
        }
    }
    b
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_header(&mut out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
    out
}

fn settings() -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_settings(&mut out, &[(frame::SETTINGS_MAX_CONCURRENT_STREAMS, 2)]);
    out
}

/// A session past the upstream's SETTINGS with one GET open (stream 1).
fn open() -> Session {
    let mut s = Session::new();
    let mut ev = Vec::new();
    assert_eq!(s.recv(&settings(), &mut ev), Ok(15));
    assert!(ev.is_empty() && s.can_open());
    let id = s.open("GET", "http", "a", "/x", std::iter::empty(), true);
    assert_eq!(id, 1);
    s.out.clear();
    s
}

fn feed(s: &mut Session, bytes: &[u8]) -> Result<Vec<Event>, ConnError> {
    let mut ev = Vec::new();
    let n = s.recv(bytes, &mut ev)?;
    assert_eq!(n, bytes.len(), "whole frames are consumed");
    Ok(ev)
}

const ANSWER: &[(&str, &str)] = &[(":status", "200"), ("content-type", "application/grpc")];

#[test]
fn the_preface_settings_and_window_go_first_and_settings_are_acknowledged() {
    let s = Session::new();
    assert!(s.out.starts_with(frame::PREFACE));
    assert!(!s.can_open(), "no stream before the upstream's SETTINGS");
    let mut s = open();
    // Its limit of 2 streams holds.
    s.open("GET", "http", "a", "/y", std::iter::empty(), true);
    assert!(!s.can_open());
    let mut s2 = Session::new();
    s2.out.clear();
    feed(&mut s2, &settings()).unwrap();
    assert_eq!(s2.out, [0, 0, 0, 4, 1, 0, 0, 0, 0], "a SETTINGS ACK");
}

#[test]
fn a_head_data_and_trailers_come_out_as_events_however_the_bytes_are_split() {
    let mut input = frame(frame::HEADERS, frame::END_HEADERS, 1, &block(ANSWER));
    input.extend(frame(frame::DATA, 0, 1, b"\0\0\0\0\x02hi"));
    input.extend(frame(
        frame::HEADERS,
        frame::END_HEADERS | frame::END_STREAM,
        1,
        &block(&[("grpc-status", "0"), ("grpc-message", "ok")]),
    ));
    let want = vec![
        Event::Head {
            stream: 1,
            status: 200,
            lines: b"content-type: application/grpc\r\n".to_vec(),
            content_length: None,
            end: false,
        },
        Event::Data {
            stream: 1,
            data: b"\0\0\0\0\x02hi".to_vec(),
            end: false,
        },
        Event::Trailers {
            stream: 1,
            lines: b"grpc-status: 0\r\ngrpc-message: ok\r\n".to_vec(),
        },
    ];
    for at in 0..=input.len() {
        let mut s = open();
        let mut ev = Vec::new();
        let mut buf = input[..at].to_vec();
        let n = s.recv(&buf, &mut ev).unwrap();
        buf.drain(..n);
        buf.extend_from_slice(&input[at..]);
        let n = s.recv(&buf, &mut ev).unwrap();
        assert_eq!(n, buf.len());
        assert_eq!(ev, want, "split at {at}");
        assert!(!s.is_open(1), "ended both ways");
    }
}

#[test]
fn a_trailers_only_answer_is_a_head_that_ends_the_stream() {
    let mut s = open();
    let fields = [
        (":status", "200"),
        ("content-type", "application/grpc"),
        ("grpc-status", "4"),
        ("grpc-message", "Deadline Exceeded"),
    ];
    let ev = feed(
        &mut s,
        &frame(
            frame::HEADERS,
            frame::END_HEADERS | frame::END_STREAM,
            1,
            &block(&fields),
        ),
    )
    .unwrap();
    assert_eq!(
        ev,
        [Event::Head {
            stream: 1,
            status: 200,
            lines: b"content-type: application/grpc\r\ngrpc-status: 4\r\ngrpc-message: Deadline Exceeded\r\n".to_vec(),
            content_length: None,
            end: true,
        }]
    );
    assert!(!s.is_open(1));
}

#[test]
fn malformed_answers_reset_their_stream_only() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("content-type", "x")], "no :status"),
        (&[(":status", "200"), ("connection", "close")], "connection-specific"),
        (
            &[(":status", "200"), ("transfer-encoding", "chunked")],
            "connection-specific",
        ),
        (&[(":status", "200"), ("Content-Type", "x")], "uppercase"),
        (&[(":status", "200"), (":path", "/")], "a request pseudo-field"),
        (&[("x", "1"), (":status", "200")], "a pseudo-field after a field"),
        (&[(":status", "2000")], "a status of 4 digits"),
        (&[(":status", "101")], "101"),
        (
            &[(":status", "200"), ("content-length", "1"), ("content-length", "2")],
            "two lengths",
        ),
    ];
    for (fields, why) in cases {
        let mut s = open();
        let ev = feed(&mut s, &frame(frame::HEADERS, frame::END_HEADERS, 1, &block(fields))).unwrap();
        assert!(matches!(ev[..], [Event::Malformed { stream: 1, .. }]), "{why}: {ev:?}");
        assert_eq!(
            s.out,
            [0, 0, 4, frame::RST_STREAM, 0, 0, 0, 0, 1, 0, 0, 0, 1],
            "{why}: RST_STREAM(PROTOCOL_ERROR)"
        );
        assert!(s.can_open(), "{why}: the connection goes on");
    }
    // A body longer than its content-length.
    let mut s = open();
    let mut input = frame(
        frame::HEADERS,
        frame::END_HEADERS,
        1,
        &block(&[(":status", "200"), ("content-length", "1")]),
    );
    input.extend(frame(frame::DATA, 0, 1, b"ab"));
    let ev = feed(&mut s, &input).unwrap();
    assert!(
        matches!(ev[..], [Event::Head { .. }, Event::Malformed { stream: 1, .. }]),
        "{ev:?}"
    );
}

#[test]
fn broken_framing_and_compression_end_the_connection() {
    let head = frame(frame::HEADERS, frame::END_HEADERS, 1, &block(ANSWER));
    let cases: Vec<(Vec<u8>, Code)> = vec![
        (
            frame(frame::PUSH_PROMISE, frame::END_HEADERS, 1, &[0, 0, 0, 2]),
            Code::Protocol,
        ),
        (
            frame(frame::HEADERS, frame::END_HEADERS, 1, &[0xff, 0xff, 0xff]),
            Code::Compression,
        ),
        (
            frame(frame::HEADERS, frame::END_HEADERS, 3, &block(ANSWER)),
            Code::Protocol,
        ),
        (frame(frame::DATA, 0, 0, b"x"), Code::Protocol),
        (frame(frame::PING, 0, 0, b"short"), Code::FrameSize),
        (frame(frame::CONTINUATION, frame::END_HEADERS, 1, b""), Code::Protocol),
        (frame(frame::WINDOW_UPDATE, 0, 0, &[0, 0, 0, 0]), Code::Protocol),
        (frame(frame::SETTINGS, 0, 0, &[0, 5, 0, 0, 0, 1]), Code::Protocol),
        (frame(frame::DATA, 0, 1, &vec![0; FRAME_MAX + 1]), Code::FrameSize),
        (
            [
                frame(frame::HEADERS, 0, 1, &block(ANSWER)),
                frame(frame::PING, 0, 0, &[0; 8]),
            ]
            .concat(),
            Code::Protocol,
        ),
    ];
    for (i, (input, code)) in cases.into_iter().enumerate() {
        let mut s = open();
        let mut ev = Vec::new();
        let got = s.recv(&input, &mut ev);
        assert_eq!(got.map_err(|e| e.code), Err(code), "case {i}");
        assert!(!s.can_open(), "case {i}");
        assert_eq!(s.out[3], frame::GOAWAY, "case {i}: GOAWAY written");
        // Nothing more is read.
        assert_eq!(s.recv(&head, &mut ev), Ok(head.len()));
        assert!(ev.iter().all(|e| !matches!(e, Event::Head { .. })), "case {i}");
    }
    // The first frame must be SETTINGS.
    let mut s = Session::new();
    let got = s.recv(&frame(frame::PING, 0, 0, &[0; 8]), &mut Vec::new());
    assert_eq!(got.map_err(|e| e.code), Err(Code::Protocol));
}

#[test]
fn a_header_block_past_its_limit_ends_the_connection() {
    let mut s = open();
    let mut input = frame(frame::HEADERS, 0, 1, &block(ANSWER));
    let piece = vec![0x80 | 8; 16 * 1024];
    for _ in 0..3 {
        input.extend(frame(frame::CONTINUATION, 0, 1, &piece));
    }
    let got = s.recv(&input, &mut Vec::new());
    assert_eq!(got.map_err(|e| e.code), Err(Code::EnhanceYourCalm));
}

#[test]
fn flow_control_holds_both_ways() {
    let mut s = open();
    let id = s.open("POST", "http", "a", "/p", std::iter::empty(), false);
    // The upstream's window: 65,535 until it says more, one frame at most.
    assert_eq!(s.window(id), frame::DEFAULT_FRAME_BYTES);
    let body = vec![b'x'; frame::DEFAULT_FRAME_BYTES];
    for _ in 0..3 {
        s.send_data(id, &body, false);
    }
    assert_eq!(s.window(id), 65_535 - 3 * 16_384);
    s.send_data(id, &body[..s.window(id)], false);
    assert_eq!(s.window(id), 0, "blocked until a WINDOW_UPDATE");
    feed(&mut s, &frame(frame::WINDOW_UPDATE, 0, 0, &100u32.to_be_bytes())).unwrap();
    assert_eq!(s.window(id), 0, "the stream's window is still shut");
    feed(&mut s, &frame(frame::WINDOW_UPDATE, 0, id, &100u32.to_be_bytes())).unwrap();
    assert_eq!(s.window(id), 100);

    // Ours: DATA past the stream's window resets it.
    let mut s = open();
    feed(&mut s, &frame(frame::HEADERS, frame::END_HEADERS, 1, &block(ANSWER))).unwrap();
    let chunk = vec![0; FRAME_MAX];
    let mut ev = Vec::new();
    for _ in 0..(STREAM_WINDOW as usize / FRAME_MAX) {
        s.recv(&frame(frame::DATA, 0, 1, &chunk), &mut ev).unwrap();
    }
    assert!(ev.iter().all(|e| matches!(e, Event::Data { .. })));
    s.out.clear();
    let ev = feed(&mut s, &frame(frame::DATA, 0, 1, b"x")).unwrap();
    assert!(matches!(ev[..], [Event::Malformed { stream: 1, .. }]), "{ev:?}");
    // Handing bytes on gives the window back.
    let mut s = open();
    feed(&mut s, &frame(frame::HEADERS, frame::END_HEADERS, 1, &block(ANSWER))).unwrap();
    s.out.clear();
    s.consumed(1, STREAM_WINDOW as usize / 2);
    assert_eq!(s.out[3], frame::WINDOW_UPDATE);
}

#[test]
fn goaway_names_the_streams_never_processed_and_pings_are_answered() {
    let mut s = open();
    s.open("GET", "http", "a", "/y", std::iter::empty(), true);
    let mut p = 1u32.to_be_bytes().to_vec();
    p.extend(0u32.to_be_bytes());
    let ev = feed(&mut s, &frame(frame::GOAWAY, 0, 0, &p)).unwrap();
    assert_eq!(ev, [Event::GoAway { last: 1, code: 0 }]);
    assert!(s.is_open(1) && !s.is_open(3) && !s.can_open());
    s.out.clear();
    feed(&mut s, &frame(frame::PING, 0, 0, b"12345678")).unwrap();
    assert_eq!(s.out, frame(frame::PING, frame::ACK, 0, b"12345678"));
}

#[test]
fn requests_carry_their_pseudo_fields_and_fields_in_a_block_that_decodes() {
    let mut s = open();
    s.out.clear();
    let fields: [(&[u8], &[u8]); 2] = [(b"Content-Type", b"application/grpc"), (b"te", b"trailers")];
    let id = s.open(
        "POST",
        "http",
        "api:50051",
        "/pkg.Echo/Unary",
        fields.into_iter(),
        false,
    );
    let h = Header::parse(&s.out).unwrap();
    assert_eq!((h.kind, h.flags, h.stream), (frame::HEADERS, frame::END_HEADERS, id));
    let mut dec = hpack::Decoder::new(4096);
    let (mut bytes, mut fields) = (Vec::new(), Vec::new());
    let mut sink = Sink::new(&mut bytes, &mut fields, 1 << 16);
    dec.decode(&s.out[9..], &mut sink).unwrap();
    let got: Vec<(String, String)> = fields
        .iter()
        .map(|f| {
            let span =
                |(at, len): (u32, u32)| String::from_utf8_lossy(&bytes[at as usize..(at + len) as usize]).into_owned();
            (span(f.name), span(f.value))
        })
        .collect();
    let want = [
        (":method", "POST"),
        (":scheme", "http"),
        (":authority", "api:50051"),
        (":path", "/pkg.Echo/Unary"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ];
    assert_eq!(got, want.map(|(n, v)| (n.to_owned(), v.to_owned())));
}
