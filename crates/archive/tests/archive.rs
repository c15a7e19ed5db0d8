//! Pack → serve round trips for every convention, determinism, refusal of
//! damaged archives, a model test against the source tree, and hot swaps
//! under load.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use peregrine::{Running, Server};
use peregrine_archive::{pack, Archive, ArchiveServer, Mode, PackOptions, SymlinkSkip};
use test_support::http::{self, get, request};
use test_support::{wait_until, Scratch};

fn tmp(name: &str) -> Scratch {
    Scratch::new(&format!("peregrine-archive-{name}"))
}

fn serve(archive: &Path) -> (Running, ArchiveServer) {
    let handler = ArchiveServer::open(archive, Mode::Map).unwrap();
    // The served archive's own counters, to wait for its swaps and refusals.
    let probe = handler.counters();
    let running = Server::new().bind("127.0.0.1:0").workers(1).start(handler).unwrap();
    (running, probe)
}

fn site(t: &Scratch) -> PathBuf {
    let css = "body { color: #123456; margin: 0 auto; }\n".repeat(40);
    t.write("site/index.html", "<h1>home</h1>");
    t.write("site/docs/index.html", "docs");
    t.write("site/assets/app.css", &css);
    t.write("site/assets/logo.png", [0x89, b'P', b'N', b'G', 0, 1, 2, 3]);
    t.write("site/_404.html", "custom not found");
    t.write("site/app/_wildcard.html", "spa shell");
    t.write("site/app/deep/_wildcard.html", "deeper shell");
    t.write("site/forced", "shadowed by a forced redirect");
    t.write("site/kept", "a file wins over a plain redirect");
    t.write("site/.secret", "never packed");
    t.write(
        "site/_headers",
        "# comment\n/assets/*\n  Cache-Control: public, max-age=31536000, immutable\n  X-Asset: yes\n",
    );
    t.write(
        "site/_redirects",
        "/old /new 301\n/blog/:year/* /posts/:year/:splat 302\n/forced /elsewhere 308!\n/kept /nowhere 307\n",
    );
    std::os::unix::fs::symlink("/etc/passwd", t.path("site/passwd")).unwrap();
    t.write("other/index.html", "the other host");
    t.path("site")
}

fn pack_site(t: &Scratch) -> PathBuf {
    let root = site(t);
    let out = t.path("site.prg");
    let mut opts = PackOptions::new(&root, &out);
    opts.hosts.push(("other.example".into(), t.path("other")));
    let stats = pack(&opts).unwrap();
    assert_eq!(
        stats.skipped_symlinks,
        vec![("/passwd".to_owned(), SymlinkSkip::Outside)]
    );
    out
}

/// A fully qualified `Host` (`other.example.`) is its site, as `--site`
/// reads it (`host::normalize`) and nginx does; a `--host` given with the
/// dot is stored without it. Both went to the default site (review
/// finding).
#[test]
fn a_host_with_a_trailing_dot_is_its_site() {
    let t = tmp("host-dot");
    t.write("site/index.html", "default");
    t.write("other/index.html", "other");
    t.write("third/index.html", "third");
    let out = t.path("site.prg");
    let mut opts = PackOptions::new(t.path("site"), &out);
    opts.hosts.push(("other.example".into(), t.path("other")));
    opts.hosts.push(("third.example.".into(), t.path("third")));
    pack(&opts).unwrap();
    let (server, _) = serve(&out);
    let addr = server.local_addr();
    let on = |host: &str| request(addr, "GET", "/", &[("Host", host)]).text();
    assert_eq!(on("other.example"), "other");
    assert_eq!(on("other.example."), "other");
    assert_eq!(on("Other.Example.:8080"), "other");
    assert_eq!(on("third.example"), "third");
    assert_eq!(on("third.example."), "third");
    assert_eq!(on("other.example.."), "default");
    assert_eq!(on("unknown."), "default");
}

