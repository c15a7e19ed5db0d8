//! The reverse proxy: a handler that passes a request to an upstream HTTP/1.1
//! server and its answer back, over connections the worker's own loop
//! drives (`pool.rs`), never a thread per request.
//!
//! The handler ([`Proxy`]) runs where every handler runs: it checks the
//! request, writes the upstream request head from what the engine parsed
//! (never the client's raw bytes: a request is re-framed, so a framing
//! trick the engine refused cannot reach the upstream, and one it accepted
//! reaches it in one spelling), defers the answer, and leaves a [`Job`] in
//! the worker's outbound queue. After the turn's events the worker hands
//! the queue to its [`pool::Upstreams`], which writes each job on a
//! kept-alive connection to its upstream (or a new one), reads the answer
//! with the codec's client role (`codec/client.rs`, as strict as the
//! server side: a response whose length could be read two ways is a 502
//! and a closed connection), and sends it through the job's `Responder`:
//! whole when it is short and already read, else as a `body::channel` fed
//! at the upstream's speed up to `proxy_buffer_bytes`, then at the
//! client's (the channel's room wakes the upstream connection again).
//!
//! What the upstream gets (Caddy's `reverse_proxy` and nginx's
//! `proxy_pass` are the models; ARCHITECTURE.md says what was chosen):
//! - the path the route matched, its prefix kept or replaced by the
//!   upstream URL's path, re-encoded canonically; `%2F`, `%5C` and `%00`
//!   in the path are refused (400), as are dot segments;
//! - the client's fields, less the hop-by-hop ones (RFC 9110 §7.6.1) and
//!   the forwarding fields, which are written afresh: `X-Forwarded-For`
//!   (appended to only when the hop is a trusted proxy), `-Proto` and
//!   `-Host` (kept from a trusted proxy), `Forwarded` (RFC 7239;
//!   appended to after a trusted proxy's), `Via` with this process's token
//!   (a request already carrying it is a loop: 508), `X-Request-ID`
//!   (kept from a trusted proxy, else made);
//! - cookie crumbs of HTTP/2 and HTTP/3 joined with `; ` (RFC 9113
//!   §8.2.3); the body the engine read whole, with its Content-Length.
//!
//! What the client gets: the upstream's status and fields, less the
//! hop-by-hop ones, Date and Server (the engine writes its own), so no
//! connection-specific field reaches an HTTP/2 or HTTP/3 client (RFC 9113
//! §8.2.2). 502, 503 and 504 are the engine's plain pages: never the
//! upstream's error text or address (those go to the error log).
//!
//! WebSockets pass through (`tunnel.rs`): an HTTP/1.1 `Upgrade:
//! websocket` or an extended CONNECT over HTTP/2 (RFC 8441) or HTTP/3
//! (RFC 9220; give the server [`crate::Server::websockets`] so that
//! HTTP/2 and HTTP/3 clients are told they may) goes to the upstream as
//! an HTTP/1.1 upgrade; a 101 with the right `Sec-WebSocket-Accept`
//! hands the upstream connection to the client's, which copies bytes
//! both ways from then on (`conn/tunnel.rs`: bounded each way, closed
//! after the upstream's `read_timeout` with no byte moving, and when
//! either side ends). Every other upgrade (`h2c`) is dropped, as a
//! hop-by-hop field, and the request goes as an ordinary one.

mod auth;
mod balance;
pub mod cache;
mod encode;
mod guard;
pub(crate) mod h2up;
mod head;
mod health;
pub(crate) mod pool;
mod resolve;
mod tls;
mod tunnel;
mod upstream;

pub use auth::{Decide, Finish, ForwardAuth, Held};
pub use balance::{FailStatus, Policy};
pub use cache::{Cache, CacheStats};
pub use encode::{Encode, ENCODER_BYTES_MAX, STREAMS_MAX as ENCODE_STREAMS_MAX};
pub use guard::{is_metadata, special as special_address, AddressGuard};
pub(crate) use health::start as start_checking;
pub use health::{probe, ActiveCheck};
pub(crate) use pool::{Answer, Sock, Upstreams};
pub(crate) use resolve::start as start_resolving;
pub(crate) use tunnel::Handoff;
pub use upstream::{HostHeader, Upstream, UpstreamError};

use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

use crate::codec::head::Framing;
use crate::handler::{BodyUse, Handler, Reply};
use crate::message::trailers::Trailers;
use crate::request::Request;
use crate::responder::Responder;
use crate::response::Response;

/// A handler that passes requests to one upstream. Clone it freely (one
/// `Arc`).
///
/// ```no_run
/// use peregrine::proxy::{Proxy, Upstream};
/// use peregrine::{Router, Server};
/// let api = Proxy::new(Upstream::parse("http://127.0.0.1:9000").unwrap().prefix("/api/"));
/// let router = Router::new()
///     .route("GET", "/api/*rest", api.clone())
///     .route("POST", "/api/*rest", api.clone())
///     // WebSockets over HTTP/2 open with an extended CONNECT; over
///     // HTTP/1.1 they are GETs.
///     .route("CONNECT", "/api/*rest", api);
/// let running = Server::new()
///     .bind("127.0.0.1:8080")
///     .websockets(true)
///     .start(router)
///     .unwrap();
/// running.wait().unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct Proxy {
    /// The upstream (a balance's first member, whose path and Host every
    /// member's request is written with).
    up: Arc<Upstream>,
    /// Several upstreams (`balance.rs`); `None` for one.
    balance: Option<Arc<balance::Balance>>,
    /// Answers compressed on the fly (`encode.rs`); `None`: never.
    encode: Option<Arc<Encode>>,
    /// Answers kept and given again (`cache.rs`); `None`: never.
    cache: Option<Cache>,
    /// Whether TRACE goes upstream ([`Proxy::trace`]); else 405 here.
    trace: bool,
}

/// One request for an upstream, as the handler left it for the worker: the
/// request's bytes (head and body, ready to write), what reading its
/// answer needs, and where the answer goes. What nearly every request
/// leaves unset is in `more`, boxed only when one of it is set: a `Job`
/// of 256 bytes was copied six times a proxied GET by `memcpy` (29
/// instructions each: `Proxy::send`, `submit_all`, `place`, twice each;
/// callgrind `proxy-c50`); at most 128 bytes, it is moved inline (those
/// six calls gone, 8,212 → 8,096 instructions a GET).
pub(crate) struct Job {
    pub(crate) up: Arc<Upstream>,
    pub(crate) bytes: Vec<u8>,
    /// HEAD's answer has no body whatever its fields say.
    pub(crate) head_method: bool,
    /// GET, HEAD, OPTIONS, TRACE, PUT, DELETE (RFC 9110 §9.2.2): may be
    /// sent again on a fresh connection when a kept-alive one failed
    /// before any byte of the answer.
    pub(crate) idempotent: bool,
    /// Sent again once already.
    pub(crate) retried: bool,
    /// The access log figures of the attempts that failed before this
    /// one (`UpstreamLog::earlier`).
    pub(crate) tried: Option<Box<crate::access_log::UpstreamLog>>,
    /// The streamed body (`More::body`) goes chunked: its length is
    /// unknown.
    pub(crate) chunked: bool,
    /// The client's `Expect: 100-continue` went to the upstream with a
    /// streamed body: the upstream's 100 is relayed (the engine held its
    /// own back: `BodyReader::hold_continue`).
    pub(crate) expect_continue: bool,
    pub(crate) responder: Responder,
    /// A route with several upstreams: which to choose from, and which
    /// were tried (`balance.rs`); `up` is set when the pool chooses.
    pub(crate) choice: Option<balance::Choice>,
    /// The client takes trailer fields (HTTP/2 and HTTP/3 always, HTTP/1.1
    /// after `TE: trailers`): the upstream was told so, and its chunked
    /// answer's trailers are relayed (`Trailers::relayed`).
    pub(crate) trailers: bool,
    /// The rest: `None` when all of it is unset (a request read whole, on
    /// a route without `encode` or a cache, not a WebSocket opening nor a
    /// forward-auth subrequest).
    pub(crate) more: Option<Box<More>>,
}

