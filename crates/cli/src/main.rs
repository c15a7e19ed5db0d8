//! The `peregrine` command: glue between the command line and the libraries.

mod config;
mod docs;
mod logger;
mod reload;
mod sandbox;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use peregrine::{Limits, TlsConfig};
use peregrine_archive::{Archive, Mode, PackOptions};
use peregrine_files::{FileServer, Options};

/// Peregrine: a web server for static sites and site archives, over
/// HTTP/1.1, HTTP/2 and HTTP/3 (`about` is the package's description).
#[derive(Parser, Debug)]
#[command(name = "peregrine", version, long_version = docs::LONG_VERSION, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Answer `Hello, World!` (text/plain) on every path: the engine alone.
    Hello {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Serve the files of a directory, or a site archive made by `pack`.
    Serve {
        /// The directory or archive to serve.
        #[arg(value_name = "DIR|ARCHIVE")]
        root: PathBuf,
        #[command(flatten)]
        files: FileArgs,
        #[command(flatten)]
        archive: ServeArchiveArgs,
        /// Serve as root, when started as root without --user (or with
        /// --user root). Without it that start is refused: root reads every
        /// file whatever its mode, so a file its owner made unreadable (mode
        /// 000) would be served. Prefer --user NAME, which gives root up
        /// once the ports are bound. Read at start only.
        #[arg(long)]
        allow_root: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Pack a directory into a site archive (written atomically).
    #[command(
        after_help = "pack writes DIR's files, with their compressed variants and response heads, into one \
                      archive file (-o) that `peregrine serve ARCHIVE` serves: peregrine pack site -o site.prg"
    )]
    Pack {
        /// The directory to pack (the default site).
        #[arg(value_name = "DIR")]
        root: PathBuf,
        /// The archive to write, e.g. `-o site.prg`.
        #[arg(short, long, value_name = "ARCHIVE")]
        output: PathBuf,
        /// Another site, chosen by the Host header: `NAME=DIR`; repeatable.
        #[arg(long = "host", value_name = "NAME=DIR")]
        hosts: Vec<String>,
        /// Cache-Control for files `_headers` gives none.
        #[arg(long, default_value = "no-cache", value_name = "VALUE", value_parser = parse_cache_control)]
        cache_control: String,
        /// Do not add X-Content-Type-Options, X-Frame-Options, Referrer-Policy.
        #[arg(long)]
        no_security_headers: bool,
        /// Store identity only (no gzip, brotli, zstd variants).
        #[arg(long)]
        no_compress: bool,
    },
    /// Inspect a site archive.
    Archive {
        #[command(subcommand)]
        command: ArchiveCommand,
    },
    /// Ask a health endpoint (by default the one `--metrics 127.0.0.1:9090`
    /// serves): exit 0 if it answers 2xx within 2 seconds, else 1. For
    /// container health checks on images without a shell or curl.
    Probe {
        /// `http://HOST:PORT/PATH`.
        #[arg(default_value = "http://127.0.0.1:9090/healthz", value_name = "URL")]
        url: String,
    },
    /// Write a shell completion script to standard output.
    Completions { shell: clap_complete::Shell },
    /// Write the man page (roff) to standard output.
    Man {
        /// The subcommand whose page to write (default: `peregrine`'s own).
        command: Option<String>,
        /// Write every page into DIR instead (peregrine.1, peregrine-serve.1, ...).
        #[arg(long, value_name = "DIR", conflicts_with = "command")]
        out_dir: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum ArchiveCommand {
    /// List the entries: site, path, kind, status, sizes per encoding.
    Ls { archive: PathBuf },
    /// Write one entry's body (identity) to standard output.
    Cat {
        archive: PathBuf,
        /// The path, e.g. /index.html.
        path: String,
        /// The site's host name (default: the default site).
        #[arg(long)]
        host: Option<String>,
    },
    /// Check every checksum; exit 1 if the archive is damaged.
    Verify { archive: PathBuf },
    /// Counts and sizes.
    Stat { archive: PathBuf },
}

/// How `serve` holds an archive.
#[derive(Args, Debug)]
struct ServeArchiveArgs {
    /// Archives: read the whole archive into memory instead of mapping it.
    #[arg(long)]
    in_memory: bool,
    /// Archives: fault every page of the map in at load.
    #[arg(long)]
    prefault: bool,
}

/// The file tried for a directory unless `--index` names others.
const DEFAULT_INDEX: &str = "index.html";

/// How `serve` answers for files.
#[derive(Args, Debug)]
struct FileArgs {
    /// File names tried for a directory, in order (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_INDEX, value_name = "NAMES")]
    index: Vec<String>,
    /// List directories that have no index file, as HTML.
    #[arg(long)]
    list_dirs: bool,
    /// Follow symlinks that lead outside the directory (by default only
    /// symlinks that resolve inside it are followed).
    #[arg(long)]
    follow_symlinks: bool,
    /// Page sent with 404 for missing paths (a path within DIR). Default: a
    /// short built-in page.
    #[arg(long = "404", value_name = "PATH")]
    not_found: Option<String>,
    /// Page sent with 200 for missing paths without a file extension, for
    /// single-page applications (a path within DIR, e.g. index.html).
    /// Default: none (404).
    #[arg(long, value_name = "PATH")]
    fallback: Option<String>,
    /// Cache-Control for paths matching GLOB: `GLOB=VALUE`, repeatable, first
    /// match wins; `VALUE` alone sets the value for other paths. Default:
    /// no-cache.
    #[arg(long = "cache-control", value_name = "[GLOB=]VALUE", value_parser = parse_cache_rule)]
    cache_control: Vec<String>,
    /// Do not send X-Content-Type-Options, X-Frame-Options and
    /// Referrer-Policy.
    #[arg(long)]
    no_security_headers: bool,
    /// Do not look for pre-compressed siblings (NAME.br, NAME.zst, NAME.gz).
    /// A sibling older than its file is never served.
    #[arg(long)]
    no_precompressed: bool,
    /// Do not compress text files that have no sibling on the fly (by
    /// default each is compressed once, off the event loop, when a client
    /// first accepts a coding for it, and the results kept within 64 MiB;
    /// it is sent in identity until then).
    #[arg(long)]
    no_compress: bool,
    /// Seconds a cached file (and `_headers`, `_redirects`) is trusted
    /// before it is looked at again: an edited file may be served as it
    /// was for this long. 0: look at every request.
    #[arg(long, value_name = "SECS", default_value = Options::new("").revalidate_interval.as_secs_f64().to_string(), value_parser = seconds_within(peregrine_files::REVALIDATE_INTERVAL_RANGE))]
    revalidate_interval: Option<f64>,
    /// Files each worker keeps in its cache (open handles, validators,
    /// pre-built heads, small files' bytes), as nginx's `open_file_cache
    /// max`; past it the least recently asked are dropped. A quarter of the
    /// descriptor limit bounds how many of them keep a file open.
    #[arg(long, value_name = "N", default_value_t = Options::new("").cache_entries as u64, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    cache_entries: u64,
}

impl FileArgs {
    fn options(&self, root: PathBuf) -> Options {
        let mut o = Options::new(root);
        o.index = self.index.clone();
        o.list_dirs = self.list_dirs;
        o.follow_symlinks = self.follow_symlinks;
        o.not_found_page = self.not_found.clone();
        o.fallback = self.fallback.clone();
        for rule in &self.cache_control {
            match split_cache_rule(rule) {
                (Some(glob), value) => o.cache_rules.push((glob.to_owned(), value.to_owned())),
                (None, _) => o.cache_control = Some(rule.clone()),
            }
        }
        o.security_headers = !self.no_security_headers;
        o.precompressed = !self.no_precompressed;
        o.compress = !self.no_compress;
        if let Some(secs) = self.revalidate_interval {
            // In range: the value parser checked it.
            o.revalidate_interval = Duration::try_from_secs_f64(secs).unwrap_or(o.revalidate_interval);
        }
        o.cache_entries = usize::try_from(self.cache_entries).unwrap_or(o.cache_entries);
        o
    }
}

/// A `--cache-control` rule as `(GLOB, VALUE)`, or `(None, VALUE)`: a
/// glob starts with `/` or holds `*` (`max-age=60` is a value).
fn split_cache_rule(rule: &str) -> (Option<&str>, &str) {
    match rule.split_once('=') {
        Some((glob, value)) if glob.starts_with('/') || glob.contains('*') => (Some(glob), value),
        _ => (None, rule),
    }
}

/// A value parser for `pack --cache-control VALUE`: directives, or refused
/// with the reason (`peregrine_files::check_cache_control`).
fn parse_cache_control(s: &str) -> Result<String, String> {
    peregrine_files::check_cache_control(s)?;
    Ok(s.to_owned())
}

/// A value parser for `serve --cache-control [GLOB=]VALUE`.
fn parse_cache_rule(s: &str) -> Result<String, String> {
    match split_cache_rule(s) {
        (Some(glob), value) => peregrine_files::check_cache_control(value).map_err(|e| format!("{glob}=...: {e}"))?,
        (None, value) => peregrine_files::check_cache_control(value)?,
    }
    Ok(s.to_owned())
}

/// Flags every serving command shares.
#[derive(Args, Debug)]
struct ServerArgs {
    /// Address to listen on; repeat for several. `IP:PORT` or `[IPv6]:PORT`;
    /// `HOST:PORT` binds every address HOST resolves to (`localhost:8080`:
    /// 127.0.0.1 and ::1); `:PORT` or `PORT` alone means 0.0.0.0:PORT, every
    /// IPv4 interface, as nginx's `listen PORT` (add `--bind [::]:PORT` for
    /// IPv6); `unix:PATH` a Unix-domain socket (plain HTTP/1.1 and h2c,
    /// mode 0660, a stale file from a previous run replaced, removed at
    /// exit; not with --tls-cert). Default: 127.0.0.1:8080, unless systemd passed listening
    /// sockets (LISTEN_FDS), which are always used.
    #[arg(long = "bind", value_name = "ADDR", value_parser = parse_bind)]
    bind: Vec<BindAddrs>,
    /// Worker threads, each with its own event loop. Default: one per core.
    #[arg(long, value_name = "N", value_parser = within(Limits::N_WORKERS_RANGE))]
    workers: Option<usize>,
    /// Write an access log line per request to PATH, or `-` for stdout;
    /// SIGUSR1 reopens the file (for logrotate). Default: none.
    #[arg(long, value_name = "PATH|-")]
    access_log: Option<String>,
    /// The access log's format: `combined` (Combined Log Format), `json`
    /// (with host, protocol and duration_us), or a template of nginx-like
    /// variables, e.g. `'$remote_addr "$request" $status $body_bytes_sent
    /// $request_time_us $host'`: $remote_addr, $remote_port, $time_local,
    /// $time_iso8601, $request, $request_method, $request_uri, $protocol
    /// (or $server_protocol), $host (or $http_host), $status,
    /// $body_bytes_sent, $request_time_us, $request_time (seconds),
    /// $http_referer, $http_user_agent; `${name}` when a letter follows.
    /// An unknown variable is refused at start. Default: combined.
    #[arg(long, default_value = "combined", value_name = "FORMAT")]
    access_log_format: peregrine::LogFormat,
    /// Append the error log (what the server says it does, warnings,
    /// errors) to PATH instead of standard error; SIGUSR1 reopens it, as
    /// it does the access log. Default: standard error.
    #[arg(long, value_name = "PATH")]
    error_log: Option<PathBuf>,
    /// The least severe error-log lines written: `error`,
    /// `warn`, `info` or `debug` (per-connection detail such as failed TLS
    /// handshakes; `PEREGRINE_DEBUG=1` also turns it on). Default: info.
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<peregrine::log::Level>,
    /// Serve Prometheus metrics at http://ADDR/metrics, and `ok` at
    /// /healthz, on a listener of their own (one more thread). Default: none.
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    metrics: Option<SocketAddr>,
    /// After binding, switch to this user (name or uid); needs root.
    /// Default: stay the user that started it.
    #[arg(long, value_name = "USER")]
    user: Option<String>,
    /// After binding, switch to this group. Default: the --user's group.
    #[arg(long, value_name = "GROUP")]
    group: Option<String>,
    /// Do not sandbox the process. By default, once the configuration is
    /// read, Landlock lets it read only beneath the root (an archive's
    /// directory), the certificates' and the configuration's directories,
    /// and write only the access log's; a seccomp allow-list refuses exec
    /// and every system call serving does not need (EPERM).
    #[arg(long)]
    no_sandbox: bool,
    /// Speak HTTP/1.1 only: no HTTP/2 by ALPN on TLS listeners, and no
    /// HTTP/2 with prior knowledge (h2c) on cleartext ones. Default: both
    /// protocols, on every listener.
    #[arg(long)]
    no_http2: bool,
    /// Speak HTTP/3 (QUIC over UDP) on every TLS address, on the same
    /// port, advertised by `Alt-Svc: h3=":PORT"` on HTTPS responses:
    /// `--http3` (or `--http3=true`) asks for it, and is refused without
    /// `--tls-cert`; `--http3=false` (`http3 = false` in the file,
    /// `PEREGRINE_HTTP3=0`) is `--no-http3`. Default: on when TLS is
    /// configured.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new(),
        conflicts_with = "no_http3"
    )]
    http3: Option<bool>,
    /// No HTTP/3: TLS addresses speak HTTP/1.1 and HTTP/2 over TCP only,
    /// and send no Alt-Svc.
    #[arg(long)]
    no_http3: bool,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    tls: TlsArgs,
}

