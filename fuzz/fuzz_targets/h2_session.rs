//! The HTTP/2 session on arbitrary frames after a valid preface, driven
//! as the connection driver drives it (reads split as the first byte says,
//! every ready stream answered, some later, DATA sent within a budget):
//! never panics, writes only whole and well-ordered frames, bounded by
//! what it read and its budget, and nothing once it is done. The driver
//! and its invariants are `peregrine::fuzzing::h2_session`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    peregrine::fuzzing::h2_session(data);
});
