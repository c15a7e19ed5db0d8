//! The pipeline: method → path → lookup → directory → encoding →
//! conditional → range → reply. Each step returns early with its answer.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::time::Instant;

use globset::{Glob, GlobMatcher};
use peregrine::{HeaderBlock, Request, Response};

use crate::cache::{self, Fields, Resource, Variant};
use crate::conditional::{self, Preconditions, Verdict};
use crate::encoding;
use crate::path::{self, SitePath};
use crate::range::{self, Ranges};
use crate::{listing, sys, Error, Options};

/// Multipart answers are built in memory up to this size; a larger set of
/// ranges gets the whole file (200), as RFC 9110 §14.2 allows.
const MULTIPART_BYTES_MAX: u64 = 8 << 20;

const ALLOW: &str = "GET, HEAD, OPTIONS";

/// A served directory and its settings, shared by all workers.
pub struct Site {
    id: u64,
    root: OwnedFd,
    options: Options,
    rules: Vec<(GlobMatcher, String)>,
}

/// The request fields the pipeline reads, found in one pass.
#[derive(Default)]
struct Fields0<'a> {
    accept_encoding: Option<&'a [u8]>,
    pre: Preconditions<'a>,
    range: Option<&'a [u8]>,
    if_range: Option<&'a [u8]>,
}

impl Site {
    pub fn new(options: Options, id: u64) -> Result<Self, Error> {
        let root = sys::open_root(&options.root)
            .map_err(|e| Error(format!("cannot open {} as a directory: {e}", options.root.display())))?;
        let mut rules = Vec::new();
        for (glob, value) in &options.cache_rules {
            let matcher = Glob::new(glob)
                .map_err(|e| Error(format!("bad --cache-control glob {glob:?}: {e}")))?
                .compile_matcher();
            HeaderBlock::new(&[("Cache-Control", value)])
                .map_err(|e| Error(format!("bad --cache-control value {value:?}: {e}")))?;
            rules.push((matcher, value.clone()));
        }
        if let Some(cc) = &options.cache_control {
            HeaderBlock::new(&[("Cache-Control", cc)]).map_err(|e| Error(format!("bad Cache-Control {cc:?}: {e}")))?;
        }
        for (flag, page) in [("--404", &options.not_found_page), ("--fallback", &options.fallback)] {
            if let Some(page) = page {
                let p = path::normalize(format!("/{}", page.trim_start_matches('/')).as_bytes())
                    .map_err(|e| Error(format!("{flag} {page:?}: {e}")))?;
                let file = sys::open_beneath(&root, &p.rel, options.follow_symlinks)
                    .map_err(|e| Error(format!("{flag} {page:?}: not found under the root: {e}")))?;
                if !sys::fstat(&file).is_ok_and(|id| id.is_file) {
                    return Err(Error(format!("{flag} {page:?}: not a regular file")));
                }
            }
        }
        for name in &options.index {
            if name.is_empty() || name.contains('/') || name.starts_with('.') {
                return Err(Error(format!("bad index file name {name:?}")));
            }
        }
        Ok(Site {
            id,
            root,
            options,
            rules,
        })
    }

    pub fn respond(&self, req: &Request<'_>) -> Response {
        // 1. Method (RFC 9110 §9.3).
        let head = match req.method() {
            "GET" => false,
            "HEAD" => true,
            "OPTIONS" => return Response::new(204).with_header("Allow", ALLOW),
            _ => return Response::error(405).with_header("Allow", ALLOW),
        };
        let raw = req.path().as_bytes();
        let now = Instant::now();
        let fields = scan(req);
        // Hot path: a cached file for exactly this raw path.
        let interval = self.options.revalidate_interval;
        if let Some(res) = cache::with_cache(self.id, |c| c.get(raw, &self.root, interval, now)) {
            return self.reply(&res, &fields, head, 200);
        }
        // 2. Path.
        let site_path = match path::normalize(raw) {
            Ok(p) => p,
            Err(e) => return bad_request(e.reason()),
        };
        if site_path.is_hidden() {
            return self.not_found(&fields, head);
        }
        // 3. Lookup.
        match self.lookup(&site_path) {
            Found::File(res) => {
                cache::with_cache(self.id, |c| c.insert(raw, res.clone()));
                self.reply(&res, &fields, head, 200)
            }
            Found::Redirect => {
                let mut location = path::encode(&format!("/{}/", site_path.rel));
                if location == "//" {
                    location.truncate(1);
                }
                if let Some(q) = req.query() {
                    location.push('?');
                    location.push_str(q);
                }
                Response::new(301)
                    .with_content_type("text/plain; charset=utf-8")
                    .with_header("Location", location)
                    .with_body("301 Moved Permanently\n")
            }
            Found::Listing(dir) => {
                let shown = if site_path.rel.is_empty() {
                    "/".to_owned()
                } else {
                    format!("/{}/", site_path.rel)
                };
                match listing::render(&dir, &shown) {
                    Ok(html) => {
                        let mut r = Response::html(html).with_header("Cache-Control", "no-cache");
                        if self.options.security_headers {
                            for (n, v) in cache::SECURITY_HEADERS {
                                r = r.with_header(n, v);
                            }
                        }
                        r
                    }
                    Err(_) => Response::error(500),
                }
            }
            Found::Forbidden => Response::error(403),
            Found::Missing => self.missing(&site_path, &fields, head),
        }
    }

