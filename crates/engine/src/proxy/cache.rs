//! A response cache for proxied answers (RFC 9111, a shared cache; RFC
//! 5861's `stale-while-revalidate` and `stale-if-error`), per worker like
//! the upstream pools: nothing shared between threads but the settings,
//! the counters and the purge requests.
//!
//! Off unless a route is given one ([`Proxy::cache`](super::Proxy::cache)).
//! What is stored (RFC 9111 §3, nginx's `proxy_cache` where the RFC lets a
//! cache choose):
//! - answers to GET only, with status 200, 203, 204, 300, 301, 308, 404,
//!   405, 410, 414 or 501 (§15.1 of RFC 9110: cacheable by default), made
//!   explicitly fresh by `s-maxage`, `max-age` or `Expires` (no heuristic
//!   freshness, as nginx uses none), and still fresh on arrival;
//! - never an answer with `no-store`, `private`, `no-cache` (this cache
//!   does not revalidate), `Vary: *`, `Set-Cookie` (nginx's default) or
//!   trailer fields; never one to a request with `Authorization` or
//!   `Cookie`, or behind a forward-auth check, unless it says `public`;
//! - with a body of at most [`Cache::entry_bytes_max`] (1 MiB, or an
//!   eighth of the cache), read whole as it is relayed; a longer answer,
//!   or one whose length is only known at the connection's close, passes
//!   through and is not stored.
//!
//! The key is the scheme, the normalised Host (lower case, no trailing
//! dot, no default port: the Host decides the site, so it names the site
//! too), GET and HEAD as one class, and the path and query as the client
//! sent them (or the target a `_redirects` rule made): a key more
//! precise than the upstream's request, never less. An entry keeps the
//! request's values of the fields its `Vary` names (the answer's own
//! `Vary`, or the `Vary: Accept-Encoding` compression adds, so a
//! compressed and an identity answer are two variants and never cross);
//! a request gets an entry only when its values are the same (white
//! space around commas aside; none at all in the `Accept*` fields).
//!
//! A hit is a pre-built answer: the stored fields with `Age` (§5.1; made
//! again when the age changes, at most once a second per entry) and the
//! body, a shared range of the entry's buffer: no allocation. `Date` is
//! written by the engine as for any answer. A HEAD is answered from
//! its GET's entry. A request with `Authorization` or `Cookie` is answered
//! only from a `public` entry. A miss answered whole (its body read in
//! one piece, at most 64 KiB) gets the same 304 or 206 from the entry
//! it made; a longer one streams to its client as the 200 it is. The client's own `Cache-Control` (`no-cache`,
//! `max-age=0`) is ignored, as nginx ignores it: otherwise any client
//! could send every request to the upstream.
//!
//! Forward-auth (`auth.rs`): who the client is, the service decides
//! (an API key, its address, the fields the check copies onto the
//! upstream request), and the request's own fields do not show it. Such
//! a request is looked up only once the check let it through, its Vary
//! values those of the request as the upstream gets it, and answered
//! only from a `public` entry ([`granted`]): one user's answer never
//! reaches another unless the upstream said it may.
//!
//! A miss that may be stored for any client asks the upstream for the
//! whole answer ([`MISS_SKIPPED`] left out, as nginx does), and the
//! client's conditional or range is answered from the entry
//! (`Fill::finish`). A non-error answer to an unsafe method removes its
//! target's entries, every variant ([`invalidation`], RFC 9111 §4.4).
//!
//! Collapsing (nginx's `proxy_cache_lock`): the first miss of a key goes
//! upstream; the worker's next misses of that key (at most
//! [`WAITERS_MAX`]) wait for its answer, then are answered from the entry,
//! or, when it was not stored, sent upstream themselves. They wait at most
//! [`LOCK_TIMEOUT`] (checked at each turn of the loop; the first request's
//! own deadlines end its wait sooner).
//!
//! Stale answers (RFC 5861, and never past `must-revalidate`): within
//! `stale-while-revalidate` the first request goes upstream to refresh the
//! entry while the others get the stale one (nginx's `proxy_cache_use_stale
//! updating`: the refreshing client waits; no request is made without a
//! client); within `stale-if-error`, a request whose upstream fails (no
//! connection, a timeout, a 500, 502, 503 or 504) gets the stale one.
//!
//! Memory: each worker holds at most [`Cache::bytes_max`] of entries
//! (fields, body, key and the Vary values, plus a fixed overhead each),
//! the least recently used going first, and at most as much again in
//! answers being read into the cache; so a route's cache adds
//! `2 x bytes_max x workers` to the process's worst case.
//! Per worker means a key may miss once per worker (N workers: up to N
//! requests upstream for it, and N copies).
//!
//! Purge: [`Cache::purge`] (all) and [`Cache::purge_matching`] (a host,
//! a path prefix), or [`purge_all`] for every cache of the process (the
//! CLI's `POST /purge` on the metrics listener); each worker applies them
//! at its next lookup.

pub(crate) mod control;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use slab::Slab;

use super::Job;
use crate::codec::client::ResponseHead;
use crate::codec::head::{list_elements, trim_ows};
use crate::request::Request;
use crate::response::{HeaderBlock, Response, SharedBytes};

/// An entry's body at most, whatever the cache's size: nginx's buffers
/// hold a proxied answer in memory up to about this, and one entry
/// should never be a large share of a worker's cache.
pub const ENTRY_BYTES_MAX: usize = 1024 * 1024;

/// Requests of one key a worker holds while the first is upstream.
pub const WAITERS_MAX: usize = 64;

/// The longest a request waits for another's answer (nginx's
/// `proxy_cache_lock_timeout` default): then it goes upstream itself.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// Variants kept of one key (different values of its `Vary` fields): the
/// oldest goes past this, so a client sending random values cannot make
/// one lookup a long scan.
const VARIANTS_MAX: usize = 16;

/// What an entry costs beyond its bytes (the slab slot, the index's
/// vector slot, the allocations' headers), counted in the bound.
const ENTRY_OVERHEAD: usize = 256;

/// Purges remembered for workers that have not applied them yet; one
/// further behind purges all it holds.
const PURGES_KEPT: usize = 64;

/// RFC 9111 §3's cacheable-by-default statuses (RFC 9110 §15.1).
const STATUSES: [u16; 11] = [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501];

/// A route's response cache (the settings; each worker has its own
/// entries). Clone it freely.
///
/// ```
/// use peregrine::proxy::{Cache, Proxy, Upstream};
/// let api = Proxy::new(Upstream::parse("http://127.0.0.1:9000").unwrap())
///     .cache(Cache::new(64 * 1024 * 1024));
/// assert_eq!(api.cached().unwrap().bytes_max(), 64 * 1024 * 1024);
/// ```
#[derive(Clone, Debug)]
pub struct Cache {
    shared: Arc<Shared>,
}

struct Shared {
    id: u64,
    bytes_max: usize,
    entry_bytes_max: usize,
    /// Purges asked for: the count so far, and the last few.
    purges: Mutex<(u64, Vec<(u64, Purge)>)>,
    purge_count: AtomicU64,
    /// Each worker's counters, added as it makes its store.
    counts: Mutex<Vec<Arc<Counts>>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache").field("bytes_max", &self.bytes_max).finish()
    }
}

/// What a purge removes.
#[derive(Clone, Debug, Default)]
struct Purge {
    /// Only entries of this (normalised) host.
    host: Option<Box<[u8]>>,
    /// Only entries whose path begins so.
    path_prefix: Option<Box<[u8]>>,
}

/// A worker's counters: written by that worker only (a load and a
/// store, as `metrics::Counter`), summed at a scrape.
#[derive(Default)]
struct Counts {
    hit: AtomicU64,
    miss: AtomicU64,
    stale: AtomicU64,
    bypass: AtomicU64,
    collapsed: AtomicU64,
    evicted: AtomicU64,
    entries: AtomicU64,
    bytes: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}