/// The parts of a `Job` that most requests leave unset.
#[derive(Default)]
pub(crate) struct More {
    /// A body read as it arrives (longer than `WHOLE_REQUEST_MAX`, or of
    /// unknown length), written after `bytes`; `Job::chunked` when its
    /// length is unknown.
    pub(crate) body: Option<crate::body::BodyReader>,
    /// A WebSocket opening (`tunnel.rs`): the 101 it waits for.
    pub(crate) tunnel: Option<tunnel::Ask>,
    /// A forward-auth subrequest's: what its answer decides (`auth.rs`).
    pub(crate) auth: Option<Box<auth::Pending>>,
    /// A route that compresses answers: what this request's may become
    /// (`encode.rs`).
    pub(crate) encode: Option<encode::Plan>,
    /// A streamed body whose client may end it with trailer fields (sent
    /// chunked to an HTTP/1.1 upstream; any to an HTTP/2 one): they go on
    /// after the last chunk, or as a trailing HEADERS, less those its
    /// `Connection` named (these, lowercase) and those
    /// `Trailers::forwarded` keeps from upstreams. `None`: a body read
    /// whole (see `body_trailers`), or none can go.
    pub(crate) forward_trailers: Option<Vec<Vec<u8>>>,
    /// A body read whole whose client ended it with trailer fields, as
    /// they go on (`Trailers::forwarded`), for an HTTP/2 upstream: a
    /// trailing HEADERS after its last DATA (RFC 9113 §8.1). An HTTP/1.1
    /// upstream's are in `bytes` already, after the last chunk.
    pub(crate) body_trailers: Option<crate::message::trailers::Trailers>,
    /// A cache miss (`cache.rs`): what storing the answer needs.
    pub(crate) cache: Option<Box<cache::Ask>>,
    /// What the route adds to the answer its client gets (its CORS
    /// fields and `headers`: [`finishing`]), whatever makes it: the
    /// upstream, the pool's 502, 503 or 504, the cache a parked request
    /// waited for. Set, the answer takes the general path, never the one
    /// pass (`UpConn::takes_plain`).
    pub(crate) finish: Option<Finish>,
}

// A `Job` is moved without `memcpy` up to this size (the compiler's
// inline copy); see `Job`.
const _: () = assert!(std::mem::size_of::<Job>() <= 128);

impl More {
    /// Boxed when any part is set, else `None` (no allocation).
    fn boxed(self) -> Option<Box<More>> {
        // Every part named (no `..`): a part added later must be looked
        // at here, or the `forget` below could leak it.
        let More {
            body,
            tunnel,
            auth,
            encode,
            forward_trailers,
            body_trailers,
            cache,
            finish,
        } = &self;
        let unset = body.is_none()
            && tunnel.is_none()
            && auth.is_none()
            && encode.is_none()
            && forward_trailers.is_none()
            && body_trailers.is_none()
            && cache.is_none()
            && finish.is_none();
        match unset {
            // Every part is `None`: nothing to drop, and its drop, a call
            // that looked at each part again, was 30 instructions of a
            // proxied GET (callgrind `proxy-c50`).
            true => {
                std::mem::forget(self);
                None
            }
            false => Some(Box::new(self)),
        }
    }
}

impl Job {
    /// The parts most requests leave unset, if any is set.
    pub(crate) fn more(&self) -> Option<&More> {
        self.more.as_deref()
    }

    /// The parts most requests leave unset, to set one (boxed then).
    pub(crate) fn more_mut(&mut self) -> &mut More {
        self.more.get_or_insert_with(Box::default)
    }

    /// Takes the streamed body, if there is one.
    pub(crate) fn take_body(&mut self) -> Option<crate::body::BodyReader> {
        self.more.as_mut().and_then(|m| m.body.take())
    }

    /// Gives the streamed body back (a retry sends what is left of it).
    pub(crate) fn set_body(&mut self, body: Option<crate::body::BodyReader>) {
        match (body, self.more.as_mut()) {
            (None, None) => {}
            (None, Some(m)) => m.body = None,
            (body, _) => self.more_mut().body = body,
        }
    }
}

/// A request body up to this long is read whole before the upstream is
/// chosen, so that a retry can send it again and a slow client holds no
/// upstream connection; a longer one (or one of unknown length) streams.
pub const WHOLE_REQUEST_MAX: u64 = 64 * 1024;

/// The worker's queue of jobs the handlers left in this turn.
pub(crate) type Outbox = RefCell<Vec<Job>>;

/// A request's buffer is given back (`give_bytes`) when its answer
/// begins, kept up to this many on the thread, each of at most
/// `SPARE_BYTES_MAX`: a GET's head is about 300 bytes, so a worker holds
/// at most 64 KiB of them.
const SPARES_MAX: usize = 64;
const SPARE_BYTES_MAX: usize = 1024;
/// What the kept request buffers, and the last forwarding fields
/// (`FORWARDING`), may hold per worker thread (`Limits::PROXY_SPARE_BYTES`).
pub(crate) const SPARES_BYTES_MAX: usize = SPARES_MAX * SPARE_BYTES_MAX + FORWARDING_BYTES_MAX;

