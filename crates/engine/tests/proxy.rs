//! The reverse proxy end to end (`peregrine::proxy`): a server whose routes
//! pass requests to an upstream, here a small HTTP/1.1 server on a thread
//! that records every request it gets and answers from a script. What the
//! upstream receives (the rewritten path, the forwarding fields, no
//! hop-by-hop field) and what the client gets (the answer less the
//! hop-by-hop fields; 502 for an upstream that breaks framing or is down,
//! with none of its text) are checked over HTTP/1.1 and HTTP/2.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;

use common::{status_of, Client, PATIENCE};
use peregrine::client_addr::AddrField;
use peregrine::proxy::{Proxy, Upstream};
use peregrine::{Response, Router, Running, Server};
use test_support::http::dead_addr;

/// One request as the upstream read it: its head's text and its body.
#[derive(Debug)]
struct Seen {
    head: String,
    body: Vec<u8>,
}

impl Seen {
    fn field(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// A scripted upstream: every connection serves requests until the
/// client closes; the answer depends on the path's last segment.
struct Up {
    addr: SocketAddr,
    seen: Receiver<Seen>,
    accepted: Arc<AtomicUsize>,
    /// `/sse`: the second event is sent when the test sends on this;
    /// `/held`: the answer.
    go: Sender<()>,
}

fn upstream() -> Up {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, seen) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let go_rx = Arc::new(Mutex::new(go_rx));
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            counter.fetch_add(1, Ordering::SeqCst);
            let tx = tx.clone();
            let go_rx = go_rx.clone();
            thread::spawn(move || serve_upstream(stream, tx, go_rx));
        }
    });
    Up {
        addr,
        seen,
        accepted,
        go,
    }
}

