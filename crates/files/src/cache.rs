//! What a worker remembers about files: open handles, identities,
//! validators, pre-built header blocks and, for small files, contents.
//!
//! One cache per worker thread and site (kept by `serve.rs` beside the
//! site's rules, in one `thread_local!`), so lookups take no lock. It holds at most `Options::cache_entries` entries (nginx's
//! `open_file_cache max`). The descriptors entries keep open are bounded
//! once for the whole process, every cache of every worker and site
//! together (`FILES_HELD`, at most half the descriptor limit: `files_max`),
//! so that connections always find the other half; past either bound the
//! CLOCK hand drops an entry not asked for since it last passed (second
//! chance, an LRU approximation that costs one flag store per hit), and a
//! cache whose own entries keep no file open does not keep a new one. An entry is trusted for `revalidate_interval`; after that one
//! `stat` per variant tells whether the path still names the same unchanged
//! file (device, inode, size, mtime), and the entry is rebuilt if not. Entity
//! tags are content hashes, memoised process-wide by file identity so each
//! file is hashed once, not once per worker; a file larger than
//! `Options::etag_hash_bytes_max` is hashed by a thread of its own, so that
//! no request waits while a worker reads a whole large file, and is sent
//! without an ETag until its hash is ready (`hashed_elsewhere`).

use std::cell::{Cell, OnceCell};
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use peregrine::{Body, FileRange, HeaderBlock, Response, SharedBytes};

use crate::encoding::Encoding;
use crate::sys::{self, FileId};

/// Files up to this size are kept in memory and sent from there (one
/// `writev` with the head); larger ones from their open file (`sendfile`,
/// corked). Server CPU µs per request, memory vs file, measured with one
/// worker and `wrk -t1 -c50` both on CPU 0, CPU from /proc/PID/stat
/// (the commit that set it has the runs): 16 KiB 3.3-3.4 vs 3.8-4.0 µs, 32 KiB
/// 4.0 vs 4.2, 48 KiB 4.9-5.1 vs 4.4, 56 KiB 5.4 vs 4.5, 64 KiB 6.5 vs
/// 5.6-5.8: copying into the socket costs more than the extra syscalls
/// (fstat, cork, sendfile) from about 40 KiB.
pub const SMALL_FILE_BYTES: u64 = 32 * 1024;
/// Entries per worker and site by default (`Options::cache_entries`).
pub const ENTRIES_DEFAULT: usize = 16_384;
/// Bytes of small-file contents per worker and site; past it, small files
/// are sent from their file like large ones.
const CONTENT_BYTES_MAX: usize = 64 << 20;
/// Memoised entity tags, process-wide; cleared when full.
const ETAGS_MAX: usize = 100_000;
/// Large files waiting for the hasher at once, each holding a descriptor;
/// past it a file is served without an ETag and asked for again at its
/// entry's next revalidation.
const HASHING_MAX: usize = 256;
/// Bytes read at a time when hashing a large file.
const HASH_BLOCK_BYTES: usize = 256 * 1024;

/// A file as served in one coding.
pub struct Variant {
    pub id: FileId,
    pub len: u64,
    /// `"SIZE-HASH"`, a strong tag: the same bytes give the same tag,
    /// whatever their mtime (reproducible builds). Above
    /// `Fields::etag_hash_bytes_max` the same, made by the hasher thread;
    /// empty (no ETag sent) until it is ready (`hashed_elsewhere`).
    pub etag: String,
    pub last_modified: SystemTime,
    /// The whole file in memory (small files), or its open handle.
    pub data: Data,
    /// Content-Type and everything of `meta`: a 200's fields.
    pub block_200: HeaderBlock,
    /// For a body in memory: where it lies in `block_200`'s buffer (the
    /// fields and the bytes are one allocation), so that a 200 takes one
    /// reference count, not two ([`Response::prepared_beside`]).
    beside: Option<std::ops::Range<usize>>,
    /// A 206/416's fields without Content-Type (multipart sets its own).
    pub meta: HeaderBlock,
    /// A 304's fields: ETag, Last-Modified, Cache-Control, Vary, and
    /// `_headers`' Expires, Content-Location and Vary
    /// (`conventions::is_304_field`).
    pub block_304: HeaderBlock,
}

/// Where a variant's bytes are.
pub enum Data {
    Memory(SharedBytes),
    File(Arc<File>),
}

impl Variant {
    /// The bytes `range` of the variant as a response body.
    pub fn body(&self, range: std::ops::Range<u64>) -> Body {
        match &self.data {
            Data::Memory(bytes) => {
                let whole = bytes.as_slice();
                let part = &whole[range.start as usize..range.end as usize];
                if part.len() == whole.len() {
                    Body::Shared(bytes.clone())
                } else {
                    Body::Bytes(part.to_vec())
                }
            }
            Data::File(file) => Body::File(FileRange::new(file.clone(), range.start, range.end - range.start)),
        }
    }

    /// Reads `range` into `out` (for multipart answers).
    pub fn read_into(&self, range: std::ops::Range<u64>, out: &mut Vec<u8>) -> io::Result<()> {
        match &self.data {
            Data::Memory(bytes) => {
                out.extend_from_slice(&bytes.as_slice()[range.start as usize..range.end as usize]);
                Ok(())
            }
            Data::File(file) => {
                let at = out.len();
                out.resize(at + (range.end - range.start) as usize, 0);
                file.read_exact_at(&mut out[at..], range.start)
            }
        }
    }
}

