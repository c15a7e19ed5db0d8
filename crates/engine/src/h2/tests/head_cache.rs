//! The response head cache.

use super::*;

#[test]
fn a_repeated_head_is_copied_and_decodes_as_encoded_afresh() {
    let mut p = Peer::new(cfg());
    let block = crate::response::HeaderBlock::new(&[("etag", "\"4-abc\""), ("cache-control", "max-age=60")]).unwrap();
    let other = crate::response::HeaderBlock::new(&[("etag", "\"4-xyz\""), ("cache-control", "max-age=60")]).unwrap();
    let make = |b: &crate::response::HeaderBlock, ct: &'static str| {
        Response::new(200)
            .with_content_type(ct)
            .with_header_block(b.clone())
            .with_body(&b"four"[..])
    };
    let mut heads = Vec::new();
    let mut id = 1;
    let mut ask = |p: &mut Peer, mut resp: Response, date: &[u8]| {
        p.feed(&get(id, "/"));
        assert_eq!(p.ready(), [id]);
        p.session
            .respond(id, &mut resp, false, date, b"", &mut p.out, BUDGET)
            .unwrap();
        let f = p.frames();
        let h = f.iter().find(|f| f.kind == frame::HEADERS).unwrap();
        heads.push((header_block(h).to_vec(), h.fields.clone().unwrap()));
        id += 2;
    };
    let later: &[u8] = b"Mon, 23 Nov 2026 16:00:01 GMT";
    ask(&mut p, make(&block, "text/plain"), DATE); // 0: fields enter the table
    ask(&mut p, make(&block, "text/plain"), DATE); // 1: all indexed: cached
    ask(&mut p, make(&block, "text/plain"), DATE); // 2: from the cache
    ask(&mut p, make(&other, "text/plain"), DATE); // 3: another block
    ask(&mut p, make(&block, "text/html"), DATE); // 4: another type
    ask(&mut p, make(&block, "text/plain"), later); // 5: another date
    p.feed(&settings(&[(frame::SETTINGS_HEADER_TABLE_SIZE, 100)]));
    p.frames();
    ask(&mut p, make(&block, "text/plain"), later); // 6: the table shrank
    ask(&mut p, make(&block, "text/plain"), later); // 7
    let want = |etag: &str, ct: &str, date: &[u8]| {
        vec![
            (":status".to_string(), "200".to_string()),
            ("server".to_string(), "peregrine".to_string()),
            ("date".to_string(), String::from_utf8(date.to_vec()).unwrap()),
            ("content-type".to_string(), ct.to_string()),
            ("content-length".to_string(), "4".to_string()),
            ("etag".to_string(), etag.to_string()),
            ("cache-control".to_string(), "max-age=60".to_string()),
        ]
    };
    let fields: Vec<_> = heads.iter().map(|(_, f)| f.clone()).collect();
    for i in [0, 1, 2] {
        assert_eq!(fields[i], want("\"4-abc\"", "text/plain", DATE), "{i}");
    }
    assert_eq!(fields[3], want("\"4-xyz\"", "text/plain", DATE));
    assert_eq!(fields[4], want("\"4-abc\"", "text/html", DATE));
    for i in [5, 6, 7] {
        assert_eq!(fields[i], want("\"4-abc\"", "text/plain", later), "{i}");
    }
    // Once every field is in the table, the same head is the same bytes.
    assert_eq!(heads[1].0, heads[2].0);
    assert!(heads[1].0.len() < heads[0].0.len());
    // The size change is announced at the start of the next block (§4.2).
    assert_eq!(heads[6].0[0] & 0xe0, 0x20);
    assert_ne!(heads[7].0[0] & 0xe0, 0x20);
}
