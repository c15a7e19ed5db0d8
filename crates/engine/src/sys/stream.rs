//! Connections and listening sockets of either kind: TCP, or Unix-domain
//! stream sockets (`unix:/path` listeners, as nginx's `listen unix:`).
//! The rest of the engine sees one type of each, which reads, writes,
//! sends files and registers with mio alike; what only TCP has (Nagle's
//! algorithm to turn off, MSG_MORE) is skipped for Unix sockets.
//!
//! A Unix client has no address: it is shown as [`UNIX_PEER`]
//! (`0.0.0.0:0`, which no TCP peer can have), and the access log writes it
//! `unix:`, as nginx's `$remote_addr` does.

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mio::event::Source;
use mio::{Interest, Registry, Token};

/// The peer address of every Unix-domain client.
pub const UNIX_PEER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

/// Whether `peer` is a Unix-domain client ([`UNIX_PEER`]).
pub(crate) fn is_unix(peer: SocketAddr) -> bool {
    peer == UNIX_PEER
}

/// An accepted connection.
pub(crate) enum Stream {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
}

impl Stream {
    pub(crate) fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.shutdown(how),
            Stream::Unix(s) => s.shutdown(how),
        }
    }

    /// Copies the bytes waiting in the socket into `buf` without taking
    /// them (recv with MSG_PEEK): a PROXY header is looked at whole
    /// before exactly its bytes are read, as HAProxy and nginx do, so
    /// what follows it stays in the socket for TLS or HTTP.
    pub(crate) fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        Ok(rustix::net::recv(self.as_fd(), buf, rustix::net::RecvFlags::PEEK)?.0)
    }

    /// TCP_NODELAY on TCP; nothing to do on a Unix socket (no Nagle).
    pub(crate) fn set_nodelay(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nodelay(on),
            Stream::Unix(_) => Ok(()),
        }
    }
}

// Reads and writes are rustix's system calls, for either kind of socket:
// libc's recv and send are cancellation points, and in a process with
// threads each call is bracketed by __pthread_enable_asynccancel and
// __pthread_disable_asynccancel (about 2 % of a 50-connection hello's
// CPU, perf; the single-threaded `limit` server pays none of it). The
// calls and flags are std's: recv with none, send with MSG_NOSIGNAL,
// writev.
impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Ok(rustix::net::recv(self.as_fd(), buf, rustix::net::RecvFlags::empty())?.0)
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(rustix::net::send(self.as_fd(), buf, super::SEND_FLAGS)?)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        Ok(rustix::io::writev(self.as_fd(), bufs)?)
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

/// `send(2)` on another connected socket, as `Stream::write` sends
/// (rustix's system call, MSG_NOSIGNAL): the proxy's upstream connections
/// are mio's own streams, whose `write` went through libc's `send` and
/// its cancellation brackets (59 instructions a call; the pool's
/// `place`, which writes, went 423 → 389 a proxied GET, callgrind
/// `proxy-c50`).
pub(crate) fn send(socket: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    Ok(rustix::net::send(socket, buf, super::SEND_FLAGS)?)
}

/// `recv(2)` on another connected socket, as `Stream::read` reads
/// (rustix's system call, no flags): the proxy's upstream connections'
/// reads, which went through mio's `read` (libc's, with its
/// cancellation brackets) as their writes did before `send`.
pub(crate) fn recv(socket: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    Ok(rustix::net::recv(socket, buf, rustix::net::RecvFlags::empty())?.0)
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

impl Source for Stream {
    fn register(&mut self, registry: &Registry, token: Token, interests: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(registry, token, interests),
            Stream::Unix(s) => s.register(registry, token, interests),
        }
    }

    fn reregister(&mut self, registry: &Registry, token: Token, interests: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(registry, token, interests),
            Stream::Unix(s) => s.reregister(registry, token, interests),
        }
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(registry),
            Stream::Unix(s) => s.deregister(registry),
        }
    }
}

