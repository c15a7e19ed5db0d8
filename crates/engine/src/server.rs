//! The `Server` builder: addresses (plain, TLS, redirecting to HTTPS),
//! workers, limits, log; then `serve` or `start`. Binding happens before any
//! thread starts, so an address in use is reported by `start` itself.
//! `Running::wait` handles the signals: SIGINT/SIGTERM stop, SIGHUP reloads
//! TLS certificates (through signal-hook, as the archive server's SIGHUP
//! does, so both hear it).
//!
//! A running server hands out duplicates of its listening sockets
//! (`Running::listeners`), so that a new server (new settings, say) can
//! accept from the same sockets before the old one shuts down: nothing
//! queued in an accept backlog is lost, and no port is bound again.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::access_log::{AccessLog, LogFormat, LogWriter, Sink};
use crate::client_addr::{AddrField, Trust, TrustedProxies};
use crate::error::Error;
use crate::handler::Handler;
use crate::limits::Limits;
use crate::responder::Mailbox;
use crate::sites::{Site, Sites};
use crate::sys::stream::StdListener;
use crate::tls::redirect::HttpsRedirect;
use crate::tls::TlsConfig;
use crate::worker::{Listener, ListenerKind, Worker};

/// Configures and starts a server.
///
/// ```no_run
/// use peregrine::{Request, Response, Server};
/// Server::new()
///     .bind("127.0.0.1:8080")
///     .serve(|_req: &Request<'_>| Response::text("Hello, World!"))
///     .unwrap();
/// ```
#[derive(Debug)]
pub struct Server {
    /// What to listen on, in the order given: addresses to bind, and
    /// sockets made elsewhere (systemd socket activation, or a server
    /// taking over from another).
    /// Each with the sources it requires a PROXY header from, if it does.
    listen: Vec<(Source, Bind, Option<Arc<TrustedProxies>>)>,
    /// The entries of `listen` the last listener call added (an address
    /// may resolve to several): what `proxy_protocol` applies to.
    last_added: std::ops::Range<usize>,
    /// Whom the server trusts to say who the client is.
    trust: Trust,
    error: Option<Error>,
    n_workers: usize,
    limits: Limits,
    access_log: Option<AccessLog>,
    log_format: LogFormat,
    run_as: crate::Identity,
    metrics: Option<Arc<crate::Metrics>>,
    http2: bool,
    websockets: bool,
    http3: bool,
    /// Every answer carries its request's `X-Request-ID`.
    request_id_header: bool,
}

/// Where a listener comes from.
#[derive(Debug)]
enum Source {
    /// An address to bind (one socket per worker, SO_REUSEPORT).
    Addr(SocketAddr),
    /// A Unix-domain socket's path (one socket, shared by the workers).
    Unix(std::path::PathBuf),
    /// Sockets already listening.
    Sockets(Listening),
}

/// What an address speaks.
#[derive(Clone, Debug)]
enum Bind {
    Plain,
    Tls(TlsConfig),
    Redirect,
}

impl Default for Server {
    fn default() -> Self {
        Server::new()
    }
}

impl Server {
    /// A server with one worker per core, default limits, no address yet.
    pub fn new() -> Self {
        let n_workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        Server {
            listen: Vec::new(),
            last_added: 0..0,
            trust: Trust::default(),
            error: None,
            n_workers,
            limits: Limits::default(),
            access_log: None,
            log_format: LogFormat::Combined,
            request_id_header: false,
            run_as: crate::Identity::default(),
            metrics: None,
            http2: true,
            websockets: false,
            http3: true,
        }
    }

    /// Adds an address to listen on (call again for more). Port 0 picks a
    /// free port, shared by all workers: see [`Running::local_addrs`].
    pub fn bind(self, addr: impl ToSocketAddrs + std::fmt::Debug) -> Self {
        self.bind_as(addr, Bind::Plain)
    }

    /// Adds a Unix-domain stream socket at `path` (as nginx's `listen
    /// unix:PATH`): plain HTTP/1.1, and HTTP/2 with prior knowledge. One
    /// socket, accepted from by every worker. A socket file left by a
    /// server that is gone (connecting is refused) is removed first; one
    /// a server listens on is "address in use", and a file that is not a
    /// socket is never removed. The file gets mode 0o660 (owner and group
    /// may connect) and is removed at shutdown (not at a hand-over: the
    /// server taking over keeps it). Its clients' address is
    /// [`crate::UNIX_PEER`], logged as `unix:`; in
    /// [`Running::local_addrs`] the socket is listed as that address too.
    pub fn bind_unix(self, path: impl Into<std::path::PathBuf>) -> Self {
        self.push_listen(Source::Unix(path.into()), Bind::Plain)
    }

    /// Adds an address that speaks HTTPS (TLS 1.2 and 1.3, ALPN
    /// `http/1.1`) with `tls`'s certificates. Any handler works unchanged:
    /// TLS lives below the connection's buffers.
    pub fn bind_tls(self, addr: impl ToSocketAddrs + std::fmt::Debug, tls: TlsConfig) -> Self {
        self.bind_as(addr, Bind::Tls(tls))
    }

    /// Adds a plain-HTTP address whose every request is answered `308
    /// Permanent Redirect` to the same path and query over HTTPS, at the
    /// host the client named and the port of the first TLS address. Needs
    /// a [`Server::bind_tls`] address.
    pub fn redirect_http(self, addr: impl ToSocketAddrs + std::fmt::Debug) -> Self {
        self.bind_as(addr, Bind::Redirect)
    }

