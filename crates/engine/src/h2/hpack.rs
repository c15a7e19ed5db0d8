//! HPACK (RFC 7541): the decoder for request header blocks, with its
//! dynamic table, and the encoder for response heads.
//!
//! The decoder writes names and values into a caller's byte buffer and
//! records their spans, so a warm connection decodes without allocating:
//! the dynamic table reuses the buffers of the entries it evicts. The
//! encoder indexes an allow-list of response fields in its dynamic table
//! (at most 4096 bytes, within the client's SETTINGS_HEADER_TABLE_SIZE),
//! sends the fields that may carry credentials never indexed, and the
//! rest as literals without indexing.

use crate::message::coding::{self as huffman, write_integer};
use crate::message::fields::{Sink, ENTRY_OVERHEAD};
pub(crate) use crate::message::indexing::{indexing, Indexing};

/// The static table (RFC 7541 Appendix A), index 1 first.
#[rustfmt::skip]
pub(crate) const STATIC: [(&str, &str); 61] = [
    (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"),
    (":path", "/index.html"), (":scheme", "http"), (":scheme", "https"), (":status", "200"),
    (":status", "204"), (":status", "206"), (":status", "304"), (":status", "400"),
    (":status", "404"), (":status", "500"), ("accept-charset", ""), ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""), ("accept-ranges", ""), ("accept", ""), ("access-control-allow-origin", ""),
    ("age", ""), ("allow", ""), ("authorization", ""), ("cache-control", ""),
    ("content-disposition", ""), ("content-encoding", ""), ("content-language", ""), ("content-length", ""),
    ("content-location", ""), ("content-range", ""), ("content-type", ""), ("cookie", ""),
    ("date", ""), ("etag", ""), ("expect", ""), ("expires", ""),
    ("from", ""), ("host", ""), ("if-match", ""), ("if-modified-since", ""),
    ("if-none-match", ""), ("if-range", ""), ("if-unmodified-since", ""), ("last-modified", ""),
    ("link", ""), ("location", ""), ("max-forwards", ""), ("proxy-authenticate", ""),
    ("proxy-authorization", ""), ("range", ""), ("referer", ""), ("refresh", ""),
    ("retry-after", ""), ("server", ""), ("set-cookie", ""), ("strict-transport-security", ""),
    ("transfer-encoding", ""), ("user-agent", ""), ("vary", ""), ("via", ""),
    ("www-authenticate", ""),
];

/// Why a header block cannot be decoded: a connection error of type
/// COMPRESSION_ERROR (RFC 9113 §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HpackError(pub(crate) &'static str);

/// The decoder's dynamic table: newest entry first.
pub(crate) struct Decoder {
    entries: std::collections::VecDeque<DecoderEntry>,
    /// Buffers of evicted entries, reused by the next insertions.
    spare: Vec<DecoderEntry>,
    size: usize,
    /// The size the client last chose with a size update.
    size_max: usize,
    /// Our SETTINGS_HEADER_TABLE_SIZE: the client may not choose more.
    settings_size_max: usize,
}

/// A dynamic table entry, and whether it passes the request field check
/// (checked once, when inserted, instead of in every request that
/// refers to it).
#[derive(Default)]
struct DecoderEntry {
    name: Vec<u8>,
    value: Vec<u8>,
    valid: bool,
}

impl Decoder {
    pub(crate) fn new(settings_size_max: usize) -> Self {
        Decoder {
            entries: Default::default(),
            spare: Vec::new(),
            size: 0,
            size_max: settings_size_max,
            settings_size_max,
        }
    }

