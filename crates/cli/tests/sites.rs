//! `peregrine serve` with several sites, judged by curl (HTTP/1.1 and
//! HTTP/2 over TLS, with the test CA, so that the certificate each name
//! gets is checked): three sites, two directories and an archive holding
//! two inner hosts, each name gets its content and certificate, aliases
//! redirect, an unknown Host, an unknown SNI and a Host/SNI mismatch get
//! their answers; swapping one site's archive while clients keep asking
//! leaves the other sites' ETags and metrics as they were and fails no
//! request; SIGHUP adds and removes a site while an open connection to
//! another keeps being served. (HTTP/3: `http3.rs`.)

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use common::{Scratch, PATIENCE};
use test_support::pki::Pki;
use test_support::process::Process;

/// Two directory sites and an archive with two inner hosts, in `t`:
/// `a` (a.test, *.a.test, alias www.a.test), `b` (b.test, the default
/// when `default_b`), `c.prg` (c.test for its main host, inner.test for
/// its second).
fn three_sites(t: &Scratch) {
    t.write("a/index.html", "site A\n");
    t.write("b/index.html", "site B\n");
    t.write("b/old/page.html", "old\n");
    pack(t, "c", "c main v1\n", "c inner v1\n", "c.prg");
}

/// Packs DIR/NAME-main (main host) and DIR/NAME-inner (inner.test) into
/// DIR/OUT, replacing it by rename.
fn pack(t: &Scratch, name: &str, main: &str, inner: &str, out: &str) {
    t.write(&format!("{name}-main/index.html"), main);
    t.write(&format!("{name}-inner/index.html"), inner);
    let tmp = t.path(&format!("{out}.new"));
    let status = common::peregrine()
        .arg("pack")
        .arg(t.path(&format!("{name}-main")))
        .arg("--host")
        .arg(format!("inner.test={}", t.path(&format!("{name}-inner")).display()))
        .arg("-o")
        .arg(&tmp)
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    std::fs::rename(&tmp, t.path(out)).unwrap();
}

/// The configuration of the three sites, with certificates from `pki`
/// (each site its own) when given.
fn config(t: &Scratch, pki: Option<&Pki>, default_b: bool) -> PathBuf {
    let tls = |stem: &str, names: &[&str]| match pki {
        Some(pki) => {
            let (cert, key, _) = pki.issue(stem, names);
            format!("tls-cert = [{:?}]\ntls-key = [{:?}]\n", cert, key)
        }
        None => String::new(),
    };
    let text = format!(
        "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 2\n\
         metrics = \"127.0.0.1:0\"\n\
         [[site]]\nnames = [\"a.test\", \"*.a.test\"]\naliases = [\"www.a.test\"]\nroot = \"a\"\n{}\
         [[site]]\nnames = [\"b.test\"]\nroot = \"b\"\ndefault = {default_b}\n{}\
         [[site.route]]\npath = \"/old/*\"\nto = \"/new/:splat\"\nstatus = 301\n\
         [[site.route]]\npath = \"/o1/*\"\nto = \"/:splat\"\nstatus = 301\n\
         [[site.route]]\npath = \"/o2/*\"\nto = \"/:splat/next\"\nstatus = 301\n\
         [[site]]\nnames = [\"c.test\", \"inner.test\"]\nroot = \"c.prg\"\n{}",
        tls("a", &["a.test", "*.a.test", "www.a.test", "b.test"]),
        tls("b", &["b.test"]),
        tls("c", &["c.test", "inner.test"]),
    );
    t.write("peregrine.toml", text)
}

/// The server, started in `t`'s directory (relative roots), and the
/// addresses of its sites and metrics.
fn start(t: &Scratch, config: &Path) -> (Process, String, String) {
    let server = Process::spawn(
        common::peregrine()
            .current_dir(t.dir())
            .arg("serve")
            .arg("--config")
            .arg(config),
    );
    let metrics = common::metrics_addr(&server.line("metrics on http://"));
    let line = server.listening();
    let addr = test_support::process::last_addr(&line);
    (server, addr, metrics)
}

fn port(addr: &str) -> &str {
    addr.rsplit(':').next().unwrap()
}

/// One GET over plain HTTP/1.1 with `host`: status, Location, ETag, body.
fn get(addr: &str, host: &str, path: &str) -> (u16, String, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let field = |name: &str| {
        head.lines()
            .find_map(|l| l.split_once(": ").filter(|(n, _)| n.eq_ignore_ascii_case(name)))
            .map_or(String::new(), |(_, v)| v.to_owned())
    };
    let status = head[9..12].parse().unwrap();
    (status, field("location"), field("etag"), body.to_owned())
}

