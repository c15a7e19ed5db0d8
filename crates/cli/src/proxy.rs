//! `serve --proxy PREFIX=URL` (repeatable; the file's `proxy = [...]`) and
//! a `[[site.route]]`'s `proxy = "URL"`: requests under a prefix go to an
//! upstream through the engine's reverse proxy (`peregrine::proxy`), the
//! rest to the site's files or archive.
//!
//! A prefix ending in `/` (`/api/`) takes the paths beneath it and the
//! prefix without its slash (`/api`); one without (`/api`) takes itself
//! and the paths beneath it, never `/apix`. The longest prefix wins. The
//! URL is `http[s]://HOST[:PORT][/PATH]`, `h2c://HOST[:PORT][/PATH]`
//! (HTTP/2 by prior knowledge: a gRPC server), `h2s://...` (HTTP/2 over
//! TLS) or `unix:PATH`; a PATH replaces the
//! prefix (`--proxy /api/=http://up/v1/` sends `/api/x` as `/v1/x`), as
//! nginx's `proxy_pass` with a URI does; without one the path goes
//! unchanged. The upstream gets the client's Host (Caddy's default). An
//! `https://` upstream is verified against the system's roots, or a
//! route's `proxy-ca = "PATH"`; `insecure-skip-verify = true` turns that
//! off, and is warned of at start, at each reload and by `check-config`.
//!
//! The proxy's own 502, 503 and 504 carry the served root's `_50x.html`
//! (a directory's file, or the archive's) when it has one, as nginx's
//! `error_page 502 503 504 /50x.html` and its stock `50x.html` do; a
//! route's `error-page = "PATH"` names another. Either way the status is
//! the proxy's, and no upstream text or address reaches the client.
//!
//! A route with `files-first = true` answers a GET or HEAD from its files
//! when one is there and sends the rest upstream ([`FilesFirst`], nginx's
//! `try_files $uri @backend`).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

use std::time::Duration;

use peregrine::proxy::{ActiveCheck, Cache, Policy, Proxy, Upstream};
use peregrine::{BodyUse, Handler, Reply, Request};

/// Checks a `--proxy` value: `PREFIX=URL`, the prefix a path, the URL one
/// the engine takes (a host name is resolved: at start, off the loops).
pub(crate) fn parse_proxy_flag(s: &str) -> Result<String, String> {
    let (prefix, url) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected PREFIX=URL, e.g. /api/=http://127.0.0.1:9000"))?;
    check_prefix(prefix)?;
    Upstream::parse(url).map_err(|e| e.to_string())?;
    Ok(s.to_owned())
}

fn check_prefix(prefix: &str) -> Result<(), String> {
    if !prefix.starts_with('/') || prefix.contains(['?', '#', '*', ':']) {
        return Err(format!(
            "{prefix:?}: a proxy prefix is a path beginning with / (no query, no pattern), e.g. /api/"
        ));
    }
    Ok(())
}

/// A `--proxy` (or `--proxy-files-first`, `files_first`) prefix and its
/// upstream.
pub(crate) type Prefix = (String, Proxy, bool);

/// The upstreams of `--proxy` and `--proxy-files-first` values (checked
/// by [`parse_proxy_flag`]). A prefix given several times with the same
/// flag has several upstreams, taken in turn (round robin, passive
/// health at the engine's defaults; a configuration file's route says
/// more); with both flags it is refused: whether files come first would
/// be a guess. `https://` upstreams are verified against `ca`
/// (`--proxy-ca`, read now) when given. With `cache` (`--proxy-cache`,
/// bytes per worker), each prefix keeps its answers in a cache of its own.
pub(crate) fn upstreams(
    flags: &[String],
    files_first: &[String],
    ca: Option<&Path>,
    cache: Option<u64>,
) -> anyhow::Result<Vec<Prefix>> {
    let mut groups: Vec<(String, Vec<Upstream>, bool)> = Vec::with_capacity(flags.len() + files_first.len());
    let given = flags
        .iter()
        .map(|f| (f, false))
        .chain(files_first.iter().map(|f| (f, true)));
    for (flag, first) in given {
        let (prefix, url) = flag.split_once('=').expect("checked by parse_proxy_flag");
        let flag_name = |first| if first { "--proxy-files-first" } else { "--proxy" };
        let mut up = Upstream::parse(url)?.prefix(prefix);
        if let (Some(ca), true) = (ca, up.is_tls()) {
            up = up.ca_file(ca)?;
        }
        match groups.iter_mut().find(|(p, ..)| p == prefix) {
            Some((_, _, other)) if *other != first => anyhow::bail!(
                "{} {prefix} and {} {prefix}: files first or not? (give the prefix with one of them)",
                flag_name(*other),
                flag_name(first)
            ),
            Some((_, ups, _)) => ups.push(up),
            None => groups.push((prefix.to_owned(), vec![up], first)),
        }
    }
    let mut routes: Vec<Prefix> = Vec::with_capacity(groups.len());
    for (prefix, ups, first) in groups {
        let mut proxy = Proxy::balanced(ups, Policy::RoundRobin).with_context(|| format!("--proxy {prefix}"))?;
        if let Some(bytes) = cache {
            proxy = proxy.cache(Cache::new(usize::try_from(bytes).unwrap_or(usize::MAX)));
        }
        routes.push((prefix, proxy, first));
    }
    // Longest first: the most specific prefix wins.
    routes.sort_by_key(|(p, ..)| std::cmp::Reverse(p.len()));
    Ok(routes)
}

