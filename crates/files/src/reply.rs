//! The steps every answer from a site takes around its lookup, shared by
//! `serve DIR` (this crate's `serve`) and `serve ARCHIVE`
//! (`peregrine_archive`), so that both answer the same request the same
//! way (`archive/tests/parity.rs` compares them):
//!
//! [`method`] → [`Fields::scan`] → (lookup: the caller's) → [`reply`]:
//! encoding → conditional → range → reply.
//!
//! The two differ only in where a representation's bytes and fields come
//! from: a directory's per-worker cache (open files, header blocks built
//! from `stat`), or an archive's pre-built heads and bodies. Each side
//! implements [`Resource`] and [`Representation`] over its own storage;
//! the HTTP semantics (RFC 9110 §12 negotiation, §13 preconditions, §14
//! ranges) are here once.

use std::ops::Range;
use std::time::SystemTime;

use peregrine::codec::head::trim_ows;
use peregrine::{Body, HeaderBlock, Request, Response};

use crate::conditional::{self, Preconditions, Verdict};
use crate::encoding::{self, Accepted, Encoding};
use crate::range::{self, Ranges};

/// The methods a site answers. RFC 9110 §9.3.2: a server that answers GET
/// answers HEAD too; OPTIONS says which (§9.3.7). Methods outside IANA's
/// registry (and CONNECT) get 501 from the engine before a handler runs.
pub const ALLOW: &str = "GET, HEAD, OPTIONS";

/// Multipart answers are built in memory up to this size; a larger set of
/// ranges gets the whole representation (200), as RFC 9110 §14.2 allows
/// ("a server MAY ignore the Range header field"), sent from the file as
/// it is read. Each connection may hold one such answer beyond its share
/// of the output budget (an HTTP/1.1 connection's one answer, an HTTP/2
/// or HTTP/3 one's first stream: `ARCHITECTURE.md`, bounded memory), so
/// this is what a client costs per connection: 8 MiB made 40 HTTP/1.1
/// connections that never read cost 320 MB. nginx and Caddy stream the
/// parts from the file instead, holding no copy (both ignore a set of
/// ranges larger than the file: nginx's range filter declines it, Go's
/// `ServeContent` drops it); until this crate does too, 1 MiB keeps the
/// copy small while multi-range requests, rare and made of small parts
/// (a PDF reader's byte-serving), still get their 206.
pub const MULTIPART_BYTES_MAX: u64 = 1 << 20;

/// What step 1 found the method to ask for.
pub enum Method {
    /// GET: a representation.
    Get,
    /// HEAD: the same answer without its body (RFC 9110 §9.3.2).
    Head,
    /// Anything else, answered here.
    Answer(Response),
}

/// Step 1, the method: GET and HEAD go on; OPTIONS gets 204 with `Allow`;
/// any other registered method 405 with `Allow` (RFC 9110 §15.5.6: "The
/// origin server MUST generate an Allow header field in a 405 response").
///
/// Inlined for GET and HEAD, the others' answers built out of line: a
/// `Method` holds a whole `Response`, and a call returning one wrote it
/// through memory on every request.
#[inline(always)]
pub fn method(req: &Request<'_>) -> Method {
    match req.method() {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        other => Method::Answer(other_method(other)),
    }
}

#[cold]
#[inline(never)]
fn other_method(method: &str) -> Response {
    match method {
        "OPTIONS" => Response::new(204).with_header("Allow", ALLOW),
        _ => Response::error(405).with_header("Allow", ALLOW),
    }
}

/// A 400 naming why the request path was refused.
pub fn bad_request(why: &str) -> Response {
    Response::new(400)
        .with_content_type("text/plain; charset=utf-8")
        .with_body(format!("400 Bad Request: {why}\n"))
}

/// The request fields the steps read, found in one pass over the head.
#[derive(Debug, Default, Clone, Copy)]
pub struct Fields<'a> {
    /// `Accept-Encoding`.
    pub accept_encoding: Option<&'a [u8]>,
    /// `If-Match`, `If-None-Match`, `If-Modified-Since`,
    /// `If-Unmodified-Since`.
    pub pre: Preconditions<'a>,
    /// `Range`.
    pub range: Option<&'a [u8]>,
    /// `If-Range`.
    pub if_range: Option<&'a [u8]>,
}

