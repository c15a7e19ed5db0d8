//! One stream's bytes in, parsed: a request stream (HEADERS, DATA,
//! trailers; RFC 9114 §4.1) or a unidirectional stream (control, QPACK;
//! §6.2). Input may arrive split at any byte.

use super::frame::{self, Code, Piece, Reader};
use super::qpack;
use crate::body::BodySink;
use crate::message::fields::Sink;
use crate::message::head::Head;
use crate::message::trailers::Trailers;

/// An error found on a stream: it ends the stream only, or the whole
/// connection (§8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Error {
    /// Reset this stream (and stop reading it) with the code.
    Stream(Code, &'static str),
    /// Close the connection with the code.
    Conn(Code, &'static str),
}

/// What a request stream's parser is configured with, from `Limits`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Config {
    pub(crate) head_bytes_max: usize,
    pub(crate) n_headers_max: usize,
    pub(crate) body_bytes_max: u64,
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL is sent: a request may carry
    /// `:protocol` (RFC 9220's extended CONNECT, for WebSockets).
    pub(crate) connect_protocol: bool,
}

/// Where a request stream is in its message (§4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Before the HEADERS frame.
    Head,
    /// After it: DATA frames, or trailers.
    Body,
    /// After the trailers: nothing more may come but unknown frames.
    Trailers,
}

/// The frame being read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Current {
    Headers,
    Data,
    /// A frame whose payload is ignored (unknown type, or a header block
    /// already refused for its size).
    Skip,
}

/// A request stream's parser: the head decoded and checked, the body
/// collected (up to `body_bytes_max`), the trailers checked and kept for
/// the handler (or the body's reader).
#[derive(Default)]
pub(crate) struct RequestStream {
    reader: Reader,
    phase: Option<Phase>,
    current: Option<Current>,
    block: Vec<u8>,
    scratch: Vec<u8>,
    pub(crate) head: Head,
    pub(crate) body: Vec<u8>,
    received: u64,
    /// Answer this status instead of calling the handler: 431, 413, or
    /// 400 for a malformed request, with the code to stop the client's
    /// sending with.
    pub(crate) refused: Option<(u16, &'static str, Code)>,
    /// The client's side is complete (FIN after a whole message).
    pub(crate) fin: bool,
    /// The body goes to a reader as it arrives (`body::streamed`).
    pub(crate) upload: Option<BodySink>,
    /// The stream carries a WebSocket (its extended CONNECT accepted):
    /// DATA payloads go to `body` as the WebSocket's input, held to no
    /// body limit (the driver reads the stream only as far as
    /// `h3::TUNNEL_INPUT_BYTES_MAX` allows).
    pub(crate) tunnel: bool,
    /// The trailer fields the body ended with, if any (`Trailers::received`).
    pub(crate) trailers: Option<Trailers>,
}

impl RequestStream {
    /// Takes the next bytes of the stream; `fin` if the stream ends after
    /// them.
    pub(crate) fn recv(&mut self, mut input: &[u8], fin: bool, cfg: &Config) -> Result<(), Error> {
        self.phase.get_or_insert(Phase::Head);
        while let Some((piece, used)) = self.reader.next(input) {
            input = &input[used..];
            match piece {
                Piece::Start { kind, len } => self.start(kind, len, cfg)?,
                Piece::Payload(bytes) => self.payload(bytes, cfg),
                Piece::End => self.end(cfg)?,
            }
        }
        if fin {
            if !self.reader.at_boundary() {
                // §7.1: a frame cut short by the end of its stream.
                return Err(Error::Conn(Code::FrameError, "a request stream ended inside a frame"));
            }
            if self.phase == Some(Phase::Head) {
                return Err(Error::Stream(
                    Code::RequestIncomplete,
                    "a request stream ended before its head",
                ));
            }
            self.fin = true;
            if self.refused.is_none() && !self.tunnel && self.head.content_length.is_some_and(|n| n != self.received) {
                // §4.1.2: a body whose length differs is malformed.
                self.refused = Some((400, "body length differs from content-length", Code::MessageError));
            }
            if let Some(sink) = self.upload.take() {
                match self.refused {
                    None => sink.finish_with(self.trailers.take()),
                    Some(_) => sink.fail(std::io::ErrorKind::InvalidData, "malformed request body"),
                }
            }
        }
        Ok(())
    }

