//! The archive's bytes: a read-only memory map of the file, or a copy in
//! the heap (`--in-memory`). The only `unsafe` in this crate.
//!
//! The contract of a map: the file must not shrink or change while it is
//! mapped, or touching a page past the new end raises SIGBUS. Replacing an
//! archive by `rename` is safe (a new inode; the old one stays whole while
//! mapped). Rewriting it in place (`cp new old`, `truncate`) is defended by
//! a read lease (F_SETLEASE, with no signal: see `take_read_lease`): the
//! writer's open waits while the server copies the archive into memory,
//! switches to the copy, lets responses still sending from the map finish,
//! and releases the lease (`serve::move_off_the_map`). `tests/archive.rs` dies of SIGBUS without
//! the lease and passes with it. A writer that had the file open for
//! writing before the lease was taken gets no lease at all: the archive is
//! read into memory instead. Responses that outlive the lease (a slow
//! client, past `LEASE_WAIT`) never read the map: bodies over 16 KiB are
//! sent from the file's descriptor (`Archive::body_file`), where a file cut
//! short gives a short read and closes that connection; smaller ones are
//! copied out of the map while their request is handled.

use std::fs::File;
use std::io;

/// Bytes of an open archive.
pub enum Backing {
    Map(memmap2::Mmap),
    Heap(Vec<u8>),
}

impl AsRef<[u8]> for Backing {
    fn as_ref(&self) -> &[u8] {
        match self {
            Backing::Map(m) => m,
            Backing::Heap(v) => v,
        }
    }
}

/// Maps `file` read-only (`populate`: fault every page in now).
#[allow(unsafe_code)]
pub fn map(file: &File, populate: bool) -> io::Result<Backing> {
    let mut opts = memmap2::MmapOptions::new();
    if populate {
        opts.populate();
    }
    // SAFETY: the map is read-only. The file does not change under it: the
    // caller (`read::Archive::open`) maps only a file it holds a read lease
    // on, and moves off the map before releasing the lease to a writer.
    let map = unsafe { opts.map(file)? };
    Ok(Backing::Map(map))
}

/// Takes a read lease on `file` (opened read-only): another process that
/// opens it for writing or truncates it is made to wait (up to
/// `/proc/sys/fs/lease-break-time`, 45 s by default) while this process
/// notices (the watcher polls [`lease_broken`]) and gets off the map. Fails
/// with EAGAIN if the file is open for writing now, EACCES if another user
/// owns it.
///
/// No signal is involved: the kernel would tell the lease's owner of a
/// break with SIGIO, whose default action ends the process, and a library
/// installs no signal handler (the program owns its signals). So the break
/// is announced with SIGURG, ignored by default, and the lease then has no
/// owner to tell at all (F_SETOWN 0): SIGURG can only come in the window
/// between the two calls.
#[allow(unsafe_code)]
pub fn take_read_lease(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: a plain fcntl call on a descriptor we own, with integer
    // arguments; no memory involved. The same holds for the two below.
    let rc = unsafe { libc::fcntl(fd, F_SETSIG, libc::SIGURG) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    let rc = unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // Setting the lease made this process the descriptor's owner; an owner
    // of 0 is none, and no signal is sent.
    // SAFETY: as above.
    let rc = unsafe { libc::fcntl(fd, libc::F_SETOWN, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// fcntl's F_SETSIG, which the libc crate does not name: 10 in Linux's
/// asm-generic/fcntl.h and on every architecture Rust targets but PA-RISC.
const F_SETSIG: libc::c_int = 10;

/// Whether a writer is waiting for our lease to go.
#[allow(unsafe_code)]
pub fn lease_broken(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain fcntl query on a descriptor we own.
    let lease = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLEASE) };
    // During a break, F_GETLEASE reports the type the lease must become.
    lease != libc::F_RDLCK
}

/// Gives the lease up: the waiting writer proceeds. An error (EBADF,
/// EINVAL: no lease to give up) means the writer was not waiting on us;
/// the caller reports it, and closing the file drops any lease anyway.
#[allow(unsafe_code)]
pub fn release_lease(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain fcntl call on a descriptor we own.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