impl<'a> Fields<'a> {
    /// Reads the fields from the request head (compared by length first:
    /// most fields a browser sends are none of these).
    ///
    /// Gathered in locals, not through a `&mut` into a struct: that struct
    /// lived in memory and was copied out at once, its 16-byte loads over
    /// 8-byte stores stalling on store forwarding (80 % of this function's
    /// samples in a pipelined archive profile).
    pub fn scan(req: &Request<'a>) -> Fields<'a> {
        let (mut range, mut if_match, mut if_range, mut if_none_match) = (None, None, None, None);
        let (mut accept_encoding, mut if_modified_since, mut if_unmodified_since) = (None, None, None);
        for (name, value) in req.headers() {
            // A repeated list field is one list (RFC 9110 §5.3); for these
            // few, the first is kept: clients do not split them.
            let first = |slot: Option<&'a [u8]>| slot.or(Some(value));
            match name.len() {
                5 if same_name(name, "range") => range = first(range),
                8 if same_name(name, "if-match") => if_match = first(if_match),
                8 if same_name(name, "if-range") => if_range = first(if_range),
                13 if same_name(name, "if-none-match") => if_none_match = first(if_none_match),
                15 if same_name(name, "accept-encoding") => accept_encoding = first(accept_encoding),
                17 if same_name(name, "if-modified-since") => if_modified_since = first(if_modified_since),
                19 if same_name(name, "if-unmodified-since") => if_unmodified_since = first(if_unmodified_since),
                _ => {}
            }
        }
        Fields {
            accept_encoding,
            pre: Preconditions {
                if_match,
                if_none_match,
                if_modified_since,
                if_unmodified_since,
            },
            range,
            if_range,
        }
    }
}

/// Whether the field name `name` is `lower` (lowercase letters and `-`,
/// four bytes or more) without regard to case, as `eq_ignore_ascii_case`
/// says, compared in words, the last one overlapping: each letter's case bit
/// set in `name` (a byte then matches only as the letter or its capital),
/// the other bytes compared as they are. A byte at a time,
/// `accept-encoding` cost 105 instructions of a browser's request
/// (callgrind c50, GET / of the bundled archive, `Fields::scan`).
#[inline(always)]
fn same_name(name: &str, lower: &'static str) -> bool {
    let (name, lower) = (name.as_bytes(), lower.as_bytes());
    let n = lower.len();
    if name.len() != n || n < 4 {
        return name.eq_ignore_ascii_case(lower);
    }
    // Bit 5 of each byte of `lower` that has bit 6 (its letters): the
    // case bit to set in the byte of `name` compared with it.
    if n >= 8 {
        let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
        let same = |at: usize| {
            let l = word(lower, at);
            (word(name, at) | ((l >> 1) & 0x2020_2020_2020_2020)) == l
        };
        // Every eight bytes, then the last eight (17 and 19 bytes take
        // three words: two would skip the ninth byte).
        let mut at = 0;
        while at + 8 < n {
            if !same(at) {
                return false;
            }
            at += 8;
        }
        return same(n - 8);
    }
    let word = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().expect("4 bytes"));
    let same = |at: usize| {
        let l = word(lower, at);
        (word(name, at) | ((l >> 1) & 0x2020_2020)) == l
    };
    same(0) && same(n - 4)
}

impl Fields<'_> {
    /// Whether the request carries none of the fields: [`reply_plain`]
    /// answers it.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.accept_encoding.is_none()
            && self.range.is_none()
            && self.if_range.is_none()
            && !has_precondition(&self.pre)
    }
}

/// One representation of a resource (identity, or one content coding), as
/// stored: its validators, its pre-built fields and its bytes.
pub trait Representation {
    /// Length of the body in bytes.
    fn len(&self) -> u64;
    /// Whether the body is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The strong entity tag, quotes included.
    fn etag(&self) -> &str;
    /// `Last-Modified`.
    fn last_modified(&self) -> SystemTime;
    /// `Content-Type` (a multipart answer names it in each part).
    fn content_type(&self) -> &str;
    /// A 200's fields, `Content-Type` first.
    fn block_200(&self) -> HeaderBlock;
    /// The same without `Content-Type` (a multipart 206 has its own).
    fn meta(&self) -> HeaderBlock;
    /// A 304's fields (RFC 9110 §15.4.5: those a 200 would carry among
    /// ETag, Last-Modified, Cache-Control, Vary...).
    fn block_304(&self) -> HeaderBlock;
    /// Bytes `range` of the body, as a response body.
    fn body(&self, range: Range<u64>) -> Body;
    /// Appends bytes `range` of the body to `out` (multipart answers).
    fn read_into(&self, range: Range<u64>, out: &mut Vec<u8>) -> std::io::Result<()>;
    /// The whole representation with the 200 fields, as `status` (200, or
    /// a site's not-found page's 404). A store whose fields and bytes lie
    /// in one buffer may build it with [`Response::prepared_beside`]: one
    /// reference count where this takes two.
    fn whole(&self, status: u16) -> Response {
        Response::prepared(status, self.block_200(), self.body(0..self.len()))
    }
}

