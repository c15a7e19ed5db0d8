//! A route's rate limit (issue 27): a token bucket per client address,
//! nginx's `limit_req ... nodelay` — a request that finds the bucket empty
//! is refused at once (429 with `Retry-After`), never queued.
//!
//! The bucket is kept as one number, the generic cell rate algorithm's
//! "theoretical arrival time" (`tat`): a full bucket is a `tat` at or
//! before now, each request taken pushes it one `interval` later, and a
//! request is refused when `tat` is more than `burst - 1` intervals
//! ahead of now. That is a token bucket of `burst` tokens refilled one per
//! `interval`, without a refill step or a second field to keep in step.
//!
//! SO_REUSEPORT spreads one client's connections over every worker, so
//! buckets are the process's, not a worker's ([`Table`], shared by the
//! route's handler on every worker): a sharded table of small maps, each
//! behind its own mutex, held for a lookup and a few stores. It is
//! bounded ([`ENTRIES_MAX`]): a full shard forgets its least recently
//! used client, whose next request finds a full bucket (an attacker with
//! more addresses than that could as well use a fresh one each time).
//! The clock is the caller's (`now` in nanoseconds since the table was
//! made), so the tests drive it by hand; the server passes the worker
//! loop's time (`peregrine::now()`, no clock read per request).

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most clients a route's table remembers, over all its shards: 64 Ki
/// entries of 40 bytes (a slot and its map entry) are about 3 MiB per
/// rate-limited route at worst, and more clients than that at once are an
/// attack the bucket cannot stop anyway (each address gets its burst).
pub(crate) const ENTRIES_MAX: usize = 65_536;

/// Shards of a table: with 2 to 64 workers, two of them seldom want one
/// shard's mutex at the same moment.
const N_SHARDS: usize = 64;

/// The most requests a rate may allow per period, and the largest burst:
/// beyond a million a second a per-address limit stops nothing.
pub(crate) const COUNT_MAX: u32 = 1_000_000;

/// A route's `rate-limit`: `burst` requests at once from a client whose
/// bucket is full, refilled one every `interval`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RateLimit {
    /// The rate as written and checked (`10/s`), for `check-config`.
    pub(crate) rate: String,
    /// The time one token takes to come back (`1 s / 10` for `10/s`).
    pub(crate) interval: Duration,
    /// The bucket's size: requests accepted at once from a full bucket.
    pub(crate) burst: u32,
}

impl RateLimit {
    /// A rate `N/s`, `N/m` or `N/h` and a burst; the burst defaults to one
    /// period's worth (`N`), so that `10/s` takes a page's ten requests
    /// at once and then ten a second.
    pub(crate) fn new(rate: &str, burst: Option<i64>) -> Result<RateLimit, String> {
        let form = "expected requests per period: N/s, N/m or N/h, e.g. \"10/s\"";
        let (count, period) = rate.split_once('/').ok_or_else(|| format!("{rate:?}: {form}"))?;
        let period = match period {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return Err(format!("{rate:?}: the period is s, m or h ({form})")),
        };
        let count: u32 = count
            .parse()
            .ok()
            .filter(|n| (1..=COUNT_MAX).contains(n))
            .ok_or_else(|| format!("{rate:?}: the count is a whole number from 1 to {COUNT_MAX} ({form})"))?;
        let burst = match burst {
            None => count,
            Some(b) => u32::try_from(b)
                .ok()
                .filter(|b| (1..=COUNT_MAX).contains(b))
                .ok_or_else(|| format!("burst {b}: a whole number from 1 to {COUNT_MAX}"))?,
        };
        Ok(RateLimit {
            rate: rate.to_owned(),
            interval: period / count,
            burst,
        })
    }
}

/// A client's bucket, as the time its next token is due ([`Bucket::take`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Bucket {
    /// Nanoseconds on the table's clock; at or before now: full.
    tat: u64,
}

/// Whether a request may go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Allowed,
    /// Refused: the bucket has a token again after this long.
    Refused(Duration),
}

impl Bucket {
    /// Takes a token at `now` (nanoseconds), or says how long until one
    /// is there. `interval` and `burst` are the route's.
    pub(crate) fn take(&mut self, now: u64, interval: u64, burst: u32) -> Verdict {
        let tolerance = interval.saturating_mul(u64::from(burst.max(1) - 1));
        let tat = self.tat.max(now);
        let ahead = tat - now;
        if ahead > tolerance {
            return Verdict::Refused(Duration::from_nanos(ahead - tolerance));
        }
        self.tat = tat.saturating_add(interval);
        Verdict::Allowed
    }
}

/// The key of a client: its address, IPv6 by its /64 (a host is given a
/// whole /64, so a per-address key would give it 2^64 buckets), an
/// IPv4-mapped IPv6 address as the IPv4 address it maps.
pub(crate) fn key(ip: IpAddr) -> u128 {
    match ip.to_canonical() {
        IpAddr::V4(v4) => 0xffff_0000_0000 | u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6) & !u128::from(u64::MAX),
    }
}