    fn bind_as(mut self, addr: impl ToSocketAddrs + std::fmt::Debug, kind: Bind) -> Self {
        let first = self.listen.len();
        match addr.to_socket_addrs() {
            Ok(found) => self.listen.extend(found.map(|a| (Source::Addr(a), kind.clone(), None))),
            Err(e) => {
                self.error.get_or_insert(Error::resolve(format!("{addr:?}"), e));
            }
        }
        self.last_added = first..self.listen.len();
        self
    }

    fn push_listen(mut self, source: Source, kind: Bind) -> Self {
        self.last_added = self.listen.len()..self.listen.len() + 1;
        self.listen.push((source, kind, None));
        self
    }

    /// The listeners added by the call just before this one (`bind`,
    /// `bind_tls`, `redirect_http`, `listener` and its forms: every
    /// address that call resolved to) require the PROXY protocol, version
    /// 1 or 2 (HAProxy's specification), from the sources in `trusted`:
    ///
    /// ```no_run
    /// # use peregrine::{Request, Response, Server};
    /// let balancers: peregrine::client_addr::TrustedProxies = "10.0.0.0/8".parse().unwrap();
    /// Server::new()
    ///     .bind("0.0.0.0:8080")
    ///     .proxy_protocol(balancers.clone())
    ///     .trusted_proxies(balancers, Default::default())
    ///     .serve(|req: &Request<'_>| Response::text(req.client_addr().ip.to_string()))
    ///     .unwrap();
    /// ```
    ///
    /// Required, never guessed (nginx's `listen ... proxy_protocol`,
    /// HAProxy's `accept-proxy`): a connection whose address is not in
    /// `trusted` is closed at accept, before any byte is read; one whose
    /// header is malformed, or not all there within
    /// [`Limits::proxy_header_timeout`] (or past its 4 KiB bound), is
    /// closed unanswered, as HAProxy and nginx close it. The bytes after
    /// the header are the connection's own: HTTP, or on a TLS listener the
    /// TLS handshake. The header's source stands in for the peer in
    /// [`Request::client_addr`](crate::Request::client_addr) (a LOCAL or
    /// UNKNOWN header gives none: the peer stays). HTTP/3 on a TLS
    /// address's port is unaffected (QUIC carries no PROXY header). Not on
    /// a Unix-domain socket, whose clients have no address to check
    /// (refused by `start`).
    pub fn proxy_protocol(mut self, trusted: TrustedProxies) -> Self {
        if self.last_added.is_empty() {
            self.error.get_or_insert(Error::setup(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "proxy_protocol must follow the listener it applies to (bind, bind_tls, listener, ...)",
            )));
            return self;
        }
        let trusted = Arc::new(trusted);
        for entry in &mut self.listen[self.last_added.clone()] {
            entry.2 = Some(trusted.clone());
        }
        self
    }

    /// Trusts the proxies in `proxies` to say who their clients are, in
    /// the field `field` (`X-Forwarded-For` by default): see
    /// [`Request::client_addr`](crate::Request::client_addr) and
    /// [`crate::client_addr`] for the rule. The access log writes the
    /// address so decided. Nobody is trusted by default: the client is
    /// the socket's peer (or a PROXY header's source).
    pub fn trusted_proxies(mut self, proxies: TrustedProxies, field: AddrField) -> Self {
        self.trust = Trust { proxies, field };
        self
    }

    /// Adds a socket that is already listening (e.g. one of
    /// [`crate::systemd::listen_fds`]), or an address's sockets taken over
    /// from a running server ([`Running::listeners`]). Every socket gets at
    /// least one worker, and every worker at least one socket.
    pub fn listener(self, listener: impl Into<Listening>) -> Self {
        self.push_listen(Source::Sockets(listener.into()), Bind::Plain)
    }

    /// Adds a socket that is already listening, speaking TLS with `tls`.
    pub fn listener_tls(self, listener: impl Into<Listening>, tls: TlsConfig) -> Self {
        self.push_listen(Source::Sockets(listener.into()), Bind::Tls(tls))
    }

    /// Adds a socket that is already listening, redirecting to HTTPS as
    /// [`Server::redirect_http`] does.
    pub fn listener_redirect(self, listener: impl Into<Listening>) -> Self {
        self.push_listen(Source::Sockets(listener.into()), Bind::Redirect)
    }

    /// Keeps metrics in `metrics` (one set of counters per worker, summed
    /// when [`crate::Metrics::render`] is called).
    pub fn metrics(mut self, metrics: Arc<crate::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// After binding, before any request: become this user and group
    /// (needs root; see [`crate::Identity`]).
    pub fn run_as(mut self, who: crate::Identity) -> Self {
        self.run_as = who;
        self
    }

    /// Sets the number of worker threads (at least 1).
    pub fn workers(mut self, n: usize) -> Self {
        self.n_workers = n.max(1);
        self
    }

    /// Speaks HTTP/2 (the default) or HTTP/1.1 only. With HTTP/2, TLS
    /// listeners offer `h2` by ALPN before `http/1.1`, and cleartext
    /// listeners take HTTP/2 from clients that open with its preface
    /// (prior knowledge, as `curl --http2-prior-knowledge` does). The same
    /// handler answers both.
    pub fn http2(mut self, on: bool) -> Self {
        self.http2 = on;
        self
    }

    /// Says that the handler has WebSocket routes (`ws::upgrade`), so
    /// that HTTP/2 and HTTP/3 clients may open them on their connection:
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL is advertised in both and extended
    /// CONNECT requests (`:protocol = websocket`, RFC 8441, RFC 9220)
    /// reach the handler, which accepts them as it accepts an HTTP/1.1
    /// upgrade. Off by
    /// default: a server without WebSocket routes does not advertise what
    /// it cannot do. HTTP/1.1 upgrades work either way.
    pub fn websockets(mut self, on: bool) -> Self {
        self.websockets = on;
        self
    }

    /// Speaks HTTP/3 (the default) on every TLS address, or not. With
    /// HTTP/3, each TLS address also gets UDP sockets on the same port
    /// (QUIC, TLS 1.3, ALPN `h3`), and its HTTPS responses carry
    /// `Alt-Svc: h3=":PORT"` so that browsers switch. The same handler
    /// answers every version. Plain addresses are unaffected.
    pub fn http3(mut self, on: bool) -> Self {
        self.http3 = on;
        self
    }

    /// Sets the limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Writes an access log line per request (Combined Log Format unless
    /// [`Server::access_log_format`] says otherwise).
    pub fn access_log(mut self, log: AccessLog) -> Self {
        self.access_log = Some(log);
        self
    }

    /// Sets the access log's line format.
    pub fn access_log_format(mut self, format: LogFormat) -> Self {
        self.log_format = format;
        self
    }

    /// Returns each request's id ([`crate::Request::request_id`]: the
    /// `X-Request-ID` a trusted proxy sent, else the one made here, which
    /// the access log writes and the reverse proxy sends upstream) to the
    /// client as `X-Request-ID` on every answer a handler makes, proxied
    /// ones included, unless the answer has one already (an upstream's
    /// own). Off by default, as in nginx (`add_header X-Request-ID
    /// $request_id`) and Caddy (`header X-Request-ID ...`), which add it
    /// only when asked: when off, no answer pays for it (the prepared
    /// heads of archives and the hello path stay as they are). Answers
    /// the engine makes before a request is whole (a 400, a 408) have no
    /// id to return.
    pub fn request_id_header(mut self, on: bool) -> Self {
        self.request_id_header = on;
        self
    }

    /// Starts the workers and returns at once.
    pub fn start(self, handler: impl Handler) -> Result<Running, Error> {
        self.start_with(Sites::single(Arc::new(handler)))
    }

    /// Starts the workers serving several sites, each request going to the
    /// site its host names (see [`Site`]): as [`Server::start`] otherwise.
    /// Sites that claim one name twice, or two defaults, are refused.
    pub fn start_sites(self, sites: Vec<Site>) -> Result<Running, Error> {
        let sites = Sites::new(sites)
            .map_err(|e| Error::setup(std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())))?;
        self.start_with(sites)
    }

    fn start_with(self, sites: Sites) -> Result<Running, Error> {
        if let Some(e) = self.error {
            return Err(e);
        }
        // The reverse proxy's names are looked up again from here on, by a
        // thread made now: after a caller's sandbox, which wants none
        // before it.
        crate::proxy::start_resolving();
        // And the upstreams with active health checks asked, the same way.
        crate::proxy::start_checking();
        if self.listen.is_empty() {
            return Err(Error::setup(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no address to listen on",
            )));
        }
        let sink = match &self.access_log {
            Some(log) => Some(log.open().map_err(Error::setup)?),
            None => None,
        };
        // Each site's own log, opened as the server's is.
        let site_sinks = (sites.logs().iter())
            .map(|log| log.as_ref().map(AccessLog::open).transpose())
            .collect::<std::io::Result<Vec<Option<Sink>>>>()
            .map_err(Error::setup)?;
        // Bind everything first: an error here leaves no thread behind.
        let (groups, held) = self.bind_all()?;
        let plan = self.plan(groups, held)?;
        let redirect = self.redirect_handler(plan.https_port)?;
        self.give_up_root()?;
        let sites = Arc::new(sites);
        let (workers, shutdown) = self.make_workers(plan.workers, plan.held, &sites, redirect, &sink, &site_sinks)?;
        let mut threads = Vec::with_capacity(workers.len());
        for (i, worker) in workers.into_iter().enumerate() {
            let thread = std::thread::Builder::new()
                .name(format!("peregrine-worker-{i}"))
                .spawn(move || worker.run())
                .map_err(|e| {
                    shutdown.shutdown();
                    Error::setup(e)
                })?;
            threads.push(thread);
        }
        Ok(Running {
            local_addrs: plan.local_addrs,
            unix_paths: plan.unix_paths,
            shutdown,
            threads,
            tls: plan.tls_configs,
            log: sink,
            site_logs: site_sinks.into_iter().flatten().collect(),
        })
    }

    /// Binds every address (or takes the sockets given), each spread over
    /// the workers; and duplicates of them kept for `Running::listeners`.
    fn bind_all(&self) -> Result<(Vec<Group<'_>>, Vec<Listening>), Error> {
        let mut groups: Vec<Group<'_>> = Vec::new();
        let mut held = Vec::new();
        for (source, bind, _) in &self.listen {
            let listening = match source {
                Source::Addr(addr) => {
                    let group: Vec<StdListener> = crate::sys::socket::bind_group(*addr, self.n_workers)
                        .map_err(|e| Error::bind(*addr, e))?
                        .into_iter()
                        .map(StdListener::Tcp)
                        .collect();
                    held.push(Listening::duplicate(&group).map_err(Error::setup)?);
                    groups.push((group.into_iter().enumerate().collect(), bind, (Vec::new(), None)));
                    continue;
                }
                Source::Unix(path) => {
                    // No SO_REUSEPORT for Unix sockets: one, duplicated
                    // for every worker (all are woken; one wins each accept).
                    let socket = crate::sys::stream::bind_unix(path, crate::sys::socket::BACKLOG)
                        .map_err(|e| Error::bind_unix(path, e))?;
                    let listening = Listening {
                        sockets: vec![socket],
                        udp: Vec::new(),
                        quic: None,
                    };
                    groups.push((
                        listening.spread(self.n_workers).map_err(Error::setup)?,
                        bind,
                        (Vec::new(), None),
                    ));
                    held.push(listening);
                    continue;
                }
                Source::Sockets(listening) => listening,
            };
            // Sockets made elsewhere: spread over the workers (several
            // workers accepting from one socket are all woken, and one wins
            // each accept). Taken over from a server with as many workers,
            // each worker gets one socket of the SO_REUSEPORT group, as when
            // bound. With the UDP sockets (HTTP/3) of a TLS address taken
            // over from a running server, if it had them, and its
            // generations on them.
            if listening.sockets.is_empty() {
                return Err(Error::setup(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "a listener with no socket",
                )));
            }
            for socket in &listening.sockets {
                socket.set_nonblocking(true).map_err(Error::setup)?;
            }
            let udp = (
                duplicate_udp(&listening.udp).map_err(Error::setup)?,
                listening.quic.clone(),
            );
            groups.push((listening.spread(self.n_workers).map_err(Error::setup)?, bind, udp));
            held.push(Listening::duplicate(&listening.sockets).map_err(Error::setup)?);
        }
        Ok((groups, held))
    }

    /// What each worker listens on: the bound groups with what they speak
    /// (plain, TLS with HTTP/3 beside it, or the redirect).
    fn plan(&self, groups: Vec<Group<'_>>, mut held: Vec<Listening>) -> Result<Plan, Error> {
        let mut plan = Plan {
            workers: (0..self.n_workers).map(|_| (Vec::new(), Vec::new())).collect(),
            local_addrs: Vec::new(),
            unix_paths: Vec::new(),
            https_port: None,
            tls_configs: Vec::new(),
            held: Vec::new(),
        };
        for (at, (group, bind, taken_udp)) in groups.into_iter().enumerate() {
            let local = group[0].1.local_addr().map_err(Error::setup)?;
            plan.local_addrs.push(local);
            plan.unix_paths
                .push(group[0].1.unix_path().map(std::path::Path::to_owned));
            let proxy = &self.listen[at].2;
            if let (Some(path), Some(_)) = (group[0].1.unix_path(), proxy) {
                return Err(Error::setup(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "unix:{}: the PROXY protocol is not supported on a Unix-domain socket (its clients have no address to trust)",
                        path.display()
                    ),
                )));
            }
            if let (Some(path), Bind::Tls(_) | Bind::Redirect) = (group[0].1.unix_path(), bind) {
                return Err(Error::setup(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "unix:{}: a Unix-domain socket speaks plain HTTP only (no TLS, no redirect to HTTPS)",
                        path.display()
                    ),
                )));
            }
            let tls = match bind {
                Bind::Tls(config) => {
                    plan.https_port.get_or_insert(local.port());
                    plan.tls_configs.push(config.clone());
                    let listener = config.listener(self.http2, self.http3.then_some(local.port()))?;
                    if self.http3 {
                        self.http3_endpoints(local, config, &listener, taken_udp, &mut held[at], &mut plan)?;
                    }
                    Some(listener)
                }
                Bind::Plain | Bind::Redirect => None,
            };
            for (i, listener) in group {
                let kind = match (&tls, bind) {
                    (Some(tls), _) => ListenerKind::Tls(tls.clone()),
                    (None, Bind::Redirect) => ListenerKind::Redirect,
                    (None, _) => ListenerKind::Plain,
                };
                plan.workers[i].0.push(Listener {
                    socket: listener.into_mio(),
                    kind,
                    proxy: proxy.clone(),
                });
            }
        }
        plan.held = held;
        Ok(plan)
    }

    /// HTTP/3 on a TLS address's port, over UDP: the sockets a running
    /// server hands over (so that a reload binds nothing, even after root
    /// is given up), or new ones, one per worker; this generation joins
    /// those already on them (the newest reads them: `quic::handover`).
    fn http3_endpoints(
        &self,
        local: SocketAddr,
        config: &TlsConfig,
        listener: &Arc<crate::tls::TlsListener>,
        (taken_udp, taken_generations): TakenUdp,
        held: &mut Listening,
        plan: &mut Plan,
    ) -> Result<(), Error> {
        let sockets = if taken_udp.is_empty() {
            crate::sys::socket::bind_udp_group(local, self.n_workers).map_err(|e| Error::bind_udp(local, e))?
        } else {
            taken_udp
        };
        held.udp = duplicate_udp(&sockets).map_err(Error::setup)?;
        let generations = taken_generations.unwrap_or_else(crate::quic::Generations::new);
        held.quic = Some(generations.clone());
        let n_sockets = sockets.len();
        // One socket per worker: steer packets by connection ID (the
        // worker's index in the IDs it issues), so a client may change
        // address.
        let steered = n_sockets == self.n_workers
            && n_sockets <= 256
            && match crate::sys::socket::steer_by_connection_id(&sockets[0], n_sockets as u32) {
                Ok(()) => true,
                Err(e) => {
                    crate::log::debug(format_args!(
                        "HTTP/3 on {local}: no steering by connection ID ({e}); by address"
                    ));
                    false
                }
            };
        let shared = Arc::new(crate::quic::Shared::new(
            config.quic()?,
            listener.clone(),
            &self.limits,
            steered,
        )?);
        let n_endpoints = self.n_workers.max(n_sockets);
        let members = generations.join(n_endpoints);
        for (i, member) in members.into_iter().enumerate() {
            let socket = sockets[i % n_sockets].try_clone().map_err(Error::setup)?;
            // Beyond 256 endpoints (not steered), IDs share a first byte:
            // those datagrams may go to the wrong endpoint, as without tags.
            let cid_index = i as u8;
            plan.workers[i % self.n_workers]
                .1
                .push((socket, shared.clone(), cid_index, member));
        }
        Ok(())
    }

    /// The handler of the listeners that redirect to HTTPS, if any: to
    /// the first TLS address's port.
    fn redirect_handler(&self, https_port: Option<u16>) -> Result<Option<Arc<dyn Handler>>, Error> {
        if !self.listen.iter().any(|(_, b, _)| matches!(b, Bind::Redirect)) {
            return Ok(None);
        }
        let Some(port) = https_port else {
            return Err(Error::tls("redirect_http needs a TLS address (bind_tls)".into()));
        };
        let acme = (self.listen.iter()).find_map(|(_, b, _)| match b {
            Bind::Tls(tls) if tls.is_acme() => Some(tls.clone()),
            _ => None,
        });
        Ok(Some(Arc::new(HttpsRedirect { port, acme })))
    }

    /// Every port is bound: root is no longer needed. The Unix sockets
    /// bound here (not those taken over) belong to the user and group
    /// given up to.
    fn give_up_root(&self) -> Result<(), Error> {
        let bound_unix: Vec<&std::path::Path> = (self.listen.iter())
            .filter_map(|(source, _, _)| match source {
                Source::Unix(path) => Some(path.as_path()),
                _ => None,
            })
            .collect();
        crate::sys::privileges::give_sockets_to(&self.run_as, &bound_unix).map_err(Error::setup)?;
        crate::sys::privileges::drop_to(&self.run_as).map_err(Error::setup)
    }

    /// One `Worker` per planned set of sockets, each with its poll,
    /// mailbox and log writer; and the handle that stops them.
    fn make_workers(
        &self,
        planned: Vec<WorkerSockets>,
        held: Vec<Listening>,
        sites: &Arc<Sites>,
        redirect: Option<Arc<dyn Handler>>,
        sink: &Option<Sink>,
        site_sinks: &[Option<Sink>],
    ) -> Result<(Vec<Worker>, ShutdownHandle), Error> {
        let flag = Arc::new(AtomicBool::new(false));
        let keep_idle = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::with_capacity(self.n_workers);
        let mut mailboxes = Vec::with_capacity(self.n_workers);
        // Nobody trusted: requests skip the rule altogether.
        let trust = (!self.trust.proxies.is_empty()).then(|| Arc::new(self.trust.clone()));
        let hub = Arc::new(crate::ws::hub::Hub::default());
        let mut beats = Vec::with_capacity(self.n_workers);
        for (listeners, quic) in planned {
            let quic = quic
                .into_iter()
                .enumerate()
                .map(|(i, (socket, shared, cid_index, member))| {
                    crate::quic::Endpoint::new(socket, shared, i, cid_index, member)
                })
                .collect::<std::io::Result<Vec<_>>>()
                .map_err(Error::setup)?;
            let poll = mio::Poll::new().map_err(Error::setup)?;
            let waker = mio::Waker::new(poll.registry(), crate::sources::Source::Waker.mio()).map_err(Error::setup)?;
            let mailbox = Arc::new(Mailbox {
                answers: Mutex::new(Vec::new()),
                waker,
            });
            mailboxes.push(mailbox.clone());
            workers.push(Worker {
                poll,
                listeners,
                quic,
                sites: sites.clone(),
                redirect: redirect.clone(),
                limits: self.limits.clone(),
                http2: self.http2,
                websockets: self.websockets,
                request_id_header: self.request_id_header,
                log: sink.clone().map(|s| LogWriter::new(s, self.log_format.clone())),
                site_logs: (site_sinks.iter())
                    .map(|s| s.clone().map(|s| LogWriter::new(s, self.log_format.clone())))
                    .collect(),
                mailbox,
                shutdown: flag.clone(),
                keep_idle: keep_idle.clone(),
                metrics: self.metrics.as_ref().map(|m| m.add_worker(sites.labels())),
                trust: trust.clone(),
                hub: hub.clone(),
                heartbeat: {
                    let beat = crate::health::Heartbeat::new();
                    beats.push(beat.clone());
                    beat
                },
            });
        }
        let _ = hub.mailboxes.set(mailboxes.clone());
        let shutdown = ShutdownHandle {
            flag,
            keep_idle,
            mailboxes,
            held: Arc::new(Mutex::new(held)),
            hub,
            beats,
        };
        Ok((workers, shutdown))
    }
    /// Starts the workers and blocks until SIGINT or SIGTERM: see
    /// [`Running::wait`].
    pub fn serve(self, handler: impl Handler) -> Result<(), Error> {
        self.start(handler)?.wait()
    }
}

