//! A worker's upstream connections: one pool per upstream (kept-alive
//! connections idle at most `idle_timeout`, at most `max_conns` open, a
//! bounded queue of jobs waiting for one), each connection a small state
//! machine driven from the worker's loop like a client connection is:
//! readiness events, its deadline in the worker's timer set, and wakes
//! through the mailbox when the client's channel has room again.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Instant;

use mio::Interest;
use slab::Slab;

use super::encode::{self, Encoder, Verdict};
use super::upstream::Addr;
use super::{Job, Upstream};
use crate::access_log::{UpstreamAddr, UpstreamLog};
use crate::body::{self, BodyReader, Sender, Take, TrySendError};
use crate::codec::client::{
    parse_response_head, relay_plain_whole, ParsedResponse, ResponseBodyDecoder, ResponseFraming, ResponseHead,
    RESPONSE_FIELDS_MAX,
};
use crate::codec::head::{list_elements, trim_ows};
use crate::conn::Ctx;
use crate::message::trailers::Trailers;
use crate::metrics::{UpstreamFailure, UpstreamMetrics};
use crate::responder::Responder;
use crate::response::{HeaderBlock, Response, SharedBytes};
use crate::sources::{Source, Timers};

/// An answer whose body is at most this long and already read goes to the
/// client whole (one body with its Content-Length: beside the fields in
/// their buffer when short, `Body::Shared` from `SHARE_MIN`); a longer
/// one goes as a channel.
const WHOLE_BODY_MAX: usize = 64 * 1024;

/// A whole body at least this long is handed on in the buffer it was read
/// into (the head before it skipped, not moved); a shorter one is copied
/// out.
const SHARE_MIN: usize = 16 * 1024;

/// The most an idle upstream connection keeps of its last answer's
/// buffer for the next answer (bytes of capacity; emptied), and of the
/// buffer its short answers' fields and body are written into
/// (`UpConn::lines`): the second is counted per upstream connection in
/// `Limits::worst_case_bytes_per_worker` (`UPSTREAM_KEPT_BYTES`), the
/// first is inside its `UPSTREAM_READ_BYTES`.
pub(crate) const IDLE_BUF_BYTES_MAX: usize = 1024;

/// The room an answer larger than one read is gathered in, taken when
/// the first read fills its own: a whole body and a head of a few KiB,
/// so that the read after it does not move the first one's bytes.
const ANSWER_BUF_BYTES: usize = WHOLE_BODY_MAX + 8 * 1024;

/// Bytes read from an upstream at a time: what an answer may read past
/// the output budget, counted per connection in the worst case.
const READ_CHUNK: usize = crate::limits::UPSTREAM_READ_BYTES;

/// Interim answers (100, 103) relayed to a client per request at most;
/// an upstream's others are read and dropped, so that it cannot make the
/// client's connection queue heads without end.
const INTERIMS_MAX: u8 = 8;

/// Fields an upstream's answer never passes on: hop-by-hop (RFC 9110
/// §7.6.1, RFC 9113 §8.2.2), the framing the engine writes itself, and
/// Date and Server, which the engine writes for its own answers.
/// Found by length, then one or two comparisons: a walk through the
/// list cost 10 comparisons a field. Inlined: a call a field was 28
/// instructions of a proxied GET's four (callgrind, `proxy-c50`).
/// `Dropped::Connection` for `Connection` itself, which `relay_fields`
/// notes in the same look (a second comparison of each dropped name with
/// `connection` was 9 instructions of a proxied GET, callgrind
/// `proxy-c50`).
#[inline(always)]
fn dropped(name: &[u8]) -> Dropped {
    let is = |n: &[u8]| crate::codec::client::eq_lower(name, n);
    let drop = |yes: bool| if yes { Dropped::Yes } else { Dropped::No };
    match name.len() {
        2 => drop(is(b"te")),
        4 => drop(is(b"date")),
        6 => drop(is(b"server")),
        7 => drop(is(b"upgrade") || is(b"trailer")),
        10 if is(b"connection") => Dropped::Connection,
        10 => drop(is(b"keep-alive")),
        14 => drop(is(b"content-length")),
        16 => drop(is(b"proxy-connection")),
        17 => drop(is(b"transfer-encoding")),
        _ => Dropped::No,
    }
}

/// What `dropped` says of a field's name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dropped {
    /// Relayed.
    No,
    /// Not relayed.
    Yes,
    /// `Connection`: not relayed, and its options are not either.
    Connection,
}

/// The worker's upstream connections and pools.
#[derive(Default)]
pub(crate) struct Upstreams {
    conns: Slab<UpConn>,
    pools: Pools,
    /// Answers made this turn, for the worker to hand to their
    /// connections at once (`take_answers`): they are this worker's, so
    /// they need not go through the mailbox that other threads use. Each
    /// with the figures of its access log line.
    answers: Vec<Answer>,
    /// Answers relayed in one pass this turn (`UpConn::relay_plain`),
    /// kept as their bytes rather than made into `Response`s: an
    /// HTTP/1.1 client's connection copies them into its output
    /// (`lone_relayed`, `Conn::on_relayed`); any other answer goes
    /// into `answers` first (`take_answers`).
    relayed: Vec<Relayed>,
    /// Interim answers read this turn (`take_interims`), before the
    /// final answers of the same requests.
    interims: Vec<Interim>,
    /// Upstream connections that switched to WebSocket this turn, for
    /// the worker to hand to their clients' connections (`take_handoffs`).
    handoffs: Vec<super::Handoff>,
    /// Forward-auth checks waiting for their subrequests' answers.
    checks: super::auth::Checks,
    /// Round-robin positions and passive health of the balances
    /// (`balance.rs`): this worker's.
    balance: super::balance::Local,
    /// The connections to HTTP/2 (`h2c://`) upstreams (`h2up`): their
    /// keys are offset by `h2up::KEY_BASE` in this one token space.
    h2: super::h2up::H2Upstreams,
    /// Where every connection reads into (`READ_CHUNK`, zeroed once):
    /// a connection keeps only what it has not consumed yet, usually
    /// nothing, so an idle one holds no read buffer. A read that is all
    /// of a long answer's body takes it along into the channel
    /// (`UpConn::advance`); the next comes from the worker's kept ones
    /// (`BufPool::take_chunk`).
    scratch: Vec<u8>,
}

/// The pools' hasher: their keys are `Upstream::id`s, numbers this
/// process counts from 0, never a client's bytes, so nothing needs
/// SipHash's defence against chosen keys; its look-ups for a proxied
/// request were 1,000 instructions (callgrind, `proxy-c50`). One
/// multiplication by an odd constant (distinct keys stay distinct), its
/// high half folded into the low bits that pick the bucket.
#[derive(Clone, Copy, Default)]
struct IdHash;

impl std::hash::BuildHasher for IdHash {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Not used by `usize` keys; correct for any other all the same.
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
    fn write_u64(&mut self, n: u64) {
        let h = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 32);
    }
}

/// An answer, where it goes, and the upstream figures of its log line.
pub(crate) type Answer = (Responder, Response, Option<UpstreamLog>);

/// An answer `UpConn::relay_plain` took, as the bytes an HTTP/1.1 client
/// gets after the head's first lines (status line, `Server`, `Date`,
/// `Content-Length`, which the client's connection writes: they depend
/// on it): the relayed field lines, the blank line and the body, in the
/// upstream connection's kept buffer (`UpConn::lines`), copied from
/// there at once. Building the `Response` (`into_answer`: the same one
/// `head` makes of such an answer) and handing it over through the
/// general writer made the hand-over 1,126 instructions of a proxied
/// GET, this 783 (callgrind `proxy-c50`); an HTTP/2 or HTTP/3 client
/// still gets the `Response`.
pub(crate) struct Relayed {
    /// The client's connection and the deferred request's id.
    pub(crate) token: usize,
    pub(crate) id: u64,
    pub(crate) status: u16,
    /// The field lines (`..lines_len`), CRLF, the body.
    bytes: Arc<Vec<u8>>,
    lines_len: usize,
    /// The figures of its access log line (`None` when none is kept).
    pub(crate) figures: Option<UpstreamLog>,
}

impl Relayed {
    /// What follows the head's first lines: the field lines, the blank
    /// line, the body.
    #[inline(always)]
    pub(crate) fn rest(&self) -> &[u8] {
        &self.bytes
    }

    /// The body's length.
    #[inline(always)]
    pub(crate) fn body_len(&self) -> usize {
        self.bytes.len() - self.lines_len - 2
    }

    /// The answer as `head` makes it of the same bytes: the fields a
    /// header block, the body beside it (no copy, no allocation).
    pub(crate) fn into_answer(self) -> Answer {
        let end = self.bytes.len();
        let body = self.lines_len + 2..end;
        let buf: Arc<dyn AsRef<[u8]> + Send + Sync> = self.bytes;
        let block = HeaderBlock::from_checked_lines(
            SharedBytes::slice(buf, 0..self.lines_len).expect("the lines are in their buffer"),
        );
        let response = Response::prepared_beside(self.status, block, body);
        (Responder::new(None, self.token, self.id), response, self.figures)
    }
}

/// An interim answer to relay: the client's connection token, the
/// deferred request's id, the status (100 or 103) and its fields as
/// complete lines.
pub(crate) type Interim = (usize, u64, u16, Vec<u8>);

struct Pool {
    up: Arc<Upstream>,
    /// This worker's counters for the upstream, when the server keeps
    /// metrics.
    metrics: Option<Arc<UpstreamMetrics>>,
    /// Connections idle and ready for a request, most recent last.
    idle: Vec<usize>,
    /// Connections open (idle or busy).
    open: usize,
    queue: VecDeque<Job>,
}

/// The worker's pools, by `Upstream::id` and by place: a connection
/// keeps its pool's place (`UpConn::pool`), so that assigning it a
/// request and taking it back idle find the pool without hashing the id
/// (three look-ups of a proxied GET's four, about 70 instructions,
/// callgrind `proxy-c50`). Pools are never removed: a place stays its
/// pool's.
#[derive(Default)]
struct Pools {
    list: Vec<Pool>,
    places: HashMap<usize, usize, IdHash>,
    /// The last id looked up by `place_or_make` and its place: a route of
    /// one upstream asks for the same pool every time, and the id's hash
    /// and probe were 22 instructions of a proxied GET (callgrind
    /// `proxy-c50`). A place never changes (pools are never removed), so
    /// it cannot go stale.
    last: Option<(usize, usize)>,
}

impl Pools {
    /// The place of upstream `id`'s pool, made by `make` if there is none.
    #[inline(always)]
    fn place_or_make(&mut self, id: usize, make: impl FnOnce() -> Pool) -> usize {
        if let Some((last, at)) = self.last {
            if last == id {
                return at;
            }
        }
        let at = match self.places.get(&id) {
            Some(&at) => at,
            None => {
                self.list.push(make());
                let at = self.list.len() - 1;
                self.places.insert(id, at);
                at
            }
        };
        self.last = Some((id, at));
        at
    }

    fn place(&self, id: usize) -> Option<usize> {
        match self.last {
            Some((last, at)) if last == id => Some(at),
            _ => self.places.get(&id).copied(),
        }
    }

    fn get(&self, id: &usize) -> Option<&Pool> {
        self.list.get(self.place(*id)?)
    }

    fn get_mut(&mut self, id: &usize) -> Option<&mut Pool> {
        let at = self.place(*id)?;
        self.list.get_mut(at)
    }

    fn values(&self) -> std::slice::Iter<'_, Pool> {
        self.list.iter()
    }

    fn values_mut(&mut self) -> std::slice::IterMut<'_, Pool> {
        self.list.iter_mut()
    }
}

/// An upstream connection's socket (a tunnel's too, once handed to its
/// client's connection: `conn/tunnel.rs`).
pub(crate) enum Sock {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
    /// An `https://` upstream (`tls.rs`).
    Tls(Box<super::tls::TlsStream>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Connecting,
    Writing,
    Head,
    Body,
    Idle,
}

struct UpConn {
    sock: Sock,
    up: usize,
    /// Its pool's place in `Upstreams::pools`.
    pool: usize,
    /// Its upstream's `read_timeout` and this worker's counters for it,
    /// copied from the pool when the connection is made: each `drive`
    /// looked the pool up for them (twice a proxied GET).
    read_timeout: std::time::Duration,
    /// Its upstream's `continue_wait`.
    continue_wait: std::time::Duration,
    metrics: Option<Arc<UpstreamMetrics>>,
    state: State,
    job: Option<Job>,
    /// The request's bytes and how many left.
    out: Vec<u8>,
    written: usize,
    /// Bytes read and not yet consumed.
    buf: Vec<u8>,
    /// Came from the idle pool: a failure before any answer byte may be
    /// the upstream closing it meanwhile.
    reused: bool,
    /// A byte of the answer arrived.
    got: bool,
    /// The last read filled all the room it was given: more may be
    /// waiting in the socket. A head whose body of known length, at most
    /// `WHOLE_BODY_MAX`, is not all read yet waits for one more read then
    /// (`UpConn::head`), so that the answer goes whole rather than as a
    /// channel; a read that finds nothing clears it.
    more: bool,
    /// The bytes such a head still waits for: the read after it takes no
    /// more (the buffer holds at most the head and its body, as it held at
    /// most the head and one read before).
    missing: usize,
    /// The head of the answer was sent to the client (through the job's
    /// responder, consumed then).
    answered: bool,
    /// `read_answer` tried the one pass on what the buffer holds and it
    /// declined: `head` does not try it again on the same bytes.
    plain_tried: bool,
    /// The method was HEAD (its answer has no body).
    head_method: bool,
    keep_alive: bool,
    /// The request's body as it arrives, and whether it goes chunked.
    body: Option<BodyReader>,
    chunked: bool,
    /// A byte of a streamed body was taken: the request cannot be sent
    /// again.
    streamed: bool,
    tx: Option<Sender>,
    decoder: Option<ResponseBodyDecoder>,
    /// A chunk the client's channel had no room for.
    pending: Option<Vec<u8>>,
    /// The answer is compressed on its way (`encode.rs`): the
    /// compressor, until the body's end has gone through it.
    encoder: Option<Encoder>,
    /// The last step made an answer (pushed to `Upstreams::answers`):
    /// the answer's status, for passive health to judge (`judge`).
    judged: Option<u16>,
    /// The buffer the last answer's fields (and a short body beside them)
    /// were written into, kept for the next answer: once the client's
    /// connection has written and dropped that answer, this is its only
    /// reference and it is written into again (`answer_buf`), so a short
    /// answer allocates nothing (the lines' `Vec`, their `Arc` and the
    /// body's `Vec` were 3 of a proxied GET's 5 allocations). At most
    /// `IDLE_BUF_BYTES_MAX` of capacity is kept.
    lines: Option<Arc<Vec<u8>>>,
    deadline: Option<Instant>,
    armed: Option<Instant>,
    /// When the exchange began (connecting, or writing on a kept-alive
    /// connection), and what the access log says of it.
    started: Instant,
    figures: UpstreamLog,
    /// Why the answer, already relayed, was cut short (for the metrics).
    broke: Option<UpstreamFailure>,
    /// The answer being read into the cache (`cache.rs`), until its end.
    fill: Option<Box<super::cache::Fill>>,
    /// Interim answers read by the last step, for `Upstreams::interims`,
    /// and how many this request has had relayed.
    interims: Vec<Interim>,
    n_interims: u8,
    /// When the client's held `100 Continue` is sent by the proxy itself
    /// if the upstream has said nothing by then
    /// (`Upstream::CONTINUE_WAIT`).
    continue_at: Option<Instant>,
    /// The answer's trailer fields go to the client (it takes them: the
    /// job's `trailers`), less those its `Connection` field named.
    trailers: Option<Vec<Vec<u8>>>,
}

/// What a step of a connection came to.
enum Outcome {
    /// Waits for readiness, a wake or its deadline.
    Wait,
    /// The exchange is over and the connection may carry another.
    Reusable,
    /// The exchange is over (or the client gone); close the connection.
    Close,
    /// The upstream switched to WebSocket (`tunnel.rs`): the connection
    /// leaves the pool, for the client's connection, with `fields` for
    /// the client's 101 or 200.
    Switched { fields: Vec<u8> },
    /// The exchange failed before its answer was sent: answer `status`
    /// (or send the job again on a fresh connection if `retry`), close.
    Failed { status: u16, why: String, retry: bool },
}

impl Sock {
    /// A connection under way, and the address it goes to (TCP).
    pub(super) fn connect(
        addr: &Addr,
        guard: Option<&super::guard::AddressGuard>,
        tls: Option<&super::tls::UpstreamTls>,
    ) -> io::Result<(Sock, Option<SocketAddr>)> {
        let (sock, peer) = Sock::connect_plain(addr, guard)?;
        match (sock, tls) {
            (Sock::Tcp(tcp), Some(tls)) => {
                let tls = tls.connection()?;
                Ok((Sock::Tls(Box::new(super::tls::TlsStream { tcp, tls })), peer))
            }
            (sock, _) => Ok((sock, peer)),
        }
    }

