//! Session tickets under keys this process holds (issue 29): TLS 1.3
//! tickets (RFC 8446 §4.6.1) and TLS 1.2's (RFC 5077), one key set per
//! process shared by every worker and listener, so that a ticket one
//! worker issued resumes on any other (SO_REUSEPORT picks the worker, not
//! the client).
//!
//! Keys are made here at random and rotated every `ROTATION` (12 h), the
//! previous one still decrypting: a ticket is good for 12 to 24 hours,
//! and a key two rotations old is gone, so what it sealed is unreadable
//! (the forward secrecy tickets cost is bounded). Or they come from a key
//! file shared by a fleet (`TicketKeys::from_file`), nginx's
//! `ssl_session_ticket_key` sizes: 80 bytes (or 48), the first 16 the
//! key's name, the rest its secret; two keys one after the other (160 or
//! 96 bytes) are the current and the previous. A fleet rotates the file
//! and reloads; keys from a file are never rotated here. The ticket format
//! is Peregrine's own (below), not nginx's, so only Peregrine servers
//! share tickets through such a file.
//!
//! A ticket: the key's name (16 bytes), a random nonce (12), then the
//! session state sealed with AES-256-GCM-SIV (RFC 8452) under
//! SHA-256("peregrine tls ticket key v1" ‖ secret), the name as associated
//! data. GCM-SIV because the nonce is random and a fleet shares the key:
//! a repeated nonce, unlikely as it is, then reveals only that two
//! tickets are equal, never the key stream. 0-RTT stays off
//! (`max_early_data_size` 0): a ticket resumes, it never carries a request.
//!
//! The set survives a reload (SIGHUP builds new configurations around the
//! same `Arc<TicketKeys>`) and a binary upgrade (`to_bytes` in the old
//! process, `from_bytes` in the new one, through the upgrade's channel).
//! The lock is taken once per ticket sealed or opened, during handshakes,
//! never per request.

use std::path::Path;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM_SIV, NONCE_LEN};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};

use crate::error::Error;

/// How long a key made here seals new tickets; it then opens them for as
/// long again. nginx rotates its own keys at this period too (and keeps
/// the previous ones); 12 h bounds what a stolen key reveals.
pub const ROTATION: Duration = Duration::from_secs(12 * 3600);

/// A key's name: which key sealed a ticket (OpenSSL's and nginx's 16 bytes).
const NAME_LEN: usize = 16;
/// The tag AES-256-GCM-SIV adds.
const TAG_LEN: usize = 16;
/// A ticket never exceeds this (TLS 1.3's ticket field is at most
/// 2^16 - 1 bytes); anything larger is refused before it is looked at.
const TICKET_BYTES_MAX: usize = 65_535;
/// The two sizes of a key in a key file (nginx's), name included.
const KEY_SIZES: [usize; 2] = [80, 48];
/// What `to_bytes` writes first: the format's version.
const STATE_VERSION: u8 = 1;

/// The ticket keys of a process. Shared by every listener that is given it
/// (`TlsConfig::ticket_keys`); by default every `TlsConfig` of the process
/// shares `TicketKeys::process()`.
pub struct TicketKeys {
    keys: RwLock<Keys>,
}

struct Keys {
    current: Key,
    previous: Option<Key>,
    /// When `current` is replaced (seconds since the epoch); `None` for
    /// keys from a file, which are never rotated here.
    rotate_at: Option<u64>,
}

struct Key {
    /// The key as given or made: its name, then its secret.
    raw: Box<[u8]>,
    aead: LessSafeKey,
}

impl Key {
    fn new(raw: &[u8]) -> Result<Key, Error> {
        if !KEY_SIZES.contains(&raw.len()) {
            return Err(Error::tls(format!("a ticket key is 80 or 48 bytes, not {}", raw.len())));
        }
        let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
        ctx.update(b"peregrine tls ticket key v1");
        ctx.update(&raw[NAME_LEN..]);
        let secret = ctx.finish();
        let unbound = UnboundKey::new(&AES_256_GCM_SIV, secret.as_ref())
            .map_err(|_| Error::tls("ticket key: AES-256-GCM-SIV refused it".into()))?;
        Ok(Key {
            raw: raw.into(),
            aead: LessSafeKey::new(unbound),
        })
    }

