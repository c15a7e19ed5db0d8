//! The sites as `config::reparse` reads them (the path a SIGHUP takes,
//! which returns errors rather than exiting): good files, each refusal's
//! words (file, line, key), inheritance, and which route takes a path.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use test_support::Scratch;

use super::*;
use crate::flags::Cli;

/// A directory with `a/` and `b/` (directories) and `c.prg` (a file, so an
/// archive root as far as reading goes; nothing opens it here).
fn scratch() -> Scratch {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = Scratch::new(&format!("peregrine-sites-unit-{}", N.fetch_add(1, Ordering::Relaxed)));
    dir.write("a/index.html", "a");
    dir.write("b/index.html", "b");
    dir.write("c.prg", "not read here");
    dir
}

/// `serve ARGS --config DIR/peregrine.toml` (holding `toml`), read as a
/// reload reads it.
fn read(dir: &Path, toml: &str, args: &[&str]) -> anyhow::Result<Vec<SiteSpec>> {
    let file = dir.join("peregrine.toml");
    std::fs::write(&file, toml).unwrap();
    let argv = ["peregrine", "serve"]
        .iter()
        .chain(args)
        .map(OsString::from)
        .chain(["--config".into(), file.into_os_string()]);
    let cli: Cli = crate::config::reparse(argv)?;
    match cli.command {
        Command::Serve { sites, .. } => Ok(sites),
        _ => unreachable!(),
    }
}

/// The error's text, which must fail.
fn refused(dir: &Path, toml: &str, args: &[&str]) -> String {
    match read(dir, toml, args) {
        Ok(sites) => panic!("accepted: {sites:#?}"),
        Err(e) => format!("{e:#}"),
    }
}

fn assert_says(text: &str, parts: &[&str]) {
    for p in parts {
        assert!(text.contains(p), "{p:?} not in:\n{text}");
    }
}

/// The origin `check-config` shows for `key` of a site or route.
fn origin<'a>(shown: &'a [Shown], key: &str) -> &'a Origin {
    &shown
        .iter()
        .find(|s| s.key == key)
        .unwrap_or_else(|| panic!("{key} not shown"))
        .origin
}

fn value<'a>(shown: &'a [Shown], key: &str) -> &'a str {
    &shown
        .iter()
        .find(|s| s.key == key)
        .unwrap_or_else(|| panic!("{key} not shown"))
        .value
}

#[test]
fn without_sites_the_root_serves_every_host() {
    let dir = scratch();
    let a = dir.join("a").display().to_string();
    assert!(read(&dir, "workers = 1\n", &[&a]).unwrap().is_empty());
    assert!(read(&dir, &format!("root = {a:?}\n"), &[]).unwrap().is_empty());
}

#[test]
fn three_sites_get_their_names_roots_and_the_top_levels_settings() {
    let dir = scratch();
    let sites = read(
        &dir,
        "version = 1\n\
         list-dirs = true\n\
         cache-control = [\"no-store\"]\n\
         \n\
         [[site]]\n\
         names = [\"Example.COM.\", \"*.Bücher.example\"]\n\
         aliases = [\"old.example\"]\n\
         root = \"a\"\n\
         default = true\n\
         \n\
         [[site]]\n\
         names = \"b.test\"\n\
         root = \"b\"\n\
         list-dirs = false\n\
         index = [\"home.html\", \"index.html\"]\n\
         access-log = \"logs/b.log\"\n\
         \n\
         [[site]]\n\
         names = [\"c.test\"]\n\
         root = \"c.prg\"\n\
         in-memory = true\n",
        &[],
    )
    .unwrap();
    let file = dir.join("peregrine.toml");
    assert_eq!(sites.len(), 3);
    let (a, b, c) = (&sites[0], &sites[1], &sites[2]);
    // Names in the engine's normal form.
    assert_eq!(a.names, ["example.com", "*.xn--bcher-kva.example"]);
    assert_eq!(a.aliases, ["old.example"]);
    // Relative to the file's directory.
    assert_eq!(a.root, dir.join("a"));
    assert_eq!((a.kind, c.kind), (RootKind::Directory, RootKind::Archive));
    assert!(a.default && !b.default && !c.default);
    // Inherited from the top level, and overridden.
    assert!(a.files.list_dirs);
    assert_eq!(a.files.cache_control, ["no-store"]);
    assert_eq!(
        *origin(&a.shown, "list-dirs"),
        Origin::TopLevel(format!("file {}:2", file.display()))
    );
    assert!(!b.files.list_dirs);
    assert_eq!(*origin(&b.shown, "list-dirs"), Origin::File(file.clone(), 14));
    assert_eq!(b.files.index, ["home.html", "index.html"]);
    assert_eq!(*origin(&b.shown, "index"), Origin::File(file.clone(), 15));
    assert_eq!(*origin(&b.shown, "follow-symlinks"), Origin::Default);
    assert_eq!(b.access_log.as_deref(), Some(dir.join("logs/b.log").to_str().unwrap()));
    assert_eq!(a.access_log, None);
    // An archive site: its own archive setting; the directories' left out.
    assert!(c.archive.in_memory);
    assert!(c.shown.iter().all(|s| s.key != "list-dirs"), "{:?}", c.shown);
    assert_eq!(c.given, Origin::File(file, 18));
}