/// A `[[site.route]]`'s upstreams: each URL with the route's
/// `proxy-ca` (read now) and `insecure-skip-verify` where it is
/// `https://`, and its `proxy-authorization`.
pub(crate) fn route_upstreams(p: &crate::sites::Proxy) -> anyhow::Result<Vec<Upstream>> {
    p.urls()
        .map(|url| {
            let mut up = Upstream::parse(url)?;
            if let (Some(ca), true) = (&p.ca, up.is_tls()) {
                up = up.ca_file(ca)?;
            }
            if p.insecure_skip_verify && up.is_tls() {
                up = up.insecure_skip_verify()?;
            }
            Ok(up.proxy_authorization(p.proxy_authorization))
        })
        .collect()
}

/// A `[[site.route]]`'s proxy: its upstreams under `prefix`, their
/// error page, and its `balance` table (each setting the engine's
/// default when not given); a cache of its own of `cache` bytes per
/// worker (`--proxy-cache`) when given.
pub(crate) fn route_proxy(
    p: &crate::sites::Proxy,
    ups: Vec<Upstream>,
    prefix: &str,
    page: Option<Vec<u8>>,
    cache: Option<u64>,
) -> anyhow::Result<Proxy> {
    let ups = ups
        .into_iter()
        .map(|up| {
            let up = up.prefix(prefix);
            match &page {
                Some(page) => up.error_page(page.clone()),
                None => up,
            }
        })
        .collect();
    let b = &p.balance;
    let mut proxy = Proxy::balanced(ups, b.policy.clone())?;
    if let Some((max_fails, fail_timeout)) = proxy.passive() {
        proxy = proxy.passive_health(
            b.max_fails.unwrap_or(max_fails),
            b.fail_timeout.map_or(fail_timeout, Duration::from_secs),
        );
    }
    if !b.fail_status.is_empty() {
        proxy = proxy.fail_status(&b.fail_status)?;
    }
    if let Some(uri) = &b.health_uri {
        let mut check = ActiveCheck::new(uri)?;
        if let Some(s) = b.health_interval {
            check = check.interval(Duration::from_secs(s));
        }
        if let Some(s) = b.health_timeout {
            check = check.timeout(Duration::from_secs(s));
        }
        proxy = proxy.active_health(check);
    }
    if let Some(e) = &p.encode {
        proxy = proxy.encode(e.clone());
    }
    proxy = proxy.trace(p.trace);
    if let Some(bytes) = p.cache.or(cache) {
        proxy = proxy.cache(Cache::new(usize::try_from(bytes).unwrap_or(usize::MAX)));
    }
    Ok(proxy)
}

/// The warning an upstream whose certificate goes unverified gets, at
/// start, at each reload and from `check-config`.
/// The operator's list for `_redirects` proxy rules (`--proxy-allow`,
/// `--proxy-allow-network`); `connect`: one upstream per origin made (its
/// name resolved now), for serving.
pub(crate) fn rule_allow(
    origins: &[String],
    networks: &[String],
    connect: bool,
) -> anyhow::Result<Arc<peregrine_files::proxy_rules::ProxyAllow>> {
    let allow = peregrine_files::proxy_rules::ProxyAllow::new(origins, networks).map_err(anyhow::Error::msg)?;
    let allow = if connect && !allow.is_empty() {
        allow.connect().map_err(anyhow::Error::msg)?
    } else {
        allow
    };
    Ok(Arc::new(allow))
}

pub(crate) fn warn_if_unverified(up: &Upstream, what: &str) {
    if up.skips_verify() {
        peregrine::log::warn(format_args!(
            "{what}: proxy {}: insecure-skip-verify: the upstream's certificate is NOT verified \
             (anyone on the path to it can read and change the traffic)",
            up.url()
        ));
    }
}

