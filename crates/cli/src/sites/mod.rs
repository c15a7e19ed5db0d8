//! The sites `serve` answers for, as plain data the serving code builds
//! from: sites → routes → handlers (issue 24). Read once the settings are
//! merged (`config::parse` and `config::reparse` call [`resolve`] through
//! `config::Complete`), so a SIGHUP checks what the start checks; shown by
//! `check-config` ([`render`]).
//!
//! Where they come from:
//! - `--site NAMES=DIR|ARCHIVE` (repeatable; its file key `site =
//!   ["NAMES=DIR"]` and `PEREGRINE_SITE` are the same, by flag > env >
//!   file): a site with those names and root, every other setting the top
//!   level's. Its root, as a flag's, is relative to the working directory.
//! - `[[site]]` tables in the file (`read.rs`): names, aliases, a root
//!   relative to the file's directory, `default`, TLS pairs, an access
//!   log, the per-site settings (`keys.rs` lists them, in one place) and
//!   `[[site.route]]` tables.
//!
//! Both forms together are one list of sites; a name claimed twice (by two
//! tables, or by a `--site` and a table) is refused, naming both: a flag
//! does not silently replace a table, since which one a name should reach
//! is not a precedence question, and the refusal says where both are.
//!
//! No site at all (no `--site`, no `[[site]]`): `resolve` gives an empty
//! list, and `serve DIR|ARCHIVE` serves that root for every host, as
//! before sites existed. With sites, DIR|ARCHIVE is refused: each site has
//! its root, and `default = true` marks the one for unknown hosts.
//!
//! What the serving code gets, per site ([`SiteSpec`]): the names in the
//! engine's normal form (`peregrine::host`, ready for a `HostMap`), the
//! root and its kind, the file options as `serve`'s own flags would give
//! them (`FileArgs`, `ServeArchiveArgs`: `FileArgs::options(root)` makes a
//! `FileServer`'s), TLS pairs, an access log, and the routes in the order
//! they are tried ([`route_for`]). Every value was checked by the parser
//! its flag has; paths are not opened here (`check-config` and the start
//! open them).

mod keys;
mod read;
mod render;
mod routes;

use std::fmt;
use std::path::PathBuf;

use peregrine::pattern::Pattern;

pub(crate) use crate::access::{BasicAuth, Cors, ForwardAuth, IpRules, RateLimit};
use crate::config;
use crate::flags::{Cli, Command, FileArgs, ServeArchiveArgs};

pub(crate) use read::{parse_site_flag, resolve};
pub(crate) use render::{render, Shown};
pub(crate) use routes::{route_for, route_key, RouteScope};

/// One site: the names it answers for, its root, and how it answers.
#[derive(Debug, Clone)]
pub(crate) struct SiteSpec {
    /// Exact names and one-label wildcards (`*.example.com`), in the
    /// engine's normal form (lowercase, A-labels, no root dot, no port),
    /// as written; never empty. The first is the site's own name: aliases
    /// redirect to it, and it names the site in logs and errors.
    pub(crate) names: Vec<String>,
    /// Names answered with a 308 to the same path and query on `names[0]`
    /// (which is then an exact name); normal form, as `names`.
    pub(crate) aliases: Vec<String>,
    /// The directory or archive served where no route says otherwise.
    pub(crate) root: PathBuf,
    /// What `root` is, found when the configuration was read.
    pub(crate) kind: RootKind,
    /// The site unknown hosts get (at most one site has it). Without one,
    /// an unknown host gets 421 over TLS and 404 in cleartext.
    pub(crate) default: bool,
    /// Certificate and key files, pairs in order (the first is the site's
    /// default); the top level's when the site gives none.
    pub(crate) tls: Vec<(PathBuf, PathBuf)>,
    /// The access log's path (`-`: standard output); the top level's when
    /// the site gives none.
    pub(crate) access_log: Option<String>,
    /// How files are answered (a directory root; for an archive root the
    /// flags' defaults, unused): `files.options(root)`.
    pub(crate) files: FileArgs,
    /// How an archive is held (an archive root; defaults otherwise).
    pub(crate) archive: ServeArchiveArgs,
    /// In the order they are tried, most specific first ([`route_for`]).
    pub(crate) routes: Vec<RouteSpec>,
    /// What `check-config` shows of the site: each setting as TOML, with
    /// where it came from.
    pub(crate) shown: Vec<Shown>,
    /// Where the site was given: its `[[site]]` line, or `--site`'s source.
    pub(crate) given: Origin,
}

