//! TLS for listeners: certificates and keys from PEM files, one chosen per
//! handshake by the name the client asks for (SNI), reloadable while
//! serving. rustls with the `aws-lc-rs` provider, the hybrid
//! post-quantum group X25519MLKEM768 preferred ([`provider`]); TLS 1.2
//! and 1.3; ALPN `h2`, `http/1.1` and `http/1.0`; and for QUIC (HTTP/3) TLS 1.3 with
//! ALPN `h3`.
//!
//! A [`TlsConfig`] is a list of (certificate chain, key) file pairs. The
//! first pair is the default; a client whose SNI name is covered by a later
//! certificate's names (its subjectAltName DNS entries, wildcards included,
//! checked as a client would check them) gets that certificate. Reloading
//! reads every pair again and replaces the whole set only if all of them
//! load: new handshakes use the new set, established connections keep the
//! keys they negotiated.
//!
//! The set is indexed by name when it is built (`store.rs`): a handshake's
//! choice is a hash lookup under a mutex taken once per handshake (to clone
//! an `Arc`), never per request: workers still share nothing on the
//! request path. Certificates can be added while serving, and a
//! TLS-ALPN-01 challenge certificate set for a name (RFC 8737: the
//! resolver sees the client's ALPN).

pub mod ktls;
pub(crate) mod redirect;
pub(crate) mod session;
pub(crate) mod store;
pub(crate) mod ticket;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::error::Error;
use crate::host::HostBuf;
use store::CertStore;
pub use ticket::TicketKeys;

/// Certificates for TLS listeners. Cheap to clone; clones share the loaded
/// certificates, so [`TlsConfig::reload`] on any clone changes them for all.
///
/// ```no_run
/// use peregrine::{Response, Request, Server, TlsConfig};
/// let tls = TlsConfig::from_pem_files("cert.pem", "key.pem")?
///     .with_cert("other-site.pem", "other-site.key")?;
/// Server::new()
///     .bind_tls("0.0.0.0:443", tls)
///     .redirect_http("0.0.0.0:80")
///     .serve(|_: &Request<'_>| Response::text("Hello over TLS"))?;
/// # Ok::<(), peregrine::Error>(())
/// ```
#[derive(Clone)]
pub struct TlsConfig {
    resolver: Arc<CertResolver>,
    hsts: Option<Duration>,
    /// Certificates come from ACME here too: listeners offer
    /// `acme-tls/1`, and the redirect listener answers HTTP-01.
    acme: bool,
    /// Session tickets: one key set for the process by default
    /// (`TicketKeys::process`), whatever listener or worker.
    tickets: Arc<TicketKeys>,
    /// File bodies of `ktls::BODY_BYTES_MIN` and more over TLS 1.3 may
    /// go through kernel TLS and sendfile (`ktls.rs`), where the kernel
    /// has it. On unless turned off (`kernel_tls(KernelTls::Off)`).
    ktls: ktls::KernelTls,
}

/// One certificate chain and its key, as files, and the names it is for
/// (`None`: those it covers).
#[derive(Clone, Debug)]
struct Source {
    cert: PathBuf,
    key: PathBuf,
    names: Option<Vec<String>>,
    /// The chain and key as PEM, given rather than read (an ACME
    /// certificate, sent by the ACME process): `cert` and `key` only name
    /// them, and a reload keeps them as they are.
    pem: Option<Arc<(Vec<u8>, Vec<u8>)>>,
}

/// Picks a certificate per handshake; holds the file names to reload from.
struct CertResolver {
    provider: Arc<CryptoProvider>,
    sources: Mutex<Vec<Source>>,
    current: Mutex<Arc<CertStore>>,
}

impl std::fmt::Debug for CertResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertResolver")
            .field("sources", &*lock(&self.sources))
            .finish_non_exhaustive()
    }
}

impl CertResolver {
    /// Changes the store: a copy with `change` applied replaces it, so a
    /// handshake under way keeps the one it took.
    fn update(&self, change: impl FnOnce(&mut CertStore)) {
        let mut current = lock(&self.current);
        let mut store = CertStore::clone(&current);
        change(&mut store);
        *current = Arc::new(store);
    }
}

