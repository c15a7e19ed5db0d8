//! The certificates by the names they cover, indexed when a certificate is
//! added (rustls' `ResolvesServerCertUsingSni`, with wildcards): a
//! handshake's choice is one or two hash lookups, never a certificate
//! parsed. A store is built whole (at start, at a reload, when a
//! certificate is added at run time) and swapped in behind an `Arc`.
//!
//! The names are a certificate's subjectAltName DNS entries, as a client
//! checks them (RFC 6125, as webpki does): a wildcard only as the whole
//! leftmost label (`*.example.com`), covering exactly one label
//! (`a.example.com`, not `example.com` nor `a.b.example.com`). The
//! subject's common name is not a name (browsers have ignored it since
//! 2017). Names and the SNI go through `host::normalize_name`, the one
//! normal form of Host, `:authority` and SNI: `Example.COM` and
//! `example.com.` find the certificate that the site `example.com` is
//! chosen by; a name that is none there (`f*.example.com`, a wildcard
//! over an address) is never chosen, as no client accepts it. Where
//! several certificates cover a name, the one added first wins, as before
//! this store; a client that names none (or no SNI) gets the fallback:
//! the first certificate, the default site's, or (a server of sites with
//! no default) nothing, and the handshake fails with `unrecognized_name`.
//! A site's certificate is added for the site's names instead of its own
//! (`add`'s `for_names`), so it is never sent for another site's name,
//! whatever it covers. That order, and a name covered twice being no error, is
//! why the store keeps its own maps rather than a `host::HostMap` (exact
//! before wildcard, duplicates refused).
//!
//! TLS-ALPN-01 challenge certificates (RFC 8737) are kept apart: one is
//! sent only to a client whose only ALPN protocol is `acme-tls/1`, and
//! such a client gets nothing else.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::sign::CertifiedKey;

use crate::host::{self, HostBuf, HostName};

/// ALPN protocol of the TLS-ALPN-01 challenge (RFC 8737 §6.2).
pub(crate) const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// What a client gets whose SNI no certificate is for, or that sent none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Fallback {
    /// The first certificate (a server of one site).
    #[default]
    First,
    /// This certificate (the default site's).
    Key(usize),
    /// No certificate: the handshake fails with `unrecognized_name`.
    Refuse,
}

/// See the module's documentation.
#[derive(Clone, Default)]
pub(crate) struct CertStore {
    /// In the order added.
    keys: Vec<Arc<CertifiedKey>>,
    /// What a name no certificate is for gets.
    pub(crate) fallback: Fallback,
    /// A name in normal form → the first certificate covering it exactly.
    exact: HashMap<Box<str>, usize>,
    /// The parent of a wildcard (`example.com` for `*.example.com`) → the
    /// first certificate with that wildcard.
    wildcard: HashMap<Box<str>, usize>,
    /// TLS-ALPN-01 challenge certificates, by name in normal form.
    challenges: HashMap<Box<str>, Arc<CertifiedKey>>,
    /// Names waiting for their first ACME certificate (normal form): a
    /// handshake for one fails with `unrecognized_name`, never getting the
    /// fallback's certificate (a borrowed one).
    pub(crate) waiting: std::collections::HashSet<Box<str>>,
    /// HTTP-01 answers (RFC 8555 §8.3): token → key authorization.
    pub(crate) http01: HashMap<Box<str>, Box<str>>,
}

impl CertStore {
    /// Adds a certificate after the others, under the names it covers
    /// (`for_names: None`) or under `for_names` only (a site's names: it
    /// is never sent for another site's). Returns its index.
    pub(crate) fn add(&mut self, key: Arc<CertifiedKey>, for_names: Option<&[String]>) -> usize {
        let idx = self.keys.len();
        let mut buf = HostBuf::new();
        let names = match for_names {
            Some(names) => names.to_vec(),
            None => dns_names(&key),
        };
        for name in names {
            // A name that does not normalise (a partial wildcard,
            // `f*.example.com`; a wildcard over an address) is no client's.
            match name.strip_prefix("*.") {
                Some(parent) => {
                    if let Ok(parent) = host::normalize_name(parent.as_bytes(), &mut buf) {
                        if !parent.is_ip() {
                            self.wildcard.entry(parent.as_str().into()).or_insert(idx);
                        }
                    }
                }
                None => {
                    if let Ok(name) = host::normalize_name(name.as_bytes(), &mut buf) {
                        self.exact.entry(name.as_str().into()).or_insert(idx);
                    }
                }
            }
        }
        self.keys.push(key);
        idx
    }

