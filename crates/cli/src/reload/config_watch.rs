//! `watch-config = true` (`config_watch.rs`; `watch.rs` follows the
//! certificate files): the configuration file polled and a reload
//! asked for when it changes, for containers, where nobody is there to
//! send SIGHUP. Kubernetes updates a ConfigMap (or Secret) volume by
//! writing the new files into a new directory and renaming a symlink
//! (`..data`) over the old one; the file's path, `config.toml ->
//! ..data/config.toml`, never changes, so the watcher follows the path
//! to the file it leads to and compares that file's identity (device,
//! inode) and its size and times with the last look.
//!
//! A change raises SIGHUP in this process (`tgkill`, which the sandbox
//! allows): the reload is the one SIGHUP makes, in the signal loop, with
//! its log line, so there is one way to reload. A file that is missing
//! for a moment (an editor replacing it) is not a change; its return is
//! compared like any look. Polling, not inotify: inotify watches an inode,
//! and the swapped symlink's target is a new one every time.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use peregrine::log;

/// Between two looks: a second, as Caddy's `--watch` polls; a ConfigMap
/// takes the kubelet a minute to update anyway.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// What is compared between two looks.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Look {
    /// Where the path leads, symlinks resolved.
    target: PathBuf,
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

fn look(path: &Path) -> Option<Look> {
    let target = std::fs::canonicalize(path).ok()?;
    let m = std::fs::metadata(&target).ok()?;
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    Some(Look {
        target,
        dev: m.dev(),
        ino: m.ino(),
        size: m.len(),
        mtime_ns: ns(m.mtime(), m.mtime_nsec()),
        ctime_ns: ns(m.ctime(), m.ctime_nsec()),
    })
}

/// Starts the thread that watches `path` for as long as the process runs.
pub(crate) fn start(path: PathBuf) -> anyhow::Result<()> {
    let mut last = look(&path);
    let shown = path.display().to_string();
    std::thread::Builder::new()
        .name("peregrine-watch-config".into())
        .spawn(move || loop {
            std::thread::sleep(WATCH_INTERVAL);
            let now = look(&path);
            if now.is_none() || now == last {
                continue;
            }
            last = now;
            log::info(format_args!("{} changed: reloading", path.display()));
            if let Err(e) = signal_hook::low_level::raise(signal_hook::consts::SIGHUP) {
                log::error(format_args!("cannot ask for a reload: {e}"));
            }
        })?;
    log::info(format_args!(
        "watching {shown} for changes (every {} s)",
        WATCH_INTERVAL.as_secs()
    ));
    Ok(())
}