impl TlsConfig {
    /// Loads a certificate chain (PEM, leaf first) and its private key
    /// (PEM: PKCS#8, PKCS#1 or SEC1). This is the default certificate.
    pub fn from_pem_files(cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<Self, Error> {
        TlsConfig::from_source(Source {
            cert: cert.as_ref().to_owned(),
            key: key.as_ref().to_owned(),
            names: None,
            pem: None,
        })
    }

    fn from_source(source: Source) -> Result<Self, Error> {
        let provider = Arc::new(provider());
        let loaded = load(&provider, &source)?;
        let mut store = CertStore::default();
        store.add(Arc::new(loaded), source.names.as_deref());
        Ok(TlsConfig {
            resolver: Arc::new(CertResolver {
                provider,
                sources: Mutex::new(vec![source]),
                current: Mutex::new(Arc::new(store)),
            }),
            hsts: None,
            acme: false,
            tickets: TicketKeys::process(),
            ktls: ktls::KernelTls::Auto,
        })
    }

    /// A set with no certificate yet (every site's comes from ACME):
    /// until one is added, every handshake fails with `unrecognized_name`.
    pub fn empty() -> Self {
        let mut store = CertStore::default();
        store.fallback = store::Fallback::Refuse;
        TlsConfig {
            resolver: Arc::new(CertResolver {
                provider: Arc::new(provider()),
                sources: Mutex::new(Vec::new()),
                current: Mutex::new(Arc::new(store)),
            }),
            hsts: None,
            acme: false,
            tickets: TicketKeys::process(),
            ktls: ktls::KernelTls::Auto,
        }
    }

    /// Some certificates of this set come from ACME: TLS listeners offer
    /// the ALPN protocol `acme-tls/1` (after `h2` and `http/1.1`, so that
    /// only a client offering it alone gets it: RFC 8737 §3), and the
    /// listeners redirecting to HTTPS answer HTTP-01 challenges
    /// ([`TlsConfig::set_http01`]) and 503 for a name still waiting for
    /// its certificate ([`TlsConfig::set_waiting`]).
    pub fn acme(mut self) -> Self {
        self.acme = true;
        self
    }

    /// Adds the certificate (PEM chain, leaf first, and key) for `names`
    /// only, or replaces the one given before for exactly these names
    /// (a renewal); new handshakes get it at once. The names stop
    /// waiting. A reload keeps it.
    pub fn set_cert_pem_for<N: AsRef<str>>(&self, names: &[N], chain: &[u8], key: &[u8]) -> Result<(), Error> {
        let names = check_names(names)?;
        let what = names[0].clone();
        let loaded = Arc::new(certified_key(
            &self.resolver.provider,
            CertificateDer::pem_slice_iter(chain).collect::<Result<Vec<_>, _>>(),
            PrivateKeyDer::from_pem_slice(key),
            &what,
        )?);
        let source = Source {
            cert: PathBuf::from(format!("(ACME certificate for {what})")),
            key: PathBuf::from(format!("(ACME key for {what})")),
            names: Some(names.clone()),
            pem: Some(Arc::new((chain.to_vec(), key.to_vec()))),
        };
        let mut sources = lock(&self.resolver.sources);
        let same = sources
            .iter()
            .position(|s| s.pem.is_some() && s.names.as_ref() == Some(&names));
        let normal = normal_names(&names);
        match same {
            None => {
                sources.push(source);
                self.resolver.update(|store| {
                    store.add(loaded, Some(&names));
                    for n in &normal {
                        store.waiting.remove(n);
                    }
                });
            }
            Some(idx) => {
                sources[idx] = source;
                self.resolver.update(|store| {
                    let keys = (sources.iter().enumerate())
                        .filter_map(|(i, s)| {
                            let key = if i == idx { Some(loaded.clone()) } else { store.key(i) };
                            key.map(|k| (k, s.names.clone()))
                        })
                        .collect();
                    store.replace_keys(keys);
                    for n in &normal {
                        store.waiting.remove(n);
                    }
                });
            }
        }
        Ok(())
    }

    /// Marks `names` as waiting for their first ACME certificate (or no
    /// longer): a handshake for one fails with an alert, whatever the
    /// fallback; the redirect listener answers 503 with `Retry-After`.
    pub fn set_waiting<N: AsRef<str>>(&self, names: &[N], waiting: bool) {
        let normal = normal_names(names);
        self.resolver.update(|store| {
            for n in normal {
                if waiting {
                    store.waiting.insert(n);
                } else {
                    store.waiting.remove(&n);
                }
            }
        });
    }

    /// The names marked waiting ([`TlsConfig::set_waiting`]) that still
    /// have no certificate, in their normal form: a readiness check's
    /// question, never asked on the request path.
    pub fn waiting_names(&self) -> Vec<String> {
        let store = lock(&self.resolver.current).clone();
        let mut names: Vec<String> = (store.waiting.iter())
            .filter(|n| store.is_waiting(n))
            .map(|n| n.to_string())
            .collect();
        names.sort();
        names
    }

    /// Answers the HTTP-01 challenge `token` (RFC 8555 §8.3) with
    /// `key_authorization` on the listeners redirecting to HTTPS, or stops
    /// (`None`). A token that is not `[A-Za-z0-9_-]{22,128}` is refused.
    pub fn set_http01(&self, token: &str, key_authorization: Option<&str>) -> Result<(), Error> {
        if !redirect::is_token(token) {
            return Err(Error::tls(format!("{token:?}: not an ACME token")));
        }
        self.resolver.update(|store| match key_authorization {
            Some(ka) => {
                store.http01.insert(token.into(), ka.into());
            }
            None => {
                store.http01.remove(token);
            }
        });
        Ok(())
    }

    /// The store now (for the redirect listener's answers).
    pub(crate) fn store(&self) -> Arc<CertStore> {
        lock(&self.resolver.current).clone()
    }

    /// Whether certificates of this set come from ACME.
    pub(crate) fn is_acme(&self) -> bool {
        self.acme
    }

    /// Adds another certificate, sent to clients whose SNI name it covers
    /// (and that an earlier certificate does not).
    pub fn with_cert(self, cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<Self, Error> {
        self.add_cert(cert, key)?;
        Ok(self)
    }

    /// As [`TlsConfig::with_cert`], while serving: new handshakes may get
    /// it at once (every listener and clone shares the set), and a reload
    /// reads its files again. Returns how many certificates there are.
    pub fn add_cert(&self, cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<usize, Error> {
        self.add_source(Source {
            cert: cert.as_ref().to_owned(),
            key: key.as_ref().to_owned(),
            names: None,
            pem: None,
        })
    }

    /// A set of one certificate sent only to clients asking for one of
    /// `names` (a site's names: exact, or `*.example.com`), whatever names
    /// it covers: a site never presents another site's certificate. Other
    /// clients get what [`TlsConfig::unknown_names`] says.
    pub fn for_names<N: AsRef<str>>(names: &[N], cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<Self, Error> {
        TlsConfig::from_source(Source {
            cert: cert.as_ref().to_owned(),
            key: key.as_ref().to_owned(),
            names: Some(check_names(names)?),
            pem: None,
        })
    }

    /// Adds a certificate for `names` only, as [`TlsConfig::for_names`].
    pub fn with_cert_for<N: AsRef<str>>(
        self,
        names: &[N],
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<Self, Error> {
        self.add_source(Source {
            cert: cert.as_ref().to_owned(),
            key: key.as_ref().to_owned(),
            names: Some(check_names(names)?),
            pem: None,
        })?;
        Ok(self)
    }

    /// What a client gets whose SNI name no certificate is for, or that
    /// sent no SNI: the certificate chosen for `fallback` (the default
    /// site's first name), or with `None` no certificate: the handshake
    /// fails with an `unrecognized_name` alert (RFC 6066 §3). Without this
    /// call, the first certificate.
    pub fn unknown_names(self, fallback: Option<&str>) -> Result<Self, Error> {
        let fallback = match fallback {
            None => store::Fallback::Refuse,
            Some(name) => {
                let store = lock(&self.resolver.current).clone();
                let idx = store
                    .index_for(name)
                    .ok_or_else(|| Error::tls(format!("{name}: no certificate is for this name")))?;
                store::Fallback::Key(idx)
            }
        };
        self.resolver.update(|store| store.fallback = fallback);
        Ok(self)
    }

    fn add_source(&self, source: Source) -> Result<usize, Error> {
        let loaded = Arc::new(load(&self.resolver.provider, &source)?);
        let mut sources = lock(&self.resolver.sources);
        let names = source.names.clone();
        sources.push(source);
        self.resolver.update(|store| {
            store.add(loaded, names.as_deref());
        });
        Ok(sources.len())
    }

    /// Sets the TLS-ALPN-01 challenge certificate (RFC 8737) for `name`,
    /// from PEM (chain, key): a client asking for `name` that offers only
    /// the ALPN protocol `acme-tls/1` gets it, and no other client does.
    /// `None` removes it. (A listener that offers `acme-tls/1` and closes
    /// after such a handshake is the ACME client's part.) `name` is
    /// normalised as SNI is (`Example.COM.` is `example.com`); one that is
    /// no host name is an error.
    pub fn set_acme_challenge(&self, name: &str, pem: Option<(&[u8], &[u8])>) -> Result<(), Error> {
        let mut buf = HostBuf::new();
        let host = crate::host::normalize_name(name.as_bytes(), &mut buf)
            .map_err(|e| Error::tls(format!("{name}: {}", e.reason())))?;
        let key = match pem {
            Some((cert, key)) => Some(Arc::new(challenge_key(&self.resolver.provider, cert, key, name)?)),
            None => None,
        };
        self.resolver.update(|store| store.set_challenge(&host, key));
        Ok(())
    }

    /// Seals and opens session tickets with `keys` instead of the
    /// process's own (`TicketKeys::process`): a key file's, say, or one
    /// handed over by a binary upgrade. Listeners made after this call use
    /// them.
    pub fn ticket_keys(mut self, keys: Arc<TicketKeys>) -> Self {
        self.tickets = keys;
        self
    }

    /// Whether file bodies of 64 KiB and more may be handed to kernel TLS
    /// (`Auto`, the default: where the kernel has its `tls` module) or
    /// are always encrypted by rustls in user space (`Off`). Listeners
    /// made after this call use it.
    pub fn kernel_tls(mut self, mode: ktls::KernelTls) -> Self {
        self.ktls = mode;
        self
    }

    /// The ticket keys this set's listeners use.
    pub fn tickets(&self) -> &Arc<TicketKeys> {
        &self.tickets
    }

    /// Adds `Strict-Transport-Security: max-age=SECONDS` to every response
    /// sent over TLS (unless the handler set the field itself).
    pub fn hsts(mut self, max_age: Duration) -> Self {
        self.hsts = Some(max_age);
        self
    }

    /// Reads every certificate and key file again. If all load, new
    /// handshakes use them and the number of certificates is returned;
    /// otherwise the certificates loaded before stay in use and the error
    /// names the file that failed.
    pub fn reload(&self) -> Result<usize, Error> {
        let sources = lock(&self.resolver.sources).clone();
        let mut loaded = Vec::with_capacity(sources.len());
        for source in &sources {
            loaded.push((Arc::new(load(&self.resolver.provider, source)?), source.names.clone()));
        }
        self.resolver.update(|store| store.replace_keys(loaded));
        Ok(sources.len())
    }

    /// The rustls configuration listeners with this certificate set use;
    /// with `http2`, ALPN offers `h2` before `http/1.1` (then `http/1.0`).
    /// With `h3_port`, responses carry `Alt-Svc: h3=":PORT"`.
    pub(crate) fn listener(&self, http2: bool, h3_port: Option<u16>) -> Result<Arc<TlsListener>, Error> {
        let versions: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];
        let mut config = rustls::ServerConfig::builder_with_provider(self.resolver.provider.clone())
            .with_protocol_versions(versions)
            .map_err(|e| Error::tls(format!("TLS versions: {e}")))?
            .with_no_client_auth()
            .with_cert_resolver(self.resolver.clone());
        // `http/1.0` last: a client that offers only it is served by the
        // same HTTP/1.x codec (which answers a 1.0 request as 1.0), as
        // nginx does, rather than refused with alert 120.
        config.alpn_protocols = if http2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec(), b"http/1.0".to_vec()]
        } else {
            vec![b"http/1.1".to_vec(), b"http/1.0".to_vec()]
        };
        if self.acme {
            config.alpn_protocols.push(store::ACME_TLS_ALPN.to_vec());
        }
        // Stateless tickets under the process's keys (`ticket.rs`): any
        // worker resumes what another issued, TLS 1.3 and 1.2 alike. No
        // early data (rustls' default, said again): a replayed request
        // could repeat a side effect.
        config.ticketer = self.tickets.clone();
        config.max_early_data_size = 0;
        // The keys can be taken out for the kernel only where they will
        // be used (a connection never switches where this is false).
        let ktls = self.ktls == ktls::KernelTls::Auto && ktls::support().is_some();
        config.enable_secret_extraction = ktls;
        let mut fields = String::new();
        if let Some(age) = self.hsts {
            fields.push_str(&format!("Strict-Transport-Security: max-age={}\r\n", age.as_secs()));
        }
        if let Some(port) = h3_port {
            // RFC 9114 §3.1.1; a day's max-age, as Caddy and h2o send.
            fields.push_str(&format!("Alt-Svc: h3=\":{port}\"; ma=86400\r\n"));
        }
        let extra_fields = (!fields.is_empty()).then(|| fields.into_bytes().into_boxed_slice());
        Ok(Arc::new(TlsListener {
            config: Arc::new(config),
            extra_fields,
            ktls,
        }))
    }

    /// The rustls configuration for QUIC (HTTP/3): the same certificates
    /// and choice by SNI, TLS 1.3 only (RFC 9001 §4.2), ALPN `h3`, no
    /// 0-RTT (a replayed request could repeat a side effect).
    pub(crate) fn quic(&self) -> Result<quinn_proto::crypto::rustls::QuicServerConfig, Error> {
        quinn_proto::crypto::rustls::QuicServerConfig::try_from(self.quic_rustls()?)
            .map_err(|e| Error::tls(format!("QUIC TLS configuration: {e}")))
    }

    /// The rustls half of [`TlsConfig::quic`].
    fn quic_rustls(&self) -> Result<rustls::ServerConfig, Error> {
        let mut config = rustls::ServerConfig::builder_with_provider(self.resolver.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| Error::tls(format!("TLS versions: {e}")))?
            .with_no_client_auth()
            .with_cert_resolver(self.resolver.clone());
        config.alpn_protocols = vec![b"h3".to_vec()];
        config.ticketer = self.tickets.clone();
        config.max_early_data_size = 0;
        Ok(config)
    }
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("sources", &*lock(&self.resolver.sources))
            .field("hsts", &self.hsts)
            .field("acme", &self.acme)
            .field("tickets", &self.tickets)
            .finish()
    }
}

/// The crypto every TLS connection uses, server and client alike:
/// aws-lc-rs, with the key-exchange groups in this order of preference.
/// X25519MLKEM768 (ML-KEM-768 with X25519, draft-ietf-tls-ecdhe-mlkem) is
/// what Chrome and Firefox offer first, with a key share: preferring it
/// costs such a client no extra round trip, and a recording of the
/// session stays safe from a future quantum computer. A client that
/// offers only classical groups gets X25519, then the NIST curves. Named
/// here rather than left to the provider's default so that a feature
/// another crate turns on cannot change the order.
pub(crate) fn provider() -> CryptoProvider {
    use rustls::crypto::aws_lc_rs::kx_group;
    CryptoProvider {
        kx_groups: vec![
            kx_group::X25519MLKEM768,
            kx_group::X25519,
            kx_group::SECP256R1,
            kx_group::SECP384R1,
        ],
        ..rustls::crypto::aws_lc_rs::default_provider()
    }
}

/// What a worker needs to accept on one TLS listener.
pub(crate) struct TlsListener {
    pub(crate) config: Arc<rustls::ServerConfig>,
    /// Lines added to every response: `Strict-Transport-Security` if
    /// asked for, `Alt-Svc` when HTTP/3 is on (each `Name: value\r\n`).
    pub(crate) extra_fields: Option<Box<[u8]>>,
    /// Connections may hand their records to kernel TLS (`ktls.rs`):
    /// asked for, and the kernel has it.
    pub(crate) ktls: bool,
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let store = lock(&self.current).clone();
        store.resolve(hello.server_name(), hello.alpn().into_iter().flatten())
    }
}

