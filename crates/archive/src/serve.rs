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
//! keeps serving. A file rewritten in place is detached from first
//! (`move_off_the_map`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use peregrine::{log, Body, BodyUse, FileRange, Handler, HeaderBlock, Reply, Request, Response};
use peregrine_files::auth::{self, AuthRule, Gate};
use peregrine_files::conventions::{self, RuleAnswer};
use peregrine_files::encoding::Encoding;
use peregrine_files::path;
use peregrine_files::reply::{self, Fields, Method};

use crate::format::*;
use crate::read::{Archive, Entry, Invalid, Mode, Variant};

/// How often the watcher looks at the archive's path.
const WATCH_INTERVAL: Duration = Duration::from_millis(250);
/// After moving off a map, time for requests that had already looked at the
/// old generation to start sending large bodies from its file before the
/// writer may change it.
const SWITCH_GRACE: Duration = Duration::from_millis(100);

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
    /// What checks credentials for paths a `Basic-Auth` rule protects
    /// (`peregrine_files::auth`); without one they are answered 500.
    gate: Option<Arc<dyn Gate>>,
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
        Ok(ArchiveServer { shared, gate: None })
    }

    /// The same server (the same archive, swapped with it), asking `gate`
    /// about every request to a path a `Basic-Auth` rule of the archive
    /// being served protects.
    pub fn with_gate(mut self, gate: Arc<dyn Gate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// The `Basic-Auth` rules of the archive served now, by site: each
    /// rule's pattern, users, and whether some of its passwords were plain
    /// in `_headers` (for the warnings at start).
    pub fn protection(&self) -> Vec<(u32, AuthRule)> {
        let archive = self.shared.current.lock().unwrap_or_else(|e| e.into_inner()).clone();
        archive.all_auth_rules().map(|(site, r)| (site, r.clone())).collect()
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
            gate: None,
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
/// `truncate`): they wait on our lease. Put a copy of the bytes in memory
/// where the map was (the file is still whole), serve that copy as a new
/// generation with every body from memory, then release the lease. The
/// writer's new contents are loaded like any replacement once they
/// validate.
///
/// Nothing waits for readers of the map: after `detached` there are none,
/// whatever their timing (a worker stalled between its lookup and its
/// copy reads the copy). Bodies over `MAP_BODY_BYTES_MAX` still being sent
/// from the file's descriptor are not waited for: they read what the file
/// holds when they get there, so a rewrite makes them short (that
/// connection closes) or, where the writer has already written past them,
/// gives them its new bytes, as a rewrite in place does under nginx's
/// sendfile. Replacing an archive by rename has none of this.
/// `SWITCH_GRACE` lets requests that looked at the old generation just
/// before the switch start their sends before the writer goes on.
fn move_off_the_map(shared: &Shared, old: &Arc<Archive>) {
    match old.detached() {
        Ok(copy) => {
            *shared.current.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(copy);
            let g = shared.generation.fetch_add(1, Ordering::AcqRel) + 1;
            log::warn(format_args!(
                "{} is being rewritten in place; serving a copy in memory (generation {g})",
                shared.path.display()
            ));
        }
        Err(e) => {
            // The lease stays (the watcher tries again at its next look);
            // the kernel breaks it after lease-break-time regardless.
            log::error(format_args!("{}: {e}", shared.path.display()));
            return;
        }
    }
    std::thread::sleep(SWITCH_GRACE);
    if let Err(e) = old.release_lease() {
        log::warn(format_args!(
            "cannot release the lease on {}: {e}",
            shared.path.display()
        ));
    }
}

/// A worker's view of one server's archive.
struct Local {
    generation: u64,
    archive: Arc<Archive>,
    /// Variants this worker has prepared (header blocks parsed, entity tag
    /// formatted), by `entry * 4 + variant`: later hits cost a map lookup.
    prepared: PreparedByKey,
}

/// Prepared variants by `entry * 4 + variant`.
type PreparedByKey = HashMap<u32, Rc<Prepared>, BuildHasherDefault<IndexHasher>>;

/// Hashes `prepared`'s keys, small dense integers, with one multiplication
/// (SipHash, the default, cost 0.7 % of a pipelined archive profile). The
/// low bits of the product depend only on the key's low bits, one to one,
/// so consecutive entries never share a bucket; the high bits, which the
/// table also uses, are mixed by the odd constant.
#[derive(Default)]
struct IndexHasher(u64);

impl Hasher for IndexHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

thread_local! {
    /// This worker's view of each server's archive, by server id.
    static LOCALS: RefCell<Vec<(u64, Rc<RefCell<Local>>)>> = const { RefCell::new(Vec::new()) };
}

impl Handler for ArchiveServer {
    /// Answered from the head alone, as `serve DIR` answers: no body is
    /// ever read or kept.
    fn body_use(&self, _req: &Request<'_>) -> BodyUse {
        BodyUse::Ignore
    }

    fn call(&self, req: &Request<'_>) -> Reply {
        let shared = &*self.shared;
        let generation = shared.generation.load(Ordering::Relaxed);
        // The view is taken out of the thread-local, so that the reply is
        // built where this returns it (`respond` and `answer` give a
        // `Reply`): returned from the closure `LocalKey::with` runs, then
        // wrapped, it was copied right after being stored (a
        // store-forwarding stall, a fifth of this function's samples).
        let local = LOCALS.with(|locals| {
            let mut locals = locals.borrow_mut();
            match locals.iter().find(|(id, _)| *id == shared.id) {
                Some((_, local)) => local.clone(),
                None => {
                    let local = Rc::new(RefCell::new(Local {
                        generation: 0,
                        archive: shared.current.lock().unwrap_or_else(|e| e.into_inner()).clone(),
                        prepared: PreparedByKey::default(),
                    }));
                    locals.push((shared.id, local.clone()));
                    local
                }
            }
        });
        let mut local = local.borrow_mut();
        if local.generation != generation {
            local.archive = shared.current.lock().unwrap_or_else(|e| e.into_inner()).clone();
            local.generation = generation;
            local.prepared.clear();
        }
        respond(&mut local, req, self.gate.as_deref())
    }
}

/// Answers `req`; a path a `Basic-Auth` rule protects goes to `gate`
/// first, before anything is looked up (`peregrine_files::auth`), so that
/// its answer is the gate's whether or not an entry is there.
#[inline]
fn respond(local: &mut Local, req: &Request<'_>, gate: Option<&dyn Gate>) -> Reply {
    if local.archive.has_auth() {
        let archive = &local.archive;
        let site = if archive.has_hosts() {
            archive.site_for_host(req.host())
        } else {
            archive.default_site()
        };
        // Matched on the normalised path: `/%61dmin/` is `/admin/`.
        if let Some(users) = path::normalize(req.path().as_bytes())
            .ok()
            .and_then(|p| archive.auth_for(site, &p.key()).cloned())
        {
            let Some(gate) = gate else {
                return Reply::Now(auth::ungated());
            };
            return gate.guard(req, &users, &mut || match open(local, req) {
                Reply::Now(response) => response,
                _ => Response::error(500),
            });
        }
    }
    open(local, req)
}

/// Answers `req` from the archive, protected or not.
#[inline]
fn open(local: &mut Local, req: &Request<'_>) -> Reply {
    let head = match reply::method(req) {
        Method::Get => false,
        Method::Head => true,
        Method::Answer(answer) => return Reply::Now(answer),
    };
    let Local { archive, prepared, .. } = local;
    let archive = &**archive;
    // The Host field is looked at only by an archive that names hosts.
    let site = if archive.has_hosts() {
        archive.site_for_host(req.host())
    } else {
        archive.default_site()
    };
    let fields = Fields::scan(req);
    let query = req.query();
    let forced = archive.has_forced_patterns();
    // Fast path: the raw path is already the key (no escapes, no dots).
    let raw = req.path();
    let plain = path::is_key(raw);
    if plain && !forced {
        if let Some(e) = archive.get(site, raw.as_bytes()) {
            return found(prepared, archive, site, e, raw, &fields, head, query);
        }
    }
    let key = match path::normalize(raw.as_bytes()) {
        Ok(p) => p.key(),
        Err(e) => return Reply::Now(reply::bad_request(e.reason())),
    };
    let e = if plain && !forced {
        None
    } else {
        archive.get(site, key.as_bytes())
    };
    // `_redirects` patterns with `!` shadow any file, after the literal
    // rules with `!` (as `serve DIR` tries them).
    let forced_literal = e.is_some_and(|e| e.kind() == KIND_REDIRECT && e.flags() & FLAG_FORCED != 0);
    if forced && !forced_literal {
        if let Some(reply) = first_rule(
            prepared,
            archive,
            site,
            archive.forced_patterns(site),
            &key,
            &fields,
            head,
            query,
        ) {
            return reply;
        }
    }
    if let Some(e) = e {
        return found(prepared, archive, site, e, &key, &fields, head, query);
    }
    // `_redirects` patterns, in order.
    if let Some(reply) = first_rule(
        prepared,
        archive,
        site,
        archive.patterns(site),
        &key,
        &fields,
        head,
        query,
    ) {
        return reply;
    }
    // The deepest `_wildcard.*` above the path.
    // `/a/b/c` and `/a/b/` look in `/a/b/`, then `/a/`, then `/`.
    let mut folder = &key[..key.rfind('/').map_or(0, |i| i + 1)];
    while !folder.is_empty() {
        if let Some(e) = archive.get(site, format!("{folder}{WILDCARD_KEY}").as_bytes()) {
            return answer(prepared, archive, e, &fields, head, 200, query);
        }
        folder = &folder[..folder[..folder.len() - 1].rfind('/').map_or(0, |i| i + 1)];
    }
    not_found(prepared, archive, site, &key, &fields, head, query)
}

/// The not-found page for `key`: the deepest folder's above it (`/a/b/c`
/// and `/a/b/` look in `/a/b/`, then `/a/`, then `/`), with status 404.
fn not_found(
    prepared: &mut PreparedByKey,
    archive: &Archive,
    site: u32,
    key: &str,
    f: &Fields<'_>,
    head: bool,
    query: Option<&str>,
) -> Reply {
    let mut folder = &key[..key.rfind('/').map_or(0, |i| i + 1)];
    while !folder.is_empty() {
        if let Some(e) = archive.get(site, format!("{folder}{NOT_FOUND_SUFFIX}").as_bytes()) {
            return answer(prepared, archive, e, f, head, 404, query);
        }
        folder = &folder[..folder[..folder.len() - 1].rfind('/').map_or(0, |i| i + 1)];
    }
    Reply::Now(Response::error(404))
}

/// An entry found at the path asked for: a `_redirects` rule's (a
/// redirect without the bit that keeps the query), or a resource or the
/// archive's own redirect, answered as before.
#[allow(clippy::too_many_arguments)]
fn found(
    prepared: &mut PreparedByKey,
    archive: &Archive,
    site: u32,
    e: Entry<'_>,
    key: &str,
    f: &Fields<'_>,
    head: bool,
    query: Option<&str>,
) -> Reply {
    if e.kind() != KIND_RESOURCE && e.flags() & FLAG_KEEP_QUERY == 0 {
        let to = String::from_utf8_lossy(e.location()).into_owned();
        return rule(
            prepared,
            archive,
            site,
            RuleAnswer::new(e.status(), to),
            key,
            f,
            head,
            query,
        );
    }
    answer(prepared, archive, e, f, head, 200, query)
}

/// The first of `rules` (pattern entries) that applies to `key` and the
/// query, answered.
#[allow(clippy::too_many_arguments)]
fn first_rule<'a>(
    prepared: &mut PreparedByKey,
    archive: &'a Archive,
    site: u32,
    rules: impl Iterator<Item = Entry<'a>>,
    key: &str,
    f: &Fields<'_>,
    head: bool,
    query: Option<&str>,
) -> Option<Reply> {
    for e in rules {
        let text = String::from_utf8_lossy(e.path());
        let (from, conds) = conventions::split_rule_text(&text);
        let Ok(pattern) = peregrine::pattern::Pattern::parse(from) else {
            continue;
        };
        if let Some(caps) = conventions::rule_captures(&pattern, &conds, key, query) {
            let to = crate::pattern::substitute(&String::from_utf8_lossy(e.location()), &caps);
            let answer = RuleAnswer::new(e.status(), to);
            return Some(rule(prepared, archive, site, answer, key, f, head, query));
        }
    }
    None
}

/// What a `_redirects` rule answers (as `serve DIR`'s `rule_answer`): a
/// redirect, a 400 for a target leaving the site, or the resource its
/// target names served with 200 (rewrite) or 404, following clean URLs'
/// canonical redirect once (the target may name `about.html`, stored as
/// `/about`); a target that names none gets `key`'s not-found page.
#[allow(clippy::too_many_arguments)]
fn rule(
    prepared: &mut PreparedByKey,
    archive: &Archive,
    site: u32,
    answer_of: RuleAnswer,
    key: &str,
    f: &Fields<'_>,
    head: bool,
    query: Option<&str>,
) -> Reply {
    let (target, status) = match answer_of {
        RuleAnswer::Redirect(status, to) => return Reply::Now(redirect(status, &to)),
        RuleAnswer::Refused => return Reply::Now(conventions::refused_target()),
        RuleAnswer::Rewrite(target) => (target, 200),
        RuleAnswer::NotFound(target) => (target, 404),
    };
    let lookup = |at: &[u8]| {
        let key = path::normalize(at).ok()?.key();
        archive.get(site, key.as_bytes())
    };
    let mut e = lookup(target.as_bytes());
    if let Some(canonical) = e.filter(|e| e.kind() == KIND_REDIRECT && e.flags() & FLAG_CANONICAL != 0) {
        e = lookup(canonical.location());
    }
    match e.filter(|e| e.kind() == KIND_RESOURCE) {
        Some(e) => answer(prepared, archive, e, f, head, status, query),
        None => not_found(prepared, archive, site, key, f, head, query),
    }
}

fn redirect(status: u16, location: &str) -> Response {
    peregrine_files::conventions::redirect(status, location)
}

/// The codings of variants 1 to 3, in the format's order.
const CODINGS: [Encoding; 3] = [Encoding::Brotli, Encoding::Zstd, Encoding::Gzip];

/// A found entry: a redirect, or a resource answered by the steps `serve
/// DIR` takes too (`peregrine_files::reply`).
fn answer(
    prepared: &mut PreparedByKey,
    archive: &Archive,
    e: Entry<'_>,
    f: &Fields<'_>,
    head: bool,
    status: u16,
    query: Option<&str>,
) -> Reply {
    if e.kind() != KIND_RESOURCE {
        let mut location = String::from_utf8_lossy(e.location()).into_owned();
        // `/dir?x` → `/dir/?x`, as `serve DIR` answers.
        if let Some(q) = query.filter(|_| e.flags() & FLAG_KEEP_QUERY != 0) {
            location.push('?');
            location.push_str(q);
        }
        return Reply::Now(redirect(e.status(), &location));
    }
    #[cfg(feature = "test-hooks")]
    test_hooks::stop_here(e.path());
    let mut codings = [Encoding::Brotli; 3];
    let mut n_codings = 0;
    for (i, c) in CODINGS.iter().enumerate() {
        if e.variant(i + 1).is_some() {
            codings[n_codings] = *c;
            n_codings += 1;
        }
    }
    let mut res = Stored {
        prepared,
        archive,
        e,
        codings,
        n_codings,
    };
    Reply::Now(reply::reply(&mut res, f, head, status))
}

/// An entry of kind resource, for the shared steps.
struct Stored<'a, 'b> {
    prepared: &'b mut PreparedByKey,
    archive: &'a Archive,
    e: Entry<'a>,
    codings: [Encoding; 3],
    n_codings: usize,
}

impl<'a> reply::Resource for Stored<'a, '_> {
    type Variant = StoredVariant<'a>;

    fn codings(&self) -> &[Encoding] {
        &self.codings[..self.n_codings]
    }

    fn negotiable(&self) -> bool {
        self.n_codings > 0
    }

    fn representation(&mut self, coding: Option<Encoding>) -> Option<StoredVariant<'a>> {
        let vi = match coding {
            None => 0,
            Some(c) => 1 + CODINGS.iter().position(|x| *x == c)?,
        };
        let v = self.e.variant(vi)?;
        let prepared = prepare(self.prepared, self.archive, &self.e, vi, &v)?;
        Some(StoredVariant {
            archive: self.archive,
            v,
            prepared,
            last_modified: std::time::UNIX_EPOCH + Duration::from_secs(self.e.last_modified()),
        })
    }
}

