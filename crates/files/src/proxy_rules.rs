//! `_redirects` proxy rules (Netlify's: status 200 to a URL) and the
//! operator's list that lets them through.
//!
//! Site files are built by CI from content anyone may edit: a proxy rule
//! in them is a server-side request forgery door. So the site never
//! decides. A rule is honoured only when its URL's origin (scheme, host,
//! port) is on the operator's list ([`ProxyAllow`]: `serve
//! --proxy-allow`, `pack --proxy-allow`), read from the configuration,
//! never from the site tree; and never when it names a `unix:` socket, a
//! loopback, link-local, private or unspecified address (unless the
//! operator allowed that network too: `--proxy-allow-network`) or a cloud
//! metadata service (whatever the operator said). A name on the list
//! may come to resolve to such an address (DNS rebinding): the same
//! rules hold where the connection is made, on every resolution
//! (`peregrine::proxy::AddressGuard`).
//!
//! The origin of a rule's URL is fixed when the rule is read; the
//! captures go into its path only ([`crate::conventions::substitute_rule`]),
//! and the upstream's request target is rebuilt from that path decoded
//! (empty segments dropped, dot segments refused, re-encoded), so no
//! capture (`@evil.com/`, `//evil`, `%2F..`) can change where the request
//! goes. The request itself is the reverse proxy's (`peregrine::proxy`:
//! forwarding fields, `Via`, hop-by-hop fields dropped, the upstream's
//! redirects relayed, never followed), sent with the upstream's own Host.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;

use peregrine::client_addr::Network;
use peregrine::proxy::{AddressGuard, HostHeader, Proxy, Upstream};
use peregrine::{Reply, Request, Response};

/// The operator's allow list for `_redirects` proxy rules, and once
/// serving ([`ProxyAllow::connect`]) one proxy per origin on it.
#[derive(Clone, Default)]
pub struct ProxyAllow {
    /// Normalised origins: `https://api.example.com`, `http://h:8080`.
    origins: Vec<String>,
    guard: AddressGuard,
    /// By origin; empty until `connect`.
    proxies: HashMap<String, Proxy>,
}

impl PartialEq for ProxyAllow {
    /// The same lists (the proxies follow from them).
    fn eq(&self, other: &ProxyAllow) -> bool {
        self.origins == other.origins && self.guard == other.guard
    }
}

impl Eq for ProxyAllow {}

impl fmt::Debug for ProxyAllow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyAllow")
            .field("origins", &self.origins)
            .field("networks", &self.guard.allowed())
            .finish()
    }
}

/// A URL split: its normalised origin, its host as written (lowercase,
/// brackets off), and what follows the authority (`/path?query`, maybe
/// empty).
struct Split<'a> {
    origin: String,
    host: String,
    rest: &'a str,
}

impl ProxyAllow {
    /// The list: `origins` as `http[s]://HOST[:PORT]` (no path, query or
    /// user), `networks` the non-public networks rules may reach
    /// (`127.0.0.0/8`); an error names the bad one.
    pub fn new(origins: &[String], networks: &[String]) -> Result<ProxyAllow, String> {
        let mut allow = ProxyAllow::default();
        for o in origins {
            let split = split(o).map_err(|e| format!("proxy-allow {o:?}: {e}"))?;
            if !split.rest.is_empty() && split.rest != "/" {
                return Err(format!(
                    "proxy-allow {o:?}: an origin is scheme, host and port only (no path or query)"
                ));
            }
            if !allow.origins.contains(&split.origin) {
                allow.origins.push(split.origin);
            }
        }
        let mut nets = Vec::with_capacity(networks.len());
        for n in networks {
            let net: Network = n.parse().map_err(|e| format!("proxy-allow-network {n:?}: {e}"))?;
            nets.push(net);
        }
        allow.guard = AddressGuard::new(nets);
        Ok(allow)
    }

    /// Whether no origin is allowed (every proxy rule refused).
    pub fn is_empty(&self) -> bool {
        self.origins.is_empty()
    }

