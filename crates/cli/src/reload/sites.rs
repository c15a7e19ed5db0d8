//! The configured sites (`sites::SiteSpec`) made into the engine's
//! (`peregrine::Site`): each site's root and routes become one handler,
//! its names and aliases the engine's, its certificates one `TlsConfig`
//! chosen by the sites' names, its archives kept across reloads.
//!
//! An archive is opened once per path and settings (mode, keys, previous
//! generations kept), however many sites and routes serve it, and kept by
//! the next generation when they are unchanged (then asked to reload, as
//! SIGHUP has always done):
//! each archive has its own watcher, so replacing one site's archive swaps
//! that one alone, and the others' generations, ETags and metrics do not
//! move.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use peregrine::pattern::Pattern;
use peregrine::{Handler, Reply, Request, Response, Site, TlsConfig};
use peregrine_archive::{ArchiveServer, ServeOptions};
use peregrine_files::FileServer;

use super::ServedArchive;
use crate::access::basic::{Guard, Notes, Verifier};
use crate::access::{self, Finish};
use crate::flags::{ServeArchiveArgs, TlsArgs};
use crate::sites::{route_for, route_key, HandlerSpec, RootKind, RouteScope, SiteSpec};
use peregrine_files::path::PathError;

/// The engine's sites, with the archives they serve.
pub(super) struct Built {
    pub(super) sites: Vec<Site>,
    /// Every archive served, once each, labelled with the first site that
    /// serves it.
    pub(super) archives: Vec<ServedArchive>,
    /// What the start says of protected paths.
    pub(super) notes: Notes,
}