/// The addresses one `--bind` value names, resolved when it is read (at
/// start, and again at each reload).
/// Or a Unix-domain socket's path (`unix:PATH`), with no address.
#[derive(Clone, Debug)]
struct BindAddrs(Vec<SocketAddr>, Option<PathBuf>);

impl BindAddrs {
    fn tcp(addrs: Vec<SocketAddr>) -> Self {
        BindAddrs(addrs, None)
    }
}

impl ServerArgs {
    /// `--user` and `--group` by number, looked up in the user and group
    /// databases; an error names the flags (and the file line) given.
    fn run_as(&self) -> anyhow::Result<peregrine::Identity> {
        let identity = peregrine::Identity {
            user: self.user.clone(),
            group: self.group.clone(),
        };
        identity.resolve().with_context(|| {
            let given: Vec<String> = [("--user", &self.user), ("--group", &self.group)]
                .iter()
                .filter_map(|(flag, v)| v.as_ref().map(|v| format!("{flag} {v}{}", config::origin(flag))))
                .collect();
            given.join(", ")
        })
    }

    /// The `--bind unix:PATH` sockets' paths. Refused with `--tls-cert`
    /// (every --bind would speak TLS, and TLS on a Unix socket is not
    /// supported).
    fn unix_binds(&self) -> anyhow::Result<Vec<&Path>> {
        let paths: Vec<&Path> = self.bind.iter().filter_map(|b| b.1.as_deref()).collect();
        if let (Some(path), false) = (paths.first(), self.tls.certs.is_empty()) {
            anyhow::bail!(
                "--bind unix:{}{}: with --tls-cert every --bind address speaks TLS, and TLS on a \
                 Unix-domain socket is not supported: serve it from a server without --tls-cert",
                path.display(),
                config::origin("--bind")
            );
        }
        Ok(paths)
    }

