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
//!
//! With trusted keys ([`ServeOptions::trusted`]) validation includes the
//! signature (`sign.rs`): an unsigned archive, one signed by another key,
//! one changed after signing, or one older than the archive being served
//! (a lower deploy number) is refused, at open and at every swap.
//!
//! With `keep_previous`, the generation a swap replaces is kept for that
//! long (at most [`KEEP_PREVIOUS_MAX`] per server, [`PREVIOUS_BYTES_MAX`]
//! over the process) and answers, on the new generation's 404 path only
//! (`fall_back`), the content-hashed assets the new one lacks: a browser
//! that loaded the old HTML just before the swap still gets the scripts
//! it names.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use peregrine::{log, Beside, Body, BodyUse, FileRange, Handler, HeaderBlock, Reply, Request, Response};
use peregrine_files::auth::{self, AuthRule, Gate};
use peregrine_files::conventions::{self, RuleAnswer};
use peregrine_files::encoding::Encoding;
use peregrine_files::path;
use peregrine_files::proxy_rules::ProxyAllow;
use peregrine_files::reply::{self, Fields, Method};
use peregrine_files::scope::{self, Scope};

use crate::format::*;
use crate::read::{Archive, Entry, Invalid, Lookups, Mode, Variant};
use crate::sign::{PublicKey, Verified};

/// How often the watcher looks at the archive's path.
const WATCH_INTERVAL: Duration = Duration::from_millis(250);
/// After moving off a map, time for requests that had already looked at the
/// old generation to start sending large bodies from its file before the
/// writer may change it.
const SWITCH_GRACE: Duration = Duration::from_millis(100);

/// Previous generations a server keeps (`keep_previous`): the one a swap
/// just replaced and the one before it, for a client that loaded its HTML
/// two quick deploys ago. Each holds its file's disk space until released.
pub const KEEP_PREVIOUS_MAX: usize = 2;
/// Bytes of archives kept as previous generations, over every server of
/// the process: 1 GiB. A kept archive holds its file's disk space (a
/// replaced file is freed only when its generation is released) and, a
/// heap copy (`Mode::Heap`), its size in memory. A server makes room by
/// releasing its own oldest first; it never releases another's (one
/// site's swap leaves the other sites' fallbacks alone), so past the cap
/// the generation just replaced is not kept (said on the log).
pub const PREVIOUS_BYTES_MAX: u64 = 1 << 30;
/// What the kept generations of every server hold now.
static PREVIOUS_BYTES: AtomicU64 = AtomicU64::new(0);

/// How a server treats the archives it loads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServeOptions {
    /// How the bytes are held.
    pub mode: Mode,
    /// Keys trusted to sign archives. When any are given, every archive
    /// loaded, at open and at each swap, must carry a signature by one of
    /// them over all its bytes, and a deploy number no lower than the one
    /// served.
    pub trusted: Vec<PublicKey>,
    /// Accept a deploy number lower than the one served, or than
    /// `deploy_number_min`.
    pub allow_rollback: bool,
    /// The lowest deploy number accepted: at open, where no archive is
    /// being served to compare with.
    pub deploy_number_min: u64,
    /// Keep the generation a swap replaces for this long, answering what
    /// the new one lacks (`None`: released at once, the default: a deploy
    /// that removes a leaked file must remove it).
    pub keep_previous: Option<Duration>,
    /// With `keep_previous`: any path falls back, not only content-hashed
    /// (`is_content_hashed`) or `immutable` ones.
    pub keep_previous_all: bool,
    /// The operator's list for `_redirects` proxy rules, connected
    /// (`ProxyAllow::connect`): an archive holding a proxy rule it does
    /// not allow is refused at every load (open and swap), whatever list
    /// it was packed with. Default none.
    pub proxy_allow: Arc<ProxyAllow>,
}

impl ServeOptions {
    /// The defaults, holding the archive in `mode`.
    pub fn new(mode: Mode) -> ServeOptions {
        ServeOptions {
            mode,
            ..ServeOptions::default()
        }
    }

    /// Opens and validates the archive at `path` as a server with these
    /// options does at open (every byte hashed, the signature and deploy
    /// number checked), without serving it: what `check-config` asks.
    pub fn check(&self, path: &Path) -> Result<(Archive, Option<Verified>), Invalid> {
        load(path, self, None)
    }
}

struct Shared {
    id: u64,
    path: PathBuf,
    options: ServeOptions,
    state: Mutex<State>,
    /// One more at each change of `state`; a worker compares it with its
    /// view's (one relaxed load per request) and takes the state again
    /// when it moved.
    epoch: AtomicU64,
    generation: AtomicU64,
    /// Replacements refused (damaged, truncated, unreadable, unsigned,
    /// wrongly signed, rolled back).
    refused: AtomicU64,
    /// Requests a previous generation answered. Counted on the 404 path
    /// only, so a shared counter: no request that finds its path touches it.
    fallbacks: AtomicU64,
    reload: Arc<AtomicBool>,
}

/// What the watcher publishes to the workers.
struct State {
    current: Arc<Archive>,
    /// What `current`'s signature proved (with trusted keys).
    verified: Option<Verified>,
    /// Generations kept after their swap, newest first.
    previous: Vec<Kept>,
}

/// A generation kept after its swap, counted in `PREVIOUS_BYTES` until it
/// is dropped (released).
struct Kept {
    archive: Arc<Archive>,
    generation: u64,
    until: Instant,
    bytes: u64,
}

impl Kept {
    /// `archive` kept until `until`, if the process's kept bytes stay
    /// within `PREVIOUS_BYTES_MAX`.
    fn reserve(archive: Arc<Archive>, generation: u64, until: Instant) -> Result<Kept, Arc<Archive>> {
        let bytes = archive.len();
        let reserved = PREVIOUS_BYTES.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            held.checked_add(bytes).filter(|&total| total <= PREVIOUS_BYTES_MAX)
        });
        match reserved {
            Ok(_) => Ok(Kept {
                archive,
                generation,
                until,
                bytes,
            }),
            Err(_) => Err(archive),
        }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        PREVIOUS_BYTES.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn current(&self) -> Arc<Archive> {
        self.state().current.clone()
    }
}

