//! Reading the sites: `--site` values and the file's `[[site]]` and
//! `[[site.route]]` tables, every value checked by the parser of the flag
//! it mirrors (`config::file_values`), every error naming the file's line
//! and the key, as the top level's errors do. All errors are gathered and
//! said at once.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use clap::{Args, FromArgMatches};
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use peregrine::host::{normalize, HostMap};
use peregrine::pattern::Pattern;

use super::keys::{
    per_site, reserved, Applies, BALANCE_KEYS, BASIC_AUTH_KEYS, CORS_KEYS, ENCODE_KEYS, FORWARD_AUTH_KEYS, HANDLERS,
    IP_KEYS, PATHS, PER_SITE, RATE_LIMIT_KEYS, REDIRECT_STATUSES, REDIRECT_STATUS_DEFAULT, ROUTE_KEYS, ROUTE_SETTINGS,
    SITE_KEYS,
};
use super::render::{toml_list, Shown};
use super::routes;
use super::{
    Balance, BasicAuth, Cors, ForwardAuth, HandlerSpec, IpRules, Origin, Proxy, RateLimit, RootKind, RouteSpec,
    SiteSpec,
};
use crate::config::{self, Settings, SITE_TABLES};
use crate::flags::{FileArgs, ServeArchiveArgs};

/// Per-site settings by file key: values as the command line would give
/// them (`"true"`/`"false"` for a switch; empty: unset), and their origin.
type Values = BTreeMap<&'static str, (Vec<OsString>, Origin)>;

/// The sites of `serve`: from `--site` (its values `flags`, wherever they
/// came from) and the file's `[[site]]` tables; empty when there are none,
/// and `root` (DIR|ARCHIVE, empty when not given) is served for every
/// host. Checks what can be checked without opening a root: names, what
/// each root is, every value, routes, one default, no name twice.
pub(crate) fn resolve(root: &Path, flags: &[String], settings: &Settings<'_>) -> anyhow::Result<Vec<SiteSpec>> {
    let top = top_values(settings);
    let mut sites = Vec::new();
    let mut claims = Claims::default();
    let mut errors = Vec::new();
    let from = settings.origin(SITE_TABLES).unwrap_or_else(|| "flag".to_owned());
    // ` (file F:3)` or ` (env PEREGRINE_SITE)`; empty for a flag.
    let shown = settings
        .origin(SITE_TABLES)
        .map(|o| format!(" ({o})"))
        .unwrap_or_default();
    for (index, value) in flags.iter().enumerate() {
        match flag_site(value, &from, &top, settings) {
            Ok(site) => {
                for name in site.names.iter() {
                    let place = format!("--site {value} ({from})");
                    claims.claim(name, index, place, "names", &mut errors);
                }
                sites.push(site);
            }
            Err(why) => errors.push(format!("--site {value}{shown}: {why}")),
        }
    }
    if let (Some(path), Some(text)) = (settings.file_path(), settings.file_text()) {
        let file = FileSites {
            settings,
            path,
            text,
            dir: path.parent().map(Path::to_owned).unwrap_or_default(),
            top: &top,
        };
        file.read(flags.len(), &mut sites, &mut claims, &mut errors);
        // In the file's order, whichever check found them.
        let at = |e: &String| -> usize {
            let rest = e.strip_prefix(&format!("{}:", path.display())).unwrap_or_default();
            rest.split(':').next().and_then(|l| l.parse().ok()).unwrap_or(0)
        };
        errors.sort_by_key(at);
    }
    if sites.is_empty() && errors.is_empty() {
        if root.as_os_str().is_empty() {
            let (shown, ways) = settings
                .how_to_give("root")
                .unwrap_or_else(|| ("DIR|ARCHIVE".into(), "on the command line".into()));
            anyhow::bail!(
                "`serve` needs {shown}: give it {ways}; or give sites: --site NAMES=DIR|ARCHIVE \
                 (repeatable), or [[site]] tables in the --config file"
            );
        }
        return Ok(Vec::new());
    }
    if !root.as_os_str().is_empty() {
        errors.insert(
            0,
            format!(
                "DIR|ARCHIVE {}{} is given with sites: each site has its own root; serve it as a \
                 [[site]] (`default = true` makes it the site for hosts no site names) or leave it out",
                root.display(),
                // This read's own settings, not the process-wide record that
                // another reading (a test beside this one) may have replaced.
                settings.origin("root").map(|o| format!(" ({o})")).unwrap_or_default()
            ),
        );
    }
    let defaults: Vec<&SiteSpec> = sites.iter().filter(|s| s.default).collect();
    if let [first, second, ..] = defaults[..] {
        errors.push(format!(
            "{}: default: a second default site (the first is at {}): one site at most gets the hosts \
             no site names",
            place(&second.given),
            place(&first.given)
        ));
    }
    if !errors.is_empty() {
        return Err(anyhow!(errors.join("\n")));
    }
    Ok(sites)
}

/// A value parser for `--site NAMES=DIR|ARCHIVE`: names in the engine's
/// host syntax, a root after the `=`.
pub(crate) fn parse_site_flag(s: &str) -> Result<String, String> {
    let (names, _) = split_site_flag(s)?;
    for name in names {
        normal_name(name)?;
    }
    Ok(s.to_owned())
}

/// `a.test,www.a.test=DIR` as its names and its root.
fn split_site_flag(s: &str) -> Result<(Vec<&str>, &str), String> {
    const FORM: &str = "NAMES=DIR|ARCHIVE, e.g. example.com,www.example.com=site";
    let Some((names, root)) = s.split_once('=') else {
        return Err(format!("expected {FORM}"));
    };
    if root.is_empty() {
        return Err(format!("no DIR|ARCHIVE after `=`: expected {FORM}"));
    }
    let names: Vec<&str> = names.split(',').map(str::trim).collect();
    if names.iter().any(|n| n.is_empty()) {
        return Err(format!("an empty name: expected {FORM}"));
    }
    Ok((names, root))
}

/// A site's name (`example.com`) or wildcard (`*.example.com`) in the
/// engine's normal form: lowercase, A-labels, no root dot. Refused as the
/// engine's `HostMap` refuses it (a port, a partial wildcard, a wildcard
/// over an address, bytes no host has), so that every name read here is
/// one the dispatcher takes.
pub(crate) fn normal_name(name: &str) -> Result<String, String> {
    HostMap::new().insert(name, ()).map_err(|e| e.to_string())?;
    let (wild, rest) = match name.strip_prefix("*.") {
        Some(rest) => ("*.", rest),
        None => ("", name),
    };
    let normal = normalize(rest.as_bytes()).map_err(|e| format!("{name:?}: {e}"))?;
    Ok(format!("{wild}{normal}"))
}

/// Each name's site, to refuse a name two sites claim, naming both places.
#[derive(Default)]
struct Claims(BTreeMap<String, (usize, String)>);

impl Claims {
    /// `name` (normal form) for the `site`-th site given, at `place`
    /// (`F:LINE` or `--site ...`) as `key` (`names`, `aliases`).
    fn claim(&mut self, name: &str, site: usize, place: String, key: &str, errors: &mut Vec<String>) {
        match self.0.get(name) {
            Some((other, first)) if *other != site => errors.push(format!(
                "{place}: {key}: {name} is also a name of the site at {first}: a name belongs to one site"
            )),
            Some((_, first)) => errors.push(format!(
                "{place}: {key}: {name} is named twice in this site (first at {first})"
            )),
            None => {
                self.0.insert(name.to_owned(), (site, place));
            }
        }
    }
}

/// `F:LINE` of a site's or route's table, or `--site`'s source.
fn place(given: &Origin) -> String {
    match given {
        Origin::File(path, line) | Origin::Site(path, line) => format!("{}:{line}", path.display()),
        other => other.to_string(),
    }
}

/// The top level's value of every per-site setting, every site's default.
fn top_values(settings: &Settings<'_>) -> Values {
    PER_SITE
        .iter()
        .map(|(key, _)| {
            let origin = settings.origin(key).map_or(Origin::Default, Origin::TopLevel);
            (*key, (settings.values(key), origin))
        })
        .collect()
}

/// What a root is, or why it cannot be served.
fn root_kind(root: &Path) -> Result<RootKind, String> {
    match std::fs::metadata(root) {
        Ok(m) if m.is_dir() => Ok(RootKind::Directory),
        Ok(_) => Ok(RootKind::Archive),
        Err(e) => Err(format!("cannot serve {}: {e}", root.display())),
    }
}

