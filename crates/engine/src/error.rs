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
    Bind(SocketAddr),
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
        matches!(self.kind, Kind::Bind(_))
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

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Bind(addr) => write!(f, "cannot listen on {addr}: {}", self.source),
            Kind::Resolve(addr) => write!(f, "cannot resolve {addr:?}: {}", self.source),
            Kind::Setup => write!(f, "cannot start the server: {}", self.source),
            Kind::Tls => write!(f, "TLS: {}", self.source),
            Kind::Worker => write!(f, "a worker failed: {}", self.source),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}