thread_local! {
    /// Request buffers whose upstream answered (`give_bytes`), for the
    /// next requests' heads (`take_bytes`): the worker makes and answers
    /// proxied requests on its own thread, and a buffer made and freed
    /// per request was a malloc and a free of each proxied GET.
    static SPARES: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer of at least `capacity` bytes: a spare one if there is.
fn take_bytes(capacity: usize) -> Vec<u8> {
    let spare = SPARES.with_borrow_mut(Vec::pop);
    match spare {
        Some(mut b) => {
            b.reserve(capacity);
            b
        }
        None => Vec::with_capacity(capacity),
    }
}

/// A request's buffer, its bytes sent and no longer needed (the answer
/// began: the request is not sent again), for `take_bytes`.
pub(crate) fn give_bytes(mut bytes: Vec<u8>) {
    if bytes.capacity() == 0 || bytes.capacity() > SPARE_BYTES_MAX {
        return;
    }
    bytes.clear();
    SPARES.with_borrow_mut(|spares| {
        if spares.len() < SPARES_MAX {
            spares.push(bytes);
        }
    });
}

thread_local! {
    /// The finish [`finishing`] offers the proxy during its call, and
    /// whether there is one: a flag without a destructor, so that the
    /// proxy's look for an offer is one load of a proxied GET that has
    /// none (the slot's own state would be looked at first).
    static FINISH: RefCell<Option<Finish>> = const { RefCell::new(None) };
    static FINISH_OFFERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Calls `call` (a route's handler, for one request) with `finish`
/// offered to the reverse proxy: the answer a [`Proxy`] gives that
/// request gets it on its way to the client, whether it is made now (a
/// cache hit, a refusal such as a 400) or later (the upstream's, relayed
/// over any protocol; the pool's own 502, 503 or 504; after a
/// forward-auth check, the upstream's answer that the check let
/// through), exactly once. The way a wrapper adds a route's fields (its
/// CORS fields, its `headers`) to a proxy's answers, which it never
/// sees: they go through the worker's pool, not back through the
/// wrapper.
///
/// Returns the reply and `finish` back when no proxy took it (the answer
/// is another handler's: the caller finishes it as its own). A route
/// without fields to add does not call this, and its proxied requests
/// pay nothing for it (one look at a thread-local flag).
///
/// A WebSocket's `101` is the upstream's as it came (a tunnel, not an
/// answer to finish); its refusals are finished.
pub fn finishing(finish: Finish, call: impl FnOnce() -> Reply) -> (Reply, Option<Finish>) {
    /// Puts back what was offered before (nothing, unless calls nest),
    /// even if `call` panics: an offer left behind would go to the next
    /// request's job.
    struct Restore(Option<Finish>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let before = self.0.take();
            FINISH_OFFERED.set(before.is_some());
            FINISH.set(before);
        }
    }
    let before = FINISH.replace(Some(finish));
    FINISH_OFFERED.set(true);
    let restore = Restore(before);
    let reply = call();
    let left = FINISH.take();
    drop(restore);
    (reply, left)
}

/// The finish offered by [`finishing`], taken (the proxy made a job or
/// an answer of the request); `None` when none is offered. Inlined to
/// the flag's look.
#[inline(always)]
fn take_finish() -> Option<Finish> {
    match FINISH_OFFERED.get() {
        false => None,
        true => take_offered(),
    }
}

#[cold]
#[inline(never)]
fn take_offered() -> Option<Finish> {
    FINISH_OFFERED.set(false);
    FINISH.take()
}

/// An answer the proxy makes now: finished by the offer, if any
/// (`finishing`).
#[inline(always)]
fn now(resp: Response) -> Reply {
    match take_finish() {
        None => Reply::Now(resp),
        Some(finish) => Reply::Now(finish(resp)),
    }
}

impl Proxy {
    /// A handler for `upstream`.
    pub fn new(upstream: Upstream) -> Proxy {
        Proxy {
            up: Arc::new(upstream),
            balance: None,
            encode: None,
            cache: None,
            trace: false,
        }
    }

    /// A handler for several upstreams, chosen by `policy`, with passive
    /// health at its defaults (`balance.rs` says what they are). Every
    /// member gets the same request, so they may not differ in path; one
    /// upstream is [`Proxy::new`]'s (nginx ignores `max_fails` for a lone
    /// server too).
    pub fn balanced(upstreams: Vec<Upstream>, policy: Policy) -> Result<Proxy, UpstreamError> {
        let b = balance::Balance::new(upstreams, policy)?;
        if b.members.len() == 1 {
            return Ok(Proxy {
                up: b.members[0].clone(),
                balance: None,
                encode: None,
                cache: None,
                trace: false,
            });
        }
        Ok(Proxy {
            up: b.members[0].clone(),
            balance: Some(Arc::new(b)),
            encode: None,
            cache: None,
            trace: false,
        })
    }

    /// Passive health: `max_fails` failures within `fail_timeout` take a
    /// member out of this worker's choice for `fail_timeout` (0 failures:
    /// never). Nothing for one upstream.
    pub fn passive_health(mut self, max_fails: u32, fail_timeout: std::time::Duration) -> Proxy {
        if let Some(b) = &self.balance {
            let mut b = (**b).clone();
            b.max_fails = max_fails;
            b.fail_timeout = fail_timeout.max(std::time::Duration::from_millis(1));
            self.balance = Some(Arc::new(b));
        }
        self
    }

    /// Passive health also counts an upstream's answers of these
    /// statuses (400 to 599) as failures (Caddy's `unhealthy_status`;
    /// none by default: only connection failures, resets before an
    /// answer and timeouts count). Nothing for one upstream.
    pub fn fail_status(mut self, statuses: &[u16]) -> Result<Proxy, UpstreamError> {
        let set = balance::FailStatus::new(statuses).map_err(UpstreamError::new)?;
        if let Some(b) = &self.balance {
            let mut b = (**b).clone();
            b.fail_status = set;
            self.balance = Some(Arc::new(b));
        }
        Ok(self)
    }

    /// The statuses passive health counts as failures (empty by default).
    pub fn fail_statuses(&self) -> Vec<u16> {
        self.balance
            .as_ref()
            .map_or_else(Vec::new, |b| b.fail_status.statuses())
    }

    /// Active health: `check` asked of every member by one thread of the
    /// process, from the server's start. Nothing for one upstream.
    pub fn active_health(mut self, check: ActiveCheck) -> Proxy {
        if let Some(b) = &self.balance {
            let mut b = (**b).clone();
            b.checked = Some(health::Checked::new(check, b.members.clone()));
            self.balance = Some(Arc::new(b));
        }
        self
    }

    /// The same upstreams (the same pools and health), whose 502, 503
    /// and 504 carry `page` ([`Upstream::error_page`]).
    pub fn with_error_page(&self, page: Vec<u8>) -> Proxy {
        let up = Arc::new((*self.up).clone().error_page(page.clone()));
        let balance = self.balance.as_ref().map(|b| {
            let mut b = (**b).clone();
            b.members = b
                .members
                .iter()
                .map(|m| Arc::new((**m).clone().error_page(page.clone())))
                .collect();
            Arc::new(b)
        });
        Proxy {
            up,
            balance,
            encode: self.encode.clone(),
            cache: self.cache.clone(),
            trace: self.trace,
        }
    }

    /// Compresses answers on the fly when the client accepts it and the
    /// answer is worth it (`encode.rs` says which; Caddy's `encode`,
    /// nginx's `gzip on`). Off unless given.
    pub fn encode(mut self, encode: Encode) -> Proxy {
        self.encode = Some(Arc::new(encode));
        self
    }

    /// Keeps answers that say they may be kept, and gives them again
    /// without asking the upstream (`cache.rs` says which and for how
    /// long; nginx's `proxy_cache`). Off unless given.
    pub fn cache(mut self, cache: Cache) -> Proxy {
        self.cache = Some(cache);
        self
    }

    /// Passes TRACE to the upstream (Caddy's behaviour). Off by default,
    /// as in nginx: the proxy answers TRACE itself with 405 and `Allow`,
    /// because an upstream's echo of the request would hand a script the
    /// client's `Cookie` and `Authorization` (cross-site tracing).
    pub fn trace(mut self, pass: bool) -> Proxy {
        self.trace = pass;
        self
    }

    /// Whether TRACE goes to the upstream.
    pub fn passes_trace(&self) -> bool {
        self.trace
    }

    /// The route's cache, if it has one.
    pub fn cached(&self) -> Option<&Cache> {
        self.cache.as_ref()
    }

    /// The compression settings, if the route compresses.
    pub fn encoding(&self) -> Option<&Encode> {
        self.encode.as_deref()
    }

    /// The upstream it passes requests to (a balance's first).
    pub fn upstream(&self) -> &Upstream {
        &self.up
    }

    /// Every upstream it passes requests to.
    pub fn upstreams(&self) -> Vec<&Upstream> {
        match &self.balance {
            Some(b) => b.members.iter().map(|m| &**m).collect(),
            None => vec![&*self.up],
        }
    }

    /// How it chooses among its upstreams.
    pub fn policy(&self) -> Policy {
        self.balance.as_ref().map(|b| b.policy.clone()).unwrap_or_default()
    }

    /// Passive health's `max_fails` and `fail_timeout` (`None` for one
    /// upstream).
    pub fn passive(&self) -> Option<(u32, std::time::Duration)> {
        self.balance.as_ref().map(|b| (b.max_fails, b.fail_timeout))
    }

    /// The active check, if there is one.
    pub fn active(&self) -> Option<&ActiveCheck> {
        self.balance.as_ref()?.checked.as_ref().map(|c| c.check())
    }

    /// The job's choice for a request. Inlined: a route of one upstream
    /// has none, and the call to say so was 19 instructions of a proxied
    /// GET (callgrind `proxy-c50`).
    #[inline(always)]
    fn choice(&self, req: &Request<'_>) -> Option<balance::Choice> {
        let b = self.balance.as_ref()?;
        Self::choice_of(b, req)
    }

    fn choice_of(b: &Arc<balance::Balance>, req: &Request<'_>) -> Option<balance::Choice> {
        Some(balance::Choice {
            key: b.key(req),
            balance: b.clone(),
            tried: 0,
        })
    }
}

/// This process's `Via` pseudonym (RFC 9110 §7.6.3): `peregrine-` and 8
/// random hex digits, so that a request that comes back to the process
/// that sent it is recognised (508) while a chain of distinct Peregrines
/// is not taken for a loop.
pub(crate) fn via_token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| format!("peregrine-{}", random_hex(4)))
}

fn random_hex(bytes: usize) -> String {
    use aws_lc_rs::rand::SecureRandom;
    let mut b = [0u8; 16];
    let b = &mut b[..bytes.min(16)];
    // The system's generator does not fail on Linux; zeros would still
    // only make the token guessable, not wrong.
    let _ = aws_lc_rs::rand::SystemRandom::new().fill(b);
    let mut s = String::with_capacity(b.len() * 2);
    push_hex(&mut s, b);
    s
}

fn push_hex(s: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for &x in bytes {
        s.push(HEX[usize::from(x >> 4)] as char);
        s.push(HEX[usize::from(x & 15)] as char);
    }
}

/// The `Allow` of the 405 a route that does not pass TRACE answers it
/// with (RFC 9110 §15.5.6: a 405 carries one): the methods any upstream
/// may take, less TRACE and CONNECT (which the proxy opens for
/// WebSockets only). Others (PURGE, a custom token) go on too; an `Allow`
/// cannot list what the upstream knows.
const ALLOWED_WITHOUT_TRACE: &str = "GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH";