/// Builds the sites of `specs`, keeping `previous`'s archives where the
/// path and settings are the same. A site whose access log is the server's
/// (`access_log`, which it inherits unless it names its own) writes to
/// the server's: one file, opened once.
pub(super) fn build(
    specs: &[SiteSpec],
    access_log: Option<&str>,
    previous: &[ServedArchive],
    verifier: &Arc<Verifier>,
    proxies: &[crate::proxy::Prefix],
    cache: Option<u64>,
) -> anyhow::Result<Built> {
    let mut archives: Vec<ServedArchive> = Vec::new();
    let mut sites = Vec::with_capacity(specs.len());
    let mut notes = Notes::default();
    for spec in specs {
        let label = &spec.names[0];
        // The realm a 401 names: the route's, else the site's name.
        let guard = |realm: &str, finish: Finish, checked_outside: bool| {
            Arc::new(Guard {
                verifier: verifier.clone(),
                realm: realm.to_owned(),
                finish,
                checked_outside,
            })
        };
        // `_headers`' `Basic-Auth` rules are the file or archive server's
        // to find; the guard checks what they protect.
        let what = format!("site {label}");
        let site_spec = Arc::new(spec.clone());
        // With routes, each file and archive server answers only with
        // files whose paths its own route takes (the root: no route's),
        // so that a rewrite, a clean URL or an index does not serve
        // another route's file past that route's rules
        // (`peregrine_files::scope`). Without routes, no scope: nothing
        // is asked.
        let scope = |route: Option<usize>| -> Option<Arc<dyn peregrine_files::scope::Scope>> {
            (!spec.routes.is_empty()).then(|| {
                Arc::new(RouteScope {
                    site: site_spec.clone(),
                    route,
                }) as Arc<dyn peregrine_files::scope::Scope>
            })
        };
        let files_in = |server: FileServer, route| match scope(route) {
            Some(scope) => server.with_scope(scope),
            None => server,
        };
        let archive_in = |server: ArchiveServer, route| match scope(route) {
            Some(scope) => server.with_scope(scope),
            None => server,
        };
        // The root's `_50x.html`: the page of the proxy's 502, 503 and 504.
        let site_page;
        let root: Arc<dyn Handler> = match spec.kind {
            RootKind::Directory => {
                let server = files(&spec.root, spec)?;
                notes.files(&what, &server);
                site_page = crate::proxy::directory_error_page(&spec.root)?;
                Arc::new(files_in(server, None).with_gate(guard(label, Finish::default(), false)))
            }
            RootKind::Archive => {
                let server = archive(&spec.root, &spec.archive, label, previous, &mut archives)?;
                notes.archive(&what, &server);
                site_page = server.file_bytes(crate::proxy::ERROR_PAGE_KEY);
                Arc::new(archive_in(server, None).with_gate(guard(label, Finish::default(), false)))
            }
        };
        let mut routes = Vec::with_capacity(spec.routes.len());
        for (route_idx, route) in spec.routes.iter().enumerate() {
            let own = Some(route_idx);
            let realm = route
                .basic_auth
                .as_ref()
                .and_then(|b| b.realm.as_deref())
                .unwrap_or(label);
            let finish = Finish::new(route.cors.as_ref(), &route.headers);
            // Where the route has its own `basic-auth`, it decides: the
            // handler's `_headers` rules are not asked again.
            let inner_gate = guard(realm, finish.clone(), route.basic_auth.is_some());
            let what = format!("site {label}, route {}", route.path);
            // What makes the route's answers private, for the notes.
            let rule = match (&route.basic_auth, &route.forward_auth) {
                (Some(_), _) => Some("basic-auth"),
                (None, Some(_)) => Some("forward-auth"),
                (None, None) => None,
            };
            // The rules that are not authentication, for `under_proxy`.
            if route.ip.is_some() {
                notes.route_rule(&what, &route.path, "ip allow/deny list");
            }
            if route.rate_limit.is_some() {
                notes.route_rule(&what, &route.path, "rate-limit");
            }
            let handler: Arc<dyn Handler> = match &route.handler {
                HandlerSpec::Files { root, files } => {
                    let options = files.options(root.clone());
                    if let Some(rule) = rule {
                        notes.route(&what, &route.path, rule, &route.headers, Some(&options));
                    }
                    let server = FileServer::new(options)
                        .with_context(|| format!("site {label}, route {}: {}", route.path, root.display()))?;
                    if route.basic_auth.is_none() {
                        notes.files(&what, &server);
                    }
                    Arc::new(files_in(server, own).with_gate(inner_gate))
                }
                HandlerSpec::Archive { root, archive: a } => {
                    let server = archive(root, a, label, previous, &mut archives)?;
                    if let Some(rule) = rule {
                        notes.route(&what, &route.path, rule, &route.headers, None);
                    }
                    if route.basic_auth.is_none() {
                        notes.archive(&what, &server);
                    }
                    // A generation kept after a swap answered these paths
                    // without the route's rules: it never answers them
                    // under the rules (`--keep-previous`).
                    let ruled = route.ip.is_some()
                        || route.rate_limit.is_some()
                        || route.cors.is_some()
                        || route.basic_auth.is_some()
                        || route.forward_auth.is_some();
                    let server = if ruled { server.without_fallback() } else { server };
                    Arc::new(archive_in(server, own).with_gate(inner_gate))
                }
                HandlerSpec::Redirect { to, status } => {
                    if let Some(rule) = rule {
                        notes.route(&what, &route.path, rule, &route.headers, None);
                    }
                    Arc::new(Redirect {
                        pattern: route.pattern.clone(),
                        to: to.clone(),
                        status: *status,
                    })
                }
                HandlerSpec::Proxy(p) => {
                    // Refused when read (`sites::read`): the guard would
                    // call the proxy, which sends the request upstream,
                    // before the password is proven.
                    anyhow::ensure!(
                        route.basic_auth.is_none(),
                        "site {label}, route {}: basic-auth on a proxy route is not supported yet",
                        route.path
                    );
                    if let Some(rule) = rule {
                        notes.route(&what, &route.path, rule, &route.headers, None);
                    }
                    let prefix = route_prefix(&route.path);
                    let ups = crate::proxy::route_upstreams(p)
                        .with_context(|| format!("site {label}, route {}", route.path))?;
                    for up in &ups {
                        crate::proxy::warn_if_unverified(up, &format!("site {label}, route {}", route.path));
                    }
                    // Files first (`files-first = true`): the route's own
                    // root or the site's, then the upstream.
                    let (files, files_page): (Option<Arc<dyn Handler>>, _) = match p.files_first.as_deref() {
                        Some(HandlerSpec::Files { root, files }) => {
                            let server = FileServer::new(files.options(root.clone()))
                                .with_context(|| format!("site {label}, route {}: {}", route.path, root.display()))?;
                            notes.files(&what, &server);
                            let page = crate::proxy::directory_error_page(root)?;
                            (
                                Some(Arc::new(files_in(server, own).with_gate(inner_gate.clone()))),
                                page,
                            )
                        }
                        Some(HandlerSpec::Archive { root, archive: a }) => {
                            let server = archive(root, a, label, previous, &mut archives)?;
                            notes.archive(&what, &server);
                            let page = server.file_bytes(crate::proxy::ERROR_PAGE_KEY);
                            (
                                Some(Arc::new(archive_in(server, own).with_gate(inner_gate.clone()))),
                                page,
                            )
                        }
                        _ => (None, None),
                    };
                    let page = match &p.error_page {
                        Some(path) => Some(std::fs::read(path).with_context(|| {
                            format!("site {label}, route {}: error-page {}", route.path, path.display())
                        })?),
                        None => files_page.or_else(|| site_page.clone()),
                    };
                    let proxy = crate::proxy::route_proxy(p, ups, &prefix, page, cache)
                        .with_context(|| format!("site {label}, route {}", route.path))?;
                    match files {
                        Some(files) => Arc::new(crate::proxy::FilesFirst { files, proxy }),
                        None => Arc::new(proxy),
                    }
                }
            };
            let forward = match &route.forward_auth {
                Some(f) => Some(
                    f.check()
                        .with_context(|| format!("site {label}, route {}: forward-auth", route.path))?,
                ),
                None => None,
            };
            // IP rules, rate limit, CORS and Basic or forward auth before
            // the handler looks at anything, the route's fields after; no
            // wrapper at all on a route without them.
            let handler = access::wrap(
                handler,
                access::Rules {
                    ip: route.ip.as_ref(),
                    rate_limit: route.rate_limit.as_ref(),
                    cors: route.cors.as_ref(),
                    basic: route
                        .basic_auth
                        .as_ref()
                        .map(|b| (b, guard(realm, finish.clone(), false))),
                    forward,
                    headers: &route.headers,
                },
            );
            routes.push(handler);
        }
        // A proxy route takes its paths before the root: the root's
        // `_headers` rules are never asked there.
        for route in spec
            .routes
            .iter()
            .filter(|r| matches!(r.handler, HandlerSpec::Proxy(_)))
        {
            let by = format!("route {} (proxy)", route.path);
            notes.under_proxy(&route_prefix(&route.path), &by, |w| w == what);
        }
        let handler = SiteHandler {
            spec: site_spec,
            root,
            routes,
        };
        let mut site = if proxies.is_empty() {
            Site::new(spec.names.iter().cloned(), handler)
        } else {
            // `--proxy` prefixes with this site's `_50x.html`, if any.
            let proxies = crate::proxy::with_error_page(proxies, site_page.as_deref());
            let handler = crate::proxy::wrap(Arc::new(handler), &proxies);
            Site::new(spec.names.iter().cloned(), crate::proxy::Shared(handler))
        };
        for alias in &spec.aliases {
            site = site.alias(alias.clone());
        }
        if spec.default {
            site = site.default_site();
        }
        if let Some(log) = spec.access_log.as_deref().filter(|&own| Some(own) != access_log) {
            site = site.access_log(peregrine::AccessLog::from_arg(log));
        }
        sites.push(site);
    }
    // `--proxy` prefixes come before every site's routes and root.
    super::build::notes_under_proxies(&mut notes, proxies);
    Ok(Built { sites, archives, notes })
}

