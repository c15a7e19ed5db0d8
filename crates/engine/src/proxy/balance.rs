//! Several upstreams behind one route: which one a request goes to, and
//! which ones are out for now.
//!
//! A [`Balance`] is a route's upstreams (its "members") and a [`Policy`]
//! (Caddy's `lb_policy`, nginx's `upstream` block):
//! - round robin, the default (nginx's and Caddy's);
//! - least connections: the member with the fewest exchanges under way in
//!   this worker (busy connections and queued requests), ties taken in
//!   round-robin order (nginx's `least_conn`);
//! - a hash of the client's address (as `Request::client_addr` decides it)
//!   or of a named field's value: the same key goes to the same member
//!   while it is in; when it is out, only its keys move (rendezvous
//!   hashing, as Caddy's `ip_hash` and `header` policies do). A request
//!   without the field goes round robin.
//!
//! The choice is made by the worker's pool (`pool.rs`) when it takes the
//! job, where it knows each member's load; the handler only hashes the
//! key. Every member gets the same request bytes, so members may differ in
//! host, port and scheme but not in path (refused when the balance is
//! made); a Host rewritten to the upstream's (`HostHeader::Upstream`)
//! names the first member, as nginx's `$proxy_host` names the group.
//!
//! Members that are out are skipped: those the active check found down
//! (`health.rs`, one thread per process, atomics read here), and those
//! this worker took out itself (passive health, per worker as nginx's
//! `max_fails` without a shared zone is): `max_fails` failures (a connect
//! that failed or timed out, a connection closed or reset before the
//! answer's head, an answer cut, malformed or late, and an answer whose
//! status is in the balance's `fail_status`, empty unless configured)
//! within `fail_timeout` take a member out for `fail_timeout`;
//! then it is back on probation, and its first failure takes it out again
//! at once, its first success clears it (nginx's `max_fails` and
//! `fail_timeout`, which are one setting for the window and the pause
//! there too). When every member is out, the request gets 503 with
//! `Retry-After` (Caddy's and HAProxy's answer; nginx says 502).
//!
//! An upstream's own 5xx is no failure by default: nginx's `max_fails`
//! counts what `proxy_next_upstream` names, `error timeout` by default,
//! and Caddy's passive `unhealthy_status` is empty by default. Counting
//! them would let any client take every member out with a few requests
//! to one URL that answers 500 (or a method the upstream does not
//! implement: 501). A route opts in with `fail_status` (Caddy's
//! `unhealthy_status`), e.g. 502, 503 and 504.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::health::Checked;
use super::upstream::{Upstream, UpstreamError};

/// How a request's member is chosen.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Policy {
    /// Each member in turn (the default).
    #[default]
    RoundRobin,
    /// The member with the fewest exchanges under way in this worker.
    LeastConn,
    /// A hash of the client's address.
    ClientIp,
    /// A hash of this field's value (round robin without it).
    Header(String),
}

impl Policy {
    /// `round-robin`, `least-conn`, `ip-hash` or `header NAME` (the
    /// configuration's spelling of Caddy's `lb_policy` values).
    pub fn parse(s: &str) -> Result<Policy, String> {
        let s = s.trim();
        match s {
            "round-robin" => Ok(Policy::RoundRobin),
            "least-conn" => Ok(Policy::LeastConn),
            "ip-hash" => Ok(Policy::ClientIp),
            _ => match s.strip_prefix("header") {
                Some(name)
                    if name.starts_with([' ', '\t'])
                        && !name.trim().is_empty()
                        && name
                            .trim()
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b)) =>
                {
                    Ok(Policy::Header(name.trim().to_ascii_lowercase()))
                }
                _ => Err(format!(
                    "{s:?}: expected \"round-robin\", \"least-conn\", \"ip-hash\" or \"header NAME\""
                )),
            },
        }
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Policy::RoundRobin => f.write_str("round-robin"),
            Policy::LeastConn => f.write_str("least-conn"),
            Policy::ClientIp => f.write_str("ip-hash"),
            Policy::Header(name) => write!(f, "header {name}"),
        }
    }
}