/// The flag form, from the command line and from the file's `site` key:
/// one site per value, every setting the top level's.
#[test]
fn site_flags_and_the_site_key_make_sites_with_the_top_level_settings() {
    let dir = scratch();
    let a = dir.join("a").display().to_string();
    let archive = dir.join("c.prg").display().to_string();
    let sites = read(
        &dir,
        "no-compress = true\n",
        &[
            "--site",
            &format!("a.test,WWW.a.test={a}"),
            "--site",
            &format!("c.test={archive}"),
        ],
    )
    .unwrap();
    assert_eq!(sites[0].names, ["a.test", "www.a.test"]);
    assert_eq!(sites[0].root, dir.join("a"));
    assert!(sites[0].files.no_compress);
    assert_eq!(sites[0].given, Origin::SiteFlag("flag".into()));
    assert_eq!(sites[0].given.to_string(), "flag --site");
    assert_eq!(sites[1].kind, RootKind::Archive);
    assert!(sites[1].routes.is_empty() && sites[1].aliases.is_empty() && !sites[1].default);
    let file = dir.join("peregrine.toml");
    let sites = read(&dir, &format!("site = [\"a.test={a}\"]\n"), &[]).unwrap();
    assert_eq!(sites[0].given, Origin::SiteFlag(format!("file {}:1", file.display())));
}

#[test]
fn a_name_two_sites_claim_is_refused_naming_both() {
    let dir = scratch();
    let f = dir.join("peregrine.toml").display().to_string();
    let text = refused(
        &dir,
        "[[site]]\nnames = [\"a.test\"]\nroot = \"a\"\n\n[[site]]\nnames = [\"b.test\",\n  \"A.TEST.\"]\nroot = \"b\"\n",
        &[],
    );
    assert_says(
        &text,
        &[&format!("{f}:7: names: a.test is also a name of the site at {f}:2")],
    );
    // An alias is a name too.
    let text = refused(
        &dir,
        "[[site]]\nnames = [\"a.test\"]\naliases = [\"b.test\"]\nroot = \"a\"\n[[site]]\nnames = [\"b.test\"]\nroot = \"b\"\n",
        &[],
    );
    assert_says(
        &text,
        &[&format!("{f}:6: names: b.test is also a name of the site at {f}:3")],
    );
    // A `--site` and a table: refused too, not one silently replacing the other.
    let a = dir.join("a").display().to_string();
    let text = refused(
        &dir,
        "[[site]]\nnames = [\"a.test\"]\nroot = \"b\"\n",
        &["--site", &format!("a.test={a}")],
    );
    assert_says(
        &text,
        &[&format!(
            "{f}:2: names: a.test is also a name of the site at --site a.test={a} (flag)"
        )],
    );
}