/// A route's buckets, by client key, shared by every worker.
pub(crate) struct Table {
    limit: RateLimit,
    /// `interval` in nanoseconds (at least 1).
    interval: u64,
    /// Time zero of the table's clock ([`Table::now`]).
    epoch: Instant,
    hasher: RandomState,
    shards: Box<[Mutex<Shard>]>,
}

impl fmt::Debug for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Table")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl Table {
    /// An empty table remembering at most `entries_max` clients.
    pub(crate) fn new(limit: RateLimit, entries_max: usize) -> Table {
        let per_shard = entries_max.div_ceil(N_SHARDS).max(1);
        let interval = u64::try_from(limit.interval.as_nanos()).unwrap_or(u64::MAX).max(1);
        Table {
            limit,
            interval,
            epoch: Instant::now(),
            hasher: RandomState::new(),
            shards: (0..N_SHARDS).map(|_| Mutex::new(Shard::new(per_shard))).collect(),
        }
    }

    /// `at` on the table's clock, in nanoseconds.
    pub(crate) fn clock(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Takes a token from `key`'s bucket at `now` (the table's clock).
    pub(crate) fn take(&self, key: u128, now: u64) -> Verdict {
        let hash = self.hasher.hash_one(key);
        let shard = &self.shards[(hash as usize) % self.shards.len()];
        // A panic while held cannot leave a bucket half-written (one
        // store), so a poisoned shard is still right.
        let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        shard.bucket(key).take(now, self.interval, self.limit.burst)
    }

    /// What [`Table::take`] would say at `now`, taking nothing: a client
    /// the table does not know has a full bucket (and is not added).
    pub(crate) fn peek(&self, key: u128, now: u64) -> Verdict {
        let hash = self.hasher.hash_one(key);
        let shard = &self.shards[(hash as usize) % self.shards.len()];
        let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        match shard.map.get(&key) {
            None => Verdict::Allowed,
            Some(&idx) => {
                let mut bucket = shard.slots[idx as usize].bucket;
                bucket.take(now, self.interval, self.limit.burst)
            }
        }
    }

    /// Clients remembered now, over all shards (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap().map.len()).sum()
    }
}

/// No slot: the end of the recency list.
const NIL: u32 = u32::MAX;

/// One shard: buckets in slots linked from most to least recently used,
/// found through a map; at capacity the least recent slot is reused.
struct Shard {
    map: HashMap<u128, u32>,
    slots: Vec<Slot>,
    capacity: usize,
    /// Most recently used slot.
    head: u32,
    /// Least recently used slot: the next one reused.
    tail: u32,
}

struct Slot {
    key: u128,
    bucket: Bucket,
    prev: u32,
    next: u32,
}

impl Shard {
    fn new(capacity: usize) -> Shard {
        Shard {
            map: HashMap::new(),
            slots: Vec::new(),
            capacity,
            head: NIL,
            tail: NIL,
        }
    }

    /// `key`'s bucket, made the most recently used; a new client gets a
    /// full bucket, in a new slot or in the least recently used one.
    fn bucket(&mut self, key: u128) -> &mut Bucket {
        let idx = match self.map.get(&key) {
            Some(&idx) => {
                self.unlink(idx);
                idx
            }
            None if self.slots.len() < self.capacity => {
                let idx = self.slots.len() as u32;
                self.slots.push(Slot {
                    key,
                    bucket: Bucket::default(),
                    prev: NIL,
                    next: NIL,
                });
                self.map.insert(key, idx);
                idx
            }
            None => {
                let idx = self.tail;
                self.unlink(idx);
                let slot = &mut self.slots[idx as usize];
                self.map.remove(&slot.key);
                slot.key = key;
                slot.bucket = Bucket::default();
                self.map.insert(key, idx);
                idx
            }
        };
        self.push_front(idx);
        &mut self.slots[idx as usize].bucket
    }

    fn unlink(&mut self, idx: u32) {
        let (prev, next) = {
            let s = &self.slots[idx as usize];
            (s.prev, s.next)
        };
        match prev {
            NIL => self.head = next,
            p => self.slots[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n as usize].prev = prev,
        }
    }

