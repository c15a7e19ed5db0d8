//! End-to-end HTTP/1.1 behaviour over a real loopback socket.

mod common;

use std::io::Write;

use common::{exchange, start, start_with, status_of, Client};
use peregrine::{Body, FileRange, Limits, Request, Response, Router};

/// Echoes what it saw, so a test can check parsing end to end.
fn echo(req: &Request<'_>) -> Response {
    let text = format!(
        "{} {} path={} query={:?} host={:?} body={}",
        req.method(),
        req.version().as_str(),
        req.path(),
        req.query(),
        req.host(),
        String::from_utf8_lossy(req.body())
    );
    Response::text(text)
}

#[test]
fn keep_alive_serves_many_requests_on_one_connection() {
    let server = start(echo);
    let mut c = Client::connect(server.local_addr());
    for i in 0..20 {
        c.send(format!("GET /n/{i} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        let r = c.response();
        assert_eq!(r.status, 200);
        assert!(r.text().contains(&format!("path=/n/{i}")), "{}", r.text());
        assert_eq!(r.header("connection"), None);
        assert!(r.header("date").is_some_and(|d| d.ends_with(" GMT")));
    }
}

/// A prepared answer's header block is let go once the answer is queued
/// (held, it would keep an archive generation's map alive): the head
/// cache holds the block weakly, nothing else keeps it.
#[test]
fn a_prepared_answers_block_is_released_after_its_answer() {
    use std::sync::Arc;
    let buf: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(b"ETag: \"x\"\r\nhi".to_vec());
    let held = buf.clone();
    let server = start(move |_: &Request<'_>| {
        let lines = peregrine::SharedBytes::slice(buf.clone(), 0..11).unwrap();
        Response::prepared_beside(200, peregrine::HeaderBlock::from_lines(lines).unwrap(), 11..13)
    });
    let mut c = Client::connect(server.local_addr());
    for _ in 0..4 {
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        let r = c.response();
        assert_eq!(
            (r.status, r.text(), r.header("etag")),
            (200, "hi".to_string(), Some("\"x\""))
        );
        // Ours and the handler's: none left in an answered response.
        assert_eq!(Arc::strong_count(&held), 2);
    }
}

#[test]
fn pipelined_requests_get_answers_in_order() {
    let server = start(echo);
    let mut c = Client::connect(server.local_addr());
    let mut batch = Vec::new();
    for i in 0..64 {
        batch.extend_from_slice(format!("GET /{i} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
    }
    batch.extend_from_slice(b"POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
    batch.extend_from_slice(
        b"POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    );
    batch.extend_from_slice(b"GET /last HTTP/1.1\r\nHost: x\r\n\r\n");
    c.send(&batch);
    for i in 0..64 {
        assert!(c.response().text().contains(&format!("path=/{i} ")));
    }
    assert!(c
        .response()
        .text()
        .ends_with("path=/body query=None host=Some(\"x\") body=hello"));
    assert!(c.response().text().ends_with("body=abc"));
    assert!(c.response().text().contains("path=/last"));
}

#[test]
fn requests_split_into_single_bytes_are_reassembled() {
    let server = start(echo);
    let mut c = Client::connect(server.local_addr());
    let req = b"POST /slow?q=1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4;e=1\r\nwxyz\r\n1\r\n!\r\n0\r\nT: v\r\n\r\n";
    for b in req {
        c.send(&[*b]);
    }
    let r = c.response();
    assert!(
        r.text()
            .ends_with("path=/slow query=Some(\"q=1\") host=Some(\"x\") body=wxyz!"),
        "{}",
        r.text()
    );
}

#[test]
fn large_bodies_survive_partial_reads_and_writes() {
    let big: &'static [u8] = Box::leak(vec![b'z'; 3 << 20].into_boxed_slice());
    let server = start_with(
        Limits {
            body_bytes_max: 4 << 20,
            ..Limits::default()
        },
        move |req: &Request<'_>| {
            if req.method() == "POST" {
                Response::text(format!("got {}", req.body().len()))
            } else {
                Response::bytes("application/octet-stream", big)
            }
        },
    );
    let mut c = Client::connect(server.local_addr());
    let body = vec![b'a'; 2 << 20];
    c.send(format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes());
    c.send(&body);
    assert_eq!(c.response().text(), format!("got {}", 2 << 20));
    // A 3 MiB response is larger than the socket buffer: several writes.
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().body.len(), 3 << 20);
    assert_eq!(c.response().body, big);
}

#[test]
fn head_gets_the_headers_of_get_and_no_body() {
    let server = start(|_: &Request<'_>| Response::text("Hello, World!"));
    let mut c = Client::connect(server.local_addr());
    c.send(b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let head = c.response_to("HEAD");
    assert_eq!(head.header("content-length"), Some("13"));
    assert!(head.body.is_empty());
    // If HEAD had leaked a body, this would read it instead of the GET.
    assert_eq!(c.response().text(), "Hello, World!");
}

#[test]
fn an_error_answering_head_has_no_body_either() {
    let server = start(echo);
    // The head is HEAD with a chunked body that turns out malformed: the
    // 400 that answers it must still carry no body (RFC 9110 §9.3.2).
    let raw = exchange(
        server.local_addr(),
        b"HEAD / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    );
    let text = String::from_utf8_lossy(&raw);
    assert_eq!(status_of(&raw), 400, "{text}");
    assert!(text.contains("\r\nContent-Length: "), "{text}");
    assert!(text.ends_with("\r\n\r\n"), "a body followed the head: {text}");
}

/// The codec notes which fields a file handler reads a request may carry:
/// none for a head without them (the handler skips its pass), each for a
/// head with it, in any case, through the plain tokeniser and httparse (a
/// value with obs-text), over one keep-alive connection.
#[test]
fn a_request_says_which_fields_a_handler_looks_for_it_may_carry() {
    use peregrine::FieldNames as N;
    let server = start(|req: &Request<'_>| {
        let names = [N::ACCEPT_ENCODING, N::RANGE, N::IF_NONE_MATCH, N::IF_MODIFIED_SINCE];
        Response::text(format!("{:?}", names.map(|n| req.may_carry(n))))
    });
    let mut c = Client::connect(server.local_addr());
    let cases: [(&[u8], &str); 4] = [
        (
            b"GET / HTTP/1.1\r\nHost: x\r\nUser-Agent: t\r\n\r\n",
            "[false, false, false, false]",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: x\r\nRANGE: bytes=0-1\r\naccept-encoding: gzip\r\n\r\n",
            "[true, true, false, false]",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: x\r\nX: \xff\r\nIf-None-Match: \"a\"\r\n\r\n",
            "[false, false, true, false]",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: x\r\nif-modified-since: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n",
            "[false, false, false, true]",
        ),
    ];
    for (head, want) in cases {
        c.send(head);
        assert_eq!(c.response().text(), want, "{:?}", String::from_utf8_lossy(head));
    }
}

#[test]
fn absolute_form_targets_keep_their_query() {
    let server = start(|req: &Request<'_>| Response::text(format!("{} {:?}", req.path(), req.query())));
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET http://x?a=1 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().text(), "/ Some(\"a=1\")");
}

#[test]
fn http10_closes_unless_keep_alive_is_asked_for() {
    let server = start(echo);
    let raw = exchange(server.local_addr(), b"GET /old HTTP/1.0\r\n\r\n");
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("\r\nConnection: close\r\n"));
    assert!(text.ends_with("GET HTTP/1.0 path=/old query=None host=None body="));

    let mut c = Client::connect(server.local_addr());
    c.send(b"GET /1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let r = c.response();
    assert_eq!(r.header("connection"), Some("keep-alive"));
    c.send(b"GET /2 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert!(c.response().text().contains("path=/2"));
}

#[test]
fn connection_close_is_honoured_after_the_response() {
    let server = start(echo);
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = c.response();
    assert_eq!(r.header("connection"), Some("close"));
    assert!(
        c.is_closed(),
        "the request after Connection: close must not be answered"
    );
}

#[test]
fn absolute_form_targets_take_their_host_from_the_target() {
    let server = start(echo);
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET http://example.org:81/p/q?x=y HTTP/1.1\r\nHost: ignored\r\n\r\n");
    assert!(c
        .response()
        .text()
        .contains("path=/p/q query=Some(\"x=y\") host=Some(\"example.org:81\")"));
}

#[test]
fn expect_100_continue_gets_an_interim_response_before_the_body() {
    let server = start(echo);
    let mut c = Client::connect(server.local_addr());
    c.send(b"PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
    let interim = c.response();
    assert_eq!(interim.status, 100);
    c.send(b"data");
    assert!(c.response().text().ends_with("body=data"));
}

#[test]
fn expect_100_continue_with_a_body_too_large_gets_413_without_waiting() {
    let server = start_with(
        Limits {
            body_bytes_max: 10,
            ..Limits::default()
        },
        echo,
    );
    let raw = exchange(
        server.local_addr(),
        b"PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\n",
    );
    assert_eq!(status_of(&raw), 413);
}

#[test]
fn malformed_requests_get_a_4xx_or_5xx_and_a_close() {
    let server = start_with(
        Limits {
            uri_bytes_max: 200,
            head_bytes_max: 1024,
            body_bytes_max: 100,
            ..Limits::default()
        },
        echo,
    );
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "u".repeat(300));
    let big_head = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "h".repeat(2000));
    let table: Vec<(&[u8], u16)> = vec![
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n",
            501,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\tchunked\x0b\r\n\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;\x01\r\nabc\r\n0\r\n\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n65\r\n",
            413,
        ),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n", 413),
        (b"GET / HTTP/1.1\r\nHost: x\rY: z\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n", 400),
        (b"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET /a#b HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        (b"GET / HTTP/1.1\r\nHost: x\r\nExpect: nothing\r\n\r\n", 417),
        (long_uri.as_bytes(), 414),
        (big_head.as_bytes(), 431),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400),
    ];
    for (bytes, want) in table {
        let raw = exchange(server.local_addr(), bytes);
        let text = String::from_utf8_lossy(&raw);
        assert_eq!(status_of(&raw), want, "{:?} → {text}", String::from_utf8_lossy(bytes));
        assert!(text.contains("\r\nConnection: close\r\n"), "{text}");
        // The error page names the problem.
        let body = text.split_once("\r\n\r\n").unwrap().1;
        assert!(body.starts_with(&format!("{want} ")), "{body}");
    }
    // After all that, the server still answers.
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().status, 200);
}

#[test]
fn a_bare_lf_in_a_head_gets_one_400_and_a_close_not_a_smuggled_request() {
    let server = start(echo);
    // A front end reading the LF as part of Dummy's value sees no
    // Content-Length and forwards the hidden request for /admin.
    let smuggle = b"GET / HTTP/1.1\r\nHost: localhost\r\nDummy: x\nContent-Length: 23\r\n\r\n\
                    GET / HTTP/1.1\r\nDummy: GET /admin HTTP/1.1\r\nHost: localhost\r\n\r\n";
    // Here the server would otherwise wait for a chunked body.
    let waits = b"POST / HTTP/1.1\r\nHost: x\r\nx:x\nTransfer-Encoding: chunked\r\n\r\n";
    for bytes in [&smuggle[..], waits, b"GET / HTTP/1.1\nHost: x\r\n\r\n"] {
        let raw = exchange(server.local_addr(), bytes);
        let text = String::from_utf8_lossy(&raw);
        assert_eq!(status_of(&raw), 400, "{text}");
        assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{text}");
        assert!(!text.contains("/admin"), "{text}");
        assert!(text.contains("bare LF"), "{text}");
    }
}

#[test]
fn unknown_methods_get_501_and_a_malformed_connect_target_400() {
    let server = start(echo);
    // A method outside IANA's registry is answered 501 by the engine (a
    // plain handler does not take it) on a connection that goes on.
    let mut c = Client::connect(server.local_addr());
    for bytes in [
        &b"ANNOUNCE / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n",
    ] {
        c.send(bytes);
        assert_eq!(c.response().status, 501, "{}", String::from_utf8_lossy(bytes));
    }
    c.send(b"GET /after HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().status, 200);
    let table: &[(&[u8], u16)] = &[
        (b"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n", 501),
        (b"CONNECT x HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"CONNECT /x HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ];
    for (bytes, want) in table {
        let raw = exchange(server.local_addr(), bytes);
        assert_eq!(status_of(&raw), *want, "{}", String::from_utf8_lossy(&raw));
    }
    // A registered method the handler does not single out still reaches it.
    let mut c = Client::connect(server.local_addr());
    c.send(b"PROPFIND /dav HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 200);
    assert!(r.text().starts_with("PROPFIND HTTP/1.1 path=/dav"), "{}", r.text());
}

#[test]
fn an_error_response_reaches_the_client_even_with_unread_input_behind_it() {
    let server = start(echo);
    let mut c = Client::connect(server.local_addr());
    // The bad request is followed by more bytes the server will never parse;
    // closing with them unread would reset the connection and lose the 400.
    let mut bytes = b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n".to_vec();
    bytes.extend(std::iter::repeat_n(b'x', 200_000));
    let _ = c.stream.write_all(&bytes);
    let raw = c.read_to_close();
    assert_eq!(status_of(&raw), 400);
}

#[test]
fn bodies_of_every_kind_are_framed_correctly() {
    let dir = std::env::temp_dir().join(format!("peregrine-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let small = dir.join("small.txt");
    let large = dir.join("large.bin");
    std::fs::write(&small, b"small file").unwrap();
    let large_bytes: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(&large, &large_bytes).unwrap();
    let shared: std::sync::Arc<dyn AsRef<[u8]> + Send + Sync> = std::sync::Arc::new(large_bytes.clone());
    let (small2, large2) = (small.clone(), large.clone());
    let router = Router::new()
        .get("/static", |_: &Request<'_>| Response::text("static"))
        .get("/owned", |_: &Request<'_>| Response::text(String::from("owned")))
        .get("/empty", |_: &Request<'_>| Response::new(200))
        .get("/nocontent", |_: &Request<'_>| Response::new(204))
        .get("/shared", move |_: &Request<'_>| {
            Response::bytes(
                "application/octet-stream",
                peregrine::SharedBytes::slice(shared.clone(), 100..200_100).unwrap(),
            )
        })
        .get("/small-file", move |_: &Request<'_>| {
            Response::text(Body::File(
                FileRange::whole(std::fs::File::open(&small2).unwrap()).unwrap(),
            ))
        })
        .get("/large-file", move |_: &Request<'_>| {
            let f = std::sync::Arc::new(std::fs::File::open(&large2).unwrap());
            Response::bytes("application/octet-stream", FileRange::new(f, 10, 900_000))
        })
        .get("/stream", |_: &Request<'_>| {
            let chunks = vec![b"one ".to_vec(), Vec::new(), b"two ".to_vec(), b"three".to_vec()];
            Response::text(Body::Stream(Box::new(chunks.into_iter())))
        });
    let server = start(router);
    let mut c = Client::connect(server.local_addr());
    let mut get = |path: &str| {
        c.send(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        c.response()
    };
    assert_eq!(get("/static").text(), "static");
    assert_eq!(get("/owned").text(), "owned");
    let empty = get("/empty");
    assert_eq!((empty.header("content-length"), empty.body.len()), (Some("0"), 0));
    let nc = get("/nocontent");
    assert_eq!((nc.status, nc.header("content-length")), (204, None));
    assert_eq!(get("/shared").body, &large_bytes[100..200_100]);
    assert_eq!(get("/small-file").text(), "small file");
    assert_eq!(get("/large-file").body, &large_bytes[10..900_010]);
    let streamed = get("/stream");
    assert_eq!(streamed.header("transfer-encoding"), Some("chunked"));
    assert_eq!(streamed.text(), "one two three");
    assert_eq!(get("/static").text(), "static");
    // HTTP/1.0 gets the stream delimited by close.
    let raw = exchange(server.local_addr(), b"GET /stream HTTP/1.0\r\n\r\n");
    assert!(String::from_utf8_lossy(&raw).ends_with("\r\n\r\none two three"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_that_shrinks_during_sendfile_closes_the_connection() {
    let dir = std::env::temp_dir().join(format!("peregrine-shrink-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("f");
    std::fs::write(&path, vec![b'q'; 100_000]).unwrap();
    let p2 = path.clone();
    let server = start(move |_: &Request<'_>| {
        let f = std::sync::Arc::new(std::fs::File::open(&p2).unwrap());
        // Claims more than the file holds, as if it shrank after the stat.
        Response::bytes("application/octet-stream", FileRange::new(f, 0, 200_000))
    });
    let raw = exchange(server.local_addr(), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(String::from_utf8_lossy(&raw[..head_end]).contains("Content-Length: 200000"));
    assert_eq!(
        raw.len() - head_end,
        100_000,
        "the connection closes after what the file had"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn router_gives_404_405_and_params() {
    let router = Router::new()
        .get("/users/:id", |r: &Request<'_>| {
            Response::text(format!("user {}", r.param("id").unwrap()))
        })
        .post("/users", |_: &Request<'_>| Response::new(201));
    let server = start(router);
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET /users/42 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().text(), "user 42");
    c.send(b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().status, 404);
    c.send(b"GET /users HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = c.response();
    assert_eq!((r.status, r.header("allow")), (405, Some("POST, OPTIONS")));
    c.send(b"HEAD /users/7 HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = c.response_to("HEAD");
    assert_eq!((r.status, r.header("content-length")), (200, Some("6")));
}

#[test]
fn a_panicking_handler_gets_a_500_and_the_worker_survives() {
    let server = start(|req: &Request<'_>| {
        if req.path() == "/panic" {
            panic!("handler bug (expected by this test)");
        }
        Response::text("fine")
    });
    let raw = exchange(server.local_addr(), b"GET /panic HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status_of(&raw), 500);
    let mut c = Client::connect(server.local_addr());
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().text(), "fine");
}

/// Bytes whose drop panics: a response part that fails while the engine
/// queues the answer (the body, dropped once copied out) or after (a
/// header block, dropped with the response).
struct PanicOnDrop(&'static [u8]);

impl AsRef<[u8]> for PanicOnDrop {
    fn as_ref(&self) -> &[u8] {
        self.0
    }
}

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("drop bug (expected by this test)");
        }
    }
}

#[test]
fn a_body_whose_drop_panics_gets_one_500_and_nothing_of_the_answer_before_it() {
    let server = start(|_: &Request<'_>| {
        Response::text(Body::Shared(peregrine::SharedBytes::new(std::sync::Arc::new(
            PanicOnDrop(b"partial answer"),
        ))))
    });
    let raw = exchange(server.local_addr(), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let text = String::from_utf8_lossy(&raw);
    assert_eq!(status_of(&raw), 500, "{text}");
    assert_eq!(text.matches("HTTP/1.1").count(), 1, "{text}");
    assert!(!text.contains("partial answer"), "{text}");
}

#[test]
fn a_header_block_whose_drop_panics_after_the_answer_closes_the_connection() {
    let server = start(|_: &Request<'_>| {
        let lines = peregrine::SharedBytes::new(std::sync::Arc::new(PanicOnDrop(b"X-Block: 1\r\n")));
        Response::text("whole answer").with_header_block(peregrine::HeaderBlock::from_lines(lines).unwrap())
    });
    // Pipelined: the first answer goes whole, then the connection closes.
    let raw = exchange(
        server.local_addr(),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    let text = String::from_utf8_lossy(&raw);
    assert_eq!(status_of(&raw), 200, "{text}");
    assert_eq!(text.matches("HTTP/1.1").count(), 1, "{text}");
    assert!(text.ends_with("whole answer"), "{text}");
}

#[test]
fn a_response_with_an_injected_header_becomes_a_500() {
    let server = start(|_: &Request<'_>| Response::text("x").with_header("X-Evil", "a\r\nSet-Cookie: b"));
    let raw = exchange(server.local_addr(), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status_of(&raw), 500);
    assert!(!String::from_utf8_lossy(&raw).contains("Set-Cookie"));
}

#[test]
fn several_workers_and_addresses_all_answer() {
    let server = peregrine::Server::new()
        .bind("127.0.0.1:0")
        .bind("127.0.0.1:0")
        .workers(3)
        .start(|_: &Request<'_>| Response::text("hi"))
        .unwrap();
    assert_eq!(server.local_addrs().len(), 2);
    for addr in server.local_addrs() {
        for _ in 0..10 {
            let mut c = Client::connect(*addr);
            c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
            assert_eq!(c.response().text(), "hi");
        }
    }
    server.shutdown();
    server.join().unwrap();
}

#[test]
fn binding_a_port_in_use_is_a_clear_error() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = holder.local_addr().unwrap();
    let err = peregrine::Server::new()
        .bind(addr)
        .start(|_: &Request<'_>| Response::text(""))
        .unwrap_err();
    assert!(err.is_bind());
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
}

/// A HEAD refused while its head is parsed (two Host fields, a body over
/// the limit) gets the error's head and no body (RFC 9110 §9.3.2), as one
/// refused later does.
#[test]
fn a_head_request_refused_before_its_head_parsed_gets_no_body() {
    let server = start(echo);
    for request in [
        &b"HEAD / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"[..],
        b"HEAD / HTTP/1.1\r\nHost: a\r\nContent-Length: 5000000000\r\n\r\n",
    ] {
        let raw = exchange(server.local_addr(), request);
        let text = String::from_utf8_lossy(&raw);
        assert!(status_of(&raw) >= 400, "{text}");
        assert!(text.ends_with("\r\n\r\n"), "a body after the head: {text:?}");
    }
}

/// A handler's `peregrine::now()` is its worker loop's time: the same for
/// both reads within one request (a clock read would differ), not after the
/// request arrived, and not before the server started.
#[test]
fn a_handler_reads_the_loop_time_from_peregrine_now() {
    let started = std::time::Instant::now();
    let server = start(move |_: &Request<'_>| {
        let (a, b) = (peregrine::now(), peregrine::now());
        let fresh = std::time::Instant::now();
        Response::text(format!(
            "same={} not_after={} not_before={}",
            a == b,
            a <= fresh,
            a >= started
        ))
    });
    let mut c = Client::connect(server.local_addr());
    for _ in 0..3 {
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        let r = c.response();
        assert_eq!(r.text(), "same=true not_after=true not_before=true");
    }
}

/// A route table with no route that takes a body: every POST is 405.
fn get_only() -> Router {
    Router::new().get("/", |_: &Request<'_>| Response::text("home"))
}

#[test]
fn a_body_nobody_reads_is_answered_at_its_head_and_the_connection_lives_on() {
    let server = start(get_only());
    let mut c = Client::connect(server.local_addr());
    // The 405 comes before any byte of the announced 1 MiB.
    c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 405);
    assert_eq!(r.header("connection"), None, "kept alive");
    // The body is read and thrown away; the next request is answered.
    c.send(&vec![b'x'; 1 << 20]);
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().text(), "home");
}

#[test]
fn a_body_nobody_reads_over_discard_bytes_max_closes_after_its_answer() {
    let limits = Limits {
        discard_bytes_max: 4096,
        ..Limits::default()
    };
    let server = start_with(limits, get_only());
    let mut c = Client::connect(server.local_addr());
    c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 405);
    assert_eq!(r.header("connection"), Some("close"));
    // The answer is not destroyed by a reset while the client still sends.
    let _ = c.stream.write_all(&[b'x'; 64 * 1024]);
    c.read_to_close();
}

#[test]
fn connections_past_conns_per_ip_max_are_closed_at_accept() {
    let limits = Limits {
        conns_per_ip_max: 3,
        ..Limits::default()
    };
    let server = start_with(limits, get_only());
    let addr = server.local_addr();
    let mut open: Vec<Client> = (0..3).map(|_| Client::connect(addr)).collect();
    for c in &mut open {
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(c.response().text(), "home");
    }
    let mut fourth = Client::connect(addr);
    let _ = fourth.stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(fourth.read_to_close().is_empty(), "closed without an answer");
    // One leaves: its place is free again.
    drop(open.pop());
    let mut answered = false;
    for _ in 0..100 {
        let mut c = Client::connect(addr);
        let _ = c
            .stream
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        if !c.read_to_close().is_empty() {
            answered = true;
            break;
        }
        // The server has not seen the close yet.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(answered, "the freed place was never given again");
}

/// A request refused before a handler saw it is logged with the bytes of
/// the error body sent (as HTTP/2 and HTTP/3 log theirs), not 0.
#[test]
fn a_refused_request_is_logged_with_its_error_body_bytes() {
    let dir = std::env::temp_dir().join(format!("peregrine-h1-refused-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("access.log");
    let limits = Limits {
        body_bytes_max: 1000,
        ..Limits::default()
    };
    let server = peregrine::Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .limits(limits)
        .access_log(peregrine::AccessLog::File(path.clone()))
        .access_log_format(peregrine::LogFormat::Json)
        .start(echo)
        .unwrap();
    let raw = exchange(
        server.local_addr(),
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n",
    );
    let answer = String::from_utf8_lossy(&raw);
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    assert_eq!(body, "413 Content Too Large: request body too large\n");
    server.shutdown();
    server.join().unwrap();
    let log = std::fs::read_to_string(&path).unwrap();
    let expected = format!("\"status\":413,\"bytes\":{},", body.len());
    assert!(log.contains(&expected), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
