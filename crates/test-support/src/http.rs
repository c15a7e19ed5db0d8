//! A raw HTTP/1.1 client: requests are bytes the test writes, responses
//! are parsed (httparse) into `Resp`. `Client` keeps one connection (TCP,
//! or TLS over it) for keep-alive and pipelining; `request` is one
//! exchange on a connection of its own, `Connection: close`.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};

use crate::PATIENCE;

/// An address nothing answers at (a dead upstream): a socket bound there
/// and not listening, so a connection to it is refused, held by the caller
/// for the test's length. A listener bound and dropped would free the
/// port: a test running beside could be given it by its own `bind(0)`, or
/// a client's connection could take it as its source port and connect to
/// itself, and the "dead" address would answer.
pub fn dead_addr() -> (SocketAddr, socket2::Socket) {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("a socket");
    socket
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .expect("bound to a port of 127.0.0.1");
    let addr = socket
        .local_addr()
        .expect("its address")
        .as_socket()
        .expect("an IP address");
    (addr, socket)
}

/// A parsed response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    /// The first field named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Whether a response to `method` with `status` has no body whatever its
/// fields say (RFC 9110 §6.4.1).
fn bodiless(method: &str, status: u16) -> bool {
    method == "HEAD" || status == 204 || status == 304 || (100..200).contains(&status)
}

/// Parses a response head at the front of `buf`: the response without its
/// body, and the head's length; or None while it is incomplete.
fn parse_head(buf: &[u8]) -> Option<(Resp, usize)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    match r.parse(buf).expect("a valid response head") {
        httparse::Status::Complete(head_len) => {
            let fields = r
                .headers
                .iter()
                .map(|h| (h.name.to_owned(), String::from_utf8_lossy(h.value).into_owned()))
                .collect();
            let resp = Resp {
                status: r.code.unwrap(),
                headers: fields,
                body: Vec::new(),
            };
            Some((resp, head_len))
        }
        httparse::Status::Partial => None,
    }
}

/// A message head from its first line and `fields` (each a line without
/// its CRLF), ending in the empty line: what a test upstream answers.
pub fn head_of(first_line: &str, fields: &[&str]) -> Vec<u8> {
    let mut h = format!("{first_line}\r\n");
    for f in fields {
        h.push_str(f);
        h.push_str("\r\n");
    }
    h.push_str("\r\n");
    h.into_bytes()
}

/// Parses one response with a Content-Length body (or none) from the front
/// of `buf`; returns it and the bytes it took, or None while incomplete.
pub fn parse(buf: &[u8], method: &str) -> Option<(Resp, usize)> {
    let (mut resp, head_len) = parse_head(buf)?;
    let status = resp.status;
    let len = match resp.header("content-length") {
        Some(len) if !bodiless(method, status) => len.parse().expect("a numeric Content-Length"),
        _ => 0,
    };
    if buf.len() < head_len + len {
        return None;
    }
    resp.body = buf[head_len..head_len + len].to_vec();
    Some((resp, head_len + len))
}

/// Sends one request on a connection of its own, with `Connection: close`
/// and `Host: t` unless `headers` name a host, and reads the response to
/// the close. A Content-Length must match the bytes that came.
pub fn request(addr: impl ToSocketAddrs, method: &str, target: &str, headers: &[(&str, &str)]) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut req = format!("{method} {target} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        req.push_str("Host: t\r\n");
    }
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let Some((mut resp, head_len)) = parse_head(&raw) else {
        panic!("{target}: an incomplete response {:?}", String::from_utf8_lossy(&raw));
    };
    resp.body = raw[head_len..].to_vec();
    if let (Some(len), false) = (resp.header("content-length"), bodiless(method, resp.status)) {
        assert_eq!(
            len.parse::<usize>().unwrap(),
            resp.body.len(),
            "{target}: Content-Length is the body's length"
        );
    }
    resp
}

/// `request` with GET and no fields.
pub fn get(addr: impl ToSocketAddrs, target: &str) -> Resp {
    request(addr, "GET", target, &[])
}

/// A raw HTTP/1.1 client over one connection (TCP, or TLS over it).
pub struct Client<S = TcpStream> {
    pub stream: S,
    buf: Vec<u8>,
}

impl Client {
    /// Connects, with Nagle off and reads timing out after `PATIENCE`.
    pub fn connect(addr: impl ToSocketAddrs) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        stream.set_nodelay(true).unwrap();
        Client::over(stream)
    }
}

