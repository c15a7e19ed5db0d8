//! A mutated archive whose checksums are made right again, so that the
//! mutations reach the index and entry validation behind them (the
//! `archive` target mostly stops at the header hash). The header's lengths
//! and hashes are recomputed; then the archive must be refused, or
//! validated and read everywhere without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_archive::format::{hash, put_u64, u64_at};
use peregrine_archive::Archive;
use peregrine_fuzz::read_everything;

fuzz_target!(|data: &[u8]| {
    let mut bytes = data.to_vec();
    if bytes.len() < 64 {
        return;
    }
    let len = bytes.len() as u64;
    let index_off = u64_at(&bytes, 24).clamp(64, len);
    put_u64(&mut bytes, 16, len);
    put_u64(&mut bytes, 24, index_off);
    put_u64(&mut bytes, 32, len - index_off);
    let index_hash = hash(&bytes[index_off as usize..]);
    put_u64(&mut bytes, 40, index_hash);
    let data_hash = hash(&bytes[64..index_off as usize]);
    put_u64(&mut bytes, 48, data_hash);
    let header_hash = hash(&bytes[..56]);
    put_u64(&mut bytes, 56, header_hash);
    let Ok(a) = Archive::from_bytes(bytes) else { return };
    a.verify_data().expect("the data hash was just made right");
    read_everything(&a);
});
