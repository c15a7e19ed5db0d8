//! The chunked transfer coding (RFC 9112 §7.1), decoded incrementally.
//!
//! ```text
//! chunked-body   = *chunk last-chunk trailer-section CRLF
//! chunk          = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//! chunk-size     = 1*HEXDIG
//! last-chunk     = 1*("0") [ chunk-ext ] CRLF
//! chunk-ext      = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
//! ```
//!
//! The decoder is strict where leniency has been used for request smuggling:
//! every line ends in CRLF (no bare LF, no bare CR), sizes are hex digits only
//! and never overflow, and extensions are tokens or quoted strings. Extensions
//! and trailer fields are checked and then dropped, unless the decoder was
//! made to keep the trailer section ([`ChunkedDecoder::keeping_trailers`],
//! the reverse proxy's for an upstream's answer).
//!
//! [`ChunkedDecoder::decode_in_place`] decodes inside the read buffer: the data
//! only ever moves toward the front, so a body needs no second buffer.

/// Why a chunked body was refused. All of them are answered 400 and a close,
/// except `TooLarge` (413).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkedError {
    /// A chunk size that is not hex, is empty, or overflows.
    Size,
    /// A malformed chunk extension, or extensions longer than allowed.
    Extension,
    /// A line that does not end in CRLF, or data not followed by CRLF.
    LineEnding,
    /// A malformed trailer field, or trailers longer than allowed.
    Trailer,
    /// The decoded body is longer than the limit.
    TooLarge,
}

impl ChunkedError {
    /// The status code this error is answered with.
    pub fn status(self) -> u16 {
        match self {
            ChunkedError::TooLarge => 413,
            _ => 400,
        }
    }

    /// A short human-readable reason.
    pub fn reason(self) -> &'static str {
        match self {
            ChunkedError::Size => "invalid chunk size",
            ChunkedError::Extension => "invalid chunk extension",
            ChunkedError::LineEnding => "invalid line ending in chunked body",
            ChunkedError::Trailer => "invalid trailer field",
            ChunkedError::TooLarge => "request body too large",
        }
    }
}

/// Longest chunk-ext accepted on one chunk line, in bytes.
const EXT_BYTES_MAX: usize = 1024;
/// Hex digits in a chunk size, at most.
const SIZE_DIGITS_MAX: usize = 16;
/// Longest trailer section accepted (a request's, kept or not), in bytes.
pub const TRAILER_BYTES_MAX: usize = 8 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Before the first hex digit of a size.
    SizeStart,
    /// Inside the hex digits.
    Size,
    /// Whitespace after the size: only `;` may follow.
    SizeBws,
    /// After `;`, before the extension name.
    ExtNameStart,
    ExtName,
    /// Whitespace after an extension name.
    ExtNameBws,
    /// After `=`.
    ExtValueStart,
    ExtToken,
    ExtQuoted,
    ExtQuotedEscape,
    /// After a quoted value: whitespace, `;` or CR.
    ExtValueEnd,
    /// CR seen at the end of a size line.
    SizeLf,
    /// Inside chunk data.
    Data,
    DataCr,
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    /// Inside a trailer field line.
    Trailer,
    TrailerLf,
    /// CR seen on the final empty line.
    EndLf,
    Done,
}

/// Incremental chunked decoder. Feed it bytes as they arrive.
#[derive(Clone, Debug)]
pub struct ChunkedDecoder {
    state: State,
    /// Bytes left in the current chunk, or the size being accumulated.
    remaining: u64,
    /// Decoded bytes so far.
    n_decoded: u64,
    body_bytes_max: u64,
    ext_bytes: usize,
    /// Hex digits in the current size, leading zeros included.
    size_digits: usize,
    trailer_bytes: usize,
    trailer_has_colon: bool,
    /// The trailer section's longest accepted length.
    trailer_bytes_max: usize,
    /// The trailer section's bytes as they came (each line with its
    /// CRLF), when kept.
    kept: Option<Vec<u8>>,
}

