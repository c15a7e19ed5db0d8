//! The one normal form of Host, :authority and SNI (`peregrine::host`)
//! must never panic; what it gives is within the name limits, in the
//! hostname alphabet (or a bracketed IPv6 literal), and a fixed point:
//! normalising it again gives it unchanged, with and without the
//! allocation-free buffer, so two spellings of one site cannot differ
//! after a second pass.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine::host::{normalize, normalize_in, HostBuf, NAME_BYTES_MAX};

fuzz_target!(|data: &[u8]| {
    let Ok(name) = normalize(data) else {
        // The buffered form refuses the same inputs.
        assert!(normalize_in(data, &mut HostBuf::new()).is_err());
        return;
    };
    let s = name.as_str();
    let mut buf = HostBuf::new();
    assert_eq!(normalize_in(data, &mut buf).expect("the same input").as_str(), s);
    if s.starts_with('[') {
        assert!(s.ends_with(']') && name.is_ip(), "{s:?}");
    } else {
        assert!(!s.is_empty() && s.len() <= NAME_BYTES_MAX, "{s:?}");
        assert!(!s.ends_with('.'), "{s:?}");
        assert!(
            s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._".contains(&b)),
            "{s:?}"
        );
    }
    let again = normalize(s.as_bytes()).expect("a normal form normalises");
    assert_eq!(again.as_str(), s, "not a fixed point");
});
