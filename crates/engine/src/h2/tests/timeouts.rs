//! The session's own deadlines (`timeout.rs`), driven by a clock the test
//! moves: what restarts each timeout and what does not, without a socket.

use std::time::{Duration, Instant};

use super::*;
use crate::h2::{Expired, Timeouts};

const T: Timeouts = Timeouts {
    idle: Duration::from_secs(60),
    head: Duration::from_secs(10),
    body_grace: Duration::from_secs(20),
    min_rate: 500,
    send: Duration::from_secs(30),
};

fn peer() -> (Peer, Instant) {
    let mut p = Peer::new(cfg());
    p.session.set_timeouts(T);
    let t0 = Instant::now();
    assert_eq!(p.session.poll_timeout(t0, &[]), Some(t0 + T.idle));
    (p, t0)
}

/// PING and SETTINGS never move the idle deadline; a request does, from
/// when its stream is done.
#[test]
fn only_request_frames_restart_the_idle_timeout() {
    let (mut p, t0) = peer();
    let later = t0 + Duration::from_secs(30);
    p.feed(&ping([1; 8]));
    p.feed(&settings(&[]));
    assert_eq!(p.session.poll_timeout(later, &[]), Some(t0 + T.idle));
    let at = t0 + T.idle;
    assert_eq!(p.session.handle_timeout(at, &mut p.out), Some(Expired::Idle));
    assert_eq!(p.frames().last().map(|f| f.kind), Some(frame::GOAWAY));

    let (mut p, t0) = peer();
    let asked = t0 + Duration::from_secs(30);
    p.feed(&get(1, "/"));
    assert_eq!(p.ready(), [1]);
    p.respond(1, Response::text("ok")).unwrap();
    assert_eq!(p.session.poll_timeout(asked, &[]), Some(asked + T.idle));
    assert_eq!(p.session.handle_timeout(t0 + T.idle, &mut p.out), None);
}

/// A frame other than DATA begun (the driver holds its first bytes) or a
/// header block without its CONTINUATION must be whole within `head`.
#[test]
fn a_frame_or_header_block_begun_must_end_within_the_head_timeout() {
    let (mut p, t0) = peer();
    let partial = &get(1, "/")[..5];
    assert_eq!(p.session.poll_timeout(t0, partial), Some(t0 + T.head));
    let at = t0 + T.head;
    assert_eq!(
        p.session.handle_timeout(at, &mut p.out),
        Some(Expired::SlowRequest("request header block not received in time"))
    );
    // A DATA frame's first bytes are a body's, judged by its rate.
    let (mut p, t0) = peer();
    let partial = &data(1, false, b"abc")[..5];
    assert_eq!(p.session.poll_timeout(t0, partial), Some(t0 + T.idle));
}

/// A body collected whole that stalls is its stream's problem only: the
/// stream gets 408 (not the connection GOAWAY), and a download on another
/// stream goes on to its end.
#[test]
fn a_stalled_body_gets_408_on_its_stream_and_the_others_go_on() {
    let (mut p, t0) = peer();
    p.feed(&get(1, "/big"));
    assert_eq!(p.ready(), [1]);
    p.respond(1, Response::bytes("application/octet-stream", vec![b'x'; 200_000]))
        .unwrap();
    p.feed(&headers(3, false, &request("POST", "/", &[("content-length", "10")])));
    p.feed(&data(3, false, b"12345"));
    p.frames();
    // The grace's end: stream 3 brought nothing in its last window.
    let mut at = p.session.poll_timeout(t0, &[]).unwrap();
    let expired = loop {
        if let Some(expired) = p.session.handle_timeout(at, &mut p.out) {
            break expired;
        }
        at = p.session.poll_timeout(at, &[]).unwrap();
    };
    assert_eq!((expired, at), (Expired::SlowStreams(1), t0 + T.body_grace));
    assert!(!p.session.is_done());
    assert_eq!(p.session.refused(3), Some((408, "request body not received in time")));
    p.answer_ready(echo);
    let f = p.frames();
    assert!(f.iter().all(|f| f.kind != frame::GOAWAY), "{f:?}");
    assert_eq!(f.iter().find(|f| f.stream == 3).map(Frame::status), Some(408));
    // The download's window opened: it goes to its end.
    p.feed(&window_update(0, 1 << 20));
    p.feed(&window_update(1, 1 << 20));
    p.send();
    let (body, ended) = body_of(&p.frames(), 1);
    assert!(ended);
    assert!(body.len() > 100_000, "{}", body.len());
}

/// A body handed to its reader as it arrives (a proxied upload, a gRPC
/// client stream) may trickle far below the minimum rate for as long as
/// it keeps coming: a small message every 2 s outlives the grace many
/// times over. Only a silence longer than the grace ends it (408).
#[test]
fn a_streamed_upload_that_trickles_lives_and_one_that_goes_silent_is_ended() {
    let (mut p, t0) = peer();
    p.feed(&headers(1, false, &request("POST", "/api/stream", &[])));
    assert_eq!(p.session.take_head(), Some(1));
    let (_reader, sink) = crate::body::pipe(1 << 20);
    p.session.stream_body(1, sink);
    let mut now = t0;
    for i in 0..60 {
        now += Duration::from_secs(2);
        p.feed(&data(1, false, format!("message-{i};").as_bytes()));
        let at = p.session.poll_timeout(now, &[]).unwrap();
        assert_eq!(at, now + T.body_grace, "after {i} messages");
    }
    // 120 s of a few bytes a second: still open.
    assert!(!p.session.is_done() && p.ready().is_empty());
    let at = p.session.poll_timeout(now, &[]).unwrap();
    assert_eq!(
        p.session.handle_timeout(at - Duration::from_millis(1), &mut p.out),
        None
    );
    assert_eq!(p.session.handle_timeout(at, &mut p.out), Some(Expired::SlowStreams(1)));
    assert_eq!(p.ready(), [1]);
    assert_eq!(p.session.refused(1).map(|r| r.0), Some(408));
    assert!(!p.session.is_done());
}

/// A connection's own timeout that abandons streams says so: its GOAWAY
/// carries ENHANCE_YOUR_CALM, never NO_ERROR (which would tell the client
/// the streams up to the last were seen through).
#[test]
fn a_send_timeout_with_streams_open_is_not_a_goaway_with_no_error() {
    let (mut p, t0) = peer();
    p.feed(&settings(&[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 0)]));
    p.feed(&get(1, "/"));
    assert_eq!(p.ready(), [1]);
    p.respond(1, Response::text("held back")).unwrap();
    p.frames();
    let at = p.session.poll_timeout(t0, &[]).unwrap();
    assert_eq!(at, t0 + T.send);
    assert_eq!(p.session.handle_timeout(at, &mut p.out), Some(Expired::WindowClosed));
    let f = p.frames();
    assert!(f.last().unwrap().is_goaway(Code::EnhanceYourCalm), "{f:?}");
}