/// Methods whose answer may be asked for again (RFC 9110 §9.2.2).
fn is_idempotent(method: &str) -> bool {
    matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE")
}

/// The request's Content-Length as the engine framed it: the codec
/// refused differing values, so the first of a list (`5, 5`) is the
/// length (RFC 9110 §8.6), which the upstream then gets once.
fn content_length(req: &Request<'_>) -> Option<u64> {
    let v = req.header("content-length")?;
    v.split(',').next()?.trim().parse().ok()
}

/// Whether the client takes trailer fields: HTTP/2 and HTTP/3 always
/// (RFC 9113 §8.1, RFC 9114 §4.1), HTTP/1.1 when it said `TE: trailers`
/// (RFC 9110 §10.1.4); HTTP/1.0 has no chunked answers. `seen`: what
/// `build_as`'s pass over the fields met (a request without `TE` is not
/// looked through again).
fn takes_trailers(req: &Request<'_>, seen: head::Seen) -> bool {
    match req.version() {
        crate::Version::Http2 | crate::Version::Http3 => true,
        crate::Version::Http10 => false,
        crate::Version::Http11 if !seen.has(head::Seen::TE) => false,
        crate::Version::Http11 => req.headers().any(|(n, v)| {
            n.eq_ignore_ascii_case("te")
                && crate::codec::head::list_elements(v).any(|e| e.eq_ignore_ascii_case(b"trailers"))
        }),
    }
}

/// Tells the upstream that its answer may end with trailer fields (RFC
/// 9110 §10.1.4: "trailers" in TE; TE is hop-by-hop, so it is the
/// proxy's own, and "the sender of TE MUST also send a 'TE' connection
/// option within the Connection header field"): inserted at the end of
/// the head that `bytes` holds, before its `body_len` bytes of body.
fn ask_trailers(bytes: &mut Vec<u8>, body_len: usize) {
    let head_end = bytes.len() - body_len - 2;
    bytes.splice(
        head_end..head_end,
        b"TE: trailers\r\nConnection: TE\r\n".iter().copied(),
    );
}

/// The names a request's `Connection` field lists (lowercase): its
/// trailer fields of those names do not go on either (RFC 9110 §7.6.1).
/// The options every connection carries (`keep-alive`, `close`, `te`,
/// `upgrade`) are left out: no trailer field has those names that is not
/// dropped already, and a request naming only them allocates nothing.
fn connection_named(req: &Request<'_>) -> Vec<Vec<u8>> {
    let mut named = Vec::new();
    for (_, v) in req.headers().filter(|(n, _)| n.eq_ignore_ascii_case("connection")) {
        for option in crate::codec::head::list_elements(v) {
            if ![&b"keep-alive"[..], b"close", b"te", b"upgrade"]
                .iter()
                .any(|o| o.eq_ignore_ascii_case(option))
            {
                named.push(option.to_ascii_lowercase());
            }
        }
    }
    named
}

/// Whether an HTTP/2 or HTTP/3 request's head announced trailer fields
/// (`Trailer`, RFC 9110 §6.6.2). HTTP/1.1 carries trailers only in a
/// chunked body, which the upstream request is anyway.
fn announces_trailers(req: &Request<'_>) -> bool {
    matches!(req.version(), crate::Version::Http2 | crate::Version::Http3)
        && req.headers().any(|(n, _)| n.eq_ignore_ascii_case("trailer"))
}

/// Rewrites the body read whole at the end of `bytes` (`body_len` bytes,
/// after a head that says `Transfer-Encoding: chunked`) as one chunk, the
/// last chunk and `trailers` (RFC 9112 §7.1: `chunked-body = *chunk
/// last-chunk trailer-section CRLF`). Only for a request that had
/// trailers to pass: one more copy of its body (at most
/// `WHOLE_REQUEST_MAX`).
fn chunk_whole_body(bytes: &mut Vec<u8>, body_len: usize, trailers: &Trailers) {
    let body = bytes.split_off(bytes.len() - body_len);
    if !body.is_empty() {
        crate::codec::write::write_chunk_start(bytes, body.len());
        bytes.extend_from_slice(&body);
        bytes.extend_from_slice(b"\r\n");
    }
    bytes.extend_from_slice(b"0\r\n");
    bytes.extend_from_slice(trailers.as_bytes());
    bytes.extend_from_slice(b"\r\n");
}

