//! Which paths a file or archive server may answer with ([`Scope`]): the
//! paths its route of a site takes. A server answers some paths with a
//! file of another name (a `_redirects` 200 rewrite's target, a clean
//! URL's `NAME.html`, a directory's index file); when that name is taken
//! by another route of the site, that route's access rules (ip,
//! rate-limit, basic-auth, forward-auth) were never asked, so the server
//! refuses it ([`crossing`]) rather than serve it past them. A site's
//! files are written by content authors the operator may trust less:
//! a `_redirects` line must not switch the operator's rules off (nginx
//! re-matches its locations after `rewrite ... last` and for `index`;
//! Caddy's `rewrite` runs before `basicauth`).
//!
//! Asked only where the name served differs from the request's, and
//! only by a server that has a scope (a site with routes): a request
//! answered by its own path, or a site without routes, never asks.

use peregrine::Response;

/// The paths a server's route takes, as the site's routing decides.
pub trait Scope: Send + Sync {
    /// Whether `key` (a normalised site path, `/docs/index.html`) is
    /// taken by the route this server answers for (or, for a site's root,
    /// by no route).
    fn covers(&self, key: &str) -> bool;
}

/// The answer for a path whose file is another route's: 403, with the
/// access log's reason `forbidden`.
pub fn crossing() -> Response {
    Response::error(403).with_reason(peregrine::Reason::Forbidden)
}