/// A resource: its representations, one per content coding.
pub trait Resource {
    /// A representation, as the caller stores it.
    type Variant: Representation;
    /// The content codings a representation exists in, besides identity.
    fn codings(&self) -> &[Encoding];
    /// Whether answers vary by `Accept-Encoding` (there are codings, or
    /// some are being made).
    fn negotiable(&self) -> bool;
    /// The representation in `coding` (`None`: identity). `None` if it
    /// cannot be sent (the caller has logged why): a 500.
    fn representation(&mut self, coding: Option<Encoding>) -> Option<Self::Variant>;
}

/// Steps 4 to 7 for a found resource: encoding, conditional, range, reply.
/// `status` is 200, or 404 for a site's not-found page, which is sent
/// whole whatever the request's validators and ranges (as nginx sends its
/// `error_page`: its not-modified and range filters act on 200s only).
pub fn reply<R: Resource>(res: &mut R, f: &Fields<'_>, head: bool, status: u16) -> Response {
    // 4. Encoding (RFC 9110 §12.5.3). `Accept-Encoding` read once, and
    // only when there is a coding to choose.
    let accepted = match res.codings() {
        [] => encoding::accepted(None),
        _ => encoding::accepted(f.accept_encoding),
    };
    let (chosen, held) = match held(res, f, status, &accepted) {
        Held::Match(v) => (Some(v), Compared::Matched),
        other => {
            let coding = accepted.choose(res.codings());
            let compared = match other {
                Held::NoneMatch => Compared::Unmatched,
                _ => Compared::Not,
            };
            (res.representation(coding), compared)
        }
    };
    let Some(v) = chosen else {
        return Response::error(500);
    };
    if status != 200 {
        return v.whole(status);
    }
    // 5. Conditional (RFC 9110 §13.2.2's order), when the request has a
    // precondition: without one the evaluation proceeds, and most
    // requests have none. `held` compared the chosen variant's tag with
    // If-None-Match (step 3) already: without If-Match and
    // If-Unmodified-Since (steps 1 and 2), and with If-None-Match step 4
    // is skipped, the answer is its 304 if the tag matched and goes on if
    // not, without a second compare (a stale tag's archive answer 4,232
    // -> 4,033 instructions, callgrind, bench/runs/2026-11-28-arch13).
    let steps_1_2 = f.pre.if_match.is_some() || f.pre.if_unmodified_since.is_some();
    match held {
        Compared::Matched if !steps_1_2 => return Response::prepared(304, v.block_304(), Body::Empty),
        Compared::Unmatched if !steps_1_2 => {}
        _ if has_precondition(&f.pre) => match conditional::evaluate(&f.pre, v.etag(), v.last_modified()) {
            Verdict::Proceed => {}
            Verdict::NotModified => return Response::prepared(304, v.block_304(), Body::Empty),
            Verdict::PreconditionFailed => return Response::error(412),
        },
        _ => {}
    }
    // 6. Range: GET only (RFC 9110 §14.2: "A server MUST ignore a Range
    // header field received with a request method that is unrecognized or
    // for which range handling is not defined. [...] GET is the only
    // method for which range handling is defined").
    if let (Some(value), false) = (f.range, head) {
        if conditional::if_range_holds(f.if_range, v.etag(), v.last_modified()) {
            match range::parse(value, v.len()) {
                Ranges::Full => {}
                Ranges::Unsatisfiable => {
                    // §15.5.17: a 416 says the current length; it still
                    // says how the answer varies.
                    let r = Response::error(416).with_header("Content-Range", format!("bytes */{}", v.len()));
                    return if res.negotiable() {
                        r.with_header("Vary", "Accept-Encoding")
                    } else {
                        r
                    };
                }
                Ranges::Partial(parts) if parts.len() == 1 => {
                    let r = parts[0].clone();
                    return Response::new(206)
                        .with_header("Content-Range", format!("bytes {}-{}/{}", r.start, r.end - 1, v.len()))
                        .with_header_block(v.block_200())
                        .with_body(v.body(r));
                }
                Ranges::Partial(parts) => {
                    if let Some(r) = multipart(&v, &parts) {
                        return r;
                    }
                }
            }
        }
    }
    // 7. Reply.
    v.whole(200)
}

