//! The parent's side of the channel: reads requests for upstream indexes,
//! connects to the target each names, and passes the connection back.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use super::wire::{Reply, Request, REQUEST_BYTES};
use super::Target;
use crate::limits::UPSTREAM_CONNECT_TIMEOUT;
use crate::sys::outbound as sys;

/// The connecting side of the outbound channel, for the unsandboxed parent
/// process: it holds the upstreams of the configuration the serving
/// process was started with, and connects to the one a request's index
/// names, never to anything else.
#[derive(Clone, Debug)]
pub struct Broker {
    targets: Vec<Target>,
    /// How long one request may spend connecting, resolving the name
    /// included (`UPSTREAM_CONNECT_TIMEOUT`, 5 s, unless set).
    connect_timeout: Duration,
}

impl Broker {
    /// A broker for `targets`: request index `i` names `targets[i]`.
    pub fn new(targets: Vec<Target>) -> Broker {
        Broker {
            targets,
            connect_timeout: UPSTREAM_CONNECT_TIMEOUT,
        }
    }

    /// How long one request may spend connecting (default 5 s): past it
    /// the reply is ETIMEDOUT. A name's addresses are tried in turn, each
    /// within an even share of the time left; resolving the name counts
    /// too, though a resolver that is slower still cannot be cut short
    /// (getaddrinfo has no deadline; `/etc/resolv.conf`'s `timeout` and
    /// `attempts` bound it).
    pub fn connect_timeout(mut self, timeout: Duration) -> Broker {
        self.connect_timeout = timeout;
        self
    }

    /// The upstreams, by index.
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// Answers the requests that come on `socket` (the broker's end of
    /// [`pair`](super::pair)), one at a time, until the serving side closes
    /// its end: then `Ok`. Blocking (the socket is made so).
    ///
    /// An index out of range is answered EINVAL, with a warning in the
    /// log; a failed connect with its errno. A message that breaks the
    /// protocol (not one request record, or carrying descriptors, which
    /// are closed) ends it with an `InvalidData` error: the serving side
    /// is a bug or compromised, and it is the caller's to decide what
    /// becomes of it.
    pub fn serve(self, socket: OwnedFd) -> io::Result<()> {
        sys::check_seqpacket(socket.as_fd())?;
        sys::set_nonblocking(socket.as_fd(), false)?;
        let mut buf = [0; REQUEST_BYTES];
        loop {
            let mut fds = Vec::new();
            let got = sys::recv(socket.as_fd(), &mut buf, &mut fds)?;
            if got.len == 0 && !got.truncated && fds.is_empty() {
                return Ok(());
            }
            // Descriptors a request must not carry are closed with `fds`.
            let request = Request::received(&buf[..got.len], got.truncated, fds.len())?;
            drop(fds);
            let (errno, conn) = match self.answer(request) {
                Ok(conn) => (0, Some(conn)),
                Err(errno) => (errno, None),
            };
            let reply = Reply { id: request.id, errno }.encode();
            let fds: &[_] = match &conn {
                Some(conn) => &[conn.as_fd()],
                None => &[],
            };
            match sys::send(socket.as_fd(), &reply, fds) {
                Ok(()) => {}
                // The serving side left while we connected for it.
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
                Err(e) => return Err(e),
            }
            // Our copy of the connection closes here; the other process
            // holds its own from the moment sendmsg returned.
        }
    }

    /// The connection `request` asks for, or the errno to answer.
    fn answer(&self, request: Request) -> Result<OwnedFd, i32> {
        let Request { id, index } = request;
        let Some(target) = usize::try_from(index).ok().and_then(|i| self.targets.get(i)) else {
            crate::log::warn(format_args!(
                "outbound: request {id} asks for upstream {index}, but there are {} (refused: EINVAL)",
                self.targets.len()
            ));
            return Err(libc::EINVAL);
        };
        self.connect(target).map_err(|e| {
            crate::log::debug(format_args!("outbound: upstream {index} ({target}): {e}"));
            errno_of(&e)
        })
    }

