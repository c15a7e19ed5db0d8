//! Basic authentication (issue 27; RFC 7617): a route's `basic-auth`
//! setting and `_headers`' `Basic-Auth` lines (`peregrine_files::auth`)
//! are checked here, never on a worker's event loop.
//!
//! A password hash takes tens of milliseconds by design (bcrypt at cost
//! 10: about 50 ms), so checking one on the loop for every request would
//! let a client stall every connection of a worker with a few bad
//! passwords a second. Instead ([`Guard::guard`]):
//! 1. no `Authorization: Basic` credentials: 401 with `WWW-Authenticate`
//!    at once (nothing else is looked at: the page's answer is not made);
//! 2. credentials proven in the last [`CACHE_TTL`]: the answer at once,
//!    on the loop. Successes are remembered under an HMAC-SHA256 of the
//!    user's stored hash, name and password with a key made at random for
//!    the process ([`Verifier`]): the cache holds no password, and a
//!    success lasts only while the hash it was checked against does (a
//!    password changed by a reload is checked again);
//! 3. a client (`Request::client_addr`, as IP rules and rate limits see
//!    it; IPv6 by its /64) that failed [`FAILURES`] times lately: 429 with
//!    `Retry-After`, no hash computed (a token bucket, `rate.rs`'s table:
//!    10 at once, then one every 6 s);
//! 4. otherwise the page's answer is made on the loop (cheap: a lookup),
//!    the request deferred (`Request::defer`), and the check queued for a
//!    small pool of verifier threads ([`VERIFIER_THREADS`]), which sends
//!    the answer, or the 401, through the `Responder`. At most
//!    [`QUEUED_MAX`] checks wait or run at once; past it, 503 with
//!    `Retry-After` at once. An unknown user's password is checked against
//!    one of the rule's own hashes all the same, and the result thrown
//!    away, so that a name is not told from its timing.
//!
//! Every answer to a protected path, the 200s included, is private to its
//! user (`Cache-Control: private`, `public` dropped: RFC 9111 §3.5 would
//! let a shared cache keep an authenticated answer marked public).
//! Credentials are never logged and never copied into an answer; the
//! access log does not record `Authorization`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use peregrine::{Reply, Request, Responder, Response};
use peregrine_files::auth::{self, Gate, Hash, Users};

use super::rate::{self, RateLimit};
use super::Finish;

/// How long a proven user:password is believed without a hash check: a
/// page's burst of requests, and a reader's next clicks, cost one check.
/// Five minutes, as long as a revoked password (a reload with a new hash)
/// can matter only for the hash it was checked against: none.
pub(crate) const CACHE_TTL: Duration = Duration::from_secs(300);

/// Most successes remembered (over all shards): 32-byte keys and an
/// `Instant`, about 3 MiB at worst; more users signed in at once than
/// this cost a check each after the eviction.
pub(crate) const CACHE_ENTRIES_MAX: usize = 65_536;

/// Shards of the success cache: workers seldom want one lock at once.
const CACHE_SHARDS: usize = 16;

/// Failed checks a client may have lately: ten at once, then one every
/// six seconds (a token bucket per client address: `rate.rs`).
pub(crate) const FAILURES: &str = "10/m";

/// Threads that check hashes: two, whatever the cores, so that a flood of
/// bad passwords costs the server two cores at most while the workers go
/// on serving everything else.
pub(crate) const VERIFIER_THREADS: usize = 2;

/// Checks that may wait or run at once, over all routes: at 50 ms a
/// check on two threads, the last waits under a second. Past it: 503.
pub(crate) const QUEUED_MAX: usize = 32;

/// The realm when a site has no name (`serve DIR|ARCHIVE` without
/// sites): what browsers show in their prompt.
pub(crate) const REALM_DEFAULT: &str = "restricted";