/// What a root is: a directory, or (any other file) an archive made by
/// `pack`, as `serve DIR|ARCHIVE` tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RootKind {
    Directory,
    Archive,
}

/// A path pattern of a site, its handler and its settings.
#[derive(Debug, Clone)]
pub(crate) struct RouteSpec {
    /// The pattern as written (`/assets/*`), in the engine's syntax.
    pub(crate) path: String,
    /// `path`, parsed: what [`route_for`] matches.
    pub(crate) pattern: Pattern,
    /// What answers a request the route takes.
    pub(crate) handler: HandlerSpec,
    /// Fields added to every answer of the route, as written (checked as
    /// `HeaderBlock::new` checks them: names are tokens, values are valid,
    /// none is a field the engine writes).
    pub(crate) headers: Vec<(String, String)>,
    /// `basic-auth = { users, realm }` (`access::basic`): who may read the
    /// route's answers; others get 401. Not on a proxy route (refused
    /// when read: the guard makes the answer before the password is
    /// proven, and a proxy's answer is the upstream's, asked for then).
    pub(crate) basic_auth: Option<BasicAuth>,
    /// `forward-auth = { url, uri, copy-headers }` (`access::forward`):
    /// an auth service asked about each request; not with `basic-auth`
    /// (refused when read).
    pub(crate) forward_auth: Option<ForwardAuth>,
    /// `ip = { allow, deny }`: networks judged on the client's address
    /// (`access::ip`); a refused client gets 403.
    pub(crate) ip: Option<IpRules>,
    /// `rate-limit = { rate, burst }`: a token bucket per client address
    /// (`access::rate`); an empty bucket gets 429 with `Retry-After`.
    pub(crate) rate_limit: Option<RateLimit>,
    /// `cors = { origins, methods, headers, expose, credentials, max-age }`
    /// (`access::cors`): preflights answered, allowed origins told so.
    pub(crate) cors: Option<Cors>,
    /// What `check-config` shows of the route: each setting as TOML, with
    /// where it came from.
    pub(crate) shown: Vec<Shown>,
    /// The route's `[[site.route]]` line.
    pub(crate) given: Origin,
}

/// What answers a route's requests.
#[derive(Debug, Clone)]
pub(crate) enum HandlerSpec {
    /// A directory's files (`handler = "files"`, the default for a
    /// directory): the route's own `root` or the site's, the request's
    /// whole path looked up beneath it (as nginx's `root`, Caddy's
    /// `file_server`), with the site's file settings and the route's
    /// overrides: `files.options(root)`.
    Files { root: PathBuf, files: FileArgs },
    /// An archive (`handler = "archive"`, the default for an archive
    /// root): the route's own `root` or the site's; its answers were fixed
    /// by `pack`.
    Archive { root: PathBuf, archive: ServeArchiveArgs },
    /// `handler = "redirect"`: `status` (301, 302, 303, 307 or 308; 308
    /// by default) to `to`, a URL or a path, whose `:name` and `:splat`
    /// are the route pattern's captures, percent-encoded
    /// (`peregrine_files::conventions::substitute`, as `_redirects` does).
    /// The request's query is not carried over (Caddy's `redir` neither).
    Redirect { to: String, status: u16 },
    /// `proxy = "URL"` (`handler = "proxy"`): the route's requests go to
    /// an upstream (`crate::proxy`), the route's literal prefix replaced
    /// by the URL's path if it has one.
    Proxy(Proxy),
}