#[test]
fn every_convention_round_trips() {
    let t = tmp("conventions");
    let archive = pack_site(&t);
    let (server, _) = serve(&archive);
    let addr = server.local_addr();

    let r = get(addr, "/");
    assert_eq!((r.status, r.text().as_str()), (200, "<h1>home</h1>"));
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(get(addr, "/index.html").text(), "<h1>home</h1>");
    let r = get(addr, "/docs");
    assert_eq!((r.status, r.header("location")), (301, Some("/docs/")));
    assert_eq!(get(addr, "/docs/").text(), "docs");
    assert_eq!(get(addr, "/%64ocs/").text(), "docs");

    // _headers.
    let r = get(addr, "/assets/app.css");
    assert_eq!(r.header("cache-control"), Some("public, max-age=31536000, immutable"));
    assert_eq!(r.header("x-asset"), Some("yes"));
    assert_eq!(get(addr, "/").header("cache-control"), Some("no-cache"));

    // Encodings made at pack time, chosen per request.
    let css = "body { color: #123456; margin: 0 auto; }\n".repeat(40);
    for (ae, coding) in [
        ("br", Some("br")),
        ("gzip", Some("gzip")),
        ("zstd", Some("zstd")),
        ("identity", None),
    ] {
        let r = request(addr, "GET", "/assets/app.css", &[("Accept-Encoding", ae)]);
        assert_eq!(r.header("content-encoding"), coding, "{ae}");
        assert_eq!(r.header("vary"), Some("Accept-Encoding"));
        let decoded = decode(coding, &r.body);
        assert_eq!(decoded, css.as_bytes(), "{ae}");
    }
    // Incompressible content has one variant and no Vary.
    let r = request(addr, "GET", "/assets/logo.png", &[("Accept-Encoding", "br")]);
    assert_eq!((r.header("content-encoding"), r.header("vary")), (None, None));

    // _redirects: exact, placeholders and splats, forced, shadowed.
    let r = get(addr, "/old");
    assert_eq!((r.status, r.header("location")), (301, Some("/new")));
    let r = get(addr, "/blog/2024/a/b");
    assert_eq!((r.status, r.header("location")), (302, Some("/posts/2024/a/b")));
    let r = get(addr, "/forced");
    assert_eq!((r.status, r.header("location")), (308, Some("/elsewhere")));
    assert_eq!(get(addr, "/kept").text(), "a file wins over a plain redirect");

    // _wildcard: the deepest wins; _404.html for the rest.
    assert_eq!(get(addr, "/app/users/7").text(), "spa shell");
    assert_eq!(get(addr, "/app/deep/x/y").text(), "deeper shell");
    let r = get(addr, "/nothing/here");
    assert_eq!((r.status, r.text().as_str()), (404, "custom not found"));

    // Never packed: dotfiles, symlinks out of the tree; bad paths refused.
    assert_eq!(get(addr, "/.secret").status, 404);
    assert_eq!(get(addr, "/passwd").status, 404);
    assert_eq!(get(addr, "/a%00").status, 400);

    // Virtual hosts.
    let r = request(addr, "GET", "/", &[("Host", "Other.Example:8080")]);
    assert_eq!(r.text(), "the other host");
    assert_eq!(
        request(addr, "GET", "/", &[("Host", "unknown")]).text(),
        "<h1>home</h1>"
    );

    // Conditional and range requests, as for `serve DIR`.
    let r = get(addr, "/assets/app.css");
    let etag = r.header("etag").unwrap().to_owned();
    let r = request(addr, "GET", "/assets/app.css", &[("If-None-Match", &etag)]);
    assert_eq!((r.status, r.header("etag")), (304, Some(etag.as_str())));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    let r = request(addr, "GET", "/assets/app.css", &[("If-Match", "\"nope\"")]);
    assert_eq!(r.status, 412);
    let r = request(addr, "GET", "/assets/app.css", &[("Range", "bytes=0-3")]);
    assert_eq!((r.status, r.text().as_str()), (206, "body"));
    assert_eq!(r.header("content-range"), Some(&*format!("bytes 0-3/{}", css.len())));
    let r = request(addr, "GET", "/assets/app.css", &[("Range", "bytes=0-1,5-6")]);
    assert_eq!(r.status, 206);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("multipart/byteranges; boundary="));
    let r = request(addr, "GET", "/assets/app.css", &[("Range", "bytes=99999-")]);
    assert_eq!(r.status, 416);
    let r = request(addr, "HEAD", "/assets/app.css", &[]);
    assert_eq!(
        (r.status, r.header("content-length")),
        (200, Some(&*css.len().to_string()))
    );
    assert_eq!(request(addr, "POST", "/", &[]).status, 405);
    // RFC 9110 §9.1: a method the server does not recognise is 501.
    assert_eq!(request(addr, "ANNOUNCE", "/", &[]).status, 501);
}

fn decode(coding: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        None => out.extend_from_slice(body),
        Some("gzip") => {
            flate2::read::GzDecoder::new(body).read_to_end(&mut out).unwrap();
        }
        Some("br") => {
            brotli::BrotliDecompress(&mut &body[..], &mut out).unwrap();
        }
        Some("zstd") => out = zstd::stream::decode_all(body).unwrap(),
        Some(other) => panic!("unexpected coding {other}"),
    }
    out
}

#[test]
fn a_symlink_loop_is_packed_once_and_named_as_a_loop() {
    let t = tmp("loop");
    t.write("site/d/a.txt", "a");
    t.write("site/index.html", "home");
    std::os::unix::fs::symlink("..", t.path("site/d/up")).unwrap();
    std::os::unix::fs::symlink("d", t.path("site/alias")).unwrap();
    let out = t.path("site.prg");
    let stats = pack(&PackOptions::new(t.path("site"), &out)).unwrap();
    // Reached twice, once through the alias: each is a loop.
    assert_eq!(stats.skipped_loops, vec!["/alias/up".to_owned(), "/d/up".to_owned()]);
    assert!(stats.skipped_symlinks.is_empty(), "{:?}", stats.skipped_symlinks);
    // /d/a.txt, /index.html, and /alias/a.txt through the symlink that
    // stays inside and loops nowhere; nothing under /d/up.
    assert_eq!(stats.n_files, 3);
    let archive = Archive::open(&out, Mode::Heap).unwrap();
    let mut paths: Vec<String> = archive
        .entries()
        .map(|e| String::from_utf8_lossy(e.path()).into_owned())
        .collect();
    paths.sort();
    assert!(paths.iter().all(|p| !p.contains("/up")), "{paths:?}");
    assert!(paths.contains(&"/alias/a.txt".to_owned()), "{paths:?}");
}

/// Each symlink not followed is named with why: its target is missing,
/// resolving it never ends, it leads outside the tree, or to a dotfile
/// (which `serve DIR` would not serve either). One that stays inside,
/// absolute or relative, is packed.
#[test]
fn pack_says_why_it_skipped_each_symlink() {
    let t = tmp("skips");
    t.write("site/index.html", "home");
    t.write("site/.env", "SECRET=1");
    t.write("site/.git/config", "[core]");
    t.write("site/.well-known/security.txt", "Contact: x");
    for (link, target) in [
        ("dangling", PathBuf::from("nowhere")),
        ("loop", "loop".into()),
        ("ping", "pong".into()),
        ("pong", "ping".into()),
        ("passwd", "/etc/passwd".into()),
        ("env-link.txt", ".env".into()),
        ("gitdir", ".git".into()),
        ("wk", ".well-known".into()),
        (".well-known/alias.txt", "security.txt".into()),
        ("abs-home.html", t.path("site/index.html")),
        ("rel-home.html", "index.html".into()),
    ] {
        std::os::unix::fs::symlink(target, t.path("site").join(link)).unwrap();
    }
    let out = t.path("site.prg");
    let stats = pack(&PackOptions::new(t.path("site"), &out)).unwrap();
    let mut skipped = stats.skipped_symlinks.clone();
    skipped.sort();
    assert_eq!(
        skipped,
        [
            ("/dangling", SymlinkSkip::Dangling),
            ("/env-link.txt", SymlinkSkip::Dotfile),
            ("/gitdir", SymlinkSkip::Dotfile),
            ("/loop", SymlinkSkip::Loop),
            ("/passwd", SymlinkSkip::Outside),
            ("/ping", SymlinkSkip::Loop),
            ("/pong", SymlinkSkip::Loop),
            ("/wk", SymlinkSkip::Dotfile),
        ]
        .map(|(path, why)| (path.to_owned(), why))
    );
    assert!(stats.skipped_loops.is_empty(), "{:?}", stats.skipped_loops);
    let archive = Archive::open(&out, Mode::Heap).unwrap();
    let mut paths: Vec<String> = archive
        .entries()
        .map(|e| String::from_utf8_lossy(e.path()).into_owned())
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "/",
            "/.well-known/alias.txt",
            "/.well-known/security.txt",
            "/abs-home",
            "/abs-home.html",
            "/index.html",
            "/rel-home",
            "/rel-home.html"
        ]
    );
}