/// A file with its pre-compressed siblings.
pub struct Resource {
    /// The file's path within the root.
    pub rel: String,
    pub content_type: String,
    pub identity: Variant,
    /// Siblings found, in `Encoding::ALL` order.
    pub encoded: Vec<(Encoding, Variant)>,
    /// Available codings, for negotiation.
    pub codings: Vec<Encoding>,
    /// Siblings were looked for (so their appearing matters).
    precompressed: bool,
    /// The siblings `stat` saw when the entry was built (`Encoding::ALL`
    /// order), served or not (a stale one is not): any change rebuilds it.
    siblings_seen: [Option<FileId>; 3],
    /// The folder's identity when none of the three sibling names existed
    /// in it, taken before looking (`folder_unchanged`): while the folder is
    /// unchanged no sibling can have appeared, and one `stat` of it stands
    /// for three of the names. `None`: look at each name.
    folder_seen: Cell<Option<FileId>>,
    /// None of the sibling names existed when the entry was built (only
    /// then may `folder_seen` be set).
    folder_eligible: bool,
    /// Compression on the fly is under way: raised when it is done, and
    /// the next hit rebuilds the entry with the new variants.
    pending: OnceCell<Arc<AtomicBool>>,
    /// The file may be compressed on the fly, and is not yet: the first
    /// request that accepts a coding queues it (`want_coding`).
    compressible: bool,
    /// Responses vary by `Accept-Encoding` (variants, or some on the way).
    negotiable: bool,
    /// When the file was read.
    loaded: Instant,
    /// Until when it is trusted without a look (last look + the
    /// interval; `None` until the first hit sets it from `loaded`): an
    /// `Instant` compared per hit, not a `Duration` computed (37
    /// instructions a request, `bench/instructions.sh` f17-c50).
    fresh_until: Cell<Option<Instant>>,
    /// The loop time (`peregrine::now`, read once per wake-up) at which
    /// the open files of its large variants were last found unchanged:
    /// the requests a worker reads in one wake-up share one `fstat`
    /// (`open_files_unchanged`).
    looked_at: Cell<Option<Instant>>,
}

impl Resource {
    /// The variant for a coding (`None`: identity).
    pub fn variant(&self, coding: Option<Encoding>) -> &Variant {
        coding
            .and_then(|c| self.encoded.iter().find(|(e, _)| *e == c))
            .map_or(&self.identity, |(_, v)| v)
    }

    /// Whether responses vary by `Accept-Encoding`.
    pub fn negotiable(&self) -> bool {
        self.negotiable
    }

    /// Whether compressed variants made on the fly are now ready (one
    /// atomic load; no lock, no locked instruction).
    fn compressed_since(&self) -> bool {
        self.pending.get().is_some_and(|done| done.load(Ordering::Acquire))
    }

    /// Queues the file for compression on the fly if it may be compressed,
    /// is not yet, and the request (its `Accept-Encoding`) accepts a
    /// coding. Until then, and while it is made, answers are identity.
    pub fn want_coding(&self, accept: Option<&[u8]>) {
        if !self.compressible || self.pending.get().is_some() {
            return;
        }
        if crate::encoding::negotiate(accept, &Encoding::ALL).is_none() {
            return;
        }
        let source = || {
            Some(match &self.identity.data {
                Data::Memory(bytes) => crate::compress::Source::Bytes(bytes.clone()),
                Data::File(file) => crate::compress::Source::File(file.clone()),
            })
        };
        let flag = match crate::compress::lookup(self.identity.id, source) {
            Some(crate::compress::Lookup::Pending(done)) => done,
            // Made meanwhile (for another worker): rebuild at the next hit.
            Some(crate::compress::Lookup::Ready(_)) => Arc::new(AtomicBool::new(true)),
            // The queue is full: the next such request tries again.
            None => return,
        };
        let _ = self.pending.set(flag);
    }

    /// Descriptors the entry keeps open.
    fn open_files(&self) -> usize {
        self.variants().filter(|v| matches!(v.data, Data::File(_))).count()
    }

    fn variants(&self) -> impl Iterator<Item = &Variant> {
        std::iter::once(&self.identity).chain(self.encoded.iter().map(|(_, v)| v))
    }
}

/// A file's representation for the shared steps (`reply`): a variant and
/// the resource it belongs to (which knows the content type).
#[derive(Clone, Copy)]
pub struct FileVariant<'r> {
    res: &'r Resource,
    v: &'r Variant,
}

impl crate::reply::Representation for FileVariant<'_> {
    #[inline(always)]
    fn whole(&self, status: u16) -> Response {
        match &self.v.beside {
            Some(body) => Response::prepared_beside(status, self.v.block_200.clone(), body.clone()),
            None => Response::prepared(status, self.v.block_200.clone(), self.v.body(0..self.v.len)),
        }
    }
    fn len(&self) -> u64 {
        self.v.len
    }
    fn etag(&self) -> &str {
        &self.v.etag
    }
    fn last_modified(&self) -> SystemTime {
        self.v.last_modified
    }
    fn content_type(&self) -> &str {
        &self.res.content_type
    }
    fn block_200(&self) -> HeaderBlock {
        self.v.block_200.clone()
    }
    fn meta(&self) -> HeaderBlock {
        self.v.meta.clone()
    }
    fn block_304(&self) -> HeaderBlock {
        self.v.block_304.clone()
    }
    fn body(&self, range: std::ops::Range<u64>) -> Body {
        self.v.body(range)
    }
    fn read_into(&self, range: std::ops::Range<u64>, out: &mut Vec<u8>) -> io::Result<()> {
        self.v.read_into(range, out)
    }
}

impl<'r> crate::reply::Resource for &'r Resource {
    type Variant = FileVariant<'r>;
    fn codings(&self) -> &[Encoding] {
        &self.codings
    }
    fn negotiable(&self) -> bool {
        self.negotiable
    }
    #[inline(always)]
    fn representation(&mut self, coding: Option<Encoding>) -> Option<FileVariant<'r>> {
        let res: &'r Resource = self;
        Some(FileVariant {
            res,
            v: res.variant(coding),
        })
    }
}

/// The fields every response for a file carries besides validators, and
/// how its validator is made.
pub struct Fields<'a> {
    pub cache_control: Option<&'a str>,
    pub security_headers: bool,
    /// Files larger than this get an identity tag, not a content hash
    /// (`Options::etag_hash_bytes_max`).
    pub etag_hash_bytes_max: u64,
    /// Fields `_headers` gives this file: a `Cache-Control` among them
    /// replaces `cache_control`, a security header replaces the default
    /// one, the others are added last (as `pack` builds its heads).
    pub custom: &'a [(String, String)],
}