    /// A connection to the first address that takes it; with a `guard`,
    /// addresses it refuses are skipped (and named in the error when none
    /// is left).
    fn connect_plain(
        addr: &Addr,
        guard: Option<&super::guard::AddressGuard>,
    ) -> io::Result<(Sock, Option<SocketAddr>)> {
        match addr {
            Addr::Tcp(addrs) => {
                let mut last = io::Error::new(io::ErrorKind::AddrNotAvailable, "no address");
                for a in addrs.current().iter() {
                    if let Some(why) = guard.and_then(|g| g.refusal(a.ip())) {
                        last = io::Error::new(
                            io::ErrorKind::PermissionDenied,
                            format!("{a} refused: {why}, which the address guard does not allow"),
                        );
                        continue;
                    }
                    match mio::net::TcpStream::connect(*a) {
                        Ok(s) => {
                            let _ = s.set_nodelay(true);
                            return Ok((Sock::Tcp(s), Some(*a)));
                        }
                        Err(e) => last = e,
                    }
                }
                Err(last)
            }
            Addr::Unix(path) => mio::net::UnixStream::connect(path).map(|s| (Sock::Unix(s), None)),
        }
    }

    /// The next close resets the connection (RST, SO_LINGER 0) instead of
    /// ending it: for a request cut short, which the upstream must not
    /// take for complete. A Unix socket has no reset; it just closes.
    fn abort(&self) {
        let tcp = match self {
            Sock::Tcp(s) => s,
            Sock::Tls(s) => &s.tcp,
            Sock::Unix(_) => return,
        };
        let _ = socket2::SockRef::from(tcp).set_linger(Some(std::time::Duration::ZERO));
    }

    pub(super) fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Sock::Tcp(s) => s,
            Sock::Unix(s) => s,
            Sock::Tls(s) => &mut s.tcp,
        }
    }

    /// Connected (and, over TLS, the handshake done): `Ok(true)`; still
    /// connecting: `Ok(false)`.
    pub(super) fn connected(&mut self) -> io::Result<bool> {
        let (err, peer) = match self {
            Sock::Tcp(s) => (s.take_error(), s.peer_addr().map(|_| ())),
            Sock::Unix(s) => (s.take_error(), s.peer_addr().map(|_| ())),
            Sock::Tls(s) => (s.tcp.take_error(), s.tcp.peer_addr().map(|_| ())),
        };
        if let Some(e) = err? {
            return Err(e);
        }
        match peer {
            Ok(()) => match self {
                Sock::Tls(s) => s.handshake(),
                _ => Ok(true),
            },
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Read for Sock {
    /// A plain socket's bytes come by `sys::stream::recv`, as a client
    /// connection's do (and as `write` sends). Inlined, as `write`: the
    /// calls were about 20 instructions of a proxied GET (callgrind
    /// `proxy-c50`).
    #[inline(always)]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => crate::sys::stream::recv(s.as_fd(), buf),
            Sock::Unix(s) => crate::sys::stream::recv(s.as_fd(), buf),
            Sock::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Sock {
    /// A plain socket's bytes go by `sys::stream::send`, as a client
    /// connection's do, not through mio's `write` (libc's `send`).
    #[inline(always)]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => crate::sys::stream::send(s.as_fd(), buf),
            Sock::Unix(s) => crate::sys::stream::send(s.as_fd(), buf),
            Sock::Tls(s) => s.write(buf),
        }
    }
    /// Sends what rustls holds (`https://`); nothing to do otherwise.
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sock::Tls(s) => s.flush(),
            _ => Ok(()),
        }
    }
}

impl Upstreams {
    /// The answers made since the last call, each with its responder.
    /// (Forward-auth subrequests' answers are decided on the way, and
    /// answers are finished as their routes ask, a stale one that stands
    /// in for a failure included.)
    pub(crate) fn take_answers(&mut self) -> Vec<Answer> {
        for relayed in self.relayed.drain(..) {
            self.answers.push(relayed.into_answer());
        }
        self.checks
            .sort(super::cache::rescue(std::mem::take(&mut self.answers)))
    }

    /// The one answer made since the last call when it is all there is
    /// to hand over: no interim answer to go before it, no tunnel, no
    /// forward-auth check or cache rescue to decide it (`take_answers`
    /// would pass it through untouched). The common case, a proxied GET's
    /// answer, handed over without the list's trip through `take_answers`
    /// and `give_answers` and the drain between them.
    #[inline(always)]
    pub(crate) fn take_lone_answer(&mut self) -> Option<Answer> {
        if self.answers.len() != 1 || !self.relayed.is_empty() || !self.answers_alone() {
            return None;
        }
        self.answers.pop()
    }

    /// The one answer made since the last call, when it is all there is
    /// to hand over (as `take_lone_answer`) and was relayed in one pass:
    /// the common proxied GET's. Lent where it lies (moved out, it was a
    /// copy of it, 29 instructions, callgrind `proxy-c50`): the caller
    /// then drops it (`drop_relayed`) or takes it as an answer
    /// (`take_relayed_answer`).
    #[inline(always)]
    pub(crate) fn lone_relayed(&mut self) -> Option<&mut Relayed> {
        if self.relayed.len() != 1 || !self.answers.is_empty() || !self.answers_alone() {
            return None;
        }
        self.relayed.first_mut()
    }

    /// Whether the answers are all there is to hand over: no interim
    /// answer to go before them, no tunnel, no forward-auth check or
    /// cache rescue to decide them (`take_answers` would pass them
    /// through untouched).
    #[inline(always)]
    fn answers_alone(&self) -> bool {
        self.interims.is_empty()
            && self.handoffs.is_empty()
            && self.checks.sorts_nothing()
            && super::cache::rescues_nothing()
    }

    /// The relayed answers were written to their clients.
    #[inline(always)]
    pub(crate) fn drop_relayed(&mut self) {
        self.relayed.clear();
    }

    /// The last relayed answer made into its `Response`.
    pub(crate) fn take_relayed_answer(&mut self) -> Option<Answer> {
        self.relayed.pop().map(Relayed::into_answer)
    }

    /// The emptied list `take_answers` gave, to push the next answers
    /// into: without it every answer's push allocated the list again (a
    /// malloc and a free per proxied GET, 460 instructions of 14,860,
    /// callgrind `proxy-c50`). A list of more than `ANSWERS_KEPT` is let
    /// go, so a burst's length is not held for good.
    pub(crate) fn give_answers(&mut self, mut answers: Vec<Answer>) {
        const ANSWERS_KEPT: usize = 64;
        answers.clear();
        if self.answers.is_empty() && self.answers.capacity() < answers.capacity() && answers.capacity() <= ANSWERS_KEPT
        {
            self.answers = answers;
        }
    }

    /// Whether answers wait for `take_answers` (or tunnels for
    /// `take_handoffs`, or requests a forward-auth check let through for
    /// `submit_all`).
    pub(crate) fn has_answers(&self) -> bool {
        !self.answers.is_empty()
            || !self.relayed.is_empty()
            || !self.interims.is_empty()
            || !self.handoffs.is_empty()
            || self.checks.has_granted()
            || super::cache::has_released()
    }

    /// The interim answers read since the last call, to be relayed
    /// before the final answers `take_answers` gives.
    pub(crate) fn take_interims(&mut self) -> Vec<Interim> {
        std::mem::take(&mut self.interims)
    }

    /// The upstream connections that switched to WebSocket since the last
    /// call, each for its client's connection.
    pub(crate) fn take_handoffs(&mut self) -> Vec<super::Handoff> {
        for handoff in &self.handoffs {
            self.checks.forget(handoff.responder.key());
        }
        std::mem::take(&mut self.handoffs)
    }

    /// Takes the jobs the handlers left this turn (and those forward-auth
    /// checks let through).
    pub(crate) fn submit_all(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers) {
        let mut jobs = std::mem::take(&mut *ctx.outbox.borrow_mut());
        jobs.extend(self.checks.take_granted());
        // Requests that waited for another's answer to their key (`cache.rs`).
        jobs.extend(super::cache::take_released(&mut self.answers));
        self.checks.count(ctx.metrics);
        for job in jobs.drain(..) {
            self.submit(ctx, timers, job);
        }
        // The emptied list goes back for the next turn's jobs: taken
        // without it, the outbox grew from nothing again each turn (a
        // malloc and reallocs, 160 instructions of a proxied GET,
        // callgrind `proxy-c50`). Up to `JOBS_KEPT`, as `give_answers`.
        const JOBS_KEPT: usize = 64;
        let mut outbox = ctx.outbox.borrow_mut();
        if outbox.is_empty() && outbox.capacity() < jobs.capacity() && jobs.capacity() <= JOBS_KEPT {
            *outbox = jobs;
        }
    }

    /// Hands `job` to its upstream. The common case, a job with nothing
    /// of `More` for one HTTP/1.1 upstream whose pool has an idle
    /// connection, goes from the list straight into that connection's
    /// slot (inlined here, as `begin_reused` and `UpConn::start`): each
    /// call it was passed through by value (`place`, `assign`,
    /// `UpConn::take`), and each `&mut` taken of it on the way
    /// (`Checks::admit`), was one more copy of its 120 bytes, five in
    /// all where two are left (`Worker::run` and `place` 269
    /// instructions of a proxied GET, now 209, callgrind `proxy-c50`);
    /// the rest goes through `submit_other`.
    #[inline(always)]
    fn submit(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, job: Job) {
        if job.more.is_none() && job.choice.is_none() && !job.up.is_h2() {
            if let Some(key) = self.take_idle(job.up.id) {
                // An idle connection has no job: the move into its slot
                // drops nothing (a drop there, which might unwind, had
                // the compiler copy the job aside first).
                if let Some(c) = self.conns.get_mut(key).filter(|c| c.job.is_none()) {
                    c.job = Some(job);
                    c.start(ctx.now);
                    return self.begin_reused(ctx, timers, key);
                }
            }
        }
        self.submit_other(ctx, timers, job);
    }

    /// An idle connection of upstream `id`'s pool, taken for a request
    /// (counted in its metrics); `None` when the pool has none (or is not
    /// made yet): `place` then finds it again and decides.
    #[inline(always)]
    fn take_idle(&mut self, id: usize) -> Option<usize> {
        let at = self.pools.place(id)?;
        let pool = self.pools.list.get_mut(at)?;
        let key = pool.idle.pop()?;
        if let Some(m) = &pool.metrics {
            m.requests.add(1);
        }
        Some(key)
    }

    /// `submit`, for any job: a forward-auth check noted, a balance's
    /// member chosen, the job placed.
    #[inline(never)]
    fn submit_other(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, mut job: Job) {
        self.checks.admit(&mut job);
        if job.choice.is_some() && !self.choose(ctx, &mut job) {
            log::warn!("proxy: {}: every upstream of the route is out: 503", job.up.url());
            let answer = job.up.error_answer(503, crate::Reason::UpstreamDown);
            self.answers.push((job.responder, answer, Some(UpstreamLog::default())));
            return;
        }
        self.place(ctx, timers, job);
    }

    /// Sends `job`, which failed on its upstream before any of it could
    /// have had an effect, to another member of its balance; gives it back
    /// when there is none (or no balance).
    fn resend(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, mut job: Job) -> Option<Job> {
        if job.choice.is_none() || !self.choose(ctx, &mut job) {
            return Some(job);
        }
        log::debug!("proxy: sending the request to {} instead", job.up.url());
        job.retried = false;
        self.place(ctx, timers, job);
        None
    }

    /// Chooses `job`'s upstream among its balance's members it has not
    /// tried (`balance.rs`): `false` when every one left is out.
    fn choose(&mut self, ctx: &Ctx<'_>, job: &mut Job) -> bool {
        let Some(choice) = job.choice.as_mut() else { return true };
        let b = choice.balance.clone();
        for (i, m) in b.members.iter().enumerate() {
            let at = self.pools.place_or_make(m.id, || Pool::new(m.clone(), ctx));
            let pool = &self.pools.list[at];
            if let (Some(metrics), Some(checked)) = (&pool.metrics, &b.checked) {
                if let Some(flag) = checked.flag(i) {
                    let _ = metrics.checked.set(flag);
                }
            }
            self.balance
                .passive
                .entry(m.id)
                .or_insert_with(|| super::balance::Passive::new(&b));
        }
        let pools = &self.pools;
        let load = |u: &Upstream| pools.get(&u.id).map_or(0, Pool::load);
        let chosen = self.balance.choose(&b, choice.key, choice.tried, ctx.now, load);
        for m in &b.members {
            if let (Some(metrics), Some(p)) = (
                self.pools.get(&m.id).and_then(|p| p.metrics.as_ref()),
                self.balance.passive.get(&m.id),
            ) {
                metrics.out.set(u64::from(p.is_out_now()));
            }
        }
        let Some(i) = chosen else { return false };
        choice.tried |= 1 << i;
        job.up = b.members[i].clone();
        true
    }