/// The cache's counters, summed over the workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Requests answered from a fresh entry (a waiter's included).
    pub hits: u64,
    /// Requests sent upstream that the cache could have answered had it
    /// held the key (HEAD's included, which are not stored).
    pub misses: u64,
    /// Requests answered from a stale entry (`stale-while-revalidate`;
    /// `stale-if-error`'s, which were counted as misses first).
    pub stale: u64,
    /// Requests with `Authorization` or `Cookie` sent upstream past a
    /// non-`public` entry or none.
    pub bypasses: u64,
    /// Requests that waited for another's answer (then counted as a hit
    /// or a miss too).
    pub collapsed: u64,
    /// Entries removed to make room.
    pub evicted: u64,
    /// Entries held now.
    pub entries: u64,
    /// Their bytes, as the bound counts them.
    pub bytes: u64,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Every cache made, for [`purge_all`].
static CACHES: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

impl Cache {
    /// A cache of at most `bytes_max` bytes per worker (at least 64 KiB).
    pub fn new(bytes_max: usize) -> Cache {
        let bytes_max = bytes_max.max(64 * 1024);
        let shared = Arc::new(Shared {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            bytes_max,
            entry_bytes_max: ENTRY_BYTES_MAX.min(bytes_max / 8),
            purges: Mutex::new((0, Vec::new())),
            purge_count: AtomicU64::new(0),
            counts: Mutex::new(Vec::new()),
        });
        let mut all = CACHES.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&shared));
        Cache { shared }
    }

    /// The bound on each worker's entries, in bytes.
    pub fn bytes_max(&self) -> usize {
        self.shared.bytes_max
    }

    /// The longest body stored: [`ENTRY_BYTES_MAX`] or an eighth of
    /// [`Cache::bytes_max`], the smaller.
    pub fn entry_bytes_max(&self) -> usize {
        self.shared.entry_bytes_max
    }

    /// Removes every entry (each worker at its next lookup).
    pub fn purge(&self) {
        self.shared.purge(Purge::default());
    }

    /// Removes the entries of `host` (any, if `None`; without a port, on
    /// any port; `name:port`, that port only) whose path begins with
    /// `path_prefix` (any, if `None`).
    pub fn purge_matching(&self, host: Option<&str>, path_prefix: Option<&str>) {
        let host = host.map(|h| {
            let mut k = Vec::new();
            push_host(&mut k, h.as_bytes(), None);
            k.into_boxed_slice()
        });
        let path_prefix = path_prefix.map(|p| p.as_bytes().into());
        self.shared.purge(Purge { host, path_prefix });
    }

    /// The counters, summed over the workers.
    pub fn stats(&self) -> CacheStats {
        let counts = self.shared.counts.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = CacheStats::default();
        for c in counts.iter() {
            let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
            s.hits += get(&c.hit);
            s.misses += get(&c.miss);
            s.stale += get(&c.stale);
            s.bypasses += get(&c.bypass);
            s.collapsed += get(&c.collapsed);
            s.evicted += get(&c.evicted);
            s.entries += get(&c.entries);
            s.bytes += get(&c.bytes);
        }
        s
    }

    /// Adds the cache's series to `metrics`, with `labels` (a route's
    /// name, say): `peregrine_proxy_cache_total{result="hit|miss|stale|
    /// bypass"}`, `peregrine_proxy_cache_collapsed_total`,
    /// `peregrine_proxy_cache_evictions_total`, and the gauges
    /// `peregrine_proxy_cache_entries` and `peregrine_proxy_cache_bytes`.
    pub fn publish(&self, metrics: &crate::Metrics, labels: &[(&str, &str)]) {
        let c = self.clone();
        publish_with(metrics, labels, Arc::new(move || c.stats()));
    }
}

/// [`Cache::publish`] for every cache of the process, summed (a server
/// whose routes each have one: the CLI's).
pub fn publish_all(metrics: &crate::Metrics) {
    publish_with(metrics, &[], Arc::new(stats_all));
}

/// The counters of every cache of the process, summed.
pub fn stats_all() -> CacheStats {
    let all: Vec<Arc<Shared>> = {
        let all = CACHES.lock().unwrap_or_else(|e| e.into_inner());
        all.iter().filter_map(Weak::upgrade).collect()
    };
    let mut sum = CacheStats::default();
    for shared in all {
        let s = Cache { shared }.stats();
        sum.hits += s.hits;
        sum.misses += s.misses;
        sum.stale += s.stale;
        sum.bypasses += s.bypasses;
        sum.collapsed += s.collapsed;
        sum.evicted += s.evicted;
        sum.entries += s.entries;
        sum.bytes += s.bytes;
    }
    sum
}

type Stats = Arc<dyn Fn() -> CacheStats + Send + Sync>;

fn publish_with(metrics: &crate::Metrics, labels: &[(&str, &str)], stats: Stats) {
    type Read = fn(&CacheStats) -> u64;
    let results: [(&str, Read); 4] = [
        ("hit", |s| s.hits),
        ("miss", |s| s.misses),
        ("stale", |s| s.stale),
        ("bypass", |s| s.bypasses),
    ];
    for (result, read) in results {
        let mut l = labels.to_vec();
        l.push(("result", result));
        let stats = stats.clone();
        metrics.counter_with(
            "peregrine_proxy_cache_total",
            &l,
            "Proxied GET and HEAD requests on cached routes, by how the cache answered.",
            move || read(&stats()),
        );
    }
    let series: [(&str, bool, &str, Read); 4] = [
        (
            "peregrine_proxy_cache_collapsed_total",
            true,
            "Requests that waited for another request's answer to the same key.",
            |s| s.collapsed,
        ),
        (
            "peregrine_proxy_cache_evictions_total",
            true,
            "Cache entries removed to make room (least recently used first).",
            |s| s.evicted,
        ),
        (
            "peregrine_proxy_cache_entries",
            false,
            "Cache entries held (all workers).",
            |s| s.entries,
        ),
        (
            "peregrine_proxy_cache_bytes",
            false,
            "Bytes the cache entries hold, as the per-worker bound counts them (all workers).",
            |s| s.bytes,
        ),
    ];
    for (name, counter, help, read) in series {
        let stats = stats.clone();
        match counter {
            true => metrics.counter_with(name, labels, help, move || read(&stats())),
            false => metrics.gauge_with(name, labels, help, move || read(&stats())),
        }
    }
}

/// Purges every cache of the process (the metrics listener's `POST
/// /purge`): how many caches there were.
pub fn purge_all(host: Option<&str>, path_prefix: Option<&str>) -> usize {
    let all: Vec<Arc<Shared>> = {
        let all = CACHES.lock().unwrap_or_else(|e| e.into_inner());
        all.iter().filter_map(Weak::upgrade).collect()
    };
    for shared in &all {
        Cache { shared: shared.clone() }.purge_matching(host, path_prefix);
    }
    all.len()
}

impl Shared {
    fn purge(&self, p: Purge) {
        let mut purges = self.purges.lock().unwrap_or_else(|e| e.into_inner());
        purges.0 += 1;
        let n = purges.0;
        purges.1.push((n, p));
        if purges.1.len() > PURGES_KEPT {
            purges.1.remove(0);
        }
        self.purge_count.store(n, Ordering::Release);
    }
}

// ---------------------------------------------------------------------
// The worker's side.

thread_local! {
    /// This worker's stores, one per cache it has seen.
    static STORES: RefCell<Vec<Store>> = const { RefCell::new(Vec::new()) };
    /// Requests that waited for a key whose first request has ended, for
    /// the pool to answer from the cache or send (`take_released`).
    static RELEASED: RefCell<Vec<Job>> = const { RefCell::new(Vec::new()) };
    /// Requests that may get a stale answer if their upstream fails
    /// (`stale-if-error`), by their responder's key.
    static RESCUES: RefCell<Rescues> = RefCell::new(HashMap::new());
}

/// The Vary field names of an entry (lower case), each with the request's
/// value (`None`: the request had none).
type VaryValues = Box<[(Box<[u8]>, Option<Box<[u8]>>)]>;

/// Requests that may be rescued, by their responder's key: since when,
/// and what finding their entry needs.
type Rescues = HashMap<(usize, u64), (Instant, Box<Ask>)>;

/// Requests waiting for a rescue at most per worker: beyond, a failure
/// is the upstream's error (never more held than this).
const RESCUES_MAX: usize = 4096;