/// Serves an archive. See the module documentation for the hot swap. A
/// clone serves the same archive (and swaps with it).
#[derive(Clone)]
pub struct ArchiveServer {
    shared: Arc<Shared>,
    /// What checks credentials for paths a `Basic-Auth` rule protects
    /// (`peregrine_files::auth`); without one they are answered 500.
    gate: Option<Arc<dyn Gate>>,
    /// Whether a previous generation may answer through this handle
    /// (`without_fallback`: not on a route with access rules).
    fallback: bool,
    /// The paths this handle's route of a site takes (`with_scope`): an
    /// entry that answers with a file of another name (a directory's
    /// index, a clean URL's page, a rewrite's target) outside them is
    /// refused. `None`: a site without routes.
    scope: Option<Arc<dyn Scope>>,
}

impl ArchiveServer {
    /// Opens and fully validates the archive, and starts watching its path.
    /// Installs no signal handler: a program that wants SIGHUP to reload
    /// the archive calls [`ArchiveServer::reload`] from its own handler.
    pub fn open(path: &Path, mode: Mode) -> Result<Self, Invalid> {
        ArchiveServer::open_with(path, ServeOptions::new(mode))
    }

    /// As [`ArchiveServer::open`], with `options` for every archive it
    /// loads (the signature required, previous generations kept).
    pub fn open_with(path: &Path, options: ServeOptions) -> Result<Self, Invalid> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let (archive, verified) = load(path, &options, None)?;
        let reload = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            path: path.to_owned(),
            options,
            state: Mutex::new(State {
                current: Arc::new(archive),
                verified,
                previous: Vec::new(),
            }),
            epoch: AtomicU64::new(0),
            generation: AtomicU64::new(1),
            refused: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            reload,
        });
        let weak = Arc::downgrade(&shared);
        let identity = identity(path);
        std::thread::Builder::new()
            .name("peregrine-archive-watch".into())
            .spawn(move || watch(weak, identity))
            .map_err(|e| Invalid(format!("cannot start the archive watcher: {e}")))?;
        Ok(ArchiveServer {
            shared,
            gate: None,
            fallback: true,
            scope: None,
        })
    }

    /// The same server (the same archive, swapped with it), asking `gate`
    /// about every request to a path a `Basic-Auth` rule of the archive
    /// being served protects.
    pub fn with_gate(mut self, gate: Arc<dyn Gate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// The same server, answering only with files whose paths `scope`
    /// covers: an entry that is another route's file under another name
    /// (a directory's `index.html`, a clean URL's `NAME.html`, a
    /// rewrite's target) is refused with 403 (`peregrine_files::scope`).
    /// For a handle that answers one route of a site.
    pub fn with_scope(mut self, scope: Arc<dyn Scope>) -> Self {
        self.scope = Some(scope);
        self
    }

    /// The `Basic-Auth` rules of the archive served now, by site: each
    /// rule's pattern, users, and whether some of its passwords were plain
    /// in `_headers` (for the warnings at start).
    pub fn protection(&self) -> Vec<(u32, AuthRule)> {
        let archive = self.shared.current();
        archive.all_auth_rules().map(|(site, r)| (site, r.clone())).collect()
    }

    /// The same server, whose previous generations never answer through
    /// this handle: for a route under access rules (addresses, rates,
    /// `basic-auth`), whose paths must not be answered by a generation
    /// that served them without.
    pub fn without_fallback(&self) -> ArchiveServer {
        ArchiveServer {
            fallback: false,
            ..self.clone()
        }
    }

    /// The generation being served: 1 at start, one more per swap.
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// Replacements refused so far (the old archive kept serving).
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::Acquire)
    }

    /// Requests a previous generation answered so far.
    pub fn fallbacks(&self) -> u64 {
        self.shared.fallbacks.load(Ordering::Relaxed)
    }

    /// The deploy number of the archive being served, when its signature
    /// was checked (trusted keys given).
    pub fn deploy_number(&self) -> Option<u64> {
        self.shared.state().verified.map(|v| v.deploy_number)
    }

    /// The bytes of the file stored at `path` (`/_50x.html`) for the
    /// archive's default site, as packed (not compressed), in the archive
    /// served now: for a page the server answers with outside the
    /// archive's own answers (the reverse proxy's error page).
    pub fn file_bytes(&self, path: &str) -> Option<Vec<u8>> {
        let archive = self.shared.current();
        let entry = archive.get(archive.default_site(), path.as_bytes())?;
        let identity = entry.variant(0)?;
        Some(archive.slice(identity.body_off, identity.body_len).to_vec())
    }

    /// The options it was opened with.
    pub fn options(&self) -> &ServeOptions {
        &self.shared.options
    }

    /// A handle on the same archive for reading its counters (for metrics)
    /// after the server itself has been given to the engine.
    pub fn counters(&self) -> ArchiveServer {
        self.clone()
    }

    /// Asks the watcher to load the archive again now, even if its file
    /// looks unchanged (what the command line does on SIGHUP).
    pub fn reload(&self) {
        self.shared.reload.store(true, Ordering::Release);
    }
}

/// Opens `path` and validates it whole under `options`: the data hash,
/// and with trusted keys the signature and the deploy number (against
/// `serving`'s, the archive being served, if any). Hashes the whole file
/// once: called at open and on the watcher thread, never on a worker.
fn load(
    path: &Path,
    options: &ServeOptions,
    serving: Option<&Verified>,
) -> Result<(Archive, Option<Verified>), Invalid> {
    let archive = Archive::open(path, options.mode)?;
    let at = |e: Invalid| Invalid(format!("{}: {e}", path.display()));
    proxy_rules_allowed(&archive, &options.proxy_allow).map_err(at)?;
    if options.trusted.is_empty() {
        archive.verify_data().map_err(at)?;
        return Ok((archive, None));
    }
    let verified = archive.verify_signed(&options.trusted).map_err(at)?;
    if !options.allow_rollback {
        rollback(&verified, serving, options.deploy_number_min).map_err(at)?;
    }
    Ok((archive, Some(verified)))
}

/// Refuses an archive with a `_redirects` proxy rule (status 200 to a
/// URL) that this server's list does not allow: the list that counts is
/// the operator's, not the packer's.
/// The rules (site, path, URL) when all are allowed: what `check-config`
/// lists.
pub fn proxy_rules_allowed(archive: &Archive, allow: &ProxyAllow) -> Result<Vec<(u32, String, String)>, Invalid> {
    let rules = archive.proxy_rules();
    for (site, path, to) in &rules {
        if let Some(why) = allow.refusal(to) {
            return Err(Invalid(format!(
                "site {site}: the _redirects rule {path} -> {to} (200): refused: {why}"
            )));
        }
    }
    Ok(rules)
}