/// What one call to [`ChunkedDecoder::step`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// Input bytes consumed.
    pub consumed: usize,
    /// The part of the consumed input that is body data (may be empty).
    pub data: std::ops::Range<usize>,
    /// The terminating empty line has been consumed.
    pub done: bool,
}

impl ChunkedDecoder {
    /// A decoder for a body of at most `body_bytes_max` decoded bytes.
    pub fn new(body_bytes_max: u64) -> Self {
        ChunkedDecoder {
            state: State::SizeStart,
            remaining: 0,
            n_decoded: 0,
            body_bytes_max,
            ext_bytes: 0,
            size_digits: 0,
            trailer_bytes: 0,
            trailer_has_colon: false,
            trailer_bytes_max: TRAILER_BYTES_MAX,
            kept: None,
        }
    }

    /// A decoder that keeps the trailer section, of at most
    /// `trailer_bytes_max` bytes ([`ChunkedDecoder::take_trailers`]);
    /// a longer one is an error (`Trailer`), never cut short.
    pub fn keeping_trailers(body_bytes_max: u64, trailer_bytes_max: usize) -> Self {
        ChunkedDecoder {
            trailer_bytes_max,
            kept: Some(Vec::new()),
            ..ChunkedDecoder::new(body_bytes_max)
        }
    }

    /// The trailer section kept so far (`name: value\r\n` lines, checked:
    /// each a token, a colon, a value of visible bytes, spaces and tabs),
    /// once the body is done; `None` if it had none or none is kept.
    pub fn take_trailers(&mut self) -> Option<Vec<u8>> {
        self.kept.take().filter(|t| !t.is_empty())
    }

    /// Whether the whole body, trailers included, has been consumed.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes framing bytes up to the next run of data, or one run of data.
    /// Returns having consumed all of `input` when it needs more.
    pub fn step(&mut self, input: &[u8]) -> Result<Step, ChunkedError> {
        let mut i = 0;
        while i < input.len() {
            if self.state == State::Data {
                let n = (input.len() - i).min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
                self.remaining -= n as u64;
                if self.remaining == 0 {
                    self.state = State::DataCr;
                }
                return Ok(Step {
                    consumed: i + n,
                    data: i..i + n,
                    done: false,
                });
            }
            if self.state == State::Done {
                break;
            }
            self.byte(input[i])?;
            i += 1;
        }
        Ok(Step {
            consumed: i,
            data: i..i,
            done: self.state == State::Done,
        })
    }