    fn push_front(&mut self, idx: u32) {
        let old = self.head;
        {
            let s = &mut self.slots[idx as usize];
            s.prev = NIL;
            s.next = old;
        }
        match old {
            NIL => self.tail = idx,
            o => self.slots[o as usize].prev = idx,
        }
        self.head = idx;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn limit(rate: &str, burst: Option<i64>) -> RateLimit {
        RateLimit::new(rate, burst).unwrap()
    }

    #[test]
    fn rates_are_counts_per_second_minute_or_hour() {
        let l = limit("10/s", None);
        assert_eq!((l.interval, l.burst), (Duration::from_millis(100), 10));
        let l = limit("30/m", Some(5));
        assert_eq!((l.interval, l.burst), (Duration::from_secs(2), 5));
        assert_eq!(limit("1/h", None).interval, Duration::from_secs(3600));
        for bad in ["10", "10/d", "0/s", "-1/s", "x/s", "10/ s", "2000000/s"] {
            assert!(RateLimit::new(bad, None).is_err(), "{bad}");
        }
        assert!(RateLimit::new("1/s", Some(0)).is_err());
        assert!(RateLimit::new("1/s", Some(-3)).is_err());
    }

    /// A full bucket gives `burst` at once, then one per interval, and a
    /// refusal says when the next token is due.
    #[test]
    fn a_bucket_gives_its_burst_then_one_per_interval() {
        let mut b = Bucket::default();
        let t0 = 50 * SEC;
        for _ in 0..3 {
            assert_eq!(b.take(t0, SEC, 3), Verdict::Allowed);
        }
        assert_eq!(b.take(t0, SEC, 3), Verdict::Refused(Duration::from_secs(1)));
        assert_eq!(
            b.take(t0 + SEC / 4, SEC, 3),
            Verdict::Refused(Duration::from_millis(750))
        );
        // Refusals take nothing: a token is back after one interval.
        assert_eq!(b.take(t0 + SEC, SEC, 3), Verdict::Allowed);
        assert_eq!(b.take(t0 + SEC, SEC, 3), Verdict::Refused(Duration::from_secs(1)));
        // A long pause fills the bucket, and no more than that.
        let later = t0 + 100 * SEC;
        for _ in 0..3 {
            assert_eq!(b.take(later, SEC, 3), Verdict::Allowed);
        }
        assert!(matches!(b.take(later, SEC, 3), Verdict::Refused(_)));
    }

    #[test]
    fn a_burst_of_one_allows_one_per_interval() {
        let mut b = Bucket::default();
        assert_eq!(b.take(SEC, SEC, 1), Verdict::Allowed);
        assert_eq!(b.take(SEC, SEC, 1), Verdict::Refused(Duration::from_secs(1)));
        assert_eq!(b.take(2 * SEC - 1, SEC, 1), Verdict::Refused(Duration::from_nanos(1)));
        assert_eq!(b.take(2 * SEC, SEC, 1), Verdict::Allowed);
    }

    /// Steady traffic at exactly the rate is never refused; at twice the
    /// rate, half is.
    #[test]
    fn the_long_run_rate_is_the_configured_one() {
        let mut b = Bucket::default();
        let mut allowed = 0;
        for i in 0..1000u64 {
            if b.take(i * SEC / 10, SEC / 10, 1) == Verdict::Allowed {
                allowed += 1;
            }
        }
        assert_eq!(allowed, 1000);
        let mut b = Bucket::default();
        let allowed = (0..1000u64)
            .filter(|i| b.take(i * SEC / 20, SEC / 10, 1) == Verdict::Allowed)
            .count();
        assert_eq!(allowed, 500);
    }

    #[test]
    fn ipv6_clients_are_keyed_by_their_64_and_mapped_ipv4_as_ipv4() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(key(ip("2001:db8:1:2::1")), key(ip("2001:db8:1:2:ffff::9")));
        assert_ne!(key(ip("2001:db8:1:2::1")), key(ip("2001:db8:1:3::1")));
        assert_eq!(key(ip("::ffff:127.0.0.2")), key(ip("127.0.0.2")));
        assert_ne!(key(ip("127.0.0.2")), key(ip("127.0.0.3")));
        // An IPv4 key is no IPv6 /64's.
        assert_ne!(key(ip("0.0.0.1")), key(ip("::")));
    }

    #[test]
    fn clients_have_buckets_of_their_own() {
        let table = Table::new(limit("1/s", Some(2)), ENTRIES_MAX);
        let (a, b) = (key("10.0.0.1".parse().unwrap()), key("10.0.0.2".parse().unwrap()));
        assert_eq!(table.take(a, 0), Verdict::Allowed);
        assert_eq!(table.take(a, 0), Verdict::Allowed);
        assert!(matches!(table.take(a, 0), Verdict::Refused(_)));
        assert_eq!(table.take(b, 0), Verdict::Allowed);
    }

    /// The table never holds more than its bound, and what it forgets is
    /// the least recently used client: a client seen again stays.
    #[test]
    fn a_full_table_forgets_the_least_recently_used_client() {
        let table = Table::new(limit("1/h", Some(1)), N_SHARDS); // one per shard
        let mut shard = Shard::new(2);
        let (a, b, c) = (1u128, 2u128, 3u128);
        assert_eq!(shard.bucket(a).take(0, SEC, 1), Verdict::Allowed);
        assert_eq!(shard.bucket(b).take(0, SEC, 1), Verdict::Allowed);
        // a is used again, so b is now the least recent.
        assert!(matches!(shard.bucket(a).take(0, SEC, 1), Verdict::Refused(_)));
        assert_eq!(shard.bucket(c).take(0, SEC, 1), Verdict::Allowed);
        assert_eq!(shard.map.len(), 2);
        assert!(matches!(shard.bucket(a).take(0, SEC, 1), Verdict::Refused(_)), "a kept");
        assert!(matches!(shard.bucket(c).take(0, SEC, 1), Verdict::Refused(_)), "c kept");
        assert_eq!(shard.bucket(b).take(0, SEC, 1), Verdict::Allowed, "b forgotten");

        for i in 0..10_000u128 {
            table.take(i, 0);
        }
        assert_eq!(table.len(), N_SHARDS);
    }
}