/// A route's upstreams and how they are chosen.
#[derive(Clone, Debug)]
pub(crate) struct Balance {
    /// Names the balance's round-robin position in every worker.
    pub(crate) id: usize,
    pub(crate) members: Vec<Arc<Upstream>>,
    pub(crate) policy: Policy,
    pub(crate) max_fails: u32,
    pub(crate) fail_timeout: Duration,
    /// Statuses of an upstream's answer that count as failures (none by
    /// default).
    pub(crate) fail_status: FailStatus,
    /// The active check's verdicts, when there is one.
    pub(crate) checked: Option<Arc<Checked>>,
}

/// What a job carries to have its member chosen: the balance, the
/// request's hash key, and the members it tried (a bit each).
#[derive(Clone, Debug)]
pub(crate) struct Choice {
    pub(crate) balance: Arc<Balance>,
    pub(crate) key: Option<u64>,
    pub(crate) tried: u64,
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

impl Balance {
    /// Members a balance may have at most: a request remembers the ones
    /// it tried in one 64-bit word.
    pub const MEMBERS_MAX: usize = 64;
    /// Failures within `fail_timeout` that take a member out (nginx's
    /// `max_fails` is 1; 3 rides out a lone reset, and a route that
    /// counts statuses too (`fail_status`) is not taken out by one error
    /// page). 0 turns passive health off.
    pub const MAX_FAILS: u32 = 3;
    /// The window failures are counted in, and how long a member stays out
    /// (nginx's `fail_timeout`, Caddy's `fail_duration`).
    pub const FAIL_TIMEOUT: Duration = Duration::from_secs(10);

    pub(crate) fn new(members: Vec<Upstream>, policy: Policy) -> Result<Balance, UpstreamError> {
        let Some(first) = members.first() else {
            return Err(UpstreamError::new("a balance needs at least one upstream".into()));
        };
        if members.len() > Balance::MEMBERS_MAX {
            return Err(UpstreamError::new(format!(
                "{} upstreams: at most {} per route",
                members.len(),
                Balance::MEMBERS_MAX
            )));
        }
        for m in &members[1..] {
            if m.path_part() != first.path_part() || m.prefix_part() != first.prefix_part() {
                return Err(UpstreamError::new(format!(
                    "upstreams {:?} and {:?}: the upstreams of one route take the same path (every one gets the \
                     same request)",
                    first.url(),
                    m.url()
                )));
            }
        }
        for (i, m) in members.iter().enumerate() {
            if members[..i].iter().any(|o| o.url() == m.url()) {
                return Err(UpstreamError::new(format!("upstream {:?} given twice", m.url())));
            }
        }
        Ok(Balance {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            members: members.into_iter().map(Arc::new).collect(),
            policy,
            max_fails: Balance::MAX_FAILS,
            fail_timeout: Balance::FAIL_TIMEOUT,
            fail_status: FailStatus::default(),
            checked: None,
        })
    }

    /// The key a request is hashed by, if the policy hashes and the
    /// request has one.
    pub(crate) fn key(&self, req: &crate::Request<'_>) -> Option<u64> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        match &self.policy {
            Policy::RoundRobin | Policy::LeastConn => return None,
            Policy::ClientIp => req.client_addr().ip.to_canonical().hash(&mut h),
            Policy::Header(name) => req.header_bytes(name)?.hash(&mut h),
        }
        Some(h.finish())
    }

    /// Whether member `i` is in for the active check (always, without
    /// one).
    fn checked_up(&self, i: usize) -> bool {
        self.checked.as_ref().is_none_or(|c| c.is_up(i))
    }
}

/// The statuses of an upstream's answers that passive health counts as
/// failures (Caddy's `unhealthy_status`): 400 to 599, a bit each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FailStatus([u64; 4]);