    /// Finds what a normalised path names.
    fn lookup(&self, p: &SitePath) -> Found {
        let file = match sys::open_beneath(&self.root, &p.rel, self.options.follow_symlinks) {
            Ok(f) => f,
            Err(e) => return found_for(&e),
        };
        let Ok(id) = sys::fstat(&file) else {
            return Found::Missing;
        };
        if id.is_file {
            if p.trailing_slash && !p.rel.is_empty() {
                // `/file.txt/` names nothing (nginx and Caddy: 404).
                return Found::Missing;
            }
            drop(file);
            return self.load(&p.rel);
        }
        if !id.is_dir {
            // FIFOs, sockets, devices are never served.
            return Found::Forbidden;
        }
        if !p.trailing_slash {
            return Found::Redirect;
        }
        for name in &self.options.index {
            let rel = if p.rel.is_empty() {
                name.clone()
            } else {
                format!("{}/{name}", p.rel)
            };
            match self.load(&rel) {
                Found::Missing => continue,
                found => return found,
            }
        }
        if self.options.list_dirs {
            Found::Listing(file)
        } else {
            Found::Missing
        }
    }

    fn load(&self, rel: &str) -> Found {
        let cc = self.cache_control(rel);
        let fields = Fields {
            cache_control: cc,
            security_headers: self.options.security_headers,
            etag_hash_bytes_max: self.options.etag_hash_bytes_max,
        };
        let room = cache::with_cache(self.id, |c| c.room());
        match cache::load(
            &self.root,
            rel,
            self.options.follow_symlinks,
            self.options.precompressed,
            &fields,
            room,
        ) {
            Ok(Some(res)) => Found::File(Rc::new(res)),
            Ok(None) => Found::Missing,
            Err(e) => found_for(&e),
        }
    }

    fn cache_control(&self, rel: &str) -> Option<&str> {
        let site_path = format!("/{rel}");
        self.rules
            .iter()
            .find(|(m, _)| m.is_match(&site_path))
            .map(|(_, v)| v.as_str())
            .or(self.options.cache_control.as_deref())
    }

    /// A path that names nothing: the SPA fallback for extension-less
    /// routes, else the 404 page.
    fn missing(&self, p: &SitePath, fields: &Fields0<'_>, head: bool) -> Response {
        if let Some(fallback) = &self.options.fallback {
            let is_route = p.file_name().is_none_or(|name| !name.contains('.'));
            if is_route {
                if let Some(res) = self.page(fallback) {
                    return self.reply(&res, fields, head, 200);
                }
            }
        }
        self.not_found(fields, head)
    }

    fn not_found(&self, fields: &Fields0<'_>, head: bool) -> Response {
        if let Some(page) = &self.options.not_found_page {
            if let Some(res) = self.page(page) {
                return self.reply(&res, fields, head, 404);
            }
        }
        Response::error(404)
    }

    /// A configured page, through the cache like any file.
    fn page(&self, page: &str) -> Option<Rc<Resource>> {
        let key = format!("/{}", page.trim_start_matches('/'));
        let now = Instant::now();
        let interval = self.options.revalidate_interval;
        if let Some(res) = cache::with_cache(self.id, |c| c.get(key.as_bytes(), &self.root, interval, now)) {
            return Some(res);
        }
        let p = path::normalize(key.as_bytes()).ok()?;
        match self.load(&p.rel) {
            Found::File(res) => {
                cache::with_cache(self.id, |c| c.insert(key.as_bytes(), res.clone()));
                Some(res)
            }
            _ => None,
        }
    }

