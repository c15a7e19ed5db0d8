//! The HTTP/1.1 machine driven by scripted byte streams (`script.rs`),
//! each split at every offset: the answers must not depend on how the
//! bytes arrived.

use std::time::Duration;

use super::script::{answers, End, Script, BIG};
use super::{TimedOut, Wait};
use crate::limits::Limits;

const GET_A: &str = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
const POST_B: &str = "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
const CHUNKED_C: &str =
    "PUT /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nT: 1\r\nHost: y\r\n\r\n";
const HEAD_D: &str = "HEAD /d HTTP/1.1\r\nHost: x\r\n\r\n";

/// Feeds `input` split at `at`, whole pieces after each split.
fn run_split(input: &[u8], at: usize, buffer: usize) -> Script {
    let mut s = Script::new(Limits::default()).with_buffer(buffer);
    s.feed(&input[..at]);
    s.feed(&input[at..]);
    s
}

/// Runs `input` whole, then split at every offset, then a byte at a time,
/// with a large and a 16-byte first read buffer: every way must write the
/// same bytes and end the same way. Returns the whole run.
fn every_split(input: &[u8]) -> Script {
    let whole = run_split(input, input.len(), 16 * 1024);
    for buffer in [16 * 1024, 16] {
        for at in 0..=input.len() {
            let s = run_split(input, at, buffer);
            assert_eq!(
                String::from_utf8_lossy(&s.wire),
                String::from_utf8_lossy(&whole.wire),
                "split at {at}, buffer {buffer}"
            );
            assert_eq!(s.end, whole.end, "split at {at}");
        }
        let mut s = Script::new(Limits::default()).with_buffer(buffer);
        for b in input {
            s.feed(std::slice::from_ref(b));
        }
        assert_eq!(s.wire, whole.wire, "a byte at a time, buffer {buffer}");
    }
    whole
}

/// The 408 the machine queues for a request not received in time, with
/// its body's length: `408 Request Timeout: request not received in time\n`.
fn refusal_408(reason: crate::Reason) -> super::Refusal {
    super::Refusal {
        status: 408,
        body_bytes: "408 Request Timeout: request not received in time\n".len() as u64,
        reason,
    }
}

fn bodies(s: &Script) -> Vec<(u16, String)> {
    answers(&s.wire, &s.head_only)
        .into_iter()
        .map(|a| (a.status, String::from_utf8_lossy(&a.body).into_owned()))
        .collect()
}

#[test]
fn pipelined_requests_of_every_framing_are_answered_in_order_however_split() {
    let input = [GET_A, POST_B, CHUNKED_C, HEAD_D, GET_A].concat();
    let s = every_split(input.as_bytes());
    assert_eq!(
        bodies(&s),
        [
            (200, "GET /a 0:".into()),
            (200, "POST /b 5:hello".into()),
            // The trailer section is the handler's, less what may not be
            // a trailer (RFC 9110 §6.5.1).
            (200, "PUT /c 5:abcde | t: 1\r\n".into()),
            (200, String::new()),
            (200, "GET /a 0:".into()),
        ]
    );
    assert_eq!(s.end, None);
    assert_eq!(s.unconsumed(), 0);
    // HEAD gets GET's Content-Length and no body (RFC 9110 §9.3.2).
    let head = &answers(&s.wire, &s.head_only)[3].head;
    assert!(head.contains("Content-Length: 10\r\n"), "{head}");
}