/// [`reply`] for a request that carries none of the fields the steps read
/// ([`Fields::is_empty`]): with no
/// `Accept-Encoding` identity is sent (`encoding::negotiate`), with no
/// validator nothing is held or conditional, with no `Range` the answer is
/// whole; so the answer is identity's `whole` (or a 500), for GET and HEAD
/// alike. The same answer as `reply` (the test
/// `a_request_without_fields_gets_what_reply_gives` holds them together)
/// without its steps' entries, tests and moves: an archive answer's
/// `answer` 252 -> 231 instructions, a file's `Site::reply` 139 -> 107
/// (callgrind c50, bench/runs/2026-11-27-archive-ir5).
#[inline(always)]
pub fn reply_plain<R: Resource>(res: &mut R, status: u16) -> Response {
    match res.representation(None) {
        Some(v) => v.whole(status),
        None => Response::error(500),
    }
}

/// Whether the request carries any of the four precondition fields.
#[inline(always)]
fn has_precondition(pre: &Preconditions<'_>) -> bool {
    pre.if_match.is_some()
        || pre.if_none_match.is_some()
        || pre.if_modified_since.is_some()
        || pre.if_unmodified_since.is_some()
}

/// The representation a revalidating client already holds, if it is still
/// acceptable to it: the server chooses among acceptable representations
/// (RFC 9110 §12.1), and choosing the one whose tag the client sent (its
/// `If-None-Match`) makes the answer a 304 instead of a new download. It
/// matters when a coding appears after the client's first request (a file
/// compressed on the fly is sent in identity until its forms are ready):
/// without it every client would fetch each such file twice. Only for a
/// 200: other statuses ignore validators.
fn held<R: Resource>(res: &mut R, f: &Fields<'_>, status: u16, accepted: &Accepted) -> Held<R::Variant> {
    let Some(inm) = f.pre.if_none_match else {
        return Held::NotLooked;
    };
    if status != 200 || !res.negotiable() {
        return Held::NotLooked;
    }
    // `*` matches any current representation (RFC 9110 §13.1.2): the 304
    // is the one step 4's choice would have, with its fields (§15.4.5),
    // not the first variant looked at (identity).
    if trim_ows(inm) == b"*" {
        return match res.representation(accepted.choose(res.codings())) {
            Some(v) => Held::Match(v),
            None => Held::NotLooked,
        };
    }
    let pre = Preconditions {
        if_none_match: Some(inm),
        ..Default::default()
    };
    for i in 0..=res.codings().len() {
        let coding = i.checked_sub(1).map(|c| res.codings()[c]);
        // Identity is always sent when nothing else is acceptable (as nginx
        // and Caddy do), so it is acceptable here too.
        let acceptable = coding.is_none_or(|c| accepted.contains(c));
        if !acceptable {
            continue;
        }
        let Some(v) = res.representation(coding) else {
            continue;
        };
        if conditional::evaluate(&pre, v.etag(), v.last_modified()) == Verdict::NotModified {
            return Held::Match(v);
        }
    }
    Held::NoneMatch
}

/// What [`held`] found.
enum Held<V> {
    /// The acceptable variant whose tag matches If-None-Match.
    Match(V),
    /// Every acceptable variant (identity, and each acceptable coding
    /// that can be sent) was compared with If-None-Match: none matches.
    /// Whatever step 4 chooses is among them (`representation` gives the
    /// same variant for the same coding within a request).
    NoneMatch,
    /// Not looked (no If-None-Match, not a 200, nothing to negotiate).
    NotLooked,
}

/// Whether the chosen variant's tag was compared with If-None-Match.
enum Compared {
    Matched,
    Unmatched,
    Not,
}