    /// Steps 4 to 7 for a file: encoding, conditional, range, reply.
    /// `status` is 200, or 404 for the not-found page (which is sent whole,
    /// without validators' effects).
    fn reply(&self, res: &Resource, fields: &Fields0<'_>, head: bool, status: u16) -> Response {
        // 4. Encoding.
        let coding = encoding::negotiate(fields.accept_encoding, &res.codings);
        let v = res.variant(coding);
        if status != 200 {
            return Response::new(status)
                .with_header_block(v.block_200.clone())
                .with_body(v.body(0..v.len));
        }
        // 5. Conditional.
        match conditional::evaluate(&fields.pre, &v.etag, v.last_modified) {
            Verdict::Proceed => {}
            Verdict::NotModified => return Response::new(304).with_header_block(v.block_304.clone()),
            Verdict::PreconditionFailed => return Response::error(412),
        }
        // 6. Range: GET only (RFC 9110 §14.2).
        if let (Some(value), false) = (fields.range, head) {
            if conditional::if_range_holds(fields.if_range, &v.etag, v.last_modified) {
                match range::parse(value, v.len) {
                    Ranges::Full => {}
                    Ranges::Unsatisfiable => {
                        return Response::error(416)
                            .with_header("Content-Range", format!("bytes */{}", v.len))
                            .with_header_block(unsatisfiable_block(res))
                    }
                    Ranges::Partial(parts) if parts.len() == 1 => {
                        let r = parts[0].clone();
                        return Response::new(206)
                            .with_header("Content-Range", format!("bytes {}-{}/{}", r.start, r.end - 1, v.len))
                            .with_header_block(v.block_200.clone())
                            .with_body(v.body(r));
                    }
                    Ranges::Partial(parts) => {
                        if let Some(r) = multipart(res, v, &parts) {
                            return r;
                        }
                    }
                }
            }
        }
        // 7. Reply.
        Response::new(200)
            .with_header_block(v.block_200.clone())
            .with_body(v.body(0..v.len))
    }
}

/// A 416 still says how the answer varies.
fn unsatisfiable_block(res: &Resource) -> HeaderBlock {
    let fields: &[(&str, &str)] = if res.negotiable() {
        &[("Vary", "Accept-Encoding")]
    } else {
        &[]
    };
    HeaderBlock::new(fields).expect("static fields are valid")
}

/// A `multipart/byteranges` 206 (RFC 9110 §14.6), or `None` to send the
/// whole file instead when the parts are too large to build in memory.
fn multipart(res: &Resource, v: &Variant, parts: &[std::ops::Range<u64>]) -> Option<Response> {
    let total: u64 = parts.iter().map(|r| r.end - r.start).sum();
    if total > MULTIPART_BYTES_MAX {
        return None;
    }
    // The boundary must not occur in the parts; derived from the content
    // hash, it is also the same for the same file.
    let boundary = format!("peregrine-{}", v.etag.trim_matches('"'));
    let mut body = Vec::with_capacity(total as usize + parts.len() * 128);
    for r in parts {
        body.extend_from_slice(b"--");
        body.extend_from_slice(boundary.as_bytes());
        body.extend_from_slice(b"\r\nContent-Type: ");
        body.extend_from_slice(res.content_type.as_bytes());
        body.extend_from_slice(
            format!("\r\nContent-Range: bytes {}-{}/{}\r\n\r\n", r.start, r.end - 1, v.len).as_bytes(),
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
            .with_header_block(v.meta.clone())
            .with_body(body),
    )
}

/// What a normalised path names.
enum Found {
    File(Rc<Resource>),
    /// A directory asked for without its trailing slash.
    Redirect,
    Listing(File),
    Forbidden,
    Missing,
}

fn found_for(e: &std::io::Error) -> Found {
    match e.raw_os_error() {
        // EXDEV: a symlink leads out of the root; ELOOP: too many links.
        // Both look like nothing there, as for a missing file.
        Some(libc::EACCES) | Some(libc::EPERM) => Found::Forbidden,
        _ => Found::Missing,
    }
}

fn bad_request(why: &str) -> Response {
    Response::new(400)
        .with_content_type("text/plain; charset=utf-8")
        .with_body(format!("400 Bad Request: {why}\n"))
}

/// Reads the request fields the pipeline uses, in one pass.
fn scan<'a>(req: &Request<'a>) -> Fields0<'a> {
    let mut f = Fields0::default();
    for (name, value) in req.headers() {
        let slot = match name.len() {
            5 if name.eq_ignore_ascii_case("range") => &mut f.range,
            8 if name.eq_ignore_ascii_case("if-match") => &mut f.pre.if_match,
            8 if name.eq_ignore_ascii_case("if-range") => &mut f.if_range,
            13 if name.eq_ignore_ascii_case("if-none-match") => &mut f.pre.if_none_match,
            15 if name.eq_ignore_ascii_case("accept-encoding") => &mut f.accept_encoding,
            17 if name.eq_ignore_ascii_case("if-modified-since") => &mut f.pre.if_modified_since,
            19 if name.eq_ignore_ascii_case("if-unmodified-since") => &mut f.pre.if_unmodified_since,
            _ => continue,
        };
        // A repeated list field is one list (RFC 9110 §5.3); for these few,
        // the first is kept: clients do not split them.
        if slot.is_none() {
            *slot = Some(value);
        }
    }
    f
}
