//! The file system calls that keep a lookup inside the root: `openat2(2)`
//! with `RESOLVE_BENEATH`, so that neither `..` nor a symlink can leave the
//! root directory, whatever the path. The only `unsafe` in this crate.
//!
//! Contract: `rel` comes from `path::normalize` (no `.`/`..`, no leading
//! `/`), but the checks here do not rely on it: the kernel enforces them.
//!
//! Where openat2 is missing (Linux before 5.6) or refused (a seccomp profile
//! answering ENOSYS or EPERM), `open_root` finds out once, says so on the
//! log, and every open walks the path instead, one component at a time from
//! the root's descriptor with `O_NOFOLLOW` (`open_walking`): each symlink is
//! read and resolved by us, under the same rules (relative targets that stay
//! beneath the root, at most 40 links; absolute ones and `..` above the root
//! fail with `EXDEV`), so the guarantee is the same, at one system call per
//! component instead of one per path.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};

/// Whether openat2 works here: `UNKNOWN` until `open_root` has tried it.
static OPENAT2: AtomicU8 = AtomicU8::new(UNKNOWN);
const UNKNOWN: u8 = 0;
const WORKS: u8 = 1;
const MISSING: u8 = 2;
/// Symlinks followed in one lookup before ELOOP, as the kernel's limit.
const SYMLINKS_MAX: usize = 40;

/// The identity of a file as `stat` reports it: what the cache compares to
/// see whether a path now names something else or the file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
    pub is_dir: bool,
    pub is_file: bool,
    pub is_symlink: bool,
}

/// Opens the root directory, to resolve every request beneath it.
pub fn open_root(path: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in root path"))?;
    // SAFETY: `c` is a valid NUL-terminated string; the returned descriptor
    // is checked and then owned by exactly one OwnedFd.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let root = unsafe { OwnedFd::from_raw_fd(fd) };
    if OPENAT2.load(Ordering::Relaxed) == UNKNOWN {
        let works = match openat2(
            &root,
            c".",
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            BENEATH,
        ) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
                peregrine::log::warn(format_args!(
                    "openat2 is not available ({e}): every path is resolved one component at a time \
                     with O_NOFOLLOW instead, with the same rules"
                ));
                false
            }
            _ => true,
        };
        OPENAT2.store(if works { WORKS } else { MISSING }, Ordering::Relaxed);
    }
    Ok(root)
}

/// Whether lookups use openat2 (false: the component walk), as found by
/// the first `open_root`.
pub fn has_openat2() -> bool {
    OPENAT2.load(Ordering::Relaxed) != MISSING
}

/// Opens `rel` (a file or a directory) beneath `root` for reading. Without
/// `follow_symlinks`, a symlink is followed only if it resolves inside the
/// root; absolute symlinks and ones that climb out fail (`EXDEV`). With it,
/// symlinks are followed wherever they point. FIFOs and devices do not
/// block the open (`O_NONBLOCK`); the caller refuses what is not a regular
/// file or directory.
pub fn open_beneath(root: &OwnedFd, rel: &str, follow_symlinks: bool) -> io::Result<File> {
    let c = relative_cstring(rel)?;
    let resolve = if follow_symlinks {
        libc::RESOLVE_NO_MAGICLINKS
    } else {
        BENEATH
    };
    if OPENAT2.load(Ordering::Relaxed) != MISSING {
        match openat2(root, &c, READ_FLAGS, resolve) {
            // Refused after start (a filter installed later): walk from now on.
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => OPENAT2.store(MISSING, Ordering::Relaxed),
            result => return result.map(File::from),
        }
    }
    if follow_symlinks {
        // Symlinks may lead anywhere: the plain call is the rule.
        return openat(root.as_raw_fd(), &c, READ_FLAGS).map(File::from);
    }
    open_walking(root, rel)
}

/// How every file is opened: read-only; FIFOs and devices do not block the
/// open; no controlling terminal.
const READ_FLAGS: libc::c_int = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY;
const BENEATH: u64 = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;