/// One `--site NAMES=DIR|ARCHIVE`: every setting the top level's.
fn flag_site(value: &str, from: &str, top: &Values, settings: &Settings<'_>) -> Result<SiteSpec, String> {
    let (names, root) = split_site_flag(value)?;
    let names = names.into_iter().map(normal_name).collect::<Result<Vec<_>, _>>()?;
    let root = PathBuf::from(root);
    let kind = root_kind(&root)?;
    let given = Origin::SiteFlag(from.to_owned());
    let mut shown = vec![
        Shown::new("names", toml_list(&names), given.clone()),
        Shown::new("root", config::toml_string(&root.to_string_lossy()), given.clone()),
        Shown::new("default", "false".into(), Origin::Default),
    ];
    let (files, archive, tls, access_log) = site_settings(top, kind, settings, &mut shown)?;
    Ok(SiteSpec {
        names,
        aliases: Vec::new(),
        root,
        kind,
        default: false,
        tls,
        access_log,
        files,
        archive,
        routes: Vec::new(),
        shown,
        given,
    })
}

/// The typed settings of a site from its values (those that mean nothing
/// for its root's kind left out), each shown with its origin.
#[allow(clippy::type_complexity)]
fn site_settings(
    values: &Values,
    kind: RootKind,
    settings: &Settings<'_>,
    shown: &mut Vec<Shown>,
) -> Result<(FileArgs, ServeArchiveArgs, Vec<(PathBuf, PathBuf)>, Option<String>), String> {
    let applicable: Values = values
        .iter()
        .filter(|(key, _)| applies(per_site(key).unwrap_or(Applies::Both), kind))
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    for (key, _) in PER_SITE {
        if let Some((vals, origin)) = applicable.get(key) {
            if let Some(value) = toml_value(settings, key, vals) {
                shown.push(Shown::new(key, value, origin.clone()));
            }
        }
    }
    let (files, archive) = file_args(&applicable)?;
    let paths = |key: &str| -> Vec<PathBuf> {
        (applicable.get(key).map(|(v, _)| v.as_slice()).unwrap_or_default())
            .iter()
            .map(PathBuf::from)
            .collect()
    };
    let tls = paths("tls-cert").into_iter().zip(paths("tls-key")).collect();
    let access_log = paths("access-log")
        .into_iter()
        .next()
        .map(|p| p.to_string_lossy().into_owned());
    Ok((files, archive, tls, access_log))
}

/// Whether a setting that `applies` so means something for a root of
/// this kind.
fn applies(applies: Applies, kind: RootKind) -> bool {
    match applies {
        Applies::Both => true,
        Applies::Directory(_) => kind == RootKind::Directory,
        Applies::Archive => kind == RootKind::Archive,
    }
}

/// A setting's values as TOML, as the top level shows them (`None`: unset).
fn toml_value(settings: &Settings<'_>, key: &str, values: &[OsString]) -> Option<String> {
    let arg = settings.arg(key)?;
    let kind = config::Kind::of(arg);
    let items: Vec<String> = values
        .iter()
        .map(|v| config::toml_scalar(kind, &v.to_string_lossy()))
        .collect();
    match items.len() {
        0 => None,
        1 if !matches!(arg.get_action(), clap::ArgAction::Append) => items.into_iter().next(),
        _ => Some(format!("[{}]", items.join(", "))),
    }
}

/// `FileArgs` and `ServeArchiveArgs` from values, parsed by clap from the
/// line the flags would make, so that they mean exactly what the flags
/// mean (defaults included).
fn file_args(values: &Values) -> Result<(FileArgs, ServeArchiveArgs), String> {
    let cmd = ServeArchiveArgs::augment_args(FileArgs::augment_args(clap::Command::new("site").no_binary_name(true)));
    let mut line: Vec<OsString> = Vec::new();
    for arg in cmd.get_arguments() {
        let key = config::key(arg);
        let Some((vals, _)) = values.get(key) else { continue };
        if config::is_flag(arg) {
            if vals.iter().any(|v| v == "true") {
                line.push(format!("--{key}").into());
            }
        } else {
            for v in vals {
                let mut flag = OsString::from(format!("--{key}="));
                flag.push(v);
                line.push(flag);
            }
        }
    }
    let m = cmd.try_get_matches_from(line).map_err(|e| config::why_refused(&e))?;
    let files = FileArgs::from_arg_matches(&m).map_err(|e| config::why_refused(&e))?;
    let archive = ServeArchiveArgs::from_arg_matches(&m).map_err(|e| config::why_refused(&e))?;
    Ok((files, archive))
}

/// The file's `[[site]]` tables, read against the merged settings.
struct FileSites<'a> {
    settings: &'a Settings<'a>,
    path: &'a Path,
    text: &'a str,
    /// Relative paths in tables are relative to this: the file's directory
    /// (empty for a file in the working directory).
    dir: PathBuf,
    top: &'a Values,
}

/// A table's entries in the order written.
fn entries<'t, 'i>(table: &'t DeTable<'i>) -> Vec<(&'t Spanned<std::borrow::Cow<'i, str>>, &'t Spanned<DeValue<'i>>)> {
    let mut entries: Vec<_> = table.iter().collect();
    entries.sort_by_key(|(k, _)| k.span().start);
    entries
}

