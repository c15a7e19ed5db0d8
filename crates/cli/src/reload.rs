//! Serving with reloads: `hello` and `serve` run as generations of
//! workers, and SIGHUP starts the next one, as nginx does within one
//! process.
//!
//! On SIGHUP the command line is read again as at start (the same
//! arguments, the `--config` file, the `PEREGRINE_*` variables; a flag still
//! beats the file) and the next generation is built from it completely:
//! limits, workers, access log, file options, certificates (read again from
//! their files), the root or archive, metrics. It accepts from duplicates of
//! the current generation's listening sockets (`Running::listeners`), so no
//! connection waiting in an accept queue is lost and no port is bound again;
//! only addresses new to the configuration are bound. Then the old
//! generation is handed over (`Running::hand_over`): it stops accepting,
//! finishes requests in flight, and answers each idle keep-alive
//! connection's next request with `Connection: close`, under the old
//! settings. Addresses the new configuration dropped close when the old
//! generation has finished.
//!
//! Anything wrong (a bad value at a file line, a certificate that does not
//! load, a root that cannot be opened, a new port that cannot be bound)
//! leaves everything as it was, with one line saying why.
//!
//! SIGHUP's older meanings are part of this: certificates are read again by
//! building the generation, and an archive at the same path (and with the
//! same settings: mode, keys, previous generations kept) is kept and asked
//! to reload ([`ArchiveServer::reload`]), once. The
//! libraries install no signal handler (the binary owns every signal), so
//! exactly one thing happens per signal: this reload.
//!
//! Each generation, the first included, is built by `build.rs`, one named
//! step at a time.

mod build;
mod config_watch;
mod sites;
mod watch;

use std::collections::VecDeque;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context;
use peregrine::{log, Identity, Metrics, Running, ShutdownHandle};
use peregrine_archive::{ArchiveServer, ServeOptions};

use crate::commands::serve::root_refusal;
use crate::config;
use crate::flags::{Cli, Command, ServerArgs};
use crate::messages::one_line;
use crate::sandbox::{self, Sandbox};
use crate::upgrade::{self, Upgrader};
use build::build;

/// Where a listening socket came from, to find it again at the next
/// reload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// An address of the configuration (`--bind`, `--redirect-http`, or
    /// the default) as written there: `127.0.0.1:0` keeps the port it got.
    Configured(SocketAddr),
    /// The n-th socket systemd passed (`LISTEN_FDS`).
    Inherited(usize),
    /// A `--bind unix:PATH`: the index of PATH in `Process::unix_paths`.
    Unix(usize),
}

/// What a listening socket speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// HTTP, or HTTPS when certificates are given.
    Serve,
    /// `--redirect-http`: plain HTTP redirected to HTTPS.
    Redirect,
}

/// One set of workers with one configuration.
struct Generation {
    number: u64,
    running: Running,
    /// The origin of each of `running`'s listeners, in its order.
    origins: Vec<Origin>,
    /// The archives served (one, or each site's), each kept by the next
    /// generation if its path and settings are unchanged.
    archives: Vec<ServedArchive>,
}

/// An archive and how it was asked for.
struct ServedArchive {
    root: PathBuf,
    /// As configured (what a reload compares).
    options: ServeOptions,
    server: ArchiveServer,
    /// The site it is served for (its first name), with sites.
    site: Option<String>,
    /// Taken over from the previous generation (asked to reload once
    /// this one has started).
    kept: bool,
}

/// A generation that has handed over, finishing on a thread of its own.
type Retired = (ShutdownHandle, JoinHandle<()>);

