//! Active health checks: a thread per process (never an event loop)
//! asks each member of a balance for a path every interval, and publishes
//! its verdicts to the workers through one atomic flag per member, which
//! the pools read when they choose (`balance.rs`). Caddy's
//! `health_uri`/`health_interval`/`health_timeout` are the model: a
//! member is down when the check cannot connect, times out, or gets a
//! status outside 2xx (Caddy's default `health_status`); up again at the
//! first 2xx (Caddy's `health_passes` and `health_fails` are 1 by
//! default). Members are taken for up until their first check, which
//! runs when the server starts.
//!
//! Each probe runs on a thread of its own, started by the checker when
//! the member's check is due, so a member that hangs delays no other
//! member's check (of its route or another): each is late by at most its
//! own `timeout`. They are bounded by the members checked: a member has
//! one probe under way at most, and one due while its last still runs
//! starts when that one ends (the probe thread wakes the checker). A
//! thread per probe rather than non-blocking sockets polled together:
//! the probe stays the plain blocking exchange `check-config` also
//! makes, and at an interval of 100 ms at least, a thread's start (tens
//! of microseconds) is nothing.
//!
//! The check is `GET PATH` with the upstream's `host:port` as its
//! authority, in the member's protocol: HTTP/1.1 with Host and
//! `Connection: close`, only the status line read (at most
//! [`STATUS_LINE_MAX`] bytes); for `h2c://` and `h2s://` (TLS, ALPN
//! `h2`) HTTP/2: the preface, our SETTINGS and one HEADERS with
//! END_STREAM, written and read by the proxy's own client session
//! (`h2up::Session`, its HPACK), until the answer's `:status` (at most
//! [`H2_ANSWER_BYTES_MAX`] bytes read). So a member cannot make the
//! checker hold more. It connects as the pool does (TCP to the addresses
//! the name resolves to now, a `unix:` socket, or TLS verified as the
//! pool verifies), inside the same sandbox: the ports are the upstreams'.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::h2up::{Event, Session};
use super::upstream::{Addr, Upstream, UpstreamError};

/// Bytes of a check's answer read at most: its status line.
pub const STATUS_LINE_MAX: usize = 1024;
/// Bytes of an HTTP/2 check's answer read at most before its `:status`:
/// the server's SETTINGS and the answer's header block (a member that
/// sends more, PINGs or padding, fails its check).
pub const H2_ANSWER_BYTES_MAX: usize = 64 * 1024;

/// What an active check asks, and how often.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveCheck {
    pub(crate) uri: String,
    pub(crate) interval: Duration,
    pub(crate) timeout: Duration,
}

impl ActiveCheck {
    /// Caddy's `health_interval`.
    pub const INTERVAL: Duration = Duration::from_secs(30);
    /// Caddy's `health_timeout`: connecting and reading the status line.
    pub const TIMEOUT: Duration = Duration::from_secs(5);

    /// A check of `uri` (a path, with a query if wanted).
    pub fn new(uri: &str) -> Result<ActiveCheck, UpstreamError> {
        if !uri.starts_with('/') || uri.bytes().any(|b| b <= b' ' || b == 0x7f || b == b'#') {
            return Err(UpstreamError::new(format!(
                "health check {uri:?}: a path beginning with / (no spaces, controls or fragment)"
            )));
        }
        Ok(ActiveCheck {
            uri: uri.to_owned(),
            interval: ActiveCheck::INTERVAL,
            timeout: ActiveCheck::TIMEOUT,
        })
    }

    /// How often each member is asked (at least 100 ms).
    pub fn interval(mut self, t: Duration) -> ActiveCheck {
        self.interval = t.max(Duration::from_millis(100));
        self
    }

    /// How long a check may take (at least 10 ms).
    pub fn timeout(mut self, t: Duration) -> ActiveCheck {
        self.timeout = t.max(Duration::from_millis(10));
        self
    }

    /// The path asked.
    pub fn uri(&self) -> &str {
        &self.uri
    }
}

/// A balance's active check and its verdicts: written by the checker
/// thread, read by the workers (one relaxed load per member per choice).
#[derive(Debug)]
pub(crate) struct Checked {
    check: ActiveCheck,
    members: Vec<Arc<Upstream>>,
    up: Vec<Arc<AtomicBool>>,
    /// Each member's next check, and whether a probe of it is under way.
    probes: Vec<Arc<Probe>>,
}

