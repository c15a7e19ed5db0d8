//! Queueing one HTTP/1.1 response: its head into the output buffer, its
//! body inline (small) or as the output's tail (large, sent by the driver
//! with writev or sendfile, or one chunk at a time).

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::codec::write::{self as wire, BodyFraming, ConnField};
use crate::codec::Version;
use crate::conn::buffers::{Output, Tail};
use crate::limits::INLINE_BODY_BYTES_MAX;
use crate::response::{Body, Response, SharedBytes};

/// What was sent, for the log and the connection state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sent {
    pub(crate) status: u16,
    pub(crate) body_bytes: u64,
    pub(crate) keep_alive: bool,
}

/// Queues a response: its head, and its body inline or as the tail.
/// `extra_fields` (complete `Name: value\r\n` lines, from the transport)
/// go at the end of the head unless the handler set the same field.
pub(crate) fn write_response(
    date: &[u8],
    out: &mut Output,
    mut resp: Response,
    head_only: bool,
    version: Version,
    keep_alive: bool,
    extra_fields: &[u8],
) -> Sent {
    if let Some(why) = resp.invalid {
        crate::log::error(format_args!(
            "handler returned an invalid response ({why}); answering 500"
        ));
        resp = Response::error(500).with_close();
    }
    let status = resp.status;
    let bodiless = status == 204 || status == 304;
    let mut keep_alive = keep_alive && !resp.close;
    let framing = match resp.body.len() {
        _ if bodiless => BodyFraming::Bodiless,
        Some(n) => BodyFraming::Length(n),
        None if version == Version::Http11 => BodyFraming::Chunked,
        None => {
            keep_alive = false;
            BodyFraming::Close
        }
    };
    let conn = match (keep_alive, version) {
        (false, _) => ConnField::Close,
        (true, Version::Http10) => ConnField::KeepAlive,
        (true, Version::Http11 | Version::Http2 | Version::Http3) => ConnField::Omit,
    };
    let head_start = out.buf.len();
    wire::write_head(&mut out.buf, &resp, date, framing, conn);
    if !extra_fields.is_empty() {
        let name = extra_fields.split(|&b| b == b':').next().unwrap_or_default();
        let given = std::str::from_utf8(name).is_ok_and(|name| resp.header(name).is_some());
        if !given {
            // Before the blank line that ends the head.
            out.buf.truncate(out.buf.len() - 2);
            out.buf.extend_from_slice(extra_fields);
            out.buf.extend_from_slice(b"\r\n");
        }
    }
    let body_bytes = match framing {
        BodyFraming::Length(n) if !head_only => n,
        _ => 0,
    };
    let sent = Sent {
        status,
        body_bytes,
        keep_alive,
    };
    if head_only || bodiless {
        return sent;
    }
    match resp.body {
        Body::Empty => {}
        Body::Static(b) if b.len() <= INLINE_BODY_BYTES_MAX => out.buf.extend_from_slice(b),
        Body::Static(b) => {
            out.tail = Some(Tail::Shared {
                bytes: SharedBytes::new(Arc::new(b)),
                pos: 0,
            })
        }
        Body::Bytes(b) if b.len() <= INLINE_BODY_BYTES_MAX => out.buf.extend_from_slice(&b),
        Body::Bytes(b) => out.tail = Some(Tail::Bytes { data: b, pos: 0 }),
        Body::Shared(s) if s.range.len() <= INLINE_BODY_BYTES_MAX => out.buf.extend_from_slice(s.as_slice()),
        Body::Shared(s) => out.tail = Some(Tail::Shared { bytes: s, pos: 0 }),
        Body::File(f) if f.len <= INLINE_BODY_BYTES_MAX as u64 => {
            // Small files: read them next to the head, so both leave in one
            // write instead of a write and a sendfile.
            let at = out.buf.len();
            out.buf.resize(at + f.len as usize, 0);
            if f.file.read_exact_at(&mut out.buf[at..], f.offset).is_err() {
                out.buf.truncate(head_start);
                wire::write_error(&mut out.buf, 500, "file could not be read", date, false);
                return Sent {
                    status: 500,
                    body_bytes: 0,
                    keep_alive: false,
                };
            }
        }
        Body::File(f) => out.tail = Some(Tail::File { range: f, sent: 0 }),
        Body::Stream(chunks) => {
            out.tail = Some(Tail::Stream {
                chunks,
                chunked: framing == BodyFraming::Chunked,
            });
        }
    }
    sent
}