/// What lives as long as the process.
struct Process {
    /// The command line, parsed again at each reload.
    argv: Vec<OsString>,
    /// `--user`/`--group` at start: root is given up once, so they cannot
    /// change.
    identity: Identity,
    /// The same by number, looked up before the sandbox hides the user
    /// database.
    run_as: Identity,
    /// How many sockets systemd passed.
    n_inherited: usize,
    /// Counters keep adding up across generations.
    metrics: Option<Arc<Metrics>>,
    /// The `--metrics` listener, as configured, kept while its address is.
    metrics_server: Option<(SocketAddr, Running)>,
    /// The sandbox set up at start, which every reload must stay within.
    sandbox: Sandbox,
    /// Every `--bind unix:PATH` seen, at start and at reloads (`Origin::Unix`
    /// indexes it).
    unix_paths: Vec<PathBuf>,
    /// Workers when `--workers` is not given: one per core the process
    /// may use, counted before the sandbox hides the cgroup's CPU quota.
    n_workers_default: usize,
    /// The ACME process, when sites get certificates by ACME (started
    /// with the process; a reload keeps it as it is).
    acme: Option<crate::acme::Parent>,
    /// The unsandboxed process that starts a new executable on SIGUSR2
    /// (`upgrade.rs`); none if it could not be started.
    upgrader: Option<Upgrader>,
    /// The `--metrics` listener an upgrade passed, taken by the first
    /// generation if its address is still configured.
    inherited_metrics: Option<(SocketAddr, peregrine::Listening)>,
    /// The current generation's certificate files, followed by a thread.
    watched: watch::Shared,
}

/// Why a process stops serving: the hook for whatever must happen from
/// the first moment of a drain (a readiness check turning 503, a line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DrainCause {
    /// SIGINT or SIGTERM.
    Shutdown,
    /// A new executable serves on the same sockets (SIGUSR2).
    Upgrade,
}

