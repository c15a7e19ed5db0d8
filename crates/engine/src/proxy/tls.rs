//! `https://` upstreams: a rustls client connection over the pool's
//! non-blocking TCP socket. Its handshake is driven by the same readiness
//! events as the rest of the exchange (the pool stays in `Connecting`
//! until it is done, so the connect timeout covers it and a failed
//! verification is a connect failure: 502); afterwards reads and writes
//! go through rustls, every call first flushing what rustls has to send.

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// How an upstream's TLS is set up: its client configuration (shared by
/// every connection, so sessions resume) and the name it is verified as
/// (and sent as SNI unless it is an IP address).
#[derive(Clone)]
pub(crate) struct UpstreamTls {
    pub(crate) config: Arc<ClientConfig>,
    pub(crate) name: ServerName<'static>,
    /// Verification is off (`insecure-skip-verify`).
    pub(crate) insecure: bool,
    /// A CA file in place of the system's roots.
    pub(crate) ca_file: Option<std::path::PathBuf>,
    /// ALPN offers `h2` alone (an `h2s://` upstream, `h2up`), not
    /// `http/1.1`.
    pub(crate) h2: bool,
}

impl std::fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamTls")
            .field("name", &self.name)
            .field("insecure", &self.insecure)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// The same provider and groups as the listeners' (X25519MLKEM768 first).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(crate::tls::provider())
}

/// The system's trusted roots, loaded once (at start, before the sandbox
/// hides the files they come from). Certificates it cannot parse are
/// skipped; finding none is logged, and every upstream verified against
/// them then fails its handshake (a `proxy-ca` replaces them).
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut store = RootCertStore::empty();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found.errors.first().map_or("none found".to_owned(), |e| e.to_string());
                log::warn!("proxy: no system root certificates for https:// upstreams ({why}); set a proxy CA");
            }
            Arc::new(store)
        })
        .clone()
}

impl UpstreamTls {
    /// Verified against the system's roots, as `host`.
    pub(crate) fn new(host: &str) -> Result<UpstreamTls, String> {
        let name = server_name(host)?;
        let config = client_config(system_roots(), false)?;
        Ok(UpstreamTls {
            config,
            name,
            insecure: false,
            ca_file: None,
            h2: false,
        })
    }

    /// As `new`, offering `h2` by ALPN instead of `http/1.1` (RFC 9113
    /// §3.2): for an HTTP/2 upstream over TLS.
    pub(crate) fn new_h2(host: &str) -> Result<UpstreamTls, String> {
        let name = server_name(host)?;
        let config = client_config(system_roots(), true)?;
        Ok(UpstreamTls {
            config,
            name,
            insecure: false,
            ca_file: None,
            h2: true,
        })
    }

    /// Verified against the CA certificates of a PEM file (read now).
    pub(crate) fn with_ca_file(&self, path: &Path) -> Result<UpstreamTls, String> {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("proxy CA {}: {e}", path.display()))?;
        let mut store = RootCertStore::empty();
        let (added, _) = store.add_parsable_certificates(certs.iter().cloned());
        if added == 0 {
            return Err(format!("proxy CA {}: no certificate in it", path.display()));
        }
        Ok(UpstreamTls {
            config: pinning_config(Arc::new(store), certs, self.h2)?,
            name: self.name.clone(),
            insecure: self.insecure,
            ca_file: Some(path.to_owned()),
            h2: self.h2,
        })
    }

    /// Any certificate accepted (its signature over the handshake still
    /// checked, so the session is at least with the holder of its key).
    pub(crate) fn skip_verify(&self) -> Result<UpstreamTls, String> {
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider())))
            .with_no_client_auth();
        config.alpn_protocols = vec![alpn(self.h2)];
        Ok(UpstreamTls {
            config: Arc::new(config),
            name: self.name.clone(),
            insecure: true,
            ca_file: self.ca_file.clone(),
            h2: self.h2,
        })
    }

    pub(crate) fn connection(&self) -> io::Result<ClientConnection> {
        ClientConnection::new(self.config.clone(), self.name.clone()).map_err(io::Error::other)
    }
}

fn client_config(roots: Arc<RootCertStore>, h2: bool) -> Result<Arc<ClientConfig>, String> {
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn(h2)];
    Ok(Arc::new(config))
}

/// `client_config` for a CA file (`proxy-ca`): verified against its
/// certificates, and an upstream whose certificate is one of them itself
/// accepted too (`Pinned`).
fn pinning_config(
    roots: Arc<RootCertStore>,
    pinned: Vec<CertificateDer<'static>>,
    h2: bool,
) -> Result<Arc<ClientConfig>, String> {
    let provider = provider();
    let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| e.to_string())?;
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned { inner, pinned }))
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn(h2)];
    Ok(Arc::new(config))
}