/// Whether `path` is under `prefix` (the module's doc says how).
/// Inlined, as bytes: `/`, the whole site's prefix, is one comparison of
/// the first byte (the call, `strip_suffix` and `starts_with`'s were 38
/// instructions of every proxied GET, callgrind `proxy-c50`).
#[inline]
pub(crate) fn under(prefix: &str, path: &str) -> bool {
    let (prefix, path) = (prefix.as_bytes(), path.as_bytes());
    match prefix {
        [b'/'] => path.first() == Some(&b'/') || path.is_empty(),
        [bare @ .., b'/'] => path.starts_with(prefix) || path == bare,
        _ => path.starts_with(prefix) && path.get(prefix.len()).is_none_or(|&b| b == b'/'),
    }
}

/// Whether `pattern` (a `_headers` or route pattern) may cover a path
/// under `prefix`: its literal start is under the prefix, or, when it has
/// a `*` or `:name`, the prefix begins with that start. Errs on the side
/// of yes (`/:lang/x` may cover `/api/x`): it is for warnings.
pub(crate) fn may_cover_under(pattern: &str, prefix: &str) -> bool {
    let end = pattern.find(['*', ':']).unwrap_or(pattern.len());
    let literal = &pattern[..end];
    under(prefix, literal) || (end < pattern.len() && prefix.starts_with(literal))
}

/// Where a served root keeps the page of the proxy's 502, 503 and 504.
pub(crate) const ERROR_PAGE_KEY: &str = "/_50x.html";