/// A route's `basic-auth = { users = [...], realm = "..." }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BasicAuth {
    /// `user:hash` as written, checked.
    pub(crate) users: Arc<Users>,
    /// As written; `None`: the site's name.
    pub(crate) realm: Option<String>,
}

impl BasicAuth {
    /// The setting from its users (`user:hash` each) and realm.
    pub(crate) fn new(users: &[String], realm: Option<String>) -> Result<BasicAuth, String> {
        if users.is_empty() {
            return Err("users: an empty list: give user:hash pairs, e.g. [\"alice:$2b$10$...\"]".into());
        }
        let users = Users::parse(&users.join(" "))?;
        if let Some(realm) = &realm {
            if realm.is_empty() || realm.chars().any(|c| c.is_control()) {
                return Err("realm: an empty value or a control character".into());
            }
        }
        Ok(BasicAuth {
            users: Arc::new(users),
            realm,
        })
    }
}

/// How a check went, for the tests' injected checker.
type Checker = fn(&Hash, &[u8]) -> bool;

/// The process's credential checking (one per generation of workers):
/// the success cache, the failures per client, and the verifier threads,
/// started when the first check is queued.
pub(crate) struct Verifier {
    shared: Arc<Shared>,
    /// Checks queued or running ([`QUEUED_MAX`]).
    queued: Arc<AtomicUsize>,
    jobs: OnceLock<Mutex<mpsc::Sender<Box<Job>>>>,
}

/// What the loop and the verifier threads share.
struct Shared {
    key: ring::hmac::Key,
    cache: Box<[Successes]>,
    failures: rate::Table,
    check: Checker,
}

/// One shard of the success cache: key → when it was proven.
type Successes = Mutex<HashMap<[u8; 32], Instant>>;

/// A check for a verifier thread, and the answers it chooses between.
struct Job {
    users: Arc<Users>,
    user: String,
    password: Vec<u8>,
    key: [u8; 32],
    client: u128,
    responder: Responder,
    /// The page's answer, for a client who proves their credentials.
    granted: Response,
    /// The 401, for one who does not.
    denied: Response,
}

impl Verifier {
    pub(crate) fn new() -> Arc<Verifier> {
        Verifier::with_checker(|hash, password| hash.verify(password))
    }

    fn with_checker(check: Checker) -> Arc<Verifier> {
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &ring::rand::SystemRandom::new())
            .expect("the system gives random bytes");
        let limit = RateLimit::new(FAILURES, None).expect("a valid rate");
        Arc::new(Verifier {
            shared: Arc::new(Shared {
                key,
                cache: (0..CACHE_SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
                failures: rate::Table::new(limit, rate::ENTRIES_MAX),
                check,
            }),
            queued: Arc::new(AtomicUsize::new(0)),
            jobs: OnceLock::new(),
        })
    }

    /// Queues a check; `Err` gives the job back when the threads cannot
    /// be started.
    fn queue(&self, job: Box<Job>) -> Result<(), Box<Job>> {
        let jobs = self.jobs.get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Box<Job>>();
            let rx = Arc::new(Mutex::new(rx));
            for i in 0..VERIFIER_THREADS {
                let (rx, shared, queued) = (rx.clone(), self.shared.clone(), self.queued.clone());
                let spawned = std::thread::Builder::new()
                    .name(format!("peregrine-auth-{i}"))
                    .spawn(move || loop {
                        // The sender goes with the generation's handlers:
                        // then the queue drains and the thread ends.
                        let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        let Ok(job) = job else { return };
                        shared.run(*job);
                        queued.fetch_sub(1, Ordering::AcqRel);
                    });
                if let Err(e) = spawned {
                    peregrine::log::error(format_args!("cannot start a credential checking thread: {e}"));
                }
            }
            Mutex::new(tx)
        });
        jobs.lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(job)
            .map_err(|e| e.0)
    }
}

