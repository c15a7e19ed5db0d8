//! The byte layout of FORMAT.md, as constants and little-endian helpers.
//! Both the writer and the reader use these; nothing else knows offsets.

pub const MAGIC: &[u8; 8] = b"PRGNARC\0";
pub const VERSION: u32 = 1;
pub const HEADER_LEN: usize = 64;
pub const INDEX_HEADER_LEN: usize = 64;
pub const HOST_LEN: usize = 16;
pub const SLOT_LEN: usize = 4;
pub const ENTRY_LEN: usize = 192;
pub const VARIANT_LEN: usize = 40;
/// Variants per entry: identity, br, zstd, gzip.
pub const N_VARIANTS: usize = 4;
/// Largest body sent from the map (a larger one goes out from the file's
/// descriptor: sendfile, or pread under TLS and HTTP/2, so its offset in
/// the file matters: `BODY_ALIGN`). The engine copies a body this small
/// into its output buffer while the request is handled (its
/// `INLINE_BODY_BYTES_MAX`), so it costs a copy of mapped bytes; a larger
/// one would keep the map's pages in play for as long as a slow client
/// takes.
pub const MAP_BODY_BYTES_MAX: u64 = 16 * 1024;
/// Where `pack` starts each body larger than `MAP_BODY_BYTES_MAX`: on a
/// multiple of this in the file (a page). Measured over loopback (kernel
/// 6.18, BBR): 64 KiB sent with sendfile after a 359-byte head cost
/// 5.2-5.6 µs an answer from offsets 0 to 400 into a page, and 18.5-18.8
/// µs from 512 to 4,000 (BENCHMARKS.md). Readers do not rely on it: older
/// archives are served as they are.
pub const BODY_ALIGN: u64 = 4096;

pub const KIND_RESOURCE: u8 = 1;
pub const KIND_REDIRECT: u8 = 2;
/// A `_redirects` rule with `*` or `:placeholders`, matched at lookup.
pub const KIND_PATTERN: u8 = 3;
/// A path `pack --revoke` named: never answered by a previous generation
/// kept after a swap (`serve --keep-previous`). Stored under
/// [`REVOKED_KEY`] and the path; a path ending in `/` revokes everything
/// below it. It answers nothing itself.
pub const KIND_REVOKED: u8 = 4;
/// A `_headers` `Basic-Auth` rule: its pattern (path) protects what it
/// matches, its users are the location, `user:hash` pairs separated by
/// spaces (hashes only: `pack` hashes plain passwords), status 401.
pub const KIND_AUTH: u8 = 5;

pub const FLAG_WILDCARD: u8 = 1;
pub const FLAG_NOT_FOUND: u8 = 2;
/// A redirect whose `Location` gets the request's query (`?...`) appended:
/// a directory's `/dir` → `/dir/`, as `serve DIR` answers it. Readers that
/// predate the bit drop the query, as they always did.
pub const FLAG_KEEP_QUERY: u8 = 4;

/// A redirect that is clean URLs' canonical form of a page (`/a.html` →
/// `/a`): a `_redirects` rewrite to the page follows it once, as `serve
/// DIR` serves the file a rewrite names.
pub const FLAG_CANONICAL: u8 = 8;
/// A `_redirects` pattern with `!`: matched before any lookup.
pub const FLAG_FORCED: u8 = 16;
/// A `Basic-Auth` rule some of whose passwords were written in the clear
/// in `_headers` (and hashed by `pack`): worth a warning where they would
/// be sent in the clear.
pub const FLAG_FROM_PLAIN: u8 = 32;

/// Header flag: the archive holds `_redirects` rules a reader must know
/// to answer right (status 200 rewrites, 404 rules, forced patterns, query
/// conditions). A reader that predates them refuses the archive (unknown
/// flags) rather than sending a 200 with a `Location`.
pub const HEADER_FLAG_RULES: u32 = 1;
/// Header flag: the index holds revoked paths (`KIND_REVOKED`). A reader
/// that predates them refuses the archive (unknown flags) rather than
/// meeting an entry of a kind it does not know.
pub const HEADER_FLAG_REVOKED: u32 = 2;
/// Header flag: a signature trailer ([`TRAILER_LEN`] bytes) ends the file,
/// after the index; `file_len` counts it. A reader that predates it
/// refuses the archive (unknown flags), where it would have said that the
/// index does not end the file.
pub const HEADER_FLAG_SIGNED: u32 = 4;
/// Header flag: the archive holds `Basic-Auth` rules (`KIND_AUTH`). A
/// reader that predates them refuses the archive rather than serve the
/// protected pages to anyone.
pub const HEADER_FLAG_AUTH: u32 = 8;
/// Header flag: the archive holds `_redirects` proxy rules (status 200,
/// the location an `http[s]://` URL). A reader that predates them
/// refuses the archive rather than take the URL for a path; a reader
/// that knows them checks each against its own operator's allow list at
/// every load (the packer's list is not the server's).
pub const HEADER_FLAG_PROXY: u32 = 16;
/// The header flags this reader knows.
pub const HEADER_FLAGS_KNOWN: u32 =
    HEADER_FLAG_RULES | HEADER_FLAG_REVOKED | HEADER_FLAG_SIGNED | HEADER_FLAG_AUTH | HEADER_FLAG_PROXY;

