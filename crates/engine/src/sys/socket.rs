//! Listening sockets: one per worker and address, joined with SO_REUSEPORT
//! so that the kernel spreads new connections over the workers and no two
//! workers ever contend for one accept queue.

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// Accept queue length asked for; the kernel caps it at `somaxconn`.
const BACKLOG: i32 = 4096;

/// Binds `n_workers` listeners to `addr`. With port 0, the first listener
/// picks the port and the others join it.
pub(crate) fn bind_group(addr: SocketAddr, n_workers: usize) -> io::Result<Vec<TcpListener>> {
    // SO_REUSEPORT lets any socket of the same user join the group, so a
    // second server started on the same port would silently share its
    // traffic. Probe with an ordinary bind first to report "in use" plainly.
    if addr.port() != 0 {
        let probe = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        if addr.is_ipv6() {
            // As the listeners below: otherwise `[::]:P` would collide
            // with a separate `0.0.0.0:P` listener that is allowed.
            probe.set_only_v6(true)?;
        }
        probe.set_reuse_address(true)?;
        probe.bind(&addr.into())?;
    }
    let mut listeners = Vec::with_capacity(n_workers);
    let mut bound = addr;
    for _ in 0..n_workers {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        if addr.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&bound.into())?;
        socket.listen(BACKLOG)?;
        let listener: TcpListener = socket.into();
        bound = listener.local_addr()?;
        listeners.push(listener);
    }
    Ok(listeners)
}

/// Sets or clears TCP_CORK: while set, the kernel sends only full segments;
/// clearing it sends what is left at once. Best effort: a socket that
/// refuses only loses the batching.
pub(crate) fn set_cork(stream: &mio::net::TcpStream, on: bool) {
    let _ = socket2::SockRef::from(stream).set_cork(on);
}

/// Binds `n_workers` UDP sockets to `addr` (a TLS listener's address, its
/// port known) in one SO_REUSEPORT group, for HTTP/3: the kernel hashes
/// each datagram's addresses to one of them, so a client's packets keep
/// reaching the same worker.
pub(crate) fn bind_udp_group(addr: SocketAddr, n_workers: usize) -> io::Result<Vec<std::net::UdpSocket>> {
    let mut sockets = Vec::with_capacity(n_workers);
    for _ in 0..n_workers {
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        if addr.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        sockets.push(socket.into());
    }
    Ok(sockets)
}