impl Shared {
    /// The cache key of `user`'s `password` checked against `hash`.
    fn key_of(&self, hash: &Hash, user: &str, password: &[u8]) -> [u8; 32] {
        let mut ctx = ring::hmac::Context::with_key(&self.key);
        ctx.update(hash.as_str().as_bytes());
        ctx.update(b"\0");
        ctx.update(user.as_bytes());
        ctx.update(b"\0");
        ctx.update(password);
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.sign().as_ref());
        out
    }

    fn shard(&self, key: &[u8; 32]) -> &Successes {
        &self.cache[usize::from(key[0]) % self.cache.len()]
    }

    /// Whether `key` was proven within [`CACHE_TTL`] of `now`.
    fn proven(&self, key: &[u8; 32], now: Instant) -> bool {
        let shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        shard
            .get(key)
            .is_some_and(|&at| now.saturating_duration_since(at) < CACHE_TTL)
    }

    /// Remembers a success at `now`. A full shard first forgets what has
    /// expired, then, still full, an entry at random (bounded, and an
    /// evicted user pays one more check).
    fn remember(&self, key: [u8; 32], now: Instant) {
        let mut shard = self.shard(&key).lock().unwrap_or_else(|e| e.into_inner());
        let per_shard = CACHE_ENTRIES_MAX.div_ceil(self.cache.len());
        if shard.len() >= per_shard {
            shard.retain(|_, at| now.saturating_duration_since(*at) < CACHE_TTL);
            if shard.len() >= per_shard {
                if let Some(k) = shard.keys().next().copied() {
                    shard.remove(&k);
                }
            }
        }
        shard.insert(key, now);
    }

    /// How long `client` must wait before it may try again, if it failed
    /// too often lately.
    fn barred(&self, client: u128, now: Instant) -> Option<Duration> {
        match self.failures.peek(client, self.failures.clock(now)) {
            rate::Verdict::Allowed => None,
            rate::Verdict::Refused(wait) => Some(wait),
        }
    }

    /// The check itself (slow: off the loop): whether `password` is
    /// `user`'s; a success is remembered under `key`, a failure counted
    /// against `client`. An unknown user costs a check all the same.
    fn verify(&self, users: &Users, user: &str, password: &[u8], key: [u8; 32], client: u128) -> bool {
        let ok = match users.hash_of(user) {
            Some(hash) => (self.check)(hash, password),
            None => {
                let _ = (self.check)(users.decoy(), password);
                false
            }
        };
        let now = Instant::now();
        if ok {
            self.remember(key, now);
        } else {
            let _ = self.failures.take(client, self.failures.clock(now));
        }
        ok
    }

    fn run(&self, job: Job) {
        let ok = self.verify(&job.users, &job.user, &job.password, job.key, job.client);
        job.responder.send(if ok { job.granted } else { job.denied });
    }
}

/// Asks the verifier about requests to protected paths: one per route
/// (or root) that may have them, with the realm its 401s name and what
/// the route adds to the answers it sends from another thread.
pub(crate) struct Guard {
    pub(crate) verifier: Arc<Verifier>,
    pub(crate) realm: String,
    /// The route's CORS fields and `headers`, for deferred answers (those
    /// given at once get them from the route's wrapper).
    pub(crate) finish: Finish,
    /// Set on the inner handler of a route whose own `basic-auth` decides:
    /// the route's wrapper has checked, or holds the answer until it has.
    pub(crate) checked_outside: bool,
}

