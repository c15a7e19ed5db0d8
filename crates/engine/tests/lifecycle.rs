//! Connections over time: timeouts, the connection cap, deferred answers,
//! graceful shutdown, the access log.

mod common;

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{start, start_with, status_of, Client};
use peregrine::{AccessLog, Limits, Reply, Request, Response, Server};
use test_support::wait_until;

fn hello(_: &Request<'_>) -> Response {
    Response::text("hello")
}

fn short_timeouts() -> Limits {
    Limits {
        head_timeout: Duration::from_millis(300),
        body_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(300),
        send_timeout: Duration::from_millis(300),
        sweep_interval: Duration::from_millis(50),
        ..Limits::default()
    }
}

#[test]
fn a_head_that_never_completes_gets_408_and_a_close() {
    let server = start_with(short_timeouts(), hello);
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ");
    let raw = c.read_to_close();
    assert_eq!(status_of(&raw), 408);
}

#[test]
fn a_body_that_stalls_gets_408_and_a_close() {
    let server = start_with(short_timeouts(), hello);
    let mut c = Client::connect(server.local_addr());
    c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc");
    let raw = c.read_to_close();
    assert_eq!(status_of(&raw), 408);
}

#[test]
fn idle_keep_alive_connections_are_closed_silently() {
    let server = start_with(short_timeouts(), hello);
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().status, 200);
    assert!(c.is_closed());
    // A connection that never sends anything is closed too.
    let mut silent = Client::connect(server.local_addr());
    assert!(silent.is_closed());
}

#[test]
fn a_client_that_stops_reading_is_dropped() {
    let big: &'static [u8] = Box::leak(vec![b'b'; 32 << 20].into_boxed_slice());
    let metrics = Arc::new(peregrine::Metrics::new());
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .limits(short_timeouts())
        .metrics(metrics.clone())
        .start(move |_: &Request<'_>| Response::bytes("application/octet-stream", big))
        .unwrap();
    let mut c = Client::connect(server.local_addr());
    c.stream.set_recv_buffer_size_hint();
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    // Read nothing until the server has closed the connection: it must
    // give up on us after the send timeout rather than hold the response
    // forever.
    wait_until("the connection dropped after the send timeout", || {
        let text = metrics.render();
        metric(&text, "peregrine_connections_accepted_total") == 1 && metric(&text, "peregrine_connections_open") == 0
    });
    let got = c.read_to_close();
    assert!(
        got.len() < big.len(),
        "the server dropped the connection before sending everything"
    );
    // And it still serves others.
    let mut other = Client::connect(server.local_addr());
    other.send(b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(other.response_to("HEAD").status, 200);
}

#[test]
fn a_client_that_sends_but_never_reads_is_dropped_too() {
    // Each byte it sends wakes the server; waking without reading must not
    // restart the send timeout (only bytes leaving do).
    let big: &'static [u8] = Box::leak(vec![b'b'; 32 << 20].into_boxed_slice());
    let server = start_with(short_timeouts(), move |_: &Request<'_>| {
        Response::bytes("application/octet-stream", big)
    });
    let mut c = Client::connect(server.local_addr());
    c.stream.set_recv_buffer_size_hint();
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    // Keep poking for far longer than the 300 ms send timeout; the server
    // must close, which makes a write fail sooner or later.
    let mut dropped = false;
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(50));
        if std::io::Write::write_all(&mut c.stream, b"x").is_err() {
            dropped = true;
            break;
        }
    }
    assert!(dropped, "the server kept a client that never reads for 10 s");
}

