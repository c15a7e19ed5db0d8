//! What the fuzz targets share.

use peregrine_archive::Archive;

/// Reads everything a validated archive offers, as a server would: every
/// lookup, entry, variant body and head, pattern. Any out-of-bounds read
/// panics, which is what the archive targets look for.
pub fn read_everything(a: &Archive) {
    let _ = a.site_for_host(Some("example.com:80"));
    let _ = a.hosts();
    for e in a.entries() {
        let _ = (e.kind(), e.flags(), e.status(), e.last_modified(), e.location());
        let path = e.path().to_vec();
        let _ = a.get(e.site(), &path);
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
    let _ = a.get(0, b"/");
    let _ = a.get(7, b"/missing");
}