/// Refuses a deploy number lower than the one served (or, at open, than
/// `min`), and the same number for another archive: a deploy number names
/// one archive, so reloading the same file (SIGHUP) is accepted and a
/// different file claiming it is not.
fn rollback(new: &Verified, serving: Option<&Verified>, min: u64) -> Result<(), Invalid> {
    let n = new.deploy_number;
    if n < min {
        return Err(Invalid(format!(
            "deploy number {n} is below {min}, the lowest accepted (deploy-number-min); allow-rollback \
             accepts it"
        )));
    }
    match serving {
        Some(s) if n < s.deploy_number => Err(Invalid(format!(
            "deploy number {n} is lower than {}, the one being served: a rollback, refused (allow-rollback \
             accepts it)",
            s.deploy_number
        ))),
        Some(s) if n == s.deploy_number && new.digest != s.digest => Err(Invalid(format!(
            "deploy number {n} is the one being served, but this is another archive: each new archive needs \
             a higher deploy number"
        ))),
        _ => Ok(()),
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
        release_previous(&shared);
        let current = shared.current();
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
        let serving = shared.state().verified;
        match load(&shared.path, &shared.options, serving.as_ref()) {
            Ok((archive, verified)) => publish(&shared, archive, verified),
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

/// Makes `archive` the current generation; with `keep_previous`, keeps
/// the one it replaces (unless it is the same archive, reloaded).
fn publish(shared: &Shared, archive: Archive, verified: Option<Verified>) {
    let archive = Arc::new(archive);
    let mut state = shared.state();
    let old = std::mem::replace(&mut state.current, archive.clone());
    state.verified = verified;
    let old_generation = shared.generation.load(Ordering::Acquire);
    let g = old_generation + 1;
    let kept = match shared.options.keep_previous {
        Some(grace) if old.header() != archive.header() => {
            keep(shared, &mut state.previous, old, old_generation, grace)
        }
        _ => None,
    };
    shared.generation.store(g, Ordering::Release);
    drop(state);
    shared.epoch.fetch_add(1, Ordering::Release);
    let path = shared.path.display();
    match kept {
        Some(grace) => log::info(format_args!(
            "{path} loaded as generation {g}; generation {old_generation} answers what it lacks for {} s",
            grace.as_secs_f64()
        )),
        None => log::info(format_args!("{path} loaded as generation {g}")),
    }
}

/// Puts `old` first among `previous` for `grace`, releasing this server's
/// oldest to stay within `KEEP_PREVIOUS_MAX` and `PREVIOUS_BYTES_MAX`.
/// `None` when the cap leaves no room even so.
fn keep(
    shared: &Shared,
    previous: &mut Vec<Kept>,
    old: Arc<Archive>,
    generation: u64,
    grace: Duration,
) -> Option<Duration> {
    let path = shared.path.display();
    while previous.len() >= KEEP_PREVIOUS_MAX {
        let released = previous.pop().expect("not empty");
        log::info(format_args!(
            "{path}: generation {} released (at most {KEEP_PREVIOUS_MAX} kept)",
            released.generation
        ));
    }
    let mut old = old;
    loop {
        match Kept::reserve(old, generation, Instant::now() + grace) {
            Ok(kept) => {
                previous.insert(0, kept);
                return Some(grace);
            }
            Err(back) => old = back,
        }
        let Some(released) = previous.pop() else {
            log::warn(format_args!(
                "{path}: generation {generation} ({} bytes) not kept: the previous generations kept would pass \
                 {PREVIOUS_BYTES_MAX} bytes",
                old.len()
            ));
            return None;
        };
        log::info(format_args!(
            "{path}: generation {} released early, to keep generation {generation} within {PREVIOUS_BYTES_MAX} \
             bytes",
            released.generation
        ));
    }
}

/// Releases the previous generations whose time is up, and any whose file
/// is being rewritten in place (moved off its map first, as the current
/// one would be: a response in flight may still read it).
fn release_previous(shared: &Shared) {
    let now = Instant::now();
    let mut state = shared.state();
    if state.previous.is_empty() {
        return;
    }
    let before = state.previous.len();
    let path = shared.path.display();
    state.previous.retain(|k| {
        if k.until <= now {
            log::info(format_args!("{path}: generation {} released", k.generation));
            return false;
        }
        if k.archive.lease_broken() {
            if let Err(e) = k.archive.detached() {
                log::error(format_args!("{path}: {e}"));
                return true; // tried again at the next look
            }
            if let Err(e) = k.archive.release_lease() {
                log::warn(format_args!(
                    "cannot release the lease on generation {}: {e}",
                    k.generation
                ));
            }
            log::warn(format_args!(
                "{path}: generation {} released early: its file is being rewritten in place",
                k.generation
            ));
            return false;
        }
        true
    });
    if state.previous.len() != before {
        drop(state);
        shared.epoch.fetch_add(1, Ordering::Release);
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
            shared.state().current = Arc::new(copy);
            let g = shared.generation.fetch_add(1, Ordering::AcqRel) + 1;
            shared.epoch.fetch_add(1, Ordering::Release);
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
    /// The server's `epoch` when this view was taken.
    epoch: u64,
    archive: Arc<Archive>,
    /// Variants this worker has prepared (header blocks parsed, entity tag
    /// formatted), by `entry * 4 + variant`: later hits cost a map lookup.
    prepared: PreparedByKey,
    /// Entries of `archive` found by the fast path's lookups, for the next
    /// request of the same path (`Archive::get_remembered`); cleared with
    /// `prepared` when the archive changes.
    lookups: Lookups,
    /// The previous generations kept, newest first (empty unless
    /// `keep_previous`).
    previous: Vec<Behind>,
}

/// A worker's view of a previous generation.
struct Behind {
    archive: Arc<Archive>,
    until: Instant,
    prepared: PreparedByKey,
}

impl Local {
    /// Takes the server's state again (it changed: a swap, a generation
    /// kept or released), keeping what was prepared for the archives that
    /// stay.
    fn refresh(&mut self, shared: &Shared) {
        let state = shared.state();
        if !Arc::ptr_eq(&self.archive, &state.current) {
            self.archive = state.current.clone();
            self.prepared.clear();
            self.lookups = Lookups::default();
        }
        let mut old = std::mem::take(&mut self.previous);
        self.previous = state
            .previous
            .iter()
            .map(|k| Behind {
                archive: k.archive.clone(),
                until: k.until,
                prepared: old
                    .iter_mut()
                    .find(|b| Arc::ptr_eq(&b.archive, &k.archive))
                    .map(|b| std::mem::take(&mut b.prepared))
                    .unwrap_or_default(),
            })
            .collect();
    }
}

/// Prepared variants by `entry * 4 + variant`: every one this worker
/// prepared in the map, the last ones asked for also in `recent`.
struct PreparedByKey {
    all: HashMap<u32, Rc<Prepared>, BuildHasherDefault<IndexHasher>>,
    /// A direct-mapped cache in front of `all`: slot `key % RECENT_SLOTS`
    /// holds the last variant of that slot looked up. A hit is a compare
    /// and a load, where the map's probe (hash, group match, key compare)
    /// cost about 30 instructions an archive answer.
    recent: [Option<(u32, Rc<Prepared>)>; RECENT_SLOTS],
}

/// Slots of `PreparedByKey::recent`: 16 entries' four variants each.
const RECENT_SLOTS: usize = 64;

impl Default for PreparedByKey {
    fn default() -> Self {
        PreparedByKey {
            all: HashMap::default(),
            recent: std::array::from_fn(|_| None),
        }
    }
}

impl PreparedByKey {
    #[inline]
    fn get(&mut self, key: u32) -> Option<&Rc<Prepared>> {
        let slot = key as usize % RECENT_SLOTS;
        if matches!(&self.recent[slot], Some((k, _)) if *k == key) {
            return self.recent[slot].as_ref().map(|(_, p)| p);
        }
        let p = self.all.get(&key)?;
        self.recent[slot] = Some((key, p.clone()));
        self.recent[slot].as_ref().map(|(_, p)| p)
    }

    /// The variant under `key` (`entry * 4 + variant`), prepared the
    /// first time. Borrowed from its `recent` slot, which a miss fills
    /// out of line: the hit is a compare and a load, with no `Rc` count.
    #[inline(always)]
    fn get_or_prepare(&mut self, key: u32, archive: &Archive, idx: usize) -> Option<&Prepared> {
        let slot = key as usize % RECENT_SLOTS;
        if !matches!(&self.recent[slot], Some((k, _)) if *k == key) && !self.fill(key, archive, idx) {
            return None;
        }
        self.recent[slot].as_ref().map(|(_, p)| &**p)
    }

    /// Puts the variant under `key` in its `recent` slot: from `all`, or
    /// prepared now. False if it cannot be sent (no such variant, or its
    /// heads are not header lines).
    #[cold]
    #[inline(never)]
    fn fill(&mut self, key: u32, archive: &Archive, idx: usize) -> bool {
        if let Some(p) = self.all.get(&key) {
            self.recent[key as usize % RECENT_SLOTS] = Some((key, p.clone()));
            return true;
        }
        let e = archive.entry(idx);
        match e.variant(key as usize % 4) {
            Some(v) => prepare_first(self, archive, &e, key, &v).is_some(),
            None => false,
        }
    }

    fn insert(&mut self, key: u32, p: Rc<Prepared>) {
        self.recent[key as usize % RECENT_SLOTS] = Some((key, p.clone()));
        self.all.insert(key, p);
    }

    fn clear(&mut self) {
        self.all.clear();
        self.recent = std::array::from_fn(|_| None);
    }
}

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
        let epoch = shared.epoch.load(Ordering::Relaxed);
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
                        epoch: u64::MAX,
                        archive: shared.current(),
                        prepared: PreparedByKey::default(),
                        lookups: Lookups::default(),
                        previous: Vec::new(),
                    }));
                    locals.push((shared.id, local.clone()));
                    local
                }
            }
        });
        let mut local = local.borrow_mut();
        if local.epoch != epoch {
            local.refresh(shared);
            local.epoch = epoch;
        }
        respond(&mut local, req, self)
    }
}

