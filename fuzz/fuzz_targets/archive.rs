//! A mutated archive must be refused, or validated and then read without a
//! panic or an out-of-bounds access: every lookup, every entry, every
//! variant's body and heads.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_archive::Archive;

fuzz_target!(|data: &[u8]| {
    let Ok(a) = Archive::from_bytes(data.to_vec()) else { return };
    let _ = a.verify_data();
    let _ = a.site_for_host(Some("example.com:80"));
    let _ = a.hosts();
    for e in a.entries() {
        let _ = (e.kind(), e.flags(), e.status(), e.last_modified(), e.location());
        let path = e.path().to_vec();
        let _ = a.get(e.site(), &path);
        for i in 0..4 {
            if let Some(v) = e.variant(i) {
                let _ = a.slice(v.body_off, v.body_len);
                let _ = a.slice(v.head_off, u64::from(v.head_len) + u64::from(v.head304_len));
            }
        }
        for p in a.patterns(e.site()) {
            let _ = p.location();
        }
    }
    let _ = a.get(0, b"/");
    let _ = a.get(7, b"/missing");
});