fn serve_upstream(stream: TcpStream, tx: Sender<Seen>, go: Arc<Mutex<Receiver<()>>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    // Requests this connection has read before the current one.
    let mut seen_here = 0usize;
    loop {
        let Some(head) = common::read_head(&mut reader) else {
            return;
        };
        let len: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap_or(0);
        let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
        let mut body = vec![0; len];
        reader.read_exact(&mut body).unwrap();
        if chunked {
            loop {
                let mut size = String::new();
                reader.read_line(&mut size).unwrap();
                let n = usize::from_str_radix(size.trim(), 16).unwrap();
                let mut chunk = vec![0; n + 2];
                reader.read_exact(&mut chunk).unwrap();
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        }
        let path = head.split(' ').nth(1).unwrap_or("").to_owned();
        seen_here += 1;
        let seen_here = seen_here - 1;
        let last = path.rsplit('/').next().unwrap_or("").to_owned();
        let _ = tx.send(Seen {
            head: head.clone(),
            body: body.clone(),
        });
        let answer: Vec<u8> = match last.split('?').next().unwrap() {
            "hello" => b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Up: 1\r\nConnection: keep-alive, X-Hop\r\nX-Hop: secret\r\nKeep-Alive: timeout=5\r\nContent-Type: text/plain\r\n\r\nhello".to_vec(),
            "once" if seen_here > 0 => return, // closes without answering
            "once" => b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nonce".to_vec(),
            "echo" => {
                let mut a = format!("HTTP/1.1 201 Created\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
                a.extend_from_slice(&body);
                a
            }
            "big" => {
                let mut a = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
                for i in 0..300u32 {
                    let chunk = vec![b'a' + (i % 26) as u8; 1000];
                    a.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                    a.extend_from_slice(&chunk);
                    a.extend_from_slice(b"\r\n");
                }
                a.extend_from_slice(b"0\r\n\r\n");
                a
            }
            "slow" => {
                // A streamed answer whose last byte comes 300 ms after its head.
                let _ = out.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n");
                let _ = out.flush();
                for _ in 0..3 {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    let _ = out.write_all(b"4\r\nmore\r\n");
                    let _ = out.flush();
                }
                b"0\r\n\r\n".to_vec()
            }
            "smuggle" => {
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nupstream-secret-text".to_vec()
            }
            "held" => {
                // Answered once the test sends on `go`: the client's
                // request waits for it meanwhile.
                let _ = go.lock().unwrap().recv_timeout(PATIENCE);
                b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nheld".to_vec()
            }
            "nocontent-body" => b"HTTP/1.1 204 No Content\r\n\r\nupstream-secret-text".to_vec(),
            "close" => {
                let _ = out.write_all(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the close");
                return;
            }
            "sse" => {
                let _ = out.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n",
                );
                let _ = out.flush();
                let _ = go.lock().unwrap().recv_timeout(PATIENCE);
                b"9\r\ndata: 2\n\n\r\n0\r\n\r\n".to_vec()
            }
            _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
        };
        // No body after the head of an answer to HEAD.
        let answer = match (
            head.starts_with("HEAD "),
            answer.windows(4).position(|w| w == b"\r\n\r\n"),
        ) {
            (true, Some(end)) => answer[..end + 4].to_vec(),
            _ => answer,
        };
        if out.write_all(&answer).is_err() {
            return;
        }
    }
}

fn proxy_server(up: &str, prefix: &str) -> Running {
    proxy_server_with(&[(Upstream::parse(up).unwrap(), prefix)], |s| s)
}

/// A server of one worker with a proxy route per upstream (`PREFIX*rest`
/// for GET, HEAD and POST), `/local` answered by itself, and `configure`
/// applied to the server before it starts.
fn proxy_server_with(ups: &[(Upstream, &str)], configure: impl FnOnce(Server) -> Server) -> Running {
    let mut router = Router::new().get("/local", |_: &peregrine::Request<'_>| Response::text("local"));
    for (up, prefix) in ups {
        let proxy = Proxy::new(up.clone().prefix(prefix));
        let pattern = format!("{prefix}*rest");
        router = router
            .route("GET", &pattern, proxy.clone())
            .route("HEAD", &pattern, proxy.clone())
            .route("POST", &pattern, proxy);
    }
    let limits = peregrine::Limits {
        body_bytes_max: 16 * 1024 * 1024,
        ..peregrine::Limits::default()
    };
    configure(Server::new().bind("127.0.0.1:0").workers(1).limits(limits))
        .start(router)
        .expect("server starts")
}

/// An upstream that takes connections and reads, but never answers.
fn silent_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            thread::spawn(move || {
                let mut b = [0; 4096];
                while matches!(stream.read(&mut b), Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

/// A temporary file's path, unique to the test.
fn temp_path(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("peregrine-proxy-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("access.log")
}

fn get(addr: SocketAddr, target: &str, extra: &str) -> Vec<u8> {
    let mut c = Client::connect(addr);
    c.send(format!("GET {target} HTTP/1.1\r\nHost: site.test\r\n{extra}Connection: close\r\n\r\n").as_bytes());
    c.read_to_close()
}

fn text(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw).into_owned()
}

#[test]
fn a_get_reaches_the_upstream_rewritten_and_its_answer_comes_back_without_hop_by_hop_fields() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}/v1/", up.addr), "/api/");
    let raw = get(
        server.local_addr(),
        "/api/hello?x=1",
        "X-Forwarded-For: 6.6.6.6\r\nX-Request-ID: forged\r\nCookie: a=1\r\nTE: trailers\r\nConnection: X-Private\r\nX-Private: no\r\n",
    );
    let answer = text(&raw);
    assert_eq!(status_of(&raw), 200, "{answer}");
    assert!(answer.ends_with("\r\n\r\nhello"), "{answer}");
    assert!(answer.contains("X-Up: 1\r\n"), "{answer}");
    assert!(answer.contains("Content-Type: text/plain\r\n"), "{answer}");
    for hop in ["X-Hop", "Keep-Alive", "keep-alive, X-Hop"] {
        assert!(!answer.contains(hop), "{hop} passed on: {answer}");
    }

    let seen = up.seen.recv_timeout(PATIENCE).expect("the upstream got the request");
    assert!(seen.head.starts_with("GET /v1/hello?x=1 HTTP/1.1\r\n"), "{}", seen.head);
    assert_eq!(seen.field("host"), Some("site.test"), "Host preserved: {}", seen.head);
    // Replaced, never appended: the client is not a trusted proxy.
    assert_eq!(seen.field("x-forwarded-for"), Some("127.0.0.1"), "{}", seen.head);
    assert_eq!(seen.field("x-forwarded-proto"), Some("http"));
    assert_eq!(seen.field("x-forwarded-host"), Some("site.test"));
    assert_eq!(
        seen.field("forwarded"),
        Some("for=127.0.0.1;host=\"site.test\";proto=http")
    );
    assert!(
        seen.field("via").unwrap().starts_with("1.1 peregrine-"),
        "{}",
        seen.head
    );
    let id = seen.field("x-request-id").unwrap();
    assert!(id != "forged" && id.len() == 32, "{id}");
    assert_eq!(seen.field("cookie"), Some("a=1"));
    for hop in ["x-private", "keep-alive"] {
        assert_eq!(seen.field(hop), None, "{hop} reached the upstream: {}", seen.head);
    }
    // The client's TE and Connection do not pass; the proxy's own do: the
    // client takes trailers, so the upstream is told it may send them
    // (`proxy_trailers.rs`).
    assert_eq!(seen.field("te"), Some("trailers"), "{}", seen.head);
    assert_eq!(seen.field("connection"), Some("TE"), "{}", seen.head);
}

/// The client in `Forwarded` is the one the engine decides
/// (`Request::client_addr`): behind a trusted proxy, what its
/// `X-Forwarded-For` says (carried on before the peer); from a peer the
/// server does not trust, the peer itself, however many proxies it
/// trusts elsewhere (`build_as` takes the peer without asking then; a
/// debug assertion compares the two).
#[test]
fn the_forwarded_client_is_the_one_the_engine_decides() {
    let up = upstream();
    let cases = [
        (
            "127.0.0.1",
            "1.2.3.4, 127.0.0.1",
            "for=1.2.3.4;host=\"site.test\";proto=http",
        ),
        ("10.0.0.0/8", "127.0.0.1", "for=127.0.0.1;host=\"site.test\";proto=http"),
    ];
    for (trusted, xff, forwarded) in cases {
        let server = proxy_server_with(
            &[(Upstream::parse(&format!("http://{}", up.addr)).unwrap(), "/api/")],
            |s| s.trusted_proxies(trusted.parse().unwrap(), AddrField::XForwardedFor),
        );
        let raw = get(server.local_addr(), "/api/hello", "X-Forwarded-For: 1.2.3.4\r\n");
        assert_eq!(status_of(&raw), 200, "{}", text(&raw));
        let seen = up.seen.recv_timeout(PATIENCE).expect("the upstream got the request");
        assert_eq!(
            seen.field("x-forwarded-for"),
            Some(xff),
            "trusting {trusted}: {}",
            seen.head
        );
        assert_eq!(
            seen.field("forwarded"),
            Some(forwarded),
            "trusting {trusted}: {}",
            seen.head
        );
    }
}

/// From a trusted proxy (a balancer that ended TLS), what it said of the
/// request goes on, as Caddy's `trusted_proxies` keeps it:
/// `X-Forwarded-Proto` and `-Host` kept, `Forwarded` (RFC 7239 §4)
/// appended to with this hop's element (whose `for` is the hop). From a
/// peer not trusted, all of them are written afresh. (Before, a trusted
/// balancer's `https` became `http`, and apps behind built `http://`
/// links.)
#[test]
fn a_trusted_proxys_proto_host_and_forwarded_go_on_and_an_untrusted_peers_are_replaced() {
    let up = upstream();
    let incoming =
        "X-Forwarded-Proto: https\r\nX-Forwarded-Host: orig.example\r\nForwarded: for=1.2.3.4;proto=https\r\n";
    let cases = [
        (
            "127.0.0.1",
            "https",
            "orig.example",
            "for=1.2.3.4;proto=https, for=127.0.0.1;host=\"site.test\";proto=http",
        ),
        (
            "10.0.0.0/8",
            "http",
            "site.test",
            "for=127.0.0.1;host=\"site.test\";proto=http",
        ),
    ];
    for (trusted, proto, host, forwarded) in cases {
        let server = proxy_server_with(
            &[(Upstream::parse(&format!("http://{}", up.addr)).unwrap(), "/api/")],
            |s| s.trusted_proxies(trusted.parse().unwrap(), AddrField::XForwardedFor),
        );
        // Twice on one worker: the second may not be a copy of the
        // first's kept fields where the incoming ones differ.
        for extra in [incoming, ""] {
            let raw = get(server.local_addr(), "/api/hello", extra);
            assert_eq!(status_of(&raw), 200, "{}", text(&raw));
            let seen = up.seen.recv_timeout(PATIENCE).expect("the upstream got the request");
            let (proto, host, forwarded) = match extra {
                "" => ("http", "site.test", "for=127.0.0.1;host=\"site.test\";proto=http"),
                _ => (proto, host, forwarded),
            };
            assert_eq!(
                seen.field("x-forwarded-proto"),
                Some(proto),
                "trusting {trusted}: {}",
                seen.head
            );
            assert_eq!(
                seen.field("x-forwarded-host"),
                Some(host),
                "trusting {trusted}: {}",
                seen.head
            );
            assert_eq!(
                seen.field("forwarded"),
                Some(forwarded),
                "trusting {trusted}: {}",
                seen.head
            );
        }
    }
}

/// Behind the PROXY protocol, the hop `X-Forwarded-For` appends is the
/// PROXY header's source (the client the balancer passed on), as HAProxy
/// (`option forwardfor` with `accept-proxy`) and nginx
/// (`real_ip_header proxy_protocol`) send it, not the balancer's own
/// address; it is trusted or not as itself.
#[test]
fn behind_the_proxy_protocol_x_forwarded_for_is_the_source_it_gave() {
    let up = upstream();
    let server = proxy_server_with(
        &[(Upstream::parse(&format!("http://{}", up.addr)).unwrap(), "/api/")],
        |s| {
            s.proxy_protocol("127.0.0.1".parse().unwrap())
                .trusted_proxies("127.0.0.1".parse().unwrap(), AddrField::XForwardedFor)
        },
    );
    let mut c = Client::connect(server.local_addr());
    c.send(
        b"PROXY TCP4 203.0.113.7 127.0.0.1 55555 80\r\nGET /api/hello HTTP/1.1\r\nHost: site.test\r\n\
          X-Forwarded-For: 6.6.6.6\r\nConnection: close\r\n\r\n",
    );
    let raw = c.read_to_close();
    assert_eq!(status_of(&raw), 200, "{}", text(&raw));
    let seen = up.seen.recv_timeout(PATIENCE).expect("the upstream got the request");
    // 203.0.113.7 is not trusted: its X-Forwarded-For is replaced.
    assert_eq!(seen.field("x-forwarded-for"), Some("203.0.113.7"), "{}", seen.head);
    assert_eq!(
        seen.field("forwarded"),
        Some("for=203.0.113.7;host=\"site.test\";proto=http"),
        "{}",
        seen.head
    );
}

/// Issue 26: `Connection` "may not name Host, Content-Length,
/// Transfer-Encoding, Authorization or the fields the proxy adds": a
/// client's connection options remove its own fields, never this hop's
/// (through the codec's writer, `Connection: Via` took the proxy's Via
/// out, and with it the loop check of the next Peregrine), nor its
/// credentials.
#[test]
fn connection_options_cannot_remove_the_fields_this_hop_writes() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}", up.addr), "/api/");
    let raw = get(
        server.local_addr(),
        "/api/hello",
        "Connection: Via, X-Forwarded-For, Forwarded, X-Request-ID, X-Forwarded-Proto, X-Private, Authorization\r\n\
         X-Private: no\r\nAuthorization: Bearer t0k\r\n",
    );
    assert_eq!(status_of(&raw), 200, "{}", text(&raw));
    let seen = up.seen.recv_timeout(PATIENCE).expect("the upstream got the request");
    assert!(
        seen.field("via").is_some_and(|v| v.starts_with("1.1 peregrine-")),
        "{}",
        seen.head
    );
    assert_eq!(seen.field("x-forwarded-for"), Some("127.0.0.1"), "{}", seen.head);
    assert_eq!(seen.field("x-forwarded-proto"), Some("http"), "{}", seen.head);
    assert!(seen.field("forwarded").is_some(), "{}", seen.head);
    assert!(seen.field("x-request-id").is_some(), "{}", seen.head);
    assert_eq!(seen.field("x-private"), None, "{}", seen.head);
    assert_eq!(seen.field("authorization"), Some("Bearer t0k"), "{}", seen.head);
}

/// The forwarding fields a worker wrote last are kept and copied for the
/// next request made of the same inputs (`build_as`'s `FORWARDING`): each
/// request here, on one worker and one kept-alive connection, differs
/// from the one before in one input (the Host, an incoming Via, the
/// version), and each must get its own fields, never the last one's.
#[test]
fn each_request_gets_its_own_forwarding_fields_when_the_last_ones_are_kept() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}", up.addr), "/api/");
    let mut c = Client::connect(server.local_addr());
    // (request, X-Forwarded-Host, Forwarded, Via's start)
    let cases: [(&str, Option<&str>, &str, &str); 7] = [
        (
            "GET /api/hello HTTP/1.1\r\nHost: a.test\r\n\r\n",
            Some("a.test"),
            "for=127.0.0.1;host=\"a.test\";proto=http",
            "1.1 peregrine-",
        ),
        (
            "GET /api/hello HTTP/1.1\r\nHost: a.test\r\n\r\n",
            Some("a.test"),
            "for=127.0.0.1;host=\"a.test\";proto=http",
            "1.1 peregrine-",
        ),
        (
            "GET /api/hello HTTP/1.1\r\nHost: b.test:8080\r\n\r\n",
            Some("b.test:8080"),
            "for=127.0.0.1;host=\"b.test:8080\";proto=http",
            "1.1 peregrine-",
        ),
        (
            "GET /api/hello HTTP/1.1\r\nHost: b.test:8080\r\nVia: 1.0 edge\r\n\r\n",
            Some("b.test:8080"),
            "for=127.0.0.1;host=\"b.test:8080\";proto=http",
            "1.0 edge, 1.1 peregrine-",
        ),
        (
            "GET /api/hello HTTP/1.1\r\nHost: b.test:8080\r\n\r\n",
            Some("b.test:8080"),
            "for=127.0.0.1;host=\"b.test:8080\";proto=http",
            "1.1 peregrine-",
        ),
        // A host `Forwarded` does not carry (`_`), then one of the same
        // length as the last.
        (
            "GET /api/hello HTTP/1.1\r\nHost: a_b.test\r\n\r\n",
            Some("a_b.test"),
            "for=127.0.0.1;proto=http",
            "1.1 peregrine-",
        ),
        (
            "GET /api/hello HTTP/1.1\r\nHost: abc.test\r\n\r\n",
            Some("abc.test"),
            "for=127.0.0.1;host=\"abc.test\";proto=http",
            "1.1 peregrine-",
        ),
    ];
    for (i, (request, xfh, forwarded, via)) in cases.iter().enumerate() {
        c.send(request.as_bytes());
        assert_eq!(c.response().status, 200, "request {i}");
        let seen = up.seen.recv_timeout(PATIENCE).expect("the upstream got the request");
        assert_eq!(seen.field("x-forwarded-host"), *xfh, "request {i}: {}", seen.head);
        assert_eq!(seen.field("forwarded"), Some(*forwarded), "request {i}: {}", seen.head);
        assert_eq!(
            seen.field("x-forwarded-for"),
            Some("127.0.0.1"),
            "request {i}: {}",
            seen.head
        );
        assert_eq!(
            seen.field("x-forwarded-proto"),
            Some("http"),
            "request {i}: {}",
            seen.head
        );
        let seen_via = seen.field("via").unwrap_or_default();
        assert!(seen_via.starts_with(via), "request {i}: {}", seen.head);
        assert_eq!(seen_via.matches("peregrine-").count(), 1, "request {i}: {}", seen.head);
        assert_eq!(seen.head.matches("\r\nVia:").count(), 1, "request {i}: {}", seen.head);
    }
    // HTTP/1.0 after HTTP/1.1 with the same Host: its own Via version.
    let raw = common::exchange(
        server.local_addr(),
        b"GET /api/hello HTTP/1.0\r\nHost: abc.test\r\n\r\n",
    );
    assert_eq!(status_of(&raw), 200, "{}", text(&raw));
    let seen = up.seen.recv_timeout(PATIENCE).expect("the upstream got the request");
    assert!(
        seen.field("via").unwrap_or_default().starts_with("1.0 peregrine-"),
        "{}",
        seen.head
    );
    assert_eq!(seen.field("x-forwarded-host"), Some("abc.test"), "{}", seen.head);
    // No Host at all (HTTP/1.0 allows it): no X-Forwarded-Host, no host=.
    let raw = common::exchange(server.local_addr(), b"GET /api/hello HTTP/1.0\r\n\r\n");
    assert_eq!(status_of(&raw), 200, "{}", text(&raw));
    let seen = up.seen.recv_timeout(PATIENCE).expect("the upstream got the request");
    assert_eq!(seen.field("x-forwarded-host"), None, "{}", seen.head);
    assert_eq!(
        seen.field("forwarded"),
        Some("for=127.0.0.1;proto=http"),
        "{}",
        seen.head
    );
}