/// Answers `req`; a path a `Basic-Auth` rule protects goes to the gate
/// first, before anything is looked up (`peregrine_files::auth`), so that
/// its answer is the gate's whether or not an entry is there.
#[inline]
fn respond(local: &mut Local, req: &Request<'_>, server: &ArchiveServer) -> Reply {
    if local.archive.has_auth() {
        if let Some(reply) = guarded(local, req, server) {
            return reply;
        }
    }
    open(local, req, server, Some((req, &server.shared.options.proxy_allow)))
}

/// `respond` for an archive with `Basic-Auth` rules: the gate's answer
/// when one covers the path. Out of line and cold, so that the path of
/// every other archive's requests stays as it was (one inlined `open`;
/// with a second call of it here, inlined, an archive answer cost 8 %
/// more: bench/ab-cpu.sh pipe16).
#[cold]
#[inline(never)]
fn guarded(local: &mut Local, req: &Request<'_>, server: &ArchiveServer) -> Option<Reply> {
    let archive = &local.archive;
    let site = if archive.has_hosts() {
        archive.site_for_host(req.host())
    } else {
        archive.default_site()
    };
    // Matched on the normalised path: `/%61dmin/` is `/admin/`.
    let users = path::normalize(req.path().as_bytes())
        .ok()
        .and_then(|p| archive.auth_for(site, &p.key()).cloned())?;
    let Some(gate) = server.gate.as_deref() else {
        return Some(Reply::Now(auth::ungated()));
    };
    Some(
        gate.guard(req, &users, &mut || match open_outlined(local, req, server, None) {
            Reply::Now(response) => response,
            _ => Response::error(500),
        }),
    )
}

#[inline(never)]
fn open_outlined(local: &mut Local, req: &Request<'_>, server: &ArchiveServer, via: Via<'_, '_>) -> Reply {
    open(local, req, server, via)
}