/// Security headers sent by default (`--no-security-headers` drops them).
/// `nosniff` goes on every response (it matters for scripts and styles);
/// the others only on documents (`text/html`), the only place a browser
/// uses them, which keeps every asset's head about 80 bytes shorter.
pub const SECURITY_HEADERS: [(&str, &str); 3] = [
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "SAMEORIGIN"),
    ("Referrer-Policy", "strict-origin-when-cross-origin"),
];

/// The security headers for a response of `content_type`.
pub fn security_headers(content_type: &str) -> &'static [(&'static str, &'static str)] {
    if content_type.starts_with("text/html") {
        &SECURITY_HEADERS
    } else {
        &SECURITY_HEADERS[..1]
    }
}

/// One worker's entries for one site, keyed by site path: the raw request
/// path when it is already one (`path::is_key`), else the normalised one
/// (`serve.rs`'s `stored_key`), so that the aliases of a file
/// (`/a/../f`, `/%66`) share its entry.
pub struct Cache {
    /// Key → its slot in `slots`. Hashed with foldhash, seeded per process
    /// (hashbrown's default): SipHash was 0.5 % of a 17-byte answer's CPU.
    /// Keys are site paths that led to a file, so a client chooses
    /// them; foldhash's random seed keeps collisions from being planned,
    /// and the table holds at most `entries_max` of them.
    index: HashMap<Rc<[u8]>, usize, foldhash::fast::RandomState>,
    slots: Vec<Slot>,
    /// The slot of the last key found: tried first, by comparing its key
    /// (a slot's key is the one `index` maps to it, so a match is the
    /// index's answer), before the index is hashed and probed. A server
    /// answering one file again and again skips the hash: `get` 143 -> 98
    /// instructions a request (callgrind f17-c50); a miss costs one
    /// compare. A hint only:
    /// any value is safe (out of range, or another key, falls through).
    last: usize,
    /// The CLOCK hand: the slot looked at next for eviction.
    hand: usize,
    entries_max: usize,
    /// Descriptors held by every cache of the process (`FILES_HELD`; a
    /// test's own count in tests), and the most they may be.
    files_held: &'static AtomicUsize,
    files_max: usize,
    content_bytes: usize,
    /// Descriptors this cache's entries keep open (its part of
    /// `files_held`).
    open_files: usize,
}

struct Slot {
    key: Rc<[u8]>,
    res: Rc<Resource>,
    /// Asked for since the hand last passed.
    referenced: Cell<bool>,
}

/// Descriptors all the caches of the process may keep open together:
/// half of the soft limit (`RLIMIT_NOFILE`) read by
/// `read_descriptor_limit`, so that connections, listeners and the files
/// being opened find the other half, however many workers and sites there
/// are; at least 16. A bound per cache (a quarter each, before) gave 4
/// workers, or 2 workers with 2 sites, every descriptor: one client
/// asking for many large files took them all, `accept` failed and
/// uncached files got 404s (review finding). Not read (the sandbox refuses
/// `prlimit64`, and the CLI reads it before): 512, half the usual 1,024.
fn files_max() -> usize {
    *DESCRIPTORS_MAX.get().unwrap_or(&512)
}

static DESCRIPTORS_MAX: OnceLock<usize> = OnceLock::new();

/// Descriptors held by the entries of every cache of the process, at most
/// `files_max()`: each cache adds what an entry keeps open when it keeps
/// it and takes it back when it drops it. One relaxed atomic operation per
/// entry made or dropped, none per hit.
static FILES_HELD: AtomicUsize = AtomicUsize::new(0);

/// Reads the descriptor limit that bounds the files caches keep open; to
/// be called before a sandbox that refuses `prlimit64` is entered (the CLI
/// does). Without it, caches keep at most 512 files open.
pub fn read_descriptor_limit() {
    DESCRIPTORS_MAX.get_or_init(|| {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        usize::try_from(limit / 2).unwrap_or(usize::MAX).max(16)
    });
}

impl Cache {
    /// An empty cache for at most `entries_max` entries (at least one).
    pub fn new(entries_max: usize) -> Self {
        Cache {
            index: HashMap::default(),
            slots: Vec::new(),
            last: 0,
            hand: 0,
            entries_max: entries_max.max(1),
            files_held: &FILES_HELD,
            files_max: files_max(),
            content_bytes: 0,
            open_files: 0,
        }
    }

    /// The cached resource for `key`, if still trusted (or still valid
    /// after a re-`stat`).
    ///
    /// The common answer, inlined: the slot tried first (`last`) holds
    /// `key`, within its revalidation window, its variants in memory
    /// (no open file to `fstat`) and no compressed form newly ready;
    /// anything else goes the whole way, out of line (`find`), which
    /// tries that slot again and decides the same for it. With
    /// `respond_hit`'s own identity answer, f17-c50 2,377 -> 2,280
    /// instructions a request (callgrind).
    #[inline(always)]
    pub fn get(&mut self, key: &[u8], root: &sys::Root, interval: Duration, now: Instant) -> Option<Rc<Resource>> {
        if let Some(slot) = self.slots.get(self.last) {
            let res = &slot.res;
            if crate::path::same_key(&slot.key, key)
                && res.fresh_until.get().is_some_and(|t| now < t)
                && res.encoded.is_empty()
                && matches!(res.identity.data, Data::Memory(_))
                && !res.compressed_since()
            {
                slot.referenced.set(true);
                return Some(res.clone());
            }
        }
        self.find(key, root, interval, now)
    }

