//! The flags every serving command shares (`ServerArgs`): addresses, with
//! their parsers (`--bind`, one-address flags), workers, logs, protocols,
//! the engine's limits (`LimitArgs`) and HTTPS (`TlsArgs`).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use peregrine::client_addr::{AddrField, TrustedProxies};
use peregrine::Limits;

use super::numbers::{seconds_within, within};

/// Flags every serving command shares.
#[derive(Args, Debug)]
pub(crate) struct ServerArgs {
    /// Address to listen on; repeat for several. `IP:PORT` or `[IPv6]:PORT`;
    /// `HOST:PORT` binds every address HOST resolves to (`localhost:8080`:
    /// 127.0.0.1 and ::1); `:PORT` or `PORT` alone means every interface,
    /// IPv4 and IPv6 (0.0.0.0:PORT and [::]:PORT, where the host has IPv6),
    /// as Caddy's `:PORT`; `unix:PATH` a Unix-domain socket (plain HTTP/1.1 and h2c,
    /// mode 0660, a stale file from a previous run replaced, removed at
    /// exit; not with --tls-cert). Default: 127.0.0.1:8080, unless systemd passed listening
    /// sockets (LISTEN_FDS), which are always used; with ACME sites, :443 and
    /// --redirect-http :80 (as Caddy). `--listen` is the same
    /// flag, under Caddy's name.
    #[arg(long = "bind", visible_alias = "listen", value_name = "ADDR", value_parser = parse_bind)]
    pub(crate) bind: Vec<BindAddrs>,
    /// Worker threads, each with its own event loop. Default: one per core.
    #[arg(long, value_name = "N", value_parser = within(Limits::N_WORKERS_RANGE))]
    pub(crate) workers: Option<usize>,
    /// Write an access log line per request to PATH, or `-` for stdout;
    /// SIGUSR1 reopens the file (for logrotate). Default: none.
    #[arg(long, value_name = "PATH|-")]
    pub(crate) access_log: Option<String>,
    /// The access log's format: `combined` (Combined Log Format), `json`
    /// (with host, protocol and duration_us), or a template of nginx-like
    /// variables, e.g. `'$remote_addr "$request" $status $body_bytes_sent
    /// $request_time_us $host'`: $remote_addr, $remote_port, $time_local,
    /// $time_iso8601, $request, $request_method, $request_uri, $protocol
    /// (or $server_protocol), $host (or $http_host), $status,
    /// $body_bytes_sent, $request_time_us, $request_time (seconds),
    /// $ttfb_us, $ttfb, $http_referer, $http_user_agent, $request_id,
    /// $http_traceparent, $ssl_protocol, $ssl_session_reused, $reason;
    /// `${name}` when a letter follows. The request time runs to the
    /// answer's last byte written; $ttfb to its head.
    /// An unknown variable is refused at start. Default: combined.
    #[arg(long, default_value = "combined", value_name = "FORMAT")]
    pub(crate) access_log_format: peregrine::LogFormat,
    /// Return each request's id to the client as `X-Request-ID` on every
    /// answer (proxied ones included, unless the upstream's answer has
    /// one): the id the access log writes as $request_id and the reverse
    /// proxy sends upstream (an `X-Request-ID` from a --trusted-proxies
    /// peer, else one made here). Default: off, as nginx and Caddy add it
    /// only when configured.
    #[arg(long)]
    pub(crate) request_id_header: bool,
    /// Append the error log (what the server says it does, warnings,
    /// errors) to PATH instead of standard error; SIGUSR1 reopens it, as
    /// it does the access log. Default: standard error.
    #[arg(long, value_name = "PATH")]
    pub(crate) error_log: Option<PathBuf>,
    /// How error-log lines are written: `text`
    /// (`2026-11-26T16:32:23.123Z [warn] peregrine: MESSAGE`) or `json`
    /// (`{"time":"...","level":"warn","message":"..."}`, one object a
    /// line). Both carry the time (RFC 3339, UTC, milliseconds) and the
    /// level. Default: text.
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    pub(crate) error_log_format: crate::logger::Format,
    /// The least severe error-log lines written: `error`,
    /// `warn`, `info` or `debug` (per-connection detail such as failed TLS
    /// handshakes; `PEREGRINE_DEBUG=1` also turns it on). Default: info.
    #[arg(long, value_name = "LEVEL")]
    pub(crate) log_level: Option<peregrine::log::Level>,
    /// Serve Prometheus metrics at http://ADDR/metrics, and the health
    /// endpoints /livez (every worker's loop turned within 2 s),
    /// /readyz (serving, not draining, every automatic-HTTPS name holding
    /// its certificate) and /healthz (as /livez), on a listener of their
    /// own (one more thread). Default: none.
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    pub(crate) metrics: Option<SocketAddr>,
    /// After binding, switch to this user (name or uid); needs root.
    /// Default: stay the user that started it.
    #[arg(long, value_name = "USER")]
    pub(crate) user: Option<String>,
    /// After binding, switch to this group. Default: the --user's group.
    #[arg(long, value_name = "GROUP")]
    pub(crate) group: Option<String>,
    /// Do not sandbox the process. By default, once the configuration is
    /// read, Landlock lets it read only beneath the root (an archive's
    /// directory), the certificates' and the configuration's directories,
    /// and write only the access log's; a seccomp allow-list refuses exec
    /// and every system call serving does not need (EPERM).
    #[arg(long)]
    pub(crate) no_sandbox: bool,
    /// Poll the --config file once a second and reload (as SIGHUP does)
    /// when it changes: its contents, or what its path leads to (a
    /// Kubernetes ConfigMap or Secret volume swaps a symlink). Read at
    /// start; a reload does not turn it on or off. Default: off.
    #[arg(long)]
    pub(crate) watch_config: bool,
    /// Speak HTTP/1.1 only: no HTTP/2 by ALPN on TLS listeners, and no
    /// HTTP/2 with prior knowledge (h2c) on cleartext ones. Default: both
    /// protocols, on every listener.
    #[arg(long)]
    pub(crate) no_http2: bool,
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
    pub(crate) http3: Option<bool>,
    /// No HTTP/3: TLS addresses speak HTTP/1.1 and HTTP/2 over TCP only,
    /// and send no Alt-Svc.
    #[arg(long)]
    pub(crate) no_http3: bool,
    /// Trust the proxies at these addresses (`127.0.0.1`, `10.0.0.0/8`,
    /// `::1`, `fd00::/8`; repeat, or separate with commas) to say who
    /// their clients are: a request from one is logged (and judged) as
    /// from the right-most address of --client-addr-header that is not a
    /// trusted proxy, walked from the right as nginx's
    /// `real_ip_recursive` and Caddy's `trusted_proxies` do; from any
    /// other peer the field is ignored. Also the sources --proxy-protocol
    /// accepts. Default: none (the client is the connection's peer).
    #[arg(long = "trusted-proxies", value_name = "CIDR", value_parser = parse_trusted_proxies)]
    pub(crate) trusted_proxies: Vec<TrustedProxies>,
    /// The request field a trusted proxy names its client in:
    /// `x-forwarded-for` (`client, proxy1, ...`) or `forwarded` (RFC
    /// 7239's `for=`); only one is read, so a client cannot fill in the
    /// other. Default: x-forwarded-for.
    #[arg(long, value_name = "FIELD", default_value = "x-forwarded-for")]
    pub(crate) client_addr_header: AddrField,
    /// Every --bind listener (and socket systemd passes) requires a PROXY
    /// protocol header, v1 or v2 (HAProxy's; what AWS NLB and HAProxy's
    /// `send-proxy` write) before HTTP or TLS, from a --trusted-proxies
    /// address only: other peers, and a missing, malformed or late header
    /// (--proxy-header-timeout), are closed unanswered. The header's
    /// source is the client. Refused without --trusted-proxies and with a
    /// `unix:` bind. Every connection counts against
    /// --conns-per-ip-max as the balancer's: raise it, or set 0. Default:
    /// off (no header is read).
    #[arg(long)]
    pub(crate) proxy_protocol: bool,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
    #[command(flatten)]
    pub(crate) tls: TlsArgs,
}

