//! Accept-Encoding negotiation on arbitrary values: never panics, chooses
//! only a coding that is available, says identity when the field is
//! absent, and the value read once (`accepted`) answers as `negotiate`
//! does: the same choice, and a coding acceptable exactly when it alone
//! would be chosen; its memo of the last value answers as a fresh read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_files::encoding::{accepted, accepted_afresh, negotiate, Encoding};

fuzz_target!(|input: (u8, &[u8])| {
    let (mask, value) = input;
    // Any subset of the codings on disk, in Encoding::ALL's order.
    let available: Vec<Encoding> = Encoding::ALL
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, e)| *e)
        .collect();
    let chosen = negotiate(Some(value), &available);
    if let Some(c) = chosen {
        assert!(available.contains(&c), "{c:?} is not among {available:?}");
    }
    assert_eq!(negotiate(Some(value), &available), chosen, "not deterministic");
    assert_eq!(negotiate(None, &available), None);
    let read = accepted(Some(value));
    // The thread's memo (the last value read) answers as a fresh read.
    assert_eq!(read, accepted_afresh(value));
    assert_eq!(read.choose(&available), chosen);
    for e in Encoding::ALL {
        assert_eq!(read.contains(e), negotiate(Some(value), &[e]) == Some(e), "{e:?}");
    }
});
