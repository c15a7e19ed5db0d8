//! The proxy cache's reading of an upstream's `Cache-Control`, `Date`,
//! `Expires` and `Age` (RFC 9111) on arbitrary bytes: never panics, every
//! number capped, a conflicting directive never fresh, the precedence of
//! `s-maxage`, `max-age` and `Expires` kept (`peregrine::fuzzing::cache_control`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    peregrine::fuzzing::cache_control(data);
});
