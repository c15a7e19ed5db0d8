//! What a worker remembers about files: open handles, identities,
//! validators, pre-built header blocks and, for small files, contents.
//!
//! One cache per worker thread and site (`thread_local!`), so lookups take
//! no lock. An entry is trusted for `revalidate_interval`; after that one
//! `stat` per variant tells whether the path still names the same unchanged
//! file (device, inode, size, mtime), and the entry is rebuilt if not. Entity
//! tags are content hashes, memoised process-wide by file identity so each
//! file is hashed once, not once per worker; a file larger than
//! `Options::etag_hash_bytes_max` gets a tag of its identity instead (size,
//! inode, mtime), so that no request waits while a worker reads a whole
//! large file (`identity_etag`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use peregrine::{Body, FileRange, HeaderBlock, SharedBytes};

use crate::encoding::Encoding;
use crate::sys::{self, FileId};

/// Files up to this size are kept in memory and sent from there.
pub const SMALL_FILE_BYTES: u64 = 64 * 1024;
/// Entries per worker and site; past it, an arbitrary one is dropped.
const ENTRIES_MAX: usize = 4096;
/// Bytes of small-file contents per worker and site; past it, small files
/// are sent from their file like large ones.
const CONTENT_BYTES_MAX: usize = 64 << 20;
/// Memoised entity tags, process-wide; cleared when full.
const ETAGS_MAX: usize = 100_000;
/// Bytes read at a time when hashing a large file.
const HASH_BLOCK_BYTES: usize = 256 * 1024;

