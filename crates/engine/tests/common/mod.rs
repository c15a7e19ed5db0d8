//! Helpers for end-to-end tests: start a server on a free loopback port,
//! talk to it with raw bytes, parse what comes back.

#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use peregrine::{Handler, Limits, Running, Server};

/// Longest a test waits for bytes before failing (never a pass condition).
pub const PATIENCE: Duration = Duration::from_secs(10);

pub fn start(handler: impl Handler) -> Running {
    start_with(Limits::default(), handler)
}

pub fn start_with(limits: Limits, handler: impl Handler) -> Running {
    Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .limits(limits)
        .start(handler)
        .expect("server starts")
}

/// A parsed response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
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

/// A raw HTTP/1.1 client over one connection (TCP, or TLS over it).
pub struct Client<S = TcpStream> {
    pub stream: S,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
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

    /// Reads one response to a request with the given method.
    pub fn response_to(&mut self, method: &str) -> Resp {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut r = httparse::Response::new(&mut headers);
            match r.parse(&self.buf).expect("valid response head") {
                httparse::Status::Complete(head_len) => {
                    let status = r.code.unwrap();
                    let headers: Vec<(String, String)> = r
                        .headers
                        .iter()
                        .map(|h| (h.name.to_owned(), String::from_utf8_lossy(h.value).into_owned()))
                        .collect();
                    let get = |n: &str| {
                        headers
                            .iter()
                            .find(|(k, _)| k.eq_ignore_ascii_case(n))
                            .map(|(_, v)| v.clone())
                    };
                    let bodiless = method == "HEAD" || status == 204 || status == 304 || (100..200).contains(&status);
                    let body = if bodiless {
                        self.buf.drain(..head_len);
                        Vec::new()
                    } else if let Some(len) = get("content-length") {
                        let len: usize = len.parse().expect("numeric Content-Length");
                        while self.buf.len() < head_len + len {
                            assert!(self.fill() > 0, "connection closed mid-body");
                        }
                        let body = self.buf[head_len..head_len + len].to_vec();
                        self.buf.drain(..head_len + len);
                        body
                    } else if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
                        self.buf.drain(..head_len);
                        self.read_chunked()
                    } else {
                        self.buf.drain(..head_len);
                        while self.fill() > 0 {}
                        std::mem::take(&mut self.buf)
                    };
                    return Resp { status, headers, body };
                }
                httparse::Status::Partial => {
                    assert!(
                        self.fill() > 0,
                        "connection closed before a response: {:?}",
                        String::from_utf8_lossy(&self.buf)
                    );
                }
            }
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

/// Sends `bytes` on a fresh connection and returns everything until close.
pub fn exchange(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut c = Client::connect(addr);
    c.send(bytes);
    c.read_to_close()
}

/// The status code at the start of a raw response.
pub fn status_of(raw: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(raw);
    text.get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"))
}