impl Gate for Guard {
    fn guard(&self, req: &Request<'_>, users: &Arc<Users>, answer: &mut dyn FnMut() -> Response) -> Reply {
        if self.checked_outside {
            return Reply::Now(auth::private(answer()));
        }
        let Some((user, password)) = credentials(req) else {
            return Reply::Now(challenge(&self.realm));
        };
        let shared = &self.verifier.shared;
        let now = peregrine::now();
        let key = users.hash_of(&user).map(|hash| shared.key_of(hash, &user, &password));
        if let Some(key) = &key {
            if shared.proven(key, now) {
                return Reply::Now(auth::private(answer()));
            }
        }
        let client = rate::key(client_ip(req));
        if let Some(wait) = shared.barred(client, now) {
            return Reply::Now(retry_after(
                Response::error(429).with_reason(peregrine::Reason::Auth),
                wait,
            ));
        }
        let queued = &self.verifier.queued;
        if queued.fetch_add(1, Ordering::AcqRel) >= QUEUED_MAX {
            queued.fetch_sub(1, Ordering::AcqRel);
            return Reply::Now(retry_after(Response::error(503), Duration::from_secs(1)));
        }
        let origin = req.header("origin");
        let granted = auth::private(self.finish.apply(answer(), origin));
        let denied = self.finish.apply(challenge(&self.realm), origin);
        let job = Box::new(Job {
            users: users.clone(),
            user,
            password,
            // An unknown user is never remembered: any key will do.
            key: key.unwrap_or([0; 32]),
            client,
            responder: req.defer(),
            granted,
            denied,
        });
        let job = match hold(&self.verifier, job) {
            Some(job) => job,
            None => return Reply::Later,
        };
        if let Err(job) = self.verifier.queue(job) {
            queued.fetch_sub(1, Ordering::AcqRel);
            job.responder
                .send(retry_after(Response::error(503), Duration::from_secs(1)));
        }
        Reply::Later
    }
}

thread_local! {
    /// `Some` while a route's forward auth calls its handler
    /// ([`holding`]): a password check is kept here instead of queued,
    /// and queued only if the auth service lets the request through
    /// (its answer would otherwise go out unheld, from a verifier thread).
    static HELD: RefCell<Option<Option<HeldCheck>>> = const { RefCell::new(None) };
}

/// A password check that waits for a forward-auth verdict.
pub(crate) struct HeldCheck {
    verifier: Arc<Verifier>,
    job: Box<Job>,
}

impl HeldCheck {
    /// Queues the check (`Ok`), or sends the refusal in its place.
    pub(crate) fn decide(self, verdict: Result<(), Response>) {
        let queued = &self.verifier.queued;
        match verdict {
            Ok(()) => {
                if let Err(job) = self.verifier.queue(self.job) {
                    queued.fetch_sub(1, Ordering::AcqRel);
                    job.responder
                        .send(retry_after(Response::error(503), Duration::from_secs(1)));
                }
            }
            Err(refusal) => {
                queued.fetch_sub(1, Ordering::AcqRel);
                self.job.responder.send(refusal);
            }
        }
    }
}

/// Calls `f`, keeping the password check a guard would queue meanwhile.
pub(crate) fn holding<R>(f: impl FnOnce() -> R) -> (R, Option<HeldCheck>) {
    /// Leaves nothing set, even if `f` panics.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            HELD.with(|h| h.borrow_mut().take());
        }
    }
    HELD.with(|h| *h.borrow_mut() = Some(None));
    let reset = Reset;
    let r = f();
    let held = HELD.with(|h| h.borrow_mut().take().flatten());
    drop(reset);
    (r, held)
}

/// `job`, or `None` when it was kept for a forward-auth verdict.
fn hold(verifier: &Arc<Verifier>, job: Box<Job>) -> Option<Box<Job>> {
    HELD.with(|h| match &mut *h.borrow_mut() {
        Some(slot) => {
            *slot = Some(HeldCheck {
                verifier: verifier.clone(),
                job,
            });
            None
        }
        None => Some(job),
    })
}

/// What the start tells the operator of protected paths: `public`
/// dropped from their answers, passwords that were written in the clear
/// (worth a warning when a listener is cleartext and not loopback: they
/// travel as they were written, base64 being no cipher), and protections
/// a reverse proxy takes paths from.
#[derive(Debug, Default)]
pub(crate) struct Notes {
    /// One line each: where, and which pattern or route.
    pub(crate) public: Vec<String>,
    /// Where plain-password rules are: a `_headers` pattern's.
    pub(crate) plain: Vec<String>,
    /// Protections a proxy goes around (`under_proxy`), one line each.
    pub(crate) bypassed: Vec<String>,
    /// Every protection seen, for `under_proxy`.
    protected: Vec<Protected>,
}