/// A directory's `_50x.html`, if it has one (read now: at start and at
/// each reload).
pub(crate) fn directory_error_page(root: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    let path = root.join(&ERROR_PAGE_KEY[1..]);
    match std::fs::read(&path) {
        Ok(page) => Ok(Some(page)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// `--proxy` prefixes whose error answers carry `page`: the same
/// upstreams (one pool each), another page.
pub(crate) fn with_error_page(routes: &[Prefix], page: Option<&[u8]>) -> Vec<Prefix> {
    let Some(page) = page else {
        return routes.to_vec();
    };
    routes
        .iter()
        .map(|(prefix, p, first)| (prefix.clone(), p.with_error_page(page.to_vec()), *first))
        .collect()
}

/// A proxy route that tries its files first: a GET or HEAD the files
/// answer with anything but 404 gets that answer; a 404, and every other
/// method (an API's POST to a path that is no file), goes upstream. The
/// files have no fallback or not-found page here (the upstream is the
/// fallback), so only a file that is there answers.
pub(crate) struct FilesFirst {
    pub(crate) files: Arc<dyn Handler>,
    pub(crate) proxy: Proxy,
}

impl Handler for FilesFirst {
    fn call(&self, req: &Request<'_>) -> Reply {
        if matches!(req.method(), "GET" | "HEAD") {
            match self.files.call(req) {
                Reply::Now(answer) if answer.status() == 404 => {}
                other => return other,
            }
        }
        self.proxy.call(req)
    }

    /// As the proxy reads it: the files never read a body.
    fn body_use(&self, req: &Request<'_>) -> BodyUse {
        self.proxy.body_use(req)
    }

    /// A method the engine does not know goes upstream.
    fn takes_unknown_method(&self, req: &Request<'_>) -> bool {
        self.proxy.takes_unknown_method(req)
    }
}

/// A site's handler with `--proxy` prefixes in front of it; under a
/// `--proxy-files-first` prefix, a GET or HEAD is the site's first, and
/// goes upstream when the site says 404.
pub(crate) fn wrap(inner: Arc<dyn Handler>, routes: &[Prefix]) -> Arc<dyn Handler> {
    if routes.is_empty() {
        return inner;
    }
    Arc::new(prefixed(inner, routes))
}

/// `wrap`'s handler as itself, for a server that takes it whole (one
/// call through a `dyn Handler` fewer a request than `Shared(wrap(..))`).
pub(crate) fn prefixed(inner: Arc<dyn Handler>, routes: &[Prefix]) -> Prefixed {
    Prefixed {
        routes: routes.to_vec(),
        inner,
    }
}

/// An `Arc`'d handler as one `Server::start` takes.
pub(crate) struct Shared(pub(crate) Arc<dyn Handler>);

impl Handler for Shared {
    fn call(&self, req: &Request<'_>) -> Reply {
        self.0.call(req)
    }

    fn body_use(&self, req: &Request<'_>) -> BodyUse {
        self.0.body_use(req)
    }

    fn takes_unknown_method(&self, req: &Request<'_>) -> bool {
        self.0.takes_unknown_method(req)
    }
}

/// `wrap`'s handler: the proxy routes, longest prefix first, and the
/// site's handler for every other path.
pub(crate) struct Prefixed {
    routes: Vec<Prefix>,
    inner: Arc<dyn Handler>,
}

impl Prefixed {
    /// The route `req`'s path is under, if any. Inlined (a call of its own
    /// was 39 instructions of a proxied GET with `under`'s, callgrind
    /// `proxy-c50`).
    #[inline(always)]
    fn route(&self, req: &Request<'_>) -> Option<(&Proxy, bool)> {
        let path = req.path();
        // A loop, not `Iter::find`, which was left a call of its own.
        for (prefix, proxy, first) in &self.routes {
            if under(prefix, path) {
                return Some((proxy, *first));
            }
        }
        None
    }
}

impl Handler for Prefixed {
    fn call(&self, req: &Request<'_>) -> Reply {
        match self.route(req) {
            Some((proxy, true)) if matches!(req.method(), "GET" | "HEAD") => match self.inner.call(req) {
                Reply::Now(answer) if answer.status() == 404 => proxy.call(req),
                other => other,
            },
            Some((proxy, _)) => proxy.call(req),
            None => self.inner.call(req),
        }
    }

    fn body_use(&self, req: &Request<'_>) -> BodyUse {
        match self.route(req) {
            Some((proxy, _)) => proxy.body_use(req),
            None => self.inner.body_use(req),
        }
    }

    /// Under a proxy prefix, yes (the upstream says what it implements);
    /// elsewhere, what the site's handler says (the files: no, 501).
    fn takes_unknown_method(&self, req: &Request<'_>) -> bool {
        match self.route(req) {
            Some((proxy, _)) => proxy.takes_unknown_method(req),
            None => self.inner.takes_unknown_method(req),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_take_their_paths_and_no_neighbours() {
        assert!(under("/api/", "/api/x"));
        assert!(under("/api/", "/api"));
        assert!(!under("/api/", "/apix"));
        assert!(under("/api", "/api"));
        assert!(under("/api", "/api/x"));
        assert!(!under("/api", "/apix"));
        assert!(under("/", "/anything"));
    }

    /// `under` as bytes says what the rule said as `str` steps, for
    /// every pair of these prefixes and paths.
    #[test]
    fn under_says_what_the_string_rule_says() {
        fn rule(prefix: &str, path: &str) -> bool {
            match prefix.strip_suffix('/') {
                Some(bare) => path.starts_with(prefix) || path == bare,
                None => path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('/')),
            }
        }
        let prefixes = [
            "", "/", "//", "/a", "/a/", "/api", "/api/", "/api/v1", "/api/v1/", "/é/",
        ];
        let paths = [
            "",
            "/",
            "//",
            "*",
            "a",
            "/a",
            "/a/",
            "/ab",
            "/api",
            "/api/",
            "/apix",
            "/api/x",
            "/api/v1",
            "/api/v1/x",
            "/api/v1x",
            "/é",
            "/é/",
            "/éx",
        ];
        for prefix in prefixes {
            for path in paths {
                assert_eq!(under(prefix, path), rule(prefix, path), "{prefix:?} {path:?}");
            }
        }
    }

    #[test]
    fn patterns_that_may_cover_a_prefix_are_told() {
        for (pattern, prefix) in [
            ("/api/*", "/api/"),
            ("/api", "/api/"),
            ("/api/admin/*", "/api"),
            ("/*", "/api/"),
            ("/:lang/x", "/api/"),
            ("/a*", "/api/"),
        ] {
            assert!(may_cover_under(pattern, prefix), "{pattern} under {prefix}");
        }
        for (pattern, prefix) in [
            ("/apix/*", "/api/"),
            ("/", "/api/"),
            ("/admin/*", "/api/"),
            ("/b*", "/api"),
        ] {
            assert!(!may_cover_under(pattern, prefix), "{pattern} under {prefix}");
        }
    }

    #[test]
    fn flags_are_checked() {
        assert!(parse_proxy_flag("/api/=http://127.0.0.1:9000").is_ok());
        assert!(parse_proxy_flag("/api/=unix:/run/app.sock").is_ok());
        assert!(parse_proxy_flag("/pkg.Echo/=h2c://127.0.0.1:50051").is_ok());
        for bad in [
            "/api/",
            "api/=http://127.0.0.1",
            "/api/*=http://127.0.0.1",
            "/api/=ftp://x",
        ] {
            assert!(parse_proxy_flag(bad).is_err(), "{bad}");
        }
    }
}
