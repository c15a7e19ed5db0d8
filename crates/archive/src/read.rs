//! Opens and validates an archive (FORMAT.md, "What a reader may assume"),
//! then answers lookups straight from its bytes: no parsing, no rebuilding.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use peregrine::SharedBytes;
use peregrine_files::auth::{AuthRule, Users};

use crate::format::*;
use crate::map::{self, Backing};
use crate::sign::{Digest, PublicKey, Signature, Verified};

/// How to hold an archive's bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Memory-mapped (the default).
    #[default]
    Map,
    /// Memory-mapped with every page faulted in at load.
    MapPopulate,
    /// Read into the heap.
    Heap,
}

/// Why an archive was refused.
#[derive(Debug)]
pub struct Invalid(pub String);

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Invalid {}

fn invalid<T>(why: impl Into<String>) -> Result<T, Invalid> {
    Err(Invalid(why.into()))
}

/// An open, validated archive.
pub struct Archive {
    bytes: Arc<Backing>,
    /// The mapped file, holding a read lease (maps only) until released.
    leased: std::sync::Mutex<Option<Arc<File>>>,
    /// The mapped file for as long as the archive lives (maps only): large
    /// bodies are sent from it, not from the map (`body_file`).
    file: Option<Arc<File>>,
    index_off: usize,
    n_hosts: usize,
    n_slots: usize,
    n_entries: usize,
    default_site: u32,
    hosts_at: usize,
    slots_at: usize,
    entries_at: usize,
    strings_at: usize,
    /// Pattern redirects without `!`, per site, in archive order: (site,
    /// entry index).
    patterns: Vec<(u32, usize)>,
    /// Pattern redirects with `!` (`FLAG_FORCED`), likewise: matched
    /// before any lookup.
    forced: Vec<(u32, usize)>,
    /// `Basic-Auth` rules (`KIND_AUTH`), per site, in archive order (the
    /// last that matches a path decides), users read and checked at open.
    auth: Vec<(u32, AuthRule)>,
    /// The signature trailer's fields (`HEADER_FLAG_SIGNED`), as read:
    /// checked only by `verify_signed`.
    signature: Option<Signature>,
}

/// Entries [`Archive::get_remembered`] found, by the length and last byte
/// of their key, each slot with a copy of its key (up to
/// `Lookups::KEY_BYTES_MAX` bytes; longer keys are not remembered), its
/// site and its entry's kind: a key recalled is answered without a look
/// at the archive's bytes. For one archive only.
#[derive(Debug, Clone, Default)]
pub struct Lookups([Remembered; Lookups::SLOTS]);

/// One slot of [`Lookups`]: 64 bytes, a cache line.
#[derive(Debug, Clone, Copy)]
struct Remembered {
    /// The entry's index + 1; 0 for none.
    idx1: u32,
    site: u32,
    /// The key's length (0 in an empty slot: no key is empty), and the
    /// entry's kind in the top byte.
    len_kind: u64,
    key: [u8; Lookups::KEY_BYTES_MAX],
}

impl Default for Remembered {
    fn default() -> Self {
        Remembered {
            idx1: 0,
            site: 0,
            len_kind: 0,
            key: [0; Lookups::KEY_BYTES_MAX],
        }
    }
}

impl Lookups {
    /// Paths asked for in turn that keep their entry: 8 whose length and
    /// last byte differ.
    const SLOTS: usize = 8;
    /// Keys remembered: up to 48 bytes (most request paths), so that a
    /// slot is 64 bytes.
    const KEY_BYTES_MAX: usize = 48;

    #[inline(always)]
    fn slot(key: &[u8]) -> usize {
        (key.len() + key.last().map_or(0, |&b| usize::from(b))) % Lookups::SLOTS
    }

    /// The index and kind of the entry [`Archive::get_remembered`] gave
    /// last for `key` of `site`, if this memo still holds it: the same
    /// entry `get` would give again (an entry has one key, and the memo is
    /// of one archive). Compares `key` with the slot's copy only; the
    /// archive is not read.
    #[inline(always)]
    pub fn recall(&self, site: u32, key: &[u8]) -> Option<(usize, u8)> {
        let m = &self.0[Lookups::slot(key)];
        if m.idx1 == 0 || m.site != site || (m.len_kind & 0xff_ffff) as usize != key.len() {
            return None;
        }
        let kept = m.key.get(..key.len())?;
        peregrine_files::path::same_key(key, kept).then(|| (m.idx1 as usize - 1, (m.len_kind >> 56) as u8))
    }

    /// Remembers `e` as what `get` gave for `key` of `site`.
    #[inline]
    fn remember(&mut self, site: u32, key: &[u8], e: &Entry<'_>) {
        if key.len() > Lookups::KEY_BYTES_MAX {
            return;
        }
        let m = &mut self.0[Lookups::slot(key)];
        m.key[..key.len()].copy_from_slice(key);
        // An entry count is read from 4 bytes: every index fits.
        m.idx1 = e.idx as u32 + 1;
        m.site = site;
        m.len_kind = key.len() as u64 | u64::from(e.kind()) << 56;
    }
}