/// A protection, as `Notes` keeps it.
#[derive(Debug)]
struct Protected {
    /// The site or root, and the route if any (`site a, route /x/*`).
    what: String,
    /// A `_headers` pattern, or the route's path.
    pattern: String,
    /// A route's `basic-auth`, `forward-auth`, `ip` allow/deny list or
    /// `rate-limit` (else `_headers`' `Basic-Auth`).
    route: Option<&'static str>,
}

impl Notes {
    /// A directory's `_headers` rules (`what` names the site or root).
    pub(crate) fn files(&mut self, what: &str, server: &peregrine_files::FileServer) {
        let (rules, public) = server.protection();
        self.protected.extend(rules.iter().map(|r| Protected {
            what: what.to_owned(),
            pattern: r.pattern.clone(),
            route: None,
        }));
        for pattern in public {
            self.public.push(format!(
                "{what}: {pattern} is protected by _headers' Basic-Auth, so its `Cache-Control: public` is dropped: \
                 authenticated answers are private"
            ));
        }
        for r in rules.iter().filter(|r| r.users.from_plain()) {
            self.plain
                .push(format!("{what}: _headers' Basic-Auth for {}", r.pattern));
        }
    }

    /// An archive's rules (their `public` was said by `pack`).
    pub(crate) fn archive(&mut self, what: &str, server: &peregrine_archive::ArchiveServer) {
        let rules = server.protection();
        self.protected.extend(rules.iter().map(|(_, r)| Protected {
            what: what.to_owned(),
            pattern: r.pattern.clone(),
            route: None,
        }));
        for (_, r) in rules.iter().filter(|(_, r)| r.users.from_plain()) {
            self.plain.push(format!(
                "{what}: the archive's Basic-Auth for {} (plain in _headers)",
                r.pattern
            ));
        }
    }

    /// A route with `rule` (`basic-auth`, `forward-auth`) at `path`,
    /// whose settings or fields may say `public`.
    pub(crate) fn route(
        &mut self,
        what: &str,
        path: &str,
        rule: &'static str,
        headers: &[(String, String)],
        files: Option<&peregrine_files::Options>,
    ) {
        self.protected.push(Protected {
            what: what.to_owned(),
            pattern: path.to_owned(),
            route: Some(rule),
        });
        let mut said: Vec<&str> = headers
            .iter()
            .filter(|(n, v)| n.eq_ignore_ascii_case("cache-control") && auth::says_public(v))
            .map(|(_, v)| v.as_str())
            .collect();
        if let Some(options) = files {
            said.extend(options.cache_control.as_deref().filter(|v| auth::says_public(v)));
            said.extend(
                options
                    .cache_rules
                    .iter()
                    .map(|(_, v)| v.as_str())
                    .filter(|v| auth::says_public(v)),
            );
        }
        for value in said {
            self.public.push(format!(
                "{what}: has {rule}, so `public` is dropped from its Cache-Control ({value:?}): \
                 authenticated answers are private"
            ));
        }
    }

    /// A route with an access rule that is not authentication (`rule`:
    /// its `ip` allow/deny list, its `rate-limit`) at `path`: only said
    /// where a proxy goes around it ([`Notes::under_proxy`]).
    pub(crate) fn route_rule(&mut self, what: &str, path: &str, rule: &'static str) {
        self.protected.push(Protected {
            what: what.to_owned(),
            pattern: path.to_owned(),
            route: Some(rule),
        });
    }

