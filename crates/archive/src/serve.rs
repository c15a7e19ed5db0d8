//! Answers requests from an archive, and replaces the archive when its
//! file is replaced (rename) or when the program asks
//! ([`ArchiveServer::reload`]; the command line does on SIGHUP). The crate
//! installs no signal handler: signals belong to the program.
//!
//! Hot swap: a watcher thread `stat`s the path every `WATCH_INTERVAL`; a new
//! identity (device, inode, size, mtime) or a reload asked for makes it
//! open the file, validate it fully (the data hash included), and publish
//! it as a new generation. Workers notice with one relaxed atomic load per request and
//! take the new `Arc`; responses in flight hold the old map through their
//! `SharedBytes`, so it is unmapped when the last of them is sent. A file
//! that fails validation is refused with a log line and the old archive
//! keeps serving.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use peregrine::{log, Body, FileRange, Handler, HeaderBlock, Reply, Request, Response};
use peregrine_files::conditional::{self, Preconditions, Verdict};
use peregrine_files::encoding::{self, Encoding};
use peregrine_files::path;
use peregrine_files::range::{self, Ranges};

use crate::format::*;
use crate::read::{Archive, Entry, Invalid, Mode, Variant};

/// How often the watcher looks at the archive's path.
const WATCH_INTERVAL: Duration = Duration::from_millis(250);
/// After moving off a map, time for requests that had already looked at the
/// old generation to take their references.
const SWITCH_GRACE: Duration = Duration::from_millis(100);
/// How long responses sending from an old map are waited for before its
/// lease is released (the kernel breaks leases after 45 s by default).
const LEASE_WAIT: Duration = Duration::from_secs(30);
/// Largest body sent from the map. The engine copies a body this small into
/// its output buffer while the request is handled (its
/// `INLINE_BODY_BYTES_MAX`), so the map is read only then, within
/// `SWITCH_GRACE` of a move off it. A larger body may be sent for minutes
/// to a slow client, past `LEASE_WAIT`, after which a writer may truncate
/// the file: it goes out from the file's descriptor (sendfile, or pread
/// under TLS), where truncation makes a short read and closes that one
/// connection, instead of from the map, where it would be SIGBUS.
const MAP_BODY_BYTES_MAX: u64 = 16 * 1024;
/// Multipart answers are built in memory up to this size (as `serve DIR`).
const MULTIPART_BYTES_MAX: u64 = 8 << 20;
const ALLOW: &str = "GET, HEAD, OPTIONS";

struct Shared {
    id: u64,
    path: PathBuf,
    mode: Mode,
    current: Mutex<Arc<Archive>>,
    generation: AtomicU64,
    /// Replacements refused (damaged, truncated, unreadable).
    refused: AtomicU64,
    reload: Arc<AtomicBool>,
}

/// Serves an archive. See the module documentation for the hot swap. A
/// clone serves the same archive (and swaps with it).
#[derive(Clone)]
pub struct ArchiveServer {
    shared: Arc<Shared>,
}

impl ArchiveServer {
    /// Opens and fully validates the archive, and starts watching its path.
    /// Installs no signal handler: a program that wants SIGHUP to reload
    /// the archive calls [`ArchiveServer::reload`] from its own handler.
    pub fn open(path: &Path, mode: Mode) -> Result<Self, Invalid> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let archive = Archive::open(path, mode)?;
        archive
            .verify_data()
            .map_err(|e| Invalid(format!("{}: {e}", path.display())))?;
        let reload = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            path: path.to_owned(),
            mode,
            current: Mutex::new(Arc::new(archive)),
            generation: AtomicU64::new(1),
            refused: AtomicU64::new(0),
            reload,
        });
        let weak = Arc::downgrade(&shared);
        let identity = identity(path);
        std::thread::Builder::new()
            .name("peregrine-archive-watch".into())
            .spawn(move || watch(weak, identity))
            .map_err(|e| Invalid(format!("cannot start the archive watcher: {e}")))?;
        Ok(ArchiveServer { shared })
    }

    /// The generation being served: 1 at start, one more per swap.
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// Replacements refused so far (the old archive kept serving).
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::Acquire)
    }

    /// A handle on the same archive for reading its counters (for metrics)
    /// after the server itself has been given to the engine.
    pub fn counters(&self) -> ArchiveServer {
        ArchiveServer {
            shared: self.shared.clone(),
        }
    }

    /// Asks the watcher to load the archive again now, even if its file
    /// looks unchanged (what the command line does on SIGHUP).
    pub fn reload(&self) {
        self.shared.reload.store(true, Ordering::Release);
    }
}