impl<S: Read + Write> Client<S> {
    /// A client over a connected stream.
    pub fn over(stream: S) -> Client<S> {
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) -> &mut Self {
        self.stream.write_all(bytes).expect("send");
        self
    }

    fn fill(&mut self) -> usize {
        let mut chunk = [0u8; 65536];
        match self.stream.read(&mut chunk) {
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                n
            }
            // A TLS peer closing without close_notify reads as UnexpectedEof.
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof) => 0,
            Err(e) => panic!("read failed (timed out waiting for the server?): {e}"),
        }
    }

    /// Reads one response to a request with the given method: a body by
    /// Content-Length, chunked, or up to the close.
    pub fn response_to(&mut self, method: &str) -> Resp {
        loop {
            let Some((mut resp, head_len)) = parse_head(&self.buf) else {
                assert!(
                    self.fill() > 0,
                    "connection closed before a response: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
                continue;
            };
            resp.body = if bodiless(method, resp.status) {
                self.buf.drain(..head_len);
                Vec::new()
            } else if let Some(len) = resp.header("content-length") {
                let len: usize = len.parse().expect("numeric Content-Length");
                while self.buf.len() < head_len + len {
                    assert!(self.fill() > 0, "connection closed mid-body");
                }
                let body = self.buf[head_len..head_len + len].to_vec();
                self.buf.drain(..head_len + len);
                body
            } else if resp
                .header("transfer-encoding")
                .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
            {
                self.buf.drain(..head_len);
                self.read_chunked()
            } else {
                self.buf.drain(..head_len);
                while self.fill() > 0 {}
                std::mem::take(&mut self.buf)
            };
            return resp;
        }
    }

    pub fn response(&mut self) -> Resp {
        self.response_to("GET")
    }

    fn read_chunked(&mut self) -> Vec<u8> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                    break i;
                }
                assert!(self.fill() > 0, "closed in chunk size");
            };
            let size = usize::from_str_radix(std::str::from_utf8(&self.buf[..line_end]).unwrap(), 16).unwrap();
            self.buf.drain(..line_end + 2);
            while self.buf.len() < size + 2 {
                assert!(self.fill() > 0, "closed in chunk data");
            }
            body.extend_from_slice(&self.buf[..size]);
            assert_eq!(&self.buf[size..size + 2], b"\r\n");
            self.buf.drain(..size + 2);
            if size == 0 {
                return body;
            }
        }
    }

    /// Reads until the server closes; returns what came.
    pub fn read_to_close(&mut self) -> Vec<u8> {
        while self.fill() > 0 {}
        std::mem::take(&mut self.buf)
    }

    /// Whether the server has closed the connection (after what was sent).
    pub fn is_closed(&mut self) -> bool {
        self.fill() == 0 && self.buf.is_empty()
    }
}

/// One keep-alive connection for the allocation tests: `exchange` reads
/// into a buffer it reuses, so that it allocates nothing.
pub struct InPlace {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl InPlace {
    pub fn connect(addr: impl ToSocketAddrs) -> InPlace {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        InPlace {
            stream,
            buf: vec![0; 1 << 16],
        }
    }

    /// Sends `request` and reads its answer, a 200 whose body is
    /// `body_len` bytes: exactly one head and that body.
    pub fn exchange(&mut self, request: &[u8], body_len: usize) {
        self.stream.write_all(request).unwrap();
        let mut got = 0;
        loop {
            let n = self.stream.read(&mut self.buf[got..]).unwrap();
            assert!(n > 0, "the server closed the connection");
            got += n;
            if let Some(end) = self.buf[..got].windows(4).position(|w| w == b"\r\n\r\n") {
                if got >= end + 4 + body_len {
                    assert_eq!(got, end + 4 + body_len);
                    assert!(self.buf.starts_with(b"HTTP/1.1 200 OK\r\n"));
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_parse_whole_or_not_at_all() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: b\r\n\r\nabcHTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n";
        let (r, used) = parse(raw, "GET").unwrap();
        assert_eq!((r.status, r.header("x-a"), &r.body[..]), (200, Some("b"), &b"abc"[..]));
        // A 304 has no body whatever its Content-Length says.
        let (r, rest) = parse(&raw[used..], "GET").unwrap();
        assert_eq!((r.status, r.body.len(), used + rest), (304, 0, raw.len()));
        // Incomplete: the head, then the body.
        assert!(parse(&raw[..20], "GET").is_none());
        assert!(parse(&raw[..used - 1], "GET").is_none());
        // HEAD: no body either.
        assert_eq!(parse(&raw[..used - 3], "HEAD").unwrap().1, used - 3);
    }
}
