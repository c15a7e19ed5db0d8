//! Connecting out from a sandboxed server: the channel between the serving
//! process and the small unsandboxed parent that connects for it
//! (ARCHITECTURE.md, "Process model").
//!
//! The serving process never connects to an address of its own choosing:
//! it asks the parent's [`Broker`], over a Unix socket pair, for a
//! connection to the upstream at an *index* of the list of [`Target`]s the
//! broker was made with; the broker checks the index, connects, and passes
//! the connected descriptor back (SCM_RIGHTS). A compromised worker can
//! then reach only what the configuration names, which no seccomp filter
//! could promise (`connect`'s address is behind a pointer) and Landlock's
//! network rules (TCP ports only) cannot either.
//!
//! # The protocol
//!
//! An `AF_UNIX`, `SOCK_SEQPACKET` pair ([`pair`]): every record is one
//! message, so there is no framing to get wrong, and the peer's close reads
//! as 0 bytes. Records are fixed-size and little-endian:
//!
//! - a request, worker to broker, 12 bytes: `id: u64`, `index: u32`, and
//!   no descriptor;
//! - a reply, broker to worker, 12 bytes: the request's `id: u64` and
//!   `errno: i32`; when `errno` is 0 the message carries exactly one
//!   descriptor (SCM_RIGHTS), the connected socket (non-blocking,
//!   close-on-exec, TCP_NODELAY for TCP), otherwise none. An index out of
//!   range is answered EINVAL; a failed connect with its errno (ETIMEDOUT
//!   past the broker's connect timeout, EHOSTUNREACH for a name that does
//!   not resolve).
//!
//! Any other message (short or long, cut by the kernel: MSG_TRUNC,
//! MSG_CTRUNC; a descriptor where none belongs, none or several where one
//! does) is a protocol error: every descriptor it carried is closed, and
//! the side that read it gives up on the channel (an `InvalidData` error).
//! Descriptors are received close-on-exec (MSG_CMSG_CLOEXEC), so none
//! leaks into a program either process runs.
//!
//! The broker answers one request at a time, in order; the worker matches
//! replies to requests by `id` and need not wait for one before asking
//! again.
//!
//! # Where it runs
//!
//! [`Broker::serve`] blocks and belongs in the parent process. The
//! [`Requester`] is non-blocking and belongs on a worker's event loop: it
//! is a descriptor (`AsFd`, `AsRawFd`) to register for readability, then
//! [`Requester::poll_reply`] until it answers `None`. Nothing in the
//! engine uses either yet: the reverse proxy will.

mod broker;
mod requester;
mod wire;

use std::fmt;
use std::path::PathBuf;

pub use broker::Broker;
pub use requester::{pair, Requester};

/// What an upstream index names: where the broker connects.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Target {
    /// A TCP server. `host` is a name or an IP address (IPv6 without
    /// brackets); the broker resolves it at each connect, so a DNS change
    /// is followed, and tries the addresses in the order the resolver
    /// gives them, each within an even share of the time left.
    Tcp {
        /// A DNS name or an IP literal.
        host: String,
        /// The TCP port.
        port: u16,
    },
    /// A Unix-domain stream socket, by path (relative paths are the
    /// broker's working directory's).
    Unix(PathBuf),
}

/// `host:port` (`[v6]:port`), or `unix:PATH`, as log lines show it.
impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Target::Tcp { host, port } => write!(f, "{host}:{port}"),
            Target::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}
