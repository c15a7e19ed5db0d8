//! `FileServer` end to end: a real root on disk with a secret planted next
//! to it, a real server on loopback, raw requests.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use peregrine::{Running, Server};
use peregrine_files::{FileServer, Options};
use test_support::http::{get, request};

const SECRET: &str = "top secret: outside the root";

/// A temporary directory `root/` with `secret.txt` beside it.
struct Fixture {
    dir: PathBuf,
}

impl Fixture {
    fn new(name: &str) -> Fixture {
        let dir = std::env::temp_dir().join(format!("peregrine-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("root")).unwrap();
        std::fs::write(dir.join("secret.txt"), SECRET).unwrap();
        Fixture { dir }
    }

    fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
        let path = self.root().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn serve(&self, tweak: impl FnOnce(&mut Options)) -> Running {
        let mut options = Options::new(self.root());
        tweak(&mut options);
        Server::new()
            .bind("127.0.0.1:0")
            .workers(1)
            .start(FileServer::new(options).unwrap())
            .unwrap()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn no_request_reaches_outside_the_root() {
    let f = Fixture::new("traversal");
    f.write("index.html", "home");
    f.write("inner.txt", "inside");
    std::os::unix::fs::symlink("../secret.txt", f.root().join("out")).unwrap();
    std::os::unix::fs::symlink(f.dir.join("secret.txt"), f.root().join("abs")).unwrap();
    std::os::unix::fs::symlink("..", f.root().join("up")).unwrap();
    std::os::unix::fs::symlink("inner.txt", f.root().join("in")).unwrap();
    let server = f.serve(|_| {});
    let addr = server.local_addr();
    for target in [
        "/../secret.txt",
        "/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E/secret.txt",
        "/.%2e/secret.txt",
        "/%252e%252e/secret.txt",
        "/..%2fsecret.txt",
        "/%2e%2e%2fsecret.txt",
        "/%c0%ae%c0%ae/secret.txt",
        "/%e0%80%ae%e0%80%ae/secret.txt",
        "/..\\secret.txt",
        "/..%5csecret.txt",
        "//../secret.txt",
        "/./../secret.txt",
        "/inner.txt/../../secret.txt",
        "/out",
        "/abs",
        "/up/secret.txt",
        "/secret.txt%00.html",
        "/%00",
    ] {
        let r = get(addr, target);
        assert!(
            matches!(r.status, 400 | 403 | 404),
            "{target}: {} {}",
            r.status,
            r.text()
        );
        assert!(!r.text().contains("top secret"), "{target} leaked the secret");
    }
    // NUL and backslashes are named in the 400.
    let r = get(addr, "/a%00b");
    assert_eq!((r.status, r.text().trim()), (400, "400 Bad Request: NUL byte in path"));
    // A symlink that stays inside is followed.
    assert_eq!(get(addr, "/in").text(), "inside");
    // Absolute-form targets take the same path.
    assert_eq!(get(addr, "http://t/../secret.txt").status, 404);

    // --follow-symlinks lets the administrator's own links out.
    let server = f.serve(|o| o.follow_symlinks = true);
    assert_eq!(get(server.local_addr(), "/out").text(), SECRET);
    assert_eq!(get(server.local_addr(), "/../secret.txt").status, 404);
}

#[test]
fn dotfiles_are_hidden_except_well_known() {
    let f = Fixture::new("dotfiles");
    f.write(".env", "KEY=1");
    f.write(".git/config", "[core]");
    f.write(".well-known/security.txt", "Contact: x");
    let server = f.serve(|_| {});
    let addr = server.local_addr();
    assert_eq!(get(addr, "/.env").status, 404);
    assert_eq!(get(addr, "/.git/config").status, 404);
    assert_eq!(get(addr, "/%2egit/config").status, 404);
    assert_eq!(get(addr, "/.well-known/security.txt").text(), "Contact: x");
}

/// README: "symlinks that stay inside are followed". An absolute one is
/// inside when its target starts with the root's path (as given or as
/// resolved), as `pack` (which canonicalises) finds it.
#[test]
fn an_absolute_symlink_that_stays_inside_is_followed() {
    let f = Fixture::new("absolute-inside");
    f.write("inner.txt", "inside");
    f.write("d/b.txt", "b");
    let root = f.root();
    std::os::unix::fs::symlink(root.join("inner.txt"), root.join("abs-file")).unwrap();
    std::os::unix::fs::symlink(root.join("d"), root.join("abs-dir")).unwrap();
    // Through the root's resolved path too, and on through relative links.
    let resolved = std::fs::canonicalize(&root).unwrap();
    std::os::unix::fs::symlink(resolved.join("d/b.txt"), root.join("d/abs-b")).unwrap();
    std::os::unix::fs::symlink("../abs-file", root.join("d/rel-to-abs")).unwrap();
    // Lexically inside, but `..` climbs out: refused as any way out is.
    std::os::unix::fs::symlink(root.join("../secret.txt"), root.join("abs-climb")).unwrap();
    std::os::unix::fs::symlink(f.dir.join("secret.txt"), root.join("abs-out")).unwrap();
    let server = f.serve(|_| {});
    let addr = server.local_addr();
    for (target, body) in [
        ("/abs-file", "inside"),
        ("/abs-dir/b.txt", "b"),
        ("/d/abs-b", "b"),
        ("/d/rel-to-abs", "inside"),
    ] {
        let r = get(addr, target);
        assert_eq!((r.status, r.text().as_str()), (200, body), "{target}");
    }
    for target in ["/abs-climb", "/abs-out"] {
        let r = get(addr, target);
        assert_eq!(r.status, 404, "{target}");
        assert!(!r.text().contains("top secret"), "{target} leaked the secret");
    }
}

/// The dotfile rule judges the path a symlink resolves to, every
/// component of it: a link cannot publish `.env` or `.git/`, and
/// `/.well-known/`'s exception holds only for request paths under it.
#[test]
fn a_symlink_does_not_reach_a_dotfile() {
    let f = Fixture::new("dotfile-links");
    f.write(".env", "SECRET=hunter2");
    f.write(".git/config", "[core] secret");
    f.write(".well-known/security.txt", "Contact: x");
    f.write("d/index.html", "d");
    let root = f.root();
    for (link, target) in [
        ("env-link.txt", ".env".into()),
        ("gitdir", ".git".into()),
        ("d/config", "../.git/config".into()),
        ("abs-env", root.join(".env")),
        ("wk", ".well-known".into()),
        (".well-known/alias.txt", "security.txt".into()),
        (".well-known/leak", "../.env".into()),
        ("d/up", "..".into()),
    ] {
        std::os::unix::fs::symlink::<PathBuf, _>(target, root.join(link)).unwrap();
    }
    for follow_symlinks in [false, true] {
        let server = f.serve(|o| o.follow_symlinks = follow_symlinks);
        let addr = server.local_addr();
        for target in [
            "/env-link.txt",
            "/gitdir/config",
            "/gitdir/",
            "/d/config",
            "/abs-env",
            "/wk/security.txt",
            "/.well-known/leak",
            "/d/up/.env",
            "/d/up/env-link.txt",
        ] {
            let r = get(addr, target);
            assert_eq!(r.status, 404, "{target} (follow_symlinks {follow_symlinks})");
            let text = r.text();
            assert!(
                !text.contains("hunter2") && !text.contains("[core]"),
                "{target} leaked a dotfile"
            );
        }
        for (target, body) in [
            ("/.well-known/security.txt", "Contact: x"),
            ("/.well-known/alias.txt", "Contact: x"),
            ("/d/up/d/index.html", "d"),
        ] {
            let r = get(addr, target);
            assert_eq!((r.status, r.text().as_str()), (200, body), "{target}");
        }
    }
    // --follow-symlinks still lets a link out, but not back into a
    // dotfile of the root.
    std::os::unix::fs::symlink("../root/.env", root.join("round-trip")).unwrap();
    std::os::unix::fs::symlink("../secret.txt", root.join("out")).unwrap();
    let server = f.serve(|o| o.follow_symlinks = true);
    assert_eq!(get(server.local_addr(), "/round-trip").status, 404);
    assert_eq!(get(server.local_addr(), "/out").text(), SECRET);
}

#[test]
fn directories_redirect_index_and_list() {
    let f = Fixture::new("dirs");
    f.write("docs/index.html", "docs home");
    f.write("empty/.keep", "");
    f.write("files/b.txt", "b");
    f.write("files/<a>&'\".txt", "x");
    f.write("files/sub dir/x", "x");
    f.write("files/.hidden", "x");
    let server = f.serve(|_| {});
    let addr = server.local_addr();
    let r = get(addr, "/docs?x=1");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/docs/?x=1"));
    assert_eq!(get(addr, "/docs/").text(), "docs home");
    assert_eq!(get(addr, "/docs/index.html").text(), "docs home");
    // No index, no listing: 404. A file with a trailing slash: 404.
    assert_eq!(get(addr, "/files/").status, 404);
    assert_eq!(get(addr, "/docs/index.html/").status, 404);

    let server = f.serve(|o| o.list_dirs = true);
    let r = get(server.local_addr(), "/files/");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let html = r.text();
    assert!(html.contains("&lt;a&gt;&amp;&#39;&quot;.txt"), "{html}");
    assert!(!html.contains("<a>&"), "names are escaped: {html}");
    assert!(html.contains("href=\"./sub%20dir/\""), "{html}");
    assert!(!html.contains(".hidden"));
    // Directories first, then files by name.
    let sub = html.find("sub dir/").unwrap();
    let a = html.find("&lt;a&gt;").unwrap();
    let b = html.find(">b.txt<").unwrap();
    assert!(sub < a && a < b, "{html}");
}

/// Listings as Caddy's `browse`: sizes and dates, sorts, JSON and text
/// for programs; names escaped and encoded (a `<script>` name does not
/// run, a `\\` name links to its file); nothing listed that is not served
/// as itself; a CSP that forbids scripts whatever the page holds.
#[test]
fn listings_have_sizes_dates_sorts_and_forms_for_programs() {
    let f = Fixture::new("browse");
    let set_mtime = |path: PathBuf, secs: u64| {
        let file = std::fs::File::open(path).unwrap();
        file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
            .unwrap();
    };
    set_mtime(f.write("l/big.bin", vec![7u8; 3000]), 1_000_000_000);
    set_mtime(f.write("l/small.txt", "small"), 1_700_000_000);
    set_mtime(f.write("l/<script>alert(1).txt", "x"), 1_500_000_000);
    set_mtime(f.write("l/back\\slash.txt", "behind a backslash"), 1_600_000_000);
    set_mtime(f.write("l/x.js", "let x;"), 1_400_000_000);
    f.write("l/x.js.gz", "a sibling");
    f.write("l/.env", "SECRET=1");
    f.write("l/_headers", "not listed");
    f.write("l/_redirects", "not listed");
    f.write("l/sub/a.txt", "a");
    set_mtime(f.root().join("l/sub"), 1_300_000_000);
    let server = f.serve(|o| o.list_dirs = true);
    let addr = server.local_addr();

    let r = get(addr, "/l/");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-security-policy"),
        Some("default-src 'none'; style-src 'unsafe-inline'")
    );
    let html = r.text();
    assert!(!html.contains("<script>"), "{html}");
    assert!(html.contains(">&lt;script&gt;alert(1).txt</a>"), "{html}");
    assert!(html.contains("href=\"./%3Cscript%3Ealert%281%29.txt\""), "{html}");
    assert!(html.contains("href=\"./back%5Cslash.txt\""), "{html}");
    assert!(html.contains(">3000<"), "sizes: {html}");
    assert!(html.contains("Sun, 09 Sep 2001 01:46:40 GMT"), "dates: {html}");
    for hidden in ["x.js.gz", ".env", "_headers", "_redirects"] {
        assert!(!html.contains(hidden), "{hidden} listed: {html}");
    }
    // The backslash link reaches its file; a raw backslash is still a 400.
    assert_eq!(get(addr, "/l/back%5Cslash.txt").text(), "behind a backslash");
    assert_eq!(get(addr, "/l/back\\slash.txt").status, 400);

    // Plain text, by Accept or by query: name, size, time; sorted.
    let text = |target: &str, accept: &str| {
        let r = request(addr, "GET", target, &[("Accept", accept)]);
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"), "{target}");
        assert_eq!(r.header("vary"), Some("Accept"));
        r.text()
    };
    let names = |listing: String| -> Vec<String> {
        listing
            .lines()
            .map(|l| l.split('\t').next().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        text("/l/", "text/plain"),
        "sub/\t-\t2011-03-13T07:06:40Z\n<script>alert(1).txt\t1\t2017-07-14T02:40:00Z\n\
         back\\slash.txt\t18\t2020-09-13T12:26:40Z\nbig.bin\t3000\t2001-09-09T01:46:40Z\n\
         small.txt\t5\t2023-11-14T22:13:20Z\nx.js\t6\t2014-05-13T16:53:20Z\n"
    );
    assert_eq!(
        names(text("/l/?sort=size&order=desc&format=text", "*/*")),
        [
            "sub/",
            "big.bin",
            "back\\slash.txt",
            "x.js",
            "small.txt",
            "<script>alert(1).txt"
        ]
    );
    assert_eq!(
        names(text("/l/?format=text&sort=time", "text/html")),
        [
            "sub/",
            "big.bin",
            "x.js",
            "<script>alert(1).txt",
            "back\\slash.txt",
            "small.txt"
        ]
    );

    // JSON, with Caddy's field names.
    let r = request(
        addr,
        "GET",
        "/l/?sort=name&order=desc",
        &[("Accept", "application/json")],
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.header("content-security-policy"),
        Some("default-src 'none'; style-src 'unsafe-inline'")
    );
    let json = r.text();
    assert!(
        json.starts_with("[\n{\"name\":\"sub\",\"url\":\"./sub/\",\"is_dir\":true"),
        "{json}"
    );
    assert!(
        json.contains("{\"name\":\"big.bin\",\"url\":\"./big.bin\",\"is_dir\":false,\"size\":3000,\"mod_time\":\"2001-09-09T01:46:40Z\"}"),
        "{json}"
    );
    assert!(
        json.contains("\"name\":\"back\\\\slash.txt\",\"url\":\"./back%5Cslash.txt\""),
        "{json}"
    );
    assert!(
        json.contains("\\u003cscript\\u003e") && !json.contains("<script>"),
        "{json}"
    );
    assert!(
        json.find("x.js").unwrap() < json.find("small.txt").unwrap(),
        "descending: {json}"
    );
    // A format no one asked for is HTML, as a browser gets it.
    let r = request(addr, "GET", "/l/", &[("Accept", "text/html,application/json;q=0.9")]);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
}

#[test]
fn methods_other_than_get_and_head_are_refused_with_allow() {
    let f = Fixture::new("methods");
    f.write("a.txt", "hello");
    let server = f.serve(|_| {});
    let addr = server.local_addr();
    let r = request(addr, "OPTIONS", "/a.txt", &[]);
    assert_eq!((r.status, r.header("allow")), (204, Some("GET, HEAD, OPTIONS")));
    let r = request(addr, "DELETE", "/a.txt", &[]);
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD, OPTIONS")));
    // RFC 9110 §9.1: a method the server does not recognise is 501.
    assert_eq!(request(addr, "ANNOUNCE", "/a.txt", &[]).status, 501);
    assert_eq!(request(addr, "PROPFIND", "/a.txt", &[]).status, 405);
    let r = request(addr, "HEAD", "/a.txt", &[]);
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
}

#[test]
fn types_and_default_headers() {
    let f = Fixture::new("types");
    f.write("a.css", "body{}");
    f.write("a.png", [0x89, b'P', b'N', b'G']);
    f.write("assets/app.js", "x");
    let server = f.serve(|o| {
        o.cache_rules = vec![("/assets/**".into(), "public, max-age=31536000, immutable".into())];
    });
    let addr = server.local_addr();
    let r = get(addr, "/a.css");
    assert_eq!(r.header("content-type"), Some("text/css; charset=utf-8"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    // Frame and referrer policies matter for documents only.
    assert_eq!(r.header("x-frame-options"), None);
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    f.write("page.html", "<p>");
    let r = get(addr, "/page.html");
    assert_eq!(r.header("x-frame-options"), Some("SAMEORIGIN"));
    assert_eq!(r.header("referrer-policy"), Some("strict-origin-when-cross-origin"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(get(addr, "/a.png").header("content-type"), Some("image/png"));
    let r = get(addr, "/assets/app.js");
    assert_eq!(r.header("content-type"), Some("text/javascript; charset=utf-8"));
    assert_eq!(r.header("cache-control"), Some("public, max-age=31536000, immutable"));
    let server = f.serve(|o| o.security_headers = false);
    assert_eq!(
        get(server.local_addr(), "/a.css").header("x-content-type-options"),
        None
    );
}

fn set_mtime(path: &Path, secs: u64) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap();
}

#[test]
fn validators_answer_304_and_412_and_etags_ignore_mtime() {
    let f = Fixture::new("conditional");
    let path = f.write("a.txt", "same bytes");
    set_mtime(&path, 1_000_000_000);
    let server = f.serve(|o| o.revalidate_interval = Duration::ZERO);
    let addr = server.local_addr();
    let r = get(addr, "/a.txt");
    let etag = r.header("etag").unwrap().to_owned();
    assert!(etag.starts_with('"') && etag.ends_with('"'), "strong: {etag}");
    assert_eq!(r.header("last-modified"), Some("Sun, 09 Sep 2001 01:46:40 GMT"));

    // A rebuild that only changes the mtime keeps the tag.
    set_mtime(&path, 0);
    let r = get(addr, "/a.txt");
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    assert_eq!(r.header("last-modified"), Some("Thu, 01 Jan 1970 00:00:00 GMT"));
    set_mtime(&path, 1_000_000_000);

    let cases: &[(&[(&str, &str)], u16)] = &[
        (&[("If-None-Match", &etag)], 304),
        (&[("If-None-Match", &format!("\"x\", W/{etag}"))], 304),
        (&[("If-None-Match", "*")], 304),
        (&[("If-None-Match", "\"other\"")], 200),
        (&[("If-Modified-Since", "Sun, 09 Sep 2001 01:46:40 GMT")], 304),
        (&[("If-Modified-Since", "Sun, 09 Sep 2001 01:46:39 GMT")], 200),
        (
            &[
                ("If-None-Match", "\"other\""),
                ("If-Modified-Since", "Sun, 09 Sep 2001 01:46:40 GMT"),
            ],
            200,
        ),
        (&[("If-Match", &etag)], 200),
        (&[("If-Match", "\"other\"")], 412),
        (&[("If-Match", &format!("W/{etag}"))], 412),
        (&[("If-Unmodified-Since", "Sun, 09 Sep 2001 01:46:39 GMT")], 412),
        (&[("If-Unmodified-Since", "Sun, 09 Sep 2001 01:46:40 GMT")], 200),
    ];
    for (headers, want) in cases {
        let r = request(addr, "GET", "/a.txt", headers);
        assert_eq!(r.status, *want, "{headers:?}");
        if r.status == 304 {
            assert!(r.body.is_empty());
            assert_eq!(r.header("etag"), Some(etag.as_str()));
            assert_eq!(r.header("cache-control"), Some("no-cache"));
        }
    }
    // A changed file gets a new tag at once (revalidation interval zero).
    std::fs::write(&path, "new bytes!").unwrap();
    let r = request(addr, "GET", "/a.txt", &[("If-None-Match", &etag)]);
    assert_eq!((r.status, r.text().as_str()), (200, "new bytes!"));
    assert_ne!(r.header("etag"), Some(etag.as_str()));
}

#[test]
fn ranges_single_suffix_multiple_and_unsatisfiable() {
    let f = Fixture::new("ranges");
    let content: Vec<u8> = (0..1000u32).map(|i| b'a' + (i % 26) as u8).collect();
    f.write("f.txt", &content);
    let server = f.serve(|_| {});
    let addr = server.local_addr();
    let range = |v: &str| request(addr, "GET", "/f.txt", &[("Range", v)]);

    let r = range("bytes=10-19");
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 10-19/1000"));
    assert_eq!(r.body, &content[10..20]);
    let r = range("bytes=-5");
    assert_eq!((r.status, r.header("content-range")), (206, Some("bytes 995-999/1000")));
    assert_eq!(r.body, &content[995..]);
    let r = range("bytes=990-");
    assert_eq!(r.body, &content[990..]);
    let r = range("bytes=990-5000");
    assert_eq!(r.header("content-range"), Some("bytes 990-999/1000"));

    let r = range("bytes=1000-");
    assert_eq!((r.status, r.header("content-range")), (416, Some("bytes */1000")));
    assert_eq!(range("items=0-1").status, 200);
    assert_eq!(range("bytes=5-1").status, 200);

    // Multiple ranges: multipart/byteranges, parts in order, merged.
    let r = range("bytes=0-1, 10-11, 5-6, 6-7");
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").unwrap().to_owned();
    let boundary = ct.strip_prefix("multipart/byteranges; boundary=").expect(&ct);
    let text = r.text();
    let parts: Vec<&str> = text.split(&format!("--{boundary}")).collect();
    assert_eq!(parts.len(), 5, "{text}"); // "", 3 parts, "--\r\n"
    assert!(
        parts[1].contains("Content-Range: bytes 0-1/1000\r\n\r\nab\r\n"),
        "{text}"
    );
    assert!(
        parts[2].contains("Content-Range: bytes 5-7/1000\r\n\r\nfgh\r\n"),
        "{text}"
    );
    assert!(
        parts[3].contains("Content-Range: bytes 10-11/1000\r\n\r\nkl\r\n"),
        "{text}"
    );
    assert_eq!(parts[4], "--\r\n");

    // Overlapping lists do not amplify: one part, each byte once.
    let many = format!("bytes={}", vec!["0-999"; 100].join(","));
    let r = range(&many);
    assert_eq!((r.status, r.body.len()), (206, 1000));

    // If-Range: a stale validator means the whole, current file.
    let etag = get(addr, "/f.txt").header("etag").unwrap().to_owned();
    let r = request(addr, "GET", "/f.txt", &[("Range", "bytes=0-1"), ("If-Range", &etag)]);
    assert_eq!(r.status, 206);
    let r = request(
        addr,
        "GET",
        "/f.txt",
        &[("Range", "bytes=0-1"), ("If-Range", "\"stale\"")],
    );
    assert_eq!((r.status, r.body.len()), (200, 1000));
    // HEAD ignores Range.
    assert_eq!(request(addr, "HEAD", "/f.txt", &[("Range", "bytes=0-1")]).status, 200);
}

#[test]
fn precompressed_siblings_are_negotiated() {
    let f = Fixture::new("encodings");
    f.write("app.js", "identity bytes");
    f.write("app.js.br", "brotli");
    f.write("app.js.zst", "zstandard!");
    f.write("app.js.gz", "gzipped bytes");
    f.write("plain.txt", "no siblings");
    let server = f.serve(|_| {});
    let addr = server.local_addr();
    let with = |ae: &str| request(addr, "GET", "/app.js", &[("Accept-Encoding", ae)]);
    let cases = [
        ("gzip, deflate, br, zstd", Some("br"), "brotli"),
        ("gzip;q=1.0, br;q=0.5", Some("gzip"), "gzipped bytes"),
        ("zstd", Some("zstd"), "zstandard!"),
        ("zst", None, "identity bytes"),
        ("br;q=0, *;q=0.1", Some("zstd"), "zstandard!"),
        ("identity", None, "identity bytes"),
        ("identity;q=0, gzip", Some("gzip"), "gzipped bytes"),
    ];
    for (ae, coding, body) in cases {
        let r = with(ae);
        assert_eq!(r.header("content-encoding"), coding, "{ae}");
        assert_eq!(r.text(), body, "{ae}");
        assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{ae}");
        assert_eq!(r.header("content-type"), Some("text/javascript; charset=utf-8"));
    }
    let r = get(addr, "/app.js");
    assert_eq!(
        (r.header("content-encoding"), r.text().as_str()),
        (None, "identity bytes")
    );
    // Each representation has its own tag; Vary on 206 and 304 too.
    let br = with("br");
    let gz = with("gzip");
    assert_ne!(br.header("etag"), gz.header("etag"));
    let r = request(
        addr,
        "GET",
        "/app.js",
        &[("Accept-Encoding", "br"), ("Range", "bytes=0-1")],
    );
    assert_eq!((r.status, r.text().as_str()), (206, "br"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    let r = request(
        addr,
        "GET",
        "/app.js",
        &[("Accept-Encoding", "br"), ("If-None-Match", br.header("etag").unwrap())],
    );
    assert_eq!((r.status, r.header("vary")), (304, Some("Accept-Encoding")));
    // The gzip tag does not validate the brotli representation.
    let r = request(
        addr,
        "GET",
        "/app.js",
        &[("Accept-Encoding", "br"), ("If-None-Match", gz.header("etag").unwrap())],
    );
    assert_eq!(r.status, 200);
    // A file without siblings does not vary.
    assert_eq!(get(addr, "/plain.txt").header("vary"), None);
    // Siblings can be turned off.
    let server = f.serve(|o| o.precompressed = false);
    let r = request(server.local_addr(), "GET", "/app.js", &[("Accept-Encoding", "br")]);
    assert_eq!((r.header("content-encoding"), r.header("vary")), (None, None));
}

#[test]
fn not_found_page_and_single_page_fallback() {
    let f = Fixture::new("errors");
    f.write("index.html", "the app");
    f.write("404.html", "custom not found");
    let server = f.serve(|o| o.not_found_page = Some("404.html".into()));
    let r = get(server.local_addr(), "/nope");
    assert_eq!((r.status, r.text().as_str()), (404, "custom not found"));
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));

    let server = f.serve(|o| {
        o.fallback = Some("/index.html".into());
        o.not_found_page = Some("404.html".into());
    });
    let addr = server.local_addr();
    let r = get(addr, "/users/42");
    assert_eq!((r.status, r.text().as_str()), (200, "the app"));
    let r = get(addr, "/missing.js");
    assert_eq!((r.status, r.text().as_str()), (404, "custom not found"));
    // Configured pages must exist.
    assert!(FileServer::new({
        let mut o = Options::new(f.root());
        o.not_found_page = Some("nope.html".into());
        o
    })
    .is_err());
}

#[test]
fn large_files_are_sent_whole_and_replacements_are_seen() {
    let f = Fixture::new("large");
    let big: Vec<u8> = (0..(3u32 << 20)).map(|i| (i % 251) as u8).collect();
    let path = f.write("big.bin", &big);
    let server = f.serve(|o| o.revalidate_interval = Duration::ZERO);
    let addr = server.local_addr();
    let r = get(addr, "/big.bin");
    assert_eq!(r.body.len(), big.len());
    assert!(r.body == big, "the body is the file");
    let r = request(addr, "GET", "/big.bin", &[("Range", "bytes=1000000-1000009")]);
    assert_eq!(r.body, &big[1_000_000..1_000_010]);
    // Replaced by rename, as deploy tools do: the new file is served.
    let tmp = f.dir.join("new.bin");
    std::fs::write(&tmp, b"replaced").unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    assert_eq!(get(addr, "/big.bin").text(), "replaced");
}

/// Above `etag_hash_bytes_max` (1 MiB by default) a file is hashed by a
/// thread of its own, not on the worker: until its hash is ready it is
/// answered without an ETag (Last-Modified only), then with a content tag,
/// the same for every copy of the bytes (issue 33: a tag of size, inode
/// and mtime differed between two replicas and after a redeploy, breaking
/// caches and `If-Range` resumes). Never a tag that later changes.
#[test]
fn large_files_get_a_content_etag_made_off_the_worker() {
    let f = Fixture::new("large-etag");
    let body: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
    let a = f.write("a.bin", &body);
    f.write("copy.bin", &body);
    set_mtime(&a, 1_000_000_000);
    let server = f.serve(|o| o.revalidate_interval = Duration::ZERO);
    let addr = server.local_addr();
    let expected = format!("\"{:x}-{:016x}\"", body.len(), xxhash_rust::xxh3::xxh3_64(&body));

    // The first answer is built before any hash of the file exists.
    let r = request(addr, "HEAD", "/a.bin", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("etag"), None, "no tag until the hash is made");
    assert!(r.header("last-modified").is_some());
    // Then the hash's tag, once the hasher has read the file; each answer
    // meanwhile has that tag or none.
    let tag_of = |path: &str| {
        let deadline = std::time::Instant::now() + test_support::PATIENCE;
        loop {
            let r = request(addr, "HEAD", path, &[]);
            match r.header("etag") {
                Some(tag) => return tag.to_owned(),
                None => assert!(std::time::Instant::now() < deadline, "{path}: no ETag yet"),
            }
            std::thread::yield_now();
        }
    };
    assert_eq!(tag_of("/a.bin"), expected);
    assert_eq!(
        tag_of("/copy.bin"),
        expected,
        "another inode, the same bytes: the same tag"
    );
    let r = request(addr, "GET", "/a.bin", &[("If-None-Match", &expected)]);
    assert_eq!(r.status, 304);
    let r = request(
        addr,
        "GET",
        "/a.bin",
        &[("Range", "bytes=0-9"), ("If-Range", &expected)],
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &body[..10]);
    // A new mtime, the same bytes: the same tag (hashed again).
    set_mtime(&a, 0);
    assert_eq!(request(addr, "HEAD", "/a.bin", &[]).header("etag"), None);
    assert_eq!(tag_of("/a.bin"), expected);
}

#[test]
fn a_file_truncated_during_a_transfer_ends_the_connection_short() {
    let f = Fixture::new("truncate");
    let path = f.write("big.bin", vec![b'z'; 16 << 20]);
    let server = f.serve(|_| {});
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    // A small receive buffer keeps most of the file on the server's side.
    let _ = socket2::SockRef::from(&s).set_recv_buffer_size(64 * 1024);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut got = vec![0u8; 256 * 1024];
    let mut n = 0;
    while n < got.len() {
        n += s.read(&mut got[n..]).unwrap();
    }
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert!(String::from_utf8_lossy(&got[..512]).contains(&format!("Content-Length: {}", 16 << 20)));
    // Shrink it in place, as `cp small big.bin` or a truncating writer would.
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Ok(_) => {}
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
    let body_bytes = n + rest.len();
    assert!(
        body_bytes < 16 << 20,
        "the connection closed short of the promised length rather than pad or hang"
    );
    // The server lives on.
    assert_eq!(get(server.local_addr(), "/big.bin").body.len(), 1 << 20);
}

/// An edited file is served as it was for up to `revalidate_interval`, then
/// as it is; both ends of the range, so nothing here waits on a clock: an
/// hour is never reached in a test, zero is always passed.
#[test]
fn an_edited_file_shows_after_the_trust_interval() {
    let f = Fixture::new("trust");
    f.write("page.txt", "first");
    let trusting = f.serve(|o| o.revalidate_interval = Duration::from_secs(3600));
    let checking = f.serve(|o| o.revalidate_interval = Duration::ZERO);
    assert_eq!(get(trusting.local_addr(), "/page.txt").text(), "first");
    assert_eq!(get(checking.local_addr(), "/page.txt").text(), "first");
    // Replaced by rename, as editors and deploys do (a new inode).
    let tmp = f.root().join(".page.txt.tmp");
    std::fs::write(&tmp, "second, longer").unwrap();
    std::fs::rename(&tmp, f.root().join("page.txt")).unwrap();
    assert_eq!(get(trusting.local_addr(), "/page.txt").text(), "first");
    assert_eq!(get(checking.local_addr(), "/page.txt").text(), "second, longer");
}

#[test]
fn a_trust_interval_past_an_hour_is_refused() {
    let f = Fixture::new("trust-bound");
    let mut o = Options::new(f.root());
    o.revalidate_interval = Duration::from_secs(3601);
    let e = FileServer::new(o).err().expect("refused");
    assert!(e.to_string().contains("out of range"), "{e}");
}

/// A body decoded from its content coding.
fn decoded(coding: &str, body: &[u8]) -> Vec<u8> {
    use std::io::Read as _;
    let mut out = Vec::new();
    match coding {
        "br" => brotli::Decompressor::new(body, 4096).read_to_end(&mut out).map(|_| ()),
        "zstd" => zstd::stream::copy_decode(body, &mut out),
        "gzip" => flate2::read::GzDecoder::new(body).read_to_end(&mut out).map(|_| ()),
        other => panic!("{other}"),
    }
    .unwrap();
    out
}

/// Compression on the fly: the first answer is identity (and says it
/// varies) while the file is compressed off the event loop; once that is
/// done, every coding is served, and decodes to the file.
#[test]
fn text_without_a_sibling_is_compressed_on_the_fly() {
    let f = Fixture::new("on-the-fly");
    let css = "body { color: #123456; margin: 0 auto; }\n".repeat(100);
    f.write("site.css", &css);
    f.write("logo.png", [0u8; 1000]);
    let server = f.serve(|_| {});
    let addr = server.local_addr();
    let first = request(addr, "GET", "/site.css", &[("Accept-Encoding", "br, zstd, gzip")]);
    assert_eq!(first.header("content-encoding"), None);
    assert_eq!(first.header("vary"), Some("Accept-Encoding"));
    assert_eq!(first.text(), css);
    assert!(peregrine_files::compression_settled(Duration::from_secs(120)));
    for coding in ["br", "zstd", "gzip"] {
        let r = request(addr, "GET", "/site.css", &[("Accept-Encoding", coding)]);
        assert_eq!(r.header("content-encoding"), Some(coding));
        assert_eq!(r.header("vary"), Some("Accept-Encoding"));
        assert!(r.body.len() < css.len() / 10, "{coding}: {} bytes", r.body.len());
        assert_eq!(decoded(coding, &r.body), css.as_bytes(), "{coding}");
        assert_ne!(r.header("etag"), first.header("etag"));
    }
    let r = get(addr, "/site.css");
    assert_eq!((r.header("content-encoding"), r.text()), (None, css.clone()));
    // A client that fetched it in identity before and revalidates is told
    // its copy is good (304), not sent it again compressed.
    let first_tag = first.header("etag").unwrap();
    let r = request(
        addr,
        "GET",
        "/site.css",
        &[("Accept-Encoding", "br, zstd, gzip"), ("If-None-Match", first_tag)],
    );
    assert_eq!((r.status, r.header("etag")), (304, Some(first_tag)));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    // Binary types are not compressed, and do not vary.
    let r = request(addr, "GET", "/logo.png", &[("Accept-Encoding", "br")]);
    assert_eq!((r.header("content-encoding"), r.header("vary")), (None, None));
    // It can be turned off.
    let off = f.serve(|o| o.compress = false);
    let r = request(off.local_addr(), "GET", "/site.css", &[("Accept-Encoding", "br")]);
    assert_eq!((r.header("content-encoding"), r.header("vary")), (None, None));
}

/// Compression on the fly waits for a client that accepts a coding: a file
/// asked for only without `Accept-Encoding` (or with `identity`) is not
/// compressed (it would cost the server CPU for nobody), though its answers
/// say they vary; the first request that accepts one queues it.
#[test]
fn compression_waits_for_a_client_that_accepts_a_coding() {
    let f = Fixture::new("on-demand");
    let js = "console.log('asked for by clients without codings first');\n".repeat(50);
    f.write("lib.js", &js);
    let server = f.serve(|_| {});
    let addr = server.local_addr();
    for accept in [None, Some("identity")] {
        let headers: Vec<(&str, &str)> = accept.map(|a| ("Accept-Encoding", a)).into_iter().collect();
        let r = request(addr, "GET", "/lib.js", &headers);
        assert_eq!(
            (r.header("content-encoding"), r.header("vary")),
            (None, Some("Accept-Encoding"))
        );
        assert_eq!(r.text(), js);
    }
    assert!(peregrine_files::compression_settled(Duration::from_secs(120)));
    // Nothing was queued: still identity, and this request queues it.
    let r = request(addr, "GET", "/lib.js", &[("Accept-Encoding", "gzip")]);
    assert_eq!((r.header("content-encoding"), r.text()), (None, js.clone()));
    assert!(peregrine_files::compression_settled(Duration::from_secs(120)));
    let r = request(addr, "GET", "/lib.js", &[("Accept-Encoding", "gzip")]);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decoded("gzip", &r.body), js.as_bytes());
}

/// A folder's identity stands for the sibling names it does not hold
/// while it is unchanged (one `stat` instead of three): a sibling added
/// later, or a dangling sibling symlink whose target appears, is still
/// served at the next look. The folders' mtimes are set an hour back, so
/// the shortcut is taken (a folder changed within the last second is not
/// trusted).
#[test]
fn siblings_that_appear_are_seen_through_the_folder_check() {
    let f = Fixture::new("folder-check");
    let text = "plain text, sent as is until a sibling shows up\n".repeat(20);
    f.write("a/page.txt", &text);
    f.write("b/page.txt", &text);
    std::os::unix::fs::symlink("../elsewhere/page.txt.gz", f.root().join("b/page.txt.gz")).unwrap();
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    for folder in ["a", "b"] {
        std::fs::File::open(f.root().join(folder))
            .unwrap()
            .set_modified(an_hour_ago)
            .unwrap();
    }
    let server = f.serve(|o| {
        o.revalidate_interval = Duration::ZERO;
        o.compress = false;
    });
    let addr = server.local_addr();
    let gz = [("Accept-Encoding", "gzip")];
    for target in ["/a/page.txt", "/b/page.txt"] {
        for _ in 0..2 {
            let r = request(addr, "GET", target, &gz);
            assert_eq!(
                (r.header("content-encoding"), r.text()),
                (None, text.clone()),
                "{target}"
            );
        }
    }
    f.write("a/page.txt.gz", "a's gzip");
    f.write("elsewhere/page.txt.gz", "b's gzip");
    for (target, body) in [("/a/page.txt", "a's gzip"), ("/b/page.txt", "b's gzip")] {
        let r = request(addr, "GET", target, &gz);
        assert_eq!(
            (r.header("content-encoding"), r.text()),
            (Some("gzip"), body.to_owned()),
            "{target}"
        );
    }
}

/// A build that rewrote `app.js` but not `app.js.gz` must not send the old
/// script to gzip clients: the stale sibling is passed over (with a
/// warning), and the file is compressed on the fly instead.
#[test]
fn a_sibling_older_than_its_file_is_not_served() {
    let f = Fixture::new("stale-sibling");
    let js = "console.log('the current script, long enough to compress');\n".repeat(20);
    f.write("app.js", &js);
    let sibling = f.write("app.js.gz", "yesterday's gzip");
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&sibling)
        .unwrap()
        .set_modified(an_hour_ago)
        .unwrap();
    let server = f.serve(|o| o.revalidate_interval = Duration::ZERO);
    let addr = server.local_addr();
    let r = request(addr, "GET", "/app.js", &[("Accept-Encoding", "gzip")]);
    assert_eq!((r.header("content-encoding"), r.text()), (None, js.clone()));
    assert!(peregrine_files::compression_settled(Duration::from_secs(120)));
    let r = request(addr, "GET", "/app.js", &[("Accept-Encoding", "gzip")]);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decoded("gzip", &r.body), js.as_bytes());
    // A sibling as new as its file is served again.
    std::fs::write(&sibling, "today's gzip").unwrap();
    let r = request(addr, "GET", "/app.js", &[("Accept-Encoding", "gzip")]);
    assert_eq!(r.text(), "today's gzip");
}
