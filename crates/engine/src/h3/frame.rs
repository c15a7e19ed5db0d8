//! HTTP/3 framing (RFC 9114 §7): QUIC variable-length integers, frame
//! types, error codes, and an incremental frame reader that takes a
//! stream's bytes in pieces of any size.

/// Frame types (§7.2). 0x02, 0x06, 0x08 and 0x09 are HTTP/2's, reserved:
/// receiving one is H3_FRAME_UNEXPECTED (§7.2.8).
pub(crate) const DATA: u64 = 0x00;
pub(crate) const HEADERS: u64 = 0x01;
pub(crate) const CANCEL_PUSH: u64 = 0x03;
pub(crate) const SETTINGS: u64 = 0x04;
pub(crate) const PUSH_PROMISE: u64 = 0x05;
pub(crate) const GOAWAY: u64 = 0x07;
pub(crate) const MAX_PUSH_ID: u64 = 0x0d;

/// Unidirectional stream types (§6.2, RFC 9204 §4.2).
pub(crate) const STREAM_CONTROL: u64 = 0x00;
pub(crate) const STREAM_PUSH: u64 = 0x01;
pub(crate) const STREAM_QPACK_ENCODER: u64 = 0x02;
pub(crate) const STREAM_QPACK_DECODER: u64 = 0x03;

/// Settings (§7.2.4.1, RFC 9204 §5).
pub(crate) const SETTINGS_QPACK_MAX_TABLE_CAPACITY: u64 = 0x01;
pub(crate) const SETTINGS_MAX_FIELD_SECTION_SIZE: u64 = 0x06;
pub(crate) const SETTINGS_QPACK_BLOCKED_STREAMS: u64 = 0x07;
/// RFC 9220 §3: the client may open WebSockets with extended CONNECT
/// (the value and meaning of RFC 8441's setting, in HTTP/3's registry).
pub(crate) const SETTINGS_ENABLE_CONNECT_PROTOCOL: u64 = 0x08;

/// Error codes (§8.1, RFC 9204 §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code)] // the full list, as the RFC gives it
pub(crate) enum Code {
    NoError = 0x100,
    GeneralProtocolError = 0x101,
    InternalError = 0x102,
    StreamCreationError = 0x103,
    ClosedCriticalStream = 0x104,
    FrameUnexpected = 0x105,
    FrameError = 0x106,
    ExcessiveLoad = 0x107,
    IdError = 0x108,
    SettingsError = 0x109,
    MissingSettings = 0x10a,
    RequestRejected = 0x10b,
    RequestCancelled = 0x10c,
    RequestIncomplete = 0x10d,
    MessageError = 0x10e,
    ConnectError = 0x10f,
    VersionFallback = 0x110,
    QpackDecompressionFailed = 0x200,
    QpackEncoderStreamError = 0x201,
    QpackDecoderStreamError = 0x202,
}

/// The largest value a variable-length integer holds (RFC 9000 §16).
pub(crate) const VARINT_MAX: u64 = (1 << 62) - 1;

/// Reads a variable-length integer from the front of `buf`: the value and
/// its length, or `None` if `buf` ends first.
pub(crate) fn read_varint(buf: &[u8]) -> Option<(u64, usize)> {
    let first = *buf.first()?;
    let len = 1usize << (first >> 6);
    if buf.len() < len {
        return None;
    }
    let mut v = u64::from(first & 0x3f);
    for &b in &buf[1..len] {
        v = (v << 8) | u64::from(b);
    }
    Some((v, len))
}

/// Appends `v` (at most `VARINT_MAX`) in the shortest encoding.
pub(crate) fn write_varint(out: &mut Vec<u8>, v: u64) {
    debug_assert!(v <= VARINT_MAX);
    if v < 1 << 6 {
        out.push(v as u8);
    } else if v < 1 << 14 {
        out.extend_from_slice(&(0x4000 | v as u16).to_be_bytes());
    } else if v < 1 << 30 {
        out.extend_from_slice(&(0x8000_0000 | v as u32).to_be_bytes());
    } else {
        out.extend_from_slice(&(0xc000_0000_0000_0000 | v).to_be_bytes());
    }
}

/// Appends a frame header (type and payload length).
pub(crate) fn write_header(out: &mut Vec<u8>, kind: u64, len: u64) {
    write_varint(out, kind);
    write_varint(out, len);
}