impl FileSites<'_> {
    fn line(&self, offset: usize) -> usize {
        config::line_of(self.text, offset)
    }

    /// `F:LINE: key: why`, as the top level's errors are worded.
    fn error(&self, line: usize, key: &str, why: impl std::fmt::Display) -> String {
        format!("{}:{line}: {key}: {why}", self.path.display())
    }

    fn origin(&self, line: usize) -> Origin {
        Origin::File(self.path.to_owned(), line)
    }

    /// A path as written in a table: relative to the file's directory.
    fn path_of(&self, written: &str) -> PathBuf {
        let p = Path::new(written);
        if p.is_absolute() {
            p.to_owned()
        } else {
            self.dir.join(p)
        }
    }

    /// Every `[[site]]` table, appended to `sites`; the first is the
    /// `first`-th site given (after the `--site` ones).
    fn read(&self, first: usize, sites: &mut Vec<SiteSpec>, claims: &mut Claims, errors: &mut Vec<String>) {
        let Ok(doc) = DeTable::parse(self.text) else {
            return; // File::load read it already
        };
        let Some((_, value)) = doc.get_ref().iter().find(|(k, _)| k.get_ref() == SITE_TABLES) else {
            return;
        };
        let DeValue::Array(items) = value.get_ref() else { return };
        for (i, item) in items.iter().enumerate() {
            // Strings are `--site`'s form (read with the flags).
            let DeValue::Table(table) = item.get_ref() else {
                continue;
            };
            let header = self.line(item.span().start);
            if let Some(site) = self.site(table, header, first + i, claims, errors) {
                sites.push(site);
            }
        }
    }

    /// One `[[site]]` table, whose `[[site]]` is at line `header`.
    fn site(
        &self,
        table: &DeTable<'_>,
        header: usize,
        index: usize,
        claims: &mut Claims,
        errors: &mut Vec<String>,
    ) -> Option<SiteSpec> {
        let n_errors = errors.len();
        let mut names: Option<(Vec<String>, usize)> = None;
        let mut aliases: Option<(Vec<String>, usize)> = None;
        let mut root: Option<(PathBuf, usize)> = None;
        let mut default: Option<(bool, usize)> = None;
        let mut routes: Vec<(&DeTable<'_>, usize)> = Vec::new();
        let mut own: Vec<(&'static str, Vec<OsString>, usize)> = Vec::new();
        for (k, v) in entries(table) {
            let line = self.line(k.span().start);
            let key: &str = k.get_ref();
            match key {
                "names" | "aliases" => {
                    let Some(items) = self.strings(key, v, errors) else {
                        continue;
                    };
                    if items.is_empty() && key == "names" {
                        errors.push(self.error(line, key, "an empty list: give the site's host names"));
                    }
                    let mut normal = Vec::new();
                    for (name, at) in items {
                        match normal_name(&name) {
                            Ok(n) => {
                                let place = format!("{}:{at}", self.path.display());
                                claims.claim(&n, index, place, key, errors);
                                normal.push(n);
                            }
                            Err(why) => errors.push(self.error(at, key, why)),
                        }
                    }
                    if key == "names" {
                        names = Some((normal, line));
                    } else {
                        aliases = Some((normal, line));
                    }
                }
                "root" => match v.get_ref() {
                    DeValue::String(s) if !s.is_empty() => root = Some((self.path_of(s), line)),
                    DeValue::String(_) => errors.push(self.error(line, key, "an empty path")),
                    other => errors.push(self.error(
                        line,
                        key,
                        format!("expected a string, found {}", config::describe(other)),
                    )),
                },
                "default" => match v.get_ref() {
                    DeValue::Boolean(b) => default = Some((*b, line)),
                    other => errors.push(self.error(
                        line,
                        key,
                        format!("expected true or false, found {}", config::describe(other)),
                    )),
                },
                "route" => match v.get_ref() {
                    DeValue::Array(items) if items.iter().all(|i| i.get_ref().is_table()) => {
                        for item in items.iter() {
                            if let DeValue::Table(t) = item.get_ref() {
                                routes.push((t, self.line(item.span().start)));
                            }
                        }
                    }
                    _ => errors.push(self.error(
                        line,
                        key,
                        "a route is a [[site.route]] table (two brackets, one table per route, after its [[site]])",
                    )),
                },
                _ => {
                    if let Some(&(static_key, _)) = PER_SITE.iter().find(|(k, _)| *k == key) {
                        if let Some(values) = self.setting(key, v, errors) {
                            own.push((static_key, values, line));
                        }
                    } else {
                        errors.push(self.error(line, key, self.misplaced(key, Level::Site)));
                    }
                }
            }
        }
        let at_header = |what: &str| format!("{}:{header}: [[site]] {what}", self.path.display());
        let names = match names {
            // Each refused at its line already.
            Some((names, _)) if names.is_empty() => return None,
            Some(names) => names,
            None => {
                errors.push(at_header(
                    "has no `names`: give its host names, e.g. names = [\"example.com\", \"www.example.com\"]",
                ));
                return None;
            }
        };
        let Some((root, root_line)) = root else {
            errors.push(at_header(
                "has no `root`: give the directory or archive it serves (relative to this file's directory)",
            ));
            return None;
        };
        if let (Some((_, line)), Some(first)) = (&aliases, names.0.first()) {
            if first.starts_with("*.") {
                errors.push(self.error(
                    *line,
                    "aliases",
                    format!(
                        "aliases redirect to the site's first name, and {first} is a wildcard: put an exact name first"
                    ),
                ));
            }
        }
        let kind = match root_kind(&root) {
            Ok(kind) => kind,
            Err(why) => {
                errors.push(self.error(root_line, "root", why));
                return None;
            }
        };
        // A site's own setting that means nothing for its root is refused;
        // an inherited one is left out (the top level's settings are
        // defaults for every kind of site).
        for (key, _, line) in &own {
            match per_site(key) {
                Some(Applies::Directory(why)) if kind == RootKind::Archive => errors.push(self.error(
                    *line,
                    key,
                    format!(
                        "{} is an archive, whose answers were fixed when it was packed ({why})",
                        root.display()
                    ),
                )),
                Some(Applies::Archive) if kind == RootKind::Directory => errors.push(self.error(
                    *line,
                    key,
                    format!("applies to an archive, and {} is a directory", root.display()),
                )),
                _ => {}
            }
        }
        let set = |key: &str| {
            own.iter()
                .find(|(k, ..)| *k == key)
                .map(|(_, v, line)| (v.len(), *line))
        };
        match (set("tls-cert"), set("tls-key")) {
            (Some((n_certs, _)), Some((n_keys, line))) if n_certs != n_keys => errors.push(self.error(
                line,
                "tls-key",
                format!(
                    "one tls-key per tls-cert ({}, {})",
                    crate::messages::counted(n_certs, "certificate"),
                    crate::messages::counted(n_keys, "key")
                ),
            )),
            (Some((_, line)), None) => errors.push(self.error(line, "tls-cert", "give tls-key too, in this site")),
            (None, Some((_, line))) => errors.push(self.error(line, "tls-key", "give tls-cert too, in this site")),
            _ => {}
        }
        let mut values = self.top.clone();
        for (key, vals, line) in own {
            values.insert(key, (vals, self.origin(line)));
        }
        let given = self.origin(header);
        let from_line = |item: Option<usize>| item.map_or(Origin::Default, |line| self.origin(line));
        let mut shown = vec![
            Shown::new("names", toml_list(&names.0), self.origin(names.1)),
            Shown::new(
                "aliases",
                toml_list(&aliases.clone().unwrap_or_default().0),
                from_line(aliases.as_ref().map(|a| a.1)),
            ),
            Shown::new(
                "root",
                config::toml_string(&root.to_string_lossy()),
                self.origin(root_line),
            ),
            Shown::new(
                "default",
                default.is_some_and(|d| d.0).to_string(),
                from_line(default.map(|d| d.1)),
            ),
        ];
        if aliases.is_none() {
            shown.remove(1);
        }
        let (files, archive, tls, access_log) = match site_settings(&values, kind, self.settings, &mut shown) {
            Ok(typed) => typed,
            Err(why) => {
                errors.push(at_header(&format!("settings: {why}")));
                return None;
            }
        };
        let site_root = (root.clone(), kind, root_line);
        let mut specs: Vec<RouteSpec> = Vec::new();
        let mut paths: BTreeMap<String, usize> = BTreeMap::new();
        for (table, line) in routes {
            // Two routes with one path: the second could never answer.
            let path = table.iter().find(|(k, _)| k.get_ref() == "path");
            if let Some((k, v)) = path {
                if let DeValue::String(p) = v.get_ref() {
                    let at = self.line(k.span().start);
                    if let Some(first) = paths.insert(p.to_string(), at) {
                        errors.push(self.error(
                            at,
                            "path",
                            format!(
                                "{p} is also the path of the route at {}:{first}: one of them could never answer",
                                self.path.display()
                            ),
                        ));
                    }
                }
            }
            if let Some(route) = self.route(table, line, &site_root, &values, errors) {
                specs.push(route);
            }
        }
        routes::sort(&mut specs);
        if errors.len() > n_errors {
            return None;
        }
        Some(SiteSpec {
            names: names.0,
            aliases: aliases.map(|a| a.0).unwrap_or_default(),
            root,
            kind,
            default: default.is_some_and(|d| d.0),
            tls,
            access_log,
            files,
            archive,
            routes: specs,
            shown,
            given,
        })
    }

    /// One `[[site.route]]` table at line `header`, of the site whose root
    /// (and its kind and line) and values are given.
    fn route(
        &self,
        table: &DeTable<'_>,
        header: usize,
        site_root: &(PathBuf, RootKind, usize),
        site_values: &Values,
        errors: &mut Vec<String>,
    ) -> Option<RouteSpec> {
        let n_errors = errors.len();
        let mut path: Option<(String, Pattern, usize)> = None;
        let mut path_given = false;
        let mut handler: Option<(String, usize)> = None;
        let mut root: Option<(PathBuf, usize)> = None;
        let mut to: Option<(String, usize)> = None;
        let mut upstream: Option<(String, usize)> = None;
        let mut more_upstreams: Vec<String> = Vec::new();
        let mut balance: Option<(Balance, usize)> = None;
        let mut encode: Option<(Option<peregrine::proxy::Encode>, usize)> = None;
        let mut cache: Option<(u64, usize)> = None;
        let mut files_first: Option<(bool, usize)> = None;
        let mut error_page: Option<(PathBuf, usize)> = None;
        let mut proxy_ca: Option<(PathBuf, usize)> = None;
        let mut skip_verify: Option<(bool, usize)> = None;
        let mut trace: Option<(bool, usize)> = None;
        let mut proxy_authorization: Option<(bool, usize)> = None;
        let mut status: Option<(u16, usize)> = None;
        let mut headers: Option<(Vec<(String, String)>, usize)> = None;
        let mut ip: Option<(IpRules, usize)> = None;
        let mut rate_limit: Option<(RateLimit, usize)> = None;
        let mut cors: Option<(Cors, usize)> = None;
        let mut basic_auth: Option<(BasicAuth, usize)> = None;
        let mut forward_auth: Option<(ForwardAuth, usize)> = None;
        let mut own: Vec<(&'static str, Vec<OsString>, usize)> = Vec::new();
        for (k, v) in entries(table) {
            let line = self.line(k.span().start);
            let key: &str = k.get_ref();
            let string = |errors: &mut Vec<String>| match v.get_ref() {
                DeValue::String(s) if !s.is_empty() => Some(s.to_string()),
                DeValue::String(_) => {
                    errors.push(self.error(line, key, "an empty string"));
                    None
                }
                other => {
                    errors.push(self.error(
                        line,
                        key,
                        format!("expected a string, found {}", config::describe(other)),
                    ));
                    None
                }
            };
            match key {
                "path" => {
                    path_given = true;
                    if let Some(s) = string(errors) {
                        match Pattern::parse(&s) {
                            Ok(p) => path = Some((s, p, line)),
                            Err(e) => errors.push(self.error(line, key, e)),
                        }
                    }
                }
                "handler" => {
                    if let Some(s) = string(errors) {
                        if HANDLERS.contains(&s.as_str()) {
                            handler = Some((s, line));
                        } else if let Some(issue) = reserved(&s) {
                            errors.push(self.error(
                                line,
                                key,
                                format!("\"{s}\" is not supported yet (issue {issue} brings it)"),
                            ));
                        } else {
                            errors.push(self.error(
                                line,
                                key,
                                format!("\"{s}\": expected \"files\", \"archive\", \"redirect\" or \"proxy\""),
                            ));
                        }
                    }
                }
                "root" => {
                    if let Some(s) = string(errors) {
                        root = Some((self.path_of(&s), line));
                    }
                }
                "to" => {
                    if let Some(s) = string(errors) {
                        to = Some((s, line));
                    }
                }
                "proxy" => {
                    // One URL, or a list: several upstreams (`balance`).
                    let urls = match v.get_ref() {
                        DeValue::Array(_) => self.strings(key, v, errors).unwrap_or_default(),
                        _ => string(errors).map(|s| vec![(s, line)]).unwrap_or_default(),
                    };
                    let mut ups = Vec::new();
                    for (s, at) in &urls {
                        match peregrine::proxy::Upstream::parse(s) {
                            Ok(up) => ups.push(up),
                            Err(e) => errors.push(self.error(*at, key, e)),
                        }
                    }
                    if ups.len() == urls.len() && !urls.is_empty() {
                        match peregrine::proxy::Proxy::balanced(ups, Default::default()) {
                            Ok(_) => {
                                let mut urls = urls.into_iter().map(|(s, _)| s);
                                upstream = urls.next().map(|s| (s, line));
                                more_upstreams = urls.collect();
                            }
                            Err(e) => errors.push(self.error(line, key, e)),
                        }
                    } else if urls.is_empty() && matches!(v.get_ref(), DeValue::Array(_)) {
                        errors.push(self.error(line, key, "an empty list: give the upstreams' URLs"));
                    }
                }
                "balance" => balance = self.balance(v, errors).map(|b| (b, line)),
                "encode" => encode = self.encode(v, errors).map(|e| (e, line)),
                "cache" => {
                    if let Some(s) = string(errors) {
                        match crate::flags::numbers::size_within(64 * 1024..=1 << 40)(&s) {
                            Ok(n) => cache = Some((n, line)),
                            Err(e) => errors.push(self.error(line, key, e)),
                        }
                    }
                }
                "files-first" => match v.get_ref() {
                    DeValue::Boolean(b) => files_first = Some((*b, line)),
                    other => errors.push(self.error(
                        line,
                        key,
                        format!("expected true or false, found {}", config::describe(other)),
                    )),
                },
                "error-page" => {
                    if let Some(s) = string(errors) {
                        error_page = Some((self.path_of(&s), line));
                    }
                }
                "proxy-ca" => {
                    if let Some(s) = string(errors) {
                        proxy_ca = Some((self.path_of(&s), line));
                    }
                }
                "insecure-skip-verify" | "trace" | "proxy-authorization" => match v.get_ref() {
                    DeValue::Boolean(b) => {
                        let slot = match key {
                            "trace" => &mut trace,
                            "proxy-authorization" => &mut proxy_authorization,
                            _ => &mut skip_verify,
                        };
                        *slot = Some((*b, line));
                    }
                    other => errors.push(self.error(
                        line,
                        key,
                        format!("expected true or false, found {}", config::describe(other)),
                    )),
                },
                "status" => match v.get_ref() {
                    DeValue::Integer(i) => match u16::from_str_radix(i.as_str(), i.radix()) {
                        Ok(n) if REDIRECT_STATUSES.contains(&n) => status = Some((n, line)),
                        _ => errors.push(self.error(
                            line,
                            key,
                            format!("{}: expected 301, 302, 303, 307 or 308", i.as_str()),
                        )),
                    },
                    other => errors.push(self.error(
                        line,
                        key,
                        format!("expected a whole number, found {}", config::describe(other)),
                    )),
                },
                "headers" => {
                    if let Some(fields) = self.headers(v, errors) {
                        headers = Some((fields, line));
                    }
                }
                "ip" => ip = self.ip(v, errors).map(|r| (r, line)),
                "rate-limit" => rate_limit = self.rate_limit(v, errors).map(|r| (r, line)),
                "cors" => cors = self.cors(v, errors).map(|c| (c, line)),
                "basic-auth" => basic_auth = self.basic_auth(v, errors).map(|b| (b, line)),
                "forward-auth" => forward_auth = self.forward_auth(v, errors).map(|f| (f, line)),
                _ if ROUTE_SETTINGS.contains(&key) => {
                    let static_key = ROUTE_SETTINGS.iter().find(|k| **k == key).copied().unwrap_or_default();
                    if let Some(values) = self.setting(key, v, errors) {
                        own.push((static_key, values, line));
                    }
                }
                _ => errors.push(self.error(line, key, self.misplaced(key, Level::Route))),
            }
        }
        // Both would hold the handler's answer for a verdict made elsewhere
        // (a verifier thread, the auth service): one of them decides.
        if let (Some(_), Some((_, line))) = (&basic_auth, &forward_auth) {
            errors.push(self.error(
                *line,
                "forward-auth",
                "a route has basic-auth or forward-auth, not both: let the auth service ask for the password, or \
                 put the two on different paths",
            ));
        }
        let Some((path, pattern, path_line)) = path else {
            if path_given {
                return None; // refused at its line
            }
            errors.push(format!(
                "{}:{header}: [[site.route]] has no `path`: give the pattern it takes, e.g. path = \"/assets/*\"",
                self.path.display()
            ));
            return None;
        };
        let (site_root_path, site_kind, site_root_line) = site_root;
        // The handler: as written; else a redirect when there is a `to`;
        // else what the root is.
        let root_kind_here = match &root {
            Some((r, line)) => match root_kind(r) {
                Ok(kind) => Some(kind),
                Err(why) => {
                    errors.push(self.error(*line, "root", why));
                    None
                }
            },
            None => Some(*site_kind),
        }?;
        let name = match (&handler, &to) {
            (Some((h, _)), _) => h.as_str(),
            (None, _) if upstream.is_some() => "proxy",
            (None, Some(_)) => "redirect",
            (None, None) if root_kind_here == RootKind::Archive => "archive",
            (None, None) => "files",
        };
        let mut shown = vec![
            Shown::new("path", config::toml_string(&path), self.origin(path_line)),
            Shown::new(
                "handler",
                config::toml_string(name),
                handler.as_ref().map_or(Origin::Default, |(_, line)| self.origin(*line)),
            ),
        ];
        let handler_line = handler.as_ref().map_or(header, |(_, line)| *line);
        if name != "proxy" {
            for (key, line) in [
                ("proxy", upstream.as_ref().map(|u| u.1)),
                ("files-first", files_first.map(|f| f.1)),
                ("error-page", error_page.as_ref().map(|e| e.1)),
                ("proxy-ca", proxy_ca.as_ref().map(|e| e.1)),
                ("insecure-skip-verify", skip_verify.map(|e| e.1)),
                ("trace", trace.map(|e| e.1)),
                ("proxy-authorization", proxy_authorization.map(|e| e.1)),
                ("balance", balance.as_ref().map(|b| b.1)),
                ("encode", encode.as_ref().map(|e| e.1)),
                ("cache", cache.map(|c| c.1)),
            ] {
                if let Some(line) = line {
                    errors.push(self.error(
                        line,
                        key,
                        format!("only a proxy route has `{key}` (this route's handler is {name})"),
                    ));
                }
            }
        }
        let files_first_line = files_first.filter(|(on, _)| *on).map(|(_, line)| line);
        let handler_spec = match name {
            "proxy" => {
                for (key, line) in [("to", to.as_ref().map(|t| t.1)), ("status", status.map(|s| s.1))] {
                    if let Some(line) = line {
                        errors.push(self.error(line, key, "a proxy route redirects nowhere"));
                    }
                }
                if files_first_line.is_none() {
                    if let Some((_, line)) = &root {
                        errors.push(self.error(
                            *line,
                            "root",
                            "a proxy route serves no files (unless files-first = true: then files under its root \
                             answer first)",
                        ));
                    }
                    for (key, _, line) in &own {
                        errors.push(self.error(
                            *line,
                            key,
                            "a proxy route serves no files (unless files-first = true)",
                        ));
                    }
                }
                // With files first, a missing file is the upstream's to
                // answer: a fallback or a not-found page would answer it
                // instead, and the upstream never.
                if files_first_line.is_some() {
                    for (key, _, line) in &own {
                        if *key == "fallback" || *key == "404" {
                            errors.push(self.error(
                                *line,
                                key,
                                format!(
                                    "ambiguous with files-first = true: a path no file answers goes to the \
                                     upstream, so `{key}` would never be used (take one of them out)"
                                ),
                            ));
                        }
                    }
                }
                // The guard makes a route's answer before the password is
                // proven (off the loop) and sends it only after; a proxy's
                // answer is the upstream's, which would have had the
                // request by then.
                if let Some((_, line)) = &basic_auth {
                    errors.push(self.error(
                        *line,
                        "basic-auth",
                        "basic-auth on a proxy route is not supported yet (the request would reach the upstream \
                         before the password is checked): put the upstream behind its own authentication, or \
                         protect files or an archive instead",
                    ));
                }
                let Some((url, url_line)) = upstream else {
                    errors.push(self.error(
                        handler_line,
                        "handler",
                        "a proxy needs `proxy`: the upstream's URL, e.g. proxy = \"http://127.0.0.1:9000\"",
                    ));
                    return None;
                };
                let shown_url = if more_upstreams.is_empty() {
                    config::toml_string(&url)
                } else {
                    toml_list(
                        &std::iter::once(url.clone())
                            .chain(more_upstreams.iter().cloned())
                            .collect::<Vec<_>>(),
                    )
                };
                shown.push(Shown::new("proxy", shown_url, self.origin(url_line)));
                if let Some((b, line)) = &balance {
                    if more_upstreams.is_empty() {
                        errors.push(self.error(
                            *line,
                            "balance",
                            "one upstream: there is nothing to balance (give proxy = [\"URL\", \"URL\", ...])",
                        ));
                    }
                    shown.push(Shown::new("balance", balance_text(b), self.origin(*line)));
                }
                let files_first = match files_first_line {
                    None => None,
                    Some(line) => {
                        shown.push(Shown::new("files-first", "true".to_owned(), self.origin(line)));
                        let (root_path, root_origin) = match &root {
                            Some((r, line)) => (r.clone(), self.origin(*line)),
                            None => (
                                site_root_path.clone(),
                                Origin::Site(self.path.to_owned(), *site_root_line),
                            ),
                        };
                        shown.push(Shown::new(
                            "root",
                            config::toml_string(&root_path.to_string_lossy()),
                            root_origin,
                        ));
                        let mut values = site_values.clone();
                        for (key, vals, line) in &own {
                            values.insert(key, (vals.clone(), self.origin(*line)));
                        }
                        if root_kind_here == RootKind::Archive {
                            for (key, _, line) in &own {
                                if let Some(Applies::Directory(why)) = per_site(key) {
                                    errors.push(self.error(
                                        *line,
                                        key,
                                        format!(
                                            "{} is an archive, whose answers were fixed when it was packed ({why})",
                                            root_path.display()
                                        ),
                                    ));
                                }
                            }
                        }
                        let (mut files, archive) = match file_args(&values) {
                            Ok(typed) => typed,
                            Err(why) => {
                                errors.push(format!(
                                    "{}:{header}: [[site.route]] settings: {why}",
                                    self.path.display()
                                ));
                                return None;
                            }
                        };
                        // A site's fallback or not-found page, inherited,
                        // would answer every missing path: here the
                        // upstream does.
                        files.fallback = None;
                        files.not_found = None;
                        Some(Box::new(match root_kind_here {
                            RootKind::Directory => HandlerSpec::Files { root: root_path, files },
                            RootKind::Archive => HandlerSpec::Archive {
                                root: root_path,
                                archive,
                            },
                        }))
                    }
                };
                let error_page = error_page.map(|(path, line)| {
                    shown.push(Shown::new(
                        "error-page",
                        config::toml_string(&path.to_string_lossy()),
                        self.origin(line),
                    ));
                    path
                });
                let proxy_ca_line = proxy_ca.as_ref().map(|c| c.1);
                let ca = proxy_ca.map(|(path, line)| {
                    shown.push(Shown::new(
                        "proxy-ca",
                        config::toml_string(&path.to_string_lossy()),
                        self.origin(line),
                    ));
                    path
                });
                let insecure_skip_verify = match skip_verify {
                    Some((on, line)) => {
                        shown.push(Shown::new("insecure-skip-verify", on.to_string(), self.origin(line)));
                        on
                    }
                    None => false,
                };
                if !url.starts_with("https://") {
                    for (key, line) in [
                        ("proxy-ca", proxy_ca_line),
                        ("insecure-skip-verify", skip_verify.map(|s| s.1)),
                    ] {
                        if let Some(line) = line {
                            errors.push(self.error(line, key, "only an https:// upstream has it"));
                        }
                    }
                }
                let mut flag = |name: &'static str, given: Option<(bool, usize)>| match given {
                    Some((on, line)) => {
                        shown.push(Shown::new(name, on.to_string(), self.origin(line)));
                        on
                    }
                    None => false,
                };
                let trace = flag("trace", trace);
                let proxy_authorization = flag("proxy-authorization", proxy_authorization);
                let encode = encode.and_then(|(e, line)| {
                    shown.push(Shown::new("encode", encode_text(e.as_ref()), self.origin(line)));
                    e
                });
                if let Some((n, line)) = cache {
                    shown.push(Shown::new("cache", format!("\"{n}\""), self.origin(line)));
                }
                HandlerSpec::Proxy(Proxy {
                    encode,
                    cache: cache.map(|c| c.0),
                    url,
                    more: more_upstreams,
                    balance: balance.map(|b| b.0).unwrap_or_default(),
                    files_first,
                    error_page,
                    ca,
                    insecure_skip_verify,
                    trace,
                    proxy_authorization,
                })
            }
            "redirect" => {
                if let Some((_, line)) = &root {
                    errors.push(self.error(*line, "root", "a redirect serves no files"));
                }
                for (key, _, line) in &own {
                    errors.push(self.error(*line, key, "a redirect serves no files"));
                }
                let Some((to, to_line)) = to else {
                    errors.push(self.error(
                        handler_line,
                        "handler",
                        "a redirect needs `to`: the URL or path it sends the client to",
                    ));
                    return None;
                };
                if let Err(why) = check_target(&to, &path) {
                    errors.push(self.error(to_line, "to", why));
                }
                let status_n = status.map_or(REDIRECT_STATUS_DEFAULT, |(n, _)| n);
                shown.push(Shown::new("to", config::toml_string(&to), self.origin(to_line)));
                shown.push(Shown::new(
                    "status",
                    status_n.to_string(),
                    status.map_or(Origin::Default, |(_, line)| self.origin(line)),
                ));
                HandlerSpec::Redirect { to, status: status_n }
            }
            "files" | "archive" => {
                for (key, line) in [("to", to.as_ref().map(|t| t.1)), ("status", status.map(|s| s.1))] {
                    if let Some(line) = line {
                        errors.push(self.error(
                            line,
                            key,
                            format!("only a redirect has `{key}` (this route's handler is {name})"),
                        ));
                    }
                }
                let (root_path, root_origin) = match &root {
                    Some((r, line)) => (r.clone(), self.origin(*line)),
                    None => (
                        site_root_path.clone(),
                        Origin::Site(self.path.to_owned(), *site_root_line),
                    ),
                };
                let wanted = if name == "files" {
                    RootKind::Directory
                } else {
                    RootKind::Archive
                };
                if root_kind_here != wanted {
                    let (line, key) = match &root {
                        Some((_, line)) => (*line, "root"),
                        None => (handler_line, "handler"),
                    };
                    let why = match wanted {
                        RootKind::Directory => format!(
                            "handler \"files\" serves a directory, and {} is an archive (handler \"archive\" serves \
                             it; or give the route a directory as its root)",
                            root_path.display()
                        ),
                        RootKind::Archive => format!(
                            "handler \"archive\" serves an archive, and {} is a directory (handler \"files\" serves \
                             it; or give the route an archive as its root)",
                            root_path.display()
                        ),
                    };
                    errors.push(self.error(line, key, why));
                    return None;
                }
                shown.push(Shown::new(
                    "root",
                    config::toml_string(&root_path.to_string_lossy()),
                    root_origin,
                ));
                let mut values = site_values.clone();
                for (key, vals, line) in &own {
                    values.insert(key, (vals.clone(), self.origin(*line)));
                }
                if name == "archive" {
                    for (key, _, line) in &own {
                        if let Some(Applies::Directory(why)) = per_site(key) {
                            errors.push(self.error(
                                *line,
                                key,
                                format!(
                                    "{} is an archive, whose answers were fixed when it was packed ({why})",
                                    root_path.display()
                                ),
                            ));
                        }
                    }
                }
                let (files, archive) = match file_args(&values) {
                    Ok(typed) => typed,
                    Err(why) => {
                        errors.push(format!(
                            "{}:{header}: [[site.route]] settings: {why}",
                            self.path.display()
                        ));
                        return None;
                    }
                };
                if name == "files" {
                    for key in ROUTE_SETTINGS {
                        let Some((vals, origin)) = values.get(key) else {
                            continue;
                        };
                        let origin = match origin {
                            // The site's own, not the route's: inherited from the site.
                            Origin::File(p, l) if !own.iter().any(|(k, ..)| k == key) => Origin::Site(p.clone(), *l),
                            other => other.clone(),
                        };
                        if let Some(value) = toml_value(self.settings, key, vals) {
                            shown.push(Shown::new(key, value, origin));
                        }
                    }
                    HandlerSpec::Files { root: root_path, files }
                } else {
                    HandlerSpec::Archive {
                        root: root_path,
                        archive,
                    }
                }
            }
            _ => unreachable!("handlers are checked when read"),
        };
        let headers_list = headers.as_ref().map(|h| h.0.clone()).unwrap_or_default();
        if let Some((fields, line)) = &headers {
            shown.push(Shown::new("headers", inline_table(fields), self.origin(*line)));
        }
        if let Some((rules, line)) = &ip {
            let list =
                |l: &[peregrine::client_addr::Network]| toml_list(&l.iter().map(|n| n.to_string()).collect::<Vec<_>>());
            let value = format!("{{ allow = {}, deny = {} }}", list(&rules.allow), list(&rules.deny));
            shown.push(Shown::new("ip", value, self.origin(*line)));
        }
        if let Some((limit, line)) = &rate_limit {
            let value = format!(
                "{{ rate = {}, burst = {} }}",
                config::toml_string(&limit.rate),
                limit.burst
            );
            shown.push(Shown::new("rate-limit", value, self.origin(*line)));
        }
        if let Some((c, line)) = &cors {
            let mut value = format!(
                "{{ origins = {}, methods = {}, headers = {}, expose = {}, credentials = {}",
                toml_list(&c.origins),
                toml_list(&c.methods),
                toml_list(&c.headers),
                toml_list(&c.expose),
                c.credentials
            );
            if let Some(secs) = c.max_age {
                value.push_str(&format!(", max-age = {secs}"));
            }
            value.push_str(" }");
            shown.push(Shown::new("cors", value, self.origin(*line)));
        }
        if let Some((b, line)) = &basic_auth {
            // Users by name only: check-config never shows a hash.
            let mut value = format!("{{ users = {}", config::toml_string(&b.users.shown()));
            if let Some(realm) = &b.realm {
                value.push_str(&format!(", realm = {}", config::toml_string(realm)));
            }
            value.push_str(" }");
            shown.push(Shown::new("basic-auth", value, self.origin(*line)));
        }
        if let Some((f, line)) = &forward_auth {
            let mut value = format!("{{ url = {}", config::toml_string(&f.url));
            if let Some(uri) = &f.uri {
                value.push_str(&format!(", uri = {}", config::toml_string(uri)));
            }
            value.push_str(&format!(", copy-headers = {}", toml_list(&f.copy)));
            if let Some(secs) = f.timeout {
                value.push_str(&format!(", timeout = {secs}"));
            }
            value.push_str(" }");
            shown.push(Shown::new("forward-auth", value, self.origin(*line)));
        }
        if errors.len() > n_errors {
            return None;
        }
        Some(RouteSpec {
            path,
            pattern,
            handler: handler_spec,
            headers: headers_list,
            basic_auth: basic_auth.map(|(b, _)| b),
            forward_auth: forward_auth.map(|(f, _)| f),
            ip: ip.map(|(r, _)| r),
            rate_limit: rate_limit.map(|(r, _)| r),
            cors: cors.map(|(c, _)| c),
            shown,
            given: self.origin(header),
        })
    }

    /// Why `key` does not belong in a site's (or route's) table, said with
    /// where it belongs.
    fn misplaced(&self, key: &str, level: Level) -> String {
        if let Some(issue) = reserved(key) {
            return format!("not supported yet (issue {issue} brings it); refused rather than ignored");
        }
        match level {
            Level::Site if ROUTE_KEYS.contains(&key) => {
                return "a route's setting: give it in a [[site.route]] table".into();
            }
            Level::Route if per_site(key).is_some() => {
                return "a site's setting, not a route's: give it in the [[site]] table".into();
            }
            Level::Route if SITE_KEYS.contains(&key) => {
                return "a site's key, not a route's: give it in the [[site]] table".into();
            }
            _ => {}
        }
        if key == SITE_TABLES {
            return "sites do not nest: each [[site]] table is at the top level".into();
        }
        if key == "version" {
            return "the file's version is a top-level key".into();
        }
        if self.settings.arg(key).is_some() {
            return format!(
                "process-wide: every site shares it, so it is set at the top level, not in a [[{}]]",
                if level == Level::Site { "site" } else { "site.route" }
            );
        }
        let known: Vec<&str> = match level {
            Level::Site => SITE_KEYS
                .iter()
                .chain(PER_SITE.iter().map(|(k, _)| k))
                .copied()
                .collect(),
            Level::Route => ROUTE_KEYS.iter().chain(ROUTE_SETTINGS).copied().collect(),
        };
        let what = match level {
            Level::Site => "[[site]]",
            Level::Route => "[[site.route]]",
        };
        let hint = config::suggest(key, known.into_iter())
            .map(|s| format!(" (did you mean \"{s}\"?)"))
            .unwrap_or_default();
        format!("unknown key in a {what} table{hint}")
    }

    /// A per-site setting's value as command-line values, checked by its
    /// flag's parser; paths made relative to the file's directory.
    fn setting(&self, key: &str, value: &Spanned<DeValue<'_>>, errors: &mut Vec<String>) -> Option<Vec<OsString>> {
        let arg = self.settings.arg(key)?;
        match config::file_values(arg, value, self.text) {
            Ok(values) if PATHS.contains(&key) => Some(
                values
                    .into_iter()
                    .map(|v| match v.to_str() {
                        Some("-") if key == "access-log" => v,
                        _ => self.path_of(&v.to_string_lossy()).into_os_string(),
                    })
                    .collect(),
            ),
            Ok(values) => Some(values),
            Err((line, why)) => {
                errors.push(self.error(line, key, why));
                None
            }
        }
    }

    /// A string or a list of strings, each with its line.
    fn strings(
        &self,
        key: &str,
        value: &Spanned<DeValue<'_>>,
        errors: &mut Vec<String>,
    ) -> Option<Vec<(String, usize)>> {
        let items: Vec<&Spanned<DeValue<'_>>> = match value.get_ref() {
            DeValue::Array(items) => items.iter().collect(),
            _ => vec![value],
        };
        let mut out = Vec::new();
        for item in items {
            let line = self.line(item.span().start);
            match item.get_ref() {
                DeValue::String(s) => out.push((s.to_string(), line)),
                other => {
                    errors.push(self.error(
                        line,
                        key,
                        format!(
                            "expected a string (or a list of them), found {}",
                            config::describe(other)
                        ),
                    ));
                    return None;
                }
            }
        }
        Some(out)
    }

    /// The entries of a route's access table (`ip`, `rate-limit`,
    /// `cors`), each key one of `known`, with its line; `None` (said) if
    /// the value is no table or holds an unknown key.
    fn access_table<'t, 'i>(
        &self,
        key: &'static str,
        value: &'t Spanned<DeValue<'i>>,
        known: &[&str],
        example: &str,
        errors: &mut Vec<String>,
    ) -> Option<Vec<(&'t str, &'t Spanned<DeValue<'i>>, usize)>> {
        let line = self.line(value.span().start);
        let DeValue::Table(table) = value.get_ref() else {
            errors.push(self.error(
                line,
                key,
                format!(
                    "expected a table, e.g. {key} = {example}, found {}",
                    config::describe(value.get_ref())
                ),
            ));
            return None;
        };
        let n_errors = errors.len();
        let mut out = Vec::new();
        for (k, v) in entries(table) {
            let at = self.line(k.span().start);
            let name: &str = k.get_ref();
            if known.contains(&name) {
                out.push((name, v, at));
            } else {
                let hint = config::suggest(name, known.iter().copied())
                    .map(|s| format!(" (did you mean \"{s}\"?)"))
                    .unwrap_or_default();
                errors.push(self.error(
                    at,
                    key,
                    format!("{name}: unknown key{hint}; expected {}", known.join(", ")),
                ));
            }
        }
        (errors.len() == n_errors).then_some(out)
    }

    /// A whole number in an access table.
    fn integer(&self, key: &str, name: &str, value: &Spanned<DeValue<'_>>, errors: &mut Vec<String>) -> Option<i64> {
        match value.get_ref() {
            DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) => Some(n),
                Err(_) => {
                    errors.push(self.error(
                        self.line(value.span().start),
                        key,
                        format!("{name}: {} is too large", i.as_str()),
                    ));
                    None
                }
            },
            other => {
                errors.push(self.error(
                    self.line(value.span().start),
                    key,
                    format!("{name}: expected a whole number, found {}", config::describe(other)),
                ));
                None
            }
        }
    }

    /// A route's `ip = { allow = [...], deny = [...] }`.
    fn ip(&self, value: &Spanned<DeValue<'_>>, errors: &mut Vec<String>) -> Option<IpRules> {
        let line = self.line(value.span().start);
        let example = "{ allow = [\"10.0.0.0/8\", \"::1\"], deny = [\"10.0.0.5\"] }";
        let table = self.access_table("ip", value, IP_KEYS, example, errors)?;
        let (mut allow, mut deny) = (Vec::new(), Vec::new());
        for (name, v, _) in table {
            let list = self.strings("ip", v, errors)?.into_iter().map(|(s, _)| s).collect();
            match name {
                "allow" => allow = list,
                _ => deny = list,
            }
        }
        IpRules::new(&allow, &deny)
            .map_err(|why| errors.push(self.error(line, "ip", why)))
            .ok()
    }

    /// A route's `rate-limit = { rate = "10/s", burst = 20 }`.
    fn rate_limit(&self, value: &Spanned<DeValue<'_>>, errors: &mut Vec<String>) -> Option<RateLimit> {
        let line = self.line(value.span().start);
        let example = "{ rate = \"10/s\", burst = 20 }";
        let table = self.access_table("rate-limit", value, RATE_LIMIT_KEYS, example, errors)?;
        let (mut rate, mut burst) = (None, None);
        for (name, v, at) in table {
            match (name, v.get_ref()) {
                ("rate", DeValue::String(s)) => rate = Some(s.to_string()),
                ("rate", other) => {
                    errors.push(self.error(
                        at,
                        "rate-limit",
                        format!(
                            "rate: expected a string such as \"10/s\", found {}",
                            config::describe(other)
                        ),
                    ));
                    return None;
                }
                _ => burst = Some(self.integer("rate-limit", "burst", v, errors)?),
            }
        }
        let Some(rate) = rate else {
            errors.push(self.error(
                line,
                "rate-limit",
                format!("no rate: give one, e.g. rate-limit = {example}"),
            ));
            return None;
        };
        RateLimit::new(&rate, burst)
            .map_err(|why| errors.push(self.error(line, "rate-limit", why)))
            .ok()
    }

    /// A route's `cors = { origins = [...], ... }`.
    fn cors(&self, value: &Spanned<DeValue<'_>>, errors: &mut Vec<String>) -> Option<Cors> {
        let line = self.line(value.span().start);
        let example = "{ origins = [\"https://app.example.com\"], methods = [\"GET\", \"POST\"] }";
        let table = self.access_table("cors", value, CORS_KEYS, example, errors)?;
        let mut origins = None;
        let mut methods = None;
        let (mut headers, mut expose) = (Vec::new(), Vec::new());
        let (mut credentials, mut max_age) = (false, None);
        let n_errors = errors.len();
        for (name, v, at) in table {
            let strings = |errors: &mut Vec<String>| {
                self.strings("cors", v, errors)
                    .map(|l| l.into_iter().map(|(s, _)| s).collect::<Vec<_>>())
            };
            match name {
                "origins" => origins = strings(errors),
                "methods" => methods = strings(errors),
                "headers" => headers = strings(errors).unwrap_or_default(),
                "expose" => expose = strings(errors).unwrap_or_default(),
                "credentials" => match v.get_ref() {
                    DeValue::Boolean(b) => credentials = *b,
                    other => errors.push(self.error(
                        at,
                        "cors",
                        format!("credentials: expected true or false, found {}", config::describe(other)),
                    )),
                },
                _ => max_age = self.integer("cors", "max-age", v, errors),
            }
        }
        if errors.len() > n_errors {
            return None;
        }
        let Some(origins) = origins else {
            errors.push(self.error(
                line,
                "cors",
                format!("no origins: give the origins that may read this route, e.g. cors = {example}"),
            ));
            return None;
        };
        Cors::new(&origins, methods.as_deref(), &headers, &expose, credentials, max_age)
            .map_err(|why| errors.push(self.error(line, "cors", why)))
            .ok()
    }

    /// A route's `basic-auth = { users = ["alice:$2b$..."], realm = "..." }`:
    /// hashes only (bcrypt or argon2, as Caddy's `basic_auth` takes them).
    fn basic_auth(&self, value: &Spanned<DeValue<'_>>, errors: &mut Vec<String>) -> Option<BasicAuth> {
        let line = self.line(value.span().start);
        let example = "{ users = [\"alice:$2b$10$...\"], realm = \"Staff\" }";
        let table = self.access_table("basic-auth", value, BASIC_AUTH_KEYS, example, errors)?;
        let (mut users, mut realm) = (None, None);
        for (name, v, at) in table {
            match (name, v.get_ref()) {
                ("realm", DeValue::String(s)) => realm = Some(s.to_string()),
                ("realm", other) => {
                    errors.push(self.error(
                        at,
                        "basic-auth",
                        format!("realm: expected a string, found {}", config::describe(other)),
                    ));
                    return None;
                }
                _ => {
                    users = Some(
                        self.strings("basic-auth", v, errors)?
                            .into_iter()
                            .map(|(s, _)| s)
                            .collect::<Vec<_>>(),
                    )
                }
            }
        }
        let Some(users) = users else {
            errors.push(self.error(
                line,
                "basic-auth",
                format!("no users: give them, e.g. basic-auth = {example}"),
            ));
            return None;
        };
        BasicAuth::new(&users, realm)
            .map_err(|why| errors.push(self.error(line, "basic-auth", why)))
            .ok()
    }

    /// A route's `forward-auth = { url = "http://127.0.0.1:9091/verify",
    /// copy-headers = ["Remote-User"] }` (`uri` for a `unix:` service's
    /// path).
    fn forward_auth(&self, value: &Spanned<DeValue<'_>>, errors: &mut Vec<String>) -> Option<ForwardAuth> {
        let line = self.line(value.span().start);
        let example = "{ url = \"http://127.0.0.1:9091/verify\", copy-headers = [\"Remote-User\"] }";
        let table = self.access_table("forward-auth", value, FORWARD_AUTH_KEYS, example, errors)?;
        let (mut url, mut uri, mut copy, mut timeout) = (None, None, Vec::new(), None);
        for (name, v, at) in table {
            match (name, v.get_ref()) {
                ("timeout", _) => {
                    let secs = self.integer("forward-auth", "timeout", v, errors)?;
                    timeout = Some(u64::try_from(secs).unwrap_or(0));
                }
                ("copy-headers", _) => {
                    copy = self
                        .strings("forward-auth", v, errors)?
                        .into_iter()
                        .map(|(s, _)| s)
                        .collect()
                }
                (_, DeValue::String(s)) if name == "url" => url = Some(s.to_string()),
                (_, DeValue::String(s)) => uri = Some(s.to_string()),
                (_, other) => {
                    errors.push(self.error(
                        at,
                        "forward-auth",
                        format!("{name}: expected a string, found {}", config::describe(other)),
                    ));
                    return None;
                }
            }
        }
        let Some(url) = url else {
            errors.push(self.error(
                line,
                "forward-auth",
                format!("no url: give the auth service's, e.g. forward-auth = {example}"),
            ));
            return None;
        };
        ForwardAuth::new(&url, uri, copy, timeout)
            .map_err(|why| errors.push(self.error(line, "forward-auth", why)))
            .ok()
    }

    /// A proxy route's `encode`: `true`, `false`, or a table (`None`
    /// inside: off).
    fn encode(
        &self,
        value: &Spanned<DeValue<'_>>,
        errors: &mut Vec<String>,
    ) -> Option<Option<peregrine::proxy::Encode>> {
        if let DeValue::Boolean(on) = value.get_ref() {
            return Some(on.then(peregrine::proxy::Encode::new));
        }
        let example = "true, or { min-length = 512, set-cookie = false }";
        let table = self.access_table("encode", value, ENCODE_KEYS, example, errors)?;
        let mut e = peregrine::proxy::Encode::new();
        for (name, v, at) in table {
            match name {
                "min-length" => {
                    let n = self.integer("encode", name, v, errors)?;
                    match u64::try_from(n) {
                        Ok(n) => e = e.min_bytes(n),
                        Err(_) => {
                            errors.push(self.error(at, "encode", format!("{name}: {n}: a length in bytes, 0 or more")));
                            return None;
                        }
                    }
                }
                _ => match v.get_ref() {
                    DeValue::Boolean(b) => e = e.set_cookie(*b),
                    other => {
                        errors.push(self.error(
                            at,
                            "encode",
                            format!("{name}: expected true or false, found {}", config::describe(other)),
                        ));
                        return None;
                    }
                },
            }
        }
        Some(Some(e))
    }

    /// A proxy route's `balance` table.
    fn balance(&self, value: &Spanned<DeValue<'_>>, errors: &mut Vec<String>) -> Option<Balance> {
        let example = "{ policy = \"least-conn\", health-uri = \"/healthz\" }";
        let table = self.access_table("balance", value, BALANCE_KEYS, example, errors)?;
        let mut b = Balance::default();
        for (name, v, at) in table {
            let seconds = |errors: &mut Vec<String>, min: i64| -> Option<u64> {
                let n = self.integer("balance", name, v, errors)?;
                if n < min || n > 86_400 {
                    errors.push(self.error(at, "balance", format!("{name}: {n}: from {min} to 86400 seconds")));
                    return None;
                }
                u64::try_from(n).ok()
            };
            match name {
                "max-fails" => {
                    let n = self.integer("balance", name, v, errors)?;
                    match u32::try_from(n) {
                        Ok(n) if n <= 1000 => b.max_fails = Some(n),
                        _ => {
                            errors.push(self.error(at, "balance", format!("{name}: {n}: from 0 (never out) to 1000")));
                            return None;
                        }
                    }
                }
                "fail-timeout" => b.fail_timeout = Some(seconds(errors, 1)?),
                "fail-status" => {
                    let DeValue::Array(items) = v.get_ref() else {
                        errors.push(self.error(
                            at,
                            "balance",
                            format!(
                                "{name}: expected a list of statuses, e.g. [502, 503, 504], found {}",
                                config::describe(v.get_ref())
                            ),
                        ));
                        return None;
                    };
                    for item in items {
                        let n = self.integer("balance", name, item, errors)?;
                        match u16::try_from(n) {
                            Ok(n) if peregrine::proxy::FailStatus::RANGE.contains(&n) => b.fail_status.push(n),
                            _ => {
                                errors.push(self.error(
                                    at,
                                    "balance",
                                    format!("{name}: {n}: a status from 400 to 599"),
                                ));
                                return None;
                            }
                        }
                    }
                }
                "health-interval" => b.health_interval = Some(seconds(errors, 1)?),
                "health-timeout" => b.health_timeout = Some(seconds(errors, 1)?),
                _ => {
                    let DeValue::String(s) = v.get_ref() else {
                        errors.push(self.error(
                            at,
                            "balance",
                            format!("{name}: expected a string, found {}", config::describe(v.get_ref())),
                        ));
                        return None;
                    };
                    if name == "policy" {
                        match peregrine::proxy::Policy::parse(s) {
                            Ok(p) => b.policy = p,
                            Err(why) => {
                                errors.push(self.error(at, "balance", format!("policy: {why}")));
                                return None;
                            }
                        }
                    } else {
                        if let Err(why) = peregrine::proxy::ActiveCheck::new(s) {
                            errors.push(self.error(at, "balance", why));
                            return None;
                        }
                        b.health_uri = Some(s.to_string());
                    }
                }
            }
        }
        if b.health_uri.is_none() && (b.health_interval.is_some() || b.health_timeout.is_some()) {
            errors.push(self.error(
                self.line(value.span().start),
                "balance",
                "health-interval and health-timeout need health-uri: the path the check asks for",
            ));
            return None;
        }
        Some(b)
    }

    /// A `headers` table: names to values, each checked as a response
    /// field (`HeaderBlock::new`), no name twice in any case.
    fn headers(&self, value: &Spanned<DeValue<'_>>, errors: &mut Vec<String>) -> Option<Vec<(String, String)>> {
        let line = self.line(value.span().start);
        let DeValue::Table(table) = value.get_ref() else {
            errors.push(self.error(
                line,
                "headers",
                format!(
                    "expected a table of names and values, e.g. headers = {{ X-Frame-Options = \"DENY\" }}, found {}",
                    config::describe(value.get_ref())
                ),
            ));
            return None;
        };
        let mut fields: Vec<(String, String)> = Vec::new();
        let n_errors = errors.len();
        for (k, v) in entries(table) {
            let at = self.line(k.span().start);
            let name: &str = k.get_ref();
            let DeValue::String(field) = v.get_ref() else {
                errors.push(self.error(
                    at,
                    "headers",
                    format!("{name}: expected a string, found {}", config::describe(v.get_ref())),
                ));
                continue;
            };
            if let Err(why) = peregrine::HeaderBlock::new(&[(name, field)]) {
                errors.push(self.error(at, "headers", why));
                continue;
            }
            if fields.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
                errors.push(self.error(at, "headers", format!("{name} is given twice")));
                continue;
            }
            fields.push((name.to_owned(), field.to_string()));
        }
        (errors.len() == n_errors).then_some(fields)
    }
}

