//! QPACK (RFC 9204) with a dynamic table of zero capacity: the decoder
//! for request field sections and the encoder for response heads.
//!
//! We advertise SETTINGS_QPACK_MAX_TABLE_CAPACITY 0 and
//! SETTINGS_QPACK_BLOCKED_STREAMS 0, so a client may only use the static
//! table and literals (§3.2.3: "When the maximum table capacity is zero,
//! the encoder MUST NOT insert entries into the dynamic table"). The decoder
//! still accepts every representation that needs no dynamic table, and a
//! section that refers to one (a Required Insert Count other than 0, an
//! indexed line with T=0, a post-base index) fails with
//! QPACK_DECOMPRESSION_FAILED (§2.2.3). The encoder never inserts either:
//! a zero-capacity table is always compliant (§2.1), and it needs neither
//! an encoder nor a decoder stream (§4.2).
//!
//! Why the encoder stays static-only where HPACK's indexes what repeats:
//! a QPACK dynamic table needs an encoder stream whose instructions the
//! client must receive before the field sections that refer to them, the
//! decoder stream's acknowledgements to know when an entry may be evicted,
//! and accounting of the streams a client allows to block
//! (SETTINGS_QPACK_BLOCKED_STREAMS). An answer that refers to an entry
//! whose insertion is lost or late waits for it: the head-of-line
//! blocking QUIC exists to remove. Referring only to acknowledged entries
//! avoids that but saves nothing on the first answers of a connection, and
//! each answer's HEADERS is one small frame in a packet either way.
//! Literals go without the N bit (§4.5.4) even for credential-bearing
//! fields: nothing of ours indexes them, and the check per field cost
//! 8.5 % more instructions per HTTP/3 answer (bench/instructions.sh
//! f17-h3: 37849 -> 41062 Ir/request), left for a cheaper check.

use crate::message::coding as huffman;
use crate::message::fields::Sink;

/// The static table (RFC 9204 Appendix A), index 0 first.
#[rustfmt::skip]
pub(crate) const STATIC: [(&str, &str); 99] = [
    (":authority", ""), (":path", "/"), ("age", "0"), ("content-disposition", ""),
    ("content-length", "0"), ("cookie", ""), ("date", ""), ("etag", ""),
    ("if-modified-since", ""), ("if-none-match", ""), ("last-modified", ""), ("link", ""),
    ("location", ""), ("referer", ""), ("set-cookie", ""), (":method", "CONNECT"),
    (":method", "DELETE"), (":method", "GET"), (":method", "HEAD"), (":method", "OPTIONS"),
    (":method", "POST"), (":method", "PUT"), (":scheme", "http"), (":scheme", "https"),
    (":status", "103"), (":status", "200"), (":status", "304"), (":status", "404"),
    (":status", "503"), ("accept", "*/*"), ("accept", "application/dns-message"),
    ("accept-encoding", "gzip, deflate, br"), ("accept-ranges", "bytes"),
    ("access-control-allow-headers", "cache-control"), ("access-control-allow-headers", "content-type"),
    ("access-control-allow-origin", "*"), ("cache-control", "max-age=0"),
    ("cache-control", "max-age=2592000"), ("cache-control", "max-age=604800"),
    ("cache-control", "no-cache"), ("cache-control", "no-store"),
    ("cache-control", "public, max-age=31536000"), ("content-encoding", "br"),
    ("content-encoding", "gzip"), ("content-type", "application/dns-message"),
    ("content-type", "application/javascript"), ("content-type", "application/json"),
    ("content-type", "application/x-www-form-urlencoded"), ("content-type", "image/gif"),
    ("content-type", "image/jpeg"), ("content-type", "image/png"), ("content-type", "text/css"),
    ("content-type", "text/html; charset=utf-8"), ("content-type", "text/plain"),
    ("content-type", "text/plain;charset=utf-8"), ("range", "bytes=0-"),
    ("strict-transport-security", "max-age=31536000"),
    ("strict-transport-security", "max-age=31536000; includesubdomains"),
    ("strict-transport-security", "max-age=31536000; includesubdomains; preload"),
    ("vary", "accept-encoding"), ("vary", "origin"), ("x-content-type-options", "nosniff"),
    ("x-xss-protection", "1; mode=block"), (":status", "100"), (":status", "204"),
    (":status", "206"), (":status", "302"), (":status", "400"), (":status", "403"),
    (":status", "421"), (":status", "425"), (":status", "500"), ("accept-language", ""),
    ("access-control-allow-credentials", "FALSE"), ("access-control-allow-credentials", "TRUE"),
    ("access-control-allow-headers", "*"), ("access-control-allow-methods", "get"),
    ("access-control-allow-methods", "get, post, options"), ("access-control-allow-methods", "options"),
    ("access-control-expose-headers", "content-length"), ("access-control-request-headers", "content-type"),
    ("access-control-request-method", "get"), ("access-control-request-method", "post"),
    ("alt-svc", "clear"), ("authorization", ""),
    ("content-security-policy", "script-src 'none'; object-src 'none'; base-uri 'none'"),
    ("early-data", "1"), ("expect-ct", ""), ("forwarded", ""), ("if-range", ""), ("origin", ""),
    ("purpose", "prefetch"), ("server", ""), ("timing-allow-origin", "*"),
    ("upgrade-insecure-requests", "1"), ("user-agent", ""), ("x-forwarded-for", ""),
    ("x-frame-options", "deny"), ("x-frame-options", "sameorigin"),
];

