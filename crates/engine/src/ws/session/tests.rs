//! The machine driven by scripted client bytes, split at every offset.

use std::time::{Duration, Instant};

use super::*;

const FRAGMENTS_MAX: u32 = 1024;

fn config() -> Config {
    Config {
        message_bytes_max: 1024,
        fragments_max: FRAGMENTS_MAX,
        ping_interval: Some(Duration::from_secs(30)),
        message_timeout: Duration::from_secs(20),
        deflate: None,
    }
}

use test_support::ws::masked as frame;

/// What the machine made of `bytes` fed in pieces of `step`: the events,
/// as owned values, and the frames it queued.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Text(String),
    Binary(Vec<u8>),
    Closed(u16, String),
}

fn feed(bytes: &[u8], step: usize) -> (Vec<Seen>, Vec<u8>) {
    feed_with(config(), bytes, step)
}

fn feed_with(config: Config, bytes: &[u8], step: usize) -> (Vec<Seen>, Vec<u8>) {
    let now = Instant::now();
    let mut s = Session::new(config, now);
    let mut input: Vec<u8> = Vec::new();
    let mut start = 0;
    let mut out = Vec::new();
    let mut seen = Vec::new();
    let mut fed = 0;
    loop {
        let (used, event) = s.poll(&mut input[start..], &mut out, now);
        let owned = match event {
            Event::Message(Kind::Text, b) => Some(Seen::Text(String::from_utf8(b.to_vec()).unwrap())),
            Event::Message(Kind::Binary, b) => Some(Seen::Binary(b.to_vec())),
            Event::Closed { code, reason } => Some(Seen::Closed(code, reason.to_owned())),
            Event::Done => break,
            Event::Input => None,
        };
        start += used;
        match owned {
            Some(seen_now) => seen.push(seen_now),
            None if fed == bytes.len() => break,
            None => {
                let n = step.min(bytes.len() - fed);
                input.extend_from_slice(&bytes[fed..fed + n]);
                fed += n;
            }
        }
    }
    (seen, out)
}

/// The same at every split, and in one piece.
fn feed_all(bytes: &[u8]) -> (Vec<Seen>, Vec<u8>) {
    let whole = feed(bytes, bytes.len().max(1));
    for step in 1..bytes.len().min(40) {
        assert_eq!(feed(bytes, step), whole, "fed {step} bytes at a time");
    }
    whole
}

fn close_frame(code: u16) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write(&mut out, Op::Close, &code.to_be_bytes());
    out
}

#[test]
fn messages_whole_fragmented_and_interleaved_with_pings_arrive_at_every_split() {
    let mut bytes = frame(0x81, b"hello");
    bytes.extend(frame(0x82, &[0, 1, 2, 255]));
    bytes.extend(frame(0x01, "héllo, ".as_bytes()));
    bytes.extend(frame(0x89, b"p"));
    bytes.extend(frame(0x00, "wör".as_bytes()));
    bytes.extend(frame(0x80, "ld".as_bytes()));
    bytes.extend(frame(0x81, b""));
    let (seen, out) = feed_all(&bytes);
    assert_eq!(
        seen,
        [
            Seen::Text("hello".into()),
            Seen::Binary(vec![0, 1, 2, 255]),
            Seen::Text("héllo, wörld".into()),
            Seen::Text(String::new()),
        ]
    );
    assert_eq!(out, [0x8A, 1, b'p'], "the pong echoes the ping's payload");
}

#[test]
fn a_close_is_answered_with_its_code_and_ends_the_socket() {
    let mut payload = 1000u16.to_be_bytes().to_vec();
    payload.extend_from_slice(b"bye");
    let mut bytes = frame(0x88, &payload);
    bytes.extend(frame(0x81, b"after the close: never read"));
    let (seen, out) = feed_all(&bytes);
    assert_eq!(seen, [Seen::Closed(1000, "bye".into())]);
    assert_eq!(out, close_frame(1000));
    let (seen, out) = feed_all(&frame(0x88, b""));
    assert_eq!(seen, [Seen::Closed(1005, String::new())]);
    assert_eq!(out, [0x88, 0], "an empty Close is answered empty");
}

