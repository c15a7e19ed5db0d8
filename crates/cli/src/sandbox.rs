//! The sandbox a serving command runs in (`peregrine_sandbox`), from its
//! settings: what it may read (the root, or the archive's directory, and
//! each site's and route's; the
//! certificates', the archives' public keys' and the configuration file's
//! directories; the resolver's
//! files in /etc, for host names in `--bind`) and where it may
//! write (the access and error logs' directories). Set up once, in the main thread
//! before the first generation starts any thread; a reload must stay within
//! it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::Context;
use peregrine_sandbox::Policy;

use crate::config;
use crate::flags::{Cli, Command};
use crate::sites::HandlerSpec;

/// The sandbox in force.
pub(crate) struct Sandbox {
    /// What it allows; `None` with `--no-sandbox`.
    policy: Option<Policy>,
    /// What was applied, for the start line: "sandbox: landlock ABI v7,
    /// seccomp 73 syscalls", "sandbox off (--no-sandbox)".
    pub(crate) summary: String,
}

/// Sandboxes the process for `command` (unless `--no-sandbox`). Must run
/// while the process has one thread.
pub(crate) fn enter(command: &Command, argv: &[OsString]) -> anyhow::Result<Sandbox> {
    if command.server_args().no_sandbox {
        return Ok(Sandbox {
            policy: None,
            summary: "sandbox off (--no-sandbox)".into(),
        });
    }
    let policy = policy(command, argv)?;
    let applied = peregrine_sandbox::apply(&policy).context("cannot set up the sandbox (--no-sandbox turns it off)")?;
    Ok(Sandbox {
        summary: format!("sandbox: {applied}"),
        policy: Some(policy),
    })
}

impl Sandbox {
    /// Whether the configuration `command` can be served within this
    /// sandbox; if not, why, for the reload's line.
    pub(crate) fn check(&self, command: &Command, argv: &[OsString]) -> anyhow::Result<()> {
        let wanted = !command.server_args().no_sandbox;
        let Some(start) = &self.policy else {
            anyhow::ensure!(
                !wanted,
                "the sandbox cannot be turned on while serving; restart to turn it on"
            );
            return Ok(());
        };
        anyhow::ensure!(
            wanted,
            "the sandbox set at start cannot be turned off while serving; restart with --no-sandbox"
        );
        let next = policy(command, argv)?;
        start
            .covers(&next)
            .map_err(|outside| anyhow::anyhow!("{outside}; restart to widen it"))
    }
}

/// Connecting out to the upstream at `url` (a reverse-proxy route).
fn grant_connect(policy: &mut Policy, url: &str) -> anyhow::Result<()> {
    let up = peregrine::proxy::Upstream::parse(url)?;
    policy.connect = true;
    for port in up.tcp_ports() {
        if !policy.connect_ports.contains(&port) {
            policy.connect_ports.push(port);
        }
    }
    Ok(())
}

