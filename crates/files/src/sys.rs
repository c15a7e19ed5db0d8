//! The file system calls that keep a lookup inside the root: `openat2(2)`
//! with `RESOLVE_BENEATH`, so that neither `..` nor a symlink can leave the
//! root directory, whatever the path. Through `rustix` (system calls with
//! safe signatures, no libc in between), so this crate has no `unsafe`.
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

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

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
    // openat, not open: rustix's `open` is the legacy open(2) system call
    // on x86_64, which the sandbox's seccomp filter does not allow.
    let root = rustix::fs::openat(
        rustix::fs::CWD,
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    if OPENAT2.load(Ordering::Relaxed) == UNKNOWN {
        let works = match openat2(
            &root,
            c".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            BENEATH,
        ) {
            Err(e) if e == Errno::NOSYS || e == Errno::PERM => {
                peregrine::log::warn(format_args!(
                    "openat2 is not available ({}): every path is resolved one component at a time \
                     with O_NOFOLLOW instead, with the same rules",
                    io::Error::from(e)
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
    let rel = relative(rel);
    let resolve = if follow_symlinks {
        ResolveFlags::NO_MAGICLINKS
    } else {
        BENEATH
    };
    if OPENAT2.load(Ordering::Relaxed) != MISSING {
        match openat2(root, rel, READ_FLAGS, resolve) {
            // Refused after start (a filter installed later): walk from now on.
            Err(Errno::NOSYS) => OPENAT2.store(MISSING, Ordering::Relaxed),
            result => return Ok(File::from(result?)),
        }
    }
    if follow_symlinks {
        // Symlinks may lead anywhere: the plain call is the rule.
        return Ok(File::from(openat(root.as_fd(), rel, READ_FLAGS)?));
    }
    open_walking(root, rel)
}

/// How every file is opened: read-only; FIFOs and devices do not block the
/// open; no controlling terminal.
const READ_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::CLOEXEC)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY);
const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

fn openat2<P: rustix::path::Arg>(
    dir: &OwnedFd,
    path: P,
    flags: OFlags,
    resolve: ResolveFlags,
) -> Result<OwnedFd, Errno> {
    rustix::fs::openat2(dir, path, flags, Mode::empty(), resolve)
}

fn openat<P: rustix::path::Arg>(dir: BorrowedFd<'_>, path: P, flags: OFlags) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(dir, path, flags, Mode::empty())?)
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
        let here = dirs.last().unwrap_or(root).as_fd();
        match &name[..] {
            b"." => continue,
            b".." => {
                if dirs.pop().is_none() {
                    return Err(Errno::XDEV.into());
                }
                continue;
            }
            _ => {}
        }
        let name = &name[..];
        let fd = openat(here, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC)?;
        let id = id_of(&rustix::fs::fstat(&fd)?);
        if id.is_symlink {
            n_links += 1;
            if n_links > SYMLINKS_MAX {
                return Err(Errno::LOOP.into());
            }
            // An empty path names the descriptor itself (Linux 2.6.39).
            let target = rustix::fs::readlinkat(&fd, c"", Vec::new())?.into_bytes();
            if target.first() == Some(&b'/') {
                return Err(Errno::XDEV.into());
            }
            for part in target.split(|&b| b == b'/').rev().filter(|p| !p.is_empty()) {
                todo.push_front(part.to_vec());
            }
            continue;
        }
        if todo.is_empty() {
            let file = openat(here, name, READ_FLAGS | OFlags::NOFOLLOW)?;
            let now = id_of(&rustix::fs::fstat(&file)?);
            if (now.dev, now.ino) != (id.dev, id.ino) {
                // Replaced between the two opens: refuse rather than guess.
                return Err(Errno::AGAIN.into());
            }
            return Ok(File::from(file));
        }
        if !id.is_dir {
            return Err(Errno::NOTDIR.into());
        }
        dirs.push(fd);
    }
    // Nothing left after `..` and `.`: the directory we stand in.
    let here = dirs.last().unwrap_or(root).as_fd();
    Ok(File::from(openat(here, c".", READ_FLAGS | OFlags::DIRECTORY)?))
}

/// `stat` of `rel` beneath `root`, following symlinks: only a change
/// detector for the cache (a changed identity makes the cache reopen the
/// path with `open_beneath`, which applies the rules).
pub fn stat_beneath(root: &OwnedFd, rel: &str) -> io::Result<FileId> {
    Ok(id_of(&rustix::fs::statat(root, relative(rel), AtFlags::NO_AUTOMOUNT)?))
}

/// `lstat` of `rel` beneath `root` (a symlink itself, not its target):
/// whether a name exists, for the cache's folder check.
pub fn lstat_beneath(root: &OwnedFd, rel: &str) -> io::Result<FileId> {
    Ok(id_of(&rustix::fs::statat(
        root,
        relative(rel),
        AtFlags::NO_AUTOMOUNT | AtFlags::SYMLINK_NOFOLLOW,
    )?))
}

/// The identity of an open file.
pub fn fstat(file: &File) -> io::Result<FileId> {
    Ok(id_of(&rustix::fs::fstat(file)?))
}

// The field types of `struct stat` differ between architectures (`u64` or
// `c_ulong`, `i64` or `c_long`): the conversions are no-ops on some.
#[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
fn id_of(st: &Stat) -> FileId {
    let kind = FileType::from_raw_mode(st.st_mode as _);
    FileId {
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        size: u64::try_from(st.st_size).unwrap_or(0),
        mtime_ns: i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec),
        is_dir: kind == FileType::Directory,
        is_file: kind == FileType::RegularFile,
        is_symlink: kind == FileType::Symlink,
    }
}

/// The path to give the kernel for `rel`: itself, or `.` for the root.
fn relative(rel: &str) -> &str {
    if rel.is_empty() {
        "."
    } else {
        rel
    }
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
            let kernel = openat2(&root_fd, relative(rel), READ_FLAGS, BENEATH).map(File::from);
            let walked = open_walking(&root_fd, rel);
            match (&kernel, &walked) {
                (Ok(k), Ok(w)) => {
                    let (k, w) = (fstat(k).unwrap(), fstat(w).unwrap());
                    assert_eq!((k.dev, k.ino), (w.dev, w.ino), "{rel}");
                }
                (Err(k), Err(w)) => assert_eq!(Some(k.raw_os_error()), w.raw_os_error(), "{rel}"),
                _ => panic!("{rel}: openat2 {kernel:?}, walk {walked:?}"),
            }
        }
        std::fs::remove_dir_all(&base).unwrap();
    }
}
