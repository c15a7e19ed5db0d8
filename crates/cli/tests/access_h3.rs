//! Access control per route (issue 27) over HTTP/3, which the issue asks
//! of every rule ("all over three protocols"; `access.rs` and
//! `basic_auth.rs` cover HTTP/1.1 and HTTP/2): IP rules, a rate limit,
//! CORS and Basic authentication (a route's `basic-auth` and `_headers`'
//! `Basic-Auth`), for a directory site and its archive, with the aioquic
//! client of `http3.rs`.
//!
//! aioquic's `connect()` binds its UDP socket to `::` itself; the test
//! client (`tests/h3/client.py`, `local_host`) binds one to 127.0.0.2,
//! 127.0.0.3, ... instead, as `access.rs`'s TCP clients do, so the server
//! sees distinct client addresses over QUIC too.

mod common;

use base64::Engine as _;
use common::Scratch;
use test_support::process::Process;

/// The routes both sites have.
fn routes(hash: &str) -> String {
    format!(
        "[[site.route]]\npath = \"/mine/*\"\nip = {{ allow = [\"127.0.0.1\"] }}\n\
         [[site.route]]\npath = \"/six/*\"\nip = {{ allow = [\"::1\"] }}\n\
         [[site.route]]\npath = \"/private/*\"\nip = {{ allow = [\"127.0.0.2\"] }}\n\
         [[site.route]]\npath = \"/limited/*\"\nrate-limit = {{ rate = \"1/h\", burst = 2 }}\n\
         [[site.route]]\npath = \"/api/*\"\n\
         cors = {{ origins = [\"https://app.test\"], headers = [\"X-Token\"], credentials = true, max-age = 600 }}\n\
         [[site.route]]\npath = \"/admin/*\"\nbasic-auth = {{ users = [\"alice:{hash}\"], realm = \"Admins\" }}\n"
    )
}

const FILES: &[(&str, &str)] = &[
    ("index.html", "home\n"),
    ("mine/a.txt", "mine\n"),
    ("six/a.txt", "six\n"),
    ("private/secret.txt", "0123456789\n"),
    ("limited/a.txt", "limited\n"),
    ("api/data.json", "{\"ok\":true}\n"),
    ("admin/secret.txt", "admin\n"),
    ("team/page.txt", "team page\n"),
    ("_headers", "/team/*\n  Basic-Auth: carol:hunter2\n"),
];

const HOSTS: [&str; 2] = ["localhost", "arc.test"];

/// The server (HTTPS and HTTP/3) with a directory site (`localhost`) and
/// its archive (`arc.test`), each with [`routes`], on 127.0.0.1 and ::1;
/// and its ports there.
fn start(t: &Scratch) -> (Process, u16, u16) {
    common::packed(t.dir(), FILES, &[]);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned(), "arc.test".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let cert_file = t.write("cert.pem", cert.pem());
    let key_file = t.write("key.pem", key.serialize_pem());
    let routes = routes(&bcrypt::hash("wonderland", 4).unwrap());
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\", \"[::1]:0\"]\nworkers = 2\n\
             [[site]]\nnames = [\"localhost\"]\nroot = \"site\"\ndefault = true\n{routes}\
             [[site]]\nnames = [\"arc.test\"]\nroot = \"site.prg\"\n{routes}"
        ),
    );
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .args(["serve", "--config"])
            .arg(&config)
            .arg("--tls-cert")
            .arg(&cert_file)
            .arg("--tls-key")
            .arg(&key_file),
    );
    let urls = test_support::process::urls(&server.listening());
    let port = |prefix: &str| -> u16 {
        let url = urls.iter().find(|u| u.starts_with(prefix)).unwrap();
        url.trim_end_matches('/').rsplit(':').next().unwrap().parse().unwrap()
    };
    (server, port("https://127.0.0.1:"), port("https://[::1]:"))
}

fn field<'a>(answer: &'a common::H3Answer, name: &str) -> Option<&'a str> {
    answer.1.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// The route that allows 127.0.0.1 answers (a range too); the one that
/// allows only 127.0.0.2 refuses 127.0.0.1 403 whatever it asks, a missing
/// file or a range included, and answers 127.0.0.2; ::1 is judged as
/// itself (the route for ::1 alone answers it, and refuses 127.0.0.1).
#[test]
fn ip_rules_hold_over_http3() {
    let t = Scratch::new("access-h3-ip");
    let (_server, port, port6) = start(&t);
    for host in HOSTS {
        let reqs: &[common::H3Request<'_>] = &[
            ("GET", "/six/a.txt", &[]),
            ("GET", "/mine/a.txt", &[]),
            ("GET", "/private/secret.txt", &[]),
        ];
        let a = common::h3_at("::1", None, port6, host, reqs);
        assert_eq!((a[0].0, a[0].2.as_str()), (200, "six\n"), "{host}: {a:?}");
        assert_eq!((a[1].0, a[2].0), (403, 403), "{host}: {a:?}");
        let a = common::h3(port, host, &[("GET", "/six/a.txt", &[])]);
        assert_eq!(a[0].0, 403, "{host}: {a:?}");
        let a = common::h3_from(
            Some("127.0.0.2"),
            port,
            host,
            &[("GET", "/private/secret.txt", &[]), ("GET", "/mine/a.txt", &[])],
        );
        assert_eq!((a[0].0, a[0].2.as_str()), (200, "0123456789\n"), "{host}: {a:?}");
        assert_eq!(a[1].0, 403, "{host}: {a:?}");
        let a = common::h3(
            port,
            host,
            &[
                ("GET", "/mine/a.txt", &[]),
                ("GET", "/private/secret.txt", &[]),
                ("GET", "/private/none.txt", &[]),
                ("GET", "/private/secret.txt", &[("range", "bytes=0-3")]),
            ],
        );
        assert_eq!((a[0].0, a[0].2.as_str()), (200, "mine\n"), "{host}");
        for refused in &a[1..] {
            assert_eq!(refused.0, 403, "{host}: {refused:?}");
            assert!(!refused.2.contains("0123"), "{host}: {refused:?}");
        }
    }
}

