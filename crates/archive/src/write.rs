//! Writes an archive (FORMAT.md): data streamed to the file as it comes,
//! bodies and heads deduplicated, the index built at the end, the header
//! written last, then, for a signed archive, the signature trailer over
//! everything before it. The caller writes to a temporary name and renames.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};

use crate::format::*;
use crate::sign::{Digest, Seal};

/// One variant to store: its body and its 200 and 304 header blocks.
pub struct VariantIn<'a> {
    pub body: &'a [u8],
    pub head_200: &'a [u8],
    pub head_304: &'a [u8],
}

#[derive(Clone, Copy, Default)]
struct VariantOut {
    body_off: u64,
    body_len: u64,
    body_hash: u64,
    head_off: u64,
    head_len: u32,
    head304_len: u32,
}

struct EntryOut {
    site: u32,
    kind: u8,
    flags: u8,
    status: u16,
    path: (u32, u32),
    last_modified: u64,
    location: (u32, u32),
    variants: [VariantOut; N_VARIANTS],
}

/// An archive being written.
pub struct Writer {
    out: BufWriter<File>,
    pos: u64,
    data_hash: xxhash_rust::xxh3::Xxh3,
    blobs: HashMap<u128, (u64, u64)>,
    entries: Vec<EntryOut>,
    keys: HashMap<(u32, Vec<u8>), usize>,
    strings: Vec<u8>,
    hosts: Vec<(u32, u32, u32)>,
    default_site: u32,
    /// The header's flags: `HEADER_FLAG_RULES` once a rule needs it.
    header_flags: u32,
    /// Bytes of body data before deduplication, for the report.
    pub bytes_in: u64,
}

impl Writer {
    /// Starts an archive in `file` (truncated; opened for reading too if
    /// it is to be signed: `finish_sealed` reads it back).
    pub fn new(file: File) -> io::Result<Self> {
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(&[0; HEADER_LEN])?;
        Ok(Writer {
            out,
            pos: HEADER_LEN as u64,
            data_hash: xxhash_rust::xxh3::Xxh3::new(),
            header_flags: 0,
            blobs: HashMap::new(),
            entries: Vec::new(),
            keys: HashMap::new(),
            strings: Vec::new(),
            hosts: Vec::new(),
            default_site: 0,
            bytes_in: 0,
        })
    }

    /// Stores bytes once; the same bytes again return the same place.
    fn blob(&mut self, bytes: &[u8]) -> io::Result<(u64, u64)> {
        let key = xxhash_rust::xxh3::xxh3_128(bytes);
        if let Some(&(off, len)) = self.blobs.get(&key) {
            if len == bytes.len() as u64 {
                return Ok((off, len));
            }
        }
        // A body that will go out by sendfile starts on a page (BODY_ALIGN
        // says why); the zeros before it are part of the data region.
        if bytes.len() as u64 > MAP_BODY_BYTES_MAX && self.pos % BODY_ALIGN != 0 {
            let pad = [0u8; BODY_ALIGN as usize];
            let n = (BODY_ALIGN - self.pos % BODY_ALIGN) as usize;
            self.out.write_all(&pad[..n])?;
            self.data_hash.update(&pad[..n]);
            self.pos += n as u64;
        }
        let off = self.pos;
        self.out.write_all(bytes)?;
        self.data_hash.update(bytes);
        self.pos += bytes.len() as u64;
        self.blobs.insert(key, (off, bytes.len() as u64));
        Ok((off, bytes.len() as u64))
    }

    fn string(&mut self, s: &[u8]) -> io::Result<(u32, u32)> {
        let off = u32::try_from(self.strings.len()).map_err(|_| too_big("string table"))?;
        let len = u32::try_from(s.len()).map_err(|_| too_big("string"))?;
        self.strings.extend_from_slice(s);
        Ok((off, len))
    }

