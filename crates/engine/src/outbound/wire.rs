//! The channel's two records, and the rules a received message must keep
//! to be one (the module's docs give the protocol). No I/O: bytes and a
//! count of descriptors in, a record or a `WireError` out.

use std::fmt;
use std::io;
use std::os::fd::OwnedFd;

/// Bytes of a request: `id: u64`, `index: u32`, little-endian.
pub(crate) const REQUEST_BYTES: usize = 12;
/// Bytes of a reply: `id: u64`, `errno: i32`, little-endian.
pub(crate) const REPLY_BYTES: usize = 12;

/// The largest errno a reply may carry: Linux's are below 4096 (the
/// kernel's `MAX_ERRNO`).
const ERRNO_MAX: i32 = 4095;

/// A worker's request: a connection to the upstream at `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) id: u64,
    pub(crate) index: u32,
}

/// The broker's reply to request `id`: 0 with the connected descriptor,
/// or the errno of the failure without one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) id: u64,
    pub(crate) errno: i32,
}

/// How a received message breaks the protocol. After one the channel is
/// not trusted again: its peer is a bug, or hostile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WireError {
    /// Not one record long: this many bytes.
    Length(usize),
    /// Cut by the kernel: longer than a record, or carrying more
    /// descriptors than there was room for.
    Truncated,
    /// A request with descriptors, a success without exactly one, or a
    /// failure with any: this many.
    Descriptors(usize),
    /// A reply's errno that no system call returns (negative, or past
    /// `ERRNO_MAX`).
    Errno(i32),
}

impl Request {
    pub(crate) fn encode(self) -> [u8; REQUEST_BYTES] {
        let mut out = [0; REQUEST_BYTES];
        out[..8].copy_from_slice(&self.id.to_le_bytes());
        out[8..].copy_from_slice(&self.index.to_le_bytes());
        out
    }

    /// The request in `bytes`, which must be exactly one record.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Request, WireError> {
        let record: &[u8; REQUEST_BYTES] = bytes.try_into().map_err(|_| WireError::Length(bytes.len()))?;
        let (id, index) = record.split_at(8);
        Ok(Request {
            id: u64::from_le_bytes(id.try_into().expect("8 bytes")),
            index: u32::from_le_bytes(index.try_into().expect("4 bytes")),
        })
    }

    /// The request a received message holds: `bytes` as read, `truncated`
    /// if the kernel cut it, and the number of descriptors it carried
    /// (which must be none; closing them is the caller's, by dropping).
    pub(crate) fn received(bytes: &[u8], truncated: bool, n_fds: usize) -> Result<Request, WireError> {
        if truncated {
            return Err(WireError::Truncated);
        }
        let request = Request::decode(bytes)?;
        if n_fds != 0 {
            return Err(WireError::Descriptors(n_fds));
        }
        Ok(request)
    }
}

impl Reply {
    pub(crate) fn encode(self) -> [u8; REPLY_BYTES] {
        let mut out = [0; REPLY_BYTES];
        out[..8].copy_from_slice(&self.id.to_le_bytes());
        out[8..].copy_from_slice(&self.errno.to_le_bytes());
        out
    }

    /// The reply in `bytes`, which must be exactly one record.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Reply, WireError> {
        let record: &[u8; REPLY_BYTES] = bytes.try_into().map_err(|_| WireError::Length(bytes.len()))?;
        let (id, errno) = record.split_at(8);
        Ok(Reply {
            id: u64::from_le_bytes(id.try_into().expect("8 bytes")),
            errno: i32::from_le_bytes(errno.try_into().expect("4 bytes")),
        })
    }

    /// The answer a received message holds: request id, and the connected
    /// descriptor or the error. `fds` are the descriptors it carried; on an
    /// error they are dropped (closed) here, and on success the one kept is
    /// moved out, so none can leak whatever the message was.
    pub(crate) fn received(
        bytes: &[u8],
        truncated: bool,
        mut fds: Vec<OwnedFd>,
    ) -> Result<(u64, io::Result<OwnedFd>), WireError> {
        if truncated {
            return Err(WireError::Truncated);
        }
        let reply = Reply::decode(bytes)?;
        match (reply.errno, fds.len()) {
            (0, 1) => Ok((reply.id, Ok(fds.pop().expect("one descriptor")))),
            (1..=ERRNO_MAX, 0) => Ok((reply.id, Err(io::Error::from_raw_os_error(reply.errno)))),
            (0..=ERRNO_MAX, n) => Err(WireError::Descriptors(n)),
            (errno, _) => Err(WireError::Errno(errno)),
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Length(n) => write!(f, "outbound channel: a message of {n} bytes, not one record"),
            WireError::Truncated => f.write_str("outbound channel: a message cut short (MSG_TRUNC or MSG_CTRUNC)"),
            WireError::Descriptors(n) => write!(
                f,
                "outbound channel: a message with {n} descriptors, against the protocol"
            ),
            WireError::Errno(errno) => write!(f, "outbound channel: a reply with errno {errno}"),
        }
    }
}

impl std::error::Error for WireError {}