/// A request still waiting for its rescue after this is forgotten when
/// room is needed (longer than any upstream's deadlines).
const RESCUE_FORGOTTEN: Duration = Duration::from_secs(600);

struct Store {
    shared: Weak<Shared>,
    id: u64,
    /// The purges applied.
    purged: u64,
    counts: Arc<Counts>,
    index: KeyMap<Vec<usize>>,
    entries: Slab<Entry>,
    /// Most and least recently used.
    newest: Option<usize>,
    oldest: Option<usize>,
    bytes: usize,
    /// Bytes of answers being read into the cache (`Fill`).
    filling: usize,
    bytes_max: usize,
    /// Keys whose first miss is upstream, with the requests waiting.
    locks: KeyMap<Lock>,
    /// Where a lookup builds its key (kept: a hit allocates none).
    key: Vec<u8>,
}

/// A map by key, hashed with foldhash rather than std's SipHash-1-3: the
/// hash of a hit's key was about 250 instructions of SipHash, the largest
/// share of what a hit cost beyond an archive's answer (callgrind,
/// `proxy-cache-hit`); foldhash takes a few tens. Its `RandomState` is
/// seeded at random per process (and varied per map), as std's is, so
/// which keys collide cannot be worked out offline; foldhash's authors
/// promise only "minimal" resistance to hash flooding (no defence against
/// someone who recovers the seed from timings), which is why the cost of
/// a flood stays bounded here anyway: a key enters the index only with an
/// answer the upstream made cacheable, the entries are bounded by
/// `bytes_max`, and a key holds at most [`VARIANTS_MAX`] slots.
/// (hashbrown, under std's map, uses foldhash as its own default.)
type KeyMap<V> = HashMap<Box<[u8]>, V, foldhash::fast::RandomState>;

struct Lock {
    since: Instant,
    waiters: Vec<Job>,
}

struct Entry {
    key: Box<[u8]>,
    /// The Vary field names (lower case) and the request's values.
    vary: VaryValues,
    status: u16,
    /// The fields (checked when stored) and the body: two ranges of one
    /// buffer.
    lines: SharedBytes,
    body: SharedBytes,
    /// The fields with `Age` for the age last given: made again when the
    /// age changes (once a second at most), so a hit allocates nothing
    /// (the `Age` a hit built each time, a `String` and a field of the
    /// response's own, cost about 400 instructions of 5,500:
    /// callgrind, `proxy-cache-hit`).
    aged: Option<Aged>,
    stored: Instant,
    initial_age: u64,
    lifetime: u64,
    /// When the entry stops being fresh (`stored` plus what was left of
    /// `lifetime`; `None`: past any `Instant`): a hit compares two
    /// instants rather than working out its age (a subtraction of
    /// `timespec`s, about 55 instructions a hit: callgrind,
    /// `proxy-cache-hit`).
    fresh_until: Option<Instant>,
    /// The stored `ETag` and `Last-Modified` (as the client is sent
    /// them): a conditional request's validators (RFC 9111 §4.3.2).
    etag: Option<Box<str>>,
    last_modified: Option<SystemTime>,
    stale_while_revalidate: u64,
    stale_if_error: u64,
    public: bool,
    cost: usize,
    newer: Option<usize>,
    older: Option<usize>,
}

impl Entry {
    fn age(&self, now: Instant) -> u64 {
        self.initial_age
            .saturating_add(now.saturating_duration_since(self.stored).as_secs())
    }

    /// Whether the entry is still fresh at `now`.
    fn fresh_at(&self, now: Instant) -> bool {
        self.fresh_until.is_none_or(|until| now < until)
    }

    /// The answer at `now` (RFC 9111 §5.1: a cache sends `Age` with a
    /// stored answer).
    fn answer(&mut self, now: Instant) -> Response {
        match self.aged_block(now) {
            Some(block) => Response::prepared(self.status, block, crate::Body::Shared(self.body.clone())),
            None => Response::error(500),
        }
    }

    /// The answer at `now` to a request that asked `asked` (its `head`:
    /// a HEAD): a 304, a 206 or a 416 when its conditional fields or
    /// its range say so, else the whole answer.
    fn serve(&mut self, now: Instant, asked: &Asked<'_>, head: bool) -> Response {
        if asked.is_conditional() && (200..300).contains(&self.status) {
            if let Some(answer) = self.answer_conditional(now, asked, head) {
                return answer;
            }
        }
        self.answer(now)
    }

    /// RFC 9110 §13.2.2's steps 3 to 5 against the stored validators
    /// (steps 1 and 2, `If-Match` and `If-Unmodified-Since`, are the
    /// origin's: such a request is not looked up), then the range: one
    /// range is a 206 of the stored body; several are answered in full
    /// with 200 (RFC 9110 §14.2: a server may ignore `Range`), as is a
    /// range whose `If-Range` does not hold. `None`: the whole answer.
    /// Out of line: most requests ask none of this.
    #[cold]
    #[inline(never)]
    fn answer_conditional(&mut self, now: Instant, asked: &Asked<'_>, head: bool) -> Option<Response> {
        let etag = self.etag.as_deref();
        if crate::conditional::not_modified(asked.if_none_match, asked.if_modified_since, etag, self.last_modified) {
            return Some(self.not_modified(now));
        }
        // §14.2: "GET is the only method for which range handling is
        // defined"; a 200's body only.
        let value = asked.range.filter(|_| !head && self.status == 200)?;
        if !crate::conditional::if_range_holds_for(asked.if_range, etag, self.last_modified) {
            return None;
        }
        let len = self.body.range.len() as u64;
        match crate::range::parse(value, len) {
            crate::range::Ranges::Full => None,
            crate::range::Ranges::Unsatisfiable => {
                Some(Response::error(416).with_header("Content-Range", format!("bytes */{len}")))
            }
            crate::range::Ranges::Partial(parts) if parts.len() == 1 => {
                let r = &parts[0];
                let block = self.aged_block(now)?;
                let start = self.body.range.start;
                let body = SharedBytes {
                    buf: self.body.buf.clone(),
                    range: start + r.start as usize..start + r.end as usize,
                };
                Some(
                    Response::new(206)
                        .with_header("Content-Range", format!("bytes {}-{}/{len}", r.start, r.end - 1))
                        .with_header_block(block)
                        .with_body(crate::Body::Shared(body)),
                )
            }
            crate::range::Ranges::Partial(_) => None,
        }
    }

    /// A 304 (RFC 9110 §15.4.5): of the stored fields, those a 200 would
    /// have sent that a 304 is to carry (`Cache-Control`,
    /// `Content-Location`, `ETag`, `Expires`, `Vary`; `Last-Modified`
    /// when there is no `ETag`), and `Age`. Made for each (a revalidation
    /// is rare beside a hit).
    fn not_modified(&mut self, now: Instant) -> Response {
        let keep = |name: &[u8]| {
            ["cache-control", "content-location", "etag", "expires", "vary"]
                .iter()
                .any(|k| name.eq_ignore_ascii_case(k.as_bytes()))
                || (self.etag.is_none() && name.eq_ignore_ascii_case(b"last-modified"))
        };
        let mut lines = Vec::with_capacity(256);
        for line in self.lines.as_slice().split_inclusive(|&b| b == b'\n') {
            let colon = line.iter().position(|&b| b == b':').unwrap_or(0);
            if keep(&line[..colon]) {
                lines.extend_from_slice(line);
            }
        }
        let since = now.saturating_duration_since(self.stored).as_secs();
        let mut digits = String::new();
        push_decimal(&mut digits, self.initial_age.saturating_add(since));
        lines.extend_from_slice(b"Age: ");
        lines.extend_from_slice(digits.as_bytes());
        lines.extend_from_slice(b"\r\n");
        match HeaderBlock::from_lines(SharedBytes::new(Arc::new(lines))) {
            Ok(block) => Response::prepared(304, block, crate::Body::Empty),
            Err(_) => Response::error(500),
        }
    }

