//! The store's bookkeeping without a server: keys, Vary values, the LRU
//! order and its bound, purges.

use super::*;

fn entry(key: &[u8], vary: &[(&str, Option<&str>)], body_len: usize) -> Entry {
    let lines = b"Content-Type: text/plain\r\n".to_vec();
    let mut buf = lines.clone();
    buf.resize(lines.len() + body_len, b'x');
    let whole: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(buf);
    let body = SharedBytes::slice(whole.clone(), lines.len()..lines.len() + body_len).unwrap();
    let lines_len = lines.len();
    let lines = SharedBytes::slice(whole, 0..lines_len).unwrap();
    let vary: VaryValues = vary
        .iter()
        .map(|(n, v)| (n.as_bytes().into(), v.map(|v| v.as_bytes().into())))
        .collect();
    Entry {
        key: key.into(),
        vary,
        status: 200,
        lines,
        body,
        aged: None,
        stored: Instant::now(),
        initial_age: 0,
        lifetime: 60,
        fresh_until: Instant::now().checked_add(Duration::from_secs(60)),
        etag: None,
        last_modified: None,
        stale_while_revalidate: 0,
        stale_if_error: 0,
        public: false,
        cost: lines_len + body_len + key.len() + ENTRY_OVERHEAD,
        newer: None,
        older: None,
    }
}

fn keys(s: &Store) -> Vec<Vec<u8>> {
    // Newest first, following the links.
    let mut out = Vec::new();
    let mut at = s.newest;
    while let Some(slot) = at {
        out.push(s.entries[slot].key.to_vec());
        at = s.entries[slot].older;
    }
    out
}

#[test]
fn the_least_recently_used_entry_goes_first_and_the_bound_holds() {
    let cache = Cache::new(64 * 1024);
    with_store(&cache.shared, |s| {
        for k in [b"ha\nG/1", b"ha\nG/2", b"ha\nG/3"] {
            s.insert(entry(k, &[], 20_000));
        }
        assert_eq!(
            keys(s),
            vec![b"ha\nG/3".to_vec(), b"ha\nG/2".to_vec(), b"ha\nG/1".to_vec()]
        );
        // /1 used: /2 is now the oldest, and goes for /4.
        let one = s.find(b"ha\nG/1", |_| None).unwrap();
        s.touch(one);
        s.insert(entry(b"ha\nG/4", &[], 20_000));
        assert!(s.bytes <= 64 * 1024, "{}", s.bytes);
        assert_eq!(
            keys(s),
            vec![b"ha\nG/4".to_vec(), b"ha\nG/1".to_vec(), b"ha\nG/3".to_vec()]
        );
        assert!(s.find(b"ha\nG/2", |_| None).is_none());
        assert_eq!(s.counts.evicted.load(Ordering::Relaxed), 1);
        assert_eq!(s.counts.entries.load(Ordering::Relaxed), 3);
    });
}

#[test]
fn variants_are_matched_by_their_vary_values_and_replaced_in_place() {
    let cache = Cache::new(1 << 20);
    with_store(&cache.shared, |s| {
        s.insert(entry(b"ha\nG/", &[("accept-language", Some("en"))], 10));
        s.insert(entry(b"ha\nG/", &[("accept-language", Some("de"))], 11));
        s.insert(entry(b"ha\nG/", &[("accept-language", None)], 12));
        let lang = |v: Option<&'static str>| move |_: &[u8]| v.map(|v| v.as_bytes().to_vec());
        let len = |s: &Store, slot: usize| s.entries[slot].body.as_slice().len();
        assert_eq!(s.find(b"ha\nG/", lang(Some("en"))).map(|e| len(s, e)), Some(10));
        assert_eq!(s.find(b"ha\nG/", lang(Some("de"))).map(|e| len(s, e)), Some(11));
        assert_eq!(s.find(b"ha\nG/", lang(None)).map(|e| len(s, e)), Some(12));
        assert_eq!(s.find(b"ha\nG/", lang(Some("fr"))), None);
        // The same variant again replaces it.
        s.insert(entry(b"ha\nG/", &[("accept-language", Some("en"))], 13));
        assert_eq!(s.entries.len(), 3);
        assert_eq!(s.find(b"ha\nG/", lang(Some("en"))).map(|e| len(s, e)), Some(13));
    });
}

#[test]
fn a_key_keeps_at_most_its_share_of_variants() {
    let cache = Cache::new(1 << 20);
    with_store(&cache.shared, |s| {
        for i in 0..VARIANTS_MAX + 5 {
            let v = i.to_string();
            s.insert(entry(b"ha\nG/", &[("x", Some(&v))], 1));
        }
        assert_eq!(s.index[&b"ha\nG/"[..]].len(), VARIANTS_MAX);
    });
}