    /// Says which protections seen so far, of the places `whose` accepts,
    /// a proxy goes around: requests under `prefix` go to the upstream
    /// `by` names (`--proxy /api/`, `route /api/*`) before the files, the
    /// archive or a route's `basic-auth` see them, so a rule that covers
    /// such a path is never asked there. Said at start: an archive swapped
    /// in later with new rules is not looked at again.
    pub(crate) fn under_proxy(&mut self, prefix: &str, by: &str, whose: impl Fn(&str) -> bool) {
        for p in self.protected.iter().filter(|p| whose(&p.what)) {
            if !crate::proxy::may_cover_under(&p.pattern, prefix) {
                continue;
            }
            let rule = if let Some(rule) = p.route {
                format!("its {rule}")
            } else {
                format!("_headers' Basic-Auth for {}", p.pattern)
            };
            self.bypassed.push(format!(
                "{}: {rule} does not protect paths under {by}: the proxy sends them upstream first, \
                 unchecked; protect the upstream itself, or narrow the proxy's prefix",
                p.what
            ));
        }
    }
}

/// The client's address as IP rules and rate limits judge it.
fn client_ip(req: &Request<'_>) -> IpAddr {
    req.client_addr().ip
}

/// `Authorization: Basic base64(user:password)` (RFC 7617 §2; the scheme
/// in any case), or `None`. The user is text; the password any bytes.
fn credentials(req: &Request<'_>) -> Option<(String, Vec<u8>)> {
    let value = req.header("authorization")?.trim();
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(token.trim()).ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(decoded[..colon].to_vec()).ok()?;
    Some((user, decoded[colon + 1..].to_vec()))
}

