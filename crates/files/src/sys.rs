//! The file system calls that keep a lookup inside the root: `openat2(2)`
//! with `RESOLVE_BENEATH`, so that neither `..` nor a symlink can leave the
//! root directory, whatever the path. The only `unsafe` in this crate.
//!
//! Contract: `rel` comes from `path::normalize` (no `.`/`..`, no leading
//! `/`), but the checks here do not rely on it: the kernel enforces them.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

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
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens `rel` (a file or a directory) beneath `root` for reading. Without
/// `follow_symlinks`, a symlink is followed only if it resolves inside the
/// root; absolute symlinks and ones that climb out fail (`EXDEV`). With it,
/// symlinks are followed wherever they point. FIFOs and devices do not
/// block the open (`O_NONBLOCK`); the caller refuses what is not a regular
/// file or directory.
pub fn open_beneath(root: &OwnedFd, rel: &str, follow_symlinks: bool) -> io::Result<File> {
    let c = relative_cstring(rel)?;
    let flags = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY;
    let resolve = if follow_symlinks {
        libc::RESOLVE_NO_MAGICLINKS
    } else {
        libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS
    };
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
            root.as_raw_fd(),
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("descriptor out of range"))?;
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
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
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is written by fstat on success, read only then.
    let rc = unsafe { libc::fstat(file.as_raw_fd(), st.as_mut_ptr()) };
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
    }
}

fn relative_cstring(rel: &str) -> io::Result<CString> {
    let rel = if rel.is_empty() { "." } else { rel };
    CString::new(rel).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))
}