#[test]
fn packing_is_deterministic_and_atomic() {
    let t = tmp("determinism");
    let root = site(&t);
    let a = t.path("a.prg");
    let b = t.path("b.prg");
    // More files than one batch of the packing threads (256), so that
    // batches and threads finish in different orders.
    for i in 0..600 {
        t.write(
            &format!("site/many/{i:03}.txt"),
            format!("file {i} ").repeat(i % 50 + 1),
        );
    }
    let mut one_thread = PackOptions::new(&root, &a);
    one_thread.threads = 1;
    pack(&one_thread).unwrap();
    let mut three_threads = PackOptions::new(&root, &b);
    three_threads.threads = 3;
    pack(&three_threads).unwrap();
    assert!(
        std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(),
        "byte-identical"
    );
    // A failed pack leaves neither a temporary file nor the target.
    t.write("site/bad/_redirects", "");
    t.write("site/_redirects", "/x /y 303\n");
    let c = t.path("c.prg");
    let err = pack(&PackOptions::new(&root, &c)).unwrap_err();
    assert!(err.contains("line 1: status 303 is not one _redirects takes"), "{err}");
    assert!(!c.exists());
    let leftovers: Vec<_> = std::fs::read_dir(t.dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Bodies sent by sendfile (over 16 KiB) start on a page of the file, so
/// that sendfile goes from an aligned offset (`format::BODY_ALIGN`); the
/// small ones are packed tight; every body still reads back exact.
#[test]
fn bodies_sent_by_sendfile_start_on_a_page() {
    use peregrine_archive::format::{BODY_ALIGN, MAP_BODY_BYTES_MAX};
    let t = tmp("align");
    let sizes = [17usize, 5_000, 16 * 1024, 16 * 1024 + 1, 65_536, 100_003, 333, 70_000];
    // Incompressible bytes, so that each file's body is its own and large.
    let (out, files) = packed_noise(&t, &sizes, 0x9e37_79b9_7f4a_7c15);
    let archive = Archive::open(&out, Mode::Heap).unwrap();
    let raw = std::fs::read(&out).unwrap();
    let (mut aligned, mut small) = (0, 0);
    for (path, bytes) in &files {
        let v = archive.get(0, path.as_bytes()).unwrap().variant(0).unwrap();
        assert_eq!(v.body_len, bytes.len() as u64, "{path}");
        let at = v.body_off as usize;
        assert!(
            raw[at..at + bytes.len()] == bytes[..],
            "{path}: the body reads back exact"
        );
        if v.body_len > MAP_BODY_BYTES_MAX {
            assert_eq!(
                v.body_off % BODY_ALIGN,
                0,
                "{path}: {} bytes at {}",
                v.body_len,
                v.body_off
            );
            aligned += 1;
        } else if v.body_off % BODY_ALIGN != 0 {
            small += 1;
        }
    }
    assert_eq!(aligned, 4);
    assert!(small > 0, "small bodies are not padded");
}

/// A request with none of the fields the steps read (no Accept-Encoding,
/// validator or Range) takes the archive's shortest path (`answer_bare`);
/// one with a field takes the shared steps. Both give the same whole
/// answer for every body size on both sides of `MAP_BODY_BYTES_MAX`
/// (from the map, or from the file under it), from a map and from a heap
/// copy, on the first answer (the variant prepared) and the next ones
/// (found prepared), for GET and HEAD.
#[test]
fn requests_without_fields_get_the_answer_the_steps_give() {
    let t = tmp("bare");
    let sizes = [0usize, 17, 16 * 1024, 16 * 1024 + 1, 70_000];
    let (out, files) = packed_noise(&t, &sizes, 0x2545_f491_4f6c_dd1d);
    for mode in [Mode::Map, Mode::Heap] {
        let handler = ArchiveServer::open(&out, mode).unwrap();
        let running = Server::new().bind("127.0.0.1:0").workers(1).start(handler).unwrap();
        let addr = running.local_addr();
        for (path, bytes) in &files {
            for round in 0..2 {
                let bare = get(addr, path);
                let fielded = request(addr, "GET", path, &[("Accept-Encoding", "identity")]);
                let at = format!("{mode:?} {path} round {round}");
                assert_eq!((bare.status, fielded.status), (200, 200), "{at}");
                assert!(bare.body == *bytes, "{at}: the body, without fields");
                assert!(fielded.body == *bytes, "{at}: the body, with a field");
                for name in ["etag", "last-modified", "content-type", "content-length"] {
                    assert_eq!(bare.header(name), fielded.header(name), "{at}: {name}");
                }
                assert!(bare.header("etag").is_some(), "{at}: an ETag");
                let head = request(addr, "HEAD", path, &[]);
                assert_eq!(head.status, 200, "{at}: HEAD");
                assert!(head.body.is_empty(), "{at}: HEAD has no body");
                assert_eq!(head.header("etag"), bare.header("etag"), "{at}: HEAD's ETag");
                assert_eq!(head.header("content-length"), bare.header("content-length"), "{at}");
            }
        }
        running.shutdown();
        running.join().unwrap();
    }
}

#[test]
fn damaged_archives_are_refused_with_a_reason() {
    let t = tmp("damage");
    let archive = pack_site(&t);
    let good = std::fs::read(&archive).unwrap();
    assert!(Archive::from_bytes(good.clone()).is_ok());
    let refuse = |bytes: Vec<u8>, why: &str| {
        let err = match Archive::from_bytes(bytes) {
            Ok(a) => a.verify_data().unwrap_err(),
            Err(e) => e,
        };
        assert!(err.to_string().contains(why), "{err} (wanted {why})");
    };
    refuse(good[..good.len() - 1].to_vec(), "truncated");
    refuse(good[..10].to_vec(), "shorter than the header");
    refuse(
        b"hello world, this is not an archive at all, not even close to one.".to_vec(),
        "bad magic",
    );
    let mut v = good.clone();
    v[8] = 9;
    refuse(v, "version 9");
    let index_off = u64::from_le_bytes(good[24..32].try_into().unwrap()) as usize;
    let mut v = good.clone();
    v[index_off + 70] ^= 1;
    refuse(v, "index checksum");
    let mut v = good.clone();
    v[100] ^= 1;
    refuse(v, "data checksum");
    let mut v = good.clone();
    v[20] ^= 1;
    refuse(v, "header checksum");
    // The server refuses to start on one.
    let bad = t.path("bad.prg");
    std::fs::write(&bad, &good[..good.len() - 5]).unwrap();
    assert!(ArchiveServer::open(&bad, Mode::Map).is_err());
}

/// A server hashes no body when it sends it (serve.rs, `prepare`): the
/// data hash, checked before an archive is served, is what catches a
/// damaged body, at start and at a swap (FORMAT.md, "What a reader may
/// assume after validation"). One byte of one body is flipped, the header
/// and index left as written, so only the data hash can tell.
#[test]
fn a_damaged_body_is_refused_at_start_and_at_a_swap() {
    let t = tmp("damaged-body");
    let target = t.path("live.prg");
    pack_generation(&t, 1, &target);
    let good = std::fs::read(&target).unwrap();
    let body = generation_body(1, 3);
    let at = good
        .windows(body.len())
        .position(|w| w == body.as_slice())
        .expect("the identity body is stored as is");
    let mut damaged = good.clone();
    damaged[at + body.len() / 2] ^= 1;
    assert!(
        Archive::from_bytes(damaged.clone()).is_ok(),
        "header and index still check"
    );
    let bad = t.path("bad.prg");
    std::fs::write(&bad, &damaged).unwrap();
    for mode in [Mode::Map, Mode::Heap] {
        let err = ArchiveServer::open(&bad, mode)
            .err()
            .expect("a damaged body is refused");
        assert!(err.to_string().contains("data checksum"), "{err}");
    }
    // At a swap: refused, and the archive served before keeps serving.
    let handler = ArchiveServer::open(&target, Mode::Map).unwrap();
    let counters = handler.counters();
    let server = Server::new().bind("127.0.0.1:0").workers(1).start(handler).unwrap();
    let addr = server.local_addr();
    assert_eq!(get(addr, "/f3.bin").body, body);
    std::fs::rename(&bad, &target).unwrap();
    wait_until("the damaged replacement refused", || counters.refused() > 0);
    assert_eq!(counters.generation(), 1);
    let r = get(addr, "/f3.bin");
    assert_eq!((r.status, r.body), (200, body));
}

/// A small deterministic generator for the model test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn random_trees_pack_to_archives_that_answer_like_the_tree() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for round in 0..8 {
        let t = tmp(&format!("model-{round}"));
        let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for _ in 0..rng.below(60) + 1 {
            let depth = rng.below(3);
            let mut path = String::new();
            for _ in 0..depth {
                path.push_str(&format!("d{}/", rng.below(4)));
            }
            let ext = ["txt", "html", "css", "bin", "js"][rng.below(5) as usize];
            path.push_str(&format!("f{}.{ext}", rng.below(1000)));
            let len = [0, 1, 17, 300, 5000, 70_000][rng.below(6) as usize];
            let body: Vec<u8> = if rng.below(2) == 0 {
                (0..len).map(|_| b'a' + (rng.below(3) as u8)).collect()
            } else {
                (0..len).map(|_| rng.next() as u8).collect()
            };
            // A directory and a file cannot share a name.
            if model
                .keys()
                .any(|k| k.starts_with(&format!("{path}/")) || path.starts_with(&format!("{k}/")))
            {
                continue;
            }
            t.write(&format!("src/{path}"), &body);
            model.insert(path, body);
        }
        let out = t.path("m.prg");
        pack(&PackOptions::new(t.path("src"), &out)).unwrap();
        let a = Archive::open(&out, Mode::Map).unwrap();
        a.verify_data().unwrap();
        let mut n_resources = 0;
        for (path, body) in &model {
            let e = a
                .get(0, format!("/{path}").as_bytes())
                .unwrap_or_else(|| panic!("{path} missing"));
            let v = e.variant(0).unwrap();
            assert_eq!(a.slice(v.body_off, v.body_len), &body[..], "{path}");
            for (i, coding) in [(1, "br"), (2, "zstd"), (3, "gzip")] {
                if let Some(v) = e.variant(i) {
                    assert!(
                        v.body_len < body.len() as u64,
                        "{path} {coding} kept though not smaller"
                    );
                    assert_eq!(
                        decode(Some(coding), a.slice(v.body_off, v.body_len)),
                        &body[..],
                        "{path} {coding}"
                    );
                }
            }
            n_resources += 1;
        }
        // Clean URLs: each page also answers without `.html`.
        let mut n_clean = 0;
        for (path, body) in model.iter().filter(|(p, _)| p.ends_with(".html")) {
            let clean = format!("/{}", path.trim_end_matches(".html"));
            let e = a.get(0, clean.as_bytes()).unwrap_or_else(|| panic!("{clean} missing"));
            let v = e.variant(0).unwrap();
            assert_eq!(a.slice(v.body_off, v.body_len), &body[..], "{clean}");
            n_clean += 1;
        }
        // Nothing else answers: every entry is a file of the model or its
        // clean URL (or an index alias or its redirect, which the model
        // has none of).
        assert_eq!(a.entries().count(), n_resources + n_clean);
        assert!(a.get(0, b"/not-in-the-model").is_none());
    }
}