#[test]
fn kept_alive_upstream_connections_are_reused() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}", up.addr), "/api/");
    let mut c = Client::connect(server.local_addr());
    for _ in 0..5 {
        c.send(b"GET /api/hello HTTP/1.1\r\nHost: t\r\n\r\n");
        let r = c.response();
        let (status, body) = (r.status, r.body);
        assert_eq!((status, body.as_slice()), (200, &b"hello"[..]));
    }
    // Without a rewriting path the request's path goes unchanged.
    let seen = up.seen.recv_timeout(PATIENCE).unwrap();
    assert!(seen.head.starts_with("GET /api/hello HTTP/1.1\r\n"), "{}", seen.head);
    assert_eq!(
        up.accepted.load(Ordering::SeqCst),
        1,
        "one upstream connection for five requests"
    );
}

#[test]
fn a_post_body_is_forwarded_with_its_length_and_the_answer_relayed() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}", up.addr), "/api/");
    let mut c = Client::connect(server.local_addr());
    c.send(b"POST /api/echo HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\nhello world");
    let r = c.response();
    assert_eq!((r.status, r.body.as_slice()), (201, &b"hello world"[..]));
    let seen = up.seen.recv_timeout(PATIENCE).unwrap();
    assert_eq!(seen.field("content-length"), Some("11"), "{}", seen.head);
    assert_eq!(seen.field("transfer-encoding"), None, "{}", seen.head);
    assert_eq!(seen.body, b"hello world");
    c.send(b"POST /api/echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    let r = c.response();
    let (status, body) = (r.status, r.body);
    let seen = up.seen.recv_timeout(PATIENCE).unwrap();
    assert_eq!((status, body.as_slice()), (201, &b"hello world"[..]));
    // A body of unknown length streams, chunked (a short one would fit in
    // the whole-body buffer, but its length is known only at its end).
    assert_eq!(seen.field("transfer-encoding"), Some("chunked"), "{}", seen.head);
    assert_eq!(seen.body, b"hello world");
}

