//! The path normaliser must never panic, and what it returns must be safe to
//! join to a root: no `.`/`..`/empty segments, no leading `/`, no NUL; a
//! raw backslash refused (`%5C` is a byte of a name, one segment's on
//! Linux); and normalising is idempotent. A path `is_key` takes as its
//! own key (looked up without normalising) is exactly what normalising gives.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_files::path::{encode, is_key, normalize};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = normalize(data) else { return };
    if let Ok(raw) = std::str::from_utf8(data) {
        if is_key(raw) {
            assert_eq!(p.key(), raw);
        }
    }
    assert!(!p.rel.starts_with('/'));
    assert!(!p.rel.contains('\0') && !data.contains(&b'\\'));
    for seg in p.rel.split('/') {
        assert!(p.rel.is_empty() || !matches!(seg, "" | "." | ".."), "{:?}", p.rel);
    }
    let again = normalize(encode(&format!("/{}", p.rel)).as_bytes()).expect("encoded paths normalise");
    assert_eq!(again.rel, p.rel);
});