/// What a proxy rule needs to send the request on: the request and the
/// operator's list. `None` under a `Basic-Auth` gate, which takes only an
/// answer made now (the rule answers 500: `conventions::gated_proxy_rule`).
type Via<'r, 'a> = Option<(&'r Request<'a>, &'r ProxyAllow)>;

/// Answers `req` from the archive, protected or not. `server` is looked
/// at only where nothing in the archive answers (a previous generation
/// may).
///
/// Inlined, up to the answer of a resource found at once for a request
/// without fields (most requests); every other request goes on in
/// `open_steps`, out of line, so that what only they read (the query,
/// the fields, the rules) is neither loaded nor kept in the frame of the
/// common one (callgrind archive-c50: the handler's spills of them).
#[inline(always)]
fn open(local: &mut Local, req: &Request<'_>, server: &ArchiveServer, via: Via<'_, '_>) -> Reply {
    let head = match reply::method(req) {
        Method::Get => false,
        Method::Head => true,
        Method::Answer(answer) => return Reply::Now(answer),
    };
    let archive = &*local.archive;
    // The Host field is looked at only by an archive that names hosts.
    let site = if archive.has_hosts() {
        archive.site_for_host(req.host())
    } else {
        archive.default_site()
    };
    // No field the steps read (the codec's note): no pass over the head,
    // and a resource found at once is answered by `answer_bare`.
    let bare = !req.may_carry(peregrine::FieldNames::ALL);
    // Fast path: the raw path is already the key (no escapes, no dots).
    // `found` for a resource is `answer` with 200, and `answer` for a
    // request without fields is `reply_plain`: `answer_bare`.
    let raw = req.path();
    let (plain, at_once) = if archive.has_forced_patterns() {
        // Every path goes through the `!` rules first; `plain` is not
        // asked.
        (false, None)
    } else if let Some((idx, kind)) = local.lookups.recall(site, raw.as_bytes()) {
        // The very path a lookup found before: only a path that is its
        // own key (`is_key`) is looked up here, so this one is.
        if kind == KIND_RESOURCE {
            // Remembered through any handle of this archive, another
            // site's or route's among them: a scoped handle checks a path
            // that may name a file of another name (a directory, a name
            // without an extension) before it answers.
            if let Some(scope) = server.scope.as_deref() {
                if may_be_renamed(raw) && is_elsewhere(scope, archive, site, raw) {
                    return Reply::Now(scope::crossing());
                }
            }
            if bare {
                return answer_bare(&mut local.prepared, archive, idx, 200);
            }
            return answer_fielded(&mut local.prepared, archive, idx, req, head);
        }
        (true, Some(idx))
    } else if path::is_key(raw)
        && server
            .scope
            .as_deref()
            .is_none_or(|s| !is_elsewhere(s, archive, site, raw))
    {
        // (A path whose file is another route's is never remembered: it
        // is refused in `open_steps` each time.)
        match archive.get_remembering(site, raw.as_bytes(), &mut local.lookups) {
            Some(e) if bare && e.kind() == KIND_RESOURCE => {
                return answer_bare(&mut local.prepared, archive, e.index(), 200);
            }
            e => (true, e.map(|e| e.index())),
        }
    } else {
        (false, None)
    };
    open_steps(local, req, server, via, head, site, bare, plain, at_once)
}

/// `found` for a resource recalled at once (`answer` with 200), for a
/// request with fields: out of line, beside the common answer, without
/// `open_steps`' entry (with it, a request with `Accept-Encoding` cost 19
/// instructions more than before `open_steps` was cut out: callgrind
/// c50, GET / of the bundled site, `-H "accept-encoding: gzip, br"`).
#[inline(never)]
fn answer_fielded(prepared: &mut PreparedByKey, archive: &Archive, idx: usize, req: &Request<'_>, head: bool) -> Reply {
    let fields = Fields::scan(req);
    answer(prepared, archive, archive.entry(idx), &fields, head, 200, req.query())
}

/// The rest of `open`: `at_once` is the entry the fast path found for the
/// raw path (`plain`: it is its own key), if it found one.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn open_steps(
    local: &mut Local,
    req: &Request<'_>,
    server: &ArchiveServer,
    via: Via<'_, '_>,
    head: bool,
    site: u32,
    bare: bool,
    plain: bool,
    at_once: Option<usize>,
) -> Reply {
    let Local {
        archive,
        prepared,
        previous,
        ..
    } = local;
    let archive = &**archive;
    let scope = server.scope.as_deref();
    let fields = if bare { Fields::default() } else { Fields::scan(req) };
    let query = req.query();
    let forced = archive.has_forced_patterns();
    let raw = req.path();
    if let Some(idx) = at_once {
        let e = archive.entry(idx);
        return found(prepared, archive, site, e, raw, &fields, head, query, via, scope);
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
            via,
            scope,
        ) {
            return reply;
        }
    }
    if let Some(e) = e {
        if let Some(scope) = scope {
            if e.kind() == KIND_RESOURCE && is_elsewhere(scope, archive, site, &key) {
                return Reply::Now(scope::crossing());
            }
        }
        return found(prepared, archive, site, e, &key, &fields, head, query, via, scope);
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
        via,
        scope,
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
    // Nothing in this generation answers: a previous one may.
    if !previous.is_empty() {
        if let Some(reply) = fall_back(previous, server, archive, site, &key, req, &fields, head, query) {
            return reply;
        }
    }
    not_found(prepared, archive, site, &key, &fields, head, query)
}

/// The answer of a previous generation for `key`, which the current one
/// (`current`) does not have: no entry, no rule, no wildcard, so its
/// answer would be its 404. Only from a generation that answered `key`
/// itself with 200 (a resource at that very key, not a rule's, a
/// wildcard's or a 404 page's, and no `!` rule shadowing it there), only
/// a content-hashed or `immutable` one (unless `keep_previous_all`), never
/// a path the current generation, or one newer than the one that has it,
/// revoked, never a path a `Basic-Auth` rule of the current generation or
/// of any previous one looked at protects (a protected page must not be
/// answered by a generation that would serve it without the password, nor
/// a page that was protected by one that lost its rule), and never through
/// a handle `without_fallback`. Off the path of every request that finds
/// its path.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn fall_back(
    previous: &mut [Behind],
    server: &ArchiveServer,
    current: &Archive,
    site: u32,
    key: &str,
    req: &Request<'_>,
    f: &Fields<'_>,
    head: bool,
    query: Option<&str>,
) -> Option<Reply> {
    if !server.fallback || current.is_revoked(site, key) || current.auth_for(site, key).is_some() {
        return None;
    }
    let all = server.shared.options.keep_previous_all;
    let now = Instant::now();
    for behind in previous.iter_mut() {
        // Newest first, and an older one's time ends sooner.
        if behind.until <= now {
            return None;
        }
        let a = &*behind.archive;
        let site = if a.has_hosts() {
            a.site_for_host(req.host())
        } else {
            a.default_site()
        };
        if a.auth_for(site, key).is_some() {
            return None;
        }
        let Some(e) = answered_itself(a, site, key, query) else {
            if a.is_revoked(site, key) {
                return None;
            }
            continue;
        };
        if !all && !is_content_hashed(key) && !is_immutable(a, &e) {
            return None;
        }
        server.shared.fallbacks.fetch_add(1, Ordering::Relaxed);
        return Some(answer(&mut behind.prepared, a, e, f, head, 200, query));
    }
    None
}

