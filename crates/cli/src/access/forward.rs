//! Forward authentication (issue 27): a route's `forward-auth = { url,
//! uri, copy-headers }` asks an authentication service (oauth2-proxy,
//! Authelia) about each request, as Caddy's `forward_auth` and nginx's
//! `auth_request` do. The engine does the asking
//! (`peregrine::proxy::ForwardAuth`: a subrequest over the proxy's
//! upstream connections, on the worker's loop); this module reads the
//! setting and holds what the route's handler makes until the verdict:
//! the answer of files, an archive or a redirect; a proxy's upstream
//! request (with the copied fields in place of the client's); or the
//! password check of `_headers`' Basic-Auth, queued only once the service
//! said yes (`basic::holding`).

use std::sync::Arc;

use peregrine::proxy::{self, Held};
use peregrine::{Handler, Reply, Request};

use super::{basic, Finish};

/// Fields a service may not set on the request that goes on: the framing
/// and routing the engine writes (a copied `Content-Length` would be
/// smuggling), hop-by-hop ones, and what the proxy writes afresh.
const NOT_COPIED: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "via",
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-request-id",
    "cookie",
];

/// A route's `forward-auth` setting, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ForwardAuth {
    /// `http://HOST[:PORT][/PATH]` or `unix:PATH`, as the proxy takes them.
    pub(crate) url: String,
    /// The subrequest's path (and query) in place of the URL's.
    pub(crate) uri: Option<String>,
    /// Fields of a 2xx copied onto the request, as written.
    pub(crate) copy: Vec<String>,
    /// Seconds the service may be silent (then 504); `None`: the
    /// engine's default (`ForwardAuth::READ_TIMEOUT`, 10 s).
    pub(crate) timeout: Option<u64>,
}

/// The longest `timeout` taken: a service slower than this is down.
pub(crate) const TIMEOUT_MAX: u64 = 300;

impl ForwardAuth {
    /// The setting from its parts, or why not.
    pub(crate) fn new(
        url: &str,
        uri: Option<String>,
        copy: Vec<String>,
        timeout: Option<u64>,
    ) -> Result<ForwardAuth, String> {
        if timeout.is_some_and(|t| !(1..=TIMEOUT_MAX).contains(&t)) {
            return Err(format!("timeout: whole seconds from 1 to {TIMEOUT_MAX}"));
        }
        let up = proxy::Upstream::parse(url).map_err(|e| format!("url: {e}"))?;
        if let Some(uri) = &uri {
            if !uri.starts_with('/') || !uri.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b'#') {
                return Err(format!("uri: {uri:?}: expected a path such as \"/api/verify\""));
            }
            if up.url().starts_with("http://") && up.url()[7..].contains('/') {
                return Err("give the path in url or in uri, not in both".into());
            }
        }
        for name in &copy {
            let token = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token {
                return Err(format!("copy-headers: {name:?} is not a field name"));
            }
            if NOT_COPIED.iter().any(|n| n.eq_ignore_ascii_case(name)) {
                return Err(format!(
                    "copy-headers: {name} is written by the server itself and cannot come from the auth service"
                ));
            }
        }
        Ok(ForwardAuth {
            url: url.to_owned(),
            uri,
            copy,
            timeout,
        })
    }

    /// The engine's check for this setting (the URL resolved now).
    pub(crate) fn check(&self) -> anyhow::Result<proxy::ForwardAuth> {
        let mut check = proxy::ForwardAuth::new(proxy::Upstream::parse(&self.url)?).copy_headers(self.copy.clone());
        if let Some(uri) = &self.uri {
            check = check.uri(uri);
        }
        if let Some(secs) = self.timeout {
            check = check.timeout(std::time::Duration::from_secs(secs));
        }
        Ok(check)
    }
}

/// Asks the service about `req`, holding what `inner` makes of it; the
/// answers the check decides get the route's fields (`finish`): its
/// refusals as another server's answers (`Finish::relayed`: the service's
/// own CORS fields, and those of the route's names, go), an answer held
/// as the route's own, and a proxy's answers from the proxy, which takes
/// them with its request (`proxy::finishing`).
pub(crate) fn guard(check: &proxy::ForwardAuth, finish: &Arc<Finish>, req: &Request<'_>, inner: &dyn Handler) -> Reply {
    let origin = req.header("origin");
    let hook = finish.hook(origin);
    check.check(req, Some(hook), &mut || {
        let mut unused = None;
        let made = basic::holding(|| {
            let (reply, left) = proxy::finishing(finish.hook(origin), || inner.call(req));
            unused = left;
            reply
        });
        match made {
            (_, Some(held)) => Held::Decide(Box::new(move |verdict| held.decide(verdict))),
            // A proxy's answer made now (a cache hit) was finished by it.
            (Reply::Now(resp), None) if unused.is_none() => Held::Reply(Reply::Now(resp)),
            (Reply::Now(resp), None) => Held::Reply(Reply::Now(finish.apply(resp, origin))),
            (other, None) => Held::Reply(other),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked_when_read() {
        let ok = ForwardAuth::new(
            "http://127.0.0.1:9091/verify",
            None,
            vec!["Remote-User".into()],
            Some(3),
        )
        .unwrap();
        assert_eq!(ok.copy, ["Remote-User"]);
        assert!(ForwardAuth::new("unix:/run/auth.sock", Some("/api/verify".into()), vec![], None).is_ok());
        for t in [0, TIMEOUT_MAX + 1] {
            let err = ForwardAuth::new("http://127.0.0.1:9091", None, vec![], Some(t)).unwrap_err();
            assert!(err.contains("timeout"), "{err}");
        }
        for (url, uri, copy, says) in [
            ("ftp://x", None, "A", "url:"),
            ("http://127.0.0.1:9091/verify", Some("/x"), "A", "not in both"),
            ("unix:/run/a.sock", Some("verify"), "A", "uri:"),
            ("http://127.0.0.1:9091", None, "Content-Length", "written by the server"),
            (
                "http://127.0.0.1:9091",
                None,
                "X-Forwarded-For",
                "written by the server",
            ),
            ("http://127.0.0.1:9091", None, "Remote User", "not a field name"),
        ] {
            let err = ForwardAuth::new(url, uri.map(str::to_owned), vec![copy.into()], None).unwrap_err();
            assert!(err.contains(says), "{url} {uri:?} {copy}: {err}");
        }
    }
}