/// Each refusal closes with its code, and reads nothing after.
#[test]
fn protocol_errors_close_with_their_codes() {
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (vec![0xC1, 0x80, 0, 0, 0, 0], 1002),                              // RSV1
        (vec![0x83, 0x80, 0, 0, 0, 0], 1002),                              // opcode 3
        (vec![0x81, 0x00], 1002),                                          // unmasked
        (frame(0x80, b"x"), 1002),                                         // continuation first
        ([frame(0x01, b"a"), frame(0x81, b"b")].concat(), 1002),           // new message mid-message
        (frame(0x09, b""), 1002),                                          // fragmented ping
        (frame(0x81, &[0xff]), 1007),                                      // invalid UTF-8
        (frame(0x88, &[3]), 1002),                                         // one-byte close
        (frame(0x88, &999u16.to_be_bytes()), 1002),                        // invalid close code
        (frame(0x88, &1005u16.to_be_bytes()), 1002),                       // reserved close code
        (frame(0x88, &[0x03, 0xe8, 0xff]), 1007),                          // invalid reason
        (frame(0x82, &[0; 1025]), 1009),                                   // too large
        ([frame(0x02, &[0; 600]), frame(0x80, &[0; 600])].concat(), 1009), // too large in parts
    ];
    // One fragment too many (empty ones: the size limit is not what
    // refuses them).
    let mut fragments = frame(0x02, b"");
    for _ in 2..FRAGMENTS_MAX {
        fragments.extend(frame(0x00, b""));
    }
    let mut one_more = fragments.clone();
    fragments.extend(frame(0x80, b""));
    one_more.extend(frame(0x00, b""));
    one_more.extend(frame(0x80, b""));
    assert_eq!(feed(&fragments, fragments.len()).0, [Seen::Binary(Vec::new())]);
    let (seen, _) = feed(&one_more, one_more.len());
    assert!(matches!(seen[..], [Seen::Closed(1009, _)]), "{seen:?}");
    for (bytes, code) in cases {
        let (seen, out) = feed_all(&bytes);
        let Some(Seen::Closed(got, _)) = seen.last() else {
            panic!("{bytes:02x?}: {seen:?}")
        };
        assert_eq!(*got, code, "{bytes:02x?}");
        assert_eq!((out[0], &out[2..4]), (0x88, &code.to_be_bytes()[..]), "{bytes:02x?}");
    }
}

/// Autobahn 6.4: the invalid byte is found before the rest arrives.
#[test]
fn invalid_utf8_fails_at_its_byte_even_mid_frame() {
    let now = Instant::now();
    let mut s = Session::new(config(), now);
    // A frame of 20 bytes whose fifth is invalid, only 8 of them sent.
    let mut text = b"abcd\xf4\x90\x80\x80efghijklmnop".to_vec();
    text.truncate(20);
    let whole = frame(0x81, &text);
    let mut input = whole[..6 + 8].to_vec();
    let mut out = Vec::new();
    let (_, event) = s.poll(&mut input, &mut out, now);
    assert_eq!(
        event,
        Event::Closed {
            code: 1007,
            reason: "invalid UTF-8 in a text message"
        }
    );
    // A valid sequence cut between frames is carried over.
    let bytes = [frame(0x01, &"é".as_bytes()[..1]), frame(0x80, &"é".as_bytes()[1..])].concat();
    assert_eq!(feed_all(&bytes).0, [Seen::Text("é".into())]);
    // A message that ends inside a sequence is refused.
    let (seen, _) = feed_all(&frame(0x81, &"é".as_bytes()[..1]));
    assert!(matches!(seen[..], [Seen::Closed(1007, _)]), "{seen:?}");
}

#[test]
fn a_flood_of_pings_past_the_budget_closes_with_1008() {
    let bytes: Vec<u8> = (0..=CONTROL_PER_SEC).flat_map(|_| frame(0x8A, b"")).collect();
    let (seen, _) = feed(&bytes, bytes.len());
    assert!(matches!(seen[..], [Seen::Closed(1008, _)]), "{seen:?}");
}