    /// Decodes one complete header block into `sink`.
    pub(crate) fn decode(&mut self, mut block: &[u8], sink: &mut Sink<'_>) -> Result<(), HpackError> {
        let mut first = true;
        while let Some(&b) = block.first() {
            if b & 0x80 != 0 {
                // Indexed field (§6.1).
                let index = integer(&mut block, 7)?;
                let (name, value, valid) = self.entry(index)?;
                sink.push_checked(name, value, valid);
            } else if b & 0xe0 == 0x20 {
                // Dynamic table size update (§6.3): only at the start of a
                // block (§4.2).
                let size = integer(&mut block, 5)?;
                if !first {
                    return Err(HpackError("dynamic table size update after a field"));
                }
                if size > self.settings_size_max {
                    return Err(HpackError("dynamic table size update above the settings"));
                }
                self.size_max = size;
                self.evict(0);
                continue;
            } else {
                // Literals (§6.2): with incremental indexing (01), without
                // (0000) or never indexed (0001).
                let (prefix, index_it) = if b & 0xc0 == 0x40 { (6, true) } else { (4, false) };
                let index = integer(&mut block, prefix)?;
                // Decoded straight into the head's bytes (a copy through
                // scratch buffers was most of the decoder's memmove).
                let at = sink.bytes.len();
                let decoded = (|| {
                    if index == 0 {
                        string(&mut block, sink.bytes)?;
                    } else {
                        sink.bytes.extend_from_slice(self.entry(index)?.0);
                    }
                    let name_len = sink.bytes.len() - at;
                    string(&mut block, sink.bytes)?;
                    Ok(name_len)
                })();
                let name_len = match decoded {
                    Ok(n) => n,
                    Err(e) => {
                        sink.bytes.truncate(at);
                        return Err(e);
                    }
                };
                let mut checked = false;
                if index_it {
                    let (name, value) = sink.bytes[at..].split_at(name_len);
                    checked = crate::message::head::field_is_valid(name, value);
                    self.insert(name, value, checked);
                }
                sink.keep(at, name_len, checked);
            }
            first = false;
        }
        Ok(())
    }

    /// Entry `index` of the static and dynamic tables: name, value, and
    /// whether it passes the request field check (the static table's all
    /// do).
    fn entry(&self, index: usize) -> Result<(&[u8], &[u8], bool), HpackError> {
        match index {
            0 => Err(HpackError("index 0")),
            1..=61 => {
                let (n, v) = STATIC[index - 1];
                Ok((n.as_bytes(), v.as_bytes(), true))
            }
            _ => self
                .entries
                .get(index - 62)
                .map(|e| (e.name.as_slice(), e.value.as_slice(), e.valid))
                .ok_or(HpackError("index past the dynamic table")),
        }
    }

    fn insert(&mut self, name: &[u8], value: &[u8], valid: bool) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        self.evict(size);
        if size > self.size_max {
            // An entry larger than the table empties it (§4.4).
            return;
        }
        let mut e = self.spare.pop().unwrap_or_default();
        e.name.clear();
        e.value.clear();
        e.name.extend_from_slice(name);
        e.value.extend_from_slice(value);
        e.valid = valid;
        self.entries.push_front(e);
        self.size += size;
    }

    /// Evicts the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.size_max {
            let Some(old) = self.entries.pop_back() else {
                break;
            };
            self.size -= old.name.len() + old.value.len() + ENTRY_OVERHEAD;
            if self.spare.len() < 16 {
                self.spare.push(old);
            }
        }
    }
}

/// Reads an integer with an `n`-bit prefix (§5.1), at most 2^28.
fn integer(block: &mut &[u8], n: u32) -> Result<usize, HpackError> {
    let (&first, mut rest) = block.split_first().ok_or(HpackError("truncated integer"))?;
    let mask = (1u32 << n) - 1;
    let mut value = u32::from(first) & mask;
    if value == mask {
        let mut shift = 0;
        loop {
            let (&b, tail) = rest.split_first().ok_or(HpackError("truncated integer"))?;
            rest = tail;
            value = value
                .checked_add(u32::from(b & 0x7f) << shift)
                .filter(|&v| v < 1 << 28)
                .ok_or(HpackError("integer too large"))?;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
            if shift > 21 {
                return Err(HpackError("integer too large"));
            }
        }
    }
    *block = rest;
    Ok(value as usize)
}