    /// The stored fields with `Age` at `now`: made again only when `now`
    /// is out of the second they were made for. `None` if they do not
    /// make a block (they were checked when stored: never).
    fn aged_block(&mut self, now: Instant) -> Option<HeaderBlock> {
        if let Some(a) = &self.aged {
            if a.from <= now && now < a.until {
                return Some(a.block.clone());
            }
        }
        let since = now.saturating_duration_since(self.stored).as_secs();
        let age = self.initial_age.saturating_add(since);
        let lines = self.lines.as_slice();
        let mut with_age = Vec::with_capacity(lines.len() + 32);
        with_age.extend_from_slice(lines);
        with_age.extend_from_slice(b"Age: ");
        let mut digits = String::new();
        push_decimal(&mut digits, age);
        with_age.extend_from_slice(digits.as_bytes());
        with_age.extend_from_slice(b"\r\n");
        let block = HeaderBlock::from_lines(SharedBytes::new(Arc::new(with_age))).ok()?;
        // The second of `stored`'s clock this age holds for.
        let from = self.stored.checked_add(Duration::from_secs(since));
        let until = from.and_then(|f| f.checked_add(Duration::from_secs(1)));
        self.aged = match (from, until) {
            (Some(from), Some(until)) => Some(Aged {
                from,
                until,
                block: block.clone(),
            }),
            _ => None,
        };
        Some(block)
    }
}

/// An entry's fields with `Age`, and the instants between which that age
/// is the entry's.
struct Aged {
    from: Instant,
    until: Instant,
    block: HeaderBlock,
}

fn push_decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[i..] {
        out.push(char::from(d));
    }
}

/// Runs `f` on this worker's store of `shared`, made on first use.
fn with_store<R>(shared: &Arc<Shared>, f: impl FnOnce(&mut Store) -> R) -> R {
    STORES.with(|stores| {
        let mut stores = stores.borrow_mut();
        let at = match stores.iter().position(|s| s.id == shared.id) {
            Some(at) => at,
            None => {
                // A cache of an earlier configuration is gone: its entries go.
                stores.retain(|s| s.shared.strong_count() > 0);
                let counts = Arc::new(Counts::default());
                shared
                    .counts
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(counts.clone());
                stores.push(Store {
                    shared: Arc::downgrade(shared),
                    id: shared.id,
                    purged: 0,
                    counts,
                    index: KeyMap::default(),
                    entries: Slab::new(),
                    newest: None,
                    oldest: None,
                    bytes: 0,
                    filling: 0,
                    bytes_max: shared.bytes_max,
                    locks: KeyMap::default(),
                    key: Vec::new(),
                });
                stores.len() - 1
            }
        };
        let store = &mut stores[at];
        store.apply_purges(shared);
        f(store)
    })
}

impl Store {
    fn apply_purges(&mut self, shared: &Shared) {
        let n = shared.purge_count.load(Ordering::Acquire);
        if n == self.purged {
            return;
        }
        let purges = shared.purges.lock().unwrap_or_else(|e| e.into_inner()).1.clone();
        let complete = purges.first().is_some_and(|(first, _)| *first <= self.purged + 1);
        let mut doomed = Vec::new();
        for (slot, e) in self.entries.iter() {
            let (host, path) = split_key(&e.key);
            let hit = !complete
                || purges.iter().filter(|(k, _)| *k > self.purged).any(|(_, p)| {
                    p.host.as_deref().is_none_or(|h| purge_host_matches(h, host))
                        && p.path_prefix.as_deref().is_none_or(|pre| path.starts_with(pre))
                });
            if hit {
                doomed.push(slot);
            }
        }
        for slot in doomed {
            self.remove(slot);
        }
        self.purged = n;
    }

    /// The entry of `key` whose Vary values `matches` accepts.
    fn find(&self, key: &[u8], matches: impl Fn(&[u8]) -> Option<Vec<u8>>) -> Option<usize> {
        let slots = self.index.get(key)?;
        slots.iter().rev().copied().find(|&slot| {
            self.entries[slot]
                .vary
                .iter()
                .all(|(name, value)| matches(name).as_deref() == value.as_deref())
        })
    }

    fn unlink(&mut self, slot: usize) {
        let (newer, older) = (self.entries[slot].newer, self.entries[slot].older);
        match newer {
            Some(n) => self.entries[n].older = older,
            None => self.newest = older,
        }
        match older {
            Some(o) => self.entries[o].newer = newer,
            None => self.oldest = newer,
        }
    }

    fn link_newest(&mut self, slot: usize) {
        self.entries[slot].newer = None;
        self.entries[slot].older = self.newest;
        if let Some(n) = self.newest {
            self.entries[n].newer = Some(slot);
        }
        self.newest = Some(slot);
        if self.oldest.is_none() {
            self.oldest = Some(slot);
        }
    }

    fn touch(&mut self, slot: usize) {
        if self.newest != Some(slot) {
            self.unlink(slot);
            self.link_newest(slot);
        }
    }

    fn remove(&mut self, slot: usize) {
        self.unlink(slot);
        let e = self.entries.remove(slot);
        self.bytes -= e.cost;
        if let Some(slots) = self.index.get_mut(&e.key) {
            slots.retain(|&s| s != slot);
            if slots.is_empty() {
                self.index.remove(&e.key);
            }
        }
        self.publish();
    }

    fn insert(&mut self, e: Entry) -> usize {
        // The same variant replaced; the oldest of too many dropped.
        let same: Vec<usize> = self.index.get(&e.key).map_or_else(Vec::new, |slots| {
            slots
                .iter()
                .copied()
                .filter(|&s| self.entries[s].vary == e.vary)
                .collect()
        });
        for slot in same {
            self.remove(slot);
        }
        if let Some(&first) = self
            .index
            .get(&e.key)
            .filter(|s| s.len() >= VARIANTS_MAX)
            .and_then(|s| s.first())
        {
            self.remove(first);
        }
        while self.bytes + e.cost > self.bytes_max() {
            let Some(oldest) = self.oldest else { break };
            self.remove(oldest);
            bump(&self.counts.evicted);
        }
        self.bytes += e.cost;
        let key = e.key.clone();
        let slot = self.entries.insert(e);
        self.link_newest(slot);
        self.index.entry(key).or_default().push(slot);
        self.publish();
        slot
    }

    fn bytes_max(&self) -> usize {
        self.bytes_max
    }

    fn publish(&self) {
        self.counts.entries.store(self.entries.len() as u64, Ordering::Relaxed);
        self.counts.bytes.store(self.bytes as u64, Ordering::Relaxed);
    }
}

/// The host and the path of a key (`split_key(key(..))`).
fn split_key(key: &[u8]) -> (&[u8], &[u8]) {
    let nl = key.iter().position(|&b| b == b'\n').unwrap_or(key.len());
    let host = key.get(1..nl).unwrap_or_default();
    let path = key.get(nl + 2..).unwrap_or_default();
    (host, path)
}

/// Whether a purge's host (normalised) covers an entry's: the same, or,
/// for a purge host without a port, the entry's host on any port
/// (`127.0.0.1` covers `127.0.0.1:8080`); `name:port` only itself.
fn purge_host_matches(purge: &[u8], host: &[u8]) -> bool {
    match host.strip_prefix(purge) {
        Some([]) => true,
        Some([b':', port @ ..]) => !port.is_empty() && port.iter().all(u8::is_ascii_digit),
        _ => false,
    }
}

/// `host` lower-cased, without a trailing dot or the scheme's default
/// port (with `tls` unknown, either's).
fn push_host(out: &mut Vec<u8>, host: &[u8], tls: Option<bool>) {
    let mut h = host;
    if tls != Some(true) {
        if let Some(rest) = h.strip_suffix(b":80") {
            h = rest;
        }
    }
    if tls != Some(false) {
        if let Some(rest) = h.strip_suffix(b":443") {
            h = rest;
        }
    }
    if let Some(rest) = h.strip_suffix(b".") {
        h = rest;
    }
    let at = out.len();
    out.extend_from_slice(h);
    lower_ascii(&mut out[at..]);
}