#[test]
fn a_client_pipelining_without_pause_does_not_starve_the_others() {
    use std::io::{Read, Write};
    // The handler is slower than the client can send (20 µs of spinning
    // each), notes the order it is called in, and holds its first call
    // until B's request is in the kernel, so both race from the same point.
    let calls: Arc<Mutex<Vec<u8>>> = Arc::default();
    let (first_tx, first_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let gate = Mutex::new(Some((first_tx, go_rx)));
    let log = calls.clone();
    // No flush forced by the size of the pending output either: only the
    // turn limit can make the worker look at B.
    let limits = Limits {
        write_buffer_bytes_max: usize::MAX / 2,
        ..Limits::default()
    };
    let server = start_with(limits, move |req: &Request<'_>| {
        if let Some((first, go)) = gate.lock().unwrap().take() {
            first.send(()).unwrap();
            go.recv().unwrap();
        }
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_micros(20) {}
        log.lock().unwrap().push(req.path().as_bytes()[1]);
        Response::text("hello")
    });
    let addr = server.local_addr();
    // A: 16,000 pipelined requests written in one go while a second thread
    // reads the answers, so A's socket always has requests waiting.
    const N_A: usize = 16_000;
    let a = std::net::TcpStream::connect(addr).unwrap();
    let mut a_read = a.try_clone().unwrap();
    let a_end = a.try_clone().unwrap();
    let mut a_write = a;
    let writer = std::thread::spawn(move || {
        let batch = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n".repeat(N_A);
        a_write.write_all(&batch).unwrap();
    });
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0; 1 << 20];
        let mut total = 0usize;
        loop {
            match a_read.read(&mut buf) {
                Ok(0) | Err(_) => break total,
                Ok(n) => total += n,
            }
        }
    });
    first_rx.recv_timeout(common::PATIENCE).unwrap();
    // All of A (450 KB) is now in the kernel's buffers or on its way.
    let mut b = Client::connect(addr);
    b.send(b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
    go_tx.send(()).unwrap();
    // Without turns, B would wait behind all of A's requests that keep
    // coming; with them, behind a few turns' worth (1,024 each).
    assert_eq!(b.response().status, 200);
    let a_before_b = calls.lock().unwrap().iter().position(|&w| w == b'b').unwrap();
    eprintln!("B was answered after {a_before_b} of A's requests");
    writer.join().unwrap();
    let _ = a_end.shutdown(std::net::Shutdown::Both);
    let _ = reader.join();
    assert!(
        a_before_b < N_A / 2,
        "B was answered only after {a_before_b} of A's {N_A} requests"
    );
}

trait RecvBufferHint {
    fn set_recv_buffer_size_hint(&self);
}

impl RecvBufferHint for std::net::TcpStream {
    /// Keeps the kernel from buffering the whole response for us.
    fn set_recv_buffer_size_hint(&self) {
        let sock = socket2::SockRef::from(self);
        let _ = sock.set_recv_buffer_size(64 * 1024);
    }
}

#[test]
fn at_the_connection_cap_new_connections_are_refused_and_old_ones_served() {
    let metrics = Arc::new(peregrine::Metrics::new());
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .limits(Limits {
            n_conns_max: 2,
            ..Limits::default()
        })
        .metrics(metrics.clone())
        .start(hello)
        .unwrap();
    let mut a = Client::connect(server.local_addr());
    let mut b = Client::connect(server.local_addr());
    a.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(a.response().status, 200);
    b.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(b.response().status, 200);
    let mut refused = Client::connect(server.local_addr());
    let raw = refused.read_to_close();
    assert_eq!(status_of(&raw), 503);
    a.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(a.response().status, 200);
    drop(b);
    // Once the worker has closed b there is room again (waited for: b's
    // close and a connect sent at once could land in one epoll batch with
    // the accept first).
    wait_until("b's connection closed", || {
        metric(&metrics.render(), "peregrine_connections_open") == 1
    });
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().status, 200);
}

/// A handler that answers `/slow` from another thread only when the test
/// says so, and `/fast` at once.
fn gated() -> (impl peregrine::Handler, mpsc::Sender<()>) {
    let (release, gate) = mpsc::channel::<()>();
    let gate = Arc::new(Mutex::new(gate));
    let handler = move |req: &Request<'_>| -> Reply {
        match req.path() {
            "/slow" => {
                let responder = req.defer();
                let gate = gate.clone();
                std::thread::spawn(move || {
                    let _ = gate.lock().unwrap().recv();
                    responder.send(Response::text("slow done"));
                });
                Reply::Later
            }
            "/drop" => {
                let responder = req.defer();
                std::thread::spawn(move || drop(responder));
                Reply::Later
            }
            "/forgot" => Reply::Later,
            _ => Response::text(format!("fast {}", req.path())).into(),
        }
    };
    (handler, release)
}

