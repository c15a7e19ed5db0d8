//! Many sites in one server: each request goes to the site its host names,
//! as nginx's `server_name` and Caddy's site addresses choose.
//!
//! A [`Site`] is a handler with the names it answers for (exact names and
//! one-label wildcards, `*.example.com`), aliases that redirect to its
//! first name with 308, and optionally its own access log; one site may be
//! marked the default. [`Server::start_sites`](crate::Server::start_sites) serves them;
//! [`Server::start`](crate::Server::start) with one handler is the case of
//! one site answering every host, and pays one branch for this module.
//!
//! The host (`Host`, `:authority`, or an absolute-form target's) is put in
//! normal form (`host::normalize`: lowercase, IDNA A-labels, one trailing
//! dot and the port removed) before the lookup, as the certificate's SNI
//! is: `Example.COM.` is `example.com`, and cannot fall through to another
//! site and skip its rules. Then:
//! - a host no site names (or none at all) goes to the default site if one
//!   is marked, else gets 421 Misdirected Request over TLS (the
//!   certificate's connection is for another origin: RFC 9110 §15.5.20 lets
//!   the client retry on a new connection) and 404 in cleartext (Caddy's
//!   answers);
//! - over TLS, a request whose host is another site's than the name the
//!   client gave in SNI gets 421 (a client that sends `Host: b.test` on a
//!   connection made for `a.test` was given a.test's certificate, so it
//!   never authenticated b.test). This covers HTTP/2 and HTTP/3 coalescing
//!   too: a browser may reuse a connection for another name the
//!   certificate covers (RFC 9113 §9.1.1), and the 421 sends it to a new
//!   connection of its own, where the right site's certificate is
//!   presented. Coalescing within one site (its names and wildcards) is
//!   served. A connection without SNI (a client that connected by
//!   address) is judged by its host alone;
//! - an alias answers 308 to the same path and query on the site's first
//!   name, keeping the scheme and the port the client used.
//!
//! The site chosen is recorded on the request: the access log writes it
//! (`$site`, the JSON `site` field) and to the site's own log if it has
//! one; the metrics count requests per site, labelled by the configured
//! sites' first names only, never by what a client sends.

use std::cell::Cell;
use std::sync::Arc;

use crate::access_log::AccessLog;
use crate::handler::{BodyUse, Handler, Reply};
use crate::host::{self, HostBuf, HostMap, HostMapError, HostName};
use crate::request::Request;
use crate::response::Response;

/// Most sites in one server (their index is a `u16`, and the metrics keep
/// counters per site).
pub const SITES_MAX: usize = 4096;

/// A site: a handler and the names it answers for (see the module's
/// documentation).
///
/// ```
/// use peregrine::{Request, Response, Server, Site};
/// let a = Site::new(["a.example", "*.a.example"], |_: &Request<'_>| Response::text("A"))
///     .alias("www.a.example");
/// let b = Site::new(["b.example"], |_: &Request<'_>| Response::text("B")).default_site();
/// let running = Server::new().bind("127.0.0.1:0").start_sites(vec![a, b])?;
/// # running.shutdown();
/// # running.join()?;
/// # Ok::<(), peregrine::Error>(())
/// ```
pub struct Site {
    names: Vec<String>,
    aliases: Vec<String>,
    default: bool,
    handler: Arc<dyn Handler>,
    access_log: Option<AccessLog>,
}

impl std::fmt::Debug for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Site")
            .field("names", &self.names)
            .field("aliases", &self.aliases)
            .field("default", &self.default)
            .field("access_log", &self.access_log)
            .finish_non_exhaustive()
    }
}

impl Site {
    /// A site answering for `names` (at least one; the first is its label
    /// in logs and metrics and where its aliases redirect) with `handler`.
    pub fn new<N: Into<String>>(names: impl IntoIterator<Item = N>, handler: impl Handler) -> Site {
        Site::with_handler(names, Arc::new(handler))
    }

    /// [`Site::new`] with a handler already shared.
    pub fn with_handler<N: Into<String>>(names: impl IntoIterator<Item = N>, handler: Arc<dyn Handler>) -> Site {
        Site {
            names: names.into_iter().map(Into::into).collect(),
            aliases: Vec::new(),
            default: false,
            handler,
            access_log: None,
        }
    }

    /// A name that redirects (308) to the site's first name.
    pub fn alias(mut self, name: impl Into<String>) -> Site {
        self.aliases.push(name.into());
        self
    }