    /// `get`'s whole way.
    #[inline(never)]
    fn find(&mut self, key: &[u8], root: &sys::Root, interval: Duration, now: Instant) -> Option<Rc<Resource>> {
        let at = match self.slots.get(self.last) {
            Some(slot) if crate::path::same_key(&slot.key, key) => self.last,
            _ => {
                let at = *self.index.get(key)?;
                self.last = at;
                at
            }
        };
        let slot = &self.slots[at];
        slot.referenced.set(true);
        let res = &slot.res;
        if res.compressed_since() {
            self.remove(key);
            return None;
        }
        let fresh_until = match res.fresh_until.get() {
            Some(t) => t,
            None => {
                let t = res.loaded + interval;
                res.fresh_until.set(Some(t));
                t
            }
        };
        if now < fresh_until {
            // Large files are sent from the open file: an fstat catches a
            // file rewritten in place, which would otherwise be answered
            // with its old length. One per wake-up: the requests read
            // together are answered from one look (a request read after
            // the rewrite came in a later wake-up, with a later `now`).
            if res.looked_at.get() == Some(now) || open_files_unchanged(res) {
                res.looked_at.set(Some(now));
                return Some(res.clone());
            }
            self.remove(key);
            return None;
        }
        if still_valid(res, root) && !tag_now_ready(res) {
            res.fresh_until.set(Some(now + interval));
            return Some(res.clone());
        }
        self.remove(key);
        None
    }

    /// Remembers a resource found for `key`, making room by the CLOCK
    /// rule: entries within their bound, and descriptors within the
    /// process's (`FILES_HELD`). When the other caches hold the
    /// descriptors and this one keeps none it could let go, the entry is
    /// not kept (its file is closed when its answer is sent).
    pub fn insert(&mut self, key: &[u8], res: Rc<Resource>) {
        self.remove(key);
        let files = res.open_files();
        if files > self.files_max {
            return;
        }
        while !self.slots.is_empty() && self.slots.len() >= self.entries_max {
            self.evict_one(false);
        }
        while files > 0 && !self.reserve(files) {
            if self.open_files == 0 {
                return;
            }
            self.evict_one(true);
        }
        self.content_bytes += memory_bytes(&res);
        self.open_files += files;
        let key: Rc<[u8]> = key.into();
        self.index.insert(key.clone(), self.slots.len());
        self.slots.push(Slot {
            key,
            res,
            referenced: Cell::new(false),
        });
    }

    /// Counts `files` more descriptors held, if the process's bound
    /// allows them.
    fn reserve(&self, files: usize) -> bool {
        self.files_held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held + files <= self.files_max).then_some(held + files)
            })
            .is_ok()
    }

    /// Drops the first entry at or after the hand not asked for since the
    /// hand last passed it, clearing the marks it passes (so at most one
    /// turn); `files`: only an entry that keeps a file open (there must be
    /// one), the others passed over as they are.
    fn evict_one(&mut self, files: bool) {
        loop {
            if self.hand >= self.slots.len() {
                self.hand = 0;
            }
            let slot = &self.slots[self.hand];
            if files && slot.res.open_files() == 0 {
                self.hand += 1;
                continue;
            }
            if slot.referenced.replace(false) {
                self.hand += 1;
                continue;
            }
            let key = slot.key.clone();
            self.remove(&key);
            return;
        }
    }

    /// Forgets every entry (the site's `_headers` changed, and with it the
    /// header blocks built).
    pub fn clear(&mut self) {
        self.index.clear();
        self.slots.clear();
        self.hand = 0;
        self.content_bytes = 0;
        self.files_held.fetch_sub(self.open_files, Ordering::Relaxed);
        self.open_files = 0;
    }

    /// Entries held, and descriptors they keep open.
    #[cfg(test)]
    fn len(&self) -> (usize, usize) {
        (self.slots.len(), self.open_files)
    }

    /// Bytes of small-file contents this cache may still hold.
    pub fn room(&self) -> u64 {
        CONTENT_BYTES_MAX.saturating_sub(self.content_bytes) as u64
    }

    /// Forgets `key`'s entry: the last slot takes its place (the hand
    /// stays, so that slot is looked at next).
    fn remove(&mut self, key: &[u8]) {
        let Some(at) = self.index.remove(key) else { return };
        let old = self.slots.swap_remove(at);
        self.content_bytes -= memory_bytes(&old.res);
        let files = old.res.open_files();
        self.open_files -= files;
        self.files_held.fetch_sub(files, Ordering::Relaxed);
        if let Some(moved) = self.slots.get(at) {
            self.index.insert(moved.key.clone(), at);
        }
    }
}

impl Drop for Cache {
    /// A worker that ends (a reload's old server) gives its part of the
    /// process's bound back.
    fn drop(&mut self) {
        self.clear();
    }
}

fn memory_bytes(res: &Resource) -> usize {
    res.variants()
        .map(|v| match &v.data {
            Data::Memory(b) => b.as_slice().len(),
            Data::File(_) => 0,
        })
        .sum()
}

/// Whether the files kept open for large variants still have the size and
/// mtime they had when the entry was made.
fn open_files_unchanged(res: &Resource) -> bool {
    res.variants().all(|v| match &v.data {
        Data::Memory(_) => true,
        Data::File(f) => sys::fstat(f).is_ok_and(|id| id == v.id),
    })
}

/// Whether a large file's variant went without a tag whose hash is now
/// made (or failed): the entry is built again to carry it. Checked at
/// revalidation only; a variant with a tag costs one length test.
fn tag_now_ready(res: &Resource) -> bool {
    std::iter::once(&res.identity)
        .chain(res.encoded.iter().map(|(_, v)| v))
        .any(|v| v.etag.is_empty() && tag_ready(v.id))
}

