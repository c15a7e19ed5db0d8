//! A minimal WebSocket client for the engine's own tests (the
//! independent clients are in `websocket_clients.rs`): a handshake, masked
//! frames out, frames in.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

pub use test_support::ws::masked;

pub const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
pub const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

/// The upgrade request for `path`, with `extra` fields (complete lines).
pub fn request(path: &str, extra: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    )
}

pub struct Ws {
    pub stream: TcpStream,
    /// Bytes read past what was parsed.
    buf: Vec<u8>,
}

impl Ws {
    /// Sends `req` (and `after`, in the same write) and reads the answer's
    /// head: the client, and the head as text.
    pub fn open_with(addr: SocketAddr, req: &str, after: &[u8]) -> (Ws, String) {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(test_support::PATIENCE)).unwrap();
        stream.set_nodelay(true).unwrap();
        let mut bytes = req.as_bytes().to_vec();
        bytes.extend_from_slice(after);
        stream.write_all(&bytes).unwrap();
        let mut ws = Ws {
            stream,
            buf: Vec::new(),
        };
        let head = ws.read_head();
        (ws, head)
    }

    /// A WebSocket on `path`, its 101 checked.
    pub fn open(addr: SocketAddr, path: &str) -> Ws {
        let (ws, head) = Ws::open_with(addr, &request(path, ""), b"");
        assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
        assert!(head.contains(&format!("Sec-WebSocket-Accept: {ACCEPT}\r\n")), "{head}");
        ws
    }

    fn read_head(&mut self) -> String {
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end + 4]).into_owned();
                self.buf.drain(..end + 4);
                return head;
            }
            self.fill();
        }
    }

    fn fill(&mut self) -> usize {
        let mut chunk = [0u8; 65536];
        let n = self.stream.read(&mut chunk).unwrap();
        self.buf.extend_from_slice(&chunk[..n]);
        n
    }

    /// Sends one masked frame.
    pub fn send_frame(&mut self, b0: u8, payload: &[u8]) {
        self.stream.write_all(&masked(b0, payload)).unwrap();
    }

    pub fn send_text(&mut self, text: &str) {
        self.send_frame(0x81, text.as_bytes());
    }

    /// The next frame: its first byte and payload. `None` at the end of
    /// the stream.
    pub fn read_frame(&mut self) -> Option<(u8, Vec<u8>)> {
        loop {
            if self.buf.len() >= 2 {
                let b0 = self.buf[0];
                assert_eq!(self.buf[1] & 0x80, 0, "a server's frame is not masked");
                let (len, at) = match self.buf[1] & 0x7f {
                    126 if self.buf.len() >= 4 => (u16::from_be_bytes([self.buf[2], self.buf[3]]) as usize, 4),
                    127 if self.buf.len() >= 10 => {
                        (u64::from_be_bytes(self.buf[2..10].try_into().unwrap()) as usize, 10)
                    }
                    n @ 0..=125 => (n as usize, 2),
                    _ => (usize::MAX, 0),
                };
                if len != usize::MAX && self.buf.len() >= at + len {
                    let payload = self.buf[at..at + len].to_vec();
                    self.buf.drain(..at + len);
                    return Some((b0, payload));
                }
            }
            if self.fill() == 0 {
                return None;
            }
        }
    }

    /// The next data frame's text (pings are answered by nobody here).
    pub fn read_text(&mut self) -> String {
        let (b0, payload) = self.read_frame().expect("a frame");
        assert_eq!(b0, 0x81, "a text frame: {payload:?}");
        String::from_utf8(payload).unwrap()
    }

    /// Reads until the server's Close: its code.
    pub fn read_close(&mut self) -> u16 {
        loop {
            match self.read_frame() {
                Some((0x88, p)) if p.len() >= 2 => return u16::from_be_bytes([p[0], p[1]]),
                Some((0x88, _)) => return 1005,
                Some(_) => continue,
                None => panic!("the stream ended without a Close"),
            }
        }
    }

    /// Reads to the end of the stream: true if it came (no hang).
    pub fn read_to_end(&mut self) -> bool {
        let mut rest = Vec::new();
        self.stream.read_to_end(&mut rest).is_ok()
    }
}
