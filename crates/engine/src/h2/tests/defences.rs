//! Defences.

use super::*;

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
    crate::message::coding::write_integer(&mut b, 0, 7, 5);
    b.extend_from_slice(b"x-big");
    crate::message::coding::write_integer(&mut b, 0, 7, 4000);
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