impl FailStatus {
    /// The statuses that may be counted: an upstream's error answers.
    pub const RANGE: std::ops::RangeInclusive<u16> = 400..=599;

    /// The set of `statuses`, each in [`FailStatus::RANGE`].
    pub fn new(statuses: &[u16]) -> Result<FailStatus, String> {
        let mut set = FailStatus::default();
        for &s in statuses {
            if !FailStatus::RANGE.contains(&s) {
                return Err(format!("{s}: a status from 400 to 599"));
            }
            let bit = usize::from(s - 400);
            set.0[bit / 64] |= 1 << (bit % 64);
        }
        Ok(set)
    }

    /// Whether an answer of `status` counts as a failure.
    #[inline]
    pub fn contains(&self, status: u16) -> bool {
        match status.checked_sub(400) {
            Some(bit @ 0..=199) => self.0[usize::from(bit) / 64] & (1 << (bit % 64)) != 0,
            _ => false,
        }
    }

    /// The statuses in the set, lowest first.
    pub fn statuses(&self) -> Vec<u16> {
        FailStatus::RANGE.filter(|&s| self.contains(s)).collect()
    }
}

/// A member's passive health in one worker.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Passive {
    /// The balance's `max_fails` and `fail_timeout`.
    max_fails: u32,
    timeout: Duration,
    /// The balance's `fail_status`.
    fail_status: FailStatus,
    /// Failures counted since `since`.
    fails: u32,
    since: Option<Instant>,
    /// Out until then.
    out_until: Option<Instant>,
    /// Back from a pause: the next failure takes it out again.
    probation: bool,
}

impl Passive {
    pub(crate) fn new(b: &Balance) -> Passive {
        Passive {
            max_fails: b.max_fails,
            timeout: b.fail_timeout,
            fail_status: b.fail_status,
            ..Passive::default()
        }
    }

    /// Whether an upstream's answer of `status` is a failure (its status
    /// in the balance's `fail_status`), rather than an answer.
    pub(crate) fn fails_with(&self, status: u16) -> bool {
        self.fail_status.contains(status)
    }

    /// Whether the member was out when last looked at.
    pub(crate) fn is_out_now(&self) -> bool {
        self.out_until.is_some()
    }

    /// Counts a failure at `now` against the balance's thresholds.
    pub(crate) fn failed_now(&mut self, now: Instant) -> bool {
        self.failed(now, self.max_fails, self.timeout)
    }

    /// Whether the member is out at `now` (a pause that ended puts it on
    /// probation).
    pub(crate) fn is_out(&mut self, now: Instant) -> bool {
        match self.out_until {
            Some(t) if now < t => true,
            Some(_) => {
                self.out_until = None;
                self.probation = true;
                self.fails = 0;
                self.since = None;
                false
            }
            None => false,
        }
    }

    /// Counts a failure at `now`; `true` if it takes the member out.
    pub(crate) fn failed(&mut self, now: Instant, max_fails: u32, timeout: Duration) -> bool {
        if max_fails == 0 || self.out_until.is_some_and(|t| now < t) {
            return false;
        }
        if self.since.is_none_or(|s| now.saturating_duration_since(s) >= timeout) {
            self.since = Some(now);
            self.fails = 0;
        }
        self.fails += 1;
        if self.probation || self.fails >= max_fails {
            self.out_until = Some(now + timeout);
            self.probation = false;
            self.fails = 0;
            self.since = None;
            return true;
        }
        false
    }

    /// An answer that was no failure: probation ends.
    pub(crate) fn succeeded(&mut self) {
        self.probation = false;
    }
}

/// One worker's side of every balance: round-robin positions and each
/// member's passive health (by upstream id).
#[derive(Default)]
pub(crate) struct Local {
    next: HashMap<usize, usize>,
    pub(crate) passive: HashMap<usize, Passive>,
}