impl ServerArgs {
    /// The --trusted-proxies, as one list.
    pub(crate) fn trusted(&self) -> TrustedProxies {
        self.trusted_proxies
            .iter()
            .flat_map(|t| t.networks().iter().copied())
            .collect()
    }

    /// The sources a listener accepts a PROXY header from, with
    /// --proxy-protocol; refused without --trusted-proxies (no source
    /// would be accepted) and with a `unix:` bind (no address to check).
    pub(crate) fn proxy_sources(&self) -> anyhow::Result<Option<TrustedProxies>> {
        if !self.proxy_protocol {
            return Ok(None);
        }
        let trusted = self.trusted();
        anyhow::ensure!(
            !trusted.is_empty(),
            "--proxy-protocol needs --trusted-proxies: the addresses of the proxies or load balancers \
             whose PROXY headers are believed (every other connection is refused)"
        );
        if let Some(path) = self.bind.iter().find_map(|b| b.1.as_ref()) {
            anyhow::bail!(
                "--proxy-protocol: unix:{} cannot take the PROXY protocol (its clients have no address to \
                 check against --trusted-proxies)",
                path.display()
            );
        }
        Ok(Some(trusted))
    }
}

/// Parses a `--trusted-proxies` value: networks, separated by commas or
/// spaces.
fn parse_trusted_proxies(s: &str) -> Result<TrustedProxies, String> {
    let list: TrustedProxies = s
        .parse()
        .map_err(|e: peregrine::client_addr::TrustedProxiesError| e.to_string())?;
    if list.is_empty() {
        return Err("no address: give IP or IP/PREFIX, e.g. 10.0.0.0/8".into());
    }
    Ok(list)
}

