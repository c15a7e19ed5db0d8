//! Active health checks: one thread per process (never an event loop)
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
//! The check is `GET PATH HTTP/1.1` with the upstream's `host:port` as
//! Host and `Connection: close`; only the status line is read (at most
//! [`STATUS_LINE_MAX`] bytes), so a member cannot make the checker hold
//! more. It connects as the pool does (TCP to the addresses the name
//! resolves to now, a `unix:` socket, or TLS verified as the pool
//! verifies), inside the same sandbox: the ports are the upstreams'.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::upstream::{Addr, Upstream, UpstreamError};

/// Bytes of a check's answer read at most: its status line.
pub const STATUS_LINE_MAX: usize = 1024;

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
    /// When the checker asks next (the checker's only).
    due: Mutex<Option<Instant>>,
}

impl Checked {
    pub(crate) fn new(check: ActiveCheck, members: Vec<Arc<Upstream>>) -> Arc<Checked> {
        let up = members.iter().map(|_| Arc::new(AtomicBool::new(true))).collect();
        let checked = Arc::new(Checked {
            check,
            members,
            up,
            due: Mutex::new(None),
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

    /// Asks every member once and publishes the verdicts.
    fn run(&self) {
        for (m, up) in self.members.iter().zip(&self.up) {
            let verdict = probe(m, &self.check.uri, self.check.timeout);
            let now_up = matches!(verdict, Ok(200..=299));
            let was_up = up.swap(now_up, Ordering::Relaxed);
            match (&verdict, was_up, now_up) {
                (_, true, false) => log::warn!(
                    "proxy: {}: health check {} failed ({}): out until it passes",
                    m.url(),
                    self.check.uri,
                    match &verdict {
                        Ok(status) => format!("status {status}"),
                        Err(why) => why.clone(),
                    }
                ),
                (_, false, true) => log::info!("proxy: {}: health check {} passes: in again", m.url(), self.check.uri),
                _ => {}
            }
        }
    }
}

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
                let mut next = Instant::now() + Duration::from_secs(1);
                for c in &checks {
                    let mut due = c.due.lock().unwrap_or_else(|e| e.into_inner());
                    let now = Instant::now();
                    if due.is_none_or(|d| d <= now) {
                        c.run();
                        *due = Some(Instant::now() + c.check.interval);
                    }
                    next = next.min(due.unwrap_or(next));
                }
                drop(checks);
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
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
    let request = format!(
        "GET {uri} HTTP/1.1\r\nHost: {}\r\nUser-Agent: peregrine-health-check\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        up.authority()
    );
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
            exchange(s, request.as_bytes(), deadline)
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
                    exchange(rustls::StreamOwned::new(conn, s), request.as_bytes(), deadline)
                }
                None => exchange(s, request.as_bytes(), deadline),
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

/// Writes the request, reads up to the status line's end: its status.
fn exchange(mut s: impl Read + Write, request: &[u8], deadline: Instant) -> io::Result<Result<u16, String>> {
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
}
