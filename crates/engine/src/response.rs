//! The response a handler returns: a status, header fields and a body.
//!
//! The engine owns framing: it writes `Content-Length` or chunked coding,
//! `Date`, `Server` and `Connection` itself, so a handler cannot produce a
//! response that desynchronises the connection. A header that would (CR or
//! LF in a value, a name that is not a token) makes the response a 500.

use std::borrow::Cow;
use std::fs::File;
use std::ops::Range;
use std::sync::Arc;

/// An HTTP response. Build it with the constructors and `with_*` methods:
///
/// ```
/// use peregrine::Response;
/// let r = Response::text("Hello, World!").with_header("Cache-Control", "no-store");
/// assert_eq!(r.status(), 200);
/// ```
pub struct Response {
    pub(crate) status: u16,
    pub(crate) content_type: Option<Cow<'static, str>>,
    pub(crate) headers: Vec<(Cow<'static, str>, Cow<'static, str>)>,
    /// Header lines validated ahead of time, written verbatim.
    pub(crate) block: Option<HeaderBlock>,
    pub(crate) body: Body,
    /// Set when a header given was invalid or reserved; answered as 500.
    /// One byte, not a `&str`: it keeps the struct at 128 bytes, which the
    /// compiler moves with eight 16-byte stores; at 144 each move was a
    /// call to `memcpy` (three per archive answer, `memmove` 5.8 % of a
    /// pipelined archive profile).
    pub(crate) invalid: Option<Invalid>,
    /// Close the connection after this response.
    pub(crate) close: bool,
    /// Why the engine (or a rule of the server's) made this answer, for
    /// the access log; `None` for a handler's own. One byte, in the
    /// padding the struct had.
    pub(crate) reason: Option<crate::access_log::Reason>,
}

/// Why a response cannot be sent as the handler built it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Invalid {
    Status,
    ContentType,
    Field,
    FramingField,
    BodyRange,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Invalid::Status => "invalid status code",
            Invalid::ContentType => "invalid Content-Type value",
            Invalid::Field => "invalid header field",
            Invalid::FramingField => "handler set a framing header",
            Invalid::BodyRange => "body range outside its header block's buffer",
        })
    }
}

/// The body of a response. More kinds may come (a WebSocket's, a proxied
/// upstream's): match with a `_` arm.
#[non_exhaustive]
pub enum Body {
    /// No body (`Content-Length: 0`, or nothing for 204 and 304).
    Empty,
    /// Bytes with a `'static` lifetime, such as a literal; never copied to the heap.
    Static(&'static [u8]),
    /// Owned bytes.
    Bytes(Vec<u8>),
    /// A range of a long-lived shared buffer, such as a memory map. Large
    /// ranges are written straight from the buffer, without copying.
    Shared(SharedBytes),
    /// A range of an open file, sent with `sendfile(2)`.
    File(FileRange),
    /// Chunks of unknown total length, sent with the chunked transfer coding
    /// (or, to an HTTP/1.0 client, delimited by closing the connection).
    /// The iterator runs on the event loop: it must not block.
    Stream(Box<dyn Iterator<Item = Vec<u8>> + Send>),
    /// Chunks written by another thread over time, sent as they come (the
    /// chunked coding, as `Stream`): see [`crate::body::channel`].
    Channel(crate::body::ChannelBody),
    /// Bytes of the buffer the response's header block lies in, made only
    /// by [`Response::prepared_beside`]: the block and the body share the
    /// block's one reference count. Not part of the API: its type cannot
    /// be named or made outside the engine.
    #[doc(hidden)]
    BesideBlock(BesideBlock),
}

/// A header block and a body beside it in the block's buffer, the range
/// checked against that buffer once, here: answered as often as needed
/// with [`Response::beside`], the same answer as
/// [`Response::prepared_beside`] without its check each time.
#[derive(Clone)]
pub struct Beside {
    block: HeaderBlock,
    body: Range<usize>,
}

impl Beside {
    /// `block` with bytes `body` of its buffer (counted from the buffer's
    /// start, as [`Response::prepared_beside`] counts); `None` if `body`
    /// does not lie in the buffer.
    pub fn new(block: HeaderBlock, body: Range<usize>) -> Option<Beside> {
        lies_in(&block, &body).then_some(Beside { block, body })
    }
}

/// Whether `body` lies in `block`'s buffer (counted from its start): the
/// one check of a body beside its block ([`Beside::new`],
/// [`Response::prepared_beside`]).
#[inline(always)]
fn lies_in(block: &HeaderBlock, body: &Range<usize>) -> bool {
    body.start <= body.end && body.end <= (*block.buf).as_ref().len()
}

/// Where a `Body::BesideBlock` body lies in its response's header block's
/// buffer. Only [`Response::prepared_beside`] and [`Response::beside`]
/// make one, checked against that buffer (the latter by [`Beside::new`]);
/// the response keeps the buffer alive. Not exported.
#[derive(Debug)]
pub struct BesideBlock {
    range: Range<usize>,
}

impl BesideBlock {
    /// The body's length in bytes.
    pub fn len(&self) -> usize {
        self.range.len()
    }

    /// Whether the body is empty.
    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }
}

/// A range of a shared, immutable buffer.
#[derive(Clone)]
pub struct SharedBytes {
    pub(crate) buf: Arc<dyn AsRef<[u8]> + Send + Sync>,
    pub(crate) range: Range<usize>,
}

impl SharedBytes {
    /// The whole of `buf`.
    #[inline]
    pub fn new(buf: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Self {
        let len = (*buf).as_ref().len();
        SharedBytes { buf, range: 0..len }
    }

    /// `range` of `buf`; `None` if the range is out of bounds.
    #[inline]
    pub fn slice(buf: Arc<dyn AsRef<[u8]> + Send + Sync>, range: Range<usize>) -> Option<Self> {
        let len = (*buf).as_ref().len();
        (range.start <= range.end && range.end <= len).then_some(SharedBytes { buf, range })
    }

    /// The bytes of the range.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &(*self.buf).as_ref()[self.range.clone()]
    }
}

