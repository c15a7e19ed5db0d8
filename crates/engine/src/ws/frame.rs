//! WebSocket frames (RFC 6455 §5.2): the head a client sends, checked as
//! a server must (masked, no reserved bits but RSV1 where permessage-deflate
//! was agreed, known opcodes, control frames short and whole), and the heads
//! a server writes (never masked).

/// A frame's opcode (RFC 6455 §5.2, §11.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Continuation,
    Text,
    Binary,
    Close,
    Ping,
    Pong,
}

impl Op {
    fn of(bits: u8) -> Option<Op> {
        Some(match bits {
            0x0 => Op::Continuation,
            0x1 => Op::Text,
            0x2 => Op::Binary,
            0x8 => Op::Close,
            0x9 => Op::Ping,
            0xA => Op::Pong,
            _ => return None,
        })
    }

    fn bits(self) -> u8 {
        match self {
            Op::Continuation => 0x0,
            Op::Text => 0x1,
            Op::Binary => 0x2,
            Op::Close => 0x8,
            Op::Ping => 0x9,
            Op::Pong => 0xA,
        }
    }

    /// Close, Ping and Pong (RFC 6455 §5.5).
    pub(crate) fn is_control(self) -> bool {
        matches!(self, Op::Close | Op::Ping | Op::Pong)
    }
}

/// The longest payload of a control frame (RFC 6455 §5.5).
pub(crate) const CONTROL_BYTES_MAX: u64 = 125;

/// A client frame's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) fin: bool,
    /// RSV1: the message is compressed (RFC 7692 §6); set only where
    /// permessage-deflate was agreed, and then only on a data frame.
    pub(crate) rsv1: bool,
    pub(crate) op: Op,
    pub(crate) mask: [u8; 4],
    pub(crate) len: u64,
    /// The head's own length in bytes.
    pub(crate) size: usize,
}

/// What the bytes at the start of the input are.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Parsed {
    Head(Head),
    /// Not a whole head yet.
    Partial,
    /// A head no client may send: the close reason (code 1002).
    Bad(&'static str),
}

/// Reads the head of a client's frame from the start of `buf`; `deflate`:
/// permessage-deflate was agreed, so RSV1 may be set on a data frame.
pub(crate) fn parse(buf: &[u8], deflate: bool) -> Parsed {
    let [b0, b1, ..] = *buf else {
        // The first byte alone can already be refused.
        return match buf.first() {
            Some(&b0) => match first_byte(b0, deflate) {
                Err(why) => Parsed::Bad(why),
                Ok(_) => Parsed::Partial,
            },
            None => Parsed::Partial,
        };
    };
    let (fin, op) = match first_byte(b0, deflate) {
        Ok(v) => v,
        Err(why) => return Parsed::Bad(why),
    };
    if b1 & 0x80 == 0 {
        return Parsed::Bad("a client's frame must be masked");
    }
    let (len, len_bytes) = match b1 & 0x7F {
        126 => (None, 2),
        127 => (None, 8),
        n => (Some(u64::from(n)), 0),
    };
    if op.is_control() && (len_bytes > 0 || len.is_some_and(|n| n > CONTROL_BYTES_MAX)) {
        return Parsed::Bad("a control frame longer than 125 bytes");
    }
    let size = 2 + len_bytes + 4;
    if buf.len() < size {
        return Parsed::Partial;
    }
    let len = match len {
        Some(n) => n,
        None if len_bytes == 2 => u64::from(u16::from_be_bytes([buf[2], buf[3]])),
        None => {
            let n = u64::from_be_bytes([buf[2], buf[3], buf[4], buf[5], buf[6], buf[7], buf[8], buf[9]]);
            if n >> 63 != 0 {
                return Parsed::Bad("a frame length with its most significant bit set");
            }
            n
        }
    };
    let m = &buf[size - 4..size];
    Parsed::Head(Head {
        fin,
        rsv1: b0 & 0x40 != 0,
        op,
        mask: [m[0], m[1], m[2], m[3]],
        len,
        size,
    })
}

fn first_byte(b0: u8, deflate: bool) -> Result<(bool, Op), &'static str> {
    // RSV2 and RSV3 have no extension; RSV1 is permessage-deflate's.
    if b0 & 0x30 != 0 || (b0 & 0x40 != 0 && !deflate) {
        return Err("reserved bits set without an extension that defines them");
    }
    let op = Op::of(b0 & 0x0F).ok_or("an unknown opcode")?;
    if b0 & 0x40 != 0 && op.is_control() {
        // RFC 7692 §6.1: RSV1 is a data message's.
        return Err("a control frame with RSV1 set");
    }
    let fin = b0 & 0x80 != 0;
    if op.is_control() && !fin {
        return Err("a fragmented control frame");
    }
    Ok((fin, op))
}

/// The longest head a server writes (a 64-bit length).
pub(crate) const HEAD_BYTES_MAX: usize = 10;