#[test]
fn silence_gets_pings_then_a_close_after_two_unanswered() {
    let start = Instant::now();
    let mut s = Session::new(config(), start);
    let mut out = Vec::new();
    let at = |secs| start + Duration::from_secs(secs);
    assert_eq!(s.poll_timeout(), Some(at(30)));
    assert_eq!(s.handle_timeout(&mut out, at(30)), TimedOut::Keep);
    assert_eq!(out, [0x89, 0], "a ping");
    assert_eq!(s.handle_timeout(&mut out, at(60)), TimedOut::Keep);
    assert_eq!(
        s.handle_timeout(&mut out, at(90)),
        TimedOut::Closed {
            code: 1011,
            reason: "keepalive ping timeout"
        }
    );
    // A pong in time resets the count.
    let mut s = Session::new(config(), start);
    let _ = s.handle_timeout(&mut out, at(30));
    let mut pong = frame(0x8A, b"");
    let _ = s.poll(&mut pong, &mut out, at(31));
    assert_eq!(s.poll_timeout(), Some(at(61)));
}

#[test]
fn our_close_waits_for_theirs_then_gives_up() {
    let start = Instant::now();
    let mut s = Session::new(config(), start);
    let mut out = Vec::new();
    assert!(s.close(&mut out, 1001, "going away", start));
    assert_eq!(s.poll_timeout(), Some(start + Duration::from_secs(5)));
    // Data after our Close is read and dropped; their Close ends it.
    let mut bytes = frame(0x81, b"late");
    bytes.extend(frame(0x88, &1001u16.to_be_bytes()));
    let (used, event) = s.poll(&mut bytes, &mut out, start);
    assert_eq!(event, Event::Closed { code: 1001, reason: "" });
    assert_eq!(used, bytes.len());
    let mut s = Session::new(config(), start);
    assert!(s.close(&mut out, 1000, "", start));
    assert_eq!(
        s.handle_timeout(&mut out, start + Duration::from_secs(5)),
        TimedOut::Done
    );
}

#[test]
fn a_message_whose_fragments_stop_coming_ends_after_the_message_timeout() {
    let start = Instant::now();
    let mut s = Session::new(config(), start);
    let mut out = Vec::new();
    let mut first = frame(0x01, b"part");
    let _ = s.poll(&mut first, &mut out, start);
    assert_eq!(s.poll_timeout(), Some(start + Duration::from_secs(20)));
    assert!(matches!(
        s.handle_timeout(&mut out, start + Duration::from_secs(20)),
        TimedOut::Closed { code: 1008, .. }
    ));
}

#[test]
fn a_message_the_budget_cannot_hold_closes_with_1013_and_a_whole_frame_needs_none() {
    let now = Instant::now();
    let mut s = Session::new(config(), now);
    s.set_room(100);
    let mut out = Vec::new();
    // A whole frame in the input is handed out where it lies: no buffer,
    // whatever the room.
    let mut whole = frame(0x82, &[7; 500]);
    let (_, event) = s.poll(&mut whole, &mut out, now);
    assert_eq!(event, Event::Message(Kind::Binary, &[7; 500][..]));
    assert_eq!(s.held(), 0);
    // One that must be assembled (fragments) and would pass the room is
    // refused: 1013, try again later.
    let mut first = frame(0x02, &[1; 60]);
    let (_, event) = s.poll(&mut first, &mut out, now);
    assert_eq!(event, Event::Input);
    assert!(s.held() <= 100, "held {}", s.held());
    let mut second = frame(0x80, &[2; 60]);
    let (_, event) = s.poll(&mut second, &mut out, now);
    assert_eq!(
        event,
        Event::Closed {
            code: 1013,
            reason: crate::budget::MESSAGES_SPENT
        }
    );
    assert_eq!(&out[..4], &[0x88, (2 + MESSAGES_SPENT_LEN) as u8, 0x03, 0xf5]);
}

const MESSAGES_SPENT_LEN: usize = crate::budget::MESSAGES_SPENT.len();

/// A client's compressed frame: `payload` deflated (tail removed), RSV1
/// set on `b0`.
fn deflated(b0: u8, payload: &[u8]) -> Vec<u8> {
    use flate2::{Compress, Compression, FlushCompress};
    let mut c = Compress::new(Compression::default(), false);
    let mut out = Vec::with_capacity(payload.len() + 64);
    c.compress_vec(payload, &mut out, FlushCompress::Sync).unwrap();
    out.truncate(out.len() - 4);
    frame(b0 | 0x40, &out)
}