/// A started server.
#[derive(Debug)]
pub struct Running {
    local_addrs: Vec<SocketAddr>,
    unix_paths: Vec<Option<std::path::PathBuf>>,
    shutdown: ShutdownHandle,
    threads: Vec<JoinHandle<std::io::Result<()>>>,
    /// Certificates to reload on SIGHUP.
    tls: Vec<TlsConfig>,
    /// The access log, reopened on SIGUSR1.
    log: Option<Sink>,
    /// The sites' own access logs, reopened with it.
    site_logs: Vec<Sink>,
}

impl Running {
    /// Publishes WebSocket messages to this server's subscribers from any
    /// thread ([`crate::ws::Socket::subscribe`]).
    pub fn publisher(&self) -> crate::ws::Publisher {
        crate::ws::Publisher {
            hub: self.shutdown.hub.clone(),
        }
    }

    /// The addresses listened on, with ports resolved, in the order they
    /// were given (`bind`, `listener` and their TLS and redirect forms).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local_addrs
    }

    /// For each of [`Running::local_addrs`], the socket file's path if it
    /// is a Unix-domain socket (listed there as [`crate::UNIX_PEER`]).
    pub fn unix_paths(&self) -> &[Option<std::path::PathBuf>] {
        &self.unix_paths
    }

    /// Duplicates of the listening sockets, one [`Listening`] per address in
    /// [`Running::local_addrs`] order, for a server that takes over from
    /// this one ([`Server::listener`] and its TLS and redirect forms): start
    /// it, then shut this one down. Connections waiting in the accept
    /// queues are accepted by whichever server gets to them first; none is
    /// lost, since the sockets stay open as long as either server holds
    /// them. Fails once shutdown has begun (the sockets are closing).
    pub fn listeners(&self) -> Result<Vec<Listening>, Error> {
        let held = self.shutdown.held.lock().unwrap_or_else(|e| e.into_inner());
        if self.shutdown.flag.load(Ordering::Acquire) {
            return Err(Error::setup(std::io::Error::other(
                "the server is shutting down: its sockets are closing",
            )));
        }
        held.iter()
            .map(|l| {
                let mut dup = Listening::duplicate(&l.sockets)?;
                dup.udp = duplicate_udp(&l.udp)?;
                dup.quic = l.quic.clone();
                Ok(dup)
            })
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(Error::setup)
    }

    /// The first address listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addrs[0]
    }

    /// Whether the workers are alive and the server ready, asked from
    /// any thread (health endpoints): see [`crate::Health`].
    pub fn health(&self) -> crate::Health {
        crate::Health {
            beats: self.shutdown.beats.clone(),
            draining: self.shutdown.flag.clone(),
            tls: self.tls.clone(),
        }
    }

    /// A handle that can stop the server from any thread.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Asks the server to shut down gracefully; [`Running::join`] waits.
    pub fn shutdown(&self) {
        self.shutdown.shutdown();
    }

    /// Shuts down for a server that has taken over the sockets
    /// ([`Running::listeners`]): as [`Running::shutdown`], except that idle
    /// keep-alive connections are not closed at once. Each may still send
    /// one request, answered with `Connection: close` (its client then
    /// connects to the new server), until its idle timeout or the shutdown
    /// timeout ends. A client about to reuse its connection is not cut off.
    /// A later [`ShutdownHandle::shutdown`] closes the idle ones after all.
    pub fn hand_over(&self) {
        self.shutdown.keep_idle.store(true, Ordering::Release);
        self.shutdown.begin();
    }

    /// Reopens the access log file under its path, as SIGUSR1 does (for
    /// logrotate: move the file away, then ask). Lines buffered by a
    /// worker go to the new file from its next flush on.
    pub fn reopen_logs(&self) -> Result<(), Error> {
        crate::access_log::reopen(self.log.as_ref()).map_err(Error::setup)?;
        for log in &self.site_logs {
            crate::access_log::reopen(Some(log)).map_err(Error::setup)?;
        }
        Ok(())
    }

    /// Blocks until SIGINT or SIGTERM, then shuts down gracefully: stop
    /// accepting, finish requests in flight within
    /// [`Limits::shutdown_timeout`], close idle connections, return. A second
    /// signal exits the process at once. Meanwhile SIGUSR1 reopens the
    /// access log file ([`Running::reopen_logs`]).
    ///
    /// With TLS addresses, SIGHUP reloads their certificates
    /// ([`TlsConfig::reload`]) and logs a line saying how it went; a
    /// failed reload keeps the certificates loaded before. Without TLS,
    /// SIGHUP keeps its default meaning here.
    ///
    /// Under systemd (`NOTIFY_SOCKET`), sends `READY=1` now and
    /// `STOPPING=1` when shutting down.
    ///
    /// A convenience for programs that want these meanings: it installs
    /// handlers for those signals because the program asked for them by
    /// calling it. Nothing else in Peregrine's libraries installs a signal
    /// handler. A program that owns its signals (the `peregrine` binary
    /// does) calls [`Running::join`] instead and acts on its own handlers
    /// with [`ShutdownHandle::shutdown`], [`Running::reopen_logs`] and
    /// [`TlsConfig::reload`].
    pub fn wait(self) -> Result<(), Error> {
        self.wait_after(|| {})
    }

    /// [`Running::wait`], calling `ready` once the signal handlers are in
    /// place: a program that announces itself there ("listening on …")
    /// can be sent SIGTERM as soon as it is read, and stops gracefully
    /// rather than dying of the signal's default action.
    pub fn wait_after(self, ready: impl FnOnce()) -> Result<(), Error> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
        let handle = self.shutdown_handle();
        let mut wanted = vec![SIGINT, SIGTERM, SIGUSR1];
        if !self.tls.is_empty() {
            wanted.push(SIGHUP);
        }
        let mut signals = signal_hook::iterator::Signals::new(wanted).map_err(Error::setup)?;
        ready();
        let tls = self.tls.clone();
        let log = self.log.clone();
        // Type=notify: serving from now on.
        if let Err(e) = crate::sys::systemd::notify("READY=1") {
            crate::log::warn(format_args!("cannot notify systemd: {e}"));
        }
        std::thread::Builder::new()
            .name("peregrine-signals".into())
            .spawn(move || {
                let mut seen = 0;
                for signal in signals.forever() {
                    if signal == SIGHUP {
                        reload_all(&tls);
                        continue;
                    }
                    if signal == SIGUSR1 {
                        match crate::access_log::reopen(log.as_ref()) {
                            Ok(()) => crate::log::info(format_args!("access log reopened")),
                            Err(e) => crate::log::error(format_args!("{e}; still writing to the old file")),
                        }
                        continue;
                    }
                    seen += 1;
                    if seen == 1 {
                        let _ = crate::sys::systemd::notify("STOPPING=1");
                        handle.shutdown();
                    } else {
                        std::process::exit(130);
                    }
                }
            })
            .map_err(Error::setup)?;
        self.join()
    }

    /// Waits for every worker to finish (after [`Running::shutdown`]).
    pub fn join(self) -> Result<(), Error> {
        let mut result = Ok(());
        for thread in self.threads {
            match thread.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(Error::worker(e)),
                Err(_) => result = Err(Error::worker(std::io::Error::other("worker thread panicked"))),
            }
        }
        result
    }
}