/// Every file of generation `g` is this body, so a reader can tell which
/// generation a body came from, and whether it is whole.
fn generation_body(g: usize, file: usize) -> Vec<u8> {
    let mut b = format!("generation {g:03} file {file:02}|").into_bytes();
    b.resize(20_000 + file * 1000, b'0' + (g % 10) as u8);
    b
}

fn pack_generation(t: &Scratch, g: usize, target: &Path) {
    let src = t.path(&format!("gen{g}"));
    for file in 0..8 {
        let p = src.join(format!("f{file}.bin"));
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(p, generation_body(g, file)).unwrap();
    }
    // Packed beside the target, then renamed over it, as a deploy would.
    let tmp = t.path(&format!("next-{g}.prg"));
    pack(&PackOptions::new(&src, &tmp)).unwrap();
    std::fs::rename(&tmp, target).unwrap();
}

#[test]
fn archives_replaced_by_rename_swap_under_load_without_failures() {
    let t = tmp("swap");
    let target = t.path("live.prg");
    pack_generation(&t, 0, &target);
    let (server, probe) = serve(&target);
    let addr = server.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    // What the clients have done so far, for the test to wait on: requests
    // answered, and the newest generation a body came from.
    let (n_answered, newest) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let clients: Vec<_> = (0..3)
        .map(|c| {
            let stop = stop.clone();
            let (n_answered, newest) = (n_answered.clone(), newest.clone());
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let (mut n, mut buf, mut seen) = (0usize, Vec::new(), std::collections::BTreeSet::new());
                while !stop.load(Ordering::Relaxed) {
                    let file = (n + c) % 8;
                    s.write_all(format!("GET /f{file}.bin HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
                        .unwrap();
                    let resp = loop {
                        if let Some((r, used)) = http::parse(&buf, "GET") {
                            buf.drain(..used);
                            break r;
                        }
                        let mut chunk = [0u8; 65536];
                        let k = s.read(&mut chunk).expect("the connection stays up");
                        assert!(k > 0, "the server closed the connection");
                        buf.extend_from_slice(&chunk[..k]);
                    };
                    assert_eq!(resp.status, 200, "request {n} failed");
                    let g: usize = std::str::from_utf8(&resp.body[11..14]).unwrap().parse().unwrap();
                    assert_eq!(resp.body, generation_body(g, file), "a body mixes generations");
                    seen.insert(g);
                    n += 1;
                    n_answered.fetch_add(1, Ordering::Relaxed);
                    newest.fetch_max(g, Ordering::Relaxed);
                }
                (n, seen)
            })
        })
        .collect();
    for g in 1..=20 {
        pack_generation(&t, g, &target);
        wait_until(&format!("generation {g} loaded"), || probe.generation() > g as u64);
        // A client served from it before the next swap.
        wait_until(&format!("a body of generation {g}"), || {
            newest.load(Ordering::Relaxed) >= g
        });
    }
    wait_until("over 100 answers", || n_answered.load(Ordering::Relaxed) > 100);
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    let mut generations = std::collections::BTreeSet::new();
    for c in clients {
        let (n, seen) = c.join().expect("a client failed");
        total += n;
        generations.extend(seen);
    }
    assert!(total > 100, "only {total} requests");
    assert!(
        generations.contains(&20),
        "the last generation was served: {generations:?}"
    );
    assert!(generations.len() > 5, "swaps were seen while serving: {generations:?}");
    // A corrupt replacement is refused; the last good one keeps serving.
    let bad = t.path("bad.prg");
    std::fs::write(&bad, b"PRGNARC\0 this is not a valid archive").unwrap();
    let refused = probe.refused();
    std::fs::rename(&bad, &target).unwrap();
    wait_until("the corrupt archive was refused", || probe.refused() > refused);
    let r = get(addr, "/f1.bin");
    assert_eq!(r.body, generation_body(20, 1));
}