/// Whether the client sent `Expect: 100-continue` (the engine refused
/// every other expectation with 417).
fn expects_continue(req: &Request<'_>) -> bool {
    req.header_bytes("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case(b"100-continue"))
}

impl Handler for Proxy {
    fn call(&self, req: &Request<'_>) -> Reply {
        self.send(req, None)
    }

    /// A body up to [`WHOLE_REQUEST_MAX`] is read whole; a longer one, or
    /// one of unknown length, streams to the upstream as it arrives.
    /// A client waiting for `100 Continue` streams whatever the length:
    /// the upstream says whether it wants the body.
    fn body_use(&self, req: &Request<'_>) -> BodyUse {
        match content_length(req) {
            Some(n) if n <= WHOLE_REQUEST_MAX && !expects_continue(req) => BodyUse::Buffer,
            _ => BodyUse::Stream,
        }
    }

    /// Every method that is a token goes upstream (RFC 9110 §9.1: the
    /// upstream knows what it implements); the engine answers no 501 for
    /// a proxy route.
    fn takes_unknown_method(&self, _req: &Request<'_>) -> bool {
        true
    }
}

impl Proxy {
    /// As [`Handler::call`], with `target` (a path and maybe a query, in
    /// origin form: `/v1/x?y=1`) as the upstream request's target in
    /// place of the one the route's prefix and the upstream's path make:
    /// for a caller that built it itself (a `_redirects` proxy rule,
    /// its captures put in). Everything else is as for any request (the
    /// fields, the forwarding fields, the pool); an upgrade is not passed
    /// on (dropped as hop-by-hop). A target not in origin form (not
    /// starting with one `/`, or holding a byte outside visible ASCII, or
    /// a `#`) is a 400: it could not change the upstream, but it would
    /// not be one request line.
    pub fn call_to(&self, req: &Request<'_>, target: &str) -> Reply {
        let origin_form = target.starts_with('/')
            && !target.starts_with("//")
            && target.bytes().all(|b| (0x21..0x7f).contains(&b) && b != b'#');
        if !origin_form {
            return now(Response::error(400));
        }
        self.send(req, Some(target))
    }

    fn send(&self, req: &Request<'_>, target: Option<&str>) -> Reply {
        if req.method() == "TRACE" && !self.trace {
            return now(Response::error(405).with_header("Allow", ALLOWED_WITHOUT_TRACE));
        }
        let Some(outbox) = req.outbox() else {
            // Outside a running server (a test calling the handler):
            // nothing can carry the request.
            return now(Response::error(502));
        };
        // The cache (`cache.rs`): a hit is answered here, without the
        // pool; a miss goes on with what storing its answer needs, or
        // waits behind the same key's first miss. Only a request without
        // a body (none read, none to stream: the reader is looked at,
        // not taken). Before the tunnel's check, which reads the fields
        // again (about 90 instructions of a hit: callgrind,
        // proxy-cache-hit): `lookup` passes any request with `Upgrade`.
        let (mut ask, mut rescue, mut wait) = (None, false, false);
        let streams = req.reader.is_some_and(|r| r.borrow().is_some());
        if let (Some(c), false, true) = (&self.cache, streams, req.body().is_empty()) {
            match cache::lookup(c, req, target) {
                cache::Lookup::Pass => {}
                cache::Lookup::Hit(answer) => return now(answer),
                cache::Lookup::Miss { ask: a, rescue: r } => (ask, rescue) = (Some(a), r),
                cache::Lookup::Wait(a) => (ask, wait) = (Some(a), true),
            }
        }
        // Only a streamed body's framing reads it: a request read whole
        // (every GET) is framed by the bytes it has (its look-up was 20
        // instructions of a proxied GET, callgrind `proxy-c50`). The
        // reader itself is taken once the request is known to be no
        // WebSocket opening (below), which leaves it where it is.
        // RFC 9110 §10.1.1: a proxy forwards a 100-continue expectation
        // with the head, and the upstream's 100 (or its early answer) is
        // what the client gets. The body then streams (`body_use`): it is
        // not read until the upstream asks for it.
        let expect_continue = streams && expects_continue(req);
        let length = match streams {
            true => content_length(req),
            false => None,
        };
        // The client's trailer fields go on where both sides allow (issue
        // 26): to an HTTP/1.1 upstream, after the last chunk of a body
        // sent chunked. A body read whole is sent chunked only when it
        // had trailers to pass (otherwise its Content-Length stays); a
        // streamed one of unknown length is chunked anyway, and one of
        // known length (HTTP/2, HTTP/3) becomes chunked only when its
        // head announced trailers (`Trailer`, RFC 9110 §6.6.2): its head
        // leaves before they could be seen. An HTTP/2 upstream gets them
        // as a trailing HEADERS (RFC 9113 §8.1) whatever the body's
        // length, read whole or streamed (`h2up`).
        let up_h1 = !self.up.is_h2();
        let whole_trailers = match (streams, req.trailers()) {
            (false, Some(t)) => t.forwarded(&connection_named(req)),
            _ => None,
        };
        let framing = match (streams, length) {
            (false, _) if up_h1 && whole_trailers.is_some() => Framing::Chunked,
            (false, _) if req.body().is_empty() => Framing::Empty,
            (false, _) => Framing::Length(req.body().len() as u64),
            (true, Some(n)) if n > 0 && up_h1 && announces_trailers(req) => Framing::Chunked,
            (true, Some(0)) => Framing::Empty,
            (true, Some(n)) => Framing::Length(n),
            (true, None) => Framing::Chunked,
        };
        let chunked = streams && framing == Framing::Chunked;
        let forward_trailers = match up_h1 {
            true => chunked.then(|| connection_named(req)),
            false => streams.then(|| connection_named(req)),
        };
        // `Expect` goes on only with the body it asks about. A miss whose
        // answer may be stored for others asks for the whole
        // representation (`cache::MISS_SKIPPED`); an unsafe method's
        // answer invalidates the target's entries (`cache::invalidation`).
        let skip: &[&str] = match &ask {
            Some(a) if a.fetches_whole() => &cache::MISS_SKIPPED,
            _ => &[],
        };
        let invalidate = self.cache.as_ref().and_then(|c| cache::invalidation(c, req, target));
        let built = build_as(&self.up, req, framing, req.method(), expect_continue, skip, target);
        // A WebSocket opening (`tunnel.rs`) is an HTTP/1.1 GET with an
        // `Upgrade` field, which the pass over the fields saw, or an
        // HTTP/2 or HTTP/3 CONNECT, which `build_as` refuses: looked for
        // only then (a look through every request's fields first was
        // about 60 instructions of a proxied GET, callgrind `proxy-c50`).
        // Its own request is written by `tunnel::request`.
        let maybe_tunnel = match &built {
            Ok((_, seen)) => seen.has(head::Seen::UPGRADE),
            Err(_) => true,
        };
        if let (None, true) = (target, maybe_tunnel) {
            if let Some(offer) = tunnel::offer(req) {
                if let Ok((bytes, _)) = built {
                    give_bytes(bytes);
                }
                return self.call_tunnel(req, outbox, offer);
            }
        }
        // Taken only where there is one (a request read whole has none to
        // take: its `RefCell` is not borrowed again).
        let reader = match streams {
            true => req.body_reader(),
            false => None,
        };
        debug_assert_eq!(reader.is_some(), streams);
        if let (true, Some(reader)) = (expect_continue, &reader) {
            reader.hold_continue();
        }
        match built {
            Ok((mut bytes, seen)) => {
                let trailers = takes_trailers(req, seen);
                if trailers {
                    ask_trailers(&mut bytes, req.body().len());
                }
                let mut body_trailers = None;
                match (up_h1, whole_trailers) {
                    (true, Some(t)) => chunk_whole_body(&mut bytes, req.body().len(), &t),
                    (false, t) => body_trailers = t,
                    (true, None) => {}
                }
                // Answered on this worker (the pool hands the answer to
                // the connection directly): no count on the mailbox.
                let responder = req.defer_here();
                if let (true, Some(ask)) = (rescue, &ask) {
                    cache::watch(responder.key(), ask);
                }
                if let Some(invalidate) = &invalidate {
                    cache::watch(responder.key(), invalidate);
                }
                let encode = self
                    .encode
                    .as_deref()
                    .map(|e| encode::plan(e, req.header_bytes("accept-encoding")));
                // Nothing of `More` set (nearly every request): none is
                // made (writing one out and looking at each part again in
                // `More::boxed` was about 40 instructions of a proxied
                // GET, callgrind `proxy-c50`).
                let finish = take_finish();
                let unset = reader.is_none()
                    && encode.is_none()
                    && forward_trailers.is_none()
                    && body_trailers.is_none()
                    && ask.is_none()
                    && finish.is_none();
                let more = match unset {
                    true => None,
                    false => More {
                        body: reader,
                        encode,
                        forward_trailers,
                        body_trailers,
                        cache: ask,
                        finish,
                        ..More::default()
                    }
                    .boxed(),
                };
                let up = self.up.clone();
                let choice = self.choice(req);
                let head_method = req.method() == "HEAD";
                let idempotent = is_idempotent(req.method());
                // Made where it goes (a macro, not a value: a `Job` made
                // first and pushed after was copied on its way into the
                // list; nor a closure, which stayed a call).
                macro_rules! job {
                    () => {
                        Job {
                            up,
                            bytes,
                            head_method,
                            idempotent,
                            retried: false,
                            tried: None,
                            chunked,
                            expect_continue,
                            responder,
                            choice,
                            trailers,
                            more,
                        }
                    };
                }
                if wait {
                    cache::park(job!());
                    return Reply::Later;
                }
                outbox.borrow_mut().push(job!());
                Reply::Later
            }
            Err(status) => now(Response::error(status)),
        }
    }

    /// A WebSocket opening (`tunnel.rs`): sent as an upgrade; the answer
    /// or the tunnel comes back through the responder. Out of line: no
    /// other request carries it.
    #[cold]
    #[inline(never)]
    fn call_tunnel(&self, req: &Request<'_>, outbox: &Outbox, offer: tunnel::Offer) -> Reply {
        match tunnel::request(&self.up, req, offer) {
            Ok((bytes, ask)) => {
                let responder = req.defer();
                outbox.borrow_mut().push(Job {
                    up: self.up.clone(),
                    bytes,
                    head_method: false,
                    idempotent: true,
                    retried: false,
                    tried: None,
                    chunked: false,
                    expect_continue: false,
                    responder,
                    choice: self.choice(req),
                    trailers: false,
                    more: Some(Box::new(More {
                        tunnel: Some(ask),
                        finish: take_finish(),
                        ..More::default()
                    })),
                });
                Reply::Later
            }
            Err(status) => now(Response::error(status)),
        }
    }
}

/// The bytes a `Forwarded` field's `host=` may hold here (a host name,
/// an address, a port): others leave `host=` out.
static FORWARDED_HOST: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b':' | b'[' | b']');
        b += 1;
    }
    t
};

/// `v4` in dotted decimal, as `Display` writes it, without `core::fmt`:
/// the two addresses a proxied request carries (`X-Forwarded-For`,
/// `Forwarded`) cost about 1,100 instructions through `write!`
/// (callgrind, `proxy-c50`).
fn push_ipv4(out: &mut Vec<u8>, v4: std::net::Ipv4Addr) {
    // The last address written, kept per thread: a worker's clients are
    // few addresses (one, behind a load balancer), and its digits were
    // 116 of a proxied GET's instructions (callgrind, `proxy-c50`).
    let (last, s, n) = LAST_IPV4.get();
    if last == v4 {
        out.extend_from_slice(&s[..usize::from(n)]);
        return;
    }
    let (s, n) = ipv4_digits(v4);
    LAST_IPV4.set((v4, s, n as u8));
    out.extend_from_slice(&s[..n]);
}

thread_local! {
    /// `push_ipv4`'s last address and its dotted decimal.
    static LAST_IPV4: std::cell::Cell<(std::net::Ipv4Addr, [u8; 15], u8)> =
        const { std::cell::Cell::new((std::net::Ipv4Addr::UNSPECIFIED, *b"0.0.0.0\0\0\0\0\0\0\0\0", 7)) };
}