/// What `command` needs to read and write.
fn policy(command: &Command, argv: &[OsString]) -> anyhow::Result<Policy> {
    let args = command.server_args();
    let mut policy = Policy {
        set_ids: args.user.is_some() || args.group.is_some(),
        ..Policy::default()
    };
    let mut pems: Vec<&Path> = args
        .tls
        .certs
        .iter()
        .chain(&args.tls.keys)
        .chain(&args.tls.tls_ticket_key_file)
        .map(PathBuf::as_path)
        .collect();
    let mut logs: Vec<&str> = args.access_log.as_deref().into_iter().collect();
    // The public keys archives are checked with, read again at a reload.
    let mut keys: Vec<&Path> = Vec::new();
    if let Command::Serve {
        root,
        files,
        archive,
        sites,
        proxy,
        proxy_files_first,
        proxy_ca,
        proxy_allow,
        ..
    } = command
    {
        grant_root(&mut policy, root, files.follow_symlinks)?;
        for flag in proxy.iter().chain(proxy_files_first) {
            let (_, url) = flag.split_once('=').unwrap_or(("", flag));
            grant_connect(&mut policy, url)?;
        }
        // The origins `_redirects` proxy rules may reach (the address
        // guard still decides which addresses, at each connect).
        for origin in proxy_allow {
            grant_connect(&mut policy, origin)?;
        }
        // `--proxy-ca`, read again at a reload.
        pems.extend(proxy_ca.as_deref());
        keys.extend(archive.require_signature.iter().map(PathBuf::as_path));
        // Each site's roots, certificates and access log, as the top
        // level's.
        for site in sites {
            grant_root(&mut policy, &site.root, site.files.follow_symlinks)?;
            for route in &site.routes {
                match &route.handler {
                    HandlerSpec::Files { root, files } => grant_root(&mut policy, root, files.follow_symlinks)?,
                    HandlerSpec::Archive { root, archive } => {
                        grant_root(&mut policy, root, false)?;
                        keys.extend(archive.require_signature.iter().map(PathBuf::as_path));
                    }
                    HandlerSpec::Proxy(p) => {
                        for url in p.urls() {
                            grant_connect(&mut policy, url)?;
                        }
                        // The files tried first (`files-first`), and the
                        // error page, read again at a reload.
                        match p.files_first.as_deref() {
                            Some(HandlerSpec::Files { root, files }) => {
                                grant_root(&mut policy, root, files.follow_symlinks)?
                            }
                            Some(HandlerSpec::Archive { root, archive }) => {
                                grant_root(&mut policy, root, false)?;
                                keys.extend(archive.require_signature.iter().map(PathBuf::as_path));
                            }
                            _ => {}
                        }
                        pems.extend(p.error_page.as_deref());
                        // The CA file of an https:// upstream, read again
                        // at a reload.
                        pems.extend(p.ca.as_deref());
                    }
                    HandlerSpec::Redirect { .. } => {}
                }
                // A route's auth service is an upstream too.
                if let Some(f) = &route.forward_auth {
                    grant_connect(&mut policy, &f.url)?;
                }
            }
            keys.extend(site.archive.require_signature.iter().map(PathBuf::as_path));
            pems.extend(site.tls.iter().flat_map(|(cert, key)| [cert.as_path(), key.as_path()]));
            logs.extend(site.access_log.as_deref());
        }
    }
    // Certificates are renewed by replacing the files (or a symlink's
    // target: the directory of the file it leads to is granted); so may
    // keys be. The directory of the path as given too: a Kubernetes Secret
    // (or ConfigMap) volume swaps a symlink (`..data`) to a new directory
    // beside the old one, which the target's directory would not cover.
    for pem in pems.into_iter().chain(keys) {
        if let Ok(file) = std::fs::canonicalize(pem) {
            policy.read(&swappable(&std::path::absolute(&file)?))?;
            policy.read(&swappable(&std::path::absolute(pem)?))?;
        }
    }
    // A reload reads `--bind HOST:PORT` again and resolves HOST: the C
    // library's resolver reads these files. Names in /etc/hosts resolve;
    // DNS does not (`connect` is refused), and the reload says it cannot
    // resolve the name.
    for file in RESOLVER_FILES.iter().map(Path::new).filter(|f| f.exists()) {
        policy.read(file)?;
    }
    if let Some(file) = config_file(argv) {
        let target = std::fs::canonicalize(&file).with_context(|| format!("{}", file.display()))?;
        policy.read(&swappable(&target))?;
        policy.read(&swappable(&file))?;
    }
    for log in logs.into_iter().filter(|&l| l != "-") {
        policy
            .append(&parent(Path::new(log)))
            .with_context(|| format!("the access log {log}"))?;
    }
    // `--bind unix:PATH`: made (at start or a reload) and removed at exit.
    for bind in &args.bind {
        if let Some(path) = &bind.1 {
            policy
                .sockets(&parent(path))
                .with_context(|| format!("--bind unix:{}", path.display()))?;
        }
    }
    if let Some(log) = &args.error_log {
        policy
            .append(&parent(log))
            .with_context(|| format!("the error log {}", log.display()))?;
    }
    Ok(policy)
}