/// Whether every variant's path still names the same unchanged file, and no
/// sibling appeared.
fn still_valid(res: &Resource, root: &sys::Root) -> bool {
    if sys::stat_beneath(root, &res.rel).ok() != Some(res.identity.id) {
        return false;
    }
    if !res.precompressed {
        return true;
    }
    let folder = folder_of(&res.rel);
    let (folder_now, trusted) = folder_identity(root, folder);
    if folder_now.is_some() && res.folder_seen.get() == folder_now {
        return true;
    }
    let same = Encoding::ALL.iter().zip(&res.siblings_seen).all(|(&e, was)| {
        let now = sys::stat_beneath(root, &format!("{}{}", res.rel, e.suffix())).ok();
        now.filter(|id| id.is_file) == *was
    });
    // The folder changed for another reason (another file in it): the
    // names were looked at after its new identity was taken, so that
    // identity stands for them from now on, if settled and if no name
    // exists (a dangling symlink could start to resolve).
    if same && res.folder_eligible {
        let absent = trusted
            && Encoding::ALL
                .iter()
                .all(|e| name_absent(root, &format!("{}{}", res.rel, e.suffix())));
        res.folder_seen.set(folder_now.filter(|_| absent));
    }
    same
}

/// Whether no directory entry has this name (a dangling symlink is one).
fn name_absent(root: &sys::Root, rel: &str) -> bool {
    sys::lstat_beneath(root, rel).is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
}

/// The folder part of a path within the root (`""`: the root).
fn folder_of(rel: &str) -> &str {
    rel.rfind('/').map_or("", |i| &rel[..i])
}

/// How far back a folder's mtime must be for its identity to stand for
/// its names: a name added later gets a later mtime only if the clock has
/// moved past the recorded one by more than the file system's timestamp
/// granularity (coarse, a few ms), as git's "racy" index entries.
const FOLDER_SETTLED: Duration = Duration::from_secs(1);

/// The folder's identity, and whether it can stand for its names (its
/// mtime is at least `FOLDER_SETTLED` older than the clock read before the
/// `stat`; see `folder_of`).
fn folder_identity(root: &sys::Root, folder: &str) -> (Option<FileId>, bool) {
    let before = SystemTime::now();
    let Ok(id) = sys::stat_beneath(root, folder) else {
        return (None, false);
    };
    let settled = before
        .duration_since(SystemTime::UNIX_EPOCH)
        .ok()
        .and_then(|t| i128::try_from(t.saturating_sub(FOLDER_SETTLED).as_nanos()).ok())
        .is_some_and(|limit| id.mtime_ns < limit);
    (Some(id), settled)
}

/// Opens `rel` and its siblings and builds the resource, keeping contents
/// of small files in memory while `room` (bytes) allows. A sibling older
/// than the file is not served (a warning says so, once). A text file with
/// no sibling gets compressed variants made on the fly when `compress`.
/// `Ok(None)`: the path is not a regular file.
#[allow(clippy::too_many_arguments)]
pub fn load(
    root: &sys::Root,
    rel: &str,
    follow_symlinks: bool,
    precompressed: bool,
    compress: bool,
    fields: &Fields<'_>,
    mut room: u64,
) -> io::Result<Option<Resource>> {
    let file = sys::open_beneath(root, rel, follow_symlinks)?;
    let id = sys::fstat(&file)?;
    if !id.is_file {
        return Ok(None);
    }
    let name = rel.rsplit('/').next().unwrap_or(rel);
    let content_type = crate::conventions::content_type(fields.custom, name);
    let mut encoded = Vec::new();
    let mut siblings_seen = [None; 3];
    let mut folder_seen = None;
    let mut folder_eligible = precompressed;
    if precompressed {
        // Taken before the names are looked at, so that a sibling added
        // after the look changes it (and the folder must be settled).
        let (folder, settled) = folder_identity(root, folder_of(rel));
        folder_seen = folder.filter(|_| settled);
        for (e, seen) in Encoding::ALL.into_iter().zip(&mut siblings_seen) {
            let sibling_rel = format!("{rel}{}", e.suffix());
            let Ok(sibling) = sys::open_beneath(root, &sibling_rel, follow_symlinks) else {
                // A name that exists but does not open (a dangling or
                // outward symlink) may start to without its folder
                // changing: look at each name then.
                if !name_absent(root, &sibling_rel) {
                    folder_seen = None;
                    folder_eligible = false;
                }
                continue;
            };
            folder_seen = None;
            folder_eligible = false;
            let Ok(sid) = sys::fstat(&sibling) else { continue };
            if !sid.is_file {
                continue;
            }
            *seen = Some(sid);
            if sid.mtime_ns < id.mtime_ns {
                warn_stale(rel, e, sid);
                continue;
            }
            encoded.push((e, (sibling, sid)));
        }
    }
    let mut generated = Vec::new();
    let pending = OnceCell::new();
    let wanted = compress
        && encoded.is_empty()
        && (crate::compress::COMPRESS_MIN_BYTES..=crate::compress::COMPRESS_ON_THE_FLY_BYTES_MAX).contains(&id.size)
        && crate::compress::compressible(&content_type);
    // Made, being made, or to be made when a client accepts a coding.
    let mut compressible = false;
    if wanted {
        match crate::compress::find(id) {
            Some(crate::compress::Lookup::Ready(v)) => generated = v,
            Some(crate::compress::Lookup::Pending(done)) => {
                let _ = pending.set(done);
            }
            None => compressible = true,
        }
    }
    let negotiable = !encoded.is_empty() || !generated.is_empty() || pending.get().is_some() || compressible;
    let identity = variant(file, id, &content_type, None, negotiable, fields, &mut room)?;
    let mut variants = Vec::new();
    for (e, (f, sid)) in encoded {
        variants.push((e, variant(f, sid, &content_type, Some(e), true, fields, &mut room)?));
    }
    for (e, bytes) in generated {
        let etag = format_etag(
            bytes.as_slice().len() as u64,
            xxhash_rust::xxh3::xxh3_64(bytes.as_slice()),
        );
        let len = bytes.as_slice().len() as u64;
        let v = assemble(id, len, etag, Data::Memory(bytes), &content_type, Some(e), true, fields)?;
        variants.push((e, v));
    }
    Ok(Some(Resource {
        rel: rel.to_owned(),
        content_type,
        identity,
        codings: variants.iter().map(|(e, _)| *e).collect(),
        encoded: variants,
        precompressed,
        siblings_seen,
        folder_seen: Cell::new(folder_seen),
        folder_eligible,
        pending,
        compressible,
        negotiable,
        loaded: Instant::now(),
        fresh_until: Cell::new(None),
        looked_at: Cell::new(None),
    }))
}