    /// Marks the site as the default: hosts no site names are its.
    pub fn default_site(mut self) -> Site {
        self.default = true;
        self
    }

    /// Writes this site's requests to their own access log, in the
    /// server's format, instead of the server's log.
    pub fn access_log(mut self, log: AccessLog) -> Site {
        self.access_log = Some(log);
        self
    }

    /// The names, as given.
    pub fn names(&self) -> &[String] {
        &self.names
    }
}

/// Why [`Server::start_sites`](crate::Server::start_sites) refused its sites.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SitesError {
    /// No site, or more than [`SITES_MAX`].
    Count(usize),
    /// A site without a name.
    Unnamed,
    /// A name or alias that is none, or that two sites claim.
    Name(HostMapError),
    /// Two sites marked default.
    SecondDefault,
}

impl std::fmt::Display for SitesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SitesError::Count(n) => write!(f, "{n} sites: between 1 and {SITES_MAX} are served"),
            SitesError::Unnamed => f.write_str("a site has no name"),
            SitesError::Name(e) => e.fmt(f),
            SitesError::SecondDefault => f.write_str("two sites are marked default; one at most"),
        }
    }
}

impl std::error::Error for SitesError {}

/// What a host finds in the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    Site(u16),
    Alias(u16),
}

/// One site as served: its handler, label and alias redirect.
struct Served {
    handler: Arc<dyn Handler>,
    /// The first name, in normal form.
    label: Box<str>,
    redirect: AliasRedirect,
}

/// The sites of a server, indexed (see the module's documentation).
pub(crate) struct Sites {
    /// One handler for every host: no lookup at all.
    single: Option<Arc<dyn Handler>>,
    sites: Box<[Served]>,
    map: HostMap<Entry>,
    /// The access log of each site that has its own, by index.
    logs: Box<[Option<AccessLog>]>,
}

impl Sites {
    /// One handler answering every host (`Server::start`).
    pub(crate) fn single(handler: Arc<dyn Handler>) -> Sites {
        Sites {
            single: Some(handler),
            sites: Box::new([]),
            map: HostMap::new(),
            logs: Box::new([]),
        }
    }

    /// Indexes `sites`: every name and alias in normal form, each claimed
    /// once.
    pub(crate) fn new(sites: Vec<Site>) -> Result<Sites, SitesError> {
        if sites.is_empty() || sites.len() > SITES_MAX {
            return Err(SitesError::Count(sites.len()));
        }
        let mut map = HostMap::new();
        let mut served = Vec::with_capacity(sites.len());
        let mut logs = Vec::with_capacity(sites.len());
        for (i, site) in sites.into_iter().enumerate() {
            let i = u16::try_from(i).expect("SITES_MAX fits in u16");
            let first = site.names.first().ok_or(SitesError::Unnamed)?;
            for name in &site.names {
                map.insert(name, Entry::Site(i)).map_err(SitesError::Name)?;
            }
            for alias in &site.aliases {
                map.insert(alias, Entry::Alias(i)).map_err(SitesError::Name)?;
            }
            if site.default {
                map.set_default(Entry::Site(i)).map_err(|_| SitesError::SecondDefault)?;
            }
            // Inserted above, so it is a name or a wildcard.
            let label: Box<str> = match first.strip_prefix("*.") {
                Some(parent) => format!("*.{}", normal(parent)).into(),
                None => normal(first).into(),
            };
            served.push(Served {
                handler: site.handler,
                redirect: AliasRedirect {
                    to: label.strip_prefix("*.").unwrap_or(&label).into(),
                },
                label,
            });
            logs.push(site.access_log);
        }
        Ok(Sites {
            single: None,
            sites: served.into(),
            map,
            logs: logs.into(),
        })
    }

    /// The labels of the sites (their first names in normal form), by
    /// index; none for the single handler.
    pub(crate) fn labels(&self) -> impl Iterator<Item = &str> {
        self.sites.iter().map(|s| &*s.label)
    }

    /// The label of site `i` (its first name in normal form).
    #[inline]
    pub(crate) fn label(&self, i: u16) -> Option<&str> {
        self.sites.get(usize::from(i)).map(|s| &*s.label)
    }

    /// The access logs of the sites that have their own, by index.
    pub(crate) fn logs(&self) -> &[Option<AccessLog>] {
        &self.logs
    }