/// A GET may carry a body (RFC 9110 §9.3.1 gives it no meaning, and a
/// proxy passes it on): one of unknown length streams to the upstream,
/// chunked, as a POST's does. The WebSocket check (`tunnel::offer`)
/// took such a GET's body away, and the upstream got the GET without it.
#[test]
fn a_get_with_a_streamed_body_reaches_the_upstream_with_it() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}", up.addr), "/api/");
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET /api/echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    let r = c.response();
    let seen = up.seen.recv_timeout(PATIENCE).unwrap();
    assert_eq!(
        (r.status, r.body.as_slice()),
        (201, &b"hello world"[..]),
        "{}",
        seen.head
    );
    assert_eq!(seen.field("transfer-encoding"), Some("chunked"), "{}", seen.head);
    assert_eq!(seen.body, b"hello world");
}

/// An upstream connection writes each short answer's fields and body
/// into the buffer the last answer used (`UpConn::lines`, once the client
/// has written that one): answers of other fields and other lengths, one
/// after another on one upstream connection, each come whole and alone,
/// with nothing left of the one before.
#[test]
fn short_answers_on_one_upstream_connection_keep_their_own_fields_and_bodies() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}", up.addr), "/api/");
    let mut c = Client::connect(server.local_addr());
    let bodies: [&[u8]; 5] = [
        b"a longer body than the next",
        b"b",
        b"",
        b"ccc ccc",
        b"a longer body than the last",
    ];
    for (i, body) in bodies.iter().enumerate() {
        let mut req = format!(
            "POST /api/echo HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        c.send(&req);
        let r = c.response();
        assert_eq!((r.status, r.body.as_slice()), (201, *body), "answer {i}");
        assert_eq!(
            r.header("content-length"),
            Some(body.len().to_string().as_str()),
            "answer {i}"
        );
        assert_eq!(r.header("x-up"), None, "answer {i}: a field of another answer");
        c.send(b"GET /api/hello HTTP/1.1\r\nHost: t\r\n\r\n");
        let r = c.response();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]), "hello {i}");
        assert_eq!(
            (r.header("x-up"), r.header("content-type")),
            (Some("1"), Some("text/plain")),
            "hello {i}"
        );
        assert_eq!((r.header("x-hop"), r.header("keep-alive")), (None, None), "hello {i}");
    }
    assert_eq!(up.accepted.load(Ordering::SeqCst), 1, "one upstream connection for all");
}

#[test]
fn a_long_chunked_answer_streams_through_whole() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}", up.addr), "/api/");
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET /api/big HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response();
    let (status, body) = (r.status, r.body);
    assert_eq!(status, 200);
    assert_eq!(body.len(), 300_000);
    assert!(body
        .chunks(1000)
        .enumerate()
        .all(|(i, c)| c.iter().all(|&b| b == b'a' + (i % 26) as u8)));
    // The connection goes on.
    c.send(b"GET /local HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response().status, 200);
}

#[test]
fn a_close_delimited_answer_ends_at_the_upstreams_close() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}", up.addr), "/api/");
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET /api/close HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response();
    let (status, body) = (r.status, r.body);
    assert_eq!((status, body.as_slice()), (200, &b"until the close"[..]));
}

#[test]
fn server_sent_events_pass_through_unbuffered() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}", up.addr), "/api/");
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(b"GET /api/sse HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut got = Vec::new();
    // Event 1 arrives while the upstream holds event 2 back: a buffering
    // proxy would wait for the end and deadlock here.
    while !text(&got).contains("data: 1") {
        let mut b = [0; 4096];
        let n = s.read(&mut b).expect("event 1 within PATIENCE");
        assert!(n > 0, "closed early: {}", text(&got));
        got.extend_from_slice(&b[..n]);
    }
    up.go.send(()).unwrap();
    while !text(&got).contains("data: 2") {
        let mut b = [0; 4096];
        let n = s.read(&mut b).expect("event 2 within PATIENCE");
        assert!(n > 0, "closed early: {}", text(&got));
        got.extend_from_slice(&b[..n]);
    }
}

#[test]
fn an_answer_with_ambiguous_framing_is_a_502_without_upstream_text() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}", up.addr), "/api/");
    let raw = get(server.local_addr(), "/api/smuggle", "");
    assert_eq!(status_of(&raw), 502, "{}", text(&raw));
    assert!(!text(&raw).contains("upstream-secret"), "{}", text(&raw));
    assert!(!text(&raw).contains(&up.addr.to_string()), "{}", text(&raw));
}

/// RFC 9112 §6.3: a 204 ends at its head; bytes sent with it are no
/// answer to anything (no request is pipelined to an upstream).
#[test]
fn a_body_sent_with_a_204_is_a_502_and_the_connection_is_not_kept() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}", up.addr), "/api/");
    let raw = get(server.local_addr(), "/api/nocontent-body", "");
    assert_eq!(status_of(&raw), 502, "{}", text(&raw));
    assert!(!text(&raw).contains("upstream-secret"), "{}", text(&raw));
    // The next request needs a new upstream connection.
    let raw = get(server.local_addr(), "/api/hello", "");
    assert_eq!(status_of(&raw), 200, "{}", text(&raw));
    assert_eq!(up.accepted.load(Ordering::SeqCst), 2);
}

/// DNS rebinding's defence: an upstream with an address guard is never
/// connected to at an address the guard refuses, whatever its URL said
/// when it was allowed; the guard is asked at connect time, for the
/// addresses of the moment. Loopback stands for any refused address.
#[test]
fn an_address_guard_refuses_loopback_at_connect_time_unless_its_network_is_allowed() {
    use peregrine::proxy::AddressGuard;
    let up = upstream();
    let url = format!("http://{}", up.addr);
    let guarded = Upstream::parse(&url).unwrap().address_guard(AddressGuard::default());
    let opened = Upstream::parse(&url)
        .unwrap()
        .address_guard(AddressGuard::new(vec!["127.0.0.0/8".parse().unwrap()]));
    let server = proxy_server_with(&[(guarded, "/no/"), (opened, "/yes/")], |s| s);
    let raw = get(server.local_addr(), "/no/hello", "");
    assert_eq!(status_of(&raw), 502, "{}", text(&raw));
    assert_eq!(
        up.accepted.load(Ordering::SeqCst),
        0,
        "a refused address was connected to"
    );
    let raw = get(server.local_addr(), "/yes/hello", "");
    assert_eq!(status_of(&raw), 200, "{}", text(&raw));
    assert_eq!(up.accepted.load(Ordering::SeqCst), 1);
}

#[test]
fn an_upstream_that_is_down_is_a_502() {
    // A port nothing listens on: bound, then closed.
    let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let server = proxy_server(&format!("http://{addr}"), "/api/");
    let raw = get(server.local_addr(), "/api/hello", "");
    assert_eq!(status_of(&raw), 502, "{}", text(&raw));
    assert!(!text(&raw).contains(&addr.port().to_string()), "{}", text(&raw));
}

#[test]
fn encoded_slashes_and_dot_segments_are_refused_and_a_loop_is_a_508() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}", up.addr), "/api/");
    for target in ["/api/a%2Fb", "/api/a%5cb", "/api/a%00b"] {
        assert_eq!(status_of(&get(server.local_addr(), target, "")), 400, "{target}");
    }
    // Our own Via token coming back is a loop.
    let first = get(server.local_addr(), "/api/hello", "");
    assert_eq!(status_of(&first), 200);
    let via = up.seen.recv_timeout(PATIENCE).unwrap().field("via").unwrap().to_owned();
    let looped = get(server.local_addr(), "/api/hello", &format!("Via: {via}\r\n"));
    assert_eq!(status_of(&looped), 508, "{}", text(&looped));
    // Another proxy's Via is not a loop, and is kept before ours.
    assert_eq!(
        status_of(&get(server.local_addr(), "/api/hello", "Via: 1.1 other\r\n")),
        200
    );
    let seen = up.seen.recv_timeout(PATIENCE).unwrap();
    assert!(
        seen.field("via").unwrap().starts_with("1.1 other, 1.1 peregrine-"),
        "{}",
        seen.head
    );
}

