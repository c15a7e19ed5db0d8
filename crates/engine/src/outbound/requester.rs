//! The serving side of the channel: a non-blocking end that sends requests
//! for upstream indexes and reads the broker's replies, for a worker's
//! event loop.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use super::wire::{Reply, Request, REPLY_BYTES};
use crate::sys::outbound as sys;

/// The serving process's end of the outbound channel: asks the
/// [`Broker`](super::Broker) for connections by upstream index, and reads
/// its answers. Non-blocking: register it for readability with the
/// worker's poll (`mio::unix::SourceFd(&requester.as_raw_fd())`) and call
/// [`poll_reply`](Requester::poll_reply) until it gives `None`.
#[derive(Debug)]
pub struct Requester {
    socket: OwnedFd,
    /// The id the next request gets; the first is 1.
    next_id: u64,
}

/// A new channel: the broker's end (blocking, for
/// [`Broker::serve`](super::Broker::serve), in this process or another:
/// close-on-exec, so a child must be given it on purpose), and the
/// serving side's [`Requester`]. Both ends are close-on-exec.
pub fn pair() -> io::Result<(OwnedFd, Requester)> {
    let (broker, requester) = sys::seqpacket_pair()?;
    Ok((broker, Requester::from_fd(requester)?))
}

impl Requester {
    /// Wraps the serving side's end of a channel made elsewhere (a pair
    /// whose other end the parent kept, passed to this process as an
    /// inherited descriptor). It must be a Unix `SOCK_SEQPACKET` socket; it
    /// is made non-blocking.
    pub fn from_fd(socket: OwnedFd) -> io::Result<Requester> {
        sys::check_seqpacket(socket.as_fd())?;
        sys::set_nonblocking(socket.as_fd(), true)?;
        Ok(Requester { socket, next_id: 1 })
    }

    /// Asks for a connection to the upstream at `index` of the broker's
    /// targets; returns the request's id, which its reply will carry.
    /// WouldBlock (the broker is behind and the socket's buffer full)
    /// passes through, and no id is used: ask again once writable.
    pub fn request(&mut self, index: u32) -> io::Result<u64> {
        let id = self.next_id;
        sys::send(self.socket.as_fd(), &Request { id, index }.encode(), &[])?;
        self.next_id = id.wrapping_add(1);
        Ok(id)
    }

    /// The next reply, if one has come: the id of the request it answers,
    /// and the connected socket (non-blocking, close-on-exec) or why there
    /// is none (the broker's errno: EINVAL for an index out of range,
    /// ECONNREFUSED, ETIMEDOUT, ...). `Ok(None)`: nothing yet.
    ///
    /// An `Err` is the channel's, not a request's: `UnexpectedEof` when
    /// the broker has closed its end, `InvalidData` for a message that
    /// breaks the protocol (whose descriptors are all closed). Either way
    /// no request still in flight will be answered.
    pub fn poll_reply(&mut self) -> io::Result<Option<(u64, io::Result<OwnedFd>)>> {
        let mut buf = [0; REPLY_BYTES];
        let mut fds = Vec::new();
        let got = match sys::recv(self.socket.as_fd(), &mut buf, &mut fds) {
            Ok(got) => got,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e),
        };
        if got.len == 0 && !got.truncated && fds.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "outbound channel: the broker closed its end",
            ));
        }
        Ok(Some(Reply::received(&buf[..got.len], got.truncated, fds)?))
    }
}

impl AsFd for Requester {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

impl AsRawFd for Requester {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::Read;
    use std::os::unix::net::UnixStream;

    use crate::outbound::wire::REQUEST_BYTES;

    /// A requester and the raw other end, where the test plays the broker.
    fn channel() -> (OwnedFd, Requester) {
        pair().unwrap()
    }

    /// A descriptor whose closing shows (see `wire`'s tests): the sent end
    /// of a stream pair, and the kept end that reads end-of-file once the
    /// sent one is closed everywhere.
    fn watched() -> (OwnedFd, UnixStream) {
        let (sent, kept) = UnixStream::pair().unwrap();
        kept.set_nonblocking(true).unwrap();
        (sent.into(), kept)
    }

    fn closed(kept: &mut UnixStream) -> bool {
        matches!(kept.read(&mut [0; 1]), Ok(0))
    }

    #[test]
    fn both_ends_are_cloexec_and_the_requester_is_nonblocking() {
        let (broker, requester) = channel();
        assert!(sys::is_cloexec(&broker) && sys::is_cloexec(&requester));
        assert!(sys::is_nonblocking(&requester));
        assert!(!sys::is_nonblocking(&broker), "serve blocks on its end");
    }