    /// Passive health: an exchange with upstream `id` failed (`None`: no
    /// answer came, or it was cut, malformed or late) or got an answer of
    /// `status`, a failure only if the balance lists it (`fail_status`:
    /// none by default, as nginx's `proxy_next_upstream error timeout`
    /// and Caddy's empty `unhealthy_status`); counted for a balance's
    /// members only.
    /// Inlined to its first test: a worker without balanced routes has no
    /// passive health to keep (the call was 17 instructions of every
    /// proxied GET, callgrind `proxy-c50`).
    #[inline(always)]
    fn judge(&mut self, now: Instant, id: usize, status: Option<u16>) {
        if self.balance.passive.is_empty() {
            return;
        }
        self.judge_member(now, id, status);
    }

    /// `judge`, for a worker with balanced routes.
    #[inline(never)]
    fn judge_member(&mut self, now: Instant, id: usize, status: Option<u16>) {
        let Some(p) = self.balance.passive.get_mut(&id) else {
            return;
        };
        if status.is_some_and(|s| !p.fails_with(s)) {
            p.succeeded();
        } else if p.failed_now(now) {
            let url = self.pools.get(&id).map_or("", |p| p.up.url());
            log::warn!("proxy: {url}: failing: out of this worker's choice for a while");
            if let Some(m) = self.pools.get(&id).and_then(|p| p.metrics.as_ref()) {
                m.ejections.add(1);
                m.out.set(1);
            }
        }
    }

    /// Hands `job` to its upstream's pool: an idle connection, a new one,
    /// the queue, or 503.
    fn place(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, job: Job) {
        if job.up.is_h2() {
            let out = &mut super::h2up::Out {
                answers: &mut self.answers,
                interims: &mut self.interims,
            };
            return self.h2.place(ctx, timers, job, out);
        }
        let at = self.pools.place_or_make(job.up.id, || Pool::new(job.up.clone(), ctx));
        let pool = &mut self.pools.list[at];
        if let Some(m) = &pool.metrics {
            m.requests.add(1);
        }
        if let Some(key) = pool.idle.pop() {
            return self.assign(ctx, timers, key, job);
        }
        // The worker's count of open connections (a walk through the
        // pools) only when there is no idle one to take.
        let room = self.n_open() < ctx.limits.upstream_conns_max;
        let pool = &mut self.pools.list[at];
        if pool.open < pool.up.max_conns && room {
            self.connect(ctx, timers, job);
        } else if pool.queue.len() < pool.up.queue_max {
            let below_own = pool.open < pool.up.max_conns;
            pool.queue.push_back(job);
            if below_own {
                // The worker's cap, not the upstream's: another
                // upstream's idle connection makes room (its close
                // starts this job).
                self.close_an_idle(ctx, timers);
            }
        } else {
            self.answers
                .push(queue_full(&pool.up, pool.queue.len(), pool.metrics.as_deref(), job));
        }
    }

    /// Opens a connection for `job` (`open` counted), or answers 502.
    fn connect(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, mut job: Job) {
        let up = job.up.clone();
        let failed = |why: &dyn std::fmt::Display, earlier: Option<Box<UpstreamLog>>| {
            log::warn!("proxy: {}: {why}", up.url());
            if let Some(m) = self.pools.get(&up.id).and_then(|p| p.metrics.as_ref()) {
                m.fail(UpstreamFailure::Connect);
            }
            let figures = UpstreamLog {
                addr: Some(match &up.addr {
                    Addr::Tcp(addrs) => UpstreamAddr::Tcp(addrs.current()[0]),
                    Addr::Unix(_) => UpstreamAddr::Unix(up.clone()),
                }),
                status: Some(502),
                earlier,
                ..UpstreamLog::default()
            };
            (up.error_answer(502, crate::Reason::UpstreamConnect), Some(figures))
        };
        let (mut sock, peer) = match Sock::connect(&up.addr, up.guard.as_deref(), up.tls.as_ref()) {
            Ok(s) => s,
            Err(e) => {
                let (answer, figures) = failed(&format_args!("connect: {e}"), job.tried.take());
                // Nothing was sent: another member may take it (the failed
                // attempt logged before the next).
                self.judge(ctx.now, up.id, None);
                job.tried = figures.map(Box::new);
                if let Some(mut job) = self.resend(ctx, timers, job) {
                    let figures = job.tried.take().map(|f| *f);
                    self.answers.push((job.responder, answer, figures));
                }
                return;
            }
        };
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        if let Err(e) = ctx.registry.register(
            sock.source(),
            Source::Upstream(key).mio(),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            let (answer, figures) = failed(&format_args!("register: {e}"), job.tried.take());
            self.answers.push((job.responder, answer, figures));
            return;
        }
        let pool = self.pools.place_or_make(up.id, || Pool::new(up.clone(), ctx));
        let metrics = self.pools.list[pool].metrics.clone();
        entry.insert(UpConn {
            sock,
            up: up.id,
            pool,
            read_timeout: up.read_timeout,
            continue_wait: up.continue_wait,
            metrics,
            state: State::Connecting,
            job: None,
            out: Vec::new(),
            written: 0,
            buf: Vec::new(),
            reused: false,
            got: false,
            more: false,
            missing: 0,
            answered: false,
            plain_tried: false,
            head_method: false,
            keep_alive: false,
            body: None,
            chunked: false,
            streamed: false,
            tx: None,
            decoder: None,
            pending: None,
            encoder: None,
            fill: None,
            judged: None,
            lines: None,
            deadline: None,
            armed: None,
            started: ctx.now,
            figures: UpstreamLog::default(),
            broke: None,
            interims: Vec::new(),
            n_interims: 0,
            continue_at: None,
            trailers: None,
        });
        if let Some(pool) = self.pools.list.get_mut(pool) {
            pool.open += 1;
            pool.publish();
            if let Some(m) = &pool.metrics {
                m.fresh.add(1);
            }
        }
        let c = &mut self.conns[key];
        c.take(job, ctx.now);
        c.figures.addr = Some(match peer {
            Some(a) => UpstreamAddr::Tcp(a),
            None => UpstreamAddr::Unix(up.clone()),
        });
        c.state = State::Connecting;
        c.deadline = Some(ctx.now + up.connect_timeout);
        self.drive(ctx, timers, key);
    }

    /// Gives an idle connection `job`.
    fn assign(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, key: usize, job: Job) {
        self.conns[key].take(job, ctx.now);
        self.begin_reused(ctx, timers, key);
    }

    /// Idle connection `key` was given a job (`UpConn::start` done): the
    /// exchange begins.
    #[inline(always)]
    fn begin_reused(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, key: usize) {
        let c = &mut self.conns[key];
        // Its address stays in its figures (`start`).
        // A kept-alive connection: no time to connect, as nginx says it.
        c.figures.connect = Some(std::time::Duration::ZERO);
        c.reused = true;
        c.state = State::Writing;
        if let Some(pool) = self.pools.list.get(c.pool) {
            pool.publish();
            if let Some(m) = &pool.metrics {
                m.reused.add(1);
            }
        }
        self.drive(ctx, timers, key);
    }

    /// A readiness event of connection `key`.
    pub(crate) fn on_event(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, key: usize) {
        if let Some(key) = super::h2up::key(key) {
            return self.on_h2(ctx, timers, key, false);
        }
        if self.conns.contains(key) {
            self.drive(ctx, timers, key);
        }
    }

    /// The client's channel has room again (or the client is gone).
    pub(crate) fn on_wake(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, key: usize) {
        if let Some(key) = super::h2up::key(key) {
            return self.on_h2(ctx, timers, key, false);
        }
        if self.conns.contains(key) {
            self.drive(ctx, timers, key);
        }
    }

    /// Connection `key`'s timer fired.
    pub(crate) fn on_timer(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, key: usize) {
        if let Some(key) = super::h2up::key(key) {
            return self.on_h2(ctx, timers, key, true);
        }
        let Some(c) = self.conns.get_mut(key) else { return };
        c.armed = None;
        if let Some(at) = c.continue_at.filter(|&at| at <= ctx.now) {
            c.continue_at = None;
            if c.deadline == Some(at) {
                // Back to the client's body timeout alone (not the
                // answer's: a 504 here would be for no fault of the
                // upstream's).
                c.deadline = None;
            }
            let waiting = matches!(c.state, State::Writing) && !c.streamed && c.n_interims == 0;
            if let (true, Some(job)) = (waiting, c.job.as_mut().filter(|j| j.expect_continue)) {
                // The upstream said nothing: the client's 100 is ours, and
                // the upstream's own, if it comes later, is not relayed
                // again.
                job.expect_continue = false;
                let (token, id) = job.responder.key();
                self.interims.push((token, id, 100, Vec::new()));
                return;
            }
        }
        match c.deadline {
            Some(d) if d <= ctx.now => {
                let outcome = match c.state {
                    State::Idle => Outcome::Close,
                    State::Connecting => Outcome::Failed {
                        status: 504,
                        why: "connect timed out".into(),
                        retry: false,
                    },
                    State::Writing | State::Head => Outcome::Failed {
                        status: 504,
                        why: "timed out waiting for the answer".into(),
                        retry: false,
                    },
                    State::Body => {
                        log::warn!("proxy: upstream timed out in the middle of a body");
                        if let Some(tx) = c.tx.take() {
                            tx.abort();
                        }
                        c.broke = Some(UpstreamFailure::Timeout);
                        Outcome::Close
                    }
                };
                self.settle(ctx, timers, key, outcome);
            }
            later => timers.arm(Source::Upstream(key).token(), later, &mut c.armed),
        }
    }

    /// Shutdown: idle connections close now; busy ones finish.
    pub(crate) fn close_idle(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers) {
        let out = &mut super::h2up::Out {
            answers: &mut self.answers,
            interims: &mut self.interims,
        };
        self.h2.close_idle(ctx, timers, out);
        let idle: Vec<usize> = self.pools.values_mut().flat_map(|p| p.idle.drain(..)).collect();
        for key in idle {
            self.close(ctx, timers, key);
        }
    }

    /// An event, a wake or the timer (`timer`) of HTTP/2 connection `key`.
    fn on_h2(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, key: usize, timer: bool) {
        let out = &mut super::h2up::Out {
            answers: &mut self.answers,
            interims: &mut self.interims,
        };
        match timer {
            true => self.h2.on_timer(ctx, timers, key, out),
            false => self.h2.on_event(ctx, timers, key, out),
        }
    }

    fn drive(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, key: usize) {
        let c = &mut self.conns[key];
        if self.scratch.len() != READ_CHUNK {
            self.scratch = ctx.pool.take_chunk();
        }
        let read_timeout = c.read_timeout;
        // The two steps of every exchange first, each without
        // `advance`'s loop: the request written whole at once, the
        // answer's first read.
        let quick = match c.state {
            State::Writing => c.write_request(ctx, read_timeout),
            State::Head => c.read_answer(ctx, key, read_timeout, &mut self.scratch, &mut self.relayed),
            _ => None,
        };
        let outcome = match quick {
            Some(outcome) => outcome,
            None => c.advance(
                ctx,
                key,
                read_timeout,
                &mut self.scratch,
                &mut self.answers,
                &mut self.relayed,
            ),
        };
        if !c.interims.is_empty() {
            self.interims.append(&mut c.interims);
        }
        if let Some(status) = c.judged.take() {
            // An answer's head was relayed (`UpConn::answer_to`).
            let id = c.up;
            self.judge(ctx.now, id, Some(status));
        }
        match outcome {
            Outcome::Wait => {
                // `settle`'s first case, here: a request just written waits
                // for its answer on every exchange, and the call was about 20
                // instructions of a proxied GET (callgrind `proxy-c50`).
                let c = &mut self.conns[key];
                timers.arm(Source::Upstream(key).token(), c.deadline, &mut c.armed);
            }
            // And its second, the answer's end on a connection kept alive
            // (the call and the outcome's move, about 10 instructions).
            Outcome::Reusable => self.reuse(ctx, timers, key),
            outcome => self.settle(ctx, timers, key, outcome),
        }
    }

    /// Connection `key`'s answer ended and it may be asked again: the
    /// next job waiting for its pool, or back to the pool's idle ones.
    #[inline(always)]
    fn reuse(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, key: usize) {
        let c = &mut self.conns[key];
        c.state = State::Idle;
        c.reused = true;
        // A short answer's buffer is kept for the next (freed and
        // made again, it was a malloc and a free per proxied GET,
        // 210 instructions, callgrind `proxy-c50`); a larger one
        // goes, so an idle connection holds at most
        // `IDLE_BUF_BYTES_MAX`, within the `UPSTREAM_READ_BYTES`
        // each connection is counted for in
        // `Limits::worst_case_bytes_per_worker`.
        if c.buf.capacity() <= IDLE_BUF_BYTES_MAX {
            c.buf.clear();
        } else {
            c.buf = Vec::new();
        }
        let Some(pool) = self.pools.list.get(c.pool) else {
            return;
        };
        c.deadline = Some(ctx.now + pool.up.idle_timeout);
        timers.arm(Source::Upstream(key).token(), c.deadline, &mut c.armed);
        if let Some(job) = self.pools.list[c.pool].queue.pop_front() {
            // Even while draining: a queued job is a request taken
            // already, which would otherwise wait for the drain's end.
            self.assign(ctx, timers, key, job);
        } else if ctx.draining {
            self.close(ctx, timers, key);
        } else if self.waiting_for_room().is_some() {
            // Another upstream's request waits for the worker's cap:
            // this connection makes room (`close` starts it).
            self.close(ctx, timers, key);
        } else if let Some(pool) = self.pools.list.get_mut(self.conns[key].pool) {
            pool.idle.push(key);
            pool.publish();
        }
    }