#[test]
fn site_tables_refuse_what_is_not_theirs_at_its_line() {
    let dir = scratch();
    let f = dir.join("peregrine.toml").display().to_string();
    let text = refused(
        &dir,
        "workers = 2\n\
         [[site]]\n\
         names = [\"a.test\", \"b.test:8080\", \"*\"]\n\
         root = \"a\"\n\
         workers = 3\n\
         forward-auth = \"http://auth\"\n\
         lst-dirs = true\n\
         headers = { X-A = \"1\" }\n\
         prefault = true\n\
         tls-cert = \"cert.pem\"\n",
        &[],
    );
    assert_says(
        &text,
        &[
            &format!("{f}:3: names: \"b.test:8080\": port where only a host name belongs"),
            &format!("{f}:3: names: \"*\": a wildcard is a whole leftmost label"),
            &format!("{f}:5: workers: process-wide: every site shares it, so it is set at the top level"),
            &format!("{f}:6: forward-auth: a route's setting: give it in a [[site.route]] table"),
            &format!("{f}:7: lst-dirs: unknown key in a [[site]] table (did you mean \"list-dirs\"?)"),
            &format!("{f}:8: headers: a route's setting: give it in a [[site.route]] table"),
            &format!(
                "{f}:9: prefault: applies to an archive, and {}/a is a directory",
                dir.display()
            ),
            &format!("{f}:10: tls-cert: give tls-key too, in this site"),
        ],
    );
    // In the file's order.
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].contains(":3: names"), "{text}");
    let text = refused(&dir, "[[site]]\nroot = \"a\"\n[[site]]\nnames = [\"c.test\"]\n", &[]);
    assert_says(
        &text,
        &[
            &format!("{f}:1: [[site]] has no `names`"),
            &format!("{f}:3: [[site]] has no `root`"),
        ],
    );
    let text = refused(
        &dir,
        "[[site]]\nnames = [\"c.test\"]\nroot = \"c.prg\"\nlist-dirs = true\n",
        &[],
    );
    assert_says(
        &text,
        &[&format!(
            "{f}:4: list-dirs: {}/c.prg is an archive, whose answers were fixed when it was packed (an archive has no listings)",
            dir.display()
        )],
    );
    let text = refused(&dir, "[[site]]\nnames = [\"c.test\"]\nroot = \"nowhere\"\n", &[]);
    assert_says(
        &text,
        &[&format!(
            "{f}:3: root: cannot serve {}/nowhere: No such file",
            dir.display()
        )],
    );
    let text = refused(
        &dir,
        "[[site]]\nnames = [\"a.test\"]\nroot = \"a\"\ndefault = true\n[[site]]\nnames = [\"b.test\"]\nroot = \"b\"\ndefault = true\n",
        &[],
    );
    assert_says(
        &text,
        &[&format!(
            "{f}:5: default: a second default site (the first is at {f}:1)"
        )],
    );
    let text = refused(
        &dir,
        "[[site]]\nnames = [\"*.a.test\"]\naliases = [\"b.test\"]\nroot = \"a\"\n",
        &[],
    );
    assert_says(
        &text,
        &[&format!(
            "{f}:3: aliases: aliases redirect to the site's first name, and *.a.test is a wildcard"
        )],
    );
}

/// Each value goes through its flag's parser, as the top level's do.
#[test]
fn site_settings_are_checked_by_their_flags_parsers() {
    let dir = scratch();
    let f = dir.join("peregrine.toml").display().to_string();
    let text = refused(
        &dir,
        "[[site]]\nnames = [\"a.test\"]\nroot = \"a\"\nrevalidate-interval = 4000\ncache-control = [\"max-age=\"]\nlist-dirs = 1\n",
        &[],
    );
    assert_says(
        &text,
        &[
            &format!("{f}:4: revalidate-interval: bad value \"4000\": 4000 is out of range: from 0 to 3600 seconds"),
            &format!("{f}:5: cache-control: bad value \"max-age=\""),
            &format!("{f}:6: list-dirs: expected true or false, found an integer"),
        ],
    );
}

#[test]
fn the_root_is_given_or_sites_are() {
    let dir = scratch();
    let f = dir.join("peregrine.toml").display().to_string();
    let text = refused(&dir, "workers = 2\n", &[]);
    assert_says(
        &text,
        &[
            "`serve` needs DIR|ARCHIVE: give it on the command line, as `root` in",
            "or in PEREGRINE_ROOT; or give sites: --site NAMES=DIR|ARCHIVE",
        ],
    );
    let text = refused(
        &dir,
        "root = \"a\"\n[[site]]\nnames = [\"a.test\"]\nroot = \"a\"\n",
        &[],
    );
    assert_says(&text, &[&format!("DIR|ARCHIVE a (file {f}:1) is given with sites")]);
}

