//! Certificate files followed without SIGHUP (issue 28): a Kubernetes
//! Secret renewed by cert-manager, certbot's output. Every
//! `WATCH_INTERVAL` the files of the current generation's certificates
//! (`--tls-cert`/`--tls-key`, each site's `tls-cert`/`tls-key`) are
//! `stat`ed through their path, symlinks followed, so that a Secret
//! volume's swapped `..data` symlink shows as another inode; when any
//! identity (device, inode, size, modification time) changes, the
//! generation's certificates are read again (`TlsConfig::reload`). A
//! certificate and key that do not match (the certificate written, the key
//! not yet) are refused by that load and the certificates before stay in
//! use: one warning, and the next change is tried again.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use peregrine::{log, TlsConfig};

/// How often the files are looked at: a `stat` per file, a few seconds
/// late at most, and no inotify descriptor to keep across reloads.
const WATCH_INTERVAL: Duration = Duration::from_secs(2);

/// What the watcher follows: the current generation's certificates, and
/// their files as they were before it read them. A reload replaces it.
#[derive(Default)]
pub(crate) struct Watched {
    tls: Option<TlsConfig>,
    files: Files,
}

/// Files and their identities (`None`: missing).
pub(crate) type Files = Vec<(PathBuf, Option<Identity>)>;

/// The watcher's shared half.
pub(crate) type Shared = Arc<Mutex<Watched>>;

/// `paths` and their identities now: taken before a generation reads
/// them, so that a change made while it does is seen.
pub(crate) fn identities(paths: Vec<PathBuf>) -> Files {
    paths.into_iter().map(|p| (p.clone(), identity(&p))).collect()
}

/// What a generation's certificates are read from.
pub(crate) fn follow(shared: &Shared, tls: Option<&TlsConfig>, files: Files) {
    let mut w = shared.lock().unwrap_or_else(|e| e.into_inner());
    w.tls = tls.cloned();
    w.files = files;
}

/// Starts the watcher thread (inside the sandbox: it only reads files the
/// generation reads).
pub(crate) fn start(shared: Shared) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("peregrine-cert-watch".into())
        .spawn(move || loop {
            std::thread::sleep(WATCH_INTERVAL);
            let tls = {
                let mut w = shared.lock().unwrap_or_else(|e| e.into_inner());
                let now = identities(w.files.iter().map(|(p, _)| p.clone()).collect());
                if now == w.files {
                    continue;
                }
                w.files = now;
                w.tls.clone()
            };
            let Some(tls) = tls else { continue };
            match tls.reload() {
                Ok(n) => log::info(format_args!(
                    "certificate files changed: {} loaded again",
                    crate::messages::counted(n, "certificate")
                )),
                Err(e) => log::warn(format_args!(
                    "certificate files changed but do not load ({e}); still serving the ones before, \
                     until they change again"
                )),
            }
        })
        .map(drop)
}

/// A file's identity through its path, symlinks followed.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub(crate) struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

fn identity(path: &std::path::Path) -> Option<Identity> {
    let m = std::fs::metadata(path).ok()?;
    Some(Identity {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime: m.mtime(),
        mtime_nsec: m.mtime_nsec(),
    })
}