/// Reloads every TLS address's certificates, one line each on stderr.
fn reload_all(configs: &[TlsConfig]) {
    for config in configs {
        match config.reload() {
            Ok(n) => crate::log::info(format_args!("TLS certificates reloaded ({n})")),
            Err(e) => crate::log::error(format_args!(
                "TLS reload failed, keeping the certificates loaded before: {e}"
            )),
        }
    }
}

/// Stops a server gracefully from any thread.
#[derive(Clone)]
pub struct ShutdownHandle {
    flag: Arc<AtomicBool>,
    /// Set before `flag` by [`Running::hand_over`]; cleared by `shutdown`.
    keep_idle: Arc<AtomicBool>,
    mailboxes: Vec<Arc<Mailbox>>,
    /// Duplicates of the listening sockets for [`Running::listeners`],
    /// closed when shutdown begins, so that a stopping server's ports
    /// refuse new connections instead of queueing them for nobody.
    held: Arc<Mutex<Vec<Listening>>>,
    /// The workers, for WebSocket publishing ([`Running::publisher`]).
    hub: Arc<crate::ws::hub::Hub>,
    /// Each worker's, for [`Running::health`].
    beats: Vec<Arc<crate::health::Heartbeat>>,
}

impl ShutdownHandle {
    /// Asks every worker to stop accepting and finish what is in flight,
    /// closing idle connections (also after [`Running::hand_over`]).
    pub fn shutdown(&self) {
        self.keep_idle.store(false, Ordering::Release);
        self.begin();
    }