#[test]
fn http2_clients_get_the_answer_without_connection_specific_fields() {
    if std::process::Command::new("curl").arg("--version").output().is_err() {
        eprintln!("skipped: no curl");
        return;
    }
    let up = upstream();
    let server = proxy_server(&format!("http://{}", up.addr), "/api/");
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "-i",
            "--http2-prior-knowledge",
            "-H",
            "Cookie: a=1",
            "-H",
            "Cookie: b=2",
        ])
        .arg(format!("http://{}/api/hello", server.local_addr()))
        .output()
        .unwrap();
    let answer = text(&out.stdout);
    assert!(answer.starts_with("HTTP/2 200"), "{answer}");
    assert!(answer.ends_with("hello"), "{answer}");
    for hop in ["connection", "keep-alive", "x-hop"] {
        assert!(
            !answer.to_ascii_lowercase().contains(&format!("\n{hop}:")),
            "{hop}: {answer}"
        );
    }
    let seen = up.seen.recv_timeout(PATIENCE).unwrap();
    assert!(seen.field("via").unwrap().starts_with("2 peregrine-"), "{}", seen.head);
    assert_eq!(seen.field("cookie"), Some("a=1; b=2"), "{}", seen.head);
}

/// An upstream that writes `total` bytes of body as fast as the socket
/// takes them, and reports how many it has written so far.
fn firehose(total: usize) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let written = Arc::new(AtomicUsize::new(0));
    let progress = written.clone();
    thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut head = [0; 4096];
        let _ = s.read(&mut head);
        s.write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {total}\r\n\r\n").as_bytes())
            .unwrap();
        let block = vec![b'x'; 64 * 1024];
        let mut left = total;
        while left > 0 {
            let n = left.min(block.len());
            if s.write_all(&block[..n]).is_err() {
                return;
            }
            left -= n;
            progress.fetch_add(n, Ordering::SeqCst);
        }
    });
    (addr, written)
}

#[test]
fn a_client_that_does_not_read_holds_the_upstream_back_and_then_gets_every_byte() {
    const TOTAL: usize = 256 * 1024 * 1024;
    let (up, written) = firehose(TOTAL);
    let server = proxy_server(&format!("http://{up}"), "/api/");
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(b"GET /api/big HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    // The client reads nothing: the upstream gets as far as the sockets'
    // buffers and the proxy's 1 MiB channel let it, then stops.
    let mut last = usize::MAX;
    loop {
        thread::sleep(std::time::Duration::from_millis(200));
        let now = written.load(Ordering::SeqCst);
        if now == last {
            break;
        }
        last = now;
    }
    assert!(
        last < 64 * 1024 * 1024,
        "the upstream wrote {last} bytes to a client that read none: the proxy buffers without bound"
    );
    // Then every byte arrives, and the answer ends where it says.
    eprintln!("the upstream stalled after {last} bytes");
    let r = Client::over(s).response();
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), TOTAL);
    assert!(r.body.iter().all(|&b| b == b'x'));
    assert!(written.load(Ordering::SeqCst) == TOTAL);
}

#[test]
fn a_long_upload_streams_to_the_upstream_with_its_length_and_one_of_unknown_length_goes_chunked() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}", up.addr), "/api/");
    let body: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let mut c = Client::connect(server.local_addr());
    let mut req = format!(
        "POST /api/echo HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    c.send(&req);
    let r = c.response();
    assert_eq!(r.status, 201);
    assert!(r.body == body, "the echo differs");
    let seen = up.seen.recv_timeout(PATIENCE).unwrap();
    assert_eq!(seen.field("content-length"), Some("3145728"), "{}", seen.head);
    assert!(seen.body == body);

    // Unknown length (chunked from the client): chunked to the upstream.
    let mut req = b"POST /api/echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for part in body.chunks(100_000) {
        req.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        req.extend_from_slice(part);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    c.send(&req);
    let r = c.response();
    assert_eq!(r.status, 201);
    assert!(r.body == body, "the echo differs");
    let seen = up.seen.recv_timeout(PATIENCE).unwrap();
    assert_eq!(seen.field("transfer-encoding"), Some("chunked"), "{}", seen.head);
    assert!(seen.body == body);
}

#[test]
fn a_get_whose_kept_alive_connection_died_is_sent_again_and_a_post_is_not() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}", up.addr), "/api/");
    let mut c = Client::connect(server.local_addr());
    // The first request opens the upstream connection and is answered;
    // the second goes on it, and the upstream closes without answering.
    for _ in 0..2 {
        c.send(b"GET /api/once HTTP/1.1\r\nHost: t\r\n\r\n");
        let r = c.response();
        assert_eq!((r.status, r.text().as_str()), (200, "once"));
    }
    // GET: sent again on a fresh connection, which answers it.
    assert_eq!(up.accepted.load(Ordering::SeqCst), 2);
    // A POST on a reused connection that dies is never replayed.
    c.send(b"POST /api/once HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx");
    let r = c.response();
    assert_eq!(r.status, 502);
    assert_eq!(up.accepted.load(Ordering::SeqCst), 2, "the POST was sent again");
}

