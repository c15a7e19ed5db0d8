//! The opening handshake (RFC 6455 §4.2): what a client's upgrade request
//! must say, and the server's `Sec-WebSocket-Accept`.

use base64::Engine as _;

use super::{deflate, Options};
use crate::codec::Version;
use crate::request::Request;
use crate::response::{HeaderBlock, Response};

/// RFC 6455 §1.3: appended to the client's key before hashing.
const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// A handshake the server accepts: what its 101 (HTTP/1.1) or its 200
/// (HTTP/2's extended CONNECT) says.
#[derive(Debug)]
pub(crate) struct Accept {
    /// `Sec-WebSocket-Accept`'s value (HTTP/1.1 only: RFC 8441 §5 drops
    /// the key and its answer).
    pub(crate) key: Option<[u8; 28]>,
    /// The subprotocol chosen, if any.
    pub(crate) protocol: Option<String>,
    /// permessage-deflate's terms, if the route takes it and the client
    /// offered it.
    pub(crate) deflate: Option<deflate::Params>,
}

impl Accept {
    /// The 101's own fields, as complete lines.
    pub(crate) fn fields(&self) -> Vec<u8> {
        let mut f = Vec::with_capacity(64);
        if let Some(key) = &self.key {
            f.extend_from_slice(b"Sec-WebSocket-Accept: ");
            f.extend_from_slice(key);
            f.extend_from_slice(b"\r\n");
        }
        if let Some(p) = &self.protocol {
            f.extend_from_slice(b"Sec-WebSocket-Protocol: ");
            f.extend_from_slice(p.as_bytes());
            f.extend_from_slice(b"\r\n");
        }
        if let Some(params) = self.deflate {
            f.extend_from_slice(b"Sec-WebSocket-Extensions: ");
            f.extend_from_slice(deflate::response(params).as_bytes());
            f.extend_from_slice(b"\r\n");
        }
        f
    }

    /// The answer to an extended CONNECT (RFC 8441 §5): 200, with the
    /// subprotocol chosen.
    pub(crate) fn response(&self) -> Response {
        let mut resp = Response::new(200);
        if let Some(p) = &self.protocol {
            resp = resp.with_header("sec-websocket-protocol", p.clone());
        }
        if let Some(params) = self.deflate {
            resp = resp.with_header("sec-websocket-extensions", deflate::response(params));
        }
        resp
    }
}

/// Checks `req` as a WebSocket opening handshake under `options`.
// The refusal is the answer itself, made once per refused handshake.
#[allow(clippy::result_large_err)]
pub(crate) fn check(req: &Request<'_>, options: &Options) -> Result<Accept, Response> {
    match req.version() {
        Version::Http11 => {}
        Version::Http2 | Version::Http3 => return check_connect(req, options),
        _ => {
            return Err(refuse(
                400,
                "a WebSocket opens with an HTTP/1.1 upgrade or an HTTP/2 or HTTP/3 extended CONNECT\n",
            ))
        }
    }
    if req.method() != "GET" {
        return Err(refuse(405, "a WebSocket handshake is a GET request\n").with_header("Allow", "GET"));
    }
    if req.header("transfer-encoding").is_some() || req.header("content-length").is_some_and(|n| n.trim() != "0") {
        return Err(refuse(400, "a WebSocket handshake has no body\n"));
    }
    let offers = |name: &str, token: &str| {
        req.headers()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .flat_map(|(_, v)| v.split(|&b| b == b','))
            .any(|t| trim(t).eq_ignore_ascii_case(token.as_bytes()))
    };
    if !offers("upgrade", "websocket") || !offers("connection", "upgrade") {
        // RFC 9110 §15.5.22: a 426 names the protocol to upgrade to.
        return Err(
            refuse(426, "this resource is a WebSocket: upgrade to it\n").with_header_block(HeaderBlock::engine_lines(
                b"Upgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Version: 13\r\n",
            )),
        );
    }
    if one(req, "sec-websocket-version").map(trim) != Some(&b"13"[..]) {
        return Err(refuse(426, "Sec-WebSocket-Version must be 13\n").with_header("Sec-WebSocket-Version", "13"));
    }
    let Some(key) = one(req, "sec-websocket-key").map(trim) else {
        return Err(refuse(400, "Sec-WebSocket-Key is missing or given twice\n"));
    };
    match base64::engine::general_purpose::STANDARD.decode(key) {
        Ok(nonce) if nonce.len() == 16 => {}
        _ => return Err(refuse(400, "Sec-WebSocket-Key is not 16 bytes in base64\n")),
    }
    check_origin(req, options)?;
    Ok(Accept {
        key: Some(accept_key(key)),
        protocol: choose_protocol(req, options),
        deflate: choose_deflate(req, options),
    })
}