/// Which table a key was found in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Site,
    Route,
}

/// A redirect's target: a path or an http(s) URL, valid as a `Location`,
/// whose `:name` placeholders are captures of the route's pattern.
fn check_target(to: &str, pattern: &str) -> Result<(), String> {
    let absolute = to.starts_with("http://") || to.starts_with("https://");
    if !to.starts_with('/') && !absolute {
        return Err(format!(
            "{to:?}: expected a path (/new) or a URL (https://example.com/new)"
        ));
    }
    peregrine::HeaderBlock::new(&[("Location", to)])?;
    let captures = capture_names(pattern);
    let mut rest = to;
    while let Some(at) = rest.find(':') {
        let after = &rest[at + 1..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') && !captures.contains(&name) {
            let known = if captures.is_empty() {
                format!("{pattern} captures nothing")
            } else {
                format!("{pattern} captures :{}", captures.join(", :"))
            };
            return Err(format!(":{name} is no capture of the route's path ({known})"));
        }
        rest = after;
    }
    Ok(())
}

/// The names a pattern captures (`:name`; a splat's name, `splat` unless
/// named), as `Pattern::parse` reads them.
fn capture_names(pattern: &str) -> Vec<String> {
    pattern
        .split('/')
        .filter_map(|s| {
            if let Some(name) = s.strip_prefix(':') {
                Some(name.to_owned())
            } else if let Some(name) = s.strip_prefix('*') {
                Some(if name.is_empty() { "splat" } else { name }.to_owned())
            } else {
                s.ends_with('*').then(|| "splat".to_owned())
            }
        })
        .collect()
}

