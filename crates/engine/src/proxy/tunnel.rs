//! WebSocket pass-through: a client's WebSocket opening (an HTTP/1.1
//! `Upgrade: websocket`, or an extended CONNECT with `:protocol =
//! websocket` over HTTP/2, RFC 8441, or HTTP/3, RFC 9220) becomes an
//! HTTP/1.1 upgrade request to the upstream, and the upstream's answer
//! decides what the client gets.
//!
//! - The request is re-framed as every proxied request is (`build_as`),
//!   as a GET with `Upgrade: websocket` and `Connection: Upgrade` added
//!   back (the codec drops both as hop-by-hop). `Sec-WebSocket-Version`,
//!   `-Protocol` and `-Extensions` pass as ordinary fields. An HTTP/1.1
//!   client's `Sec-WebSocket-Key` is passed on; for an extended CONNECT,
//!   which has none (RFC 8441 §5, RFC 9220 §3), the proxy makes one.
//! - Only a 101 with `Upgrade: websocket`, `Connection: upgrade` and the
//!   `Sec-WebSocket-Accept` the key calls for (RFC 6455 §4.1, the
//!   client's checks) opens the tunnel (`switched`): the upstream
//!   connection leaves the pool for good and goes, with the bytes the
//!   upstream sent after its 101, to the client's connection
//!   (`Handoff`, `conn/tunnel.rs`; an HTTP/3 client's QUIC connection,
//!   `quic/conn.rs`), which answers 101 (HTTP/1.1) or 200 (HTTP/2,
//!   HTTP/3: on the stream, which stays open) and from then on copies
//!   bytes both ways without reading frames (over HTTP/2 and HTTP/3, the
//!   stream's DATA payloads). A 101 that fails a check is a 502 and a
//!   closed upstream connection.
//! - Any other answer is relayed as an ordinary response and HTTP goes on
//!   on both sides (the upstream connection may be kept alive), except a
//!   2xx to an extended CONNECT: a 2xx opens a tunnel there (RFC 8441
//!   §4, RFC 9220 §3), so an upstream that answers a WebSocket request
//!   with a page gets its client a 502 instead of a page in place of
//!   frames.
//! - Other upgrades (`h2c`, anything but `websocket`) are never forwarded:
//!   the request goes as an ordinary one, without Upgrade or Connection,
//!   as nginx and Caddy strip them. A CONNECT without `:protocol =
//!   websocket` gets 501 (`build_as`).

use std::time::Duration;

use base64::Engine as _;

use super::pool::Sock;
use crate::codec::client::ResponseHead;
use crate::codec::head::{list_elements, trim_ows};
use crate::codec::Version;
use crate::request::Request;
use crate::responder::Responder;

/// What a WebSocket request through the proxy waits for: the
/// `Sec-WebSocket-Accept` the upstream's 101 must carry, and whether the
/// client sent an extended CONNECT (HTTP/2 or HTTP/3: its answer is then
/// a 200 on the stream).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ask {
    pub(crate) accept: [u8; 28],
    pub(crate) connect: bool,
}

/// An upstream connection that switched to WebSocket, on its way to the
/// client's connection: what the client's 101 or 200 carries besides the
/// switch itself, the socket, and what the upstream sent after its 101.
pub(crate) struct Handoff {
    pub(crate) responder: Responder,
    pub(crate) sock: Sock,
    /// Complete field lines (`Name: value\r\n`): the upstream's fields
    /// less the hop-by-hop ones (and, for an extended CONNECT, less
    /// `Sec-WebSocket-Accept`).
    pub(crate) fields: Vec<u8>,
    /// Bytes the upstream sent after its 101's head: the first for the
    /// client.
    pub(crate) early: Vec<u8>,
    /// No byte either way for this long ends the tunnel (the upstream's
    /// `read_timeout`: nginx's `proxy_read_timeout`, 60 s by default).
    pub(crate) idle_timeout: Duration,
    /// The upstream figures of the 101's access log line (status 101,
    /// address, connect and header times; the response time is the
    /// header's: the line is written at the switch), when one is kept.
    pub(crate) figures: Option<crate::access_log::UpstreamLog>,
}

impl Sock {
    /// What the worker's poll registers.
    pub(crate) fn mio_source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Sock::Tcp(s) => s,
            Sock::Unix(s) => s,
            Sock::Tls(s) => &mut s.tcp,
        }
    }

    /// Ends the sending side: a FIN, or over TLS a `close_notify` (TLS's
    /// end of data; the socket's FIN would cut records rustls still
    /// holds, which later flushes send).
    pub(crate) fn shutdown_write(&mut self) -> std::io::Result<()> {
        match self {
            Sock::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
            Sock::Unix(s) => s.shutdown(std::net::Shutdown::Write),
            Sock::Tls(s) => {
                s.tls.send_close_notify();
                std::io::Write::flush(&mut **s)
            }
        }
    }
}