    fn connect(&self, target: &Target) -> io::Result<OwnedFd> {
        let deadline = Instant::now() + self.connect_timeout;
        match target {
            Target::Unix(path) => sys::connect_unix(path, self.connect_timeout),
            Target::Tcp { host, port } => {
                let addrs: Vec<SocketAddr> = match (host.as_str(), *port).to_socket_addrs() {
                    Ok(addrs) => addrs.collect(),
                    Err(e) => {
                        // The resolver's reason has no errno; it is only
                        // here, so it is logged here.
                        crate::log::warn(format_args!("outbound: cannot resolve {target}: {e}"));
                        return Err(io::Error::from_raw_os_error(libc::EHOSTUNREACH));
                    }
                };
                let mut last = io::Error::from_raw_os_error(libc::EHOSTUNREACH);
                for (i, &addr) in addrs.iter().enumerate() {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(io::Error::from_raw_os_error(libc::ETIMEDOUT));
                    }
                    // Each address left gets an even share of the time left.
                    let n_left = u32::try_from(addrs.len() - i).unwrap_or(u32::MAX);
                    match sys::connect_tcp(addr, left / n_left) {
                        Ok(conn) => return Ok(conn),
                        Err(e) => last = e,
                    }
                }
                Err(last)
            }
        }
    }
}

/// The errno a reply carries for `e`: its own, ETIMEDOUT for a deadline,
/// EIO for anything else without one (never 0, which means success).
fn errno_of(e: &io::Error) -> i32 {
    match e.raw_os_error() {
        Some(errno) if errno > 0 => errno,
        _ if e.kind() == io::ErrorKind::TimedOut => libc::ETIMEDOUT,
        _ => libc::EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::Read;
    use std::os::unix::net::UnixStream;

    use crate::outbound::pair;

    fn serving(broker: Broker) -> (crate::outbound::Requester, std::thread::JoinHandle<io::Result<()>>) {
        let (end, requester) = pair().unwrap();
        (requester, std::thread::spawn(move || broker.serve(end)))
    }

    #[test]
    fn a_request_carrying_a_descriptor_ends_serve_with_invalid_data_and_it_is_closed() {
        let (end, requester) = pair().unwrap();
        let broker = std::thread::spawn(move || Broker::new(Vec::new()).serve(end));
        let (sent, mut kept) = UnixStream::pair().unwrap();
        let bytes = Request { id: 1, index: 0 }.encode();
        sys::send(requester.as_fd(), &bytes, &[sent.as_fd()]).unwrap();
        drop(sent);
        let e = broker.join().unwrap().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("1 descriptors"), "{e}");
        kept.set_nonblocking(true).unwrap();
        assert!(matches!(kept.read(&mut [0; 1]), Ok(0)), "the descriptor was closed");
    }

    #[test]
    fn a_short_or_long_request_ends_serve_with_invalid_data() {
        let request = Request { id: 1, index: 0 }.encode();
        let mut long = [0; REQUEST_BYTES + 1];
        long[..REQUEST_BYTES].copy_from_slice(&request);
        for (bytes, what) in [(&request[..4], "4 bytes"), (&long[..], "cut short")] {
            let (requester, broker) = serving(Broker::new(Vec::new()));
            sys::send(requester.as_fd(), bytes, &[]).unwrap();
            let e = broker.join().unwrap().unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(e.to_string().contains(what), "{e}");
        }
    }

    #[test]
    fn a_stream_socket_is_not_served() {
        let (a, _b) = UnixStream::pair().unwrap();
        let e = Broker::new(Vec::new()).serve(a.into()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn a_name_that_does_not_resolve_is_ehostunreach() {
        // `.invalid` never resolves (RFC 6761 §6.4); a resolver that
        // cannot be reached fails too, with the same answer.
        let target = Target::Tcp {
            host: "peregrine-test.invalid".into(),
            port: 80,
        };
        let e = Broker::new(vec![target.clone()]).connect(&target).unwrap_err();
        assert_eq!(errno_of(&e), libc::EHOSTUNREACH);
    }

    #[test]
    fn errors_without_an_errno_get_one() {
        assert_eq!(
            errno_of(&io::Error::from_raw_os_error(libc::ECONNREFUSED)),
            libc::ECONNREFUSED
        );
        assert_eq!(errno_of(&io::ErrorKind::TimedOut.into()), libc::ETIMEDOUT);
        assert_eq!(errno_of(&io::Error::other("?")), libc::EIO);
    }
}