/// Runs `hello` or `serve` until SIGINT or SIGTERM, reloading on SIGHUP
/// and reopening the access and error logs on SIGUSR1.
pub(crate) fn serve(argv: Vec<OsString>, command: Command) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH};
    // First: the sockets of an upgrade, if this process is the new
    // executable, and systemd's, made close-on-exec before any program is
    // started (the upgrader, the ACME process).
    let upgraded = upgrade::Inherited::take().context("binary upgrade (PEREGRINE_UPGRADE)")?;
    let inherited = peregrine::systemd::listen_fds().context("socket activation (LISTEN_FDS)")?;
    // Before the sandbox (which forbids executing) and before the signal
    // iterator (whose handler must run after the one that records
    // SIGUSR2's sender).
    let upgrader = match Upgrader::start(&argv) {
        Ok(upgrader) => Some(upgrader),
        Err(e) => {
            log::warn(format_args!("{e:#}: SIGUSR2 will not upgrade the binary"));
            None
        }
    };
    // SIGWINCH purges the response caches (`--proxy-cache`), when a
    // process of root or this user sends it: a terminal's resize (made by
    // the kernel) does not. Its sender is tracked before the iterator,
    // as SIGUSR2's.
    let purger = peregrine::upgrade::track_sender(SIGWINCH).context("cannot watch for SIGWINCH (cache purge)")?;
    let owner_uid = peregrine::upgrade::uid();
    // Before anything is bound: from now on a SIGHUP reloads, it does not
    // end the process.
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGUSR1, SIGHUP, SIGUSR2, SIGWINCH])
        .context("cannot handle signals")?;
    let args = command.server_args();
    let n_workers_default = std::thread::available_parallelism().map_or(1, |n| n.get());
    let identity = Identity {
        user: args.user.clone(),
        group: args.group.clone(),
    };
    let run_as = args.run_as()?;
    if let Some(why) = root_refusal(&command, &run_as) {
        anyhow::bail!(why);
    }
    // As root, before the sandbox and the drop.
    give_logs_to(args, &identity, &run_as)?;
    // A socket file left by a previous run is removed if nothing listens
    // on it; one in use is refused. Before the sandbox, which forbids
    // connecting.
    let passed: Vec<&Path> = (upgraded.iter().flat_map(|u| &u.listeners))
        .filter_map(|h| h.listening.unix_path())
        .collect();
    for path in args.unix_binds()?.into_iter().filter(|p| !passed.contains(p)) {
        peregrine::remove_stale_socket(path)
            .with_context(|| format!("--bind unix:{}{}", path.display(), config::origin("--bind")))?;
    }
    // Before any thread starts (the first generation's workers, the
    // archive's watcher, the metrics listener's), so that all are inside.
    // The files caches' descriptor bound: the sandbox refuses prlimit64.
    peregrine_files::read_descriptor_limit();
    // The ACME process executes this program: before the sandbox.
    let acme = match &command {
        Command::Serve { sites, .. } => {
            let acme_sites = crate::acme::check(sites, &args.tls)?;
            crate::acme::check_files(&args.tls)?;
            crate::acme::Parent::start(&acme_sites, &args.tls)?
        }
        _ => None,
    };
    // Kernel TLS is probed once, on a loopback connection of its own
    // (`tls/ktls.rs`): before the sandbox, which forbids connecting.
    let ktls = peregrine::kernel_tls_status(args.tls.ktls);
    let sandbox = sandbox::enter(&command, &argv)?;
    let mut acme = acme;
    if let Some(acme) = &mut acme {
        acme.listen()?;
    }
    let mut process = Process {
        argv,
        identity,
        run_as,
        n_inherited: inherited.len(),
        metrics: None,
        metrics_server: None,
        sandbox,
        unix_paths: Vec::new(),
        n_workers_default,
        acme,
        upgrader,
        inherited_metrics: None,
        watched: watch::Shared::default(),
    };
    let mut taken: Vec<(Origin, peregrine::Listening)> = (inherited.into_iter().enumerate())
        .map(|(i, socket)| (Origin::Inherited(i), socket))
        .collect();
    let mut upgraded = upgraded;
    if let Some(up) = &mut upgraded {
        adopt(std::mem::take(&mut up.listeners), &mut taken, &mut process);
    }
    let (mut current, urls) = build(&command, taken, None, &mut process)?;
    if let Some(acme) = &mut process.acme {
        acme.relay_logs()?;
    }
    watch::start(process.watched.clone()).context("cannot start the certificate files' watcher")?;
    if let Some(off) = crate::platform::features_off(std::env::consts::OS) {
        log::warn(format_args!("{off}"));
    }
    // "sandbox: ...; serving ROOT on URL, URL": the line ends with the
    // addresses, which scripts (and the tests) read.
    let sandbox = match &process.acme {
        Some(acme) => format!("{}; {}", process.sandbox.summary, acme.summary),
        None => process.sandbox.summary.clone(),
    };
    match &command {
        Command::Serve { sites, .. } if !sites.is_empty() => {
            let names: Vec<&str> = sites.iter().map(|s| s.names[0].as_str()).collect();
            log::info(format_args!(
                "{sandbox}; serving {} ({}) on {urls}",
                crate::messages::counted(sites.len(), "site"),
                names.join(", ")
            ));
            for site in sites {
                warn_if_nothing_to_serve(&site.root, &site.files.index, &process.identity);
            }
        }
        Command::Serve { root, files, .. } => {
            log::info(format_args!("{sandbox}; serving {} on {urls}", root.display()));
            warn_if_nothing_to_serve(root, &files.index, &process.identity);
        }
        _ => log::info(format_args!("{sandbox}; hello on {urls}")),
    }
    if urls.contains("https://") {
        log::info(format_args!("{ktls}"));
    }
    warn_if_reload_cannot_read(&command, &process);
    if command.server_args().watch_config {
        match sandbox::config_file(&process.argv) {
            Some(path) => config_watch::start(path).context("watch-config")?,
            None => log::warn(format_args!("watch-config: there is no --config file to watch")),
        }
    }
    match upgraded {
        // The old process drains once this is said (MAINPID= first).
        Some(up) => {
            log::info(format_args!(
                "upgrade: this process ({}) serves now",
                std::process::id()
            ));
            up.confirm();
        }
        // Type=notify: serving from now on.
        None => {
            if let Err(e) = peregrine::systemd::notify("READY=1") {
                log::warn(format_args!("cannot notify systemd: {e}"));
            }
        }
    }
    let mut retired: Vec<Retired> = Vec::new();
    let mut cause = DrainCause::Shutdown;
    // Signals that came while an upgrade was under way, handled after it.
    let mut queued: VecDeque<i32> = VecDeque::new();
    while let Some(signal) = queued.pop_front().or_else(|| signals.forever().next()) {
        match signal {
            SIGUSR2 => {
                if let Some(pid) = upgrade(&process, &current, &mut signals, &mut queued) {
                    if queued.contains(&SIGHUP) {
                        log::warn(format_args!(
                            "SIGHUP during the upgrade not applied here: process {pid} serves now, with the \
                             configuration it read at its start; send it SIGHUP if the files changed since"
                        ));
                    }
                    cause = DrainCause::Upgrade;
                    break;
                }
            }
            SIGHUP => {
                let _ = peregrine::systemd::notify_reloading();
                match reload(&mut process, &mut current, &mut retired) {
                    Ok(()) => log::info(format_args!("configuration reloaded (generation {})", current.number)),
                    Err(e) => log::error(format_args!(
                        "configuration not reloaded, still serving generation {}: {}",
                        current.number,
                        one_line(&e)
                    )),
                }
                let _ = peregrine::systemd::notify("READY=1");
            }
            SIGWINCH => match purger.last_uid() {
                Some(uid) if uid == 0 || uid == owner_uid => {
                    let n = peregrine::proxy::cache::purge_all(None, None);
                    log::info(format_args!("SIGWINCH: purged {n} response cache(s)"));
                }
                // A resize of the terminal, or another user's process.
                _ => {}
            },
            SIGUSR1 => {
                // Each failure once, with the file, what was done to it
                // and the system's error: "cannot open access log PATH:
                // Permission denied (os error 13)".
                let as_user = match &process.identity.user {
                    Some(user) => format!(" (running as user {user})"),
                    None => String::new(),
                };
                match crate::logger::reopen() {
                    Ok(true) => log::info(format_args!("error log reopened")),
                    Ok(false) => {}
                    Err(e) => log::error(format_args!("{e}{as_user}; still writing to the old file")),
                }
                match current.running.reopen_logs() {
                    Ok(()) => log::info(format_args!("access log reopened")),
                    Err(e) => log::error(format_args!("{}{as_user}; still writing to the old file", e.io_error())),
                }
            }
            signal => {
                // Not ready first, before any listener closes.
                crate::health::begin_drain();
                let name = if signal == SIGINT { "SIGINT" } else { "SIGTERM" };
                log::info(format_args!(
                    "{name}: shutting down: not ready, not accepting, finishing what is in flight \
                     (within --shutdown-timeout; the signal again exits at once)"
                ));
                break;
            }
        }
    }
    let handles = drain(cause, &current, &retired, &process);
    // SIGINT or SIGTERM: a second one exits at once. After an upgrade,
    // the first closes idle connections (systemd's stop reaches the
    // draining process too), the next exits. Those that came during the
    // upgrade count first.
    std::thread::Builder::new()
        .name("peregrine-signals".into())
        .spawn(move || {
            let mut stops = (queued.into_iter().chain(signals.forever())).filter(|&s| s == SIGINT || s == SIGTERM);
            if cause == DrainCause::Upgrade && stops.next().is_some() {
                for handle in &handles {
                    handle.shutdown();
                }
            }
            if stops.next().is_some() {
                std::process::exit(130);
            }
        })
        .context("cannot start the signal thread")?;
    let result = current.running.join();
    for (_, thread) in retired {
        let _ = thread.join();
    }
    if let Some((_, metrics)) = process.metrics_server.take() {
        metrics.shutdown();
        let _ = metrics.join();
    }
    log::info(format_args!("stopped"));
    Ok(result?)
}

