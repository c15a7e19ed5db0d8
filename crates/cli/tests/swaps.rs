//! What a deploy of an archive may be, and what the archive it replaces
//! still answers, judged against the `peregrine` binary: with
//! `--require-signature`, an unsigned, a wrongly signed, a tampered (its
//! checksums made good again) and an older archive are each refused at
//! start and at a swap, the archive being served still answering, and
//! `--allow-rollback` takes the older one; `archive verify` shows a
//! signature; with `--keep-previous`, the replaced archive answers the
//! content-hashed assets the new one lacks for its grace period, never a
//! file the new one dropped that is not one, nor a revoked path, nor a
//! path Basic authentication protects in either archive or on its route.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};

use common::{peregrine, Scratch, PATIENCE};
use peregrine_archive::format::{hash, put_u64, u64_at};
use test_support::process::{BoundedOutput, Process};
use test_support::{sample, wait_until};

/// `archive keygen DIR/NAME`: the private key's path (the public one is
/// beside it, `.pub`) and the key's id.
fn keygen(t: &Scratch, name: &str) -> (PathBuf, String) {
    let out = peregrine()
        .args(["archive", "keygen"])
        .arg(t.path(name))
        .bounded_output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let public = std::fs::read_to_string(t.path(&format!("{name}.pub"))).unwrap();
    let (id, pem) = stdout.split_once('\n').unwrap();
    assert_eq!(pem, public);
    assert!(public.starts_with("-----BEGIN PUBLIC KEY-----\n"), "{public}");
    (t.path(name), id.strip_prefix("key id: ").unwrap().to_owned())
}

/// Writes `files` under DIR/NAME and packs them into DIR/NAME.prg with
/// `extra` flags (no compression: each body is stored once, as written).
fn pack(t: &Scratch, name: &str, files: &[(&str, &str)], extra: &[&str]) -> PathBuf {
    for (path, body) in files {
        t.write(&format!("{name}/{path}"), body);
    }
    let archive = t.path(&format!("{name}.prg"));
    let out = peregrine()
        .arg("pack")
        .arg(t.path(name))
        .arg("-o")
        .arg(&archive)
        .arg("--no-compress")
        .args(extra)
        .bounded_output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    archive
}

/// A signed archive whose index page says `body`, deploy number `n`.
fn signed(t: &Scratch, name: &str, body: &str, key: &Path, n: u64) -> PathBuf {
    let n = n.to_string();
    let key = key.to_str().unwrap();
    pack(
        t,
        name,
        &[("index.html", body)],
        &["--sign", key, "--deploy-number", &n],
    )
}

/// Deploys `archive` as DIR/site.prg the way a deploy should: a copy
/// beside it, then a rename over it.
fn deploy(t: &Scratch, archive: &Path) {
    deploy_as(t, archive, "site.prg");
}

/// Deploys `archive` as DIR/NAME.
fn deploy_as(t: &Scratch, archive: &Path, name: &str) {
    let next = t.path(&format!("{name}.new"));
    std::fs::copy(archive, &next).unwrap();
    std::fs::rename(&next, t.path(name)).unwrap();
}

/// What someone who can write the archive but has no key does: changes a
/// body, then makes every checksum the format keeps good again (the
/// body's in the index, the index's, the data's, the header's), so that
/// only the signature tells.
fn tamper(archive: &Path, from: &str, to: &str) -> PathBuf {
    assert_eq!(from.len(), to.len());
    let mut b = std::fs::read(archive).unwrap();
    let at = b.windows(from.len()).position(|w| w == from.as_bytes()).unwrap() as u64;
    b[at as usize..at as usize + from.len()].copy_from_slice(to.as_bytes());
    let index_off = u64_at(&b, 24) as usize;
    let entries_at = index_off + u64_at(&b, index_off + 32) as usize;
    let a = peregrine_archive::Archive::from_bytes(b.clone()).unwrap();
    for e in a.entries() {
        for vi in 0..4 {
            let Some(v) = e.variant(vi) else { continue };
            if (v.body_off..v.body_off + v.body_len).contains(&at) {
                let body = &b[v.body_off as usize..(v.body_off + v.body_len) as usize];
                let body_hash = hash(body);
                put_u64(&mut b, entries_at + e.index() * 192 + 32 + vi * 40 + 16, body_hash);
            }
        }
    }
    let index_len = u64_at(&b, 32) as usize;
    let index_hash = hash(&b[index_off..index_off + index_len]);
    put_u64(&mut b, 40, index_hash);
    let data_hash = hash(&b[64..index_off]);
    put_u64(&mut b, 48, data_hash);
    let header_hash = hash(&b[..56]);
    put_u64(&mut b, 56, header_hash);
    let out = archive.with_extension("tampered.prg");
    std::fs::write(&out, b).unwrap();
    out
}