    /// Whether TLS addresses speak HTTP/3: `--http3`, `--http3=false` and
    /// `--no-http3` (which clap keeps apart), else on with TLS. Asking
    /// for it without TLS is refused rather than ignored: QUIC is always
    /// encrypted, so there is nothing to speak it on.
    fn http3(&self) -> anyhow::Result<bool> {
        let tls = !self.tls.certs.is_empty();
        match (self.http3, self.no_http3) {
            (Some(true), _) if !tls => anyhow::bail!(
                "--http3{} needs --tls-cert and --tls-key: HTTP/3 runs over QUIC, which is always \
                 encrypted, on the TLS addresses' ports",
                config::origin("--http3")
            ),
            (Some(wanted), _) => Ok(wanted),
            (None, no) => Ok(!no),
        }
    }
}

/// Parses a `--bind` value (see its help).
fn parse_bind(s: &str) -> Result<BindAddrs, String> {
    use std::net::ToSocketAddrs;
    const FORMS: &str = "expected IP:PORT, [IPv6]:PORT, HOST:PORT, :PORT, PORT or unix:PATH";
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(BindAddrs::tcp(vec![addr]));
    }
    if let Some(path) = s.strip_prefix("unix:") {
        if path.is_empty() {
            return Err("unix: needs the socket file's path, e.g. unix:/run/peregrine.sock".into());
        }
        return Ok(BindAddrs(Vec::new(), Some(PathBuf::from(path))));
    }
    if let Ok(ip) = s.parse::<std::net::IpAddr>() {
        return Err(format!("{ip} has no port: give {}", SocketAddr::new(ip, 8080)));
    }
    if let Ok(port) = s.strip_prefix(':').unwrap_or(s).parse::<u16>() {
        return Ok(BindAddrs::tcp(vec![SocketAddr::from(([0, 0, 0, 0], port))]));
    }
    let Some((host, port)) = s.rsplit_once(':').filter(|(h, _)| !h.is_empty() && !h.contains(':')) else {
        return Err(FORMS.into());
    };
    let port: u16 = port.parse().map_err(|_| format!("{port:?} is not a port: {FORMS}"))?;
    let mut addrs: Vec<SocketAddr> = Vec::new();
    let resolved = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host:?}: {e}"))?;
    for addr in resolved {
        if !addrs.contains(&addr) {
            addrs.push(addr);
        }
    }
    if addrs.is_empty() {
        return Err(format!("{host:?} resolves to no address"));
    }
    Ok(BindAddrs::tcp(addrs))
}

/// Parses an address that must be one socket (`--redirect-http`,
/// `--metrics`): the forms `--bind` takes, naming a single address.
fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let parsed = parse_bind(s)?;
    if parsed.1.is_some() {
        return Err(format!("{s}: a Unix-domain socket is for --bind only; give IP:PORT"));
    }
    match parsed.0[..] {
        [one] => Ok(one),
        ref several => Err(format!("{s} names {} addresses; give one", several.len())),
    }
}