    fn random() -> Key {
        let mut raw = [0u8; 80];
        random_fill(&mut raw);
        Key::new(&raw).expect("80 bytes is a key's size")
    }

    fn name(&self) -> &[u8] {
        &self.raw[..NAME_LEN]
    }
}

impl TicketKeys {
    /// A fresh random key, rotated every `ROTATION`.
    pub fn random() -> TicketKeys {
        TicketKeys {
            keys: RwLock::new(Keys {
                current: Key::random(),
                previous: None,
                rotate_at: Some(unix_now() + ROTATION.as_secs()),
            }),
        }
    }

    /// The set every `TlsConfig` of this process uses unless given
    /// another: made at random when first asked for.
    pub fn process() -> Arc<TicketKeys> {
        static PROCESS: OnceLock<Arc<TicketKeys>> = OnceLock::new();
        PROCESS.get_or_init(|| Arc::new(TicketKeys::random())).clone()
    }

    /// Keys from a key file: one key of 80 or 48 bytes (name, then
    /// secret), or two of the same size, current first. Never rotated
    /// here: the fleet replaces the file and reloads
    /// (`TicketKeys::load_file`).
    pub fn from_file(path: &Path) -> Result<TicketKeys, Error> {
        Ok(TicketKeys {
            keys: RwLock::new(read_key_file(path)?),
        })
    }

    /// Replaces the keys with those of a key file (a reload): tickets of
    /// the keys it no longer names stop resuming.
    pub fn load_file(&self, path: &Path) -> Result<(), Error> {
        let keys = read_key_file(path)?;
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = keys;
        Ok(())
    }

    /// Takes `other`'s keys and rotation (a binary upgrade's hand-over, a
    /// key file), so that every configuration sharing this set uses them.
    pub fn install(&self, other: TicketKeys) {
        let keys = other.keys.into_inner().unwrap_or_else(|e| e.into_inner());
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = keys;
    }

    /// Whether the keys came from a key file (and are not rotated here).
    pub fn is_from_file(&self) -> bool {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).rotate_at.is_none()
    }

    /// Makes a new current key now, the current one becoming the previous
    /// (what the 12-hourly rotation does). For keys from a file too.
    pub fn rotate(&self) {
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        rotate(&mut keys, unix_now());
    }

    /// The keys and the rotation time, for a binary upgrade's new process
    /// (`from_bytes`): secret, to be handed only over a channel between
    /// the two processes, never an argument or the environment.
    pub fn to_bytes(&self) -> Vec<u8> {
        let keys = self.read();
        let mut out = vec![STATE_VERSION];
        out.extend_from_slice(&keys.rotate_at.unwrap_or(0).to_be_bytes());
        for key in std::iter::once(&keys.current).chain(&keys.previous) {
            out.push(key.raw.len() as u8);
            out.extend_from_slice(&key.raw);
        }
        out
    }

    /// The keys `to_bytes` wrote, rotation time included.
    pub fn from_bytes(bytes: &[u8]) -> Result<TicketKeys, Error> {
        let bad = || Error::tls("handed-over ticket keys: not in the expected form".into());
        let (&version, rest) = bytes.split_first().ok_or_else(bad)?;
        if version != STATE_VERSION || rest.len() < 8 {
            return Err(bad());
        }
        let rotate_at = u64::from_be_bytes(rest[..8].try_into().map_err(|_| bad())?);
        let mut rest = &rest[8..];
        let mut keys = Vec::new();
        while let Some((&len, tail)) = rest.split_first() {
            let len = usize::from(len);
            if tail.len() < len || keys.len() == 2 {
                return Err(bad());
            }
            keys.push(Key::new(&tail[..len])?);
            rest = &tail[len..];
        }
        let mut keys = keys.into_iter();
        let current = keys.next().ok_or_else(bad)?;
        Ok(TicketKeys {
            keys: RwLock::new(Keys {
                current,
                previous: keys.next(),
                rotate_at: (rotate_at != 0).then_some(rotate_at),
            }),
        })
    }

    /// The keys, rotated first if their time has come.
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Keys> {
        let now = unix_now();
        {
            let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
            if keys.rotate_at.is_none_or(|at| now < at) {
                return keys;
            }
        }
        {
            let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
            // Another thread may have rotated while this one waited.
            if keys.rotate_at.is_some_and(|at| now >= at) {
                rotate(&mut keys, now);
            }
        }
        self.keys.read().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys themselves.
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("TicketKeys")
            .field("previous", &keys.previous.is_some())
            .field("rotate_at", &keys.rotate_at)
            .finish_non_exhaustive()
    }
}