    fn settle(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, key: usize, outcome: Outcome) {
        match outcome {
            Outcome::Wait => {
                let c = &mut self.conns[key];
                timers.arm(Source::Upstream(key).token(), c.deadline, &mut c.armed);
            }
            Outcome::Reusable => self.reuse(ctx, timers, key),
            Outcome::Close => self.close(ctx, timers, key),
            Outcome::Switched { fields } => self.hand_off(ctx, timers, key, fields),
            Outcome::Failed { status, why, retry } => {
                let c = &mut self.conns[key];
                let kind = failure_kind(c.state, status, &why);
                // Another member may take it under issue 26's rules: none
                // of it written, or idempotent and no byte of the answer;
                // a connection that failed or timed out connecting, or
                // broke before the answer (not a slow answer: that
                // upstream may still be working on it).
                let idempotent = c.job.as_ref().is_some_and(|j| j.idempotent);
                let elsewhere = !c.got
                    && !c.streamed
                    && (c.written == 0 || idempotent)
                    && (status == 502 || (status == 504 && c.state == State::Connecting));
                let up_id = c.up;
                let mut figures = std::mem::take(&mut c.figures);
                figures.status = Some(status);
                let mut job = c.job.take();
                if let Some(job) = job.as_mut() {
                    // A retry sends the same bytes (kept until the answer
                    // began) and the body not yet taken.
                    job.bytes = std::mem::take(&mut c.out);
                    job.set_body(c.body.take());
                }
                let url = self.pools.get(&c.up).map_or("", |p| p.up.url()).to_owned();
                self.close(ctx, timers, key);
                if let Some(mut job) = job {
                    if retry && !job.retried {
                        job.retried = true;
                        // The failed attempt is logged before the next.
                        job.tried = Some(Box::new(figures));
                        log::debug!("proxy: {url}: {why}; sending again on a new connection");
                        self.connect(ctx, timers, job);
                        return;
                    }
                    if let Some(kind) = kind {
                        if let Some(m) = self.pools.get(&up_id).and_then(|p| p.metrics.as_ref()) {
                            m.fail(kind);
                        }
                        self.judge(ctx.now, up_id, None);
                    }
                    let (job, figures) = if elsewhere {
                        // The failed attempt is logged before the next.
                        job.tried = Some(Box::new(figures));
                        match self.resend(ctx, timers, job) {
                            Some(mut job) => {
                                let figures = job.tried.take().map_or_else(UpstreamLog::default, |f| *f);
                                (job, figures)
                            }
                            None => {
                                log::warn!("proxy: {url}: {why}: sent to another upstream");
                                return;
                            }
                        }
                    } else {
                        (job, figures)
                    };
                    log::warn!("proxy: {url}: {why}: {status}");
                    let answer = match status {
                        502..=504 => job.up.error_answer(status, failure_reason(kind, status)),
                        _ => Response::error(status),
                    };
                    self.answers.push((job.responder, answer, Some(figures)));
                }
            }
        }
    }

    /// Connection `key` switched to WebSocket: it leaves the pool for good
    /// (never reused, never counted in `max_conns` again) and goes to its
    /// client's connection with the bytes that followed the 101.
    #[cold]
    #[inline(never)]
    fn hand_off(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, key: usize, fields: Vec<u8>) {
        let mut c = self.conns.remove(key);
        timers.disarm(Source::Upstream(key).token(), &mut c.armed);
        let _ = ctx.registry.deregister(c.sock.source());
        let Some(pool) = self.pools.list.get_mut(c.pool) else {
            return;
        };
        pool.open -= 1;
        pool.publish();
        let idle_timeout = pool.up.read_timeout;
        if let Some(job) = c.job.take() {
            // The 101's log line is written as the tunnel opens, so its
            // response time is its header time (nginx writes its line at
            // the tunnel's end, timed to it).
            let logged = ctx.log.is_some() || ctx.site_logs.iter().any(Option::is_some);
            let figures = logged.then(|| {
                let took = ctx.now.saturating_duration_since(c.started);
                UpstreamLog {
                    status: Some(101),
                    header: Some(took),
                    response: Some(took),
                    started: Some(c.started),
                    ..std::mem::take(&mut c.figures)
                }
            });
            self.handoffs.push(super::Handoff {
                responder: job.responder,
                sock: c.sock,
                fields,
                early: std::mem::take(&mut c.buf),
                idle_timeout,
                figures,
            });
        }
        // A queued job gets a connection even while draining (a request
        // taken already); another upstream's waiting one only otherwise.
        if let Some(job) = pool.queue.pop_front() {
            self.connect(ctx, timers, job);
        } else if !ctx.draining {
            self.start_waiting(ctx, timers);
        }
    }

    /// Connections open to every HTTP/1.1 upstream, against
    /// `Limits::upstream_conns_max` (a handful of pools: summed when a
    /// connection would be opened, not per request on a warm pool).
    fn n_open(&self) -> usize {
        self.pools.values().map(|p| p.open).sum()
    }

    /// A pool whose queue waits for the worker's cap, not its own.
    fn waiting_for_room(&self) -> Option<usize> {
        self.pools
            .values()
            .find(|p| !p.queue.is_empty() && p.open < p.up.max_conns)
            .map(|p| p.up.id)
    }

    /// At the worker's cap with a request waiting for room: closes the
    /// longest idle connection of any upstream, if one is idle.
    fn close_an_idle(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers) {
        if self.n_open() < ctx.limits.upstream_conns_max {
            return;
        }
        let oldest = self.pools.values().find_map(|p| p.idle.first().copied());
        if let Some(key) = oldest {
            self.close(ctx, timers, key);
        }
    }

    /// A connection closed: a request queued for want of room under the
    /// worker's cap (another upstream's) gets a new one.
    fn start_waiting(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers) {
        if self.n_open() >= ctx.limits.upstream_conns_max {
            return;
        }
        let job = self
            .waiting_for_room()
            .and_then(|id| self.pools.get_mut(&id))
            .and_then(|p| p.queue.pop_front());
        if let Some(job) = job {
            self.connect(ctx, timers, job);
        }
    }

    /// Closes connection `key`; a job waiting for a connection gets a new one.
    fn close(&mut self, ctx: &mut Ctx<'_>, timers: &mut Timers, key: usize) {
        let mut c = self.conns.remove(key);
        timers.disarm(Source::Upstream(key).token(), &mut c.armed);
        let _ = ctx.registry.deregister(c.sock.source());
        if let Some(tx) = c.tx.take() {
            if !c.decoder.as_ref().is_some_and(ResponseBodyDecoder::is_done) {
                tx.abort();
            }
        }
        if let Some(job) = c.job.take() {
            let mut figures = c.figures.clone();
            figures.status = Some(502);
            self.answers.push((
                job.responder,
                job.up.error_answer(502, crate::Reason::UpstreamClosed),
                Some(figures),
            ));
        }
        let Some(pool) = self.pools.list.get_mut(c.pool) else {
            return;
        };
        if let (Some(m), Some(kind)) = (&pool.metrics, c.broke) {
            m.fail(kind);
        }
        pool.open -= 1;
        pool.idle.retain(|&k| k != key);
        pool.publish();
        // A queued job gets a connection even while draining (a request
        // taken already); another upstream's waiting one only otherwise.
        if let Some(job) = pool.queue.pop_front() {
            self.connect(ctx, timers, job);
        } else if !ctx.draining {
            self.start_waiting(ctx, timers);
        }
    }
}

impl Pool {
    fn new(up: Arc<Upstream>, ctx: &Ctx<'_>) -> Pool {
        Pool {
            metrics: ctx.metrics.map(|m| m.upstream(up.url())),
            up,
            idle: Vec::new(),
            open: 0,
            queue: VecDeque::new(),
        }
    }

    /// Exchanges under way or waiting (least connections' measure).
    fn load(&self) -> usize {
        self.open - self.idle.len() + self.queue.len()
    }

    /// Sets the pool's gauges (open and idle connections).
    fn publish(&self) {
        if let Some(m) = &self.metrics {
            m.open.set(self.open as u64);
            m.idle.set(self.idle.len() as u64);
        }
    }
}

/// Which kind of failure (for the metrics) answered `status` after `why`,
/// in `state`; `None` for one that is the client's (its body cut short).
/// The access log's reason for a failed exchange's answer.
fn failure_reason(kind: Option<UpstreamFailure>, status: u16) -> crate::Reason {
    use crate::Reason;
    match kind {
        Some(UpstreamFailure::Connect) => Reason::UpstreamConnect,
        Some(UpstreamFailure::Timeout) => Reason::UpstreamTimeout,
        Some(UpstreamFailure::BadAnswer) => Reason::UpstreamInvalid,
        Some(UpstreamFailure::Closed) => Reason::UpstreamClosed,
        Some(UpstreamFailure::QueueFull) => Reason::UpstreamBusy,
        None if status == 504 => Reason::UpstreamTimeout,
        None => Reason::UpstreamClosed,
    }
}

fn failure_kind(state: State, status: u16, why: &str) -> Option<UpstreamFailure> {
    Some(match status {
        504 => UpstreamFailure::Timeout,
        502 if state == State::Connecting => UpstreamFailure::Connect,
        // `bad()` made it.
        502 if why.starts_with("bad answer") => UpstreamFailure::BadAnswer,
        502 => UpstreamFailure::Closed,
        _ => return None,
    })
}

impl UpConn {
    #[inline(always)]
    fn take(&mut self, job: Job, now: Instant) {
        debug_assert!(self.job.is_none());
        self.job = Some(job);
        self.start(now);
    }

    /// The exchange of the job just put in its slot begins: its parts
    /// taken where it lies (taken out of a `Job` on the way in, each was
    /// one more copy of it, 29 instructions, callgrind `proxy-c50`).
    #[inline(always)]
    fn start(&mut self, now: Instant) {
        let Some(job) = self.job.as_mut() else {
            return;
        };
        self.started = now;
        // The figures of this exchange, but for the address (the caller's
        // to set: a kept-alive connection's stays), each part set here
        // rather than a whole new `UpstreamLog` written and the address
        // moved out and back (about 25 instructions of a proxied GET,
        // callgrind `proxy-c50`).
        let UpstreamLog {
            addr: _,
            status,
            connect,
            header,
            response,
            started,
            earlier,
        } = &mut self.figures;
        *status = None;
        *connect = None;
        *header = None;
        *response = None;
        *started = None;
        *earlier = job.tried.take();
        self.broke = None;
        self.n_interims = 0;
        self.continue_at = None;
        self.trailers = None;
        self.out = std::mem::take(&mut job.bytes);
        self.body = job.take_body();
        self.chunked = job.chunked;
        self.streamed = false;
        self.written = 0;
        self.buf.clear();
        self.got = false;
        self.more = false;
        self.missing = 0;
        self.answered = false;
        self.plain_tried = false;
        self.head_method = job.head_method;
        self.keep_alive = false;
        self.tx = None;
        self.decoder = None;
        self.pending = None;
        self.encoder = None;
        self.fill = None;
    }

    /// A failure before any byte of the answer, on a connection that may
    /// have been closed by the upstream while idle: sent again if that
    /// cannot repeat an effect.
    fn failed(&self, status: u16, why: String) -> Outcome {
        let idempotent = self.job.as_ref().is_some_and(|j| j.idempotent);
        let retry = self.reused && !self.got && !self.streamed && (self.written == 0 || idempotent);
        Outcome::Failed { status, why, retry }
    }

    fn advance(
        &mut self,
        ctx: &mut Ctx<'_>,
        key: usize,
        read_timeout: std::time::Duration,
        scratch: &mut Vec<u8>,
        answers: &mut Vec<Answer>,
        relayed: &mut Vec<Relayed>,
    ) -> Outcome {
        'step: loop {
            match self.state {
                State::Connecting => match self.sock.connected() {
                    Ok(true) => {
                        self.figures.connect = Some(ctx.now.saturating_duration_since(self.started));
                        self.state = State::Writing;
                    }
                    Ok(false) => return Outcome::Wait,
                    Err(e) => return self.failed(502, format!("connect: {e}")),
                },
                State::Writing => {
                    while self.written < self.out.len() {
                        match self.sock.write(&self.out[self.written..]) {
                            Ok(0) => return self.failed(502, "upstream closed while written to".into()),
                            Ok(n) => self.written += n,
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                self.deadline = Some(ctx.now + read_timeout);
                                // An upstream that stopped reading may have
                                // answered already (a 413 before the body).
                                match self.read_early(ctx, scratch, answers, relayed) {
                                    Some(outcome) => return outcome,
                                    None => continue 'step,
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => return self.failed(502, format!("write: {e}")),
                        }
                    }
                    // The head (and a body read whole) is out; a streamed
                    // body follows as it arrives.
                    if let Some(reader) = self.body.as_mut() {
                        match reader.try_take(ctx.mailbox, Source::Upstream(key).token()) {
                            Take::Chunk(chunk) => {
                                self.streamed = true;
                                self.out.clear();
                                if self.chunked {
                                    crate::codec::write::write_chunk_start(&mut self.out, chunk.len());
                                    self.out.extend_from_slice(&chunk);
                                    self.out.extend_from_slice(b"\r\n");
                                } else {
                                    self.out = chunk;
                                }
                                self.written = 0;
                                continue;
                            }
                            Take::Pending => {
                                // The client's body timeout bounds the wait.
                                // Meanwhile the upstream may speak: a 100
                                // the client waits for, or its answer; if
                                // it has said nothing by `continue_wait`,
                                // the client gets the proxy's own 100
                                // (`Upstreams::on_timer`).
                                self.deadline = None;
                                if !self.streamed
                                    && self.n_interims == 0
                                    && self.job.as_ref().is_some_and(|j| j.expect_continue)
                                {
                                    let at = *self.continue_at.get_or_insert(ctx.now + self.continue_wait);
                                    self.deadline = Some(at);
                                }
                                match self.read_early(ctx, scratch, answers, relayed) {
                                    Some(outcome) => return outcome,
                                    None => continue,
                                }
                            }
                            Take::End => {
                                // The client's trailer section, if it sent
                                // one and it may go on (`More::forward_trailers`).
                                let trailers = match (&self.job, &self.body) {
                                    (Some(job), Some(reader)) => job
                                        .more()
                                        .and_then(|m| m.forward_trailers.as_ref())
                                        .and_then(|named| reader.trailers()?.forwarded(named)),
                                    _ => None,
                                };
                                self.body = None;
                                if self.chunked {
                                    // RFC 9112 §7.1: last-chunk, trailer-section, CRLF.
                                    self.out.clear();
                                    self.out.extend_from_slice(b"0\r\n");
                                    if let Some(t) = &trailers {
                                        self.out.extend_from_slice(t.as_bytes());
                                    }
                                    self.out.extend_from_slice(b"\r\n");
                                    self.written = 0;
                                    continue;
                                }
                            }
                            Take::Failed => {
                                self.body = None;
                                // The upstream must not take what it has
                                // for a whole request: a reset, not a FIN
                                // (a lenient server reads a FIN inside a
                                // chunked body as its end).
                                self.sock.abort();
                                return Outcome::Failed {
                                    status: 400,
                                    why: "the request body was cut short".into(),
                                    retry: false,
                                };
                            }
                        }
                    }
                    self.state = State::Head;
                    self.deadline = Some(ctx.now + read_timeout);
                    // The request is out, so the answer cannot be here yet
                    // (certainly not on one CPU, where the upstream runs only
                    // after this turn): a read now is an EAGAIN per request
                    // (0.6 of a recv per proxied GET, bench/proxy-syscalls.sh).
                    // The socket is registered edge-triggered for good, so
                    // the answer's arrival (or a reset) is an event. Bytes
                    // read early are consumed first; TLS may hold decrypted
                    // bytes that no event announces, so it reads.
                    if self.buf.is_empty() && !matches!(self.sock, Sock::Tls(_)) {
                        return Outcome::Wait;
                    }
                }
                State::Head | State::Body | State::Idle => {
                    if let Some(outcome) = self.flush_pending(ctx, key) {
                        return outcome;
                    }
                    // Nothing read yet for the head (the request was just
                    // written, and this is its answer's event): nothing
                    // to consume before the read (`consume` and `head`
                    // called for nothing were about 55 instructions of a
                    // proxied GET, callgrind `proxy-c50`).
                    let unread = self.state == State::Head && self.buf.is_empty();
                    if !unread {
                        if let Some(outcome) = self.consume(ctx, key, answers, relayed) {
                            return outcome;
                        }
                    }
                    if self.pending.is_some() {
                        // Back-pressure: the client's channel is full; the
                        // wake comes when it has room. No deadline: the
                        // client's own connection has its send timeout.
                        self.deadline = None;
                        return Outcome::Wait;
                    }
                    if self.state == State::Body && ctx.pool.output_held() > ctx.limits.output_budget_bytes {
                        // The worker's queued answers and read-ahead are
                        // past their budget: an answer whose channel still
                        // holds bytes reads no more until its client has
                        // taken half (one with an empty channel may read
                        // once more, or nothing would wake it).
                        let waits = self
                            .tx
                            .as_ref()
                            .is_some_and(|tx| tx.wait_while_holding(ctx.mailbox, Source::Upstream(key).token()));
                        if waits {
                            self.deadline = None;
                            return Outcome::Wait;
                        }
                    }
                    let room = match std::mem::take(&mut self.missing) {
                        0 => scratch.len(),
                        missing => missing.min(scratch.len()),
                    };
                    match self.sock.read(&mut scratch[..room]) {
                        Ok(0) => return self.at_eof(ctx, key),
                        Ok(n) => {
                            self.more = n == room;
                            if n == READ_CHUNK
                                && self.state == State::Body
                                && self.buf.is_empty()
                                && self.encoder.is_none()
                            {
                                // A full read of a long answer's body:
                                // the read buffer becomes the bytes
                                // read, which `consume` moves into the
                                // channel whole if they are all body
                                // (not chunked), rather than copy them
                                // twice (here, then into a chunk).
                                std::mem::swap(&mut self.buf, scratch);
                                *scratch = ctx.pool.take_chunk();
                            } else {
                                if self.more && self.state == State::Head && self.buf.is_empty() {
                                    // Likely a large answer: gathered in a
                                    // buffer that can hold it whole.
                                    self.buf = Vec::with_capacity(ANSWER_BUF_BYTES);
                                }
                                self.buf.extend_from_slice(&scratch[..n]);
                            }
                            if self.state == State::Idle {
                                // An idle connection has nothing to say.
                                return Outcome::Close;
                            }
                            self.got = true;
                            self.deadline = Some(ctx.now + read_timeout);
                        }
                        Err(e) => match e.kind() {
                            io::ErrorKind::WouldBlock if self.more && self.state == State::Head => {
                                // The head waited for the rest of a whole
                                // body that is not here yet: it goes now,
                                // its body as a channel.
                                self.more = false;
                                if let Some(outcome) = self.consume(ctx, key, answers, relayed) {
                                    return outcome;
                                }
                                return Outcome::Wait;
                            }
                            io::ErrorKind::WouldBlock => return Outcome::Wait,
                            io::ErrorKind::Interrupted => {}
                            _ if self.state == State::Idle => return Outcome::Close,
                            _ if self.state == State::Head => return self.failed(502, format!("read: {e}")),
                            _ => {
                                if let Some(tx) = self.tx.take() {
                                    tx.abort();
                                }
                                self.broke = Some(UpstreamFailure::Closed);
                                return Outcome::Close;
                            }
                        },
                    }
                }
            }
        }
    }