/// The addresses one `--bind` value names, resolved when it is read (at
/// start, and again at each reload).
/// Or a Unix-domain socket's path (`unix:PATH`), with no address.
#[derive(Clone, Debug)]
pub(crate) struct BindAddrs(pub(crate) Vec<SocketAddr>, pub(crate) Option<PathBuf>);

impl BindAddrs {
    fn tcp(addrs: Vec<SocketAddr>) -> Self {
        BindAddrs(addrs, None)
    }
}

/// Parses a `--bind` value (see its help).
pub(crate) fn parse_bind(s: &str) -> Result<BindAddrs, String> {
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
        // Dual stack, as Caddy's `:PORT`: two sockets (IPv6 ones are
        // IPv6-only), the IPv6 one where the host has IPv6. Port 0 is
        // IPv4's alone: the two would get different ephemeral ports.
        let mut addrs = vec![SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, port))];
        if port != 0 && has_ipv6() {
            addrs.push(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)));
        }
        return Ok(BindAddrs::tcp(addrs));
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

/// Whether this host can listen on IPv6 at all (a kernel booted with
/// `ipv6.disable=1`, or a container without it, cannot): `:PORT` binds
/// `[::]:PORT` only then, so that it still starts there.
fn has_ipv6() -> bool {
    std::net::TcpListener::bind((std::net::Ipv6Addr::UNSPECIFIED, 0)).is_ok()
}

/// Parses `--ktls` (`off` or `auto`).
fn parse_ktls(s: &str) -> Result<peregrine::KernelTls, String> {
    s.parse()
}