/// The verifier of a `proxy-ca` file: its certificates as roots (webpki's
/// chain check, names, lifetimes, usages), and beside that an upstream
/// whose own certificate is in the file, byte for byte, as the one
/// certificate a self-signed backend has. `openssl req -x509` makes such a
/// certificate with `CA:TRUE`, which webpki refuses as a server's
/// (`CaUsedAsEndEntity`) where nginx's `proxy_ssl_trusted_certificate`
/// and Go's verifier (Caddy) accept it: accepted here when it holds the
/// upstream's name and is within its lifetime. The handshake's signature
/// is checked by its key either way.
#[derive(Debug)]
struct Pinned {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    pinned: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let refusal = match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Ok(verified) => return Ok(verified),
            Err(e) => e,
        };
        if !self.pinned.iter().any(|p| p.as_ref() == end_entity.as_ref()) {
            return Err(refusal);
        }
        pinned_holds(end_entity, server_name, now).map_err(|why| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(Arc::new(
                io::Error::other(why),
            ))))
        })?;
        Ok(ServerCertVerified::assertion())
    }

    // The handshake's signatures: webpki's, by the certificate's key.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Whether a pinned certificate holds `name` (webpki's name check: DNS
/// and IP subject alternative names) and `now` is within its lifetime.
fn pinned_holds(cert: &CertificateDer<'_>, name: &ServerName<'_>, now: UnixTime) -> Result<(), String> {
    let ee = webpki::EndEntityCert::try_from(cert).map_err(|e| format!("pinned certificate: {e}"))?;
    ee.verify_is_valid_for_subject_name(name)
        .map_err(|e| format!("pinned certificate: {e}"))?;
    let (_, parsed) =
        x509_parser::parse_x509_certificate(cert.as_ref()).map_err(|e| format!("pinned certificate: {e}"))?;
    let now = now.as_secs() as i64;
    let validity = parsed.validity();
    if now < validity.not_before.timestamp() || now > validity.not_after.timestamp() {
        return Err("pinned certificate: expired or not yet valid".to_owned());
    }
    Ok(())
}

/// The one protocol offered by ALPN: `h2` or `http/1.1`.
fn alpn(h2: bool) -> Vec<u8> {
    match h2 {
        true => b"h2".to_vec(),
        false => b"http/1.1".to_vec(),
    }
}

/// The name an upstream's certificate must hold: a DNS name (sent as SNI),
/// or an IP address (an IP SAN; rustls sends no SNI for it).
fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned()).map_err(|e| format!("{host}: not a name TLS can verify ({e})"))
}

#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A TLS connection to an upstream over a non-blocking TCP socket.
pub(crate) struct TlsStream {
    pub(crate) tcp: mio::net::TcpStream,
    pub(crate) tls: ClientConnection,
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}"))
}

impl TlsStream {
    /// Writes what rustls has to send while the socket takes it.
    fn flush_tls(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.tcp) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads TLS records while the socket has some: `Ok(false)` at the
    /// socket's end. Each is processed (a bad one is an error, its alert
    /// sent).
    fn fill(&mut self) -> io::Result<bool> {
        loop {
            match self.tls.read_tls(&mut self.tcp) {
                Ok(0) => return Ok(false),
                Ok(_) => {
                    if let Err(e) = self.tls.process_new_packets() {
                        let _ = self.flush_tls();
                        return Err(tls_error(e));
                    }
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Drives the handshake: `Ok(true)` once it is done, `Ok(false)` while
    /// it waits for the socket.
    /// The protocol the upstream agreed to by ALPN, once the handshake
    /// is done.
    pub(crate) fn alpn(&self) -> Option<&[u8]> {
        self.tls.alpn_protocol()
    }

    pub(crate) fn handshake(&mut self) -> io::Result<bool> {
        loop {
            self.flush_tls()?;
            if !self.tls.is_handshaking() {
                // What is left to send (the Finished) goes with the
                // request's first write.
                return Ok(true);
            }
            if self.tls.wants_write() {
                return Ok(false);
            }
            match self.fill() {
                Ok(true) => {}
                Ok(false) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "TLS: the upstream closed during the handshake",
                    ))
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.flush_tls()?;
        loop {
            match self.tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The socket ended without close_notify: an end all the
                // same (the body's framing says whether it came whole).
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            if !self.fill()? {
                // Whatever was processed is read next turn; then the end.
                match self.tls.reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                    Err(e) => return Err(e),
                }
            }
            // Answers to what was read (a key update) go out.
            self.flush_tls()?;
        }
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.flush_tls()?;
        if self.tls.wants_write() {
            // The socket is full: rustls holds enough already.
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self.tls.writer().write(buf)?;
        if n > 0 {
            // The bytes are taken: a failure to send them is the next
            // call's (a retry must not take them for unsent).
            let _ = self.flush_tls();
            return Ok(n);
        }
        if buf.is_empty() {
            return Ok(0);
        }
        // rustls' buffer is full (its limit): wait for the socket.
        Err(io::ErrorKind::WouldBlock.into())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.flush_tls()
    }
}
