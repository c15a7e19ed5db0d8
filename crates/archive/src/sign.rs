//! Signed archives (FORMAT.md, "Signature trailer"): the keys, the
//! trailer's fields, and what signing and checking compute.
//!
//! `pack --sign KEY` signs, with Ed25519 (RFC 8032, ring's), the message
//! `SIGNATURE_DOMAIN ‖ SHA-256(every byte before the trailer ‖ the
//! trailer's signed fields)`: the header (flags and length included), the
//! data and the index, then the key id, the creation time and the deploy
//! number. Not the XXH3 checksums the format keeps for damage, which
//! anyone can recompute after changing a byte.
//!
//! Keys are PEM files, as OpenSSL writes them: the private key PKCS#8
//! (`-----BEGIN PRIVATE KEY-----`, what `openssl genpkey -algorithm
//! ed25519` writes and `archive keygen` writes), the public key
//! SubjectPublicKeyInfo (`-----BEGIN PUBLIC KEY-----`, `openssl pkey
//! -pubout`). A key is named by its id: the first 8 bytes of the SHA-256
//! of its 32 public bytes, in hex.

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};

use crate::format::*;

/// The DER of an Ed25519 SubjectPublicKeyInfo (RFC 8410 §4) before its 32
/// key bytes: `SEQUENCE { SEQUENCE { OID 1.3.101.112 }, BIT STRING }`.
const SPKI_PREFIX: [u8; 12] = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00];

/// Why a key file was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError(pub String);

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KeyError {}

/// A private key that signs archives.
pub struct SigningKey {
    pair: Ed25519KeyPair,
}

impl SigningKey {
    /// A new key from the system's randomness, with its PKCS#8 PEM text
    /// (what to write to the key file).
    pub fn generate() -> Result<(SigningKey, String), KeyError> {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng)
            .map_err(|_| KeyError("cannot generate a key: the system gave no randomness".into()))?;
        let key = SigningKey::from_pkcs8(pkcs8.as_ref())?;
        Ok((key, pem("PRIVATE KEY", pkcs8.as_ref())))
    }

    /// The key in a PEM file's text (`-----BEGIN PRIVATE KEY-----`, PKCS#8
    /// v1 as OpenSSL writes it or v2 as ring does).
    pub fn from_pem(text: &str) -> Result<SigningKey, KeyError> {
        SigningKey::from_pkcs8(&unpem(text, "PRIVATE KEY")?)
    }

    fn from_pkcs8(der: &[u8]) -> Result<SigningKey, KeyError> {
        let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(der)
            .map_err(|e| KeyError(format!("not an Ed25519 private key in PKCS#8 ({e})")))?;
        Ok(SigningKey { pair })
    }

    /// The public half, which servers are given.
    pub fn public_key(&self) -> PublicKey {
        PublicKey(
            self.pair
                .public_key()
                .as_ref()
                .try_into()
                .expect("Ed25519 public keys are 32 bytes"),
        )
    }

    pub(crate) fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.pair
            .sign(message)
            .as_ref()
            .try_into()
            .expect("Ed25519 signatures are 64 bytes")
    }
}

/// Never the key's bytes: its id.
impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({})", self.public_key().id())
    }
}

/// An Ed25519 public key: one a server trusts, or the one an archive
/// names.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey([u8; 32]);

impl PublicKey {
    /// The key in a PEM file's text (`-----BEGIN PUBLIC KEY-----`).
    pub fn from_pem(text: &str) -> Result<PublicKey, KeyError> {
        let der = unpem(text, "PUBLIC KEY")?;
        match der.strip_prefix(&SPKI_PREFIX[..]) {
            Some(key) if key.len() == 32 => Ok(PublicKey(key.try_into().expect("32 bytes"))),
            _ => Err(KeyError("not an Ed25519 public key (SubjectPublicKeyInfo)".into())),
        }
    }

    /// The key as a PEM file's text, as OpenSSL writes it.
    pub fn to_pem(&self) -> String {
        let mut der = SPKI_PREFIX.to_vec();
        der.extend_from_slice(&self.0);
        pem("PUBLIC KEY", &der)
    }

