//! Frames and stream states.

use super::*;

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
    // §6.8: first a GOAWAY naming 2^31-1, with a PING to time a round trip.
    let f = p.frames();
    assert_eq!(kinds(&f), [frame::GOAWAY, frame::PING]);
    assert!(f[0].is_goaway(Code::NoError));
    assert_eq!(f[0].last_stream(), frame::STREAM_ID_MAX);
    assert!(!p.session.is_done());

    // A stream the client opened before it read that GOAWAY still counts.
    p.feed(&get(5, "/five"));
    // An ACK of another PING changes nothing; ours brings the final GOAWAY,
    // naming the last stream that will be answered.
    p.feed(&frame(frame::PING, frame::ACK, 0, b"otherone"));
    assert!(p.out.is_empty(), "{:?}", p.frames());
    let payload: [u8; 8] = f[1].payload[..].try_into().unwrap();
    p.feed(&frame(frame::PING, frame::ACK, 0, &payload));
    let f = p.frames();
    assert_eq!(f.len(), 1);
    assert!(f[0].is_goaway(Code::NoError));
    assert_eq!(f[0].last_stream(), 5);
    assert!(!p.session.is_done());

    // A stream the client opened after that is ignored, with whatever
    // follows it.
    p.feed(&headers(7, false, &request("POST", "/seven", &[])));
    p.feed(&data(7, false, b"ignored"));
    p.feed(&window_update(7, 10));
    p.feed(&rst_stream(7, Code::Cancel));
    p.feed(&get(9, "/nine"));
    assert!(p.out.is_empty(), "{:?}", p.frames());

    // The streams in flight finish.
    let seen = p.answer_ready(echo);
    let targets: Vec<&str> = seen.iter().map(|s| s.target.as_str()).collect();
    assert_eq!(targets, ["/one", "/five"]);
    assert!(!p.session.is_done());
    p.feed(&data(3, true, b"def"));
    let seen = p.answer_ready(echo);
    assert_eq!((seen[0].target.as_str(), &seen[0].body[..]), ("/three", &b"abcdef"[..]));
    assert!(p.session.is_done());
    let f = p.frames();
    assert_eq!(body_of(&f, 1), (b"GET /one 0".to_vec(), true));
    assert_eq!(body_of(&f, 3), (b"POST /three 6".to_vec(), true));
    assert_eq!(body_of(&f, 5), (b"GET /five 0".to_vec(), true));
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
        crate::message::coding::write_integer(&mut first, 0, 7, name.len());
        first.extend_from_slice(name);
        crate::message::coding::write_integer(&mut first, 0, 7, value.len());
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