/// A variant of a resource, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    pub body_off: u64,
    pub body_len: u64,
    pub body_hash: u64,
    pub head_off: u64,
    pub head_len: u32,
    pub head304_len: u32,
}

/// An entry of the index.
///
/// Its record is found once, where the entry is made: every field read
/// after that is a fixed offset into a fixed-size array, with no bounds
/// check and no look through the archive's backing (an archive answer
/// reads the record eight to ten times).
#[derive(Clone, Copy)]
pub struct Entry<'a> {
    archive: &'a Archive,
    idx: usize,
    rec: &'a [u8; ENTRY_LEN],
}

impl Archive {
    /// Opens and validates the archive at `path`.
    pub fn open(path: &Path, mode: Mode) -> Result<Archive, Invalid> {
        let mut file = File::open(path).map_err(|e| Invalid(format!("cannot open {}: {e}", path.display())))?;
        // A map needs the file never to shrink under it: the read lease
        // makes a writer wait until we have moved off it (see `serve`).
        // Without a lease (the file is open for writing right now, or
        // another user owns it), the archive is read into memory instead.
        let mut leased = None;
        if mode != Mode::Heap {
            match map::take_read_lease(&file) {
                Ok(()) => leased = Some(()),
                Err(e) => peregrine::log::warn(format_args!(
                    "no read lease on {} ({e}); reading it into memory instead of mapping it",
                    path.display()
                )),
            }
        }
        let bytes = match leased {
            None => {
                let mut v = Vec::new();
                file.read_to_end(&mut v)
                    .map_err(|e| Invalid(format!("cannot read {}: {e}", path.display())))?;
                Backing::Heap(v)
            }
            Some(()) => map::map(&file, mode == Mode::MapPopulate)
                .map_err(|e| Invalid(format!("cannot map {}: {e}", path.display())))?,
        };
        let mut archive = Archive::from_backing(bytes).map_err(|e| Invalid(format!("{}: {e}", path.display())))?;
        let file = leased.map(|()| Arc::new(file));
        archive.leased = std::sync::Mutex::new(file.clone());
        archive.file = file;
        Ok(archive)
    }