/// What curl got for `https://NAME:PORT/PATH` with NAME resolved to
/// 127.0.0.1, trusting `ca`: the status and body, or curl's error.
fn curl_get(port: &str, ca: &Path, name: &str, host: Option<&str>, http2: bool) -> Result<(u16, String), String> {
    let mut cmd = Command::new(common::curl());
    cmd.args(["-sS", "--max-time", "20", "--cacert"])
        .arg(ca)
        .arg(if http2 { "--http2" } else { "--http1.1" })
        .args(["--resolve", &format!("{name}:{port}:127.0.0.1")])
        .args(["-w", "\n%{http_code} %{http_version}"]);
    if let Some(host) = host {
        cmd.args(["-H", &format!("Host: {host}")]);
    }
    let out = cmd.arg(format!("https://{name}:{port}/")).output().unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, last) = text.rsplit_once('\n').unwrap();
    let (code, version) = last.split_once(' ').unwrap();
    let want = if http2 { "2" } else { "1.1" };
    assert_eq!(version, want, "{name}");
    Ok((code.parse().unwrap(), body.to_owned()))
}

#[test]
fn three_sites_each_get_their_content_and_certificate_over_http1_and_http2() {
    let t = Scratch::new("peregrine-sites-tls");
    three_sites(&t);
    let pki = Pki::new("sites-cli");
    let ca = t.write("ca.pem", pki.ca_pem());
    let config = config(&t, Some(&pki), false);
    let (server, addr, _) = start(&t, &config);
    let port = port(&addr);
    for http2 in [false, true] {
        for (name, body) in [
            ("a.test", "site A\n"),
            ("x.a.test", "site A\n"),
            ("b.test", "site B\n"),
            ("c.test", "c main v1\n"),
            ("inner.test", "c inner v1\n"),
        ] {
            // curl checks that the certificate covers NAME, with the CA:
            // b.test gets b's (a's covers it too, but is a's only).
            let got = curl_get(port, &ca, name, None, http2);
            assert_eq!(got, Ok((200, body.to_owned())), "{name} (h2: {http2})");
        }
        // A Host of another site than the SNI's; an unknown Host.
        assert_eq!(
            curl_get(port, &ca, "a.test", Some("b.test"), http2).map(|r| r.0),
            Ok(421)
        );
        assert_eq!(
            curl_get(port, &ca, "a.test", Some("nobody.test"), http2).map(|r| r.0),
            Ok(421)
        );
        // An unknown SNI: no site, no default: unrecognized_name.
        let refused = curl_get(port, &ca, "nobody.test", None, http2).unwrap_err();
        assert!(refused.contains("unrecognized name"), "{refused}");
        // The alias.
        let out = Command::new(common::curl())
            .args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{redirect_url}",
                "--cacert",
            ])
            .arg(&ca)
            .args(["--resolve", &format!("www.a.test:{port}:127.0.0.1")])
            .arg(format!("https://www.a.test:{port}/x?y"))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("308 https://a.test:{port}/x?y")
        );
    }
    server.terminate();
}

#[test]
fn in_cleartext_unknown_hosts_get_404_or_the_default_and_routes_redirect() {
    let t = Scratch::new("peregrine-sites-plain");
    three_sites(&t);
    for default_b in [false, true] {
        let config = config(&t, None, default_b);
        let (server, addr, _) = start(&t, &config);
        assert_eq!(get(&addr, "A.TEST.", "/").3, "site A\n");
        assert_eq!(get(&addr, "inner.test:80", "/").3, "c inner v1\n");
        let unknown = get(&addr, "nobody.test", "/");
        if default_b {
            assert_eq!(unknown.3, "site B\n");
        } else {
            assert_eq!(unknown.0, 404);
        }
        let (status, location, ..) = get(&addr, "b.test", "/old/x/y.html");
        assert_eq!((status, location.as_str()), (301, "/new/x/y.html"));
        // Captures come decoded from the path the route was chosen by and
        // are encoded once more (not `%2520`), as `_redirects` does.
        for (path, want) in [
            ("/old/a%20b", "/new/a%20b"),
            ("/old/caf%C3%A9", "/new/caf%C3%A9"),
            ("//old/./x/../y", "/new/y"),
            ("/o1//evil.test", "/evil.test"),
        ] {
            let (status, location, ..) = get(&addr, "b.test", path);
            assert_eq!((status, location.as_str()), (301, want), "{path}");
        }
        // A target that would begin with `//` (an empty capture) names
        // another host: 400, never sent.
        let (status, location, ..) = get(&addr, "b.test", "/o2");
        assert_eq!((status, location.as_str()), (400, ""));
        // A path that does not normalise is no route's (matched as sent,
        // `//old/x%01` would miss `/old/*`).
        assert_eq!(get(&addr, "b.test", "//old/x%01").0, 400);
        let (status, location, ..) = get(&addr, "www.a.test", "/p");
        assert_eq!((status, location.as_str()), (308, "http://a.test/p"));
        server.terminate();
    }
}