fn openat2(dir: &OwnedFd, path: &std::ffi::CStr, flags: libc::c_int, resolve: u64) -> io::Result<OwnedFd> {
    let how = OpenHow {
        flags: flags as u64,
        mode: 0,
        resolve,
    };
    // SAFETY: openat2 reads `how` (size passed with it) and the
    // NUL-terminated path; both outlive the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("descriptor out of range"))?;
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn openat(dir: libc::c_int, path: &std::ffi::CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: `path` is NUL-terminated and outlives the call; the returned
    // descriptor is checked and then owned by exactly one OwnedFd.
    let fd = unsafe { libc::openat(dir, path.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `RESOLVE_BENEATH` by hand: each component is opened with `O_PATH |
/// O_NOFOLLOW` from the directory before it, so the kernel never follows a
/// symlink for us; a symlink's target is read and its components take its
/// place. `..` goes back to the directory we came from, never above the
/// root (`EXDEV`, as openat2 says). The last component is opened again for
/// reading with `O_NOFOLLOW` and must be the same file that was checked.
pub(crate) fn open_walking(root: &OwnedFd, rel: &str) -> io::Result<File> {
    let mut todo: std::collections::VecDeque<Vec<u8>> = rel
        .split('/')
        .filter(|c| !c.is_empty())
        .map(|c| c.as_bytes().to_vec())
        .collect();
    // The directories walked through, the root below them all.
    let mut dirs: Vec<OwnedFd> = Vec::new();
    let mut n_links = 0;
    while let Some(name) = todo.pop_front() {
        let here = dirs.last().map_or(root.as_raw_fd(), AsRawFd::as_raw_fd);
        match &name[..] {
            b"." => continue,
            b".." => {
                if dirs.pop().is_none() {
                    return Err(io::Error::from_raw_os_error(libc::EXDEV));
                }
                continue;
            }
            _ => {}
        }
        let c = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
        let fd = openat(here, &c, libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)?;
        let id = fstat_fd(fd.as_raw_fd())?;
        if id.is_symlink {
            n_links += 1;
            if n_links > SYMLINKS_MAX {
                return Err(io::Error::from_raw_os_error(libc::ELOOP));
            }
            let target = readlink(&fd)?;
            if target.first() == Some(&b'/') {
                return Err(io::Error::from_raw_os_error(libc::EXDEV));
            }
            for part in target.split(|&b| b == b'/').rev().filter(|p| !p.is_empty()) {
                todo.push_front(part.to_vec());
            }
            continue;
        }
        if todo.is_empty() {
            let file = openat(here, &c, READ_FLAGS | libc::O_NOFOLLOW)?;
            let now = fstat_fd(file.as_raw_fd())?;
            if (now.dev, now.ino) != (id.dev, id.ino) {
                // Replaced between the two opens: refuse rather than guess.
                return Err(io::Error::from_raw_os_error(libc::EAGAIN));
            }
            return Ok(File::from(file));
        }
        if !id.is_dir {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        dirs.push(fd);
    }
    // Nothing left after `..` and `.`: the directory we stand in.
    let here = dirs.last().map_or(root.as_raw_fd(), AsRawFd::as_raw_fd);
    openat(here, c".", READ_FLAGS | libc::O_DIRECTORY).map(File::from)
}

/// The target of the symlink `link` (an `O_PATH | O_NOFOLLOW` descriptor).
fn readlink(link: &OwnedFd) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: readlinkat writes at most `buf.len()` bytes into `buf`; an
    // empty path names the descriptor itself (Linux 2.6.39).
    let n = unsafe { libc::readlinkat(link.as_raw_fd(), c"".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// `stat` of `rel` beneath `root`, following symlinks: only a change
/// detector for the cache (a changed identity makes the cache reopen the
/// path with `open_beneath`, which applies the rules).
pub fn stat_beneath(root: &OwnedFd, rel: &str) -> io::Result<FileId> {
    let c = relative_cstring(rel)?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is written by fstatat on success, read only then.
    let rc = unsafe { libc::fstatat(root.as_raw_fd(), c.as_ptr(), st.as_mut_ptr(), libc::AT_NO_AUTOMOUNT) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatat returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Ok(id_of(&st))
}

/// The identity of an open file.
pub fn fstat(file: &File) -> io::Result<FileId> {
    fstat_fd(file.as_raw_fd())
}

fn fstat_fd(fd: libc::c_int) -> io::Result<FileId> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is written by fstat on success, read only then.
    let rc = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Ok(id_of(&st))
}

/// `struct open_how` of openat2(2), version 0 (24 bytes).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

fn id_of(st: &libc::stat) -> FileId {
    let kind = st.st_mode & libc::S_IFMT;
    FileId {
        dev: st.st_dev,
        ino: st.st_ino,
        size: u64::try_from(st.st_size).unwrap_or(0),
        mtime_ns: i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec),
        is_dir: kind == libc::S_IFDIR,
        is_file: kind == libc::S_IFREG,
        is_symlink: kind == libc::S_IFLNK,
    }
}

fn relative_cstring(rel: &str) -> io::Result<CString> {
    let rel = if rel.is_empty() { "." } else { rel };
    CString::new(rel).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// The walk answers as openat2(RESOLVE_BENEATH) does, path by path:
    /// the same file, or the same error.
    #[test]
    fn the_component_walk_keeps_openat2s_rules() {
        let base = std::env::temp_dir().join(format!("peregrine-walk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("root");
        std::fs::create_dir_all(root.join("d/e")).unwrap();
        std::fs::write(base.join("secret.txt"), "outside").unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        std::fs::write(root.join("d/b.txt"), "b").unwrap();
        std::fs::write(root.join("d/e/c.txt"), "c").unwrap();
        for (link, target) in [
            ("d/up", ".."),
            ("d/in", "../a.txt"),
            ("d/e/far", "../../d/b.txt"),
            ("d/e/dot", "."),
            ("dirlink", "d/"),
            ("out", "../secret.txt"),
            ("d/deep", "../../secret.txt"),
            ("d/e/climb", "../../.."),
            ("abs", "/etc/passwd"),
            ("abs_inside", "/a.txt"),
            ("loop1", "loop2"),
            ("loop2", "loop1"),
            ("dangling", "nowhere"),
        ] {
            symlink(target, root.join(link)).unwrap();
        }
        let root_fd = open_root(&root).unwrap();
        let paths = [
            "",
            "a.txt",
            "d",
            "d/b.txt",
            "d/up/a.txt",
            "d/up/d/up/d/b.txt",
            "d/in",
            "d/e/far",
            "d/e/dot/c.txt",
            "dirlink/b.txt",
            "dirlink/up/dirlink/e/c.txt",
            "out",
            "d/deep",
            "d/e/climb",
            "d/e/climb/secret.txt",
            "abs",
            "abs_inside",
            "loop1",
            "dangling",
            "missing",
            "a.txt/x",
            "d/up/../secret.txt",
        ];
        for rel in paths {
            let c = relative_cstring(rel).unwrap();
            let kernel = openat2(&root_fd, &c, READ_FLAGS, BENEATH).map(File::from);
            let walked = open_walking(&root_fd, rel);
            match (&kernel, &walked) {
                (Ok(k), Ok(w)) => {
                    let (k, w) = (fstat(k).unwrap(), fstat(w).unwrap());
                    assert_eq!((k.dev, k.ino), (w.dev, w.ino), "{rel}");
                }
                (Err(k), Err(w)) => assert_eq!(k.raw_os_error(), w.raw_os_error(), "{rel}"),
                _ => panic!("{rel}: openat2 {kernel:?}, walk {walked:?}"),
            }
        }
        std::fs::remove_dir_all(&base).unwrap();
    }
}