/// Says once per sibling (by identity) that it is older than its source,
/// so not served: a build that rewrote `app.js` but not `app.js.gz` would
/// otherwise send yesterday's script to every client that accepts gzip.
fn warn_stale(rel: &str, coding: Encoding, sibling: FileId) {
    static WARNED: OnceLock<Mutex<std::collections::HashSet<FileId>>> = OnceLock::new();
    let mut warned = WARNED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if warned.len() >= ETAGS_MAX {
        warned.clear();
    }
    if warned.insert(sibling) {
        peregrine::log::warn(format_args!(
            "{rel}{} is older than {rel}: not served (rebuild it, or remove it to compress {rel} on the fly)",
            coding.suffix()
        ));
    }
}

fn variant(
    file: File,
    id: FileId,
    content_type: &str,
    coding: Option<Encoding>,
    negotiable: bool,
    fields: &Fields<'_>,
    room: &mut u64,
) -> io::Result<Variant> {
    let small = id.size <= SMALL_FILE_BYTES && id.size <= *room;
    if small {
        *room -= id.size;
    }
    let hashed = id.size <= fields.etag_hash_bytes_max;
    let (data, etag) = if small {
        let mut bytes = vec![0; id.size as usize];
        file.read_exact_at(&mut bytes, 0)?;
        // The file may have grown or changed since fstat: what we read is
        // what we serve, and the tag is of that.
        let etag = format_etag(bytes.len() as u64, xxhash_rust::xxh3::xxh3_64(&bytes));
        (Data::Memory(SharedBytes::new(Arc::new(bytes))), etag)
    } else {
        let etag = if hashed {
            etag_of_file(&file, id)?
        } else {
            // Hashed off the loop; until then no tag (issue 33).
            hashed_elsewhere(&file, id).unwrap_or_default()
        };
        (Data::File(Arc::new(file)), etag)
    };
    let len = match &data {
        Data::Memory(b) => b.as_slice().len() as u64,
        Data::File(_) => id.size,
    };
    assemble(id, len, etag, data, content_type, coding, negotiable, fields)
}

/// A variant from its bytes and validator: the three header blocks built.
#[allow(clippy::too_many_arguments)]
fn assemble(
    id: FileId,
    len: u64,
    etag: String,
    data: Data,
    content_type: &str,
    coding: Option<Encoding>,
    negotiable: bool,
    fields: &Fields<'_>,
) -> io::Result<Variant> {
    let last_modified = SystemTime::UNIX_EPOCH + Duration::from_nanos(u64::try_from(id.mtime_ns).unwrap_or(0));
    let lm = httpdate::fmt_http_date(last_modified);
    let custom_has = |name: &str| fields.custom.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    let cache_control = match fields
        .custom
        .iter()
        .rev()
        .find(|(n, _)| n.eq_ignore_ascii_case("cache-control"))
    {
        Some((_, v)) => Some(v.as_str()),
        None => fields.cache_control,
    };
    // A large file whose hash is not ready has no tag yet (`hashed_elsewhere`).
    let tagged: &[(&str, &str)] = if etag.is_empty() { &[] } else { &[("ETag", &etag)] };
    let mut meta: Vec<(&str, &str)> = tagged.to_vec();
    meta.extend([("Last-Modified", lm.as_str()), ("Accept-Ranges", "bytes")]);
    if let Some(cc) = cache_control {
        meta.push(("Cache-Control", cc));
    }
    if negotiable {
        meta.push(("Vary", "Accept-Encoding"));
    }
    if let Some(e) = coding {
        meta.push(("Content-Encoding", e.name()));
    }
    if fields.security_headers {
        for &(n, v) in security_headers(content_type) {
            if !custom_has(n) {
                meta.push((n, v));
            }
        }
    }
    for (n, v) in fields.custom {
        if !crate::conventions::is_replacing_field(n) {
            meta.push((n, v));
        }
    }
    let mut with_type = vec![("Content-Type", content_type)];
    with_type.extend(meta.iter().copied());
    let mut not_modified: Vec<(&str, &str)> = tagged.to_vec();
    not_modified.push(("Last-Modified", &lm));
    if let Some(cc) = cache_control {
        not_modified.push(("Cache-Control", cc));
    }
    if negotiable {
        not_modified.push(("Vary", "Accept-Encoding"));
    }
    for (n, v) in fields.custom {
        if crate::conventions::is_304_field(n) {
            not_modified.push((n, v));
        }
    }
    let block = |f: &[(&str, &str)]| HeaderBlock::new(f).map_err(io::Error::other);
    let mut block_200 = block(&with_type)?;
    let (mut data, mut beside) = (data, None);
    if let Data::Memory(bytes) = &data {
        // One buffer: the 200's fields, then the body.
        let lines = block_200.as_bytes();
        let mut joined = Vec::with_capacity(lines.len() + bytes.as_slice().len());
        joined.extend_from_slice(lines);
        joined.extend_from_slice(bytes.as_slice());
        let body = lines.len()..joined.len();
        let joined: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(joined);
        let slice = |r: std::ops::Range<usize>| SharedBytes::slice(joined.clone(), r).expect("within the buffer");
        block_200 = HeaderBlock::from_lines(slice(0..body.start)).map_err(io::Error::other)?;
        data = Data::Memory(slice(body.clone()));
        beside = Some(body);
    }
    Ok(Variant {
        id,
        len,
        block_200,
        beside,
        meta: block(&meta)?,
        block_304: block(&not_modified)?,
        etag,
        last_modified,
        data,
    })
}

fn format_etag(len: u64, hash: u64) -> String {
    format!("\"{len:x}-{hash:016x}\"")
}