    /// The key's 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The key from its 32 bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> PublicKey {
        PublicKey(bytes)
    }

    /// The id archives name it by.
    pub fn id(&self) -> KeyId {
        let d = ring::digest::digest(&ring::digest::SHA256, &self.0);
        KeyId(d.as_ref()[..8].try_into().expect("8 bytes"))
    }

    fn verifies(&self, message: &[u8], signature: &[u8; 64]) -> bool {
        UnparsedPublicKey::new(&ED25519, &self.0)
            .verify(message, signature)
            .is_ok()
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.id())
    }
}

/// The first 8 bytes of the SHA-256 of a public key: how an archive says
/// which key signed it, and how logs name keys.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId(pub [u8; 8]);

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A signature trailer's fields, as read (not yet checked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signature {
    pub key_id: KeyId,
    /// Seconds since the epoch when it was signed.
    pub created: u64,
    /// The deploy number: a server that requires signatures refuses a
    /// lower one than it serves (a rollback) unless told to allow it.
    pub deploy_number: u64,
    pub bytes: [u8; 64],
}

impl Signature {
    /// Reads a trailer (`TRAILER_LEN` bytes).
    pub(crate) fn parse(t: &[u8]) -> Result<Signature, String> {
        if t.len() != TRAILER_LEN || &t[..8] != TRAILER_MAGIC {
            return Err("the signature trailer is damaged (bad magic)".into());
        }
        let version = u32_at(t, 8);
        if version != TRAILER_VERSION {
            return Err(format!(
                "signature trailer version {version}; this build reads version {TRAILER_VERSION}"
            ));
        }
        let algorithm = u32_at(t, 12);
        if algorithm != ALGORITHM_ED25519 {
            return Err(format!("unknown signature algorithm {algorithm}"));
        }
        Ok(Signature {
            key_id: KeyId(t[16..24].try_into().expect("8 bytes")),
            created: u64_at(t, 24),
            deploy_number: u64_at(t, 32),
            bytes: t[40..104].try_into().expect("64 bytes"),
        })
    }

    /// The trailer's first `TRAILER_SIGNED_LEN` bytes: what the digest
    /// covers after the archive's bytes.
    pub(crate) fn signed_fields(&self) -> [u8; TRAILER_SIGNED_LEN] {
        let mut t = [0u8; TRAILER_SIGNED_LEN];
        t[..8].copy_from_slice(TRAILER_MAGIC);
        put_u32(&mut t, 8, TRAILER_VERSION);
        put_u32(&mut t, 12, ALGORITHM_ED25519);
        t[16..24].copy_from_slice(&self.key_id.0);
        put_u64(&mut t, 24, self.created);
        put_u64(&mut t, 32, self.deploy_number);
        t
    }

    /// The whole trailer.
    pub(crate) fn trailer(&self) -> [u8; TRAILER_LEN] {
        let mut t = [0u8; TRAILER_LEN];
        t[..TRAILER_SIGNED_LEN].copy_from_slice(&self.signed_fields());
        t[TRAILER_SIGNED_LEN..].copy_from_slice(&self.bytes);
        t
    }

    /// Whether `key` signed `digest` (the archive's, `Digest::finish`).
    pub(crate) fn verified_by(&self, key: &PublicKey, digest: &[u8; 32]) -> bool {
        key.id() == self.key_id && key.verifies(&message(digest), &self.bytes)
    }
}

/// What a signature check proved: this key signed these bytes, with this
/// creation time and deploy number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verified {
    pub key_id: KeyId,
    pub created: u64,
    pub deploy_number: u64,
    /// SHA-256 of the bytes signed: two archives with the same deploy
    /// number are the same archive only if this is the same.
    pub digest: [u8; 32],
}

/// What `pack --sign` signs with: the key, the creation time and the
/// deploy number.
#[derive(Clone, Debug)]
pub struct Seal {
    pub key: Arc<SigningKey>,
    pub created: u64,
    pub deploy_number: u64,
}

impl Seal {
    /// The trailer for an archive whose bytes before it are hashed in
    /// `digest` (which this finishes).
    pub(crate) fn sign(&self, digest: Digest) -> Signature {
        let mut sig = Signature {
            key_id: self.key.public_key().id(),
            created: self.created,
            deploy_number: self.deploy_number,
            bytes: [0; 64],
        };
        let digest = digest.finish(&sig);
        sig.bytes = self.key.sign(&message(&digest));
        sig
    }
}

