//! The access log: one Combined Log Format line per request, buffered per
//! worker and written in large pieces (not a syscall per request).
//!
//! `127.0.0.1 - - [06/Nov/1994:08:49:37 +0000] "GET / HTTP/1.1" 200 13 "-" "curl/8.0"`

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
            AccessLog::File(path) => Sink::File(Arc::new(open_append(path)?)),
        })
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
    File(Arc<File>),
}

/// Buffered bytes beyond which a worker writes its log out at once.
const FLUSH_BYTES: usize = 64 * 1024;

/// A worker's log buffer. Lines are only ever written whole, so lines of
/// different workers never interleave (O_APPEND writes are atomic).
pub(crate) struct LogWriter {
    sink: Sink,
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
    pub(crate) fn new(sink: Sink) -> Self {
        LogWriter {
            sink,
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
        let b = &mut self.buf;
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
        for field in [referer, user_agent] {
            b.extend_from_slice(b" \"");
            match field {
                Some(v) => escape(b, v),
                None => b.push(b'-'),
            }
            b.push(b'"');
        }
        b.push(b'\n');
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
            Sink::File(f) => (&**f).write_all(&self.buf),
        };
        if let Err(e) = result {
            eprintln!("peregrine: access log write failed: {e}");
        }
        self.buf.clear();
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        self.flush();
    }
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
        let mut w = LogWriter::new(Sink::Stdout);
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
}
