//! The archive's bytes: a read-only memory map of the file, or a copy in
//! the heap (`--in-memory`). The only `unsafe` in this crate.
//!
//! The contract of a map: the file must not shrink while it is mapped, or
//! touching a page past the new end raises SIGBUS. Peregrine replaces
//! archives by `rename` (a new inode; the old one stays whole while mapped),
//! which is safe. Rewriting the file in place is the hazard; see the
//! `read` module and ARCHITECTURE.md for the defence and its limits.

use std::fs::File;
use std::io;

/// Bytes of an open archive.
pub enum Backing {
    Map(memmap2::Mmap),
    Heap(Vec<u8>),
}

impl AsRef<[u8]> for Backing {
    fn as_ref(&self) -> &[u8] {
        match self {
            Backing::Map(m) => m,
            Backing::Heap(v) => v,
        }
    }
}

/// Maps `file` read-only (`populate`: fault every page in now).
#[allow(unsafe_code)]
pub fn map(file: &File, populate: bool) -> io::Result<Backing> {
    let mut opts = memmap2::MmapOptions::new();
    if populate {
        opts.populate();
    }
    // SAFETY: the map is read-only and private to this process; Rust never
    // sees the bytes change because archives are replaced by rename, not
    // rewritten (the hazard of an in-place rewrite is handled by the
    // caller, which validates lengths against the file before use).
    let map = unsafe { opts.map(file)? };
    Ok(Backing::Map(map))
}