/// nginx's `$upstream_*` variables: where the request went, the upstream's
/// status, and the times to connect, to the head and to the end, in
/// seconds with milliseconds; `0.000` to connect on a kept-alive
/// connection, `-` for a request that was not proxied and for what an
/// exchange did not reach.
#[test]
fn the_access_log_tells_the_upstream_exchange_as_nginx_does() {
    let up = upstream();
    let (dead, _held) = dead_addr();
    let path = temp_path("upstream-log");
    let format: peregrine::LogFormat = "$request_uri|$status|$upstream_addr|$upstream_status|\
                                        $upstream_connect_time|$upstream_header_time|$upstream_response_time"
        .parse()
        .unwrap();
    let server = proxy_server_with(
        &[
            (Upstream::parse(&format!("http://{}", up.addr)).unwrap(), "/api/"),
            (Upstream::parse(&format!("http://{dead}")).unwrap(), "/down/"),
        ],
        |s| {
            s.access_log(peregrine::AccessLog::File(path.clone()))
                .access_log_format(format)
        },
    );
    let mut c = Client::connect(server.local_addr());
    for target in ["/api/hello", "/api/hello", "/local", "/api/big", "/down/x"] {
        c.send(format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        c.response();
    }
    drop(c);
    server.shutdown();
    server.join().unwrap();
    let log = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Vec<&str>> = log.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(lines.len(), 5, "{log}");
    let seconds = |s: &str| {
        let (whole, ms) = s.split_once('.').unwrap_or(("", ""));
        !whole.is_empty()
            && whole.bytes().all(|b| b.is_ascii_digit())
            && ms.len() == 3
            && ms.bytes().all(|b| b.is_ascii_digit())
    };
    let up_addr = up.addr.to_string();
    // A fresh connection: every figure.
    let first = &lines[0];
    assert_eq!(first[..4], ["/api/hello", "200", up_addr.as_str(), "200"], "{log}");
    assert!(first[4..].iter().all(|t| seconds(t)), "{log}");
    // The kept-alive connection again: no time to connect.
    assert_eq!(lines[1][4], "0.000", "{log}");
    assert!(seconds(lines[1][5]) && seconds(lines[1][6]), "{log}");
    // Not proxied: dashes.
    assert_eq!(lines[2], ["/local", "200", "-", "-", "-", "-", "-"], "{log}");
    // A long answer streams: its response time runs to its last byte.
    assert_eq!(lines[3][..4], ["/api/big", "200", up_addr.as_str(), "200"], "{log}");
    assert!(seconds(lines[3][5]) && seconds(lines[3][6]), "{log}");
    // Refused: the proxy's 502, and no time past the connection.
    let dead = dead.to_string();
    assert_eq!(lines[4][..4], ["/down/x", "502", dead.as_str(), "502"], "{log}");
    assert_eq!(lines[4][5..], ["-", "-"], "{log}");
}

/// A streamed answer's `$upstream_response_time` runs to the upstream's
/// last byte (issue 26), and `$request_time` to the client's, after it;
/// `$ttfb` to the head relayed.
#[test]
fn a_streamed_answer_logs_the_upstream_time_to_its_last_byte() {
    let up = upstream();
    let path = temp_path("upstream-stream-log");
    let format: peregrine::LogFormat = "$request_uri|$upstream_header_time|$upstream_response_time|$request_time|$ttfb"
        .parse()
        .unwrap();
    let server = proxy_server_with(
        &[(Upstream::parse(&format!("http://{}", up.addr)).unwrap(), "/api/")],
        |s| {
            s.access_log(peregrine::AccessLog::File(path.clone()))
                .access_log_format(format)
        },
    );
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET /api/slow HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response();
    assert_eq!((r.status, r.text().as_str()), (200, "firstmoremoremore"));
    drop(c);
    server.shutdown();
    server.join().unwrap();
    let log = std::fs::read_to_string(&path).unwrap();
    let fields: Vec<&str> = log.trim_end().split('|').collect();
    assert_eq!(fields.len(), 5, "{log}");
    let secs = |i: usize| -> f64 { fields[i].parse().unwrap_or_else(|_| panic!("field {i} of {log}")) };
    let (header, response, request, ttfb) = (secs(1), secs(2), secs(3), secs(4));
    assert!(header < 0.2, "{log}");
    assert!(
        response >= 0.3,
        "the upstream's last byte came 300 ms after its head: {log}"
    );
    assert!(request >= response, "{log}");
    assert!(ttfb < 0.2, "{log}");
}

/// The access log's `reason` names why the proxy made an answer itself
/// (`upstream_connect`), and is `-` for the upstream's own answers.
#[test]
fn the_access_log_says_why_the_proxy_answered_itself() {
    let up = upstream();
    let (dead, _held) = dead_addr();
    let path = temp_path("upstream-reason-log");
    let format: peregrine::LogFormat = "$request_uri $status $reason".parse().unwrap();
    let server = proxy_server_with(
        &[
            (Upstream::parse(&format!("http://{}", up.addr)).unwrap(), "/api/"),
            (Upstream::parse(&format!("http://{dead}")).unwrap(), "/down/"),
        ],
        |s| {
            s.access_log(peregrine::AccessLog::File(path.clone()))
                .access_log_format(format)
        },
    );
    let mut c = Client::connect(server.local_addr());
    for target in ["/api/hello", "/api/nothing-here", "/down/x"] {
        c.send(format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        c.response();
    }
    drop(c);
    server.shutdown();
    server.join().unwrap();
    let log = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        log,
        "/api/hello 200 -\n/api/nothing-here 404 -\n/down/x 502 upstream_connect\n"
    );
}

/// With `Server::request_id_header`, a proxied answer returns the id the
/// upstream was sent.
#[test]
fn a_proxied_answer_returns_the_request_id_sent_upstream() {
    let up = upstream();
    let server = proxy_server_with(
        &[(Upstream::parse(&format!("http://{}", up.addr)).unwrap(), "/api/")],
        |s| s.request_id_header(true),
    );
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET /api/hello HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 200);
    let seen = up.seen.recv_timeout(PATIENCE).unwrap();
    let sent = seen.field("x-request-id").expect("sent upstream").to_owned();
    assert_eq!(r.header("x-request-id"), Some(sent.as_str()));
}

