//! Request bodies.

use super::*;

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

/// Trailers reach the handler (issue 26: the proxy passes them on), so
/// they are held to the head's rules (§8.2.1): a value with a line break
/// resets the stream, a section past the list limit too (never handed
/// on cut short); the connection goes on.
#[test]
fn trailers_with_a_bad_value_or_past_the_list_limit_reset_their_stream() {
    let mut p = Peer::new(Config {
        head_bytes_max: 250,
        ..cfg()
    });
    p.feed(&headers(1, false, &request("POST", "/", &[])));
    p.feed(&data(1, false, b"ab"));
    p.feed(&headers(1, true, &block(&[("x-t", "a\r\nhost: evil")])));
    p.feed(&headers(3, false, &request("POST", "/", &[])));
    p.feed(&data(3, false, b"ab"));
    // Ten short fields: a block of about 70 bytes, a list of 360 (each
    // field counts 32 more, as SETTINGS_MAX_HEADER_LIST_SIZE does).
    p.feed(&headers(3, true, &block(&[("x-a", "1"); 10])));
    let f = p.frames();
    assert!(f[0].is_rst(1, Code::Protocol), "{f:?}");
    assert!(f[1].is_rst(3, Code::EnhanceYourCalm), "{f:?}");
    assert_eq!(f.len(), 2);
    assert!(p.ready().is_empty());
    p.feed(&headers(5, false, &request("POST", "/", &[])));
    p.feed(&data(5, false, b"abc"));
    p.feed(&headers(5, true, &block(&[("x-sum", "6")])));
    let seen = p.answer_ready(echo);
    assert_eq!(
        (&seen[0].body[..], &seen[0].trailers[..]),
        (&b"abc"[..], &b"x-sum: 6\r\n"[..])
    );
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
