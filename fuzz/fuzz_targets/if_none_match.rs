//! If-None-Match (and If-Match) lists on arbitrary values: never panics;
//! If-None-Match alone never yields 412, If-Match alone never 304; `*` and
//! the representation's own tag always match.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use peregrine_files::conditional::{evaluate, if_range_holds, Preconditions, Verdict};

const ETAG: &str = "\"3f2a1c0de5\"";

fuzz_target!(|value: &[u8]| {
    let mtime = UNIX_EPOCH + Duration::from_secs(784_111_777);
    let none_match = Preconditions {
        if_none_match: Some(value),
        ..Preconditions::default()
    };
    let verdict = evaluate(&none_match, ETAG, mtime);
    assert_ne!(verdict, Verdict::PreconditionFailed);
    let if_match = Preconditions {
        if_match: Some(value),
        ..Preconditions::default()
    };
    assert_ne!(evaluate(&if_match, ETAG, mtime), Verdict::NotModified);
    let _ = if_range_holds(Some(value), ETAG, mtime);
    // The tag (or `*`) as one element of the list always matches.
    let mut list = value.to_vec();
    list.extend_from_slice(b", ");
    list.extend_from_slice(ETAG.as_bytes());
    if !value.contains(&b'"') {
        let listed = Preconditions {
            if_none_match: Some(&list),
            ..Preconditions::default()
        };
        assert_eq!(
            evaluate(&listed, ETAG, mtime),
            Verdict::NotModified,
            "{:?}",
            String::from_utf8_lossy(&list)
        );
    }
});