/// One GET: status and body.
fn get(addr: &str, path: &str) -> (u16, String) {
    get_from(addr, "x", path)
}

/// One GET for `host`: status and body.
fn get_from(addr: &str, host: &str, path: &str) -> (u16, String) {
    get_with(addr, host, path, "")
}

/// One GET for `host` with `extra` head lines (each ending in CRLF):
/// status and body.
fn get_with(addr: &str, host: &str, path: &str, extra: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head[9..12].parse().unwrap(), body.to_owned())
}

/// The value of the unlabelled metric `name`.
fn metric(metrics: &str, name: &str) -> u64 {
    sample(&get(metrics, "/metrics").1, name)
}

/// `serve DIR/site.prg` with one worker, metrics, and `extra`: the
/// server, its address and its metrics' address.
fn serve(t: &Scratch, extra: &[&str]) -> (Process, String, String) {
    let server = Process::spawn(
        peregrine()
            .current_dir(t.dir())
            .args(["serve", "site.prg", "--bind", "127.0.0.1:0", "--workers", "1"])
            .args(["--metrics", "127.0.0.1:0"])
            .args(extra),
    );
    let metrics = common::metrics_addr(&server.line("metrics on http://"));
    let addr = test_support::process::last_addr(&server.line("serving"));
    (server, addr, metrics)
}

/// `serve DIR/ARCHIVE` run to its end: its exit code and what it said.
fn refused_at_start(t: &Scratch, archive: &Path, extra: &[&str]) -> String {
    let out = peregrine()
        .current_dir(t.dir())
        .arg("serve")
        .arg(archive)
        .args(["--bind", "127.0.0.1:0", "--workers", "1"])
        .args(extra)
        .bounded_output();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    err
}

