//! RFC 7541's primitive codings, which QPACK (RFC 9204 §4.1) reuses:
//! integers with an n-bit prefix (§5.1) and the Huffman code (§5.2,
//! Appendix B): encoding, and a decoder that walks a table four bits at a
//! time.
//!
//! The decoding table is built once from the code table below, as nghttp2
//! builds its own: each state is a node of the code's binary tree, and
//! each of the 16 nibbles moves to another node, emitting at most one
//! symbol (no code is shorter than 5 bits). A string ends validly only on
//! the root or on a node whose path is all ones and at most 7 bits long
//! (the padding, "the most significant bits of the code for EOS").

use std::sync::OnceLock;

/// Appends an integer with an `n`-bit prefix; `first` holds the prefix's
/// flag bits.
pub(crate) fn write_integer(out: &mut Vec<u8>, first: u8, n: u32, mut value: usize) {
    let mask = (1usize << n) - 1;
    if value < mask {
        out.push(first | value as u8);
        return;
    }
    out.push(first | mask as u8);
    value -= mask;
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// `(code, length in bits)` of each byte value, RFC 7541 Appendix B. The
/// code for EOS (256) is thirty 1 bits.
#[rustfmt::skip]
const CODES: [(u32, u8); 256] = [
    (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28),
    (0xfffffe4, 28), (0xfffffe5, 28), (0xfffffe6, 28), (0xfffffe7, 28),
    (0xfffffe8, 28), (0xffffea, 24), (0x3ffffffc, 30), (0xfffffe9, 28),
    (0xfffffea, 28), (0x3ffffffd, 30), (0xfffffeb, 28), (0xfffffec, 28),
    (0xfffffed, 28), (0xfffffee, 28), (0xfffffef, 28), (0xffffff0, 28),
    (0xffffff1, 28), (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28),
    (0xffffff4, 28), (0xffffff5, 28), (0xffffff6, 28), (0xffffff7, 28),
    (0xffffff8, 28), (0xffffff9, 28), (0xffffffa, 28), (0xffffffb, 28),
    (0x14, 6), (0x3f8, 10), (0x3f9, 10), (0xffa, 12),
    (0x1ff9, 13), (0x15, 6), (0xf8, 8), (0x7fa, 11),
    (0x3fa, 10), (0x3fb, 10), (0xf9, 8), (0x7fb, 11),
    (0xfa, 8), (0x16, 6), (0x17, 6), (0x18, 6),
    (0x0, 5), (0x1, 5), (0x2, 5), (0x19, 6),
    (0x1a, 6), (0x1b, 6), (0x1c, 6), (0x1d, 6),
    (0x1e, 6), (0x1f, 6), (0x5c, 7), (0xfb, 8),
    (0x7ffc, 15), (0x20, 6), (0xffb, 12), (0x3fc, 10),
    (0x1ffa, 13), (0x21, 6), (0x5d, 7), (0x5e, 7),
    (0x5f, 7), (0x60, 7), (0x61, 7), (0x62, 7),
    (0x63, 7), (0x64, 7), (0x65, 7), (0x66, 7),
    (0x67, 7), (0x68, 7), (0x69, 7), (0x6a, 7),
    (0x6b, 7), (0x6c, 7), (0x6d, 7), (0x6e, 7),
    (0x6f, 7), (0x70, 7), (0x71, 7), (0x72, 7),
    (0xfc, 8), (0x73, 7), (0xfd, 8), (0x1ffb, 13),
    (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14), (0x22, 6),
    (0x7ffd, 15), (0x3, 5), (0x23, 6), (0x4, 5),
    (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6),
    (0x27, 6), (0x6, 5), (0x74, 7), (0x75, 7),
    (0x28, 6), (0x29, 6), (0x2a, 6), (0x7, 5),
    (0x2b, 6), (0x76, 7), (0x2c, 6), (0x8, 5),
    (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7),
    (0x79, 7), (0x7a, 7), (0x7b, 7), (0x7ffe, 15),
    (0x7fc, 11), (0x3ffd, 14), (0x1ffd, 13), (0xffffffc, 28),
    (0xfffe6, 20), (0x3fffd2, 22), (0xfffe7, 20), (0xfffe8, 20),
    (0x3fffd3, 22), (0x3fffd4, 22), (0x3fffd5, 22), (0x7fffd9, 23),
    (0x3fffd6, 22), (0x7fffda, 23), (0x7fffdb, 23), (0x7fffdc, 23),
    (0x7fffdd, 23), (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23),
    (0xffffec, 24), (0xffffed, 24), (0x3fffd7, 22), (0x7fffe0, 23),
    (0xffffee, 24), (0x7fffe1, 23), (0x7fffe2, 23), (0x7fffe3, 23),
    (0x7fffe4, 23), (0x1fffdc, 21), (0x3fffd8, 22), (0x7fffe5, 23),
    (0x3fffd9, 22), (0x7fffe6, 23), (0x7fffe7, 23), (0xffffef, 24),
    (0x3fffda, 22), (0x1fffdd, 21), (0xfffe9, 20), (0x3fffdb, 22),
    (0x3fffdc, 22), (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21),
    (0x7fffea, 23), (0x3fffdd, 22), (0x3fffde, 22), (0xfffff0, 24),
    (0x1fffdf, 21), (0x3fffdf, 22), (0x7fffeb, 23), (0x7fffec, 23),
    (0x1fffe0, 21), (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21),
    (0x7fffed, 23), (0x3fffe1, 22), (0x7fffee, 23), (0x7fffef, 23),
    (0xfffea, 20), (0x3fffe2, 22), (0x3fffe3, 22), (0x3fffe4, 22),
    (0x7ffff0, 23), (0x3fffe5, 22), (0x3fffe6, 22), (0x7ffff1, 23),
    (0x3ffffe0, 26), (0x3ffffe1, 26), (0xfffeb, 20), (0x7fff1, 19),
    (0x3fffe7, 22), (0x7ffff2, 23), (0x3fffe8, 22), (0x1ffffec, 25),
    (0x3ffffe2, 26), (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27),
    (0x7ffffdf, 27), (0x3ffffe5, 26), (0xfffff1, 24), (0x1ffffed, 25),
    (0x7fff2, 19), (0x1fffe3, 21), (0x3ffffe6, 26), (0x7ffffe0, 27),
    (0x7ffffe1, 27), (0x3ffffe7, 26), (0x7ffffe2, 27), (0xfffff2, 24),
    (0x1fffe4, 21), (0x1fffe5, 21), (0x3ffffe8, 26), (0x3ffffe9, 26),
    (0xffffffd, 28), (0x7ffffe3, 27), (0x7ffffe4, 27), (0x7ffffe5, 27),
    (0xfffec, 20), (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21),
    (0x3fffe9, 22), (0x1fffe7, 21), (0x1fffe8, 21), (0x7ffff3, 23),
    (0x3fffea, 22), (0x3fffeb, 22), (0x1ffffee, 25), (0x1ffffef, 25),
    (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26), (0x7ffff4, 23),
    (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26),
    (0x7ffffe7, 27), (0x7ffffe8, 27), (0x7ffffe9, 27), (0x7ffffea, 27),
    (0x7ffffeb, 27), (0xffffffe, 28), (0x7ffffec, 27), (0x7ffffed, 27),
    (0x7ffffee, 27), (0x7ffffef, 27), (0x7fffff0, 27), (0x3ffffee, 26),
];

/// The 257th symbol: never valid inside a string (RFC 7541 §5.2).
const EOS: u16 = 256;

/// Why a Huffman string cannot be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HuffmanError;

/// Appends the Huffman coding of `src` to `out`.
pub(crate) fn encode(src: &[u8], out: &mut Vec<u8>) {
    let mut bits: u64 = 0;
    let mut n_bits: u32 = 0;
    for &b in src {
        let (code, len) = CODES[usize::from(b)];
        bits = (bits << len) | u64::from(code);
        n_bits += u32::from(len);
        while n_bits >= 8 {
            n_bits -= 8;
            out.push((bits >> n_bits) as u8);
        }
    }
    if n_bits > 0 {
        // Pad with the most significant bits of EOS (all ones).
        out.push(((bits << (8 - n_bits)) as u8) | (0xff >> n_bits));
    }
}

/// The length in bytes of `src` once Huffman-coded.
pub(crate) fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src.iter().map(|&b| usize::from(CODES[usize::from(b)].1)).sum();
    bits.div_ceil(8)
}

