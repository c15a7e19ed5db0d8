//! Peregrine site archives: `peregrine pack` writes a whole site as
//! pre-built responses into one file (FORMAT.md); `peregrine serve` maps it
//! and answers from memory, and swaps it atomically when the file is
//! replaced.
//!
//! - [`pack`]: the tree walk, the site conventions, compression, the atomic
//!   write;
//! - `write` / [`read`]: the format, both ways; [`read::Archive::open`]
//!   validates everything a lookup relies on;
//! - [`sign`]: signed archives: keys, the signature trailer, the check;
//! - [`ArchiveServer`]: the handler: lookup, then the same negotiation,
//!   conditional and range logic as `serve DIR` (`peregrine_files`), and the
//!   hot swap.

#![deny(unsafe_code)]

pub mod format;
mod map;
pub mod pack;
pub mod pattern;
pub mod read;
mod serve;
pub mod sign;
pub mod write;

pub use pack::{pack, PackOptions, PackStats, SymlinkSkip};
pub use read::{Archive, Invalid, Mode};
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use serve::test_hooks;
pub use serve::{
    is_content_hashed, proxy_rules_allowed, ArchiveServer, ServeOptions, KEEP_PREVIOUS_MAX, PREVIOUS_BYTES_MAX,
};
pub use sign::{KeyId, PublicKey, Seal, SigningKey, Verified};

/// Whether the file at `path` starts like an archive (for `serve`, which
/// takes a directory or an archive).
pub fn is_archive(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| &magic == format::MAGIC)
}