/// The resource `a` answers `key` with, with 200, from its own entry: not
/// a not-found page, and not shadowed by a `_redirects` rule with `!`.
fn answered_itself<'a>(a: &'a Archive, site: u32, key: &str, query: Option<&str>) -> Option<Entry<'a>> {
    let e = a.get(site, key.as_bytes())?;
    if e.kind() != KIND_RESOURCE || e.flags() & FLAG_NOT_FOUND != 0 {
        return None;
    }
    let shadowed = a.forced_patterns(site).any(|rule| {
        let text = String::from_utf8_lossy(rule.path());
        let (from, conds) = conventions::split_rule_text(&text);
        peregrine::pattern::Pattern::parse(from)
            .is_ok_and(|p| conventions::rule_captures(&p, &conds, key, query).is_some())
    });
    (!shadowed).then_some(e)
}

/// Whether the entry's stored `Cache-Control` says `immutable`.
fn is_immutable(a: &Archive, e: &Entry<'_>) -> bool {
    let Some(v) = e.variant(0) else { return false };
    let head = a.slice(v.head_off, u64::from(v.head_len));
    head.split(|&b| b == b'\n').any(|line| {
        let line = String::from_utf8_lossy(line);
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("cache-control")
                && value.split(',').any(|d| d.trim().eq_ignore_ascii_case("immutable"))
        })
    })
}

/// Whether `path` names a content-hashed asset, whose name changes with
/// its bytes, as bundlers write them: `app.3f2a9c1b.js` (webpack, Parcel),
/// `index-D2sCh2pS.js` (Vite, Rollup), `framework-2c79e2a64abdb08b.js`
/// (Next.js). The file name is split at `.` and its last piece (the
/// extension) left out; a candidate is a piece other than the first, the
/// first only when it is hex (`3f2a9c1b.js`), and what follows the first
/// `-` of any piece. A candidate is a hash when it has 8 to 64 characters
/// and is either lowercase hex with at least one digit and one letter, or
/// base64url (`A-Z a-z 0-9 - _`) with at least one digit, one capital and
/// one small letter. So the names people give files are not taken for
/// hashes (`report-2024.pdf`, `chapter10.html`, `IMG-20240115-WA0001.jpg`,
/// `deadbeef.txt`); a hash that does not look like one (all digits, one
/// case) is not either: such assets fall back only when `immutable` (a
/// `_headers` rule for their folder) or with `keep_previous_all`.
pub fn is_content_hashed(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or("");
    let mut pieces: Vec<&str> = name.split('.').collect();
    if pieces.len() > 1 {
        pieces.pop();
    }
    pieces.iter().enumerate().any(|(i, piece)| {
        (if i == 0 { is_hex_hash(piece) } else { is_hash(piece) })
            || piece.split_once('-').is_some_and(|(_, tail)| is_hash(tail))
    })
}

fn is_hash(s: &str) -> bool {
    is_hex_hash(s) || is_base64_hash(s)
}

fn is_hex_hash(s: &str) -> bool {
    (8..=64).contains(&s.len())
        && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        && s.bytes().any(|b| b.is_ascii_digit())
        && s.bytes().any(|b| b.is_ascii_lowercase())
}

fn is_base64_hash(s: &str) -> bool {
    (8..=64).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && s.bytes().any(|b| b.is_ascii_digit())
        && s.bytes().any(|b| b.is_ascii_uppercase())
        && s.bytes().any(|b| b.is_ascii_lowercase())
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
#[inline(always)]
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
    via: Via<'_, '_>,
    scope: Option<&dyn Scope>,
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
            via,
            scope,
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
    via: Via<'_, '_>,
    scope: Option<&dyn Scope>,
) -> Option<Reply> {
    for e in rules {
        let text = String::from_utf8_lossy(e.path());
        let (from, conds) = conventions::split_rule_text(&text);
        let Ok(pattern) = peregrine::pattern::Pattern::parse(from) else {
            continue;
        };
        if let Some(caps) = conventions::rule_captures(&pattern, &conds, key, query) {
            let to = conventions::substitute_rule(e.status(), &String::from_utf8_lossy(e.location()), &caps);
            let answer = RuleAnswer::new(e.status(), to);
            return Some(rule(prepared, archive, site, answer, key, f, head, query, via, scope));
        }
    }
    None
}

/// What a `_redirects` rule answers (as `serve DIR`'s `rule_answer`): a
/// redirect, a 400 for a target leaving the site, the request proxied (a
/// proxy rule, checked against the operator's list at load), or the resource its
/// target names served with 200 (rewrite) or 404, following clean URLs'
/// canonical redirect once (the target may name `about.html`, stored as
/// `/about`); a target that names none gets `key`'s not-found page. A
/// target another route of the site takes (`scope`: its own path, its
/// index or clean page) is refused with 403, its route's rules not asked;
/// a 404 rule's page there is left out as if it named none.
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
    via: Via<'_, '_>,
    scope: Option<&dyn Scope>,
) -> Reply {
    let (target, status) = match answer_of {
        RuleAnswer::Redirect(status, to) => return Reply::Now(redirect(status, &to)),
        RuleAnswer::Refused => return Reply::Now(conventions::refused_target()),
        RuleAnswer::Proxy(url) => {
            return match via {
                Some((req, allow)) => allow.forward(req, &url),
                None => Reply::Now(conventions::gated_proxy_rule(&url)),
            }
        }
        RuleAnswer::Rewrite(target) => (target, 200),
        RuleAnswer::NotFound(target) => (target, 404),
    };
    let lookup = |at: &[u8]| {
        let key = path::normalize(at).ok()?.key();
        let elsewhere = scope.is_some_and(|s| !s.covers(&key) || is_elsewhere(s, archive, site, &key));
        Some((archive.get(site, key.as_bytes()), elsewhere))
    };
    let (mut e, mut elsewhere) = lookup(target.as_bytes()).unwrap_or((None, false));
    if let Some(canonical) = e.filter(|e| e.kind() == KIND_REDIRECT && e.flags() & FLAG_CANONICAL != 0) {
        (e, elsewhere) = lookup(canonical.location()).unwrap_or((None, elsewhere));
    }
    match e.filter(|e| e.kind() == KIND_RESOURCE) {
        _ if elsewhere && status == 200 => Reply::Now(scope::crossing()),
        Some(e) if !elsewhere => answer(prepared, archive, e, f, head, status, query),
        _ => not_found(prepared, archive, site, key, f, head, query),
    }
}