fn deflate_config() -> Config {
    Config {
        deflate: Some(deflate::Params {
            window_bits: 15,
            window_asked: false,
        }),
        ..config()
    }
}

fn feed_deflate(bytes: &[u8]) -> (Vec<Seen>, Vec<u8>) {
    let whole = feed_with(deflate_config(), bytes, bytes.len().max(1));
    for step in 1..bytes.len().min(40) {
        assert_eq!(
            feed_with(deflate_config(), bytes, step),
            whole,
            "fed {step} bytes at a time"
        );
    }
    whole
}

#[test]
fn compressed_messages_whole_and_fragmented_inflate_at_every_split() {
    let text = "compressed, compressed, compressed: héllo ".repeat(10);
    let mut bytes = deflated(0x81, text.as_bytes());
    bytes.extend(frame(0x82, b"plain"));
    // A compressed message in three frames: RSV1 on the first only.
    let whole = deflated(0x82, &[7u8; 600]);
    let head = 2 + 4;
    let body: Vec<u8> = whole[head..].to_vec();
    let mask: [u8; 4] = whole[2..6].try_into().unwrap();
    let mut plain = body.clone();
    frame::unmask(&mut plain, mask, 0);
    let (a, rest) = plain.split_at(plain.len() / 3);
    let (b, c) = rest.split_at(rest.len() / 2);
    bytes.extend(frame(0x02 | 0x40, a));
    bytes.extend(frame(0x89, b"p"));
    bytes.extend(frame(0x00, b));
    bytes.extend(frame(0x80, c));
    bytes.extend(frame(0x88, &1000u16.to_be_bytes()));
    let (seen, out) = feed_deflate(&bytes);
    assert_eq!(
        seen,
        [
            Seen::Text(text),
            Seen::Binary(b"plain".to_vec()),
            Seen::Binary(vec![7; 600]),
            Seen::Closed(1000, String::new())
        ]
    );
    let mut want = Vec::new();
    frame::write(&mut want, Op::Pong, b"p");
    want.extend(close_frame(1000));
    assert_eq!(out, want);
}

#[test]
fn a_deflate_bomb_is_refused_with_1009_once_the_limit_is_out() {
    // 1 MiB of zeros: about 1 KiB compressed, past the 1 KiB limit
    // inflated.
    let bomb = deflated(0x82, &vec![0u8; 1 << 20]);
    assert!(bomb.len() < 2048, "{}", bomb.len());
    let (seen, out) = feed_with(deflate_config(), &bomb, bomb.len());
    assert!(matches!(&seen[..], [Seen::Closed(1009, _)]), "{seen:?}");
    assert_eq!(&out[..4], &[0x88, out[1], 0x03, 0xF1]);
    // The limit itself inflates.
    let (seen, _) = feed_with(deflate_config(), &deflated(0x82, &[0u8; 1024]), 4096);
    assert_eq!(seen, [Seen::Binary(vec![0; 1024])]);
}

#[test]
fn rsv1_is_refused_where_deflate_does_not_allow_it() {
    let compressed = deflated(0x81, b"hello hello hello hello hello hello");
    // Not agreed: 1002.
    let (seen, _) = feed_all(&compressed);
    assert!(matches!(&seen[..], [Seen::Closed(1002, _)]), "{seen:?}");
    // On a continuation frame, or a control frame: 1002.
    let mut bytes = frame(0x01, b"a");
    bytes.extend(frame(0xC0, b"b"));
    let (seen, _) = feed_deflate(&bytes);
    assert!(matches!(&seen[..], [Seen::Closed(1002, _)]), "{seen:?}");
    let (seen, _) = feed_deflate(&frame(0xC9, b""));
    assert!(matches!(&seen[..], [Seen::Closed(1002, _)]), "{seen:?}");
    // Bytes that do not inflate: 1002; text that inflates to bad UTF-8:
    // 1007.
    let (seen, _) = feed_deflate(&frame(0xC2, b"\xff\xfe\xfd"));
    assert!(matches!(&seen[..], [Seen::Closed(1002, _)]), "{seen:?}");
    let (seen, _) = feed_deflate(&deflated(0x81, b"caf\xc3 bad utf-8 after a cut sequence"));
    assert!(matches!(&seen[..], [Seen::Closed(1007, _)]), "{seen:?}");
}
