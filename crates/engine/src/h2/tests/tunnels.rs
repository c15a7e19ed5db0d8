//! RFC 8441's extended CONNECT: the setting, the request's checks, and a
//! stream that carries a WebSocket's bytes both ways under flow control.

use super::*;

fn connect_cfg() -> Config {
    Config {
        connect_protocol: true,
        ..cfg()
    }
}

/// An extended CONNECT for a WebSocket on `path`, its stream left open.
fn connect(stream: u32, path: &str) -> Vec<u8> {
    let fields = [
        (":method", "CONNECT"),
        (":protocol", "websocket"),
        (":scheme", "https"),
        (":path", path),
        (":authority", "example.com"),
        ("sec-websocket-version", "13"),
    ];
    headers(stream, false, &block(&fields))
}

/// The SETTINGS our preface sends, as (id, value) pairs.
fn our_settings(cfg: Config) -> Vec<(u16, u32)> {
    let mut p = Peer::raw(cfg);
    let f = p.frames();
    assert_eq!(f[0].kind, frame::SETTINGS);
    f[0].payload
        .chunks_exact(6)
        .map(|s| {
            (
                u16::from_be_bytes([s[0], s[1]]),
                u32::from_be_bytes([s[2], s[3], s[4], s[5]]),
            )
        })
        .collect()
}

/// Accepts stream `id` as a tunnel, as the driver does for `ws::upgrade`.
fn accept(p: &mut Peer, id: u32) {
    let resp = Response::new(200).with_header("sec-websocket-protocol", "chat");
    assert!(p.session.accept_tunnel(id, &resp, DATE, b"", &mut p.out));
}

/// What the session holds for stream `id`'s WebSocket: its unread input,
/// and whether the client ended its side.
fn input_of(p: &mut Peer, id: u32) -> (Vec<u8>, bool) {
    p.session
        .with_tunnel(id, |t, done| (t.input.clone(), done))
        .expect("a tunnel")
}

#[test]
fn the_setting_is_sent_only_where_websockets_are() {
    assert!(our_settings(connect_cfg()).contains(&(frame::SETTINGS_ENABLE_CONNECT_PROTOCOL, 1)));
    assert!(!our_settings(cfg())
        .iter()
        .any(|(id, _)| *id == frame::SETTINGS_ENABLE_CONNECT_PROTOCOL));
}

#[test]
fn protocol_without_the_setting_is_malformed() {
    // RFC 8441 §3: a :protocol the server did not enable is a malformed
    // request, a stream error.
    let mut p = Peer::new(cfg());
    p.feed(&connect(1, "/chat"));
    assert!(p.ready().is_empty());
    let f = p.frames();
    assert!(f[0].is_rst(1, Code::Protocol), "{f:?}");
}

#[test]
fn an_extended_connect_goes_to_its_handler_at_its_head() {
    let mut p = Peer::new(connect_cfg());
    p.feed(&connect(1, "/chat?room=1"));
    assert_eq!(p.ready(), [1]);
    let seen = p.seen(1);
    assert_eq!(
        (seen.method.as_str(), seen.target.as_str()),
        ("CONNECT", "/chat?room=1")
    );
    assert_eq!(p.session.parts(1).unwrap().protocol, Some("websocket"));
    // Its idle stream runs no request timeout: it is a WebSocket now.
    accept(&mut p, 1);
    assert!(!p.session.is_receiving());
    let f = p.frames();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].kind, frame::HEADERS);
    assert!(!f[0].has(frame::END_STREAM), "the stream stays open");
    assert_eq!(f[0].status(), 200);
    assert_eq!(f[0].field("sec-websocket-protocol").as_deref(), Some("chat"));
    // RFC 9110 §8.6: no content-length on a 2xx to CONNECT.
    assert_eq!(f[0].field("content-length"), None);
}

#[test]
fn a_refused_websocket_is_an_answer_and_a_reset() {
    let mut p = Peer::new(connect_cfg());
    p.feed(&connect(1, "/nowhere"));
    assert_eq!(p.ready(), [1]);
    p.respond(1, Response::error(404));
    let f = p.frames();
    assert_eq!(f[0].status(), 404);
    assert!(f.last().unwrap().is_rst(1, Code::NoError), "{f:?}");
    assert!(p.session.is_idle());
}