/// Decodes `src` and appends the bytes to `out`.
pub(crate) fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    let table = table();
    let mut state = 0u16;
    for &byte in src {
        for nibble in [byte >> 4, byte & 0xf] {
            let t = table.next[usize::from(state)][usize::from(nibble)];
            if t.flags & FAIL != 0 {
                return Err(HuffmanError);
            }
            if t.flags & EMIT != 0 {
                out.push(t.symbol);
            }
            state = t.state;
        }
    }
    if table.may_end[usize::from(state)] {
        Ok(())
    } else {
        Err(HuffmanError)
    }
}

const EMIT: u8 = 1;
const FAIL: u8 = 2;

#[derive(Clone, Copy, Default)]
struct Transition {
    state: u16,
    symbol: u8,
    flags: u8,
}

struct Table {
    next: Vec<[Transition; 16]>,
    /// Whether a string may end in this state (see the module docs).
    may_end: Vec<bool>,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(build)
}

/// A node of the code tree: children by bit, or the symbol of a leaf.
#[derive(Clone, Copy)]
enum Node {
    Inner { child: [u16; 2], depth: u8, ones: bool },
    Leaf(u16),
}

fn build() -> Table {
    // The tree: node 0 is the root; internal nodes first get placeholders.
    let mut nodes = vec![Node::Inner {
        child: [u16::MAX; 2],
        depth: 0,
        ones: true,
    }];
    let mut insert = |code: u32, len: u8, symbol: u16| {
        let mut at = 0usize;
        for i in (0..len).rev() {
            let bit = ((code >> i) & 1) as usize;
            let Node::Inner { child, depth, ones } = nodes[at] else {
                unreachable!("a prefix code has no leaf on another code's path")
            };
            if i == 0 {
                let leaf = nodes.len() as u16;
                nodes.push(Node::Leaf(symbol));
                if let Node::Inner { child, .. } = &mut nodes[at] {
                    child[bit] = leaf;
                }
            } else if child[bit] == u16::MAX {
                let inner = nodes.len() as u16;
                nodes.push(Node::Inner {
                    child: [u16::MAX; 2],
                    depth: depth + 1,
                    ones: ones && bit == 1,
                });
                if let Node::Inner { child, .. } = &mut nodes[at] {
                    child[bit] = inner;
                }
                at = inner as usize;
            } else {
                at = child[bit] as usize;
            }
        }
    };
    for (symbol, &(code, len)) in CODES.iter().enumerate() {
        insert(code, len, symbol as u16);
    }
    insert(0x3fff_ffff, 30, EOS);

    // Number the internal nodes: they are the decoder's states.
    let mut state_of = vec![u16::MAX; nodes.len()];
    let mut inner = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        if let Node::Inner { .. } = node {
            state_of[i] = inner.len() as u16;
            inner.push(i);
        }
    }
    let mut next = vec![[Transition::default(); 16]; inner.len()];
    let mut may_end = vec![false; inner.len()];
    for (state, &node_idx) in inner.iter().enumerate() {
        if let Node::Inner { depth, ones, .. } = nodes[node_idx] {
            may_end[state] = node_idx == 0 || (ones && depth <= 7);
        }
        for nibble in 0..16u8 {
            let mut at = node_idx;
            let mut t = Transition::default();
            for i in (0..4).rev() {
                let bit = usize::from((nibble >> i) & 1);
                let Node::Inner { child, .. } = nodes[at] else {
                    unreachable!()
                };
                at = child[bit] as usize;
                if let Node::Leaf(symbol) = nodes[at] {
                    if symbol == EOS || t.flags & EMIT != 0 {
                        // EOS in a string, or (impossible with codes of 5+
                        // bits) two symbols in one nibble.
                        t.flags |= FAIL;
                        break;
                    }
                    t.flags |= EMIT;
                    t.symbol = symbol as u8;
                    at = 0;
                }
            }
            t.state = state_of[at];
            next[state][usize::from(nibble)] = t;
        }
    }
    Table { next, may_end }
}