#[test]
fn routes_read_their_handlers_and_settings() {
    let dir = scratch();
    let file = dir.join("peregrine.toml");
    let sites = read(
        &dir,
        "list-dirs = true\n\
         [[site]]\n\
         names = [\"a.test\"]\n\
         root = \"a\"\n\
         index = [\"home.html\"]\n\
         \n\
         [[site.route]]\n\
         path = \"/old/:id/*\"\n\
         to = \"https://b.test/new/:id/:splat\"\n\
         \n\
         [[site.route]]\n\
         path = \"/moved\"\n\
         handler = \"redirect\"\n\
         to = \"/new\"\n\
         status = 302\n\
         \n\
         [[site.route]]\n\
         path = \"/docs/*\"\n\
         root = \"b\"\n\
         list-dirs = false\n\
         cache-control = [\"public, max-age=60\"]\n\
         headers = { X-Frame-Options = \"DENY\", \"X-Robots-Tag\" = \"noindex\" }\n\
         \n\
         [[site.route]]\n\
         path = \"/bundle/*\"\n\
         root = \"c.prg\"\n",
        &[],
    )
    .unwrap();
    let site = &sites[0];
    let route = |path: &str| site.routes.iter().find(|r| r.path == path).unwrap();
    // A `to` makes a redirect; 308 unless said.
    assert!(matches!(
        &route("/old/:id/*").handler,
        HandlerSpec::Redirect { to, status: 308 } if to == "https://b.test/new/:id/:splat"
    ));
    assert_eq!(*origin(&route("/old/:id/*").shown, "status"), Origin::Default);
    assert!(matches!(
        &route("/moved").handler,
        HandlerSpec::Redirect { status: 302, .. }
    ));
    // A directory of its own, the site's settings under the route's.
    let docs = route("/docs/*");
    let HandlerSpec::Files { root, files } = &docs.handler else {
        panic!("{:?}", docs.handler)
    };
    assert_eq!(*root, dir.join("b"));
    assert!(!files.list_dirs);
    assert_eq!(files.index, ["home.html"]);
    assert_eq!(files.cache_control, ["public, max-age=60"]);
    assert_eq!(*origin(&docs.shown, "index"), Origin::Site(file.clone(), 5));
    assert_eq!(*origin(&docs.shown, "list-dirs"), Origin::File(file.clone(), 20));
    assert_eq!(
        docs.headers,
        [
            ("X-Frame-Options".into(), "DENY".into()),
            ("X-Robots-Tag".into(), "noindex".into())
        ]
    );
    assert_eq!(
        value(&docs.shown, "headers"),
        r#"{ X-Frame-Options = "DENY", X-Robots-Tag = "noindex" }"#
    );
    // An archive root makes an archive route.
    assert!(matches!(&route("/bundle/*").handler, HandlerSpec::Archive { root, .. } if *root == dir.join("c.prg")));
    // No access rule was given.
    assert!(site
        .routes
        .iter()
        .all(|r| r.basic_auth.is_none() && r.ip.is_none() && r.rate_limit.is_none() && r.cors.is_none()));
}