/// The 401 asking for credentials (RFC 7617 §2): the realm quoted, the
/// charset browsers should encode them in.
pub(crate) fn challenge(realm: &str) -> Response {
    let quoted: String = realm
        .chars()
        .flat_map(|c| match c {
            '"' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    Response::error(401)
        .with_header(
            "WWW-Authenticate",
            format!("Basic realm=\"{quoted}\", charset=\"UTF-8\""),
        )
        .with_header("Cache-Control", "private")
        .with_reason(peregrine::Reason::Auth)
}

/// `response` with `Retry-After` in whole seconds, rounded up (RFC 9110
/// §10.2.3): a client that waits as told is let in.
fn retry_after(response: Response, wait: Duration) -> Response {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    response.with_header("Retry-After", secs.max(1).to_string())
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    thread_local! {
        /// Checks made on this thread: the tests call `verify` on their
        /// own thread, and run in parallel (one counter for the process
        /// counted the other tests' checks too).
        static CHECKS: Cell<usize> = const { Cell::new(0) };
    }

    /// A checker that counts, and takes "right" for the right password
    /// whatever the hash (no bcrypt in these tests).
    fn counting(_hash: &Hash, password: &[u8]) -> bool {
        CHECKS.with(|n| n.set(n.get() + 1));
        password == b"right"
    }

    fn checks() -> usize {
        CHECKS.with(Cell::get)
    }

    fn users() -> Arc<Users> {
        // A syntactically valid bcrypt hash (cost 4); the checker above
        // never computes it.
        let hash = "$2b$04$abcdefghijklmnopqrstuu5ZGMw1ZGf5s8d6sVqv0qNGa1Q0GbVqa";
        Arc::new(Users::parse(&format!("alice:{hash} bob:{hash}")).unwrap())
    }

    /// A proven user:password is believed without a second check for
    /// CACHE_TTL, then checked again; the cache is keyed by the password
    /// (a wrong one is no hit), and holds no password.
    #[test]
    fn a_success_is_cached_so_the_second_request_computes_no_hash() {
        let v = Verifier::with_checker(counting);
        let s = &v.shared;
        let users = users();
        let hash = users.hash_of("alice").unwrap();
        let key = s.key_of(hash, "alice", b"right");
        let t0 = Instant::now();
        assert!(!s.proven(&key, t0));
        let before = checks();
        assert!(s.verify(&users, "alice", b"right", key, 1));
        assert_eq!(checks(), before + 1);
        // The loop's look: a hit, and the checker is not called.
        assert!(s.proven(&key, Instant::now()));
        assert_eq!(checks(), before + 1);
        assert!(!s.proven(&s.key_of(hash, "alice", b"wrong"), Instant::now()));
        assert!(!s.proven(&s.key_of(hash, "bob", b"right"), Instant::now()));
        assert!(!s.proven(&key, Instant::now() + CACHE_TTL + Duration::from_secs(1)));
        // Another process (another key) does not know it.
        let other = Verifier::with_checker(counting);
        assert!(!other
            .shared
            .proven(&other.shared.key_of(hash, "alice", b"right"), Instant::now()));
        let cached = s.shard(&key).lock().unwrap();
        assert!(cached.keys().all(|k| !k.windows(5).any(|w| w == b"right")));
    }

    /// An unknown user costs a check (of a real hash of the rule) and
    /// fails; so does a wrong password.
    #[test]
    fn unknown_users_pay_a_check_and_fail() {
        let v = Verifier::with_checker(counting);
        let before = checks();
        assert!(!v.shared.verify(&users(), "mallory", b"right", [0; 32], 7));
        assert!(!v.shared.verify(&users(), "alice", b"wrong", [1; 32], 7));
        assert_eq!(checks(), before + 2);
    }

    /// Ten failures at once, then the client is barred (429) with a wait,
    /// and checks no more; another client is not.
    #[test]
    fn failures_are_limited_per_client() {
        let v = Verifier::with_checker(counting);
        let s = &v.shared;
        let (mallory, alice) = (
            rate::key("10.0.0.9".parse().unwrap()),
            rate::key("10.0.0.1".parse().unwrap()),
        );
        for _ in 0..10 {
            assert_eq!(s.barred(mallory, Instant::now()), None);
            assert!(!s.verify(&users(), "alice", b"guess", [2; 32], mallory));
        }
        let wait = s.barred(mallory, Instant::now()).expect("barred");
        assert!(wait <= Duration::from_secs(6), "{wait:?}");
        assert_eq!(s.barred(alice, Instant::now()), None);
        assert!(s.barred(mallory, Instant::now() + Duration::from_secs(7)).is_none());
    }

    #[test]
    fn the_cache_is_bounded() {
        let v = Verifier::with_checker(counting);
        let now = Instant::now();
        for i in 0..(CACHE_ENTRIES_MAX + 5000) {
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&(i as u64).to_le_bytes());
            v.shared.remember(key, now);
        }
        let n: usize = v.shared.cache.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(n <= CACHE_ENTRIES_MAX, "{n}");
    }

    #[test]
    fn the_challenge_names_the_realm_quoted() {
        let r = challenge("Team \"A\" \\ docs");
        assert_eq!(r.status(), 401);
        assert_eq!(
            r.header("www-authenticate"),
            Some("Basic realm=\"Team \\\"A\\\" \\\\ docs\", charset=\"UTF-8\"")
        );
        assert_eq!(r.header("cache-control"), Some("private"));
        // The access log says why: `reason` auth.
        assert_eq!(r.reason(), Some(peregrine::Reason::Auth));
    }

    #[test]
    fn settings_take_hashes_only() {
        let hash = "$2b$04$abcdefghijklmnopqrstuu5ZGMw1ZGf5s8d6sVqv0qNGa1Q0GbVqa";
        let ok = BasicAuth::new(&[format!("alice:{hash}")], Some("Docs".into())).unwrap();
        assert_eq!(ok.users.len(), 1);
        assert!(BasicAuth::new(&["alice:hunter2".into()], None)
            .unwrap_err()
            .contains("not a password"));
        assert!(BasicAuth::new(&[], None).is_err());
        assert!(BasicAuth::new(&[format!("alice:{hash}")], Some(String::new())).is_err());
    }
}