    /// The origins allowed, normalised.
    pub fn origins(&self) -> &[String] {
        &self.origins
    }

    /// The non-public networks allowed.
    pub fn networks(&self) -> &[Network] {
        self.guard.allowed()
    }

    /// One proxy per origin, for serving: each origin's name resolved now
    /// (never on a loop; again every 30 s as any upstream's), its
    /// addresses checked at each connect, the upstream's own Host sent.
    pub fn connect(mut self) -> Result<ProxyAllow, String> {
        for origin in &self.origins {
            let up = Upstream::parse(origin)
                .map_err(|e| format!("proxy-allow {origin:?}: {e}"))?
                .host_header(HostHeader::Upstream)
                .address_guard(self.guard.clone());
            self.proxies.insert(origin.clone(), Proxy::new(up));
        }
        Ok(self)
    }

    /// `None` when a `_redirects` rule with status 200 to `to` (a target
    /// that is not a path) is honoured, else why not, in words.
    pub fn refusal(&self, to: &str) -> Option<String> {
        let lower = to.to_ascii_lowercase();
        if lower.starts_with("unix:") {
            return Some("a unix: socket is never a target from site files".into());
        }
        let split = match split(to) {
            Ok(s) => s,
            Err(e) => return Some(e),
        };
        let host = split.host.as_str();
        // A host named by the rule itself is judged as the connection
        // would be (names other than these are judged at connect time).
        let named: Option<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) if host == "localhost" || host.ends_with(".localhost") => Some([127, 0, 0, 1].into()),
            Err(_) => None,
        };
        let never = match named {
            Some(ip) => self.guard.refusal(ip),
            // Numbers a resolver reads as an address (`2130706433`,
            // `127.1`, `0x7f.1`) are no host names.
            None if host.is_empty() || host.bytes().all(|b| b.is_ascii_digit() || b == b'.' || b == b'x') => {
                Some("not a host name")
            }
            None if host == "metadata.google.internal" || host == "metadata" => Some("the cloud metadata service"),
            None => None,
        };
        if let Some(what) = never {
            let unless = if what == "the cloud metadata service" || what == "not a host name" {
                "whatever the server allows"
            } else {
                "unless the server's proxy-allow-network holds it"
            };
            return Some(format!(
                "a proxy rule to {host} ({what}): never honoured from site files, {unless}"
            ));
        }
        if !self.origins.contains(&split.origin) {
            let allowed = if self.origins.is_empty() {
                "this server's proxy-allow list is empty".to_owned()
            } else {
                format!("this server's proxy-allow list holds {}", self.origins.join(", "))
            };
            return Some(format!(
                "a proxy rule to another origin ({host}): not honoured; site files cannot allow an origin, and \
                 {allowed}"
            ));
        }
        if canonical_target(split.rest, None).is_none() {
            return Some("its path holds a dot segment, a NUL or a backslash, or is not UTF-8 once decoded".into());
        }
        None
    }

    /// Sends `req` to the URL a proxy rule gave, its captures put in
    /// (`substitute_rule`): to the proxy of its origin, the target
    /// rebuilt canonically, the client's query when the rule's URL has
    /// none. An origin with no proxy (a list changed under an archive
    /// that was checked against it, or a list not connected) is a 502,
    /// never a connection made up here.
    pub fn forward(&self, req: &Request<'_>, url: &str) -> Reply {
        let Ok(split) = split(url) else {
            return Response::error(502).into();
        };
        let Some(proxy) = self.proxies.get(&split.origin) else {
            peregrine::log::warn(format_args!(
                "_redirects: a proxy rule to {} that this server does not allow",
                split.origin
            ));
            return Response::error(502).into();
        };
        match canonical_target(split.rest, req.query()) {
            Some(target) => proxy.call_to(req, &target),
            None => Reply::Now(crate::reply::bad_request(
                "a _redirects proxy rule's path would not stay canonical",
            )),
        }
    }
}