/// Stops serving, from the first moment: every generation and the metrics
/// listener stop accepting and finish what is in flight. This is the one
/// entry point of a drain, whatever its cause (the place to turn a
/// readiness check to 503 first). A shutdown closes idle connections at
/// once and tells systemd STOPPING=1; after an upgrade the new process is
/// systemd's main process, so nothing is said to it, and idle keep-alive
/// connections may send one more request, answered with `Connection:
/// close`, as at a reload. Returns the handles that stop it all for good.
fn drain(cause: DrainCause, current: &Generation, retired: &[Retired], process: &Process) -> Vec<ShutdownHandle> {
    // Not ready first, before any listener closes (`/readyz`).
    crate::health::begin_drain();
    let mut handles = vec![current.running.shutdown_handle()];
    handles.extend(retired.iter().map(|(h, _)| h.clone()));
    match cause {
        DrainCause::Shutdown => {
            // The `--metrics` listener stays until the generations are
            // done (stopped after they are joined), so that `/readyz`
            // answers 503 rather than nothing.
            let _ = peregrine::systemd::notify("STOPPING=1");
            for handle in &handles {
                handle.shutdown();
            }
        }
        DrainCause::Upgrade => {
            current.running.hand_over();
            for (handle, _) in retired {
                handle.shutdown();
            }
            if let Some((_, metrics)) = &process.metrics_server {
                metrics.hand_over();
            }
        }
    }
    handles.extend(process.metrics_server.iter().map(|(_, m)| m.shutdown_handle()));
    handles
}