/// Whether a resource's key may answer with a file of another name: a
/// directory's (`/docs/`) or a name without an extension (`/about`), as
/// `pack` stores index files and clean URLs' pages. Others (`/app.css`)
/// are their own files, and need no look at the routes.
#[inline]
fn may_be_renamed(key: &str) -> bool {
    let name = &key[key.rfind('/').map_or(0, |i| i + 1)..];
    !name.contains('.')
}

/// Whether the resource at `key` (its own key, normalised) answers with a
/// file another route of the site takes: `key` is a directory's
/// (`/docs/`: its `index.html`, as `pack` stores it), or a clean URL's
/// (`/about`: `/about.html` redirects to it, or holds the same bytes).
/// Off every remembered path: asked before a path is remembered, and
/// only by a handle with a scope.
#[cold]
#[inline(never)]
fn is_elsewhere(scope: &dyn Scope, archive: &Archive, site: u32, key: &str) -> bool {
    if key.ends_with('/') {
        return !scope.covers(&format!("{key}index.html"));
    }
    let page = format!("{key}.html");
    let Some(html) = archive.get(site, page.as_bytes()) else {
        return false;
    };
    let canonical = html.kind() == KIND_REDIRECT && html.flags() & FLAG_CANONICAL != 0;
    let same = || {
        let body = |e: &Entry<'_>| e.variant(0).map(|v| v.body_hash);
        html.kind() == KIND_RESOURCE
            && archive
                .get(site, key.as_bytes())
                .is_some_and(|e| body(&e) == body(&html))
    };
    (canonical || same()) && !scope.covers(&page)
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
    if f.is_empty() {
        // Identity whole: the codings are not looked at.
        let mut res = Stored {
            prepared,
            archive,
            e,
            codings: [Encoding::Brotli; 3],
            n_codings: 0,
        };
        return Reply::Now(reply::reply_plain(&mut res, status));
    }
    let mut codings = [Encoding::Brotli; 3];
    let mut n_codings = 0;
    for (i, c) in CODINGS.iter().enumerate() {
        if e.has_variant(i + 1) {
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

/// [`answer`] for a resource asked for by a request that carries none of
/// the fields the steps read (the parse's field-name bits say so): what
/// `reply::reply_plain` gives, identity's whole answer as `status`, built
/// from the prepared variant where it lies. No `Fields` is made or
/// tested, no `Rc` count taken, no `StoredVariant` moved, and the answer
/// is built in the caller's return slot.
#[inline(always)]
fn answer_bare(prepared: &mut PreparedByKey, archive: &Archive, idx: usize, status: u16) -> Reply {
    #[cfg(feature = "test-hooks")]
    test_hooks::stop_here(archive.entry(idx).path());
    let Ok(key) = u32::try_from(idx * 4) else {
        return Reply::Now(Response::error(500));
    };
    let Some(p) = prepared.get_or_prepare(key, archive, idx) else {
        return Reply::Now(Response::error(500));
    };
    match &p.beside {
        Some(pair) => Reply::Now(Response::beside(status, pair)),
        None => Reply::Now(whole_elsewhere(p, archive, status)),
    }
}

/// A prepared variant's whole answer when its body is not sent beside its
/// block: from the archive's file (over `MAP_BODY_BYTES_MAX`), or a range
/// outside the map (never, after validation: a 500), as
/// `StoredVariant::whole` answers.
#[cold]
#[inline(never)]
fn whole_elsewhere(p: &Prepared, archive: &Archive, status: u16) -> Response {
    match archive.body_file() {
        Some(file) if p.body.len() as u64 > MAP_BODY_BYTES_MAX => {
            let body = FileRange::new(file.clone(), p.body.start as u64, p.body.len() as u64);
            Response::prepared(status, p.block.clone(), Body::File(body))
        }
        _ => Response::prepared_beside(status, p.block.clone(), p.body.clone()),
    }
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

    #[inline(always)]
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
            last_modified: self.e.last_modified(),
        })
    }
}

/// A variant of an entry, prepared for sending.
struct StoredVariant<'a> {
    archive: &'a Archive,
    v: Variant,
    prepared: Rc<Prepared>,
    /// `Last-Modified` in seconds since the epoch, made a `SystemTime`
    /// only when a precondition or `If-Range` asks (most answers never).
    last_modified: u64,
}

impl reply::Representation for StoredVariant<'_> {
    fn len(&self) -> u64 {
        self.v.body_len
    }
    fn etag(&self) -> &str {
        &self.prepared.etag
    }
    fn last_modified(&self) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + Duration::from_secs(self.last_modified)
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
    #[inline(always)]
    fn whole(&self, status: u16) -> Response {
        if let Some(pair) = &self.prepared.beside {
            return Response::beside(status, pair);
        }
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
    /// Where the body lies in the archive's bytes.
    body: std::ops::Range<usize>,
    /// `block` and the body, checked to lie in one buffer (the map), for
    /// `Response::beside`; `None` for a body sent from the archive's file
    /// (over `MAP_BODY_BYTES_MAX`, when there is one).
    beside: Option<Beside>,
}

/// The first time this worker sends a variant: turns the stored heads into
/// header blocks and keeps them. `None`: the heads are not header lines
/// (logged; answered 500, never sent).
///
/// The body is not hashed here. Every generation this server publishes was
/// opened with its whole data region checked against `data_hash`
/// ([`ArchiveServer::open_with`] and the watcher both go through `load`), and
/// the bytes cannot change after that: a map is of a file we hold a read
/// lease on (a writer waits while we detach it into a copy in memory,
/// `map.rs`), and a copy is ours. Hashing each body again at its first send on each
/// worker only re-read bytes already proven, on the event loop, one whole
/// body per worker and variant (FORMAT.md, "What a reader may assume after
/// validation").
///
/// The lookup is inlined into the answer; the first preparation is out of
/// line (a call of `prepare` whole cost 15 instructions of entry and exit
/// on every answer).
#[inline(always)]
fn prepare(
    prepared: &mut PreparedByKey,
    archive: &Archive,
    e: &Entry<'_>,
    vi: usize,
    v: &Variant,
) -> Option<Rc<Prepared>> {
    let key = u32::try_from(e.index() * 4 + vi).ok()?;
    if let Some(p) = prepared.get(key) {
        return Some(p.clone());
    }
    prepare_first(prepared, archive, e, key, v)
}