/// A range of an open file. The file is shared, so one open file can serve
/// many responses at once (`sendfile` does not move the file position).
#[derive(Clone)]
pub struct FileRange {
    pub(crate) file: Arc<File>,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

impl FileRange {
    /// `len` bytes of `file` starting at `offset`. If the file turns out to
    /// be shorter when sent, the connection is closed rather than send a
    /// response of the wrong length.
    pub fn new(file: Arc<File>, offset: u64, len: u64) -> Self {
        FileRange { file, offset, len }
    }

    /// The whole file, its length taken now.
    pub fn whole(file: File) -> std::io::Result<Self> {
        let len = file.metadata()?.len();
        Ok(FileRange {
            file: Arc::new(file),
            offset: 0,
            len,
        })
    }
}

impl Body {
    /// The length of the body, if known before sending.
    pub fn len(&self) -> Option<u64> {
        match self {
            Body::Empty => Some(0),
            Body::Static(b) => Some(b.len() as u64),
            Body::Bytes(b) => Some(b.len() as u64),
            Body::Shared(s) => Some(s.range.len() as u64),
            Body::File(f) => Some(f.len),
            Body::BesideBlock(b) => Some(b.range.len() as u64),
            Body::Channel(rx) => rx.length(),
            Body::Stream(_) => None,
        }
    }

    /// Whether the body is known to be empty.
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }
}

impl From<&'static str> for Body {
    fn from(s: &'static str) -> Self {
        Body::Static(s.as_bytes())
    }
}

impl From<&'static [u8]> for Body {
    fn from(s: &'static [u8]) -> Self {
        Body::Static(s)
    }
}

impl From<String> for Body {
    fn from(s: String) -> Self {
        Body::Bytes(s.into_bytes())
    }
}

impl From<Vec<u8>> for Body {
    fn from(v: Vec<u8>) -> Self {
        Body::Bytes(v)
    }
}

impl From<SharedBytes> for Body {
    fn from(s: SharedBytes) -> Self {
        Body::Shared(s)
    }
}

impl From<FileRange> for Body {
    fn from(f: FileRange) -> Self {
        Body::File(f)
    }
}

const TEXT_PLAIN: &str = "text/plain; charset=utf-8";
const TEXT_HTML: &str = "text/html; charset=utf-8";

/// Fields the engine writes itself; a handler setting them is a bug that
/// would break framing, so the response becomes a 500.
const RESERVED: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "date",
    "connection",
    "keep-alive",
    "upgrade",
    "trailer",
];

impl Response {
    /// A response with `status` and no body.
    #[inline]
    pub fn new(status: u16) -> Self {
        Response {
            status,
            content_type: None,
            headers: Vec::new(),
            block: None,
            body: Body::Empty,
            invalid: Response::status_invalid(status),
            close: false,
            reason: None,
        }
    }

    /// 200 with a `text/plain; charset=utf-8` body.
    #[inline]
    pub fn text(body: impl Into<Body>) -> Self {
        Response::ok(TEXT_PLAIN, body.into())
    }

    /// 200 with a `text/html; charset=utf-8` body.
    #[inline]
    pub fn html(body: impl Into<Body>) -> Self {
        Response::ok(TEXT_HTML, body.into())
    }

    /// A 200 built in one piece: the builder chain moved the whole struct
    /// three times (memcpy was 2 % of a pipelined hello's CPU), and the
    /// content type is a constant known to be valid.
    #[inline]
    fn ok(content_type: &'static str, body: Body) -> Self {
        Response {
            status: 200,
            content_type: Some(Cow::Borrowed(content_type)),
            headers: Vec::new(),
            block: None,
            body,
            invalid: None,
            close: false,
            reason: None,
        }
    }

    /// `status` with fields validated ahead of time and a body, built in
    /// one piece: the same as `Response::new(status)
    /// .with_header_block(block).with_body(body)`, whose chain moved the
    /// struct at each step right after storing it (a store-forwarding
    /// stall per move: a quarter of an archive answer's own samples).
    ///
    /// ```
    /// use peregrine::{HeaderBlock, Response};
    /// let block = HeaderBlock::new(&[("ETag", "\"x\"")]).unwrap();
    /// let r = Response::prepared(200, block, "hi");
    /// assert_eq!((r.status(), r.header("etag")), (200, Some("\"x\"")));
    /// ```
    #[inline]
    pub fn prepared(status: u16, block: HeaderBlock, body: impl Into<Body>) -> Self {
        Response {
            status,
            content_type: None,
            headers: Vec::new(),
            block: Some(block),
            body: body.into(),
            invalid: Response::status_invalid(status),
            close: false,
            reason: None,
        }
    }

    /// `status` with `block` and, as its body, bytes `body` of the buffer
    /// the block's lines lie in (a block made by [`HeaderBlock::from_lines`]
    /// of a [`SharedBytes`] range: `body` counts from the start of that
    /// buffer, not of the range). The same answer as `Response::prepared`
    /// with a [`SharedBytes`] body of the same buffer, with one reference
    /// count where that takes two: an archive's stored head and body are
    /// two ranges of one map, and the two atomic increments (and their
    /// decrements) were half of an archive answer's own samples. A range
    /// outside the buffer makes the response a 500.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use peregrine::{HeaderBlock, Response, SharedBytes};
    /// let buf: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(b"ETag: \"x\"\r\nhi".to_vec());
    /// let block = HeaderBlock::from_lines(SharedBytes::slice(buf, 0..11).unwrap()).unwrap();
    /// let r = Response::prepared_beside(200, block, 11..13);
    /// assert_eq!((r.status(), r.header("etag"), r.body().len()), (200, Some("\"x\""), Some(2)));
    /// ```
    #[inline]
    pub fn prepared_beside(status: u16, block: HeaderBlock, body: Range<usize>) -> Self {
        let (body, invalid) = if lies_in(&block, &body) {
            (
                Body::BesideBlock(BesideBlock { range: body }),
                Response::status_invalid(status),
            )
        } else {
            (Body::Empty, Some(Invalid::BodyRange))
        };
        Response {
            status,
            content_type: None,
            headers: Vec::new(),
            block: Some(block),
            body,
            invalid,
            close: false,
            reason: None,
        }
    }

