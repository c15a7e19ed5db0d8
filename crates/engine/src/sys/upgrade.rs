//! The system calls of a binary upgrade (`crate::upgrade`): a serving
//! process passes its listening sockets to the unsandboxed process that
//! starts the new executable (one `SOCK_SEQPACKET` message with SCM_RIGHTS),
//! which makes them inheritable and names them to the new process by
//! number; the new process takes them once. And who sent a signal
//! (SA_SIGINFO's `si_uid`), so that only root or the user the server was
//! started as may ask for an upgrade.
//!
//! Contract: every descriptor received is owned (`OwnedFd`, close-on-exec
//! as it arrives) before anything looks at it; descriptors named by the
//! environment are taken at most once per process, checked open, and made
//! close-on-exec at once, so none leaks into a program this one starts.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use rustix::io::{Errno, FdFlags};
use rustix::net::{
    recvmsg, sendmsg, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SocketType,
};

/// Most descriptors one hand-over carries: the kernel's SCM_MAX_FD, what
/// one message may hold. A server with more sockets than that (workers ×
/// addresses × TCP and UDP) is refused an upgrade, with that said.
pub const FDS_MAX: usize = 253;

/// Most bytes of the message beside the descriptors (the layout the
/// command line writes): an upgrade's description, never a body.
pub const MESSAGE_BYTES_MAX: usize = 16 * 1024;

/// Control-message space aligned for `cmsghdr` (see `sys/outbound.rs`).
#[repr(C, align(8))]
struct Aligned<const N: usize>([MaybeUninit<u8>; N]);

/// Sends `bytes` (at most [`MESSAGE_BYTES_MAX`]) with `fds` (at most
/// [`FDS_MAX`]) as one message on a sequenced-packet socket.
pub fn send(socket: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if bytes.len() > MESSAGE_BYTES_MAX || fds.len() > FDS_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} bytes and {} descriptors: more than one hand-over carries ({MESSAGE_BYTES_MAX} bytes, {FDS_MAX} descriptors)",
                bytes.len(),
                fds.len()
            ),
        ));
    }
    let mut space = Aligned([MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_MAX))]);
    let mut control = SendAncillaryBuffer::new(&mut space.0);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many descriptors"));
    }
    loop {
        match sendmsg(socket, &[IoSlice::new(bytes)], &mut control, super::SEND_FLAGS) {
            Ok(n) if n == bytes.len() => return Ok(()),
            Ok(_) => return Err(io::Error::new(io::ErrorKind::WriteZero, "a message sent in part")),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Receives one message: its bytes (empty: the peer closed) and its
/// descriptors, owned. A message cut by the kernel (longer than
/// [`MESSAGE_BYTES_MAX`], or more descriptors than [`FDS_MAX`]) is
/// `InvalidData`, every descriptor it carried closed.
pub fn recv(socket: BorrowedFd<'_>) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut buf = vec![0u8; MESSAGE_BYTES_MAX];
    let mut space = Aligned([MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_MAX))]);
    let mut control = RecvAncillaryBuffer::new(&mut space.0);
    let msg = loop {
        match recvmsg(
            socket,
            &mut [IoSliceMut::new(&mut buf)],
            &mut control,
            super::RECV_FLAGS,
        ) {
            Err(Errno::INTR) => continue,
            result => break result?,
        }
    };
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    #[cfg(target_vendor = "apple")]
    super::cloexec_received(&fds)?;
    if msg.flags.intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a hand-over message cut short",
        ));
    }
    buf.truncate(msg.bytes.min(MESSAGE_BYTES_MAX));
    Ok((buf, fds))
}

/// A sequenced-packet pair for the serving process and the one that
/// upgrades, both ends close-on-exec.
pub fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    super::outbound::seqpacket_pair()
}

/// What a descriptor passed for an upgrade is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketKind {
    /// A listening TCP or Unix-domain stream socket.
    Listener,
    /// A UDP socket (HTTP/3).
    Udp,
    /// Anything else: refused.
    Other,
}

/// What `fd` is, from the kernel (never from what the sender said).
pub fn socket_kind(fd: BorrowedFd<'_>) -> SocketKind {
    use rustix::net::sockopt::socket_type;
    let (Ok(domain), Ok(kind)) = (super::socket_family(fd), socket_type(fd)) else {
        return SocketKind::Other;
    };
    match (domain, kind) {
        (AddressFamily::INET | AddressFamily::INET6 | AddressFamily::UNIX, SocketType::STREAM)
            if super::is_listening(fd).unwrap_or(false) =>
        {
            SocketKind::Listener
        }
        (AddressFamily::INET | AddressFamily::INET6, SocketType::DGRAM) => SocketKind::Udp,
        _ => SocketKind::Other,
    }
}

