//! Which route of a site takes a request: the most specific pattern that
//! matches, whatever the order the routes were written in, as nginx picks
//! the longest matching prefix and Caddy sorts its routes by specificity.
//! Written order only breaks ties, so moving a table in the file never
//! changes which route answers.
//!
//! More specific, in this order:
//! 1. an exact path (no `:name`, no splat) before any pattern;
//! 2. a longer literal prefix (the pattern's text before its first
//!    capture): `/assets/img/*` before `/assets/*` before `/*`;
//! 3. a pattern without a splat (a fixed number of segments) before one
//!    with: `/blog/:slug` before `/blog/*`;
//! 4. more segments before fewer;
//! 5. the order written.
//!
//! `resolve` sorts a site's routes so ([`sort`]); [`route_for`] then takes
//! the first that matches. A request no route matches gets the site's
//! root with the site's settings.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::sync::Arc;

use peregrine::pattern::CAPTURES_MAX;
use peregrine_files::path::PathError;

use super::{RouteSpec, SiteSpec};

/// The index in `site.routes` of the route that takes `path` (the
/// request's path, without its query), or `Ok(None)`: the site's root and
/// settings answer. A path is judged as the file and archive servers
/// look it up, normalised: `/x/../admin/` and `/admin//` are `/admin/`,
/// or a route's access rules could be walked around (the pattern itself
/// decodes `%61`). Allocates nothing for a path that is already its own
/// key (`path::is_key`: the common case).
///
/// `Err`: a path that does not normalise (a control byte, a raw
/// backslash, bytes that are not UTF-8 once decoded), which no route may
/// take: matched as sent, `//admin/x%01` would miss `/admin/*` and its
/// rules and go to a `/*` proxy, whose upstream may well merge the
/// slashes and serve `/admin/x` (the file and archive servers refuse such
/// a path themselves). A path that is not absolute (`OPTIONS *`) is the
/// site root's.
pub(crate) fn route_for(site: &SiteSpec, path: &str) -> Result<Option<usize>, PathError> {
    if site.routes.is_empty() {
        return Ok(None);
    }
    let path = match route_key(path) {
        Ok(key) => key,
        Err(PathError::NotAbsolute) => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut caps = [("", ""); CAPTURES_MAX];
    Ok(site
        .routes
        .iter()
        .position(|route| route.pattern.matches(&path, &mut caps).is_some()))
}

/// The paths one route of a site takes (`route`: its index in
/// `site.routes`, `None` for the site's root): what the file and archive
/// servers of that route may answer with when they serve a file of
/// another name than the request's (`peregrine_files::scope`). Given
/// only to the servers of a site with routes.
pub(crate) struct RouteScope {
    pub(crate) site: Arc<SiteSpec>,
    pub(crate) route: Option<usize>,
}

impl peregrine_files::scope::Scope for RouteScope {
    /// The path is this route's, or the site root's (whose answers no
    /// route's rules guard), or another route's that guards nothing (no
    /// `ip` list, `rate-limit`, `basic-auth` nor `forward-auth`: a route
    /// of `headers` or `cors` alone), which a rewrite may serve from as
    /// before; refused only where another route's rules would be gone
    /// around.
    fn covers(&self, key: &str) -> bool {
        match route_for(&self.site, key) {
            Ok(taken) if taken == self.route => true,
            Ok(None) => true,
            Ok(Some(i)) => !guards(&self.site.routes[i]),
            Err(_) => false,
        }
    }
}

/// Whether a route refuses some requests by its own rules.
fn guards(route: &RouteSpec) -> bool {
    route.ip.is_some() || route.rate_limit.is_some() || route.basic_auth.is_some() || route.forward_auth.is_some()
}

/// The form of `path` routes are matched against, and take their
/// captures from: normalised and percent-decoded (`path::normalize`'s
/// key), borrowed when the path is already its own key.
pub(crate) fn route_key(path: &str) -> Result<Cow<'_, str>, PathError> {
    if peregrine_files::path::is_key(path) {
        return Ok(Cow::Borrowed(path));
    }
    Ok(Cow::Owned(peregrine_files::path::normalize(path.as_bytes())?.key()))
}

/// Sorts routes most specific first (stable: ties stay in written order).
pub(crate) fn sort(routes: &mut [RouteSpec]) {
    routes.sort_by_key(|r| Reverse(specificity(&r.path)));
}

/// How specific a pattern is, larger first (see the module's
/// documentation): (exact, literal prefix bytes, no splat, segments).
fn specificity(pattern: &str) -> (bool, usize, bool, usize) {
    let segments: Vec<&str> = pattern.strip_prefix('/').unwrap_or(pattern).split('/').collect();
    let mut prefix = 0;
    let mut exact = true;
    for s in &segments {
        prefix += 1; // its slash
        if s.starts_with(':') {
            exact = false;
            break;
        }
        if let Some(literal) = splat_literal(s) {
            exact = false;
            prefix += literal.len();
            break;
        }
        prefix += s.len();
    }
    let splat = segments.last().is_some_and(|s| splat_literal(s).is_some());
    (exact, prefix, !splat, segments.len())
}

/// The literal part of a splat segment (`img` of `img*`, empty for `*` and
/// `*name`), as `Pattern::parse` reads them; `None` for another segment.
fn splat_literal(segment: &str) -> Option<&str> {
    if segment.starts_with('*') {
        Some("")
    } else {
        segment.strip_suffix('*')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_prefixes_are_measured_up_to_the_first_capture() {
        assert_eq!(specificity("/"), (true, 1, true, 1));
        assert_eq!(specificity("/*"), (false, 1, false, 1));
        assert_eq!(specificity("/assets/*"), (false, 8, false, 2));
        assert_eq!(specificity("/img*"), (false, 4, false, 1));
        assert_eq!(specificity("/blog/:slug"), (false, 6, true, 2));
        assert_eq!(specificity("/blog/*rest"), (false, 6, false, 2));
        assert_eq!(specificity("/a/b"), (true, 4, true, 2));
    }
}
