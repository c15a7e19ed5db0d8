//! A directory answers as its archive: one tree with every convention
//! (`_headers`, `_redirects`, `_404.html`, `_wildcard.*`, index files,
//! dotfiles, pre-compressed siblings), served by `FileServer` and, packed,
//! by `ArchiveServer`; every request path gets the same status, the same
//! fields that matter, and the same body from both.
//!
//! Without `Accept-Encoding` every path is compared. With it, every path
//! but those with a pre-compressed sibling (which a directory serves as it
//! finds it, and `pack` replaces with its own) is compared once the
//! directory has compressed its text files on the fly, with the settings
//! `pack` uses: the same bytes. `Vary` may differ (a directory says it on a
//! file whose compression is still under way).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use peregrine::Server;
use peregrine_archive::{pack, ArchiveServer, Mode, PackOptions};
use peregrine_files::{CleanUrls, FileServer, Options};
use test_support::{http, Scratch};

/// The fields compared; the others (Date, Content-Length's framing twin,
/// Connection) say nothing about the site.
const FIELDS: [&str; 15] = [
    "content-type",
    "content-range",
    "content-encoding",
    "content-length",
    "location",
    "cache-control",
    "etag",
    "last-modified",
    "accept-ranges",
    "x-content-type-options",
    "x-frame-options",
    "referrer-policy",
    "x-site",
    "x-docs",
    "allow",
];

/// One answer, reduced to what is compared.
#[derive(PartialEq, Eq)]
struct Answer {
    status: u16,
    fields: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Shown with its body as text (escaped), so that a difference reads well.
impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answer")
            .field("status", &self.status)
            .field("fields", &self.fields)
            .field("body", &self.body.escape_ascii().to_string())
            .finish()
    }
}

fn ask(addr: SocketAddr, method: &str, target: &str) -> Answer {
    ask_with(addr, method, target, "")
}

/// `ask` with request fields, given as lines (`"Range: bytes=0-3\r\n"`).
fn ask_with(addr: SocketAddr, method: &str, target: &str, fields: &str) -> Answer {
    let pairs: Vec<(&str, &str)> = fields
        .split("\r\n")
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (n, v) = l.split_once(':').expect("a field line");
            (n.trim(), v.trim())
        })
        .collect();
    let r = http::request(addr, method, target, &pairs);
    let mut fields: Vec<(String, String)> = r
        .headers
        .into_iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v))
        .filter(|(n, _)| FIELDS.contains(&n.as_str()))
        .collect();
    fields.sort();
    Answer {
        status: r.status,
        fields,
        body: r.body,
    }
}

