//! What the stream protocols (HTTP/2, HTTP/3) share below the driver: a
//! request head decoded into fields and checked (`head`), the fields
//! themselves (`fields`), RFC 7541's integer and Huffman codings that
//! QPACK reuses (`coding`), the part of a response body still to send
//! (`pending`), its trailer fields (`trailers`), and what a session hands the request path: a request's
//! `Parts`, and what an answer `Sent`. Neither `h2` nor `h3` owns them, so
//! neither imports the other.

pub(crate) mod coding;
pub(crate) mod fields;
pub(crate) mod head;
pub(crate) mod indexing;
pub(crate) mod pending;
pub(crate) mod trailers;

use crate::response::Response;
use head::Head;

/// A request ready for its handler: borrowed from the session.
pub(crate) struct Parts<'s> {
    pub(crate) method: &'s str,
    /// `:path`, or `:authority` for CONNECT.
    pub(crate) target: &'s str,
    pub(crate) host: Option<&'s str>,
    /// Extended CONNECT's `:protocol` (RFC 8441).
    pub(crate) protocol: Option<&'s str>,
    pub(crate) head: &'s Head,
    pub(crate) body: &'s [u8],
    /// The trailer fields the body ended with, if any.
    pub(crate) trailers: Option<&'s trailers::Trailers>,
}

impl<'s> Parts<'s> {
    /// The request a checked head, its body and its trailers make
    /// (HTTP/2's and HTTP/3's).
    pub(crate) fn of(head: &'s Head, body: &'s [u8], trailers: Option<&'s trailers::Trailers>) -> Option<Parts<'s>> {
        let method = head.text(head.method)?;
        let target = head.text(head.path).or_else(|| head.text(head.authority))?;
        let host = head.text(head.authority).or_else(|| {
            head.fields
                .iter()
                .find(|f| head.span(f.name) == b"host")
                .and_then(|f| std::str::from_utf8(head.span(f.value)).ok())
        });
        Some(Parts {
            method,
            target,
            host,
            protocol: head.text(head.protocol),
            head,
            body,
            trailers,
        })
    }
}

/// What `respond` sent, for the access log and metrics.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sent {
    pub(crate) status: u16,
    pub(crate) body_bytes: u64,
}

impl Sent {
    /// What a stream session's `respond` will report for `resp`, known before it is called
    /// (the access log reads the request, which borrows the session).
    pub(crate) fn of(resp: &Response, head_only: bool) -> Sent {
        if resp.invalid.is_some() {
            return Sent {
                status: 500,
                body_bytes: if head_only {
                    0
                } else {
                    Response::error(500).body.len().unwrap_or(0)
                },
            };
        }
        let bodiless = resp.status == 204 || resp.status == 304;
        Sent {
            status: resp.status,
            body_bytes: if head_only || bodiless {
                0
            } else {
                resp.body.len().unwrap_or(0)
            },
        }
    }
}