/// `make_ascii_lowercase` eight bytes at a time, the last few as the
/// last eight again (lower-casing twice changes nothing): no byte loop
/// and no copy of a variable length, which cost about 100 and then 50
/// instructions of a hit's host (callgrind, `proxy-cache-hit`). Under
/// eight bytes, the byte loop.
fn lower_ascii(b: &mut [u8]) {
    let n = b.len();
    if n < 8 {
        b.make_ascii_lowercase();
        return;
    }
    let mut at = 0;
    while at + 8 <= n {
        lower_eight(b, at);
        at += 8;
    }
    if at < n {
        lower_eight(b, n - 8);
    }
}

/// `b[at..at + 8]` lower-cased.
fn lower_eight(b: &mut [u8], at: usize) {
    let mut word = [0u8; 8];
    word.copy_from_slice(&b[at..at + 8]);
    b[at..at + 8].copy_from_slice(&lower_word(word));
}

/// Eight bytes lower-cased (ASCII only).
fn lower_word(word: [u8; 8]) -> [u8; 8] {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x80 * ONES;
    let w = u64::from_le_bytes(word);
    // Per byte of 7 bits (none carries into the next): at least 'A'
    // sets the top bit of `ge_a`, above 'Z' that of `gt_z`; ASCII only
    // (`!w`: a byte with its top bit set is left alone).
    let low7 = w & !HIGH;
    let ge_a = low7 + (0x80 - u64::from(b'A')) * ONES;
    let gt_z = low7 + (0x80 - u64::from(b'Z') - 1) * ONES;
    let upper = ge_a & !gt_z & !w & HIGH;
    (w | (upper >> 2)).to_le_bytes()
}

/// The key of a request: `s` or `h` (https or http), the host, a newline,
/// `G` (GET and HEAD), the path and query (or `target`).
fn key(k: &mut Vec<u8>, req: &Request<'_>, target: Option<&str>) {
    k.clear();
    k.push(if req.is_tls() { b's' } else { b'h' });
    // The field's bytes, checked ASCII when parsed: `Request::host`'s
    // UTF-8 check again was about 125 instructions of a hit (callgrind,
    // `proxy-cache-hit`).
    push_host(k, req.host.unwrap_or_default(), Some(req.is_tls()));
    k.extend_from_slice(b"\nG");
    match target {
        Some(t) => k.extend_from_slice(t.as_bytes()),
        None => {
            k.extend_from_slice(req.path().as_bytes());
            if let Some(q) = req.query() {
                k.push(b'?');
                k.extend_from_slice(q.as_bytes());
            }
        }
    }
}

/// A Vary field's value as compared: the request's lines of it joined
/// with `,`, white space around commas and at the ends removed (and
/// everywhere in the `Accept*` fields, whose tokens hold none). `None`
/// when the request has none.
fn normalised<'a>(name: &[u8], values: impl Iterator<Item = &'a [u8]>) -> Option<Vec<u8>> {
    let squeeze = name.starts_with(b"accept");
    let mut out: Option<Vec<u8>> = None;
    for v in values {
        let out = out.get_or_insert_with(Vec::new);
        for element in v.split(|&b| b == b',') {
            let element = trim_ows(element);
            if !out.is_empty() {
                out.push(b',');
            }
            if squeeze {
                out.extend(element.iter().filter(|&&b| b != b' ' && b != b'\t'));
            } else {
                out.extend_from_slice(element);
            }
        }
    }
    out
}

fn request_value(req: &Request<'_>, name: &[u8]) -> Option<Vec<u8>> {
    normalised(
        name,
        req.headers()
            .filter(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
            .map(|(_, v)| v),
    )
}

/// What a lookup reads of the request's fields, in one pass.
#[derive(Default)]
struct Asked<'a> {
    /// `Authorization` or `Cookie` (RFC 9111 §3.5; cookies as the issue
    /// asks).
    credentials: bool,
    /// `If-Match` or `If-Unmodified-Since`: preconditions for the origin
    /// (RFC 9111 §4.3.2: "A cache MUST NOT evaluate conditional header
    /// fields that only apply to an origin server"), so the request goes
    /// there, past the cache.
    origin_preconditions: bool,
    if_none_match: Option<&'a [u8]>,
    if_modified_since: Option<&'a [u8]>,
    range: Option<&'a [u8]>,
    if_range: Option<&'a [u8]>,
    /// `Upgrade`: a WebSocket opening (or another protocol's), never
    /// answered from the cache (the handler offers the tunnel after the
    /// lookup passes).
    upgrade: bool,
    /// One of these four given on several lines: the whole answer is
    /// sent (always a valid answer to a conditional or ranged GET),
    /// rather than a guess at how the lines combine.
    several: bool,
}

impl<'a> Asked<'a> {
    fn of(req: &Request<'a>) -> Asked<'a> {
        Asked::of_fields(req.headers().map(|(n, v)| (n.as_bytes(), v)))
    }

    /// [`Asked::of`] for fields given as names and values.
    fn of_fields(fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Asked<'a> {
        let mut a = Asked::default();
        for (n, v) in fields {
            // The names looked for begin with `a`, `c`, `i`, `r` or `u`: most
            // fields are passed over on their first byte.
            match n.first().map(u8::to_ascii_lowercase) {
                Some(b'u') => a.upgrade |= n.eq_ignore_ascii_case(b"upgrade"),
                Some(b'a' | b'c') if n.eq_ignore_ascii_case(b"authorization") || n.eq_ignore_ascii_case(b"cookie") => {
                    a.credentials = true;
                }
                Some(b'i') => {
                    if n.eq_ignore_ascii_case(b"if-none-match") {
                        a.several |= a.if_none_match.replace(v).is_some();
                    } else if n.eq_ignore_ascii_case(b"if-modified-since") {
                        a.several |= a.if_modified_since.replace(v).is_some();
                    } else if n.eq_ignore_ascii_case(b"if-range") {
                        a.several |= a.if_range.replace(v).is_some();
                    } else if n.eq_ignore_ascii_case(b"if-match") || n.eq_ignore_ascii_case(b"if-unmodified-since") {
                        a.origin_preconditions = true;
                    }
                }
                Some(b'r') if n.eq_ignore_ascii_case(b"range") => {
                    a.several |= a.range.replace(v).is_some();
                }
                _ => {}
            }
        }
        a
    }

    /// Whether a hit may be answered other than with the whole entry.
    fn is_conditional(&self) -> bool {
        !self.several && (self.if_none_match.is_some() || self.if_modified_since.is_some() || self.range.is_some())
    }
}

/// A miss on its way upstream: what storing its answer needs.
pub(crate) struct Ask {
    shared: Arc<Shared>,
    key: Box<[u8]>,
    /// The request's fields (`name:value\n`, names in lower case): the
    /// values its answer's Vary may name.
    fields: Vec<u8>,
    /// HEAD: its answer is not stored.
    head: bool,
    credentials: bool,
    /// Holds the key's lock: its end lets the waiters go.
    leader: bool,
    /// Parked behind a lock (counted once resolved).
    waited: bool,
    /// An unsafe method's request (`invalidation`): not a miss; its
    /// non-error answer removes the key's entries.
    invalidates: bool,
}

/// The client's fields a miss that may be stored for others leaves out of
/// its upstream request (nginx's `proxy_cache` drops these and
/// `If-Match`, `If-Unmodified-Since`, which never reach a miss here: such
/// a request passes the cache): the upstream sends the whole
/// representation, which is stored, and the client's conditional or
/// range is answered from it (`Fill::finish`) as a hit's would be; a 304
/// or 206 from the upstream could not be stored, and the requests
/// waiting for the key would all go upstream after it.
pub(crate) const MISS_SKIPPED: [&str; 4] = ["if-none-match", "if-modified-since", "range", "if-range"];

impl Ask {
    fn lines(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields.split(|&b| b == b'\n').filter_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            Some((&line[..colon], &line[colon + 1..]))
        })
    }

    fn field_value(&self, name: &[u8]) -> Option<Vec<u8>> {
        normalised(name, self.lines().filter(|(n, _)| *n == name).map(|(_, v)| v))
    }

    /// What the request asked beside the whole answer.
    fn asked(&self) -> Asked<'_> {
        Asked::of_fields(self.lines())
    }

    /// Whether the upstream request is to leave out [`MISS_SKIPPED`]: a
    /// GET whose answer may be stored for any client (not one with
    /// credentials, or behind a forward-auth check, whose answer is
    /// stored only when `public`: most are not, and such a client keeps
    /// its 304s from the upstream).
    pub(crate) fn fetches_whole(&self) -> bool {
        !self.head && !self.credentials && !self.invalidates
    }

    /// Whether the answer, once stored, answers the request's conditional
    /// or range (the upstream was not asked them: [`MISS_SKIPPED`]), so the
    /// pool reads a short body whole before it answers.
    pub(crate) fn answers_from_entry(&self) -> bool {
        self.fetches_whole() && self.asked().is_conditional()
    }

    /// The fields as the upstream gets them once a forward-auth check
    /// copied `values` onto the request: the client's of the `copy`
    /// names gone (`auth::same_name_loosely`), the service's added.
    fn take_copied(&mut self, copy: &[String], values: &[(String, Vec<u8>)]) {
        let mut fields = Vec::with_capacity(self.fields.len() + 64);
        for line in self.fields.split_inclusive(|&b| b == b'\n') {
            let colon = line.iter().position(|&b| b == b':').unwrap_or(0);
            if !copy
                .iter()
                .any(|c| super::auth::same_name_loosely(c.as_bytes(), &line[..colon]))
            {
                fields.extend_from_slice(line);
            }
        }
        for (name, value) in values {
            fields.extend(name.bytes().map(|b| b.to_ascii_lowercase()));
            fields.push(b':');
            fields.extend_from_slice(value);
            fields.push(b'\n');
        }
        self.fields = fields;
    }
}