#[test]
fn archives_rewritten_in_place_do_not_crash_the_server() {
    let t = tmp("inplace");
    let target = t.path("live.prg");
    pack_generation(&t, 0, &target);
    let (server, probe) = serve(&target);
    let addr = server.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let file = n % 8;
                let r = get(addr, &format!("/f{file}.bin"));
                assert_eq!(r.status, 200, "request {n}");
                let g: usize = std::str::from_utf8(&r.body[11..14]).unwrap().parse().unwrap();
                assert_eq!(r.body, generation_body(g, file), "a body mixes generations");
                n += 1;
            }
            n
        })
    };
    for g in 1..=3 {
        let next = t.path(&format!("next-{g}.prg"));
        let src = t.path(&format!("gen{g}"));
        for file in 0..8 {
            std::fs::create_dir_all(&src).unwrap();
            std::fs::write(src.join(format!("f{file}.bin")), generation_body(g, file)).unwrap();
        }
        pack(&PackOptions::new(&src, &next)).unwrap();
        let bytes = std::fs::read(&next).unwrap();
        // In place: truncate, then write, through the same inode (as `cp`
        // does). The open waits on the server's lease while it moves off
        // the map; without that, the server would die of SIGBUS.
        std::fs::write(&target, &bytes).unwrap();
        wait_until(&format!("generation {g} served"), || {
            get(addr, "/f3.bin").body == generation_body(g, 3)
        });
    }
    // Truncated to nothing in place: refused, the last good archive serves.
    let refused = probe.refused();
    std::fs::File::options()
        .write(true)
        .open(&target)
        .unwrap()
        .set_len(0)
        .unwrap();
    wait_until("the truncated archive was refused", || probe.refused() > refused);
    assert_eq!(get(addr, "/f2.bin").body, generation_body(3, 2));
    stop.store(true, Ordering::Relaxed);
    let n = client.join().expect("the client saw a failure");
    assert!(n > 10, "only {n} requests");
    assert!(probe.generation() > 1);
}