#[test]
fn routes_refuse_what_is_not_theirs_at_its_line() {
    let dir = scratch();
    let f = dir.join("peregrine.toml").display().to_string();
    let text = refused(
        &dir,
        "[[site]]\n\
         names = [\"a.test\"]\n\
         root = \"a\"\n\
         [[site.route]]\n\
         path = \"/a/*/b\"\n\
         [[site.route]]\n\
         path = \"/p/:id\"\n\
         to = \"/q/:slug\"\n\
         status = 300\n\
         list-dirs = true\n\
         [[site.route]]\n\
         path = \"/h\"\n\
         headers = { Content-Length = \"5\", \"Bad Name\" = \"x\" }\n\
         cors = true\n\
         proxy = \"ftp://127.0.0.1:3000\"\n\
         access-log = \"x.log\"\n\
         workers = 2\n\
         [[site.route]]\n\
         path = \"/api/*\"\n\
         handler = \"proxy\"\n\
         [[site.route]]\n\
         path = \"/c\"\n\
         handler = \"files\"\n\
         root = \"c.prg\"\n\
         [[site.route]]\n\
         path = \"/h\"\n\
         [[site.route]]\n\
         handler = \"files\"\n",
        &[],
    );
    assert_says(
        &text,
        &[
            &format!("{f}:5: path: in pattern \"/a/*/b\", only the last segment may be a splat"),
            &format!("{f}:8: to: :slug is no capture of the route's path (/p/:id captures :id)"),
            &format!("{f}:9: status: 300: expected 301, 302, 303, 307 or 308"),
            &format!("{f}:10: list-dirs: a redirect serves no files"),
            &format!("{f}:13: headers: header field Content-Length is written by the engine"),
            &format!("{f}:13: headers: invalid header field name \"Bad Name\""),
            &format!("{f}:14: cors: expected a table, e.g. cors = {{ origins = "),
            &format!(
                "{f}:15: proxy: upstream \"ftp://127.0.0.1:3000\": expected http[s]://HOST[:PORT][/PATH], h2[cs]://HOST[:PORT][/PATH] or unix:PATH"
            ),
            &format!("{f}:16: access-log: a site's setting, not a route's"),
            &format!("{f}:17: workers: process-wide"),
            &format!("{f}:20: handler: a proxy needs `proxy`: the upstream's URL"),
            &format!(
                "{f}:24: root: handler \"files\" serves a directory, and {}/c.prg is an archive",
                dir.display()
            ),
            &format!("{f}:26: path: /h is also the path of the route at {f}:12"),
            &format!("{f}:27: [[site.route]] has no `path`"),
        ],
    );
    // One error per mistake: the bad pattern is not also "no path".
    assert!(
        !text.contains(&format!("{f}:4: [[site.route]] has no `path`")),
        "{text}"
    );
}

/// Most specific first, whatever the written order (nginx's longest
/// prefix, Caddy's sorting); ties in written order.
#[test]
fn the_most_specific_route_takes_a_path() {
    let dir = scratch();
    let paths = [
        "/*",
        "/assets/*",
        "/blog/*",
        "/blog/:slug",
        "/assets/img/*",
        "/about",
        "/img*",
        "/blog/:year/:slug",
        "/",
    ];
    let mut toml = String::from("[[site]]\nnames = [\"a.test\"]\nroot = \"a\"\n");
    for p in paths {
        toml.push_str(&format!("[[site.route]]\npath = {p:?}\n"));
    }
    let sites = read(&dir, &toml, &[]).unwrap();
    let site = &sites[0];
    let order: Vec<&str> = site.routes.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        order,
        [
            "/about",
            "/",
            "/assets/img/*",
            "/assets/*",
            "/blog/:year/:slug",
            "/blog/:slug",
            "/blog/*",
            "/img*",
            "/*"
        ]
    );
    let table: &[(&str, Option<&str>)] = &[
        ("/", Some("/")),
        ("/about", Some("/about")),
        ("/about/", Some("/*")),
        ("/assets/img/a.png", Some("/assets/img/*")),
        ("/assets/img", Some("/assets/img/*")),
        ("/assets/app.css", Some("/assets/*")),
        ("/blog/hello", Some("/blog/:slug")),
        ("/blog/2024/hello", Some("/blog/:year/:slug")),
        ("/blog/2024/hello/x", Some("/blog/*")),
        ("/blog/", Some("/blog/*")),
        ("/img-1.png", Some("/img*")),
        ("/other", Some("/*")),
    ];
    for (path, want) in table {
        let got = route_for(site, path).unwrap().map(|i| site.routes[i].path.as_str());
        assert_eq!(got, *want, "{path}");
    }
    // No route: the site's root answers.
    let sites = read(
        &dir,
        "[[site]]\nnames = [\"a.test\"]\nroot = \"a\"\n[[site.route]]\npath = \"/x/*\"\n",
        &[],
    )
    .unwrap();
    assert_eq!(route_for(&sites[0], "/y"), Ok(None));
    assert_eq!(route_for(&sites[0], "/x/y"), Ok(Some(0)));
    // Normalised first: `/x/*`'s rules cannot be walked around.
    assert_eq!(route_for(&sites[0], "//x/y"), Ok(Some(0)));
    assert_eq!(route_for(&sites[0], "/y/../x/y"), Ok(Some(0)));
    assert_eq!(route_for(&sites[0], "/%78/y"), Ok(Some(0)));
    // A path that does not normalise is no route's, nor the root's.
    for bad in ["//x/y%01", "//x/y\\", "/x/%FF", "/x/%00"] {
        assert!(route_for(&sites[0], bad).is_err(), "{bad}");
    }
    assert_eq!(route_for(&sites[0], "*"), Ok(None));
}

