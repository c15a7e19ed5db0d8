//! The system calls of the outbound channel (`crate::outbound`): the
//! `SOCK_SEQPACKET` pair, one message with its descriptors (SCM_RIGHTS)
//! each way, and connecting to an upstream within a deadline.
//!
//! Contract: a received message's descriptors are owned (`OwnedFd`, made
//! close-on-exec by the kernel as they arrive: MSG_CMSG_CLOEXEC) before
//! anything looks at them, so every path, errors included, closes those it
//! does not keep. All of it is rustix's and socket2's safe calls: no
//! `unsafe` here.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use rustix::io::Errno;
use rustix::net::{
    recvmsg, sendmsg, socketpair, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SocketFlags, SocketType,
};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Room for descriptors in one received message. The protocol carries at
/// most one; room for a few more lets a message with too many be read whole
/// and refused for what it is. More than this truncates the control data
/// (MSG_CTRUNC): the kernel closes those that did not fit, the caller
/// refuses the message and closes the rest.
pub(crate) const FDS_ROOM: usize = 4;

/// Most descriptors [`send`] puts in one message: twice what a receiver
/// makes room for, so that a test can send too many and see them closed.
/// The protocol itself sends at most one.
const SEND_FDS_MAX: usize = 2 * FDS_ROOM;

/// Control-message space aligned for `cmsghdr` (8 bytes), as rustix's
/// buffers would otherwise skip bytes to align it and leave room for
/// fewer descriptors than asked, depending on where the stack put it.
#[repr(C, align(8))]
struct Aligned<const N: usize>([MaybeUninit<u8>; N]);

/// A connected `AF_UNIX`, `SOCK_SEQPACKET` pair, both ends close-on-exec
/// and blocking. Sequenced packets keep each record a message of its own
/// (no framing to get wrong) and report the peer's close as a read of 0.
pub(crate) fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    #[cfg(not(target_vendor = "apple"))]
    return Ok(socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?);
    // No SOCK_CLOEXEC on Apple's systems: set just after.
    #[cfg(target_vendor = "apple")]
    {
        let (a, b) = socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::empty(), None)?;
        for fd in [&a, &b] {
            rustix::io::fcntl_setfd(fd, rustix::io::fcntl_getfd(fd)? | rustix::io::FdFlags::CLOEXEC)?;
        }
        Ok((a, b))
    }
}

/// Fails with `InvalidInput` unless `fd` is a Unix-domain sequenced-packet
/// socket: a stream socket would merge and split records, and what came
/// through anything else could not be trusted to be the channel.
pub(crate) fn check_seqpacket(fd: BorrowedFd<'_>) -> io::Result<()> {
    use rustix::net::sockopt::socket_type;
    if super::socket_family(fd)? == AddressFamily::UNIX && socket_type(fd)? == SocketType::SEQPACKET {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the outbound channel must be a Unix SOCK_SEQPACKET socket",
        ))
    }
}

/// Sets or clears O_NONBLOCK on `fd`'s open file description.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    Ok(rustix::io::ioctl_fionbio(fd, on)?)
}

/// Sends `bytes` as one message, with `fds` (at most `SEND_FDS_MAX`) in an
/// SCM_RIGHTS control message when there are any. MSG_NOSIGNAL: a closed
/// peer is EPIPE, never SIGPIPE. Interrupted calls are made again.
pub(crate) fn send(socket: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = Aligned([MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(SEND_FDS_MAX))]);
    let mut control = SendAncillaryBuffer::new(&mut space.0);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors for one message",
        ));
    }
    loop {
        match sendmsg(socket, &[IoSlice::new(bytes)], &mut control, super::SEND_FLAGS) {
            Ok(n) if n == bytes.len() => return Ok(()),
            // A sequenced packet is sent whole or not at all; a stream
            // socket given here by mistake would split it.
            Ok(_) => return Err(io::Error::new(io::ErrorKind::WriteZero, "a message sent in part")),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// What [`recv`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Received {
    /// Bytes of the message copied into the buffer (0: the peer closed,
    /// on a sequenced-packet socket).
    pub(crate) len: usize,
    /// The message, or its control data, did not fit (MSG_TRUNC,
    /// MSG_CTRUNC): what was read is not the whole message.
    pub(crate) truncated: bool,
}

/// Receives one message into `buf`, its descriptors appended to `fds`
/// (owned, close-on-exec). Interrupted calls are made again; WouldBlock on
/// a non-blocking socket passes through.
pub(crate) fn recv(socket: BorrowedFd<'_>, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<Received> {
    let mut space = Aligned([MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_ROOM))]);
    let mut control = RecvAncillaryBuffer::new(&mut space.0);
    let msg = loop {
        match recvmsg(socket, &mut [IoSliceMut::new(buf)], &mut control, super::RECV_FLAGS) {
            Err(Errno::INTR) => continue,
            result => break result?,
        }
    };
    // Every descriptor becomes an OwnedFd here; any other control message
    // (credentials, if a peer turned SO_PASSCRED on) carries none.
    #[cfg(target_vendor = "apple")]
    let n_before = fds.len();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    #[cfg(target_vendor = "apple")]
    super::cloexec_received(&fds[n_before..])?;
    Ok(Received {
        len: msg.bytes.min(buf.len()),
        truncated: msg.flags.intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC),
    })
}

/// A TCP connection to `addr`, made within `timeout`: non-blocking,
/// close-on-exec, TCP_NODELAY (a proxy writes whole heads and bodies
/// itself; Nagle's algorithm would only delay a request's last segment).
pub(crate) fn connect_tcp(addr: SocketAddr, timeout: Duration) -> io::Result<OwnedFd> {
    // socket2 creates it close-on-exec (SOCK_CLOEXEC).
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // A non-blocking connect, then poll for at most `timeout`.
    socket
        .connect_timeout(&addr.into(), timeout)
        .map_err(timed_out_as_errno)?;
    socket.set_tcp_nodelay(true)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// A connection to the Unix-domain stream socket at `path`, made within
/// `timeout`: non-blocking, close-on-exec.
pub(crate) fn connect_unix(path: &Path, timeout: Duration) -> io::Result<OwnedFd> {
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    // A Unix connect does not go through EINPROGRESS: it completes at
    // once, or waits for room in the listener's backlog, as long as
    // SO_SNDTIMEO allows (unix_stream_connect), and then fails with
    // EAGAIN. So a blocking connect under a send timeout is the deadline.
    socket.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    match socket.connect(&SockAddr::unix(path)?) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(Errno::TIMEDOUT.into()),
        result => result?,
    }
    socket.set_write_timeout(None)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// socket2 reports its own deadline as a bare `TimedOut` with no errno;
/// the channel carries errnos, so it becomes ETIMEDOUT.
fn timed_out_as_errno(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::TimedOut && e.raw_os_error().is_none() {
        Errno::TIMEDOUT.into()
    } else {
        e
    }
}

/// Whether `fd` is close-on-exec (for the tests: descriptors that cross
/// the channel must be).
#[cfg(test)]
pub(crate) fn is_cloexec(fd: impl std::os::fd::AsFd) -> bool {
    rustix::io::fcntl_getfd(fd).is_ok_and(|flags| flags.contains(rustix::io::FdFlags::CLOEXEC))
}

/// Whether `fd` is non-blocking (for the tests).
#[cfg(test)]
pub(crate) fn is_nonblocking(fd: impl std::os::fd::AsFd) -> bool {
    rustix::fs::fcntl_getfl(fd).is_ok_and(|flags| flags.contains(rustix::fs::OFlags::NONBLOCK))
}