/// One member's place in the checker's schedule.
#[derive(Debug, Default)]
struct Probe {
    /// When it is asked next (`None`: at once).
    due: Mutex<Option<Instant>>,
    /// A probe's thread is under way.
    busy: AtomicBool,
}

impl Checked {
    pub(crate) fn new(check: ActiveCheck, members: Vec<Arc<Upstream>>) -> Arc<Checked> {
        let up = members.iter().map(|_| Arc::new(AtomicBool::new(true))).collect();
        let probes = members.iter().map(|_| Arc::new(Probe::default())).collect();
        let checked = Arc::new(Checked {
            check,
            members,
            up,
            probes,
        });
        CHECKED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&checked));
        checked
    }

    pub(crate) fn is_up(&self, i: usize) -> bool {
        self.up.get(i).is_none_or(|u| u.load(Ordering::Relaxed))
    }

    /// Member `i`'s flag, for the metrics.
    pub(crate) fn flag(&self, i: usize) -> Option<Arc<AtomicBool>> {
        self.up.get(i).cloned()
    }

    pub(crate) fn check(&self) -> &ActiveCheck {
        &self.check
    }

    /// Asks member `i` once and publishes the verdict.
    fn run(&self, i: usize) {
        ask(&self.members[i], &self.check, &self.up[i]);
    }

    /// Starts the probes that are due at `now`, each on a thread of its
    /// own that wakes `checker` when it ends; the earliest next due.
    fn start_due(&self, now: Instant, checker: &std::thread::Thread) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for (i, p) in self.probes.iter().enumerate() {
            if p.busy.load(Ordering::Acquire) {
                // Its end wakes the checker.
                continue;
            }
            let mut due = p.due.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(d) = due.filter(|&d| d > now) {
                next = Some(next.map_or(d, |n| n.min(d)));
                continue;
            }
            // The next check is an interval after this one's start (a
            // probe slower than that is followed at once by the next).
            let then = now + self.check.interval;
            *due = Some(then);
            next = Some(next.map_or(then, |n| n.min(then)));
            drop(due);
            p.busy.store(true, Ordering::Release);
            // Not the `Checked` itself: a balance a reload dropped is not
            // kept alive (and checked on) by its probes under way.
            let (m, check, up) = (self.members[i].clone(), self.check.clone(), self.up[i].clone());
            let (probe, waker) = (p.clone(), checker.clone());
            let spawned = std::thread::Builder::new()
                .name("peregrine-health-probe".into())
                .stack_size(PROBE_STACK_BYTES)
                .spawn(move || {
                    ask(&m, &check, &up);
                    probe.busy.store(false, Ordering::Release);
                    waker.unpark();
                });
            if let Err(e) = spawned {
                // No thread: asked here, as the checker did before.
                log::warn!("proxy: no thread for a health check ({e}): asked in turn");
                self.run(i);
                p.busy.store(false, Ordering::Release);
            }
        }
        next
    }
}

/// Asks `m` once for `check` and publishes the verdict in `up`.
fn ask(m: &Upstream, check: &ActiveCheck, up: &AtomicBool) {
    let verdict = probe(m, &check.uri, check.timeout);
    let now_up = matches!(verdict, Ok(200..=299));
    let was_up = up.swap(now_up, Ordering::Relaxed);
    match (&verdict, was_up, now_up) {
        (_, true, false) => log::warn!(
            "proxy: {}: health check {} failed ({}): out until it passes",
            m.url(),
            check.uri,
            match &verdict {
                Ok(status) => format!("status {status}"),
                Err(why) => why.clone(),
            }
        ),
        (_, false, true) => log::info!("proxy: {}: health check {} passes: in again", m.url(), check.uri),
        _ => {}
    }
}

/// A probe thread's stack: a TLS handshake and an HPACK block, not a
/// worker's 2 MiB default.
const PROBE_STACK_BYTES: usize = 256 * 1024;

/// The checks the checker thread runs (those of live balances).
static CHECKED: Mutex<Vec<Weak<Checked>>> = Mutex::new(Vec::new());