    fn begin(&self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        self.flag.store(true, Ordering::Release);
        held.clear();
        drop(held);
        for mailbox in &self.mailboxes {
            let _ = mailbox.waker.wake();
        }
    }
}

/// An address's listening sockets: the one a caller made (systemd's, say),
/// or duplicates of a running server's ([`Running::listeners`]): one per
/// worker of its SO_REUSEPORT group when the server bound them.
#[derive(Debug)]
pub struct Listening {
    sockets: Vec<StdListener>,
    /// HTTP/3's UDP sockets on the same port, for a TLS address.
    udp: Vec<std::net::UdpSocket>,
    /// The generations of QUIC endpoints on `udp` (a server taking over
    /// joins them, and passes the older ones their datagrams).
    quic: Option<Arc<crate::quic::Generations>>,
}

/// A TLS address's UDP sockets taken over, and their generations.
type TakenUdp = (Vec<std::net::UdpSocket>, Option<Arc<crate::quic::Generations>>);

/// One address's sockets as bound: each with the worker it goes to, what
/// the address speaks, and the UDP sockets taken over with it.
type Group<'s> = (Vec<(usize, StdListener)>, &'s Bind, TakenUdp);

/// A worker's share of the sockets: its listeners and its QUIC
/// endpoints' sockets (socket, shared state, connection-ID index, place
/// among the generations).
type WorkerSockets = (
    Vec<Listener>,
    Vec<(std::net::UdpSocket, Arc<crate::quic::Shared>, u8, crate::quic::Member)>,
);