impl rustls::server::ProducesTickets for TicketKeys {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        ROTATION.as_secs() as u32
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let keys = self.read();
        let key = &keys.current;
        let mut nonce = [0u8; NONCE_LEN];
        random_fill(&mut nonce);
        let mut out = Vec::with_capacity(NAME_LEN + NONCE_LEN + plain.len() + TAG_LEN);
        out.extend_from_slice(key.name());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let (head, body) = out.split_at_mut(NAME_LEN + NONCE_LEN);
        let tag = (key.aead)
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(&head[..NAME_LEN]), body)
            .ok()?;
        out.extend_from_slice(tag.as_ref());
        Some(out)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        if cipher.len() < NAME_LEN + NONCE_LEN + TAG_LEN || cipher.len() > TICKET_BYTES_MAX {
            return None;
        }
        let (name, rest) = cipher.split_at(NAME_LEN);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let keys = self.read();
        let key = std::iter::once(&keys.current)
            .chain(&keys.previous)
            .find(|k| k.name() == name)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = sealed.to_vec();
        let plain = key.aead.open_in_place(nonce, Aad::from(name), &mut buf).ok()?;
        let n = plain.len();
        buf.truncate(n);
        Some(buf)
    }
}

/// A new current key; the current one becomes the previous, the previous
/// is dropped.
fn rotate(keys: &mut Keys, now: u64) {
    let old = std::mem::replace(&mut keys.current, Key::random());
    keys.previous = Some(old);
    if keys.rotate_at.is_some() {
        keys.rotate_at = Some(now + ROTATION.as_secs());
    }
}

fn read_key_file(path: &Path) -> Result<Keys, Error> {
    let bytes = std::fs::read(path).map_err(|e| Error::tls(format!("{}: {e}", path.display())))?;
    let size = KEY_SIZES
        .into_iter()
        .find(|&size| bytes.len() == size || bytes.len() == 2 * size)
        .ok_or_else(|| {
            Error::tls(format!(
                "{}: a ticket key file is 80 or 48 random bytes (or two such keys, 160 or 96: current, \
                 then previous), not {} bytes; make one with `openssl rand 80 > FILE`",
                path.display(),
                bytes.len()
            ))
        })?;
    let current = Key::new(&bytes[..size])?;
    let previous = (bytes.len() == 2 * size)
        .then(|| Key::new(&bytes[size..]))
        .transpose()?;
    Ok(Keys {
        current,
        previous,
        rotate_at: None,
    })
}