/// The signature trailer: magic, version, algorithm, key id, created,
/// deploy number (the signed fields, `TRAILER_SIGNED_LEN` bytes), then the
/// 64-byte signature.
pub const TRAILER_MAGIC: &[u8; 8] = b"PRGNSIG\0";
pub const TRAILER_VERSION: u32 = 1;
/// The trailer's `algorithm`: Ed25519 (RFC 8032), the only one.
pub const ALGORITHM_ED25519: u32 = 1;
pub const TRAILER_LEN: usize = 104;
pub const TRAILER_SIGNED_LEN: usize = 40;
/// What the signature signs, before the digest: no signature over
/// anything else can pass for an archive's.
pub const SIGNATURE_DOMAIN: &[u8] = b"peregrine archive signature v1\0";

/// The key a wildcard file is stored under: its folder and this suffix.
pub const WILDCARD_KEY: &str = "\0wildcard";
/// The key a revoked path is stored under: this prefix and the path
/// (`\0revoked/leak.txt`, `\0revoked/private/`).
pub const REVOKED_KEY: &str = "\0revoked";
/// The key a `Basic-Auth` rule is stored under: this, then its pattern
/// (`\0auth/admin/*`).
pub const AUTH_KEY: &str = "\0auth";
/// The key of a site's not-found page.
pub const NOT_FOUND_KEY: &str = "/\0not-found";
/// The key a folder's not-found page (`404.html`) is stored under: its
/// folder and this suffix (the root's is [`NOT_FOUND_KEY`]).
pub const NOT_FOUND_SUFFIX: &str = "\0not-found";

/// XXH3-64 with seed 0, the one hash of the format.
pub fn hash(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// The slot hash of a site and path: XXH3-64 of the site (4 bytes, little
/// endian) followed by the path. Inlined always: with `copy_short` in
/// it, `#[inline]` left it a call of its own (19 instructions of entry
/// and exit a lookup, callgrind archive-c50).
#[inline(always)]
pub fn key_hash(site: u32, path: &[u8]) -> u64 {
    // One call over the bytes joined on the stack: the streaming hasher
    // (same result) cost 1.6 % of a pipelined archive profile, for its
    // 256-byte buffer and state set up per lookup.
    // Most paths are short: a 64-byte buffer to zero, not 256, and the
    // path copied in by `copy_short`, not a call of libc's memcpy (whose
    // call and length dispatch cost about 20 instructions a lookup).
    const SHORT_BYTES_MAX: usize = 64;
    const JOINED_BYTES_MAX: usize = 256;
    if path.len() <= SHORT_BYTES_MAX - 4 {
        let mut joined = [0u8; SHORT_BYTES_MAX];
        joined[..4].copy_from_slice(&site.to_le_bytes());
        copy_short(&mut joined[4..4 + path.len()], path);
        return hash(&joined[..4 + path.len()]);
    }
    if path.len() <= JOINED_BYTES_MAX - 4 {
        let mut joined = [0u8; JOINED_BYTES_MAX];
        joined[..4].copy_from_slice(&site.to_le_bytes());
        joined[4..4 + path.len()].copy_from_slice(path);
        return hash(&joined[..4 + path.len()]);
    }
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&site.to_le_bytes());
    h.update(path);
    h.digest()
}

/// Copies `src` (at most 60 bytes) into `dst`, of the same length, in
/// fixed-size pieces that may overlap (as memcpy does for small lengths,
/// without its call): two pieces of 16, 8, 4 or 2 bytes cover any length
/// from 2 to 32, up to two more of 16 the rest.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    debug_assert!(n == dst.len() && n <= 60);
    if n >= 16 {
        // Unrolled: a loop of copies may be turned back into a memcpy call.
        for at in [0, 16, 32] {
            if at + 16 < n {
                dst[at..at + 16].copy_from_slice(&src[at..at + 16]);
            }
        }
        dst[n - 16..].copy_from_slice(&src[n - 16..]);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..].copy_from_slice(&src[n - 4..]);
    } else if n >= 2 {
        dst[..2].copy_from_slice(&src[..2]);
        dst[n - 2..].copy_from_slice(&src[n - 2..]);
    } else if n == 1 {
        dst[0] = src[0];
    }
}

/// The strong entity tag of a body.
pub fn etag(body_len: u64, body_hash: u64) -> String {
    format!("\"{body_len:x}-{body_hash:016x}\"")
}

pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

pub fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_hash_is_the_hash_of_site_and_path_joined() {
        // Every length `copy_short` handles (each of its branches and
        // overlaps), then the longer ones.
        let lens = (0..=64).chain([251, 252, 253, 300, 5000]);
        for len in lens {
            let path: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let mut joined = 3u32.to_le_bytes().to_vec();
            joined.extend_from_slice(&path);
            assert_eq!(key_hash(3, &path), hash(&joined), "{len}");
        }
    }
}