    /// Makes this parser ready for another stream, keeping its buffers.
    pub(crate) fn reset(&mut self) {
        self.reader = Reader::default();
        self.phase = None;
        self.current = None;
        self.block.clear();
        self.scratch.clear();
        self.head.clear();
        self.body.clear();
        self.received = 0;
        self.refused = None;
        self.fin = false;
        self.trailers = None;
        self.upload = None;
        self.tunnel = false;
    }

    /// Body bytes received so far.
    pub(crate) fn received(&self) -> u64 {
        self.received
    }

    /// The head is complete and a body may follow (no FIN yet): a handler
    /// that reads bodies as they arrive may be called now.
    pub(crate) fn is_head_done(&self) -> bool {
        self.phase == Some(Phase::Body) && self.refused.is_none() && !self.fin && !self.is_extended_connect()
    }

    /// The head is an extended CONNECT (RFC 9220): it goes to its
    /// handler at its head, as over HTTP/2, since what follows is the
    /// WebSocket's, not a body.
    pub(crate) fn is_extended_connect(&self) -> bool {
        self.phase == Some(Phase::Body) && self.head.protocol.is_some()
    }

    /// Bytes of heap this parser holds on to (its buffers' capacities).
    pub(crate) fn retained_bytes(&self) -> usize {
        self.block.capacity()
            + self.scratch.capacity()
            + self.head.bytes.capacity()
            + self.head.fields.capacity() * std::mem::size_of::<crate::message::fields::Field>()
            + self.body.capacity()
    }

    /// The request is complete (or refused): it can be answered.
    pub(crate) fn is_ready(&self) -> bool {
        self.refused.is_some() || self.fin || self.is_extended_connect()
    }

    fn start(&mut self, kind: u64, len: u64, cfg: &Config) -> Result<(), Error> {
        let phase = self.phase.unwrap_or(Phase::Head);
        let current = match kind {
            frame::HEADERS if phase == Phase::Trailers => {
                return Err(Error::Conn(Code::FrameUnexpected, "HEADERS after the trailers"));
            }
            frame::HEADERS => {
                if len > cfg.head_bytes_max as u64 {
                    // The decoded section is larger still (every line
                    // decodes to at least as many bytes, counting the 32
                    // of §4.2.2): refuse without reading it.
                    self.refuse(431, "header section too large", Code::ExcessiveLoad);
                    Current::Skip
                } else {
                    self.block.clear();
                    Current::Headers
                }
            }
            frame::DATA if phase == Phase::Body => Current::Data,
            frame::DATA => return Err(Error::Conn(Code::FrameUnexpected, "DATA outside a message's body")),
            frame::CANCEL_PUSH | frame::SETTINGS | frame::GOAWAY | frame::MAX_PUSH_ID | frame::PUSH_PROMISE => {
                return Err(Error::Conn(
                    Code::FrameUnexpected,
                    "a control frame on a request stream",
                ));
            }
            k if frame::is_h2_reserved(k) => {
                return Err(Error::Conn(Code::FrameUnexpected, "an HTTP/2 frame type"));
            }
            // §9: unknown frame types are ignored.
            _ => Current::Skip,
        };
        self.current = Some(current);
        Ok(())
    }

