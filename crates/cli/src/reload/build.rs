//! One generation built from the settings, in steps: the identity and the
//! certificates checked, the engine's `Server` configured, its listeners
//! planned and attached (sockets taken over from the previous generation
//! or from systemd, new addresses bound), the metrics listener, the
//! workers started, and only then anything changed. A start that fails is
//! said in the command line's terms (`StartFailure`).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use peregrine::{log, AccessLog, Identity, Listening, Metrics, Request, Response, Router, Running, Server, TlsConfig};
use peregrine_files::FileServer;

use super::{Generation, Origin, Process, Role, ServedArchive};
use crate::access::basic::{self, Guard, Notes, Verifier};
use crate::access::Finish;
use crate::commands::serve::is_archive_root;
use crate::config;
use crate::flags::{Command, ServerArgs};
use crate::sandbox;

/// Where each listener comes from and what it speaks, in the order the
/// engine is given them (and lists them).
type Plan = Vec<(Origin, Role)>;

/// Builds and starts a generation from `command`, on the sockets `taken`
/// from the previous one (or from systemd) and new ones for new addresses.
/// Also returns the URLs listened on, for the first line. Nothing is
/// changed unless it succeeds.
pub(super) fn build(
    command: &Command,
    taken: Vec<(Origin, Listening)>,
    previous: Option<&Generation>,
    process: &mut Process,
) -> anyhow::Result<(Generation, String)> {
    let args = command.server_args();
    if let Some(level) = args.log_level {
        log::set_level(level);
    }
    let first = previous.is_none();
    check_identity(args, process, first)?;
    let acme_sites = match command {
        Command::Serve { sites, .. } => crate::acme::check(sites, &args.tls)?,
        _ => Vec::new(),
    };
    let cert_identities = super::watch::identities(cert_files(command));
    let tls = load_tls(command, args, first)?;
    let tls = match &process.acme {
        Some(acme) if args.tls.acme_ca.is_some() => Some(acme.attach(tls, &acme_sites)?),
        Some(_) => tls,
        None => {
            anyhow::ensure!(
                acme_sites.is_empty(),
                "--acme-ca was not given at start, when the ACME process is started (before the sandbox): \
                 restart to begin using ACME"
            );
            tls
        }
    };
    let srv = configure(args, process, first, tls.is_some())?;
    let error_log = crate::logger::Route::to(args.error_log.as_deref(), args.error_log_format)?;
    let plan = plan_listeners(args, process, !acme_sites.is_empty())?;
    check_client_addresses(command, &taken, process)?;
    check_upstreams_are_not_ours(command, &plan, &taken, process)?;
    let proxy = args.proxy_sources()?;
    let mut srv = attach_listeners(srv, &plan, taken, tls.as_ref(), proxy.as_ref(), process)?;

    let metrics = args
        .metrics
        .map(|_| process.metrics.get_or_insert_with(|| Arc::new(Metrics::new())).clone());
    if let Some(m) = &metrics {
        srv = srv.metrics(m.clone());
    }
    let metrics_server = start_metrics_server(args.metrics, metrics.as_ref(), process)?;
    if let Some(acme) = &process.acme {
        acme.report_to(metrics.as_ref());
    }
    let (running, archives, notes) = match start(command, srv, previous) {
        Ok(started) => started,
        Err(e) => {
            if let Some((_, m)) = metrics_server {
                m.shutdown();
            }
            let root_given_up = process.identity.user.is_some() || process.identity.group.is_some();
            let failure = StartFailure::of(&e, args.tls.redirect_http, first, root_given_up);
            return Err(failure.explain(e));
        }
    };

    // Started: from here on nothing fails.
    error_log.apply();
    crate::health::serving(running.health());
    if let Some(acme) = &process.acme {
        acme.adopt(tls.as_ref(), &acme_sites, &args.tls);
    }
    super::watch::follow(&process.watched, tls.as_ref(), cert_identities);
    warn_of_protection(&notes, &plan, tls.is_some());
    adopt_metrics_server(process, args.metrics, metrics_server);
    if let Some(m) = &metrics {
        archive_gauges(m, &archives);
        if caches(command) {
            peregrine::proxy::cache::publish_all(m);
        }
    }
    for a in archives.iter().filter(|a| a.kept) {
        a.server.reload();
    }
    let urls = urls(&plan, &running, tls.is_some());
    let generation = Generation {
        number: 1,
        running,
        origins: plan.iter().map(|(origin, _)| *origin).collect(),
        archives,
    };
    Ok((generation, urls))
}

