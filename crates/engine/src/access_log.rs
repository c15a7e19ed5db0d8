//! The access log: one line per request, Combined Log Format or JSON,
//! buffered per worker and written in large pieces (not a syscall per
//! request). A log file is reopened on request (SIGUSR1, for logrotate):
//! workers pick the new file up at their next flush, so the request path
//! never looks at it.
//!
//! `127.0.0.1 - - [06/Nov/1994:08:49:37 +0000] "GET / HTTP/1.1" 200 13 "-" "curl/8.0"`
//!
//! `{"time":"1994-11-06T08:49:37Z","remote":"127.0.0.1","method":"GET","target":"/","version":"HTTP/1.1","status":200,"bytes":13,"referer":null,"user_agent":"curl/8.0"}`

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Where access log lines go.
#[derive(Clone, Debug)]
pub enum AccessLog {
    /// Standard output.
    Stdout,
    /// A file, opened for appending (created if missing).
    File(PathBuf),
}

impl AccessLog {
    /// `-` means standard output; anything else is a file path.
    pub fn from_arg(arg: &str) -> Self {
        if arg == "-" {
            AccessLog::Stdout
        } else {
            AccessLog::File(PathBuf::from(arg))
        }
    }

    pub(crate) fn open(&self) -> io::Result<Sink> {
        Ok(match self {
            AccessLog::Stdout => Sink::Stdout,
            AccessLog::File(path) => Sink::File(Arc::new(LogFile {
                path: path.clone(),
                file: Mutex::new(Arc::new(open_append(path)?)),
                generation: AtomicU64::new(0),
            })),
        })
    }
}

/// How each access log line is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Combined Log Format, as Apache and nginx write it.
    #[default]
    Combined,
    /// One JSON object per line: time (RFC 3339, UTC), remote, method,
    /// target, version, status, bytes, referer, user_agent (null when
    /// absent). Bytes that are not UTF-8 are written as `\u00XX`.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "combined" => Ok(LogFormat::Combined),
            "json" => Ok(LogFormat::Json),
            _ => Err(format!("unknown log format {s:?} (expected combined or json)")),
        }
    }
}

/// A log file that can be reopened under its path while workers write to
/// it: each worker keeps the old file until its next flush.
pub(crate) struct LogFile {
    path: PathBuf,
    file: Mutex<Arc<File>>,
    /// Bumped by each reopen; a worker compares it with its own at flush.
    generation: AtomicU64,
}

impl LogFile {
    /// Opens the path again (after logrotate moved the old file away).
    pub(crate) fn reopen(&self) -> io::Result<()> {
        let file = open_append(&self.path)?;
        *self.file.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(file);
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    fn current(&self) -> (u64, Arc<File>) {
        // The generation first: a reopen between the two reads is seen
        // again at the next flush, never missed.
        let generation = self.generation.load(Ordering::Acquire);
        let file = self.file.lock().unwrap_or_else(|e| e.into_inner()).clone();
        (generation, file)
    }
}

/// Reopens the access log file, if the log is a file.
pub(crate) fn reopen(sink: Option<&Sink>) -> io::Result<()> {
    match sink {
        Some(Sink::File(f)) => f.reopen(),
        _ => Ok(()),
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open access log {}: {e}", path.display())))
}

/// An opened log destination, shared by the workers.
#[derive(Clone)]
pub(crate) enum Sink {
    Stdout,
    File(Arc<LogFile>),
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sink::Stdout => f.write_str("Stdout"),
            Sink::File(file) => f.debug_tuple("File").field(&file.path).finish(),
        }
    }
}

/// Buffered bytes beyond which a worker writes its log out at once.
const FLUSH_BYTES: usize = 64 * 1024;

/// A worker's log buffer. Lines are only ever written whole, so lines of
/// different workers never interleave (O_APPEND writes are atomic).
pub(crate) struct LogWriter {
    sink: Sink,
    format: LogFormat,
    /// The file this worker writes to and the reopen generation it is of.
    file: Option<(u64, Arc<File>)>,
    buf: Vec<u8>,
}

/// The parts of a request a log line needs, owned, for answers that come
/// after the request buffer has moved on (deferred handlers).
#[derive(Clone, Debug, Default)]
pub(crate) struct LogRequest {
    pub(crate) request_line: Vec<u8>,
    pub(crate) referer: Option<Vec<u8>>,
    pub(crate) user_agent: Option<Vec<u8>>,
}

impl LogWriter {
    pub(crate) fn new(sink: Sink, format: LogFormat) -> Self {
        let file = match &sink {
            Sink::File(f) => Some(f.current()),
            Sink::Stdout => None,
        };
        LogWriter {
            sink,
            format,
            file,
            buf: Vec::with_capacity(FLUSH_BYTES + 4096),
        }
    }