/// Parses an address that must be one socket (`--redirect-http`,
/// `--metrics`): the forms `--bind` takes, naming a single address
/// (`:PORT` is `0.0.0.0:PORT` here).
fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    // One socket: a bare port is IPv4's every interface here (`--bind`
    // adds IPv6's).
    if let Ok(port) = s.strip_prefix(':').unwrap_or(s).parse::<u16>() {
        return Ok(SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, port)));
    }
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
pub(crate) struct TlsArgs {
    /// Certificate chain (PEM, leaf first): serve HTTPS. Repeat with
    /// `--tls-key` for more sites: the first is the default, the others are
    /// chosen by the name the client asks for (SNI) among their own names.
    /// Default: none (plain HTTP).
    #[arg(long = "tls-cert", value_name = "PEM")]
    pub(crate) certs: Vec<PathBuf>,
    /// Private key (PEM) for the `--tls-cert` in the same position. Default:
    /// none.
    #[arg(long = "tls-key", value_name = "PEM")]
    pub(crate) keys: Vec<PathBuf>,
    /// Also listen for plain HTTP on ADDR, answering every request with a
    /// 308 redirect to the same URL over HTTPS. Default: none.
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    pub(crate) redirect_http: Option<SocketAddr>,
    /// Add `Strict-Transport-Security: max-age=SECONDS` to HTTPS responses.
    /// Default: none (no such field).
    #[arg(long, value_name = "SECONDS", value_parser = within(Limits::HSTS_SECS_RANGE))]
    pub(crate) hsts: Option<u64>,
    /// Kernel TLS: `auto` hands an HTTP/1.1 file body of 64 KiB or more
    /// over TLS 1.3 to the kernel (its keys by `setsockopt(SOL_TLS)`, the
    /// file by sendfile) where the kernel has its `tls` module; `off`
    /// keeps every byte in rustls. The start says which. Default: auto.
    #[arg(long, value_name = "off|auto", default_value = "auto", value_parser = parse_ktls)]
    pub(crate) ktls: peregrine::KernelTls,
    /// Session-ticket keys shared by a fleet (nginx's
    /// ssl_session_ticket_key sizes): 80 random bytes (or 48), or two such
    /// keys one after the other, the current first (`openssl rand 80`).
    /// Read again at a reload; never rotated by Peregrine (replace the
    /// file, then reload). Default: a random key per process, rotated
    /// every 12 hours, kept across reloads and binary upgrades.
    #[arg(long, value_name = "FILE")]
    pub(crate) tls_ticket_key_file: Option<PathBuf>,
    /// Automatic HTTPS: the ACME CA's directory URL. Each site with no
    /// certificate files gets its certificate from this CA, ordered by a
    /// separate, unsandboxed process. Default: none (no ACME).
    #[arg(long, value_name = "URL")]
    pub(crate) acme_ca: Option<String>,
    /// The contact e-mail given to the ACME CA. Default: none.
    #[arg(long, value_name = "EMAIL")]
    pub(crate) acme_email: Option<String>,
    /// The root certificate (PEM) the ACME CA's HTTPS is checked against
    /// (a private CA); implies --acme-ca-private. Default: the system's.
    #[arg(long, value_name = "PEM")]
    pub(crate) acme_ca_root: Option<PathBuf>,
    /// The ACME CA is private: it may issue for names no public CA does
    /// (localhost, .test, .internal, ...). Default: off.
    #[arg(long)]
    pub(crate) acme_ca_private: bool,
    /// Where the ACME account key and certificates are kept (made 0700,
    /// keys 0600). Default: /var/lib/peregrine.
    #[arg(long, value_name = "DIR")]
    pub(crate) acme_state_dir: Option<PathBuf>,
    /// The ACME challenge answered: tls-alpn-01 (on the HTTPS listener)
    /// or http-01 (on --redirect-http's listener). Default: http-01 with
    /// --redirect-http, else tls-alpn-01.
    #[arg(long, value_name = "TYPE", value_parser = ["tls-alpn-01", "http-01"])]
    pub(crate) acme_challenge: Option<String>,
    /// The type of the key of each ACME certificate: ecdsa-p256 or
    /// rsa2048 (for clients that know no ECDSA). A stored certificate
    /// with a key of the other type is replaced by a new order, at once.
    /// Default: ecdsa-p256.
    #[arg(long, value_name = "TYPE", value_parser = crate::acme::agent::KeyType::NAMES)]
    pub(crate) acme_key_type: Option<String>,
    /// External Account Binding (ZeroSSL, Google Trust Services): the key
    /// id the CA gave, with --acme-eab-hmac-key. Default: none.
    #[arg(long, value_name = "KID")]
    pub(crate) acme_eab_kid: Option<String>,
    /// External Account Binding: the HMAC key the CA gave (base64url).
    /// Default: none.
    #[arg(long, value_name = "KEY")]
    pub(crate) acme_eab_hmac_key: Option<String>,
}

