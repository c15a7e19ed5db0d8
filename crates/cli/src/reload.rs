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
use build::build;

/// Where a listening socket came from, to find it again at the next
/// reload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
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
    /// The current generation's certificate files, followed by a thread.
    watched: watch::Shared,
}

/// Runs `hello` or `serve` until SIGINT or SIGTERM, reloading on SIGHUP
/// and reopening the access and error logs on SIGUSR1.
pub(crate) fn serve(argv: Vec<OsString>, command: Command) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
    // Before anything is bound: from now on a SIGHUP reloads, it does not
    // end the process.
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGUSR1, SIGHUP]).context("cannot handle signals")?;
    let inherited = peregrine::systemd::listen_fds().context("socket activation (LISTEN_FDS)")?;
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
    for path in args.unix_binds()? {
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
        watched: watch::Shared::default(),
    };
    let taken = (inherited.into_iter().enumerate())
        .map(|(i, socket)| (Origin::Inherited(i), socket))
        .collect();
    let (mut current, urls) = build(&command, taken, None, &mut process)?;
    watch::start(process.watched.clone()).context("cannot start the certificate files' watcher")?;
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
    warn_if_reload_cannot_read(&command, &process);
    if command.server_args().watch_config {
        match sandbox::config_file(&process.argv) {
            Some(path) => config_watch::start(path).context("watch-config")?,
            None => log::warn(format_args!("watch-config: there is no --config file to watch")),
        }
    }
    // Type=notify: serving from now on.
    if let Err(e) = peregrine::systemd::notify("READY=1") {
        log::warn(format_args!("cannot notify systemd: {e}"));
    }
    let mut retired: Vec<Retired> = Vec::new();
    for signal in signals.forever() {
        match signal {
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
    // SIGINT or SIGTERM: stop gracefully; a second one exits at once.
    // Generations still finishing after a reload close their idle
    // connections now too. The `--metrics` listener stays until they
    // are done, so that `/readyz` answers 503 rather than nothing.
    let _ = peregrine::systemd::notify("STOPPING=1");
    current.running.shutdown();
    for (handle, _) in &retired {
        handle.shutdown();
    }
    std::thread::Builder::new()
        .name("peregrine-signals".into())
        .spawn(move || {
            if signals.forever().any(|s| s == SIGINT || s == SIGTERM) {
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