/// A writer that will not wait (`O_NONBLOCK`) is told EAGAIN rather than
/// made to wait, as fcntl(2) says of a lease break; the break has begun,
/// and once the server is off the map the same open succeeds and the
/// rewritten archive is served.
#[test]
fn a_non_blocking_writer_gets_eagain_then_the_file_once_the_server_is_off_the_map() {
    use std::os::unix::fs::OpenOptionsExt;
    let t = tmp("nonblocking");
    let target = t.path("live.prg");
    pack_generation(&t, 0, &target);
    let (server, _probe) = serve(&target);
    let addr = server.local_addr();
    let open = || {
        std::fs::File::options()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&target)
    };
    let refused = open().expect_err("the lease lets no writer in at once");
    assert_eq!(refused.raw_os_error(), Some(libc::EWOULDBLOCK), "{refused}");
    let mut file = test_support::wait_for("the lease given up", || open().ok());
    let next = t.path("next.prg");
    let src = t.path("gen1");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..8 {
        std::fs::write(src.join(format!("f{i}.bin")), generation_body(1, i)).unwrap();
    }
    pack(&PackOptions::new(&src, &next)).unwrap();
    file.set_len(0).unwrap();
    file.write_all(&std::fs::read(&next).unwrap()).unwrap();
    drop(file);
    wait_until("the rewritten archive served", || {
        get(addr, "/f3.bin").body == generation_body(1, 3)
    });
}

#[test]
fn a_slow_reader_survives_the_archive_being_truncated_under_it() {
    slow_read_while_truncated("slow", false);
}

/// Under TLS the body is encrypted in user space: read from the map after
/// the truncation, that was SIGBUS (a plain `writev` only got EFAULT).
#[test]
fn a_slow_tls_reader_survives_the_archive_being_truncated_under_it() {
    slow_read_while_truncated("slow-tls", true);
}

/// Incompressible bytes (xorshift64 from a seed), so that each file's
/// body is its own and as large as asked.
struct Noise(u64);

impl Noise {
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                self.0 as u8
            })
            .collect()
    }
}

/// A site of files `/f0.bin`, `/f1.bin`, ... of `sizes` bytes of
/// `Noise(seed)`, packed into `a.prg`: the archive's path and each file's
/// path and bytes.
fn packed_noise(t: &Scratch, sizes: &[usize], seed: u64) -> (PathBuf, Vec<(String, Vec<u8>)>) {
    let mut noise = Noise(seed);
    let mut files = Vec::new();
    for (i, n) in sizes.iter().enumerate() {
        let bytes = noise.bytes(*n);
        t.write(&format!("site/f{i}.bin"), &bytes);
        files.push((format!("/f{i}.bin"), bytes));
    }
    let out = t.path("a.prg");
    pack(&PackOptions::new(t.path("site"), &out)).unwrap();
    (out, files)
}

trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