/// A file as served in one coding.
pub struct Variant {
    pub id: FileId,
    pub len: u64,
    /// `"SIZE-HASH"`, a strong tag: the same bytes give the same tag,
    /// whatever their mtime (reproducible builds). Above
    /// `Fields::etag_hash_bytes_max`, `"SIZE-INODE-MTIME"` (`identity_etag`).
    pub etag: String,
    pub last_modified: SystemTime,
    /// The whole file in memory (small files), or its open handle.
    pub data: Data,
    /// Content-Type and everything of `meta`: a 200's fields.
    pub block_200: HeaderBlock,
    /// A 206/416's fields without Content-Type (multipart sets its own).
    pub meta: HeaderBlock,
    /// A 304's fields: ETag, Last-Modified, Cache-Control, Vary.
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
    /// Compression on the fly is under way: raised when it is done, and
    /// the next hit rebuilds the entry with the new variants.
    pending: Option<Arc<AtomicBool>>,
    /// Responses vary by `Accept-Encoding` (variants, or some on the way).
    negotiable: bool,
    checked: std::cell::Cell<Instant>,
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
        self.pending.as_ref().is_some_and(|done| done.load(Ordering::Acquire))
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

/// One worker's entries for one site, keyed by raw request path.
#[derive(Default)]
pub struct Cache {
    entries: HashMap<Box<[u8]>, Rc<Resource>>,
    content_bytes: usize,
}

thread_local! {
    /// The caches of this worker thread, one per site (by site id).
    static CACHES: RefCell<Vec<(u64, Cache)>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's cache for site `id`.
pub fn with_cache<R>(id: u64, f: impl FnOnce(&mut Cache) -> R) -> R {
    CACHES.with(|caches| {
        let mut caches = caches.borrow_mut();
        let idx = match caches.iter().position(|(i, _)| *i == id) {
            Some(idx) => idx,
            None => {
                caches.push((id, Cache::default()));
                caches.len() - 1
            }
        };
        f(&mut caches[idx].1)
    })
}

impl Cache {
    /// The cached resource for `key`, if still trusted (or still valid
    /// after a re-`stat`).
    pub fn get(
        &mut self,
        key: &[u8],
        root: &std::os::fd::OwnedFd,
        interval: Duration,
        now: Instant,
    ) -> Option<Rc<Resource>> {
        let res = self.entries.get(key)?;
        if res.compressed_since() {
            self.remove(key);
            return None;
        }
        if now.saturating_duration_since(res.checked.get()) < interval {
            // Large files are sent from the open file: one fstat (cheap next
            // to sending 64 KiB or more) catches a file rewritten in place,
            // which would otherwise be answered with its old length.
            if open_files_unchanged(res) {
                return Some(res.clone());
            }
            self.remove(key);
            return None;
        }
        if still_valid(res, root) {
            res.checked.set(now);
            return Some(res.clone());
        }
        self.remove(key);
        None
    }

    /// Remembers a resource found for `key`.
    pub fn insert(&mut self, key: &[u8], res: Rc<Resource>) {
        if self.entries.len() >= ENTRIES_MAX {
            if let Some(victim) = self.entries.keys().next().cloned() {
                self.remove(&victim);
            }
        }
        self.content_bytes += memory_bytes(&res);
        if let Some(old) = self.entries.insert(key.into(), res) {
            self.content_bytes -= memory_bytes(&old);
        }
    }

    /// Forgets every entry (the site's `_headers` changed, and with it the
    /// header blocks built).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.content_bytes = 0;
    }

    /// Bytes of small-file contents this cache may still hold.
    pub fn room(&self) -> u64 {
        CONTENT_BYTES_MAX.saturating_sub(self.content_bytes) as u64
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(old) = self.entries.remove(key) {
            self.content_bytes -= memory_bytes(&old);
        }
    }
}

fn memory_bytes(res: &Resource) -> usize {
    std::iter::once(&res.identity)
        .chain(res.encoded.iter().map(|(_, v)| v))
        .map(|v| match &v.data {
            Data::Memory(b) => b.as_slice().len(),
            Data::File(_) => 0,
        })
        .sum()
}

/// Whether the files kept open for large variants still have the size and
/// mtime they had when the entry was made.
fn open_files_unchanged(res: &Resource) -> bool {
    std::iter::once(&res.identity)
        .chain(res.encoded.iter().map(|(_, v)| v))
        .all(|v| match &v.data {
            Data::Memory(_) => true,
            Data::File(f) => sys::fstat(f).is_ok_and(|id| id == v.id),
        })
}

/// Whether every variant's path still names the same unchanged file, and no
/// sibling appeared.
fn still_valid(res: &Resource, root: &std::os::fd::OwnedFd) -> bool {
    if sys::stat_beneath(root, &res.rel).ok() != Some(res.identity.id) {
        return false;
    }
    if !res.precompressed {
        return true;
    }
    Encoding::ALL.iter().zip(&res.siblings_seen).all(|(&e, was)| {
        let now = sys::stat_beneath(root, &format!("{}{}", res.rel, e.suffix())).ok();
        now.filter(|id| id.is_file) == *was
    })
}

/// Opens `rel` and its siblings and builds the resource, keeping contents
/// of small files in memory while `room` (bytes) allows. A sibling older
/// than the file is not served (a warning says so, once). A text file with
/// no sibling gets compressed variants made on the fly when `compress`.
/// `Ok(None)`: the path is not a regular file.
#[allow(clippy::too_many_arguments)]
pub fn load(
    root: &std::os::fd::OwnedFd,
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
    let content_type = crate::mime::content_type(name);
    let mut encoded = Vec::new();
    let mut siblings_seen = [None; 3];
    if precompressed {
        for (e, seen) in Encoding::ALL.into_iter().zip(&mut siblings_seen) {
            let Ok(sibling) = sys::open_beneath(root, &format!("{rel}{}", e.suffix()), follow_symlinks) else {
                continue;
            };
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
    let mut pending = None;
    let wanted = compress
        && encoded.is_empty()
        && (crate::compress::COMPRESS_MIN_BYTES..=crate::compress::COMPRESS_ON_THE_FLY_BYTES_MAX).contains(&id.size)
        && crate::compress::compressible(&content_type);
    if wanted {
        match crate::compress::lookup(id, || file.try_clone().ok().map(Arc::new)) {
            Some(crate::compress::Lookup::Ready(v)) => generated = v,
            Some(crate::compress::Lookup::Pending(done)) => pending = Some(done),
            None => {}
        }
    }
    let negotiable = !encoded.is_empty() || !generated.is_empty() || pending.is_some();
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
        pending,
        negotiable,
        checked: std::cell::Cell::new(Instant::now()),
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
        let etag = if hashed {
            format_etag(bytes.len() as u64, xxhash_rust::xxh3::xxh3_64(&bytes))
        } else {
            identity_etag(id)
        };
        (Data::Memory(SharedBytes::new(Arc::new(bytes))), etag)
    } else {
        let etag = if hashed {
            etag_of_file(&file, id)?
        } else {
            identity_etag(id)
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
    let mut meta: Vec<(&str, &str)> = vec![("ETag", &etag), ("Last-Modified", &lm), ("Accept-Ranges", "bytes")];
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
        if !n.eq_ignore_ascii_case("cache-control") {
            meta.push((n, v));
        }
    }
    let mut with_type = vec![("Content-Type", content_type)];
    with_type.extend(meta.iter().copied());
    let mut not_modified: Vec<(&str, &str)> = vec![("ETag", &etag), ("Last-Modified", &lm)];
    if let Some(cc) = cache_control {
        not_modified.push(("Cache-Control", cc));
    }
    if negotiable {
        not_modified.push(("Vary", "Accept-Encoding"));
    }
    let block = |f: &[(&str, &str)]| HeaderBlock::new(f).map_err(io::Error::other);
    Ok(Variant {
        id,
        len,
        block_200: block(&with_type)?,
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

/// The tag of a file too large to hash on the request path:
/// `"SIZE-INODE-MTIME"` in hex (mtime in nanoseconds), as nginx's
/// `"MTIME-SIZE"` but with the inode. It costs no read: hashing 1 GiB from
/// the page cache held its worker for about 200 ms here, and every request
/// on that worker with it.
///
/// Strong, as nginx's: it changes whenever the identity the cache already
/// trusts to mean "unchanged" (`still_valid`) changes. The inode makes a
/// file replaced by rename get a new tag even when size and mtime are
/// kept, as deploys with a fixed mtime do (reproducible builds, Nix's
/// store); the price is that copies of a file on two machines get
/// different tags. Not caught, by this tag or by the cache: a file
/// rewritten in place to the same size with its mtime set back.
fn identity_etag(id: FileId) -> String {
    // The mtime as two's complement: a file dated before 1970 still gets
    // a tag, and a distinct one.
    format!("\"{:x}-{:x}-{:x}\"", id.size, id.ino, id.mtime_ns as u128)
}

/// The tag of a large file, hashed once per process per file identity.
fn etag_of_file(file: &File, id: FileId) -> io::Result<String> {
    static MEMO: OnceLock<Mutex<HashMap<FileId, String>>> = OnceLock::new();
    let memo = MEMO.get_or_init(Default::default);
    if let Some(tag) = memo.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
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
    let mut memo = memo.lock().unwrap_or_else(|e| e.into_inner());
    if memo.len() >= ETAGS_MAX {
        memo.clear();
    }
    memo.insert(id, tag.clone());
    Ok(tag)
}