/// `{ Name = "value", ... }`.
fn inline_table(fields: &[(String, String)]) -> String {
    let items: Vec<String> = fields
        .iter()
        .map(|(n, v)| format!("{} = {}", config::toml_key(n), config::toml_string(v)))
        .collect();
    format!("{{ {} }}", items.join(", "))
}

/// A route's `encode` as `check-config` shows it.
fn encode_text(e: Option<&peregrine::proxy::Encode>) -> String {
    match e {
        None => "false".to_owned(),
        Some(e) => format!(
            "{{ min-length = {}, set-cookie = {} }}",
            e.min_len(),
            e.compresses_set_cookie()
        ),
    }
}

/// A `balance` table as `check-config` shows it.
fn balance_text(b: &Balance) -> String {
    let mut v = format!("{{ policy = {}", config::toml_string(&b.policy.to_string()));
    if let Some(n) = b.max_fails {
        v.push_str(&format!(", max-fails = {n}"));
    }
    if let Some(n) = b.fail_timeout {
        v.push_str(&format!(", fail-timeout = {n}"));
    }
    if !b.fail_status.is_empty() {
        let list: Vec<String> = b.fail_status.iter().map(u16::to_string).collect();
        v.push_str(&format!(", fail-status = [{}]", list.join(", ")));
    }
    if let Some(uri) = &b.health_uri {
        v.push_str(&format!(", health-uri = {}", config::toml_string(uri)));
    }
    if let Some(n) = b.health_interval {
        v.push_str(&format!(", health-interval = {n}"));
    }
    if let Some(n) = b.health_timeout {
        v.push_str(&format!(", health-timeout = {n}"));
    }
    v.push_str(" }");
    v
}