#[cold]
#[inline(never)]
fn prepare_first(
    prepared: &mut PreparedByKey,
    archive: &Archive,
    e: &Entry<'_>,
    key: u32,
    v: &Variant,
) -> Option<Rc<Prepared>> {
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
    let body = v.body_off as usize..(v.body_off + v.body_len) as usize;
    let beside = if v.body_len > MAP_BODY_BYTES_MAX && archive.body_file().is_some() {
        None
    } else {
        Beside::new(block.clone(), body.clone())
    };
    let p = Rc::new(Prepared {
        block,
        meta,
        content_type,
        block_304,
        etag: etag(v.body_len, v.body_hash),
        body,
        beside,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared_tagged(etag: &str) -> Rc<Prepared> {
        let block = HeaderBlock::new(&[("Content-Type", "text/plain")]).unwrap();
        Rc::new(Prepared {
            block: block.clone(),
            meta: block.clone(),
            content_type: "text/plain".into(),
            block_304: block,
            etag: etag.into(),
            body: 0..0,
            beside: None,
        })
    }

    #[test]
    fn prepared_keys_sharing_a_recent_slot_each_find_their_own() {
        let mut prepared = PreparedByKey::default();
        let (a, b) = (5, 5 + RECENT_SLOTS as u32);
        prepared.insert(a, prepared_tagged("a"));
        prepared.insert(b, prepared_tagged("b"));
        // `b` took the slot; `a` comes from the map, then `b` again.
        for _ in 0..2 {
            assert_eq!(prepared.get(a).map(|p| p.etag.clone()).as_deref(), Some("a"));
            assert_eq!(prepared.get(b).map(|p| p.etag.clone()).as_deref(), Some("b"));
        }
        assert!(prepared.get(5 + 2 * RECENT_SLOTS as u32).is_none());
        prepared.clear();
        assert!(prepared.get(a).is_none() && prepared.get(b).is_none());
    }

    #[test]
    fn content_hashed_names_are_told_from_names_people_give() {
        for path in [
            "/app.3f2a9c1b.js",
            "/app.111aaaa1.js",
            "/assets/index-D2sCh2pS.js",
            "/assets/index-CkD-e9h_.css",
            "/_next/static/chunks/framework-2c79e2a64abdb08b.js",
            "/3f2a9c1b.js",
            "/main.3f2a9c1b.chunk.js",
            "/font.a1b2c3d4e5f60718293a4b5c6d7e8f90.woff2",
        ] {
            assert!(is_content_hashed(path), "{path}");
        }
        for path in [
            "/index.html",
            "/app.js",
            "/report-2024.pdf",
            "/chapter10.html",
            "/IMG-20240115-WA0001.jpg",
            "/deadbeef.txt",
            "/20240115.log",
            "/jquery-3.6.0.min.js",
            "/icon-1024x1024.png",
            "/Report2023.pdf",
            "/app.3f2a9c1.js",
            "/leak.txt",
            "/",
            "/assets/",
        ] {
            assert!(!is_content_hashed(path), "{path}");
        }
    }

    fn verified(deploy_number: u64, digest: u8) -> Verified {
        Verified {
            key_id: crate::sign::KeyId([0; 8]),
            created: 0,
            deploy_number,
            digest: [digest; 32],
        }
    }

    #[test]
    fn a_lower_deploy_number_is_a_rollback_and_an_equal_one_must_be_the_same_archive() {
        let serving = verified(5, 1);
        assert!(rollback(&verified(6, 2), Some(&serving), 0).is_ok());
        assert!(
            rollback(&verified(5, 1), Some(&serving), 0).is_ok(),
            "the same archive, reloaded"
        );
        let why = rollback(&verified(5, 2), Some(&serving), 0).unwrap_err().0;
        assert!(
            why.contains("is the one being served, but this is another archive"),
            "{why}"
        );
        let why = rollback(&verified(4, 2), Some(&serving), 0).unwrap_err().0;
        assert!(
            why.starts_with("deploy number 4 is lower than 5, the one being served"),
            "{why}"
        );
        // At open, nothing is served: the floor.
        assert!(rollback(&verified(4, 2), None, 4).is_ok());
        let why = rollback(&verified(3, 2), None, 4).unwrap_err().0;
        assert!(why.starts_with("deploy number 3 is below 4"), "{why}");
    }

    #[test]
    fn kept_generations_stay_within_the_process_cap() {
        let a = Arc::new(Archive::from_bytes(tiny()).unwrap());
        let len = a.len();
        let until = Instant::now();
        let held = PREVIOUS_BYTES.load(Ordering::Acquire);
        let kept = Kept::reserve(a.clone(), 1, until).ok().unwrap();
        assert_eq!(PREVIOUS_BYTES.load(Ordering::Acquire), held + len);
        drop(kept);
        assert_eq!(PREVIOUS_BYTES.load(Ordering::Acquire), held);
        // Within `len` of the cap, one more is refused.
        PREVIOUS_BYTES.fetch_add(PREVIOUS_BYTES_MAX - held - len + 1, Ordering::AcqRel);
        assert!(Kept::reserve(a, 2, until).is_err());
        PREVIOUS_BYTES.fetch_sub(PREVIOUS_BYTES_MAX - held - len + 1, Ordering::AcqRel);
    }

    /// An archive with one page, as bytes.
    fn tiny() -> Vec<u8> {
        let t = test_support::Scratch::new("serve-tiny");
        let path = t.path("a.prg");
        let mut w = crate::write::Writer::new(std::fs::File::create(&path).unwrap()).unwrap();
        let v = crate::write::VariantIn {
            body: b"hi",
            head_200: b"Content-Type: text/plain\r\n",
            head_304: b"",
        };
        w.add_resource(0, "/a.txt", 0, 0, [Some(v), None, None, None]).unwrap();
        w.finish().unwrap();
        std::fs::read(&path).unwrap()
    }
}
