//! A file served in place of the path asked for (a `_redirects` 200
//! rewrite's target, a clean URL's `NAME.html`, a directory's index file)
//! that another route of the site takes is not served past that route's
//! rules (ip, basic-auth, forward-auth): it is refused with 403, for a
//! directory site and an archive site with the same routes and files,
//! whether the request carries fields or not (the archive's fast path
//! for field-less requests), asked twice (nothing remembered from the
//! first). A rewrite that stays within the route that answers is served
//! as before.

mod common;

use std::net::SocketAddr;

use common::Scratch;
use test_support::process::Process;

/// The files both sites serve, and the `_redirects` of content authors
/// pointing into the operator's protected routes.
const FILES: &[(&str, &str)] = &[
    ("index.html", "home\n"),
    ("staff/f.txt", "staff file\n"),
    ("admin/secret.txt", "admin secret\n"),
    ("fafiles/f.txt", "fa file\n"),
    ("admin2.html", "admin two\n"),
    ("docs/index.html", "docs index\n"),
    ("pub/a.txt", "public a\n"),
    ("hdr/new/n.txt", "hdr new\n"),
    (
        "_redirects",
        "/s/* /staff/:splat 200\n\
         /adm/* /admin/:splat 200\n\
         /fs/* /fafiles/:splat 200\n\
         /cl/* /admin2 200\n\
         /nf/* /staff/:splat 404\n\
         /p/* /pub/:splat 200\n\
         /hdr/old/* /hdr/new/:splat 200\n\
         /into-hdr/* /hdr/new/:splat 200\n",
    ),
];

/// The routes both sites have: basic-auth, an ip list, a forward-auth
/// service that is not there, two exact paths only 127.0.0.2 may read,
/// and a route that only adds a field.
fn routes() -> String {
    format!(
        "[[site.route]]\npath = \"/staff/*\"\n\
         basic-auth = {{ users = [\"alice:{}\"], realm = \"Staff\" }}\n\
         [[site.route]]\npath = \"/admin/*\"\nip = {{ allow = [\"127.0.0.2\"] }}\n\
         [[site.route]]\npath = \"/fafiles/*\"\nforward-auth = {{ url = \"http://127.0.0.1:9/verify\" }}\n\
         [[site.route]]\npath = \"/admin2.html\"\nip = {{ allow = [\"127.0.0.2\"] }}\n\
         [[site.route]]\npath = \"/docs/index.html\"\nip = {{ allow = [\"127.0.0.2\"] }}\n\
         [[site.route]]\npath = \"/hdr/*\"\nheaders = {{ X-Route = \"hdr\" }}\n",
        bcrypt::hash("wonderland", 4).unwrap()
    )
}

/// A directory site (`dir.test`) and its archive (`arc.test`), each
/// with [`routes`], and the same archive without routes (`plain.test`:
/// one archive, opened once, its lookups remembered for both); the
/// server and its address.
fn start(t: &Scratch) -> (Process, SocketAddr) {
    common::packed(t.dir(), FILES, &[]);
    let routes = routes();
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n\
             [[site]]\nnames = [\"dir.test\"]\nroot = \"site\"\ndefault = true\n{routes}\
             [[site]]\nnames = [\"arc.test\"]\nroot = \"site.prg\"\n{routes}\
             [[site]]\nnames = [\"plain.test\"]\nroot = \"site.prg\"\n"
        ),
    );
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .arg("serve")
            .arg("--config")
            .arg(&config),
    );
    let addr = test_support::process::last_addr(&server.listening()).parse().unwrap();
    (server, addr)
}

struct Answer {
    status: u16,
    head: String,
    body: String,
}

/// One GET over HTTP/1.1 for `host`, with `extra` head lines.
fn get(to: SocketAddr, host: &str, path: &str, extra: &[&str]) -> Answer {
    let s = std::net::TcpStream::connect(to).unwrap();
    let (status, head, body) = common::exchange(s, "GET", host, path, extra);
    Answer { status, head, body }
}

const HOSTS: [&str; 2] = ["dir.test", "arc.test"];

/// What each way of asking gets for `path`: without fields, with
/// `Accept-Encoding`, and again without (nothing kept from before).
fn each_way(addr: SocketAddr, host: &str, path: &str) -> Vec<Answer> {
    [&[][..], &["Accept-Encoding: gzip"][..], &[][..]]
        .iter()
        .map(|extra| get(addr, host, path, extra))
        .collect()
}

/// `path` is refused with 403, and none of `secret` is in the answer.
fn assert_refused(addr: SocketAddr, host: &str, path: &str, secret: &str) {
    for a in each_way(addr, host, path) {
        assert_eq!(a.status, 403, "{host} {path}: {}{}", a.head, a.body);
        assert!(!a.body.contains(secret), "{host} {path}: {}", a.body);
    }
}