    #[test]
    fn a_request_is_one_record_and_ids_count_up() {
        let (broker, mut requester) = channel();
        assert_eq!(requester.request(4).unwrap(), 1);
        assert_eq!(requester.request(0).unwrap(), 2);
        let mut fds = Vec::new();
        for (id, index) in [(1, 4), (2, 0)] {
            let mut buf = [0; REQUEST_BYTES + 4];
            let got = sys::recv(broker.as_fd(), &mut buf, &mut fds).unwrap();
            assert_eq!(got.len, REQUEST_BYTES);
            assert_eq!(Request::decode(&buf[..got.len]), Ok(Request { id, index }));
        }
        assert!(fds.is_empty());
    }

    #[test]
    fn nothing_yet_is_none_and_a_reply_is_matched_by_its_id() {
        let (broker, mut requester) = channel();
        assert!(requester.poll_reply().unwrap().is_none());

        let (fd, mut kept) = watched();
        sys::send(broker.as_fd(), &Reply { id: 2, errno: 0 }.encode(), &[fd.as_fd()]).unwrap();
        drop(fd);
        sys::send(
            broker.as_fd(),
            &Reply {
                id: 1,
                errno: libc::ECONNREFUSED,
            }
            .encode(),
            &[],
        )
        .unwrap();

        let (id, answer) = requester.poll_reply().unwrap().unwrap();
        assert_eq!(id, 2);
        let received = answer.unwrap();
        assert!(sys::is_cloexec(&received), "received with MSG_CMSG_CLOEXEC");
        assert!(!closed(&mut kept));
        let (id, answer) = requester.poll_reply().unwrap().unwrap();
        assert_eq!(id, 1);
        assert_eq!(answer.unwrap_err().raw_os_error(), Some(libc::ECONNREFUSED));
        assert!(requester.poll_reply().unwrap().is_none());
        drop(received);
        assert!(closed(&mut kept));
    }

    /// Sends `bytes` with `n` watched descriptors to a fresh requester and
    /// returns what `poll_reply` said, checking that every descriptor sent
    /// was closed on the requester's side.
    fn bad_reply(bytes: &[u8], n: usize) -> io::Error {
        let (broker, mut requester) = channel();
        let (fds, mut kept): (Vec<OwnedFd>, Vec<UnixStream>) = (0..n).map(|_| watched()).unzip();
        let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|fd| fd.as_fd()).collect();
        sys::send(broker.as_fd(), bytes, &borrowed).unwrap();
        drop(fds);
        let e = requester.poll_reply().expect_err("a protocol error");
        for (i, kept) in kept.iter_mut().enumerate() {
            assert!(closed(kept), "descriptor {i} of {n} closed");
        }
        e
    }

    #[test]
    fn a_wrong_count_of_descriptors_is_a_protocol_error_and_all_are_closed() {
        let ok = Reply { id: 1, errno: 0 }.encode();
        let failed = Reply {
            id: 1,
            errno: libc::ECONNREFUSED,
        }
        .encode();
        for (bytes, n) in [(ok, 0), (ok, 2), (ok, 3), (failed, 1), (failed, 2)] {
            let e = bad_reply(&bytes, n);
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{n} descriptors: {e}");
            assert!(e.to_string().contains(&format!("{n} descriptors")), "{e}");
        }
    }

    #[test]
    fn more_descriptors_than_there_is_room_for_are_all_closed() {
        // The kernel closes those past the control buffer (MSG_CTRUNC);
        // the requester closes the ones it got.
        let ok = Reply { id: 1, errno: 0 }.encode();
        let n = sys::FDS_ROOM + 3;
        let (broker, mut requester) = channel();
        let (fds, mut kept): (Vec<OwnedFd>, Vec<UnixStream>) = (0..n).map(|_| watched()).unzip();
        let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|fd| fd.as_fd()).collect();
        sys::send(broker.as_fd(), &ok, &borrowed).unwrap();
        drop(fds);
        let e = requester.poll_reply().expect_err("a protocol error");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("cut short"), "{e}");
        for (i, kept) in kept.iter_mut().enumerate() {
            assert!(closed(kept), "descriptor {i} of {n} closed");
        }
    }

    #[test]
    fn a_short_or_long_record_is_a_protocol_error() {
        let reply = Reply { id: 1, errno: 0 }.encode();
        let e = bad_reply(&reply[..REPLY_BYTES - 1], 1);
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("11 bytes"), "{e}");
        let mut long = [0; REPLY_BYTES + 1];
        long[..REPLY_BYTES].copy_from_slice(&reply);
        let e = bad_reply(&long, 1);
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("cut short"), "{e}");
    }

    #[test]
    fn the_broker_closing_its_end_is_unexpected_eof() {
        let (broker, mut requester) = channel();
        drop(broker);
        let e = requester.poll_reply().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(requester.request(0).unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn a_stream_socket_is_not_a_channel() {
        let (a, _b) = UnixStream::pair().unwrap();
        let e = Requester::from_fd(a.into()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