/// HTTPS: with `--tls-cert`, every `--bind` address speaks TLS.
#[derive(Args, Debug)]
struct TlsArgs {
    /// Certificate chain (PEM, leaf first): serve HTTPS. Repeat with
    /// `--tls-key` for more sites: the first is the default, the others are
    /// chosen by the name the client asks for (SNI) among their own names.
    /// Default: none (plain HTTP).
    #[arg(long = "tls-cert", value_name = "PEM")]
    certs: Vec<PathBuf>,
    /// Private key (PEM) for the `--tls-cert` in the same position. Default:
    /// none.
    #[arg(long = "tls-key", value_name = "PEM")]
    keys: Vec<PathBuf>,
    /// Also listen for plain HTTP on ADDR, answering every request with a
    /// 308 redirect to the same URL over HTTPS. Default: none.
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    redirect_http: Option<SocketAddr>,
    /// Add `Strict-Transport-Security: max-age=SECONDS` to HTTPS responses.
    /// Default: none (no such field).
    #[arg(long, value_name = "SECONDS", value_parser = within(Limits::HSTS_SECS_RANGE))]
    hsts: Option<u64>,
}

impl TlsArgs {
    /// The certificates, if HTTPS was asked for.
    fn config(&self) -> anyhow::Result<Option<TlsConfig>> {
        // Each named with where it was set, when that was a file's line.
        anyhow::ensure!(
            self.certs.len() == self.keys.len(),
            "give one --tls-key per --tls-cert ({}{}, {}{})",
            counted(self.certs.len(), "certificate"),
            config::origin("--tls-cert"),
            counted(self.keys.len(), "key"),
            config::origin("--tls-key"),
        );
        for (cert, key) in self.certs.iter().zip(&self.keys) {
            swapped_pem(cert, key)?;
        }
        let mut pairs = self.certs.iter().zip(&self.keys);
        let Some((cert, key)) = pairs.next() else {
            let given = [
                ("--redirect-http", self.redirect_http.is_some()),
                ("--hsts", self.hsts.is_some()),
            ];
            if let Some((flag, _)) = given.iter().find(|(_, given)| *given) {
                anyhow::bail!("{flag}{} needs --tls-cert and --tls-key", config::origin(flag));
            }
            return Ok(None);
        };
        let mut tls = TlsConfig::from_pem_files(cert, key)?;
        for (cert, key) in pairs {
            tls = tls.with_cert(cert, key)?;
        }
        if let Some(secs) = self.hsts {
            tls = tls.hsts(Duration::from_secs(secs));
        }
        Ok(Some(tls))
    }
}

/// A certificate given as the key, or a key as the certificate (the two
/// files swapped, or the same file twice), said in those words: what the
/// PEM parser would say ("no private key found") does not tell which
/// mistake it was. Files that cannot be read are left to the loader's
/// message.
fn swapped_pem(cert: &std::path::Path, key: &std::path::Path) -> anyhow::Result<()> {
    // The labels of a PEM file's blocks: CERTIFICATE, PRIVATE KEY, ...
    let labels = |path: &std::path::Path| -> Option<Vec<String>> {
        let text = std::fs::read(path).ok()?;
        let text = String::from_utf8_lossy(&text);
        Some(
            text.lines()
                .filter_map(|l| l.trim().strip_prefix("-----BEGIN ")?.strip_suffix("-----"))
                .map(str::to_owned)
                .collect(),
        )
    };
    let is_key = |label: &String| label.ends_with("PRIVATE KEY");
    if let Some(labels) = labels(key) {
        if !labels.iter().any(is_key) && labels.iter().any(|l| l == "CERTIFICATE") {
            anyhow::bail!(
                "--tls-key {}{}: this file holds a certificate, not a private key (give the key that \
                 goes with --tls-cert {})",
                key.display(),
                config::origin("--tls-key"),
                cert.display()
            );
        }
    }
    if let Some(labels) = labels(cert) {
        if labels.iter().any(is_key) && !labels.iter().any(|l| l == "CERTIFICATE") {
            anyhow::bail!(
                "--tls-cert {}{}: this file holds a private key, not a certificate (give the \
                 certificate chain, leaf first)",
                cert.display(),
                config::origin("--tls-cert")
            );
        }
    }
    Ok(())
}

/// A value parser for a number that must lie in `range` (limits.rs says
/// why each range is what it is). Used by the config file and variables
/// too, so that a value out of range is named with its file and line.
fn within<T>(range: RangeInclusive<T>) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Clone + Send + Sync + 'static,
    T::Err: std::fmt::Display,
{
    move |s: &str| {
        let v: T = s.parse().map_err(|e| {
            // A number the type cannot hold (`-5` for a count,
            // 99999999999999999999) is out of range, and the range is what
            // helps; anything else is not a number at all.
            if s.parse::<i128>().is_ok() {
                format!("{s} is out of range: from {} to {}", range.start(), range.end())
            } else {
                format!("{s:?} is not a whole number: {e}")
            }
        })?;
        if !range.contains(&v) {
            return Err(format!(
                "{v} is out of range: from {} to {}",
                range.start(),
                range.end()
            ));
        }
        Ok(v)
    }
}

/// A value parser for seconds (fractions allowed) that must lie in `range`.
fn seconds_within(
    range: RangeInclusive<Duration>,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
        match Duration::try_from_secs_f64(v) {
            Ok(d) if range.contains(&d) => Ok(v),
            _ => Err(format!(
                "{v} is out of range: from {} to {} seconds",
                range.start().as_secs_f64(),
                range.end().as_secs_f64()
            )),
        }
    }
}