/// A listening socket (std's, before a worker registers it).
#[derive(Debug)]
pub(crate) enum StdListener {
    Tcp(std::net::TcpListener),
    /// With the socket file, removed when the last holder is dropped.
    Unix(std::os::unix::net::UnixListener, Arc<SocketFile>),
}

impl StdListener {
    pub(crate) fn try_clone(&self) -> io::Result<StdListener> {
        Ok(match self {
            StdListener::Tcp(l) => StdListener::Tcp(l.try_clone()?),
            StdListener::Unix(l, file) => StdListener::Unix(l.try_clone()?, file.clone()),
        })
    }

    pub(crate) fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            StdListener::Tcp(l) => l.set_nonblocking(on),
            StdListener::Unix(l, _) => l.set_nonblocking(on),
        }
    }

    /// The TCP address, or [`UNIX_PEER`] for a Unix socket.
    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            StdListener::Tcp(l) => l.local_addr(),
            StdListener::Unix(..) => Ok(UNIX_PEER),
        }
    }

    /// The socket file's path, for a Unix socket.
    pub(crate) fn unix_path(&self) -> Option<&Path> {
        match self {
            StdListener::Tcp(_) => None,
            StdListener::Unix(_, file) => Some(&file.path),
        }
    }

    pub(crate) fn into_mio(self) -> ListenSocket {
        match self {
            StdListener::Tcp(l) => ListenSocket::Tcp(mio::net::TcpListener::from_std(l)),
            StdListener::Unix(l, file) => ListenSocket::Unix(mio::net::UnixListener::from_std(l), file),
        }
    }
}

/// A worker's listening socket.
pub(crate) enum ListenSocket {
    Tcp(mio::net::TcpListener),
    Unix(mio::net::UnixListener, #[allow(dead_code)] Arc<SocketFile>),
}

impl ListenSocket {
    /// The next connection, and its peer ([`UNIX_PEER`] for a Unix one).
    pub(crate) fn accept(&self) -> io::Result<(Stream, SocketAddr)> {
        match self {
            ListenSocket::Tcp(l) => l.accept().map(|(s, peer)| (Stream::Tcp(s), peer)),
            ListenSocket::Unix(l, _) => l.accept().map(|(s, _)| (Stream::Unix(s), UNIX_PEER)),
        }
    }
}

impl Source for ListenSocket {
    fn register(&mut self, registry: &Registry, token: Token, interests: Interest) -> io::Result<()> {
        match self {
            ListenSocket::Tcp(l) => l.register(registry, token, interests),
            ListenSocket::Unix(l, _) => l.register(registry, token, interests),
        }
    }

    fn reregister(&mut self, registry: &Registry, token: Token, interests: Interest) -> io::Result<()> {
        match self {
            ListenSocket::Tcp(l) => l.reregister(registry, token, interests),
            ListenSocket::Unix(l, _) => l.reregister(registry, token, interests),
        }
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        match self {
            ListenSocket::Tcp(l) => l.deregister(registry),
            ListenSocket::Unix(l, _) => l.deregister(registry),
        }
    }
}

/// A Unix socket's file, removed when the last listener holding it is
/// dropped (at shutdown; a reload's new server holds it first) if it is
/// still the file bound (not one another server has bound since).
#[derive(Debug)]
pub(crate) struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
    /// False for a socket systemd made (socket activation): its file is
    /// systemd's to remove; set false when the socket is handed to a new
    /// executable (`keep`), whose server removes it in turn.
    remove: AtomicBool,
}

impl SocketFile {
    /// A socket passed by systemd, whose file is left alone.
    pub(crate) fn inherited(listener: std::os::unix::net::UnixListener) -> StdListener {
        let path = (listener.local_addr().ok())
            .and_then(|a| a.as_pathname().map(Path::to_owned))
            .unwrap_or_else(|| PathBuf::from("(unnamed)"));
        let file = SocketFile {
            path,
            dev: 0,
            ino: 0,
            remove: AtomicBool::new(false),
        };
        StdListener::Unix(listener, Arc::new(file))
    }

