//! `probe URL`: a health check for containers without a shell or curl,
//! one GET over plain HTTP/1.1 with its status line read.

use std::time::Duration;

use anyhow::Context;

use crate::flags::parse_bind;

/// Time a probe waits to connect, and then for the answer's first line.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// `peregrine probe URL`: one GET over plain HTTP/1.1, the status line read.
pub(crate) fn probe(url: &str) -> anyhow::Result<()> {
    use std::io::{BufRead, Write};
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("{url}: expected http://HOST:PORT/PATH (plain HTTP only)"))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let parsed = parse_bind(authority).map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
    anyhow::ensure!(
        parsed.1.is_none(),
        "{url}: probing a Unix-domain socket is not supported"
    );
    let addrs = parsed.0;
    let mut last = None;
    for addr in addrs {
        let status = (|| -> std::io::Result<String> {
            let mut s = std::net::TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)?;
            s.set_read_timeout(Some(PROBE_TIMEOUT))?;
            s.set_write_timeout(Some(PROBE_TIMEOUT))?;
            write!(
                s,
                "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
            )?;
            let mut line = String::new();
            std::io::BufReader::new(s).read_line(&mut line)?;
            Ok(line.trim_end().to_owned())
        })();
        match status {
            Ok(line) if line.starts_with("HTTP/1.1 2") || line.starts_with("HTTP/1.0 2") => return Ok(()),
            Ok(line) => last = Some(format!("{addr} answered {line:?}")),
            Err(e) => last = Some(format!("{addr}: {e}")),
        }
    }
    anyhow::bail!("{url}: unhealthy: {}", last.unwrap_or_else(|| "no address".to_owned()))
}
