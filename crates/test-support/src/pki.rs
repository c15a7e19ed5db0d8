//! Throwaway certificates for TLS tests (rcgen): a CA of its own per test,
//! leaf certificates it signs written as PEM files, and a rustls client
//! that trusts that CA.

use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::Scratch;

/// A TLS client stream over TCP.
pub type Tls = StreamOwned<ClientConnection, TcpStream>;

/// A CA, and the leaf certificates it signs, in a scratch directory
/// removed when dropped.
pub struct Pki {
    dir: Scratch,
    ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl Pki {
    /// A new CA named after `tag`, its files in `peregrine-pki-TAG-PID`.
    pub fn new(tag: &str) -> Pki {
        let dir = Scratch::new(&format!("peregrine-pki-{tag}"));
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        // A name of its own: with the leaves' default one, OpenSSL would
        // take each leaf for self-signed.
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("peregrine test CA {tag}"));
        let ca = rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap()).unwrap();
        Pki { dir, ca }
    }

    /// The directory its files are in.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.dir()
    }

    /// The CA's certificate as PEM (for a client outside the test: curl's
    /// `--cacert`).
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// Issues a certificate for `names` (DNS names, or IP addresses as
    /// text), written to `STEM.pem` and `STEM.key`; returns the two paths
    /// and the certificate's DER.
    pub fn issue(&self, stem: &str, names: &[&str]) -> (PathBuf, PathBuf, CertificateDer<'static>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = rcgen::CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &self.ca)
            .unwrap();
        let cert_path = self.dir.write(&format!("{stem}.pem"), cert.pem());
        let key_path = self.dir.write(&format!("{stem}.key"), key.serialize_pem());
        (cert_path, key_path, cert.der().clone())
    }

    /// A client configuration trusting this CA, for `versions`, with
    /// rustls' defaults otherwise (no ALPN, resumption on); callers adjust
    /// it before wrapping it in an `Arc`.
    pub fn client_config(&self, versions: &[&'static rustls::SupportedProtocolVersion]) -> ClientConfig {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth()
    }

    /// TLS 1.2 and 1.3, without session resumption (a resumed session
    /// shows no certificate, and holds state a memory count would see).
    pub fn client(&self) -> Arc<ClientConfig> {
        let mut config = self.client_config(rustls::DEFAULT_VERSIONS);
        config.resumption = rustls::client::Resumption::disabled();
        Arc::new(config)
    }
}

/// Connects to `addr`, and finishes the handshake for `name` (so that a
/// test can look at what was negotiated); reads time out after
/// `PATIENCE`.
pub fn connect(addr: impl std::net::ToSocketAddrs, config: &Arc<ClientConfig>, name: &str) -> Tls {
    handshake(addr, config, name).expect("handshake")
}

/// As `connect`, returning why the handshake failed if it did.
pub fn handshake(
    addr: impl std::net::ToSocketAddrs,
    config: &Arc<ClientConfig>,
    name: &str,
) -> Result<Tls, rustls::Error> {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(crate::PATIENCE)).unwrap();
    tcp.set_nodelay(true).unwrap();
    let conn = ClientConnection::new(config.clone(), ServerName::try_from(name.to_owned()).unwrap()).unwrap();
    let mut stream = StreamOwned::new(conn, tcp);
    while stream.conn.is_handshaking() {
        if let Err(e) = stream.conn.complete_io(&mut stream.sock) {
            return Err(e
                .into_inner()
                .and_then(|e| e.downcast::<rustls::Error>().ok())
                .map_or_else(|| rustls::Error::General("an I/O error".into()), |e| *e));
        }
    }
    Ok(stream)
}

/// A self-signed certificate and its key, as PEM files in a scratch
/// directory removed when dropped: for clients told not to check it
/// (h2spec `-k`, curl `-k`, Chromium's `--ignore-certificate-errors`).
pub struct SelfSigned {
    _dir: Scratch,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl SelfSigned {
    /// A certificate for `names` (DNS names, or IP addresses as text), in
    /// `peregrine-cert-TAG-PID`.
    pub fn new(tag: &str, names: &[&str]) -> SelfSigned {
        let dir = Scratch::new(&format!("peregrine-cert-{tag}"));
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = rcgen::CertificateParams::new(names).unwrap().self_signed(&key).unwrap();
        SelfSigned {
            cert: dir.write("cert.pem", cert.pem()),
            key: dir.write("key.pem", key.serialize_pem()),
            _dir: dir,
        }
    }
}
