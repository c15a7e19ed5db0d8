//! The steps after a lookup (`peregrine_files::reply`, shared by `serve
//! DIR` and `serve ARCHIVE`) on arbitrary request fields: never panics, and
//! every answer is one RFC 9110 allows for what was asked: a 200 carries a
//! whole representation, a 206 exactly the bytes its Content-Range names
//! (or a multipart body), a 304 or 412 no body, a 416 the length; HEAD is
//! never ranged; a not-found page keeps its status and is sent whole.
//!
//! The input is lines: `NAME: VALUE` for the request fields the steps read
//! (`accept-encoding`, `if-match`, `if-none-match`, `if-modified-since`,
//! `if-unmodified-since`, `range`, `if-range`), and `head`, `404`,
//! `codings: br zstd gzip` and `len: N` to shape the request and the
//! resource, so seeds read as requests.
#![no_main]

use std::ops::Range;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use peregrine::{Body, HeaderBlock, Response};
use peregrine_files::encoding::Encoding;
use peregrine_files::reply::{reply, Fields, Representation, Resource};

const LAST_MODIFIED: u64 = 784_111_777;

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
        UNIX_EPOCH + Duration::from_secs(LAST_MODIFIED)
    }
    fn content_type(&self) -> &str {
        "text/plain"
    }
    fn block_200(&self) -> HeaderBlock {
        let coding = self.coding.map_or("identity", Encoding::name);
        HeaderBlock::new(&[("Content-Type", "text/plain"), ("ETag", &self.tag), ("X-Coding", coding)]).unwrap()
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

struct Models {
    variants: Vec<Model>,
    codings: Vec<Encoding>,
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
        models.variants.iter().find(|v| v.coding == coding)
    }
}

fn body(r: &Response) -> &[u8] {
    match r.body() {
        Body::Bytes(b) => b,
        Body::Empty => &[],
        _ => unreachable!("the model's bodies are bytes"),
    }
}

fuzz_target!(|input: &[u8]| {
    let mut fields = Fields::default();
    let (mut head, mut status, mut len) = (false, 200, 10usize);
    let mut codings = Vec::new();
    for line in input.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            match line {
                b"head" => head = true,
                b"404" => status = 404,
                _ => {}
            }
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii_start());
        match name {
            b"accept-encoding" => fields.accept_encoding = Some(value),
            b"if-match" => fields.pre.if_match = Some(value),
            b"if-none-match" => fields.pre.if_none_match = Some(value),
            b"if-modified-since" => fields.pre.if_modified_since = Some(value),
            b"if-unmodified-since" => fields.pre.if_unmodified_since = Some(value),
            b"range" => fields.range = Some(value),
            b"if-range" => fields.if_range = Some(value),
            b"len" => len = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()).unwrap_or(10) % 4097,
            b"codings" => {
                codings = Encoding::ALL
                    .into_iter()
                    .filter(|e| value.split(|&b| b == b' ').any(|w| w == e.name().as_bytes()))
                    .collect()
            }
            _ => {}
        }
    }
    let variant = |coding: Option<Encoding>| {
        let name = coding.map_or("identity", Encoding::name);
        Model {
            bytes: name.bytes().cycle().take(len).collect(),
            tag: format!("\"{name}-{len}\""),
            coding,
        }
    };
    let mut variants = vec![variant(None)];
    variants.extend(codings.iter().map(|c| variant(Some(*c))));
    let models = Models { variants, codings };

    let r = reply(&mut &models, &fields, head, status);
    let sent = |r: &Response| {
        let coding = r.header("X-Coding").expect("a representation's fields");
        models
            .variants
            .iter()
            .find(|v| v.coding.map_or("identity", Encoding::name) == coding)
            .expect("a representation the resource has")
    };
    match r.status() {
        200 | 404 => {
            assert_eq!(r.status(), status);
            assert_eq!(body(&r), sent(&r).bytes, "a whole representation");
        }
        206 => {
            assert!(!head && status == 200 && fields.range.is_some());
            if let Some(range) = r.header("Content-Range") {
                let v = sent(&r);
                let spec = range.strip_prefix("bytes ").unwrap();
                let (span, total) = spec.split_once('/').unwrap();
                let (first, last) = span.split_once('-').unwrap();
                let (first, last): (usize, usize) = (first.parse().unwrap(), last.parse().unwrap());
                assert_eq!(total.parse::<usize>().unwrap(), v.bytes.len());
                assert!(first <= last && last < v.bytes.len());
                assert_eq!(body(&r), &v.bytes[first..=last]);
            } else {
                let ct = r.header("Content-Type").unwrap();
                assert!(ct.starts_with("multipart/byteranges; boundary="), "{ct}");
            }
        }
        304 | 412 => {
            assert_eq!(status, 200);
            assert!(fields.pre.if_match.is_some()
                || fields.pre.if_none_match.is_some()
                || fields.pre.if_modified_since.is_some()
                || fields.pre.if_unmodified_since.is_some());
            if r.status() == 304 {
                assert!(body(&r).is_empty());
            }
        }
        416 => {
            assert!(!head && status == 200 && fields.range.is_some());
            assert!(r.header("Content-Range").unwrap().starts_with("bytes */"));
        }
        other => panic!("status {other}"),
    }
});