    /// A request with no streamed body written to a plain socket, all of
    /// it at once, as `advance` writes it: then the answer is waited for
    /// (`Some(Wait)`, or `None` when bytes read early wait in the buffer:
    /// `advance` goes on with them). `None` too when this is not such a
    /// request or the write did not take it all (`advance` writes the
    /// rest and meets what stopped it); a write that failed ends the step
    /// as `advance` ends it. Without `advance`'s loop and its preparations,
    /// `Upstreams::place` went 393 → 361 instructions a proxied GET
    /// (callgrind `proxy-c50`).
    #[inline(always)]
    fn write_request(&mut self, ctx: &Ctx<'_>, read_timeout: std::time::Duration) -> Option<Outcome> {
        if self.body.is_some() || self.written != 0 || self.out.is_empty() || matches!(self.sock, Sock::Tls(_)) {
            return None;
        }
        match self.sock.write(&self.out) {
            Ok(0) => Some(self.failed(502, "upstream closed while written to".into())),
            Ok(n) => {
                self.written = n;
                if n < self.out.len() {
                    return None;
                }
                self.state = State::Head;
                self.deadline = Some(ctx.now + read_timeout);
                // See `advance`: the answer's arrival is an event.
                match self.buf.is_empty() {
                    true => Some(Outcome::Wait),
                    false => None,
                }
            }
            Err(e) => match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => None,
                _ => Some(self.failed(502, format!("write: {e}"))),
            },
        }
    }

    /// The first read of an answer (the request written, nothing of the
    /// answer read: the event of its arrival), relayed straight from the
    /// read when the one pass takes it (`relay_plain`), as `advance`
    /// would after copying the read into the buffer, `consume` and
    /// `head`. The copy, those calls and `advance`'s own preparations
    /// were about 135 instructions of a proxied GET (5,599 → 5,463,
    /// callgrind `proxy-c50`, bench/runs/2026-11-28-pxup). Any other
    /// answer's bytes go into the buffer as `advance` puts them there,
    /// and `None` lets `advance` go on with them (`head` not trying the
    /// one pass again: `plain_tried`); `None` too when this is not such
    /// a read, nothing done. A read that finds nothing, the end or an
    /// error ends the step as `advance` ends it.
    #[inline(always)]
    fn read_answer(
        &mut self,
        ctx: &Ctx<'_>,
        key: usize,
        read_timeout: std::time::Duration,
        scratch: &mut [u8],
        relayed: &mut Vec<Relayed>,
    ) -> Option<Outcome> {
        if self.state != State::Head || !self.buf.is_empty() || self.pending.is_some() || self.missing != 0 {
            return None;
        }
        let room = scratch.len();
        let n = match self.sock.read(scratch) {
            Ok(0) => return Some(self.at_eof(ctx, key)),
            Ok(n) => n,
            Err(e) => {
                return match e.kind() {
                    io::ErrorKind::WouldBlock => {
                        self.more = false;
                        Some(Outcome::Wait)
                    }
                    io::ErrorKind::Interrupted => None,
                    _ => Some(self.failed(502, format!("read: {e}"))),
                };
            }
        };
        self.got = true;
        self.more = n == room;
        if !self.more && self.takes_plain() {
            if let Some(outcome) = self.relay_plain(ctx, &scratch[..n], relayed) {
                return Some(outcome);
            }
            self.plain_tried = true;
        }
        if self.more {
            // Likely a large answer: gathered in a buffer that can hold
            // it whole (as `advance` does).
            self.buf = Vec::with_capacity(ANSWER_BUF_BYTES);
        }
        self.buf.extend_from_slice(&scratch[..n]);
        self.deadline = Some(ctx.now + read_timeout);
        None
    }

    /// Whether the one pass (`relay_plain`) may take this exchange's
    /// answer: not a HEAD's, and a job with nothing more to it.
    #[inline(always)]
    fn takes_plain(&self) -> bool {
        !self.head_method && self.job.as_ref().is_some_and(|j| j.more.is_none())
    }

    /// Reads what the upstream says before the request is all written
    /// (its body still coming from the client, or the upstream not
    /// reading it): interim answers are relayed (`Some(Wait)`); a final
    /// answer goes to the client at once and the rest of the request
    /// body is not sent (`None`: the loop goes on in `Body`), and the
    /// connection is not reused, since the upstream may still be reading
    /// a body that will never end.
    fn read_early(
        &mut self,
        ctx: &Ctx<'_>,
        scratch: &mut [u8],
        answers: &mut Vec<Answer>,
        relayed: &mut Vec<Relayed>,
    ) -> Option<Outcome> {
        let mut eof = false;
        loop {
            match self.sock.read(scratch) {
                Ok(0) if self.buf.is_empty() => {
                    return Some(self.failed(502, "upstream closed before answering".into()));
                }
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&scratch[..n]);
                    self.got = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Some(self.failed(502, format!("read: {e}"))),
            }
            if self.buf.len() > crate::codec::client::RESPONSE_HEAD_BYTES_MAX {
                // The parser says what is wrong with a head this long.
                break;
            }
        }
        if self.buf.is_empty() {
            return Some(Outcome::Wait);
        }
        match self.head(ctx, answers, relayed) {
            Ok(false) if eof => Some(Outcome::Failed {
                status: 502,
                why: "upstream closed in the middle of the answer's head".into(),
                retry: false,
            }),
            Ok(false) => Some(Outcome::Wait),
            Ok(true) => {
                self.body = None;
                self.keep_alive = false;
                None
            }
            Err(Outcome::Reusable) => Some(Outcome::Close),
            Err(outcome) => Some(outcome),
        }
    }

    /// The upstream closed its side.
    fn at_eof(&mut self, ctx: &Ctx<'_>, key: usize) -> Outcome {
        match self.state {
            State::Head if !self.got => self.failed(502, "upstream closed before answering".into()),
            State::Head => Outcome::Failed {
                status: 502,
                why: "upstream closed in the middle of the answer's head".into(),
                retry: false,
            },
            State::Body => {
                // Whatever is buffered was consumed already (or is stuck
                // behind a full channel: then `pending` holds it and this
                // is not reached).
                let complete = self.decoder.as_ref().is_some_and(|d| d.finish().is_ok());
                if let (true, Some(mut enc), Some(tx)) = (complete, self.encoder.take(), self.tx.as_ref()) {
                    // A body that ends at the close: the compressed
                    // stream's end goes first (held, like any chunk, while
                    // the channel is full: the next read sees the close
                    // again, with the compressor gone).
                    let mut tail = Vec::new();
                    if enc.finish(&mut tail).is_err() {
                        if let Some(tx) = self.tx.take() {
                            tx.abort();
                        }
                        return Outcome::Close;
                    }
                    match tx.try_send_or_wake(tail, ctx.mailbox, Source::Upstream(key).token()) {
                        Ok(()) => {}
                        Err(TrySendError::Full(tail)) => {
                            self.pending = Some(tail);
                            self.deadline = None;
                            return Outcome::Wait;
                        }
                        Err(TrySendError::Closed(_)) => self.tx = None,
                    }
                }
                if let Some(tx) = self.tx.take() {
                    if complete {
                        drop(tx);
                    } else {
                        log::warn!("proxy: upstream closed before the end of the body");
                        tx.abort();
                        self.broke = Some(UpstreamFailure::Closed);
                    }
                }
                Outcome::Close
            }
            _ => Outcome::Close,
        }
    }

    /// Sends the chunk the channel refused before, if it has room now.
    fn flush_pending(&mut self, ctx: &Ctx<'_>, key: usize) -> Option<Outcome> {
        let chunk = self.pending.take()?;
        let tx = self.tx.as_ref()?;
        match tx.try_send_or_wake(chunk, ctx.mailbox, Source::Upstream(key).token()) {
            Ok(()) => None,
            Err(TrySendError::Full(chunk)) => {
                self.pending = Some(chunk);
                self.deadline = None;
                Some(Outcome::Wait)
            }
            Err(TrySendError::Closed(_)) => {
                // The client is gone: nothing reads the rest.
                self.tx = None;
                Some(Outcome::Close)
            }
        }
    }

    /// Makes what was read into the answer: its head, then its body's
    /// chunks. `Some` when the exchange is decided.
    fn consume(
        &mut self,
        ctx: &Ctx<'_>,
        key: usize,
        answers: &mut Vec<Answer>,
        relayed: &mut Vec<Relayed>,
    ) -> Option<Outcome> {
        if self.state == State::Head {
            match self.head(ctx, answers, relayed) {
                Ok(true) => {}
                Ok(false) => return None,
                Err(outcome) => return Some(outcome),
            }
        }
        if self.state != State::Body {
            return None;
        }
        if self.encoder.is_some() {
            return self.consume_encoded(ctx, key);
        }
        let decoder = self.decoder.as_mut()?;
        let mut at = 0;
        let mut result = None;
        // The buffer itself went into the channel (then it is empty).
        let mut moved = false;
        while at < self.buf.len() && !decoder.is_done() {
            let step = match decoder.step(&self.buf[at..]) {
                Ok(step) => step,
                Err(e) => {
                    log::warn!("proxy: {}", e.reason());
                    if let Some(tx) = self.tx.take() {
                        tx.abort();
                    }
                    self.broke = Some(UpstreamFailure::BadAnswer);
                    return Some(Outcome::Close);
                }
            };
            if step.consumed == 0 && step.data.is_empty() {
                break;
            }
            if !step.data.is_empty() {
                // A full read that is all body (`advance`: a length- or
                // close-delimited answer's, or the inside of a long
                // chunk) goes as it is, its buffer moved, not copied;
                // other data (after a head, between chunk heads, short
                // reads) is copied out into a chunk of its own length,
                // which is what the channel counts.
                let whole = at == 0
                    && step.data == (0..self.buf.len())
                    && step.consumed == self.buf.len()
                    && self.buf.len() == READ_CHUNK
                    && self.buf.capacity() == READ_CHUNK;
                let chunk = if whole {
                    moved = true;
                    std::mem::take(&mut self.buf)
                } else {
                    self.buf[at + step.data.start..at + step.data.end].to_vec()
                };
                super::cache::tee(&mut self.fill, &chunk);
                if let Some(tx) = &self.tx {
                    match tx.try_send_or_wake(chunk, ctx.mailbox, Source::Upstream(key).token()) {
                        Ok(()) => {}
                        Err(TrySendError::Full(chunk)) => {
                            self.pending = Some(chunk);
                            at += step.consumed;
                            result = Some(Outcome::Wait);
                            self.deadline = None;
                            break;
                        }
                        Err(TrySendError::Closed(_)) => {
                            self.tx = None;
                            return Some(Outcome::Close);
                        }
                    }
                }
            }
            at += step.consumed;
        }
        if !moved {
            self.buf.drain(..at);
        }
        if decoder.is_done() && self.pending.is_none() {
            self.end_body();
            return Some(if self.keep_alive && self.buf.is_empty() {
                Outcome::Reusable
            } else {
                Outcome::Close
            });
        }
        result
    }

    /// `consume` for an answer compressed on its way (`encode.rs`): what
    /// this read brought goes through the compressor and is flushed as
    /// one chunk (so that a stream of events still arrives event by
    /// event); the body's end ends the compressed stream.
    fn consume_encoded(&mut self, ctx: &Ctx<'_>, key: usize) -> Option<Outcome> {
        let (Some(decoder), Some(enc)) = (self.decoder.as_mut(), self.encoder.as_mut()) else {
            return None;
        };
        let mut out = Vec::new();
        let mut at = 0;
        let mut wrote = false;
        let mut failed = false;
        while at < self.buf.len() && !decoder.is_done() {
            let step = match decoder.step(&self.buf[at..]) {
                Ok(step) => step,
                Err(e) => {
                    log::warn!("proxy: {}", e.reason());
                    if let Some(tx) = self.tx.take() {
                        tx.abort();
                    }
                    self.broke = Some(UpstreamFailure::BadAnswer);
                    return Some(Outcome::Close);
                }
            };
            if step.consumed == 0 && step.data.is_empty() {
                break;
            }
            if !step.data.is_empty() {
                let data = &self.buf[at + step.data.start..at + step.data.end];
                failed |= enc.write(data, &mut out).is_err();
                wrote = true;
            }
            at += step.consumed;
        }
        self.buf.drain(..at);
        let done = decoder.is_done();
        if !failed {
            failed = match (done, wrote) {
                (true, _) => enc.finish(&mut out).is_err(),
                (false, true) => enc.flush(&mut out).is_err(),
                (false, false) => false,
            };
        }
        if failed {
            log::warn!("proxy: compressing the answer failed: it is cut short");
            if let Some(tx) = self.tx.take() {
                tx.abort();
            }
            return Some(Outcome::Close);
        }
        if done {
            // Its end is in `out`: the compressor's place is free.
            self.encoder = None;
        }
        super::cache::tee(&mut self.fill, &out);
        if let (false, Some(tx)) = (out.is_empty(), &self.tx) {
            // The channel counts lengths: what was reserved for the worst
            // case (the input's length) would be held beside them, 4 times
            // the channel's bound for text (measured, `proxy_memory.rs`).
            out.shrink_to_fit();
            match tx.try_send_or_wake(out, ctx.mailbox, Source::Upstream(key).token()) {
                Ok(()) => {}
                Err(TrySendError::Full(out)) => {
                    self.pending = Some(out);
                    self.deadline = None;
                    return Some(Outcome::Wait);
                }
                Err(TrySendError::Closed(_)) => {
                    self.tx = None;
                    return Some(Outcome::Close);
                }
            }
        }
        if done {
            self.end_body();
            return Some(if self.keep_alive && self.buf.is_empty() {
                Outcome::Reusable
            } else {
                Outcome::Close
            });
        }
        None
    }

    /// Parses the answer's head when whole; sends it to the client.
    /// `Ok(true)`: the body follows (state `Body`); `Ok(false)`: more
    /// bytes are needed; `Err`: the exchange is decided.
    fn head(&mut self, ctx: &Ctx<'_>, answers: &mut Vec<Answer>, relayed: &mut Vec<Relayed>) -> Result<bool, Outcome> {
        loop {
            // Nothing read yet (the request was just written): what the
            // parser would say, without asking it.
            if self.buf.is_empty() {
                return Ok(false);
            }
            // The common answer, read and relayed in one pass; any other
            // (or one not all here yet) is parsed below. Not tried again
            // on the bytes `read_answer` tried it on.
            let tried = std::mem::take(&mut self.plain_tried);
            if !tried && self.takes_plain() {
                let buf = std::mem::take(&mut self.buf);
                let outcome = self.relay_plain(ctx, &buf, relayed);
                self.buf = buf;
                if let Some(outcome) = outcome {
                    self.buf.clear();
                    return Err(outcome);
                }
            }
            let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; RESPONSE_FIELDS_MAX];
            let method = if self.head_method { "HEAD" } else { "GET" };
            let parsed = parse_response_head(&self.buf, &mut fields, method);
            let head = match parsed {
                Ok(ParsedResponse::Partial) => return Ok(false),
                Ok(ParsedResponse::Complete(head)) => head,
                Err(e) => return Err(bad(e.reason())),
            };
            match head.framing {
                ResponseFraming::Informational if matches!(head.status, 100 | 103) => {
                    // RFC 9110 §15.2: "A proxy MUST forward 1xx responses
                    // unless the proxy itself requested the generation of
                    // the 1xx response." A 100 goes to a client whose
                    // Expect was forwarded (the engine answered the others
                    // itself); a 103's fields as a final answer's would.
                    let job = self.job.as_ref().expect("a connection reading a head has a job");
                    let relay = match head.status {
                        100 => job.expect_continue,
                        _ => true,
                    };
                    if relay && self.n_interims < INTERIMS_MAX {
                        self.n_interims += 1;
                        let (token, id) = job.responder.key();
                        let fields = if head.status == 103 {
                            relayed_lines(&head)
                        } else {
                            Vec::new()
                        };
                        self.interims.push((token, id, head.status, fields));
                    }
                    let n = head.head_len;
                    self.buf.drain(..n);
                    continue;
                }
                ResponseFraming::Informational => return Err(bad("1xx other than 100 or 103")),
                ResponseFraming::Upgrade => {
                    let Some(ask) = self.job.as_ref().and_then(|j| j.more()?.tunnel) else {
                        return Err(bad("unasked upgrade"));
                    };
                    let fields = super::tunnel::switched(&head, &ask).map_err(bad)?;
                    let n = head.head_len;
                    self.buf.drain(..n);
                    return Err(Outcome::Switched { fields });
                }
                ResponseFraming::Tunnel => return Err(bad("unasked tunnel")),
                _ => {}
            }
            if (200..300).contains(&head.status)
                && self
                    .job
                    .as_ref()
                    .is_some_and(|j| j.more().is_some_and(|m| m.tunnel.is_some_and(|a| a.connect)))
            {
                // A 2xx to an extended CONNECT opens a tunnel (RFC 8441
                // §4, RFC 9220 §3): a page in its place would be read as
                // frames.
                return Err(bad("a 2xx without switching to WebSocket"));
            }
            if head.status >= 600 {
                return Err(bad("status code above 599"));
            }
            if head.transfer_coded {
                return Err(bad("a transfer coding other than chunked"));
            }
            if let ResponseFraming::Length(n) = head.framing {
                if n as usize <= WHOLE_BODY_MAX
                    && self.buf.len() < head.head_len + n as usize
                    && (self.more || self.answers_from_entry())
                {
                    // The last read filled its room and the body is not
                    // all here: one more read, and the answer goes whole
                    // (one write to the client, no channel). Nothing was
                    // decided yet: the head is parsed again then. A cache
                    // miss whose conditional or range is answered from
                    // the entry it makes waits for the whole body however
                    // it comes (`Fill::finish`).
                    self.missing = head.head_len + n as usize - self.buf.len();
                    return Ok(false);
                }
            }
            // Compressed on its way, or at least `Vary` (`encode.rs`): a
            // HEAD's fields change as its GET's would; a GET's only if
            // the worker has room for one more compressor.
            let plan = self.job.as_ref().and_then(|j| j.more()?.encode.as_ref());
            let mut verdict = match plan {
                // Nothing to decide (`decide`'s code, inlined, was 7
                // instructions of a proxied GET, 2 after: callgrind
                // `proxy-c50`).
                None => Verdict::default(),
                Some(_) => encode::decide(plan, &head),
            };
            let mut encoder = None;
            if let (Some(coding), false) = (verdict.coding, self.head_method) {
                encoder = Encoder::new(coding);
                if encoder.is_none() {
                    verdict.coding = None;
                }
            }
            // The client's fields, written into the connection's kept
            // buffer when no answer holds it any more (`lines`).
            let mut lines = answer_buf(&mut self.lines);
            let lines_len = {
                let buf = Arc::get_mut(&mut lines).expect("answer_buf's buffer is not shared");
                answer_lines_into(buf, &head, verdict);
                buf.len()
            };
            let block_of = |lines: &Arc<Vec<u8>>| {
                let buf: Arc<dyn AsRef<[u8]> + Send + Sync> = lines.clone();
                HeaderBlock::from_checked_lines(
                    SharedBytes::slice(buf, 0..lines_len).expect("the lines are in their buffer"),
                )
            };
            // Stored as the client gets it (compressed or not: the
            // `Vary: Accept-Encoding` keeps the two apart), when it may be.
            let mut fill = self
                .job
                .as_mut()
                .and_then(|j| j.more.as_mut()?.cache.take())
                .and_then(|ask| {
                    let length = match head.framing {
                        ResponseFraming::Empty => Some(0),
                        ResponseFraming::Length(n) if encoder.is_none() => Some(n),
                        ResponseFraming::Length(_) | ResponseFraming::Chunked => None,
                        // Ends at the close: not stored.
                        _ => return None,
                    };
                    super::cache::Fill::start(ask, &head, &block_of(&lines), length).map(Box::new)
                });
            // An answer to HEAD keeps the length a GET would have had
            // (RFC 9110 §9.3.2; the parser checked that its values agree).
            let head_length = if self.head_method {
                head.headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(trim_ows(h.value)).ok()?.parse::<u64>().ok())
            } else {
                None
            };
            let (status, framing, keep_alive, head_len) = (head.status, head.framing, head.keep_alive, head.head_len);
            if framing == ResponseFraming::Empty
                && (self.head_method || status == 204 || status == 304)
                && self.buf.len() > head_len
            {
                // RFC 9112 §6.3: these end at their head, and nothing was
                // pipelined behind the request: what follows is a body
                // the answer cannot have. (Bytes that come later find the
                // connection idle, and close it.)
                return Err(bad("a body after a HEAD, 204 or 304 answer"));
            }
            if framing == ResponseFraming::Chunked && self.job.as_ref().is_some_and(|j| j.trailers) {
                // RFC 9110 §7.6.1: the fields its Connection names are
                // removed from the trailers too.
                let named = head
                    .headers
                    .iter()
                    .filter(|h| h.name.eq_ignore_ascii_case("connection"))
                    .flat_map(|h| list_elements(h.value))
                    .map(<[u8]>::to_vec)
                    .collect();
                self.trailers = Some(named);
            }
            let whole = match framing {
                ResponseFraming::Empty => Some(0),
                ResponseFraming::Length(n)
                    if n as usize <= WHOLE_BODY_MAX && self.buf.len() - head_len >= n as usize =>
                {
                    Some(n as usize)
                }
                _ => None,
            };
            // A large whole body that is all the buffer holds past the
            // head goes to the client as that buffer (`Body::Shared`,
            // written from it by the same `writev` as the head): no copy.
            let share = whole.is_some_and(|n| n >= SHARE_MIN && self.buf.len() == head_len + n)
                && head_length.is_none()
                && !self.head_method
                && encoder.is_none();
            // A short body that goes beside the fields (below) is copied
            // from behind the head, and the buffer emptied after: the
            // head is not drained first (its `drain`, a move of what
            // follows, was 40 instructions of a proxied GET, callgrind).
            let beside = whole.is_some()
                && head_length.is_none()
                && !share
                && !(self.head_method && status != 204 && status != 304)
                && encoder.is_none();
            // Where the body starts in `buf`: after the head, until it
            // is drained.
            let mut body_at = head_len;
            if !share && !beside {
                self.buf.drain(..head_len);
                body_at = 0;
            }
            self.keep_alive = keep_alive;
            // Before the job goes: its upstream's read-ahead.
            let capacity = self.buffer_bytes(ctx);
            let (responder, logged) = self.take_responder(ctx, status, whole.is_some());
            if let Some(n) = whole {
                // A short body goes beside its fields, in the same kept
                // buffer (`Response::prepared_beside`): no allocation.
                if beside {
                    if let Some(buf) = Arc::get_mut(&mut lines) {
                        buf.extend_from_slice(&self.buf[body_at..body_at + n]);
                        // Moved, not taken: this branch returns, and a
                        // `None` left behind was a call to drop it (9
                        // instructions of a proxied GET, callgrind
                        // `proxy-c50`). `stored`: a conditional or a range
                        // the cache answers from its entry (`Fill::finish`).
                        let mut stored = None;
                        if let Some(mut f) = fill {
                            if f.push(&buf[lines_len..]) {
                                stored = (*f).finish();
                            }
                        }
                        // Usually all there was: emptied, nothing moved.
                        if body_at + n == self.buf.len() {
                            self.buf.clear();
                        } else {
                            self.buf.drain(..body_at + n);
                        }
                        let response = match stored {
                            Some(stored) => stored,
                            None => Response::prepared_beside(status, block_of(&lines), lines_len..lines_len + n),
                        };
                        keep_lines(&mut self.lines, lines);
                        self.answer_to(answers, responder, response, logged);
                        let reusable = self.keep_alive && self.buf.is_empty();
                        return Err(if reusable { Outcome::Reusable } else { Outcome::Close });
                    }
                }
                if body_at > 0 && !share {
                    // Beside was meant, but the fields' buffer is shared
                    // (a cache fill holds it): the head goes now.
                    self.buf.drain(..body_at);
                }
                let block = block_of(&lines);
                keep_lines(&mut self.lines, lines);
                let body: crate::Body = match head_length {
                    // A compressed answer's length is not the upstream's.
                    Some(_) if verdict.coding.is_some() => body::channel(1).0,
                    // No bytes follow a HEAD's head: a body of that
                    // length that has ended (the engine sends no byte of
                    // it, and writes its Content-Length); without one, of
                    // unknown length, as the GET's would be relayed.
                    Some(length) => body::channel_sized(1, length).0,
                    None if self.head_method && status != 204 && status != 304 => body::channel(1).0,
                    None => match encoder.take() {
                        Some(mut enc) => {
                            let mut out = Vec::with_capacity(n / 2 + 64);
                            let whole = &self.buf[..n];
                            if enc.write(whole, &mut out).and_then(|()| enc.finish(&mut out)).is_err() {
                                return Err(Outcome::Failed {
                                    status: 502,
                                    why: "compressing the answer failed".into(),
                                    retry: false,
                                });
                            }
                            self.buf.drain(..n);
                            out.shrink_to_fit();
                            out.into()
                        }
                        None if share => {
                            let buf = Arc::new(std::mem::take(&mut self.buf));
                            let range = head_len..head_len + n;
                            crate::Body::Shared(SharedBytes::slice(buf, range).expect("the body is in the buffer"))
                        }
                        // Copied out at once (`drain`'s collect went a
                        // byte at a time: 150 instructions of a proxied
                        // GET's 13-byte body, callgrind).
                        None => {
                            let body = self.buf[..n].to_vec();
                            self.buf.drain(..n);
                            body.into()
                        }
                    },
                };
                let bytes = match &body {
                    crate::Body::Bytes(b) => Some(b.as_slice()),
                    crate::Body::Shared(s) => Some(s.as_slice()),
                    _ => None,
                };
                let mut stored = None;
                if let (Some(mut f), Some(b)) = (fill.take(), bytes) {
                    if f.push(b) {
                        stored = (*f).finish();
                    }
                }
                let response = match stored {
                    Some(stored) => stored,
                    None => Response::prepared(status, block, body),
                };
                self.answer_to(answers, responder, response, logged);
                let reusable = self.keep_alive && self.buf.is_empty();
                return Err(if reusable { Outcome::Reusable } else { Outcome::Close });
            }
            // A body of known length keeps it (sent with that
            // Content-Length, not chunked); others go chunked to HTTP/1.1
            // clients.
            // Its bytes waiting in the channel count in the worker's
            // output budget (`read_ahead`): 256 upstream connections'
            // channels of 1 MiB would otherwise hold 256 MiB beside it.
            let length = match framing {
                ResponseFraming::Length(n) if encoder.is_none() => Some(n),
                _ => None,
            };
            let (body, tx) = body::channel_held(capacity, length, ctx.pool.read_ahead.clone());
            let block = block_of(&lines);
            keep_lines(&mut self.lines, lines);
            self.encoder = encoder;
            self.fill = fill;
            self.answer_to(answers, responder, Response::prepared(status, block, body), logged);
            self.tx = Some(tx);
            self.decoder = ResponseBodyDecoder::new(framing, u64::MAX);
            self.state = State::Body;
            return Ok(true);
        }
    }

    /// Whether the job's answer, once stored, answers its client's
    /// conditional or range (`cache::Ask::answers_from_entry`).
    #[cold]
    fn answers_from_entry(&self) -> bool {
        self.job
            .as_ref()
            .and_then(|j| j.more()?.cache.as_deref())
            .is_some_and(super::cache::Ask::answers_from_entry)
    }

    /// An answer `codec::client::relay_plain` takes, with its whole body
    /// here and nothing after it, at most `SHARE_MIN` long: its fields, the
    /// blank line and its body written into the kept buffer (`lines`) and
    /// pushed as a `Relayed`, which an HTTP/1.1 client's connection copies
    /// whole and any other gets as the `Response` `head` makes after
    /// `parse_response_head` (`Relayed::into_answer`; the test
    /// `plain_relay_is_the_general_relay`), without the tokeniser's slots,
    /// `Fields::scan`, the relay's pass over the slots and `head`'s
    /// choices for other answers. Only for a job with nothing more to it
    /// (`Job::more`: no compression, cache, tunnel or forward-auth check),
    /// not a HEAD (`takes_plain`). `input`: the answer's bytes, all that
    /// was read of it (the read buffer, or the read itself:
    /// `read_answer`). `None`: not such an answer, nothing done.
    #[inline(always)]
    fn relay_plain(&mut self, ctx: &Ctx<'_>, input: &[u8], relayed: &mut Vec<Relayed>) -> Option<Outcome> {
        let mut lines = lines_buf(&mut self.lines);
        // Not shared (`lines_buf`): a `Weak` would make it so, and none
        // is made of it; were one, the general path takes the answer.
        let buf = Arc::get_mut(&mut lines)?;
        buf.clear();
        // The fields, then the blank line that ends the head with the
        // body after it (the head's own blank line, just before the body
        // in the read): the client's connection copies all of it at once.
        let Some(plain) = relay_plain_whole(input, buf, SHARE_MIN as u64) else {
            // Nothing written.
            keep_lines(&mut self.lines, lines);
            return None;
        };
        let lines_len = buf.len() - (input.len() - (plain.head_len - 2));
        self.keep_alive = plain.keep_alive;
        let (responder, logged) = self.take_responder(ctx, plain.status, true);
        let (token, id) = responder.into_parts();
        self.judge_answer(plain.status);
        let figures = self.take_figures(logged);
        relayed.push(Relayed {
            token,
            id,
            status: plain.status,
            bytes: lines.clone(),
            lines_len,
            figures,
        });
        keep_lines(&mut self.lines, lines);
        Some(if plain.keep_alive {
            Outcome::Reusable
        } else {
            Outcome::Close
        })
    }

    /// The job's responder, for its answer whose head was read (`status`;
    /// `whole`: its body too): the rest of the job is dropped, its
    /// request's bytes given back, and the exchange's figures set.
    /// Whether an access log may write the request's line.
    #[inline(always)]
    fn take_responder(&mut self, ctx: &Ctx<'_>, status: u16, whole: bool) -> (Responder, bool) {
        // Only its responder goes on: the rest is dropped here, where
        // it lies (taken out of the connection whole, it was a copy of
        // the `Job`, 29 instructions, callgrind `proxy-c50`). What is
        // left in its place answers nothing (no mailbox).
        let job = self.job.as_mut().expect("a connection reading a head has a job");
        let responder = std::mem::replace(&mut job.responder, Responder::new(None, 0, 0));
        self.job = None;
        super::give_bytes(std::mem::take(&mut self.out));
        self.answered = true;
        // The time to the head, for the access log and the metrics:
        // not measured when neither is kept (the subtraction was 55
        // instructions of a proxied GET, callgrind `proxy-c50`).
        let logged = ctx.log.is_some() || ctx.site_logs.iter().any(Option::is_some);
        let timed = self.metrics.is_some() || logged;
        let took = match timed {
            true => Some(ctx.now.saturating_duration_since(self.started)),
            false => None,
        };
        self.figures.status = Some(status);
        self.figures.header = took;
        self.figures.started = Some(self.started);
        if whole {
            self.figures.response = took;
        }
        (responder, logged)
    }

    /// The answer's body is all read and sent on: its channel ends, with
    /// the upstream's trailer fields if the client takes them (those that
    /// may be trailers, `Trailers::relayed`), and the decoder goes.
    fn end_body(&mut self) {
        let section = self.decoder.as_mut().and_then(ResponseBodyDecoder::take_trailers);
        self.decoder = None;
        if let Some(fill) = self.fill.take() {
            // An answer with trailer fields is not stored: a hit could
            // not give them. (Its head went to the client already: a
            // conditional or a range got the whole answer, as it came.)
            if section.as_ref().is_none_or(|s| s.is_empty()) {
                let _ = (*fill).finish();
            }
        }
        let Some(tx) = self.tx.take() else { return };
        match (section, self.trailers.take()) {
            (Some(section), Some(named)) => {
                let named: Vec<&[u8]> = named.iter().map(Vec::as_slice).collect();
                tx.end_with_trailers(Trailers::relayed(&section, &named));
            }
            _ => drop(tx),
        }
    }

    fn buffer_bytes(&self, _ctx: &Ctx<'_>) -> usize {
        self.job.as_ref().map_or(Upstream::BUFFER_BYTES, |j| j.up.buffer_bytes)
    }

    /// Relays the answer whose head was read: straight into the
    /// worker's list, with the exchange's figures (no later answer of
    /// this exchange reads them: its job went with the head; the
    /// connection keeps its address for the next, `assign`). Kept on
    /// the connection until `drive` took it, the answer was moved three
    /// times more, and the figures cloned (about 200 instructions of a
    /// proxied GET, callgrind `proxy-c50`).
    #[inline(always)]
    /// `logged`: an access log may write the request's line (the
    /// figures go with the answer only then: they are read by nothing
    /// else, and their hand-over was about 40 instructions of a proxied
    /// GET, callgrind `proxy-c50`; the next exchange's `take` sets them
    /// afresh either way).
    fn answer_to(&mut self, answers: &mut Vec<Answer>, responder: Responder, response: Response, logged: bool) {
        self.judge_answer(response.status());
        let figures = self.take_figures(logged);
        answers.push((responder, response, figures));
    }

    /// An answer of `status` was made: the time to its head counted,
    /// and its status, for passive health to judge (`judged`).
    #[inline(always)]
    fn judge_answer(&mut self, status: u16) {
        if let (Some(m), Some(took)) = (&self.metrics, self.figures.header) {
            m.header_time(took);
        }
        self.judged = Some(status);
    }

    /// The exchange's figures, for its answer when an access log may
    /// write its line (`logged`); else `None`.
    #[inline(always)]
    fn take_figures(&mut self, logged: bool) -> Option<UpstreamLog> {
        if !logged {
            return None;
        }
        // The connection keeps its address for the next exchange: a TCP
        // one copied as it is (`Option::clone_from` was 35 instructions
        // of a proxied GET, callgrind `proxy-c50`).
        let addr = match &self.figures.addr {
            Some(UpstreamAddr::Tcp(a)) => Some(UpstreamAddr::Tcp(*a)),
            other => other.clone(),
        };
        let figures = std::mem::take(&mut self.figures);
        self.figures.addr = addr;
        Some(figures)
    }
}

