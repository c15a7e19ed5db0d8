//! systemd integration: socket activation (`LISTEN_FDS`, sd_listen_fds(3))
//! and readiness notification (`NOTIFY_SOCKET`, sd_notify(3)), without
//! libsystemd: both are a few lines of protocol.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use socket2::{Socket, Type};

/// The first descriptor systemd passes (SD_LISTEN_FDS_START).
const LISTEN_FDS_START: RawFd = 3;

/// Takes the listening sockets systemd passed to this process, if any:
/// `LISTEN_PID` must name this process and `LISTEN_FDS` say how many, from
/// descriptor 3 on. Each socket must be a listening stream socket, TCP or
/// Unix-domain (`ListenStream=/run/x.sock`: its file is systemd's, left
/// in place at shutdown); it is made non-blocking and close-on-exec. Only the first call takes them; later
/// calls get none.
///
/// The variables are left in the environment: `std::env::remove_var` is
/// unsound while other threads may read the environment (getenv in libc,
/// DNS resolution), and this may run with workers alive. Nothing needs them
/// gone: a child has another pid, so `LISTEN_PID` does not name it (sd_listen_fds(3) checks the same), and the
/// descriptors are close-on-exec from here on.
pub fn listen_fds() -> io::Result<Vec<crate::Listening>> {
    static TAKEN: AtomicBool = AtomicBool::new(false);
    if TAKEN.swap(true, Ordering::AcqRel) {
        return Ok(Vec::new());
    }
    let for_us = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
        .is_some_and(|pid| pid == std::process::id());
    let n: RawFd = match std::env::var("LISTEN_FDS") {
        Ok(n) if for_us => n
            .trim()
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("LISTEN_FDS={n:?} is not a count")))?,
        _ => return Ok(Vec::new()),
    };
    let mut listeners = Vec::new();
    for fd in LISTEN_FDS_START..LISTEN_FDS_START.saturating_add(n) {
        // SAFETY: F_GETFD only reads the descriptor's flags; any integer
        // is a valid argument (a closed one gives EBADF).
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("descriptor {fd} passed by systemd is not open"),
            ));
        }
        // SAFETY: systemd's protocol hands descriptors 3 .. 3 + LISTEN_FDS
        // to this process (LISTEN_PID checked above), and nothing else in
        // the process owns them: TAKEN lets this run at most once per
        // process.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let socket = Socket::from(owned);
        let listening = socket.r#type()? == Type::STREAM && super::is_listening(std::os::fd::AsFd::as_fd(&socket))?;
        if !listening {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("descriptor {fd} passed by systemd is not a listening stream socket"),
            ));
        }
        socket.set_nonblocking(true)?;
        socket.set_cloexec(true)?;
        let listener = if super::stream::is_unix_socket(&socket)? {
            super::stream::SocketFile::inherited(socket.into())
        } else {
            super::stream::StdListener::Tcp(socket.into())
        };
        listeners.push(crate::Listening::from(listener));
    }
    Ok(listeners)
}

/// Tells the service manager that a configuration reload has begun:
/// `RELOADING=1` with `MONOTONIC_USEC` (the time on CLOCK_MONOTONIC, which
/// `Type=notify-reload` asks for, sd_notify(3)). `READY=1` says it ended.
pub fn notify_reloading() -> io::Result<()> {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let usec = u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000 + u64::try_from(now.tv_nsec).unwrap_or(0) / 1_000;
    notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"))
}

/// Sends `state` (e.g. `READY=1`, `STOPPING=1`) to the service manager if
/// `NOTIFY_SOCKET` names one; does nothing otherwise. A path starting with
/// `@` is in the abstract namespace.
pub fn notify(state: &str) -> io::Result<()> {
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(());
    };
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
    let addr = match bytes.strip_prefix(b"@") {
        #[cfg(target_os = "linux")]
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name)?
        }
        // The abstract namespace is Linux's (so is systemd).
        #[cfg(not(target_os = "linux"))]
        Some(_) => {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "NOTIFY_SOCKET names an abstract socket, which only Linux has",
            ))
        }
        None => SocketAddr::from_pathname(&path)?,
    };
    let socket = UnixDatagram::unbound()?;
    socket.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}