/// Reads a string literal (§5.2) into `out`.
fn string(block: &mut &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    let huffman = block.first().ok_or(HpackError("truncated string"))? & 0x80 != 0;
    let len = integer(block, 7)?;
    if len > block.len() {
        return Err(HpackError("string longer than the block"));
    }
    let (bytes, rest) = block.split_at(len);
    *block = rest;
    if huffman {
        // At most one symbol per 5 bits (the shortest code): one
        // reservation instead of a capacity check that may grow per symbol.
        out.reserve(len * 8 / 5);
        huffman::decode(bytes, out).map_err(|_| HpackError("invalid Huffman string"))
    } else {
        out.extend_from_slice(bytes);
        Ok(())
    }
}

/// Appends a string literal, Huffman-coded when that is shorter.
pub(crate) fn write_string(out: &mut Vec<u8>, s: &[u8]) {
    let coded = huffman::encoded_len(s);
    if coded < s.len() {
        write_integer(out, 0x80, 7, coded);
        huffman::encode(s, out);
    } else {
        write_integer(out, 0, 7, s.len());
        out.extend_from_slice(s);
    }
}

/// The encoder's side of the dynamic table (RFC 7541 §2.3.2, §4): the
/// fields of `INDEXED` that repeat from response to response (`server`,
/// `content-type`, `cache-control`, a file's validators...) are sent once
/// with incremental indexing, then as one byte. Saves the bytes and, more,
/// the CPU of Huffman-coding them again (21% of an h2load run's profile
/// before).
///
/// What a connection holds for it is bounded by `ENCODER_TABLE_MAX`: the
/// entries' names and values lie back to back in one buffer of at most
/// that many bytes (each entry also counts 32 bytes of overhead, §4.1,
/// which we do not hold), and their lengths in a ring of at most
/// `ENCODER_TABLE_MAX / 32` pairs of `u16`: 4096 + 512 bytes. Both are
/// reserved once, so a warm connection encodes without allocating.
pub(crate) struct Encoder {
    /// The entries' names (lowercase) and values, oldest first.
    bytes: Vec<u8>,
    /// Each entry's name and value lengths, newest first: entry `i` has
    /// index `62 + i`.
    spans: std::collections::VecDeque<(u16, u16)>,
    /// The table's size as RFC 7541 §4.1 counts it.
    size: usize,
    /// Our table's size: the client's SETTINGS_HEADER_TABLE_SIZE, at most
    /// `ENCODER_TABLE_MAX`.
    max: usize,
    /// A size change not yet announced: the smallest size since the last
    /// header block, and whether one is due (§4.2: at the start of the next
    /// header block, the smallest first if it went down and up).
    update: Option<usize>,
    /// Counts the table's changes (insertions, evictions, size changes):
    /// the same fields encode to the same bytes while it stays put.
    generation: u64,
}

/// At most this much of the client's table is used by our encoder: room
/// for the dozen or two fields that repeat (the site's `/` has 13 of 65
/// bytes each on average), and the protocol's default, so that a client
/// that keeps the default needs no size update.
const ENCODER_TABLE_MAX: usize = 4096;

/// Values longer than this are never indexed (they are unlikely to repeat,
/// and would push out the ones that do).
const INDEXED_VALUE_MAX: usize = 256;

impl Encoder {
    pub(crate) fn new() -> Self {
        Encoder {
            bytes: Vec::new(),
            spans: std::collections::VecDeque::new(),
            size: 0,
            max: ENCODER_TABLE_MAX,
            update: None,
            generation: 0,
        }
    }

    /// Changes to the table so far; see `generation`.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// A table size change waits to be announced by the next `begin`.
    pub(crate) fn has_update(&self) -> bool {
        self.update.is_some()
    }