/// A request sent again after its kept-alive connection died logs both
/// attempts, as nginx lists them: `addr, addr`, `502, 200`.
#[test]
fn a_request_sent_again_logs_every_attempt() {
    let up = upstream();
    let path = temp_path("upstream-retry-log");
    let format: peregrine::LogFormat = "$status|$upstream_addr|$upstream_status|$upstream_connect_time"
        .parse()
        .unwrap();
    let server = proxy_server_with(
        &[(Upstream::parse(&format!("http://{}", up.addr)).unwrap(), "/api/")],
        |s| {
            s.access_log(peregrine::AccessLog::File(path.clone()))
                .access_log_format(format)
        },
    );
    let mut c = Client::connect(server.local_addr());
    for _ in 0..2 {
        c.send(b"GET /api/once HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(c.response().status, 200);
    }
    assert_eq!(up.accepted.load(Ordering::SeqCst), 2, "the second was sent again");
    drop(c);
    server.shutdown();
    server.join().unwrap();
    let log = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Vec<&str>> = log.lines().map(|l| l.split('|').collect()).collect();
    let a = up.addr.to_string();
    assert_eq!(lines.len(), 2, "{log}");
    assert_eq!(lines[0][..3], ["200", a.as_str(), "200"], "{log}");
    let both = format!("{a}, {a}");
    assert_eq!(lines[1][..3], ["200", both.as_str(), "502, 200"], "{log}");
    // The kept-alive attempt took no time to connect; the fresh one some.
    assert!(lines[1][3].starts_with("0.000, "), "{log}");
}

#[test]
fn json_access_log_lines_carry_the_upstream_figures() {
    let up = upstream();
    let path = temp_path("upstream-json");
    let server = proxy_server_with(
        &[(Upstream::parse(&format!("http://{}", up.addr)).unwrap(), "/api/")],
        |s| {
            s.access_log(peregrine::AccessLog::File(path.clone()))
                .access_log_format(peregrine::LogFormat::Json)
        },
    );
    let mut c = Client::connect(server.local_addr());
    for target in ["/api/hello", "/local"] {
        c.send(format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        c.response();
    }
    drop(c);
    server.shutdown();
    server.join().unwrap();
    let log = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    let proxied = format!(
        "\"upstream_addr\":\"{}\",\"upstream_status\":200,\"upstream_connect_time\":",
        up.addr
    );
    assert!(lines[0].contains(&proxied), "{log}");
    assert!(
        lines[0].contains(",\"upstream_header_time\":0.") || lines[0].contains(",\"upstream_header_time\":1."),
        "{log}"
    );
    assert!(
        lines[1].ends_with(
            "\"upstream_addr\":null,\"upstream_status\":null,\"upstream_connect_time\":null,\
             \"upstream_header_time\":null,\"upstream_response_time\":null}"
        ),
        "{log}"
    );
}

/// The value of the series `name` (with its labels) in a scrape.
fn series(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

#[test]
fn metrics_count_each_upstreams_requests_failures_header_times_and_pool() {
    let up = upstream();
    let (dead, _held) = dead_addr();
    let metrics = Arc::new(peregrine::Metrics::new());
    let (ok_url, dead_url) = (format!("http://{}", up.addr), format!("http://{dead}"));
    let server = proxy_server_with(
        &[
            (Upstream::parse(&ok_url).unwrap(), "/api/"),
            (Upstream::parse(&dead_url).unwrap(), "/down/"),
        ],
        |s| s.metrics(metrics.clone()),
    );
    let mut c = Client::connect(server.local_addr());
    for target in ["/api/hello", "/api/hello", "/api/hello", "/down/x", "/local"] {
        c.send(format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        c.response();
    }
    let text = metrics.render();
    let ok = format!("upstream=\"{ok_url}\"");
    let down = format!("upstream=\"{dead_url}\"");
    assert_eq!(series(&text, &format!("peregrine_upstream_requests_total{{{ok}}}")), 3);
    assert_eq!(
        series(&text, &format!("peregrine_upstream_requests_total{{{down}}}")),
        1
    );
    // One connection, opened once and reused twice.
    let conn = |kind: &str| format!("peregrine_upstream_connection_requests_total{{{ok},connection=\"{kind}\"}}");
    assert_eq!(series(&text, &conn("fresh")), 1);
    assert_eq!(series(&text, &conn("reused")), 2);
    assert_eq!(
        series(
            &text,
            &format!("peregrine_upstream_header_duration_seconds_count{{{ok}}}")
        ),
        3
    );
    assert_eq!(
        series(
            &text,
            &format!("peregrine_upstream_header_duration_seconds_bucket{{{ok},le=\"+Inf\"}}")
        ),
        3
    );
    assert_eq!(
        series(&text, &format!("peregrine_upstream_connections_open{{{ok}}}")),
        1
    );
    assert_eq!(
        series(&text, &format!("peregrine_upstream_connections_idle{{{ok}}}")),
        1
    );
    let failed = |url: &str, kind: &str| format!("peregrine_upstream_failures_total{{{url},kind=\"{kind}\"}}");
    assert_eq!(series(&text, &failed(&down, "connect")), 1);
    assert_eq!(series(&text, &failed(&ok, "connect")), 0);
    assert_eq!(series(&text, &failed(&down, "timeout")), 0);
}

/// A request queued for the upstream's one connection when the server
/// begins to shut down is still sent and answered once that connection
/// is free: it was taken before the shutdown (it waited for the drain's
/// end instead, then got no answer).
#[test]
fn a_request_queued_when_the_shutdown_begins_is_still_answered() {
    let up = upstream();
    let metrics = Arc::new(peregrine::Metrics::new());
    let one = Upstream::parse(&format!("http://{}", up.addr)).unwrap().max_conns(1);
    let server = proxy_server_with(&[(one, "/api/")], |s| s.metrics(metrics.clone()));
    let addr = server.local_addr();
    let held = thread::spawn(move || get(addr, "/api/held", ""));
    up.seen
        .recv_timeout(PATIENCE)
        .expect("the held request reached the upstream");
    let queued = thread::spawn(move || get(addr, "/api/hello", ""));
    // Queued: handed to the upstream's pool (counted) with its one
    // connection busy.
    let requests = format!("peregrine_upstream_requests_total{{upstream=\"http://{}\"}}", up.addr);
    let start = std::time::Instant::now();
    while series(&metrics.render(), &requests) < 2 {
        assert!(start.elapsed() < PATIENCE, "the second request was not queued");
        thread::sleep(std::time::Duration::from_millis(5));
    }
    server.shutdown_handle().shutdown();
    up.go.send(()).unwrap();
    let held = held.join().unwrap();
    assert_eq!(status_of(&held), 200, "{}", text(&held));
    let queued = queued.join().unwrap();
    assert_eq!(status_of(&queued), 200, "{}", text(&queued));
    assert!(text(&queued).ends_with("hello"), "{}", text(&queued));
}

/// The proxy's own 503 (queue full) and 504 (no answer in time) carry no
/// upstream address or text; with an error page, they carry the page,
/// with their status; the metrics count them by kind.
#[test]
fn a_full_queue_is_a_503_and_a_silent_upstream_a_504_with_the_error_page_if_any() {
    let up = upstream();
    let silent = silent_upstream();
    let metrics = Arc::new(peregrine::Metrics::new());
    let busy = Upstream::parse(&format!("http://{}", up.addr))
        .unwrap()
        .max_conns(1)
        .queue_max(0);
    let slow = Upstream::parse(&format!("http://{silent}"))
        .unwrap()
        .read_timeout(std::time::Duration::from_millis(200));
    let page = b"<h1>Back soon</h1>".to_vec();
    let server = proxy_server_with(
        &[
            (busy.clone(), "/api/"),
            (slow.clone(), "/slow/"),
            (busy.error_page(page.clone()), "/paged/"),
            (slow.error_page(page.clone()), "/slowpaged/"),
        ],
        |s| s.metrics(metrics.clone()),
    );
    // The one connection the upstream may have is held by an event stream.
    let mut held = TcpStream::connect(server.local_addr()).unwrap();
    held.set_read_timeout(Some(PATIENCE)).unwrap();
    held.write_all(b"GET /api/sse HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut got = Vec::new();
    while !text(&got).contains("data: 1") {
        let mut b = [0; 4096];
        let n = held.read(&mut b).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&b[..n]);
    }
    let full = get(server.local_addr(), "/api/hello", "");
    assert_eq!(status_of(&full), 503, "{}", text(&full));
    assert!(text(&full).contains("\r\nRetry-After: 1\r\n"), "{}", text(&full));
    assert!(
        text(&full).ends_with("\r\n\r\n503 Service Unavailable\n"),
        "{}",
        text(&full)
    );
    let timed_out = get(server.local_addr(), "/slow/x", "");
    assert_eq!(status_of(&timed_out), 504, "{}", text(&timed_out));
    assert!(
        text(&timed_out).ends_with("\r\n\r\n504 Gateway Timeout\n"),
        "{}",
        text(&timed_out)
    );
    for raw in [&full, &timed_out] {
        for addr in [up.addr, silent] {
            assert!(!text(raw).contains(&addr.port().to_string()), "{}", text(raw));
        }
    }
    // With the page: the page, with the status.
    let page_full = get(server.local_addr(), "/paged/hello", "");
    let page_slow = get(server.local_addr(), "/slowpaged/x", "");
    for (raw, status) in [(&page_full, 503), (&page_slow, 504)] {
        assert_eq!(status_of(raw), status, "{}", text(raw));
        assert!(text(raw).contains("Content-Type: text/html"), "{}", text(raw));
        assert!(text(raw).ends_with("\r\n\r\n<h1>Back soon</h1>"), "{}", text(raw));
    }
    let scrape = metrics.render();
    let kind = |url: String, kind: &str| {
        series(
            &scrape,
            &format!("peregrine_upstream_failures_total{{upstream=\"{url}\",kind=\"{kind}\"}}"),
        )
    };
    assert_eq!(kind(format!("http://{}", up.addr), "queue_full"), 2);
    assert_eq!(kind(format!("http://{silent}"), "timeout"), 2);
    up.go.send(()).unwrap();
}

#[test]
fn an_error_page_replaces_the_502_of_an_upstream_that_is_down() {
    let (dead, _held) = dead_addr();
    let up = Upstream::parse(&format!("http://{dead}"))
        .unwrap()
        .error_page(b"<p>sorry</p>".to_vec());
    let server = proxy_server_with(&[(up, "/api/")], |s| s);
    let raw = get(server.local_addr(), "/api/x", "");
    assert_eq!(status_of(&raw), 502, "{}", text(&raw));
    assert!(text(&raw).ends_with("\r\n\r\n<p>sorry</p>"), "{}", text(&raw));
    // A refusal that is the client's (400) keeps the plain page.
    let raw = get(server.local_addr(), "/api/a%2Fb", "");
    assert_eq!(status_of(&raw), 400, "{}", text(&raw));
    assert!(!text(&raw).contains("sorry"), "{}", text(&raw));
}

#[test]
fn a_head_answer_keeps_the_upstreams_content_length() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}", up.addr), "/api/");
    let mut c = Client::connect(server.local_addr());
    c.send(b"HEAD /api/hello HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response_to("HEAD");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("5"), "{:?}", r.headers);
    assert!(r.body.is_empty());
    // The connection goes on, in step.
    c.send(b"GET /api/hello HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
}

#[test]
fn a_long_answer_of_known_length_keeps_its_content_length_and_is_not_chunked() {
    const TOTAL: usize = 300_000;
    let (up, _) = firehose(TOTAL);
    let server = proxy_server(&format!("http://{up}"), "/api/");
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET /api/big HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("300000"), "{:?}", r.headers);
    assert_eq!(r.header("transfer-encoding"), None, "{:?}", r.headers);
    assert_eq!(r.body.len(), TOTAL);
    // The connection goes on.
    c.send(b"GET /local HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response().status, 200);
}

#[test]
fn past_the_workers_upstream_connection_cap_an_idle_connection_to_another_upstream_makes_room() {
    // `Limits::upstream_conns_max` bounds the connections of all
    // upstreams together (each may read 64 KiB past the output budget):
    // at 1, a request to B closes A's idle connection, and back.
    let (a, b) = (upstream(), upstream());
    let server = proxy_server_with(
        &[
            (Upstream::parse(&format!("http://{}", a.addr)).unwrap(), "/a/"),
            (Upstream::parse(&format!("http://{}", b.addr)).unwrap(), "/b/"),
        ],
        |s| {
            s.limits(peregrine::Limits {
                upstream_conns_max: 1,
                ..peregrine::Limits::default()
            })
        },
    );
    let mut c = Client::connect(server.local_addr());
    for target in ["/a/hello", "/b/hello", "/a/hello", "/a/hello"] {
        c.send(format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        let r = c.response();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]), "{target}");
    }
    assert_eq!(
        a.accepted.load(Ordering::SeqCst),
        2,
        "A's first connection closed for B's"
    );
    assert_eq!(b.accepted.load(Ordering::SeqCst), 1);
}

/// Requests pipelined behind a proxied one, in the same segment, come
/// back in order after its answer: the bytes already read are answered
/// once the proxied answer is written, without a new event.
#[test]
fn requests_pipelined_in_the_same_segment_as_a_proxied_one_are_answered_in_order() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}/", up.addr), "/up/");
    let mut c = Client::connect(server.local_addr());
    c.send(
        b"GET /up/hello HTTP/1.1\r\nHost: a\r\n\r\n\
          GET /up/echo HTTP/1.1\r\nHost: a\r\n\r\n\
          GET /local HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    let first = c.response();
    assert_eq!((first.status, &first.body[..]), (200, &b"hello"[..]));
    let second = c.response();
    assert_eq!((second.status, &second.body[..]), (201, &b""[..]));
    let third = c.response();
    assert_eq!((third.status, &third.body[..]), (200, &b"local"[..]));
    assert!(c.is_closed(), "Connection: close was asked");
}

/// A static request, a proxied one and a static one, pipelined in one
/// segment, then proxied answers that are not written in one pass
/// (`h1/respond.rs`'s `write_relayed` takes a 200 with a short body; a
/// 201, a HEAD's, a 404 and a chunked one take the general path): every
/// answer comes whole and in order, the relayed ones with this server's
/// `Server` and `Date` and without the upstream's hop-by-hop fields.
#[test]
fn a_proxied_answer_pipelined_between_static_ones_keeps_its_place_on_either_path() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}/", up.addr), "/up/");
    let mut c = Client::connect(server.local_addr());
    c.send(
        b"GET /local HTTP/1.1\r\nHost: a\r\n\r\n\
          GET /up/hello HTTP/1.1\r\nHost: a\r\n\r\n\
          GET /local HTTP/1.1\r\nHost: a\r\n\r\n\
          POST /up/echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc\
          HEAD /up/hello HTTP/1.1\r\nHost: a\r\n\r\n\
          GET /up/missing HTTP/1.1\r\nHost: a\r\n\r\n\
          GET /up/big HTTP/1.1\r\nHost: a\r\n\r\n\
          GET /up/hello HTTP/1.1\r\nHost: a\r\n\r\n\
          GET /local HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    let local = |r: &test_support::http::Resp| (r.status, r.body.clone()) == (200, b"local".to_vec());
    let hello = |r: &test_support::http::Resp, body: &[u8]| {
        assert_eq!((r.status, &r.body[..]), (200, body));
        assert_eq!(r.header("content-length"), Some("5"));
        assert_eq!(r.header("x-up"), Some("1"));
        assert_eq!(r.header("content-type"), Some("text/plain"));
        assert_eq!(r.header("server"), Some("peregrine"));
        assert!(r.header("date").is_some());
        for hop in ["connection", "keep-alive", "x-hop"] {
            assert_eq!(r.header(hop), None, "{hop}: {:?}", r.headers);
        }
    };
    assert!(local(&c.response()));
    hello(&c.response(), b"hello");
    assert!(local(&c.response()));
    let echo = c.response();
    assert_eq!((echo.status, &echo.body[..]), (201, &b"abc"[..]));
    hello(&c.response_to("HEAD"), b"");
    let missing = c.response();
    assert_eq!((missing.status, &missing.body[..]), (404, &b""[..]));
    let big = c.response();
    assert_eq!((big.status, big.body.len()), (200, 300_000));
    assert_eq!(&big.body[..3], b"aaa");
    hello(&c.response(), b"hello");
    let last = c.response();
    assert!(local(&last));
    assert!(c.is_closed(), "Connection: close was asked");
}