/// The literal start of a route's pattern (`/api/*` → `/api/`): what a
/// proxy route's upstream path replaces.
fn route_prefix(pattern: &str) -> String {
    let end = pattern.find(['*', ':']).unwrap_or(pattern.len());
    pattern[..end].to_owned()
}

/// The certificates of the sites, each pair sent only for its site's
/// names and aliases; an unknown or absent SNI gets the default site's
/// first certificate, or `unrecognized_name` when no site is the default.
/// `None` when no site has a certificate (plain HTTP).
pub(super) fn tls(specs: &[SiteSpec], args: &TlsArgs) -> anyhow::Result<Option<TlsConfig>> {
    let mut tls: Option<TlsConfig> = None;
    for spec in specs {
        let names: Vec<&str> = spec.names.iter().chain(&spec.aliases).map(String::as_str).collect();
        for (cert, key) in &spec.tls {
            let what = || format!("site {}: {} and {}", spec.names[0], cert.display(), key.display());
            tls = Some(match tls {
                None => TlsConfig::for_names(&names, cert, key).with_context(what)?,
                Some(tls) => tls.with_cert_for(&names, cert, key).with_context(what)?,
            });
        }
    }
    let Some(mut tls) = tls else {
        return Ok(None);
    };
    let fallback = specs.iter().find(|s| s.default && !s.tls.is_empty());
    tls = tls.unknown_names(fallback.map(|s| s.names[0].as_str()))?;
    if let Some(secs) = args.hsts {
        tls = tls.hsts(Duration::from_secs(secs));
    }
    Ok(Some(tls))
}

/// A directory root with the site's file settings.
fn files(root: &Path, spec: &SiteSpec) -> anyhow::Result<FileServer> {
    FileServer::new(spec.files.options(root.to_owned()))
        .with_context(|| format!("site {}: cannot serve {}", spec.names[0], root.display()))
}