/// Reading beneath a root: a directory, or an archive's directory (as
/// `is_archive_root`, any file that is not a directory is served as an
/// archive, which is swapped by renaming another into its directory),
/// and where the root is a symlink, the directory its target is in. A
/// path that does not exist is granted nothing: opening it fails after
/// this, with the message of the setting that names it.
fn grant_root(policy: &mut Policy, root: &Path, follow_symlinks: bool) -> anyhow::Result<()> {
    if root.as_os_str().is_empty() {
        return Ok(()); // no DIR|ARCHIVE: sites instead
    }
    let archive = std::fs::metadata(root).is_ok_and(|m| !m.is_dir());
    let readable = if archive { parent(root) } else { root.to_owned() };
    if readable.exists() {
        policy
            .read(&readable)
            .with_context(|| format!("the root {}", root.display()))?;
    }
    // A root given through a symlink, as a deploy's `current ->
    // releases/N` or `site.prg -> ../releases/v7.prg`: the directory its
    // target is in, so that the link can be swapped to another release
    // there (an archive's watcher takes it; a directory's root, a
    // reload). Without it, an archive behind a link could not be opened
    // at all.
    if std::fs::symlink_metadata(root).is_ok_and(|m| m.file_type().is_symlink()) {
        if let Ok(target) = std::fs::canonicalize(root) {
            let dir = parent(&target);
            if dir.exists() {
                policy
                    .read(&dir)
                    .with_context(|| format!("the root {} (a symlink to {})", root.display(), target.display()))?;
            }
        }
    }
    if follow_symlinks && !archive {
        for target in symlink_targets(root) {
            policy.read(&target)?;
        }
    }
    Ok(())
}

/// What glibc's `getaddrinfo` reads to resolve a host name from files.
const RESOLVER_FILES: [&str; 5] = [
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/resolv.conf",
    "/etc/gai.conf",
    "/etc/hosts",
];