/// Reads one chain and key and checks that they belong together.
fn load(provider: &CryptoProvider, source: &Source) -> Result<CertifiedKey, Error> {
    if let Some(pem) = &source.pem {
        return certified_key(
            provider,
            CertificateDer::pem_slice_iter(&pem.0).collect::<Result<Vec<_>, _>>(),
            PrivateKeyDer::from_pem_slice(&pem.1),
            &source.cert.display().to_string(),
        );
    }
    let cert_name = source.cert.display();
    let key_name = source.key.display();
    let chain = CertificateDer::pem_file_iter(&source.cert)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| Error::tls(pem_error(&source.cert, Pem::Certificate, e)))?;
    if chain.is_empty() {
        return Err(Error::tls(pem_error(
            &source.cert,
            Pem::Certificate,
            PemError::NoItemsFound,
        )));
    }
    webpki::EndEntityCert::try_from(&chain[0])
        .map_err(|e| Error::tls(format!("{cert_name}: not a usable certificate: {e}")))?;
    let key = PrivateKeyDer::from_pem_file(&source.key).map_err(|e| Error::tls(pem_error(&source.key, Pem::Key, e)))?;
    CertifiedKey::from_der(chain, key, provider).map_err(|e| {
        Error::tls(match e {
            rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => format!(
                "{key_name} is not the private key of the certificate in {cert_name}: give the key made with \
                 that certificate (the first certificate in the file must be the server's own, its chain after it)"
            ),
            e => format!("{cert_name} with {key_name}: {e}"),
        })
    })
}