    fn byte(&mut self, b: u8) -> Result<(), ChunkedError> {
        use State::*;
        let is_ws = b == b' ' || b == b'\t';
        self.state = match self.state {
            SizeStart | Size => match hex_value(b) {
                Some(v) => {
                    // 16 hex digits hold any u64; more is either an overflow
                    // or a stream of leading zeros.
                    self.size_digits += 1;
                    if self.remaining > (u64::MAX >> 4) || self.size_digits > SIZE_DIGITS_MAX {
                        return Err(ChunkedError::Size);
                    }
                    self.remaining = (self.remaining << 4) | u64::from(v);
                    Size
                }
                None if self.state == SizeStart => return Err(ChunkedError::Size),
                None if b == b'\r' => SizeLf,
                None if b == b';' => ExtNameStart,
                None if is_ws => SizeBws,
                None => return Err(ChunkedError::Size),
            },
            SizeBws => match b {
                b' ' | b'\t' => SizeBws,
                b';' => ExtNameStart,
                _ => return Err(ChunkedError::Size),
            },
            ExtNameStart | ExtName | ExtNameBws | ExtValueStart | ExtToken | ExtQuoted | ExtQuotedEscape
            | ExtValueEnd => {
                self.ext_bytes += 1;
                if self.ext_bytes > EXT_BYTES_MAX {
                    return Err(ChunkedError::Extension);
                }
                self.ext_byte(b)?
            }
            SizeLf => {
                if b != b'\n' {
                    return Err(ChunkedError::LineEnding);
                }
                self.ext_bytes = 0;
                if self.remaining == 0 {
                    TrailerStart
                } else {
                    self.n_decoded = self.n_decoded.saturating_add(self.remaining);
                    if self.n_decoded > self.body_bytes_max {
                        return Err(ChunkedError::TooLarge);
                    }
                    Data
                }
            }
            Data => unreachable!("data is consumed in runs by step"),
            DataCr => match b {
                b'\r' => DataLf,
                _ => return Err(ChunkedError::LineEnding),
            },
            DataLf => match b {
                b'\n' => {
                    self.size_digits = 0;
                    SizeStart
                }
                _ => return Err(ChunkedError::LineEnding),
            },
            TrailerStart => match b {
                b'\r' => EndLf,
                _ => {
                    self.trailer_has_colon = false;
                    self.trailer_byte(b)?
                }
            },
            Trailer => self.trailer_byte(b)?,
            TrailerLf => match b {
                b'\n' if self.trailer_has_colon => {
                    // The LF counts too: a kept section is never longer
                    // than the limit.
                    self.trailer_bytes += 1;
                    if self.trailer_bytes > self.trailer_bytes_max {
                        return Err(ChunkedError::Trailer);
                    }
                    if let Some(kept) = &mut self.kept {
                        kept.push(b'\n');
                    }
                    TrailerStart
                }
                _ => return Err(ChunkedError::Trailer),
            },
            EndLf => match b {
                b'\n' => Done,
                _ => return Err(ChunkedError::LineEnding),
            },
            Done => Done,
        };
        Ok(())
    }

    fn ext_byte(&mut self, b: u8) -> Result<State, ChunkedError> {
        use State::*;
        let is_ws = b == b' ' || b == b'\t';
        let bad = Err(ChunkedError::Extension);
        Ok(match (self.state, b) {
            (ExtNameStart, _) if is_ws => ExtNameStart,
            (ExtNameStart, _) if super::head::is_tchar(b) => ExtName,
            (ExtName, _) if super::head::is_tchar(b) => ExtName,
            (ExtName | ExtNameBws, b'=') => ExtValueStart,
            (ExtName | ExtNameBws | ExtValueEnd, b';') => ExtNameStart,
            (ExtName | ExtNameBws | ExtValueEnd, b'\r') => SizeLf,
            (ExtName | ExtNameBws, _) if is_ws => ExtNameBws,
            (ExtValueStart, _) if is_ws => ExtValueStart,
            (ExtValueStart, b'"') => ExtQuoted,
            (ExtValueStart | ExtToken, _) if super::head::is_tchar(b) => ExtToken,
            (ExtToken, b';') => ExtNameStart,
            (ExtToken, b'\r') => SizeLf,
            (ExtToken | ExtValueEnd, _) if is_ws => ExtValueEnd,
            (ExtQuoted, b'"') => ExtValueEnd,
            (ExtQuoted, b'\\') => ExtQuotedEscape,
            // qdtext = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text
            (ExtQuoted, _) if b == b'\t' || (b >= 0x20 && b != 0x7f) => ExtQuoted,
            // quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text )
            (ExtQuotedEscape, _) if b == b'\t' || (b >= 0x20 && b != 0x7f) => ExtQuoted,
            _ => return bad,
        })
    }