/// An empty buffer for an answer's fields, not shared: the kept one
/// when the last answer made of it is gone (written to its client),
/// else a new one.
fn answer_buf(kept: &mut Option<Arc<Vec<u8>>>) -> Arc<Vec<u8>> {
    match kept.take() {
        Some(mut lines) => match Arc::get_mut(&mut lines) {
            Some(buf) => {
                buf.clear();
                lines
            }
            None => Arc::new(Vec::with_capacity(512)),
        },
        None => Arc::new(Vec::with_capacity(512)),
    }
}

/// `answer_buf` for the one pass (`UpConn::relay_plain`), which asks
/// `Arc::get_mut` itself (and clears the buffer): the kept buffer when no
/// answer holds it any more, else a new one. A second `get_mut` (an
/// atomic compare-exchange) and `answer_buf`'s call were about 10
/// instructions of a proxied GET (callgrind `proxy-c50`).
#[inline(always)]
fn lines_buf(kept: &mut Option<Arc<Vec<u8>>>) -> Arc<Vec<u8>> {
    match kept.take() {
        Some(lines) if Arc::strong_count(&lines) == 1 => lines,
        _ => Arc::new(Vec::with_capacity(512)),
    }
}

/// Keeps `lines` (shared with the answer just made) for the next
/// answer, when it is short (`IDLE_BUF_BYTES_MAX`: an idle connection
/// holds at most that, as for its read buffer).
#[inline(always)]
fn keep_lines(kept: &mut Option<Arc<Vec<u8>>>, lines: Arc<Vec<u8>>) {
    if lines.capacity() <= IDLE_BUF_BYTES_MAX {
        *kept = Some(lines);
    }
}