/// SHA-256 of the bytes before the trailer, then of its signed fields.
pub(crate) struct Digest(ring::digest::Context);

impl Digest {
    pub(crate) fn new() -> Digest {
        Digest(ring::digest::Context::new(&ring::digest::SHA256))
    }

    pub(crate) fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub(crate) fn finish(mut self, sig: &Signature) -> [u8; 32] {
        self.0.update(&sig.signed_fields());
        self.0.finish().as_ref().try_into().expect("SHA-256 is 32 bytes")
    }
}

/// What is signed: the domain, then the digest.
fn message(digest: &[u8; 32]) -> Vec<u8> {
    let mut m = Vec::with_capacity(SIGNATURE_DOMAIN.len() + 32);
    m.extend_from_slice(SIGNATURE_DOMAIN);
    m.extend_from_slice(digest);
    m
}

/// `der` as a PEM block with `label`, 64 columns of base64.
fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The DER in the first PEM block of `text`, which must be labelled
/// `label`: a private key given where a public one is expected is named
/// as such, not as bad base64.
fn unpem(text: &str, label: &str) -> Result<Vec<u8>, KeyError> {
    let mut lines = text
        .lines()
        .map(str::trim)
        .skip_while(|l| !l.starts_with("-----BEGIN "));
    let Some(begin) = lines.next() else {
        return Err(KeyError(format!("no PEM block: expected -----BEGIN {label}-----")));
    };
    let found = begin.trim_start_matches("-----BEGIN ").trim_end_matches("-----");
    if found != label {
        return Err(KeyError(format!("a PEM {found} where a {label} is expected")));
    }
    let end = format!("-----END {label}-----");
    let mut b64 = String::new();
    for line in lines.by_ref() {
        if line == end {
            return base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| KeyError(format!("the PEM {label} is not base64: {e}")));
        }
        b64.push_str(line);
    }
    Err(KeyError(format!("the PEM {label} has no {end} line")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::{Archive, Mode};
    use crate::write::{VariantIn, Writer};

    /// A small archive (two pages, a revoked path), signed with `seal`
    /// if given, as its bytes.
    fn archive(seal: Option<&Seal>) -> Vec<u8> {
        // One directory per call: tests run at once in one process.
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let t = test_support::Scratch::new(&format!("sign-{n}"));
        let path = t.path("a.prg");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let mut w = Writer::new(file).unwrap();
        for (key, body) in [
            ("/index.html", &b"<p>home</p>"[..]),
            ("/app.3f2a9c1b.js", b"let a = 1;"),
        ] {
            let head = b"Content-Type: text/plain\r\nCache-Control: no-cache\r\n";
            let v = VariantIn {
                body,
                head_200: head,
                head_304: b"Cache-Control: no-cache\r\n",
            };
            w.add_resource(0, key, 0, 0, [Some(v), None, None, None]).unwrap();
        }
        w.add_revoked(0, "/leak.txt").unwrap();
        w.finish_sealed(seal).unwrap();
        std::fs::read(&path).unwrap()
    }

    fn seal(key: &Arc<SigningKey>, deploy_number: u64) -> Seal {
        Seal {
            key: key.clone(),
            created: 1_750_000_000,
            deploy_number,
        }
    }

    #[test]
    fn a_signed_archive_verifies_with_its_key_through_the_map_and_from_memory() {
        let key = Arc::new(SigningKey::generate().unwrap().0);
        let public = key.public_key();
        let t = test_support::Scratch::new("sign-open");
        let path = t.write("a.prg", archive(Some(&seal(&key, 7))));
        for a in [
            Archive::open(&path, Mode::Map).unwrap(),
            Archive::from_bytes(std::fs::read(&path).unwrap()).unwrap(),
        ] {
            let sig = *a.signature().unwrap();
            assert_eq!(
                (sig.key_id, sig.created, sig.deploy_number),
                (public.id(), 1_750_000_000, 7)
            );
            let v = a.verify_signed(&[public]).unwrap();
            assert_eq!((v.key_id, v.created, v.deploy_number), (public.id(), 1_750_000_000, 7));
            a.verify_data().unwrap();
            assert!(a.get(0, b"/index.html").is_some());
            assert!(a.is_revoked(0, "/leak.txt") && !a.is_revoked(0, "/index.html"));
        }
    }

    #[test]
    fn an_unsigned_archive_is_read_as_before_and_refused_when_a_signature_is_required() {
        let bytes = archive(None);
        let a = Archive::from_bytes(bytes).unwrap();
        assert!(a.signature().is_none());
        a.verify_data().unwrap();
        let key = SigningKey::generate().unwrap().0;
        assert_eq!(
            a.verify_signed(&[key.public_key()]).unwrap_err().0,
            "not signed, and a signature is required"
        );
    }

    /// Every byte of the file, changed, is refused: by the structure's
    /// checks, or by the signature (which covers the header, data, index
    /// and the trailer's fields), or it is the signature itself.
    #[test]
    fn changing_any_byte_of_a_signed_archive_is_refused() {
        let key = Arc::new(SigningKey::generate().unwrap().0);
        let trusted = [key.public_key()];
        let good = archive(Some(&seal(&key, 1)));
        assert!(Archive::from_bytes(good.clone())
            .unwrap()
            .verify_signed(&trusted)
            .is_ok());
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x20;
            let refused = match Archive::from_bytes(bad) {
                Err(_) => true,
                Ok(a) => a.verify_signed(&trusted).is_err(),
            };
            assert!(refused, "byte {at} of {} changed and still accepted", good.len());
        }
    }

    #[test]
    fn another_key_is_refused_by_id_and_a_forged_id_by_the_signature() {
        let key = Arc::new(SigningKey::generate().unwrap().0);
        let other = Arc::new(SigningKey::generate().unwrap().0);
        let a = Archive::from_bytes(archive(Some(&seal(&other, 1)))).unwrap();
        let why = a.verify_signed(&[key.public_key()]).unwrap_err().0;
        assert_eq!(
            why,
            format!(
                "signed by key {}, which is not trusted (trusted: {})",
                other.public_key().id(),
                key.public_key().id()
            )
        );
        // Trusting both (a key rotation) accepts it.
        assert!(a.verify_signed(&[key.public_key(), other.public_key()]).is_ok());
        // Signed by `other`, claiming to be `key`'s.
        let mut forged = archive(Some(&seal(&other, 1)));
        let trailer = forged.len() - TRAILER_LEN;
        forged[trailer + 16..trailer + 24].copy_from_slice(&key.public_key().id().0);
        let why = Archive::from_bytes(forged)
            .unwrap()
            .verify_signed(&[key.public_key()])
            .unwrap_err()
            .0;
        assert!(why.contains("does not match the archive's bytes"), "{why}");
    }

    #[test]
    fn a_cut_trailer_is_refused_when_opened() {
        let key = Arc::new(SigningKey::generate().unwrap().0);
        let good = archive(Some(&seal(&key, 1)));
        for cut in [1, 40, TRAILER_LEN - 1, TRAILER_LEN, TRAILER_LEN + 1] {
            let why = Archive::from_bytes(good[..good.len() - cut].to_vec()).err().unwrap().0;
            assert!(why.starts_with("truncated or extended"), "{cut}: {why}");
        }
        // The trailer taken off and the flag cleared: the header's checksum.
        let mut stripped = good[..good.len() - TRAILER_LEN].to_vec();
        let (flags, len) = (u32_at(&stripped, 12), stripped.len() as u64);
        put_u32(&mut stripped, 12, flags & !HEADER_FLAG_SIGNED);
        put_u64(&mut stripped, 16, len);
        let why = Archive::from_bytes(stripped).err().unwrap().0;
        assert!(why.starts_with("header checksum mismatch"), "{why}");
    }

    #[test]
    fn signing_is_deterministic_but_for_the_trailer() {
        let key = Arc::new(SigningKey::generate().unwrap().0);
        let (a, b) = (archive(Some(&seal(&key, 1))), archive(Some(&seal(&key, 2))));
        let unsigned = archive(None);
        let n = a.len() - TRAILER_LEN;
        assert_eq!(a[..n], b[..n]);
        assert_ne!(a[n..], b[n..]);
        // The same but for the header's flag and length (and its checksum).
        assert_eq!(a[64..n], unsigned[64..]);
    }

    #[test]
    fn a_generated_key_reads_back_and_its_public_half_too() {
        let (key, pem_text) = SigningKey::generate().unwrap();
        let again = SigningKey::from_pem(&pem_text).unwrap();
        assert_eq!(key.public_key(), again.public_key());
        let public = key.public_key();
        assert_eq!(PublicKey::from_pem(&public.to_pem()).unwrap(), public);
        assert!(public
            .to_pem()
            .starts_with("-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA"));
    }

    /// OpenSSL's `genpkey -algorithm ed25519` (PKCS#8 v1, no public key)
    /// and what its `pkey -pubout` wrote for it.
    #[test]
    fn openssl_keys_are_read_and_written_alike() {
        let private = "-----BEGIN PRIVATE KEY-----\n\
                       MC4CAQAwBQYDK2VwBCIEIJA/HmQcDx0SjZGRCl3pKEUYHYYtxFMzOtnh5rVnxkFn\n\
                       -----END PRIVATE KEY-----\n";
        let public = "-----BEGIN PUBLIC KEY-----\n\
                      MCowBQYDK2VwAyEAgvMvUfXPKjqZXcvXk0rAZqAdpeoXuO0jpihzzBa0eso=\n\
                      -----END PUBLIC KEY-----\n";
        let key = SigningKey::from_pem(private).unwrap();
        assert_eq!(key.public_key(), PublicKey::from_pem(public).unwrap());
        assert_eq!(key.public_key().to_pem(), public);
        let sig = Seal {
            key: Arc::new(key),
            created: 1,
            deploy_number: 2,
        }
        .sign(Digest::new());
        let public = PublicKey::from_pem(public).unwrap();
        assert!(sig.verified_by(&public, &Digest::new().finish(&sig)));
        let mut other = Digest::new();
        other.update(b"x");
        assert!(!sig.verified_by(&public, &other.finish(&sig)));
    }

    #[test]
    fn a_key_of_the_wrong_kind_is_named() {
        let (key, private) = SigningKey::generate().unwrap();
        let public = key.public_key().to_pem();
        assert_eq!(
            PublicKey::from_pem(&private).unwrap_err().0,
            "a PEM PRIVATE KEY where a PUBLIC KEY is expected"
        );
        assert_eq!(
            SigningKey::from_pem(&public).unwrap_err().0,
            "a PEM PUBLIC KEY where a PRIVATE KEY is expected"
        );
        assert!(PublicKey::from_pem("hello").unwrap_err().0.starts_with("no PEM block"));
        // An RSA key's SubjectPublicKeyInfo is no Ed25519 key.
        let rsa = "-----BEGIN PUBLIC KEY-----\nMFwwDQYJKoZIhvcNAQEBBQADSwAwSAJBAL\n-----END PUBLIC KEY-----\n";
        assert!(PublicKey::from_pem(rsa).is_err());
    }

    #[test]
    fn the_trailer_reads_back_and_refuses_what_it_does_not_know() {
        let sig = Signature {
            key_id: KeyId([1, 2, 3, 4, 5, 6, 7, 8]),
            created: 1_700_000_000,
            deploy_number: 42,
            bytes: [9; 64],
        };
        let t = sig.trailer();
        assert_eq!(Signature::parse(&t).unwrap(), sig);
        assert_eq!(sig.key_id.to_string(), "0102030405060708");
        let mut bad = t;
        bad[0] = b'X';
        assert!(Signature::parse(&bad).is_err());
        let mut bad = t;
        put_u32(&mut bad, 8, 2);
        assert!(Signature::parse(&bad).unwrap_err().contains("version 2"));
        let mut bad = t;
        put_u32(&mut bad, 12, 7);
        assert!(Signature::parse(&bad).unwrap_err().contains("algorithm 7"));
        assert!(Signature::parse(&t[..TRAILER_LEN - 1]).is_err());
    }
}