#[test]
fn the_files_version_must_be_one_this_binary_reads() {
    let dir = scratch();
    let f = dir.join("peregrine.toml").display().to_string();
    let a = dir.join("a").display().to_string();
    assert!(read(&dir, "version = 1\n", &[&a]).is_ok());
    let text = refused(&dir, "workers = 2\nversion = 2\n", &[&a]);
    assert_says(
        &text,
        &[&format!(
            "{f}:2: version: this peregrine reads version 1 of the configuration format, not 2"
        )],
    );
    let text = refused(&dir, "version = \"1\"\n", &[&a]);
    assert_says(
        &text,
        &[&format!(
            "{f}:1: version: expected a whole number (version 1), found a string"
        )],
    );
}

#[test]
fn site_flags_are_checked_when_read() {
    for (value, why) in [
        ("a.test", "expected NAMES=DIR|ARCHIVE"),
        ("a.test=", "no DIR|ARCHIVE after `=`"),
        ("a.test,,b.test=dir", "an empty name"),
        ("a.test:80=dir", "port where only a host name belongs"),
        ("a b=dir", "byte in host"),
    ] {
        let e = parse_site_flag(value).unwrap_err();
        assert!(e.contains(why), "{value}: {e}");
    }
    assert!(parse_site_flag("a.test,*.b.test=some=dir").is_ok());
}

/// Paths written in a table are relative to the file's directory (so a
/// configuration can move with its sites); `-` stays standard output.
#[test]
fn paths_in_tables_are_relative_to_the_file() {
    let dir = scratch();
    let sites = read(
        &dir,
        "[[site]]\nnames = [\"a.test\"]\nroot = \"a\"\naccess-log = \"-\"\ntls-cert = [\"certs/a.pem\"]\ntls-key = [\"/etc/k.pem\"]\n",
        &[],
    )
    .unwrap();
    assert_eq!(sites[0].access_log.as_deref(), Some("-"));
    assert_eq!(sites[0].tls, [(dir.join("certs/a.pem"), PathBuf::from("/etc/k.pem"))]);
}