/// Whether the server has a response cache: `--proxy-cache`, or a
/// route's `cache` (its metrics are published then, summed over every
/// cache of the process).
fn caches(command: &Command) -> bool {
    let Command::Serve { proxy_cache, sites, .. } = command else {
        return false;
    };
    proxy_cache.is_some()
        || sites
            .iter()
            .flat_map(|s| &s.routes)
            .any(|r| matches!(&r.handler, crate::sites::HandlerSpec::Proxy(p) if p.cache.is_some()))
}

/// The certificate and key files a generation reads: the flags' and
/// each site's.
fn cert_files(command: &Command) -> Vec<std::path::PathBuf> {
    let tls = &command.server_args().tls;
    let mut files: Vec<std::path::PathBuf> = tls.certs.iter().chain(&tls.keys).cloned().collect();
    if let Command::Serve { sites, .. } = command {
        for (cert, key) in sites.iter().flat_map(|s| &s.tls) {
            files.push(cert.clone());
            files.push(key.clone());
        }
    }
    files
}

/// `--user` and `--group` are those of the start: root was given up then
/// and cannot be had again.
fn check_identity(args: &ServerArgs, process: &Process, first: bool) -> anyhow::Result<()> {
    let identity = Identity {
        user: args.user.clone(),
        group: args.group.clone(),
    };
    anyhow::ensure!(
        first || identity == process.identity,
        "--user and --group cannot change while serving (root was given up at start); restart to change them"
    );
    Ok(())
}

/// The certificates, read again from their files (with sites, each site's
/// for its names: `sites::tls`); at a reload a failure says that the ones
/// loaded before are kept.
fn load_tls(command: &Command, args: &ServerArgs, first: bool) -> anyhow::Result<Option<TlsConfig>> {
    let loaded = match command {
        Command::Serve { sites, .. } if !sites.is_empty() => {
            // The pairs' and flags' checks, without loading them as one set.
            args.tls
                .config()
                .map(drop)
                .and_then(|()| super::sites::tls(sites, &args.tls))
        }
        _ => args.tls.config(),
    };
    let loaded = loaded.and_then(|tls| ticket_keys(args).map(|()| tls));
    let loaded = loaded.map(|tls| tls.map(|tls| tls.kernel_tls(args.tls.ktls)));
    match loaded {
        Ok(tls) => Ok(tls),
        Err(e) if !first => Err(e.context("TLS reload failed, keeping the certificates loaded before")),
        Err(e) => Err(e),
    }
}

/// The process's session-ticket keys (every `TlsConfig` shares them:
/// `TicketKeys::process`): the key file's, read again at each reload, or
/// the process's own random ones, which a reload keeps. A key file no
/// longer given gives way to a fresh random key.
fn ticket_keys(args: &ServerArgs) -> anyhow::Result<()> {
    let keys = peregrine::TicketKeys::process();
    match &args.tls.tls_ticket_key_file {
        Some(path) => keys.load_file(path)?,
        None if keys.is_from_file() => keys.install(peregrine::TicketKeys::random()),
        None => {}
    }
    Ok(())
}

/// The engine's server with the settings that are not listeners: limits,
/// protocols, workers, the access log, and (at start only) the identity
/// to become once the ports are bound. `tls`: certificates were loaded
/// (the flags', the sites' or ACME's), so HTTP/3 is on unless refused.
fn configure(args: &ServerArgs, process: &Process, first: bool, tls: bool) -> anyhow::Result<Server> {
    let mut srv = Server::new()
        .limits(args.limits.to_limits()?)
        .access_log_format(args.access_log_format.clone())
        .request_id_header(args.request_id_header)
        .http2(!args.no_http2)
        .http3(args.http3(tls)?)
        .trusted_proxies(args.trusted(), args.client_addr_header);
    if first {
        srv = srv.run_as(process.run_as.clone());
    }
    // Bounded by the flag's parser (`Limits::N_WORKERS_RANGE`).
    srv = srv.workers(args.workers.unwrap_or(process.n_workers_default));
    if let Some(path) = &args.access_log {
        srv = srv.access_log(AccessLog::from_arg(path));
    }
    Ok(srv)
}