/// What `Server::start` binds, spread over the workers, before any
/// thread starts.
struct Plan {
    workers: Vec<WorkerSockets>,
    local_addrs: Vec<SocketAddr>,
    unix_paths: Vec<Option<std::path::PathBuf>>,
    /// The first TLS address's port: where the redirect listeners send.
    https_port: Option<u16>,
    tls_configs: Vec<TlsConfig>,
    /// Duplicates of every socket, for `Running::listeners`.
    held: Vec<Listening>,
}

impl Listening {
    /// The address the sockets listen on.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self.sockets.first() {
            Some(socket) => socket.local_addr(),
            None => Err(std::io::Error::other("a listener with no socket")),
        }
    }

    /// The path of a Unix-domain socket ([`Server::bind_unix`]).
    pub fn unix_path(&self) -> Option<&std::path::Path> {
        self.sockets.first().and_then(StdListener::unix_path)
    }

    /// The descriptors, for another executable taking over (a binary
    /// upgrade, `peregrine::upgrade`): the listening stream sockets (one
    /// per socket of the address's SO_REUSEPORT group, or the one Unix
    /// socket), then HTTP/3's UDP sockets. [`Listening::from_fds`] in the
    /// new process makes a `Listening` of them again; the QUIC generations
    /// stay in this process.
    pub fn fds(&self) -> (Vec<std::os::fd::BorrowedFd<'_>>, Vec<std::os::fd::BorrowedFd<'_>>) {
        use std::os::fd::AsFd;
        let streams = (self.sockets.iter())
            .map(|s| match s {
                StdListener::Tcp(l) => l.as_fd(),
                StdListener::Unix(l, _) => l.as_fd(),
            })
            .collect();
        let udp = self.udp.iter().map(AsFd::as_fd).collect();
        (streams, udp)
    }

    /// Whether this process removes the Unix socket's file at shutdown
    /// (it bound it, or took it from a process that did); false for TCP
    /// and for a socket systemd passed.
    pub fn removes_socket_file(&self) -> bool {
        match self.sockets.first() {
            Some(StdListener::Unix(_, file)) => file.removes(),
            _ => false,
        }
    }

    /// The socket now belongs to a new executable too: this process
    /// leaves its Unix socket file in place at shutdown (the new one
    /// removes it at its own). Nothing for TCP.
    pub fn keep_socket_file(&self) {
        if let Some(StdListener::Unix(_, file)) = self.sockets.first() {
            file.keep();
        }
    }

    /// A `Listening` of descriptors another executable passed
    /// ([`Listening::into_fds`]): `streams` must be listening stream
    /// sockets of one family (one Unix socket at most), `udp` UDP sockets,
    /// each checked with the kernel. All are made non-blocking.
    /// `remove_socket_file`: a Unix socket's file is this process's to
    /// remove at shutdown (it was the old one's).
    pub fn from_fds(
        streams: Vec<std::os::fd::OwnedFd>,
        udp: Vec<std::os::fd::OwnedFd>,
        remove_socket_file: bool,
    ) -> std::io::Result<Listening> {
        use crate::sys::upgrade::{socket_kind, SocketKind};
        use std::os::fd::AsFd;
        let invalid = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_owned());
        if streams.is_empty() {
            return Err(invalid("a listener passed with no stream socket"));
        }
        let n_streams = streams.len();
        let mut sockets = Vec::with_capacity(n_streams);
        for fd in streams {
            if socket_kind(fd.as_fd()) != SocketKind::Listener {
                return Err(invalid(
                    "a descriptor passed as a listener is not a listening stream socket",
                ));
            }
            let socket = socket2::Socket::from(fd);
            socket.set_nonblocking(true)?;
            let listener = if crate::sys::stream::is_unix_socket(&socket)? {
                if n_streams != 1 {
                    return Err(invalid("a Unix-domain listener passed among other sockets"));
                }
                crate::sys::stream::SocketFile::adopted(socket.into(), remove_socket_file)
            } else {
                StdListener::Tcp(socket.into())
            };
            sockets.push(listener);
        }
        let mut udp_sockets = Vec::with_capacity(udp.len());
        for fd in udp {
            if socket_kind(fd.as_fd()) != SocketKind::Udp {
                return Err(invalid("a descriptor passed as HTTP/3's is not a UDP socket"));
            }
            let socket = std::net::UdpSocket::from(fd);
            socket.set_nonblocking(true)?;
            udp_sockets.push(socket);
        }
        Ok(Listening {
            sockets,
            udp: udp_sockets,
            quic: None,
        })
    }

    /// Duplicates of `sockets` (new descriptors, same sockets).
    fn duplicate(sockets: &[StdListener]) -> std::io::Result<Listening> {
        let sockets = sockets
            .iter()
            .map(StdListener::try_clone)
            .collect::<std::io::Result<_>>()?;
        Ok(Listening {
            sockets,
            udp: Vec::new(),
            quic: None,
        })
    }

    /// Duplicates of the sockets, each with the worker that accepts from
    /// it: socket `j` goes to worker `j % n_workers`, and workers beyond the
    /// sockets' count share one (worker `i` takes socket `i % n_sockets`).
    /// Every socket is accepted from, so no queued connection is stranded.
    fn spread(&self, n_workers: usize) -> std::io::Result<Vec<(usize, StdListener)>> {
        let n_sockets = self.sockets.len();
        let mut out = Vec::with_capacity(n_sockets.max(n_workers));
        for (j, socket) in self.sockets.iter().enumerate() {
            out.push((j % n_workers, socket.try_clone()?));
        }
        for i in n_sockets..n_workers {
            out.push((i, self.sockets[i % n_sockets].try_clone()?));
        }
        Ok(out)
    }
}

impl From<std::net::TcpListener> for Listening {
    fn from(socket: std::net::TcpListener) -> Self {
        Listening {
            sockets: vec![StdListener::Tcp(socket)],
            udp: Vec::new(),
            quic: None,
        }
    }
}

impl From<StdListener> for Listening {
    fn from(socket: StdListener) -> Self {
        Listening {
            sockets: vec![socket],
            udp: Vec::new(),
            quic: None,
        }
    }
}

/// Duplicates of UDP sockets (new descriptors, same sockets).
fn duplicate_udp(sockets: &[std::net::UdpSocket]) -> std::io::Result<Vec<std::net::UdpSocket>> {
    sockets.iter().map(std::net::UdpSocket::try_clone).collect()
}

impl std::fmt::Debug for ShutdownHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShutdownHandle")
            .field("shut_down", &self.flag.load(Ordering::Relaxed))
            .finish()
    }
}