fn random_fill(buf: &mut [u8]) {
    // The system's generator does not fail on Linux or the BSDs; if it
    // ever did, a key or nonce of zeros must not be used.
    SystemRandom::new().fill(buf).expect("the system's random generator");
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::server::ProducesTickets;

    #[test]
    fn a_ticket_opens_under_the_current_and_previous_key_only() {
        let keys = TicketKeys::random();
        let first = keys.encrypt(b"session one").unwrap();
        assert_eq!(keys.decrypt(&first).unwrap(), b"session one");
        keys.rotate();
        let second = keys.encrypt(b"session two").unwrap();
        assert_eq!(
            keys.decrypt(&first).unwrap(),
            b"session one",
            "the previous key still opens"
        );
        keys.rotate();
        assert_eq!(keys.decrypt(&first), None, "a key two rotations old is gone");
        assert_eq!(keys.decrypt(&second).unwrap(), b"session two");
    }

    #[test]
    fn the_rotation_comes_by_itself_when_its_time_has_come() {
        let keys = TicketKeys::random();
        let old = keys.encrypt(b"s").unwrap();
        keys.keys.write().unwrap().rotate_at = Some(unix_now() - 1);
        let new = keys.encrypt(b"s").unwrap();
        assert_ne!(old[..NAME_LEN], new[..NAME_LEN], "sealed under a new key");
        assert!(keys.read().rotate_at.unwrap() >= unix_now() + ROTATION.as_secs() - 1);
        assert_eq!(keys.decrypt(&old).unwrap(), b"s");
    }

    #[test]
    fn tampered_cut_and_foreign_tickets_do_not_open() {
        let keys = TicketKeys::random();
        let t = keys.encrypt(b"state").unwrap();
        for i in 0..t.len() {
            let mut bad = t.clone();
            bad[i] ^= 1;
            assert_eq!(keys.decrypt(&bad), None, "byte {i} flipped");
        }
        for n in 0..t.len() {
            assert_eq!(keys.decrypt(&t[..n]), None, "cut to {n}");
        }
        assert_eq!(TicketKeys::random().decrypt(&t), None);
        assert_eq!(keys.decrypt(&vec![0; TICKET_BYTES_MAX + 1]), None);
    }

    #[test]
    fn handed_over_keys_open_the_old_processes_tickets() {
        let keys = TicketKeys::random();
        let older = keys.encrypt(b"older").unwrap();
        keys.rotate();
        let newer = keys.encrypt(b"newer").unwrap();
        let bytes = keys.to_bytes();
        let new = TicketKeys::from_bytes(&bytes).unwrap();
        assert_eq!(new.decrypt(&older).unwrap(), b"older");
        assert_eq!(new.decrypt(&newer).unwrap(), b"newer");
        assert_eq!(new.read().rotate_at, keys.read().rotate_at);
        // And what the new one seals, the current key's name says.
        assert_eq!(new.encrypt(b"x").unwrap()[..NAME_LEN], newer[..NAME_LEN]);
        for n in 0..bytes.len() {
            assert!(
                TicketKeys::from_bytes(&bytes[..n]).is_err() || n == 1 + 8 + 81,
                "cut to {n}"
            );
        }
    }

    #[test]
    fn key_files_of_one_or_two_keys_and_nginx_sizes() {
        let dir = std::env::temp_dir().join(format!("peregrine-ticket-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("keys");
        let a: Vec<u8> = (0..80).collect();
        let b: Vec<u8> = (100..180).collect();
        std::fs::write(&file, &a).unwrap();
        let one = TicketKeys::from_file(&file).unwrap();
        let sealed_a = one.encrypt(b"a").unwrap();
        assert_eq!(sealed_a[..NAME_LEN], a[..NAME_LEN], "the file's name leads the ticket");
        // The fleet rotates: b current, a previous.
        std::fs::write(&file, [&b[..], &a[..]].concat()).unwrap();
        let two = TicketKeys::from_file(&file).unwrap();
        assert_eq!(two.decrypt(&sealed_a).unwrap(), b"a");
        assert_eq!(two.encrypt(b"b").unwrap()[..NAME_LEN], b[..NAME_LEN]);
        one.load_file(&file).unwrap();
        assert_eq!(one.decrypt(&sealed_a).unwrap(), b"a");
        std::fs::write(&file, &b[..48]).unwrap();
        TicketKeys::from_file(&file).unwrap();
        for size in [0, 47, 79, 81, 200] {
            std::fs::write(&file, vec![7; size]).unwrap();
            let e = TicketKeys::from_file(&file).unwrap_err().to_string();
            assert!(e.contains("80 or 48"), "{size}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