#[test]
fn a_rewrite_into_a_basic_auth_route_is_refused() {
    let t = Scratch::new("reroute-basic");
    let (_server, addr) = start(&t);
    for host in HOSTS {
        assert_eq!(get(addr, host, "/staff/f.txt", &[]).status, 401, "{host}");
        assert_refused(addr, host, "/s/f.txt", "staff file");
    }
}

#[test]
fn a_rewrite_into_an_ip_denied_route_is_refused() {
    let t = Scratch::new("reroute-ip");
    let (_server, addr) = start(&t);
    for host in HOSTS {
        assert_eq!(get(addr, host, "/admin/secret.txt", &[]).status, 403, "{host}");
        assert_refused(addr, host, "/adm/secret.txt", "admin secret");
        // The target's clean URL, whose page an exact route denies.
        assert_refused(addr, host, "/cl/x", "admin two");
    }
}

#[test]
fn a_rewrite_into_a_forward_auth_route_is_refused() {
    let t = Scratch::new("reroute-forward");
    let (_server, addr) = start(&t);
    for host in HOSTS {
        // The auth service is not there: the route answers 5xx.
        let direct = get(addr, host, "/fafiles/f.txt", &[]);
        assert!(direct.status >= 500, "{host}: {}", direct.head);
        assert_refused(addr, host, "/fs/f.txt", "fa file");
    }
}

#[test]
fn a_clean_url_whose_page_a_route_denies_is_refused() {
    let t = Scratch::new("reroute-clean");
    let (_server, addr) = start(&t);
    for host in HOSTS {
        assert_eq!(get(addr, host, "/admin2.html", &[]).status, 403, "{host}");
        assert_refused(addr, host, "/admin2", "admin two");
    }
}

#[test]
fn a_directory_whose_index_a_route_denies_is_refused() {
    let t = Scratch::new("reroute-index");
    let (_server, addr) = start(&t);
    for host in HOSTS {
        assert_eq!(get(addr, host, "/docs/index.html", &[]).status, 403, "{host}");
        assert_refused(addr, host, "/docs/", "docs index");
        // `/docs` is still redirected to `/docs/`, which is judged there.
        let a = get(addr, host, "/docs", &[]);
        assert_eq!(a.status, 301, "{host}: {}", a.head);
    }
}

/// The archive's lookups are remembered per archive, whichever site
/// asked: a path a site without routes serves (and so remembers) is
/// still judged for the site whose route denies its file.
#[test]
fn a_path_remembered_for_a_site_without_routes_is_still_refused_with_them() {
    let t = Scratch::new("reroute-shared");
    let (_server, addr) = start(&t);
    for (path, secret) in [("/docs/", "docs index\n"), ("/admin2", "admin two\n")] {
        for _ in 0..2 {
            let a = get(addr, "plain.test", path, &[]);
            assert_eq!((a.status, a.body.as_str()), (200, secret), "{path}: {}", a.head);
        }
        assert_refused(addr, "arc.test", path, secret);
    }
}

#[test]
fn a_404_rule_does_not_show_another_routes_file() {
    let t = Scratch::new("reroute-404");
    let (_server, addr) = start(&t);
    for host in HOSTS {
        for a in each_way(addr, host, "/nf/f.txt") {
            assert_eq!(a.status, 404, "{host}: {}", a.head);
            assert!(!a.body.contains("staff file"), "{host}: {}", a.body);
        }
    }
}

/// Not a regression test of the refusal but of its reach: rewrites,
/// clean URLs and indexes that stay within the route that answers are
/// served as they were.
#[test]
fn a_rewrite_that_stays_within_its_route_is_served() {
    let t = Scratch::new("reroute-within");
    let (_server, addr) = start(&t);
    for host in HOSTS {
        for a in each_way(addr, host, "/p/a.txt") {
            assert_eq!((a.status, a.body.as_str()), (200, "public a\n"), "{host}: {}", a.head);
        }
        for a in each_way(addr, host, "/hdr/old/n.txt") {
            assert_eq!((a.status, a.body.as_str()), (200, "hdr new\n"), "{host}: {}", a.head);
            assert!(
                a.head.contains("x-route: hdr") || a.head.contains("X-Route: hdr"),
                "{host}: {}",
                a.head
            );
        }
        for a in each_way(addr, host, "/") {
            assert_eq!((a.status, a.body.as_str()), (200, "home\n"), "{host}: {}", a.head);
        }
        // Into another route that guards nothing (`headers` alone): served.
        for a in each_way(addr, host, "/into-hdr/n.txt") {
            assert_eq!((a.status, a.body.as_str()), (200, "hdr new\n"), "{host}: {}", a.head);
        }
    }
}