#[test]
fn a_large_body_goes_out_as_a_tail_between_its_neighbours() {
    let input = [GET_A, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n", GET_A].concat();
    let s = every_split(input.as_bytes());
    let got = answers(&s.wire, &s.head_only);
    assert_eq!(got.len(), 3);
    assert_eq!(got[1].body, BIG);
    assert_eq!(got[2].body, b"GET /a 0:");
}

#[test]
fn expect_100_continue_is_answered_only_while_the_client_holds_its_body_back() {
    let head = "POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n";
    let mut s = Script::new(Limits::default());
    s.feed(head.as_bytes());
    assert_eq!(s.wire, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.feed(b"body");
    let got = answers(&s.wire, &s.head_only);
    assert_eq!((got[0].status, got[1].status), (100, 200));
    assert_eq!(got[1].body, b"POST /e 4:body");
    // Body already sent with the head: no interim answer.
    let mut s = Script::new(Limits::default());
    s.feed([head, "body"].concat().as_bytes());
    assert_eq!(bodies(&s), [(200, "POST /e 4:body".into())]);
}

#[test]
fn a_bad_request_gets_one_error_answer_and_nothing_after_it() {
    let table: &[(&str, u16)] = &[
        ("GET / HTTP/1.1\nHost: x\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x\nX: y\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400),
        ("GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        (
            "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        ("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n", 413),
        ("GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        ("GET / HTTP/1.1\r\nHost: x\r\nExpect: tea\r\n\r\n", 417),
        (
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            400,
        ),
        (
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX",
            400,
        ),
    ];
    for &(bad, status) in table {
        // A valid request before it is answered; one after it is not.
        let input = [GET_A, bad, GET_A].concat();
        let s = every_split(input.as_bytes());
        let got = bodies(&s);
        assert_eq!(got.len(), 2, "{bad:?}: {got:?}");
        assert_eq!(got[0], (200, "GET /a 0:".into()));
        assert_eq!(got[1].0, status, "{bad:?}");
        assert_eq!(s.refused(), Some(status), "{bad:?}");
        let last = &answers(&s.wire, &s.head_only)[1].head;
        assert!(last.contains("Connection: close\r\n"), "{last}");
    }
}

#[test]
fn an_error_answering_head_has_no_body() {
    let input = "HEAD / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
    let s = every_split(input.as_bytes());
    assert_eq!(s.refused(), Some(400));
    let text = String::from_utf8_lossy(&s.wire);
    assert!(
        text.ends_with("\r\n\r\n") && text.contains("Content-Length: "),
        "{text}"
    );
}

#[test]
fn heads_and_bodies_past_the_limits_get_431_and_413() {
    let limits = Limits {
        head_bytes_max: 64,
        body_bytes_max: 8,
        ..Limits::default()
    };
    let long = format!("GET / HTTP/1.1\r\nHost: x\r\nX: {}\r\n\r\n", "y".repeat(100));
    let chunked =
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n5\r\nfghij\r\n0\r\n\r\n";
    for (input, status) in [(long.as_str(), 431), (chunked, 413)] {
        for buffer in [16, 4096] {
            let mut s = Script::new(limits.clone()).with_buffer(buffer);
            s.feed(input.as_bytes());
            assert_eq!(s.refused(), Some(status), "{input:?} buffer {buffer}");
        }
    }
    // A Content-Length body within the limit grows a small buffer only as
    // far as it needs.
    let limits = Limits {
        body_bytes_max: 3000,
        ..Limits::default()
    };
    let input = format!(
        "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 3000\r\n\r\n{}",
        "z".repeat(3000)
    );
    let mut s = Script::new(limits).with_buffer(16);
    s.feed(input.as_bytes());
    assert_eq!(bodies(&s)[0].1.len(), "POST /p 3000:".len() + 3000);
}

#[test]
fn a_deferred_request_holds_the_pipelined_ones_behind_it() {
    let input = ["GET /later HTTP/1.1\r\nHost: x\r\n\r\n", GET_A, POST_B].concat();
    for at in 0..=input.len() {
        let mut s = run_split(input.as_bytes(), at, 4096);
        assert!(s.deferred, "split at {at}");
        assert!(s.wire.is_empty(), "nothing is answered before the deferred request");
        assert_eq!(s.wait(false), Wait::Until(None), "a deferred answer has no deadline");
        assert_eq!(s.time_out(), TimedOut::Keep);
        s.answer_later();
        assert_eq!(
            bodies(&s),
            [
                (200, "later".into()),
                (200, "GET /a 0:".into()),
                (200, "POST /b 5:hello".into())
            ]
        );
    }
}

#[test]
fn connection_close_and_http10_end_the_connection_after_their_answer() {
    let close = "GET /close HTTP/1.1\r\nHost: x\r\n\r\n";
    let s = every_split([close, GET_A].concat().as_bytes());
    assert_eq!(bodies(&s).len(), 1);
    assert_eq!(s.end, Some(End::Closing));
    assert!(answers(&s.wire, &s.head_only)[0].head.contains("Connection: close\r\n"));

    let s = every_split(
        ["GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", GET_A]
            .concat()
            .as_bytes(),
    );
    assert_eq!((bodies(&s).len(), s.end), (1, Some(End::Closing)));

    let s = every_split(["GET /h HTTP/1.0\r\n\r\n", GET_A].concat().as_bytes());
    assert_eq!((bodies(&s).len(), s.end), (1, Some(End::Closing)));

    let keep = "GET /k HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
    let s = every_split([keep, GET_A].concat().as_bytes());
    assert_eq!(bodies(&s).len(), 2);
    assert!(answers(&s.wire, &s.head_only)[0]
        .head
        .contains("Connection: keep-alive\r\n"));

    // Draining: the request in hand is answered with `Connection: close`.
    let mut s = Script::new(Limits::default());
    s.draining = true;
    s.feed([GET_A, GET_A].concat().as_bytes());
    assert_eq!((bodies(&s).len(), s.end), (1, Some(End::Closing)));
}

#[test]
fn each_state_asks_for_its_own_deadline() {
    let limits = Limits::default();
    let mut s = Script::new(limits.clone());
    let now = s.now;
    s.feed(b"GET / HT");
    assert_eq!(s.wait(false), Wait::Until(Some(now + limits.head_timeout)));
    // More of the head does not move the head's deadline (slowloris).
    s.now = now + Duration::from_secs(1);
    s.feed(b"TP/1.1\r\nHo");
    assert_eq!(s.wait(false), Wait::Until(Some(now + limits.head_timeout)));
    s.feed(b"st: x\r\nContent-Length: 2\r\n\r\n");
    // The body's rate is first measured over the grace's last window.
    assert_eq!(
        s.wait(false),
        Wait::Until(Some(s.now + limits.body_timeout - crate::min_rate::WINDOW))
    );
    assert_eq!(s.wait(true), Wait::Close, "a client gone mid-body");
    s.feed(b"ok");
    assert_eq!(s.wait(false), Wait::Until(Some(s.now + limits.idle_timeout)));
    assert_eq!(s.wait(true), Wait::Close);
    assert_eq!(s.time_out(), TimedOut::Close, "idle");
}

#[test]
fn a_request_not_received_in_time_gets_408() {
    for partial in [
        "GET / HTTP/1.1\r\nHost",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nabc",
    ] {
        let mut s = Script::new(Limits::default());
        s.feed(partial.as_bytes());
        // A body that stopped is below the minimum rate when the deadline
        // comes: that is the rule the log names.
        let reason = match partial.starts_with("GET") {
            true => crate::Reason::HeadTimeout,
            false => crate::Reason::BodyMinRate,
        };
        assert_eq!(s.time_out(), TimedOut::Refused(refusal_408(reason)));
        assert_eq!(bodies(&s)[0].0, 408);
        let len = s.wire.len();
        s.feed(GET_A.as_bytes());
        assert_eq!(s.wire.len(), len, "nothing after the 408");
    }
}

#[test]
fn bytes_that_are_not_http1_close_silently_only_where_http2_may_be_spoken() {
    let garbage = b"GET / NOPE\r\n\r\n";
    let mut s = Script::new(Limits::default());
    s.h2_allowed = true;
    s.feed(garbage);
    assert_eq!((s.end, s.wire.len()), (Some(End::NotHttp), 0));
    let mut s = Script::new(Limits::default());
    s.feed(garbage);
    assert_eq!(s.refused(), Some(400));
    // After a first request, HTTP/2 is out of the question: a 400.
    let mut s = Script::new(Limits::default());
    s.h2_allowed = true;
    s.feed([GET_A.as_bytes(), garbage].concat().as_slice());
    assert_eq!(s.refused(), Some(400));
}

const IGNORE_CHUNKED: &str =
    "POST /ignore-c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";

#[test]
fn a_body_nobody_reads_is_answered_at_its_head_and_discarded_keeping_the_connection() {
    let ignore = "POST /ignore HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\nunread!";
    let input = [ignore, GET_A, IGNORE_CHUNKED, POST_B].concat();
    let s = every_split(input.as_bytes());
    assert_eq!(
        bodies(&s),
        [
            (200, "ignored POST /ignore".into()),
            (200, "GET /a 0:".into()),
            (200, "ignored POST /ignore-c".into()),
            (200, "POST /b 5:hello".into()),
        ]
    );
    assert!(answers(&s.wire, &s.head_only).iter().all(|a| !a.head.contains("close")));
    assert_eq!(s.end, None);
    assert_eq!(s.unconsumed(), 0);
}

#[test]
fn the_answer_to_an_ignored_body_leaves_before_the_body_arrives() {
    let mut s = Script::new(Limits::default());
    s.feed(b"POST /ignore HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n");
    assert_eq!(bodies(&s), [(200, "ignored POST /ignore".into())]);
    // The body's rest is read and dropped, never buffered.
    for _ in 0..100 {
        s.feed(&[b'x'; 10_000]);
        assert_eq!(s.unconsumed(), 0);
    }
    s.feed(GET_A.as_bytes());
    assert_eq!(bodies(&s)[1], (200, "GET /a 0:".into()));
    assert_eq!(s.end, None);
}

#[test]
fn an_ignored_body_declared_over_discard_bytes_max_closes_after_its_answer() {
    let limits = Limits {
        discard_bytes_max: 100,
        ..Limits::default()
    };
    let mut s = Script::new(limits.clone());
    s.feed(b"POST /ignore HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n");
    let got = answers(&s.wire, &s.head_only);
    assert_eq!(got.len(), 1);
    assert!(got[0].head.contains("Connection: close\r\n"), "{}", got[0].head);
    assert_eq!(s.end, Some(End::Closing));
    // Declared within it: kept alive.
    let mut s = Script::new(limits.clone());
    s.feed(b"POST /ignore HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n");
    assert!(!answers(&s.wire, &s.head_only)[0].head.contains("close"));
    // A chunked body has no declared size: it closes once it passes the
    // limit, with nothing written after the answer.
    let mut s = Script::new(limits);
    s.feed(b"POST /ignore HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    let written = s.wire.len();
    assert_eq!(s.end, None);
    s.feed(b"40\r\n");
    s.feed(&[b'y'; 64]);
    s.feed(b"\r\n40\r\n");
    s.feed(&[b'y'; 64]);
    assert_eq!(s.end, Some(End::Closing));
    assert_eq!(s.wire.len(), written);
}

#[test]
fn an_ignored_body_must_arrive_within_the_discard_timeout() {
    let mut s = Script::new(Limits::default());
    s.feed(b"POST /ignore HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc");
    let Wait::Until(Some(deadline)) = s.wait(false) else {
        panic!("a discarded body has a deadline");
    };
    assert_eq!(deadline, s.now + crate::limits::DISCARD_TIMEOUT);
    assert_eq!(s.time_out(), TimedOut::Close);
    // A client that left mid-body is closed at once.
    let mut s = Script::new(Limits::default());
    s.feed(b"POST /ignore HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc");
    assert_eq!(s.wait(true), Wait::Close);
}

#[test]
fn an_ignored_body_sent_after_100_continue_is_not_waited_for() {
    // The client holds its body back for `100 Continue`, which never
    // comes: it may not send the body at all, so the answer closes.
    let mut s = Script::new(Limits::default());
    s.feed(b"POST /ignore HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
    let got = answers(&s.wire, &s.head_only);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status, 200);
    assert!(got[0].head.contains("Connection: close\r\n"), "{}", got[0].head);
    assert_eq!(s.end, Some(End::Closing));
}

#[test]
fn a_head_arriving_steadily_gets_a_second_more_per_500_bytes_up_to_head_timeout_max() {
    let limits = Limits::default();
    let mut s = Script::new(limits.clone());
    let t0 = s.now;
    let field = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Long: {}\r\n", "a".repeat(5000));
    s.feed(field.as_bytes());
    let extra = Duration::from_secs(field.len() as u64 / limits.min_rate_bytes_per_sec);
    assert_eq!(s.wait(false), Wait::Until(Some(t0 + limits.head_timeout + extra)));
    s.feed("a".repeat(20_000).as_bytes());
    assert_eq!(s.wait(false), Wait::Until(Some(t0 + limits.head_timeout_max)));
    // A deadline reached while the head is still short of it ends it.
    s.now = t0 + limits.head_timeout_max;
    assert_eq!(
        s.time_out_once(),
        TimedOut::Refused(refusal_408(crate::Reason::HeadTimeout))
    );
}

#[test]
fn a_body_sent_a_byte_at_a_time_is_ended_at_the_end_of_its_grace() {
    // One byte every 4 s: a timer restarted by each read (the old
    // `body_timeout`) would never fire.
    for target in ["/b", "/ignore"] {
        let limits = Limits::default();
        let mut s = Script::new(limits.clone());
        s.feed(format!("POST {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n").as_bytes());
        // The driver waits after each read: the body's clock starts now.
        s.wait(false);
        let t0 = s.now;
        let mut ended = None;
        for _ in 0..100 {
            s.now += Duration::from_secs(4);
            s.feed(b"x");
            while let Wait::Until(Some(deadline)) = s.wait(false) {
                if deadline > s.now {
                    break;
                }
                match s.time_out_once() {
                    TimedOut::Again => {}
                    other => {
                        ended = Some((other, s.now));
                        break;
                    }
                }
            }
            if ended.is_some() {
                break;
            }
        }
        let (how, when) = ended.expect("the slow body was ended");
        if target == "/ignore" {
            // Answered at the head: the discard's own timeout closes it.
            assert_eq!(how, TimedOut::Close, "{target}");
            assert!(
                when <= t0 + crate::limits::DISCARD_TIMEOUT + Duration::from_secs(4),
                "{target}"
            );
        } else {
            // Too slow for the minimum rate, before the body timeout.
            assert_eq!(
                how,
                TimedOut::Refused(refusal_408(crate::Reason::BodyMinRate)),
                "{target}"
            );
            // Checked here only every 4 s, as the bytes come.
            assert!(when <= t0 + limits.body_timeout + Duration::from_secs(4), "{target}");
            assert_eq!(bodies(&s).last().map(|b| b.0), Some(408));
        }
    }
}

#[test]
fn a_body_arriving_at_the_minimum_rate_is_kept() {
    let limits = Limits::default();
    let mut s = Script::new(limits.clone());
    s.feed(b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n");
    // 1,000 B/s for 60 s: past the grace, checked every 5 s, never ended.
    for _ in 0..59 {
        s.now += Duration::from_secs(1);
        s.feed(&[b'y'; 1000]);
        if let Wait::Until(Some(deadline)) = s.wait(false) {
            if deadline <= s.now {
                assert_eq!(s.time_out_once(), TimedOut::Again);
            }
        }
    }
    s.feed(&[b'y'; 1000]);
    assert_eq!(bodies(&s), [(200, format!("POST /b 60000:{}", "y".repeat(60000)))]);
}

const UPGRADE: &str = "GET /upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";

/// A request offering an upgrade, answered with a 101: the machine reads
/// nothing after it, and every byte after the request (here a WebSocket
/// frame that is no HTTP) is left to the new protocol, whole and in
/// order, however the bytes were split. Requests before it are answered
/// first.
#[test]
fn an_upgrade_answers_101_and_leaves_every_byte_after_it_to_the_new_protocol() {
    let frame: &[u8] = b"\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58GET / HTTP/1.1\r\n\r\n";
    let input = [GET_A.as_bytes(), UPGRADE.as_bytes(), frame].concat();
    let s = every_split(&input);
    assert_eq!(s.end, Some(End::Upgraded));
    let got = answers(&s.wire, &s.head_only);
    assert_eq!(got.iter().map(|a| a.status).collect::<Vec<_>>(), [200, 101]);
    assert_eq!(
        got[1].head,
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nServer: peregrine\r\nDate: {}\r\n\
             Connection: upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: x\r\n\r\n",
            std::str::from_utf8(super::script::DATE).unwrap()
        )
    );
    for buffer in [16 * 1024, 16] {
        for at in 0..=input.len() {
            let s = run_split(&input, at, buffer);
            assert_eq!(s.switched, frame, "split at {at}, buffer {buffer}");
        }
    }
    // Left in the slot (nothing took the connection over), it closes.
    let mut s = run_split(&input, input.len(), 16 * 1024);
    assert_eq!(s.wait(false), Wait::Close);
    assert_eq!(s.time_out_once(), TimedOut::Close);
}

/// RFC 9110 §7.8: an Upgrade not named by Connection, an HTTP/1.0 one and
/// one on a request with a body are not offers: `upgrade` refuses (the
/// script's handler then answers 400) and HTTP/1.1 goes on.
#[test]
fn a_request_that_offers_no_upgrade_cannot_be_switched() {
    let not_offered = [
        "GET /upgrade HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n",
        "GET /upgrade HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\n\r\n",
        "POST /upgrade HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\nContent-Length: 5\r\n\r\nhello",
        "POST /upgrade HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ];
    for request in not_offered {
        let s = every_split([request, GET_A].concat().as_bytes());
        assert_eq!(s.end, None, "{request:?}");
        let got = answers(&s.wire, &s.head_only);
        assert_eq!(
            got.iter().map(|a| a.status).collect::<Vec<_>>(),
            [400, 200],
            "{request:?}"
        );
        assert!(s.switched.is_empty());
    }
    // HTTP/1.0: ignored, and the connection closes after the answer.
    let s = every_split(b"GET /upgrade HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n");
    assert_eq!(s.end, Some(End::Closing));
    assert_eq!(answers(&s.wire, &s.head_only)[0].status, 400);
}

/// The driver's inline wait (`idle_wait`, asked before any `Env` is
/// built) says what the whole `poll_timeout` says, or leaves it the
/// question: for every state a machine between requests can be in and
/// every combination of the link's and the server's flags.
#[test]
fn the_inline_idle_wait_agrees_with_the_whole_poll_timeout() {
    let limits = Limits::default();
    let now = std::time::Instant::now();
    let env = super::Env {
        limits: &limits,
        date: b"Thu, 01 Jan 1970 00:00:00 GMT",
        now,
        idle_until: now.checked_add(limits.idle_timeout),
        draining: false,
        h2_allowed: false,
    };
    let states = || {
        [
            super::State::Idle,
            super::State::Head,
            super::State::Closing,
            super::State::Upgraded,
        ]
    };
    let mut n_inline = 0;
    for bits in 0..32u32 {
        let bit = |i: u32| bits & (1 << i) != 0;
        let env = super::Env {
            draining: bit(0),
            ..env
        };
        let link = super::Link {
            peer_closed: bit(1),
            fresh: bit(2),
            handshaking: bit(3),
            input_empty: bit(4),
            unconsumed: 0,
            bytes_in: 0,
        };
        for (state, other) in states().into_iter().zip(states()) {
            let (mut inline, mut whole) = (super::H1::new(), super::H1::new());
            (inline.state, whole.state) = (state, other);
            // A head's deadline counts from its first byte.
            (inline.head_since, whole.head_since) = (now, now);
            let wanted = whole.poll_timeout_other(&env, link);
            match inline.idle_wait(env.idle_until, env.draining, &link) {
                Some(wait) => {
                    n_inline += 1;
                    assert_eq!(wait, wanted, "flags {bits:05b}");
                    assert_eq!(inline.deadline, whole.deadline, "flags {bits:05b}");
                }
                None => assert_eq!(inline.poll_timeout(&env, link), wanted, "flags {bits:05b}"),
            }
        }
    }
    // Idle, input empty, nothing to close for, no handshake: fresh or not.
    assert_eq!(n_inline, 2);
}