/// SIGUSR2: hands the listening sockets to the upgrader, which starts the
/// program anew on them; the new process's pid once it serves (this one
/// then drains), `None` (with a line saying why) if it does not.
///
/// While the new process starts (up to `upgrade::READY_TIMEOUT`), the
/// signals are still read: SIGTERM or SIGINT cancels the upgrade (the
/// upgrader kills the new process) and is then acted on as always, so a
/// stop is never held up by an upgrade (systemd's TimeoutStopSec);
/// SIGHUP, SIGUSR1 and SIGWINCH are deferred to `queued`, done as soon as
/// the upgrade has failed (a reload then builds on the sockets this
/// process still has); another SIGUSR2 is ignored.
fn upgrade(
    process: &Process,
    current: &Generation,
    signals: &mut signal_hook::iterator::Signals,
    queued: &mut VecDeque<i32>,
) -> Option<u32> {
    use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR2};
    let Some(upgrader) = &process.upgrader else {
        log::error(format_args!(
            "SIGUSR2: no binary upgrade (the upgrader process could not be started), still serving"
        ));
        return None;
    };
    if let Err(why) = upgrader.allowed() {
        log::warn(format_args!("{why}"));
        return None;
    }
    let mut handed = Vec::new();
    let listening = match current.running.listeners() {
        Ok(l) => l,
        Err(e) => {
            log::error(format_args!("upgrade failed, still serving: {e}"));
            return None;
        }
    };
    for (origin, listening) in current.origins.iter().zip(listening) {
        handed.push(upgrade::Handed {
            origin: upgrade::Tag::Served(*origin),
            listening,
        });
    }
    if let Some((addr, metrics)) = &process.metrics_server {
        match metrics.listeners() {
            Ok(l) => handed.extend(l.into_iter().map(|listening| upgrade::Handed {
                origin: upgrade::Tag::Metrics(*addr),
                listening,
            })),
            Err(e) => {
                log::error(format_args!("upgrade failed, still serving: the metrics listener: {e}"));
                return None;
            }
        }
    }
    log::info(format_args!(
        "upgrade: starting {} on the listening sockets (generation {} serves meanwhile)",
        upgrader.exe.display(),
        current.number
    ));
    let outcome = match upgrader.hand_over(&handed) {
        Err(why) => Err(why),
        Ok(()) => 'wait: loop {
            if let Some(outcome) = upgrader.answer() {
                break 'wait outcome;
            }
            for signal in signals.pending() {
                match signal {
                    SIGTERM | SIGINT => {
                        let name = if signal == SIGINT { "SIGINT" } else { "SIGTERM" };
                        log::info(format_args!(
                            "{name} during the upgrade: stopping the new process, then shutting down"
                        ));
                        queued.push_back(signal);
                        break 'wait upgrader.cancel();
                    }
                    SIGUSR2 => log::warn(format_args!("SIGUSR2 ignored: an upgrade is under way")),
                    other => queued.push_back(other),
                }
            }
        },
    };
    match outcome {
        Ok(pid) => {
            for h in &handed {
                h.listening.keep_socket_file();
            }
            log::info(format_args!(
                "upgrade: process {pid} serves now; this process ({}) drains and exits",
                std::process::id()
            ));
            Some(pid)
        }
        Err(why) => {
            log::error(format_args!(
                "upgrade failed, still serving generation {}: {why}",
                current.number
            ));
            None
        }
    }
}

