//! The PROXY protocol decoder on arbitrary bytes: never panics; a complete
//! header lies within the bytes and the bound, parses the same from its own
//! bytes, and every prefix of it is `Partial` (no error before the header
//! is all there); its TLVs frame to the header's end; and a TCP header's
//! addresses, written back as a version 1 line, parse to the same ones.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine::codec::proxy::{parse, Parsed, PROXY_HEADER_BYTES_MAX};

fuzz_target!(|data: &[u8]| {
    let Ok(Parsed::Complete { header, len }) = parse(data) else {
        return;
    };
    assert!(len <= data.len());
    assert!(len <= PROXY_HEADER_BYTES_MAX);
    assert!(header.tlvs.start <= header.tlvs.end && header.tlvs.end <= len);
    assert_eq!(
        parse(&data[..len]),
        Ok(Parsed::Complete {
            header: header.clone(),
            len
        })
    );
    // Every prefix is Partial: a header split across reads is never
    // refused early. Long headers are cut at a sample of offsets.
    let step = (len / 256).max(1);
    for cut in (0..len).step_by(step).chain(len.checked_sub(1)) {
        assert_eq!(parse(&data[..cut]), Ok(Parsed::Partial), "cut at {cut} of {len}");
    }
    // The TLVs parse checked frame exactly to the header's end.
    let framed: usize = header.tlvs(data).map(|(_, value)| 3 + value.len()).sum();
    assert_eq!(framed, header.tlvs.len());

    match (header.source, header.destination) {
        (Some(src), Some(dst)) => {
            assert_eq!(src.is_ipv4(), dst.is_ipv4(), "{src} {dst}");
            let family = if src.is_ipv4() { "TCP4" } else { "TCP6" };
            let line = format!(
                "PROXY {family} {} {} {} {}\r\n",
                src.ip(),
                dst.ip(),
                src.port(),
                dst.port()
            );
            match parse(line.as_bytes()) {
                Ok(Parsed::Complete { header: again, len }) => {
                    assert_eq!(len, line.len());
                    assert_eq!((again.source, again.destination), (Some(src), Some(dst)), "{line:?}");
                }
                other => panic!("{line:?} did not parse back: {other:?}"),
            }
        }
        (None, None) => {}
        (src, dst) => panic!("one address without the other: {src:?} {dst:?}"),
    }
});