type FileIdentity = Option<(u64, u64, u64, i64, i64)>;

fn identity(path: &Path) -> FileIdentity {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

fn watch(shared: Weak<Shared>, mut seen: FileIdentity) {
    loop {
        std::thread::sleep(WATCH_INTERVAL);
        let Some(shared) = shared.upgrade() else { return };
        let current = shared.current.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if current.lease_broken() {
            move_off_the_map(&shared, &current);
        }
        drop(current);
        let now = identity(&shared.path);
        let asked = shared.reload.swap(false, Ordering::AcqRel);
        if now == seen && !asked {
            continue;
        }
        seen = now;
        if now.is_none() {
            log::warn(format_args!(
                "{} is gone; still serving the archive loaded before",
                shared.path.display()
            ));
            continue;
        }
        let loaded = Archive::open(&shared.path, shared.mode).and_then(|a| {
            a.verify_data()
                .map_err(|e| Invalid(format!("{}: {e}", shared.path.display())))?;
            Ok(a)
        });
        match loaded {
            Ok(archive) => {
                *shared.current.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(archive);
                let g = shared.generation.fetch_add(1, Ordering::AcqRel) + 1;
                log::info(format_args!("{} loaded as generation {g}", shared.path.display()));
            }
            Err(e) => {
                shared.refused.fetch_add(1, Ordering::AcqRel);
                log::error(format_args!(
                    "refusing the new archive ({e}); still serving generation {}",
                    shared.generation.load(Ordering::Acquire)
                ))
            }
        }
    }
}

/// Someone opened the mapped file to write it in place (`cp new old`,
/// `truncate`): they wait on our lease. Copy the archive into the heap (the
/// file is still whole), serve the copy, let responses that hold bytes of
/// the map finish, then release the lease. The writer's new contents are
/// loaded like any replacement once they validate.
fn move_off_the_map(shared: &Shared, old: &Arc<Archive>) {
    match old.to_heap() {
        Ok(copy) => {
            *shared.current.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(copy);
            let g = shared.generation.fetch_add(1, Ordering::AcqRel) + 1;
            log::warn(format_args!(
                "{} is being rewritten in place; serving a copy in memory (generation {g})",
                shared.path.display()
            ));
        }
        Err(e) => log::error(format_args!("cannot copy {} off its map: {e}", shared.path.display())),
    }
    // A request that read the old generation just before the switch is
    // done within microseconds; then wait for bytes in flight (slow
    // clients) for up to LEASE_WAIT, well inside the kernel's 45 s.
    std::thread::sleep(SWITCH_GRACE);
    let deadline = std::time::Instant::now() + LEASE_WAIT;
    while old.bytes_in_flight() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if old.bytes_in_flight() > 0 {
        log::warn(format_args!(
            "{} responses still send from the old map of {}; releasing it anyway",
            old.bytes_in_flight(),
            shared.path.display()
        ));
    }
    if let Err(e) = old.release_lease() {
        log::warn(format_args!(
            "cannot release the lease on {}: {e}",
            shared.path.display()
        ));
    }
}

/// A worker's view of one server's archive.
struct Local {
    id: u64,
    generation: u64,
    archive: Arc<Archive>,
    /// Variants this worker has prepared (header blocks parsed, entity tag
    /// formatted), by `entry * 4 + variant`: later hits cost a map lookup.
    prepared: HashMap<u32, Rc<Prepared>>,
}

thread_local! {
    static LOCALS: RefCell<Vec<Local>> = const { RefCell::new(Vec::new()) };
}

impl Handler for ArchiveServer {
    fn call(&self, req: &Request<'_>) -> Reply {
        let shared = &*self.shared;
        let generation = shared.generation.load(Ordering::Relaxed);
        let response = LOCALS.with(|locals| {
            let mut locals = locals.borrow_mut();
            let idx = match locals.iter().position(|l| l.id == shared.id) {
                Some(i) => i,
                None => {
                    locals.push(Local {
                        id: shared.id,
                        generation: 0,
                        archive: shared.current.lock().unwrap_or_else(|e| e.into_inner()).clone(),
                        prepared: HashMap::new(),
                    });
                    locals.len() - 1
                }
            };
            let local = &mut locals[idx];
            if local.generation != generation {
                local.archive = shared.current.lock().unwrap_or_else(|e| e.into_inner()).clone();
                local.generation = generation;
                local.prepared.clear();
            }
            respond(local, req)
        });
        Reply::Now(response)
    }
}

/// The request fields used, in one pass.
#[derive(Default)]
struct Fields<'a> {
    accept_encoding: Option<&'a [u8]>,
    pre: Preconditions<'a>,
    range: Option<&'a [u8]>,
    if_range: Option<&'a [u8]>,
}

