use super::*;

#[test]
fn push_ipv4_writes_what_display_writes() {
    // 0.0.0.0 first: the thread's last address before any was written.
    let mut out = Vec::new();
    push_ipv4(&mut out, std::net::Ipv4Addr::UNSPECIFIED);
    assert_eq!(out, b"0.0.0.0");
    let mut octets = vec![0u8, 1, 9, 10, 11, 99, 100, 101, 199, 200, 249, 250, 255];
    octets.extend((0..=255u8).step_by(7));
    for &a in &octets {
        for &b in &[0u8, 5, 10, 100, 255] {
            let ip = std::net::Ipv4Addr::new(a, b, 255 - a, a / 3);
            // Twice: written, then from the thread's last address.
            for _ in 0..2 {
                let mut out = b"x".to_vec();
                push_ipv4(&mut out, ip);
                assert_eq!(out, format!("x{ip}").into_bytes());
            }
        }
    }
}

fn up(url: &str, prefix: &str) -> Upstream {
    Upstream::parse(url).unwrap().prefix(prefix)
}

#[test]
fn the_path_is_kept_or_its_prefix_replaced_as_nginx_does() {
    let keep = up("http://127.0.0.1:9000", "/api/");
    assert_eq!(keep.upstream_path("/api/x").as_deref(), Some("/api/x"));
    let replace = up("http://127.0.0.1:9000/v1/", "/api/");
    assert_eq!(replace.upstream_path("/api/x/y").as_deref(), Some("/v1/x/y"));
    assert_eq!(replace.upstream_path("/api/").as_deref(), Some("/v1/"));
    assert_eq!(replace.upstream_path("/api").as_deref(), Some("/v1/"));
    let bare = up("http://127.0.0.1:9000/", "/api/");
    assert_eq!(bare.upstream_path("/api/x").as_deref(), Some("/x"));
}

#[test]
fn the_path_is_re_encoded_canonically_and_ambiguous_ones_refused() {
    let keep = up("http://127.0.0.1:9000", "/");
    // Needless escapes (of unreserved characters) decoded, what needs one
    // escaped, the others kept in capitals: RFC 3986 §6.2.2.
    assert_eq!(keep.upstream_path("/%61b%20c").as_deref(), Some("/ab%20c"));
    assert_eq!(keep.upstream_path("/caf%C3%A9").as_deref(), Some("/caf%C3%A9"));
    assert_eq!(keep.upstream_path("/caf%c3%a9").as_deref(), Some("/caf%C3%A9"));
    assert_eq!(keep.upstream_path("/%7e%2D%5f%2E%41").as_deref(), Some("/~-_.A"));
    assert_eq!(
        keep.upstream_path("/a:b@c!$&'()*+,;=").as_deref(),
        Some("/a:b@c!$&'()*+,;=")
    );
    // A reserved character escaped is another path than one that is not
    // (RFC 3986 §2.2; Tomcat reads `;` as path parameters): kept escaped,
    // as nginx and Caddy pass them.
    for (path, want) in [
        ("/api/a%3Bb", "/api/a%3Bb"),
        ("/api/C%2B%2B", "/api/C%2B%2B"),
        ("/api/a%3db%26c", "/api/a%3Db%26c"),
        ("/api/a%40b", "/api/a%40b"),
        ("/api/x%3A1", "/api/x%3A1"),
        ("/api/%25", "/api/%25"),
        ("/api/a%3Fb%23c", "/api/a%3Fb%23c"),
        // Not UTF-8 once decoded: passed on, as nginx and Caddy do.
        ("/api/a%ffb", "/api/a%FFb"),
        // Bytes a path may not hold as they are (from an HTTP/2 client).
        ("/api/a b\"", "/api/a%20b%22"),
        ("/api/caf\u{e9}", "/api/caf%C3%A9"),
    ] {
        assert_eq!(keep.upstream_path(path).as_deref(), Some(want), "{path}");
    }
    for bad in [
        "/a%2Fb",
        "/a%2fb",
        "/a%5Cb",
        "/a%00",
        "/a/../b",
        "/./a",
        "/a/%2e%2e/b",
        "/a/%2E",
        "/a%",
        "/a%4",
        "/a%zz",
    ] {
        assert_eq!(keep.upstream_path(bad), None, "{bad}");
    }
}