/// Starts the checker thread, once per process, when a server starts with
/// checks to run (after a caller's sandbox, as `resolve::start`). Checks
/// made later (a reload's) join it.
pub(crate) fn start() {
    static THREAD: OnceLock<()> = OnceLock::new();
    if CHECKED.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
        return;
    }
    THREAD.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("peregrine-health".into())
            .spawn(|| loop {
                let checks: Vec<Arc<Checked>> = {
                    let mut all = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
                    all.retain(|w| w.strong_count() > 0);
                    all.iter().filter_map(Weak::upgrade).collect()
                };
                let me = std::thread::current();
                let now = Instant::now();
                // At least once a second: checks a reload made join.
                let mut next = now + Duration::from_secs(1);
                for c in &checks {
                    if let Some(due) = c.start_due(now, &me) {
                        next = next.min(due);
                    }
                }
                drop(checks);
                // A probe's end unparks it early.
                std::thread::park_timeout(next.saturating_duration_since(Instant::now()));
            });
        if let Err(e) = spawned {
            log::warn!("proxy: no thread for active health checks ({e}); every upstream stays in");
        }
    });
}

/// Asks `up` for `uri` once, within `timeout`: the status, or why there
/// is none. Blocking: off the event loops only (the checker thread,
/// `check-config`).
pub fn probe(up: &Upstream, uri: &str, timeout: Duration) -> Result<u16, String> {
    let deadline = Instant::now() + timeout;
    let request = if up.is_h2() {
        Request::H2 {
            scheme: if up.is_tls() { "https" } else { "http" },
            authority: up.authority(),
            uri,
        }
    } else {
        Request::H1(format!(
            "GET {uri} HTTP/1.1\r\nHost: {}\r\nUser-Agent: peregrine-health-check\r\nAccept: */*\r\nConnection: close\r\n\r\n",
            up.authority()
        ))
    };
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| "timed out".to_owned())
    };
    let answer = match &up.addr {
        Addr::Unix(path) => {
            let s = std::os::unix::net::UnixStream::connect(path).map_err(|e| format!("connect: {e}"))?;
            s.set_read_timeout(Some(left()?)).map_err(|e| e.to_string())?;
            s.set_write_timeout(Some(left()?)).map_err(|e| e.to_string())?;
            exchange(s, &request, deadline)
        }
        Addr::Tcp(addrs) => {
            let mut last = "no address".to_owned();
            let mut conn = None;
            for a in addrs.current().iter() {
                match TcpStream::connect_timeout(a, left()?) {
                    Ok(s) => {
                        conn = Some(s);
                        break;
                    }
                    Err(e) => last = format!("connect {a}: {e}"),
                }
            }
            let s = conn.ok_or(last)?;
            s.set_read_timeout(Some(left()?)).map_err(|e| e.to_string())?;
            s.set_write_timeout(Some(left()?)).map_err(|e| e.to_string())?;
            match &up.tls {
                Some(tls) => {
                    let conn = tls.connection().map_err(|e| e.to_string())?;
                    let mut s = rustls::StreamOwned::new(conn, s);
                    if up.is_h2() {
                        // RFC 9113 §3.2: HTTP/2 over TLS only once the
                        // upstream chose "h2" (as the pool asks).
                        while s.conn.is_handshaking() {
                            s.conn.complete_io(&mut s.sock).map_err(|e| format!("TLS: {e}"))?;
                        }
                        if s.conn.alpn_protocol() != Some(b"h2") {
                            return Err("TLS: the upstream did not agree to h2 (ALPN)".into());
                        }
                    }
                    exchange(s, &request, deadline)
                }
                None => exchange(s, &request, deadline),
            }
        }
    };
    answer.map_err(|e| {
        if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
            "timed out".to_owned()
        } else {
            e.to_string()
        }
    })?
}

/// A check's request, in the member's protocol.
enum Request<'a> {
    H1(String),
    H2 {
        scheme: &'static str,
        authority: &'a str,
        uri: &'a str,
    },
}

/// Writes the request, reads up to the answer's status: its status.
fn exchange(s: impl Read + Write, request: &Request<'_>, deadline: Instant) -> io::Result<Result<u16, String>> {
    match request {
        Request::H1(request) => exchange_h1(s, request.as_bytes(), deadline),
        Request::H2 { scheme, authority, uri } => exchange_h2(s, scheme, authority, uri, deadline),
    }
}