/// A variant of an entry, prepared for sending.
struct StoredVariant<'a> {
    archive: &'a Archive,
    v: Variant,
    prepared: Rc<Prepared>,
    last_modified: std::time::SystemTime,
}

impl reply::Representation for StoredVariant<'_> {
    fn len(&self) -> u64 {
        self.v.body_len
    }
    fn etag(&self) -> &str {
        &self.prepared.etag
    }
    fn last_modified(&self) -> std::time::SystemTime {
        self.last_modified
    }
    fn content_type(&self) -> &str {
        &self.prepared.content_type
    }
    fn block_200(&self) -> HeaderBlock {
        self.prepared.block.clone()
    }
    fn meta(&self) -> HeaderBlock {
        self.prepared.meta.clone()
    }
    fn block_304(&self) -> HeaderBlock {
        self.prepared.block_304.clone()
    }
    fn body(&self, r: std::ops::Range<u64>) -> Body {
        match self.archive.body_file() {
            // Held past the request: from the file, never the map.
            Some(file) if r.end - r.start > MAP_BODY_BYTES_MAX => {
                Body::File(FileRange::new(file.clone(), self.v.body_off + r.start, r.end - r.start))
            }
            _ => Body::Shared(self.archive.shared(self.v.body_off + r.start, r.end - r.start)),
        }
    }
    fn read_into(&self, r: std::ops::Range<u64>, out: &mut Vec<u8>) -> std::io::Result<()> {
        out.extend_from_slice(self.archive.slice(self.v.body_off + r.start, r.end - r.start));
        Ok(())
    }
    fn whole(&self, status: u16) -> Response {
        if self.v.body_len > MAP_BODY_BYTES_MAX && self.archive.body_file().is_some() {
            return Response::prepared(status, self.block_200(), self.body(0..self.v.body_len));
        }
        // The stored head and the body are two ranges of the archive's
        // bytes: one reference count for both, where a `HeaderBlock` and
        // a `SharedBytes` took two (their atomic increments were half of
        // `answer`'s samples, their decrements most of `drop Response`).
        let start = self.v.body_off as usize;
        Response::prepared_beside(
            status,
            self.prepared.block.clone(),
            start..start + self.v.body_len as usize,
        )
    }
}

