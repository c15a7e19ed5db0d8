//! The file system calls that keep a lookup inside the root: `openat2(2)`
//! with `RESOLVE_BENEATH`, so that neither `..` nor a symlink can leave the
//! root directory, whatever the path. Through `rustix` (system calls with
//! safe signatures, no libc in between), so this crate has no `unsafe`.
//!
//! Contract: `rel` comes from `path::normalize` (no `.`/`..`, no leading
//! `/`), but the checks here do not rely on it: the kernel enforces them.
//!
//! A path without symlinks is opened in one call (`RESOLVE_NO_SYMLINKS`
//! too). A path with one is walked by us instead (`open_walking`), one
//! component at a time from the root's descriptor with `O_NOFOLLOW`: each
//! symlink is read and resolved under openat2's rules (targets that stay
//! beneath the root, at most 40 links; `..` above the root fails with
//! `EXDEV`), and two more: an absolute target that starts with the root's
//! own path (as given, or resolved) leads inside and is followed from the
//! root, as `pack` (which resolves it) follows it; and the walk knows the
//! path it resolved to, which must not name a dotfile (`path::
//! is_hidden_resolved`: `ln -s .env env.txt` does not publish `.env`). A
//! symlink costs a few system calls per component, only when the path is
//! not in the cache.
//!
//! Where openat2 is missing (Linux before 5.6) or refused (a seccomp profile
//! answering ENOSYS or EPERM), `open_root` finds out once, says so on the
//! log, and every open is walked, with the same rules.
//!
//! Outside Linux (the BSDs, macOS) there is no openat2 nor `O_PATH` for a
//! symlink: every open is walked, each component looked at with
//! `fstatat(AT_SYMLINK_NOFOLLOW)` and a directory opened with `O_NOFOLLOW |
//! O_DIRECTORY` and checked to be the one looked at (`step_portable`,
//! tested on Linux against openat2 too). `--follow-symlinks` out of the
//! root is refused there, since `/proc/self/fd` does not say where a file
//! lies.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

#[cfg(target_os = "linux")]
use rustix::fs::ResolveFlags;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

/// Whether openat2 works here: `UNKNOWN` until `open_root` has tried it.
static OPENAT2: AtomicU8 = AtomicU8::new(UNKNOWN);
const UNKNOWN: u8 = 0;
#[cfg(target_os = "linux")]
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

/// The served directory: its descriptor, every lookup's start, and its
/// path, by which an absolute symlink is known to lead inside.
pub struct Root {
    fd: OwnedFd,
    /// The root's path made absolute as given (`/srv/current`), and as
    /// resolved (`/srv/releases/7`) if that differs: an absolute symlink
    /// whose target starts with either stays inside.
    paths: Vec<PathBuf>,
}