/// The addresses, in the order they are shown: `--bind` (or the default),
/// systemd's, the redirecting one. A Unix socket's path is added to those
/// the process has seen, so that `Origin::Unix` finds it again at the
/// next reload. With ACME sites and no listener given, the defaults are
/// Caddy's: HTTPS on port 443 and the redirect (with the HTTP-01
/// challenge) on port 80, of every address, IPv4 and IPv6 (`[::]`, dual
/// stack: Let's Encrypt validates over IPv6 first where a name has an
/// AAAA record).
fn plan_listeners(args: &ServerArgs, process: &mut Process, acme: bool) -> anyhow::Result<Plan> {
    args.unix_binds()?;
    let mut binds: Vec<Origin> = Vec::new();
    for bind in &args.bind {
        binds.extend(bind.0.iter().map(|a| Origin::Configured(*a)));
        if let Some(path) = &bind.1 {
            let i = match process.unix_paths.iter().position(|p| p == path) {
                Some(i) => i,
                None => {
                    process.unix_paths.push(path.clone());
                    process.unix_paths.len() - 1
                }
            };
            binds.push(Origin::Unix(i));
        }
    }
    let mut redirect: Vec<SocketAddr> = args.tls.redirect_http.into_iter().collect();
    if binds.is_empty() && process.n_inherited == 0 {
        let (serve, http) = default_addrs(acme);
        binds.extend(serve.into_iter().map(Origin::Configured));
        if redirect.is_empty() {
            redirect = http;
        }
    }
    let plan = (binds.iter().map(|o| (*o, Role::Serve)))
        .chain((0..process.n_inherited).map(|i| (Origin::Inherited(i), Role::Serve)))
        .chain(redirect.into_iter().map(|a| (Origin::Configured(a), Role::Redirect)))
        .collect();
    Ok(plan)
}

/// The listeners when none is given: 127.0.0.1:8080, or with ACME sites
/// `:443` and a redirect on `:80` (both dual stack, as `--bind :PORT`).
fn default_addrs(acme: bool) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
    let every = |port: &str| crate::flags::parse_bind(port).map(|b| b.0).unwrap_or_default();
    if acme {
        (every(":443"), every(":80"))
    } else {
        (vec![SocketAddr::from(([127, 0, 0, 1], 8080))], Vec::new())
    }
}

/// IP rules and rate limits judge the client's address, which a
/// Unix-domain client does not have (the engine never takes a Unix peer
/// for a trusted proxy, and such a listener takes no PROXY header): with
/// any `unix:` listener (bound, kept, or passed by systemd), a route that
/// has either is refused at start, named. nginx would let every such
/// client through unjudged, or share one bucket among them all; a rule
/// that silently does nothing is worse than a refusal.
fn check_client_addresses(command: &Command, taken: &[(Origin, Listening)], process: &Process) -> anyhow::Result<()> {
    let Command::Serve { sites, .. } = command else {
        return Ok(());
    };
    let unix = command
        .server_args()
        .bind
        .iter()
        .find_map(|b| b.1.clone())
        .or_else(|| taken.iter().find_map(|(_, l)| l.unix_path().map(ToOwned::to_owned)))
        .or_else(|| {
            taken.iter().find_map(|(o, _)| match o {
                Origin::Unix(i) => process.unix_paths.get(*i).cloned(),
                _ => None,
            })
        });
    let Some(unix) = unix else {
        return Ok(());
    };
    for site in sites {
        for route in &site.routes {
            let what = match (&route.ip, &route.rate_limit) {
                (Some(_), _) => "ip rules judge",
                (None, Some(_)) => "a rate limit judges",
                (None, None) => continue,
            };
            anyhow::bail!(
                "site {}, route {} ({}): {what} the client's address, and unix:{} gives none (a \
                 Unix-domain client has no address, and is never taken for a trusted proxy): serve on TCP \
                 addresses only, or take the rule out of this route",
                site.names[0],
                route.path,
                route.given,
                unix.display()
            );
        }
    }
    Ok(())
}