/// A variant made ready to send.
struct Prepared {
    /// The stored 200 block.
    block: HeaderBlock,
    /// The same without its first line, `Content-Type` (FORMAT.md puts it
    /// first): a slice of the stored bytes, for multipart answers.
    meta: HeaderBlock,
    content_type: String,
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
/// lease on (a writer waits while we detach it into a copy in memory,
/// `map.rs`), and a copy is ours. Hashing each body again at its first send on each
/// worker only re-read bytes already proven, on the event loop, one whole
/// body per worker and variant (FORMAT.md, "What a reader may assume after
/// validation").
fn prepare(
    prepared: &mut PreparedByKey,
    archive: &Archive,
    e: &Entry<'_>,
    vi: usize,
    v: &Variant,
) -> Option<Rc<Prepared>> {
    let key = u32::try_from(e.index() * 4 + vi).ok()?;
    if let Some(p) = prepared.get(&key) {
        return Some(p.clone());
    }
    let path = String::from_utf8_lossy(e.path());
    let stored = archive.slice(v.head_off, u64::from(v.head_len));
    // `Content-Type: VALUE\r\n` first: its length and value.
    let first = stored
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| &stored[..=i])
        .filter(|l| l.len() > 14 && l[..14].eq_ignore_ascii_case(b"content-type: ") && l.ends_with(b"\r\n"))
        .and_then(|l| Some((l.len(), std::str::from_utf8(&l[14..l.len() - 2]).ok()?.to_owned())));
    let Some((first_len, content_type)) = first else {
        log::error(format_args!(
            "archive heads for {path} do not start with Content-Type; not served"
        ));
        return None;
    };
    let heads = (
        HeaderBlock::from_lines(archive.shared(v.head_off, u64::from(v.head_len))),
        HeaderBlock::from_lines(
            archive.shared(v.head_off + first_len as u64, u64::from(v.head_len) - first_len as u64),
        ),
        HeaderBlock::from_lines(archive.shared(v.head_off + u64::from(v.head_len), u64::from(v.head304_len))),
    );
    let (Ok(block), Ok(meta), Ok(block_304)) = heads else {
        log::error(format_args!(
            "archive heads for {path} are not valid header lines; not served"
        ));
        return None;
    };
    let p = Rc::new(Prepared {
        block,
        meta,
        content_type,
        block_304,
        etag: etag(v.body_len, v.body_hash),
    });
    prepared.insert(key, p.clone());
    Some(p)
}

/// Points where a test can stop a worker (feature `test-hooks`, which only
/// this crate's tests turn on).
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod test_hooks {
    use std::sync::mpsc::{Receiver, Sender};
    use std::sync::Mutex;

    type Stop = (Vec<u8>, Sender<()>, Receiver<()>);
    static STOP: Mutex<Option<Stop>> = Mutex::new(None);

    /// The next request that finds the resource `key` (`/a.txt`) stops
    /// after its lookup, before it reads the heads or the body: it sends
    /// on `stopped`, then waits for `go`. (Keyed, so that tests running
    /// beside it in the same process are not stopped.)
    pub fn stop_after_lookup(key: &str, stopped: Sender<()>, go: Receiver<()>) {
        *STOP.lock().unwrap_or_else(|e| e.into_inner()) = Some((key.as_bytes().to_vec(), stopped, go));
    }

    pub(crate) fn stop_here(key: &[u8]) {
        let armed = {
            let mut stop = STOP.lock().unwrap_or_else(|e| e.into_inner());
            match &*stop {
                Some((k, _, _)) if k == key => stop.take(),
                _ => None,
            }
        };
        if let Some((_, stopped, go)) = armed {
            let _ = stopped.send(());
            let _ = go.recv();
        }
    }
}
