//! The reverse proxy's HTTP/2 client role (`h2c://` upstreams) on an
//! upstream's arbitrary bytes: frames and HPACK blocks read as answers
//! never panic, and keep the invariants `peregrine::fuzzing::h2_client`
//! checks (whole frames consumed, the same events however the bytes are
//! cut, each stream's events in order, relayed fields well-formed).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| peregrine::fuzzing::h2_client(data));