    /// Appends one line.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record(
        &mut self,
        clf_time: &[u8],
        peer: SocketAddr,
        method: &[u8],
        target: &[u8],
        version: &[u8],
        status: u16,
        body_bytes: u64,
        referer: Option<&[u8]>,
        user_agent: Option<&[u8]>,
    ) {
        let request = [method, target, version];
        let fields = [referer, user_agent];
        match self.format {
            LogFormat::Combined => combined_line(&mut self.buf, clf_time, peer, request, status, body_bytes, fields),
            LogFormat::Json => json_line(&mut self.buf, clf_time, peer, request, status, body_bytes, fields),
        }
        if self.buf.len() >= FLUSH_BYTES {
            self.flush();
        }
    }

    /// A line for a request whose parts were copied earlier.
    pub(crate) fn record_owned(
        &mut self,
        clf_time: &[u8],
        peer: SocketAddr,
        req: &LogRequest,
        status: u16,
        body_bytes: u64,
    ) {
        // The request line was stored whole and raw (`record` escapes it);
        // split it back into its three parts.
        let line = &req.request_line;
        let mut parts = line.splitn(3, |&b| b == b' ');
        let (m, t, v) = (
            parts.next().unwrap_or(b"-"),
            parts.next().unwrap_or(b"-"),
            parts.next().unwrap_or(b"-"),
        );
        self.record(
            clf_time,
            peer,
            m,
            t,
            v,
            status,
            body_bytes,
            req.referer.as_deref(),
            req.user_agent.as_deref(),
        );
    }

    /// Writes out what is buffered. Errors are reported once per flush on
    /// stderr; a full disk must not stop the server.
    pub(crate) fn flush(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let result = match &self.sink {
            Sink::Stdout => io::stdout().lock().write_all(&self.buf),
            Sink::File(shared) => {
                // One atomic load per flush (every 64 KiB, and at each
                // sweep), not per request: a reopened file is picked up here.
                let seen = self.file.as_ref().map_or(u64::MAX, |(g, _)| *g);
                if shared.generation.load(Ordering::Acquire) != seen {
                    self.file = Some(shared.current());
                }
                match &self.file {
                    Some((_, f)) => (&**f).write_all(&self.buf),
                    None => Ok(()),
                }
            }
        };
        if let Err(e) = result {
            crate::log::error(format_args!("access log write failed: {e}"));
        }
        self.buf.clear();
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        self.flush();
    }
}

/// `ip - - [time] "method target version" status bytes "referer" "agent"`.
fn combined_line(
    b: &mut Vec<u8>,
    clf_time: &[u8],
    peer: SocketAddr,
    [method, target, version]: [&[u8]; 3],
    status: u16,
    body_bytes: u64,
    fields: [Option<&[u8]>; 2],
) {
    // Formatting an IP address into a Vec does not allocate beyond it.
    let _ = write!(b, "{}", peer.ip());
    b.extend_from_slice(b" - - [");
    b.extend_from_slice(clf_time);
    b.extend_from_slice(b"] \"");
    escape(b, method);
    b.push(b' ');
    escape(b, target);
    b.push(b' ');
    escape(b, version);
    b.extend_from_slice(b"\" ");
    let mut n = itoa::Buffer::new();
    b.extend_from_slice(n.format(status).as_bytes());
    b.push(b' ');
    if body_bytes == 0 {
        b.push(b'-');
    } else {
        b.extend_from_slice(n.format(body_bytes).as_bytes());
    }
    for field in fields {
        b.extend_from_slice(b" \"");
        match field {
            Some(v) => escape(b, v),
            None => b.push(b'-'),
        }
        b.push(b'"');
    }
    b.push(b'\n');
}

/// One JSON object on one line (see [`LogFormat::Json`]).
fn json_line(
    b: &mut Vec<u8>,
    clf_time: &[u8],
    peer: SocketAddr,
    [method, target, version]: [&[u8]; 3],
    status: u16,
    body_bytes: u64,
    [referer, user_agent]: [Option<&[u8]>; 2],
) {
    b.extend_from_slice(b"{\"time\":\"");
    rfc3339_from_clf(b, clf_time);
    let _ = write!(b, "\",\"remote\":\"{}\",\"method\":", peer.ip());
    json_string(b, Some(method));
    b.extend_from_slice(b",\"target\":");
    json_string(b, Some(target));
    b.extend_from_slice(b",\"version\":");
    json_string(b, Some(version));
    let mut n = itoa::Buffer::new();
    b.extend_from_slice(b",\"status\":");
    b.extend_from_slice(n.format(status).as_bytes());
    b.extend_from_slice(b",\"bytes\":");
    b.extend_from_slice(n.format(body_bytes).as_bytes());
    b.extend_from_slice(b",\"referer\":");
    json_string(b, referer);
    b.extend_from_slice(b",\"user_agent\":");
    json_string(b, user_agent);
    b.extend_from_slice(b"}\n");
}