fn tree(t: &Scratch) -> PathBuf {
    t.write("site/index.html", "<h1>home</h1>");
    t.write("site/about.html", "<p>about</p>");
    t.write("site/docs/index.html", "<p>docs</p>");
    t.write("site/docs/guide.txt", "a guide, shadowed by a forced redirect");
    t.write("site/docs/api.json", "{\"a\": 1}");
    t.write(
        "site/docs/big.json",
        "{\"key\": \"a value worth compressing\"}\n".repeat(50),
    );
    t.write("site/big.html", "<p>a page long enough to compress</p>\n".repeat(50));
    t.write("site/app/deep/big.txt", "text long enough to compress\n".repeat(50));
    t.write("site/noindex/a.txt", "a directory without an index file");
    t.write("site/plain/a.txt", "no redirect names this directory");
    t.write("site/_404.html", "<p>custom not found</p>");
    t.write("site/app/_wildcard.html", "<p>spa shell</p>");
    t.write("site/app/deep/_wildcard.html", "<p>deeper shell</p>");
    t.write("site/app/deep/_wildcard.html.gz", "not a wildcard: a sibling");
    t.write("site/app/real.txt", "a real file under a wildcard");
    t.write("site/style.css", "body { color: #123456 }\n".repeat(20));
    t.write("site/style.css.gz", "a pre-compressed sibling is not a resource");
    t.write("site/archive.tar.gz", "no file beside it: a resource");
    t.write("site/.secret", "never served");
    t.write("site/sub/_headers", "only the root's _headers is a convention");
    t.write("site/sub/_404.html", "only the root's _404.html is the 404 page");
    t.write("site/caf\u{e9}.txt", "caf\u{e9}");
    // Issue 27's conventions: 404.html per folder (the root's loses to
    // _404.html), clean URLs, rewrites, 404 rules, query conditions.
    t.write("site/404.html", "<p>root 404.html, shadowed by _404.html</p>");
    t.write("site/shop/404.html", "<p>shop not found</p>");
    t.write("site/shop/item.html", "<p>item</p>");
    t.write("site/shop/deep/x.txt", "x");
    t.write("site/guide.html", "<p>guide page</p>");
    t.write("site/guide/index.html", "<p>guide folder</p>");
    t.write("site/spa/shell.html", "<p>spa</p>");
    t.write("site/spa/real.txt", "a file wins over a rule without !");
    t.write("site/shadow.txt", "shadowed by a forced rewrite");
    t.write("site/forced/real.txt", "shadowed by a forced pattern");
    t.write("site/.well-known/security.txt", "Contact: mailto:a@example.com");
    t.write("site/.git/config", "[core] never served");
    // Symlinks: followed where they stay inside (absolute ones too), never
    // to a dotfile, and `.well-known` only for paths under it.
    for (link, target) in [
        ("abs-about.html", t.path("site/about.html")),
        ("abs-docs", t.path("site/docs")),
        ("secret-link.txt", ".secret".into()),
        ("gitdir", ".git".into()),
        ("wk", ".well-known".into()),
        (".well-known/alias.txt", "security.txt".into()),
        (".well-known/leak", "../.secret".into()),
        ("docs/abs-secret", t.path("site/.secret")),
    ] {
        std::os::unix::fs::symlink::<PathBuf, _>(target, t.path("site").join(link)).unwrap();
    }
    t.write(
        "site/_headers",
        "# every file\n/*\n  X-Site: one\n/docs/*\n  Cache-Control: max-age=60\n  X-Docs: yes\n\
         /about.html\n  X-Frame-Options: DENY\n/docs/api.json\n  Content-Type: application/vnd.api+json\n",
    );
    t.write(
        "site/_redirects",
        "/old /about.html\n/about.html /nowhere 302\n/docs/guide.txt /forced.txt 307!\n\
         /blog/:year/* /posts/:year/:splat 308\n/noindex /elsewhere 302\n/app/x /redirected 301\n\
         /gone/* /:splat 301!\n/spa/* /spa/shell.html 200\n/shadow.txt /about 200!\n\
         /forced/lit /about.html 302!\n/forced/* /guide.html 200!\n/gone-page /about.html 404\n/lost/* /nowhere.html 404\n\
         /store id=:id /blog/:id 301\n/store /shop/ 302\n/q url=:u /:u 302\n/bs/* /\\:splat 302\n",
    );
    t.path("site")
}