    fn push(&mut self, entry: EntryOut, key: &[u8]) -> io::Result<()> {
        let k = (entry.site, key.to_vec());
        if self.keys.contains_key(&k) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "two entries for {:?} in site {}",
                    String::from_utf8_lossy(key),
                    entry.site
                ),
            ));
        }
        self.keys.insert(k, self.entries.len());
        self.entries.push(entry);
        Ok(())
    }

    /// Whether site `site` already has an entry at `path`.
    pub fn has(&self, site: u32, path: &str) -> bool {
        self.keys.contains_key(&(site, path.as_bytes().to_vec()))
    }

    /// The `Location` of the server's own 301 at `path` (a directory's, or
    /// clean URLs' canonical form: those that keep the query), if that is
    /// the entry there: what `pack` follows to find redirect loops.
    pub fn own_redirect(&self, site: u32, path: &str) -> Option<String> {
        let e = &self.entries[*self.keys.get(&(site, path.as_bytes().to_vec()))?];
        if e.kind != KIND_REDIRECT || e.flags & FLAG_KEEP_QUERY == 0 {
            return None;
        }
        let (off, len) = (e.location.0 as usize, e.location.1 as usize);
        Some(String::from_utf8_lossy(&self.strings[off..off + len]).into_owned())
    }

    /// Whether the entry at `path` is a resource (a file answers there).
    pub fn is_resource(&self, site: u32, path: &str) -> bool {
        self.keys
            .get(&(site, path.as_bytes().to_vec()))
            .is_some_and(|&i| self.entries[i].kind == KIND_RESOURCE)
    }

    /// Adds a resource at `path` (decoded, starting with `/`). `variants`
    /// are identity, br, zstd, gzip; identity must be present.
    pub fn add_resource(
        &mut self,
        site: u32,
        path: &str,
        flags: u8,
        last_modified: u64,
        variants: [Option<VariantIn<'_>>; N_VARIANTS],
    ) -> io::Result<()> {
        assert!(variants[0].is_some(), "identity variant required");
        let mut out = [VariantOut::default(); N_VARIANTS];
        for (slot, v) in out.iter_mut().zip(variants.iter()) {
            let Some(v) = v else { continue };
            self.bytes_in += v.body.len() as u64;
            let (body_off, body_len) = self.blob(v.body)?;
            let mut heads = Vec::with_capacity(v.head_200.len() + v.head_304.len());
            heads.extend_from_slice(v.head_200);
            heads.extend_from_slice(v.head_304);
            let (head_off, _) = self.blob(&heads)?;
            *slot = VariantOut {
                body_off,
                body_len,
                body_hash: hash(v.body),
                head_off,
                head_len: u32::try_from(v.head_200.len()).map_err(|_| too_big("head"))?,
                head304_len: u32::try_from(v.head_304.len()).map_err(|_| too_big("head"))?,
            };
        }
        let path_s = self.string(path.as_bytes())?;
        self.push(
            EntryOut {
                site,
                kind: KIND_RESOURCE,
                flags,
                status: 200,
                path: path_s,
                last_modified,
                location: (0, 0),
                variants: out,
            },
            path.as_bytes(),
        )
    }

    /// Adds a redirect from `path` to `location` (`kind` KIND_REDIRECT for
    /// an exact path, KIND_PATTERN for a `_redirects` pattern).
    pub fn add_redirect(
        &mut self,
        site: u32,
        kind: u8,
        flags: u8,
        path: &str,
        status: u16,
        location: &str,
    ) -> io::Result<()> {
        if matches!(status, 200 | 404) || (kind == KIND_PATTERN && (flags & FLAG_FORCED != 0 || path.contains('?'))) {
            self.header_flags |= HEADER_FLAG_RULES;
        }
        if status == 200 && !location.starts_with('/') {
            self.header_flags |= HEADER_FLAG_PROXY;
        }
        let path_s = self.string(path.as_bytes())?;
        let location_s = self.string(location.as_bytes())?;
        // Patterns are keyed apart from paths, so `/a` and the pattern `/a`
        // cannot collide.
        let key = if kind == KIND_PATTERN {
            format!("\0pattern{path}")
        } else {
            path.to_owned()
        };
        self.push(
            EntryOut {
                site,
                kind,
                flags,
                status,
                path: path_s,
                last_modified: 0,
                location: location_s,
                variants: [VariantOut::default(); N_VARIANTS],
            },
            key.as_bytes(),
        )
    }

    /// Records `path` as revoked in `site` (`pack --revoke`): a previous
    /// generation kept after a swap never answers it (a path ending in `/`:
    /// nothing below it).
    pub fn add_revoked(&mut self, site: u32, path: &str) -> io::Result<()> {
        self.header_flags |= HEADER_FLAG_REVOKED;
        let path_s = self.string(path.as_bytes())?;
        self.push(
            EntryOut {
                site,
                kind: KIND_REVOKED,
                flags: 0,
                status: 0,
                path: path_s,
                last_modified: 0,
                location: (0, 0),
                variants: [VariantOut::default(); N_VARIANTS],
            },
            format!("{REVOKED_KEY}{path}").as_bytes(),
        )
    }

    /// Adds a `Basic-Auth` rule: `pattern` protected for `users` (their
    /// `Users::text`, hashes only), flagged `FLAG_FROM_PLAIN` when some
    /// passwords were plain in `_headers`. Rules are added in `_headers`
    /// order (a reader takes the last that matches), each pattern once
    /// (`parse_headers` keeps a pattern's last rule).
    pub fn add_auth(&mut self, site: u32, pattern: &str, users: &str, from_plain: bool) -> io::Result<()> {
        self.header_flags |= HEADER_FLAG_AUTH;
        let key = format!("{AUTH_KEY}{pattern}");
        let path_s = self.string(pattern.as_bytes())?;
        let location_s = self.string(users.as_bytes())?;
        self.push(
            EntryOut {
                site,
                kind: KIND_AUTH,
                flags: if from_plain { FLAG_FROM_PLAIN } else { 0 },
                status: 401,
                path: path_s,
                last_modified: 0,
                location: location_s,
                variants: [VariantOut::default(); N_VARIANTS],
            },
            key.as_bytes(),
        )
    }

    /// Routes requests for `host` (lower case, no port) to `site`.
    pub fn add_host(&mut self, host: &str, site: u32) -> io::Result<()> {
        // Stored as requests are looked up: no trailing dot.
        let host = host.strip_suffix('.').unwrap_or(host);
        let (off, len) = self.string(host.to_ascii_lowercase().as_bytes())?;
        self.hosts.push((off, len, site));
        Ok(())
    }

    /// The site for requests whose Host names no site.
    pub fn set_default_site(&mut self, site: u32) {
        self.default_site = site;
    }

    /// Writes the index and the header. Returns the archive's length.
    pub fn finish(self) -> io::Result<u64> {
        self.finish_sealed(None)
    }

    /// Writes the index and the header, then, with a seal, the signature
    /// trailer over every byte before it (read back from the file: the
    /// header, written last, is at its start). Returns the archive's
    /// length.
    pub fn finish_sealed(mut self, seal: Option<&Seal>) -> io::Result<u64> {
        let index_off = self.pos;
        let n_entries = self.entries.len();
        let n_slots = (n_entries * 2).max(8).next_power_of_two();
        let hosts_off = INDEX_HEADER_LEN;
        let slots_off = hosts_off + self.hosts.len() * HOST_LEN;
        let entries_off = slots_off + n_slots * SLOT_LEN;
        let strings_off = entries_off + n_entries * ENTRY_LEN;
        let index_len = strings_off + self.strings.len();
        let mut index = vec![0u8; index_len];
        let n = |v: usize, what: &str| u32::try_from(v).map_err(|_| too_big(what));
        put_u32(&mut index, 0, n(self.hosts.len(), "hosts")?);
        put_u32(&mut index, 4, n(n_slots, "slots")?);
        put_u32(&mut index, 8, n(n_entries, "entries")?);
        put_u32(&mut index, 12, self.default_site);
        put_u64(&mut index, 16, hosts_off as u64);
        put_u64(&mut index, 24, slots_off as u64);
        put_u64(&mut index, 32, entries_off as u64);
        put_u64(&mut index, 40, strings_off as u64);
        put_u64(&mut index, 48, self.strings.len() as u64);
        for (i, &(off, len, site)) in self.hosts.iter().enumerate() {
            let at = hosts_off + i * HOST_LEN;
            put_u32(&mut index, at, off);
            put_u32(&mut index, at + 4, len);
            put_u32(&mut index, at + 8, site);
        }
        // Slots, in entry order: deterministic.
        let mut keys: Vec<(&(u32, Vec<u8>), &usize)> = self.keys.iter().collect();
        keys.sort_by_key(|(_, &i)| i);
        for ((site, key), &i) in keys {
            let mut slot = (key_hash(*site, key) as usize) & (n_slots - 1);
            while u32_at(&index, slots_off + slot * SLOT_LEN) != 0 {
                slot = (slot + 1) & (n_slots - 1);
            }
            put_u32(&mut index, slots_off + slot * SLOT_LEN, n(i + 1, "entries")?);
        }
        for (i, e) in self.entries.iter().enumerate() {
            let at = entries_off + i * ENTRY_LEN;
            put_u32(&mut index, at, e.site);
            index[at + 4] = e.kind;
            index[at + 5] = e.flags;
            index[at + 6..at + 8].copy_from_slice(&e.status.to_le_bytes());
            put_u32(&mut index, at + 8, e.path.0);
            put_u32(&mut index, at + 12, e.path.1);
            put_u64(&mut index, at + 16, e.last_modified);
            put_u32(&mut index, at + 24, e.location.0);
            put_u32(&mut index, at + 28, e.location.1);
            for (j, v) in e.variants.iter().enumerate() {
                let v_at = at + 32 + j * VARIANT_LEN;
                put_u64(&mut index, v_at, v.body_off);
                put_u64(&mut index, v_at + 8, v.body_len);
                put_u64(&mut index, v_at + 16, v.body_hash);
                put_u64(&mut index, v_at + 24, v.head_off);
                put_u32(&mut index, v_at + 32, v.head_len);
                put_u32(&mut index, v_at + 36, v.head304_len);
            }
        }
        index[strings_off..].copy_from_slice(&self.strings);
        self.out.write_all(&index)?;
        let signed_len = index_off + index_len as u64;
        let file_len = signed_len + if seal.is_some() { TRAILER_LEN as u64 } else { 0 };
        if seal.is_some() {
            self.header_flags |= HEADER_FLAG_SIGNED;
        }
        let mut header = [0u8; HEADER_LEN];
        header[..8].copy_from_slice(MAGIC);
        put_u32(&mut header, 8, VERSION);
        put_u32(&mut header, 12, self.header_flags);
        put_u64(&mut header, 16, file_len);
        put_u64(&mut header, 24, index_off);
        put_u64(&mut header, 32, index_len as u64);
        put_u64(&mut header, 40, hash(&index));
        put_u64(&mut header, 48, self.data_hash.digest());
        let header_hash = hash(&header[..56]);
        put_u64(&mut header, 56, header_hash);
        let mut file = self.out.into_inner().map_err(|e| e.into_error())?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&header)?;
        if let Some(seal) = seal {
            let mut digest = Digest::new();
            read_into(&file, signed_len, |bytes| digest.update(bytes))?;
            let trailer = seal.sign(digest).trailer();
            file.seek(SeekFrom::Start(signed_len))?;
            file.write_all(&trailer)?;
        }
        file.sync_all()?;
        Ok(file_len)
    }
}

/// Feeds `file[..len]` to `f`, 1 MiB at a time.
fn read_into(file: &File, len: u64, mut f: impl FnMut(&[u8])) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0; 1 << 20];
    let mut at = 0;
    while at < len {
        let n = usize::try_from(len - at).unwrap_or(usize::MAX).min(buf.len());
        file.read_exact_at(&mut buf[..n], at)?;
        f(&buf[..n]);
        at += n as u64;
    }
    Ok(())
}

fn too_big(what: &str) -> io::Error {
    io::Error::other(format!("archive too large: {what} exceed the format's 32-bit counts"))
}
