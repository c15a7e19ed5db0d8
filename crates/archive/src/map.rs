//! The archive's bytes: a read-only memory map of the file, or a copy in
//! the heap (`--in-memory`). The only `unsafe` in this crate.
//!
//! The contract of a map: the file must not shrink or change while it is
//! mapped, or touching a page past the new end raises SIGBUS. Replacing an
//! archive by `rename` is safe (a new inode; the old one stays whole while
//! mapped). Rewriting it in place (`cp new old`, `truncate`) is defended by
//! a read lease (F_SETLEASE, with no signal: see `take_read_lease`): the
//! writer's open waits while the server puts an anonymous copy of the
//! bytes where the map was ([`detach`]: one `mremap`, so every reader,
//! whenever it reads, sees the same bytes and never the file again), and
//! only then releases the lease (`serve::move_off_the_map`). So no timing
//! of a worker (preempted, stopped in a debugger, swapped out between its
//! lookup and its copy) or of a response (an HTTP/2 stream whose window
//! stays shut) can touch the file's pages after the writer proceeds.
//! `tests/archive.rs` dies of SIGBUS without this and passes with it. A
//! writer that opens with `O_NONBLOCK` does not wait: its open fails at
//! once with EAGAIN (EWOULDBLOCK), as fcntl(2) says of lease breaks, but
//! the break has begun, and the same open succeeds once the server has
//! given the lease up (within one watch interval, 250 ms, plus the copy);
//! such a writer retries. A writer that had the file open for writing
//! before the lease was taken
//! gets no lease at all: the archive is read into memory instead. Bodies
//! over 16 KiB are sent from the file's descriptor (`Archive::body_file`),
//! never from the map; a response still sending one when the writer
//! proceeds gets a short read, and its connection is closed.
//!
//! Leases and `mremap` are Linux's: elsewhere no lease is taken
//! ([`take_read_lease`] fails with `Unsupported`), so every archive is
//! read into memory, as for a file open for writing here.

use std::fs::File;
use std::io;

/// Bytes of an open archive.
pub enum Backing {
    Map(memmap2::Mmap),
    Heap(Vec<u8>),
}

impl AsRef<[u8]> for Backing {
    #[inline]
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

/// Replaces the pages of `map` with an anonymous, read-only copy of them,
/// at the same address, in one step: afterwards the address range no longer
/// maps the file, so the file may be truncated or rewritten without any
/// reader of the range faulting or seeing other bytes. The caller holds a
/// read lease on the file, so its bytes are whole while they are copied.
///
/// The step is `mremap(MREMAP_FIXED)` of the filled copy onto the map's
/// range: the kernel holds the process's memory-map lock for writing for
/// the whole call, and a page fault takes it for reading, so a concurrent
/// reader gets either the file's page (before) or the copy's (after), the
/// same bytes either way. The copy costs the archive's size in memory,
/// as the heap copy it replaces did. When `memmap2` unmaps `map`, it
/// unmaps the copy.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn detach(map: &memmap2::Mmap) -> io::Result<()> {
    let len = map.len();
    if len == 0 {
        return Ok(());
    }
    let at = map.as_ptr().cast_mut().cast::<libc::c_void>();
    // SAFETY: asks for a new private anonymous mapping; no memory of ours
    // is involved.
    let copy = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if copy == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let undo = |e: io::Error| {
        // SAFETY: unmaps the mapping made above, which nothing else uses.
        unsafe { libc::munmap(copy, len) };
        Err(e)
    };
    // SAFETY: `copy` is a fresh writable mapping of `len` bytes; `at` is
    // the start of `map`, `len` readable bytes of a file our lease keeps
    // whole; the two do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(at.cast::<u8>(), copy.cast::<u8>(), len) };
    // SAFETY: changes the protection of the mapping made above.
    if unsafe { libc::mprotect(copy, len, libc::PROT_READ) } != 0 {
        return undo(io::Error::last_os_error());
    }
    // SAFETY: moves the mapping made above onto `map`'s range, which
    // memmap2 mapped at `at` (page-aligned: offset 0) for `len` bytes and
    // keeps mapped while `map` lives. The range keeps its length, its
    // protection (read-only) and its bytes, so every reference into it
    // stays valid: only what backs the pages changes. (The kernel checks
    // that the move can succeed before it unmaps the target; past that
    // point only a failed kernel allocation could leave the range empty.)
    let moved = unsafe { libc::mremap(copy, len, len, libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED, at) };
    if moved == libc::MAP_FAILED {
        return undo(io::Error::last_os_error());
    }
    Ok(())
}

/// Takes a read lease on `file` (opened read-only): another process that
/// opens it for writing or truncates it is made to wait (up to
/// `/proc/sys/fs/lease-break-time`, 45 s by default) while this process
/// notices (the watcher polls [`lease_broken`]) and gets off the map; an
/// open with `O_NONBLOCK` fails with EAGAIN instead, having started the
/// break, and succeeds when retried after the lease is given up. Fails
/// with EAGAIN if the file is open for writing now, EACCES if another user
/// owns it.
///
/// No signal is involved: the kernel would tell the lease's owner of a
/// break with SIGIO, whose default action ends the process, and a library
/// installs no signal handler (the program owns its signals). So the break
/// is announced with SIGURG, ignored by default, and the lease then has no
/// owner to tell at all (F_SETOWN 0): SIGURG can only come in the window
/// between the two calls.
#[cfg(target_os = "linux")]
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
#[cfg(target_os = "linux")]
const F_SETSIG: libc::c_int = 10;

/// Whether a writer is waiting for our lease to go.
#[cfg(target_os = "linux")]
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
#[cfg(target_os = "linux")]
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

/// No lease outside Linux: nothing is mapped (see the module's notes).
#[cfg(not(target_os = "linux"))]
pub fn take_read_lease(_file: &File) -> io::Result<()> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "file leases are Linux's"))
}

/// Never mapped outside Linux, so never detached.
#[cfg(not(target_os = "linux"))]
pub fn detach(_map: &memmap2::Mmap) -> io::Result<()> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "mremap is Linux's"))
}

/// No lease outside Linux, so none broken.
#[cfg(not(target_os = "linux"))]
pub fn lease_broken(_file: &File) -> bool {
    false
}

/// No lease outside Linux to give up.
#[cfg(not(target_os = "linux"))]
pub fn release_lease(_file: &File) -> io::Result<()> {
    Ok(())
}