    /// Whether another process waits to write the mapped file.
    pub fn lease_broken(&self) -> bool {
        self.leased
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|f| map::lease_broken(f))
    }

    /// The same archive off its file: a map's pages are replaced in place
    /// by an anonymous copy (`map::detach`), which this archive and every
    /// byte it lent out (responses in flight, header blocks kept by
    /// workers) now read, and the archive returned shares them without the
    /// file, so it sends every body from memory. The file may then be
    /// rewritten (once the lease is released) without anything reading it
    /// again but bodies already being sent from its descriptor. A heap
    /// archive is shared as it is.
    pub fn detached(&self) -> Result<Archive, Invalid> {
        if let Backing::Map(m) = &*self.bytes {
            map::detach(m).map_err(|e| Invalid(format!("cannot copy the archive off its map: {e}")))?;
        }
        Ok(Archive {
            bytes: self.bytes.clone(),
            leased: std::sync::Mutex::new(None),
            file: None,
            index_off: self.index_off,
            n_hosts: self.n_hosts,
            n_slots: self.n_slots,
            n_entries: self.n_entries,
            default_site: self.default_site,
            hosts_at: self.hosts_at,
            slots_at: self.slots_at,
            entries_at: self.entries_at,
            strings_at: self.strings_at,
            patterns: self.patterns.clone(),
            forced: self.forced.clone(),
            auth: self.auth.clone(),
            signature: self.signature,
        })
    }

    /// Lets a waiting writer proceed. The map must have been detached
    /// first ([`Archive::detached`]); bodies being sent from the file
    /// (`body_file`) may still read it, and a file cut short under them
    /// ends their connection. If fcntl fails, the
    /// kernel still breaks the lease after `lease-break-time`.
    pub fn release_lease(&self) -> std::io::Result<()> {
        match self.leased.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(f) => map::release_lease(&f),
            None => Ok(()),
        }
    }

    /// The file under a map, for sending a body with `sendfile`/`pread`
    /// rather than from the map: a read past the end of a file truncated in
    /// place is short (the engine closes that connection) where a touch of
    /// the map past it would be SIGBUS. `None` for a heap copy.
    pub fn body_file(&self) -> Option<&Arc<File>> {
        self.file.as_ref()
    }

    /// Whether the bytes are a map of the file (not a heap copy).
    pub fn is_mapped(&self) -> bool {
        matches!(*self.bytes, Backing::Map(_))
    }

    /// Validates bytes already in memory (tests, fuzzing).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Archive, Invalid> {
        Archive::from_backing(Backing::Heap(bytes))
    }

    fn from_backing(backing: Backing) -> Result<Archive, Invalid> {
        let b = backing.as_ref();
        // What the file looks like, for someone who gave the wrong one
        // (a page, a tarball, an empty file left by a failed copy).
        if b.is_empty() {
            return invalid("not a Peregrine archive: the file is empty");
        }
        if !b.starts_with(MAGIC) {
            let start = &b[..b.len().min(16)];
            return invalid(format!(
                "not a Peregrine archive (bad magic): it starts with \"{}\", an archive with \"{}\"",
                start.escape_ascii(),
                MAGIC.escape_ascii()
            ));
        }
        if b.len() < HEADER_LEN {
            return invalid(format!(
                "truncated archive: {} bytes is shorter than the header ({HEADER_LEN} bytes)",
                b.len()
            ));
        }
        let version = u32_at(b, 8);
        if version != VERSION {
            return invalid(format!(
                "archive format version {version}; this build reads version {VERSION}"
            ));
        }
        let flags = u32_at(b, 12);
        if flags & !HEADER_FLAGS_KNOWN != 0 {
            return invalid("unknown archive flags (written by a newer pack?)");
        }
        if hash(&b[..56]) != u64_at(b, 56) {
            return invalid("header checksum mismatch (corrupt header)");
        }
        let file_len = u64_at(b, 16);
        if file_len != b.len() as u64 {
            return invalid(format!(
                "truncated or extended: header says {file_len} bytes, file has {}",
                b.len()
            ));
        }
        // A signed archive ends with its trailer, after the index.
        let (index_end, signature) = if flags & HEADER_FLAG_SIGNED != 0 {
            let Some(end) = b.len().checked_sub(TRAILER_LEN).filter(|&e| e >= HEADER_LEN) else {
                return invalid("truncated archive: no room for the signature trailer its header announces");
            };
            (end, Some(Signature::parse(&b[end..]).map_err(Invalid)?))
        } else {
            (b.len(), None)
        };
        let index_off = u64_at(b, 24);
        let index_len = u64_at(b, 32);
        if index_off < HEADER_LEN as u64 || index_off.checked_add(index_len) != Some(index_end as u64) {
            return invalid(if signature.is_some() {
                "index does not end where the signature trailer starts"
            } else {
                "index does not end the file"
            });
        }
        let index_off = index_off as usize;
        let index = &b[index_off..index_end];
        if hash(index) != u64_at(b, 40) {
            return invalid("index checksum mismatch (corrupt index)");
        }
        if index.len() < INDEX_HEADER_LEN {
            return invalid("index shorter than its header");
        }
        let n_hosts = u32_at(index, 0) as usize;
        let n_slots = u32_at(index, 4) as usize;
        let n_entries = u32_at(index, 8) as usize;
        let default_site = u32_at(index, 12);
        let table = |off_at: usize, count: usize, size: usize, what: &str| -> Result<(usize, usize), Invalid> {
            let off = u64_at(index, off_at);
            let len = (count as u64).checked_mul(size as u64);
            match (usize::try_from(off).ok(), len.and_then(|l| off.checked_add(l))) {
                (Some(o), Some(end)) if o >= INDEX_HEADER_LEN && end <= index.len() as u64 => Ok((o, end as usize)),
                _ => invalid(format!("{what} table outside the index")),
            }
        };
        let (hosts_off, hosts_end) = table(16, n_hosts, HOST_LEN, "host")?;
        let (slots_off, slots_end) = table(24, n_slots, SLOT_LEN, "slot")?;
        let (entries_off, entries_end) = table(32, n_entries, ENTRY_LEN, "entry")?;
        let strings_len = u64_at(index, 48) as usize;
        let (strings_off, strings_end) = table(40, strings_len, 1, "string")?;
        let mut spans = [
            (hosts_off, hosts_end),
            (slots_off, slots_end),
            (entries_off, entries_end),
            (strings_off, strings_end),
        ];
        spans.sort();
        if spans.windows(2).any(|w| w[0].1 > w[1].0) {
            return invalid("index tables overlap");
        }
        if !n_slots.is_power_of_two() || n_slots < n_entries {
            return invalid("slot count is not a power of two at least the entry count");
        }
        let in_strings = |off: u32, len: u32| (off as u64 + len as u64) <= strings_len as u64;
        for i in 0..n_hosts {
            let at = hosts_off + i * HOST_LEN;
            if !in_strings(u32_at(index, at), u32_at(index, at + 4)) {
                return invalid(format!("host {i} name outside the string table"));
            }
        }
        let data_end = index_off as u64;
        let mut patterns = Vec::new();
        let mut forced = Vec::new();
        let mut auth = Vec::new();
        for i in 0..n_entries {
            let at = entries_off + i * ENTRY_LEN;
            let kind = index[at + 4];
            // Revoked paths and Basic-Auth rules only where the header
            // says so: a reader that did not know them refused the flag,
            // not the kind.
            let known = matches!(kind, KIND_RESOURCE | KIND_REDIRECT | KIND_PATTERN)
                || (kind == KIND_REVOKED && flags & HEADER_FLAG_REVOKED != 0)
                || (kind == KIND_AUTH && flags & HEADER_FLAG_AUTH != 0);
            if !known {
                return invalid(format!("entry {i} has unknown kind {kind}"));
            }
            if !in_strings(u32_at(index, at + 8), u32_at(index, at + 12))
                || !in_strings(u32_at(index, at + 24), u32_at(index, at + 28))
            {
                return invalid(format!("entry {i} strings outside the string table"));
            }
            if kind == KIND_PATTERN {
                let list = if index[at + 5] & FLAG_FORCED != 0 {
                    &mut forced
                } else {
                    &mut patterns
                };
                list.push((u32_at(index, at), i));
            }
            if kind == KIND_AUTH {
                let text = |off_at: usize| {
                    let (off, len) = (
                        u32_at(index, at + off_at) as usize,
                        u32_at(index, at + off_at + 4) as usize,
                    );
                    std::str::from_utf8(&index[strings_off + off..strings_off + off + len])
                };
                let rule = match (text(8), text(24)) {
                    (Ok(pattern), Ok(users)) => {
                        let from_plain = index[at + 5] & FLAG_FROM_PLAIN != 0;
                        Users::parse(users).and_then(|u| AuthRule::new(pattern, u.with_from_plain(from_plain)))
                    }
                    _ => Err("not UTF-8".to_owned()),
                };
                match rule {
                    Ok(rule) => auth.push((u32_at(index, at), rule)),
                    Err(why) => return invalid(format!("entry {i}: a Basic-Auth rule that does not read: {why}")),
                }
            }
            for j in 0..N_VARIANTS {
                let v = variant_at(index, at + 32 + j * VARIANT_LEN);
                let body_ok = v.body_off.checked_add(v.body_len).is_some_and(|e| e <= data_end)
                    && (v.body_len == 0 || v.body_off >= HEADER_LEN as u64);
                let heads = u64::from(v.head_len) + u64::from(v.head304_len);
                let heads_ok = v.head_off.checked_add(heads).is_some_and(|e| e <= data_end)
                    && (heads == 0 || v.head_off >= HEADER_LEN as u64);
                if !body_ok || !heads_ok {
                    return invalid(format!("entry {i} variant {j} outside the data"));
                }
            }
            if kind == KIND_RESOURCE && variant_at(index, at + 32).head_len == 0 {
                return invalid(format!("entry {i} has no identity variant"));
            }
        }
        for s in 0..n_slots {
            if u32_at(index, slots_off + s * SLOT_LEN) as usize > n_entries {
                return invalid(format!("slot {s} names a missing entry"));
            }
        }
        Ok(Archive {
            bytes: Arc::new(backing),
            leased: std::sync::Mutex::new(None),
            file: None,
            index_off,
            n_hosts,
            n_slots,
            n_entries,
            default_site,
            hosts_at: index_off + hosts_off,
            slots_at: index_off + slots_off,
            entries_at: index_off + entries_off,
            strings_at: index_off + strings_off,
            patterns,
            forced,
            auth,
            signature,
        })
    }

    /// Checks the data hash: every body and head as written (FORMAT.md).
    ///
    /// A mapped archive is read through its file descriptor, not the map:
    /// the same page-cache pages, but only the pages a response later
    /// touches count in the server's resident set (measured by load100k:
    /// hashing through the map left the whole archive, 435 MiB for 100,000
    /// files, mapped in after start-up).
    pub fn verify_data(&self) -> Result<(), Invalid> {
        let (data_hash, _) = self.scan(None)?;
        self.check_data_hash(data_hash)
    }

    fn check_data_hash(&self, got: u64) -> Result<(), Invalid> {
        if got != u64_at(self.bytes(), 48) {
            return invalid("data checksum mismatch (corrupt bodies)");
        }
        Ok(())
    }

    /// The signature trailer's fields, unchecked (`None`: not signed).
    pub fn signature(&self) -> Option<&Signature> {
        self.signature.as_ref()
    }

    /// Checks that one of `trusted` signed every byte of the archive (its
    /// SHA-256, in the same one pass over the file as the data hash, which
    /// is checked too), and returns what the signature says. Refused: an
    /// unsigned archive, one signed by a key not trusted, one whose bytes
    /// changed after signing.
    pub fn verify_signed(&self, trusted: &[PublicKey]) -> Result<Verified, Invalid> {
        let Some(sig) = self.signature else {
            return invalid("not signed, and a signature is required");
        };
        if !trusted.iter().any(|k| k.id() == sig.key_id) {
            let ids: Vec<String> = trusted.iter().map(|k| k.id().to_string()).collect();
            return invalid(format!(
                "signed by key {}, which is not trusted (trusted: {})",
                sig.key_id,
                ids.join(", ")
            ));
        }
        let (data_hash, digest) = self.scan(Some(Digest::new()))?;
        let digest = digest.expect("asked for").finish(&sig);
        if !trusted.iter().any(|k| sig.verified_by(k, &digest)) {
            return invalid(format!(
                "the signature by key {} does not match the archive's bytes: it was changed after it \
                 was signed (tampered with or damaged)",
                sig.key_id
            ));
        }
        self.check_data_hash(data_hash)?;
        Ok(Verified {
            key_id: sig.key_id,
            created: sig.created,
            deploy_number: sig.deploy_number,
            digest,
        })
    }

    /// One pass over the archive: the XXH3 of the data region and, when
    /// `digest` is given, every byte before the signature trailer fed to
    /// it. Through the file for a map (see `verify_data`).
    fn scan(&self, mut digest: Option<Digest>) -> Result<(u64, Option<Digest>), Invalid> {
        let b = self.bytes();
        let data = HEADER_LEN as u64..self.index_off as u64;
        let end = if digest.is_some() {
            (b.len() - self.signature.map_or(0, |_| TRAILER_LEN)) as u64
        } else {
            data.end
        };
        let start = if digest.is_some() { 0 } else { data.start };
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        let mut feed = |at: u64, piece: &[u8]| {
            if let Some(d) = digest.as_mut() {
                d.update(piece);
            }
            // The part of this piece inside the data region.
            let from = data.start.clamp(at, at + piece.len() as u64) - at;
            let to = data.end.clamp(at, at + piece.len() as u64) - at;
            hasher.update(&piece[from as usize..to as usize]);
        };
        match (&*self.bytes, &*self.leased.lock().unwrap_or_else(|e| e.into_inner())) {
            (Backing::Map(_), Some(file)) => {
                read_file_range(file, start, end, feed).map_err(|e| Invalid(format!("cannot read the archive: {e}")))?
            }
            _ => feed(start, &b[start as usize..end as usize]),
        }
        Ok((hasher.digest(), digest))
    }

    /// The 64 header bytes: equal headers are the same archive (they hold
    /// the length and the index's and data's hashes).
    pub fn header(&self) -> &[u8] {
        &self.bytes()[..HEADER_LEN]
    }

    /// Whether `pack --revoke` named `key` in `site`, itself or a folder
    /// above it (`/private/` for `/private/a/b`).
    pub fn is_revoked(&self, site: u32, key: &str) -> bool {
        if u32_at(self.bytes(), 12) & HEADER_FLAG_REVOKED == 0 {
            return false;
        }
        let revoked = |k: &str| {
            self.get(site, format!("{REVOKED_KEY}{k}").as_bytes())
                .is_some_and(|e| e.kind() == KIND_REVOKED)
        };
        if revoked(key) {
            return true;
        }
        let mut folder = &key[..key.rfind('/').map_or(0, |i| i + 1)];
        while !folder.is_empty() {
            if revoked(folder) {
                return true;
            }
            folder = &folder[..folder[..folder.len() - 1].rfind('/').map_or(0, |i| i + 1)];
        }
        false
    }

    fn bytes(&self) -> &[u8] {
        (*self.bytes).as_ref()
    }

    /// The archive's total length.
    pub fn len(&self) -> u64 {
        self.bytes().len() as u64
    }

    /// Whether the archive has no entries.
    pub fn is_empty(&self) -> bool {
        self.n_entries == 0
    }

    /// Number of entries.
    pub fn n_entries(&self) -> usize {
        self.n_entries
    }

    /// Whether the archive names hosts (else every request is for the
    /// default site, whatever its Host).
    pub fn has_hosts(&self) -> bool {
        self.n_hosts > 0
    }

    /// The site of requests that name no host the archive knows.
    pub fn default_site(&self) -> u32 {
        self.default_site
    }

    /// The site for a `Host` value (port, case and one trailing dot
    /// ignored: `other.com.` is the fully qualified `other.com`, as for
    /// `--site` and in nginx).
    pub fn site_for_host(&self, host: Option<&str>) -> u32 {
        let Some(host) = host.filter(|_| self.n_hosts > 0) else {
            return self.default_site;
        };
        let name = strip_port(host);
        let name = name.strip_suffix('.').unwrap_or(name);
        for i in 0..self.n_hosts {
            let at = self.hosts_at + i * HOST_LEN;
            let b = self.bytes();
            if self
                .string(u32_at(b, at), u32_at(b, at + 4))
                .eq_ignore_ascii_case(name.as_bytes())
            {
                return u32_at(b, at + 8);
            }
        }
        self.default_site
    }

    /// The host names and their sites.
    pub fn hosts(&self) -> Vec<(String, u32)> {
        let b = self.bytes();
        (0..self.n_hosts)
            .map(|i| {
                let at = self.hosts_at + i * HOST_LEN;
                let name = self.string(u32_at(b, at), u32_at(b, at + 4));
                (String::from_utf8_lossy(name).into_owned(), u32_at(b, at + 8))
            })
            .collect()
    }

    fn string(&self, off: u32, len: u32) -> &[u8] {
        let at = self.strings_at + off as usize;
        &self.bytes()[at..at + len as usize]
    }

    /// The entry stored under `key` for `site`.
    pub fn get(&self, site: u32, key: &[u8]) -> Option<Entry<'_>> {
        let mask = self.n_slots - 1;
        let mut slot = (key_hash(site, key) as usize) & mask;
        // At most n_slots probes: a corrupt full table cannot loop forever.
        for _ in 0..self.n_slots {
            let v = u32_at(self.bytes(), self.slots_at + slot * SLOT_LEN) as usize;
            if v == 0 {
                return None;
            }
            let e = Entry::at(self, v - 1);
            if e.site() == site && e.has_key(key) {
                return Some(e);
            }
            slot = (slot + 1) & mask;
        }
        None
    }

    /// [`Archive::get`], asking `memo` first: the entry `get` gave last for
    /// this key and site, if `memo` holds it (`Lookups::recall`). `memo`
    /// holds only what `get` returned for this archive, and an entry has
    /// one key, so a recalled entry is what `get` would give again; it
    /// must be cleared when the archive it was filled from is replaced. A
    /// server answering the same paths again and again skips the hash and
    /// the probe (`get` was 243 instructions a request; the handler's 654
    /// fell to 451, 21 of them `reply_plain`'s: callgrind archive-c50); a
    /// miss costs one compare.
    #[inline(always)]
    pub fn get_remembered(&self, site: u32, key: &[u8], memo: &mut Lookups) -> Option<Entry<'_>> {
        if let Some((idx, _)) = memo.recall(site, key) {
            return Some(Entry::at(self, idx));
        }
        self.get_remembering(site, key, memo)
    }

    /// [`Archive::get`], its entry remembered in `memo` for
    /// [`Lookups::recall`] (a caller that asked `memo` already).
    #[inline]
    pub fn get_remembering(&self, site: u32, key: &[u8], memo: &mut Lookups) -> Option<Entry<'_>> {
        let e = self.get(site, key)?;
        memo.remember(site, key, &e);
        Some(e)
    }

    /// Entry `idx`, one a lookup of this archive gave (`Entry::index`).
    pub(crate) fn entry(&self, idx: usize) -> Entry<'_> {
        Entry::at(self, idx)
    }

    /// Every entry, in archive order.
    pub fn entries(&self) -> impl Iterator<Item = Entry<'_>> {
        (0..self.n_entries).map(move |idx| Entry::at(self, idx))
    }

    /// The `_redirects` proxy rules of every site (status 200, the
    /// location not a path: a URL): site, path (or pattern text) and URL.
    /// Read at each load, to be checked against the server's allow list,
    /// whatever the header's flags say.
    pub fn proxy_rules(&self) -> Vec<(u32, String, String)> {
        self.entries()
            .filter(|e| matches!(e.kind(), KIND_REDIRECT | KIND_PATTERN) && e.status() == 200)
            .filter(|e| !e.location().starts_with(b"/"))
            .map(|e| {
                let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                (e.site(), text(e.path()), text(e.location()))
            })
            .collect()
    }

    /// The pattern redirects of `site`, in `_redirects` order.
    pub fn patterns(&self, site: u32) -> impl Iterator<Item = Entry<'_>> {
        self.patterns
            .iter()
            .filter(move |(s, _)| *s == site)
            .map(move |&(_, idx)| Entry::at(self, idx))
    }

    /// The pattern redirects of `site` with `!`, in `_redirects` order.
    pub fn forced_patterns(&self, site: u32) -> impl Iterator<Item = Entry<'_>> {
        self.forced
            .iter()
            .filter(move |(s, _)| *s == site)
            .map(move |&(_, idx)| Entry::at(self, idx))
    }

    /// Whether any site has a pattern redirect with `!` (else none is
    /// looked for before the lookup).
    pub fn has_forced_patterns(&self) -> bool {
        !self.forced.is_empty()
    }

    /// Whether any site has a `Basic-Auth` rule (else no request's path is
    /// looked at for one).
    pub fn has_auth(&self) -> bool {
        !self.auth.is_empty()
    }

    /// The `Basic-Auth` rules of `site`, in archive order.
    pub fn auth_rules(&self, site: u32) -> impl Iterator<Item = &AuthRule> {
        self.auth.iter().filter(move |(s, _)| *s == site).map(|(_, r)| r)
    }

    /// Every `Basic-Auth` rule, with its site, in archive order.
    pub fn all_auth_rules(&self) -> impl Iterator<Item = (u32, &AuthRule)> {
        self.auth.iter().map(|(s, r)| (*s, r))
    }

    /// The users who may read `key` (a normalised path) of `site`: the
    /// last rule's that covers it, if any.
    pub fn auth_for(&self, site: u32, key: &str) -> Option<&Arc<Users>> {
        self.auth
            .iter()
            .rev()
            .find(|(s, r)| *s == site && r.covers(key))
            .map(|(_, r)| &r.users)
    }

    /// A range of the archive's bytes, shared without copying.
    pub fn shared(&self, off: u64, len: u64) -> SharedBytes {
        let start = off as usize;
        SharedBytes::slice(self.bytes.clone(), start..start + len as usize).expect("validated at open")
    }

    /// The bytes at `off..off+len` (validated to lie in the data).
    pub fn slice(&self, off: u64, len: u64) -> &[u8] {
        &self.bytes()[off as usize..(off + len) as usize]
    }
}