/// What `build_as`'s forwarding fields are made of, besides the client's
/// Host (kept in the block itself): the peer's and the client's
/// addresses as 128-bit words (an IPv4 address as its IPv4-mapped form,
/// so that the key is the same for an address and its mapped spelling,
/// which write the same fields), and a word of the rest. Words, not
/// `IpAddr`s: two enums and three flags compared field by field, and the
/// key's bytes stored one by one, were about 40 instructions of a
/// proxied GET (callgrind `proxy-c50`).
#[derive(Clone, Copy, PartialEq, Eq)]
struct ForwardingKey {
    peer: u128,
    client: u128,
    /// `KEY_SET`, and `unix`, `tls` and the version (`ForwardingKey::new`).
    rest: u32,
}

/// A bit every key made by `ForwardingKey::new` has: the empty slot's key
/// (all zeros) matches no request.
const KEY_SET: u32 = 1;

impl ForwardingKey {
    #[inline(always)]
    fn new(peer: std::net::IpAddr, client: std::net::IpAddr, unix: bool, tls: bool, version: crate::Version) -> Self {
        ForwardingKey {
            peer: ip_word(peer),
            client: ip_word(client),
            rest: KEY_SET | u32::from(unix) << 1 | u32::from(tls) << 2 | (version as u32) << 3,
        }
    }
}

/// `ip` as one word: an IPv6 address's bits, an IPv4 address's as its
/// IPv4-mapped IPv6 address (`::ffff:a.b.c.d`).
#[inline(always)]
fn ip_word(ip: std::net::IpAddr) -> u128 {
    match ip {
        std::net::IpAddr::V4(v4) => 0xffff_u128 << 32 | u128::from(v4.to_bits()),
        std::net::IpAddr::V6(v6) => v6.to_bits(),
    }
}

/// The forwarding fields `build_as` wrote last, for the next request with
/// the same `key` and Host (at `host` in `block`).
struct Forwarding {
    key: ForwardingKey,
    block: Vec<u8>,
    host: std::ops::Range<usize>,
}

/// The longest forwarding block kept (`FORWARDING`): a request whose
/// fields are longer (a long Host) writes them each time.
const FORWARDING_BYTES_MAX: usize = 512;

thread_local! {
    /// `build_as`'s last forwarding fields: at most
    /// `FORWARDING_BYTES_MAX`, counted in `SPARES_BYTES_MAX`.
    static FORWARDING: RefCell<Forwarding> = RefCell::new(Forwarding {
        key: ForwardingKey { peer: 0, client: 0, rest: 0 },
        block: Vec::with_capacity(FORWARDING_BYTES_MAX),
        host: 0..0,
    });
}

/// `v4` in dotted decimal, on the stack, and its length.
fn ipv4_digits(v4: std::net::Ipv4Addr) -> ([u8; 15], usize) {
    // Written on the stack and copied once: a `push` per digit checked
    // the capacity each time (130 instructions for 127.0.0.1, callgrind).
    let mut s = [0u8; 15];
    let mut n = 0;
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            s[n] = b'.';
            n += 1;
        }
        if octet >= 100 {
            s[n] = b'0' + octet / 100;
            n += 1;
        }
        if octet >= 10 {
            s[n] = b'0' + octet / 10 % 10;
            n += 1;
        }
        s[n] = b'0' + octet % 10;
        n += 1;
    }
    (s, n)
}

/// The upstream request's bytes, or the status that refuses it: the
/// request as `method`, `Expect` left out unless `keep_expect` and the
/// client's fields named in `skip` too, to `over` if given
/// (`Proxy::call_to`), else the route's path; and which of the fields it
/// left out were met (`head::Seen`).
///
/// What few requests need (a refusal, a `Via` that came, forwarding
/// fields not kept from the last request, cookies) is in functions of
/// their own, out of line (with the forwarding block's key as words and
/// the request id's line written in place, `build_as` 818 → 744
/// instructions of a proxied GET, callgrind `proxy-c50`,
/// bench/runs/2026-11-28-pxrq).
fn build_as(
    up: &Upstream,
    req: &Request<'_>,
    framing: Framing,
    method: &str,
    keep_expect: bool,
    skip: &[&str],
    over: Option<&str>,
) -> Result<(Vec<u8>, head::Seen), u16> {
    if method == "CONNECT" {
        // A tunnel through the proxy is offered to WebSockets only (an
        // extended CONNECT goes as a GET: `tunnel.rs`). A loop through
        // this hop (508) is looked for before any other refusal.
        return Err(if looped(req) { 508 } else { 501 });
    }
    // The host's bytes (ASCII: the parser checked each; an HTTP/2 or
    // HTTP/3 one came as a `str`), without `Request::host`'s UTF-8 check
    // (106 instructions of a proxied GET, callgrind `proxy-c50`).
    let client_host: &[u8] = req.host.unwrap_or_default();
    let host: &[u8] = match up.host_header_mode() {
        HostHeader::Preserve if !client_host.is_empty() => client_host,
        _ => up.authority().as_bytes(),
    };

    // One buffer, written in one pass (`head.rs`): the request line and
    // the client's fields, then this hop's, each value written in place
    // and checked there (no String of its own, no list of fields: those
    // were 8 of a warm proxied GET's 17 allocations, `tests/proxy_alloc.rs`).
    // An HTTP/1.x client's bytes were checked by its parser; an HTTP/2
    // or HTTP/3 client's are checked as they are written (`head.rs`).
    let from = head::Fields::of(req.version());
    let body = req.body();
    let mut out = take_bytes(512 + body.len());
    // The client's Host, which the HTTP/1.x parser checked (`head::start`).
    let host_parsed = from == head::Fields::Parsed && !client_host.is_empty() && std::ptr::eq(host, client_host);
    let started = match over {
        Some(target) => head::start(
            &mut out,
            method,
            target,
            host,
            host_parsed,
            req.headers,
            from,
            keep_expect,
            skip,
        ),
        None => head::start_routed(
            &mut out,
            up,
            method,
            req.path(),
            req.query(),
            host,
            host_parsed,
            req.headers,
            from,
            keep_expect,
            skip,
        ),
    };
    // A loop through this hop (508) is looked for where a `Via` field
    // came (`head::Seen`), and before any other refusal, as it was when
    // every request was looked at first.
    let seen = match started {
        Ok(seen) if !seen.has(head::Seen::VIA) || !looped(req) => seen,
        Ok(_) => {
            give_bytes(out);
            return Err(508);
        }
        Err(_) => {
            give_bytes(out);
            return Err(if looped(req) { 508 } else { 400 });
        }
    };
    let trusted = req.is_from_trusted_proxy();
    forwarding_fields(&mut out, req, seen, trusted, client_host, from)?;
    // X-Request-ID: kept from a trusted proxy, made otherwise; the one the
    // access log writes (`Request::request_id`). A made one is written
    // with its line as one constant-size piece, and with the head's end
    // when nothing follows it (no Cookie, no framing field): one copy,
    // not five (about 30 instructions of a proxied GET, callgrind
    // `proxy-c50`); its digits are put in place after (a copy of the
    // line onto the stack first, and a call to append it, were about 50).
    // RFC 9110 §7.6.1: "a proxy or gateway MUST ... remove any header or
    // trailer fields listed in the Connection header field", those this
    // hop writes again from the client's too (Cookie, joined from HTTP/2
    // crumbs; Proxy-Authorization where the route passes it). The
    // forwarding fields are this hop's own: a `Connection` cannot take a
    // trusted proxy's `X-Forwarded-For` away (issue 26).
    let cookies =
        seen.has(head::Seen::COOKIE) && !(seen.has(head::Seen::CONNECTION) && connection_names(req, b"cookie"));
    let proxy_auth = seen.has(head::Seen::PROXY_AUTHORIZATION)
        && up.passes_proxy_authorization()
        && !(seen.has(head::Seen::CONNECTION) && connection_names(req, b"proxy-authorization"));
    let framed = head::framed(method, framing);
    // Only a trusted proxy's is kept (`Request::kept_request_id`, a call
    // that asks again whether the peer is trusted).
    let kept = match trusted {
        true => req.kept_request_id(),
        false => None,
    };
    match kept {
        Some(kept) => {
            // Visible ASCII (`Request::kept_request_id` keeps no other).
            debug_assert!(head::value_ok(kept));
            out.extend_from_slice(b"\r\nX-Request-ID: ");
            out.extend_from_slice(kept);
            out.extend_from_slice(b"\r\n");
        }
        None => {
            const LINE: &[u8; 52] = b"\r\nX-Request-ID: 0123456789abcdef0123456789abcdef\r\n\r\n";
            let at = out.len();
            let ended = !(cookies || proxy_auth || framed);
            match ended {
                true => out.extend_from_slice(LINE),
                false => out.extend_from_slice(&LINE[..50]),
            }
            out[at + 16..at + 48].copy_from_slice(&made_request_id(req));
            debug_assert!(head::value_ok(&out[at + 16..at + 48]));
            if ended {
                return Ok((with_body(out, body), seen));
            }
        }
    }
    if cookies {
        join_cookies(&mut out, req, from)?;
    }
    if proxy_auth {
        pass_proxy_authorization(&mut out, req, from)?;
    }
    head::finish(&mut out, method, framing);
    Ok((with_body(out, body), seen))
}