/// The engine's limits; defaults are those of `peregrine::Limits`, shown by
/// `--help` and `check-config`.
#[derive(Args, Debug)]
pub(crate) struct LimitArgs {
    /// Longest request head, in bytes (longer: 431).
    #[arg(long, value_name = "BYTES", default_value = Limits::default().head_bytes_max.to_string(), value_parser = within(Limits::HEAD_BYTES_MAX_RANGE))]
    pub(crate) head_bytes_max: Option<usize>,
    /// Longest request target, in bytes (longer: 414).
    #[arg(long, value_name = "BYTES", default_value = Limits::default().uri_bytes_max.to_string(), value_parser = within(Limits::URI_BYTES_MAX_RANGE))]
    pub(crate) uri_bytes_max: Option<usize>,
    /// Most header fields per request (more: 431).
    #[arg(long, value_name = "N", default_value = Limits::default().n_headers_max.to_string(), value_parser = within(Limits::N_HEADERS_MAX_RANGE))]
    pub(crate) n_headers_max: Option<usize>,
    /// Largest request body, in bytes (larger: 413).
    #[arg(long, value_name = "BYTES", default_value = Limits::default().body_bytes_max.to_string(), value_parser = within(Limits::BODY_BYTES_MAX_RANGE))]
    pub(crate) body_bytes_max: Option<u64>,
    /// Bytes of a request body nobody reads (a 405, a file asked with a
    /// body) read and thrown away after the answer to keep the
    /// connection; a body declared larger closes it.
    #[arg(long, value_name = "BYTES", default_value = Limits::default().discard_bytes_max.to_string(), value_parser = within(Limits::DISCARD_BYTES_MAX_RANGE))]
    pub(crate) discard_bytes_max: Option<u64>,
    /// Seconds allowed to receive a whole request head (then 408), one
    /// more per --min-rate-bytes-per-sec bytes of it up to
    /// --head-timeout-max.
    #[arg(long, value_name = "SECS", default_value = Limits::default().head_timeout.as_secs_f64().to_string(), value_parser = seconds_within(Limits::TIMEOUT_RANGE))]
    pub(crate) head_timeout: Option<f64>,
    /// The most seconds a head arriving steadily is given.
    #[arg(long, value_name = "SECS", default_value = Limits::default().head_timeout_max.as_secs_f64().to_string(), value_parser = seconds_within(Limits::TIMEOUT_RANGE))]
    pub(crate) head_timeout_max: Option<f64>,
    /// Seconds a connection on a --proxy-protocol listener is given for
    /// its PROXY header, from accept (then closed).
    #[arg(long, value_name = "SECS", default_value = Limits::default().proxy_header_timeout.as_secs_f64().to_string(), value_parser = seconds_within(Limits::TIMEOUT_RANGE))]
    pub(crate) proxy_header_timeout: Option<f64>,
    /// Seconds of grace for a request body; then it must keep arriving at
    /// --min-rate-bytes-per-sec over 5 s (else 408).
    #[arg(long, value_name = "SECS", default_value = Limits::default().body_timeout.as_secs_f64().to_string(), value_parser = seconds_within(Limits::TIMEOUT_RANGE))]
    pub(crate) body_timeout: Option<f64>,
    /// The slowest a request head or body may arrive, in bytes per second
    /// (0: no rate asked).
    #[arg(long, value_name = "N", default_value = Limits::default().min_rate_bytes_per_sec.to_string(), value_parser = within(Limits::MIN_RATE_BYTES_PER_SEC_RANGE))]
    pub(crate) min_rate_bytes_per_sec: Option<u64>,
    /// Seconds an idle keep-alive connection is kept.
    #[arg(long, value_name = "SECS", default_value = Limits::default().idle_timeout.as_secs_f64().to_string(), value_parser = seconds_within(Limits::TIMEOUT_RANGE))]
    pub(crate) idle_timeout: Option<f64>,
    /// Seconds a client may go without reading before it is dropped.
    #[arg(long, value_name = "SECS", default_value = Limits::default().send_timeout.as_secs_f64().to_string(), value_parser = seconds_within(Limits::TIMEOUT_RANGE))]
    pub(crate) send_timeout: Option<f64>,
    /// Most open connections per worker (more are refused with 503).
    #[arg(long, value_name = "N", default_value = Limits::default().n_conns_max.to_string(), value_parser = within(Limits::N_CONNS_MAX_RANGE))]
    pub(crate) n_conns_max: Option<usize>,
    /// Most open connections per client address and worker (IPv6: per
    /// /64); more are closed at accept. 0: no cap (behind a proxy).
    #[arg(long, value_name = "N", default_value = Limits::default().conns_per_ip_max.to_string(), value_parser = within(Limits::CONNS_PER_IP_MAX_RANGE))]
    pub(crate) conns_per_ip_max: Option<usize>,
    /// Bytes of request bodies a worker may hold buffered; past it, 503.
    #[arg(long, value_name = "BYTES", default_value = Limits::default().body_budget_bytes.to_string(), value_parser = within(Limits::BUDGET_BYTES_RANGE))]
    pub(crate) body_budget_bytes: Option<usize>,
    /// Bytes of answers a worker may hold queued; past it, clients with
    /// answers waiting are not read until they take them.
    #[arg(long, value_name = "BYTES", default_value = Limits::default().output_budget_bytes.to_string(), value_parser = within(Limits::BUDGET_BYTES_RANGE))]
    pub(crate) output_budget_bytes: Option<usize>,
    /// Pending response bytes above which pipelined requests wait until the
    /// client reads.
    #[arg(long, value_name = "BYTES", default_value = Limits::default().write_buffer_bytes_max.to_string(), value_parser = within(Limits::WRITE_BUFFER_BYTES_MAX_RANGE))]
    pub(crate) write_buffer_bytes_max: Option<usize>,
    /// Most concurrent streams per HTTP/2 connection (more are refused
    /// with RST_STREAM).
    #[arg(long, value_name = "N", default_value = Limits::default().h2_streams_max.to_string(), value_parser = within(Limits::H2_STREAMS_MAX_RANGE))]
    pub(crate) h2_streams_max: Option<u32>,
    /// Most concurrent request streams per HTTP/3 connection (QUIC stream
    /// credit: the client waits for more).
    #[arg(long, value_name = "N", default_value = Limits::default().h3_streams_max.to_string(), value_parser = within(Limits::H3_STREAMS_MAX_RANGE))]
    pub(crate) h3_streams_max: Option<u32>,
    /// Seconds an HTTP/3 connection may go without a packet from the
    /// client (QUIC's idle timeout).
    #[arg(long, value_name = "SECS", default_value = Limits::default().h3_idle_timeout.as_secs_f64().to_string(), value_parser = seconds_within(Limits::TIMEOUT_RANGE))]
    pub(crate) h3_idle_timeout: Option<f64>,
    /// Largest UDP payload HTTP/3 sends (the ceiling of path MTU discovery).
    #[arg(long, value_name = "BYTES", default_value = Limits::default().h3_udp_payload_bytes_max.to_string(), value_parser = within(Limits::H3_UDP_PAYLOAD_BYTES_MAX_RANGE))]
    pub(crate) h3_udp_payload_bytes_max: Option<u16>,
    /// QUIC handshakes in progress per worker beyond which new clients must
    /// first prove their address (Retry); 0: every client.
    #[arg(long, value_name = "N", default_value = Limits::default().h3_handshakes_before_retry.to_string(), value_parser = within(Limits::H3_HANDSHAKES_BEFORE_RETRY_RANGE))]
    pub(crate) h3_handshakes_before_retry: Option<usize>,
    /// Connections per worker to all the reverse proxy's HTTP/1.1
    /// upstreams together; past it a request waits in its upstream's
    /// queue (each may read 64 KiB past the output budget).
    #[arg(long, value_name = "N", default_value = Limits::default().upstream_conns_max.to_string(), value_parser = within(Limits::UPSTREAM_CONNS_MAX_RANGE))]
    pub(crate) upstream_conns_max: Option<usize>,
    /// Seconds given to requests in flight on shutdown.
    #[arg(long, value_name = "SECS", default_value = Limits::default().shutdown_timeout.as_secs_f64().to_string(), value_parser = seconds_within(Limits::TIMEOUT_RANGE))]
    pub(crate) shutdown_timeout: Option<f64>,
}