/// The index in `to` where its path begins, for a URL (`http[s]://`):
/// the captures of a rule go after it only. `None` for a path.
pub fn path_start(to: &str) -> Option<usize> {
    let scheme = to.find("://")?;
    if to.starts_with('/') {
        return None;
    }
    let after = scheme + 3;
    Some(to[after..].find(['/', '?', '#']).map_or(to.len(), |i| after + i))
}

/// `url` split into its normalised origin, host and the rest; an error
/// for anything but `http[s]://HOST[:PORT]` followed by nothing, a path
/// or a query.
fn split(url: &str) -> Result<Split<'_>, String> {
    let lower_scheme = url.get(..8).map(str::to_ascii_lowercase).unwrap_or_default();
    let (scheme, rest) = if lower_scheme.starts_with("http://") {
        ("http", &url[7..])
    } else if lower_scheme.starts_with("https://") {
        ("https", &url[8..])
    } else {
        return Err(format!(
            "{url:?} is neither a path on this site (starting with /) nor an http(s):// URL"
        ));
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if tail.starts_with('#') {
        return Err(format!("{url:?}: a fragment is never sent"));
    }
    if authority.is_empty() || authority.contains(['@', '\\', '%']) || !authority.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(format!(
            "{url:?}: the authority must be HOST[:PORT] (no user, no escapes)"
        ));
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let close = v6
                .find(']')
                .ok_or_else(|| format!("{url:?}: an unclosed [IPv6] host"))?;
            (&v6[..close], &v6[close + 1..])
        }
        None => match authority.rsplit_once(':') {
            Some((h, _)) => (h, &authority[h.len()..]),
            None => (authority, ""),
        },
    };
    let default_port = if scheme == "http" { 80 } else { 443 };
    let port: u16 = match port {
        "" => default_port,
        p => p
            .strip_prefix(':')
            .filter(|d| !d.is_empty() && d.len() <= 5 && d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse().ok())
            .filter(|&n| n != 0)
            .ok_or_else(|| format!("{url:?}: a bad port"))?,
    };
    let host = host.to_ascii_lowercase();
    let host = host.trim_end_matches('.').to_owned();
    if host.is_empty() || host.contains(':') && host.parse::<std::net::Ipv6Addr>().is_err() {
        return Err(format!("{url:?}: a bad host"));
    }
    let shown = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.clone()
    };
    let origin = if port == default_port {
        format!("{scheme}://{shown}")
    } else {
        format!("{scheme}://{shown}:{port}")
    };
    Ok(Split {
        origin,
        host,
        rest: tail,
    })
}