/// A burst of 2 per client address: of three requests at once, two get
/// the file and one a 429 with `Retry-After`; another address has its own
/// bucket.
#[test]
fn rate_limits_hold_over_http3() {
    let t = Scratch::new("access-h3-rate");
    let (_server, port, _) = start(&t);
    for host in HOSTS {
        let get = ("GET", "/limited/a.txt", &[][..]);
        let a = common::h3_from(Some("127.0.0.3"), port, host, &[get, get, get]);
        let ok = a.iter().filter(|a| a.0 == 200).count();
        let refused: Vec<_> = a.iter().filter(|a| a.0 == 429).collect();
        assert_eq!((ok, refused.len()), (2, 1), "{host}: {a:?}");
        assert!(field(refused[0], "retry-after").is_some(), "{a:?}");
        let other = common::h3_from(Some("127.0.0.4"), port, host, &[get]);
        assert_eq!(other[0].0, 200, "{host}: {other:?}");
    }
}

/// A preflight from the allowed origin gets 204 with the fields; another
/// origin's 403; a request from the allowed origin the fields, and every
/// answer `Vary: Origin`.
#[test]
fn cors_holds_over_http3() {
    let t = Scratch::new("access-h3-cors");
    let (_server, port, _) = start(&t);
    let origin = ("origin", "https://app.test");
    for host in HOSTS {
        let a = common::h3(
            port,
            host,
            &[
                (
                    "OPTIONS",
                    "/api/data.json",
                    &[
                        origin,
                        ("access-control-request-method", "POST"),
                        ("access-control-request-headers", "x-token"),
                    ],
                ),
                (
                    "OPTIONS",
                    "/api/data.json",
                    &[
                        ("origin", "https://evil.test"),
                        ("access-control-request-method", "GET"),
                    ],
                ),
                ("GET", "/api/data.json", &[origin]),
            ],
        );
        assert_eq!(a[0].0, 204, "{host}: {:?}", a[0]);
        assert_eq!(field(&a[0], "access-control-allow-origin"), Some("https://app.test"));
        assert_eq!(field(&a[0], "access-control-allow-headers"), Some("x-token"));
        assert_eq!(field(&a[0], "access-control-allow-credentials"), Some("true"));
        assert_eq!(field(&a[0], "access-control-max-age"), Some("600"));
        assert_eq!(a[1].0, 403, "{host}: {:?}", a[1]);
        assert_eq!(field(&a[1], "access-control-allow-origin"), None);
        assert_eq!((a[2].0, a[2].2.as_str()), (200, "{\"ok\":true}\n"), "{host}");
        assert_eq!(field(&a[2], "access-control-allow-origin"), Some("https://app.test"));
        for answer in &a {
            assert!(
                field(answer, "vary").is_some_and(|v| v.contains("Origin")),
                "{answer:?}"
            );
        }
    }
}

/// Without credentials, 401 with the challenge, whether or not the file
/// exists; with the right ones the page, private; with wrong ones 401.
/// The same for `_headers`' Basic-Auth.
#[test]
fn basic_auth_holds_over_http3() {
    let t = Scratch::new("access-h3-basic");
    let (_server, port, _) = start(&t);
    let basic = |user_pw: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(user_pw));
    let (alice, wrong, carol) = (basic("alice:wonderland"), basic("alice:guess"), basic("carol:hunter2"));
    for host in HOSTS {
        let a = common::h3(
            port,
            host,
            &[
                ("GET", "/admin/secret.txt", &[]),
                ("GET", "/admin/none.txt", &[]),
                ("GET", "/admin/secret.txt", &[("authorization", &alice)]),
                ("GET", "/admin/secret.txt", &[("authorization", &wrong)]),
                ("GET", "/team/page.txt", &[]),
                ("GET", "/team/page.txt", &[("authorization", &carol)]),
            ],
        );
        for i in [0, 1, 3, 4] {
            assert_eq!(a[i].0, 401, "{host} {i}: {:?}", a[i]);
            assert!(field(&a[i], "www-authenticate").is_some_and(|v| v.starts_with("Basic realm=")));
        }
        assert_eq!(
            field(&a[0], "www-authenticate"),
            Some("Basic realm=\"Admins\", charset=\"UTF-8\"")
        );
        assert_eq!((a[2].0, a[2].2.as_str()), (200, "admin\n"), "{host}");
        assert!(field(&a[2], "cache-control").is_some_and(|v| v.starts_with("private")));
        assert_eq!((a[5].0, a[5].2.as_str()), (200, "team page\n"), "{host}");
    }
}