/// The archive at `root` with the settings `args` give: one already
/// opened for this generation, or the previous generation's (reloaded
/// when the generation starts), or opened now.
fn archive(
    root: &Path,
    args: &ServeArchiveArgs,
    label: &str,
    previous: &[ServedArchive],
    archives: &mut Vec<ServedArchive>,
) -> anyhow::Result<ArchiveServer> {
    let options = args.options().with_context(|| format!("site {label}"))?;
    let same = |a: &&ServedArchive| a.root == root && a.options == options;
    if let Some(served) = archives.iter().find(same) {
        return Ok(served.server.clone());
    }
    let (server, kept) = match previous.iter().find(same) {
        Some(old) => (old.server.clone(), true),
        None => (
            open_archive(root, &options, previous).with_context(|| format!("site {label}"))?,
            false,
        ),
    };
    archives.push(ServedArchive {
        root: PathBuf::from(root),
        options,
        server: server.clone(),
        site: Some(label.to_owned()),
        kept,
    });
    Ok(server)
}

/// Opens the archive at `root` with `options`. Where the previous
/// generation served a signed archive at the same path (with other
/// settings: it is not kept), its deploy number is the floor, as it would
/// be at a swap: changing a setting by a reload does not open the door to
/// a rollback.
pub(super) fn open_archive(
    root: &Path,
    options: &ServeOptions,
    previous: &[ServedArchive],
) -> anyhow::Result<ArchiveServer> {
    let mut options = options.clone();
    if !options.allow_rollback {
        let served = previous
            .iter()
            .filter(|a| a.root == root)
            .filter_map(|a| a.server.deploy_number());
        options.deploy_number_min = served.fold(options.deploy_number_min, u64::max);
    }
    Ok(ArchiveServer::open_with(root, options)?)
}

/// One site's handler: the route that takes the request's path, or the
/// site's root.
struct SiteHandler {
    spec: Arc<SiteSpec>,
    root: Arc<dyn Handler>,
    /// By the index of `spec.routes`: each route's handler behind its
    /// access rules and fields (`access::wrap`).
    routes: Vec<Arc<dyn Handler>>,
}

impl SiteHandler {
    /// The handler of the route that takes `req`'s path, or the site's
    /// root; `Err`: the path does not normalise, and no handler takes it
    /// (`route_for`).
    fn pick(&self, req: &Request<'_>) -> Result<&Arc<dyn Handler>, PathError> {
        Ok(route_for(&self.spec, req.path())?.map_or(&self.root, |i| &self.routes[i]))
    }
}

impl Handler for SiteHandler {
    fn call(&self, req: &Request<'_>) -> Reply {
        match self.pick(req) {
            Ok(handler) => handler.call(req),
            Err(e) => Reply::Now(peregrine_files::reply::bad_request(e.reason())),
        }
    }

    fn body_use(&self, req: &Request<'_>) -> peregrine::BodyUse {
        match self.pick(req) {
            Ok(handler) => handler.body_use(req),
            Err(_) => peregrine::BodyUse::Ignore,
        }
    }

    fn takes_unknown_method(&self, req: &Request<'_>) -> bool {
        self.pick(req).is_ok_and(|handler| handler.takes_unknown_method(req))
    }
}

/// A route that redirects: `to` with the pattern's captures put in.
struct Redirect {
    pattern: Pattern,
    to: String,
    status: u16,
}

impl Handler for Redirect {
    /// The captures are taken from the path the route was chosen by
    /// (normalised and decoded: `route_key`), and `substitute` encodes
    /// them again, as `_redirects` does (`/o/a%20b` to `/n/a%20b`, not
    /// `/n/a%2520b`). A `Location` that begins with `//` or `/\` once
    /// they are in would send a browser to another host: 400, never sent,
    /// as for `_redirects` (`/o/*` to `/:splat`, asked `/o//evil.example`).
    fn call(&self, req: &Request<'_>) -> Reply {
        let caps = match route_key(req.path()) {
            Ok(key) => self.pattern.captures(&key).unwrap_or_default(),
            Err(e) => return Reply::Now(peregrine_files::reply::bad_request(e.reason())),
        };
        let location = peregrine_files::conventions::substitute(&self.to, &caps);
        if location.starts_with("//") || location.starts_with("/\\") {
            return Reply::Now(peregrine_files::reply::bad_request(
                "the redirect's target would name another host",
            ));
        }
        Reply::Now(
            Response::new(self.status)
                .with_header("Location", location)
                .with_content_type("text/plain; charset=utf-8")
                .with_body(format!("{} {}\n", self.status, "redirect")),
        )
    }

    fn body_use(&self, _req: &Request<'_>) -> peregrine::BodyUse {
        peregrine::BodyUse::Ignore
    }
}