/// The engine's limits; defaults are those of `peregrine::Limits`, shown by
/// `--help` and `check-config`.
#[derive(Args, Debug)]
struct LimitArgs {
    /// Longest request head, in bytes (longer: 431).
    #[arg(long, value_name = "BYTES", default_value = Limits::default().head_bytes_max.to_string(), value_parser = within(Limits::HEAD_BYTES_MAX_RANGE))]
    head_bytes_max: Option<usize>,
    /// Longest request target, in bytes (longer: 414).
    #[arg(long, value_name = "BYTES", default_value = Limits::default().uri_bytes_max.to_string(), value_parser = within(Limits::URI_BYTES_MAX_RANGE))]
    uri_bytes_max: Option<usize>,
    /// Most header fields per request (more: 431).
    #[arg(long, value_name = "N", default_value = Limits::default().n_headers_max.to_string(), value_parser = within(Limits::N_HEADERS_MAX_RANGE))]
    n_headers_max: Option<usize>,
    /// Largest request body, in bytes (larger: 413).
    #[arg(long, value_name = "BYTES", default_value = Limits::default().body_bytes_max.to_string(), value_parser = within(Limits::BODY_BYTES_MAX_RANGE))]
    body_bytes_max: Option<u64>,
    /// Bytes of a request body nobody reads (a 405, a file asked with a
    /// body) read and thrown away after the answer to keep the
    /// connection; a body declared larger closes it.
    #[arg(long, value_name = "BYTES", default_value = Limits::default().discard_bytes_max.to_string(), value_parser = within(Limits::DISCARD_BYTES_MAX_RANGE))]
    discard_bytes_max: Option<u64>,
    /// Seconds allowed to receive a whole request head (then 408), one
    /// more per --min-rate-bytes-per-sec bytes of it up to
    /// --head-timeout-max.
    #[arg(long, value_name = "SECS", default_value = Limits::default().head_timeout.as_secs_f64().to_string(), value_parser = seconds_within(Limits::TIMEOUT_RANGE))]
    head_timeout: Option<f64>,
    /// The most seconds a head arriving steadily is given.
    #[arg(long, value_name = "SECS", default_value = Limits::default().head_timeout_max.as_secs_f64().to_string(), value_parser = seconds_within(Limits::TIMEOUT_RANGE))]
    head_timeout_max: Option<f64>,
    /// Seconds of grace for a request body; then it must keep arriving at
    /// --min-rate-bytes-per-sec over 5 s (else 408).
    #[arg(long, value_name = "SECS", default_value = Limits::default().body_timeout.as_secs_f64().to_string(), value_parser = seconds_within(Limits::TIMEOUT_RANGE))]
    body_timeout: Option<f64>,
    /// The slowest a request head or body may arrive, in bytes per second
    /// (0: no rate asked).
    #[arg(long, value_name = "N", default_value = Limits::default().min_rate_bytes_per_sec.to_string(), value_parser = within(Limits::MIN_RATE_BYTES_PER_SEC_RANGE))]
    min_rate_bytes_per_sec: Option<u64>,
    /// Seconds an idle keep-alive connection is kept.
    #[arg(long, value_name = "SECS", default_value = Limits::default().idle_timeout.as_secs_f64().to_string(), value_parser = seconds_within(Limits::TIMEOUT_RANGE))]
    idle_timeout: Option<f64>,
    /// Seconds a client may go without reading before it is dropped.
    #[arg(long, value_name = "SECS", default_value = Limits::default().send_timeout.as_secs_f64().to_string(), value_parser = seconds_within(Limits::TIMEOUT_RANGE))]
    send_timeout: Option<f64>,
    /// Most open connections per worker (more are refused with 503).
    #[arg(long, value_name = "N", default_value = Limits::default().n_conns_max.to_string(), value_parser = within(Limits::N_CONNS_MAX_RANGE))]
    n_conns_max: Option<usize>,
    /// Most open connections per client address and worker (IPv6: per
    /// /64); more are closed at accept. 0: no cap (behind a proxy).
    #[arg(long, value_name = "N", default_value = Limits::default().conns_per_ip_max.to_string(), value_parser = within(Limits::CONNS_PER_IP_MAX_RANGE))]
    conns_per_ip_max: Option<usize>,
    /// Bytes of request bodies a worker may hold buffered; past it, 503.
    #[arg(long, value_name = "BYTES", default_value = Limits::default().body_budget_bytes.to_string(), value_parser = within(Limits::BUDGET_BYTES_RANGE))]
    body_budget_bytes: Option<usize>,
    /// Bytes of answers a worker may hold queued; past it, clients with
    /// answers waiting are not read until they take them.
    #[arg(long, value_name = "BYTES", default_value = Limits::default().output_budget_bytes.to_string(), value_parser = within(Limits::BUDGET_BYTES_RANGE))]
    output_budget_bytes: Option<usize>,
    /// Pending response bytes above which pipelined requests wait until the
    /// client reads.
    #[arg(long, value_name = "BYTES", default_value = Limits::default().write_buffer_bytes_max.to_string(), value_parser = within(Limits::WRITE_BUFFER_BYTES_MAX_RANGE))]
    write_buffer_bytes_max: Option<usize>,
    /// Most concurrent streams per HTTP/2 connection (more are refused
    /// with RST_STREAM).
    #[arg(long, value_name = "N", default_value = Limits::default().h2_streams_max.to_string(), value_parser = within(Limits::H2_STREAMS_MAX_RANGE))]
    h2_streams_max: Option<u32>,
    /// Most concurrent request streams per HTTP/3 connection (QUIC stream
    /// credit: the client waits for more).
    #[arg(long, value_name = "N", default_value = Limits::default().h3_streams_max.to_string(), value_parser = within(Limits::H3_STREAMS_MAX_RANGE))]
    h3_streams_max: Option<u32>,
    /// Seconds an HTTP/3 connection may go without a packet from the
    /// client (QUIC's idle timeout).
    #[arg(long, value_name = "SECS", default_value = Limits::default().h3_idle_timeout.as_secs_f64().to_string(), value_parser = seconds_within(Limits::TIMEOUT_RANGE))]
    h3_idle_timeout: Option<f64>,
    /// Largest UDP payload HTTP/3 sends (the ceiling of path MTU discovery).
    #[arg(long, value_name = "BYTES", default_value = Limits::default().h3_udp_payload_bytes_max.to_string(), value_parser = within(Limits::H3_UDP_PAYLOAD_BYTES_MAX_RANGE))]
    h3_udp_payload_bytes_max: Option<u16>,
    /// QUIC handshakes in progress per worker beyond which new clients must
    /// first prove their address (Retry); 0: every client.
    #[arg(long, value_name = "N", default_value = Limits::default().h3_handshakes_before_retry.to_string(), value_parser = within(Limits::H3_HANDSHAKES_BEFORE_RETRY_RANGE))]
    h3_handshakes_before_retry: Option<usize>,
    /// Seconds given to requests in flight on shutdown.
    #[arg(long, value_name = "SECS", default_value = Limits::default().shutdown_timeout.as_secs_f64().to_string(), value_parser = seconds_within(Limits::TIMEOUT_RANGE))]
    shutdown_timeout: Option<f64>,
}