    fn trailer_byte(&mut self, b: u8) -> Result<State, ChunkedError> {
        self.trailer_bytes += 1;
        if self.trailer_bytes > self.trailer_bytes_max {
            return Err(ChunkedError::Trailer);
        }
        if let Some(kept) = &mut self.kept {
            kept.push(b);
        }
        match b {
            b'\r' => Ok(State::TrailerLf),
            b':' if !self.trailer_has_colon => {
                self.trailer_has_colon = true;
                Ok(State::Trailer)
            }
            // Field names are tokens; values are VCHAR, SP, HTAB, obs-text.
            _ if !self.trailer_has_colon && super::head::is_tchar(b) => Ok(State::Trailer),
            _ if self.trailer_has_colon && (b == b'\t' || (b >= 0x20 && b != 0x7f)) => Ok(State::Trailer),
            _ => Err(ChunkedError::Trailer),
        }
    }

    /// Decodes `buf[*read..]` in place: data bytes are moved down to
    /// `buf[*write..]`, both cursors advance. `*write <= *read` always holds,
    /// so decoded data never overwrites bytes not yet decoded. Returns whether
    /// the body is complete; `*read` is then just past the final CRLF.
    pub fn decode_in_place(
        &mut self,
        buf: &mut [u8],
        read: &mut usize,
        write: &mut usize,
    ) -> Result<bool, ChunkedError> {
        while *read < buf.len() && !self.is_done() {
            let step = self.step(&buf[*read..])?;
            let data = (*read + step.data.start)..(*read + step.data.end);
            if !data.is_empty() {
                buf.copy_within(data.clone(), *write);
                *write += data.len();
            }
            *read += step.consumed;
        }
        Ok(self.is_done())
    }
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces of `piece` bytes; returns the body and
    /// the number of bytes consumed.
    fn decode(input: &[u8], piece: usize) -> Result<Option<(Vec<u8>, usize)>, ChunkedError> {
        let mut dec = ChunkedDecoder::new(1 << 20);
        let mut body = Vec::new();
        let mut at = 0;
        while at < input.len() && !dec.is_done() {
            let end = (at + piece).min(input.len());
            let step = dec.step(&input[at..end])?;
            body.extend_from_slice(&input[at + step.data.start..at + step.data.end]);
            at += step.consumed;
        }
        Ok(dec.is_done().then_some((body, at)))
    }

