//! Response flow control.

use super::*;

#[test]
fn a_response_larger_than_the_window_waits_for_window_update() {
    let mut p = Peer::new(cfg());
    p.feed(&get(1, "/big"));
    p.ready();
    let body: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    p.respond(1, Response::text(body.clone()));
    let f = p.frames();
    let (sent, ended) = body_of(&f, 1);
    // The client never raised the connection's window or the stream's.
    assert_eq!((sent.len() as i64, ended), (frame::DEFAULT_WINDOW, false));
    assert!(f.iter().all(|f| f.payload.len() <= frame::DEFAULT_FRAME_BYTES));
    assert!(p.session.is_flow_blocked() && !p.session.wants_send());
    p.send();
    assert!(p.out.is_empty());

    // The stream's window alone is not enough: the connection's is shut.
    p.feed(&window_update(1, 100_000));
    assert!(!p.session.wants_send());
    p.feed(&window_update(0, 10_000));
    assert!(p.session.wants_send());
    p.send();
    let more = p.frames();
    assert_eq!(body_of(&more, 1), (body[65_535..75_535].to_vec(), false));
    p.feed(&window_update(0, 100_000));
    p.send();
    let rest = p.frames();
    assert_eq!(body_of(&rest, 1), (body[75_535..].to_vec(), true));
    assert!(p.session.is_idle());
}

#[test]
fn initial_window_size_changes_apply_to_open_streams() {
    let mut p = Peer::new(cfg());
    p.feed(&settings(&[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 100)]));
    p.feed(&get(1, "/"));
    p.ready();
    p.respond(1, Response::text(vec![b'a'; 1000]));
    let f = p.frames();
    assert_eq!(body_of(&f, 1).0.len(), 100);
    // +500 for the open stream.
    p.feed(&settings(&[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 600)]));
    assert_eq!(kinds(&p.frames()), [frame::SETTINGS]);
    p.send();
    assert_eq!(body_of(&p.frames(), 1).0.len(), 500);
    // -600: the window goes negative (§6.9.2) and takes a WINDOW_UPDATE of
    // more than 600 to reopen.
    p.feed(&settings(&[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 0)]));
    p.frames();
    p.feed(&window_update(1, 600));
    assert!(!p.session.wants_send());
    p.feed(&window_update(1, 400));
    p.send();
    assert_eq!(body_of(&p.frames(), 1), (vec![b'a'; 400], true));
    assert!(p.session.is_idle());
}

#[test]
fn a_larger_max_frame_size_gives_larger_data_frames() {
    let mut p = Peer::new(cfg());
    p.feed(&settings(&[
        (frame::SETTINGS_MAX_FRAME_SIZE, 40_000),
        (frame::SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20),
    ]));
    p.feed(&window_update(0, 1 << 20));
    p.feed(&get(1, "/"));
    p.ready();
    p.frames();
    p.respond(1, Response::text(vec![0; 100_000]));
    let sizes: Vec<_> = p.frames()[1..].iter().map(|f| f.payload.len()).collect();
    assert_eq!(sizes, [40_000, 40_000, 20_000]);
}

#[test]
fn the_output_stays_within_the_budget_given_to_send() {
    let budget = 20_000;
    let mut p = Peer::new(cfg());
    p.feed(&settings(&[(
        frame::SETTINGS_INITIAL_WINDOW_SIZE,
        frame::WINDOW_MAX as u32,
    )]));
    p.feed(&window_update(0, (frame::WINDOW_MAX - frame::DEFAULT_WINDOW) as u32));
    for id in [1, 3, 5, 7] {
        p.feed(&get(id, "/"));
    }
    p.frames();
    let bodies: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 300_000]).collect();
    let mut all = Vec::new();
    let mut n_writes = 0;
    loop {
        // As the driver does: answer while the buffer is below its budget,
        // send what the windows allow, write the buffer out, repeat.
        while p.out.len() < budget {
            let Some(id) = p.session.take_ready() else { break };
            let mut resp = Response::text(bodies[id as usize / 2].clone());
            p.session.respond(id, &mut resp, false, DATE, b"", &mut p.out, budget);
        }
        if p.session.wants_send() {
            p.session.send(&mut p.out, budget);
        }
        // A DATA frame may start below the budget and end 1 KiB past it.
        assert!(p.out.len() <= budget + 1024 + 200, "{}", p.out.len());
        if p.out.is_empty() {
            break;
        }
        all.extend(p.frames());
        n_writes += 1;
    }
    assert!(n_writes >= 4 * 300_000 / budget);
    for (i, id) in [1, 3, 5, 7].into_iter().enumerate() {
        assert!(body_of(&all, id) == (bodies[i].clone(), true), "stream {id}");
    }
    assert!(p.session.is_idle());
}

/// A client with a small receive window (`nghttp -w 10`, 1 KiB) returns
/// it after every DATA frame, on the stream and on the connection: two
/// WINDOW_UPDATEs per frame, earned by the frame they answer, so a large
/// download is never cut off as a control-frame flood (it was, with
/// ENHANCE_YOUR_CALM after about 570 KB, when only bytes sent earned).
#[test]
fn a_small_window_returned_after_every_frame_is_not_a_flood() {
    const WIN: usize = 1000;
    const LEN: usize = 2_000_000;
    let mut p = Peer::new(cfg());
    p.feed(&settings(&[(frame::SETTINGS_INITIAL_WINDOW_SIZE, WIN as u32)]));
    p.feed(&get(1, "/ten.bin"));
    p.ready();
    p.respond(1, Response::bytes("application/octet-stream", vec![b'x'; LEN]))
        .unwrap();
    let mut got = 0;
    loop {
        let f = p.frames();
        assert!(
            f.iter().all(|f| f.kind != frame::GOAWAY),
            "cut off after {got} bytes: {f:?}"
        );
        let data: Vec<&Frame> = f.iter().filter(|f| f.kind == frame::DATA && f.stream == 1).collect();
        assert!(!data.is_empty(), "no DATA after {got} bytes");
        for d in &data {
            assert!(d.payload.len() <= WIN);
            got += d.payload.len();
            let n = d.payload.len() as u32;
            if n != 0 {
                p.feed(&[window_update(1, n), window_update(0, n)].concat());
            }
        }
        if data.iter().any(|d| d.has(frame::END_STREAM)) {
            break;
        }
        p.send();
    }
    assert_eq!(got, LEN);
}