fn scan<'a>(req: &Request<'a>) -> Fields<'a> {
    let mut f = Fields::default();
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
        if slot.is_none() {
            *slot = Some(value);
        }
    }
    f
}

fn respond(local: &mut Local, req: &Request<'_>) -> Response {
    let head = match req.method() {
        "GET" => false,
        "HEAD" => true,
        "OPTIONS" => return Response::new(204).with_header("Allow", ALLOW),
        _ => return Response::error(405).with_header("Allow", ALLOW),
    };
    let archive = local.archive.clone();
    let site = archive.site_for_host(req.host());
    let fields = scan(req);
    // Fast path: the raw path is already the key (no escapes, no dots).
    let raw = req.path();
    let plain = !raw.contains(['%', '\\']) && !raw.contains("/.") && !raw.contains("//");
    if plain {
        if let Some(e) = archive.get(site, raw.as_bytes()) {
            return answer(local, &archive, e, &fields, head, 200);
        }
    }
    let p = match path::normalize(raw.as_bytes()) {
        Ok(p) => p,
        Err(e) => {
            return Response::new(400)
                .with_content_type("text/plain; charset=utf-8")
                .with_body(format!("400 Bad Request: {}\n", e.reason()))
        }
    };
    let key = if p.rel.is_empty() {
        "/".to_owned()
    } else if p.trailing_slash {
        format!("/{}/", p.rel)
    } else {
        format!("/{}", p.rel)
    };
    if !plain {
        if let Some(e) = archive.get(site, key.as_bytes()) {
            return answer(local, &archive, e, &fields, head, 200);
        }
    }
    // `_redirects` patterns, in order.
    for e in archive.patterns(site) {
        let pattern = String::from_utf8_lossy(e.path());
        if let Some(caps) = crate::pattern::matches(&pattern, &key) {
            let to = crate::pattern::substitute(&String::from_utf8_lossy(e.location()), &caps);
            return redirect(e.status(), &to);
        }
    }
    // The deepest `_wildcard.*` above the path.
    // `/a/b/c` and `/a/b/` look in `/a/b/`, then `/a/`, then `/`.
    let mut folder = &key[..key.rfind('/').map_or(0, |i| i + 1)];
    while !folder.is_empty() {
        if let Some(e) = archive.get(site, format!("{folder}{WILDCARD_KEY}").as_bytes()) {
            return answer(local, &archive, e, &fields, head, 200);
        }
        folder = &folder[..folder[..folder.len() - 1].rfind('/').map_or(0, |i| i + 1)];
    }
    if let Some(e) = archive.get(site, NOT_FOUND_KEY.as_bytes()) {
        return answer(local, &archive, e, &fields, head, 404);
    }
    Response::error(404)
}