/// A route's `ip`, `rate-limit` and `cors` tables are read into their
/// policies and shown by check-config with their lines.
#[test]
fn routes_read_ip_rules_rate_limits_and_cors() {
    let dir = scratch();
    let f = dir.join("peregrine.toml");
    let sites = read(
        &dir,
        "[[site]]\n\
         names = [\"a.test\"]\n\
         root = \"a\"\n\
         [[site.route]]\n\
         path = \"/admin/*\"\n\
         ip = { allow = [\"10.0.0.0/8\", \"::1\"], deny = [\"10.0.0.5\"] }\n\
         rate-limit = { rate = \"10/s\", burst = 20 }\n\
         [[site.route]]\n\
         path = \"/api/*\"\n\
         rate-limit = { rate = \"30/m\" }\n\
         [site.route.cors]\n\
         origins = [\"HTTPS://App.Example.com:443\", \"http://localhost:3000\"]\n\
         methods = [\"GET\", \"PUT\"]\n\
         headers = [\"X-Token\"]\n\
         expose = [\"ETag\"]\n\
         credentials = true\n\
         max-age = 600\n",
        &[],
    )
    .unwrap();
    let routes = &sites[0].routes;
    let route = |p: &str| routes.iter().find(|r| r.path == p).unwrap();
    let admin = route("/admin/*");
    let ip = admin.ip.as_ref().unwrap();
    assert_eq!(ip.allow.len(), 2);
    assert!(ip.permits("10.0.0.4".parse().unwrap()) && !ip.permits("10.0.0.5".parse().unwrap()));
    let limit = admin.rate_limit.as_ref().unwrap();
    assert_eq!(
        (limit.interval, limit.burst),
        (std::time::Duration::from_millis(100), 20)
    );
    assert!(admin.cors.is_none());
    assert_eq!(
        value(&admin.shown, "ip"),
        r#"{ allow = ["10.0.0.0/8", "::1/128"], deny = ["10.0.0.5/32"] }"#
    );
    assert_eq!(origin(&admin.shown, "ip"), &Origin::File(f.clone(), 6));
    assert_eq!(value(&admin.shown, "rate-limit"), r#"{ rate = "10/s", burst = 20 }"#);
    let api = route("/api/*");
    assert_eq!(
        api.rate_limit.as_ref().unwrap().burst,
        30,
        "one period's worth by default"
    );
    let cors = api.cors.as_ref().unwrap();
    assert_eq!(cors.origins, ["https://app.example.com", "http://localhost:3000"]);
    assert_eq!((cors.credentials, cors.max_age), (true, Some(600)));
    assert_eq!(
        value(&api.shown, "cors"),
        r#"{ origins = ["https://app.example.com", "http://localhost:3000"], methods = ["GET", "PUT"], headers = ["x-token"], expose = ["ETag"], credentials = true, max-age = 600 }"#
    );
}

/// A route's `forward-auth` table is read (as a sub-table too) and shown
/// by check-config with its line; its mistakes are said at their line.
#[test]
fn routes_read_forward_auth() {
    let dir = scratch();
    let f = dir.join("peregrine.toml");
    let sites = read(
        &dir,
        "[[site]]\n\
         names = [\"a.test\"]\n\
         root = \"a\"\n\
         [[site.route]]\n\
         path = \"/api/*\"\n\
         proxy = \"http://127.0.0.1:9000\"\n\
         forward-auth = { url = \"http://127.0.0.1:9091/verify\", copy-headers = [\"Remote-User\"] }\n\
         [[site.route]]\n\
         path = \"/docs/*\"\n\
         [site.route.forward-auth]\n\
         url = \"unix:/run/auth.sock\"\n\
         uri = \"/api/verify?from=docs\"\n\
         timeout = 3\n",
        &[],
    )
    .unwrap();
    let routes = &sites[0].routes;
    let route = |p: &str| routes.iter().find(|r| r.path == p).unwrap();
    let api = route("/api/*").forward_auth.as_ref().unwrap();
    assert_eq!(
        (api.url.as_str(), api.copy.as_slice()),
        ("http://127.0.0.1:9091/verify", &["Remote-User".to_owned()][..])
    );
    assert_eq!(
        value(&route("/api/*").shown, "forward-auth"),
        r#"{ url = "http://127.0.0.1:9091/verify", copy-headers = ["Remote-User"] }"#
    );
    assert_eq!(
        origin(&route("/api/*").shown, "forward-auth"),
        &Origin::File(f.clone(), 7)
    );
    let docs = route("/docs/*").forward_auth.as_ref().unwrap();
    assert_eq!(docs.uri.as_deref(), Some("/api/verify?from=docs"));
    assert_eq!(
        value(&route("/docs/*").shown, "forward-auth"),
        r#"{ url = "unix:/run/auth.sock", uri = "/api/verify?from=docs", copy-headers = [], timeout = 3 }"#
    );
    assert!(docs.copy.is_empty());

    let f = f.display().to_string();
    let text = refused(
        &dir,
        "[[site]]\n\
         names = [\"a.test\"]\n\
         root = \"a\"\n\
         [[site.route]]\n\
         path = \"/a\"\n\
         forward-auth = { url = \"http://127.0.0.1:9091\", copy = [\"Remote-User\"] }\n\
         [[site.route]]\n\
         path = \"/b\"\n\
         forward-auth = \"http://127.0.0.1:9091\"\n\
         [[site.route]]\n\
         path = \"/c\"\n\
         forward-auth = { url = \"ftp://auth\" }\n",
        &[],
    );
    assert_says(
        &text,
        &[
            &format!("{f}:6: forward-auth: copy: unknown key; expected url, uri, copy-headers"),
            &format!("{f}:9: forward-auth: expected a table, e.g. forward-auth = {{ url ="),
            &format!("{f}:12: forward-auth: url: upstream \"ftp://auth\": expected http[s]://HOST[:PORT][/PATH], h2[cs]://HOST[:PORT][/PATH] or unix:PATH"),
        ],
    );
}

/// Each mistake in an access table is said at its line, with the key.
#[test]
fn access_tables_refuse_mistakes_at_their_line() {
    let dir = scratch();
    let f = dir.join("peregrine.toml").display().to_string();
    let text = refused(
        &dir,
        "[[site]]\n\
         names = [\"a.test\"]\n\
         root = \"a\"\n\
         cors = { origins = [\"*\"] }\n\
         [[site.route]]\n\
         path = \"/a\"\n\
         ip = { allow = [\"10.0.0.1/8\"] }\n\
         [[site.route]]\n\
         path = \"/b\"\n\
         ip = { alow = [\"10.0.0.0/8\"] }\n\
         [[site.route]]\n\
         path = \"/c\"\n\
         rate-limit = { rate = \"10/d\" }\n\
         [[site.route]]\n\
         path = \"/d\"\n\
         rate-limit = { burst = 5 }\n\
         [[site.route]]\n\
         path = \"/e\"\n\
         cors = { origins = [\"*\"], credentials = true }\n\
         [[site.route]]\n\
         path = \"/f\"\n\
         cors = { origins = [\"https://a.test/\"] }\n\
         [[site.route]]\n\
         path = \"/g\"\n\
         ip = { allow = [\"::1\"], deny = [\"::1\"] }\n",
        &[],
    );
    assert_says(
        &text,
        &[
            &format!("{f}:4: cors: a route's setting: give it in a [[site.route]] table"),
            &format!("{f}:7: ip: allow: \"10.0.0.1/8\": address has bits set beyond the prefix length"),
            &format!("{f}:10: ip: alow: unknown key (did you mean \"allow\"?)"),
            &format!("{f}:13: rate-limit: \"10/d\": the period is s, m or h"),
            &format!("{f}:16: rate-limit: no rate"),
            &format!("{f}:19: cors: origins: \"*\" with credentials = true"),
            &format!("{f}:22: cors: origins: \"https://a.test/\": an origin is only a scheme, a host and a port"),
            &format!("{f}:25: ip: ::1/128 is both allowed and denied"),
        ],
    );
}

/// A route's `basic-auth` takes hashes (bcrypt or argon2) and a realm,
/// is shown by check-config as a count of users (never a hash), and each
/// mistake is said at its line without a password.
#[test]
fn routes_read_basic_auth_and_never_show_a_hash() {
    let dir = scratch();
    let hash = "$2b$04$abcdefghijklmnopqrstuu5ZGMw1ZGf5s8d6sVqv0qNGa1Q0GbVqa";
    let sites = read(
        &dir,
        &format!(
            "[[site]]\nnames = [\"a.test\"]\nroot = \"a\"\n\
             [[site.route]]\npath = \"/staff/*\"\n\
             basic-auth = {{ users = [\"alice:{hash}\", \"bob:{hash}\"], realm = \"Staff\" }}\n"
        ),
        &[],
    )
    .unwrap();
    let staff = &sites[0].routes[0];
    let auth = staff.basic_auth.as_ref().unwrap();
    assert_eq!((auth.users.len(), auth.realm.as_deref()), (2, Some("Staff")));
    assert_eq!(
        value(&staff.shown, "basic-auth"),
        r#"{ users = "<2 users>", realm = "Staff" }"#
    );
    let f = dir.join("peregrine.toml").display().to_string();
    let text = refused(
        &dir,
        "[[site]]\nnames = [\"a.test\"]\nroot = \"a\"\n\
         basic-auth = { users = [] }\n\
         [[site.route]]\npath = \"/a\"\nbasic-auth = { users = [\"alice:hunter2\"] }\n\
         [[site.route]]\npath = \"/b\"\nbasic-auth = { realm = \"x\" }\n\
         [[site.route]]\npath = \"/c\"\nbasic-auth = { user = [] }\n",
        &[],
    );
    assert_says(
        &text,
        &[
            &format!("{f}:4: basic-auth: a route's setting"),
            &format!("{f}:7: basic-auth: user \"alice\": expected a bcrypt ($2b$...) or argon2"),
            &format!("{f}:10: basic-auth: no users"),
            &format!("{f}:13: basic-auth: user: unknown key (did you mean \"users\"?)"),
        ],
    );
    assert!(!text.contains("hunter2"), "{text}");
}
