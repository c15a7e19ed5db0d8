//! What the workspace's tests share, so that each test file says only what
//! it checks: a counting global allocator (`alloc`), throwaway certificates
//! and a TLS client (`pki`), a raw HTTP/1.1 client (`http`), an HTTP/2
//! client that allocates nothing (`h2`), child processes that are killed
//! when a test fails (`process`), programs found or installed under a lock
//! and a time bound (`install`), scratch directories, and waiting for an
//! event instead of sleeping (`wait_until`).
//!
//! A dev-dependency only (`publish = false`); it depends on none of the
//! workspace's crates, so that every crate can use it without a cycle.

pub mod alloc;
pub mod h2;
pub mod http;
pub mod install;
pub mod pki;
pub mod process;
pub mod ws;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Longest a test waits for an event (bytes, a line, a counter) before it
/// fails. Never a pass condition: a test that passes waits only as long as
/// the event takes.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Waits until `done` holds, checking it again and again (at most every
/// 10 ms) for up to `PATIENCE`; fails naming `what` if it never does.
/// For events with no other signal to wait on: a counter, a metric, a
/// line in a file.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    wait_for(what, || done().then_some(()))
}

/// As `wait_until`, returning the first value `ready` gives.
pub fn wait_for<T>(what: &str, mut ready: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(value) = ready() {
            return value;
        }
        assert!(Instant::now() < deadline, "waited {PATIENCE:?} in vain for: {what}");
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    }
}

/// The value of the Prometheus sample `name` (with its labels, if any) in
/// a `/metrics` scrape; fails naming it if the scrape has none.
pub fn sample(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no sample {name} in\n{text}"))
        .parse()
        .unwrap()
}

/// A fresh directory `NAME-PID` in the system's temporary directory,
/// removed when dropped. Names are unique within a test binary; the PID
/// keeps binaries and runs apart.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// The directory itself.
    pub fn dir(&self) -> &Path {
        &self.0
    }

    /// A path inside it (nothing is created).
    pub fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }

    /// Writes `bytes` to `rel`, creating the directories on the way;
    /// returns the file's path.
    pub fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

/// The directory's path, for `join`, `display` and the like.
impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

/// As an argument of `Command::arg`.
impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