#[test]
fn upstream_urls_are_checked_at_start() {
    assert!(Upstream::parse("http://127.0.0.1:9000/v1/").is_ok());
    assert!(Upstream::parse("http://[::1]:9000").is_ok());
    assert!(Upstream::parse("unix:/run/app.sock").is_ok());
    for bad in [
        "ftp://x",
        "http://",
        "http://user@host",
        "http://127.0.0.1:99999",
        "http://127.0.0.1/a/../b",
        "http://127.0.0.1/?q",
        "unix:",
    ] {
        assert!(Upstream::parse(bad).is_err(), "{bad}");
    }
    // https://: port 443 unless given; TLS settings only for it.
    let https = Upstream::parse("https://127.0.0.1").unwrap();
    assert!(https.is_tls() && !https.skips_verify());
    assert_eq!(https.tcp_ports(), [443]);
    assert_eq!(Upstream::parse("https://127.0.0.1:8443").unwrap().tcp_ports(), [8443]);
    assert!(https.insecure_skip_verify().unwrap().skips_verify());
    let plain = Upstream::parse("http://127.0.0.1").unwrap();
    assert!(!plain.is_tls() && plain.clone().insecure_skip_verify().is_err());
    assert_eq!(plain.tcp_ports(), [80]);
    assert!(!plain.is_h2());
    // h2c://: HTTP/2 by prior knowledge, in cleartext, port 80 unless given.
    let h2c = Upstream::parse("h2c://127.0.0.1:50051").unwrap();
    assert!(h2c.is_h2() && !h2c.is_tls());
    assert_eq!(h2c.tcp_ports(), [50051]);
    assert_eq!(Upstream::parse("h2c://127.0.0.1").unwrap().tcp_ports(), [80]);
    assert!(Upstream::parse("h2c://").is_err());
    // h2s://: HTTP/2 over TLS (ALPN h2), port 443 unless given.
    let h2s = Upstream::parse("h2s://127.0.0.1").unwrap();
    assert!(h2s.is_h2() && h2s.is_tls());
    assert_eq!(h2s.tcp_ports(), [443]);
}

#[test]
fn via_values_name_our_token_only_as_a_hop() {
    assert!(contains_token(b"1.1 peregrine-abcd", b"peregrine-abcd"));
    assert!(contains_token(b"1.0 a, 2 peregrine-abcd (x)", b"peregrine-abcd"));
    assert!(!contains_token(b"1.1 peregrine-abcdef", b"peregrine-abcd"));
    assert!(!contains_token(b"peregrine-abcd", b"peregrine-abcd"));
}

#[test]
fn same_bytes_is_slice_equality_at_every_length_and_place() {
    // Every length its word compares cover (and beyond), equal and
    // differing in each byte: a word read at the wrong place, or a byte
    // neither of two overlapping words covers, would answer wrongly.
    let base: Vec<u8> = (0..24u8).map(|i| b'0' + i).collect();
    for n in 0..=base.len() {
        let a = &base[..n];
        assert!(same_bytes(a, a), "{n}");
        assert!(same_bytes(a, &base.clone()[..n]), "{n}");
        for at in 0..n {
            let mut b = a.to_vec();
            b[at] ^= 0x20;
            assert!(!same_bytes(a, &b), "{n} {at}");
            assert!(!same_bytes(&b, a), "{n} {at}");
        }
        if n > 0 {
            assert!(!same_bytes(a, &base[..n - 1]), "{n}");
        }
    }
}