/// The 503 of an upstream whose queue is full (HTTP/1.1 and HTTP/2
/// upstreams alike): logged, counted, and with no upstream asked, its log
/// figures all `-`.
pub(super) fn queue_full(up: &Upstream, waiting: usize, metrics: Option<&UpstreamMetrics>, job: Job) -> Answer {
    log::warn!("proxy: {}: {} requests wait already: 503", up.url(), waiting);
    if let Some(m) = metrics {
        m.fail(UpstreamFailure::QueueFull);
    }
    let answer = job.up.error_answer(503, crate::Reason::UpstreamBusy);
    (job.responder, answer, Some(UpstreamLog::default()))
}

fn bad(why: &str) -> Outcome {
    Outcome::Failed {
        status: 502,
        why: format!("bad answer: {why}"),
        retry: false,
    }
}

/// The answer's fields as the client gets them: without the hop-by-hop
/// ones and those a `Connection` field names, Date, Server and framing.
pub(crate) fn answer_fields(head: &ResponseHead<'_, '_>) -> HeaderBlock {
    answer_fields_as(head, Verdict::default())
}

/// `answer_fields`, changed as `verdict` says (`encode.rs`): a
/// compressed answer's `Content-Encoding`, weak `ETag`, no
/// `Accept-Ranges`; `Vary: Accept-Encoding` for a compressible one.
///
/// The lines are not checked again as `HeaderBlock::from_lines` checks
/// a handler's (that look was 800 instructions of a proxied GET,
/// callgrind `proxy-c50`): the codec's parser let through only token
/// names and values of field-value bytes, `relayed_lines_as` dropped
/// every field the engine writes itself, and what `encode` adds is its
/// own. A value's obs-text goes on as it came, UTF-8 or not (RFC 9110
/// §5.5: "a recipient SHOULD treat other allowed octets in field
/// content (i.e., obs-text) as opaque data"), as nginx, Caddy and
/// HAProxy relay a Latin-1 `filename="caf\xe9.pdf"`; it was a 502 when
/// the block had to be UTF-8.
fn answer_fields_as(head: &ResponseHead<'_, '_>, verdict: Verdict) -> HeaderBlock {
    let mut lines = Vec::with_capacity(512);
    answer_lines_into(&mut lines, head, verdict);
    HeaderBlock::from_checked_lines(SharedBytes::new(Arc::new(lines)))
}

/// `answer_fields_as`'s lines, written to `lines` (empty). Inlined into
/// `UpConn::head`, its one caller per answer.
#[inline(always)]
fn answer_lines_into(lines: &mut Vec<u8>, head: &ResponseHead<'_, '_>, verdict: Verdict) {
    relayed_lines_into(lines, head, verdict.coding.is_some());
    encode::push_fields(lines, head, verdict);
}

/// The fields of `head` that are passed on, as complete lines.
fn relayed_lines(head: &ResponseHead<'_, '_>) -> Vec<u8> {
    let mut lines = Vec::with_capacity(512);
    relayed_lines_into(&mut lines, head, false);
    lines
}

/// `relayed_lines`, for a compressed answer when `encoded`, written to
/// `lines`.
#[inline(always)]
fn relayed_lines_into(lines: &mut Vec<u8>, head: &ResponseHead<'_, '_>, encoded: bool) {
    // Most answers have no `Connection` field: one pass, and no list of
    // its options is made (their first look for one, and the empty
    // list, were a pass and 150 instructions of a proxied GET,
    // callgrind). When there is one, what was written goes, and the
    // fields are written again without those it names (out of line:
    // inlined, this pass saves a call, 16 instructions of a proxied GET).
    let start = lines.len();
    if !relay_fields(lines, head.headers, encoded, &[]) {
        return;
    }
    lines.truncate(start);
    relay_named(lines, head, encoded);
}

/// `relayed_lines_into` for an answer with a `Connection` field.
#[cold]
#[inline(never)]
fn relay_named(lines: &mut Vec<u8>, head: &ResponseHead<'_, '_>, encoded: bool) {
    let named: Vec<&[u8]> = head
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("connection"))
        .flat_map(|h| list_elements(h.value))
        .collect();
    relay_fields(lines, head.headers, encoded, &named);
}

/// Writes the `fields` that go on, less those `named` (a `Connection`'s
/// options): whether one of them was a `Connection` field.
#[inline(always)]
fn relay_fields(lines: &mut Vec<u8>, fields: &[httparse::Header<'_>], encoded: bool, named: &[&[u8]]) -> bool {
    let mut connection = false;
    for h in fields {
        let name = h.name.as_bytes();
        match dropped(name) {
            Dropped::No => {}
            Dropped::Yes => continue,
            Dropped::Connection => {
                connection = true;
                continue;
            }
        }
        if named.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            continue;
        }
        if encoded && encode::drops(name) {
            continue;
        }
        lines.extend_from_slice(name);
        lines.extend_from_slice(b": ");
        if encoded && name.eq_ignore_ascii_case(b"etag") {
            encode::push_etag(lines, trim_ows(h.value));
        } else {
            lines.extend_from_slice(trim_ows(h.value));
        }
        lines.extend_from_slice(b"\r\n");
    }
    connection
}