/// Checks an HTTP/2 or HTTP/3 request as RFC 8441's opening handshake
/// (RFC 9220 §3 keeps it for HTTP/3): an extended CONNECT with
/// `:protocol` `websocket` and `Sec-WebSocket-Version: 13` (no key: the
/// stream is the WebSocket's own). Upgrade and 426 do not exist in HTTP/2
/// or HTTP/3, so a request that is not one gets 400 with the reason.
#[allow(clippy::result_large_err)]
fn check_connect(req: &Request<'_>, options: &Options) -> Result<Accept, Response> {
    match (req.method(), req.protocol()) {
        ("CONNECT", Some(p)) if p.eq_ignore_ascii_case("websocket") => {}
        ("CONNECT", Some(_)) => return Err(refuse(400, "this resource is a WebSocket, not that protocol\n")),
        ("GET" | "CONNECT", None) => {
            return Err(refuse(
                400,
                "this resource is a WebSocket: over HTTP/2 and HTTP/3 it opens with an extended CONNECT (RFC 8441, RFC 9220)\n",
            ))
        }
        _ => {
            return Err(refuse(405, "a WebSocket handshake is a GET or an extended CONNECT\n")
                .with_header("Allow", "GET, CONNECT"))
        }
    }
    if one(req, "sec-websocket-version").map(trim) != Some(&b"13"[..]) {
        return Err(refuse(400, "Sec-WebSocket-Version must be 13\n").with_header("Sec-WebSocket-Version", "13"));
    }
    check_origin(req, options)?;
    Ok(Accept {
        key: None,
        protocol: choose_protocol(req, options),
        deflate: choose_deflate(req, options),
    })
}

/// A page of another origin may open the WebSocket only if `options`
/// allows it.
#[allow(clippy::result_large_err)]
fn check_origin(req: &Request<'_>, options: &Options) -> Result<(), Response> {
    if let Some(origin) = req.header_bytes("origin") {
        if !same_origin(req, origin) && !allowed(options, origin) {
            return Err(refuse(403, "this page's origin may not open this WebSocket\n"));
        }
    }
    Ok(())
}

fn refuse(status: u16, why: &'static str) -> Response {
    Response::new(status)
        .with_content_type("text/plain; charset=utf-8")
        .with_body(why)
}

/// The value of a field that must appear once.
fn one<'a>(req: &Request<'a>, name: &str) -> Option<&'a [u8]> {
    let mut values = req
        .headers()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v);
    let first = values.next()?;
    values.next().is_none().then_some(first)
}

fn trim(b: &[u8]) -> &[u8] {
    b.trim_ascii()
}

/// `Sec-WebSocket-Accept` for `key` (RFC 6455 §4.2.2): base64 of the
/// SHA-1 of the key and the GUID.
pub(crate) fn accept_key(key: &[u8]) -> [u8; 28] {
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(key);
    ctx.update(GUID);
    let digest = ctx.finish();
    let mut out = [0u8; 28];
    let n = base64::engine::general_purpose::STANDARD
        .encode_slice(digest.as_ref(), &mut out)
        .unwrap_or(0);
    debug_assert_eq!(n, 28);
    out
}

/// The page's `Origin` is the request's own: its scheme (https over TLS),
/// host and port (the scheme's default when none is written).
fn same_origin(req: &Request<'_>, origin: &[u8]) -> bool {
    let Some(host) = req.header_bytes("host").or(req.host) else {
        return false;
    };
    let scheme: &[u8] = if req.is_tls() { b"https" } else { b"http" };
    let Some(rest) = origin
        .strip_prefix(scheme)
        .and_then(|r| r.strip_prefix(b"://"))
        .or_else(|| {
            // Schemes are case-insensitive.
            let n = scheme.len() + 3;
            (origin.len() > n
                && origin[..scheme.len()].eq_ignore_ascii_case(scheme)
                && &origin[scheme.len()..n] == b"://")
                .then(|| &origin[n..])
        })
    else {
        return false;
    };
    let default_port: &[u8] = if req.is_tls() { b"443" } else { b"80" };
    let split = |hp: &'_ [u8]| -> (Vec<u8>, Vec<u8>) {
        // [v6]:port, name:port or name.
        let (h, p) = match hp.iter().rposition(|&b| b == b':') {
            Some(i) if !hp[i..].contains(&b']') => (&hp[..i], &hp[i + 1..]),
            _ => (hp, default_port),
        };
        (h.to_ascii_lowercase(), p.to_vec())
    };
    split(rest) == split(host.trim_ascii())
}

/// `options` allows pages of `origin` (exactly, ignoring case; or `*`).
fn allowed(options: &Options, origin: &[u8]) -> bool {
    options
        .origins
        .iter()
        .any(|o| o == "*" || o.as_bytes().eq_ignore_ascii_case(origin.trim_ascii()))
}

/// permessage-deflate's terms, if the route takes it and the client
/// offers it in a form the server takes.
fn choose_deflate(req: &Request<'_>, options: &Options) -> Option<deflate::Params> {
    if !options.deflate {
        return None;
    }
    deflate::negotiate(
        req.headers()
            .filter(|(n, _)| n.eq_ignore_ascii_case("sec-websocket-extensions"))
            .map(|(_, v)| v),
    )
}

/// The first subprotocol the client offers that the route speaks.
fn choose_protocol(req: &Request<'_>, options: &Options) -> Option<String> {
    if options.protocols.is_empty() {
        return None;
    }
    req.headers()
        .filter(|(n, _)| n.eq_ignore_ascii_case("sec-websocket-protocol"))
        .flat_map(|(_, v)| v.split(|&b| b == b','))
        .map(trim)
        .find_map(|offered| options.protocols.iter().find(|p| p.as_bytes() == offered).cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_key_is_rfc_6455s_example() {
        // RFC 6455 §1.3.
        assert_eq!(
            &accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }
}