/// A `multipart/byteranges` 206 (RFC 9110 §14.6), or `None` to send the
/// whole representation instead when the parts are too large to build in
/// memory.
fn multipart<V: Representation>(v: &V, parts: &[Range<u64>]) -> Option<Response> {
    let total: u64 = parts.iter().map(|r| r.end - r.start).sum();
    if total > MULTIPART_BYTES_MAX {
        return None;
    }
    let boundary = boundary(v.etag());
    let mut body = Vec::with_capacity(total as usize + parts.len() * 128);
    for r in parts {
        body.extend_from_slice(b"--");
        body.extend_from_slice(boundary.as_bytes());
        body.extend_from_slice(b"\r\nContent-Type: ");
        body.extend_from_slice(v.content_type().as_bytes());
        body.extend_from_slice(
            format!("\r\nContent-Range: bytes {}-{}/{}\r\n\r\n", r.start, r.end - 1, v.len()).as_bytes(),
        );
        v.read_into(r.clone(), &mut body).ok()?;
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"--");
    body.extend_from_slice(boundary.as_bytes());
    body.extend_from_slice(b"--\r\n");
    Some(
        Response::new(206)
            .with_content_type(format!("multipart/byteranges; boundary={boundary}"))
            .with_header_block(v.meta())
            .with_body(body),
    )
}