/// Whether `relay_plain` takes `input`, having checked that what it
/// says of it is what the general parser and relay say: the same status,
/// head length, framing and persistence, and the same relayed lines; a
/// refusal leaves the lines as they were. For the tests and the
/// `h1_client` fuzz target (`fuzzing::relay_plain_agrees`).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn plain_relay_agrees(input: &[u8]) -> bool {
    use crate::codec::client::relay_plain;
    let mut lines = b"kept".to_vec();
    let mut whole = b"kept".to_vec();
    // As `UpConn::relay_plain` asks, with a smaller bound too.
    for body_bytes_max in [SHARE_MIN as u64, 8] {
        whole.truncate(4);
        let taken = relay_plain_whole(input, &mut whole, body_bytes_max);
        let plain = relay_plain(input, &mut lines);
        let Some(plain) = plain else {
            assert_eq!(lines, b"kept", "a refusal leaves the lines as they were");
            assert_eq!(taken, None, "the whole answer's pass takes what the one pass refuses");
            assert_eq!(whole, b"kept", "a refusal leaves the lines as they were");
            return false;
        };
        // Taken whole: the one pass's, when all the rest is the body and
        // it is short; its lines followed by the blank line and the body.
        let is_whole = plain.length < body_bytes_max && input.len() as u64 == plain.head_len as u64 + plain.length;
        match taken {
            Some(taken) => {
                assert!(is_whole);
                assert_eq!(taken, plain);
                let mut want = lines.clone();
                want.extend_from_slice(&input[plain.head_len - 2..]);
                assert_eq!(whole, want);
            }
            None => {
                assert!(!is_whole);
                assert_eq!(whole, b"kept", "a refusal leaves the lines as they were");
            }
        }
        lines.truncate(4);
    }
    let plain = relay_plain(input, &mut lines).expect("taken above");
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; RESPONSE_FIELDS_MAX];
    let parsed = parse_response_head(input, &mut fields, "GET");
    let Ok(ParsedResponse::Complete(general)) = parsed else {
        panic!("the general parser refuses what the plain relay took: {parsed:?}");
    };
    assert_eq!(plain.status, general.status);
    assert_eq!(plain.head_len, general.head_len);
    assert_eq!(plain.keep_alive, general.keep_alive);
    assert!(!general.transfer_coded);
    let framing = match plain.length {
        0 => ResponseFraming::Empty,
        n => ResponseFraming::Length(n),
    };
    assert_eq!(framing, general.framing);
    let mut relayed = b"kept".to_vec();
    answer_lines_into(&mut relayed, &general, Verdict::default());
    // Compared as bytes: the relay passes obs-text on as it is, which a
    // lossy view would make alike.
    assert!(
        lines == relayed,
        "{:?} against {:?} for {:?}",
        lines.escape_ascii().to_string(),
        relayed.escape_ascii().to_string(),
        input.escape_ascii().to_string()
    );
    true
}

#[cfg(test)]
mod pools_tests {
    use super::*;

    fn pool(up: &Arc<Upstream>) -> Pool {
        Pool {
            up: up.clone(),
            metrics: None,
            idle: Vec::new(),
            open: 0,
            queue: VecDeque::new(),
        }
    }

    #[test]
    fn each_id_finds_its_own_pool_whatever_was_looked_up_last() {
        let ups: Vec<Arc<Upstream>> = (0..3)
            .map(|i| Arc::new(Upstream::parse(&format!("http://127.0.0.1:{}", 9000 + i)).unwrap()))
            .collect();
        let mut pools = Pools::default();
        assert!(pools.get(&ups[0].id).is_none(), "no pool before one is made");
        for up in &ups {
            pools.place_or_make(up.id, || pool(up));
        }
        // The last id looked up changes, and repeats: each finds its own
        // pool, none is made twice.
        for &i in &[2, 2, 0, 1, 1, 2, 0, 0] {
            let up = &ups[i];
            let at = pools.place_or_make(up.id, || panic!("a pool made twice"));
            assert_eq!(pools.list[at].up.id, up.id);
            assert_eq!(pools.get(&up.id).map(|p| p.up.id), Some(up.id));
            let other = &ups[(i + 1) % 3];
            assert_eq!(pools.get_mut(&other.id).map(|p| p.up.id), Some(other.id));
        }
        let unknown = Upstream::parse("http://127.0.0.1:9999").unwrap();
        assert!(pools.get(&unknown.id).is_none());
        assert_eq!(pools.list.len(), 3);
    }
}

#[cfg(test)]
mod relay_tests {
    use super::*;

    fn parsed<'b, 'h>(
        input: &'b [u8],
        fields: &'h mut [MaybeUninit<httparse::Header<'b>>],
    ) -> Result<ResponseHead<'b, 'h>, crate::codec::client::ResponseError> {
        match parse_response_head(input, fields, "GET")? {
            ParsedResponse::Complete(head) => Ok(head),
            ParsedResponse::Partial => panic!("a whole head"),
        }
    }

    /// Issue 26: an upstream's value with obs-text that is not UTF-8 (a
    /// Latin-1 `é`) is parsed and relayed byte for byte (it was a 502);
    /// the one pass leaves such an answer to the general path, which
    /// relays it alike. A bare CR, a NUL or another control byte in a
    /// value stays the parser's refusal, a 502.
    #[test]
    fn obs_text_in_an_upstream_value_is_relayed_byte_for_byte() {
        let input: &[u8] = b"HTTP/1.1 200 OK\r\nServer: up\r\n\
            Content-Disposition: attachment; filename=\"caf\xe9.pdf\"\r\n\
            X-Raw: \x80\xff \xc3\r\nContent-Length: 2\r\n\r\nok";
        let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; RESPONSE_FIELDS_MAX];
        let head = parsed(input, &mut fields).expect("obs-text is allowed in a value");
        assert_eq!(head.status, 200);
        let block = answer_fields(&head);
        assert_eq!(
            block.as_bytes(),
            b"Content-Disposition: attachment; filename=\"caf\xe9.pdf\"\r\nX-Raw: \x80\xff \xc3\r\n"
        );
        assert!(!plain_relay_agrees(input), "left to the general path");
        for bad in [
            &b"HTTP/1.1 200 OK\r\nX-A: caf\xe9\rx\r\nContent-Length: 2\r\n\r\nok"[..],
            b"HTTP/1.1 200 OK\r\nX-A: caf\xe9\0\r\nContent-Length: 2\r\n\r\nok",
            b"HTTP/1.1 200 OK\r\nX-A: caf\xe9\x01\r\nContent-Length: 2\r\n\r\nok",
        ] {
            let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; RESPONSE_FIELDS_MAX];
            assert!(parsed(bad, &mut fields).is_err(), "{bad:?}");
        }
    }
}

#[cfg(test)]
mod plain_relay_tests {
    use super::*;

    /// `relay_plain`'s verdict on `head` with `body` after it: whether
    /// it took the answer (`plain_relay_agrees` checks it).
    fn agrees(head: &[u8], body: &[u8]) -> bool {
        let mut input = head.to_vec();
        input.extend_from_slice(body);
        plain_relay_agrees(&input)
    }

    use test_support::http::head_of as head;

    #[test]
    fn plain_relay_is_the_general_relay() {
        let statuses = [
            "HTTP/1.1 200 OK",
            "HTTP/1.1 200",
            "HTTP/1.1 201 Created",
            "HTTP/1.1 206 Partial Content",
            "HTTP/1.1 301 Moved Permanently",
            "HTTP/1.1 404 Not Found",
            "HTTP/1.1 418 I'm a teapot",
            "HTTP/1.1 500 Internal Server Error",
            "HTTP/1.1 599 Whatever it is",
        ];
        let sets: &[&[&str]] = &[
            &[],
            &["Content-Type: text/plain"],
            &[
                "Server: up",
                "Date: Thu, 01 Jan 2026 00:00:00 GMT",
                "Content-Type: text/plain",
            ],
            &[
                "Keep-Alive: timeout=5",
                "Proxy-Connection: keep-alive",
                "TE: trailers",
                "Trailer: x",
                "Upgrade: h2c",
            ],
            &["Connection: keep-alive", "X-A: 1"],
            &["Connection: close", "X-A: 1"],
            &["Connection: Keep-Alive, CLOSE", "X-A: 1"],
            &["Connection: ,, close ,", "X-A: 1"],
            &[
                "X-Spaced:   v  ",
                "X-Tab:\tv\t",
                "X-Inner: a\tb  c",
                "X-Empty:",
                "X-Blank: ",
            ],
            &[
                "x-lower: a",
                "X-UPPER: B",
                "Set-Cookie: a=1",
                "Set-Cookie: b=2",
                "ETag: \"x\"",
            ],
            &["X-Long-Name-Of-A-Field-Past-Sixteen-Bytes: a value that runs past sixteen bytes too"],
            &["Date: a", "date: b", "SERVER: c", "Vary: Accept"],
        ];
        let bodies: [&[u8]; 4] = [b"", b"x", b"Hello, World!", &[b'y'; 300]];
        let mut taken = 0;
        for status in statuses {
            for set in sets {
                for body in bodies {
                    let mut fields = set.to_vec();
                    let length = format!("Content-Length: {}", body.len());
                    fields.insert(fields.len() / 2, &length);
                    assert!(agrees(&head(status, &fields), body), "{status} {fields:?}");
                    taken += 1;
                }
            }
        }
        assert_eq!(taken, statuses.len() * sets.len() * bodies.len());
        // Answers left to the general parser, whatever it makes of them.
        let left: &[(&str, &[&str])] = &[
            // No length, or one to be judged there.
            ("HTTP/1.1 200 OK", &[]),
            ("HTTP/1.1 200 OK", &["Content-Length: 1", "Content-Length: 1"]),
            ("HTTP/1.1 200 OK", &["Content-Length: 1", "Content-Length: 2"]),
            ("HTTP/1.1 200 OK", &["Content-Length: +1"]),
            ("HTTP/1.1 200 OK", &["Content-Length: 1, 1"]),
            ("HTTP/1.1 200 OK", &["Content-Length: 12345678901234567890"]),
            ("HTTP/1.1 200 OK", &["Transfer-Encoding: chunked"]),
            ("HTTP/1.1 200 OK", &["Content-Length: 1", "Transfer-Encoding: chunked"]),
            // Connection options that may name a field.
            ("HTTP/1.1 200 OK", &["Content-Length: 1", "Connection: x-a", "X-A: 1"]),
            ("HTTP/1.1 200 OK", &["X-A: 1", "Connection: x-a", "Content-Length: 1"]),
            ("HTTP/1.1 200 OK", &["Content-Length: 1", "Connection: upgrade"]),
            (
                "HTTP/1.1 200 OK",
                &["Close: 1", "Connection: close", "Content-Length: 1"],
            ),
            // Other versions and statuses.
            ("HTTP/1.0 200 OK", &["Content-Length: 1"]),
            ("HTTP/2.0 200 OK", &["Content-Length: 1"]),
            ("HTTP/1.1 100 Continue", &[]),
            ("HTTP/1.1 101 Switching Protocols", &["Upgrade: websocket"]),
            ("HTTP/1.1 103 Early Hints", &["Link: </a>"]),
            ("HTTP/1.1 199 Odd", &["Content-Length: 1"]),
            ("HTTP/1.1 204 No Content", &[]),
            ("HTTP/1.1 304 Not Modified", &["Content-Length: 1"]),
            ("HTTP/1.1 600 Beyond", &["Content-Length: 1"]),
            ("HTTP/1.1 099 Below", &["Content-Length: 1"]),
            ("HTTP/1.1 2x0 OK", &["Content-Length: 1"]),
            // Bytes the strict grammar does not take.
            ("HTTP/1.1 200 O\u{7f}K", &["Content-Length: 1"]),
            ("HTTP/1.1 200 O\tK", &["Content-Length: 1"]),
            ("HTTP/1.1 200 OK", &["Content-Length: 1", "X-A: caf\u{e9}"]),
            ("HTTP/1.1 200 OK", &["Content-Length: 1", "X-A: a\u{0}b"]),
            ("HTTP/1.1 200 OK", &["Content-Length: 1", "X-A: a\rb"]),
            ("HTTP/1.1 200 OK", &["Content-Length: 1", "X-A: a\nb"]),
            ("HTTP/1.1 200 OK", &["Content-Length: 1", "X A: a"]),
            ("HTTP/1.1 200 OK", &["Content-Length: 1", ": a"]),
            ("HTTP/1.1 200 OK", &["Content-Length: 1", " X-A: a"]),
            ("HTTP/1.1 200 OK", &["Content-Length: 1", "X-A : a"]),
            ("HTTP/1.1 200 OK", &["Content-Length: 1", "X-A: a", " folded"]),
            ("HTTP/1.1 200 OK", &["Content-Length: 1", "X\"A: a"]),
        ];
        for (status, fields) in left {
            assert!(!agrees(&head(status, fields), b"x"), "{status} {fields:?}");
        }
        // A head cut anywhere, a bare LF, a CR alone, a head too large.
        let whole = head("HTTP/1.1 200 OK", &["Content-Type: text/plain", "Content-Length: 1"]);
        for end in 0..whole.len() {
            assert!(!agrees(&whole[..end], b""), "cut at {end}");
        }
        for at in 0..whole.len() {
            for b in [b'\n', b'\r', 0] {
                if whole[at] == b {
                    continue;
                }
                let mut changed = whole.clone();
                changed[at] = b;
                // Taken or not, never unlike the general relay.
                agrees(&changed, b"x");
            }
        }
        let bare_lf = b"HTTP/1.1 200 OK\r\nContent-Length: 1\n\r\n";
        assert!(!agrees(bare_lf, b"x"));
        let filler = format!(
            "X-Filler: {}",
            "f".repeat(crate::codec::client::RESPONSE_HEAD_BYTES_MAX)
        );
        assert!(!agrees(&head("HTTP/1.1 200 OK", &["Content-Length: 1", &filler]), b"x"));
        let many: Vec<String> = (0..RESPONSE_FIELDS_MAX).map(|i| format!("X-{i}: v")).collect();
        let mut many: Vec<&str> = many.iter().map(String::as_str).collect();
        many.push("Content-Length: 1");
        assert!(
            !agrees(&head("HTTP/1.1 200 OK", &many), b"x"),
            "one field past the slots"
        );
        many.remove(0);
        assert!(
            agrees(&head("HTTP/1.1 200 OK", &many), b"x"),
            "as many fields as the slots"
        );
    }
}