/// `06/Nov/1994:08:49:37 +0000` → `1994-11-06T08:49:37Z` (the cache keeps
/// CLF's form; the log's times are UTC).
fn rfc3339_from_clf(b: &mut Vec<u8>, clf: &[u8]) {
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
    ];
    if clf.len() < 20 {
        b.extend_from_slice(clf);
        return;
    }
    let month = MONTHS.iter().position(|m| &clf[3..6] == *m).map_or(0, |i| i + 1);
    b.extend_from_slice(&clf[7..11]);
    b.push(b'-');
    b.push(b'0' + (month / 10) as u8);
    b.push(b'0' + (month % 10) as u8);
    b.push(b'-');
    b.extend_from_slice(&clf[0..2]);
    b.push(b'T');
    b.extend_from_slice(&clf[12..20]);
    b.push(b'Z');
}

/// A JSON string (or `null`). Valid UTF-8 is kept, with `"`, `\\` and
/// control characters escaped; each byte of invalid UTF-8 becomes
/// `\u00XX`, so a line is always valid JSON and cannot be forged.
fn json_string(b: &mut Vec<u8>, s: Option<&[u8]>) {
    let Some(mut s) = s else {
        b.extend_from_slice(b"null");
        return;
    };
    b.push(b'"');
    loop {
        let (valid, bad) = match std::str::from_utf8(s) {
            Ok(all) => (all, &[][..]),
            Err(e) => {
                let (ok, rest) = s.split_at(e.valid_up_to());
                let n_bad = e.error_len().unwrap_or(rest.len());
                // `ok` is valid UTF-8: from_utf8 said so up to here.
                (std::str::from_utf8(ok).unwrap_or_default(), &rest[..n_bad])
            }
        };
        for c in valid.bytes() {
            match c {
                b'"' | b'\\' => {
                    b.push(b'\\');
                    b.push(c);
                }
                0x00..=0x1f | 0x7f => hex_escape(b, c),
                _ => b.push(c),
            }
        }
        for &c in bad {
            hex_escape(b, c);
        }
        let used = valid.len() + bad.len();
        if used >= s.len() {
            break;
        }
        s = &s[used..];
    }
    b.push(b'"');
}

fn hex_escape(b: &mut Vec<u8>, c: u8) {
    b.extend_from_slice(b"\\u00");
    b.push(b"0123456789abcdef"[usize::from(c >> 4)]);
    b.push(b"0123456789abcdef"[usize::from(c & 0xf)]);
}

/// Copies `s`, escaping `"`, `\` and bytes outside printable ASCII as
/// `\xHH`, so a log line cannot be forged or broken by a client.
fn escape(out: &mut Vec<u8>, s: &[u8]) {
    for &c in s {
        match c {
            b'"' | b'\\' => {
                out.push(b'\\');
                out.push(c);
            }
            0x20..=0x7e => out.push(c),
            _ => {
                out.extend_from_slice(b"\\x");
                out.push(b"0123456789abcdef"[usize::from(c >> 4)]);
                out.push(b"0123456789abcdef"[usize::from(c & 0xf)]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_combined_log_format_and_escaped() {
        let mut w = LogWriter::new(Sink::Stdout, LogFormat::Combined);
        w.record(
            b"06/Nov/1994:08:49:37 +0000",
            "10.0.0.1:5555".parse().unwrap(),
            b"GET",
            b"/a\"b",
            b"HTTP/1.1",
            200,
            13,
            None,
            Some(b"ua\n\xff"),
        );
        let line = String::from_utf8(std::mem::take(&mut w.buf)).unwrap();
        assert_eq!(
            line,
            "10.0.0.1 - - [06/Nov/1994:08:49:37 +0000] \"GET /a\\\"b HTTP/1.1\" 200 13 \"-\" \"ua\\x0a\\xff\"\n"
        );
    }

    #[test]
    fn json_lines_are_valid_json_whatever_the_bytes() {
        let mut w = LogWriter::new(Sink::Stdout, LogFormat::Json);
        w.record(
            b"06/Nov/1994:08:49:37 +0000",
            "[::1]:5555".parse().unwrap(),
            b"GET",
            b"/caf\xc3\xa9\"\\",
            b"HTTP/1.1",
            304,
            0,
            None,
            Some(b"ua\n\xff\x7f"),
        );
        let line = String::from_utf8(std::mem::take(&mut w.buf)).unwrap();
        assert_eq!(
            line,
            "{\"time\":\"1994-11-06T08:49:37Z\",\"remote\":\"::1\",\"method\":\"GET\",\
             \"target\":\"/caf\u{e9}\\\"\\\\\",\"version\":\"HTTP/1.1\",\"status\":304,\"bytes\":0,\
             \"referer\":null,\"user_agent\":\"ua\\u000a\\u00ff\\u007f\"}\n"
        );
    }
}