/// An upstream that is one of the server's own listeners sends every
/// request back to the proxy, which sends it on again (the `Via` check
/// answers 508 at the second hop, but each request still costs two
/// exchanges and a 508 instead of an answer): refused at start and at a
/// reload, naming the route and the listener. An upstream is a listener
/// when their ports are the same and its address is the listener's, a
/// wildcard (`0.0.0.0` connects to this host), or loopback while the
/// listener takes every address; a `unix:` upstream when its path is a
/// listener's. A port 0 listener cannot be named in advance.
fn check_upstreams_are_not_ours(
    command: &Command,
    plan: &Plan,
    taken: &[(Origin, Listening)],
    process: &Process,
) -> anyhow::Result<()> {
    let Command::Serve {
        sites,
        proxy,
        proxy_files_first,
        ..
    } = command
    else {
        return Ok(());
    };
    let mut upstreams: Vec<(String, &str)> = Vec::new();
    let flags = proxy.iter().map(|f| ("--proxy", f));
    for (name, flag) in flags.chain(proxy_files_first.iter().map(|f| ("--proxy-files-first", f))) {
        if let Some((prefix, url)) = flag.split_once('=') {
            upstreams.push((format!("{name} {prefix}"), url));
        }
    }
    for site in sites {
        for route in &site.routes {
            if let crate::sites::HandlerSpec::Proxy(p) = &route.handler {
                let what = format!("site {}, route {} ({})", site.names[0], route.path, route.given);
                upstreams.extend(p.urls().map(|url| (what.clone(), url.as_str())));
            }
        }
    }
    if upstreams.is_empty() {
        return Ok(());
    }
    let mut tcp: Vec<SocketAddr> = Vec::new();
    let mut unix: Vec<std::path::PathBuf> = Vec::new();
    for (origin, _) in plan {
        match origin {
            Origin::Configured(addr) => tcp.push(*addr),
            Origin::Unix(i) => unix.extend(process.unix_paths.get(*i).cloned()),
            Origin::Inherited(_) => {}
        }
    }
    for (origin, listening) in taken {
        if matches!(origin, Origin::Inherited(_)) {
            tcp.extend(listening.local_addr().ok());
            unix.extend(listening.unix_path().map(ToOwned::to_owned));
        }
    }
    tcp.retain(|a| a.port() != 0);
    for (what, url) in upstreams {
        let ours = if let Some(path) = url.strip_prefix("unix:") {
            unix.iter()
                .find(|p| p.as_path() == std::path::Path::new(path))
                .map(|p| format!("unix:{}", p.display()))
        } else {
            let up = peregrine::proxy::Upstream::parse(url).with_context(|| what.clone())?;
            up.socket_addrs()
                .iter()
                .find_map(|u| tcp.iter().find(|l| is_listener(*u, **l)))
                .map(ToString::to_string)
        };
        if let Some(listener) = ours {
            anyhow::bail!(
                "{what}: the upstream {url} is this server's own listener {listener}: every request would come back \
                 to the proxy; point it at the application's address"
            );
        }
    }
    Ok(())
}

/// Whether connecting to `up` reaches the socket listening on `listener`.
fn is_listener(up: SocketAddr, listener: SocketAddr) -> bool {
    let (u, l) = (up.ip().to_canonical(), listener.ip().to_canonical());
    up.port() == listener.port() && (u == l || u.is_unspecified() || (l.is_unspecified() && u.is_loopback()))
}

/// Gives the server its listeners in the plan's order: the socket `taken`
/// for the same origin where there is one, else a new address to bind.
fn attach_listeners(
    mut srv: Server,
    plan: &Plan,
    mut taken: Vec<(Origin, Listening)>,
    tls: Option<&TlsConfig>,
    proxy: Option<&peregrine::client_addr::TrustedProxies>,
    process: &Process,
) -> anyhow::Result<Server> {
    for &(origin, role) in plan {
        let old = taken
            .iter()
            .position(|(o, _)| *o == origin)
            .map(|i| taken.swap_remove(i).1);
        srv = match (old, origin, role, tls) {
            (Some(socket), _, Role::Redirect, _) => srv.listener_redirect(socket),
            (Some(socket), _, Role::Serve, Some(tls)) => srv.listener_tls(socket, tls.clone()),
            (Some(socket), _, Role::Serve, None) => srv.listener(socket),
            (None, Origin::Configured(addr), Role::Redirect, _) => srv.redirect_http(addr),
            (None, Origin::Configured(addr), Role::Serve, Some(tls)) => srv.bind_tls(addr, tls.clone()),
            (None, Origin::Configured(addr), Role::Serve, None) => srv.bind(addr),
            (None, Origin::Unix(i), Role::Serve, None) => srv.bind_unix(&process.unix_paths[i]),
            (None, Origin::Unix(i), _, _) => {
                anyhow::bail!(
                    "unix:{}: TLS on a Unix-domain socket is not supported",
                    process.unix_paths[i].display()
                )
            }
            (None, Origin::Inherited(i), _, _) => anyhow::bail!("socket {i} passed by systemd is gone"),
        };
        if let (Some(trusted), Role::Serve) = (proxy, role) {
            srv = srv.proxy_protocol(trusted.clone());
        }
    }
    // Sockets of addresses no longer configured: these duplicates close
    // now, the old generation's own when it has finished.
    drop(taken);
    Ok(srv)
}