    /// The handler that answers `req`: its site's (recorded in
    /// `req.site`), or the answer for a host no site serves here, or an
    /// alias's redirect.
    #[inline]
    pub(crate) fn handler_for<'s>(&'s self, req: &Request<'_>) -> &'s dyn Handler {
        if let Some(handler) = &self.single {
            return &**handler;
        }
        self.lookup(req)
    }

    fn lookup<'s>(&'s self, req: &Request<'_>) -> &'s dyn Handler {
        let mut buf = HostBuf::new();
        let host = req.host.and_then(|h| host::normalize_in(h, &mut buf).ok());
        let found = match &host {
            Some(host) => self.map.get(host).copied(),
            // No host (HTTP/1.0 without one): the default's, if any.
            None => self.map.default_value().copied(),
        };
        let misdirected: &'s dyn Handler = if req.tls.is_some() { &MISDIRECTED } else { &NOT_FOUND };
        match found {
            None => misdirected,
            Some(Entry::Alias(i)) => &self.sites[usize::from(i)].redirect,
            Some(Entry::Site(i)) => {
                // Over TLS, the name the handshake was for must be this
                // site's.
                if let Some(Some(sni)) = req.tls {
                    let sni_site = self.map.get(&HostName::from_normal(sni)).copied();
                    if sni_site != Some(Entry::Site(i)) {
                        return &MISDIRECTED;
                    }
                }
                req.site.set(Some(i));
                &*self.sites[usize::from(i)].handler
            }
        }
    }
}

/// A name known to normalise (the map took it).
fn normal(name: &str) -> String {
    host::normalize(name.as_bytes()).map_or_else(|_| name.to_owned(), |n| n.as_str().to_owned())
}

/// The site chosen for a request, kept on it for the log and metrics.
pub(crate) type Chosen = Cell<Option<u16>>;

/// 421 for a host this connection does not serve.
static MISDIRECTED: Refuse = Refuse {
    status: 421,
    body: b"421 Misdirected Request: this connection does not serve that host\n",
};

/// 404 for a host no site names, in cleartext.
static NOT_FOUND: Refuse = Refuse {
    status: 404,
    body: b"404 Not Found: no site is served under that host name here\n",
};

/// The answer to a request no site takes.
struct Refuse {
    status: u16,
    body: &'static [u8],
}

impl Handler for Refuse {
    fn call(&self, _req: &Request<'_>) -> Reply {
        Reply::Now(
            Response::new(self.status)
                .with_content_type("text/plain; charset=utf-8")
                .with_body(self.body),
        )
    }

    fn body_use(&self, _req: &Request<'_>) -> BodyUse {
        BodyUse::Ignore
    }
}

/// An alias's answer: 308 to the same target on the site's first name.
struct AliasRedirect {
    /// The first name in normal form (a wildcard's parent for a site named
    /// by a wildcard only).
    to: Box<str>,
}

impl Handler for AliasRedirect {
    fn call(&self, req: &Request<'_>) -> Reply {
        let scheme = if req.tls.is_some() { "https" } else { "http" };
        // The port the client used, as it wrote it (already checked by the
        // lookup's normalisation: digits only).
        let port = req.host().and_then(port_of);
        let location = crate::request::absolute_url(scheme, &self.to, port, req.target());
        Reply::Now(
            Response::new(308)
                .with_header("Location", location)
                .with_content_type("text/plain; charset=utf-8")
                .with_body(&b"308 Permanent Redirect: this site's name is another\n"[..]),
        )
    }

    fn body_use(&self, _req: &Request<'_>) -> BodyUse {
        BodyUse::Ignore
    }
}

