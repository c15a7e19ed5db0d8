//! The HTTP/1.1 machine on arbitrary bytes, driven as the connection
//! driver drives it (reads split as the first byte says, a small or a full
//! read buffer, deferred answers, a shutdown midway, a timeout at the end):
//! never panics, uses no more bytes than were read, grows its buffer only
//! within the limits, writes one whole answer per request (and one error
//! answer if it refused the input), and nothing once it closed. The driver
//! and its invariants are `peregrine::fuzzing::h1_session`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    peregrine::fuzzing::h1_session(data);
});
