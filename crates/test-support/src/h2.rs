//! An HTTP/2 client (cleartext, prior knowledge) for the allocation tests:
//! it sends GETs whose heads the test encoded once, and reads frames until
//! their streams end, in buffers it reuses, so that once warm it allocates
//! nothing itself and every allocation counted is the server's.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types (RFC 9113 §6).
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

// Flags.
pub const END_STREAM: u8 = 0x1;
/// SETTINGS and PING: an acknowledgment.
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;

// Error codes (RFC 9113 §7).
pub const NO_ERROR: u32 = 0x0;
pub const REFUSED_STREAM: u32 = 0x7;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// A frame as the tests read it.
#[derive(Debug)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The error code of a GOAWAY or RST_STREAM.
    pub fn code(&self) -> u32 {
        let at = if self.kind == GOAWAY { 4 } else { 0 };
        u32::from_be_bytes(self.payload[at..at + 4].try_into().unwrap())
    }

    /// The `:status` of a response HEADERS frame (the server's encoder
    /// indexes common statuses and writes the others as literals).
    pub fn status(&self) -> u16 {
        match self.payload[0] {
            0x88 => 200,
            0x89 => 204,
            0x8a => 206,
            0x8b => 304,
            0x8c => 400,
            0x8d => 404,
            0x8e => 500,
            0x08 => std::str::from_utf8(&self.payload[2..5]).unwrap().parse().unwrap(),
            b => panic!("unexpected first byte of a response head: {b:#x}"),
        }
    }
}

/// One frame's bytes: the 9-byte header (RFC 9113 §4.1), then `payload`.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Takes the first frame out of `buf` if it is whole there.
pub fn take_frame(buf: &mut Vec<u8>) -> Option<Frame> {
    if buf.len() < 9 {
        return None;
    }
    let len = (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
    if buf.len() < 9 + len {
        return None;
    }
    let f = Frame {
        kind: buf[3],
        flags: buf[4],
        stream: u32::from_be_bytes(buf[5..9].try_into().unwrap()) & 0x7fff_ffff,
        payload: buf[9..9 + len].to_vec(),
    };
    buf.drain(..9 + len);
    Some(f)
}

/// A GET's header block: `:method GET`, `:scheme http`, `path` and
/// `authority`, as HPACK literals without indexing of static-table names
/// (so that the server's decoder does the same work every time).
pub fn get_head(path: &str, authority: &str) -> Vec<u8> {
    let mut head = Vec::new();
    for (index, value) in [(2u8, "GET"), (6, "http"), (4, path), (1, authority)] {
        head.push(index);
        head.push(u8::try_from(value.len()).expect("a short value"));
        head.extend_from_slice(value.as_bytes());
    }
    head
}

/// One connection; see the module's documentation.
pub struct Client {
    stream: TcpStream,
    /// Frames read and not yet looked at.
    pending: Vec<u8>,
    buf: Vec<u8>,
    batch: Vec<u8>,
    next_id: u32,
}

impl Client {
    /// Connects, and sends the preface with windows so large (2^31-1 for
    /// streams, nearly that for the connection) that the test never has
    /// to send WINDOW_UPDATE.
    pub fn connect(addr: SocketAddr) -> Client {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        stream.set_read_timeout(Some(crate::PATIENCE)).unwrap();
        let mut hello = PREFACE.to_vec();
        // SETTINGS_INITIAL_WINDOW_SIZE = 2^31-1, then a WINDOW_UPDATE on
        // the connection.
        hello.extend_from_slice(&[0, 0, 6, 0x4, 0, 0, 0, 0, 0, 0, 4, 0x7f, 0xff, 0xff, 0xff]);
        hello.extend_from_slice(&[0, 0, 4, 0x8, 0, 0, 0, 0, 0, 0x7f, 0xff, 0, 0]);
        stream.write_all(&hello).unwrap();
        Client {
            stream,
            pending: Vec::with_capacity(1 << 20),
            buf: vec![0; 1 << 16],
            batch: Vec::with_capacity(16 * 64),
            next_id: 1,
        }
    }

    /// Sends `n` requests in one write, the `i`th with `heads[i %
    /// heads.len()]` (each under 256 bytes), and reads until all `n`
    /// streams have ended. A GOAWAY or RST_STREAM fails the test.
    pub fn exchange(&mut self, heads: &[Vec<u8>], n: usize) {
        self.batch.clear();
        for i in 0..n {
            let head = &heads[i % heads.len()];
            let len = u8::try_from(head.len()).expect("a head under 256 bytes");
            self.batch
                .extend_from_slice(&[0, 0, len, HEADERS, END_STREAM | END_HEADERS]);
            self.batch.extend_from_slice(&self.next_id.to_be_bytes());
            self.batch.extend_from_slice(head);
            self.next_id += 2;
        }
        self.stream.write_all(&self.batch).unwrap();
        let mut ended = 0;
        while ended < n {
            while self.pending.len() >= 9 {
                let p = &self.pending;
                let len = (usize::from(p[0]) << 16) | (usize::from(p[1]) << 8) | usize::from(p[2]);
                if p.len() < 9 + len {
                    break;
                }
                let (kind, flags) = (p[3], p[4]);
                assert!(
                    kind != GOAWAY && kind != RST_STREAM,
                    "GOAWAY or RST_STREAM: {:?}",
                    &p[..9 + len]
                );
                // DATA or HEADERS with END_STREAM.
                if kind <= HEADERS && flags & END_STREAM != 0 {
                    ended += 1;
                }
                self.pending.drain(..9 + len);
            }
            if ended < n {
                let got = self.stream.read(&mut self.buf).unwrap();
                assert!(got > 0, "the server closed the connection");
                self.pending.extend_from_slice(&self.buf[..got]);
            }
        }
    }
}