impl LimitArgs {
    fn to_limits(&self) -> anyhow::Result<Limits> {
        let mut l = Limits::default();
        let secs = |name: &str, v: f64| -> anyhow::Result<Duration> {
            Duration::try_from_secs_f64(v)
                .ok()
                .filter(|d| !d.is_zero())
                .with_context(|| format!("--{name} must be a positive number of seconds, not {v}"))
        };
        if let Some(v) = self.head_bytes_max {
            l.head_bytes_max = v;
        }
        if let Some(v) = self.uri_bytes_max {
            l.uri_bytes_max = v;
        }
        if let Some(v) = self.n_headers_max {
            l.n_headers_max = v;
        }
        if let Some(v) = self.body_bytes_max {
            l.body_bytes_max = v;
        }
        if let Some(v) = self.discard_bytes_max {
            l.discard_bytes_max = v;
        }
        if let Some(v) = self.head_timeout {
            l.head_timeout = secs("head-timeout", v)?;
        }
        if let Some(v) = self.head_timeout_max {
            l.head_timeout_max = secs("head-timeout-max", v)?;
        }
        if let Some(v) = self.body_timeout {
            l.body_timeout = secs("body-timeout", v)?;
        }
        if let Some(v) = self.min_rate_bytes_per_sec {
            l.min_rate_bytes_per_sec = v;
        }
        if let Some(v) = self.idle_timeout {
            l.idle_timeout = secs("idle-timeout", v)?;
        }
        if let Some(v) = self.send_timeout {
            l.send_timeout = secs("send-timeout", v)?;
        }
        if let Some(v) = self.n_conns_max {
            l.n_conns_max = v;
        }
        if let Some(v) = self.conns_per_ip_max {
            l.conns_per_ip_max = v;
        }
        if let Some(v) = self.body_budget_bytes {
            l.body_budget_bytes = v;
        }
        if let Some(v) = self.output_budget_bytes {
            l.output_budget_bytes = v;
        }
        if let Some(v) = self.write_buffer_bytes_max {
            l.write_buffer_bytes_max = v;
        }
        if let Some(v) = self.h2_streams_max {
            l.h2_streams_max = v;
        }
        if let Some(v) = self.h3_streams_max {
            l.h3_streams_max = v;
        }
        if let Some(v) = self.h3_idle_timeout {
            l.h3_idle_timeout = secs("h3-idle-timeout", v)?;
        }
        if let Some(v) = self.h3_udp_payload_bytes_max {
            l.h3_udp_payload_bytes_max = v;
        }
        if let Some(v) = self.h3_handshakes_before_retry {
            l.h3_handshakes_before_retry = v;
        }
        if let Some(v) = self.shutdown_timeout {
            l.shutdown_timeout = secs("shutdown-timeout", v)?;
        }
        Ok(l)
    }
}

