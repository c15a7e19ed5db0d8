//! What the fuzz targets share.

use peregrine_archive::Archive;

/// Reads everything a validated archive offers, as a server would: every
/// lookup, entry, variant body and head, pattern. Any out-of-bounds read
/// panics, which is what the archive targets look for.
pub fn read_everything(a: &Archive) {
    let _ = a.site_for_host(Some("example.com:80"));
    let _ = a.hosts();
    // A remembered lookup finds what `get` finds, whatever came before
    // (keys repeated in a damaged archive among them).
    let mut memo = peregrine_archive::read::Lookups::default();
    let mut both = |site: u32, key: &[u8]| {
        let want = a.get(site, key).map(|e| e.index());
        assert_eq!(a.get_remembered(site, key, &mut memo).map(|e| e.index()), want);
    };
    for e in a.entries() {
        let _ = (e.kind(), e.flags(), e.status(), e.last_modified(), e.location());
        let path = e.path().to_vec();
        both(e.site(), &path);
        both(e.site(), &path);
        for i in 0..4 {
            if let Some(v) = e.variant(i) {
                let _ = a.slice(v.body_off, v.body_len);
                let _ = a.slice(v.head_off, u64::from(v.head_len) + u64::from(v.head304_len));
            }
        }
        for p in a.patterns(e.site()) {
            let _ = p.location();
        }
    }
    both(0, b"/");
    both(7, b"/missing");
}