/// A client reads a large archived file at 1 KiB/s through a 4 KiB receive
/// buffer while the archive is truncated in place; the process must live
/// and keep serving others.
fn slow_read_while_truncated(name: &str, tls: bool) {
    let t = tmp(name);
    // Incompressible, so the response is the whole 8 MiB, far more than
    // the socket buffers hold.
    let big = Noise(0x9e37_79b9_7f4a_7c15).bytes(8 << 20);
    t.write("site/big.bin", &big);
    t.write("site/small.txt", "still here");
    let target = t.path("live.prg");
    pack(&PackOptions::new(t.path("site"), &target)).unwrap();
    let handler = ArchiveServer::open(&target, Mode::Map).unwrap();
    let pki = test_support::pki::Pki::new(&format!("archive-{name}"));
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let client = pki.client();
    // The reader may make no progress for longer than the default
    // send_timeout (30 s), which would drop it first and hide what the
    // truncation does to it.
    let limits = peregrine::Limits {
        send_timeout: Duration::from_secs(300),
        ..peregrine::Limits::default()
    };
    let server = Server::new().workers(1).limits(limits);
    let server = if tls {
        let config = peregrine::TlsConfig::from_pem_files(cert, key).unwrap();
        server.bind_tls("127.0.0.1:0", config).start(handler)
    } else {
        server.bind("127.0.0.1:0").start(handler)
    }
    .unwrap();
    let addr = server.local_addr();
    let connect = || -> Box<dyn Stream> {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        socket.connect(&addr.into()).unwrap();
        let tcp: TcpStream = socket.into();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        if !tls {
            return Box::new(tcp);
        }
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let conn = rustls::ClientConnection::new(client.clone(), name).unwrap();
        Box::new(rustls::StreamOwned::new(conn, tcp))
    };
    let fetch = |target: &str| -> Vec<u8> {
        let mut c = connect();
        write!(
            c,
            "GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut raw = Vec::new();
        let _ = c.read_to_end(&mut raw); // rustls: a close without close_notify
        http::parse(&raw, "GET").expect("a whole response").0.body
    };

    let mut slow = connect();
    slow.write_all(b"GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut buf = [0; 1024];
    let mut received = slow.read(&mut buf).unwrap();
    assert!(buf.starts_with(b"HTTP/1.1 200"));

    // Truncated in place while that response is being sent: the open waits
    // on the server's lease, which is released once the server has moved
    // off the map, long before the response is done.
    let truncate = {
        let target = target.clone();
        std::thread::spawn(move || {
            std::fs::File::options()
                .write(true)
                .truncate(true)
                .open(&target)
                .unwrap();
        })
    };
    while !truncate.is_finished() {
        std::thread::sleep(Duration::from_secs(1));
        received += slow.read(&mut buf).unwrap();
        assert_eq!(fetch("/small.txt"), b"still here");
    }
    truncate.join().unwrap();
    // The rest: what the socket buffers held, then a close, short of the
    // promised length (the file has no more bytes to send).
    loop {
        match slow.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => received += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(received < big.len(), "{received} bytes arrived");
    // The process is alive and serves others from its copy in memory.
    assert_eq!(fetch("/small.txt"), b"still here");
    assert!(fetch("/big.bin") == big, "the body differs");
}

/// A worker stopped between its lookup and its copy of the bytes
/// (preempted, stopped in a debugger, swapped out) while the archive is
/// truncated in place: when it goes on, it sends the bytes it looked up.
/// Before the map was detached in place (`map::detach`), the lease was
/// released after a grace period whatever the worker was doing, and its
/// copy out of the truncated map was SIGBUS: this test process died.
#[test]
fn a_worker_stopped_mid_request_survives_the_archive_being_truncated() {
    let t = tmp("stopped");
    let body = "the bytes looked up before the truncation\n".repeat(100);
    t.write("site/stopped.txt", &body);
    let target = t.path("live.prg");
    pack(&PackOptions::new(t.path("site"), &target)).unwrap();
    let (server, probe) = serve(&target);
    let addr = server.local_addr();
    assert_eq!(get(addr, "/stopped.txt").body, body.as_bytes());

    let (stopped_tx, stopped) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    peregrine_archive::test_hooks::stop_after_lookup("/stopped.txt", stopped_tx, go_rx);
    let client = std::thread::spawn(move || get(addr, "/stopped.txt"));
    stopped
        .recv_timeout(Duration::from_secs(10))
        .expect("the request never reached its lookup");
    // The open waits on the lease until the server lets the writer go;
    // then the file is empty.
    std::fs::File::options()
        .write(true)
        .truncate(true)
        .open(&target)
        .unwrap();
    assert_eq!(std::fs::metadata(&target).unwrap().len(), 0);
    go.send(()).unwrap();
    let r = client.join().expect("the client saw a failure");
    assert_eq!((r.status, r.body), (200, body.clone().into_bytes()));
    // Still served, from memory; the empty file is refused.
    assert_eq!(get(addr, "/stopped.txt").body, body.as_bytes());
    wait_until("the empty archive was refused", || probe.refused() > 0);
    assert_eq!(get(addr, "/stopped.txt").body, body.as_bytes());
}

/// An HTTP/2 stream whose window the client keeps shut holds its small
/// body (a range of the map) for as long as the client likes, past any
/// wait the server could afford before letting a writer go; meanwhile the
/// archive is truncated in place. When the window opens, the body must
/// come whole. Before maps were detached in place, the server waited 30 s
/// for such bodies, then released the lease anyway, and the copy into the
/// DATA frame was SIGBUS.
#[test]
fn an_http2_body_held_by_a_shut_window_survives_the_archive_being_truncated() {
    let t = tmp("h2-window");
    let body = "a body the client is not ready to read yet\n".repeat(200);
    t.write("site/held.txt", &body);
    let target = t.path("live.prg");
    pack(&PackOptions::new(t.path("site"), &target)).unwrap();
    let (server, probe) = serve(&target);

    let mut c = TcpStream::connect(server.local_addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let frame = |kind: u8, flags: u8, stream: u32, payload: &[u8]| {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    };
    // The preface, then SETTINGS_INITIAL_WINDOW_SIZE (4) = 0: no stream
    // may carry DATA until its window is opened.
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(4, 0, 0, &[0, 4, 0, 0, 0, 0]));
    hello.extend(frame(4, 1, 0, &[]));
    // GET /held.txt: HPACK literals with static-table names.
    let mut head = Vec::new();
    for (index, value) in [(2u8, "GET"), (6, "http"), (4, "/held.txt"), (1, "localhost")] {
        head.extend([index, value.len() as u8]);
        head.extend_from_slice(value.as_bytes());
    }
    hello.extend(frame(1, 0x5, 1, &head)); // END_STREAM | END_HEADERS
    c.write_all(&hello).unwrap();
    let mut buf = Vec::new();
    let mut next_frame = |c: &mut TcpStream| -> (u8, u8, u32, Vec<u8>) {
        loop {
            if buf.len() >= 9 {
                let len = (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
                if buf.len() >= 9 + len {
                    let f: Vec<u8> = buf.drain(..9 + len).collect();
                    let stream = u32::from_be_bytes(f[5..9].try_into().unwrap()) & 0x7fff_ffff;
                    return (f[3], f[4], stream, f[9..].to_vec());
                }
            }
            let mut chunk = [0; 16384];
            let n = c.read(&mut chunk).unwrap();
            assert!(n > 0, "the server closed the connection");
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    // The response head arrives; its body waits on the shut window.
    loop {
        let (kind, _, stream, _) = next_frame(&mut c);
        assert_ne!((kind, stream), (0, 1), "DATA through a shut window");
        if (kind, stream) == (1, 1) {
            break;
        }
    }

    // Truncated in place: the open waits until the server lets it go.
    std::fs::File::options()
        .write(true)
        .truncate(true)
        .open(&target)
        .unwrap();
    assert_eq!(std::fs::metadata(&target).unwrap().len(), 0);
    // The window opens: the body the stream held comes whole.
    c.write_all(&frame(8, 0, 1, &(1u32 << 20).to_be_bytes())).unwrap();
    let mut got = Vec::new();
    loop {
        let (kind, flags, stream, payload) = next_frame(&mut c);
        if (kind, stream) == (0, 1) {
            got.extend_from_slice(&payload);
            if flags & 1 != 0 {
                break;
            }
        }
    }
    assert!(got == body.as_bytes(), "the body differs ({} bytes)", got.len());
    wait_until("the empty archive was refused", || probe.refused() > 0);
    assert_eq!(get(server.local_addr(), "/held.txt").body, body.as_bytes());
}

#[test]
fn reload_loads_the_archive_again() {
    let t = tmp("reload");
    let target = t.path("live.prg");
    pack_generation(&t, 0, &target);
    let server = ArchiveServer::open(&target, Mode::Map).unwrap();
    assert_eq!(server.generation(), 1);
    server.reload();
    wait_until("the reload asked for", || server.generation() >= 2);
}

/// The signals a process may catch, from /proc/self/status (`SigCgt`, a
/// mask in hex whose bit n-1 is signal n).
fn caught_signals() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let mask = status.lines().find_map(|l| l.strip_prefix("SigCgt:")).unwrap();
    u64::from_str_radix(mask.trim(), 16).unwrap()
}

/// Signals belong to the program: serving an archive, taking its lease,
/// and having the lease broken by a writer install no handler (SIGIO's
/// default action would end the process; the break is polled instead).
#[test]
fn the_crate_installs_no_signal_handler() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGIO, SIGTERM, SIGURG, SIGUSR1};
    let t = tmp("nosignals");
    let target = t.path("live.prg");
    pack_generation(&t, 0, &target);
    let (running, server) = serve(&target);
    assert_eq!(get(running.local_addr(), "/f0.bin").status, 200);
    // A rewrite in place: the writer's open breaks the lease.
    let copy = t.path("copy.prg");
    pack_generation(&t, 1, &copy);
    std::fs::write(&target, std::fs::read(&copy).unwrap()).unwrap();
    let addr = running.local_addr();
    wait_until("the rewritten archive", || {
        get(addr, "/f0.bin").body == generation_body(1, 0)
    });
    assert!(server.generation() >= 3, "no move off the map and reload");
    let caught = caught_signals();
    for signal in [SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGIO, SIGURG] {
        assert_eq!(caught & (1 << (signal - 1)), 0, "signal {signal} has a handler");
    }
    running.shutdown();
    running.join().unwrap();
}

/// Rules an older reader would misanswer (a 200 rewrite sent as a 200
/// with a `Location`) set header flag bit 0, which such a reader refuses;
/// a site with only redirects keeps the flags at 0, readable by all.
#[test]
fn rules_only_new_readers_answer_right_set_a_header_flag() {
    let t = tmp("header-flag");
    let flags = |rules: &str| {
        t.write("site/index.html", "home");
        t.write("site/_redirects", rules);
        let out = t.path("f.prg");
        pack(&PackOptions::new(t.path("site"), &out)).unwrap();
        Archive::open(&out, Mode::Heap).unwrap();
        let bytes = std::fs::read(&out).unwrap();
        u32::from_le_bytes(bytes[12..16].try_into().unwrap())
    };
    assert_eq!(flags("/a /b 301\n/c /d 302!\n/e/* /f/:splat 308\n"), 0);
    for needs_a_new_reader in [
        "/a /index.html 200\n",
        "/a /index.html 404\n",
        "/e/* /f/:splat 308!\n",
        "/store id=:id /b/:id 301\n",
    ] {
        assert_eq!(flags(needs_a_new_reader), 1, "{needs_a_new_reader}");
    }
}

/// `Basic-Auth` rules are entries of kind 5 under header flag bit 3, next
/// to a signed archive's bits 1 (revoked paths, kind 4) and 2 (trailer):
/// the bits and kinds of the two additions never collide, and a reader
/// still refuses a bit it does not know.
#[test]
fn basic_auth_rules_take_header_flag_bit_3_and_kind_5() {
    use peregrine_archive::format::{
        HEADER_FLAGS_KNOWN, HEADER_FLAG_AUTH, HEADER_FLAG_REVOKED, KIND_AUTH, KIND_REVOKED,
    };
    assert_eq!((HEADER_FLAG_AUTH, KIND_AUTH, KIND_REVOKED), (8, 5, 4));
    let t = tmp("auth-flag");
    t.write("site/index.html", "home");
    t.write("site/admin/secret.txt", "secret");
    t.write("site/_headers", "/admin/*\n  Basic-Auth: alice:wonderland\n");
    let out = t.path("f.prg");
    let mut opts = PackOptions::new(t.path("site"), &out);
    opts.revoked = vec!["/leak.txt".to_owned()];
    pack(&opts).unwrap();
    let a = Archive::open(&out, Mode::Heap).unwrap();
    let kinds: Vec<u8> = a.entries().map(|e| e.kind()).filter(|&k| k > 3).collect();
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert!(kinds.contains(&KIND_AUTH) && kinds.contains(&KIND_REVOKED), "{kinds:?}");
    assert!(a.auth_for(a.default_site(), "/admin/secret.txt").is_some());
    let mut bytes = std::fs::read(&out).unwrap();
    let flags = u32::from_le_bytes(bytes[12..16].try_into().unwrap());
    assert_eq!(flags, HEADER_FLAG_AUTH | HEADER_FLAG_REVOKED);
    // The next bit, unknown to this reader: refused by name.
    let unknown = (HEADER_FLAGS_KNOWN + 1).next_power_of_two();
    bytes[12..16].copy_from_slice(&(flags | unknown).to_le_bytes());
    let bad = t.path("unknown-flag.prg");
    std::fs::write(&bad, &bytes).unwrap();
    let err = Archive::open(&bad, Mode::Heap)
        .err()
        .expect("an unknown flag is refused");
    assert!(err.to_string().contains("unknown archive flags"), "{err}");
}