/// Sets or clears close-on-exec: cleared just before the new executable
/// is started (so it inherits the descriptor), set again after.
pub fn set_inheritable(fd: BorrowedFd<'_>, inheritable: bool) -> io::Result<()> {
    let flags = rustix::io::fcntl_getfd(fd)?;
    let flags = if inheritable {
        flags - FdFlags::CLOEXEC
    } else {
        flags | FdFlags::CLOEXEC
    };
    Ok(rustix::io::fcntl_setfd(fd, flags)?)
}

/// Takes the descriptors this process inherited at the numbers given
/// (from the environment the upgrading process set): each must be open,
/// above standard error, and named once. They are made close-on-exec at
/// once. Only the first call takes any: later calls fail.
pub fn take_inherited(numbers: &[RawFd]) -> io::Result<Vec<OwnedFd>> {
    static TAKEN: AtomicBool = AtomicBool::new(false);
    if TAKEN.swap(true, Ordering::AcqRel) {
        return Err(io::Error::other("the inherited descriptors were taken already"));
    }
    if numbers.len() > FDS_MAX + 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many inherited descriptors",
        ));
    }
    for (i, &fd) in numbers.iter().enumerate() {
        if fd <= 2 || numbers[..i].contains(&fd) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("inherited descriptor {fd} is not one to take"),
            ));
        }
        // SAFETY: F_GETFD only reads the descriptor's flags; any integer
        // is a valid argument (a closed one gives EBADF).
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("inherited descriptor {fd} is not open"),
            ));
        }
    }
    let mut owned = Vec::with_capacity(numbers.len());
    for &fd in numbers {
        // SAFETY: the process that started this one passed these numbers
        // open (checked just above) for this process to own; each is
        // named once (checked) and TAKEN lets this run once per process,
        // so nothing else in the process owns them.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        set_inheritable(fd.as_fd(), false)?;
        owned.push(fd);
    }
    Ok(owned)
}

/// Who last sent a signal, as the kernel said (`si_uid`), when a process
/// sent it (kill(2), tgkill(2), sigqueue(3)); a signal the kernel made
/// itself (a terminal's SIGWINCH on a resize) has no sender.
#[derive(Clone, Debug)]
pub struct SignalSender(Arc<AtomicU64>);

impl SignalSender {
    /// The real user id of the last sender, if one was seen.
    pub fn last_uid(&self) -> Option<u32> {
        let v = self.0.load(Ordering::Acquire);
        (v >> 32 == 1).then_some(v as u32)
    }
}

/// Records the sender of each `signal` from now on, through an SA_SIGINFO
/// action that runs before the handlers registered after it (signal-hook's
/// iterator, which then wakes the program's loop): the loop reads
/// [`SignalSender::last_uid`] when it sees the signal.
pub fn track_sender(signal: i32) -> io::Result<SignalSender> {
    let last = Arc::new(AtomicU64::new(0));
    let seen = last.clone();
    // SAFETY: the action only reads the siginfo the kernel filled and
    // stores into an atomic: async-signal-safe (no allocation, no lock).
    // `si_uid` is valid to read for a signal sent by kill(2), tgkill(2) or
    // sigqueue(3) (`si_code` SI_USER, SI_TKILL, SI_QUEUE), and is read
    // only then; a kernel-made one (SI_KERNEL) is recorded as no sender.
    unsafe {
        signal_hook_registry::register_sigaction(signal, move |info: &libc::siginfo_t| {
            let by_process = sent_by_a_process(info.si_code);
            let seen_now = match by_process {
                true => (1 << 32) | u64::from(info.si_uid()),
                false => 2 << 32,
            };
            seen.store(seen_now, Ordering::Release);
        })
    }?;
    Ok(SignalSender(last))
}

/// Whether a siginfo's `si_code` says a process sent the signal (kill(2),
/// a thread kill, sigqueue(3)), so that `si_uid` is the sender's.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn sent_by_a_process(code: i32) -> bool {
    matches!(code, libc::SI_USER | libc::SI_QUEUE | libc::SI_TKILL)
}

/// FreeBSD's `<sys/signal.h>` values, which the libc crate does not
/// name: SI_USER, SI_QUEUE and SI_LWP (thr_kill(2)).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn sent_by_a_process(code: i32) -> bool {
    matches!(code, 0x10001 | 0x10002 | 0x10007)
}

/// This process's real user id.
pub fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// This process's parent's id.
pub fn parent_pid() -> u32 {
    rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32)
}
