//! HTTP/2 frames (RFC 9113 §4, §6): the 9-byte header, type and flag
//! constants, error codes, and writers that append frames to a buffer.

/// `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`: what every client sends first (§3.4).
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub(crate) const HEADER_LEN: usize = 9;

pub(crate) const DATA: u8 = 0x0;
pub(crate) const HEADERS: u8 = 0x1;
pub(crate) const PRIORITY: u8 = 0x2;
pub(crate) const RST_STREAM: u8 = 0x3;
pub(crate) const SETTINGS: u8 = 0x4;
pub(crate) const PUSH_PROMISE: u8 = 0x5;
pub(crate) const PING: u8 = 0x6;
pub(crate) const GOAWAY: u8 = 0x7;
pub(crate) const WINDOW_UPDATE: u8 = 0x8;
pub(crate) const CONTINUATION: u8 = 0x9;

pub(crate) const END_STREAM: u8 = 0x1;
pub(crate) const ACK: u8 = 0x1;
pub(crate) const END_HEADERS: u8 = 0x4;
pub(crate) const PADDED: u8 = 0x8;
pub(crate) const PRIORITY_FLAG: u8 = 0x20;

pub(crate) const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
pub(crate) const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub(crate) const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub(crate) const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub(crate) const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
pub(crate) const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;
/// RFC 8441 §3: the client may open WebSockets with extended CONNECT.
pub(crate) const SETTINGS_ENABLE_CONNECT_PROTOCOL: u16 = 0x8;

/// The largest flow-control window (§6.9.1).
pub(crate) const WINDOW_MAX: i64 = (1 << 31) - 1;
/// The largest stream identifier (2^31-1): a first GOAWAY names it.
pub(crate) const STREAM_ID_MAX: u32 = (1 << 31) - 1;
/// The initial window of every stream and the connection (§6.9.2).
pub(crate) const DEFAULT_WINDOW: i64 = 65_535;
/// The frame payload every endpoint must accept (§4.2).
pub(crate) const DEFAULT_FRAME_BYTES: usize = 16_384;

/// Error codes (§7), all of them though we send only some.
#[allow(dead_code)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Code {
    NoError = 0x0,
    Protocol = 0x1,
    Internal = 0x2,
    FlowControl = 0x3,
    StreamClosed = 0x5,
    FrameSize = 0x6,
    RefusedStream = 0x7,
    Cancel = 0x8,
    Compression = 0x9,
    ConnectError = 0xa,
    EnhanceYourCalm = 0xb,
}

/// A frame's header (§4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) len: usize,
    pub(crate) kind: u8,
    pub(crate) flags: u8,
    pub(crate) stream: u32,
}

impl Header {
    /// Parses the 9 bytes at the start of `b`; the reserved bit is ignored.
    pub(crate) fn parse(b: &[u8]) -> Option<Header> {
        let b: &[u8; HEADER_LEN] = b.get(..HEADER_LEN)?.try_into().ok()?;
        Some(Header {
            len: (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        })
    }
}

/// Appends a frame header.
pub(crate) fn write_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    debug_assert!(len < 1 << 24);
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
}

/// Appends a SETTINGS frame with `settings`.
pub(crate) fn write_settings(out: &mut Vec<u8>, settings: &[(u16, u32)]) {
    write_header(out, settings.len() * 6, SETTINGS, 0, 0);
    for (id, value) in settings {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

pub(crate) fn write_settings_ack(out: &mut Vec<u8>) {
    write_header(out, 0, SETTINGS, ACK, 0);
}

pub(crate) fn write_ping_ack(out: &mut Vec<u8>, payload: &[u8]) {
    write_header(out, 8, PING, ACK, 0);
    out.extend_from_slice(payload);
}

/// A PING of ours (not an acknowledgment).
pub(crate) fn write_ping(out: &mut Vec<u8>, payload: &[u8; 8]) {
    write_header(out, 8, PING, 0, 0);
    out.extend_from_slice(payload);
}

pub(crate) fn write_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    write_header(out, 4, WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

pub(crate) fn write_rst_stream(out: &mut Vec<u8>, stream: u32, code: Code) {
    write_header(out, 4, RST_STREAM, 0, stream);
    out.extend_from_slice(&(code as u32).to_be_bytes());
}

/// Appends GOAWAY with `detail` as its debug data (§6.8).
pub(crate) fn write_goaway(out: &mut Vec<u8>, last_stream: u32, code: Code, detail: &str) {
    write_header(out, 8 + detail.len(), GOAWAY, 0, 0);
    out.extend_from_slice(&last_stream.to_be_bytes());
    out.extend_from_slice(&(code as u32).to_be_bytes());
    out.extend_from_slice(detail.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_ignores_the_reserved_bit() {
        let mut out = Vec::new();
        write_header(&mut out, 0x12345, HEADERS, END_HEADERS | END_STREAM, 7);
        let h = Header::parse(&out).unwrap();
        assert_eq!(
            h,
            Header {
                len: 0x12345,
                kind: HEADERS,
                flags: 5,
                stream: 7
            }
        );
        out[5] |= 0x80;
        assert_eq!(Header::parse(&out).unwrap().stream, 7);
        assert!(Header::parse(&out[..8]).is_none());
    }
}