/// Feeds `file[from..to]` to `f` (with each piece's offset), read in 1 MiB
/// pieces.
fn read_file_range(file: &File, from: u64, to: u64, mut f: impl FnMut(u64, &[u8])) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0; 1 << 20];
    let mut at = from;
    while at < to {
        let n = usize::try_from(to - at).unwrap_or(usize::MAX).min(buf.len());
        file.read_exact_at(&mut buf[..n], at)?;
        f(at, &buf[..n]);
        at += n as u64;
    }
    Ok(())
}

impl<'a> Entry<'a> {
    /// Entry `idx` of `archive` (validated at open to lie in the index).
    #[inline]
    fn at(archive: &'a Archive, idx: usize) -> Entry<'a> {
        let at = archive.entries_at + idx * ENTRY_LEN;
        let rec = archive.bytes()[at..at + ENTRY_LEN].try_into().expect("ENTRY_LEN bytes");
        Entry { archive, idx, rec }
    }

    #[inline(always)]
    fn rec(&self) -> &'a [u8; ENTRY_LEN] {
        self.rec
    }

    /// Position in the archive, for per-entry bookkeeping.
    pub fn index(&self) -> usize {
        self.idx
    }

    pub fn site(&self) -> u32 {
        u32_at(self.rec(), 0)
    }