#[test]
fn bytes_flow_both_ways_within_the_windows() {
    let mut p = Peer::new(connect_cfg());
    // Bytes that come with the head, before the handler runs, are the
    // WebSocket's first.
    p.feed(&[connect(1, "/ws"), data(1, false, b"early")].concat());
    assert_eq!(p.ready(), [1]);
    accept(&mut p, 1);
    p.frames();
    assert_eq!(input_of(&mut p, 1), (b"early".to_vec(), false));
    p.feed(&data(1, false, b" and later"));
    assert_eq!(input_of(&mut p, 1).0, b"early and later");

    // Unread, the input keeps the window shut: no WINDOW_UPDATE for the
    // stream until the machine reads.
    let chunk = vec![7u8; 16_000];
    for _ in 0..4 {
        p.feed(&data(1, false, &chunk));
    }
    p.session.grant_tunnels(&mut p.out);
    assert!(p.frames().iter().all(|f| f.stream != 1), "no window while unread");
    // 64,015 of 65,535 taken: one more full frame is beyond the window.
    p.feed(&data(1, false, &chunk));
    assert!(p.frames()[0].is_rst(1, Code::FlowControl));
}

#[test]
fn the_window_comes_back_as_the_machine_reads() {
    let mut p = Peer::new(connect_cfg());
    p.feed(&connect(1, "/ws"));
    p.ready();
    accept(&mut p, 1);
    p.frames();
    for n in [16_000, 16_000, 8_000] {
        p.feed(&data(1, false, &vec![1u8; n]));
    }
    p.session.with_tunnel(1, |t, _| {
        t.input.drain(..39_000);
    });
    p.session.grant_tunnels(&mut p.out);
    let f = p.frames();
    let update = f.iter().find(|f| f.stream == 1).expect("a WINDOW_UPDATE");
    // What the client may send and what waits unread: one window.
    assert_eq!(update.increment(), 40_000 - 1_000);
}

#[test]
fn output_leaves_as_data_and_the_end_as_end_stream() {
    let mut p = Peer::new(connect_cfg());
    p.feed(&connect(1, "/ws"));
    p.ready();
    accept(&mut p, 1);
    p.frames();
    let big = vec![9u8; 70_000];
    p.session.with_tunnel(1, |t, _| t.output.extend_from_slice(&big));
    assert!(p.session.wants_send());
    p.send();
    let (sent, ended) = body_of(&p.frames(), 1);
    assert_eq!((sent.len() as i64, ended), (frame::DEFAULT_WINDOW, false));
    assert!(p.session.is_flow_blocked());
    assert_eq!(p.session.tunnels_queued(), 70_000 - 65_535);

    // The WebSocket ends: what is left, then END_STREAM, then (the client
    // has not ended its side) RST_STREAM(NO_ERROR), RFC 9113 §8.1.
    p.session.end_tunnel(1);
    p.feed(&[window_update(0, 100_000), window_update(1, 100_000)].concat());
    p.send();
    let f = p.frames();
    assert_eq!(body_of(&f, 1), (vec![9u8; 70_000 - 65_535], true));
    assert!(f.last().unwrap().is_rst(1, Code::NoError), "{f:?}");
    assert!(p.session.is_idle());
    assert!(p.session.with_tunnel(1, |_, _| ()).is_none());
}

#[test]
fn the_clients_end_and_reset_reach_the_machine() {
    let mut p = Peer::new(connect_cfg());
    p.feed(&[connect(1, "/a"), connect(3, "/b")].concat());
    assert_eq!(p.ready(), [1, 3]);
    accept(&mut p, 1);
    accept(&mut p, 3);
    p.feed(&data(1, true, b"bye"));
    assert_eq!(input_of(&mut p, 1), (b"bye".to_vec(), true));
    p.feed(&rst_stream(3, Code::Cancel));
    assert!(p.session.with_tunnel(3, |_, _| ()).is_none(), "gone with its stream");
    // The budget holds what is unread, and nothing once it is read.
    assert_eq!(p.session.bodies().held, 3);
    p.session.with_tunnel(1, |t, _| t.input.clear());
    assert_eq!(p.session.bodies().held, 0);
}
