//! Sites as a user configures them (issue 24): `[[site]]` tables and
//! `--site` flags, checked by `peregrine check-config serve`, which prints
//! each site and route with where each setting came from, as a file that
//! gives the same sites again; and the refusals, each naming its line.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{packed, peregrine};
use test_support::process::BoundedOutput;
use test_support::Scratch;

fn scratch() -> Scratch {
    static N: AtomicUsize = AtomicUsize::new(0);
    Scratch::new(&format!("peregrine-sites-test-{}", N.fetch_add(1, Ordering::Relaxed)))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts a failed run whose error contains every one of `parts`.
fn assert_error(out: &Output, parts: &[&str]) {
    assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
    let err = stderr(out);
    for p in parts {
        assert!(err.contains(p), "{p:?} not in:\n{err}");
    }
}

/// One `[[site]]` or `[[site.route]]` table of check-config's output: the
/// origin on its header line, then key -> (value, origin).
#[derive(Debug, PartialEq)]
struct Table {
    given: String,
    settings: Vec<(String, String, String)>,
}

impl Table {
    fn get(&self, key: &str) -> (&str, &str) {
        let (_, v, o) =
            (self.settings.iter().find(|(k, ..)| k == key)).unwrap_or_else(|| panic!("{key} not in {self:#?}"));
        (v, o)
    }

    fn has(&self, key: &str) -> bool {
        self.settings.iter().any(|(k, ..)| k == key)
    }
}

/// A site and its routes.
#[derive(Debug, PartialEq)]
struct Site {
    site: Table,
    routes: Vec<Table>,
}

/// The sites check-config printed after the settings.
fn sites(out: &Output) -> Vec<Site> {
    assert!(out.status.success(), "check-config failed: {}", stderr(out));
    let mut sites: Vec<Site> = Vec::new();
    for line in stdout(out).lines() {
        let table = |header: &str| Table {
            given: line.strip_prefix(header).unwrap().trim_start_matches("  # ").to_owned(),
            settings: Vec::new(),
        };
        if line.starts_with("[[site]]") {
            sites.push(Site {
                site: table("[[site]]"),
                routes: Vec::new(),
            });
        } else if line.starts_with("[[site.route]]") {
            sites.last_mut().unwrap().routes.push(table("[[site.route]]"));
        } else if let Some(site) = sites.last_mut().filter(|_| !line.starts_with('#') && !line.is_empty()) {
            let (kv, origin) = line.rsplit_once("  # ").expect(line);
            let (k, v) = kv.split_once(" = ").expect(line);
            let table = site.routes.last_mut().unwrap_or(&mut site.site);
            table.settings.push((k.to_owned(), v.to_owned(), origin.to_owned()));
        }
    }
    sites
}

/// Two directories and an archive holding two hosts, one of which the
/// site's names do not cover.
fn three_roots(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let a = dir.join("a");
    let b = dir.join("b");
    // The access logs' directory (the sandbox grants it, so it must be there).
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    for (root, text) in [(&a, "a"), (&b, "b")] {
        std::fs::create_dir_all(root.join("assets")).unwrap();
        std::fs::write(root.join("index.html"), text).unwrap();
        std::fs::write(root.join("assets/app.css"), "body{}").unwrap();
    }
    for host in ["docs", "outside"] {
        std::fs::create_dir_all(dir.join(host)).unwrap();
        std::fs::write(dir.join(host).join("index.html"), host).unwrap();
    }
    let docs = format!("docs.c.test={}", dir.join("docs").display());
    let outside = format!("outside.test={}", dir.join("outside").display());
    let (archive, _) = packed(dir, &[("index.html", "c")], &["--host", &docs, "--host", &outside]);
    (a, b, archive)
}

const THREE_SITES: &str = "\
version = 1
workers = 2
list-dirs = true
cache-control = [\"no-cache\"]

[[site]]
names = [\"A.Test.\", \"www.a.test\"]
aliases = [\"a.example\"]
root = \"a\"
default = true
access-log = \"logs/a.log\"

[[site.route]]
path = \"/*\"
headers = { X-Frame-Options = \"DENY\" }

[[site.route]]
path = \"/assets/*\"
cache-control = [\"public, max-age=31536000, immutable\"]

[[site.route]]
path = \"/old/:id/*\"
to = \"https://b.test/new/:id/:splat\"
status = 301

[[site]]
names = [\"b.test\"]
root = \"b\"
list-dirs = false
index = [\"home.html\", \"index.html\"]

[[site]]
names = [\"c.test\", \"*.c.test\"]
root = \"site.prg\"
in-memory = true
";

#[test]
fn check_config_shows_each_site_and_route_with_where_its_settings_came_from() {
    let dir = scratch();
    let (a, b, archive) = three_roots(&dir);
    let file = dir.join("peregrine.toml");
    std::fs::write(&file, THREE_SITES).unwrap();
    let f = file.display().to_string();
    let out = peregrine()
        .args(["check-config", "serve", "--config"])
        .arg(&file)
        .bounded_output();
    let shown = sites(&out);
    assert_eq!(shown.len(), 3, "{}", stdout(&out));
    assert!(
        stdout(&out).contains("# site is not set; the sites are the [[site]] tables shown below"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("# 3 sites (names in normal form, paths as resolved); a host no site names: the default site (a.test) answers."),
        "{}",
        stdout(&out)
    );

    let site_a = &shown[0].site;
    assert_eq!(site_a.given, format!("file {f}:6"));
    assert_eq!(
        site_a.get("names"),
        (r#"["a.test", "www.a.test"]"#, format!("file {f}:7").as_str())
    );
    assert_eq!(site_a.get("aliases").0, r#"["a.example"]"#);
    assert_eq!(
        site_a.get("root"),
        (
            format!("{:?}", a.display().to_string()).as_str(),
            format!("file {f}:9").as_str()
        )
    );
    assert_eq!(site_a.get("default"), ("true", format!("file {f}:10").as_str()));
    assert_eq!(
        site_a.get("list-dirs"),
        ("true", format!("inherited from top-level (file {f}:3)").as_str())
    );
    assert_eq!(site_a.get("index"), (r#"["index.html"]"#, "default"));
    assert_eq!(
        site_a.get("access-log").0,
        format!("{:?}", dir.join("logs/a.log").display().to_string())
    );
    // Routes in the order they are tried: most specific first.
    let paths: Vec<&str> = shown[0].routes.iter().map(|r| r.get("path").0).collect();
    assert_eq!(paths, [r#""/assets/*""#, r#""/old/:id/*""#, r#""/*""#]);
    let assets = &shown[0].routes[0];
    assert_eq!(assets.given, format!("file {f}:17"));
    assert_eq!(assets.get("handler"), (r#""files""#, "default"));
    assert_eq!(assets.get("root").1, format!("inherited from site (file {f}:9)"));
    assert_eq!(
        assets.get("cache-control"),
        (
            r#"["public, max-age=31536000, immutable"]"#,
            format!("file {f}:19").as_str()
        )
    );
    assert_eq!(
        assets.get("list-dirs").1,
        format!("inherited from top-level (file {f}:3)")
    );
    let old = &shown[0].routes[1];
    assert_eq!(old.get("handler"), (r#""redirect""#, "default"));
    assert_eq!(old.get("to").0, r#""https://b.test/new/:id/:splat""#);
    assert_eq!(old.get("status"), ("301", format!("file {f}:24").as_str()));
    assert!(!old.has("root"));
    let all = &shown[0].routes[2];
    assert_eq!(
        all.get("headers"),
        (r#"{ X-Frame-Options = "DENY" }"#, format!("file {f}:15").as_str())
    );

    let site_b = &shown[1].site;
    assert_eq!(site_b.get("root").0, format!("{:?}", b.display().to_string()));
    assert_eq!(site_b.get("list-dirs"), ("false", format!("file {f}:29").as_str()));
    assert_eq!(
        site_b.get("index"),
        (r#"["home.html", "index.html"]"#, format!("file {f}:30").as_str())
    );
    assert_eq!(site_b.get("default"), ("false", "default"));
    assert!(shown[1].routes.is_empty());

    // An archive: its own setting; the directories' are not its.
    let site_c = &shown[2].site;
    assert_eq!(site_c.get("names").0, r#"["c.test", "*.c.test"]"#);
    assert_eq!(site_c.get("root").0, format!("{:?}", archive.display().to_string()));
    assert_eq!(site_c.get("in-memory"), ("true", format!("file {f}:35").as_str()));
    assert!(!site_c.has("list-dirs") && !site_c.has("index"));
    // The archive's host that no name of its site covers is unreachable.
    let err = stderr(&out);
    let warning = err
        .lines()
        .find(|l| l.contains("unreachable"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        warning.ends_with(&format!(
            "{} holds hosts that no name of its site covers, so they are unreachable: outside.test",
            archive.display()
        )),
        "{err}"
    );
}

/// What check-config prints is a configuration: read again, it gives the
/// same sites and routes, with the same values.
#[test]
fn check_config_output_with_sites_is_itself_a_configuration() {
    let dir = scratch();
    three_roots(&dir);
    let file = dir.join("peregrine.toml");
    std::fs::write(&file, THREE_SITES).unwrap();
    let first = peregrine()
        .args(["check-config", "serve", "--config"])
        .arg(&file)
        .bounded_output();
    let again = dir.join("again.toml");
    std::fs::write(&again, stdout(&first)).unwrap();
    let second = peregrine()
        .args(["check-config", "serve", "--config"])
        .arg(&again)
        .bounded_output();
    let values = |out: &Output| -> Vec<Vec<Vec<(String, String)>>> {
        sites(out)
            .into_iter()
            .map(|s| {
                std::iter::once(s.site)
                    .chain(s.routes)
                    .map(|t| t.settings.into_iter().map(|(k, v, _)| (k, v)).collect())
                    .collect()
            })
            .collect()
    };
    assert_eq!(values(&first), values(&second));
    assert_eq!(values(&second).len(), 3);
}

/// `--site NAMES=DIR|ARCHIVE`: one site each, every setting the top
/// level's; `site`'s own line a comment, the sites shown as tables.
#[test]
fn site_flags_make_sites_with_the_top_level_settings() {
    let dir = scratch();
    let (a, _, archive) = three_roots(&dir);
    let out = peregrine()
        .args(["check-config", "serve", "--list-dirs", "--site"])
        .arg(format!("a.test={}", a.display()))
        .arg("--site")
        .arg(format!("c.test,WWW.c.test={}", archive.display()))
        .bounded_output();
    let shown = sites(&out);
    assert_eq!(shown.len(), 2, "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "# site = [\"a.test={}\", \"c.test,WWW.c.test={}\"]  # flag; shown below as [[site]] tables",
            a.display(),
            archive.display()
        )),
        "{text}"
    );
    assert!(text.contains("no site is the default, so the answer is 421 over TLS and 404 in cleartext"));
    let site_a = &shown[0].site;
    assert_eq!(site_a.given, "flag --site");
    assert_eq!(site_a.get("names"), (r#"["a.test"]"#, "flag --site"));
    assert_eq!(site_a.get("list-dirs"), ("true", "inherited from top-level (flag)"));
    assert_eq!(site_a.get("default"), ("false", "default"));
    assert_eq!(shown[1].site.get("names").0, r#"["c.test", "www.c.test"]"#);
    assert!(!shown[1].site.has("list-dirs"));
    // The variable is the flag's, one site; the file's key too.
    let out = peregrine()
        .args(["check-config", "serve"])
        .env("PEREGRINE_SITE", format!("a.test={}", a.display()))
        .bounded_output();
    assert_eq!(sites(&out)[0].site.given, "env PEREGRINE_SITE (--site's form)");
    let file = dir.join("flags.toml");
    std::fs::write(&file, format!("site = [\"a.test={}\"]\n", a.display())).unwrap();
    let out = peregrine()
        .args(["check-config", "serve", "--config"])
        .arg(&file)
        .bounded_output();
    assert_eq!(
        sites(&out)[0].site.given,
        format!("file {}:1 (--site's form)", file.display())
    );
}

#[test]
fn refusals_name_the_file_line_and_key() {
    let dir = scratch();
    let (a, _, _) = three_roots(&dir);
    let check = |text: &str, extra: &[&str]| -> (Output, String) {
        let file = dir.join("bad.toml");
        std::fs::write(&file, text).unwrap();
        let out = peregrine()
            .args(["check-config", "serve"])
            .args(extra)
            .arg("--config")
            .arg(&file)
            .bounded_output();
        (out, file.display().to_string())
    };
    let (out, f) = check(
        "[[site]]\nnames = [\"a.test\"]\nroot = \"a\"\nworkers = 4\nforward-auth = \"http://auth\"\n\n[[site.route]]\npath = \"/api/*\"\nhandler = \"proxy\"\n",
        &[],
    );
    assert_error(
        &out,
        &[
            &format!(
                "{f}:4: workers: process-wide: every site shares it, so it is set at the top level, not in a [[site]]"
            ),
            &format!("{f}:5: forward-auth: a route's setting: give it in a [[site.route]] table"),
            &format!("{f}:9: handler: a proxy needs `proxy`: the upstream's URL"),
        ],
    );
    // A name a flag's site and a table both claim.
    let site = format!("A.test={}", a.display());
    let (out, f) = check(
        "[[site]]\nnames = [\"b.test\", \"a.test\"]\nroot = \"b\"\n",
        &["--site", &site],
    );
    assert_error(
        &out,
        &[&format!(
            "{f}:2: names: a.test is also a name of the site at --site {site} (flag): a name belongs to one site"
        )],
    );
    let (out, f) = check("workers = 2\nversion = 3\n", &[]);
    assert_error(
        &out,
        &[&format!(
            "{f}:2: version: this peregrine reads version 1 of the configuration format, not 3"
        )],
    );
    let (out, f) = check("[site]\nnames = [\"a.test\"]\n", &[]);
    assert_error(
        &out,
        &[&format!("{f}:1: site: a site is a [[site]] table (two brackets")],
    );
    // Neither a root nor sites.
    let (out, _) = check("workers = 2\n", &[]);
    assert_error(
        &out,
        &[
            "`serve` needs DIR|ARCHIVE",
            "`root`",
            "PEREGRINE_ROOT",
            "--site NAMES=DIR|ARCHIVE",
            "[[site]]",
        ],
    );
    // Sites are `serve`'s.
    let file = dir.join("hello.toml");
    std::fs::write(&file, "[[site]]\nnames = [\"a.test\"]\nroot = \"a\"\n").unwrap();
    let out = peregrine()
        .args(["check-config", "hello", "--config"])
        .arg(&file)
        .bounded_output();
    assert_error(
        &out,
        &[&format!(
            "{}:1: unknown table \"site\" for `hello` (a setting of `serve` only)",
            file.display()
        )],
    );
    // A bad name on the command line is a usage error, as any bad flag value.
    let out = peregrine()
        .args(["check-config", "serve", "--site", "a.test:8080=site"])
        .bounded_output();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("port where only a host name belongs"),
        "{}",
        stderr(&out)
    );
}