    pub fn kind(&self) -> u8 {
        self.rec()[4]
    }

    pub fn flags(&self) -> u8 {
        self.rec()[5]
    }

    pub fn status(&self) -> u16 {
        u16::from_le_bytes([self.rec()[6], self.rec()[7]])
    }

    /// The path as stored (for patterns, the pattern).
    pub fn path(&self) -> &'a [u8] {
        self.archive.string(u32_at(self.rec(), 8), u32_at(self.rec(), 12))
    }

    /// Whether this entry is stored under `key` (patterns and revoked
    /// paths under a prefix).
    ///
    /// Resources and redirects first, compared whole: every request's
    /// lookup takes that branch, and the prefixed kinds (looked up only
    /// when an archive has them) stay out of its way (matched in one
    /// `match`, they cost a request 21 instructions: bench/instructions.sh
    /// archive-pipe16).
    #[inline(always)]
    fn has_key(&self, key: &[u8]) -> bool {
        let kind = self.kind();
        if kind == KIND_RESOURCE || kind == KIND_REDIRECT {
            return peregrine_files::path::same_key(key, self.path());
        }
        self.has_prefixed_key(kind, key)
    }

    #[cold]
    #[inline(never)]
    fn has_prefixed_key(&self, kind: u8, key: &[u8]) -> bool {
        let prefix: &[u8] = match kind {
            KIND_PATTERN => b"\0pattern",
            KIND_REVOKED => REVOKED_KEY.as_bytes(),
            KIND_AUTH => AUTH_KEY.as_bytes(),
            _ => b"",
        };
        key.strip_prefix(prefix) == Some(self.path())
    }

    pub fn last_modified(&self) -> u64 {
        u64_at(self.rec(), 16)
    }

    pub fn location(&self) -> &'a [u8] {
        self.archive.string(u32_at(self.rec(), 24), u32_at(self.rec(), 28))
    }

    /// Whether variant `i` (0 identity, 1 br, 2 zstd, 3 gzip) is present:
    /// its head length alone read, where `variant` reads all six fields.
    #[inline]
    pub fn has_variant(&self, i: usize) -> bool {
        i < 4 && u32_at(self.rec(), 32 + i * VARIANT_LEN + 32) != 0
    }

    /// Variant `i` (0 identity, 1 br, 2 zstd, 3 gzip), if present.
    #[inline]
    pub fn variant(&self, i: usize) -> Option<Variant> {
        let v = variant_at(self.rec(), 32 + i * VARIANT_LEN);
        (v.head_len != 0).then_some(v)
    }
}