/// HTTP/2: the preface, SETTINGS and a GET's HEADERS with END_STREAM
/// (`Session` writes them), then frames until the answer's final head.
fn exchange_h2(
    mut s: impl Read + Write,
    scheme: &str,
    authority: &str,
    uri: &str,
    deadline: Instant,
) -> io::Result<Result<u16, String>> {
    let mut session = Session::new();
    let fields: [(&[u8], &[u8]); 2] = [(b"user-agent", b"peregrine-health-check"), (b"accept", b"*/*")];
    let id = session.open("GET", scheme, authority, uri, fields.into_iter(), true);
    let mut input = Vec::new();
    let mut events = Vec::new();
    let mut buf = [0u8; 4096];
    let mut n_read = 0;
    loop {
        // What the session owes (its preface and request, then the
        // acknowledgments of the server's SETTINGS and PINGs).
        if !session.out.is_empty() {
            s.write_all(&session.out)?;
            s.flush()?;
            session.out.clear();
        }
        for ev in events.drain(..) {
            match ev {
                Event::Head { stream, status, .. } if stream == id => return Ok(Ok(status)),
                Event::Reset { stream, code } if stream == id => {
                    return Ok(Err(format!("stream reset by the upstream (code {code})")))
                }
                Event::Malformed { stream, why } if stream == id => return Ok(Err(format!("bad answer: {why}"))),
                Event::GoAway { last, code } if last < id => return Ok(Err(format!("GOAWAY (code {code})"))),
                _ => {}
            }
        }
        if n_read >= H2_ANSWER_BYTES_MAX {
            return Ok(Err("no :status in the first 64 KiB".into()));
        }
        if Instant::now() >= deadline {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let n = match s.read(&mut buf) {
            Ok(0) => return Ok(Err("closed before an HTTP/2 answer".into())),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        n_read += n;
        input.extend_from_slice(&buf[..n]);
        match session.recv(&input, &mut events) {
            Ok(used) => {
                input.drain(..used);
            }
            Err(e) => return Ok(Err(format!("bad HTTP/2: {}", e.why))),
        }
    }
}

/// HTTP/1.1: writes the request, reads up to the status line's end.
fn exchange_h1(mut s: impl Read + Write, request: &[u8], deadline: Instant) -> io::Result<Result<u16, String>> {
    s.write_all(request)?;
    s.flush()?;
    let mut buf = [0u8; STATUS_LINE_MAX];
    let mut len = 0;
    while !buf[..len].contains(&b'\n') {
        if len == buf.len() {
            return Ok(Err("no status line in the first 1 KiB".into()));
        }
        if Instant::now() >= deadline {
            return Err(io::ErrorKind::TimedOut.into());
        }
        match s.read(&mut buf[len..]) {
            Ok(0) => return Ok(Err("closed before a status line".into())),
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(status_of(&buf[..len]))
}

/// `HTTP/1.x NNN ...`'s status.
fn status_of(line: &[u8]) -> Result<u16, String> {
    let rest = line
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| line.strip_prefix(b"HTTP/1.0 "))
        .ok_or_else(|| "not an HTTP/1.x status line".to_owned())?;
    match rest {
        [a, b, c, ..] if [a, b, c].iter().all(|d| d.is_ascii_digit()) => {
            Ok(u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'))
        }
        _ => Err("a bad status code".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_read_and_others_refused() {
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\n"), Ok(200));
        assert_eq!(status_of(b"HTTP/1.0 503 x\r\n"), Ok(503));
        assert!(status_of(b"HTTP/2 200\r\n").is_err());
        assert!(status_of(b"HTTP/1.1 2x0 OK\r\n").is_err());
        assert!(status_of(b"SSH-2.0-OpenSSH\r\n").is_err());
    }

    #[test]
    fn a_check_path_must_be_a_path() {
        assert!(ActiveCheck::new("/healthz").is_ok());
        assert!(ActiveCheck::new("/h?full=1").is_ok());
        for bad in ["healthz", "/a b", "/a\r\nX: y", "/a#b", ""] {
            assert!(ActiveCheck::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_probe_reads_the_status_and_no_more_than_a_line() {
        use std::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            for answer in [&b"HTTP/1.1 204 No Content\r\n\r\n"[..], &[b'x'; 4096][..]] {
                let (mut s, _) = listener.accept().unwrap();
                let mut head = [0u8; 512];
                let _ = s.read(&mut head);
                let _ = s.write_all(answer);
            }
        });
        let up = Upstream::parse(&format!("http://{addr}")).unwrap();
        assert_eq!(probe(&up, "/h", Duration::from_secs(30)), Ok(204));
        let err = probe(&up, "/h", Duration::from_secs(30)).unwrap_err();
        assert!(err.contains("no status line"), "{err}");
        server.join().unwrap();
        // Nobody listens any more (the port is closed): connect fails.
        let err = probe(&up, "/h", Duration::from_secs(30)).unwrap_err();
        assert!(err.contains("connect"), "{err}");
    }

    /// Reads a client's preface and frames until a HEADERS frame with
    /// END_STREAM and END_HEADERS on stream 1 (a GET's head).
    fn read_h2_get(s: &mut TcpStream) {
        let mut got = Vec::new();
        let mut b = [0u8; 4096];
        loop {
            if got.len() >= 24 {
                assert_eq!(&got[..24], b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
                let mut at = 24;
                while got.len() >= at + 9 {
                    let len = (usize::from(got[at]) << 16) | (usize::from(got[at + 1]) << 8) | usize::from(got[at + 2]);
                    let (kind, flags) = (got[at + 3], got[at + 4]);
                    let stream = u32::from_be_bytes([got[at + 5], got[at + 6], got[at + 7], got[at + 8]]);
                    if kind == 1 && stream == 1 {
                        assert_eq!(flags & 0x5, 0x5, "END_STREAM and END_HEADERS");
                        return;
                    }
                    at += 9 + len;
                }
            }
            let n = s.read(&mut b).unwrap();
            assert!(n > 0, "closed before a HEADERS frame: {got:?}");
            got.extend_from_slice(&b[..n]);
        }
    }

    #[test]
    fn an_h2c_probe_speaks_http2_and_reads_the_status() {
        use std::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // An empty SETTINGS, then the answer's HEADERS (END_STREAM,
        // END_HEADERS) on stream 1: `:status 204` (HPACK static index 9);
        // then RST_STREAM(REFUSED_STREAM); then GOAWAY(last 0).
        let settings = [0u8, 0, 0, 4, 0, 0, 0, 0, 0];
        let answers: [&[u8]; 3] = [
            &[0, 0, 1, 1, 5, 0, 0, 0, 1, 0x89],
            &[0, 0, 4, 3, 0, 0, 0, 0, 1, 0, 0, 0, 7],
            &[0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ];
        let server = std::thread::spawn(move || {
            for answer in answers {
                let (mut s, _) = listener.accept().unwrap();
                read_h2_get(&mut s);
                s.write_all(&settings).unwrap();
                s.write_all(answer).unwrap();
                let _ = s.read(&mut [0u8; 64]);
            }
        });
        let up = Upstream::parse(&format!("h2c://{addr}")).unwrap();
        assert_eq!(
            probe(&up, "/grpc.health.v1.Health/Check", Duration::from_secs(30)),
            Ok(204)
        );
        let err = probe(&up, "/h", Duration::from_secs(30)).unwrap_err();
        assert!(err.contains("reset") && err.contains("code 7"), "{err}");
        let err = probe(&up, "/h", Duration::from_secs(30)).unwrap_err();
        assert!(err.contains("GOAWAY"), "{err}");
        server.join().unwrap();
    }

    #[test]
    fn a_hanging_member_delays_no_other_members_check() {
        use std::net::TcpListener;
        // Connects (the kernel's backlog) and never answers.
        let hanging = TcpListener::bind("127.0.0.1:0").unwrap();
        // Nobody listens: refused at once.
        let dead = |_| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            Upstream::parse(&format!("http://{}", l.local_addr().unwrap())).unwrap()
        };
        let hung = Upstream::parse(&format!("http://{}", hanging.local_addr().unwrap())).unwrap();
        let check = ActiveCheck::new("/h")
            .unwrap()
            .interval(Duration::from_millis(100))
            .timeout(Duration::from_secs(5));
        // The hanging member first in its route, and first of the routes.
        let route = Checked::new(check.clone(), vec![Arc::new(hung.clone()), Arc::new(dead(0))]);
        let other = Checked::new(check, vec![Arc::new(hung), Arc::new(dead(1))]);
        let start = Instant::now();
        super::start();
        while route.is_up(1) || other.is_up(1) {
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "a dead member waited for a hanging one's timeout"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // The hanging ones are still being asked (in for now).
        assert!(route.is_up(0) && other.is_up(0));
        drop(hanging);
    }
}