fn redirect(status: u16, location: &str) -> Response {
    peregrine_files::conventions::redirect(status, location)
}

const CODINGS: [Encoding; 3] = [Encoding::Brotli, Encoding::Zstd, Encoding::Gzip];

fn answer(local: &mut Local, archive: &Archive, e: Entry<'_>, f: &Fields<'_>, head: bool, status: u16) -> Response {
    if e.kind() != KIND_RESOURCE {
        return redirect(e.status(), &String::from_utf8_lossy(e.location()));
    }
    let mut available = [Encoding::Brotli; 3];
    let mut n = 0;
    for (i, c) in CODINGS.iter().enumerate() {
        if e.variant(i + 1).is_some() {
            available[n] = *c;
            n += 1;
        }
    }
    let chosen = encoding::negotiate(f.accept_encoding, &available[..n]);
    let vi = match chosen {
        None => 0,
        Some(c) => 1 + CODINGS.iter().position(|x| *x == c).unwrap_or(0),
    };
    let vi = if status == 200 && n > 0 {
        held(local, archive, &e, f).unwrap_or(vi)
    } else {
        vi
    };
    let Some(v) = e.variant(vi) else {
        return Response::error(500);
    };
    let Some(prepared) = prepare(local, archive, &e, vi, &v) else {
        return Response::error(500);
    };
    let block = prepared.block.clone();
    let body = |r: std::ops::Range<u64>| match archive.body_file() {
        // Held past the request: from the file, never the map.
        Some(file) if r.end - r.start > MAP_BODY_BYTES_MAX => {
            Body::File(FileRange::new(file.clone(), v.body_off + r.start, r.end - r.start))
        }
        _ => Body::Shared(archive.shared(v.body_off + r.start, r.end - r.start)),
    };
    if status != 200 {
        return Response::new(status)
            .with_header_block(block)
            .with_body(body(0..v.body_len));
    }
    let etag = prepared.etag.as_str();
    let last_modified = std::time::UNIX_EPOCH + Duration::from_secs(e.last_modified());
    match conditional::evaluate(&f.pre, etag, last_modified) {
        Verdict::Proceed => {}
        Verdict::NotModified => return Response::new(304).with_header_block(prepared.block_304.clone()),
        Verdict::PreconditionFailed => return Response::error(412),
    }
    if let (Some(value), false) = (f.range, head) {
        if conditional::if_range_holds(f.if_range, etag, last_modified) {
            match range::parse(value, v.body_len) {
                Ranges::Full => {}
                Ranges::Unsatisfiable => {
                    let mut r = Response::error(416).with_header("Content-Range", format!("bytes */{}", v.body_len));
                    if n > 0 {
                        r = r.with_header("Vary", "Accept-Encoding");
                    }
                    return r;
                }
                Ranges::Partial(parts) if parts.len() == 1 => {
                    let r = parts[0].clone();
                    return Response::new(206)
                        .with_header(
                            "Content-Range",
                            format!("bytes {}-{}/{}", r.start, r.end - 1, v.body_len),
                        )
                        .with_header_block(block)
                        .with_body(body(r));
                }
                Ranges::Partial(parts) => {
                    if let Some(r) = multipart(archive, &v, &block, &parts) {
                        return r;
                    }
                }
            }
        }
    }
    Response::new(200)
        .with_header_block(block)
        .with_body(body(0..v.body_len))
}