#[test]
fn purges_remove_what_they_match_at_the_next_lookup() {
    let cache = Cache::new(1 << 20);
    with_store(&cache.shared, |s| {
        for k in [&b"ha.test\nG/x/1"[..], b"ha.test\nG/y", b"sb.test\nG/x/2"] {
            s.insert(entry(k, &[], 1));
        }
    });
    cache.purge_matching(Some("A.test:80"), Some("/x/"));
    with_store(&cache.shared, |s| {
        assert!(s.find(b"ha.test\nG/x/1", |_| None).is_none());
        assert!(s.find(b"ha.test\nG/y", |_| None).is_some());
        assert!(s.find(b"sb.test\nG/x/2", |_| None).is_some());
    });
    cache.purge();
    with_store(&cache.shared, |s| assert_eq!(s.entries.len(), 0));
    assert_eq!(cache.stats().entries, 0);
}

#[test]
fn a_purge_host_without_a_port_covers_every_port_and_one_with_a_port_its_own() {
    let cache = Cache::new(1 << 20);
    let keys = [
        &b"h127.0.0.1:18310\nG/a"[..],
        b"h127.0.0.1:18311\nG/a",
        b"h127.0.0.1\nG/a",
        b"h127.0.0.10\nG/a",
        b"h127.0.0.1.example\nG/a",
        b"h[::1]:8080\nG/a",
    ];
    with_store(&cache.shared, |s| {
        for k in keys {
            s.insert(entry(k, &[], 1));
        }
    });
    cache.purge_matching(Some("127.0.0.1:18311"), None);
    with_store(&cache.shared, |s| {
        let left: Vec<bool> = keys.iter().map(|k| s.find(k, |_| None).is_some()).collect();
        assert_eq!(left, [true, false, true, true, true, true]);
    });
    cache.purge_matching(Some("127.0.0.1"), None);
    cache.purge_matching(Some("[::1]"), None);
    with_store(&cache.shared, |s| {
        let left: Vec<bool> = keys.iter().map(|k| s.find(k, |_| None).is_some()).collect();
        assert_eq!(left, [false, false, false, true, true, false]);
    });
}

#[test]
fn hosts_are_normalised_and_vary_values_compared_without_white_space() {
    let mut k = Vec::new();
    push_host(&mut k, b"Example.COM.:443", Some(true));
    assert_eq!(k, b"example.com");
    k.clear();
    push_host(&mut k, b"example.com:8080", Some(false));
    assert_eq!(k, b"example.com:8080");
    // The other scheme's default port stays; unknown, either goes.
    for (host, tls, want) in [
        (&b"A.test:443"[..], Some(false), &b"a.test:443"[..]),
        (b"A.test:80", Some(true), b"a.test:80"),
        (b"A.test:80", None, b"a.test"),
        (b"A.test.:443", None, b"a.test"),
        (b"127.0.0.1:22471", Some(false), b"127.0.0.1:22471"),
    ] {
        k.clear();
        push_host(&mut k, host, tls);
        assert_eq!(k, want, "{host:?} {tls:?}");
    }
    let v = |name: &[u8], vals: &[&str]| normalised(name, vals.iter().map(|v| v.as_bytes()));
    assert_eq!(
        v(b"accept-encoding", &["gzip, br", " zstd ; q=0.5"]),
        Some(b"gzip,br,zstd;q=0.5".to_vec())
    );
    assert_eq!(
        v(b"accept-encoding", &["gzip,br,zstd;q=0.5"]),
        v(b"accept-encoding", &["gzip , br", "zstd;q=0.5"])
    );
    assert_eq!(v(b"x-thing", &["a b ,  c"]), Some(b"a b,c".to_vec()));
    assert_eq!(v(b"x-thing", &[]), None);
    assert_ne!(v(b"x-thing", &[""]), None);
}

#[test]
fn an_age_is_written_in_decimal() {
    for n in [0u64, 7, 10, 1234567, u64::MAX] {
        let mut s = String::new();
        push_decimal(&mut s, n);
        assert_eq!(s, n.to_string());
    }
}

/// An ask for `fields` (request lines `name:value\n`) on `cache`.
fn ask(cache: &Cache, fields: &str, credentials: bool) -> Box<Ask> {
    Box::new(Ask {
        shared: cache.shared.clone(),
        key: b"ha\nG/".as_slice().into(),
        fields: fields.as_bytes().to_vec(),
        head: false,
        credentials,
        leader: false,
        waited: false,
        invalidates: false,
    })
}

/// Whether the answer `head` (its fields, relayed as they are) to a
/// request with `fields` may be stored; its Vary values if so.
fn storable(head: &str, fields: &str, credentials: bool) -> Option<Vec<(String, Option<String>)>> {
    let cache = Cache::new(1 << 20);
    let bytes = format!("{head}\r\n");
    let mut storage = [const { std::mem::MaybeUninit::uninit() }; 32];
    let parsed = crate::codec::client::parse_response_head(bytes.as_bytes(), &mut storage, "GET").unwrap();
    let crate::codec::client::ParsedResponse::Complete(h) = parsed else {
        panic!("partial")
    };
    let lines: String = head
        .split("\r\n")
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| format!("{l}\r\n"))
        .collect();
    let lines: String = lines
        .lines()
        .filter(|l| {
            !l.to_ascii_lowercase().starts_with("date:") && !l.to_ascii_lowercase().starts_with("content-length:")
        })
        .map(|l| format!("{l}\r\n"))
        .collect();
    let block = HeaderBlock::from_lines(SharedBytes::new(Arc::new(lines.into_bytes()))).unwrap();
    let fill = Fill::start(ask(&cache, fields, credentials), &h, &block, Some(0))?;
    Some(
        fill.vary
            .iter()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into_owned(),
                    v.as_ref().map(|v| String::from_utf8_lossy(v).into_owned()),
                )
            })
            .collect(),
    )
}