/// A route's upstream, as written (checked when read).
#[derive(Debug, Clone)]
pub(crate) struct Proxy {
    pub(crate) url: String,
    /// `proxy = ["URL", "URL", ...]`: the upstreams after the first, and
    /// `balance = { ... }`: how one is chosen and when one is out.
    pub(crate) more: Vec<String>,
    pub(crate) balance: Balance,
    /// `files-first = true`: a GET or HEAD is answered from these files
    /// (a `Files` or `Archive` handler: the route's `root`, else the
    /// site's) when one is there, and goes upstream otherwise (nginx's
    /// `try_files $uri @backend`); other methods go upstream.
    pub(crate) files_first: Option<Box<HandlerSpec>>,
    /// `error-page = "PATH"`: the HTML answered with the proxy's 502, 503
    /// and 504; without it, the `_50x.html` of the files the route tries
    /// first, or of the site's root, if there is one.
    pub(crate) error_page: Option<PathBuf>,
    /// `proxy-ca = "PATH"`: an `https://` upstream's certificate is
    /// verified against the CA certificates of this PEM file in place of
    /// the system's roots.
    pub(crate) ca: Option<PathBuf>,
    /// `insecure-skip-verify = true`: an `https://` upstream's
    /// certificate is not verified (flagged at start and by
    /// `check-config`).
    pub(crate) insecure_skip_verify: bool,
    /// `trace = true`: TRACE goes upstream (Caddy); without it the proxy
    /// answers TRACE 405 itself (nginx), so no upstream echoes the
    /// client's Cookie and Authorization to a script.
    pub(crate) trace: bool,
    /// `proxy-authorization = true`: the client's `Proxy-Authorization`
    /// goes upstream (nginx); without it the field stays here (Caddy;
    /// RFC 9110 §11.7.2: it is for the proxy that asked, and Peregrine
    /// asks none).
    pub(crate) proxy_authorization: bool,
    /// `encode = true` or `encode = { min-length = N, set-cookie = B }`:
    /// answers compressed on the fly (`peregrine::proxy::Encode`); off
    /// unless given, as Caddy's `encode` and nginx's `gzip`.
    pub(crate) encode: Option<peregrine::proxy::Encode>,
    /// `cache = "64M"`: a response cache of this many bytes per worker
    /// (`peregrine::proxy::Cache`), in place of `--proxy-cache`'s size.
    pub(crate) cache: Option<u64>,
}

/// A proxy route's `balance` table (`peregrine::proxy::Proxy::balanced`):
/// each `None` is the engine's default.
#[derive(Debug, Clone, Default)]
pub(crate) struct Balance {
    pub(crate) policy: peregrine::proxy::Policy,
    pub(crate) max_fails: Option<u32>,
    /// Seconds.
    pub(crate) fail_timeout: Option<u64>,
    /// `fail-status = [502, 503, 504]`: an upstream's answers of these
    /// statuses count as passive-health failures (none unless given).
    pub(crate) fail_status: Vec<u16>,
    pub(crate) health_uri: Option<String>,
    /// Seconds.
    pub(crate) health_interval: Option<u64>,
    pub(crate) health_timeout: Option<u64>,
}

impl Proxy {
    /// Every upstream URL, the first first.
    pub(crate) fn urls(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.url).chain(&self.more)
    }
}

/// Where a site's or route's setting came from, as `check-config` says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Written in the site's or route's table, at this line of the file.
    File(PathBuf, usize),
    /// `--site`'s form, from its source as the top level says it: `flag`,
    /// `env PEREGRINE_SITE`, `file F:LINE` (`site = [...]`).
    SiteFlag(String),
    /// Not set on the site: the top level's value, from there (`flag`,
    /// `env PEREGRINE_X`, `file F:LINE`).
    TopLevel(String),
    /// Not set on the route: its site's, written at this line.
    Site(PathBuf, usize),
    /// Set nowhere: the built-in default, or what the root's kind implies.
    Default,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(path, line) => write!(f, "file {}:{line}", path.display()),
            Origin::SiteFlag(from) if from == "flag" => f.write_str("flag --site"),
            Origin::SiteFlag(from) => write!(f, "{from} (--site's form)"),
            Origin::TopLevel(from) => write!(f, "inherited from top-level ({from})"),
            Origin::Site(path, line) => write!(f, "inherited from site (file {}:{line})", path.display()),
            Origin::Default => f.write_str("default"),
        }
    }
}

/// `serve` completes itself with its sites; `hello` has none.
impl config::Complete for Cli {
    fn complete(&mut self, settings: &config::Settings<'_>) -> anyhow::Result<String> {
        let Command::Serve {
            root,
            site,
            sites,
            files,
            archive,
            proxy_allow,
            proxy_allow_network,
            ..
        } = &mut self.command
        else {
            return Ok(String::new());
        };
        *sites = resolve(root, site, settings)?;
        // The operator's list for `_redirects` proxy rules, for every
        // directory and archive served (their own settings cannot say).
        let allow = crate::proxy::rule_allow(proxy_allow, proxy_allow_network, true)?;
        files.proxy_allow = allow.clone();
        archive.proxy_allow = allow.clone();
        for s in sites.iter_mut() {
            s.files.proxy_allow = allow.clone();
            s.archive.proxy_allow = allow.clone();
            for r in &mut s.routes {
                match &mut r.handler {
                    HandlerSpec::Files { files, .. } => files.proxy_allow = allow.clone(),
                    HandlerSpec::Archive { archive, .. } => archive.proxy_allow = allow.clone(),
                    _ => {}
                }
            }
        }
        Ok(render(sites))
    }
}

#[cfg(test)]
mod tests;