/// The value of the series `name{labels}` in a scrape, if it is there.
fn series(scrape: &str, name_labels: &str) -> Option<u64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(name_labels)?.trim().parse().ok())
}

#[test]
fn swapping_one_sites_archive_under_load_leaves_the_others_as_they_were() {
    let t = Scratch::new("peregrine-sites-swap");
    three_sites(&t);
    // A second archive site, to show its generation stays.
    pack(&t, "d", "d main\n", "d inner\n", "d.prg");
    let config = config(&t, None, false);
    let text = std::fs::read_to_string(&config).unwrap() + "[[site]]\nnames = [\"d.test\"]\nroot = \"d.prg\"\n";
    std::fs::write(&config, text).unwrap();
    let (server, addr, metrics) = start(&t, &config);
    let etags = |addr: &str| ["a.test", "d.test", "inner.test"].map(|h| get(addr, h, "/").2).to_vec();
    let before = etags(&addr);
    assert!(before.iter().all(|e| !e.is_empty()), "{before:?}");
    let scrape = || common::get(&metrics, "/metrics");
    let generation = |site: &str| series(&scrape(), &format!("peregrine_archive_generation{{site=\"{site}\"}}"));
    assert_eq!((generation("c.test"), generation("d.test")), (Some(1), Some(1)));

    // Clients on keep-alive connections, to every site, all along.
    let stop = Arc::new(AtomicBool::new(false));
    let (done, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let clients: Vec<_> = ["a.test", "c.test", "inner.test", "d.test"]
        .into_iter()
        .map(|host| {
            let (addr, stop, done, failed) = (addr.clone(), stop.clone(), done.clone(), failed.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let (status, ..) = get(&addr, host, "/");
                    done.fetch_add(1, Ordering::Relaxed);
                    if status != 200 {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    test_support::wait_until("requests under way", || done.load(Ordering::Relaxed) > 200);
    pack(&t, "c", "c main v2\n", "c inner v2\n", "c.prg");
    test_support::wait_until("c's archive swapped", || get(&addr, "c.test", "/").3 == "c main v2\n");
    let n_before = done.load(Ordering::Relaxed);
    test_support::wait_until("requests after the swap", || {
        done.load(Ordering::Relaxed) > n_before + 200
    });
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0, "of {}", done.load(Ordering::Relaxed));
    assert_eq!(get(&addr, "inner.test", "/").3, "c inner v2\n");
    assert_eq!((generation("c.test"), generation("d.test")), (Some(2), Some(1)));
    // The other sites' ETags (a directory's, the other archive's) are as
    // they were; the swapped archive's inner host changed.
    let after = etags(&addr);
    assert_eq!(after[..2], before[..2]);
    assert_ne!(after[2], before[2]);
    server.terminate();
}

#[test]
fn sighup_adds_and_removes_sites_and_keeps_serving_the_others() {
    let t = Scratch::new("peregrine-sites-reload");
    three_sites(&t);
    t.write("e/index.html", "site E\n");
    let config = config(&t, None, false);
    let (server, addr, _) = start(&t, &config);
    // A keep-alive connection to a, open across the reload.
    let mut open = TcpStream::connect(&addr).unwrap();
    open.set_read_timeout(Some(PATIENCE)).unwrap();
    let ask = |s: &mut TcpStream| {
        write!(s, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n").unwrap();
        let mut buf = vec![0u8; 4096];
        let n = s.read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert!(ask(&mut open).ends_with("site A\n"));
    assert_eq!(get(&addr, "e.test", "/").0, 404);

    // c goes, e comes.
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replace(
        "names = [\"c.test\", \"inner.test\"]\nroot = \"c.prg\"",
        "names = [\"e.test\"]\nroot = \"e\"",
    );
    std::fs::write(&config, text).unwrap();
    server.signal("HUP");
    server.line("configuration reloaded");
    assert_eq!(get(&addr, "e.test", "/").3, "site E\n");
    assert_eq!(get(&addr, "c.test", "/").0, 404);
    assert_eq!(get(&addr, "b.test", "/").3, "site B\n");
    // The open connection is answered (by the old generation, which then
    // closes it, as a reload hands over).
    let answer = ask(&mut open);
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("site A\n"),
        "{answer}"
    );
    server.terminate();
}