    fn payload(&mut self, bytes: &[u8], cfg: &Config) {
        match self.current {
            Some(Current::Headers) => self.block.extend_from_slice(bytes),
            Some(Current::Data) => {
                self.received += bytes.len() as u64;
                if self.tunnel {
                    self.body.extend_from_slice(bytes);
                    return;
                }
                if self.refused.is_some() {
                    return;
                }
                if self.head.content_length.is_some_and(|n| self.received > n) {
                    self.refuse(400, "body longer than content-length", Code::MessageError);
                } else if self.received > cfg.body_bytes_max {
                    self.refuse(413, "request body too large", Code::NoError);
                    self.body = Vec::new();
                } else if let Some(sink) = &self.upload {
                    sink.push(bytes);
                } else {
                    self.body.extend_from_slice(bytes);
                }
                if self.refused.is_some() {
                    if let Some(sink) = self.upload.take() {
                        sink.fail(std::io::ErrorKind::InvalidData, "request body too large or malformed");
                    }
                }
            }
            Some(Current::Skip) | None => {}
        }
    }

    fn end(&mut self, cfg: &Config) -> Result<(), Error> {
        let current = self.current.take();
        if current != Some(Current::Headers) {
            if current == Some(Current::Skip) && self.phase == Some(Phase::Head) && self.refused.is_some() {
                // A refused head: what follows is a body or trailers.
                self.phase = Some(Phase::Body);
            }
            return Ok(());
        }
        let block = std::mem::take(&mut self.block);
        let result = match self.phase {
            Some(Phase::Head) | None => self.decode_head(&block, cfg),
            _ => self.decode_trailers(&block, cfg),
        };
        self.block = block;
        self.phase = Some(match self.phase {
            Some(Phase::Head) | None => Phase::Body,
            _ => Phase::Trailers,
        });
        result
    }

    fn decode_head(&mut self, block: &[u8], cfg: &Config) -> Result<(), Error> {
        self.head.clear();
        let mut sink = Sink::new(&mut self.head.bytes, &mut self.head.fields, cfg.head_bytes_max);
        qpack::decode(block, &mut sink, &mut self.scratch)
            .map_err(|e| Error::Conn(Code::QpackDecompressionFailed, e.0))?;
        if sink.oversized || self.head.fields.len() > cfg.n_headers_max + 4 {
            self.refuse(431, "header section too large", Code::ExcessiveLoad);
            return Ok(());
        }
        // RFC 9220 §3: without SETTINGS_ENABLE_CONNECT_PROTOCOL sent, a
        // `:protocol` is an unknown pseudo-field: the request is
        // malformed (RFC 9114 §4.3: H3_MESSAGE_ERROR).
        if let Err(crate::message::head::Refusal::Malformed(why)) = self.head.check_request(cfg.connect_protocol) {
            self.refuse(400, why, Code::MessageError);
            return Ok(());
        }
        // A plain CONNECT (§4.4) names only :authority; an extended one
        // carries :scheme, :path and :authority as other requests do
        // (RFC 8441 §4, which RFC 9220 §3 keeps).
        let method_connect =
            self.head.protocol.is_none() && self.head.method.is_some_and(|m| self.head.span(m.value) == b"CONNECT");
        let has_host = self.head.fields.iter().any(|f| self.head.span(f.name) == b"host");
        if !method_connect && self.head.authority.is_none() && !has_host {
            // §4.3.1: "If the :scheme pseudo-header field identifies a
            // scheme that has a mandatory authority component (including
            // "http" and "https"), the request MUST contain either an
            // :authority pseudo-header field or a Host header field."
            self.refuse(400, "no :authority and no host", Code::MessageError);
        } else if self.head.fields.len() > cfg.n_headers_max {
            self.refuse(431, "too many header fields", Code::ExcessiveLoad);
        } else if self.head.content_length.is_some_and(|n| n > cfg.body_bytes_max) {
            // Refused before the body, as HTTP/1.1 and HTTP/2 refuse it: a
            // client waiting for 100 Continue gets this final answer.
            self.refuse(413, "request body too large", Code::NoError);
        } else if self.head.expect_unmet {
            // RFC 9110 §10.1.1, as HTTP/1.1 and HTTP/2 answer it.
            self.refuse(417, "unsupported expectation", Code::NoError);
        }
        Ok(())
    }