    /// [`Response::prepared_beside`] of a pair checked once, when it was
    /// made ([`Beside::new`]): a store answering the same block and body
    /// many times (an archive's prepared variant) pays the range's check,
    /// a call through the buffer's trait object, once, not on every
    /// answer (with it, the constructor was a call of 47 instructions of
    /// every archive answer: callgrind archive-c50).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use peregrine::{Beside, HeaderBlock, Response, SharedBytes};
    /// let buf: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(b"ETag: \"x\"\r\nhi".to_vec());
    /// let block = HeaderBlock::from_lines(SharedBytes::slice(buf, 0..11).unwrap()).unwrap();
    /// let beside = Beside::new(block, 11..13).unwrap();
    /// let r = Response::beside(200, &beside);
    /// assert_eq!((r.status(), r.header("etag"), r.body().len()), (200, Some("\"x\""), Some(2)));
    /// ```
    #[inline(always)]
    pub fn beside(status: u16, pair: &Beside) -> Self {
        Response {
            status,
            content_type: None,
            headers: Vec::new(),
            block: Some(pair.block.clone()),
            body: Body::BesideBlock(BesideBlock {
                range: pair.body.clone(),
            }),
            invalid: Response::status_invalid(status),
            close: false,
            reason: None,
        }
    }

    /// Takes the body out to send it, once the head is written (the
    /// response keeps `Body::Empty`). A body beside the header block comes
    /// out as a [`Body::Shared`] range of the block's buffer, with the
    /// block's reference: never as `Body::BesideBlock`.
    #[inline]
    pub(crate) fn take_body(&mut self) -> Body {
        match std::mem::replace(&mut self.body, Body::Empty) {
            Body::BesideBlock(b) => match self.block.take() {
                Some(block) => Body::Shared(SharedBytes {
                    buf: block.buf,
                    range: b.range,
                }),
                // Not made: `prepared_beside` sets the block, and
                // `with_header_block` turns the body into `Body::Shared`
                // before it replaces the block.
                None => {
                    debug_assert!(false, "a body beside no block");
                    Body::Empty
                }
            },
            body => body,
        }
    }

    /// The body when its bytes are fixed by where they are, for the head
    /// cache to keep after the head (`h1/respond.rs`): a `'static` slice
    /// (its address; a static never changes), or a range beside a block
    /// whose buffer is never refilled (its range; the block's place names
    /// the buffer). The first word is the address or the start, the
    /// second `usize::MAX` or the end; `None` for any other body.
    #[inline]
    pub(crate) fn fixed_body(&self) -> Option<((usize, usize), &[u8])> {
        let place = self.fixed_body_place()?;
        match (&self.body, &self.block) {
            (Body::Static(b), _) => Some((place, b)),
            (Body::BesideBlock(b), Some(block)) => Some((place, &(*block.buf).as_ref()[b.range.clone()])),
            _ => None,
        }
    }

    /// [`Response::fixed_body`]'s place alone: no look at the buffer
    /// (whose `as_ref` is a call through the trait object), which a head
    /// cache hit never needs.
    #[inline(always)]
    pub(crate) fn fixed_body_place(&self) -> Option<(usize, usize)> {
        match (&self.body, &self.block) {
            (Body::Static(b), _) => Some((b.as_ptr() as usize, usize::MAX)),
            (Body::BesideBlock(b), Some(block)) if block.is_cacheable() => Some((b.range.start, b.range.end)),
            _ => None,
        }
    }

    /// Why `status` cannot be sent, if it cannot.
    #[inline]
    fn status_invalid(status: u16) -> Option<Invalid> {
        (!(100..=999).contains(&status) || (100..200).contains(&status)).then_some(Invalid::Status)
    }

    /// 200 with `body` of the given content type.
    #[inline]
    pub fn bytes(content_type: impl Into<Cow<'static, str>>, body: impl Into<Body>) -> Self {
        Response::new(200).with_content_type(content_type).with_body(body)
    }

    /// A plain-text error page for `status`, e.g. `404 Not Found`.
    pub fn error(status: u16) -> Self {
        let reason = crate::codec::write::reason(status);
        Response::new(status)
            .with_content_type("text/plain; charset=utf-8")
            .with_body(format!("{status} {reason}\n"))
    }

    /// Says why the server made this answer itself (a limit, an access
    /// rule, a failed upstream): the access log's `reason`. Answers a
    /// handler makes for its own reasons carry none.
    #[inline]
    pub fn with_reason(mut self, reason: crate::access_log::Reason) -> Self {
        self.reason = Some(reason);
        self
    }

    /// Replaces the status code.
    #[inline]
    pub fn with_status(mut self, status: u16) -> Self {
        let fresh = Response::new(status);
        self.status = status;
        self.invalid = self.invalid.or(fresh.invalid);
        self
    }

    /// Sets the `Content-Type`.
    #[inline]
    pub fn with_content_type(mut self, content_type: impl Into<Cow<'static, str>>) -> Self {
        let value = content_type.into();
        if !is_valid_value(value.as_bytes()) {
            self.invalid = Some(Invalid::ContentType);
        }
        self.content_type = Some(value);
        self
    }

    /// Replaces the body.
    #[inline]
    pub fn with_body(mut self, body: impl Into<Body>) -> Self {
        self.body = body.into();
        self
    }