    /// A socket another executable of ours bound and passed at an upgrade
    /// (`sys/upgrade.rs`): its file, if still there, is this process's to
    /// remove at shutdown when `remove` (it was the old one's).
    pub(crate) fn adopted(listener: std::os::unix::net::UnixListener, remove: bool) -> StdListener {
        let path = (listener.local_addr().ok()).and_then(|a| a.as_pathname().map(Path::to_owned));
        let meta = path.as_deref().and_then(|p| std::fs::symlink_metadata(p).ok());
        let file = SocketFile {
            path: path.unwrap_or_else(|| PathBuf::from("(unnamed)")),
            dev: meta.as_ref().map_or(0, |m| m.dev()),
            ino: meta.as_ref().map_or(0, |m| m.ino()),
            remove: AtomicBool::new(remove && meta.is_some()),
        };
        StdListener::Unix(listener, Arc::new(file))
    }

    /// Whether this process would remove the file at shutdown.
    pub(crate) fn removes(&self) -> bool {
        self.remove.load(Ordering::Acquire)
    }

    /// The socket now belongs to another executable too (an upgrade): its
    /// file is left in place at this process's shutdown.
    pub(crate) fn keep(&self) {
        self.remove.store(false, Ordering::Release);
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if !self.remove.load(Ordering::Acquire) {
            return;
        }
        if let Ok(meta) = std::fs::symlink_metadata(&self.path) {
            if meta.dev() == self.dev && meta.ino() == self.ino {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    crate::log::warn(format_args!("cannot remove {}: {e}", self.path.display()));
                }
            }
        }
    }
}

/// The mode of a socket file: owner and group may connect (as Caddy's
/// default for `unix/` addresses; nginx leaves it to the umask).
pub const SOCKET_MODE: u32 = 0o660;

/// Removes a socket file left by a server that is gone: if `path` is a
/// socket nobody listens on (connecting is refused). Returns whether it
/// removed one. A socket something listens on is "address in use"; a file
/// that is not a socket is refused, never removed. Nothing there: false.
pub fn remove_stale_socket(path: &Path) -> io::Result<bool> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "the path exists and is not a socket (not removed)",
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "a server is listening on this socket (Address in use)",
        )),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            std::fs::remove_file(path)?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error() == Some(libc::EPERM) => {
            Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                "the socket file exists and the sandbox forbids checking whether it is in use: \
                 remove it, or restart",
            ))
        }
        Err(e) => Err(e),
    }
}

/// Whether `socket` is a Unix-domain one (by its address's family:
/// SO_DOMAIN, which socket2's `domain` reads, is not on every system).
pub(crate) fn is_unix_socket(socket: &socket2::Socket) -> io::Result<bool> {
    Ok(socket.local_addr()?.is_unix())
}

/// Binds a Unix-domain stream socket at `path`, after removing a stale
/// one, with mode [`SOCKET_MODE`] (set through the umask around `bind`,
/// so the file never exists with a wider mode), listening.
pub(crate) fn bind_unix(path: &Path, backlog: i32) -> io::Result<StdListener> {
    use socket2::{Domain, SockAddr, Socket, Type};
    remove_stale_socket(path)?;
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    let addr = SockAddr::unix(path)?;
    let old = rustix::process::umask(rustix::fs::Mode::from_bits_truncate((0o777 & !SOCKET_MODE) as _));
    let bound = socket.bind(&addr);
    rustix::process::umask(old);
    bound?;
    let meta = std::fs::symlink_metadata(path)?;
    let file = Arc::new(SocketFile {
        path: path.to_owned(),
        dev: meta.dev(),
        ino: meta.ino(),
        remove: AtomicBool::new(true),
    });
    socket.listen(backlog)?;
    socket.set_nonblocking(true)?;
    Ok(StdListener::Unix(socket.into(), file))
}