/// The variant a revalidating client already holds (its tag is in
/// `If-None-Match`), if its coding is still acceptable to it: chosen, so
/// that the answer is a 304 rather than another download (as `serve DIR`
/// chooses; RFC 9110 §12.1 leaves the choice among acceptable
/// representations to the server).
fn held(local: &mut Local, archive: &Archive, e: &Entry<'_>, f: &Fields<'_>) -> Option<usize> {
    let inm = f.pre.if_none_match?;
    let pre = Preconditions {
        if_none_match: Some(inm),
        ..Default::default()
    };
    let last_modified = std::time::UNIX_EPOCH + Duration::from_secs(e.last_modified());
    for vi in 0..=CODINGS.len() {
        let Some(v) = e.variant(vi) else { continue };
        // Identity is sent when nothing else is acceptable, so it is
        // acceptable here too.
        let acceptable = vi == 0 || {
            let c = CODINGS[vi - 1];
            encoding::negotiate(f.accept_encoding, &[c]) == Some(c)
        };
        if !acceptable {
            continue;
        }
        let prepared = prepare(local, archive, e, vi, &v)?;
        if conditional::evaluate(&pre, &prepared.etag, last_modified) == Verdict::NotModified {
            return Some(vi);
        }
    }
    None
}

/// A variant made ready to send.
struct Prepared {
    block: HeaderBlock,
    block_304: HeaderBlock,
    etag: String,
}

/// The first time this worker sends a variant: turns the stored heads into
/// header blocks and keeps them. `None`: the heads are not header lines
/// (logged; answered 500, never sent).
///
/// The body is not hashed here. Every generation this server publishes was
/// opened with its whole data region checked against `data_hash`
/// ([`ArchiveServer::open`] and the watcher both call `verify_data`), and
/// the bytes cannot change after that: a map is of a file we hold a read
/// lease on (a writer waits while we move to a heap copy, `map.rs`), and a
/// heap copy is ours. Hashing each body again at its first send on each
/// worker only re-read bytes already proven, on the event loop, one whole
/// body per worker and variant (FORMAT.md, "What a reader may assume after
/// validation").
fn prepare(local: &mut Local, archive: &Archive, e: &Entry<'_>, vi: usize, v: &Variant) -> Option<Rc<Prepared>> {
    let key = u32::try_from(e.index() * 4 + vi).ok()?;
    if let Some(p) = local.prepared.get(&key) {
        return Some(p.clone());
    }
    let path = String::from_utf8_lossy(e.path());
    let heads = (
        HeaderBlock::from_lines(archive.shared(v.head_off, u64::from(v.head_len))),
        HeaderBlock::from_lines(archive.shared(v.head_off + u64::from(v.head_len), u64::from(v.head304_len))),
    );
    let (Ok(block), Ok(block_304)) = heads else {
        log::error(format_args!(
            "archive heads for {path} are not valid header lines; not served"
        ));
        return None;
    };
    let p = Rc::new(Prepared {
        block,
        block_304,
        etag: etag(v.body_len, v.body_hash),
    });
    local.prepared.insert(key, p.clone());
    Some(p)
}

fn multipart(archive: &Archive, v: &Variant, block: &HeaderBlock, parts: &[std::ops::Range<u64>]) -> Option<Response> {
    let total: u64 = parts.iter().map(|r| r.end - r.start).sum();
    if total > MULTIPART_BYTES_MAX {
        return None;
    }
    // The stored block starts with Content-Type; multipart replaces it.
    let lines = std::str::from_utf8(block.as_bytes()).ok()?;
    let mut content_type = "application/octet-stream";
    let mut rest: Vec<(&str, &str)> = Vec::new();
    for line in lines.split("\r\n").filter(|l| !l.is_empty()) {
        let (n, val) = line.split_once(": ").unwrap_or((line, ""));
        if n.eq_ignore_ascii_case("content-type") {
            content_type = val;
        } else {
            rest.push((n, val));
        }
    }
    let boundary = format!("peregrine-{:016x}", v.body_hash);
    let mut body = Vec::with_capacity(total as usize + parts.len() * 128);
    for r in parts {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Type: {content_type}\r\nContent-Range: bytes {}-{}/{}\r\n\r\n",
                r.start,
                r.end - 1,
                v.body_len
            )
            .as_bytes(),
        );
        body.extend_from_slice(archive.slice(v.body_off + r.start, r.end - r.start));
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    let meta = HeaderBlock::new(&rest).ok()?;
    Some(
        Response::new(206)
            .with_content_type(format!("multipart/byteranges; boundary={boundary}"))
            .with_header_block(meta)
            .with_body(body),
    )
}