/// Whether `req` opens a WebSocket the proxy can pass through: an
/// HTTP/1.1 GET offering `websocket` in an Upgrade field that Connection
/// names, with one `Sec-WebSocket-Key` of 16 bytes and no body; or an
/// HTTP/2 or HTTP/3 extended CONNECT for `websocket`. Anything else (another
/// upgrade, a malformed handshake) goes as an ordinary request, which the
/// upstream answers as it sees fit.
pub(crate) fn offer(req: &Request<'_>) -> Option<Offer> {
    match req.version() {
        Version::Http11 => {
            // A streamed body is looked at, not taken: taken here, a GET
            // with one that was no WebSocket went upstream without it.
            let streams = req.reader.is_some_and(|r| r.borrow().is_some());
            if req.method() != "GET" || !req.body().is_empty() || streams {
                return None;
            }
            // A loop over the fields, not a chain of adapters (69
            // instructions of every proxied GET, callgrind `proxy-c50`).
            let names = |field: &str, token: &[u8]| {
                req.headers.iter().any(|h| {
                    h.name.eq_ignore_ascii_case(field) && list_elements(h.value).any(|t| t.eq_ignore_ascii_case(token))
                })
            };
            // `Upgrade` first: rarer than `Connection` (HTTP/1.1 clients
            // often send `Connection: keep-alive`, whose options would be
            // walked), and of a length few common fields share, where
            // `User-Agent` is as long as `Connection`.
            if !names("upgrade", b"websocket") || !names("connection", b"upgrade") {
                return None;
            }
            let mut keys = req
                .headers()
                .filter(|(n, _)| n.eq_ignore_ascii_case("sec-websocket-key"))
                .map(|(_, v)| trim_ows(v));
            let key = keys.next()?;
            if keys.next().is_some() || !is_key(key) {
                return None;
            }
            Some(Offer::Upgrade {
                accept: crate::ws::handshake::accept_key(key),
            })
        }
        Version::Http2 | Version::Http3 if req.method() == "CONNECT" => {
            req.protocol().filter(|p| p.eq_ignore_ascii_case("websocket"))?;
            Some(Offer::Connect)
        }
        _ => None,
    }
}

/// A WebSocket opening the proxy passes through (`offer`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Offer {
    /// HTTP/1.1: the accept value the client's own key calls for.
    Upgrade { accept: [u8; 28] },
    /// HTTP/2's or HTTP/3's extended CONNECT: the proxy makes the key.
    Connect,
}

/// A `Sec-WebSocket-Key`: 16 bytes in base64 (RFC 6455 §4.1).
fn is_key(key: &[u8]) -> bool {
    key.len() == 24
        && base64::engine::general_purpose::STANDARD
            .decode(key)
            .is_ok_and(|nonce| nonce.len() == 16)
}

/// The upstream request for a WebSocket opening: the request re-framed
/// as a GET, the upgrade fields added, and the key for an extended
/// CONNECT's; with
/// what the upstream's 101 must say.
pub(crate) fn request(up: &super::Upstream, req: &Request<'_>, offer: Offer) -> Result<(Vec<u8>, Ask), u16> {
    let (own_key, accept) = match offer {
        Offer::Upgrade { accept } => (None, accept),
        Offer::Connect => {
            let key = new_key();
            let accept = crate::ws::handshake::accept_key(key.as_bytes());
            (Some(key), accept)
        }
    };
    // An extended CONNECT's key, if it sent one, is not ours to pass; nor
    // is an `Expect` (`build_as` leaves it out).
    let skip: &[&str] = if own_key.is_some() { &["sec-websocket-key"] } else { &[] };
    let (mut bytes, _) = super::build_as(up, req, crate::codec::head::Framing::Empty, "GET", false, skip, None)?;
    // The head ends with its empty line: the upgrade's fields go before
    // it (`write_request_head` drops Upgrade and Connection, hop-by-hop
    // for every other request).
    debug_assert!(bytes.ends_with(b"\r\n\r\n"));
    bytes.truncate(bytes.len() - 2);
    bytes.extend_from_slice(b"Upgrade: websocket\r\nConnection: Upgrade\r\n");
    if let Some(key) = &own_key {
        bytes.extend_from_slice(b"Sec-WebSocket-Key: ");
        bytes.extend_from_slice(key.as_bytes());
        bytes.extend_from_slice(b"\r\n");
    }
    bytes.extend_from_slice(b"\r\n");
    Ok((
        bytes,
        Ask {
            accept,
            connect: own_key.is_some(),
        },
    ))
}

/// A fresh `Sec-WebSocket-Key`: 16 random bytes in base64.
fn new_key() -> String {
    use aws_lc_rs::rand::SecureRandom;
    let mut nonce = [0u8; 16];
    // The system's generator does not fail on Linux; a fixed nonce would
    // still make a valid handshake (the key guards against caches, not
    // attackers).
    let _ = aws_lc_rs::rand::SystemRandom::new().fill(&mut nonce);
    base64::engine::general_purpose::STANDARD.encode(nonce)
}