impl AsFd for Root {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Root {
    /// The components of an absolute symlink target below the root, if it
    /// starts with the root's path (component by component: `/srv/site2`
    /// is not below `/srv/site`). They may still hold `..`, which the walk
    /// refuses above the root.
    fn below(&self, target: &[u8]) -> Option<Vec<Vec<u8>>> {
        let target = Path::new(OsStr::from_bytes(target));
        let rest = self.paths.iter().find_map(|p| target.strip_prefix(p).ok())?;
        Some(
            rest.components()
                .map(|c| match c {
                    Component::ParentDir => b"..".to_vec(),
                    c => c.as_os_str().as_bytes().to_vec(),
                })
                .collect(),
        )
    }
}

/// Opens the root directory, to resolve every request beneath it.
pub fn open_root(path: &Path) -> io::Result<Root> {
    // openat, not open: rustix's `open` is the legacy open(2) system call
    // on x86_64, which the sandbox's seccomp filter does not allow.
    let fd = rustix::fs::openat(rustix::fs::CWD, path, DIR_FLAGS | OFlags::DIRECTORY, Mode::empty())?;
    let mut paths: Vec<PathBuf> = std::path::absolute(path).into_iter().collect();
    if let Ok(resolved) = std::fs::canonicalize(path) {
        if !paths.contains(&resolved) {
            paths.push(resolved);
        }
    }
    let root = Root { fd, paths };
    // Not Linux: no openat2, which the command's start line says.
    #[cfg(not(target_os = "linux"))]
    OPENAT2.store(MISSING, Ordering::Relaxed);
    #[cfg(target_os = "linux")]
    if OPENAT2.load(Ordering::Relaxed) == UNKNOWN {
        let works = match openat2(
            root.as_fd(),
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
/// root; ones that climb out, and absolute ones that do not start with the
/// root's path, fail (`EXDEV`). With it, symlinks are followed wherever they
/// point. Either way, a path resolved through a symlink must not name a
/// dotfile where it lies inside the root (`path::is_hidden_resolved`;
/// refused as `NotFound`, as `/.env` is). FIFOs and devices do not block
/// the open (`O_NONBLOCK`); the caller refuses what is not a regular file
/// or directory.
pub fn open_beneath(root: &Root, rel: &str, follow_symlinks: bool) -> io::Result<File> {
    let rel = relative(rel);
    #[cfg(target_os = "linux")]
    if OPENAT2.load(Ordering::Relaxed) != MISSING {
        // No symlink on the way (ELOOP if there is one): `rel` is the path
        // opened, and the caller judged it.
        match openat2(root.as_fd(), rel, READ_FLAGS, BENEATH | ResolveFlags::NO_SYMLINKS) {
            // Refused after start (a filter installed later): walk from now on.
            Err(Errno::NOSYS) => OPENAT2.store(MISSING, Ordering::Relaxed),
            Err(Errno::LOOP) => {}
            result => return Ok(File::from(result?)),
        }
    }
    let (file, resolved) = match open_walking(root, rel) {
        // Out of the root, which the administrator allowed: where it
        // leads is judged only if that is inside after all.
        Err(e) if follow_symlinks && e.raw_os_error() == Some(libc::EXDEV) => open_following(root, rel)?,
        walked => walked?,
    };
    match resolved {
        Some(resolved) if crate::path::is_hidden_resolved(rel, &resolved) => Err(io::Error::new(
            io::ErrorKind::NotFound,
            "a symlink leads to a dotfile, and dotfiles are not served",
        )),
        _ => Ok(file),
    }
}

/// `--follow-symlinks` for a path that leaves the root: the kernel follows
/// every link, then `/proc/self/fd` says where the file is, to judge it if
/// it is inside the root after all (`../root/.env`). Where that cannot be
/// read, the path is refused as without the flag.
fn open_following(root: &Root, rel: &str) -> io::Result<(File, Option<Vec<Vec<u8>>>)> {
    #[cfg(target_os = "linux")]
    let file = if OPENAT2.load(Ordering::Relaxed) != MISSING {
        File::from(openat2(root.as_fd(), rel, READ_FLAGS, ResolveFlags::NO_MAGICLINKS)?)
    } else {
        File::from(openat(root.as_fd(), rel, READ_FLAGS)?)
    };
    #[cfg(not(target_os = "linux"))]
    let file = File::from(openat(root.as_fd(), rel, READ_FLAGS)?);
    let where_is = |fd: BorrowedFd<'_>| {
        rustix::fs::readlinkat(rustix::fs::CWD, format!("/proc/self/fd/{}", fd.as_raw_fd()), Vec::new())
            .map(|p| PathBuf::from(OsStr::from_bytes(p.as_bytes())))
            .map_err(|_| io::Error::from(Errno::XDEV))
    };
    let (at, base) = (where_is(file.as_fd())?, where_is(root.as_fd())?);
    let inside = at
        .strip_prefix(&base)
        .ok()
        .map(|rest| rest.components().map(|c| c.as_os_str().as_bytes().to_vec()).collect());
    Ok((file, inside))
}

/// How every file is opened: read-only; FIFOs and devices do not block the
/// open; no controlling terminal.
const READ_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::CLOEXEC)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY);
/// How a directory is held to open what is beneath it: `O_PATH` on Linux
/// (no read permission needed, nothing read); a plain read-only open
/// elsewhere (macOS has no `O_PATH`).
#[cfg(target_os = "linux")]
const DIR_FLAGS: OFlags = OFlags::PATH.union(OFlags::CLOEXEC);
#[cfg(not(target_os = "linux"))]
const DIR_FLAGS: OFlags = OFlags::RDONLY.union(OFlags::CLOEXEC);
/// `stat` does not trigger an automount (Linux's flag; nothing elsewhere).
#[cfg(target_os = "linux")]
const STAT_FLAGS: AtFlags = AtFlags::NO_AUTOMOUNT;
#[cfg(not(target_os = "linux"))]
const STAT_FLAGS: AtFlags = AtFlags::empty();
#[cfg(target_os = "linux")]
const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

#[cfg(target_os = "linux")]
fn openat2<P: rustix::path::Arg>(
    dir: BorrowedFd<'_>,
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
/// root (`EXDEV`, as openat2 says). An absolute target is followed from
/// the root if it starts with the root's path, else refused (`EXDEV`).
/// The last component is opened again for reading with `O_NOFOLLOW` and
/// must be the same file that was checked.
///
/// Returns the file and, if a symlink was followed, the path within the
/// root it resolved to, component by component (what `pack` finds by
/// canonicalising).
pub(crate) fn open_walking(root: &Root, rel: &str) -> io::Result<(File, Option<Vec<Vec<u8>>>)> {
    #[cfg(target_os = "linux")]
    return walk(root, rel, step_o_path);
    #[cfg(not(target_os = "linux"))]
    return walk(root, rel, step_portable);
}

/// What one component of a path is, as a walk sees it without following it.
enum Step {
    /// A directory, held to open what is beneath it.
    Dir(OwnedFd, FileId),
    /// Anything else that is not a symlink (the caller opens it if it is
    /// the last component, and checks that it is still this file).
    Other(FileId),
    /// A symlink, and its target.
    Link(Vec<u8>),
}

/// One component on Linux: opened with `O_PATH | O_NOFOLLOW` (which gives
/// the symlink itself), then asked what it is.
#[cfg(target_os = "linux")]
fn step_o_path(here: BorrowedFd<'_>, name: &[u8]) -> io::Result<Step> {
    let fd = openat(here, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC)?;
    let id = id_of(&rustix::fs::fstat(&fd)?);
    Ok(if id.is_symlink {
        // An empty path names the descriptor itself (Linux 2.6.39).
        Step::Link(rustix::fs::readlinkat(&fd, c"", Vec::new())?.into_bytes())
    } else if id.is_dir {
        Step::Dir(fd, id)
    } else {
        Step::Other(id)
    })
}

/// One component where there is no `O_PATH` for a symlink: `fstatat`
/// without following says what it is; a symlink is read by name (if it
/// was swapped meanwhile, whatever target is read is still resolved by
/// the walk's rules); a directory is opened with `O_NOFOLLOW` (a symlink
/// put in its place fails to open) and must be the one looked at.
#[cfg(any(not(target_os = "linux"), test))]
fn step_portable(here: BorrowedFd<'_>, name: &[u8]) -> io::Result<Step> {
    let id = id_of(&rustix::fs::statat(here, name, STAT_FLAGS | AtFlags::SYMLINK_NOFOLLOW)?);
    if id.is_symlink {
        return Ok(Step::Link(rustix::fs::readlinkat(here, name, Vec::new())?.into_bytes()));
    }
    if !id.is_dir {
        return Ok(Step::Other(id));
    }
    let fd = openat(here, name, DIR_FLAGS | OFlags::DIRECTORY | OFlags::NOFOLLOW)?;
    let now = id_of(&rustix::fs::fstat(&fd)?);
    if (now.dev, now.ino) != (id.dev, id.ino) {
        return Err(Errno::AGAIN.into());
    }
    Ok(Step::Dir(fd, id))
}

/// The walk itself, taking each component with `step`.
fn walk(
    root: &Root,
    rel: &str,
    step: fn(BorrowedFd<'_>, &[u8]) -> io::Result<Step>,
) -> io::Result<(File, Option<Vec<Vec<u8>>>)> {
    let mut todo: std::collections::VecDeque<Vec<u8>> = rel
        .split('/')
        .filter(|c| !c.is_empty())
        .map(|c| c.as_bytes().to_vec())
        .collect();
    // The directories walked through, the root below them all, and their
    // names: the path resolved so far.
    let mut dirs: Vec<OwnedFd> = Vec::new();
    let mut names: Vec<Vec<u8>> = Vec::new();
    let mut n_links = 0;
    while let Some(name) = todo.pop_front() {
        let here = dirs.last().map_or(root.as_fd(), |d| d.as_fd());
        match &name[..] {
            b"." => continue,
            b".." => {
                if dirs.pop().is_none() {
                    return Err(Errno::XDEV.into());
                }
                names.pop();
                continue;
            }
            _ => {}
        }
        let (fd, id) = match step(here, &name[..])? {
            Step::Dir(fd, id) => (Some(fd), id),
            Step::Other(id) => (None, id),
            Step::Link(target) => {
                n_links += 1;
                if n_links > SYMLINKS_MAX {
                    return Err(Errno::LOOP.into());
                }
                let parts: Vec<Vec<u8>> = if target.first() == Some(&b'/') {
                    let below = root.below(&target).ok_or(Errno::XDEV)?;
                    dirs.clear();
                    names.clear();
                    below
                } else {
                    target
                        .split(|&b| b == b'/')
                        .filter(|p| !p.is_empty())
                        .map(<[u8]>::to_vec)
                        .collect()
                };
                for part in parts.into_iter().rev() {
                    todo.push_front(part);
                }
                continue;
            }
        };
        if todo.is_empty() {
            let file = openat(here, &name[..], READ_FLAGS | OFlags::NOFOLLOW)?;
            let now = id_of(&rustix::fs::fstat(&file)?);
            if (now.dev, now.ino) != (id.dev, id.ino) {
                // Replaced between the two opens: refuse rather than guess.
                return Err(Errno::AGAIN.into());
            }
            names.push(name);
            return Ok((File::from(file), (n_links > 0).then_some(names)));
        }
        let Some(fd) = fd else {
            return Err(Errno::NOTDIR.into());
        };
        dirs.push(fd);
        names.push(name);
    }
    // Nothing left after `..` and `.`: the directory we stand in.
    let here = dirs.last().map_or(root.as_fd(), |d| d.as_fd());
    let dir = openat(here, c".", READ_FLAGS | OFlags::DIRECTORY)?;
    Ok((File::from(dir), (n_links > 0).then_some(names)))
}

/// `stat` of `rel` beneath `root`, following symlinks: only a change
/// detector for the cache (a changed identity makes the cache reopen the
/// path with `open_beneath`, which applies the rules).
pub fn stat_beneath(root: &Root, rel: &str) -> io::Result<FileId> {
    Ok(id_of(&rustix::fs::statat(root, relative(rel), STAT_FLAGS)?))
}

/// `lstat` of `rel` beneath `root` (a symlink itself, not its target):
/// whether a name exists, for the cache's folder check.
pub fn lstat_beneath(root: &Root, rel: &str) -> io::Result<FileId> {
    Ok(id_of(&rustix::fs::statat(
        root,
        relative(rel),
        STAT_FLAGS | AtFlags::SYMLINK_NOFOLLOW,
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
    #[cfg(target_os = "linux")]
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
            let kernel = openat2(root_fd.as_fd(), relative(rel), READ_FLAGS, BENEATH).map(File::from);
            // Linux's walk, and the one for systems without O_PATH.
            for step in [step_o_path, step_portable] {
                let walked = walk(&root_fd, rel, step).map(|(file, _)| file);
                match (&kernel, &walked) {
                    (Ok(k), Ok(w)) => {
                        let (k, w) = (fstat(k).unwrap(), fstat(w).unwrap());
                        assert_eq!((k.dev, k.ino), (w.dev, w.ino), "{rel}");
                    }
                    (Err(k), Err(w)) => assert_eq!(Some(k.raw_os_error()), w.raw_os_error(), "{rel}"),
                    _ => panic!("{rel}: openat2 {kernel:?}, walk {walked:?}"),
                }
            }
        }
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// Beyond openat2's rules: an absolute link that starts with the
    /// root's path is followed from the root, and the walk says where a
    /// path led when a symlink was on the way, which `open_beneath` judges.
    #[test]
    fn the_walk_follows_absolute_links_inside_and_says_where_it_led() {
        let base = std::env::temp_dir().join(format!("peregrine-walk-abs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("root");
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::fs::create_dir_all(base.join("root2")).unwrap();
        std::fs::write(base.join("secret.txt"), "outside").unwrap();
        std::fs::write(base.join("root2/x"), "beside").unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        std::fs::write(root.join(".env"), "hidden").unwrap();
        std::fs::write(root.join("d/b.txt"), "b").unwrap();
        for (link, target) in [
            ("abs", root.join("a.txt")),
            ("absdir", root.join("d")),
            ("absroot", root.clone()),
            ("climb", root.join("../secret.txt")),
            ("prefix", base.join("root2/x")),
            ("d/up", "..".into()),
            ("env-link", ".env".into()),
            ("abs-env", root.join(".env")),
        ] {
            symlink(target, root.join(link)).unwrap();
        }
        let root_fd = open_root(&root).unwrap();
        // Where each walk led (Linux's, and the one without O_PATH: the same).
        let led = |rel: &str| -> Result<Option<String>, i32> {
            let led_by = |step| match walk(&root_fd, rel, step) {
                Ok((_, resolved)) => Ok(resolved.map(|r| String::from_utf8(r.join(&b'/')).unwrap())),
                Err(e) => Err(e.raw_os_error().unwrap()),
            };
            let portable = led_by(step_portable);
            assert_eq!(open_walking(&root_fd, rel).is_ok(), portable.is_ok(), "{rel}");
            #[cfg(target_os = "linux")]
            assert_eq!(led_by(step_o_path), portable, "{rel}");
            portable
        };
        assert_eq!(led("a.txt"), Ok(None));
        assert_eq!(led("d/b.txt"), Ok(None));
        assert_eq!(led("abs"), Ok(Some("a.txt".into())));
        assert_eq!(led("absdir/b.txt"), Ok(Some("d/b.txt".into())));
        assert_eq!(led("absroot/d/up/absdir"), Ok(Some("d".into())));
        assert_eq!(led("d/up/a.txt"), Ok(Some("a.txt".into())));
        assert_eq!(led("env-link"), Ok(Some(".env".into())));
        assert_eq!(led("climb"), Err(libc::EXDEV));
        assert_eq!(led("prefix"), Err(libc::EXDEV));
        for follow in [false, true] {
            assert!(open_beneath(&root_fd, "abs", follow).is_ok());
            assert!(open_beneath(&root_fd, "absdir/b.txt", follow).is_ok());
            // `.env` asked for as itself is the caller's to refuse.
            assert!(open_beneath(&root_fd, ".env", follow).is_ok());
            for rel in ["env-link", "abs-env", "d/up/env-link"] {
                let e = open_beneath(&root_fd, rel, follow).unwrap_err();
                assert_eq!(e.kind(), io::ErrorKind::NotFound, "{rel}: {e}");
            }
        }
        assert_eq!(
            open_beneath(&root_fd, "climb", false).unwrap_err().raw_os_error(),
            Some(libc::EXDEV)
        );
        assert!(open_beneath(&root_fd, "climb", true).is_ok());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