    /// Adds a header field. `Content-Length`, `Transfer-Encoding`, `Date`,
    /// `Connection` and the like are the engine's: setting one, or a name or
    /// value that is not valid on the wire, turns the response into a 500.
    /// Use [`Response::with_close`] to close the connection after a response.
    pub fn with_header(mut self, name: impl Into<Cow<'static, str>>, value: impl Into<Cow<'static, str>>) -> Self {
        let (name, value) = (name.into(), value.into());
        if !crate::codec::head::is_token(name.as_bytes()) || !is_valid_value(value.as_bytes()) {
            self.invalid = Some(Invalid::Field);
        } else if RESERVED.iter().any(|r| r.eq_ignore_ascii_case(&name)) {
            self.invalid = Some(Invalid::FramingField);
        } else if name.eq_ignore_ascii_case("content-type") {
            self.content_type = Some(value);
            return self;
        }
        self.headers.push((name, value));
        self
    }

    /// Adds header fields validated ahead of time (see [`HeaderBlock`]):
    /// the way to answer many requests with the same fields without building
    /// them each time. Written after the fields given with `with_header`.
    /// A body beside the block it replaces keeps its bytes (it becomes a
    /// [`Body::Shared`] range of the old block's buffer).
    #[inline]
    pub fn with_header_block(mut self, block: HeaderBlock) -> Self {
        if let Some(old) = self.block.replace(block) {
            if let Body::BesideBlock(b) = &self.body {
                let range = b.range.clone();
                self.body = Body::Shared(SharedBytes { buf: old.buf, range });
            }
        }
        self
    }

    /// Removes every field named `name` (case-insensitive): those added
    /// with `with_header` and the lines of the header block, which is made
    /// again without them (a copy, only when it holds one; a body beside
    /// the old block keeps its bytes). For a wrapper that must replace what
    /// an inner handler's prepared fields say, e.g. a protected answer's
    /// `Cache-Control` (issue 27).
    pub fn without_header(self, name: &str) -> Self {
        self.without_headers(&[name])
    }

    /// Removes every field named as one of `names` (case-insensitive),
    /// as [`Response::without_header`] does for one, in one pass over
    /// the header block.
    pub fn without_headers(mut self, names: &[&str]) -> Self {
        if names.iter().any(|n| n.eq_ignore_ascii_case("content-type")) {
            self.content_type = None;
        }
        self.headers
            .retain(|(n, _)| !names.iter().any(|name| n.eq_ignore_ascii_case(name)));
        let Some(block) = &self.block else {
            return self;
        };
        let is_named = |line: &[u8]| {
            names.iter().any(|name| {
                line.len() > name.len()
                    && line[name.len()] == b':'
                    && line[..name.len()].eq_ignore_ascii_case(name.as_bytes())
            })
        };
        let lines = block.as_bytes();
        if !lines.split(|&b| b == b'\n').any(is_named) {
            return self;
        }
        let mut kept = Vec::with_capacity(lines.len());
        for line in lines.split_inclusive(|&b| b == b'\n') {
            if !is_named(line) {
                kept.extend_from_slice(line);
            }
        }
        // The lines were checked when the block was made; fewer of them
        // are still valid.
        self.with_header_block(HeaderBlock::of(SharedBytes::new(Arc::new(kept))))
    }

    /// Adds `element` (a field name) to the `Vary` field, unless a `Vary`
    /// already lists it or `*` (RFC 9110 §12.5.5: a list, its elements
    /// compared case-insensitively, `*` varying on everything): a line
    /// `Vary: element` after the others, which a recipient joins to them
    /// (RFC 9110 §5.3), as an element that was missing; never the same
    /// element twice. For a wrapper whose answers depend on a request
    /// field an inner handler's fields do not name (CORS's `Origin`).
    pub fn with_vary(self, element: &str) -> Self {
        let listed = self.header_values("vary").any(|v| {
            crate::codec::head::list_elements(v.as_bytes())
                .any(|e| e == b"*" || e.eq_ignore_ascii_case(element.as_bytes()))
        });
        match listed {
            true => self,
            false => self.with_header("Vary", element.to_owned()),
        }
    }

