//! The WebSocket frame machine on arbitrary client bytes, split into
//! reads as the first byte says: never panics, uses no more than it was
//! given, hands out only messages within the limit (text as UTF-8), and
//! writes only whole server frames, none after its Close. The driver and
//! its invariants are `peregrine::fuzzing::ws_session`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    peregrine::fuzzing::ws_session(data);
});