/// `--follow-symlinks`: where the symlinks beneath `root` that lead out of
/// it lead (what they point to, and everything beneath). A symlink added
/// later that leads elsewhere is refused by the sandbox until a restart (a
/// reload says so).
fn symlink_targets(root: &Path) -> Vec<PathBuf> {
    let Ok(inside) = std::fs::canonicalize(root) else {
        return Vec::new();
    };
    let mut targets = Vec::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => dirs.push(entry.path()),
                Ok(t) if t.is_symlink() => {
                    // Dangling links lead nowhere to grant.
                    if let Ok(target) = std::fs::canonicalize(entry.path()) {
                        if !target.starts_with(&inside) {
                            targets.push(target);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    targets
}

/// The directory `path` is in (`.` for a bare file name).
/// Directories that hold much more than a server's own files: the system's
/// configuration, other services' keys, home directories.
const SHARED_DIRS: &[&str] = &[
    "/",
    "/etc",
    "/etc/ssl",
    "/etc/ssl/private",
    "/etc/pki/tls/private",
    "/root",
    "/home",
    "/usr",
    "/usr/local",
    "/usr/local/etc",
    "/var",
    "/var/lib",
    "/tmp",
    "/var/tmp",
    "/dev/shm",
    "/opt",
    "/srv",
    "/run",
];

/// What to grant for a file that is replaced by renaming another into its
/// directory (a configuration, a certificate, a key): the directory, so
/// the new file is readable, unless the directory is one shared with the
/// rest of the system (`SHARED_DIRS`, or a home directory), where it would
/// open `/etc/shadow` or `~/.ssh`: then the file alone, and a file renamed
/// over it is refused at a reload (which names it) until a restart.
fn swappable(file: &Path) -> PathBuf {
    let dir = parent(file);
    let home = dir.parent() == Some(Path::new("/home"));
    if home || SHARED_DIRS.iter().any(|d| dir == Path::new(d)) {
        file.to_owned()
    } else {
        dir
    }
}

fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// The `--config` file (or `PEREGRINE_CONFIG`) of the command line.
pub(crate) fn config_file(argv: &[OsString]) -> Option<PathBuf> {
    let matches = config::command::<Cli>()
        .ignore_errors(true)
        .try_get_matches_from(argv)
        .ok()?;
    let (name, mut sub) = matches.subcommand()?;
    if name == config::CHECK {
        sub = sub.subcommand()?.1;
    }
    sub.try_get_one::<PathBuf>("config").ok().flatten().cloned()
}

impl std::fmt::Display for Sandbox {
    /// In full, for `check-config`: the summary, then what may be read
    /// and written.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.summary)?;
        let Some(policy) = &self.policy else { return Ok(()) };
        let show = |paths: &[PathBuf]| {
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        write!(
            f,
            " (others fail with EPERM, exec among them); read beneath {}",
            show(&policy.read)
        )?;
        if !policy.append.is_empty() {
            write!(f, "; logs in {}", show(&policy.append))?;
        }
        if !policy.sockets.is_empty() {
            write!(f, "; Unix sockets in {}", show(&policy.sockets))?;
        }
        Ok(())
    }
}

/// A planted bug for the tests, in debug builds only: with
/// `PEREGRINE_TEST_PLANTED_BUG=1`, `/open?PATH` tries to read PATH,
/// `/exec` to become `/bin/true`, `/spawn` to run it, `/connect?ADDR`
/// to connect to ADDR, and each answers
/// with what happened (the errno that stopped it). The sandbox is what
/// must stop them. Other paths go to `inner`.
#[cfg(debug_assertions)]
pub(crate) fn planted_bug(inner: impl peregrine::Handler) -> impl peregrine::Handler {
    Planted {
        planted: std::env::var_os("PEREGRINE_TEST_PLANTED_BUG").is_some(),
        inner,
    }
}

/// `planted_bug`'s handler: the planted paths, else `inner` (whose use of
/// request bodies it keeps).
#[cfg(debug_assertions)]
struct Planted<H> {
    planted: bool,
    inner: H,
}

#[cfg(debug_assertions)]
impl<H: peregrine::Handler> peregrine::Handler for Planted<H> {
    fn call(&self, req: &peregrine::Request<'_>) -> peregrine::Reply {
        use peregrine::{Reply, Response};
        use std::os::unix::process::CommandExt;
        let outcome = |result: std::io::Result<String>| -> Reply {
            match result {
                Ok(done) => Response::text(format!("done: {done}")),
                Err(e) => Response::text(format!("errno {}: {e}", e.raw_os_error().unwrap_or(0))),
            }
            .into()
        };
        match (self.planted, req.path()) {
            (true, "/open") => outcome(std::fs::read(req.query().unwrap_or("")).map(|b| format!("{} bytes", b.len()))),
            // Replaces the process if it works: the test then gets no answer.
            (true, "/exec") => outcome(Err(std::process::Command::new("/bin/true").exec())),
            (true, "/spawn") => outcome(std::process::Command::new("/bin/true").status().map(|s| s.to_string())),
            // Blocking, on the loop: a test hook, with a short timeout.
            (true, "/connect") => outcome(
                req.query()
                    .unwrap_or("")
                    .parse::<std::net::SocketAddr>()
                    .map_err(std::io::Error::other)
                    .and_then(|a| std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(2)))
                    .map(|_| "connected".to_owned()),
            ),
            _ => self.inner.call(req),
        }
    }

    fn body_use(&self, req: &peregrine::Request<'_>) -> peregrine::BodyUse {
        self.inner.body_use(req)
    }

    fn takes_unknown_method(&self, req: &peregrine::Request<'_>) -> bool {
        self.inner.takes_unknown_method(req)
    }
}

/// Release builds have no planted bug.
#[cfg(not(debug_assertions))]
pub(crate) fn planted_bug<H: peregrine::Handler>(inner: H) -> H {
    inner
}