/// Why a field section cannot be decoded: a connection error of type
/// QPACK_DECOMPRESSION_FAILED (§2.2.3, §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QpackError(pub(crate) &'static str);

/// Reads an integer with an `n`-bit prefix (RFC 7541 §5.1, as QPACK uses
/// it, §4.1.1) from the front of `buf`; at most 2^62 - 1.
fn read_integer(buf: &mut &[u8], n: u32) -> Result<u64, QpackError> {
    let (&first, rest) = buf.split_first().ok_or(QpackError("truncated integer"))?;
    *buf = rest;
    let mask = (1u64 << n) - 1;
    let mut value = u64::from(first) & mask;
    if value < mask {
        return Ok(value);
    }
    let mut shift = 0;
    loop {
        let (&b, rest) = buf.split_first().ok_or(QpackError("truncated integer"))?;
        *buf = rest;
        if shift > 56 {
            return Err(QpackError("integer too large"));
        }
        value += u64::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            break;
        }
    }
    if value > super::frame::VARINT_MAX {
        return Err(QpackError("integer too large"));
    }
    Ok(value)
}

/// Reads a string literal whose length has an `n`-bit prefix and whose
/// Huffman flag is the bit just above it; appends it to `out`.
fn read_string(buf: &mut &[u8], n: u32, out: &mut Vec<u8>) -> Result<(), QpackError> {
    let huffman = buf.first().ok_or(QpackError("truncated string"))? & (1 << n) != 0;
    let len = read_integer(buf, n)?;
    let len = usize::try_from(len).map_err(|_| QpackError("string too long"))?;
    if len > buf.len() {
        return Err(QpackError("string longer than its section"));
    }
    let (bytes, rest) = buf.split_at(len);
    *buf = rest;
    if huffman {
        huffman::decode(bytes, out).map_err(|_| QpackError("invalid Huffman string"))
    } else {
        out.extend_from_slice(bytes);
        Ok(())
    }
}

fn static_entry(index: u64) -> Result<(&'static str, &'static str), QpackError> {
    usize::try_from(index)
        .ok()
        .and_then(|i| STATIC.get(i))
        .copied()
        .ok_or(QpackError("static table index out of range"))
}