    fn decode_trailers(&mut self, block: &[u8], cfg: &Config) -> Result<(), Error> {
        let mut bytes = Vec::new();
        let mut fields = Vec::new();
        let mut sink = Sink::new(&mut bytes, &mut fields, cfg.head_bytes_max);
        qpack::decode(block, &mut sink, &mut self.scratch)
            .map_err(|e| Error::Conn(Code::QpackDecompressionFailed, e.0))?;
        if sink.oversized {
            self.refuse(431, "trailer section too large", Code::ExcessiveLoad);
            return Ok(());
        }
        // Checked against a head holding the trailer bytes (the checks
        // read names through it), then kept for the handler.
        let holder = Head {
            bytes,
            ..Head::default()
        };
        if holder.check_trailers(&fields).is_err() {
            self.refuse(400, "invalid trailers", Code::MessageError);
            return Ok(());
        }
        self.trailers = Trailers::received(fields.iter().map(|f| (holder.span(f.name), holder.span(f.value))));
        Ok(())
    }

    /// The head has not all come yet (nor anything, perhaps).
    pub(crate) fn is_head_pending(&self) -> bool {
        self.phase != Some(Phase::Body) && self.refused.is_none()
    }

    /// The head or body did not arrive in time: 408, the body let go.
    pub(crate) fn refuse_slow(&mut self) {
        self.refuse(408, "request not received in time", Code::NoError);
        self.body = Vec::new();
    }

    /// The worker's budget for buffered bodies is spent: 503, the body
    /// let go, the rest not read.
    pub(crate) fn refuse_busy(&mut self) {
        self.refuse(503, crate::budget::BUDGET_SPENT, Code::NoError);
        self.body = Vec::new();
    }

    fn refuse(&mut self, status: u16, why: &'static str, code: Code) {
        if self.refused.is_none() {
            self.refused = Some((status, why, code));
        }
    }
}

/// What a unidirectional stream turned out to be (§6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UniKind {
    Control,
    QpackEncoder,
    QpackDecoder,
    /// A type we do not know: the driver stops it with
    /// H3_STREAM_CREATION_ERROR (§6.2) and drops it. (A push stream from
    /// the client is a connection error, §6.2.2.)
    Refused(Code),
}

/// A unidirectional stream from the client: its type, then for the
/// control stream its frames (§6.2.1), for the QPACK streams their
/// instructions (RFC 9204 §4.3, §4.4).
#[derive(Default)]
pub(crate) struct UniStream {
    kind_bytes: [u8; 8],
    n_kind_bytes: usize,
    pub(crate) kind: Option<UniKind>,
    reader: Reader,
    settings_seen: bool,
    /// The control frame being read, and its payload (collected only for
    /// the frames we act on; others' are skipped as they come).
    current: Option<u64>,
    payload: Vec<u8>,
    /// A decoder-stream instruction split across inputs.
    instruction: Vec<u8>,
    /// The push ID of the client's last GOAWAY, and the largest it allowed
    /// by MAX_PUSH_ID: neither may go back (§5.2, §7.2.7), and a
    /// CANCEL_PUSH past the latter names a push that cannot exist
    /// (§7.2.3).
    goaway_id: Option<u64>,
    max_push_id: Option<u64>,
}

/// Control frames we read (SETTINGS, GOAWAY, MAX_PUSH_ID, CANCEL_PUSH)
/// larger than this are refused (H3_EXCESSIVE_LOAD): ours are a few bytes,
/// a client's SETTINGS a few dozen. Frames of other types, whatever their
/// size, are skipped without being kept (§9).
const CONTROL_FRAME_BYTES_MAX: u64 = 16 * 1024;