/// Bytes from hex digits, spaces ignored (the RFC 7541 examples' form);
/// shared by the tests of the HPACK and QPACK modules.
#[cfg(test)]
pub(crate) fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7541 Appendix C.4 and C.6.
    #[test]
    fn rfc_examples_round_trip() {
        let table = [
            ("www.example.com", "f1e3 c2e5 f23a 6ba0 ab90 f4ff"),
            ("no-cache", "a8eb 1064 9cbf"),
            ("custom-value", "25a8 49e9 5bb8 e8b4 bf"),
            ("302", "6402"),
            ("private", "aec3 771a 4b"),
            (
                "Mon, 21 Oct 2013 20:13:21 GMT",
                "d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff",
            ),
            ("https://www.example.com", "9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3"),
        ];
        for (plain, coded) in table {
            let mut out = Vec::new();
            encode(plain.as_bytes(), &mut out);
            assert_eq!(out, hex(coded), "{plain}");
            assert_eq!(encoded_len(plain.as_bytes()), out.len());
            let mut back = Vec::new();
            decode(&out, &mut back).unwrap();
            assert_eq!(back, plain.as_bytes());
        }
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        let mut coded = Vec::new();
        encode(&all, &mut coded);
        let mut back = Vec::new();
        decode(&coded, &mut back).unwrap();
        assert_eq!(back, all);
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        // 'a' is 00011 (5 bits): padding 000 is not the EOS prefix.
        assert_eq!(decode(&[0b0001_1000], &mut Vec::new()), Err(HuffmanError));
        // A whole byte of padding (8 bits) after a complete symbol.
        assert_eq!(decode(&[0b0001_1111, 0xff], &mut Vec::new()), Err(HuffmanError));
        // EOS itself: thirty 1 bits.
        assert_eq!(decode(&[0xff, 0xff, 0xff, 0xff], &mut Vec::new()), Err(HuffmanError));
        // Valid: 'a' then 111 padding.
        let mut out = Vec::new();
        decode(&[0b0001_1111], &mut out).unwrap();
        assert_eq!(out, b"a");
    }
}
