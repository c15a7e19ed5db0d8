//! Metrics: after a known set of requests, the counters say exactly that.

mod common;

use std::io::Read;
use std::sync::{mpsc, Arc, Mutex};

use common::Client;
use peregrine::{Limits, Metrics, Reply, Request, Response, Router, Server};
use test_support::sample;

#[test]
fn counters_match_a_known_set_of_requests() {
    let metrics = Arc::new(Metrics::new());
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Arc::new(Mutex::new(release_rx));
    let app = Router::new()
        .get("/a", |_: &Request<'_>| Response::text("alpha"))
        .post("/a", |_: &Request<'_>| Response::text("posted"))
        .get("/slow", move |req: &Request<'_>| {
            let responder = req.defer();
            let rx = release_rx.clone();
            std::thread::spawn(move || {
                rx.lock().unwrap().recv().unwrap();
                responder.send(Response::text("slow"));
            });
            Reply::Later
        });
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(2)
        .metrics(metrics.clone())
        .start(app)
        .unwrap();
    let addr = server.local_addr();
    let mut c = Client::connect(addr);
    let mut received = 0usize;
    let count = |c: &mut Client, raw: &[u8], method: &str| {
        c.send(raw);
        c.response_to(method).status
    };
    // 3 GET 200, 1 HEAD 200, 1 POST 200, 1 GET 404, 1 DELETE 405.
    for _ in 0..3 {
        assert_eq!(count(&mut c, b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n", "GET"), 200);
    }
    assert_eq!(count(&mut c, b"HEAD /a HTTP/1.1\r\nHost: x\r\n\r\n", "HEAD"), 200);
    assert_eq!(
        count(
            &mut c,
            b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi",
            "POST"
        ),
        200
    );
    assert_eq!(count(&mut c, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", "GET"), 404);
    assert_eq!(count(&mut c, b"DELETE /a HTTP/1.1\r\nHost: x\r\n\r\n", "DELETE"), 405);
    // A deferred request in flight, on a second connection.
    let mut slow = Client::connect(addr);
    slow.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
    // A malformed request: 400 and a close, on a third.
    let mut bad = Client::connect(addr);
    bad.send(b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n");
    let bytes_bad = bad.read_to_close();
    assert!(
        bytes_bad.starts_with(b"HTTP/1.1 400"),
        "{}",
        String::from_utf8_lossy(&bytes_bad)
    );
    received += bytes_bad.len();
    drop(bad);
    // Wait until the workers have counted the deferred request in flight
    // and the bad connection closed: the first connection and the slow one
    // are left open.
    let text = test_support::wait_for("one request in flight, three 4xx, two connections open", || {
        let text = metrics.render();
        (sample(&text, "peregrine_requests_in_flight") == 1
            && sample(&text, "peregrine_requests_total{class=\"4xx\"}") == 3
            && sample(&text, "peregrine_connections_open") == 2)
            .then_some(text)
    });
    assert_eq!(sample(&text, "peregrine_requests_total{class=\"2xx\"}"), 5);
    assert_eq!(sample(&text, "peregrine_connections_open"), 2, "{text}");
    assert_eq!(sample(&text, "peregrine_workers"), 2, "{text}");
    release_tx.send(()).unwrap();
    let r = slow.response_to("GET");
    assert_eq!(r.text(), "slow");
    drop(slow);
    // Everything the first connection read, to compare with bytes sent.
    c.send(b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let _ = c.response_to("GET");
    let mut rest = Vec::new();
    let _ = c.stream.read_to_end(&mut rest);
    drop(c);
    server.shutdown();
    server.join().unwrap();
    let text = metrics.render();
    assert_eq!(sample(&text, "peregrine_requests_total{class=\"2xx\"}"), 7, "{text}");
    assert_eq!(sample(&text, "peregrine_requests_total{class=\"4xx\"}"), 3, "{text}");
    assert_eq!(sample(&text, "peregrine_requests_total{class=\"5xx\"}"), 0, "{text}");
    assert_eq!(
        sample(&text, "peregrine_requests_by_method_total{method=\"GET\"}"),
        6,
        "{text}"
    );
    assert_eq!(
        sample(&text, "peregrine_requests_by_method_total{method=\"HEAD\"}"),
        1,
        "{text}"
    );
    assert_eq!(
        sample(&text, "peregrine_requests_by_method_total{method=\"POST\"}"),
        1,
        "{text}"
    );
    assert_eq!(
        sample(&text, "peregrine_requests_by_method_total{method=\"DELETE\"}"),
        1,
        "{text}"
    );
    assert_eq!(
        sample(&text, "peregrine_requests_by_method_total{method=\"other\"}"),
        1,
        "{text}"
    );
    assert_eq!(sample(&text, "peregrine_requests_in_flight"), 0, "{text}");
    assert_eq!(sample(&text, "peregrine_connections_accepted_total"), 3, "{text}");
    assert_eq!(sample(&text, "peregrine_connections_open"), 0, "{text}");
    assert_eq!(sample(&text, "peregrine_request_duration_seconds_count"), 10, "{text}");
    assert_eq!(
        sample(&text, "peregrine_request_duration_seconds_bucket{le=\"+Inf\"}"),
        10,
        "{text}"
    );
    // Stopped: no worker runs, and the counts they made remain.
    assert_eq!(sample(&text, "peregrine_workers"), 0, "{text}");
    assert_eq!(
        sample(&text, "peregrine_tls_handshakes_total{result=\"ok\"}"),
        0,
        "{text}"
    );
    assert!(sample(&text, "peregrine_sent_bytes_total") > received as u64, "{text}");
}

/// A connection that answered whole and waits for its next request holds
/// nothing against the worker's output budget: three such connections,
/// then a fourth that pipelines two requests under a budget of a little
/// more than one write buffer (16 KiB), which the three would exceed were
/// their buffers still counted, and no connection ever waits for the
/// budget. The driver gives an idle connection's write buffer back
/// without charging it first (`Conn::drive_from`); a charge left behind
/// would count it still.
#[test]
fn idle_connections_hold_nothing_against_the_output_budget() {
    let metrics = Arc::new(Metrics::new());
    let app = Router::new().get("/a", |_: &Request<'_>| Response::text("alpha"));
    let limits = Limits {
        output_budget_bytes: 20 * 1024,
        ..Limits::default()
    };
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .limits(limits)
        .metrics(metrics.clone())
        .start(app)
        .unwrap();
    let addr = server.local_addr();
    let mut idle: Vec<Client> = (0..3).map(|_| Client::connect(addr)).collect();
    for c in &mut idle {
        c.send(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(c.response_to("GET").text(), "alpha");
    }
    for _ in 0..3 {
        let mut c = Client::connect(addr);
        c.send(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(c.response_to("GET").text(), "alpha");
        assert_eq!(c.response_to("GET").text(), "alpha");
    }
    drop(idle);
    server.shutdown();
    server.join().unwrap();
    let text = metrics.render();
    assert_eq!(sample(&text, "peregrine_requests_total{class=\"2xx\"}"), 9, "{text}");
    assert_eq!(sample(&text, "peregrine_output_budget_waits_total"), 0, "{text}");
}