    /// The client's SETTINGS_HEADER_TABLE_SIZE.
    pub(crate) fn set_table_size(&mut self, peer: u32) {
        let max = (peer as usize).min(ENCODER_TABLE_MAX);
        if max == self.max {
            return;
        }
        self.max = max;
        self.update = Some(self.update.map_or(max, |low| low.min(max)));
        self.generation += 1;
        self.evict(0);
    }

    /// Starts a header block: announces a changed table size first (§6.3;
    /// "the encoder MUST signal the change", §4.2, a size of 0 included).
    pub(crate) fn begin(&mut self, out: &mut Vec<u8>) {
        if let Some(low) = self.update.take() {
            write_integer(out, 0x20, 5, low);
            if low != self.max {
                write_integer(out, 0x20, 5, self.max);
            }
        }
    }

    /// Appends a response field as `indexing(name)` says: indexed if the
    /// table has it, else a literal, added to the table when it may be
    /// and fits.
    pub(crate) fn field(&mut self, out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        match indexing(name) {
            Indexing::Table => {}
            Indexing::Literal => return write_field(out, name, value),
            Indexing::Never => return write_never_indexed(out, name, value),
        }
        if let Some(i) = self.find(name, value) {
            return write_integer(out, 0x80, 7, STATIC.len() + 1 + i);
        }
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if value.len() > INDEXED_VALUE_MAX || size > self.max {
            return write_field(out, name, value);
        }
        // Literal with incremental indexing (§6.2.1).
        write_literal(out, 0x40, 6, name, value);
        self.evict(size);
        if self.bytes.capacity() == 0 {
            // Once: every entry's bytes fit (an entry is at least 32 bytes
            // of size beyond them).
            self.bytes.reserve_exact(ENCODER_TABLE_MAX);
            self.spans.reserve_exact(ENCODER_TABLE_MAX / ENTRY_OVERHEAD);
        }
        self.bytes.extend(name.iter().map(u8::to_ascii_lowercase));
        self.bytes.extend_from_slice(value);
        // Both fit: size <= max <= ENCODER_TABLE_MAX.
        self.spans.push_front((name.len() as u16, value.len() as u16));
        self.size += size;
        self.generation += 1;
    }

    /// The position of `name: value` in the table (0 the newest).
    fn find(&self, name: &[u8], value: &[u8]) -> Option<usize> {
        let mut end = self.bytes.len();
        for (i, &(n, v)) in self.spans.iter().enumerate() {
            let (n, v) = (usize::from(n), usize::from(v));
            let at = end - n - v;
            // Lengths, then the value (a plain compare, and where entries
            // differ most), then the name without regard to case.
            if n == name.len()
                && v == value.len()
                && self.bytes[at + n..end] == *value
                && self.bytes[at..at + n].eq_ignore_ascii_case(name)
            {
                return Some(i);
            }
            end = at;
        }
        None
    }

    /// Evicts the oldest entries until `incoming` more bytes fit (§4.4).
    fn evict(&mut self, incoming: usize) {
        while self.size + incoming > self.max {
            let Some((n, v)) = self.spans.pop_back() else { break };
            let len = usize::from(n) + usize::from(v);
            // At most 4 KiB moved, and only when the table is full.
            self.bytes.drain(..len);
            self.size -= len + ENTRY_OVERHEAD;
            self.generation += 1;
        }
    }
}

/// Appends `:status`: indexed when the static table has it (§6.1).
pub(crate) fn write_status(out: &mut Vec<u8>, status: u16) {
    let index = match status {
        200 => 8,
        204 => 9,
        206 => 10,
        304 => 11,
        400 => 12,
        404 => 13,
        500 => 14,
        _ => {
            // Literal without indexing, name `:status` (index 8).
            out.push(0x08);
            out.push(3);
            out.push(b'0' + (status / 100 % 10) as u8);
            out.push(b'0' + (status / 10 % 10) as u8);
            out.push(b'0' + (status % 10) as u8);
            return;
        }
    };
    out.push(0x80 | index);
}

