//! The exchange.

use super::*;

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
    s.extend(headers(7, true, &block(&[("x-trailer", "t"), ("content-length", "3")])));
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
    // The trailer section reaches the handler, less what may not be a
    // trailer (RFC 9110 §6.5.1).
    assert_eq!(seen[3].trailers, b"x-trailer: t\r\n");
    assert!(seen[..3].iter().all(|s| s.trailers.is_empty()));
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