/// The tag of a file too large to hash on the request path, if a hasher
/// thread has made it; if not, it is asked for, and the caller sends no
/// ETag (Last-Modified alone) rather than one that would later change.
/// Hashing 1 GiB from the page cache held its worker for about 200 ms here,
/// and every request on that worker with it; the hasher thread holds none.
/// The tag, a content hash like a small file's, is the same on every
/// replica and after a redeploy (issue 33: identity tags broke caches and
/// `If-Range` resumes across them). It is memoised by identity (device,
/// inode, size, mtime), as small files' are; an entry without it is built
/// again at its next revalidation once it is ready (`tag_ready`).
fn hashed_elsewhere(file: &File, id: FileId) -> Option<String> {
    if let Some(tag) = lock(memo()).get(&id) {
        return Some(tag.clone());
    }
    let queued = {
        let mut hashing = lock(hashing());
        hashing.len() < HASHING_MAX && hashing.insert(id)
    };
    if queued {
        let sent = file.try_clone().ok().and_then(|f| hasher().send((f, id)).ok());
        if sent.is_none() {
            lock(hashing()).remove(&id);
        }
    }
    None
}

/// Whether a tag asked of [`hashed_elsewhere`] is ready, or no longer
/// coming (the hasher failed: a rebuild asks again).
fn tag_ready(id: FileId) -> bool {
    lock(memo()).contains_key(&id) || !lock(hashing()).contains(&id)
}

/// The process's hasher thread, started on first use: one at a time, so
/// large files are read one after another, never by a worker.
fn hasher() -> std::sync::mpsc::Sender<(File, FileId)> {
    static SENDER: OnceLock<Mutex<std::sync::mpsc::Sender<(File, FileId)>>> = OnceLock::new();
    let sender = SENDER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<(File, FileId)>();
        let spawned = std::thread::Builder::new()
            .name("peregrine-etag".into())
            .spawn(move || {
                for (file, id) in rx {
                    // An error (the file shrank) leaves no tag: the file
                    // changed, and its entry is rebuilt and asks again.
                    let _ = etag_of_file(&file, id);
                    lock(hashing()).remove(&id);
                }
            });
        // Without the thread the receiver is gone, every send fails, and
        // large files are served without a tag.
        drop(spawned);
        Mutex::new(tx)
    });
    lock(sender).clone()
}

/// Identities a hash was asked for and not yet made.
fn hashing() -> &'static Mutex<std::collections::HashSet<FileId>> {
    static HASHING: OnceLock<Mutex<std::collections::HashSet<FileId>>> = OnceLock::new();
    HASHING.get_or_init(Default::default)
}

/// Memoised entity tags of large files, by identity.
fn memo() -> &'static Mutex<HashMap<FileId, String>> {
    static MEMO: OnceLock<Mutex<HashMap<FileId, String>>> = OnceLock::new();
    MEMO.get_or_init(Default::default)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The tag of a large file, hashed once per process per file identity.
