//! The library's one error type.

use std::fmt;
use std::io;
use std::net::SocketAddr;

/// Why a server could not start or stopped with an error.
#[derive(Debug)]
pub struct Error {
    kind: Kind,
    source: io::Error,
}

#[derive(Debug)]
enum Kind {
    /// A TCP listener's address.
    Bind(SocketAddr),
    /// A Unix-domain listener's path.
    BindUnix(std::path::PathBuf),
    /// HTTP/3's UDP sockets on a TLS listener's address.
    BindUdp(SocketAddr),
    Resolve(String),
    Setup,
    Tls,
    Worker,
}

impl Error {
    pub(crate) fn bind(addr: SocketAddr, source: io::Error) -> Self {
        Error {
            kind: Kind::Bind(addr),
            source,
        }
    }

    pub(crate) fn bind_udp(addr: SocketAddr, source: io::Error) -> Self {
        Error {
            kind: Kind::BindUdp(addr),
            source,
        }
    }

    pub(crate) fn bind_unix(path: &std::path::Path, source: io::Error) -> Self {
        Error {
            kind: Kind::BindUnix(path.to_path_buf()),
            source,
        }
    }

    pub(crate) fn resolve(addr: String, source: io::Error) -> Self {
        Error {
            kind: Kind::Resolve(addr),
            source,
        }
    }

    pub(crate) fn setup(source: io::Error) -> Self {
        Error {
            kind: Kind::Setup,
            source,
        }
    }

    pub(crate) fn tls(why: String) -> Self {
        Error {
            kind: Kind::Tls,
            source: io::Error::new(io::ErrorKind::InvalidData, why),
        }
    }

    pub(crate) fn worker(source: io::Error) -> Self {
        Error {
            kind: Kind::Worker,
            source,
        }
    }

    /// A listening address could not be bound (in use, no permission, ...).
    pub fn is_bind(&self) -> bool {
        matches!(self.kind, Kind::Bind(_) | Kind::BindUnix(_) | Kind::BindUdp(_))
    }

    /// The address that could not be bound is HTTP/3's, over UDP (a TLS
    /// listener's address, whose TCP side was free): without HTTP/3
    /// (`Server::http3(false)`) it would be served.
    pub fn is_http3_bind(&self) -> bool {
        matches!(self.kind, Kind::BindUdp(_))
    }

    /// The TCP address that could not be bound, if that is what failed
    /// (not HTTP/3's UDP sockets, not a Unix-domain socket).
    pub fn bind_addr(&self) -> Option<SocketAddr> {
        match self.kind {
            Kind::Bind(addr) => Some(addr),
            _ => None,
        }
    }

    /// An address given to `bind` could not be resolved.
    pub fn is_resolve(&self) -> bool {
        matches!(self.kind, Kind::Resolve(_))
    }

    /// A certificate or key could not be loaded, or TLS could not be set up.
    pub fn is_tls(&self) -> bool {
        matches!(self.kind, Kind::Tls)
    }

    /// A worker's event loop failed while running.
    pub fn is_worker(&self) -> bool {
        matches!(self.kind, Kind::Worker)
    }

    /// The underlying I/O error.
    pub fn io_error(&self) -> &io::Error {
        &self.source
    }
}

/// What went wrong, without the cause: as std's errors do, the cause is
/// `source()`, and printing both made every report of a chain (anyhow's
/// `{:#}`, a logger walking `source()`) say it twice. A TLS error is the
/// exception: its message is the whole story (the file and what was wrong
/// with it), carried in an `io::Error` only so that `io_error` has one.
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Bind(addr) => write!(f, "cannot listen on {addr}"),
            Kind::BindUnix(path) => write!(f, "cannot listen on unix:{}", path.display()),
            Kind::BindUdp(addr) => write!(f, "cannot listen on {addr} (UDP, for HTTP/3)"),
            Kind::Resolve(addr) => write!(f, "cannot resolve {addr}"),
            Kind::Setup => f.write_str("cannot start the server"),
            Kind::Tls => write!(f, "TLS: {}", self.source),
            Kind::Worker => f.write_str("a worker failed"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self.kind {
            Kind::Tls => None,
            _ => Some(&self.source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// Each cause once along the chain, as `anyhow`'s `{:#}` prints it.
    fn chain(e: &Error) -> String {
        let mut out = e.to_string();
        let mut next = e.source();
        while let Some(cause) = next {
            out += &format!(": {cause}");
            next = cause.source();
        }
        out
    }

    #[test]
    fn a_bind_error_prints_its_cause_once_along_the_chain() {
        let in_use = io::Error::from(io::ErrorKind::AddrInUse);
        let e = Error::bind("127.0.0.1:80".parse().unwrap(), in_use);
        assert_eq!(chain(&e), "cannot listen on 127.0.0.1:80: address in use");
        let in_use = io::Error::from(io::ErrorKind::AddrInUse);
        let e = Error::bind_udp("127.0.0.1:443".parse().unwrap(), in_use);
        assert_eq!(
            chain(&e),
            "cannot listen on 127.0.0.1:443 (UDP, for HTTP/3): address in use"
        );
        assert!(e.is_bind() && e.is_http3_bind());
        assert_eq!(e.bind_addr(), None);
        let e = Error::bind(
            "127.0.0.1:80".parse().unwrap(),
            io::Error::from(io::ErrorKind::AddrInUse),
        );
        assert_eq!(e.bind_addr(), Some("127.0.0.1:80".parse().unwrap()));
        let e = Error::bind_unix(
            std::path::Path::new("/run/p.sock"),
            io::Error::from(io::ErrorKind::AddrInUse),
        );
        assert_eq!(chain(&e), "cannot listen on unix:/run/p.sock: address in use");
        assert!(e.is_bind() && e.bind_addr().is_none());
    }

    #[test]
    fn a_tls_error_is_its_message_with_no_cause_repeating_it() {
        let e = Error::tls("cert.pem: no CERTIFICATE in the file".into());
        assert_eq!(chain(&e), "TLS: cert.pem: no CERTIFICATE in the file");
    }
}
