//! A mutated archive must be refused, or validated and then read without a
//! panic or an out-of-bounds access: every lookup, every entry, every
//! variant's body and heads, and its proxy rules checked against a list
//! as a load checks them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_archive::Archive;
use peregrine_fuzz::read_everything;

fuzz_target!(|data: &[u8]| {
    let Ok(a) = Archive::from_bytes(data.to_vec()) else {
        return;
    };
    let _ = a.verify_data();
    read_everything(&a);
    let _ = peregrine_archive::proxy_rules_allowed(&a, &Default::default());
});