/// The head of a whole compressed message (RSV1 set, RFC 7692 §6) for
/// `len` payload bytes, and its length.
pub(crate) fn head_rsv1(op: Op, len: usize) -> ([u8; HEAD_BYTES_MAX], usize) {
    let mut head = [0u8; HEAD_BYTES_MAX];
    head[0] = 0x80 | 0x40 | op.bits();
    let n = match len {
        0..=125 => {
            head[1] = len as u8;
            2
        }
        126..=0xFFFF => {
            head[1] = 126;
            head[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            4
        }
        _ => {
            head[1] = 127;
            head[2..10].copy_from_slice(&(len as u64).to_be_bytes());
            10
        }
    };
    (head, n)
}

/// Writes an unmasked frame head (a server's) for `len` payload bytes.
pub(crate) fn write_head(out: &mut Vec<u8>, fin: bool, op: Op, len: usize) {
    let b0 = op.bits() | if fin { 0x80 } else { 0 };
    match len {
        0..=125 => out.extend_from_slice(&[b0, len as u8]),
        126..=0xFFFF => {
            out.extend_from_slice(&[b0, 126]);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.extend_from_slice(&[b0, 127]);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
}

/// The length of the head `write_head` writes for `len` bytes.
pub(crate) fn head_len(len: usize) -> usize {
    match len {
        0..=125 => 2,
        126..=0xFFFF => 4,
        _ => 10,
    }
}

/// Writes a whole unmasked frame.
pub(crate) fn write(out: &mut Vec<u8>, op: Op, payload: &[u8]) {
    out.reserve(head_len(payload.len()) + payload.len());
    write_head(out, true, op, payload.len());
    out.extend_from_slice(payload);
}

/// Unmasks `data` in place, `data[0]` being the payload's byte number
/// `offset` (RFC 6455 §5.3), eight bytes at a time.
pub(crate) fn unmask(data: &mut [u8], mask: [u8; 4], offset: u64) {
    let shift = (offset % 4) as usize;
    let rotated = [
        mask[shift],
        mask[(shift + 1) % 4],
        mask[(shift + 2) % 4],
        mask[(shift + 3) % 4],
    ];
    let wide = u64::from_ne_bytes([
        rotated[0], rotated[1], rotated[2], rotated[3], rotated[0], rotated[1], rotated[2], rotated[3],
    ]);
    let mut chunks = data.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        chunk.copy_from_slice(&(u64::from_ne_bytes(word) ^ wide).to_ne_bytes());
    }
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= rotated[i % 4];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use test_support::ws::masked;

    #[test]
    fn heads_parse_at_every_length_encoding_and_partial_until_whole() {
        for len in [0usize, 1, 125, 126, 127, 65535, 65536, 70000] {
            let frame = masked(0x82, &vec![7; len]);
            let head_size = frame.len() - len;
            let mask: [u8; 4] = frame[head_size - 4..head_size].try_into().unwrap();
            for cut in 0..head_size {
                assert_eq!(parse(&frame[..cut], false), Parsed::Partial, "len {len} cut {cut}");
            }
            let Parsed::Head(h) = parse(&frame, false) else {
                panic!("len {len}")
            };
            assert_eq!(
                (h.fin, h.rsv1, h.op, h.mask, h.len, h.size),
                (true, false, Op::Binary, mask, len as u64, head_size)
            );
        }
    }

    #[test]
    fn what_no_client_may_send_is_refused_from_its_first_bytes() {
        assert!(matches!(parse(&[0xC1], false), Parsed::Bad(_)), "RSV1");
        assert!(matches!(parse(&[0xC1], true), Parsed::Partial), "RSV1 with deflate");
        assert!(matches!(parse(&[0xA1], true), Parsed::Bad(_)), "RSV2 with deflate");
        assert!(matches!(parse(&[0x91], true), Parsed::Bad(_)), "RSV3 with deflate");
        assert!(matches!(parse(&[0xC9], true), Parsed::Bad(_)), "RSV1 ping with deflate");
        assert!(matches!(parse(&[0x83], false), Parsed::Bad(_)), "opcode 3");
        assert!(matches!(parse(&[0x8B], false), Parsed::Bad(_)), "opcode 0xB");
        assert!(matches!(parse(&[0x09], false), Parsed::Bad(_)), "fragmented ping");
        assert!(matches!(parse(&[0x81, 0x05], false), Parsed::Bad(_)), "unmasked");
        assert!(matches!(parse(&[0x89, 0x80 | 126], false), Parsed::Bad(_)), "long ping");
        let mut huge = vec![0x82, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 0];
        huge.extend_from_slice(&[0; 4]);
        assert!(matches!(parse(&huge, false), Parsed::Bad(_)), "length MSB");
    }

    #[test]
    fn unmasking_from_any_offset_matches_the_bytewise_rule() {
        let mask = [0xA1, 0xB2, 0xC3, 0xD4];
        let plain: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let masked: Vec<u8> = plain.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]).collect();
        for split in [0usize, 1, 3, 7, 8, 9, 500, 999] {
            let mut data = masked.clone();
            let (a, b) = data.split_at_mut(split);
            unmask(a, mask, 0);
            unmask(b, mask, split as u64);
            assert_eq!(data, plain, "split {split}");
        }
    }

    #[test]
    fn server_heads_use_the_shortest_length() {
        for (len, want) in [(0usize, 2usize), (125, 2), (126, 4), (65535, 4), (65536, 10)] {
            let mut out = Vec::new();
            write_head(&mut out, true, Op::Text, len);
            assert_eq!(out.len(), want);
            assert_eq!(head_len(len), want);
            assert_eq!(out[0], 0x81);
        }
    }
}