/// A request that arrives while a proxied answer is awaited (its read
/// event comes before the answer) is read and answered after it: the
/// connection does not take the socket for drained because its last read
/// was short.
#[test]
fn a_request_sent_while_a_proxied_answer_is_awaited_is_answered_after_it() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}/", up.addr), "/up/");
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET /up/held HTTP/1.1\r\nHost: a\r\n\r\n");
    // The upstream has the request: the client's connection waits for
    // its answer, its socket drained.
    up.seen.recv_timeout(PATIENCE).expect("the upstream got the request");
    c.send(b"GET /local HTTP/1.1\r\nHost: a\r\n\r\n");
    c.send(b"GET /up/hello HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    up.go.send(()).unwrap();
    let first = c.response();
    assert_eq!((first.status, &first.body[..]), (200, &b"held"[..]));
    let second = c.response();
    assert_eq!((second.status, &second.body[..]), (200, &b"local"[..]));
    let third = c.response();
    assert_eq!((third.status, &third.body[..]), (200, &b"hello"[..]));
    assert!(c.is_closed(), "Connection: close was asked");
}

/// A client that half-closes while its proxied answer is awaited gets the
/// answer, then the connection closes (its FIN read after the answer).
#[test]
fn a_client_that_half_closes_while_a_proxied_answer_is_awaited_gets_it_then_the_close() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}/", up.addr), "/up/");
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET /up/held HTTP/1.1\r\nHost: a\r\n\r\n");
    up.seen.recv_timeout(PATIENCE).expect("the upstream got the request");
    c.stream.shutdown(std::net::Shutdown::Write).unwrap();
    up.go.send(()).unwrap();
    let raw = c.read_to_close();
    assert_eq!(status_of(&raw), 200, "{}", text(&raw));
    assert!(raw.ends_with(b"\r\n\r\nheld"), "{}", text(&raw));
}

/// Keep-alive requests one at a time, each proxied: each waits for its
/// answer and the connection for the next request, which it reads when
/// it comes (the read after each answer is skipped only while nothing
/// has arrived).
#[test]
fn proxied_requests_one_at_a_time_on_one_connection_are_all_answered() {
    let up = upstream();
    let server = proxy_server(&format!("http://{}/", up.addr), "/up/");
    let mut c = Client::connect(server.local_addr());
    for _ in 0..20 {
        c.send(b"GET /up/hello HTTP/1.1\r\nHost: a\r\n\r\n");
        let r = c.response();
        assert_eq!((r.status, &r.body[..]), (200, &b"hello"[..]));
    }
}
