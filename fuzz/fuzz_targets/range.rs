//! The Range parser must never panic, and what it asks to send must lie
//! within the representation, sorted, disjoint, at most PARTS_MAX parts and
//! never more bytes than the representation has.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_files::range::{parse, Ranges, PARTS_MAX};

fuzz_target!(|input: (u64, &[u8])| {
    let (len, value) = input;
    let len = len % (1 << 40);
    if let Ranges::Partial(parts) = parse(value, len) {
        assert!(!parts.is_empty() && parts.len() <= PARTS_MAX);
        let mut end = 0;
        let mut total = 0;
        for (i, r) in parts.iter().enumerate() {
            assert!(r.start < r.end && r.end <= len, "{r:?} of {len}");
            assert!(i == 0 || r.start > end, "sorted, disjoint, not adjacent");
            end = r.end;
            total += r.end - r.start;
        }
        assert!(total <= len);
    }
});