impl Drop for Ask {
    fn drop(&mut self) {
        if !self.leader || STORES.try_with(|_| ()).is_err() {
            return;
        }
        // The lock goes with the first request, however it ended: the
        // waiters are looked up again by the pool (`take_released`).
        let waiters = with_store(&self.shared, |s| s.locks.remove(&self.key)).map(|l| l.waiters);
        if let Some(waiters) = waiters.filter(|w| !w.is_empty()) {
            // `try_with`: a worker's thread ending drops its jobs.
            let _ = RELEASED.try_with(|r| r.borrow_mut().extend(waiters));
        }
    }
}

/// What the cache makes of a request.
pub(crate) enum Lookup {
    /// Not the cache's (another method, or no store here).
    Pass,
    /// Answered from the cache.
    Hit(Response),
    /// To send upstream, its answer maybe stored; `rescue`: a stale
    /// entry may answer if the upstream fails.
    Miss { ask: Box<Ask>, rescue: bool },
    /// To park behind the key's first request ([`park`]).
    Wait(Box<Ask>),
}

/// Looks `req` up in this worker's store of `cache`.
pub(crate) fn lookup(cache: &Cache, req: &Request<'_>, target: Option<&str>) -> Lookup {
    let head = match req.method() {
        "GET" => false,
        "HEAD" => true,
        _ => return Lookup::Pass,
    };
    let asked = Asked::of(req);
    if asked.origin_preconditions || asked.upgrade {
        return Lookup::Pass;
    }
    let shared = &cache.shared;
    if super::auth::checking() {
        return checked_miss(shared, req, target, head);
    }
    let now = crate::date::now();
    with_store(shared, |store| {
        // Built in the store's buffer: a hit allocates no key, and takes
        // no thread-local of its own (a hit's thread-locals were about 44
        // instructions: callgrind, `proxy-cache-hit`; this was one).
        let mut buf = std::mem::take(&mut store.key);
        key(&mut buf, req, target);
        let looked = look(store, shared, &buf, req, &asked, head, now);
        store.key = buf;
        looked
    })
}

/// [`lookup`] in `store`, `key` built.
fn look(
    store: &mut Store,
    shared: &Arc<Shared>,
    key: &[u8],
    req: &Request<'_>,
    asked: &Asked<'_>,
    head: bool,
    now: Instant,
) -> Lookup {
    let credentials = asked.credentials;
    let found = store.find(key, |name| request_value(req, name));
    let mut rescue = false;
    let mut leader = false;
    if let Some(slot) = found {
        let e = &store.entries[slot];
        if !credentials || e.public {
            if e.fresh_at(now) {
                let answer = store.entries[slot].serve(now, asked, head);
                store.touch(slot);
                bump(&store.counts.hit);
                return Lookup::Hit(answer);
            }
            let stale_for = e.age(now).saturating_sub(e.lifetime);
            rescue = stale_for < e.stale_if_error;
            if stale_for < e.stale_while_revalidate {
                if store.locks.contains_key(key) {
                    // Being refreshed: the stale one meanwhile.
                    let answer = store.entries[slot].serve(now, asked, head);
                    bump(&store.counts.stale);
                    return Lookup::Hit(answer);
                }
                leader = !head;
            }
        }
    }
    if credentials && !found.is_some_and(|slot| store.entries[slot].public) {
        bump(&store.counts.bypass);
    } else if !head && !leader {
        // Collapsing: the first miss goes, the next ones wait for it.
        match store.locks.get(key) {
            Some(lock)
                if lock.waiters.len() < WAITERS_MAX && now.saturating_duration_since(lock.since) < LOCK_TIMEOUT =>
            {
                bump(&store.counts.collapsed);
                return Lookup::Wait(Box::new(Ask {
                    shared: shared.clone(),
                    key: key.into(),
                    fields: copy_fields(req),
                    head,
                    credentials,
                    leader: false,
                    waited: true,
                    invalidates: false,
                }));
            }
            Some(_) => {}
            None => leader = true,
        }
        bump(&store.counts.miss);
    } else {
        bump(&store.counts.miss);
    }
    if leader {
        store.locks.insert(
            key.into(),
            Lock {
                since: now,
                waiters: Vec::new(),
            },
        );
    }
    Lookup::Miss {
        ask: Box::new(Ask {
            shared: shared.clone(),
            key: key.into(),
            fields: copy_fields(req),
            head,
            credentials,
            leader,
            waited: false,
            invalidates: false,
        }),
        rescue,
    }
}

/// A request behind a forward-auth check (`auth::checking`): its own
/// identity (the fields the check copies, an API key, its address) is
/// the service's to judge, and the cache cannot tell whose answer an
/// entry holds. It is looked up only once the check let it through, with
/// the fields the upstream gets (`granted`), and answered only from an
/// entry its upstream made `public`; its answer is stored only if
/// `public` (as for a request with credentials). It neither leads nor
/// waits for a key (a parked job is not the check's to hold), and gets
/// no stale answer.
#[cold]
#[inline(never)]
fn checked_miss(shared: &Arc<Shared>, req: &Request<'_>, target: Option<&str>, head: bool) -> Lookup {
    let mut k = Vec::new();
    key(&mut k, req, target);
    Lookup::Miss {
        ask: Box::new(Ask {
            shared: shared.clone(),
            key: k.into(),
            fields: copy_fields(req),
            head,
            credentials: true,
            leader: false,
            waited: false,
            invalidates: false,
        }),
        rescue: false,
    }
}

/// The answer from `job`'s cache, if it may have one, once a forward-auth
/// check let it through, `values` (those of `copy`) copied onto its
/// upstream request: its fields made what the upstream gets, then looked
/// up (a fresh `public` entry whose Vary values they match).
pub(crate) fn granted(job: &mut Job, copy: &[String], values: &[(String, Vec<u8>)]) -> Option<Response> {
    let ask = job.more.as_mut()?.cache.as_mut()?;
    ask.take_copied(copy, values);
    let now = crate::date::now();
    let shared = ask.shared.clone();
    with_store(&shared, |store| {
        let slot = store
            .find(&ask.key, |name| ask.field_value(name))
            .filter(|&slot| store.entries[slot].public && store.entries[slot].fresh_at(now));
        let Some(slot) = slot else {
            bump(&store.counts.bypass);
            return None;
        };
        let answer = store.entries[slot].serve(now, &ask.asked(), ask.head);
        store.touch(slot);
        bump(&store.counts.hit);
        Some(answer)
    })
}

/// Whether a method is safe (RFC 9110 §9.2.1): its answers leave the
/// cache's entries be.
fn is_safe(method: &str) -> bool {
    matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE")
}