fn main() -> ExitCode {
    logger::install();
    // Flags, PEREGRINE_* variables and a --config file, merged (config.rs).
    let argv: Vec<OsString> = std::env::args_os().collect();
    let result = config::parse::<Cli>(argv.clone()).and_then(|invocation| match invocation {
        config::Invocation::Run(cli) => run(cli, argv),
        config::Invocation::Check(cli, settings) => check(&cli, &argv).map(|()| print!("{settings}")),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("peregrine: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli, argv: Vec<OsString>) -> anyhow::Result<()> {
    // Thousands of connections need more than the usual 1,024 descriptors.
    if let Err(e) = peregrine::raise_open_files_limit() {
        peregrine::log::warn(format_args!("cannot raise the open files limit: {e}"));
    }
    match cli.command {
        // Served until SIGINT/SIGTERM; SIGHUP reloads the configuration.
        command @ (Command::Hello { .. } | Command::Serve { .. }) => reload::serve(argv, command)?,
        Command::Pack {
            root,
            output,
            hosts,
            cache_control,
            no_security_headers,
            no_compress,
        } => {
            let mut opts = PackOptions::new(root, &output);
            for h in hosts {
                let (name, dir) = h
                    .split_once('=')
                    .with_context(|| format!("--host {h:?}: expected NAME=DIR"))?;
                opts.hosts.push((name.to_owned(), PathBuf::from(dir)));
            }
            opts.cache_control = cache_control;
            opts.security_headers = !no_security_headers;
            opts.compress = !no_compress;
            let opts_compress = opts.compress;
            opts.progress = true;
            let stats = peregrine_archive::pack(&opts).map_err(anyhow::Error::msg)?;
            for (s, why) in &stats.skipped_symlinks {
                eprintln!("peregrine: skipped {s}: {why}");
            }
            for s in &stats.skipped_loops {
                eprintln!("peregrine: skipped {s}: a symlink loop (it leads back to a directory above it)");
            }
            eprintln!(
                "peregrine: packed {} ({} bytes read) into {}: {} bytes, with every response's head{}",
                counted(stats.n_files, "file"),
                stats.bytes_in,
                output.display(),
                stats.archive_bytes,
                if opts_compress {
                    " and its compressed variants"
                } else {
                    ""
                }
            );
        }
        Command::Archive { command } => archive_command(command)?,
        Command::Probe { url } => probe(&url)?,
        Command::Completions { shell } => docs::completions(config::command::<Cli>(), shell)?,
        Command::Man { command, out_dir } => {
            docs::man(config::command::<Cli>(), command.as_deref(), out_dir.as_deref())?
        }
    }
    Ok(())
}

/// `check-config`: what `run` checks before it binds, without binding (the
/// port may well be in use by the server being reconfigured).
/// What building the server would refuse, without binding anything or
/// taking systemd's sockets: `reload::build` makes the same checks.
fn check_server(args: &ServerArgs) -> anyhow::Result<()> {
    let limits = args.limits.to_limits()?;
    eprintln!("peregrine: {}", memory_line(&limits));
    args.unix_binds()?;
    args.tls.config()?;
    args.http3()?;
    Ok(())
}

fn check(cli: &Cli, argv: &[OsString]) -> anyhow::Result<()> {
    // The checks run inside the sandbox serving would run in: the files
    // they read must be readable there too.
    peregrine_files::read_descriptor_limit();
    // Looked up as `serve` does, before the sandbox hides the user
    // database: a user that does not exist must fail here, not at start.
    let args = reload::server_args(&cli.command);
    let run_as = args.run_as()?;
    // A warning, not a failure: the configuration is not at fault, and
    // the server may be started by another user than this check.
    if let Some(why) = root_refusal(&cli.command, &run_as) {
        peregrine::log::warn(format_args!("{why} (as this user, serving would not start)"));
    }
    let sandbox = sandbox::enter(&cli.command, argv)?;
    eprintln!("peregrine: {sandbox}");
    match &cli.command {
        Command::Hello { server } => check_server(server)?,
        Command::Serve {
            root,
            files,
            archive,
            server,
            ..
        } => {
            check_server(server)?;
            if is_archive_root(root, files, archive)? {
                Archive::open(root, Mode::Map)?;
            } else {
                FileServer::new(files.options(root.clone()))?;
                // As serving would warn at start; `check-config` does not
                // become `--user`, so what it reads is read as itself.
                let itself = peregrine::Identity {
                    user: None,
                    group: None,
                };
                reload::warn_if_nothing_to_serve(root, &files.index, &itself);
            }
        }
        _ => unreachable!("check-config takes only the serving subcommands"),
    }
    Ok(())
}

/// The worst-case memory per worker, as `check-config` states it.
fn memory_line(l: &Limits) -> String {
    const MIB: u64 = 1 << 20;
    let total = l.worst_case_bytes_per_worker();
    let per_conn = (total - l.body_budget_bytes as u64 - l.output_budget_bytes as u64) / (l.n_conns_max.max(1) as u64);
    format!(
        "memory per worker at most {} MiB: request bodies {} MiB + queued answers {} MiB + {} connections x {} KiB",
        total.div_ceil(MIB),
        l.body_budget_bytes as u64 / MIB,
        l.output_budget_bytes as u64 / MIB,
        l.n_conns_max,
        per_conn / 1024
    )
}

/// Why `serve` must not run as this process: started as root and staying
/// root (no `--user`, or `--user` naming uid 0) without `--allow-root`.
/// Root reads every file whatever its mode, so a file locked away from
/// everyone (mode 000, or readable by its owner only) would be served,
/// where any other user gets 403. `hello` reads no file: not refused.
/// `run_as` is `--user` and `--group` resolved to numbers.
fn root_refusal(command: &Command, run_as: &peregrine::Identity) -> Option<String> {
    let Command::Serve {
        allow_root: false,
        server,
        ..
    } = command
    else {
        return None;
    };
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    const WHY: &str = "root reads every file, whatever its mode, so a file made unreadable (mode 000) \
                       would be served; pass --user NAME to give up root once the ports are bound, or \
                       --allow-root (allow-root = true) to serve as root anyway";
    match (run_as.user.as_deref(), &server.user) {
        (None, _) => Some(format!("refusing to run as root without --user: {WHY}")),
        (Some("0"), Some(user)) => Some(format!(
            "refusing to run as root: --user {user}{} is root (uid 0): {WHY}",
            config::origin("--user")
        )),
        _ => None,
    }
}

/// `1 key`, `2 keys`.
fn counted(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// Whether `serve ROOT` serves an archive: any file that is not a
/// directory is taken for one, so that a wrong file is named as "not a
/// Peregrine archive" (with what it starts with) rather than as a directory
/// that cannot be opened. Refuses the flags that mean nothing for what ROOT
/// is, which would otherwise be silently ignored.
fn is_archive_root(root: &std::path::Path, files: &FileArgs, archive: &ServeArchiveArgs) -> anyhow::Result<bool> {
    // A root that is not there, named with where it was set (a file's line,
    // a variable) as the pairs' errors are.
    let metadata = std::fs::metadata(root)
        .with_context(|| format!("cannot serve {}{}", root.display(), config::origin("root")))?;
    let is_archive = !metadata.is_dir();
    let shown = root.display();
    if is_archive {
        // Each with where its setting lives in an archive.
        let misplaced = [
            (
                files.index != [DEFAULT_INDEX],
                "--index",
                "pack serves index.html for a directory",
            ),
            (files.list_dirs, "--list-dirs", "an archive has no listings"),
            (
                files.follow_symlinks,
                "--follow-symlinks",
                "pack decides which symlinks it follows",
            ),
            (files.not_found.is_some(), "--404", "pack takes _404.html"),
            (files.fallback.is_some(), "--fallback", "pack takes _wildcard.*"),
            (
                !files.cache_control.is_empty(),
                "--cache-control",
                "use pack --cache-control or _headers",
            ),
            (
                files.no_security_headers,
                "--no-security-headers",
                "use pack --no-security-headers",
            ),
            (files.no_precompressed, "--no-precompressed", "use pack --no-compress"),
            (files.no_compress, "--no-compress", "use pack --no-compress"),
            (
                files.revalidate_interval != Some(Options::new("").revalidate_interval.as_secs_f64()),
                "--revalidate-interval",
                "an archive is swapped whole when its file is replaced",
            ),
            (
                files.cache_entries != Options::new("").cache_entries as u64,
                "--cache-entries",
                "an archive is mapped whole, with every head pre-built",
            ),
        ];
        let given: Vec<String> = misplaced
            .iter()
            .filter(|(given, ..)| *given)
            .map(|(_, flag, instead)| format!("{flag}{} ({instead})", config::origin(flag)))
            .collect();
        anyhow::ensure!(
            given.is_empty(),
            "{shown} is an archive, whose answers were fixed when it was packed, so these flags for a \
             directory mean nothing here: {}",
            given.join(", ")
        );
    } else {
        let misplaced = [(archive.in_memory, "--in-memory"), (archive.prefault, "--prefault")];
        let given: Vec<String> = misplaced
            .iter()
            .filter(|(given, _)| *given)
            .map(|(_, flag)| format!("{flag}{}", config::origin(flag)))
            .collect();
        anyhow::ensure!(
            given.is_empty(),
            "{} applies to an archive, and {shown} is a directory",
            given.join(" and ")
        );
    }
    Ok(is_archive)
}

/// Time a probe waits to connect, and then for the answer's first line.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// `peregrine probe URL`: one GET over plain HTTP/1.1, the status line read.
fn probe(url: &str) -> anyhow::Result<()> {
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

/// The body encodings an archive entry may hold, in variant order.
const ENCODINGS: [&str; 4] = ["identity", "br", "zstd", "gzip"];

/// How `archive ls` and `verify` name an archive's sites: `default` for the
/// site served when no `--host` name matches, else its host names.
fn site_labels(a: &Archive) -> std::collections::BTreeMap<u32, String> {
    let mut labels = std::collections::BTreeMap::from([(0, "default".to_owned())]);
    for (host, site) in a.hosts() {
        labels
            .entry(site)
            .and_modify(|l| {
                if site != 0 {
                    *l = format!("{l},{host}");
                }
            })
            .or_insert(host);
    }
    labels
}

/// An entry's key as a reader would write it: the conventions' internal
/// keys (`/\0not-found`, `DIR/\0wildcard`) by what they are, other bytes
/// that are not printable escaped.
fn shown_key(e: &peregrine_archive::read::Entry<'_>) -> String {
    use peregrine_archive::format::{FLAG_NOT_FOUND, WILDCARD_KEY};
    let path = e.path();
    if e.flags() & FLAG_NOT_FOUND != 0 {
        return "(the 404 page)".to_owned();
    }
    if let Some(folder) = path.strip_suffix(WILDCARD_KEY.as_bytes()) {
        return format!("{}* (wildcard)", folder.escape_ascii());
    }
    path.escape_ascii().to_string()
}

fn archive_command(command: ArchiveCommand) -> anyhow::Result<()> {
    use peregrine_archive::format::{FLAG_NOT_FOUND, KIND_PATTERN, KIND_REDIRECT};
    use std::io::Write;
    match command {
        ArchiveCommand::Ls { archive } => {
            let a = Archive::open(&archive, Mode::Map)?;
            let labels = site_labels(&a);
            let mut rows = vec![[
                "SITE".to_owned(),
                "PATH".to_owned(),
                "STATUS".to_owned(),
                format!("BODY BYTES ({})", ENCODINGS.join(" ")),
            ]];
            for e in a.entries() {
                let site = labels
                    .get(&e.site())
                    .cloned()
                    .unwrap_or_else(|| format!("site {}", e.site()));
                let (status, body) = match e.kind() {
                    KIND_REDIRECT | KIND_PATTERN => (e.status(), format!("-> {}", e.location().escape_ascii())),
                    _ => {
                        let sizes: Vec<String> = (0..ENCODINGS.len())
                            .map(|i| e.variant(i).map_or("-".to_owned(), |v| v.body_len.to_string()))
                            .collect();
                        let status = if e.flags() & FLAG_NOT_FOUND != 0 { 404 } else { 200 };
                        (status, sizes.join(" "))
                    }
                };
                rows.push([site, shown_key(&e), status.to_string(), body]);
            }
            let mut widths = [0; 3];
            for row in &rows {
                for (w, cell) in widths.iter_mut().zip(row) {
                    *w = (*w).max(cell.chars().count());
                }
            }
            let mut out = std::io::stdout().lock();
            for [site, path, status, body] in rows {
                let [w0, w1, w2] = widths;
                if writeln!(out, "{site:w0$}  {path:w1$}  {status:w2$}  {body}").is_err() {
                    break; // a closed pipe (`| head`) is not an error
                }
            }
        }
        ArchiveCommand::Cat { archive, path, host } => {
            let a = Archive::open(&archive, Mode::Map)?;
            let site = a.site_for_host(host.as_deref());
            let e = a
                .get(site, path.as_bytes())
                .with_context(|| format!("{path}: no such entry in {}", archive.display()))?;
            let v = e
                .variant(0)
                .with_context(|| format!("{path}: not a file (a redirect)"))?;
            std::io::stdout().write_all(a.slice(v.body_off, v.body_len))?;
        }
        ArchiveCommand::Verify { archive } => {
            let a = Archive::open(&archive, Mode::Map)?;
            let shown = archive.display();
            // Each body first, so that a damaged one is named; then the
            // data checksum, which also covers the response heads.
            let labels = site_labels(&a);
            let mut damaged = Vec::new();
            for e in a.entries() {
                for (i, encoding) in ENCODINGS.iter().enumerate() {
                    let Some(v) = e.variant(i) else { continue };
                    if peregrine_archive::format::hash(a.slice(v.body_off, v.body_len)) != v.body_hash {
                        let site = labels.get(&e.site()).map_or("?", String::as_str);
                        damaged.push(format!("{} ({encoding}, site {site})", shown_key(&e)));
                    }
                }
            }
            anyhow::ensure!(
                damaged.is_empty(),
                "{shown}: damaged: checksum mismatch in the body of {}",
                damaged.join(", ")
            );
            a.verify_data().with_context(|| format!("{shown}: damaged"))?;
            eprintln!("peregrine: {shown}: OK ({} entries)", a.n_entries());
        }
        ArchiveCommand::Stat { archive } => {
            let a = Archive::open(&archive, Mode::Map)?;
            let (mut resources, mut redirects, mut bodies) = (0, 0, 0u64);
            for e in a.entries() {
                if e.kind() == KIND_REDIRECT || e.kind() == KIND_PATTERN {
                    redirects += 1;
                } else {
                    resources += 1;
                    bodies += (0..4).filter_map(|i| e.variant(i)).map(|v| v.body_len).sum::<u64>();
                }
            }
            println!("archive: {}", archive.display());
            println!("bytes: {}", a.len());
            println!(
                "entries: {} ({resources} resources, {redirects} redirects)",
                a.n_entries()
            );
            println!("body bytes referenced (all encodings, before dedup): {bodies}");
            for (host, site) in a.hosts() {
                println!("host: {host} -> site {site}");
            }
        }
    }
    Ok(())
}
