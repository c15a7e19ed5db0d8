//! The operating system: the only place that makes system calls. Made for
//! Linux (SO_REUSEPORT load balancing, sendfile, MSG_MORE, timerfd, BPF
//! steering of QUIC packets); each Linux-only call is gated with
//! `cfg(target_os = "linux")` in its file, beside a portable fallback for
//! the BSDs and macOS (kqueue comes through mio). Through `rustix` where
//! it has the call with the same meaning (safe signatures, no `unsafe`
//! here), libc where it has not (process-wide set*id, the user database,
//! a descriptor's flags before it is owned).
//!
//! Contract: every function here takes and returns ordinary Rust types;
//! every `unsafe` block says why it is sound.

pub(crate) mod ktls;
pub(crate) mod outbound;
pub(crate) mod privileges;
pub(crate) mod sendfile;
pub(crate) mod socket;
pub(crate) mod stream;
pub(crate) mod systemd;
pub(crate) mod timer;
pub(crate) mod upgrade;

/// `send(2)`'s flags for every write to a socket: MSG_NOSIGNAL, so that a
/// closed peer is EPIPE, never SIGPIPE. Apple's systems have no such flag;
/// there the Rust runtime has set SIGPIPE to be ignored before `main`, as
/// it does on every Unix, which covers a Rust program.
#[cfg(not(target_vendor = "apple"))]
pub(crate) const SEND_FLAGS: rustix::net::SendFlags = rustix::net::SendFlags::NOSIGNAL;
#[cfg(target_vendor = "apple")]
pub(crate) const SEND_FLAGS: rustix::net::SendFlags = rustix::net::SendFlags::empty();

/// `recvmsg(2)`'s flags where descriptors may come: MSG_CMSG_CLOEXEC, so
/// that they are close-on-exec from the start. Apple's systems have no
/// such flag: there [`cloexec_received`] sets it after the call.
#[cfg(not(target_vendor = "apple"))]
pub(crate) const RECV_FLAGS: rustix::net::RecvFlags = rustix::net::RecvFlags::CMSG_CLOEXEC;
#[cfg(target_vendor = "apple")]
pub(crate) const RECV_FLAGS: rustix::net::RecvFlags = rustix::net::RecvFlags::empty();

/// Makes descriptors received in a message close-on-exec where
/// [`RECV_FLAGS`] could not (Apple's systems; a window remains in which a
/// concurrent exec would inherit them).
#[cfg(target_vendor = "apple")]
pub(crate) fn cloexec_received(fds: &[std::os::fd::OwnedFd]) -> std::io::Result<()> {
    for fd in fds {
        let flags = rustix::io::fcntl_getfd(fd)?;
        rustix::io::fcntl_setfd(fd, flags | rustix::io::FdFlags::CLOEXEC)?;
    }
    Ok(())
}

/// The address family of the socket `fd` (SO_DOMAIN; from its own address
/// on Apple's systems, which have no SO_DOMAIN).
pub(crate) fn socket_family(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<rustix::net::AddressFamily> {
    #[cfg(not(target_vendor = "apple"))]
    return Ok(rustix::net::sockopt::socket_domain(fd)?);
    #[cfg(target_vendor = "apple")]
    return Ok(rustix::net::getsockname(fd)?.address_family());
}

/// Whether the stream socket `fd` listens (SO_ACCEPTCONN). Apple's systems
/// declare SO_ACCEPTCONN without answering it: there a stream socket with
/// no peer counts (one bound but not listening then fails at `accept`,
/// an error, never a connection served by mistake).
pub(crate) fn is_listening(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<bool> {
    #[cfg(not(target_vendor = "apple"))]
    return Ok(rustix::net::sockopt::socket_acceptconn(fd)?);
    #[cfg(target_vendor = "apple")]
    return match rustix::net::getpeername(fd) {
        Err(rustix::io::Errno::NOTCONN) => Ok(true),
        Ok(_) => Ok(false),
        Err(e) => Err(e.into()),
    };
}

/// Raises the soft limit on open files to the hard limit, as Go's runtime
/// does: a server with 10,000 connections needs more than the usual 1,024.
/// Returns the new soft limit.
pub fn raise_open_files_limit() -> std::io::Result<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    // The soft limit is never above the hard one (None is RLIM_INFINITY).
    if lim.current != lim.maximum {
        lim.current = lim.maximum;
        // Raising the soft limit up to the hard limit is always permitted.
        setrlimit(Resource::Nofile, lim)?;
    }
    Ok(lim.current.unwrap_or(u64::MAX))
}