#[test]
fn a_deferred_answer_does_not_block_the_worker() {
    let (handler, release) = gated();
    let server = start(handler); // one worker
    let mut slow = Client::connect(server.local_addr());
    slow.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /after-slow HTTP/1.1\r\nHost: x\r\n\r\n");
    // While /slow waits on the gate, the same worker serves another client.
    let mut fast = Client::connect(server.local_addr());
    for i in 0..5 {
        fast.send(format!("GET /fast{i} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        assert_eq!(fast.response().text(), format!("fast /fast{i}"));
    }
    release.send(()).unwrap();
    // Answers on the slow connection stay in request order.
    assert_eq!(slow.response().text(), "slow done");
    assert_eq!(slow.response().text(), "fast /after-slow");
}

#[test]
fn a_dropped_responder_answers_500_and_a_forgotten_defer_too() {
    let (handler, _release) = gated();
    let server = start(handler);
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET /drop HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().status, 500);
    c.send(b"GET /after HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().text(), "fast /after");
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET /forgot HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().status, 500);
}

#[test]
fn shutdown_finishes_requests_in_flight_and_stops_accepting() {
    let (handler, release) = gated();
    let server = start(handler);
    let addr = server.local_addr();
    let mut idle = Client::connect(addr);
    idle.send(b"GET /warm HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(idle.response().status, 200);
    let mut busy = Client::connect(addr);
    busy.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
    // Make sure the slow request has reached the handler.
    let mut probe = Client::connect(addr);
    probe.send(b"GET /probe HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(probe.response().status, 200);

    server.shutdown();
    // The idle connection is closed; the busy one is still answered, with
    // Connection: close.
    assert!(idle.is_closed());
    release.send(()).unwrap();
    let r = busy.response();
    assert_eq!(r.text(), "slow done");
    assert_eq!(r.header("connection"), Some("close"));
    server.join().unwrap();
    assert!(std::net::TcpStream::connect(addr).is_err(), "no longer listening");
}

#[test]
fn the_access_log_has_one_combined_line_per_request() {
    let path = std::env::temp_dir().join(format!("peregrine-access-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .access_log(AccessLog::File(path.clone()))
        .start(hello)
        .unwrap();
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET /a?b=1 HTTP/1.1\r\nHost: x\r\nUser-Agent: test/1.0\r\nReferer: http://r/\r\n\r\n");
    assert_eq!(c.response().status, 200);
    c.send(b"HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n");
    c.response_to("HEAD");
    drop(c);
    server.shutdown();
    server.join().unwrap();
    let log = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(lines[0].starts_with("127.0.0.1 - - ["), "{}", lines[0]);
    assert!(
        lines[0].ends_with("] \"GET /a?b=1 HTTP/1.1\" 200 5 \"http://r/\" \"test/1.0\""),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].ends_with("\"HEAD /h HTTP/1.1\" 200 - \"-\" \"-\""),
        "{}",
        lines[1]
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn the_access_log_reopens_under_its_path_for_logrotate_and_writes_json() {
    let dir = std::env::temp_dir().join(format!("peregrine-reopen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("access.log");
    let rotated = dir.join("access.log.1");
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .access_log(AccessLog::File(path.clone()))
        .access_log_format(peregrine::LogFormat::Json)
        .start(hello)
        .unwrap();
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET /before HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().status, 200);
    // The worker writes its buffer at each sweep: wait for the line.
    wait_until("the line for /before in the access log", || {
        std::fs::read_to_string(&path).unwrap().contains("/before")
    });
    // What logrotate does: move the file away, then ask for a reopen.
    std::fs::rename(&path, &rotated).unwrap();
    server.reopen_logs().unwrap();
    assert!(path.exists(), "reopened under its path");
    c.send(b"GET /after HTTP/1.1\r\nHost: x\r\nUser-Agent: t\r\n\r\n");
    assert_eq!(c.response().status, 200);
    drop(c);
    server.shutdown();
    server.join().unwrap();
    let old = std::fs::read_to_string(&rotated).unwrap();
    let new = std::fs::read_to_string(&path).unwrap();
    assert_eq!(old.lines().count(), 1, "{old}");
    assert!(old.contains("\"target\":\"/before\""), "{old}");
    assert_eq!(new.lines().count(), 1, "{new}");
    let line = new.lines().next().unwrap();
    assert!(line.starts_with("{\"time\":\""), "{line}");
    // The host, the protocol and the duration (a number of µs) too.
    let (head, tail) = line.split_once(",\"duration_us\":").unwrap();
    assert!(
        head.ends_with(
            "\"remote\":\"127.0.0.1\",\"host\":\"x\",\"method\":\"GET\",\"target\":\"/after\",\
             \"version\":\"HTTP/1.1\",\"protocol\":\"HTTP/1.1\",\"status\":200,\"bytes\":5"
        ),
        "{line}"
    );
    let (us, tail) = tail.split_once(',').unwrap();
    let us = us.parse::<u64>().unwrap();
    // The time to the first byte: at most the whole time.
    let (ttfb, tail) = tail.strip_prefix("\"ttfb_us\":").unwrap().split_once(',').unwrap();
    assert!(ttfb.parse::<u64>().unwrap() <= us, "{line}");
    // The request id made here: 32 hex digits.
    let (before_id, tail) = tail.split_once(",\"request_id\":\"").unwrap();
    let (id, tail) = tail.split_once('"').unwrap();
    assert!(id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()), "{line}");
    assert_eq!(
        before_id, "\"referer\":null,\"user_agent\":\"t\",\"site\":null",
        "{line}"
    );
    assert_eq!(
        tail,
        ",\"traceparent\":null,\"tls_version\":null,\"tls_resumed\":null,\"reason\":null,\"upstream_addr\":null,\
         \"upstream_status\":null,\"upstream_connect_time\":null,\"upstream_header_time\":null,\
         \"upstream_response_time\":null}",
        "{line}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The value of a metric without labels in Prometheus text.
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

/// A template's line for a request answered at once, one deferred to
/// another thread (its host and duration noted when it was deferred), and
/// one refused before any handler saw it (no host).
#[test]
fn a_template_logs_host_protocol_and_duration_for_deferred_answers_too() {
    let dir = std::env::temp_dir().join(format!("peregrine-template-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("access.log");
    let (handler, release) = gated();
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .access_log(AccessLog::File(path.clone()))
        .access_log_format("$host|$request|$protocol|$status|$request_time_us".parse().unwrap())
        .start(handler)
        .unwrap();
    let mut slow = Client::connect(server.local_addr());
    slow.send(b"GET /slow HTTP/1.1\r\nHost: deferred.example\r\n\r\n");
    let mut fast = Client::connect(server.local_addr());
    fast.send(b"GET /fast HTTP/1.1\r\nHost: fast.example\r\n\r\n");
    assert_eq!(fast.response().text(), "fast /fast");
    release.send(()).unwrap();
    assert_eq!(slow.response().text(), "slow done");
    let mut bad = Client::connect(server.local_addr());
    bad.send(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
    assert_eq!(bad.response().status, 400);
    server.shutdown();
    server.join().unwrap();
    let log = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Vec<&str>> = log.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(lines.len(), 3, "{log}");
    // A request refused before it was read whole has no parts to show.
    for (line, expected) in lines.iter().zip([
        ["fast.example", "GET /fast HTTP/1.1", "HTTP/1.1", "200"],
        ["deferred.example", "GET /slow HTTP/1.1", "HTTP/1.1", "200"],
        ["-", "- - -", "-", "400"],
    ]) {
        assert_eq!(line[..4], expected, "{log}");
        line[4]
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("no duration in {log}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Signals belong to the program: a running server, its access log and
/// its reopening install no handler (only `Running::wait` does, when
/// called). SigCgt in /proc/self/status is the mask of caught signals.
#[test]
fn a_server_installs_no_signal_handler() {
    let dir = std::env::temp_dir().join(format!("peregrine-nosig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .access_log(AccessLog::File(dir.join("access.log")))
        .start(hello)
        .unwrap();
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().status, 200);
    server.reopen_logs().unwrap();
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let mask = status.lines().find_map(|l| l.strip_prefix("SigCgt:")).unwrap();
    let caught = u64::from_str_radix(mask.trim(), 16).unwrap();
    for signal in [libc::SIGHUP, libc::SIGINT, libc::SIGTERM, libc::SIGUSR1, libc::SIGIO] {
        assert_eq!(caught & (1 << (signal - 1)), 0, "signal {signal} has a handler");
    }
    server.shutdown();
    server.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `Running::health`: a worker idle in `epoll_wait` is alive however long
/// it waits; one stuck in a handler is counted stuck once its last turn
/// is older than the bound, and alive again when the handler returns.
#[test]
fn a_worker_stuck_in_a_handler_is_not_live_and_an_idle_one_is() {
    let (entered_tx, entered) = mpsc::channel::<()>();
    let (release, release_rx) = mpsc::channel::<()>();
    let entered_tx = Mutex::new(entered_tx);
    let release_rx = Mutex::new(release_rx);
    let server = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(move |_: &Request<'_>| {
            let _ = entered_tx.lock().unwrap().send(());
            let _ = release_rx.lock().unwrap().recv();
            Response::text("late")
        })
        .unwrap();
    let health = server.health();
    assert_eq!(health.n_workers(), 1);
    // Idle: waiting for events counts as alive even with no slack at all.
    wait_until("the idle worker waits in epoll", || health.n_stuck(Duration::ZERO) == 0);
    assert!(!health.is_draining());
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    entered.recv().unwrap();
    wait_until("the stuck worker's last turn grows old", || {
        health.n_stuck(Duration::from_millis(20)) == 1
    });
    release.send(()).unwrap();
    assert_eq!(c.response().status, 200);
    wait_until("the worker turns again", || health.n_stuck(Duration::ZERO) == 0);
    server.shutdown();
    assert!(health.is_draining(), "draining from the moment shutdown begins");
    server.join().unwrap();
}

/// Credentials never reach the access log, whatever its format: not the
/// request's `Authorization`, `Proxy-Authorization` or `Cookie`, not the
/// answer's `Set-Cookie` (a template can name every variable there is and
/// still not reach them).
#[test]
fn credentials_and_cookies_never_appear_in_the_access_log() {
    let every_variable = "$remote_addr $remote_port [$time_local] $time_iso8601 \"$request\" \
                          $request_method $request_uri $protocol $server_protocol $host $http_host \
                          $status $body_bytes_sent $request_time_us $request_time \"$http_referer\" \
                          \"$http_user_agent\" $site $server_name $upstream_addr $upstream_status \
                          $upstream_connect_time $upstream_header_time $upstream_response_time";
    let formats = [
        peregrine::LogFormat::Combined,
        peregrine::LogFormat::Json,
        every_variable.parse().unwrap(),
    ];
    for (i, format) in formats.into_iter().enumerate() {
        let path = std::env::temp_dir().join(format!("peregrine-secrets-{}-{i}.log", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let server = Server::new()
            .bind("127.0.0.1:0")
            .workers(1)
            .access_log(AccessLog::File(path.clone()))
            .access_log_format(format.clone())
            .start(|_: &Request<'_>| Response::text("hi").with_header("Set-Cookie", "session=SETCOOKIESECRET"))
            .unwrap();
        let mut c = Client::connect(server.local_addr());
        c.send(
            b"GET /logged HTTP/1.1\r\nHost: x\r\nAuthorization: Basic QVVUSFNFQ1JFVA==\r\n\
              Proxy-Authorization: Bearer PROXYSECRET\r\nCookie: sid=COOKIESECRET\r\n\
              User-Agent: ua/1\r\n\r\n",
        );
        let answer = c.response();
        assert_eq!(answer.status, 200);
        drop(c);
        server.shutdown();
        server.join().unwrap();
        let log = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(log.contains("/logged") && log.contains("ua/1"), "{format:?}: {log}");
        for secret in [
            "QVVUSFNFQ1JFVA",
            "PROXYSECRET",
            "COOKIESECRET",
            "SETCOOKIESECRET",
            "sid=",
            "session=",
        ] {
            assert!(!log.contains(secret), "{format:?} wrote {secret}: {log}");
        }
    }
}

/// The access log's `request_id`: made here (32 hex digits, one per
/// request) unless a trusted proxy sent an `X-Request-ID`, which is kept;
/// from a client that is no trusted proxy it is not. `traceparent` is
/// written as sent.
#[test]
fn the_access_log_has_a_request_id_kept_only_from_trusted_proxies_and_the_traceparent() {
    use peregrine::client_addr::{AddrField, TrustedProxies};
    let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let run = |trusted: Option<&str>| {
        let path = std::env::temp_dir().join(format!(
            "peregrine-request-id-{}-{}.log",
            std::process::id(),
            trusted.is_some()
        ));
        let _ = std::fs::remove_file(&path);
        let mut server = Server::new()
            .bind("127.0.0.1:0")
            .workers(1)
            .access_log(AccessLog::File(path.clone()))
            .access_log_format(peregrine::LogFormat::Json);
        if let Some(list) = trusted {
            let list: TrustedProxies = list.parse().unwrap();
            server = server.trusted_proxies(list, AddrField::XForwardedFor);
        }
        // `/deferred/...` is answered from another thread: its line is
        // made of the copies kept meanwhile.
        let server = server
            .start(|req: &Request<'_>| -> Reply {
                if req.path().starts_with("/deferred") {
                    let responder = req.defer();
                    std::thread::spawn(move || responder.send(Response::text("later")));
                    return Reply::Later;
                }
                Response::text("now").into()
            })
            .unwrap();
        let mut c = Client::connect(server.local_addr());
        for path in ["/1", "/deferred/1"] {
            c.send(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
            assert_eq!(c.response().status, 200);
        }
        for path in ["/2", "/deferred/2"] {
            c.send(
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nX-Request-ID: lb-7f3a\r\ntraceparent: {trace}\r\n\r\n")
                    .as_bytes(),
            );
            assert_eq!(c.response().status, 200);
        }
        drop(c);
        server.shutdown();
        server.join().unwrap();
        let log = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        log.lines().map(str::to_owned).collect::<Vec<_>>()
    };
    // A string field's value (no escapes in these), or None for null.
    let field = |line: &str, name: &str| -> Option<String> {
        let rest = &line[line
            .find(&format!("\"{name}\":"))
            .unwrap_or_else(|| panic!("no {name}: {line}"))..];
        let value = &rest[name.len() + 3..];
        if value.starts_with("null") {
            return None;
        }
        let value = value.strip_prefix('"').unwrap();
        Some(value[..value.find('"').unwrap()].to_owned())
    };
    let is_made = |line: &str| {
        let id = field(line, "request_id").unwrap();
        id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
    };
    // Lines: /1, /deferred/1 (no id sent), /2, /deferred/2 (id and
    // traceparent sent).
    let untrusted = run(None);
    assert_eq!(untrusted.len(), 4, "{untrusted:?}");
    assert!(untrusted.iter().all(|l| is_made(l)), "{untrusted:?}");
    assert_ne!(field(&untrusted[0], "request_id"), field(&untrusted[2], "request_id"));
    assert_ne!(field(&untrusted[1], "request_id"), field(&untrusted[3], "request_id"));
    for (line, traced) in untrusted.iter().zip([false, false, true, true]) {
        assert_eq!(field(line, "traceparent").as_deref(), traced.then_some(trace), "{line}");
        assert!(line.contains("\"target\":\"/"), "{line}");
    }
    assert!(
        untrusted[3].contains("\"target\":\"/deferred/2\",\"version\":\"HTTP/1.1\""),
        "{}",
        untrusted[3]
    );
    let trusted = run(Some("127.0.0.1"));
    assert!(is_made(&trusted[0]) && is_made(&trusted[1]), "{trusted:?}");
    assert_eq!(field(&trusted[2], "request_id").as_deref(), Some("lb-7f3a"));
    assert_eq!(field(&trusted[3], "request_id").as_deref(), Some("lb-7f3a"));
}