use rustls::pki_types::pem::Error as PemError;

/// Which PEM file a [`pem_error`] is about.
#[derive(Clone, Copy)]
enum Pem {
    Certificate,
    Key,
}

/// A PEM file's error as a sentence that names the file and what to give
/// instead (rustls says `no items found`, which names neither).
fn pem_error(path: &Path, what: Pem, e: PemError) -> String {
    let path = path.display();
    let wanted = match what {
        Pem::Certificate => {
            "a PEM file of `-----BEGIN CERTIFICATE-----` blocks, the server's own certificate first, then its chain"
        }
        Pem::Key => {
            "the PEM file of the certificate's private key, a `-----BEGIN PRIVATE KEY-----` block \
             (or `RSA PRIVATE KEY`, `EC PRIVATE KEY`)"
        }
    };
    let found = match what {
        Pem::Certificate => "no certificate",
        Pem::Key => "no private key",
    };
    match e {
        PemError::Io(e) => format!("cannot read {path}: {e}"),
        PemError::NoItemsFound => format!("{path}: {found} in this file: give {wanted}"),
        e => format!("{path}: not readable as PEM ({e}): give {wanted}"),
    }
}

/// A chain and key given as PEM text (`what` names them in errors).
fn certified_key(
    provider: &CryptoProvider,
    chain: Result<Vec<CertificateDer<'static>>, rustls::pki_types::pem::Error>,
    key: Result<PrivateKeyDer<'static>, rustls::pki_types::pem::Error>,
    what: &str,
) -> Result<CertifiedKey, Error> {
    let chain = chain.map_err(|e| Error::tls(format!("{what}: certificate: {e}")))?;
    if chain.is_empty() {
        return Err(Error::tls(format!("{what}: no CERTIFICATE")));
    }
    let key = key.map_err(|e| Error::tls(format!("{what}: key: {e}")))?;
    CertifiedKey::from_der(chain, key, provider).map_err(|e| Error::tls(format!("{what}: {e}")))
}