    /// The index of the certificate chosen for `name` by its names alone
    /// (no fallback), if one is.
    pub(crate) fn index_for(&self, name: &str) -> Option<usize> {
        let mut buf = HostBuf::new();
        let name = host::normalize_name(name.as_bytes(), &mut buf).ok()?;
        self.find(name.as_str())
    }

    fn find(&self, name: &str) -> Option<usize> {
        let exact = self.exact.get(name).copied();
        let wild = name
            .split_once('.')
            .and_then(|(_, parent)| self.wildcard.get(parent).copied());
        match (exact, wild) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The same challenges and fallback, these certificates (a reload read
    /// them again), each for the names it was added for.
    pub(crate) fn replace_keys(&mut self, keys: Vec<(Arc<CertifiedKey>, Option<Vec<String>>)>) {
        let challenges = std::mem::take(&mut self.challenges);
        let waiting = std::mem::take(&mut self.waiting);
        let http01 = std::mem::take(&mut self.http01);
        let fallback = self.fallback;
        *self = CertStore::default();
        for (key, names) in keys {
            self.add(key, names.as_deref());
        }
        self.challenges = challenges;
        self.waiting = waiting;
        self.http01 = http01;
        self.fallback = fallback;
    }

    /// Sets the TLS-ALPN-01 challenge certificate for `name` (or removes
    /// it with `None`).
    pub(crate) fn set_challenge(&mut self, name: &HostName<'_>, key: Option<Arc<CertifiedKey>>) {
        let name: Box<str> = name.as_str().into();
        match key {
            Some(key) => {
                self.challenges.insert(name, key);
            }
            None => {
                self.challenges.remove(&name);
            }
        }
    }

    /// The certificate at `idx` (the order added).
    pub(crate) fn key(&self, idx: usize) -> Option<Arc<CertifiedKey>> {
        self.keys.get(idx).cloned()
    }

    /// Whether `name` (a Host's name, normal form) waits for its first
    /// ACME certificate.
    pub(crate) fn is_waiting(&self, name: &str) -> bool {
        self.waiting.contains(name) && self.find(name).is_none()
    }

    /// The certificate for a client that asked for `server_name` (SNI)
    /// and offered `alpn`.
    pub(crate) fn resolve<'a>(
        &self,
        server_name: Option<&str>,
        mut alpn: impl Iterator<Item = &'a [u8]>,
    ) -> Option<Arc<CertifiedKey>> {
        // On every handshake: normalised in a buffer on the stack, no
        // allocation (rustls has lowercased it and removed a trailing dot
        // already; this does not count on it). A name that is none gets
        // what no SNI gets.
        let mut buf = HostBuf::new();
        let name = server_name.and_then(|n| host::normalize_name(n.as_bytes(), &mut buf).ok());
        let name = name.as_ref().map(HostName::as_str);
        // Only `acme-tls/1` offered: a challenge, or nothing (RFC 8737 §3).
        if alpn.next() == Some(ACME_TLS_ALPN) && alpn.next().is_none() {
            return name.and_then(|n| self.challenges.get(n)).cloned();
        }
        let idx = match name.and_then(|name| self.find(name)) {
            Some(idx) => idx,
            // An ACME site before its first certificate: no other's.
            None if name.is_some_and(|n| self.waiting.contains(n)) => {
                REFUSED_NAME.with(|r| r.set(true));
                return None;
            }
            None => match self.fallback {
                Fallback::First => 0,
                Fallback::Key(idx) => idx,
                Fallback::Refuse => {
                    REFUSED_NAME.with(|r| r.set(true));
                    return None;
                }
            },
        };
        self.keys.get(idx).cloned()
    }
}

thread_local! {
    /// Set when `resolve` refused a client for the name it asked for (or
    /// for asking for none): rustls' handshake fails then, inside
    /// `process_new_packets` on this thread, and the session sends
    /// `unrecognized_name` instead of rustls' alert (`session.rs`).
    static REFUSED_NAME: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the last handshake that failed on this thread was refused for
/// its name; clears it.
pub(crate) fn take_refused_name() -> bool {
    REFUSED_NAME.with(|r| r.replace(false))
}

/// The DNS names of a certificate's subjectAltName, as written.
fn dns_names(key: &CertifiedKey) -> Vec<String> {
    let Some(der) = key.cert.first() else {
        return Vec::new();
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|g| match g {
            x509_parser::extensions::GeneralName::DNSName(n) => Some(n.to_string()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

    /// A self-signed certificate for `names`.
    fn key(names: &[&str]) -> Arc<CertifiedKey> {
        let pair = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = rcgen::CertificateParams::new(names)
            .unwrap()
            .self_signed(&pair)
            .unwrap();
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pair.serialize_der()));
        let provider = crate::tls::provider();
        Arc::new(CertifiedKey::from_der(vec![CertificateDer::from(cert.der().to_vec())], der, &provider).unwrap())
    }

    impl CertStore {
        fn add_san(&mut self, key: Arc<CertifiedKey>) {
            self.add(key, None);
        }
    }

    fn pick(store: &CertStore, sni: Option<&str>, alpn: &[&[u8]]) -> Option<usize> {
        let got = store.resolve(sni, alpn.iter().copied())?;
        store
            .keys
            .iter()
            .position(|k| Arc::ptr_eq(k, &got))
            .or(Some(usize::MAX))
    }

    #[test]
    fn a_name_gets_the_first_certificate_covering_it_exactly_or_by_one_wildcard_label() {
        let mut store = CertStore::default();
        store.add_san(key(&["default.test"]));
        store.add_san(key(&["*.example.com"]));
        store.add_san(key(&["www.example.com", "Other.Test"]));
        store.add_san(key(&["api.example.com", "*.api.example.com"]));
        let h2: &[&[u8]] = &[b"h2", b"http/1.1"];
        assert_eq!(pick(&store, Some("default.test"), h2), Some(0));
        // The wildcard came first: it wins over a later exact name, as the
        // certificates were tried in order before the store.
        assert_eq!(pick(&store, Some("www.example.com"), h2), Some(1));
        assert_eq!(pick(&store, Some("a.example.com"), h2), Some(1));
        assert_eq!(pick(&store, Some("A.EXAMPLE.com"), h2), Some(1), "without case");
        assert_eq!(pick(&store, Some("other.test"), h2), Some(2));
        assert_eq!(pick(&store, Some("x.api.example.com"), h2), Some(3));
        // One label only, and not the parent itself: the default.
        assert_eq!(pick(&store, Some("a.b.example.com"), h2), Some(0));
        assert_eq!(pick(&store, Some("example.com"), h2), Some(0));
        assert_eq!(pick(&store, None, h2), Some(0));
        assert_eq!(pick(&store, Some(&"a".repeat(300)), h2), Some(0));
    }

    #[test]
    fn a_challenge_certificate_goes_only_to_a_client_offering_only_acme_tls() {
        let mut store = CertStore::default();
        store.add_san(key(&["example.com"]));
        let challenge = key(&["example.com"]);
        let name = |n: &str| crate::host::normalize(n.as_bytes()).unwrap();
        store.set_challenge(&name("Example.com."), Some(challenge.clone()));
        let acme: &[&[u8]] = &[ACME_TLS_ALPN];
        let got = store.resolve(Some("example.com"), acme.iter().copied()).unwrap();
        assert!(Arc::ptr_eq(&got, &challenge));
        // Anyone else gets the site's certificate; a challenge client for
        // a name without one gets nothing.
        assert_eq!(pick(&store, Some("example.com"), &[b"h2"]), Some(0));
        assert_eq!(pick(&store, Some("example.com"), &[ACME_TLS_ALPN, b"h2"]), Some(0));
        assert_eq!(pick(&store, Some("other.com"), acme), None);
        // Replacing the keys (a reload) keeps the challenges; removing one ends it.
        let keys = store.keys.iter().map(|k| (k.clone(), None)).collect();
        store.replace_keys(keys);
        assert!(store.resolve(Some("example.com"), acme.iter().copied()).is_some());
        store.set_challenge(&name("example.com"), None);
        assert_eq!(pick(&store, Some("example.com"), acme), None);
    }

    #[test]
    fn every_spelling_of_a_name_gets_the_certificate_its_site_gets() {
        let mut store = CertStore::default();
        store.add_san(key(&["default.test"]));
        store.add_san(key(&["Example.COM", "*.XN--BCHER-KVA.example"]));
        store.add_san(key(&["f*.example.org", "*.127.0.0.1", "*.*.example.net"]));
        let h2: &[&[u8]] = &[b"h2"];
        for sni in [
            "example.com",
            "Example.COM",
            "example.com.",
            "EXAMPLE.COM.",
            "a.xn--bcher-kva.example",
            "A.XN--BCHER-KVA.EXAMPLE.",
        ] {
            assert_eq!(pick(&store, Some(sni), h2), Some(1), "{sni}");
        }
        // Names no client accepts are never chosen; an SNI that is no
        // name gets the default.
        for sni in [
            "foo.example.org",
            "1.127.0.0.1",
            "a.b.example.net",
            "example.com..",
            "-a.example.com",
        ] {
            assert_eq!(pick(&store, Some(sni), h2), Some(0), "{sni}");
        }
        assert!(store.wildcard.keys().all(|parent| &**parent == "xn--bcher-kva.example"));
    }

    #[test]
    fn a_sites_certificate_goes_to_its_names_only_and_unknown_names_get_the_fallback() {
        let mut store = CertStore::default();
        let names = |n: &[&str]| n.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        // b's certificate covers every name here; it is for b.test only.
        store.add(key(&["*.test", "a.test", "b.test"]), Some(&names(&["b.test"])));
        store.add(key(&["a.test"]), Some(&names(&["A.Test", "*.a.test"])));
        let h2: &[&[u8]] = &[b"h2"];
        assert_eq!(pick(&store, Some("a.test"), h2), Some(1));
        assert_eq!(pick(&store, Some("x.a.test"), h2), Some(1));
        assert_eq!(pick(&store, Some("b.test"), h2), Some(0));
        assert_eq!(store.index_for("B.TEST."), Some(0));
        assert_eq!(store.index_for("c.test"), None);
        // Unknown or absent: the fallback.
        assert_eq!(pick(&store, Some("c.test"), h2), Some(0));
        store.fallback = Fallback::Key(1);
        assert_eq!(pick(&store, Some("c.test"), h2), Some(1));
        assert_eq!(pick(&store, None, h2), Some(1));
        store.fallback = Fallback::Refuse;
        assert!(!take_refused_name());
        assert_eq!(pick(&store, Some("c.test"), h2), None);
        assert!(take_refused_name());
        assert!(!take_refused_name(), "cleared");
        assert_eq!(pick(&store, None, h2), None);
        assert!(take_refused_name());
        // A reload keeps the names and the fallback.
        let keys = store
            .keys
            .iter()
            .zip([Some(names(&["b.test"])), Some(names(&["a.test"]))]);
        store.replace_keys(keys.map(|(k, n)| (k.clone(), n)).collect());
        assert_eq!(pick(&store, Some("b.test"), h2), Some(0));
        assert_eq!(pick(&store, Some("x.a.test"), h2), None);
        assert_eq!(store.fallback, Fallback::Refuse);
    }
}