/// A new `--metrics` listener, unless the one running is on the same
/// address (it is kept).
fn start_metrics_server(
    addr: Option<SocketAddr>,
    metrics: Option<&Arc<Metrics>>,
    process: &mut Process,
) -> anyhow::Result<Option<(SocketAddr, Running)>> {
    // The listener an upgrade passed, for the same address.
    let inherited = match &mut process.inherited_metrics {
        Some((at, _)) if Some(*at) == addr => process.inherited_metrics.take().map(|(_, l)| l),
        _ => None,
    };
    Ok(match (addr, metrics, &process.metrics_server) {
        (Some(addr), _, Some((old, _))) if *old == addr => None,
        (Some(addr), Some(m), _) => Some((addr, serve_metrics(addr, m.clone(), inherited)?)),
        _ => None,
    })
}

/// Starts the workers with the handler `command` asks for (with sites,
/// the sites). An archive at the path (and with the settings) the
/// previous generation served is kept (`ServedArchive::kept`).
fn start(
    command: &Command,
    srv: Server,
    previous: Option<&Generation>,
) -> anyhow::Result<(Running, Vec<ServedArchive>, Notes)> {
    let Command::Serve {
        root,
        files,
        archive,
        sites,
        proxy,
        proxy_files_first,
        proxy_ca,
        proxy_cache,
        ..
    } = command
    else {
        let running = srv.start(sandbox::planted_bug(Hello))?;
        return Ok((running, Vec::new(), Notes::default()));
    };
    let previous = previous.map_or(&[][..], |p| &p.archives[..]);
    // Credentials are checked by this generation's verifier (its threads
    // start with the first check, and end with the generation).
    let verifier = Verifier::new();
    let proxies = crate::proxy::upstreams(proxy, proxy_files_first, proxy_ca.as_deref(), *proxy_cache)?;
    // Under a files-first prefix a path no file answers goes upstream; a
    // fallback would answer it first, and the upstream never (GET).
    let fallbacks: Vec<&str> = if sites.is_empty() {
        files.fallback.as_deref().into_iter().collect()
    } else {
        sites.iter().filter_map(|s| s.files.fallback.as_deref()).collect()
    };
    if let (Some(first), Some(fallback)) = (proxy_files_first.first(), fallbacks.first()) {
        anyhow::bail!(
            "--proxy-files-first {first} with the fallback {fallback}: ambiguous, a path no file answers goes to the \
             fallback and never upstream (take one of them out)"
        );
    }
    // A proxy route passes WebSockets through: HTTP/2 clients may open
    // them with an extended CONNECT (SETTINGS_ENABLE_CONNECT_PROTOCOL).
    let proxied = !proxies.is_empty()
        || sites
            .iter()
            .any(|s| (s.routes.iter()).any(|r| matches!(r.handler, crate::sites::HandlerSpec::Proxy(_))));
    let srv = srv.websockets(proxied);
    if !sites.is_empty() {
        let access_log = command.server_args().access_log.as_deref();
        let built = super::sites::build(sites, access_log, previous, &verifier, &proxies, *proxy_cache)?;
        let running = srv.start_sites(built.sites)?;
        return Ok((running, built.archives, built.notes));
    }
    // Paths `_headers` protects, with no site to name the realm.
    let gate = Arc::new(Guard {
        verifier,
        realm: basic::REALM_DEFAULT.to_owned(),
        finish: Finish::default(),
        checked_outside: false,
    });
    let mut notes = Notes::default();
    let what = root.display().to_string();
    if !is_archive_root(root, files, archive)? {
        let files = FileServer::new(files.options(root.clone()))?;
        notes.files(&what, &files);
        let page = crate::proxy::directory_error_page(root)?;
        let proxies = crate::proxy::with_error_page(&proxies, page.as_deref());
        let files = files.with_gate(gate);
        // No wrapper at all without proxies: the files' answer path stays as it was.
        let running = if proxies.is_empty() {
            srv.start(sandbox::planted_bug(files))?
        } else {
            notes_under_proxies(&mut notes, &proxies);
            let handler = crate::proxy::prefixed(Arc::new(files), &proxies);
            srv.start(sandbox::planted_bug(handler))?
        };
        return Ok((running, Vec::new(), notes));
    }
    let options = archive.options()?;
    let same = previous.iter().find(|a| a.root == *root && a.options == options);
    let (server, kept) = match same {
        Some(same) => (same.server.clone(), true),
        None => (super::sites::open_archive(root, &options, previous)?, false),
    };
    notes.archive(&what, &server);
    let page = server.file_bytes(crate::proxy::ERROR_PAGE_KEY);
    let proxies = crate::proxy::with_error_page(&proxies, page.as_deref());
    let gated = server.clone().with_gate(gate);
    let running = if proxies.is_empty() {
        srv.start(sandbox::planted_bug(gated))?
    } else {
        notes_under_proxies(&mut notes, &proxies);
        let handler = crate::proxy::prefixed(Arc::new(gated), &proxies);
        srv.start(sandbox::planted_bug(handler))?
    };
    let served = ServedArchive {
        root: root.clone(),
        options,
        server,
        site: None,
        kept,
    };
    Ok((running, vec![served], notes))
}