/// Our SETTINGS frame: a zero-capacity dynamic table, no blocked streams,
/// the largest field section we take (§4.2.2), and with `connect_protocol`
/// SETTINGS_ENABLE_CONNECT_PROTOCOL = 1 (RFC 9220 §3).
pub(crate) fn write_settings(out: &mut Vec<u8>, field_section_bytes_max: u64, connect_protocol: bool) {
    let mut payload = Vec::with_capacity(16);
    if connect_protocol {
        write_varint(&mut payload, SETTINGS_ENABLE_CONNECT_PROTOCOL);
        write_varint(&mut payload, 1);
    }
    write_varint(&mut payload, SETTINGS_QPACK_MAX_TABLE_CAPACITY);
    write_varint(&mut payload, 0);
    write_varint(&mut payload, SETTINGS_QPACK_BLOCKED_STREAMS);
    write_varint(&mut payload, 0);
    write_varint(&mut payload, SETTINGS_MAX_FIELD_SECTION_SIZE);
    write_varint(&mut payload, field_section_bytes_max.min(VARINT_MAX));
    write_header(out, SETTINGS, payload.len() as u64);
    out.extend_from_slice(&payload);
}

/// A GOAWAY frame naming the first request stream we will not process.
pub(crate) fn write_goaway(out: &mut Vec<u8>, stream_id: u64) {
    let mut payload = Vec::with_capacity(8);
    write_varint(&mut payload, stream_id);
    write_header(out, GOAWAY, payload.len() as u64);
    out.extend_from_slice(&payload);
}

/// Checks a SETTINGS payload (§7.2.4): well formed, no identifier twice,
/// none of HTTP/2's. Values we do not use are ignored (we never use the
/// client's dynamic table or push).
pub(crate) fn check_settings(mut payload: &[u8]) -> Result<(), (Code, &'static str)> {
    let mut seen: Vec<u64> = Vec::new();
    while !payload.is_empty() {
        let (id, n) = read_varint(payload).ok_or((Code::FrameError, "truncated SETTINGS"))?;
        payload = &payload[n..];
        let (_value, n) = read_varint(payload).ok_or((Code::FrameError, "truncated SETTINGS"))?;
        payload = &payload[n..];
        if matches!(id, 0x02..=0x05) {
            return Err((Code::SettingsError, "an HTTP/2 setting in SETTINGS"));
        }
        if seen.contains(&id) {
            return Err((Code::SettingsError, "a setting repeated"));
        }
        if seen.len() < 64 {
            seen.push(id);
        }
    }
    Ok(())
}

/// Frame types HTTP/2 had and HTTP/3 reserves (§7.2.8).
pub(crate) fn is_h2_reserved(kind: u64) -> bool {
    matches!(kind, 0x02 | 0x06 | 0x08 | 0x09)
}

/// What the reader found in the bytes it was given.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    /// A frame begins: its type and payload length.
    Start { kind: u64, len: u64 },
    /// Part of the current frame's payload (never empty).
    Payload(&'a [u8]),
    /// The current frame's payload is complete.
    End,
}

/// Splits a stream into frames, in pieces of any size, holding at most a
/// frame header's bytes (16) of its own.
#[derive(Default)]
pub(crate) struct Reader {
    /// A frame header split across inputs.
    partial: [u8; 16],
    n_partial: usize,
    /// Payload bytes of the current frame still to come, if in one.
    left: Option<u64>,
}

impl Reader {
    /// The next piece from `input`, and how many bytes of it were used;
    /// `None` when `input` is used up (or holds only part of a header,
    /// which is kept).
    pub(crate) fn next<'a>(&mut self, input: &'a [u8]) -> Option<(Piece<'a>, usize)> {
        if let Some(left) = self.left {
            if left == 0 {
                self.left = None;
                return Some((Piece::End, 0));
            }
            if input.is_empty() {
                return None;
            }
            let n = usize::try_from(left).map_or(input.len(), |l| l.min(input.len()));
            self.left = Some(left - n as u64);
            return Some((Piece::Payload(&input[..n]), n));
        }
        if input.is_empty() {
            return None;
        }
        // Complete the header from the kept bytes and the input.
        let have = self.n_partial;
        let take = input.len().min(self.partial.len() - have);
        let mut head = [0u8; 16];
        head[..have].copy_from_slice(&self.partial[..have]);
        head[have..have + take].copy_from_slice(&input[..take]);
        let avail = &head[..have + take];
        let parsed =
            read_varint(avail).and_then(|(kind, a)| read_varint(&avail[a..]).map(|(len, b)| (kind, len, a + b)));
        match parsed {
            Some((kind, len, used)) => {
                self.n_partial = 0;
                self.left = Some(len);
                Some((Piece::Start { kind, len }, used - have))
            }
            None => {
                // Two varints take at most 16 bytes: all of the input fits.
                self.partial[have..have + take].copy_from_slice(&input[..take]);
                self.n_partial = have + take;
                None
            }
        }
    }

    /// Whether the stream may end here: not inside a frame.
    pub(crate) fn at_boundary(&self) -> bool {
        self.n_partial == 0 && self.left.is_none()
    }
}