/// The control frames whose payload is read; others' is skipped.
fn is_read_on_control(kind: u64) -> bool {
    matches!(
        kind,
        frame::SETTINGS | frame::GOAWAY | frame::MAX_PUSH_ID | frame::CANCEL_PUSH
    )
}

impl UniStream {
    /// Takes the stream's next bytes. `Ok(true)` once its type is known
    /// and it is one the driver must stop (see `UniKind::Refused`).
    pub(crate) fn recv(&mut self, mut input: &[u8], fin: bool) -> Result<(), Error> {
        if self.kind.is_none() {
            while self.kind.is_none() && !input.is_empty() {
                self.kind_bytes[self.n_kind_bytes] = input[0];
                self.n_kind_bytes += 1;
                input = &input[1..];
                if let Some((kind, _)) = frame::read_varint(&self.kind_bytes[..self.n_kind_bytes]) {
                    self.kind = Some(match kind {
                        frame::STREAM_CONTROL => UniKind::Control,
                        frame::STREAM_QPACK_ENCODER => UniKind::QpackEncoder,
                        frame::STREAM_QPACK_DECODER => UniKind::QpackDecoder,
                        frame::STREAM_PUSH => {
                            // §6.2.2: only servers push.
                            return Err(Error::Conn(Code::StreamCreationError, "a push stream from the client"));
                        }
                        _ => UniKind::Refused(Code::StreamCreationError),
                    });
                }
            }
        }
        match self.kind {
            Some(UniKind::Control) => {
                self.control(input)?;
                if fin {
                    return Err(Error::Conn(Code::ClosedCriticalStream, "the control stream closed"));
                }
            }
            Some(UniKind::QpackEncoder) => {
                // With a capacity of 0, the only instruction possible is
                // Set Dynamic Table Capacity 0 (0b001_00000); any insert
                // exceeds it (RFC 9204 §4.3.1, §3.2.3).
                if input.iter().any(|&b| b != 0x20) {
                    return Err(Error::Conn(
                        Code::QpackEncoderStreamError,
                        "an encoder instruction for a table of capacity 0",
                    ));
                }
                if fin {
                    return Err(Error::Conn(
                        Code::ClosedCriticalStream,
                        "the QPACK encoder stream closed",
                    ));
                }
            }
            Some(UniKind::QpackDecoder) => {
                self.decoder_instructions(input)?;
                if fin {
                    return Err(Error::Conn(
                        Code::ClosedCriticalStream,
                        "the QPACK decoder stream closed",
                    ));
                }
            }
            Some(UniKind::Refused(_)) | None => {}
        }
        Ok(())
    }

    /// Bytes of heap this stream holds on to.
    #[cfg(test)]
    pub(crate) fn retained_bytes(&self) -> usize {
        self.payload.capacity() + self.instruction.capacity()
    }