thread_local! {
    /// The request id `build_as` made last, and its request's serial
    /// (`made_request_id`).
    static LAST_ID: std::cell::Cell<(u64, [u8; 32])> = const { std::cell::Cell::new((0, [0; 32])) };
}

/// `req.made_request_id()`, the id the access log writes: the worker's
/// prefix and the request's serial in 16 hex digits. A worker's serials
/// come one after the other, so the id is made from the last one when it
/// can be (`next_id`): the digits made again for each request were about
/// 40 instructions of a proxied GET (callgrind `proxy-c50`).
#[inline(always)]
fn made_request_id(req: &Request<'_>) -> [u8; 32] {
    let last = LAST_ID.get();
    let id = match next_id(last, req.serial) {
        Some(id) => id,
        None => req.made_request_id(),
    };
    LAST_ID.set((req.serial, id));
    debug_assert_eq!(id, req.made_request_id());
    id
}

/// The id of request `serial` from `last` (a serial and its id), when
/// `serial` is the next and only its last digit changes (it is not `f`,
/// whose carry is left to the caller); `None` otherwise, and for the
/// empty slot (whose last byte is no digit).
#[inline(always)]
fn next_id((last, mut id): (u64, [u8; 32]), serial: u64) -> Option<[u8; 32]> {
    let digit = id[31];
    if serial != last.wrapping_add(1) || !matches!(digit, b'0'..=b'9' | b'a'..=b'e') {
        return None;
    }
    id[31] = if digit == b'9' { b'a' } else { digit + 1 };
    Some(id)
}

/// Whether the request came through this process before: its `Via`
/// names our token (a loop: 508).
#[cold]
#[inline(never)]
fn looped(req: &Request<'_>) -> bool {
    let own = via_token();
    req.headers()
        .filter(|(n, _)| n.eq_ignore_ascii_case("via"))
        .any(|(_, value)| contains_token(value, own.as_bytes()))
}

/// This hop's forwarding fields (X-Forwarded-*, Forwarded, Via), from
/// `X-Forwarded-For: ` to Via's last token: the same bytes for every
/// request with the same inputs (the peer, the client's address, TLS,
/// the version, the client's Host) and no incoming Via or trusted
/// X-Forwarded-For to carry on, which is nearly every request of a
/// connection, so the last ones written are kept on the thread and
/// copied when they fit (`build_as` 1,437 → 1,083 instructions of a
/// proxied GET, callgrind `proxy-c50`); written by `write_forwarding`
/// otherwise.
#[inline(always)]
fn forwarding_fields(
    out: &mut Vec<u8>,
    req: &Request<'_>,
    seen: head::Seen,
    trusted: bool,
    client_host: &[u8],
    from: head::Fields,
) -> Result<(), u16> {
    // Not when Via or a trusted proxy's forwarding fields carry incoming
    // values on.
    const TRUSTED_CARRIED: u16 = head::Seen::X_FORWARDED_FOR
        | head::Seen::FORWARDED
        | head::Seen::X_FORWARDED_HOST
        | head::Seen::X_FORWARDED_PROTO;
    let carried = seen.has(head::Seen::VIA) || (trusted && seen.has(TRUSTED_CARRIED));
    if carried {
        return write_forwarding(out, req, seen, trusted, client_host, from, None);
    }
    let key = ForwardingKey::new(
        hop(req).ip(),
        client_ip(req, trusted),
        req.origin.peer == crate::UNIX_PEER,
        req.is_tls(),
        req.version(),
    );
    let copied = FORWARDING.with_borrow(|f| {
        let hit = f.key == key && f.block.get(f.host.clone()).is_some_and(|h| same_bytes(h, client_host));
        if hit {
            out.extend_from_slice(&f.block);
        }
        hit
    });
    match copied {
        true => Ok(()),
        false => write_forwarding(out, req, seen, trusted, client_host, from, Some(key)),
    }
}

/// The client's address as `Request::client_addr` decides it: from a
/// peer (or PROXY source) the server does not trust as a proxy, that
/// address itself, which needs no call (`client_addr`'s was 49
/// instructions of a proxied GET, callgrind `proxy-c50`).
#[inline(always)]
fn client_ip(req: &Request<'_>, trusted: bool) -> std::net::IpAddr {
    let ip = match trusted {
        true => req.client_addr().ip,
        false => req.origin.proxy_source.unwrap_or(req.origin.peer).ip(),
    };
    debug_assert_eq!(ip, req.client_addr().ip);
    ip
}

/// The address of the hop this request came from: the PROXY protocol's
/// source when the connection has one (the balancer in front passed the
/// client's address on), else the peer. What `X-Forwarded-For` appends,
/// and whose trust decides (`Request::is_from_trusted_proxy`).
#[inline(always)]
fn hop(req: &Request<'_>) -> std::net::SocketAddr {
    req.origin.proxy_source.unwrap_or(req.origin.peer)
}

/// The values of the client's fields named `name`, as one list (field
/// lines joined with `, `, RFC 9110 §5.3), each trimmed; those that are
/// not text are left out.
fn incoming(req: &Request<'_>, name: &str, out: &mut Vec<u8>) {
    let start = out.len();
    for (_, value) in req.headers().filter(|(n, _)| n.eq_ignore_ascii_case(name)) {
        if let Ok(value) = std::str::from_utf8(value) {
            let value = value.trim();
            if value.is_empty() {
                continue;
            }
            if out.len() > start {
                out.extend_from_slice(b", ");
            }
            out.extend_from_slice(value.as_bytes());
        }
    }
}