/// Notes the `_headers` rules `--proxy` prefixes go around (they come
/// before the files or archive).
pub(super) fn notes_under_proxies(notes: &mut Notes, proxies: &[crate::proxy::Prefix]) {
    for (prefix, ..) in proxies {
        notes.under_proxy(prefix, &format!("--proxy {prefix}"), |_| true);
    }
}

/// Says at start what protected paths the operator should know of: a
/// `public` dropped from their answers, protections a proxy goes around,
/// and passwords written in the clear in `_headers` while a listener is
/// cleartext and not loopback (Basic credentials cross the network as
/// readable as the file holds them: serve over TLS, or on loopback behind
/// a proxy that has it).
fn warn_of_protection(notes: &Notes, plan: &Plan, tls: bool) {
    for line in notes.public.iter().chain(&notes.bypassed) {
        log::warn(format_args!("{line}"));
    }
    if tls || notes.plain.is_empty() {
        return;
    }
    let exposed: Vec<String> = plan
        .iter()
        .filter(|(_, role)| matches!(role, Role::Serve))
        .filter_map(|(origin, _)| match origin {
            Origin::Configured(addr) if !addr.ip().is_loopback() => Some(addr.to_string()),
            Origin::Inherited(i) => Some(format!("systemd socket {i}")),
            _ => None,
        })
        .collect();
    if exposed.is_empty() {
        return;
    }
    for place in &notes.plain {
        log::warn(format_args!(
            "{place}: a password written in the clear protects it, and {} is cleartext and not loopback: \
             credentials cross the network readable; serve over TLS (--tls-cert), or bind loopback behind a \
             proxy that has it, and put a hash in _headers",
            exposed.join(", ")
        ));
    }
}

/// `peregrine hello`'s handler: the same answer to every request, given
/// at the head (a body is never read).
struct Hello;

impl peregrine::Handler for Hello {
    fn call(&self, _req: &Request<'_>) -> peregrine::Reply {
        Response::text("Hello, World!").into()
    }

    fn body_use(&self, _req: &Request<'_>) -> peregrine::BodyUse {
        peregrine::BodyUse::Ignore
    }
}

/// Why a generation did not start, where the command line can say more
/// than the engine's error: read from the error once (`of`), then matched
/// as data (`explain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StartFailure {
    /// At a reload, a new address refused for want of privilege (a port
    /// below 1024) after root was given up at start.
    NeedsRoot,
    /// HTTP/3's UDP port on a TLS address is taken (by another program):
    /// the TCP side alone would serve.
    Http3Port,
    /// The `--redirect-http` address could not be bound.
    RedirectHttp(SocketAddr),
    /// Nothing to add to the engine's words.
    Other,
}

