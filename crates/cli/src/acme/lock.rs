//! The fleet's lock on ordering a name: replicas sharing one state
//! directory (a shared volume) order each certificate once. A lock is a
//! file `locks/NAME.lock` made with `O_CREAT|O_EXCL` (atomic on NFS v3+
//! and on local filesystems; `flock()` is not used, since NFS and some
//! volume drivers ignore it), holding its owner's id and a heartbeat time
//! rewritten every 30 s while it is held. A lock whose heartbeat is more
//! than 5 minutes old belongs to a replica that died: it is taken over,
//! and the takeover is logged. As certmagic's file storage, two replicas
//! that find the same stale lock at the same moment may both take it
//! over; the worst that does is one extra order.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

/// How often the holder rewrites its heartbeat.
const HEARTBEAT: Duration = Duration::from_secs(30);
/// A heartbeat older than this: its owner is gone.
const STALE: Duration = Duration::from_secs(300);

/// What `acquire` found.
pub(super) enum Locked {
    /// Ours until dropped.
    Ours(Guard),
    /// Another live owner's, named.
    Theirs(String),
}

/// A lock held: its heartbeat beats in a thread until it is dropped,
/// which removes the file (if it is still ours).
pub(super) struct Guard {
    path: PathBuf,
    owner: String,
    stop: Option<mpsc::Sender<()>>,
    beat: Option<std::thread::JoinHandle<()>>,
}

/// This process's owner id: host, process id, and the time it started
/// (process ids are reused).
pub(super) fn owner_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}/{}/{nanos:x}", host.trim(), std::process::id())
}

/// Takes the lock on `name` in `dir` for `owner`, or says whose it is.
pub(super) fn acquire(dir: &Path, name: &str, owner: &str) -> std::io::Result<Locked> {
    acquire_with(dir, name, owner, HEARTBEAT, STALE)
}

fn acquire_with(dir: &Path, name: &str, owner: &str, heartbeat: Duration, stale: Duration) -> std::io::Result<Locked> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let path = dir.join(format!("{name}.lock"));
    // Twice at most: a stale lock removed, then made ours.
    for _ in 0..2 {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(mut f) => {
                f.write_all(content(owner).as_bytes())?;
                f.sync_all()?;
                return Ok(Locked::Ours(Guard::start(path, owner, heartbeat)));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let (other, age) = read(&path);
        if age < stale {
            return Ok(Locked::Theirs(other));
        }
        super::agent::warn(&format!(
            "{name}: taking over the lock of {other}, whose last heartbeat was {} s ago",
            age.as_secs()
        ));
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    let (other, _) = read(&path);
    Ok(Locked::Theirs(other))
}

fn content(owner: &str) -> String {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    serde_json::json!({"owner": owner, "heartbeat": now}).to_string()
}

/// A lock file's owner and the age of its heartbeat. A file being
/// written (empty, cut) is judged by its modification time.
fn read(path: &Path) -> (String, Duration) {
    let now = SystemTime::now();
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let owner = v.get("owner").and_then(|o| o.as_str()).unwrap_or("another replica");
    let beat = match v.get("heartbeat").and_then(serde_json::Value::as_u64) {
        Some(secs) => SystemTime::UNIX_EPOCH + Duration::from_secs(secs),
        None => std::fs::metadata(path).and_then(|m| m.modified()).unwrap_or(now),
    };
    (owner.to_owned(), now.duration_since(beat).unwrap_or_default())
}

impl Guard {
    fn start(path: PathBuf, owner: &str, every: Duration) -> Guard {
        let (stop, stopped) = mpsc::channel::<()>();
        let (p, o) = (path.clone(), owner.to_owned());
        let beat = std::thread::Builder::new()
            .name("acme-lock".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    if read(&p).0 != o {
                        super::agent::warn(&format!("the lock {} was taken over", p.display()));
                        return;
                    }
                    let _ = super::agent::write_private(&p, content(&o).as_bytes());
                }
            })
            .ok();
        Guard {
            path,
            owner: owner.to_owned(),
            stop: Some(stop),
            beat,
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(beat) = self.beat.take() {
            let _ = beat.join();
        }
        if read(&self.path).0 == self.owner {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(what: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("peregrine-lock-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn one_owner_at_a_time_and_dropping_frees_it() {
        let dir = scratch("one");
        let Locked::Ours(guard) = acquire(&dir, "a.test", "one").unwrap() else {
            panic!("a free lock is taken");
        };
        match acquire(&dir, "a.test", "two").unwrap() {
            Locked::Theirs(owner) => assert_eq!(owner, "one"),
            Locked::Ours(_) => panic!("two owners"),
        }
        // Another name is another lock.
        assert!(matches!(acquire(&dir, "b.test", "two").unwrap(), Locked::Ours(_)));
        drop(guard);
        assert!(matches!(acquire(&dir, "a.test", "two").unwrap(), Locked::Ours(_)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stale_lock_is_taken_over_and_a_beating_one_is_not() {
        let dir = scratch("stale");
        std::fs::create_dir_all(&dir).unwrap();
        let old = SystemTime::now() - Duration::from_secs(301);
        let secs = old.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        std::fs::write(
            dir.join("a.test.lock"),
            serde_json::json!({"owner": "dead", "heartbeat": secs}).to_string(),
        )
        .unwrap();
        let Locked::Ours(guard) = acquire(&dir, "a.test", "alive").unwrap() else {
            panic!("a stale lock is taken over");
        };
        assert_eq!(read(&dir.join("a.test.lock")).0, "alive");
        drop(guard);
        // A holder whose heartbeat beats every 10 ms, judged stale after
        // 1 s: still its own long after that.
        let Locked::Ours(guard) = acquire_with(
            &dir,
            "b.test",
            "beating",
            Duration::from_millis(10),
            Duration::from_secs(1),
        )
        .unwrap() else {
            panic!("free");
        };
        let first = std::fs::read_to_string(dir.join("b.test.lock")).unwrap();
        // Wait for a heartbeat (an event: the file's content changes
        // when a new second is written).
        while std::fs::read_to_string(dir.join("b.test.lock")).unwrap() == first {
            std::thread::sleep(Duration::from_millis(50));
        }
        let second = acquire_with(&dir, "b.test", "other", Duration::from_secs(30), Duration::from_secs(1)).unwrap();
        assert!(matches!(second, Locked::Theirs(ref o) if o == "beating"));
        drop(guard);
        assert!(!dir.join("b.test.lock").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