/// `forwarding_fields` written, and kept for the next request under
/// `key` (`None`: values carried on, not to be kept).
///
/// From a trusted proxy (`trusted`), what it said goes on, as Caddy's
/// `trusted_proxies` keeps it: `X-Forwarded-For` and `Forwarded` (RFC
/// 7239 §4) get this hop appended, `X-Forwarded-Proto` and
/// `X-Forwarded-Host` are kept when it sent them (a balancer that ended
/// TLS says `https`). From any other peer they are written afresh.
#[cold]
#[inline(never)]
fn write_forwarding(
    out: &mut Vec<u8>,
    req: &Request<'_>,
    seen: head::Seen,
    trusted: bool,
    client_host: &[u8],
    from: head::Fields,
    key: Option<ForwardingKey>,
) -> Result<(), u16> {
    let client_ip = client_ip(req, trusted);
    let hop = hop(req);
    let peer_ip = hop.ip().to_canonical();
    let unix = hop == crate::UNIX_PEER;
    let tls = req.is_tls();
    let block_at = out.len();
    let mut host_at = block_at..block_at;
    // X-Forwarded-For: the hop, after what a trusted proxy said.
    let v = head::open(out, "X-Forwarded-For");
    if trusted && seen.has(head::Seen::X_FORWARDED_FOR) {
        incoming(req, "x-forwarded-for", out);
        if out.len() > v {
            out.extend_from_slice(b", ");
        }
    }
    let peer_at = out.len();
    match peer_ip {
        _ if unix => out.extend_from_slice(b"unix"),
        std::net::IpAddr::V4(v4) => push_ipv4(out, v4),
        std::net::IpAddr::V6(v6) => {
            let _ = std::io::Write::write_fmt(out, format_args!("{v6}"));
        }
    }
    let peer = peer_at..out.len();
    // Only a trusted proxy's values are the client's bytes; the address
    // is ours.
    // From here on, the constant parts of consecutive lines are written
    // in one piece each (the end of one line and the start of the next):
    // a line of its own was four copies (`head::line`, 85 instructions,
    // callgrind `proxy-c50`).
    let xff_from = if trusted { from } else { head::Fields::Parsed };
    head::check(out, v, xff_from).map_err(|_| 400u16)?;
    if trusted && seen.has(head::Seen::X_FORWARDED_PROTO) {
        out.extend_from_slice(b"\r\n");
        let v = head::open(out, "X-Forwarded-Proto");
        incoming(req, "x-forwarded-proto", out);
        if out.len() == v {
            out.extend_from_slice(if tls { b"https" } else { b"http" });
        }
        head::check(out, v, from).map_err(|_| 400u16)?;
        out.extend_from_slice(b"\r\n");
    } else {
        out.extend_from_slice(match tls {
            true => &b"\r\nX-Forwarded-Proto: https\r\n"[..],
            false => b"\r\nX-Forwarded-Proto: http\r\n",
        });
    }
    if trusted && seen.has(head::Seen::X_FORWARDED_HOST) {
        let v = head::open(out, "X-Forwarded-Host");
        incoming(req, "x-forwarded-host", out);
        if out.len() == v {
            out.extend_from_slice(client_host);
        }
        head::check(out, v, from).map_err(|_| 400u16)?;
        out.extend_from_slice(b"\r\n");
    } else if !client_host.is_empty() {
        if from == head::Fields::Unchecked && !head::value_ok(client_host) {
            return Err(400);
        }
        out.extend_from_slice(b"X-Forwarded-Host: ");
        host_at = out.len()..out.len() + client_host.len();
        out.extend_from_slice(client_host);
        out.extend_from_slice(b"\r\n");
    }
    // Forwarded (RFC 7239 §4): a trusted proxy's elements, then this
    // hop's, whose `for` is the hop; else one element, whose `for` is the
    // client as the engine decided it.
    let v = head::open(out, "Forwarded");
    let mut for_ip = client_ip;
    if trusted && seen.has(head::Seen::FORWARDED) {
        incoming(req, "forwarded", out);
        head::check(out, v, from).map_err(|_| 400u16)?;
        if out.len() > v {
            out.extend_from_slice(b", ");
            for_ip = peer_ip;
        }
    }
    let element_at = out.len();
    out.extend_from_slice(b"for=");
    match for_ip.to_canonical() {
        // Usually the peer, written just above: copied, not formatted again.
        std::net::IpAddr::V4(_) if unix => out.extend_from_slice(b"unknown"),
        ip if ip == peer_ip && !unix && ip.is_ipv4() => out.extend_from_within(peer),
        std::net::IpAddr::V4(v4) => push_ipv4(out, v4),
        std::net::IpAddr::V6(v6) => {
            let _ = std::io::Write::write_fmt(out, format_args!("\"[{v6}]\""));
        }
    }
    if !client_host.is_empty() && client_host.iter().all(|&b| FORWARDED_HOST[usize::from(b)]) {
        out.extend_from_slice(b";host=\"");
        out.extend_from_slice(client_host);
        out.push(b'"');
    }
    // All of it ours: addresses, a host of the bytes above, a constant.
    head::check(out, element_at, head::Fields::Parsed).map_err(|_| 400u16)?;
    // The rest of Forwarded, and Via: what came, then this hop (RFC 9110
    // §7.6.3).
    out.extend_from_slice(match tls {
        true => &b";proto=https\r\nVia: "[..],
        false => b";proto=http\r\nVia: ",
    });
    let v = out.len();
    if seen.has(head::Seen::VIA) {
        for (_, value) in req.headers().filter(|(n, _)| n.eq_ignore_ascii_case("via")) {
            if let Ok(value) = std::str::from_utf8(value) {
                out.extend_from_slice(value.trim().as_bytes());
                out.extend_from_slice(b", ");
            }
        }
    }
    out.extend_from_slice(match req.version() {
        crate::Version::Http10 => b"1.0 ",
        crate::Version::Http11 => b"1.1 ",
        crate::Version::Http2 => b"2 ",
        crate::Version::Http3 => b"3 ",
    });
    out.extend_from_slice(via_token().as_bytes());
    head::check(out, v, from).map_err(|_| 400u16)?;
    if let (Some(key), true) = (key, out.len() - block_at <= FORWARDING_BYTES_MAX) {
        FORWARDING.with_borrow_mut(|f| {
            f.block.clear();
            f.block.extend_from_slice(&out[block_at..]);
            f.host = host_at.start - block_at..host_at.end - block_at;
            f.key = key;
        });
    }
    Ok(())
}

/// Cookie crumbs of HTTP/2 and HTTP/3, joined (RFC 9113 §8.2.3): an
/// HTTP/1.x request's one `Cookie` goes on as it came. Out of line, as
/// the other parts only some requests have.
#[inline(never)]
/// Whether a `Connection` field of `req` names `name` (lower case).
#[cold]
fn connection_names(req: &Request<'_>, name: &[u8]) -> bool {
    req.headers()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .any(|(_, v)| crate::codec::head::list_elements(v).any(|o| o.eq_ignore_ascii_case(name)))
}

/// The client's `Proxy-Authorization` lines, for a route that passes them
/// (`Upstream::proxy_authorization`).
#[cold]
fn pass_proxy_authorization(out: &mut Vec<u8>, req: &Request<'_>, from: head::Fields) -> Result<(), u16> {
    for (_, v) in req
        .headers()
        .filter(|(n, _)| n.eq_ignore_ascii_case("proxy-authorization"))
    {
        let at = head::open(out, "Proxy-Authorization");
        out.extend_from_slice(v);
        head::close(out, at, from).map_err(|_| 400u16)?;
    }
    Ok(())
}

fn join_cookies(out: &mut Vec<u8>, req: &Request<'_>, from: head::Fields) -> Result<(), u16> {
    let mut crumbs = req.headers().filter(|(n, _)| n.eq_ignore_ascii_case("cookie"));
    if let Some((_, first)) = crumbs.next() {
        let v = head::open(out, "Cookie");
        out.extend_from_slice(first);
        for (_, crumb) in crumbs {
            out.extend_from_slice(b"; ");
            out.extend_from_slice(crumb);
        }
        head::close(out, v, from).map_err(|_| 400u16)?;
    }
    Ok(())
}

/// The head's bytes and the body's after them (most proxied requests
/// have none: no copy then).
#[inline(always)]
fn with_body(mut bytes: Vec<u8>, body: &[u8]) -> Vec<u8> {
    if !body.is_empty() {
        bytes.extend_from_slice(body);
    }
    bytes
}

/// `a == b`, for the short byte strings a Host is (`host:port`): up to
/// 16 bytes in two words each, without the call to `memcmp` (18
/// instructions of a proxied GET, callgrind `proxy-c50`).
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("eight bytes"));
    let half = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().expect("four bytes"));
    match n {
        // Two words, overlapping when `n` < 16: together every byte.
        8..=16 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        4..=7 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        _ => a == b,
    }
}

/// Whether a comma-separated `Via` value names `token` as a hop's
/// pseudonym (`1.1 token`, `2 token (comment)`).
fn contains_token(value: &[u8], token: &[u8]) -> bool {
    crate::codec::head::list_elements(value).any(|hop| {
        let mut parts = hop.split(|&b| b == b' ' || b == b'\t').filter(|p| !p.is_empty());
        let _protocol = parts.next();
        parts.next() == Some(token)
    })
}

/// The request's `Cookie` fields as one value: HTTP/2 and HTTP/3 clients
/// send crumbs, joined with `; ` for an HTTP/1.1 upstream (RFC 9113
/// §8.2.3). `None` without cookies.
pub(crate) fn joined_cookies(req: &Request<'_>) -> Option<Vec<u8>> {
    let mut cookie: Vec<u8> = Vec::new();
    for (_, v) in req.headers().filter(|(n, _)| n.eq_ignore_ascii_case("cookie")) {
        if !cookie.is_empty() {
            cookie.extend_from_slice(b"; ");
        }
        cookie.extend_from_slice(v);
    }
    (!cookie.is_empty()).then_some(cookie)
}

#[cfg(test)]
mod tests;