impl StartFailure {
    /// What `e`, from starting a generation, means here. `root_given_up`:
    /// `--user` or `--group` dropped root at start.
    fn of(e: &anyhow::Error, redirect_http: Option<SocketAddr>, first: bool, root_given_up: bool) -> Self {
        let Some(engine) = e.downcast_ref::<peregrine::Error>() else {
            return StartFailure::Other;
        };
        // After --user, binding a port below 1024 is refused.
        let denied = engine.is_bind() && engine.io_error().kind() == std::io::ErrorKind::PermissionDenied;
        if !first && denied && root_given_up {
            return StartFailure::NeedsRoot;
        }
        if engine.is_http3_bind() {
            return StartFailure::Http3Port;
        }
        match redirect_http {
            // The redirecting listener is bound with the others: name its
            // flag, as `--metrics ADDR: cannot listen on ...` is named.
            Some(addr) if engine.bind_addr() == Some(addr) => StartFailure::RedirectHttp(addr),
            _ => StartFailure::Other,
        }
    }

    /// `e`, with what the command line adds to it.
    fn explain(self, e: anyhow::Error) -> anyhow::Error {
        match self {
            StartFailure::NeedsRoot => {
                e.context("root was given up at start, so a new port below 1024 needs a restart")
            }
            StartFailure::Http3Port => anyhow::anyhow!("{e:#}; --no-http3 serves without it"),
            StartFailure::RedirectHttp(addr) => {
                e.context(format!("--redirect-http {addr}{}", config::origin("--redirect-http")))
            }
            StartFailure::Other => e,
        }
    }
}

/// Once the generation has started: the new metrics listener replaces
/// the old one, or the old one stops when `--metrics` is gone.
fn adopt_metrics_server(process: &mut Process, addr: Option<SocketAddr>, new: Option<(SocketAddr, Running)>) {
    // Said once the error log goes where --error-log says.
    if let Some((_, m)) = &new {
        log::info(format_args!("metrics on http://{}/metrics", m.local_addr()));
    }
    match (addr, new) {
        (_, Some(new)) => {
            if let Some((_, old)) = process.metrics_server.replace(new) {
                old.shutdown();
            }
        }
        (None, None) => {
            if let Some((_, old)) = process.metrics_server.take() {
                old.shutdown();
            }
        }
        (Some(_), None) => {}
    }
}

/// The URLs listened on, in the plan's order: `https://` for the serving
/// addresses when TLS is on, `unix:PATH` for a Unix socket.
fn urls(plan: &Plan, running: &Running, tls: bool) -> String {
    let urls: Vec<String> = (plan.iter().zip(running.local_addrs()).zip(running.unix_paths()))
        .map(|(((_, role), local), unix)| {
            if let Some(path) = unix {
                return format!("unix:{}", path.display());
            }
            let scheme = match (role, tls) {
                (Role::Serve, true) => "https",
                _ => "http",
            };
            format!("{scheme}://{local}/")
        })
        .collect();
    urls.join(", ")
}

/// The archives' gauges, in place of those of the archives served
/// before: unlabelled for the one archive of `serve ARCHIVE`, labelled by
/// site otherwise (`site="a.test"`), so that one site's swap moves its
/// own series only.
fn archive_gauges(m: &Metrics, archives: &[ServedArchive]) {
    const GENERATION: &str = "peregrine_archive_generation";
    const SWAPS: &str = "peregrine_archive_swaps_total";
    const REFUSED: &str = "peregrine_archive_refused_total";
    const FALLBACKS: &str = "peregrine_archive_fallbacks_total";
    for name in [GENERATION, SWAPS, REFUSED, FALLBACKS] {
        m.remove(name);
    }
    for served in archives {
        let labels: Vec<(&str, &str)> = served.site.as_deref().map(|s| ("site", s)).into_iter().collect();
        let a = served.server.clone();
        m.gauge_with(
            GENERATION,
            &labels,
            "The archive being served: 1 at start, one more per swap.",
            move || a.generation(),
        );
        let a = served.server.clone();
        m.counter_with(
            SWAPS,
            &labels,
            "Archives swapped in while serving (rename or SIGHUP).",
            move || a.generation() - 1,
        );
        let a = served.server.clone();
        m.counter_with(
            REFUSED,
            &labels,
            "Replacement archives refused (damaged, unreadable, unsigned, wrongly signed or rolled back); the \
             old one kept serving.",
            move || a.refused(),
        );
        let a = served.server.clone();
        m.counter_with(
            FALLBACKS,
            &labels,
            "Requests the new archive had no answer for that an archive kept after a swap answered \
             (--keep-previous).",
            move || a.fallbacks(),
        );
    }
}