    /// The values of every field named `name` (case-insensitive), in the
    /// order they are written: those added with `with_header`, then the
    /// header block's. A block's value that is not UTF-8 (obs-text, an
    /// upstream's Latin-1 relayed by the proxy) is left out.
    pub fn header_values<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s str> + 's {
        let content_type = match name.eq_ignore_ascii_case("content-type") {
            true => self.content_type.as_deref(),
            false => None,
        };
        let given = self
            .headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref());
        let lines = self.block.as_ref().map_or(&[][..], |b| b.as_bytes());
        let block = lines.split(|&b| b == b'\n').filter_map(move |line| {
            let named = line.len() > name.len()
                && line[name.len()] == b':'
                && line[..name.len()].eq_ignore_ascii_case(name.as_bytes());
            if !named {
                return None;
            }
            let value = &line[name.len() + 1..];
            let value = value.strip_suffix(b"\r").unwrap_or(value);
            // A block's values are field-value octets, not always UTF-8.
            std::str::from_utf8(crate::codec::head::trim_ows(value)).ok()
        });
        content_type.into_iter().chain(given).chain(block)
    }

    /// Closes the connection once this response is sent.
    #[inline]
    pub fn with_close(mut self) -> Self {
        self.close = true;
        self
    }

    /// The status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// Why the server made this answer itself, if it did
    /// ([`Response::with_reason`]).
    pub fn reason(&self) -> Option<crate::Reason> {
        self.reason
    }

    /// The value of the first header field named `name` (case-insensitive),
    /// if it is valid UTF-8: `None` for a value of other bytes (obs-text,
    /// such as an upstream's Latin-1 `filename="caf\xe9.pdf"`), which
    /// [`Response::header_bytes`] gives.
    pub fn header(&self, name: &str) -> Option<&str> {
        if name.eq_ignore_ascii_case("content-type") {
            return self.content_type.as_deref();
        }
        let given = self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name));
        if let Some((_, v)) = given {
            return Some(v.as_ref());
        }
        self.block_value(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The raw value of the first header field named `name`
    /// (case-insensitive), as [`Request::header_bytes`](crate::Request::header_bytes)
    /// gives a request's: RFC 9110 §5.5 makes a field value octets, and a
    /// header block (the proxy's relay of an upstream's answer) may hold
    /// obs-text (%x80-FF) that is not UTF-8.
    pub fn header_bytes(&self, name: &str) -> Option<&[u8]> {
        if name.eq_ignore_ascii_case("content-type") {
            return self.content_type.as_deref().map(str::as_bytes);
        }
        let given = self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name));
        if let Some((_, v)) = given {
            return Some(v.as_bytes());
        }
        self.block_value(name)
    }

    /// The value of the block's first line named `name`, as octets.
    fn block_value(&self, name: &str) -> Option<&[u8]> {
        // The block's lines are `Name: value\r\n`. A byte scan, not
        // `str::split`: this ran per answer over TLS (is the transport's
        // Alt-Svc or HSTS already set?), and the substring searcher cost
        // 2 % of a TLS keep-alive answer's CPU (perf).
        let mut rest = self.block.as_ref()?.as_bytes();
        let name = name.as_bytes();
        while !rest.is_empty() {
            let end = memchr::memchr(b'\n', rest).map_or(rest.len(), |i| i + 1);
            let line = &rest[..end];
            rest = &rest[end..];
            if line.len() > name.len() && line[name.len()] == b':' && line[..name.len()].eq_ignore_ascii_case(name) {
                let value = &line[name.len() + 1..];
                let value = value.strip_prefix(b" ").unwrap_or(value);
                return Some(value.strip_suffix(b"\r\n").unwrap_or(value));
            }
        }
        None
    }

    /// The body.
    pub fn body(&self) -> &Body {
        &self.body
    }

    /// Which of the transport's field lines (`extra`: complete
    /// `Name: value\r\n` lines, HSTS and Alt-Svc over TLS) this response
    /// sets itself, one bit per line (bit `i`: line `i`; lines past the
    /// 32nd are never reported as set, so they are always written).
    ///
    /// Asked once per answer over TLS. A header block's part is memoised
    /// per thread ([`block_sets_lines`]): scanning a file's block line by
    /// line for `Alt-Svc` was 460 instructions of a 17-byte file's answer
    /// (callgrind, 10,427 in all), the file's TLS increment over plaintext
    /// 714 above the hello's.
    pub(crate) fn sets_lines(&self, extra: &[u8]) -> u32 {
        let mut given = 0;
        if !self.headers.is_empty() || self.content_type.is_some() {
            for (i, name) in line_names(extra).enumerate().take(32) {
                let own = (name.eq_ignore_ascii_case(b"content-type") && self.content_type.is_some())
                    || self
                        .headers
                        .iter()
                        .any(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name));
                if own {
                    given |= 1 << i;
                }
            }
        }
        if let Some(block) = &self.block {
            given |= block_sets_lines(block, extra);
        }
        given
    }
}

/// The names of `lines` (`Name: value\r\n` each), in order: the lines
/// found with memchr, each name up to its colon.
pub(crate) fn line_names(mut lines: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        if lines.is_empty() {
            return None;
        }
        let end = memchr::memchr(b'\n', lines).map_or(lines.len(), |i| i + 1);
        let line = &lines[..end];
        lines = &lines[end..];
        line.split(|&b| b == b':').next()
    })
}

/// Which lines of `extra` `block` sets (as [`Response::sets_lines`]),
/// remembered for the last block and `extra` asked about on this thread:
/// a server answering one file or archive entry again and again scans its
/// block once, as `h1/respond.rs`'s `LAST_HEAD` spells a head once. The
/// memo holds a `Weak` of the block's buffer, so the allocation cannot be
/// reused for another block while it is remembered (no stale verdict),
/// yet an archive generation the memo saw last is unmapped when its last
/// response goes. A block whose buffer is refilled in place (the proxy's,
/// [`HeaderBlock::is_cacheable`]) is scanned each time and not held: a
/// `Weak` would make the refill fail.
fn block_sets_lines(block: &HeaderBlock, extra: &[u8]) -> u32 {
    if !block.is_cacheable() {
        return lines_set(block.as_bytes(), extra);
    }
    LAST_BLOCK.with_borrow_mut(|last| {
        if let Some(last) = last.as_ref() {
            if std::ptr::addr_eq(last.buf.as_ptr(), Arc::as_ptr(&block.buf))
                && last.range == block.range()
                && last.extra[..] == *extra
            {
                return last.given;
            }
        }
        let given = lines_set(block.as_bytes(), extra);
        // The memo's buffer for `extra` is kept: a miss allocates nothing
        // but the `Weak`'s count.
        let mut kept = last.take().map(|l| l.extra).unwrap_or_default();
        kept.clear();
        kept.extend_from_slice(extra);
        *last = Some(LastBlock {
            buf: Arc::downgrade(&block.buf),
            range: block.range(),
            extra: kept,
            given,
        });
        given
    })
}

/// Which lines of `extra` the lines `block` set: one pass over the
/// block's lines (memchr), each compared with the few names of `extra`.
fn lines_set(block: &[u8], extra: &[u8]) -> u32 {
    let mut given = 0;
    let mut rest = block;
    while !rest.is_empty() {
        let end = memchr::memchr(b'\n', rest).map_or(rest.len(), |i| i + 1);
        let line = &rest[..end];
        rest = &rest[end..];
        for (i, name) in line_names(extra).enumerate().take(32) {
            if line.len() > name.len() && line[name.len()] == b':' && line[..name.len()].eq_ignore_ascii_case(name) {
                given |= 1 << i;
            }
        }
    }
    given
}

thread_local! {
    /// The last header block `block_sets_lines` looked at on this thread.
    static LAST_BLOCK: std::cell::RefCell<Option<LastBlock>> = const { std::cell::RefCell::new(None) };
}

struct LastBlock {
    buf: std::sync::Weak<dyn AsRef<[u8]> + Send + Sync>,
    range: Range<usize>,
    extra: Vec<u8>,
    given: u32,
}