/// The archives of the signature tests: `good` (deploy 10, says "v10"),
/// `next` (deploy 11), and the four a server requiring `k.pub` refuses.
struct Candidates {
    good: PathBuf,
    next: PathBuf,
    bad: [(&'static str, PathBuf, String); 5],
}

fn candidates(t: &Scratch) -> Candidates {
    let (key, _) = keygen(t, "k");
    let (other, other_id) = keygen(t, "other");
    let good = signed(t, "good", "v10", &key, 10);
    Candidates {
        next: signed(t, "next", "v11", &key, 11),
        bad: [
            (
                "unsigned",
                pack(t, "unsigned", &[("index.html", "v13")], &[]),
                "not signed, and a signature is required".to_owned(),
            ),
            (
                "wrongly signed",
                signed(t, "wrong", "v12", &other, 12),
                format!("signed by key {other_id}, which is not trusted"),
            ),
            (
                "tampered",
                tamper(&signed(t, "tampered", "v14", &key, 14), "v14", "v66"),
                "does not match the archive's bytes: it was changed after it was signed".to_owned(),
            ),
            (
                "older",
                signed(t, "older", "v9", &key, 9),
                "deploy number 9 is lower than 10, the one being served: a rollback".to_owned(),
            ),
            (
                "another with the same deploy number",
                signed(t, "same", "vXX", &key, 10),
                "deploy number 10 is the one being served, but this is another archive".to_owned(),
            ),
        ],
        good,
    }
}

#[test]
fn each_archive_a_server_requiring_a_signature_must_refuse_is_refused_at_start() {
    let t = Scratch::new("peregrine-swaps-start");
    let c = candidates(&t);
    for (what, archive, _) in &c.bad[..3] {
        let err = refused_at_start(&t, archive, &["--require-signature", "k.pub"]);
        let why = match *what {
            "unsigned" => "not signed, and a signature is required",
            "wrongly signed" => "which is not trusted",
            _ => "does not match the archive's bytes",
        };
        assert!(err.contains(why), "{what}: {err}");
    }
    // At start nothing is served: an older archive is one below the floor.
    let err = refused_at_start(
        &t,
        &c.bad[3].1,
        &["--require-signature", "k.pub", "--deploy-number-min", "10"],
    );
    assert!(
        err.contains("deploy number 9 is below 10, the lowest accepted"),
        "{err}"
    );
    // The tampered archive passes every check but the signature's.
    let out = peregrine()
        .args(["archive", "verify"])
        .arg(&c.bad[2].1)
        .bounded_output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // And a key file that is no public key is named.
    let err = refused_at_start(&t, &c.good, &["--require-signature", "k"]);
    assert!(
        err.contains("--require-signature: k: a PEM PRIVATE KEY where a PUBLIC KEY is expected"),
        "{err}"
    );
}

#[test]
fn each_refused_replacement_leaves_the_archive_served_serving() {
    let t = Scratch::new("peregrine-swaps-swap");
    let c = candidates(&t);
    deploy(&t, &c.good);
    let (server, addr, metrics) = serve(&t, &["--require-signature", "k.pub"]);
    assert_eq!(get(&addr, "/"), (200, "v10".to_owned()));
    for (n, (what, archive, why)) in c.bad.iter().enumerate() {
        deploy(&t, archive);
        let line = server.line("refusing the new archive");
        assert!(
            line.contains(why.as_str()) && line.contains("still serving generation 1"),
            "{what}: {line}"
        );
        wait_until("the refusal counted", || {
            metric(&metrics, "peregrine_archive_refused_total") == n as u64 + 1
        });
        assert_eq!(get(&addr, "/"), (200, "v10".to_owned()), "{what}");
        assert_eq!(metric(&metrics, "peregrine_archive_generation"), 1, "{what}");
    }
    // A higher deploy number by the trusted key is taken.
    deploy(&t, &c.next);
    server.line("loaded as generation 2");
    assert_eq!(get(&addr, "/"), (200, "v11".to_owned()));
    // SIGHUP loads the same archive again: the same deploy number, the
    // same bytes, accepted.
    server.signal("HUP");
    server.line("loaded as generation 3");
    assert_eq!(metric(&metrics, "peregrine_archive_refused_total"), 5);
    server.terminate();
}

#[test]
fn allow_rollback_takes_an_older_archive_signed_by_a_trusted_key_and_only_that() {
    let t = Scratch::new("peregrine-swaps-rollback");
    let c = candidates(&t);
    deploy(&t, &c.good);
    let (server, addr, metrics) = serve(&t, &["--require-signature", "k.pub", "--allow-rollback"]);
    deploy(&t, &c.bad[3].1);
    server.line("loaded as generation 2");
    assert_eq!(get(&addr, "/"), (200, "v9".to_owned()));
    // Still a signature by a trusted key.
    deploy(&t, &c.bad[0].1);
    assert!(server.line("refusing the new archive").contains("not signed"));
    assert_eq!(get(&addr, "/"), (200, "v9".to_owned()));
    assert_eq!(metric(&metrics, "peregrine_archive_refused_total"), 1);
    server.terminate();
}

#[test]
fn archive_verify_shows_the_signature_and_checks_it_with_a_key() {
    let t = Scratch::new("peregrine-swaps-verify");
    let (key, id) = keygen(&t, "k");
    keygen(&t, "other");
    let archive = signed(&t, "a", "v1", &key, 7);
    let verify = |keys: &[&str]| {
        let mut cmd = peregrine();
        cmd.args(["archive", "verify"]).arg(&archive);
        for k in keys {
            cmd.arg("--key").arg(t.path(k));
        }
        let out = cmd.bounded_output();
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (code, out, err) = verify(&["k.pub"]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(lines[0], format!("key id: {id}"));
    assert_eq!(id.len(), 16);
    assert!(lines[1].starts_with("created: ") && lines[1].ends_with(')'), "{out}");
    assert_eq!(lines[2..], ["deploy number: 7", "signature: OK"]);
    assert!(err.contains(": OK ("), "{err}");
    // Rotation: either key trusted is enough.
    assert_eq!(verify(&["other.pub", "k.pub"]).0, Some(0));
    // Without a key the signature is shown, not checked.
    let (code, out, _) = verify(&[]);
    assert_eq!(code, Some(0));
    assert!(out.ends_with("signature: not checked (no --key)\n"), "{out}");
    let (code, _, err) = verify(&["other.pub"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains(&format!("refused: signed by key {id}, which is not trusted")),
        "{err}"
    );
    // An unsigned archive checked with a key.
    let unsigned = pack(&t, "u", &[("index.html", "u")], &[]);
    let out = peregrine()
        .args(["archive", "verify", "--key"])
        .arg(t.path("k.pub"))
        .arg(&unsigned)
        .bounded_output();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused: not signed"));
}

/// Strings as the tests compare answers.
fn ok(body: &str) -> (u16, String) {
    (200, body.to_owned())
}

#[test]
fn the_replaced_archive_answers_the_hashed_assets_the_new_one_lacks_for_its_grace_period() {
    let t = Scratch::new("peregrine-swaps-keep");
    let v1 = pack(
        &t,
        "v1",
        &[
            ("index.html", "<p>v1</p>"),
            ("app.111aaaa1.js", "v1 js"),
            ("shared.444dddd4.js", "v1 shared"),
            ("leak.txt", "leaked"),
            ("gone.222bbbb2.js", "revoked js"),
        ],
        &[],
    );
    let v2 = pack(
        &t,
        "v2",
        &[
            ("index.html", "<p>v2</p>"),
            ("app.333cccc3.js", "v2 js"),
            ("shared.444dddd4.js", "v2 shared"),
            ("404.html", "not here"),
        ],
        &["--revoke", "/gone.222bbbb2.js"],
    );
    // What the deploy changes, revocation included.
    let out = peregrine().args(["archive", "diff"]).arg(&v1).arg(&v2).bounded_output();
    let diff = String::from_utf8(out.stdout).unwrap();
    assert!(
        diff.contains("added    default /gone.222bbbb2.js (revoked) [-]: revoked\n"),
        "{diff}"
    );
    assert!(
        diff.contains("removed  default /app.111aaaa1.js [identity]: 200, 5 bytes\n"),
        "{diff}"
    );
    deploy(&t, &v1);
    let (server, addr, metrics) = serve(&t, &["--keep-previous", "3s"]);
    assert_eq!(get(&addr, "/app.111aaaa1.js"), ok("v1 js"));
    assert_eq!(get(&addr, "/leak.txt"), ok("leaked"));
    deploy(&t, &v2);
    wait_until("version 2 served", || get(&addr, "/") == ok("<p>v2</p>"));
    // The browser that loaded version 1's page a moment ago gets its script.
    assert_eq!(get(&addr, "/app.111aaaa1.js"), ok("v1 js"));
    // What version 2 has comes from it, always.
    assert_eq!(get(&addr, "/app.333cccc3.js"), ok("v2 js"));
    assert_eq!(get(&addr, "/shared.444dddd4.js"), ok("v2 shared"));
    // A file removed that is no content-hashed asset is gone at once (its
    // 404 page is version 2's), and so is a revoked one.
    assert_eq!(get(&addr, "/leak.txt"), (404, "not here".to_owned()));
    assert_eq!(get(&addr, "/gone.222bbbb2.js"), (404, "not here".to_owned()));
    assert_eq!(metric(&metrics, "peregrine_archive_fallbacks_total"), 1);
    server.line("loaded as generation 2; generation 1 answers what it lacks for 3 s");
    // Then version 1 is released.
    wait_until("the grace period over", || get(&addr, "/app.111aaaa1.js").0 == 404);
    server.line("site.prg: generation 1 released");
    assert_eq!(get(&addr, "/app.111aaaa1.js"), (404, "not here".to_owned()));
    server.terminate();
}

/// Two sites, each its archive, kept for 30 s: one site's swap keeps its
/// own previous archive and leaves the other's alone; a route with access
/// rules never falls back, even for a client its rules let in.
#[test]
fn previous_archives_are_kept_per_site_and_never_answer_under_access_rules() {
    let t = Scratch::new("peregrine-swaps-sites");
    let a1 = pack(
        &t,
        "a1",
        &[
            ("index.html", "a1"),
            ("app.111aaaa1.js", "a1 js"),
            ("private/p.555eeee5.js", "a1 private"),
        ],
        &[],
    );
    let a2 = pack(&t, "a2", &[("index.html", "a2")], &[]);
    let b1 = pack(&t, "b1", &[("index.html", "b1"), ("app.777ffff7.js", "b1 js")], &[]);
    let b2 = pack(&t, "b2", &[("index.html", "b2")], &[]);
    deploy_as(&t, &a1, "a.prg");
    deploy_as(&t, &b1, "b.prg");
    let config = t.write(
        "peregrine.toml",
        "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\nmetrics = \"127.0.0.1:0\"\n\
         keep-previous = 30\n\
         [[site]]\nnames = [\"a.test\"]\nroot = \"a.prg\"\ndefault = true\n\
         [[site.route]]\npath = \"/private/*\"\nip = { allow = [\"127.0.0.1\"] }\n\
         [[site]]\nnames = [\"b.test\"]\nroot = \"b.prg\"\n",
    );
    let server = Process::spawn(
        peregrine()
            .current_dir(t.dir())
            .arg("serve")
            .arg("--config")
            .arg(&config),
    );
    let metrics = common::metrics_addr(&server.line("metrics on http://"));
    let addr = test_support::process::last_addr(&server.line("serving"));
    assert_eq!(get_from(&addr, "a.test", "/private/p.555eeee5.js"), ok("a1 private"));
    deploy_as(&t, &a2, "a.prg");
    wait_until("a2 served", || get_from(&addr, "a.test", "/") == ok("a2"));
    assert_eq!(get_from(&addr, "a.test", "/app.111aaaa1.js"), ok("a1 js"));
    assert_eq!(get_from(&addr, "a.test", "/private/p.555eeee5.js").0, 404);
    deploy_as(&t, &b2, "b.prg");
    wait_until("b2 served", || get_from(&addr, "b.test", "/") == ok("b2"));
    assert_eq!(get_from(&addr, "b.test", "/app.777ffff7.js"), ok("b1 js"));
    // b's swap released nothing of a's.
    assert_eq!(get_from(&addr, "a.test", "/app.111aaaa1.js"), ok("a1 js"));
    let scrape = get(&metrics, "/metrics").1;
    assert_eq!(sample(&scrape, "peregrine_archive_fallbacks_total{site=\"a.test\"}"), 2);
    assert_eq!(sample(&scrape, "peregrine_archive_fallbacks_total{site=\"b.test\"}"), 1);
    server.terminate();
}

/// `Authorization: Basic ...` for `user:password`, as a head line.
fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Authorization: Basic {token}\r\n")
}

/// Basic authentication and the previous archive: a path a `_headers`
/// `Basic-Auth` rule of the replaced archive protects never falls back
/// (the old archive would serve it to anyone: the new one dropped the
/// rule with the file), nor one the new archive's rule protects (proven
/// credentials get the new archive's 404), nor one under a route's
/// `basic-auth`; a content-hashed asset beside them still does.
#[test]
fn paths_basic_auth_protects_in_either_archive_or_a_route_never_fall_back() {
    let t = Scratch::new("peregrine-swaps-auth");
    let v1 = pack(
        &t,
        "v1",
        &[
            ("index.html", "v1"),
            ("app.111aaaa1.js", "v1 js"),
            ("team/t.222bbbb2.js", "v1 team"),
            ("staff/s.333cccc3.js", "v1 staff"),
            ("admin/a.444dddd4.js", "v1 admin"),
            ("_headers", "/team/*\n  Basic-Auth: carol:hunter2\n"),
        ],
        &[],
    );
    let v2 = pack(
        &t,
        "v2",
        &[
            ("index.html", "v2"),
            ("404.html", "not here"),
            ("_headers", "/staff/*\n  Basic-Auth: carol:hunter2\n"),
        ],
        &[],
    );
    deploy(&t, &v1);
    let alice = bcrypt::hash("wonderland", 4).unwrap();
    let config = t.write(
        "peregrine.toml",
        format!(
            "version = 1\nbind = [\"127.0.0.1:0\"]\nworkers = 1\nmetrics = \"127.0.0.1:0\"\n\
             keep-previous = 30\n\
             [[site]]\nnames = [\"a.test\"]\nroot = \"site.prg\"\ndefault = true\n\
             [[site.route]]\npath = \"/admin/*\"\nbasic-auth = {{ users = [\"alice:{alice}\"] }}\n"
        ),
    );
    let server = Process::spawn(
        peregrine()
            .current_dir(t.dir())
            .arg("serve")
            .arg("--config")
            .arg(&config),
    );
    let metrics = common::metrics_addr(&server.line("metrics on http://"));
    let addr = test_support::process::last_addr(&server.line("serving"));
    let (carol, alice) = (basic("carol", "hunter2"), basic("alice", "wonderland"));
    let get = |path: &str, extra: &str| get_with(&addr, "a.test", path, extra);
    assert_eq!(get("/team/t.222bbbb2.js", "").0, 401);
    assert_eq!(get("/team/t.222bbbb2.js", &carol), ok("v1 team"));
    assert_eq!(get("/staff/s.333cccc3.js", ""), ok("v1 staff"));
    assert_eq!(get("/admin/a.444dddd4.js", "").0, 401);
    assert_eq!(get("/admin/a.444dddd4.js", &alice), ok("v1 admin"));
    deploy(&t, &v2);
    wait_until("v2 served", || get("/", "") == ok("v2"));
    // The control: an asset no rule covers falls back.
    assert_eq!(get("/app.111aaaa1.js", ""), ok("v1 js"));
    // Protected in the replaced archive: never from it, with or without
    // its password.
    let gone = (404, "not here".to_owned());
    assert_eq!(get("/team/t.222bbbb2.js", ""), gone);
    assert_eq!(get("/team/t.222bbbb2.js", &carol), gone);
    // Protected in the new archive: its 401, then, proven, its 404.
    assert_eq!(get("/staff/s.333cccc3.js", "").0, 401);
    assert_eq!(get("/staff/s.333cccc3.js", &carol), gone);
    // Under a route's basic-auth: likewise.
    assert_eq!(get("/admin/a.444dddd4.js", "").0, 401);
    assert_eq!(get("/admin/a.444dddd4.js", &alice), gone);
    let scrape = get_from(&metrics, "x", "/metrics").1;
    assert_eq!(sample(&scrape, "peregrine_archive_fallbacks_total{site=\"a.test\"}"), 1);
    server.terminate();
}

/// The deploy under load: clients on keep-alive connections keep
/// asking `/` and version 1's script while `mv` puts version 2 in place.
/// No request fails; the script is version 1's all along (version 2 lacks
/// it, the previous generation answers); and `/` is version 2 from the
/// first answer after the swap: once any client has read version 2, no
/// request sent after that reads version 1 (one worker, so the loop
/// answers requests in the order it reads them and one generation at a
/// time).
#[test]
fn a_deploy_under_load_fails_no_request_and_serves_the_new_page_at_once() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    let t = Scratch::new("peregrine-swaps-load");
    let v1 = pack(
        &t,
        "v1",
        &[("index.html", "<p>v1</p>"), ("app.111aaaa1.js", "v1 js")],
        &[],
    );
    let v2 = pack(
        &t,
        "v2",
        &[("index.html", "<p>v2</p>"), ("app.222bbbb2.js", "v2 js")],
        &[],
    );
    deploy(&t, &v1);
    let (server, addr, metrics) = serve(&t, &["--keep-previous", "120s"]);

    let stop = Arc::new(AtomicBool::new(false));
    let seen_v2 = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let after_v2 = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (addr, stop, seen_v2) = (addr.clone(), stop.clone(), seen_v2.clone());
            let (done, after_v2) = (done.clone(), after_v2.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let mut c = test_support::http::Client::connect(&addr);
                while !stop.load(Ordering::SeqCst) {
                    let v2_before = seen_v2.load(Ordering::SeqCst);
                    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
                    let page = c.response();
                    let body = page.text();
                    match (page.status, body.as_str()) {
                        (200, "<p>v2</p>") => seen_v2.store(true, Ordering::SeqCst),
                        (200, "<p>v1</p>") if !v2_before => {}
                        _ => {
                            return Err(format!(
                                "/ answered {} {body:?} (version 2 seen before asking: {v2_before})",
                                page.status
                            ))
                        }
                    }
                    c.send(b"GET /app.111aaaa1.js HTTP/1.1\r\nHost: x\r\n\r\n");
                    let script = c.response();
                    if (script.status, script.text().as_str()) != (200, "v1 js") {
                        return Err(format!("the v1 script answered {} {:?}", script.status, script.text()));
                    }
                    done.fetch_add(2, Ordering::SeqCst);
                    if v2_before {
                        after_v2.fetch_add(2, Ordering::SeqCst);
                    }
                }
                Ok(())
            })
        })
        .collect();
    // A client that failed has returned: its error is what the test says.
    let failed = |clients: &[std::thread::JoinHandle<_>]| clients.iter().any(|c| c.is_finished());
    wait_until("requests under way", || {
        done.load(Ordering::SeqCst) > 400 || failed(&clients)
    });
    deploy(&t, &v2);
    wait_until("requests after the swap", || {
        after_v2.load(Ordering::SeqCst) > 400 || failed(&clients)
    });
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().unwrap().unwrap();
    }
    server.line("loaded as generation 2; generation 1 answers what it lacks for 120 s");
    assert_eq!(get(&addr, "/"), ok("<p>v2</p>"));
    assert_eq!(get(&addr, "/app.222bbbb2.js"), ok("v2 js"));
    // Every script asked after the swap came from generation 1.
    assert!(metric(&metrics, "peregrine_archive_fallbacks_total") >= 200);
    server.terminate();
}