/// A protocol error is `InvalidData`: the channel is not to be used again.
impl From<WireError> for io::Error {
    fn from(e: WireError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::Read;
    use std::os::unix::net::UnixStream;

    #[test]
    fn records_are_twelve_little_endian_bytes_and_round_trip() {
        let request = Request {
            id: 0x0102_0304_0506_0708,
            index: 0x0a0b_0c0d,
        };
        let bytes = request.encode();
        assert_eq!(bytes, [8, 7, 6, 5, 4, 3, 2, 1, 0x0d, 0x0c, 0x0b, 0x0a]);
        assert_eq!(Request::decode(&bytes), Ok(request));

        let reply = Reply {
            id: u64::MAX,
            errno: 111,
        };
        let bytes = reply.encode();
        assert_eq!(bytes, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 111, 0, 0, 0]);
        assert_eq!(Reply::decode(&bytes), Ok(reply));

        for (id, x) in [(0, 0), (1, u32::MAX), (u64::MAX, 7)] {
            let request = Request { id, index: x };
            assert_eq!(Request::decode(&request.encode()), Ok(request));
            let reply = Reply { id, errno: x as i32 };
            assert_eq!(Reply::decode(&reply.encode()), Ok(reply));
        }
    }

    #[test]
    fn a_record_of_any_other_length_is_refused() {
        let long = [0; 13];
        for len in [0, 1, 8, 11, 13] {
            assert_eq!(Request::decode(&long[..len]), Err(WireError::Length(len)));
            assert_eq!(Reply::decode(&long[..len]), Err(WireError::Length(len)));
            assert_eq!(Request::received(&long[..len], false, 0), Err(WireError::Length(len)));
            assert_eq!(
                Reply::received(&long[..len], false, Vec::new()).err(),
                Some(WireError::Length(len))
            );
        }
        let full = Request { id: 1, index: 0 }.encode();
        assert_eq!(Request::received(&full, true, 0), Err(WireError::Truncated));
        let full = Reply { id: 1, errno: 5 }.encode();
        assert_eq!(
            Reply::received(&full, true, Vec::new()).err(),
            Some(WireError::Truncated)
        );
    }

    #[test]
    fn a_request_carries_no_descriptor() {
        let bytes = Request { id: 3, index: 1 }.encode();
        assert_eq!(Request::received(&bytes, false, 0), Ok(Request { id: 3, index: 1 }));
        assert_eq!(Request::received(&bytes, false, 1), Err(WireError::Descriptors(1)));
    }

    /// A descriptor whose closing shows: the kept end of a stream pair
    /// reads end-of-file once every copy of the other end is closed.
    fn watched() -> (OwnedFd, UnixStream) {
        let (sent, kept) = UnixStream::pair().unwrap();
        (sent.into(), kept)
    }

    fn closed(kept: &mut UnixStream) -> bool {
        kept.set_nonblocking(true).unwrap();
        matches!(kept.read(&mut [0; 1]), Ok(0))
    }

    #[test]
    fn a_reply_carries_one_descriptor_on_success_and_none_on_failure() {
        let ok = Reply { id: 9, errno: 0 }.encode();
        let failed = Reply { id: 9, errno: 111 }.encode();

        let (fd, mut kept) = watched();
        let (id, answer) = Reply::received(&ok, false, vec![fd]).unwrap();
        assert_eq!(id, 9);
        let fd = answer.unwrap();
        assert!(!closed(&mut kept), "the descriptor handed out is open");
        drop(fd);

        let (id, answer) = Reply::received(&failed, false, Vec::new()).unwrap();
        assert_eq!(id, 9);
        assert_eq!(answer.unwrap_err().raw_os_error(), Some(111));

        // Wrong counts: every descriptor closed, none handed out.
        assert_eq!(
            Reply::received(&ok, false, Vec::new()).err(),
            Some(WireError::Descriptors(0))
        );
        let (a, mut kept_a) = watched();
        let (b, mut kept_b) = watched();
        assert_eq!(
            Reply::received(&ok, false, vec![a, b]).err(),
            Some(WireError::Descriptors(2))
        );
        assert!(closed(&mut kept_a) && closed(&mut kept_b));
        let (a, mut kept_a) = watched();
        assert_eq!(
            Reply::received(&failed, false, vec![a]).err(),
            Some(WireError::Descriptors(1))
        );
        assert!(closed(&mut kept_a));
        let (a, mut kept_a) = watched();
        assert_eq!(Reply::received(&ok, true, vec![a]).err(), Some(WireError::Truncated));
        assert!(closed(&mut kept_a));
    }

    #[test]
    fn a_reply_errno_must_be_one_a_system_call_returns() {
        for errno in [-1, i32::MIN, 4096, i32::MAX] {
            let bytes = Reply { id: 1, errno }.encode();
            assert_eq!(
                Reply::received(&bytes, false, Vec::new()).err(),
                Some(WireError::Errno(errno))
            );
        }
        let bytes = Reply { id: 1, errno: 4095 }.encode();
        assert!(Reply::received(&bytes, false, Vec::new()).is_ok());
    }

    #[test]
    fn a_protocol_error_is_invalid_data() {
        let e = io::Error::from(WireError::Descriptors(2));
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("2 descriptors"), "{e}");
    }
}