/// Appends a field as a literal without indexing (§6.2.2). `name` must be
/// lowercase already, or is lowercased here (field names are sent in
/// lowercase in HTTP/2, RFC 9113 §8.2.1).
pub(crate) fn write_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    write_literal(out, 0, 4, name, value);
}

/// Appends a field as a literal never indexed (§6.2.3).
pub(crate) fn write_never_indexed(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    write_literal(out, 0x10, 4, name, value);
}

/// Appends a literal field of the representation `first` (its pattern
/// bits) with an `n`-bit name index, the name indexed from the static
/// table when it is there.
fn write_literal(out: &mut Vec<u8>, first: u8, n: u32, name: &[u8], value: &[u8]) {
    match static_name_index(name) {
        Some(index) => write_integer(out, first, n, index),
        None => {
            out.push(first);
            write_integer(out, 0, 7, name.len());
            out.extend(name.iter().map(u8::to_ascii_lowercase));
        }
    }
    write_string(out, value);
}

/// The static table's index for a field name (any case), if it has one.
fn static_name_index(name: &[u8]) -> Option<usize> {
    // The pseudo-fields (1..=14) are not response field names.
    STATIC[14..]
        .iter()
        .position(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
        .map(|i| i + 15)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h2::tests::hex;

    fn decode_all(dec: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, HpackError> {
        let (mut bytes, mut fields) = (Vec::new(), Vec::new());
        let mut sink = Sink::new(&mut bytes, &mut fields, 1 << 20);
        dec.decode(block, &mut sink)?;
        let s = |(at, len): (u32, u32)| String::from_utf8(bytes[at as usize..(at + len) as usize].to_vec()).unwrap();
        Ok(fields.iter().map(|f| (s(f.name), s(f.value))).collect())
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
    }

    /// RFC 7541 Appendix C.3 (no Huffman) and C.4 (Huffman): three requests
    /// on one connection, each relying on the table the last one built.
    #[test]
    fn rfc_request_examples() {
        for blocks in crate::h2::tests::RFC7541_REQUEST_BLOCKS {
            let mut dec = Decoder::new(4096);
            assert_eq!(
                decode_all(&mut dec, &hex(blocks[0])).unwrap(),
                pairs(&[
                    (":method", "GET"),
                    (":scheme", "http"),
                    (":path", "/"),
                    (":authority", "www.example.com")
                ])
            );
            assert_eq!(
                decode_all(&mut dec, &hex(blocks[1])).unwrap(),
                pairs(&[
                    (":method", "GET"),
                    (":scheme", "http"),
                    (":path", "/"),
                    (":authority", "www.example.com"),
                    ("cache-control", "no-cache")
                ])
            );
            assert_eq!(
                decode_all(&mut dec, &hex(blocks[2])).unwrap(),
                pairs(&[
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":path", "/index.html"),
                    (":authority", "www.example.com"),
                    ("custom-key", "custom-value")
                ])
            );
            assert_eq!(dec.size, 164);
        }
    }

    #[test]
    fn eviction_keeps_the_table_within_its_size() {
        let mut dec = Decoder::new(100);
        // Two literal-with-indexing fields of 32 + 10 + 20 = 62 bytes each.
        let mut block = Vec::new();
        for v in [b"aaaaaaaaaaaaaaaaaaaa", b"bbbbbbbbbbbbbbbbbbbb"] {
            block.push(0x40);
            write_integer(&mut block, 0, 7, 10);
            block.extend_from_slice(b"custom-key");
            write_integer(&mut block, 0, 7, 20);
            block.extend_from_slice(v);
        }
        decode_all(&mut dec, &block).unwrap();
        assert_eq!(dec.entries.len(), 1);
        assert_eq!(dec.size, 62);
        // Index 62 is the newest: the b's.
        assert_eq!(decode_all(&mut dec, &[0x80 | 62]).unwrap()[0].1, "b".repeat(20));
        assert!(decode_all(&mut dec, &[0x80 | 63]).is_err());
    }

    #[test]
    fn malformed_blocks_are_compression_errors() {
        let mut dec = Decoder::new(4096);
        for bad in [
            &[0x80][..],                                 // index 0
            &[0xff, 0x80],                               // truncated integer
            &[0xbe],                                     // empty dynamic table
            &[0x82, 0x3f, 0xe1, 0x1f],                   // size update after a field
            &[0x3f, 0xe2, 0x1f],                         // size update above 4096
            &[0x00, 0x05, b'a'],                         // string past the end
            &[0x00, 0x81, 0x00, 0x00],                   // Huffman padding of zeros
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f], // integer overflow
        ] {
            assert!(decode_all(&mut dec, bad).is_err(), "{bad:x?}");
        }
    }

    #[test]
    fn encoded_fields_decode_back() {
        let mut block = Vec::new();
        for status in [200, 404, 418, 503] {
            block.clear();
            write_status(&mut block, status);
            write_field(&mut block, b"Content-Type", b"text/plain; charset=utf-8");
            write_field(&mut block, b"X-Custom", b"Value");
            let got = decode_all(&mut Decoder::new(4096), &block).unwrap();
            assert_eq!(
                got,
                pairs(&[
                    (":status", &status.to_string()),
                    ("content-type", "text/plain; charset=utf-8"),
                    ("x-custom", "Value")
                ])
            );
        }
    }

    #[test]
    fn integers_round_trip() {
        for n in [1, 4, 5, 6, 7] {
            for v in [0, 1, 30, 31, 126, 127, 128, 1337, 1 << 20] {
                let mut out = Vec::new();
                write_integer(&mut out, 0, n, v);
                let mut s = &out[..];
                assert_eq!(integer(&mut s, n).unwrap(), v);
                assert!(s.is_empty());
            }
        }
    }

    /// One answer's fields, encoded by `enc` into a block of their own.
    fn encode_block(enc: &mut Encoder, fields: &[(&str, &str)]) -> Vec<u8> {
        let mut block = Vec::new();
        enc.begin(&mut block);
        for (n, v) in fields {
            enc.field(&mut block, n.as_bytes(), v.as_bytes());
        }
        block
    }

    /// The encoder's dynamic table, read back by the decoder (as a client
    /// would): repeated fields become one byte, the table is evicted
    /// within its size, and a smaller SETTINGS_HEADER_TABLE_SIZE is
    /// announced at the start of the next block, after which the decoder
    /// (with the client's smaller table) still reads every block.
    #[test]
    fn encoder_indexes_what_repeats_and_follows_the_table_size() {
        let long = "v".repeat(300);
        let fields: &[(&str, &str)] = &[
            ("server", "peregrine"),
            ("date", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ("content-type", "text/html; charset=utf-8"),
            ("content-length", "1234"),
            ("link", &long),
        ];
        for table in [4096u32, 100, 0] {
            let mut enc = Encoder::new();
            let mut dec = Decoder::new(4096);
            let mut sizes = Vec::new();
            for round in 0..4 {
                if round == 2 {
                    enc.set_table_size(table);
                }
                let block = encode_block(&mut enc, fields);
                assert_eq!(
                    decode_all(&mut dec, &block).unwrap(),
                    pairs(fields),
                    "table {table}, round {round}"
                );
                sizes.push(block.len());
            }
            if table == 4096 {
                // Four fields of 1 byte each once indexed; the long value
                // stays a literal.
                assert!(sizes[1] < sizes[0] - 50, "{sizes:?}");
                let mut literal = Vec::new();
                write_field(&mut literal, b"link", long.as_bytes());
                assert_eq!(sizes[1], 4 + literal.len(), "{sizes:?}");
            }
            if table == 0 {
                // Nothing fits: no field is indexed once the table is gone.
                assert_eq!(sizes[3], sizes[2] - 1, "{sizes:?} (round 2 carries the size update)");
                assert_eq!(dec.size_max, 0);
            }
        }
    }

    /// Many answers over one small table: entries are evicted oldest
    /// first (§4.4) while the decoder, which evicts by the same rule, reads
    /// every block back; the table never exceeds its size, and its bytes
    /// never outgrow the buffer reserved for them (no allocation once warm).
    #[test]
    fn evicted_entries_decode_over_many_answers() {
        for table in [4096u32, 300, 100, 64] {
            let mut enc = Encoder::new();
            enc.set_table_size(table);
            let mut dec = Decoder::new(4096);
            for i in 0..500u32 {
                let etag = format!("\"{:x}-{}\"", i % 37, i % 5);
                let length = (i % 11 * 100).to_string();
                let ct = ["text/html", "image/png", "text/css; charset=utf-8"][i as usize % 3];
                let fields = [
                    ("server", "peregrine"),
                    ("content-type", ct),
                    ("content-length", &length),
                    ("etag", &etag),
                    ("x-request", &etag),
                    ("set-cookie", "id=1"),
                ];
                let block = encode_block(&mut enc, &fields);
                assert_eq!(
                    decode_all(&mut dec, &block).unwrap(),
                    pairs(&fields),
                    "table {table}, answer {i}"
                );
                assert!(enc.size <= table as usize, "table {table}: {} bytes", enc.size);
                assert_eq!(enc.size, dec.size, "both sides count the same table");
                assert_eq!(enc.size, enc.bytes.len() + enc.spans.len() * ENTRY_OVERHEAD);
                assert!(enc.bytes.capacity() <= ENCODER_TABLE_MAX);
                assert!(enc.spans.len() <= ENCODER_TABLE_MAX / ENTRY_OVERHEAD);
            }
        }
    }

    /// A SETTINGS_HEADER_TABLE_SIZE change is a size update at the start of
    /// the next block (§4.2, §6.3), 0 included: 0 empties both tables, and
    /// a rise after it is announced as the smallest size, then the new.
    #[test]
    fn table_size_updates_follow_settings_including_zero() {
        let fields = [("server", "peregrine"), ("vary", "accept-encoding")];
        let mut enc = Encoder::new();
        let mut dec = Decoder::new(4096);
        let first = encode_block(&mut enc, &fields);
        decode_all(&mut dec, &first).unwrap();
        assert_eq!(encode_block(&mut enc, &fields), [0xbf, 0xbe], "both indexed: 63, 62");

        enc.set_table_size(0);
        let block = encode_block(&mut enc, &fields);
        assert_eq!(block[0], 0x20, "size update to 0 opens the block");
        assert_eq!(
            block.len(),
            1 + first.len() + 2,
            "literals without indexing (4-bit prefixes)"
        );
        assert_eq!(decode_all(&mut dec, &block).unwrap(), pairs(&fields));
        assert_eq!((dec.size, dec.entries.len()), (0, 0));
        assert_eq!(encode_block(&mut enc, &fields)[0], block[1], "no second update");

        // Down to 0 and back up to 4096 before a block: both announced.
        enc.set_table_size(100);
        enc.set_table_size(0);
        enc.set_table_size(8192);
        let block = encode_block(&mut enc, &fields);
        assert_eq!(block[..4], [0x20, 0x3f, 0xe1, 0x1f], "0, then 4096 (our cap, not 8192)");
        assert_eq!(decode_all(&mut dec, &block).unwrap(), pairs(&fields));
        assert_eq!(encode_block(&mut enc, &fields), [0xbf, 0xbe]);
        // A setting equal to the table's size announces nothing.
        enc.set_table_size(4096);
        assert!(!enc.has_update());
    }

    /// Credential-bearing fields are literals never indexed (§6.2.3: the
    /// pattern 0001), every time; fields off the allow-list are literals
    /// without indexing (0000); neither enters the table.
    #[test]
    fn credentials_are_never_indexed_and_unknown_fields_not_indexed() {
        let mut enc = Encoder::new();
        for (name, pattern) in [
            ("set-cookie", 0x10),
            ("Set-Cookie", 0x10),
            ("cookie", 0x10),
            ("authorization", 0x10),
            ("proxy-authorization", 0x10),
            ("authentication-info", 0x10),
            ("x-auth-token", 0x10),
            ("x-api-key", 0x10),
            ("x-csrf-token", 0x10),
            ("x-custom", 0x00),
            ("location", 0x00),
        ] {
            for _ in 0..2 {
                let mut block = Vec::new();
                enc.field(&mut block, name.as_bytes(), b"secret=0123456789");
                assert_eq!(block[0] & 0xf0, pattern, "{name}: {block:x?}");
                let got = decode_all(&mut Decoder::new(4096), &block).unwrap();
                assert_eq!(got, pairs(&[(&name.to_ascii_lowercase(), "secret=0123456789")]));
            }
        }
        assert_eq!((enc.size, enc.generation()), (0, 0), "nothing entered the table");
        assert_eq!(indexing(b"Strict-Transport-Security"), Indexing::Table);
    }

    /// An independent decoder reads the encoder's blocks: python-hyper's
    /// `hpack` (PyPI, through the venv with `h2` the WebSocket tests use),
    /// over answers that evict, a table size update to 0 and back, and
    /// never-indexed fields, which it must report as such.
    #[test]
    fn python_hpack_decodes_the_encoder_blocks() {
        let venv = std::env::temp_dir().join("peregrine-hpack-h2-venv");
        let python = test_support::install::h2_python(&venv)
            .unwrap_or_else(|e| panic!("this test needs Python's h2 (and so hpack): {e}"));
        const SCRIPT: &str = r#"
import sys, hpack
d = hpack.Decoder()
for line in sys.stdin:
    kind, arg = line.split()
    if kind == "S":
        d.max_allowed_table_size = int(arg)
        continue
    for f in d.decode(bytes.fromhex(arg)):
        print(f"{f[0]}\t{f[1]}\t{'N' if not f.indexable else 'I'}")
    print(f"-- {sum(32 + len(n) + len(v) for n, v in d.header_table.dynamic_entries)}")
"#;
        let mut enc = Encoder::new();
        let (mut input, mut want) = (String::new(), String::new());
        for i in 0..300u32 {
            let table = match i {
                100 => Some(200),
                150 => Some(0),
                200 => Some(4096),
                _ => None,
            };
            if let Some(t) = table {
                enc.set_table_size(t);
                input += &format!("S {t}\n");
            }
            let etag = format!("\"{:x}\"", i % 29);
            let date = format!("Sun, 06 Nov 1994 08:{:02}:00 GMT", i / 10 % 60);
            let fields = [
                ("server", "peregrine"),
                ("date", &date),
                ("content-type", ["text/html", "text/css", "image/webp"][i as usize % 3]),
                ("etag", &etag),
                ("set-cookie", "session=abcdef; HttpOnly"),
                ("x-trace", &etag),
                ("x-auth-token", "t0k3n"),
            ];
            let block = encode_block(&mut enc, &fields);
            input += &format!("B {}\n", block.iter().map(|b| format!("{b:02x}")).collect::<String>());
            for (n, v) in fields {
                let never = indexing(n.as_bytes()) == Indexing::Never;
                want += &format!("{n}\t{v}\t{}\n", if never { 'N' } else { 'I' });
            }
            want += &format!("-- {}\n", enc.size);
        }
        let mut child = std::process::Command::new(python)
            .args(["-c", SCRIPT])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, input.as_bytes()));
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let got = String::from_utf8(out.stdout).unwrap();
        for (n, (g, w)) in got.lines().zip(want.lines()).enumerate() {
            assert_eq!(g, w, "line {n}");
        }
        assert_eq!(got.lines().count(), want.lines().count());
    }
}