const TARGETS: &[&str] = &[
    "/",
    "/index.html",
    "/about.html",
    "/docs",
    "/docs?a=1&b=%2F",
    "/docs/",
    "/docs/index.html",
    "/docs/guide.txt",
    "/docs/api.json",
    "/docs/big.json",
    "/big.html",
    "/app/deep/big.txt",
    "/docs/missing",
    "/noindex",
    "/noindex/",
    "/noindex/a.txt",
    "/plain",
    "/plain/",
    "/plain/a.txt",
    "/old",
    "/old?x=1",
    "/old/",
    "/blog/2024/a/b",
    "/blog/2024/a%20b/caf%C3%A9%3F",
    "/blog/2024",
    "/blog/",
    "/gone/x/y",
    "/app",
    "/app/",
    "/app/x",
    "/app/y",
    "/app/real.txt",
    "/app/real.txt/",
    "/app/deep",
    "/app/deep/",
    "/app/deep/y/z",
    "/app/_wildcard.html",
    "/app/deep/_wildcard.html.gz",
    "/_headers",
    "/_redirects",
    "/_404.html",
    "/missing",
    "/missing/",
    "/style.css",
    "/style.css.gz",
    "/archive.tar.gz",
    "/.secret",
    "/.well-known/security.txt",
    "/sub/_headers",
    "/sub/_404.html",
    "/caf%C3%A9.txt",
    "/caf%c3%a9.txt",
    "/docs/../about.html",
    "/%2e%2e/index.html",
    "//about.html",
    "/docs/./guide.txt",
    "/%64ocs/guide.txt",
    "/abs-about.html",
    "/abs-docs",
    "/abs-docs/",
    "/abs-docs/api.json",
    "/secret-link.txt",
    "/gitdir/config",
    "/gitdir/",
    "/wk/security.txt",
    "/.well-known/alias.txt",
    "/.well-known/leak",
    "/docs/abs-secret",
    "/.git/config",
    "/404.html",
    "/404",
    "/shop/",
    "/shop/item",
    "/shop/item.html",
    "/shop/missing",
    "/shop/deep/missing",
    "/shop/deep/",
    "/guide",
    "/guide/",
    "/guide.html",
    "/guide/index.html",
    "/guide/index",
    "/about",
    "/about/",
    "/index",
    "/_404",
    "/app/_wildcard",
    "/spa/a/b",
    "/spa/real.txt",
    "/spa/",
    "/shadow.txt",
    "/forced/real.txt",
    "/forced/x",
    "/forced/lit",
    "/gone-page",
    "/lost/x",
    "/store",
    "/store?id=7",
    "/store?a=1&id=a%20b",
    "/q",
    "/q?url=/evil.example",
    "/q?url=%2Fevil.example",
    "/q?url=fine",
    "/bs/evil.example",
    "/shop/item.html?x=1",
    "/guide/index.html?x=1",
];

/// Both servers of `root` with clean URLs set to `clean`, and the answers
/// to every target that differ between them.
fn differences(t: &Scratch, root: &std::path::Path, clean: CleanUrls) -> Vec<String> {
    let archive = t.path(&format!("site-{clean:?}.prg"));
    let mut packing = PackOptions::new(root, &archive);
    packing.clean_urls = clean;
    pack(&packing).unwrap();
    let mut options = Options::new(root);
    options.clean_urls = clean;
    let dir = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(FileServer::new(options).unwrap())
        .unwrap();
    let packed = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(ArchiveServer::open(&archive, Mode::Map).unwrap())
        .unwrap();
    let (dir_addr, packed_addr) = (dir.local_addrs()[0], packed.local_addrs()[0]);
    let mut differ = Vec::new();
    for target in TARGETS {
        for method in ["GET", "HEAD"] {
            let d = ask(dir_addr, method, target);
            let a = ask(packed_addr, method, target);
            if d != a {
                differ.push(format!(
                    "{clean:?} {method} {target}:\n  directory {d:?}\n  archive   {a:?}"
                ));
            }
        }
    }
    if clean == CleanUrls::Redirect {
        // The `.html` and `index.html` forms are 301s to the clean ones,
        // the query kept; rewrites still reach the file they name.
        for addr in [dir_addr, packed_addr] {
            let location = |t: &str| {
                let a = ask(addr, "GET", t);
                let l = a.fields.into_iter().find(|(n, _)| n == "location").map(|(_, v)| v);
                (a.status, l)
            };
            assert_eq!(location("/shop/item.html?x=1"), (301, Some("/shop/item?x=1".into())));
            assert_eq!(location("/guide/index.html?x=1"), (301, Some("/guide/?x=1".into())));
            assert_eq!(location("/guide.html"), (301, Some("/guide".into())));
            assert_eq!(location("/about"), (200, None));
            assert_eq!(location("/forced/real.txt"), (200, None));
            assert_eq!(ask(addr, "GET", "/forced/real.txt").body, b"<p>guide page</p>");
        }
    }
    dir.shutdown();
    packed.shutdown();
    differ
}