/// `PLAIN` is what `PATH` writes as it is; a path of such bytes takes
/// `upstream_path_to`'s short way to the long way's bytes, kept or after
/// a replaced prefix.
#[test]
fn a_plain_path_takes_the_short_way_to_the_same_bytes() {
    for b in 0..=255u8 {
        let as_is = b < 0x80
            && percent_encoding::utf8_percent_encode(&char::from(b).to_string(), upstream::PATH).to_string()
                == char::from(b).to_string();
        assert_eq!(upstream::PLAIN[usize::from(b)], as_is, "{b:#x}");
    }
    let routes = [
        up("http://127.0.0.1:9000", "/api/"),
        up("http://127.0.0.1:9000/v1/", "/api/"),
        up("http://127.0.0.1:9000/v1", "/api/"),
        up("http://127.0.0.1:9000/", "/api"),
        up("http://127.0.0.1:9000/a%20b/", "/api/"),
        up("http://127.0.0.1:9000/caf\u{e9}/", "/api/"),
    ];
    let paths = [
        "/",
        "/api",
        "/api/",
        "/api/x",
        "/api/x/y",
        "/apix",
        "/other/a:b@c!$&'()*+,;=",
        "/api/./x",
        "/api/..",
        "/a b",
        "/api/%41",
        "/api/caf\u{e9}",
        "/api/a^b",
        "api/x",
        "/api/x/.",
        "/api/x/..",
        "/api/.x/..y/x..",
        "/api//x/",
        "/..",
        "/.",
    ];
    for route in &routes {
        for path in paths {
            let mut short = b"x".to_vec();
            let got = route
                .upstream_path_to(path, &mut short)
                .map(|_| String::from_utf8(short[1..].to_vec()).unwrap());
            // The long way, by hand: decode the unreserved escapes (the
            // paths here have no other), check, replace, encode.
            let decoded = percent_encoding::percent_decode_str(path).decode_utf8().unwrap();
            let want = (decoded.starts_with('/') && !decoded.split('/').any(|s| s == "." || s == "..")).then(|| {
                let encode = |p: &str| percent_encoding::utf8_percent_encode(p, upstream::PATH).to_string();
                match route.path_part() {
                    None => encode(&decoded),
                    Some(r) => {
                        let prefix = route.prefix_part();
                        let rest = match decoded.strip_prefix(prefix) {
                            Some(rest) => rest,
                            None if prefix.ends_with('/') && *decoded == prefix[..prefix.len() - 1] => "",
                            None => decoded.strip_prefix('/').unwrap_or(&decoded),
                        };
                        let slash = if !r.ends_with('/') && !rest.is_empty() && prefix.ends_with('/') {
                            "/"
                        } else {
                            ""
                        };
                        format!("{}{slash}{}", encode(r), encode(rest))
                    }
                }
            });
            assert_eq!(got, want, "{} {path}", route.url());
            // The short way's word that its bytes need no check as a
            // request target (`head::start_routed`) holds.
            let mut out = Vec::new();
            if route.upstream_path_to(path, &mut out) == Some(true) {
                assert!(
                    out.iter().all(|&b| upstream::PLAIN[usize::from(b)]),
                    "{} {path}",
                    route.url()
                );
            }
        }
    }
}

/// An id made from the last one (`next_id`) is the one made afresh (the
/// prefix and the serial in 16 hex digits, `Request::made_request_id`)
/// whenever it is made; serials one after the other, with gaps and
/// carries, and the empty slot.
#[test]
fn a_request_id_made_from_the_last_is_the_one_made_afresh() {
    let made = |serial: u64| -> [u8; 32] {
        format!("0123456789abcdef{serial:016x}")
            .into_bytes()
            .try_into()
            .unwrap()
    };
    assert_eq!(next_id((0, [0; 32]), 1), None, "the empty slot");
    let mut serials: Vec<u64> = (0..600).collect();
    serials.extend([700, 701, 0xff, 0x100, 0x101, u64::MAX - 20]);
    serials.extend(u64::MAX - 19..=u64::MAX);
    serials.extend([0, 1, 2]);
    let mut last = (0, [0; 32]);
    let mut n_next = 0;
    for serial in serials {
        let id = match next_id(last, serial) {
            Some(id) => {
                n_next += 1;
                id
            }
            None => made(serial),
        };
        assert_eq!(id, made(serial), "{serial:#x}");
        last = (serial, id);
    }
    // Not vacuous: most came from the last one.
    assert!(n_next > 500, "{n_next}");
}