    fn control(&mut self, mut input: &[u8]) -> Result<(), Error> {
        while let Some((piece, used)) = self.reader.next(input) {
            input = &input[used..];
            match piece {
                Piece::Start { kind, len } => {
                    if !self.settings_seen && kind != frame::SETTINGS {
                        return Err(Error::Conn(
                            Code::MissingSettings,
                            "the control stream began without SETTINGS",
                        ));
                    }
                    match kind {
                        frame::SETTINGS if self.settings_seen => {
                            return Err(Error::Conn(Code::FrameUnexpected, "a second SETTINGS"));
                        }
                        frame::DATA | frame::HEADERS | frame::PUSH_PROMISE => {
                            return Err(Error::Conn(
                                Code::FrameUnexpected,
                                "a message frame on the control stream",
                            ));
                        }
                        k if frame::is_h2_reserved(k) => {
                            return Err(Error::Conn(Code::FrameUnexpected, "an HTTP/2 frame type"));
                        }
                        _ => {}
                    }
                    if is_read_on_control(kind) && len > CONTROL_FRAME_BYTES_MAX {
                        return Err(Error::Conn(Code::ExcessiveLoad, "a control frame too large"));
                    }
                    self.settings_seen = true;
                    self.current = Some(kind);
                    self.payload.clear();
                }
                Piece::Payload(bytes) => {
                    if self.current.is_some_and(is_read_on_control) {
                        self.payload.extend_from_slice(bytes);
                    }
                }
                Piece::End => {
                    let kind = self.current.take();
                    match kind {
                        Some(frame::SETTINGS) => {
                            frame::check_settings(&self.payload).map_err(|(code, why)| Error::Conn(code, why))?;
                        }
                        Some(kind @ (frame::GOAWAY | frame::MAX_PUSH_ID | frame::CANCEL_PUSH)) => {
                            // One varint each (§7.2.3, §7.2.6, §7.2.7): a
                            // push ID. We never push, so there is nothing
                            // to do beyond checking the IDs' order.
                            let id = match frame::read_varint(&self.payload) {
                                Some((id, n)) if n == self.payload.len() => id,
                                _ => return Err(Error::Conn(Code::FrameError, "a malformed control frame")),
                            };
                            self.push_id(kind, id)?;
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }

    /// A push ID the client's control stream named in a frame of `kind`:
    /// H3_ID_ERROR for a GOAWAY larger than the one before ("MUST NOT
    /// increase", §5.2), a MAX_PUSH_ID smaller than the one before
    /// ("cannot reduce the maximum push ID", §7.2.7), or a CANCEL_PUSH
    /// "that references a push ID greater than currently allowed on the
    /// connection" (§7.2.3): with no MAX_PUSH_ID, none is allowed.
    fn push_id(&mut self, kind: u64, id: u64) -> Result<(), Error> {
        let refused = match kind {
            frame::GOAWAY => self.goaway_id.replace(id).is_some_and(|before| id > before),
            frame::MAX_PUSH_ID => self.max_push_id.replace(id).is_some_and(|before| id < before),
            _ => self.max_push_id.is_none_or(|max| id > max),
        };
        if refused {
            let why = match kind {
                frame::GOAWAY => "a GOAWAY whose push ID increased",
                frame::MAX_PUSH_ID => "a MAX_PUSH_ID that decreased",
                _ => "a CANCEL_PUSH for a push ID never allowed",
            };
            return Err(Error::Conn(Code::IdError, why));
        }
        Ok(())
    }

    /// The client's decoder instructions are about our dynamic table,
    /// which holds nothing: Stream Cancellation is fine, a Section
    /// Acknowledgment or Insert Count Increment cannot be right (RFC 9204
    /// §4.4.1, §4.4.3).
    fn decoder_instructions(&mut self, input: &[u8]) -> Result<(), Error> {
        self.instruction.extend_from_slice(input);
        let mut rest = &self.instruction[..];
        while let Some(&b) = rest.first() {
            if b & 0xc0 != 0x40 {
                return Err(Error::Conn(
                    Code::QpackDecoderStreamError,
                    "an acknowledgment for a dynamic table we never used",
                ));
            }
            let mut probe = rest;
            match qpack_integer(&mut probe, 6) {
                Some(()) => rest = probe,
                None => break,
            }
        }
        let used = self.instruction.len() - rest.len();
        self.instruction.drain(..used);
        if self.instruction.len() > 16 {
            return Err(Error::Conn(Code::QpackDecoderStreamError, "an instruction too long"));
        }
        Ok(())
    }
}

/// Skips a prefixed integer; `None` if it is not complete yet.
fn qpack_integer(buf: &mut &[u8], n: u32) -> Option<()> {
    let (&first, rest) = buf.split_first()?;
    *buf = rest;
    let mask = (1u8 << n) - 1;
    if first & mask < mask {
        return Some(());
    }
    loop {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        if b & 0x80 == 0 {
            return Some(());
        }
    }
}