#[test]
fn only_explicitly_fresh_answers_of_cacheable_statuses_are_stored() {
    let ok = |status: u16, cc: &str| {
        storable(
            &format!("HTTP/1.1 {status} X\r\nCache-Control: {cc}\r\nContent-Length: 0\r\n"),
            "",
            false,
        )
        .is_some()
    };
    assert!(ok(200, "max-age=60"));
    assert!(ok(404, "s-maxage=60"));
    assert!(ok(301, "public, max-age=60"));
    for status in [201, 206, 302, 304, 500, 502, 503] {
        assert!(!ok(status, "max-age=60"), "{status}");
    }
    for cc in [
        "no-store, max-age=60",
        "private, max-age=60",
        "no-cache, max-age=60",
        "max-age=0",
        "public",
    ] {
        assert!(!ok(200, cc), "{cc}");
    }
    // No freshness at all: not stored (no heuristics).
    assert!(storable("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n", "", false).is_none());
    // Expires a minute after Date.
    let expires = "HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 2044 08:49:37 GMT\r\n\
                   Expires: Sun, 06 Nov 2044 08:50:37 GMT\r\nContent-Length: 0\r\n";
    assert!(storable(expires, "", false).is_some());
    // An age already past the lifetime: stale on arrival.
    assert!(storable(
        "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nAge: 60\r\nContent-Length: 0\r\n",
        "",
        false
    )
    .is_none());
}

#[test]
fn set_cookie_vary_star_and_unshared_credentials_are_never_stored() {
    let fresh = "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 0\r\n";
    assert!(storable(&format!("{fresh}Set-Cookie: a=b\r\n"), "", false).is_none());
    assert!(storable(&format!("{fresh}Vary: Accept, *\r\n"), "", false).is_none());
    assert!(storable(fresh, "authorization:x\n", true).is_none());
    let public = "HTTP/1.1 200 OK\r\nCache-Control: public, max-age=60\r\nContent-Length: 0\r\n";
    assert!(storable(public, "authorization:x\n", true).is_some());
}

#[test]
fn an_entry_keeps_the_requests_values_of_the_fields_vary_names() {
    let head = "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nVary: Accept-Language,accept-language\r\n\
                Vary: X-Mode\r\nContent-Length: 0\r\n";
    let vary = storable(head, "accept-language:en, de\nx-other:1\n", false).unwrap();
    assert_eq!(
        vary,
        vec![
            ("accept-language".to_owned(), Some("en,de".to_owned())),
            ("x-mode".to_owned(), None)
        ]
    );
}

#[test]
fn eight_bytes_at_a_time_lower_case_as_the_byte_loop_does() {
    let all: Vec<u8> = (0..=255u8)
        .chain(b"Example.COM:8080[::1]Zz@[`{".iter().copied())
        .collect();
    for start in 0..9 {
        let mut fast = all[start..].to_vec();
        let mut slow = fast.clone();
        lower_ascii(&mut fast);
        slow.make_ascii_lowercase();
        assert_eq!(fast, slow, "from {start}");
    }
    // Every short length, whole words or not (the tail overlaps).
    let mixed = b"Example.COM:8080[::1]Zz@[`{\xc3\x89";
    for len in 0..=mixed.len() {
        let mut fast = mixed[..len].to_vec();
        let mut slow = fast.clone();
        lower_ascii(&mut fast);
        slow.make_ascii_lowercase();
        assert_eq!(fast, slow, "{len} bytes");
    }
}

/// Behind forward-auth the Vary values are those the upstream gets: the
/// copied fields in place of the client's of those names (`Remote_User`
/// too, read as the same name behind CGI).
#[test]
fn a_checked_requests_vary_values_are_the_copied_fields() {
    let cache = Cache::new(1 << 20);
    let mut ask = Ask {
        shared: cache.shared.clone(),
        key: b"ha\nG/".as_slice().into(),
        fields: b"remote-user:alice\nremote_user:alice\nx-key:k-bob\n".to_vec(),
        head: false,
        credentials: true,
        leader: false,
        waited: false,
        invalidates: false,
    };
    assert!(!ask.fetches_whole());
    ask.take_copied(
        &["Remote-User".to_owned()],
        &[("Remote-User".to_owned(), b"bob".to_vec())],
    );
    assert_eq!(ask.field_value(b"remote-user").as_deref(), Some(&b"bob"[..]));
    assert_eq!(ask.field_value(b"remote_user"), None);
    assert_eq!(ask.field_value(b"x-key").as_deref(), Some(&b"k-bob"[..]));
    with_store(&cache.shared, |s| {
        s.insert(entry(b"ha\nG/", &[("remote-user", Some("alice"))], 5));
        assert_eq!(s.find(b"ha\nG/", |n| ask.field_value(n)), None);
    });
}