/// The listeners an upgrade passed, put where the first generation finds
/// them: by origin in `taken`, a Unix socket's path among the process's
/// (so that `Origin::Unix` finds it), systemd's counted, the metrics
/// listener aside.
fn adopt(handed: Vec<upgrade::Handed>, taken: &mut Vec<(Origin, peregrine::Listening)>, process: &mut Process) {
    for h in handed {
        match h.origin {
            upgrade::Tag::Served(Origin::Unix(_)) => {
                let Some(path) = h.listening.unix_path().map(ToOwned::to_owned) else {
                    continue;
                };
                process.unix_paths.push(path);
                taken.push((Origin::Unix(process.unix_paths.len() - 1), h.listening));
            }
            upgrade::Tag::Served(Origin::Inherited(i)) => {
                process.n_inherited = process.n_inherited.max(i + 1);
                taken.push((Origin::Inherited(i), h.listening));
            }
            upgrade::Tag::Served(origin) => taken.push((origin, h.listening)),
            upgrade::Tag::Metrics(addr) => process.inherited_metrics = Some((addr, h.listening)),
        }
    }
}

/// SIGHUP: builds the next generation from the configuration as it is now,
/// then hands the current one over to it (in the background).
fn reload(process: &mut Process, current: &mut Generation, retired: &mut Vec<Retired>) -> anyhow::Result<()> {
    let cli: Cli = config::reparse(process.argv.clone())?;
    process.sandbox.check(&cli.command, &process.argv)?;
    let listening = current.running.listeners()?;
    let taken = current.origins.iter().copied().zip(listening).collect();
    let (mut next, _) = build(&cli.command, taken, Some(&*current), process)?;
    next.number = current.number + 1;
    let n_certs = cli.command.server_args().tls.certs.len();
    if n_certs > 0 {
        log::info(format_args!("TLS certificates reloaded ({n_certs})"));
    }
    let old = std::mem::replace(current, next);
    old.running.hand_over();
    let handle = old.running.shutdown_handle();
    let thread = std::thread::Builder::new()
        .name(format!("peregrine-retire-{}", old.number))
        .spawn(move || {
            if let Err(e) = old.running.join() {
                let e = anyhow::Error::new(e);
                log::error(format_args!("generation {}: {e:#}", old.number));
            }
        });
    // Without a thread to wait for it, the old generation still finishes.
    if let Ok(thread) = thread {
        retired.push((handle, thread));
    }
    retired.retain(|(_, t)| !t.is_finished());
    Ok(())
}

/// A directory that is empty, or that the server cannot read once it has
/// become `--user`, answers 404 or 403 to every request with no other sign
/// of trouble: one warning at start says so. Called after the privileges
/// were dropped, so every check is made as the user that serves (and by
/// `check-config`, which stays the user that runs it: it warns of an empty
/// root, and of one that user cannot read).
pub(crate) fn warn_if_nothing_to_serve(root: &Path, index: &[String], identity: &Identity) {
    if std::fs::metadata(root).is_ok_and(|m| !m.is_dir()) {
        return; // an archive, read whole before the privileges were dropped
    }
    let shown = root.display();
    let as_user = as_user(identity);
    let unreadable = |what: String, e: std::io::Error| {
        log::warn(format_args!(
            "{what} cannot be read{as_user} ({e}): requests for it will be answered 403 or 404"
        ))
    };
    match std::fs::read_dir(root).map(|mut entries| entries.next().is_none()) {
        Err(e) => unreadable(shown.to_string(), e),
        Ok(true) => log::warn(format_args!("{shown} is empty: every request will be answered 404")),
        Ok(false) => {
            for name in index {
                let path = root.join(name);
                if let Err(e) = std::fs::File::open(&path).and_then(|f| f.metadata()) {
                    if e.kind() == std::io::ErrorKind::PermissionDenied {
                        unreadable(path.display().to_string(), e);
                    }
                }
            }
        }
    }
}