#[test]
fn each_clean_urls_setting_answers_alike_from_both() {
    let t = Scratch::new("peregrine-parity-clean");
    let root = tree(&t);
    let mut differ = Vec::new();
    for clean in [CleanUrls::Off, CleanUrls::On, CleanUrls::Redirect] {
        differ.extend(differences(&t, &root, clean));
    }
    assert!(
        differ.is_empty(),
        "{} answers differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
}

#[test]
fn a_directory_answers_as_its_archive() {
    let t = Scratch::new("peregrine-parity-dir");
    let root = tree(&t);
    let archive = t.path("site.prg");
    pack(&PackOptions::new(&root, &archive)).unwrap();

    let dir = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(FileServer::new(Options::new(&root)).unwrap())
        .unwrap();
    let packed = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(ArchiveServer::open(&archive, Mode::Map).unwrap())
        .unwrap();
    let (dir_addr, packed_addr) = (dir.local_addrs()[0], packed.local_addrs()[0]);

    let mut differ = Vec::new();
    for target in TARGETS {
        for method in ["GET", "HEAD"] {
            let d = ask(dir_addr, method, target);
            let a = ask(packed_addr, method, target);
            if d != a {
                differ.push(format!("{method} {target}:\n  directory {d:?}\n  archive   {a:?}"));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "{} answers differ:\n{}",
        differ.len(),
        differ.join("\n")
    );

    // The answers are the ones the conventions promise (so that the
    // comparison above is not between two servers equally wrong).
    let status = |t: &str| ask(dir_addr, "GET", t).status;
    let body = |t: &str| String::from_utf8_lossy(&ask(dir_addr, "GET", t).body).into_owned();
    let field = |t: &str, name: &str| {
        ask(dir_addr, "GET", t)
            .fields
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    };
    for hidden in [
        "/_headers",
        "/_redirects",
        "/_404.html",
        "/.secret",
        "/style.css.gz",
        "/secret-link.txt",
        "/gitdir/config",
        "/wk/security.txt",
        "/.well-known/leak",
        "/docs/abs-secret",
    ] {
        assert_eq!(
            (status(hidden), body(hidden)),
            (404, "<p>custom not found</p>".into()),
            "{hidden}"
        );
    }
    assert_eq!(body("/abs-about.html"), "<p>about</p>");
    assert_eq!(body("/abs-docs/"), "<p>docs</p>");
    assert_eq!(body("/.well-known/alias.txt"), "Contact: mailto:a@example.com");
    assert_eq!(body("/app/_wildcard.html"), "<p>spa shell</p>");
    assert_eq!(status("/app/_wildcard.html"), 200);
    assert_eq!(body("/app/deep/y/z"), "<p>deeper shell</p>");
    assert_eq!(body("/app/deep/_wildcard.html.gz"), "<p>deeper shell</p>");
    assert_eq!(body("/app/real.txt"), "a real file under a wildcard");
    assert_eq!(field("/app/x", "location").as_deref(), Some("/redirected"));
    assert_eq!(field("/docs/guide.txt", "location").as_deref(), Some("/forced.txt"));
    assert_eq!(status("/about.html"), 200);
    assert_eq!(field("/about.html", "x-frame-options").as_deref(), Some("DENY"));
    assert_eq!(field("/docs/api.json", "cache-control").as_deref(), Some("max-age=60"));
    assert_eq!(field("/docs/api.json", "x-site").as_deref(), Some("one"));
    assert_eq!(field("/blog/2024/a/b", "location").as_deref(), Some("/posts/2024/a/b"));
    // Captures are decoded to match, and encoded again into Location.
    assert_eq!(
        field("/blog/2024/a%20b/caf%C3%A9%3F", "location").as_deref(),
        Some("/posts/2024/a%20b/caf%C3%A9%3F")
    );
    // A Content-Type from `_headers` replaces the guessed one: one field.
    for addr in [dir_addr, packed_addr] {
        let types: Vec<String> = (ask(addr, "GET", "/docs/api.json").fields.into_iter())
            .filter(|(n, _)| n == "content-type")
            .map(|(_, v)| v)
            .collect();
        assert_eq!(types, ["application/vnd.api+json"]);
    }
    assert_eq!(field("/noindex", "location").as_deref(), Some("/elsewhere"));
    assert_eq!(status("/plain"), 404);
    assert_eq!(field("/docs", "location").as_deref(), Some("/docs/"));
    // The query stays, as nginx and Caddy keep it on this redirect.
    assert_eq!(
        field("/docs?a=1&b=%2F", "location").as_deref(),
        Some("/docs/?a=1&b=%2F")
    );
    assert_eq!(body("/sub/_headers"), "only the root's _headers is a convention");
    // 404.html: the deepest folder's, with 404; the root's `_404.html`
    // wins over its `404.html`, which stays an ordinary page.
    assert_eq!(
        (status("/shop/missing"), body("/shop/missing")),
        (404, "<p>shop not found</p>".into())
    );
    assert_eq!(body("/shop/deep/missing"), "<p>shop not found</p>");
    assert_eq!(body("/missing"), "<p>custom not found</p>");
    assert_eq!(status("/404.html"), 200);
    // Clean URLs: each form serves its own file.
    assert_eq!(body("/shop/item"), "<p>item</p>");
    assert_eq!(body("/guide"), "<p>guide page</p>");
    assert_eq!(body("/guide/"), "<p>guide folder</p>");
    assert_eq!(status("/about"), 200);
    assert_eq!(status("/_404"), 404);
    // Rewrites (200), shadowing, `!`, 404 rules.
    assert_eq!((status("/spa/a/b"), body("/spa/a/b")), (200, "<p>spa</p>".into()));
    assert_eq!(field("/spa/a/b", "location"), None);
    assert_eq!(body("/spa/real.txt"), "a file wins over a rule without !");
    assert_eq!(body("/shadow.txt"), "<p>about</p>");
    assert_eq!(body("/forced/real.txt"), "<p>guide page</p>");
    // A literal rule with `!` before a forced pattern, as Netlify's order.
    assert_eq!(field("/forced/lit", "location").as_deref(), Some("/about.html"));
    assert_eq!((status("/gone-page"), body("/gone-page")), (404, "<p>about</p>".into()));
    // A 404 rule whose target is missing: the not-found page.
    assert_eq!(
        (status("/lost/x"), body("/lost/x")),
        (404, "<p>custom not found</p>".into())
    );
    // Query conditions.
    assert_eq!(field("/store?id=7", "location").as_deref(), Some("/blog/7"));
    assert_eq!(field("/store?a=1&id=a%20b", "location").as_deref(), Some("/blog/a%20b"));
    assert_eq!(field("/store", "location").as_deref(), Some("/shop/"));
    assert_eq!(field("/q?url=fine", "location").as_deref(), Some("/fine"));
    // No open redirect: `//host` or `/\host` after substitution is a 400.
    for open in ["/q?url=/evil.example", "/q?url=%2Fevil.example", "/bs/evil.example"] {
        assert_eq!((status(open), field(open, "location")), (400, None), "{open}");
    }
    assert_eq!(body("/archive.tar.gz"), "no file beside it: a resource");

    dir.shutdown();
    packed.shutdown();
}

/// The steps after the lookup (methods, preconditions, ranges,
/// multipart) are one implementation (`peregrine_files::reply`); this checks
/// that both servers answer through it alike, where they once differed
/// (the multipart boundary, the 404 page's variant), and that the answers
/// are the ones RFC 9110 asks for.
#[test]
fn conditional_and_range_requests_get_the_same_answers_from_both() {
    let t = Scratch::new("peregrine-parity-steps");
    let root = tree(&t);
    let archive = t.path("site.prg");
    pack(&PackOptions::new(&root, &archive)).unwrap();
    let dir = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(FileServer::new(Options::new(&root)).unwrap())
        .unwrap();
    let packed = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(ArchiveServer::open(&archive, Mode::Map).unwrap())
        .unwrap();
    let (dir_addr, packed_addr) = (dir.local_addrs()[0], packed.local_addrs()[0]);
    let field = |a: &Answer, name: &str| {
        a.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };

    let mut differ = Vec::new();
    let mut statuses = Vec::new();
    for target in ["/about.html", "/docs/api.json", "/big.html", "/missing"] {
        let plain = ask(dir_addr, "GET", target);
        let (etag, lm) = (field(&plain, "etag"), field(&plain, "last-modified"));
        let cases = [
            ("GET", format!("If-None-Match: {etag}\r\n")),
            ("HEAD", format!("If-None-Match: {etag}\r\n")),
            ("GET", "If-None-Match: \"other\", W/\"x\"\r\n".to_owned()),
            ("GET", "If-None-Match: *\r\n".to_owned()),
            ("GET", format!("If-Modified-Since: {lm}\r\n")),
            ("GET", "If-Match: \"other\"\r\n".to_owned()),
            ("GET", format!("If-Match: {etag}\r\nRange: bytes=2-5\r\n")),
            (
                "GET",
                "If-Unmodified-Since: Thu, 01 Jan 1970 00:00:00 GMT\r\n".to_owned(),
            ),
            ("GET", "Range: bytes=0-3\r\n".to_owned()),
            ("GET", "Range: bytes=-4\r\n".to_owned()),
            ("GET", "Range: bytes=0-0,3-4,-2\r\n".to_owned()),
            ("GET", "Range: bytes=100000-\r\n".to_owned()),
            ("GET", "Range: pages=1\r\n".to_owned()),
            ("HEAD", "Range: bytes=0-3\r\n".to_owned()),
            ("GET", "If-Range: \"other\"\r\nRange: bytes=0-3\r\n".to_owned()),
            ("GET", format!("If-Range: {etag}\r\nRange: bytes=0-3\r\n")),
            ("GET", format!("If-Range: {lm}\r\nRange: bytes=1-2\r\n")),
            ("POST", String::new()),
            ("DELETE", String::new()),
            ("OPTIONS", String::new()),
        ];
        for (method, fields) in &cases {
            let d = ask_with(dir_addr, method, target, fields);
            let a = ask_with(packed_addr, method, target, fields);
            statuses.push((target, method.to_owned(), fields.clone(), d.status));
            if d != a {
                differ.push(format!(
                    "{method} {target} {fields:?}:\n  directory {d:?}\n  archive   {a:?}"
                ));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "{} answers differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
    // What RFC 9110 asks for, on a found file (§13.2.2, §14.2) and on the
    // 404 page, which is sent whole whatever the validators and ranges.
    let expected_found = [
        304, 304, 200, 304, 304, 412, 206, 412, 206, 206, 206, 416, 200, 200, 200, 206, 206, 405, 405, 204,
    ];
    let expected_missing = [404; 17].into_iter().chain([405, 405, 204]);
    let got = |t: &str| statuses.iter().filter(|s| s.0 == t).map(|s| s.3).collect::<Vec<_>>();
    assert_eq!(got("/about.html"), expected_found, "{statuses:?}");
    assert_eq!(got("/missing"), expected_missing.collect::<Vec<_>>());
    // A multipart answer names its parts' type and ranges.
    let m = ask_with(dir_addr, "GET", "/about.html", "Range: bytes=0-0,3-4\r\n");
    let ct = field(&m, "content-type");
    let boundary = ct.strip_prefix("multipart/byteranges; boundary=").expect(&ct);
    let text = String::from_utf8_lossy(&m.body).into_owned();
    assert_eq!(
        text,
        format!(
            "--{boundary}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Range: bytes 0-0/12\r\n\r\n<\r\n\
             --{boundary}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Range: bytes 3-4/12\r\n\r\nab\r\n\
             --{boundary}--\r\n"
        )
    );
    dir.shutdown();
    packed.shutdown();
}

/// Negotiation goes through the same steps too: once the directory has
/// compressed its text files on the fly (with `pack`'s settings, so to the
/// same bytes and tags), every coding a client may ask for, with and
/// without validators and ranges, gets the same answer from both.
#[test]
fn negotiated_answers_are_the_same_from_both_once_compressed() {
    let t = Scratch::new("peregrine-parity-negotiated");
    let root = tree(&t);
    let archive = t.path("site.prg");
    pack(&PackOptions::new(&root, &archive)).unwrap();
    let dir = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(FileServer::new(Options::new(&root)).unwrap())
        .unwrap();
    let packed = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(ArchiveServer::open(&archive, Mode::Map).unwrap())
        .unwrap();
    let (dir_addr, packed_addr) = (dir.local_addrs()[0], packed.local_addrs()[0]);
    // Paths without a pre-compressed sibling (a directory serves one as it
    // finds it; `pack` makes its own).
    let targets = [
        "/big.html",
        "/docs/big.json",
        "/app/deep/big.txt",
        "/about.html",
        "/missing",
        "/app/y",
    ];
    for target in targets {
        ask_with(dir_addr, "GET", target, "Accept-Encoding: gzip, br, zstd\r\n");
    }
    assert!(peregrine_files::compression_settled(Duration::from_secs(120)));
    let field = |a: &Answer, name: &str| {
        a.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };

    let mut differ = Vec::new();
    let mut encoded = 0;
    for target in targets {
        let gz = ask_with(dir_addr, "GET", target, "Accept-Encoding: gzip\r\n");
        let gz_tag = field(&gz, "etag");
        for accept in [
            "gzip",
            "br",
            "zstd",
            "gzip, br, zstd",
            "br;q=0.5, gzip",
            "br;q=0, gzip;q=0",
            "identity",
            "*",
            "x-unknown",
        ] {
            for extra in [
                String::new(),
                format!("If-None-Match: {gz_tag}\r\n"),
                "Range: bytes=0-9\r\n".to_owned(),
                "Range: bytes=0-0,5-6\r\n".to_owned(),
            ] {
                let fields = format!("Accept-Encoding: {accept}\r\n{extra}");
                for method in ["GET", "HEAD"] {
                    let d = ask_with(dir_addr, method, target, &fields);
                    let a = ask_with(packed_addr, method, target, &fields);
                    if !field(&d, "content-encoding").is_empty() {
                        encoded += 1;
                    }
                    if d != a {
                        differ.push(format!(
                            "{method} {target} {fields:?}:\n  directory {d:?}\n  archive   {a:?}"
                        ));
                    }
                }
            }
        }
    }
    assert!(
        differ.is_empty(),
        "{} answers differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
    assert!(encoded > 100, "only {encoded} encoded answers: nothing was negotiated");
    dir.shutdown();
    packed.shutdown();
}

/// `_headers` and `_redirects` are followed live: an edit shows once the
/// trust interval has passed (zero here: at the next request).
#[test]
fn a_directory_follows_edited_conventions() {
    let t = Scratch::new("peregrine-parity-live");
    let root = tree(&t);
    let mut options = Options::new(&root);
    options.revalidate_interval = Duration::ZERO;
    let dir = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(FileServer::new(options).unwrap())
        .unwrap();
    let addr = dir.local_addrs()[0];
    let x_site = |t: &str| {
        ask(addr, "GET", t)
            .fields
            .into_iter()
            .find(|(n, _)| n == "x-site")
            .map(|(_, v)| v)
    };
    assert_eq!(x_site("/index.html").as_deref(), Some("one"));
    assert_eq!(ask(addr, "GET", "/new-rule").status, 404);
    t.write("site/_headers", "/*\n  X-Site: two\n");
    t.write("site/_redirects", "/new-rule /index.html 302\n");
    assert_eq!(x_site("/index.html").as_deref(), Some("two"));
    assert_eq!(ask(addr, "GET", "/new-rule").status, 302);
    // A rule file that no longer parses keeps the rules read before.
    t.write("site/_redirects", "/a /b 303\n");
    assert_eq!(ask(addr, "GET", "/new-rule").status, 302);
    dir.shutdown();
}

/// `_headers` may not set a field the file server writes from the file
/// and the request (RFC 9110 §5.3: each is a singleton): a 206 got two
/// `Content-Range`s and two `ETag`s (review finding). Refused, naming the
/// line, by a directory and by `pack` alike.
#[test]
fn headers_may_not_set_the_fields_the_file_server_writes() {
    let t = Scratch::new("peregrine-parity-singletons");
    let root = tree(&t);
    for name in [
        "ETag",
        "last-modified",
        "Content-Range",
        "Accept-Ranges",
        "Content-Encoding",
    ] {
        t.write(
            "site/_headers",
            format!("# a comment\n/about.html\n  X-Ok: 1\n  {name}: x\n"),
        );
        let said = format!("_headers: line 4: header field {name} is written by the file server");
        let e = FileServer::new(Options::new(&root)).err().expect("refused");
        assert!(e.to_string().contains(&said), "{e}");
        let e = pack(&PackOptions::new(&root, t.path("x.prg"))).expect_err("refused");
        assert!(e.to_string().contains(&said), "{e}");
    }
}

/// A 304 carries what its 200 would of Content-Location, Vary, Cache-Control
/// and Expires (RFC 9110 §15.4.5), `_headers`' among them, from a
/// directory and from its archive; and an empty file asked for a suffix
/// range is sent whole, 200 (§14.1.1: a non-zero suffix of a zero-length
/// representation is satisfiable; nginx answers so), not 416.
#[test]
fn a_304_keeps_the_headers_fields_it_must_and_an_empty_file_takes_a_suffix() {
    let t = Scratch::new("peregrine-parity-304");
    let root = tree(&t);
    t.write(
        "site/_headers",
        "/about.html\n  Expires: Thu, 01 Jan 2037 00:00:00 GMT\n  Content-Location: /about\n  Vary: Origin\n  X-Not: on a 304\n",
    );
    t.write("site/empty.txt", "");
    let archive = t.path("site.prg");
    pack(&PackOptions::new(&root, &archive)).unwrap();
    let dir = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(FileServer::new(Options::new(&root)).unwrap())
        .unwrap();
    let packed = Server::new()
        .bind("127.0.0.1:0")
        .workers(1)
        .start(ArchiveServer::open(&archive, Mode::Map).unwrap())
        .unwrap();
    for addr in [dir.local_addrs()[0], packed.local_addrs()[0]] {
        let r = http::get(addr, "/about.html");
        let etag = r.header("etag").unwrap().to_owned();
        let r = http::request(addr, "GET", "/about.html", &[("If-None-Match", &etag)]);
        assert_eq!(r.status, 304);
        let all = |name: &str| -> Vec<&str> {
            r.headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
                .collect()
        };
        assert_eq!(all("expires"), ["Thu, 01 Jan 2037 00:00:00 GMT"], "{addr}");
        assert_eq!(all("content-location"), ["/about"]);
        assert!(all("vary").contains(&"Origin"), "{:?}", r.headers);
        assert_eq!(all("x-not"), Vec::<&str>::new());
        for range in ["bytes=-5", "bytes=0-0,-1"] {
            let r = http::request(addr, "GET", "/empty.txt", &[("Range", range)]);
            assert_eq!((r.status, r.body.len()), (200, 0), "{addr} {range}");
            assert_eq!(r.header("content-range"), None);
        }
        let r = http::request(addr, "GET", "/empty.txt", &[("Range", "bytes=0-")]);
        assert_eq!((r.status, r.header("content-range")), (416, Some("bytes */0")));
    }
    dir.shutdown();
    packed.shutdown();
}

#[test]
fn a_bad_rule_file_refuses_the_directory_as_it_refuses_pack() {
    let t = Scratch::new("peregrine-parity-bad");
    let root = tree(&t);
    t.write("site/_redirects", "/a /b 303\n");
    let e = FileServer::new(Options::new(&root)).err().expect("refused");
    assert!(
        e.to_string()
            .contains("_redirects: line 1: status 303 is not one _redirects takes"),
        "{e}"
    );
    assert!(pack(&PackOptions::new(&root, t.path("x.prg"))).is_err());
}