/// The upstream request target for what follows a rule URL's authority
/// (`/v1/x?y=1`, `?y=1`, or nothing), or `None` for a path that cannot be
/// made canonical: decoded (it must be UTF-8, without NUL or `\`), empty
/// segments dropped (`//evil` is `/evil`), dot segments refused,
/// re-encoded; then the rule's query, else `client_query`.
pub fn canonical_target(rest: &str, client_query: Option<&str>) -> Option<String> {
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    let decoded = peregrine::percent_decode(path.as_bytes());
    let decoded = std::str::from_utf8(&decoded).ok()?;
    if decoded.contains(['\0', '\\']) {
        return None;
    }
    let mut target = String::with_capacity(rest.len() + 1);
    for segment in decoded.split('/').filter(|s| !s.is_empty()) {
        if segment == "." || segment == ".." {
            return None;
        }
        target.push('/');
        target.push_str(&crate::path::encode(segment));
    }
    if target.is_empty() || decoded.ends_with('/') {
        target.push('/');
    }
    if let Some(q) = query.or(client_query).filter(|q| !q.is_empty()) {
        target.push('?');
        target.push_str(q);
    }
    Some(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(origins: &[&str], nets: &[&str]) -> ProxyAllow {
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        ProxyAllow::new(&s(origins), &s(nets)).unwrap()
    }

    #[test]
    fn only_listed_origins_pass_and_the_never_list_holds_whatever_the_list() {
        let a = allow(
            &[
                "https://API.example.com:443",
                "http://127.0.0.1:9000",
                "http://169.254.169.254",
            ],
            &[],
        );
        assert_eq!(
            a.origins(),
            [
                "https://api.example.com",
                "http://127.0.0.1:9000",
                "http://169.254.169.254"
            ]
        );
        assert_eq!(a.refusal("https://api.example.com/v1/:splat"), None);
        assert_eq!(a.refusal("HTTPS://api.example.com./v1/"), None);
        assert_eq!(a.refusal("https://api.example.com:443"), None);
        for (to, why) in [
            ("https://api.example.com:8443/", "another origin"),
            ("http://api.example.com/", "another origin"),
            ("https://evil.example.com/", "another origin"),
            ("https://user@api.example.com/", "no user"),
            ("https://api.example.com%2F@evil/", "no user"),
            ("http://127.0.0.1:9000/", "a loopback address"),
            ("http://localhost:9000/", "a loopback address"),
            ("http://[::1]:9000/", "a loopback address"),
            ("http://169.254.169.254/latest/", "the cloud metadata service"),
            ("http://[fd00:ec2::254]/", "the cloud metadata service"),
            ("http://metadata.google.internal/", "the cloud metadata service"),
            ("http://2130706433/", "not a host name"),
            ("http://10.0.0.1/", "a private address"),
            ("unix:/run/app.sock", "unix:"),
            ("ftp://x/", "neither a path"),
            ("https://api.example.com/a/../b", "dot segment"),
        ] {
            let got = a.refusal(to);
            assert!(got.as_deref().is_some_and(|g| g.contains(why)), "{to}: {got:?}");
        }
    }

    #[test]
    fn an_allowed_network_opens_loopback_but_never_the_metadata_service() {
        let a = allow(
            &[
                "http://127.0.0.1:9000",
                "http://localhost:9000",
                "http://169.254.169.254",
            ],
            &["127.0.0.0/8", "169.254.0.0/16"],
        );
        assert_eq!(a.refusal("http://127.0.0.1:9000/x"), None);
        assert_eq!(a.refusal("http://localhost:9000/x"), None);
        assert!(a
            .refusal("http://169.254.169.254/")
            .unwrap()
            .contains("whatever the server allows"));
        assert!(ProxyAllow::new(&["http://h/x".into()], &[]).is_err());
        assert!(ProxyAllow::new(&[], &["10.0.0.1/8".into()]).is_err());
    }

    #[test]
    fn captures_cannot_move_the_origin_or_escape_the_path() {
        let to = "https://api.example.com/v1/:splat";
        let at = path_start(to).unwrap();
        assert_eq!(&to[..at], "https://api.example.com");
        assert_eq!(path_start("/a/:splat"), None);
        assert_eq!(path_start("https://h"), Some(9));
        // What a capture can make of the rest, once put in.
        for (rest, want) in [
            ("/v1/%40evil.com/", Some("/v1/%40evil.com/")),
            ("/v1//evil", Some("/v1/evil")),
            ("//evil/x", Some("/evil/x")),
            ("/v1/a%2Fb", Some("/v1/a/b")),
            ("/v1/%2F..", None),
            ("/v1/..", None),
            ("/v1/%2e%2E/x", None),
            ("/v1/a%5Cb", None),
            ("/v1/%00", None),
            ("/v1/%FF", None),
            ("", Some("/")),
            ("?a=1", Some("/?a=1")),
            ("/caf%C3%A9 x", Some("/caf%C3%A9%20x")),
        ] {
            assert_eq!(canonical_target(rest, None).as_deref(), want, "{rest}");
        }
        assert_eq!(canonical_target("/x", Some("q=1")).as_deref(), Some("/x?q=1"));
        assert_eq!(canonical_target("/x?r=2", Some("q=1")).as_deref(), Some("/x?r=2"));
    }
}