/// For a request of an unsafe method (POST, PUT, DELETE, PATCH, any
/// other): what `watch` needs to invalidate its target's entries, every
/// variant, once its answer is a 2xx or 3xx (RFC 9111 §4.4: "A cache
/// MUST invalidate the target URI [...] when it receives a non-error
/// status code in response to an unsafe request method"). `Location`
/// and `Content-Location` (a MAY) are not followed. `None` for a safe
/// method.
pub(crate) fn invalidation(cache: &Cache, req: &Request<'_>, target: Option<&str>) -> Option<Box<Ask>> {
    if is_safe(req.method()) {
        return None;
    }
    let mut k = Vec::new();
    key(&mut k, req, target);
    Some(Box::new(Ask {
        shared: cache.shared.clone(),
        key: k.into(),
        fields: Vec::new(),
        head: false,
        credentials: false,
        leader: false,
        waited: false,
        invalidates: true,
    }))
}

/// A request that will not be answered through `rescue` (a forward-auth
/// check refused it): what was watched for it goes.
pub(crate) fn unwatch(responder_key: (usize, u64)) {
    let _ = RESCUES.try_with(|r| {
        if let Ok(mut r) = r.try_borrow_mut() {
            r.remove(&responder_key);
        }
    });
}

fn copy_fields(req: &Request<'_>) -> Vec<u8> {
    let mut f = Vec::with_capacity(256);
    for (n, v) in req.headers().filter(|(n, _)| !n.starts_with(':')) {
        f.extend(n.bytes().map(|b| b.to_ascii_lowercase()));
        f.push(b':');
        f.extend_from_slice(v);
        f.push(b'\n');
    }
    f
}

/// Parks `job` (its `cache` a [`Lookup::Wait`]'s ask) behind its key's
/// lock; a lock gone meanwhile sends it at once.
pub(crate) fn park(job: Job) {
    let Some(ask) = job.more().and_then(|m| m.cache.as_ref()) else {
        return;
    };
    let shared = ask.shared.clone();
    let key = ask.key.clone();
    let back = with_store(&shared, |s| match s.locks.get_mut(&key) {
        Some(lock) => {
            lock.waiters.push(job);
            None
        }
        None => Some(job),
    });
    if let Some(job) = back {
        RELEASED.with(|r| r.borrow_mut().push(job));
    }
}

/// Whether requests wait to be looked up again (`take_released`).
pub(crate) fn has_released() -> bool {
    RELEASED.with(|r| !r.borrow().is_empty())
}

/// The requests whose wait ended (the key's first request ended, or
/// [`LOCK_TIMEOUT`] passed): those the cache now answers go to
/// `answers`, the others are returned, to be sent upstream (their
/// answers still stored when they may be, but nobody waits for them).
pub(crate) fn take_released(answers: &mut Vec<super::pool::Answer>) -> Vec<Job> {
    let now = crate::date::now();
    STORES.with(|stores| {
        for store in stores.borrow_mut().iter_mut() {
            if store.locks.is_empty() {
                continue;
            }
            let mut late = Vec::new();
            for lock in store.locks.values_mut() {
                if now.saturating_duration_since(lock.since) >= LOCK_TIMEOUT {
                    late.append(&mut lock.waiters);
                }
            }
            if !late.is_empty() {
                RELEASED.with(|r| r.borrow_mut().extend(late));
            }
        }
    });
    let released = RELEASED.with(|r| std::mem::take(&mut *r.borrow_mut()));
    let mut sent = Vec::with_capacity(released.len());
    for mut job in released {
        let Some(ask) = job.more.as_mut().and_then(|m| m.cache.as_mut()) else {
            sent.push(job);
            continue;
        };
        let shared = ask.shared.clone();
        let served = with_store(&shared, |store| {
            let slot = store.find(&ask.key, |name| ask.field_value(name))?;
            let e = &store.entries[slot];
            if (ask.credentials && !e.public) || !e.fresh_at(now) {
                return None;
            }
            let answer = store.entries[slot].serve(now, &ask.asked(), ask.head);
            store.touch(slot);
            bump(&store.counts.hit);
            Some(answer)
        });
        match served {
            Some(answer) => {
                let responder = std::mem::replace(&mut job.responder, crate::responder::Responder::new(None, 0, 0));
                // Never taken by the pool (`Checks::admit`): finished here.
                let answer = match job.more.as_mut().and_then(|m| m.finish.take()) {
                    Some(finish) => finish(answer),
                    None => answer,
                };
                answers.push((responder, answer, None));
            }
            None => {
                if ask.waited {
                    ask.waited = false;
                    with_store(&shared, |s| bump(&s.counts.miss));
                }
                // The first request may have failed: this one's failure
                // too may find a stale entry (`rescue` looks).
                watch(job.responder.key(), ask);
                sent.push(job);
            }
        }
    }
    sent
}

/// Remembers that the request answered through `responder_key` may get
/// its key's stale entry should its upstream fail (`stale-if-error`), or,
/// for an unsafe method's (`invalidation`), that its answer, if not an
/// error, removes its key's entries.
pub(crate) fn watch(responder_key: (usize, u64), ask: &Ask) {
    let copy = Box::new(Ask {
        shared: ask.shared.clone(),
        key: ask.key.clone(),
        fields: ask.fields.clone(),
        head: ask.head,
        credentials: ask.credentials,
        leader: false,
        waited: false,
        invalidates: ask.invalidates,
    });
    let now = crate::date::now();
    RESCUES.with(|r| {
        let mut r = r.borrow_mut();
        if r.len() >= RESCUES_MAX {
            // Every request is answered through `rescue` in the end; one
            // that was not (its worker shutting down) is not waited for.
            r.retain(|_, (since, _)| now.saturating_duration_since(*since) < RESCUE_FORGOTTEN);
        }
        if r.len() < RESCUES_MAX {
            r.insert(responder_key, (now, copy));
        }
    });
}

/// The answers of this turn, each upstream failure (500, 502, 503, 504)
/// replaced by its key's stale entry when one may stand in for it
/// (`stale-if-error`, not past `must-revalidate`).
#[inline(always)]
pub(crate) fn rescue(answers: Vec<super::pool::Answer>) -> Vec<super::pool::Answer> {
    // Inlined to this test: nearly every turn has no miss watched, and
    // the answers pass on without a call (with `Checks::sort`'s, about 20
    // instructions of a proxied GET, callgrind `proxy-c50`).
    if rescues_nothing() {
        return answers;
    }
    rescue_watched(answers)
}

/// Whether `rescue` would pass answers through untouched: no miss is
/// watched on this worker.
#[inline(always)]
pub(crate) fn rescues_nothing() -> bool {
    RESCUES.with(|r| r.borrow().is_empty())
}

/// `rescue`, with misses watched.
#[inline(never)]
fn rescue_watched(mut answers: Vec<super::pool::Answer>) -> Vec<super::pool::Answer> {
    let now = crate::date::now();
    for (responder, response, _) in answers.iter_mut() {
        let key = responder.key();
        let Some((_, ask)) = RESCUES.with(|r| r.borrow_mut().remove(&key)) else {
            continue;
        };
        if ask.invalidates {
            if (200..400).contains(&response.status()) {
                with_store(&ask.shared, |store| {
                    let slots = store.index.get(&ask.key).cloned().unwrap_or_default();
                    for slot in slots {
                        store.remove(slot);
                    }
                });
            }
            continue;
        }
        if !matches!(response.status(), 500 | 502 | 503 | 504) {
            continue;
        }
        let stale = with_store(&ask.shared, |store| {
            let slot = store.find(&ask.key, |name| ask.field_value(name))?;
            let e = &store.entries[slot];
            let age = e.age(now);
            if (ask.credentials && !e.public) || age >= e.lifetime.saturating_add(e.stale_if_error) {
                return None;
            }
            bump(&store.counts.stale);
            Some(store.entries[slot].answer(now))
        });
        if let Some(stale) = stale {
            log::warn!(
                "proxy: the upstream failed ({}): a stale answer from the cache",
                response.status()
            );
            *response = stale;
        }
    }
    answers
}

