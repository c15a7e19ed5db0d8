//! The chunked decoder on arbitrary bytes, fed whole and in pieces: never
//! panics, and in-place decoding agrees with step-by-step decoding however
//! the input is split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine::codec::chunked::{ChunkedDecoder, ChunkedError};

fn stepwise(input: &[u8], piece: usize) -> Result<Option<(Vec<u8>, usize)>, ChunkedError> {
    let mut dec = ChunkedDecoder::new(1 << 16);
    let mut body = Vec::new();
    let mut at = 0;
    while at < input.len() && !dec.is_done() {
        let end = (at + piece).min(input.len());
        let step = dec.step(&input[at..end])?;
        body.extend_from_slice(&input[at + step.data.start..at + step.data.end]);
        at += step.consumed;
    }
    Ok(dec.is_done().then_some((body, at)))
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, input)) = data.split_first() else {
        return;
    };
    let whole = stepwise(input, input.len().max(1));
    let pieces = stepwise(input, usize::from(split % 7) + 1);
    assert_eq!(whole, pieces);

    let mut buf = input.to_vec();
    let mut dec = ChunkedDecoder::new(1 << 16);
    let (mut read, mut write) = (0, 0);
    let in_place = dec.decode_in_place(&mut buf, &mut read, &mut write);
    match (in_place, &whole) {
        (Ok(true), Ok(Some((body, consumed)))) => {
            assert_eq!(&buf[..write], &body[..]);
            assert_eq!(read, *consumed);
        }
        (Ok(false), Ok(None)) => {}
        (Err(a), Err(b)) => assert_eq!(a, *b),
        (a, b) => panic!("in-place {a:?} vs stepwise {b:?}"),
    }
});
