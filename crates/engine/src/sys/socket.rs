//! Listening sockets: one per worker and address, joined with SO_REUSEPORT
//! so that the kernel spreads new connections over the workers and no two
//! workers ever contend for one accept queue.

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// Accept queue length asked for; the kernel caps it at `somaxconn`.
pub(crate) const BACKLOG: i32 = 4096;

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
        set_reuse_port(&socket)?;
        socket.set_nonblocking(true)?;
        socket.bind(&bound.into())?;
        socket.listen(BACKLOG)?;
        let listener: TcpListener = socket.into();
        bound = listener.local_addr()?;
        listeners.push(listener);
    }
    Ok(listeners)
}

/// Joins `socket` to its port's group of sockets. Linux spreads new
/// connections (and datagrams) over a SO_REUSEPORT group; FreeBSD does
/// that with SO_REUSEPORT_LB (12.0 on), which it is asked for instead, as
/// nginx does. On other systems (macOS, the other BSDs) the group's
/// sockets share the port but one of them gets every connection: it still
/// serves, on one worker (the `peregrine` command's start line says so).
fn set_reuse_port(socket: &Socket) -> io::Result<()> {
    #[cfg(target_os = "freebsd")]
    return socket.set_reuse_port_lb(true);
    #[cfg(not(target_os = "freebsd"))]
    return socket.set_reuse_port(true);
}

/// `send(2)` with MSG_MORE: the kernel holds a partial segment for the
/// bytes of the next send (or sendfile) on the socket, which pushes it.
/// A Unix socket has no segments to hold: a plain send.
#[cfg(target_os = "linux")]
pub(crate) fn send_more(stream: &super::stream::Stream, buf: &[u8]) -> io::Result<usize> {
    let flags = match stream {
        super::stream::Stream::Tcp(_) => libc::MSG_MORE,
        super::stream::Stream::Unix(_) => 0,
    };
    socket2::SockRef::from(stream).send_with_flags(buf, flags)
}

/// A plain `send(2)` where there is no MSG_MORE (the BSDs, macOS): the
/// head may leave in a segment of its own before the file's first bytes.
#[cfg(not(target_os = "linux"))]
pub(crate) fn send_more(stream: &super::stream::Stream, buf: &[u8]) -> io::Result<usize> {
    socket2::SockRef::from(stream).send(buf)
}

/// Binds `n_workers` UDP sockets to `addr` (a TLS listener's address, its
/// port known) in one SO_REUSEPORT group, for HTTP/3: the kernel hashes
/// each datagram's addresses to one of them, so a client's packets keep
/// reaching the same worker.
pub(crate) fn bind_udp_group(addr: SocketAddr, n_workers: usize) -> io::Result<Vec<std::net::UdpSocket>> {
    // As for TCP: any UDP socket of the same user with SO_REUSEPORT on
    // the port would join the group and take a share of the datagrams.
    // An ordinary bind first reports "in use" instead.
    if addr.port() != 0 {
        let probe = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        if addr.is_ipv6() {
            probe.set_only_v6(true)?;
        }
        probe.bind(&addr.into())?;
    }
    let mut sockets = Vec::with_capacity(n_workers);
    for _ in 0..n_workers {
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        if addr.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        set_reuse_port(&socket)?;
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        sockets.push(socket.into());
    }
    Ok(sockets)
}

/// Makes the kernel pick the socket of a UDP SO_REUSEPORT group by a
/// QUIC packet's destination connection ID rather than by the addresses
/// (SO_ATTACH_REUSEPORT_CBPF, on any socket of the group): its first byte
/// modulo `n_sockets`, which is the socket's index in the group (the order
/// of binding) for the IDs our workers issue (`quic::steer`). A client's
/// first Initial carries an ID of its own choosing, random, which spreads
/// new connections over the workers; every later packet carries one of
/// ours. So a connection stays on its worker when the client's address
/// changes (NAT rebinding, migration). The filter sees the UDP payload:
/// the ID starts at byte 6 in a long header (after the first byte, the
/// version and the ID's length), at byte 1 in a short one.
#[cfg(target_os = "linux")]
pub(crate) fn steer_by_connection_id(socket: &std::net::UdpSocket, n_sockets: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    const fn op(code: u32, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
        libc::sock_filter {
            code: code as u16,
            jt,
            jf,
            k,
        }
    }
    let load_byte = libc::BPF_LD | libc::BPF_B | libc::BPF_ABS;
    let filter = [
        op(load_byte, 0, 0, 0),                                       // A = first byte
        op(libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K, 0, 2, 0x80), // long header?
        op(load_byte, 0, 0, 6),                                       // yes: A = DCID[0]
        op(libc::BPF_JMP | libc::BPF_JA, 0, 0, 1),                    // skip the next
        op(load_byte, 0, 0, 1),                                       // no: A = DCID[0]
        op(libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K, 0, 0, n_sockets.max(1)),
        op(libc::BPF_RET | libc::BPF_A, 0, 0, 0), // the socket's index
    ];
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: `program` points at `filter`, both alive for the duration of
    // the call, and its length is the filter's; the kernel copies it.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&program as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Only Linux has a classic BPF program choose a socket of a SO_REUSEPORT
/// group: elsewhere datagrams are spread by their addresses (or all go to
/// one socket), and a client that changes address may reach another
/// worker, which does not know its connection.
#[cfg(not(target_os = "linux"))]
pub(crate) fn steer_by_connection_id(_socket: &std::net::UdpSocket, _n_sockets: u32) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "SO_ATTACH_REUSEPORT_CBPF is Linux's",
    ))
}