/// A multipart boundary for the representation tagged `etag`: the same for
/// the same bytes, 26 characters whatever the tag's length (RFC 2046 §5.1.1
/// allows 70), and a 64-bit hash, so it does not occur in the parts by
/// accident.
fn boundary(etag: &str) -> String {
    format!("peregrine-{:016x}", xxhash_rust::xxh3::xxh3_64(etag.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `same_name` is `eq_ignore_ascii_case` for each name `Fields::scan`
    /// looks for: against the name in any case, and with each byte
    /// replaced by every other byte value.
    #[test]
    fn same_name_is_eq_ignore_ascii_case() {
        let names = [
            "range",
            "if-match",
            "if-range",
            "if-none-match",
            "accept-encoding",
            "if-modified-since",
            "if-unmodified-since",
        ];
        for lower in names {
            let n = lower.len();
            for case in 0..(1u32 << n.min(12)) {
                let mixed: String = lower
                    .chars()
                    .enumerate()
                    .map(|(i, c)| {
                        if case >> (i % 12) & 1 == 1 {
                            c.to_ascii_uppercase()
                        } else {
                            c
                        }
                    })
                    .collect();
                assert!(same_name(&mixed, lower), "{mixed} is {lower}");
            }
            for at in 0..n {
                for b in 0..=255u8 {
                    let mut bytes = lower.as_bytes().to_vec();
                    bytes[at] = b;
                    let Ok(other) = std::str::from_utf8(&bytes) else {
                        continue;
                    };
                    assert_eq!(
                        same_name(other, lower),
                        other.eq_ignore_ascii_case(lower),
                        "{other:?} against {lower}"
                    );
                }
            }
            assert!(!same_name(&lower[1..], lower));
        }
    }

    /// A representation held in memory, tagged by its bytes.
    struct Model {
        bytes: Vec<u8>,
        coding: Option<Encoding>,
        tag: String,
    }

    impl Representation for &Model {
        fn len(&self) -> u64 {
            self.bytes.len() as u64
        }
        fn etag(&self) -> &str {
            &self.tag
        }
        fn last_modified(&self) -> SystemTime {
            SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000)
        }
        fn content_type(&self) -> &str {
            "text/plain"
        }
        fn block_200(&self) -> HeaderBlock {
            let coding = self.coding.map_or("identity", Encoding::name);
            HeaderBlock::new(&[
                ("Content-Type", "text/plain"),
                ("ETag", &self.tag),
                ("X-Coding", coding),
            ])
            .unwrap()
        }
        fn meta(&self) -> HeaderBlock {
            HeaderBlock::new(&[("ETag", &self.tag)]).unwrap()
        }
        fn block_304(&self) -> HeaderBlock {
            HeaderBlock::new(&[("ETag", &self.tag)]).unwrap()
        }
        fn body(&self, range: Range<u64>) -> Body {
            Body::Bytes(self.bytes[range.start as usize..range.end as usize].to_vec())
        }
        fn read_into(&self, range: Range<u64>, out: &mut Vec<u8>) -> std::io::Result<()> {
            out.extend_from_slice(&self.bytes[range.start as usize..range.end as usize]);
            Ok(())
        }
    }

    /// Identity first, then the codings.
    struct Models {
        variants: Vec<Model>,
        codings: Vec<Encoding>,
        broken: bool,
    }

    impl Models {
        fn new(codings: &[Encoding], len: usize) -> Models {
            let variant = |coding: Option<Encoding>| {
                let name = coding.map_or("identity", Encoding::name);
                let bytes: Vec<u8> = name.bytes().cycle().take(len).collect();
                Model {
                    tag: format!("\"{name}-{len}\""),
                    bytes,
                    coding,
                }
            };
            let mut variants = vec![variant(None)];
            variants.extend(codings.iter().map(|c| variant(Some(*c))));
            Models {
                variants,
                codings: codings.to_vec(),
                broken: false,
            }
        }
    }

    impl<'m> Resource for &'m Models {
        type Variant = &'m Model;
        fn codings(&self) -> &[Encoding] {
            &self.codings
        }
        fn negotiable(&self) -> bool {
            !self.codings.is_empty()
        }
        fn representation(&mut self, coding: Option<Encoding>) -> Option<&'m Model> {
            let models: &'m Models = self;
            if models.broken {
                return None;
            }
            models.variants.iter().find(|v| v.coding == coding)
        }
    }

    fn answer(res: &Models, fields: &Fields<'_>, head: bool, status: u16) -> Response {
        reply(&mut &*res, fields, head, status)
    }

    fn body(r: &Response) -> Vec<u8> {
        match r.body() {
            Body::Bytes(b) => b.clone(),
            Body::Empty => Vec::new(),
            _ => panic!("a model's bodies are bytes"),
        }
    }

    #[test]
    fn the_preferred_coding_is_sent_unless_the_client_holds_another() {
        let res = Models::new(&[Encoding::Brotli, Encoding::Gzip], 40);
        let accept = Some(&b"gzip, br"[..]);
        let plain = Fields {
            accept_encoding: accept,
            ..Fields::default()
        };
        let r = answer(&res, &plain, false, 200);
        assert_eq!((r.status(), r.header("X-Coding")), (200, Some("br")));
        // Holding the gzip form (say it was the only one when it asked
        // first): 304 for it, not a download of the br form.
        let held = Fields {
            accept_encoding: accept,
            pre: Preconditions {
                if_none_match: Some(b"\"gzip-40\""),
                ..Preconditions::default()
            },
            ..Fields::default()
        };
        let r = answer(&res, &held, false, 200);
        assert_eq!((r.status(), r.header("ETag")), (304, Some("\"gzip-40\"")));
        // Unless gzip is no longer acceptable to it.
        let refused = Fields {
            accept_encoding: Some(b"br, gzip;q=0"),
            ..held
        };
        assert_eq!(answer(&res, &refused, false, 200).status(), 200);
    }

    /// `If-None-Match: *` is a 304 with the fields of the variant a 200
    /// would send (RFC 9110 §15.4.5), not those of identity, the first
    /// variant a held tag is looked for in.
    #[test]
    fn a_star_is_the_304_of_the_variant_that_would_be_sent() {
        let res = Models::new(&[Encoding::Brotli, Encoding::Gzip], 40);
        for (accept, want) in [
            (Some(&b"gzip, br"[..]), "br"),
            (Some(&b"gzip"[..]), "gzip"),
            (Some(&b"br;q=0"[..]), "identity"),
            (None, "identity"),
        ] {
            let f = Fields {
                accept_encoding: accept,
                ..Fields::default()
            };
            let sent = answer(&res, &f, false, 200);
            assert_eq!(sent.header("X-Coding"), Some(want));
            for star in [&b"*"[..], b" * "] {
                let f = Fields {
                    accept_encoding: accept,
                    pre: Preconditions {
                        if_none_match: Some(star),
                        ..Preconditions::default()
                    },
                    ..Fields::default()
                };
                let r = answer(&res, &f, false, 200);
                assert_eq!((r.status(), r.header("ETag")), (304, sent.header("ETag")), "{accept:?}");
            }
        }
    }

    /// A held variant's 304 comes after steps 1 and 2 (RFC 9110 §13.2.2):
    /// an If-Match or If-Unmodified-Since that fails makes it a 412, one
    /// that holds leaves it a 304.
    #[test]
    fn a_held_variant_is_a_304_only_when_steps_1_and_2_pass() {
        let res = Models::new(&[Encoding::Brotli, Encoding::Gzip], 40);
        // The models' Last-Modified: 1,700,000,000 s.
        let before: &[u8] = b"Tue, 14 Nov 2023 22:13:19 GMT";
        let after: &[u8] = b"Tue, 14 Nov 2023 22:13:21 GMT";
        // If-Match, If-Unmodified-Since, the status wanted.
        type Case<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, u16);
        let cases: &[Case<'_>] = &[
            (None, None, 304),
            (Some(b"\"gzip-40\""), None, 304),
            (Some(b"*"), None, 304),
            (Some(b"\"br-40\""), None, 412),
            (None, Some(after), 304),
            (None, Some(before), 412),
        ];
        for &(if_match, if_unmodified_since, want) in cases {
            let f = Fields {
                accept_encoding: Some(b"gzip, br"),
                pre: Preconditions {
                    if_none_match: Some(b"\"gzip-40\""),
                    if_match,
                    if_unmodified_since,
                    ..Preconditions::default()
                },
                ..Fields::default()
            };
            let r = answer(&res, &f, false, 200);
            assert_eq!(r.status(), want, "{if_match:?} {if_unmodified_since:?}");
        }
    }

    /// A tag no variant has (the page changed since): the chosen variant
    /// is sent, its tag not compared again, unless step 1 or 2 says 412;
    /// If-Modified-Since is not looked at beside If-None-Match (step 4).
    #[test]
    fn a_stale_tag_gets_the_chosen_variant_unless_steps_1_and_2_fail() {
        let res = Models::new(&[Encoding::Brotli, Encoding::Gzip], 40);
        let before: &[u8] = b"Tue, 14 Nov 2023 22:13:19 GMT";
        let after: &[u8] = b"Tue, 14 Nov 2023 22:13:21 GMT";
        // If-Match, If-Unmodified-Since, If-Modified-Since, the status.
        type Case<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, Option<&'a [u8]>, u16);
        let cases: &[Case<'_>] = &[
            (None, None, None, 200),
            (None, None, Some(after), 200),
            (Some(b"\"br-40\""), None, None, 200),
            (Some(b"\"gzip-40\""), None, None, 412),
            (None, Some(after), None, 200),
            (None, Some(before), None, 412),
        ];
        for &(if_match, if_unmodified_since, if_modified_since, want) in cases {
            let f = Fields {
                accept_encoding: Some(b"gzip, br"),
                pre: Preconditions {
                    if_none_match: Some(b"\"br-39\", \"gzip-39\""),
                    if_match,
                    if_unmodified_since,
                    if_modified_since,
                },
                ..Fields::default()
            };
            let r = answer(&res, &f, false, 200);
            assert_eq!(
                r.status(),
                want,
                "{if_match:?} {if_unmodified_since:?} {if_modified_since:?}"
            );
            if want == 200 {
                assert_eq!(r.header("X-Coding"), Some("br"));
            }
        }
    }

    /// A not-found page is sent whole with its status whatever the request's
    /// validators and ranges (nginx sends its `error_page` so):
    /// 304, 412 or 206 would describe a resource the path does not name.
    /// `serve DIR` used to pick the variant a client held for it too; both
    /// now pick by `Accept-Encoding` alone.
    #[test]
    fn a_not_found_page_ignores_validators_and_ranges() {
        let res = Models::new(&[Encoding::Brotli, Encoding::Gzip], 40);
        let f = Fields {
            accept_encoding: Some(b"gzip, br"),
            pre: Preconditions {
                if_none_match: Some(b"\"gzip-40\""),
                if_match: Some(b"\"nothing\""),
                ..Preconditions::default()
            },
            range: Some(b"bytes=0-1"),
            ..Fields::default()
        };
        let r = answer(&res, &f, false, 404);
        assert_eq!((r.status(), r.header("X-Coding")), (404, Some("br")));
        assert_eq!(body(&r).len(), 40);
    }

    #[test]
    fn ranges_single_multipart_unsatisfiable_and_too_large() {
        let res = Models::new(&[], 10);
        let ranged = |value: &'static [u8], head: bool| {
            let f = Fields {
                range: Some(value),
                ..Fields::default()
            };
            answer(&res, &f, head, 200)
        };
        let r = ranged(b"bytes=2-4", false);
        assert_eq!((r.status(), r.header("Content-Range")), (206, Some("bytes 2-4/10")));
        assert_eq!(body(&r), b"ent");
        assert_eq!(ranged(b"bytes=2-4", true).status(), 200, "HEAD ignores Range");
        let r = ranged(b"bytes=10-", false);
        assert_eq!((r.status(), r.header("Content-Range")), (416, Some("bytes */10")));
        assert_eq!(r.header("Vary"), None, "nothing to negotiate");
        let r = ranged(b"bytes=0-0,-1", false);
        let ct = r.header("Content-Type").unwrap().to_owned();
        let boundary = ct.strip_prefix("multipart/byteranges; boundary=").unwrap();
        assert_eq!(r.status(), 206);
        assert_eq!(
            String::from_utf8(body(&r)).unwrap(),
            format!(
                "--{boundary}\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-0/10\r\n\r\ni\r\n\
                 --{boundary}\r\nContent-Type: text/plain\r\nContent-Range: bytes 9-9/10\r\n\r\nd\r\n--{boundary}--\r\n"
            )
        );
        // Parts adding up to more than MULTIPART_BYTES_MAX: the whole.
        let big = Models::new(&[], MULTIPART_BYTES_MAX as usize + 10);
        let f = Fields {
            range: Some(b"bytes=0-0,2-"),
            ..Fields::default()
        };
        let r = answer(&big, &f, false, 200);
        assert_eq!((r.status(), body(&r).len() as u64), (200, MULTIPART_BYTES_MAX + 10));
    }

    /// A set of ranges whose parts add up to more than 1 MiB is answered
    /// whole (200, sent from the file as it is read), not built in memory
    /// (`MULTIPART_BYTES_MAX`: 8 MiB let 40 connections that never read
    /// hold 320 MB); up to 1 MiB it is a 206.
    #[test]
    fn ranges_adding_up_to_more_than_a_mib_get_the_whole() {
        let res = Models::new(&[], 4 << 20);
        let ranged = |value: &'static [u8]| {
            let f = Fields {
                range: Some(value),
                ..Fields::default()
            };
            answer(&res, &f, false, 200)
        };
        // 1 + 1,048,575 bytes, then 1 + 1,048,576.
        let r = ranged(b"bytes=0-0,2-1048576");
        assert_eq!(r.status(), 206);
        assert!(body(&r).len() > 1 << 20);
        let r = ranged(b"bytes=0-0,2-1048577");
        assert_eq!((r.status(), body(&r).len()), (200, 4 << 20));
    }

    #[test]
    fn a_416_says_how_a_negotiable_answer_varies() {
        let res = Models::new(&[Encoding::Gzip], 10);
        let f = Fields {
            range: Some(b"bytes=99-"),
            ..Fields::default()
        };
        assert_eq!(answer(&res, &f, false, 200).header("Vary"), Some("Accept-Encoding"));
    }

    #[test]
    fn a_representation_that_cannot_be_sent_is_a_500() {
        let mut res = Models::new(&[], 10);
        res.broken = true;
        assert_eq!(answer(&res, &Fields::default(), false, 200).status(), 500);
    }

    /// `reply_plain` is `reply` with no fields: the same status, fields
    /// and body for every status, method, set of codings, and a
    /// representation that cannot be sent.
    #[test]
    fn a_request_without_fields_gets_what_reply_gives() {
        let codings: [&[Encoding]; 3] = [
            &[],
            &[Encoding::Gzip],
            &[Encoding::Brotli, Encoding::Zstd, Encoding::Gzip],
        ];
        for (codings, broken) in codings.iter().flat_map(|c| [(c, false), (c, true)]) {
            let mut res = Models::new(codings, 12);
            res.broken = broken;
            for (status, head) in [(200, false), (200, true), (404, false), (404, true)] {
                let want = answer(&res, &Fields::default(), head, status);
                let got = reply_plain(&mut &res, status);
                let fields =
                    |r: &Response| ["Content-Type", "ETag", "X-Coding"].map(|n| r.header(n).map(str::to_owned));
                assert_eq!(got.status(), want.status(), "{codings:?} {broken} {status} {head}");
                assert_eq!(fields(&got), fields(&want), "{codings:?} {broken} {status} {head}");
                assert_eq!(body(&got), body(&want), "{codings:?} {broken} {status} {head}");
            }
        }
    }

    #[test]
    fn a_boundary_is_short_and_stable_whatever_the_tag() {
        let long = format!("\"{:x}-{:x}-{:x}\"", u64::MAX, u64::MAX, u128::MAX);
        for tag in ["\"0-0\"", "\"d-0123456789abcdef\"", long.as_str()] {
            let b = boundary(tag);
            assert_eq!(b.len(), 26, "{b}");
            assert_eq!(b, boundary(tag));
            assert!(b.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-'), "{b}");
        }
        assert_ne!(boundary("\"1-2\""), boundary("\"1-3\""));
    }
}