fn etag_of_file(file: &File, id: FileId) -> io::Result<String> {
    let memo = memo();
    if let Some(tag) = lock(memo).get(&id) {
        return Ok(tag.clone());
    }
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0; HASH_BLOCK_BYTES];
    let mut at = 0u64;
    while at < id.size {
        let want = (id.size - at).min(HASH_BLOCK_BYTES as u64) as usize;
        let n = file.read_at(&mut buf[..want], at)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while hashed"));
        }
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    let tag = format_etag(id.size, hasher.digest());
    let mut memo = lock(memo);
    if memo.len() >= ETAGS_MAX {
        memo.clear();
    }
    memo.insert(id, tag.clone());
    Ok(tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> Fields<'static> {
        Fields {
            cache_control: None,
            security_headers: false,
            etag_hash_bytes_max: 1 << 20,
            custom: &[],
        }
    }

    /// A scratch root with `names`, each `size` bytes.
    fn root(tag: &str, names: &[&str], size: usize) -> (std::path::PathBuf, sys::Root) {
        let dir = std::env::temp_dir().join(format!("peregrine-cache-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for name in names {
            std::fs::write(dir.join(name), vec![b'x'; size]).unwrap();
        }
        let fd = sys::open_root(&dir).unwrap();
        (dir, fd)
    }

    fn loaded(root: &sys::Root, rel: &str, room: u64) -> Rc<Resource> {
        Rc::new(load(root, rel, false, false, false, &fields(), room).unwrap().unwrap())
    }

    /// The hand spares what was asked for since it last passed: with room
    /// for three, `a` asked again survives two newcomers, `b` and `c` (not
    /// asked) go first.
    #[test]
    fn clock_keeps_entries_asked_for_again() {
        let (dir, fd) = root("clock", &["a", "b", "c", "d", "e"], 10);
        let mut cache = Cache::new(3);
        let now = Instant::now();
        let hour = Duration::from_secs(3600);
        for name in ["a", "b", "c"] {
            cache.insert(name.as_bytes(), loaded(&fd, name, 1 << 20));
        }
        assert!(cache.get(b"a", &fd, hour, now).is_some());
        cache.insert(b"d", loaded(&fd, "d", 1 << 20));
        cache.insert(b"e", loaded(&fd, "e", 1 << 20));
        assert_eq!(cache.len(), (3, 0));
        let held: Vec<bool> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|k| cache.get(k.as_bytes(), &fd, hour, now).is_some())
            .collect();
        assert_eq!(held, [true, false, false, true, true]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A large file sent from its open descriptor is looked at (`fstat`)
    /// once per wake-up: a second request of the same wake-up (the same
    /// loop time) shares the first one's look, and the first request of
    /// a later wake-up sees a file rewritten in place.
    #[test]
    fn an_open_file_is_looked_at_once_per_wake_up() {
        let (dir, fd) = root("looked", &["big"], 64 << 10);
        let mut cache = Cache::new(4);
        let hour = Duration::from_secs(3600);
        let res = loaded(&fd, "big", 1 << 20);
        assert!(
            matches!(res.identity.data, Data::File(_)),
            "64 KiB is sent from its file"
        );
        cache.insert(b"big", res);
        let wake = Instant::now();
        assert!(cache.get(b"big", &fd, hour, wake).is_some());
        // Rewritten in place, shorter.
        std::fs::File::options()
            .write(true)
            .open(dir.join("big"))
            .unwrap()
            .set_len(1000)
            .unwrap();
        assert!(
            cache.get(b"big", &fd, hour, wake).is_some(),
            "the same wake-up: the look already made stands"
        );
        let next = wake + Duration::from_micros(50);
        assert!(
            cache.get(b"big", &fd, hour, next).is_none(),
            "the next wake-up looks again"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The slot tried first (`Cache::last`) answers only the key it holds:
    /// keys asked in turn, again, and after removals have moved entries
    /// between slots, each get their own resource or none.
    #[test]
    fn the_slot_tried_first_answers_only_its_own_key() {
        let (dir, fd) = root("last", &["a", "b", "c", "d"], 10);
        let mut cache = Cache::new(3);
        let now = Instant::now();
        let hour = Duration::from_secs(3600);
        for name in ["a", "b", "c"] {
            cache.insert(name.as_bytes(), loaded(&fd, name, 1 << 20));
        }
        let asked = |cache: &mut Cache, name: &str| cache.get(name.as_bytes(), &fd, hour, now).map(|r| r.rel.clone());
        for name in ["a", "a", "a", "b", "a", "c", "c", "b", "b"] {
            assert_eq!(asked(&mut cache, name).as_deref(), Some(name));
        }
        // `d` evicts one (a slot emptied, the last one moved into it).
        cache.insert(b"d", loaded(&fd, "d", 1 << 20));
        let held: Vec<Option<String>> = ["a", "b", "c", "d", "d", "c", "b", "a"]
            .iter()
            .map(|name| asked(&mut cache, name))
            .collect();
        for (name, got) in ["a", "b", "c", "d", "d", "c", "b", "a"].iter().zip(&held) {
            assert!(got.as_deref().is_none_or(|g| g == *name), "{name}: {got:?}");
        }
        assert_eq!(held.iter().filter(|h| h.is_some()).count(), 6, "{held:?}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The folder's identity is kept only when no sibling name exists and
    /// the folder is settled (changed more than `FOLDER_SETTLED` ago).
    #[test]
    fn folder_identity_is_kept_only_when_it_can_stand_for_the_names() {
        let (dir, fd) = root("folder", &["a", "b", "b.gz"], 10);
        let load = |rel: &str| load(&fd, rel, false, true, false, &fields(), 1 << 20).unwrap().unwrap();
        // Just written: not settled.
        assert!(load("a").folder_seen.get().is_none());
        let old = SystemTime::now() - Duration::from_secs(3600);
        File::open(&dir).unwrap().set_modified(old).unwrap();
        let a = load("a");
        assert!(a.folder_seen.get().is_some() && a.folder_eligible);
        // A sibling exists: each name is looked at.
        let b = load("b");
        assert!(b.folder_seen.get().is_none() && !b.folder_eligible);
        // A dangling symlink is a name that exists.
        std::os::unix::fs::symlink("nowhere", dir.join("a.br")).unwrap();
        File::open(&dir).unwrap().set_modified(old).unwrap();
        let a = load("a");
        assert!(a.folder_seen.get().is_none() && !a.folder_eligible);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Entries sent from their open file count against the descriptor
    /// bound, whatever the entry bound; one replaced is not counted twice.
    #[test]
    fn open_files_are_bounded_and_counted_once() {
        let names: Vec<String> = (0..40).map(|i| format!("f{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let (dir, fd) = root("fds", &refs, 100);
        let mut cache = Cache::new(1000);
        cache.files_held = Box::leak(Box::new(AtomicUsize::new(0)));
        cache.files_max = 16;
        for name in &refs {
            // No room for contents: every entry keeps its file open.
            cache.insert(name.as_bytes(), loaded(&fd, name, 0));
        }
        assert_eq!(cache.len(), (16, 16));
        cache.insert(b"f39", loaded(&fd, "f39", 0));
        assert_eq!(cache.len(), (16, 16));
        cache.insert(b"f39", loaded(&fd, "f39", 1 << 20));
        assert_eq!(cache.len(), (16, 15));
        cache.clear();
        assert_eq!(cache.len(), (0, 0));
        assert_eq!(cache.files_held.load(Ordering::Relaxed), 0);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The descriptor bound is one for every cache of the process (every
    /// worker's, every site's), not one each: a second cache keeps no file
    /// open while the first holds the bound, keeps its small files, and
    /// gets room as the first gives descriptors back (cleared, dropped).
    #[test]
    fn caches_share_one_descriptor_bound() {
        let names: Vec<String> = (0..24).map(|i| format!("f{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let (dir, fd) = root("shared-fds", &refs, 100);
        let held: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
        let cache = || {
            let mut c = Cache::new(1000);
            c.files_held = held;
            c.files_max = 16;
            c
        };
        let (mut one, mut two) = (cache(), cache());
        for name in &refs[..16] {
            one.insert(name.as_bytes(), loaded(&fd, name, 0));
        }
        assert_eq!(one.len(), (16, 16));
        for name in &refs[16..] {
            two.insert(name.as_bytes(), loaded(&fd, name, 0));
        }
        assert_eq!(
            two.len(),
            (0, 0),
            "the other cache holds every descriptor the process may"
        );
        assert_eq!(held.load(Ordering::Relaxed), 16);
        // Contents in memory hold no descriptor.
        two.insert(b"f16", loaded(&fd, "f16", 1 << 20));
        assert_eq!(two.len(), (1, 0));
        // One that holds some makes room among its own.
        one.insert(b"f17", loaded(&fd, "f17", 0));
        assert_eq!(one.len(), (16, 16));
        drop(one);
        assert_eq!(held.load(Ordering::Relaxed), 0);
        for name in &refs[16..] {
            two.insert(name.as_bytes(), loaded(&fd, name, 0));
        }
        assert_eq!(two.len(), (8, 8));
        two.clear();
        assert_eq!(held.load(Ordering::Relaxed), 0);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