/// Header fields checked once and kept as the bytes that go on the wire
/// (`Name: value\r\n` each), cheap to clone (one reference count).
///
/// A server answering the same resource many times (a file, an archive
/// entry) builds its fields once and adds them to each response with
/// [`Response::with_header_block`], so the hot path neither allocates nor
/// re-validates.
///
/// ```
/// use peregrine::{HeaderBlock, Response};
/// let block = HeaderBlock::new(&[("Content-Type", "text/css"), ("ETag", "\"x\"")]).unwrap();
/// let r = Response::new(200).with_header_block(block.clone());
/// assert_eq!(block.as_bytes(), b"Content-Type: text/css\r\nETag: \"x\"\r\n");
/// assert!(HeaderBlock::new(&[("Content-Length", "5")]).is_err());
/// ```
#[derive(Clone)]
pub struct HeaderBlock {
    /// The buffer the lines lie in.
    buf: Arc<dyn AsRef<[u8]> + Send + Sync>,
    /// Where the lines start in `buf`.
    start: usize,
    /// Where they end, and in the top bit [`REFILLED`]. The mark is kept
    /// in a word the block already has, not in a field of its own: a
    /// field would make a `Response` (which holds a block) 136 bytes,
    /// moved with a call to memcpy where 128 are eight stores.
    end: usize,
}

/// The mark, in `HeaderBlock::end`'s top bit, of a block whose buffer is
/// refilled in place once no answer holds it (the proxy's per-connection
/// buffer, `proxy/pool.rs`, reused through `Arc::get_mut`). No offset
/// has that bit: a buffer's bytes are at most `isize::MAX`.
const REFILLED: usize = 1 << (usize::BITS - 1);

impl HeaderBlock {
    /// A block of `lines`, whose buffer is never refilled.
    #[inline]
    fn of(lines: SharedBytes) -> Self {
        HeaderBlock {
            buf: lines.buf,
            start: lines.range.start,
            end: lines.range.end,
        }
    }

    /// The same block (one allocation, the same range): a clone of it.
    pub(crate) fn same(&self, other: &HeaderBlock) -> bool {
        Arc::ptr_eq(&self.buf, &other.buf) && self.start == other.start && self.end == other.end
    }

    /// The lines' range in the buffer.
    #[inline]
    fn range(&self) -> Range<usize> {
        self.start..self.end & !REFILLED
    }

    /// Whether a cache may remember this block by where it is while it
    /// holds the buffer's allocation by a `Weak` (the head cache, the
    /// transport fields' memo). Not for a buffer refilled in place: while
    /// a `Weak` of it lives its owner cannot refill it (`Arc::get_mut`
    /// fails, and the proxy allocated a new one per answer).
    #[inline]
    pub(crate) fn is_cacheable(&self) -> bool {
        self.end & REFILLED == 0
    }

    /// Where the block's bytes are: its buffer's address and its range in
    /// it; `None` for a block that is not cacheable. Proof of the same
    /// bytes only while the buffer's allocation is held ([`Self::hold`]):
    /// a freed buffer's address can be given to another.
    #[inline]
    pub(crate) fn place(&self) -> Option<(usize, usize, usize)> {
        if self.is_cacheable() {
            Some((Arc::as_ptr(&self.buf) as *const u8 as usize, self.start, self.end))
        } else {
            None
        }
    }

    /// A hold on the block's allocation but not its bytes: while it
    /// lives, [`Self::place`] is this block's (a buffer never changes
    /// but by a refill, which the hold prevents), yet an archive
    /// generation it lies in is still unmapped when its last response
    /// goes.
    #[inline]
    pub(crate) fn hold(&self) -> std::sync::Weak<dyn AsRef<[u8]> + Send + Sync> {
        Arc::downgrade(&self.buf)
    }

    /// Checks and joins `fields`. An invalid name or value, or a field the
    /// engine writes itself (`Content-Length`, `Date`, ...), is an error
    /// naming the field.
    pub fn new(fields: &[(&str, &str)]) -> Result<Self, String> {
        let mut bytes = Vec::new();
        for (name, value) in fields {
            if !crate::codec::head::is_token(name.as_bytes()) {
                return Err(format!("invalid header field name {name:?}"));
            }
            if !is_valid_value(value.as_bytes()) {
                return Err(format!("invalid value for header field {name}"));
            }
            if RESERVED.iter().any(|r| r.eq_ignore_ascii_case(name)) || name.eq_ignore_ascii_case("server") {
                return Err(format!("header field {name} is written by the engine"));
            }
            crate::codec::write::push_field(&mut bytes, name.as_bytes(), value.as_bytes());
        }
        Ok(HeaderBlock::of(SharedBytes::new(Arc::new(bytes))))
    }

    /// Lines of fields the engine itself may write although handlers may
    /// not (a 426's `Upgrade` and `Connection: upgrade`, RFC 9110 §7.8):
    /// trusted, not checked.
    pub(crate) fn engine_lines(lines: &'static [u8]) -> Self {
        HeaderBlock::of(SharedBytes::new(Arc::new(lines)))
    }

    /// Lines the engine built from fields it checked as `from_lines` would
    /// (the proxy's relay of an upstream's answer, `proxy/pool.rs`), not
    /// looked at again; in debug builds they are, so every test that
    /// relays an answer checks that promise. The block is not cacheable
    /// ([`Self::is_cacheable`]): the proxy refills its buffer in place
    /// for the next answer, and an upstream's answer is seldom the same
    /// twice anyway.
    pub(crate) fn from_checked_lines(lines: SharedBytes) -> Self {
        debug_assert!(
            HeaderBlock::from_lines(lines.clone()).is_ok(),
            "lines that from_lines refuses: {:?}",
            String::from_utf8_lossy(lines.as_slice())
        );
        let mut block = HeaderBlock::of(lines);
        block.end |= REFILLED;
        block
    }