    #[test]
    fn valid_bodies_decode_in_any_pieces() {
        let table: &[(&[u8], &[u8])] = &[
            (b"0\r\n\r\n", b""),
            (b"5\r\nhello\r\n0\r\n\r\n", b"hello"),
            (b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", b"hello world"),
            (b"A\r\n0123456789\r\n0\r\n\r\n", b"0123456789"),
            (b"a\r\n0123456789\r\n000\r\n\r\n", b"0123456789"),
            (b"5;ext\r\nhello\r\n0\r\n\r\n", b"hello"),
            (b"5 ; ext = val ; e2=\"q\\\"x\"\r\nhello\r\n0\r\n\r\n", b"hello"),
            (b"5\r\nhello\r\n0\r\nTrailer: value\r\nX-Other:\r\n\r\n", b"hello"),
            (b"000000000000001\r\nx\r\n0000000000000000\r\n\r\n", b"x"),
        ];
        for (input, want) in table {
            for piece in [1, 2, 3, 7, input.len()] {
                let got =
                    decode(input, piece).unwrap_or_else(|e| panic!("{:?}: {e:?}", String::from_utf8_lossy(input)));
                let (body, consumed) = got.expect("complete");
                assert_eq!(body, *want, "{:?}", String::from_utf8_lossy(input));
                assert_eq!(consumed, input.len());
            }
        }
    }

    #[test]
    fn decoding_stops_at_the_end_of_the_body() {
        let input = b"3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n";
        let (body, consumed) = decode(input, input.len()).unwrap().unwrap();
        assert_eq!(body, b"abc");
        assert_eq!(&input[consumed..], b"GET / HTTP/1.1\r\n");
    }

    #[test]
    fn incomplete_bodies_need_more() {
        for input in [
            &b""[..],
            b"5",
            b"5\r",
            b"5\r\nhel",
            b"5\r\nhello",
            b"5\r\nhello\r\n0\r\n",
            b"0\r\nX: y\r\n",
        ] {
            assert_eq!(decode(input, 1).unwrap(), None, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn malformed_bodies_are_refused() {
        let table: &[(&[u8], ChunkedError)] = &[
            (b"\r\nhello\r\n0\r\n\r\n", ChunkedError::Size),
            (b"g\r\n", ChunkedError::Size),
            (b"00000000000000001\r\nx\r\n0\r\n\r\n", ChunkedError::Size),
            (b"1\r\nx\r\n00000000000000000\r\n\r\n", ChunkedError::Size),
            (b"-5\r\n", ChunkedError::Size),
            (b"+5\r\n", ChunkedError::Size),
            (b"0x5\r\n", ChunkedError::Size),
            (b" 5\r\n", ChunkedError::Size),
            (b"5 \r\nhello\r\n", ChunkedError::Size),
            (b"5\x00\r\n", ChunkedError::Size),
            (b"10000000000000000\r\n", ChunkedError::Size),
            (b"5\nhello\r\n", ChunkedError::Size),
            (b"5\rhello\r\n", ChunkedError::LineEnding),
            (b"5\r\nhelloX\r\n", ChunkedError::LineEnding),
            (b"5\r\nhello\n0\r\n\r\n", ChunkedError::LineEnding),
            (b"5\r\nhello\r\r\n", ChunkedError::LineEnding),
            (b"0\r\n\n", ChunkedError::Trailer),
            (b"0\r\n\r\r", ChunkedError::LineEnding),
            (b"5;\r\nhello\r\n", ChunkedError::Extension),
            (b"5;a=\r\nhello\r\n", ChunkedError::Extension),
            (b"5;a b\r\nhello\r\n", ChunkedError::Extension),
            (b"5;a=\"x\r\nhello\r\n", ChunkedError::Extension),
            (b"5;a=\"\x01\"\r\nhello\r\n", ChunkedError::Extension),
            (b"5;a\x00\r\nhello\r\n", ChunkedError::Extension),
            (b"0\r\nNoColon\r\n\r\n", ChunkedError::Trailer),
            (b"0\r\nX: a\x00b\r\n\r\n", ChunkedError::Trailer),
            (b"0\r\nX y: z\r\n\r\n", ChunkedError::Trailer),
            (b"0\r\nX: y\nZ: w\r\n\r\n", ChunkedError::Trailer),
        ];
        for (input, want) in table {
            for piece in [1, input.len()] {
                assert_eq!(decode(input, piece), Err(*want), "{:?}", String::from_utf8_lossy(input));
            }
        }
    }

    #[test]
    fn long_extensions_and_trailers_are_refused() {
        let ext = format!("1;{}\r\nx\r\n0\r\n\r\n", "a".repeat(EXT_BYTES_MAX + 1));
        assert_eq!(decode(ext.as_bytes(), 64), Err(ChunkedError::Extension));
        let trailer = format!("0\r\nX: {}\r\n\r\n", "a".repeat(TRAILER_BYTES_MAX));
        assert_eq!(decode(trailer.as_bytes(), 64), Err(ChunkedError::Trailer));
    }

    /// A decoder keeping trailers gives the section as it came, whatever
    /// how the bytes were split; one byte over its limit (LFs counted) is
    /// refused, not cut short; a plain decoder keeps nothing.
    #[test]
    fn kept_trailers_are_the_section_as_sent_within_their_limit() {
        let input = b"5\r\nhello\r\n0\r\nGrpc-Status: 0\r\nX-A:  b \r\n\r\n";
        let section = b"Grpc-Status: 0\r\nX-A:  b \r\n";
        for split in 0..input.len() {
            let mut dec = ChunkedDecoder::keeping_trailers(64, section.len());
            for piece in [&input[..split], &input[split..]] {
                let mut rest = piece;
                while !rest.is_empty() && !dec.is_done() {
                    let step = dec.step(rest).unwrap();
                    rest = &rest[step.consumed..];
                }
            }
            assert!(dec.is_done());
            assert_eq!(dec.take_trailers().as_deref(), Some(&section[..]), "split at {split}");
        }
        let mut dec = ChunkedDecoder::keeping_trailers(64, section.len() - 1);
        let mut rest = &input[..];
        let refused = loop {
            match dec.step(rest) {
                Ok(step) => rest = &rest[step.consumed..],
                Err(e) => break e,
            }
        };
        assert_eq!(refused, ChunkedError::Trailer);
        let mut dec = ChunkedDecoder::new(64);
        let mut rest = &input[..];
        while !dec.is_done() {
            rest = &rest[dec.step(rest).unwrap().consumed..];
        }
        assert_eq!(dec.take_trailers(), None);
    }

    #[test]
    fn bodies_over_the_limit_are_refused_before_their_data_arrives() {
        let mut dec = ChunkedDecoder::new(10);
        assert_eq!(
            dec.step(b"5\r\nhello\r\n"),
            Ok(Step {
                consumed: 8,
                data: 3..8,
                done: false
            })
        );
        let mut dec = ChunkedDecoder::new(10);
        let err = (|| {
            let mut input: &[u8] = b"6\r\nhello \r\n6\r\n";
            while !input.is_empty() {
                let step = dec.step(input)?;
                input = &input[step.consumed..];
            }
            Ok(())
        })();
        assert_eq!(err, Err(ChunkedError::TooLarge));
    }

    /// A small deterministic generator, so the model test needs no crate.
    struct XorShift(u64);
    impl XorShift {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    #[test]
    fn random_encodings_decode_to_their_body_in_any_pieces() {
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        for _ in 0..500 {
            let body: Vec<u8> = (0..rng.below(300)).map(|_| rng.below(256) as u8).collect();
            let mut encoded = Vec::new();
            let mut rest = &body[..];
            while !rest.is_empty() {
                let n = (rng.below(40) as usize + 1).min(rest.len());
                let size = if rng.below(2) == 0 {
                    format!("{n:x}")
                } else {
                    format!("{n:X}")
                };
                encoded.extend_from_slice(size.as_bytes());
                if rng.below(3) == 0 {
                    encoded.extend_from_slice(b" ; name=\"quoted;value\";flag");
                }
                encoded.extend_from_slice(b"\r\n");
                encoded.extend_from_slice(&rest[..n]);
                encoded.extend_from_slice(b"\r\n");
                rest = &rest[n..];
            }
            encoded.extend_from_slice(b"0\r\n");
            if rng.below(2) == 0 {
                encoded.extend_from_slice(b"Checksum: abc\r\n");
            }
            encoded.extend_from_slice(b"\r\n");
            let piece = rng.below(20) as usize + 1;
            let (decoded, consumed) = decode(&encoded, piece).unwrap().unwrap();
            assert_eq!(decoded, body);
            assert_eq!(consumed, encoded.len());
            let mut buf = encoded.clone();
            let (mut read, mut write) = (0, 0);
            assert!(ChunkedDecoder::new(1 << 20)
                .decode_in_place(&mut buf, &mut read, &mut write)
                .unwrap());
            assert_eq!(&buf[..write], &body[..]);
        }
    }

    #[test]
    fn in_place_decoding_compacts_the_body() {
        let mut buf = b"HEAD3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\nNEXT".to_vec();
        let mut dec = ChunkedDecoder::new(100);
        let (mut read, mut write) = (4, 4);
        // Feed it the bytes in two arrivals.
        let split = 12;
        assert!(!dec.decode_in_place(&mut buf[..split], &mut read, &mut write).unwrap());
        assert!(dec.decode_in_place(&mut buf, &mut read, &mut write).unwrap());
        assert_eq!(&buf[4..write], b"abcde");
        assert_eq!(&buf[read..], b"NEXT");
    }
}
