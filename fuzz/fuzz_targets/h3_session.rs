//! The HTTP/3 session on arbitrary stream records (bytes, FINs and resets
//! on request and unidirectional streams), every ready request answered
//! and its output drained in pieces: never panics, and each answer is one
//! HEADERS frame then DATA adding up to its content-length. The driver
//! and its invariants are `peregrine::fuzzing::h3_session`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    peregrine::fuzzing::h3_session(data);
});