/// The port of a `Host` value, if it has one with digits.
fn port_of(host: &str) -> Option<&str> {
    let after = match host.rfind(']') {
        Some(end) => &host[end + 1..],
        None => host,
    };
    let port = after.rsplit_once(':')?.1;
    (!port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())).then_some(port)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Version;

    fn text(s: &'static str) -> impl Handler {
        move |_: &Request<'_>| Response::text(s)
    }

    fn sites(default: bool) -> Sites {
        let mut b = Site::new(["b.test"], text("B"));
        if default {
            b = b.default_site();
        }
        Sites::new(vec![
            Site::new(["a.test", "*.a.test"], text("A")).alias("www.a.test"),
            b,
            Site::new(["Bücher.Example."], text("C")),
        ])
        .unwrap()
    }

    /// The site's index, or the status of the answer given instead, and
    /// its Location.
    fn answer(
        sites: &Sites,
        host: Option<&str>,
        tls: Option<Option<&str>>,
        target: &str,
    ) -> (Option<u16>, u16, String) {
        let mut req = Request::new(
            "GET",
            target,
            Version::Http11,
            &[],
            host,
            b"",
            &crate::request::LOOPBACK_ORIGIN,
        );
        req.tls = tls;
        let handler = sites.handler_for(&req);
        let Reply::Now(response) = handler.call(&req) else {
            panic!("deferred")
        };
        let location = response.header("location").map(str::to_owned).unwrap_or_default();
        (req.site.get(), response.status(), location)
    }

    #[test]
    fn every_spelling_of_a_name_finds_its_site() {
        let s = sites(false);
        for host in ["a.test", "A.TEST", "a.test.", "a.test:8443", "x.a.test", "X.A.Test.:1"] {
            assert_eq!(answer(&s, Some(host), None, "/").0, Some(0), "{host}");
        }
        for host in ["bücher.example", "xn--bcher-kva.example", "BÜCHER.EXAMPLE."] {
            assert_eq!(answer(&s, Some(host), None, "/").0, Some(2), "{host}");
        }
        let labels: Vec<&str> = s.labels().collect();
        assert_eq!(labels, ["a.test", "b.test", "xn--bcher-kva.example"]);
    }

    #[test]
    fn an_unknown_host_gets_404_in_cleartext_421_over_tls_or_the_default() {
        let s = sites(false);
        for host in [Some("c.test"), Some("a.b.a.test"), Some("a..test"), None] {
            assert_eq!(answer(&s, host, None, "/"), (None, 404, String::new()), "{host:?}");
            assert_eq!(
                answer(&s, host, Some(None), "/"),
                (None, 421, String::new()),
                "{host:?}"
            );
        }
        let s = sites(true);
        assert_eq!(answer(&s, Some("c.test"), None, "/").0, Some(1));
        assert_eq!(answer(&s, None, Some(None), "/").0, Some(1));
    }

    #[test]
    fn over_tls_the_host_must_be_the_sni_names_site() {
        let s = sites(true);
        // Same site, by another of its names: served.
        assert_eq!(answer(&s, Some("x.a.test"), Some(Some("a.test")), "/").0, Some(0));
        // Another site's host on a connection made for a.test.
        assert_eq!(answer(&s, Some("b.test"), Some(Some("a.test")), "/").1, 421);
        // An unknown SNI got the default's certificate: the default's host
        // is served, another site's is not.
        assert_eq!(answer(&s, Some("b.test"), Some(Some("zzz.test")), "/").0, Some(1));
        assert_eq!(answer(&s, Some("a.test"), Some(Some("zzz.test")), "/").1, 421);
        // No SNI: the host decides.
        assert_eq!(answer(&s, Some("a.test"), Some(None), "/").0, Some(0));
    }

    #[test]
    fn an_alias_redirects_to_the_first_name_with_scheme_port_and_target() {
        let s = sites(false);
        assert_eq!(
            answer(&s, Some("WWW.a.test"), None, "/x?y=1"),
            (None, 308, "http://a.test/x?y=1".into())
        );
        assert_eq!(
            answer(&s, Some("www.a.test:8443"), Some(Some("www.a.test")), "/"),
            (None, 308, "https://a.test:8443/".into())
        );
        assert_eq!(
            answer(&s, Some("www.a.test"), None, "http://www.a.test/p"),
            (None, 308, "http://a.test/p".into())
        );
    }

    #[test]
    fn names_are_refused_when_invalid_or_claimed_twice() {
        let two = |a: &str, b: &str| Sites::new(vec![Site::new([a], text("A")), Site::new([b], text("B"))]).err();
        assert!(matches!(
            two("a.test", "A.Test."),
            Some(SitesError::Name(HostMapError::Duplicate(_)))
        ));
        assert!(matches!(
            two("a.test", "f*.test"),
            Some(SitesError::Name(HostMapError::Invalid { .. }))
        ));
        let defaults = Sites::new(vec![
            Site::new(["a.test"], text("A")).default_site(),
            Site::new(["b.test"], text("B")).default_site(),
        ]);
        assert_eq!(defaults.err(), Some(SitesError::SecondDefault));
        let unnamed = Sites::new(vec![Site::new(Vec::<String>::new(), text("A"))]);
        assert_eq!(unnamed.err(), Some(SitesError::Unnamed));
        assert_eq!(Sites::new(Vec::new()).err(), Some(SitesError::Count(0)));
    }
}