/// Adds `data` to the answer being read into the cache, if any; one too
/// long for it stops being read in.
pub(crate) fn tee(fill: &mut Option<Box<Fill>>, data: &[u8]) {
    if let Some(f) = fill {
        if !data.is_empty() && !f.push(data) {
            *fill = None;
        }
    }
}

/// An answer being read into the cache: its stored fields, then its body
/// as it arrives.
pub(crate) struct Fill {
    ask: Box<Ask>,
    status: u16,
    buf: Vec<u8>,
    lines: usize,
    vary: VaryValues,
    etag: Option<Box<str>>,
    last_modified: Option<SystemTime>,
    fresh: control::Freshness,
    directives: control::Directives,
    received: Instant,
    /// The purges applied when it began: one since, and it is not stored.
    purges: u64,
    /// The body's longest (the cache's per-entry bound).
    body_max: usize,
}

impl Fill {
    /// Whether the answer `head` (the client's fields `block`) to the
    /// request of `ask` may be stored: the fill if so. `length`: the body's,
    /// when the upstream said it.
    pub(crate) fn start(
        ask: Box<Ask>,
        head: &ResponseHead<'_, '_>,
        block: &HeaderBlock,
        length: Option<u64>,
    ) -> Option<Fill> {
        if ask.head || !STATUSES.contains(&head.status) {
            return None;
        }
        let body_max = ask.shared.entry_bytes_max;
        if length.is_some_and(|n| n > body_max as u64) {
            return None;
        }
        let mut d = control::Directives::default();
        let (mut date, mut expires, mut age) = (None, None, None);
        for h in head.headers.iter() {
            let name = h.name.as_bytes();
            if name.eq_ignore_ascii_case(b"cache-control") {
                control::parse_into(&mut d, h.value);
            } else if name.eq_ignore_ascii_case(b"set-cookie") {
                return None;
            } else if name.eq_ignore_ascii_case(b"date") {
                date = Some(h.value);
            } else if name.eq_ignore_ascii_case(b"expires") {
                // §5.3: more than one Expires is invalid: already expired.
                if expires.is_some() {
                    return None;
                }
                expires = Some(h.value);
            } else if name.eq_ignore_ascii_case(b"age") {
                age = Some(h.value);
            }
        }
        if d.no_store || d.private || d.no_cache || (ask.credentials && !d.public) {
            return None;
        }
        let now_secs = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let fresh = control::freshness(&d, date, expires, age, now_secs)?;
        if fresh.initial_age >= fresh.lifetime {
            return None;
        }
        // The client's fields, less its Age (a hit writes its own), and
        // the Vary names among them.
        let mut buf = Vec::with_capacity(block.as_bytes().len() + length.unwrap_or(0) as usize);
        let mut names: Vec<Box<[u8]>> = Vec::new();
        let (mut etag, mut last_modified) = (None, None);
        for line in block.as_bytes().split_inclusive(|&b| b == b'\n') {
            let colon = line.iter().position(|&b| b == b':').unwrap_or(0);
            let name = &line[..colon];
            if name.eq_ignore_ascii_case(b"age") {
                continue;
            }
            // The validators as the client gets them (compression may
            // have changed the upstream's ETag).
            let value = || {
                let v = line[colon + 1..].strip_suffix(b"\r\n").unwrap_or(&line[colon + 1..]);
                trim_ows(v)
            };
            if name.eq_ignore_ascii_case(b"etag") {
                etag = std::str::from_utf8(value()).ok().map(Box::from);
            } else if name.eq_ignore_ascii_case(b"last-modified") {
                last_modified = crate::conditional::parse_http_date(value());
            }
            if name.eq_ignore_ascii_case(b"vary") {
                let value = line[colon + 1..].strip_suffix(b"\r\n").unwrap_or(&line[colon + 1..]);
                for v in list_elements(trim_ows(value)) {
                    if v == b"*" {
                        return None;
                    }
                    let v: Box<[u8]> = v.to_ascii_lowercase().into();
                    if !names.contains(&v) {
                        names.push(v);
                    }
                }
            }
            buf.extend_from_slice(line);
        }
        let lines = buf.len();
        let vary = names
            .into_iter()
            .map(|n| {
                let v = ask.field_value(&n).map(Vec::into_boxed_slice);
                (n, v)
            })
            .collect();
        let purges = ask.shared.purge_count.load(Ordering::Acquire);
        let reserved = with_store(&ask.shared, |s| {
            let ok = s.filling + lines <= s.bytes_max();
            if ok {
                s.filling += lines;
            }
            ok
        });
        if !reserved {
            return None;
        }
        Some(Fill {
            ask,
            status: head.status,
            buf,
            lines,
            vary,
            etag,
            last_modified,
            fresh,
            directives: d,
            received: crate::date::now(),
            purges,
            body_max,
        })
    }

    /// Adds body bytes; `false` when the answer is too long to store
    /// (the fill is then to be dropped).
    pub(crate) fn push(&mut self, data: &[u8]) -> bool {
        if self.buf.len() - self.lines + data.len() > self.body_max {
            return false;
        }
        let ok = with_store(&self.ask.shared, |s| {
            let ok = s.filling + data.len() <= s.bytes_max();
            if ok {
                s.filling += data.len();
            }
            ok
        });
        if ok {
            self.buf.extend_from_slice(data);
        }
        ok
    }

    /// The body is whole: stores the entry. When the request asked a
    /// conditional or a range (which [`MISS_SKIPPED`] kept from the
    /// upstream), its answer from the entry, as a hit gets it: a 304, a
    /// 206 or a 416 (`None`: the whole answer as it came, or nothing
    /// stored).
    pub(crate) fn finish(mut self) -> Option<Response> {
        let buf = std::mem::take(&mut self.buf);
        let held = buf.len();
        let shared = self.ask.shared.clone();
        with_store(&shared, |s| {
            s.filling -= held.min(s.filling);
            if self.purges != shared.purge_count.load(Ordering::Acquire) {
                return None;
            }
            let body_range = self.lines..buf.len();
            let whole: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(buf);
            let (Some(lines), Some(body)) = (
                SharedBytes::slice(whole.clone(), 0..self.lines),
                SharedBytes::slice(whole, body_range),
            ) else {
                return None;
            };
            if HeaderBlock::from_lines(lines.clone()).is_err() {
                return None;
            }
            let vary = std::mem::take(&mut self.vary);
            let cost = held
                + self.ask.key.len()
                + vary
                    .iter()
                    .map(|(n, v)| n.len() + v.as_ref().map_or(0, |v| v.len()))
                    .sum::<usize>()
                + ENTRY_OVERHEAD;
            if cost > s.bytes_max() {
                return None;
            }
            let d = self.directives;
            let (swr, sie) = match d.must_revalidate {
                true => (0, 0),
                false => (d.stale_while_revalidate.unwrap_or(0), d.stale_if_error.unwrap_or(0)),
            };
            let slot = s.insert(Entry {
                key: self.ask.key.clone(),
                vary,
                status: self.status,
                lines,
                body,
                aged: None,
                stored: self.received,
                initial_age: self.fresh.initial_age,
                lifetime: self.fresh.lifetime,
                fresh_until: self
                    .received
                    .checked_add(Duration::from_secs(self.fresh.lifetime - self.fresh.initial_age)),
                etag: self.etag.take(),
                last_modified: self.last_modified,
                stale_while_revalidate: swr,
                stale_if_error: sie,
                public: d.public,
                cost,
                newer: None,
                older: None,
            });
            let asked = self.ask.asked();
            match asked.is_conditional() && (200..300).contains(&self.status) {
                true => s.entries[slot].answer_conditional(crate::date::now(), &asked, false),
                false => None,
            }
        })
        // `self` (its ask: the lock) goes now, after the entry is in.
    }
}

impl Drop for Fill {
    fn drop(&mut self) {
        let held = self.buf.len();
        if held > 0 {
            let shared = self.ask.shared.clone();
            let _ = STORES.try_with(|_| {
                with_store(&shared, |s| s.filling -= held.min(s.filling));
            });
        }
    }
}

#[cfg(test)]
mod tests;