/// A TLS-ALPN-01 challenge certificate and its key, without the check
/// that they match that `certified_key` makes: that check parses the
/// certificate with webpki, which refuses the critical acmeIdentifier
/// extension every such certificate carries (RFC 8737 §3). The client
/// (the CA) checks the extension itself.
fn challenge_key(provider: &CryptoProvider, cert: &[u8], key: &[u8], what: &str) -> Result<CertifiedKey, Error> {
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::tls(format!("{what}: certificate: {e}")))?;
    if chain.is_empty() {
        return Err(Error::tls(format!("{what}: no CERTIFICATE")));
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| Error::tls(format!("{what}: key: {e}")))?;
    let key = (provider.key_provider.load_private_key(key)).map_err(|e| Error::tls(format!("{what}: key: {e}")))?;
    Ok(CertifiedKey::new(chain, key))
}

/// Names a certificate is for, each a name or a one-label wildcard.
fn check_names<N: AsRef<str>>(names: &[N]) -> Result<Vec<String>, Error> {
    if names.is_empty() {
        return Err(Error::tls("a certificate for no name".into()));
    }
    let mut check = crate::host::HostMap::new();
    for name in names {
        let name = name.as_ref();
        // A name twice is no error here: the map is only the checker.
        match check.insert(name, ()) {
            Ok(()) | Err(crate::host::HostMapError::Duplicate(_)) => {}
            Err(e) => return Err(Error::tls(e.to_string())),
        }
    }
    Ok(names.iter().map(|n| n.as_ref().to_owned()).collect())
}