/// Serves `/metrics` (Prometheus text format) and the health endpoints
/// (`/livez`, `/readyz`, `/healthz`: `health.rs`) on the `--metrics`
/// address: a server of its own with one worker, so scrapes and probes
/// never wait behind client traffic and are not counted in it.
fn serve_metrics(addr: SocketAddr, metrics: Arc<Metrics>, inherited: Option<Listening>) -> anyhow::Result<Running> {
    let app = Router::new()
        .get("/metrics", move |_: &Request<'_>| {
            Response::bytes("text/plain; version=0.0.4; charset=utf-8", metrics.render())
                .with_header("Cache-Control", "no-store")
        })
        .get("/livez", crate::health::livez)
        .get("/readyz", crate::health::readyz)
        .get("/healthz", crate::health::livez)
        .post("/purge", purge);
    let srv = match inherited {
        Some(listening) => Server::new().listener(listening),
        None => Server::new().bind(addr),
    };
    let running = srv.workers(1).start(app).with_context(|| format!("--metrics {addr}"))?;
    Ok(running)
}

/// `POST /purge[?host=H&path=PREFIX]` on the metrics listener: empties
/// the caches (`--proxy-cache`'s and routes'; each worker at its next
/// lookup), or only the entries of host H (without a port, on any port)
/// whose path begins with PREFIX. An admin path,
/// as the listener is (`/metrics` tells what the server serves), taken
/// from this host only (`may_purge`): the listener is often open to a
/// whole cluster for scrapes (the Kubernetes manifest binds
/// `0.0.0.0:9090`), where anyone could empty the caches at will.
fn purge(req: &Request<'_>) -> Response {
    if !may_purge(req.peer_addr().ip()) {
        return Response::error(403)
            .with_body("purge: only from this host (a loopback address); or send SIGWINCH to the server\n");
    }
    let (mut host, mut path) = (None, None);
    for pair in req.query().unwrap_or("").split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = String::from_utf8_lossy(&peregrine::percent_decode(value.as_bytes())).into_owned();
        match name {
            "host" => host = Some(value),
            "path" => path = Some(value),
            "" => {}
            _ => return Response::error(400).with_body(format!("purge: unknown parameter {name:?} (host, path)\n")),
        }
    }
    let n = peregrine::proxy::cache::purge_all(host.as_deref(), path.as_deref());
    log::info(format_args!(
        "purge: {n} caches (host {}, path {})",
        host.as_deref().unwrap_or("any"),
        path.as_deref().unwrap_or("any")
    ));
    Response::text(format!("purged {n} caches\n")).with_header("Cache-Control", "no-store")
}

/// Whether a purge may come from `peer`: a loopback address (IPv4,
/// IPv6, or IPv4 mapped into IPv6), as Caddy's admin endpoint listens on
/// localhost only.
fn may_purge(peer: std::net::IpAddr) -> bool {
    peer.to_canonical().is_loopback()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_purge_is_taken_from_loopback_peers_only() {
        for (peer, may) in [
            ("127.0.0.1", true),
            ("127.3.2.1", true),
            ("::1", true),
            ("::ffff:127.0.0.1", true),
            ("10.0.0.7", false),
            ("192.168.1.2", false),
            ("::ffff:10.0.0.7", false),
            ("fd00::1", false),
        ] {
            assert_eq!(super::may_purge(peer.parse().unwrap()), may, "{peer}");
        }
    }

    #[test]
    fn acme_sites_without_a_listener_get_443_and_a_redirect_on_80_of_every_address() {
        let parse = |a: &str| a.parse::<std::net::SocketAddr>().unwrap();
        let (serve, redirect) = super::default_addrs(true);
        assert_eq!(serve[0], parse("0.0.0.0:443"));
        assert_eq!(redirect[0], parse("0.0.0.0:80"));
        // IPv6 too, where the host has it.
        assert_eq!(serve.len(), redirect.len());
        if serve.len() == 2 {
            assert_eq!((serve[1], redirect[1]), (parse("[::]:443"), parse("[::]:80")));
        }
        assert_eq!(super::default_addrs(false), (vec![parse("127.0.0.1:8080")], vec![]));
    }
}