    /// Uses bytes that are already header lines (`Name: value\r\n` each),
    /// such as a head stored in a memory-mapped archive, without copying
    /// them. They are checked as [`HeaderBlock::new`] checks its fields,
    /// but for one thing a `str` cannot hold: a value's bytes are
    /// field-value octets (RFC 9110 §5.5: VCHAR, SP, HTAB and obs-text,
    /// %x80-FF), not necessarily UTF-8, as an upstream's answer relayed
    /// by the proxy may have them (`filename="caf\xe9.pdf"` in Latin-1).
    /// [`Response::header`] reads such a value as absent;
    /// [`Response::header_bytes`] gives it.
    pub fn from_lines(lines: SharedBytes) -> Result<Self, String> {
        let mut rest = lines.as_slice();
        while !rest.is_empty() {
            let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
                return Err("header lines must end with CRLF".to_owned());
            };
            let line = &rest[..end];
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                return Err("header line without a colon".to_owned());
            };
            let (name, value) = (&line[..colon], &line[colon + 1..]);
            let name_str = String::from_utf8_lossy(name);
            if !crate::codec::head::is_token(name) {
                return Err(format!("invalid header field {name_str:?}"));
            }
            if !is_valid_value(value) {
                return Err(format!("invalid value for header field {name_str}"));
            }
            if RESERVED.iter().any(|r| r.as_bytes().eq_ignore_ascii_case(name)) || name.eq_ignore_ascii_case(b"server")
            {
                return Err(format!("header field {name_str} is written by the engine"));
            }
            rest = &rest[end + 2..];
        }
        Ok(HeaderBlock::of(lines))
    }

    /// The fields as written on the wire.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &(*self.buf).as_ref()[self.range()]
    }
}

impl std::fmt::Debug for HeaderBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("HeaderBlock")
            .field(&String::from_utf8_lossy(self.as_bytes()))
            .finish()
    }
}