/// `names` in normal form (those that are names).
fn normal_names<N: AsRef<str>>(names: &[N]) -> Vec<Box<str>> {
    let mut buf = HostBuf::new();
    let mut normal = Vec::with_capacity(names.len());
    for n in names {
        if let Ok(n) = crate::host::normalize_name(n.as_ref().as_bytes(), &mut buf) {
            normal.push(n.as_str().into());
        }
    }
    normal
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::crypto::aws_lc_rs::kx_group::{X25519, X25519MLKEM768};
    use rustls::crypto::SupportedKxGroup;
    use rustls::quic::{self, Connection};
    use rustls::NamedGroup;

    /// The group a QUIC (HTTP/3) handshake with a client offering `groups`
    /// settles on, the handshake run in memory through rustls' QUIC API
    /// (what quinn-proto drives) with the server's own configuration.
    fn quic_group(groups: Vec<&'static dyn SupportedKxGroup>) -> Option<NamedGroup> {
        let cert = test_support::pki::SelfSigned::new("quic-kx", &["localhost"]);
        let tls = TlsConfig::from_pem_files(&cert.cert, &cert.key).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_file(&cert.cert).unwrap()).unwrap();
        let provider = CryptoProvider {
            kx_groups: groups,
            ..rustls::crypto::aws_lc_rs::default_provider()
        };
        let mut client = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"h3".to_vec()];
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let params = b"\x00".to_vec();
        let mut client = Connection::Client(
            quic::ClientConnection::new(Arc::new(client), quic::Version::V1, name, params.clone()).unwrap(),
        );
        let server = quic::ServerConnection::new(Arc::new(tls.quic_rustls().unwrap()), quic::Version::V1, params);
        let mut server = Connection::Server(server.unwrap());
        // Each encryption level's bytes go over on their own, as QUIC's
        // packets would carry them.
        fn pass(from: &mut Connection, to: &mut Connection) {
            loop {
                let mut buf = Vec::new();
                let key_change = from.write_hs(&mut buf);
                if !buf.is_empty() {
                    to.read_hs(&buf).unwrap();
                }
                if key_change.is_none() {
                    break;
                }
            }
        }
        for _ in 0..8 {
            pass(&mut client, &mut server);
            pass(&mut server, &mut client);
        }
        assert!(
            !client.is_handshaking() && !server.is_handshaking(),
            "the handshake finished"
        );
        client.negotiated_key_exchange_group().map(|g| g.name())
    }

    #[test]
    fn quic_prefers_x25519mlkem768_and_serves_x25519_clients() {
        assert_eq!(
            quic_group(vec![X25519MLKEM768, X25519]),
            Some(NamedGroup::X25519MLKEM768)
        );
        assert_eq!(quic_group(vec![X25519]), Some(NamedGroup::X25519));
    }
}