/// Decodes one complete field section (the payload of a HEADERS frame)
/// into `sink`. `scratch` holds names and values while they are decoded.
pub(crate) fn decode(mut block: &[u8], sink: &mut Sink<'_>, scratch: &mut Vec<u8>) -> Result<(), QpackError> {
    // §4.5.1: Required Insert Count (8-bit prefix), then Sign and Delta
    // Base (7-bit prefix). With no dynamic table the count must be 0; the
    // base is then unused (and any value allowed).
    if read_integer(&mut block, 8)? != 0 {
        return Err(QpackError("a field section that needs the dynamic table"));
    }
    read_integer(&mut block, 7)?;
    while let Some(&b) = block.first() {
        scratch.clear();
        if b & 0x80 != 0 {
            // Indexed field line (§4.5.2): 1 T index(6).
            if b & 0x40 == 0 {
                return Err(QpackError("a reference to the dynamic table"));
            }
            let (name, value) = static_entry(read_integer(&mut block, 6)?)?;
            sink.push(name.as_bytes(), value.as_bytes());
        } else if b & 0x40 != 0 {
            // Literal with name reference (§4.5.4): 0 1 N T index(4).
            if b & 0x10 == 0 {
                return Err(QpackError("a reference to the dynamic table"));
            }
            let (name, _) = static_entry(read_integer(&mut block, 4)?)?;
            read_string(&mut block, 7, scratch)?;
            sink.push(name.as_bytes(), scratch);
        } else if b & 0x20 != 0 {
            // Literal with literal name (§4.5.6): 0 0 1 N H len(3).
            read_string(&mut block, 3, scratch)?;
            let name_len = scratch.len();
            read_string(&mut block, 7, scratch)?;
            let (name, value) = scratch.split_at(name_len);
            sink.push(name, value);
        } else {
            // Indexed with post-base index (0001) or literal with
            // post-base name reference (0000): both the dynamic table.
            return Err(QpackError("a reference to the dynamic table"));
        }
    }
    Ok(())
}

/// Writes response field sections: static-table references where an
/// entry matches, literals otherwise (Huffman-coded when shorter).
pub(crate) struct Encoder;

impl Encoder {
    /// The section's prefix: Required Insert Count 0, Delta Base 0.
    pub(crate) fn begin(out: &mut Vec<u8>) {
        out.extend_from_slice(&[0, 0]);
    }

    pub(crate) fn status(out: &mut Vec<u8>, status: u16) {
        let mut digits = itoa::Buffer::new();
        let text = digits.format(status);
        Self::field(out, b":status", text.as_bytes());
    }

    /// One field line; `name` is lowercase.
    pub(crate) fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        let mut name_idx = None;
        for (i, (n, v)) in STATIC.iter().enumerate() {
            if n.as_bytes() == name {
                if v.as_bytes() == value {
                    // Indexed field line, static: 1 1 index(6).
                    write_integer(out, 0xc0, 6, i);
                    return;
                }
                name_idx.get_or_insert(i);
            }
        }
        match name_idx {
            Some(i) => {
                // Literal with static name reference, N=0: 0 1 0 1 index(4).
                write_integer(out, 0x50, 4, i);
            }
            None => {
                // Literal with literal name, N=0: 0 0 1 0 H len(3).
                let coded = huffman::encoded_len(name);
                if coded < name.len() {
                    write_integer(out, 0x28, 3, coded);
                    huffman::encode(name, out);
                } else {
                    write_integer(out, 0x20, 3, name.len());
                    out.extend_from_slice(name);
                }
            }
        }
        let coded = huffman::encoded_len(value);
        if coded < value.len() {
            write_integer(out, 0x80, 7, coded);
            huffman::encode(value, out);
        } else {
            write_integer(out, 0, 7, value.len());
            out.extend_from_slice(value);
        }
    }
}

/// Appends an integer with an `n`-bit prefix (the same as HPACK's).
pub(crate) use crate::message::coding::write_integer;