/// `--user`: the log files are opened (created if missing) here, as root
/// before the privileges are dropped, and given to that user, as nginx
/// gives its workers' log files to their user. The process opens them
/// again by path after the drop, on SIGUSR1 and for each SIGHUP's
/// generation; a file root created and kept could not be opened then.
/// Chowning here, before the sandbox, needs no system call beyond those
/// serving needs, where keeping the descriptors open across reloads would
/// still leave SIGUSR1, which must open the path anew after logrotate
/// moved the file, unable to. Only regular files are given (`/dev/stdout`
/// is not), and only their owner changes, as nginx does: a group such as
/// `adm` stays.
///
/// A log whose directory the user cannot write to is reopened only while
/// its file is there: logrotate must then recreate it (`create`) or copy
/// it (`copytruncate`), which one warning says.
fn give_logs_to(args: &ServerArgs, identity: &Identity, run_as: &Identity) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let uid = run_as.user.as_deref().and_then(|u| u.parse::<u32>().ok());
    let gid = run_as.group.as_deref().and_then(|g| g.parse::<u32>().ok());
    let Some(uid) = uid else { return Ok(()) };
    let access_log = args.access_log.as_deref().filter(|&l| l != "-").map(Path::new);
    let logs = [("access log", access_log), ("error log", args.error_log.as_deref())];
    let who = identity.user.as_deref().unwrap_or("?");
    for (what, path) in logs.iter().filter_map(|(what, path)| Some((what, (*path)?))) {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open {what} {}", path.display()))?;
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            continue;
        }
        match std::os::unix::fs::fchown(&file, Some(uid), None) {
            Ok(()) => {}
            // Not root: starting says that --user needs root.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Ok(()),
            Err(e) => {
                return Err(e).with_context(|| format!("cannot give the {what} {} to user {who}", path.display()))
            }
        }
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        // The bits that apply to the process once it has dropped root:
        // its uid, and its one group (supplementary groups are dropped).
        let writable = std::fs::metadata(dir).is_ok_and(|m| {
            let bits = if m.uid() == uid {
                m.mode() >> 6
            } else if Some(m.gid()) == gid {
                m.mode() >> 3
            } else {
                m.mode()
            };
            uid == 0 || bits & 0o3 == 0o3
        });
        if !writable {
            log::warn(format_args!(
                "user {who} cannot create files in {}: once the {what} {} is moved away, SIGUSR1 cannot \
                 create it again, so have logrotate recreate it (`create`, owned by {who}) or copy it \
                 (`copytruncate`)",
                dir.display(),
                path.display()
            ));
        }
    }
    Ok(())
}

/// After the privileges were dropped: the files a SIGHUP reads again (the
/// configuration file, certificates and keys, the archive) that the user
/// the server has become cannot read, each named in a warning, since a
/// reload would fail on them (root cannot be regained to read them).
fn warn_if_reload_cannot_read(command: &Command, process: &Process) {
    if process.identity.user.is_none() && process.identity.group.is_none() {
        return;
    }
    let args = command.server_args();
    let config = sandbox::config_file(&process.argv);
    let mut archives = Vec::new();
    let mut site_tls = Vec::new();
    if let Command::Serve { root, sites, .. } = command {
        if std::fs::metadata(root).is_ok_and(|m| !m.is_dir()) {
            archives.push(root.clone());
        }
        for site in sites {
            if site.kind == crate::sites::RootKind::Archive {
                archives.push(site.root.clone());
            }
            site_tls.extend(site.tls.iter().cloned());
        }
    }
    let files = (config.iter().map(|f| ("the configuration file", f)))
        .chain(args.tls.certs.iter().map(|f| ("the certificate", f)))
        .chain(args.tls.keys.iter().map(|f| ("the private key", f)))
        .chain(site_tls.iter().map(|(f, _)| ("the certificate", f)))
        .chain(site_tls.iter().map(|(_, f)| ("the private key", f)))
        .chain(archives.iter().map(|f| ("the archive", f)));
    for (what, file) in files {
        if let Err(e) = std::fs::File::open(file) {
            log::warn(format_args!(
                "{what} {} cannot be read{} ({e}): a reload (SIGHUP) will fail until it can be",
                file.display(),
                as_user(&process.identity)
            ));
        }
    }
}

/// " by user NAME" (or group) for messages, or nothing without `--user`
/// or `--group`.
fn as_user(identity: &Identity) -> String {
    match (&identity.user, &identity.group) {
        (Some(user), _) => format!(" by user {user}"),
        (None, Some(group)) => format!(" by group {group}"),
        (None, None) => String::new(),
    }
}