/// Inlined always: called out of line (as `#[inline]` left it), it cost
/// an archive answer 35 instructions (callgrind, archive-c50).
#[inline(always)]
fn variant_at(b: &[u8], at: usize) -> Variant {
    Variant {
        body_off: u64_at(b, at),
        body_len: u64_at(b, at + 8),
        body_hash: u64_at(b, at + 16),
        head_off: u64_at(b, at + 24),
        head_len: u32_at(b, at + 32),
        head304_len: u32_at(b, at + 36),
    }
}

/// `example.com:8080` → `example.com`; `[::1]:80` → `[::1]`.
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |i| &host[..=i]);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::{VariantIn, Writer};

    /// `has_variant` reads one field of the record where `variant` reads
    /// six: both must say the same for every slot, present or not, and
    /// the fields read through the record found at lookup must be the
    /// entry's own.
    #[test]
    fn has_variant_agrees_with_variant_and_fields_are_the_entrys() {
        let t = test_support::Scratch::new("read-variants");
        let path = t.path("a.prg");
        let mut w = Writer::new(std::fs::File::create(&path).unwrap()).unwrap();
        let v = |body: &'static [u8]| VariantIn {
            body,
            head_200: b"Content-Type: text/plain\r\n",
            head_304: b"",
        };
        // Identity and zstd (slot 2) only.
        w.add_resource(0, "/a.txt", 0, 7, [Some(v(b"aaaa")), None, Some(v(b"zz")), None])
            .unwrap();
        w.add_resource(0, "/b.txt", 0, 9, [Some(v(b"b")), None, None, None])
            .unwrap();
        w.finish().unwrap();
        let archive = Archive::from_bytes(std::fs::read(&path).unwrap()).unwrap();
        let a = archive.get(archive.default_site(), b"/a.txt").unwrap();
        let b = archive.get(archive.default_site(), b"/b.txt").unwrap();
        for (e, present) in [(a, [true, false, true, false]), (b, [true, false, false, false])] {
            for (i, &p) in present.iter().enumerate() {
                assert_eq!(e.has_variant(i), p, "variant {i}");
                assert_eq!(e.variant(i).is_some(), p, "variant {i}");
            }
            assert!(!e.has_variant(4), "past the four slots");
            assert_eq!(e.kind(), KIND_RESOURCE);
        }
        assert_eq!((a.path(), a.last_modified()), (&b"/a.txt"[..], 7));
        assert_eq!((b.path(), b.last_modified()), (&b"/b.txt"[..], 9));
        assert_eq!(a.variant(2).unwrap().body_len, 2);
        assert!(archive.get(archive.default_site(), b"/c.txt").is_none());
    }

    /// `get_remembered` finds what `get` finds, whatever was asked before
    /// with the same memo: paths sharing a memo slot (same length and
    /// last byte), paths of another site, missing ones, in turn.
    #[test]
    fn a_remembered_lookup_finds_what_get_finds() {
        let t = test_support::Scratch::new("read-remembered");
        let path = t.path("a.prg");
        let mut w = Writer::new(std::fs::File::create(&path).unwrap()).unwrap();
        let v = || VariantIn {
            body: b"x",
            head_200: b"Content-Type: text/plain\r\n",
            head_304: b"",
        };
        // `/a.txt`, `/b.txt`, `/c.txt` share a slot (6 bytes, `t`);
        // site 1 has `/a.txt` too.
        let keys = [
            "/a.txt",
            "/b.txt",
            "/c.txt",
            "/",
            "/index.html",
            "/a/b/c/d/e/f/g/h/i/j.txt",
            // Longer than a memo slot's copy: found, never recalled.
            "/a-path-longer-than-the-forty-eight-bytes-a-slot-keeps.txt",
        ];
        for (i, key) in keys.iter().enumerate() {
            w.add_resource(0, key, 0, i as u64, [Some(v()), None, None, None])
                .unwrap();
        }
        // A redirect: its kind is recalled with it.
        w.add_redirect(0, KIND_REDIRECT, 0, "/old", 301, "/new").unwrap();
        w.add_resource(1, "/a.txt", 0, 99, [Some(v()), None, None, None])
            .unwrap();
        w.finish().unwrap();
        let archive = Archive::from_bytes(std::fs::read(&path).unwrap()).unwrap();
        let mut memo = Lookups::default();
        let asked = [
            "/a.txt",
            "/a.txt",
            "/b.txt",
            "/a.txt",
            "/d.txt",
            "/c.txt",
            "/",
            "/",
            "/index.html",
        ];
        let asked = asked
            .iter()
            .chain(&keys)
            .chain(&["/x.txt", "/a.txt", "", "/a.tx", "/old"]);
        for site in [0, 1, 0, 1, 2] {
            for key in asked.clone() {
                let want = archive.get(site, key.as_bytes()).map(|e| (e.index(), e.kind()));
                let got = archive
                    .get_remembered(site, key.as_bytes(), &mut memo)
                    .map(|e| (e.index(), e.kind()));
                assert_eq!(got, want, "site {site} {key}");
                // Just found, it is recalled (the entry and its kind),
                // unless it is too long to keep; a miss never is.
                let recalled = memo.recall(site, key.as_bytes());
                let kept = key.len() <= Lookups::KEY_BYTES_MAX;
                assert_eq!(recalled, want.filter(|_| kept), "site {site} {key}: recalled");
            }
        }
        assert_eq!(archive.get(0, b"/old").map(|e| e.kind()), Some(KIND_REDIRECT));
        assert!(archive.get(1, b"/a.txt").is_some() && archive.get(1, b"/b.txt").is_none());
    }
}