/// Checks an upstream's 101 the way a WebSocket client must (RFC 6455
/// §4.1, items 2 to 4 of the client's checks): `Upgrade: websocket`,
/// `Connection: upgrade`, and the accept value `ask` expects. Returns the
/// fields the client's answer carries, or why the 101 is refused.
pub(crate) fn switched(head: &ResponseHead<'_, '_>, ask: &Ask) -> Result<Vec<u8>, &'static str> {
    let names = |field: &str, token: &[u8]| {
        head.headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(field))
            .flat_map(|h| list_elements(h.value))
            .any(|t| t.eq_ignore_ascii_case(token))
    };
    if !names("upgrade", b"websocket") {
        return Err("a 101 without Upgrade: websocket");
    }
    if !names("connection", b"upgrade") {
        return Err("a 101 without Connection: upgrade");
    }
    let mut accepts = head
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("sec-websocket-accept"));
    match (accepts.next(), accepts.next()) {
        (Some(h), None) if trim_ows(h.value) == ask.accept => {}
        _ => return Err("a 101 with a wrong Sec-WebSocket-Accept"),
    }
    let block = super::pool::answer_fields(head);
    let mut fields = Vec::with_capacity(block.as_bytes().len());
    for line in block.as_bytes().split_inclusive(|&b| b == b'\n') {
        // RFC 8441 §5: an extended CONNECT has no key, and its answer no
        // accept value.
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        if ask.connect && name.eq_ignore_ascii_case(b"sec-websocket-accept") {
            continue;
        }
        fields.extend_from_slice(line);
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use super::*;
    use crate::codec::client::{parse_response_head, ParsedResponse};

    fn check(raw: &str, ask: &Ask) -> Result<Vec<u8>, &'static str> {
        let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; 32];
        match parse_response_head(raw.as_bytes(), &mut fields, "GET") {
            Ok(ParsedResponse::Complete(head)) => switched(&head, ask),
            _ => panic!("{raw:?} does not parse"),
        }
    }

    /// RFC 6455 §1.3's example key and its accept value.
    const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

    fn ask(connect: bool) -> Ask {
        Ask {
            accept: crate::ws::handshake::accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            connect,
        }
    }

    #[test]
    fn a_101_opens_the_tunnel_only_with_the_right_accept_and_upgrade() {
        let good = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: WebSocket\r\nConnection: keep-alive, Upgrade\r\n\
             Sec-WebSocket-Accept: {ACCEPT}\r\nSec-WebSocket-Protocol: chat\r\nSec-WebSocket-Extensions: \
             permessage-deflate\r\n\r\n"
        );
        let fields = String::from_utf8(check(&good, &ask(false)).unwrap()).unwrap();
        assert!(
            fields.contains(&format!("Sec-WebSocket-Accept: {ACCEPT}\r\n")),
            "{fields}"
        );
        assert!(fields.contains("Sec-WebSocket-Protocol: chat\r\n"), "{fields}");
        assert!(
            fields.contains("Sec-WebSocket-Extensions: permessage-deflate\r\n"),
            "{fields}"
        );
        assert!(!fields.to_ascii_lowercase().contains("upgrade:"), "{fields}");
        assert!(!fields.to_ascii_lowercase().contains("connection:"), "{fields}");
        // An extended CONNECT's 200 carries no accept value.
        let h2 = String::from_utf8(check(&good, &ask(true)).unwrap()).unwrap();
        assert!(!h2.contains("Accept"), "{h2}");
        assert!(h2.contains("Sec-WebSocket-Protocol: chat\r\n"), "{h2}");

        for bad in [
            "HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: AAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\n\r\n".to_owned(),
            "HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n".to_owned(),
            format!("HTTP/1.1 101 x\r\nUpgrade: h2c\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {ACCEPT}\r\n\r\n"),
            format!("HTTP/1.1 101 x\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: {ACCEPT}\r\n\r\n"),
            format!(
                "HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {ACCEPT}\r\n\
                 Sec-WebSocket-Accept: {ACCEPT}\r\n\r\n"
            ),
        ] {
            assert!(check(&bad, &ask(false)).is_err(), "{bad}");
        }
    }

    #[test]
    fn keys_are_16_bytes_in_base64() {
        assert!(is_key(b"dGhlIHNhbXBsZSBub25jZQ=="));
        assert!(is_key(new_key().as_bytes()));
        assert_ne!(new_key(), new_key());
        for bad in [
            &b""[..],
            b"dGhlIHNhbXBsZSBub25jZQ",
            b"dGhlIHNhbXBsZSBub25jZQ==x",
            b"!!!!!!!!!!!!!!!!!!!!!!==",
        ] {
            assert!(!is_key(bad), "{bad:?}");
        }
    }
}
