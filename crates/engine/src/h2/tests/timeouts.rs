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