impl Local {
    /// The member for a request with hash `key` that has tried the members
    /// in `tried` (a bit each), at `now`; `load` says a member's exchanges
    /// under way. `None` when every member left is out.
    pub(crate) fn choose(
        &mut self,
        b: &Balance,
        key: Option<u64>,
        tried: u64,
        now: Instant,
        load: impl Fn(&Upstream) -> usize,
    ) -> Option<usize> {
        let n = b.members.len();
        let mut eligible = [false; Balance::MEMBERS_MAX];
        let mut any = false;
        for (i, m) in b.members.iter().enumerate() {
            let out = self.passive.get_mut(&m.id).is_some_and(|p| p.is_out(now));
            eligible[i] = tried & (1 << i) == 0 && !out && b.checked_up(i);
            any |= eligible[i];
        }
        if !any {
            return None;
        }
        if let Some(key) = key {
            // Rendezvous: the member whose (key, member) hash is highest.
            return (0..n).filter(|&i| eligible[i]).max_by_key(|&i| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (key, b.members[i].url()).hash(&mut h);
                h.finish()
            });
        }
        let start = self.next.get(&b.id).copied().unwrap_or(0) % n;
        let mut order = (0..n).map(|k| (start + k) % n).filter(|&i| eligible[i]);
        let chosen = match b.policy {
            Policy::LeastConn => order.min_by_key(|&i| load(&b.members[i])),
            _ => order.next(),
        }?;
        self.next.insert(b.id, (chosen + 1) % n);
        Some(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn balance(n: usize, policy: Policy) -> Balance {
        let members = (0..n)
            .map(|i| Upstream::parse(&format!("http://127.0.0.1:{}", 9000 + i)).unwrap())
            .collect();
        Balance::new(members, policy).unwrap()
    }

    #[test]
    fn round_robin_takes_each_member_in_turn_and_skips_those_out() {
        let b = balance(3, Policy::RoundRobin);
        let mut local = Local::default();
        let now = Instant::now();
        let picks: Vec<usize> = (0..6).map(|_| local.choose(&b, None, 0, now, |_| 0).unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        // Member 1 taken out (max_fails failures): the others share.
        for _ in 0..b.max_fails {
            local
                .passive
                .entry(b.members[1].id)
                .or_default()
                .failed(now, b.max_fails, b.fail_timeout);
        }
        let picks: Vec<usize> = (0..4).map(|_| local.choose(&b, None, 0, now, |_| 0).unwrap()).collect();
        assert_eq!(picks, [0, 2, 0, 2]);
        // A retry does not go back to a member it tried.
        assert_eq!(local.choose(&b, None, 0b101, now, |_| 0), None);
        // After the pause it is back.
        let later = now + b.fail_timeout;
        let picks: Vec<usize> = (0..3)
            .map(|_| local.choose(&b, None, 0, later, |_| 0).unwrap())
            .collect();
        assert_eq!(picks, [0, 1, 2]);
    }

    #[test]
    fn least_conn_takes_the_least_loaded_and_breaks_ties_in_turn() {
        let b = balance(3, Policy::LeastConn);
        let mut local = Local::default();
        let now = Instant::now();
        let load = |u: &Upstream| if u.url().ends_with(":9000") { 5 } else { 1 };
        let picks: Vec<usize> = (0..4).map(|_| local.choose(&b, None, 0, now, load).unwrap()).collect();
        assert_eq!(picks, [1, 2, 1, 2]);
    }

    #[test]
    fn a_hash_keeps_a_key_on_its_member_and_moves_only_its_keys_when_it_is_out() {
        let b = balance(4, Policy::ClientIp);
        let mut local = Local::default();
        let now = Instant::now();
        let before: Vec<usize> = (0..200u64)
            .map(|k| local.choose(&b, Some(k), 0, now, |_| 0).unwrap())
            .collect();
        for (k, &m) in before.iter().enumerate() {
            assert_eq!(local.choose(&b, Some(k as u64), 0, now, |_| 0), Some(m));
        }
        // Every member gets some keys.
        for m in 0..4 {
            assert!(before.iter().filter(|&&x| x == m).count() > 20, "{before:?}");
        }
        local
            .passive
            .entry(b.members[2].id)
            .or_default()
            .failed(now, 1, b.fail_timeout);
        for (k, &m) in before.iter().enumerate() {
            let after = local.choose(&b, Some(k as u64), 0, now, |_| 0).unwrap();
            if m == 2 {
                assert_ne!(after, 2);
            } else {
                assert_eq!(after, m, "key {k} moved though its member is in");
            }
        }
    }

    #[test]
    fn passive_health_counts_within_the_window_and_probation_takes_out_at_once() {
        let t = Duration::from_secs(10);
        let now = Instant::now();
        let mut p = Passive::default();
        assert!(!p.failed(now, 3, t));
        assert!(!p.failed(now, 3, t));
        // The window passed: counting starts again.
        let now = now + t;
        assert!(!p.failed(now, 3, t));
        assert!(!p.failed(now, 3, t));
        assert!(p.failed(now, 3, t));
        assert!(p.is_out(now));
        assert!(!p.is_out(now + t));
        // On probation: one failure is enough.
        assert!(p.failed(now + t, 3, t));
        let now = now + t + t;
        assert!(!p.is_out(now));
        p.succeeded();
        assert!(!p.failed(now, 3, t));
        // max_fails 0: never out.
        let mut off = Passive::default();
        for _ in 0..10 {
            assert!(!off.failed(now, 0, t));
        }
    }

    #[test]
    fn statuses_count_as_failures_only_when_listed() {
        let none = FailStatus::default();
        for s in [200, 404, 500, 501, 502, 503, 504, 599] {
            assert!(!none.contains(s), "{s}");
        }
        let set = FailStatus::new(&[502, 503, 504, 429]).unwrap();
        for s in [429, 502, 503, 504] {
            assert!(set.contains(s), "{s}");
        }
        for s in [0, 200, 399, 400, 428, 430, 500, 501, 505, 599, 600, 1000, u16::MAX] {
            assert!(!set.contains(s), "{s}");
        }
        assert_eq!(set.statuses(), [429, 502, 503, 504]);
        let edges = FailStatus::new(&[400, 599]).unwrap();
        assert!(edges.contains(400) && edges.contains(599) && !edges.contains(401));
        for bad in [200, 399, 600] {
            assert!(FailStatus::new(&[bad]).is_err(), "{bad}");
        }
        // A member's passive health reads its balance's set.
        let mut b = balance(2, Policy::RoundRobin);
        assert!(!Passive::new(&b).fails_with(500));
        b.fail_status = FailStatus::new(&[500]).unwrap();
        assert!(Passive::new(&b).fails_with(500));
        assert!(!Passive::new(&b).fails_with(502));
    }

    #[test]
    fn policies_are_read_as_written() {
        assert_eq!(Policy::parse("round-robin"), Ok(Policy::RoundRobin));
        assert_eq!(Policy::parse("least-conn"), Ok(Policy::LeastConn));
        assert_eq!(Policy::parse("ip-hash"), Ok(Policy::ClientIp));
        assert_eq!(Policy::parse("header X-User"), Ok(Policy::Header("x-user".into())));
        for bad in ["random", "header", "header ", "header a:b", "headerX"] {
            assert!(Policy::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn members_must_share_their_path() {
        let a = Upstream::parse("http://127.0.0.1:9000/v1/").unwrap();
        let b = Upstream::parse("http://127.0.0.1:9001/v2/").unwrap();
        let err = Balance::new(vec![a, b], Policy::RoundRobin).unwrap_err();
        assert!(err.to_string().contains("same path"), "{err}");
        let a = Upstream::parse("http://127.0.0.1:9000").unwrap();
        let again = Upstream::parse("http://127.0.0.1:9000").unwrap();
        assert!(Balance::new(vec![a, again], Policy::RoundRobin).is_err());
    }
}