/// field-value = *field-content: VCHAR, SP, HTAB, obs-text; no CR, LF, NUL.
pub(crate) fn is_valid_value(v: &[u8]) -> bool {
    v.iter().all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("content_type", &self.content_type)
            .field("headers", &self.headers)
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// A header block and a body in one buffer, for the writers' tests of
/// [`Response::prepared_beside`] (HTTP/1.1, HTTP/2 and HTTP/3): `lines`,
/// then `body_len` bytes of a pattern that does not repeat every 256
/// bytes. Returns the buffer and where the body starts.
#[cfg(test)]
pub(crate) fn beside_buffer(lines: &[u8], body_len: usize) -> (Arc<dyn AsRef<[u8]> + Send + Sync>, usize) {
    let mut whole = lines.to_vec();
    whole.extend((0..body_len).map(|i| (i * 7 + i / 251) as u8));
    (Arc::new(whole), lines.len())
}

/// The header block of a [`beside_buffer`]: its first `lines` bytes.
#[cfg(test)]
pub(crate) fn beside_block(whole: &Arc<dyn AsRef<[u8]> + Send + Sync>, lines: usize) -> HeaderBlock {
    HeaderBlock::from_lines(SharedBytes::slice(whole.clone(), 0..lines).unwrap()).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_is_moved_without_a_call_to_memcpy() {
        // x86-64 inlines a copy of up to eight 16-byte stores; a response
        // is moved several times between a handler and the output buffer.
        assert!(
            std::mem::size_of::<Response>() <= 128,
            "{}",
            std::mem::size_of::<Response>()
        );
    }

    /// A block of the proxy's (`from_checked_lines`: its buffer refilled
    /// in place) is not remembered by the transport fields' memo: nothing
    /// holds its buffer after the answer, and each refill's lines decide.
    #[test]
    fn a_block_refilled_in_place_is_scanned_each_time_and_not_held() {
        let extra = b"Strict-Transport-Security: max-age=1\r\nAlt-Svc: clear\r\n";
        let mut buf: Arc<Vec<u8>> = Arc::new(Vec::new());
        for (lines, want) in [("Alt-Svc: h3\r\n", 2), ("Alt-Svc: h3\r\n", 2), ("X-A: 1\r\n", 0)] {
            {
                let bytes = Arc::get_mut(&mut buf).expect("nothing holds the buffer");
                bytes.clear();
                bytes.extend_from_slice(lines.as_bytes());
            }
            let shared: Arc<dyn AsRef<[u8]> + Send + Sync> = buf.clone();
            let block = HeaderBlock::from_checked_lines(SharedBytes::new(shared));
            assert!(!block.is_cacheable() && block.place().is_none());
            assert_eq!(block.as_bytes(), lines.as_bytes());
            let resp = Response::prepared(200, block, "x");
            assert_eq!(resp.sets_lines(extra), want, "{lines:?}");
        }
        // A block of `from_lines` is remembered, by its place.
        let block = HeaderBlock::from_lines(SharedBytes::new(buf.clone())).unwrap();
        assert!(block.is_cacheable() && block.place().is_some());
    }

    #[test]
    fn headers_that_would_break_framing_make_a_500() {
        assert!(Response::text("x").with_header("X-Ok", "fine").invalid.is_none());
        for (name, value) in [
            ("X-Bad", "a\r\nInjected: yes"),
            ("X-Bad", "a\nb"),
            ("X-Bad", "a\0b"),
            ("Bad Name", "x"),
            ("", "x"),
            ("Content-Length", "5"),
            ("transfer-encoding", "chunked"),
            ("Connection", "close"),
        ] {
            assert!(
                Response::text("x").with_header(name, value).invalid.is_some(),
                "{name}: {value:?}"
            );
        }
        assert!(Response::new(42).invalid.is_some());
        assert!(Response::new(101).invalid.is_some());
    }

    #[test]
    fn header_blocks_from_lines_are_checked_like_fields() {
        let ok = |s: &'static str| HeaderBlock::from_lines(SharedBytes::new(Arc::new(s.as_bytes()))).is_ok();
        assert!(ok(""));
        assert!(ok("Content-Type: text/css\r\nETag: \"x\"\r\n"));
        assert!(ok("X-Empty:\r\n"));
        assert!(!ok("Content-Type: text/css"));
        assert!(!ok("Content-Length: 5\r\n"));
        assert!(!ok("X: a\nb\r\n"));
        assert!(!ok("Bad Name: x\r\n"));
        assert!(!ok("no colon\r\n"));
        assert!(!ok("X: a\r\n\r\n"));
    }

    /// RFC 9110 §5.5: a value's obs-text (%x80-FF) is opaque data, kept
    /// as it came (a Latin-1 `é`, not UTF-8); `header` reads it as absent,
    /// `header_bytes` gives its bytes. CR, LF, NUL and the other control
    /// bytes but HTAB are refused as before.
    #[test]
    fn a_block_keeps_obs_text_that_is_not_utf8_and_refuses_control_bytes() {
        let lines: &'static [u8] = b"Content-Disposition: attachment; filename=\"caf\xe9.pdf\"\r\nX-A: 1\r\n";
        let block = HeaderBlock::from_lines(SharedBytes::new(Arc::new(lines))).expect("obs-text is a value's");
        assert_eq!(block.as_bytes(), lines);
        let r = Response::new(200).with_header_block(block);
        assert_eq!(
            r.header_bytes("content-disposition"),
            Some(&b"attachment; filename=\"caf\xe9.pdf\""[..])
        );
        assert_eq!(r.header("content-disposition"), None);
        assert_eq!(r.header_values("content-disposition").count(), 0);
        assert_eq!((r.header("x-a"), r.header_bytes("x-a")), (Some("1"), Some(&b"1"[..])));
        assert_eq!(r.header_bytes("x-b"), None);
        for bad in [
            &b"X: caf\xe9\rx\r\n"[..],
            b"X: caf\xe9\0\r\n",
            b"X: \xe9\x01\r\n",
            b"X: \xe9\x7f\r\n",
        ] {
            let refused = HeaderBlock::from_lines(SharedBytes::new(Arc::new(bad)));
            assert!(refused.is_err(), "{bad:?}");
        }
    }

    #[test]
    fn content_type_header_replaces_the_default() {
        let r = Response::text("x").with_header("content-type", "text/csv");
        assert_eq!(r.header("Content-Type"), Some("text/csv"));
        assert!(r.headers.is_empty());
    }

    /// A wrapper replaces a prepared field: every line of that name goes
    /// (given or in the block, in any case), the others stay in order, and
    /// a body beside the block keeps its bytes.
    #[test]
    fn without_header_drops_a_field_from_the_block_and_the_given_ones() {
        let buf: Arc<dyn AsRef<[u8]> + Send + Sync> =
            Arc::new(b"ETag: \"x\"\r\ncache-control: public\r\nX-A: 1\r\nhi".to_vec());
        let block = HeaderBlock::from_lines(SharedBytes::slice(buf, 0..42).unwrap()).unwrap();
        let r = Response::prepared_beside(200, block, 42..44)
            .with_header("Cache-Control", "no-store")
            .without_header("Cache-Control")
            .with_header("Cache-Control", "private");
        assert_eq!(r.block.as_ref().unwrap().as_bytes(), b"ETag: \"x\"\r\nX-A: 1\r\n");
        assert_eq!(r.header("cache-control"), Some("private"));
        assert_eq!(r.headers.len(), 1);
        match &r.body {
            Body::Shared(b) => assert_eq!(b.as_slice(), b"hi"),
            _ => panic!("the body moved"),
        }
        // A block without the field is kept as it is.
        let r = Response::text("x")
            .with_header("X-B", "2")
            .without_header("cache-control");
        assert_eq!(r.header("x-b"), Some("2"));
    }

    #[test]
    fn header_finds_a_block_field_by_its_whole_name_in_any_case() {
        let block = HeaderBlock::new(&[("X-Ab", "long"), ("X-A", "short"), ("Alt-Svc", "h3=\":443\"")]).unwrap();
        let r = Response::new(200).with_header_block(block);
        assert_eq!(r.header("x-a"), Some("short"));
        assert_eq!(r.header("X-AB"), Some("long"));
        assert_eq!(r.header("alt-svc"), Some("h3=\":443\""));
        assert_eq!(r.header("x"), None);
        assert_eq!(r.header("x-abc"), None);
        assert_eq!(r.header("strict-transport-security"), None);
    }

    /// Every value of a name, from the fields given and the block's, in
    /// order; several names dropped in one pass; `Vary` joined, never
    /// with an element it lists (any case) or past `*`.
    #[test]
    fn header_values_without_headers_and_with_vary() {
        let block = HeaderBlock::new(&[
            ("Vary", "Accept-Encoding"),
            ("Access-Control-Allow-Origin", "*"),
            ("ETag", "\"x\""),
            ("Vary", "Cookie"),
        ])
        .unwrap();
        let r = Response::new(200)
            .with_header("Vary", "Accept")
            .with_header_block(block);
        assert_eq!(
            r.header_values("vary").collect::<Vec<_>>(),
            ["Accept", "Accept-Encoding", "Cookie"]
        );
        let r = r.without_headers(&["access-control-allow-origin", "etag"]);
        assert_eq!(r.header("access-control-allow-origin"), None);
        assert_eq!(r.header("etag"), None);
        assert_eq!(r.header_values("vary").count(), 3);
        let r = r.with_vary("Origin").with_vary("origin").with_vary("cookie");
        assert_eq!(
            r.header_values("vary").collect::<Vec<_>>(),
            ["Accept", "Origin", "Accept-Encoding", "Cookie"]
        );
        let star = Response::new(200).with_header("Vary", "Accept, *").with_vary("Origin");
        assert_eq!(star.header_values("vary").collect::<Vec<_>>(), ["Accept, *"]);
        let none = Response::new(200).with_vary("Origin");
        assert_eq!(none.header_values("vary").collect::<Vec<_>>(), ["Origin"]);
    }
}
