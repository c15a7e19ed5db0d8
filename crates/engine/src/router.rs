//! Routing by method and path pattern: `/users/:id`, `/static/*rest`.
//!
//! Routes are tried in the order they were added; the first whose pattern
//! matches the path and whose method matches wins. A path that matches some
//! pattern but no method gets 405 with `Allow`; `HEAD` is answered by `GET`
//! routes and `OPTIONS` with 204 and `Allow`, unless routes say otherwise.
//! Patterns (`crate::pattern`, the matcher `_redirects` uses too) are
//! matched against the path as sent, segment by segment, so an encoded
//! `%2F` stays inside its segment; captures are then percent-decoded for
//! the handler (`/users/%E2%9C%93` gives `id` = `✓`), and a capture that
//! does not decode to UTF-8 is a 400. A method outside IANA's registry
//! (`PURGE`, a custom token) gets here only for a path with a route for
//! that very method (`Router::route("PURGE", ..)`), or with none at all
//! and a fallback that takes it; elsewhere the engine answers it 501 (RFC
//! 9110 §9.1), so 405 means "known, not here".

use std::borrow::Cow;

use crate::handler::{BodyUse, Handler, Reply};
use crate::pattern::{Pattern, CAPTURES_MAX};
use crate::request::Request;
use crate::response::Response;

/// Most `:name` and `*name` captures in one pattern.
pub const PARAMS_MAX: usize = CAPTURES_MAX;

/// A table of routes; itself a [`Handler`].
///
/// ```
/// use peregrine::{Router, Request, Response};
/// let router = Router::new()
///     .get("/", |_: &Request<'_>| Response::text("home"))
///     .get("/users/:id", |req: &Request<'_>| {
///         Response::text(format!("user {}", req.param("id").unwrap_or("")))
///     })
///     .post("/users", |req: &Request<'_>| Response::text(format!("{} bytes", req.body().len())));
/// ```
#[derive(Default)]
pub struct Router {
    routes: Vec<Route>,
    fallback: Option<Box<dyn Handler>>,
}

struct Route {
    method: String,
    pattern: Pattern,
    handler: Box<dyn Handler>,
}

impl Router {
    /// An empty router: every path is 404.
    pub fn new() -> Self {
        Router::default()
    }

    /// Adds a route for `method` and `pattern`.
    ///
    /// # Panics
    /// If the pattern does not start with `/`, has a `*rest` segment that is
    /// not last, an empty `:` name, or more than [`PARAMS_MAX`] captures:
    /// these are programming errors, found when the router is built.
    pub fn route(mut self, method: &str, pattern: &str, handler: impl Handler) -> Self {
        let parsed = match Pattern::parse(pattern) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        self.routes.push(Route {
            method: method.to_owned(),
            pattern: parsed,
            handler: Box::new(handler),
        });
        self
    }

    /// Adds a `GET` route (which also answers `HEAD`).
    pub fn get(self, pattern: &str, handler: impl Handler) -> Self {
        self.route("GET", pattern, handler)
    }

    /// Adds a `POST` route.
    pub fn post(self, pattern: &str, handler: impl Handler) -> Self {
        self.route("POST", pattern, handler)
    }

    /// Adds a `PUT` route.
    pub fn put(self, pattern: &str, handler: impl Handler) -> Self {
        self.route("PUT", pattern, handler)
    }

    /// Adds a `DELETE` route.
    pub fn delete(self, pattern: &str, handler: impl Handler) -> Self {
        self.route("DELETE", pattern, handler)
    }

    /// Answers requests whose path matches no route (instead of 404).
    pub fn fallback(mut self, handler: impl Handler) -> Self {
        self.fallback = Some(Box::new(handler));
        self
    }
}

impl Handler for Router {
    /// The handler the request goes to decides, except that a `GET` or
    /// `HEAD` route (unless `body::streamed`), a 405, an `OPTIONS` answered
    /// here and a 404 never read a body: they are answered at the head.
    fn body_use(&self, req: &Request<'_>) -> BodyUse {
        let mut params: [(&str, &str); PARAMS_MAX] = [("", ""); PARAMS_MAX];
        let mut path_known = false;
        for route in &self.routes {
            if let Some(n) = route.matches(req.path(), &mut params) {
                path_known = true;
                if route.method == req.method() {
                    let used = route.handler.body_use(&req.with_params(&params[..n]));
                    return match route.method.as_str() {
                        "GET" | "HEAD" if used != BodyUse::Stream => BodyUse::Ignore,
                        _ => used,
                    };
                }
            }
        }
        match &self.fallback {
            Some(fallback) if !path_known => fallback.body_use(req),
            _ => BodyUse::Ignore,
        }
    }

    /// A route for this very method on the request's path (named for it,
    /// its handler is meant for it, a closure included), or, where no
    /// route's pattern takes the path, a fallback that takes it.
    fn takes_unknown_method(&self, req: &Request<'_>) -> bool {
        let mut params: [(&str, &str); PARAMS_MAX] = [("", ""); PARAMS_MAX];
        let mut path_known = false;
        for route in &self.routes {
            if route.matches(req.path(), &mut params).is_some() {
                path_known = true;
                if route.method == req.method() {
                    return true;
                }
            }
        }
        match &self.fallback {
            Some(fallback) if !path_known => fallback.takes_unknown_method(req),
            _ => false,
        }
    }

    fn call(&self, req: &Request<'_>) -> Reply {
        let path = req.path();
        let method = req.method();
        let mut params: [(&str, &str); PARAMS_MAX] = [("", ""); PARAMS_MAX];
        let mut path_known = false;
        let mut head_route = None;
        for route in &self.routes {
            let Some(n) = route.matches(path, &mut params) else {
                continue;
            };
            path_known = true;
            if route.method == method {
                return call_with(route, req, &params[..n]);
            }
            if method == "HEAD" && route.method == "GET" && head_route.is_none() {
                head_route = Some((route, n));
            }
        }
        if let Some((route, _)) = head_route {
            // Captures were overwritten by later candidates: match again.
            let n = route.matches(path, &mut params).unwrap_or(0);
            return call_with(route, req, &params[..n]);
        }
        if !path_known {
            return match &self.fallback {
                Some(h) => h.call(req),
                None => Response::error(404).into(),
            };
        }
        let allow = self.allowed(path);
        if method == "OPTIONS" {
            return Response::new(204).with_header("Allow", allow).into();
        }
        Response::error(405).with_header("Allow", allow).into()
    }
}

impl Router {
    fn allowed(&self, path: &str) -> String {
        let mut scratch = [("", ""); PARAMS_MAX];
        let mut methods: Vec<&str> = Vec::new();
        for route in &self.routes {
            if route.matches(path, &mut scratch).is_some() && !methods.contains(&route.method.as_str()) {
                methods.push(&route.method);
            }
        }
        if methods.contains(&"GET") && !methods.contains(&"HEAD") {
            methods.push("HEAD");
        }
        if !methods.contains(&"OPTIONS") {
            methods.push("OPTIONS");
        }
        methods.join(", ")
    }
}

impl Route {
    /// Matches `path`, writing captures into `params`; returns their number.
    fn matches<'p>(&'p self, path: &'p str, params: &mut [(&'p str, &'p str); PARAMS_MAX]) -> Option<usize> {
        self.pattern.matches(path, params)
    }
}

/// Calls the route's handler with its captures percent-decoded. A capture
/// without `%` is passed as it is, so a warm route allocates nothing.
fn call_with(route: &Route, req: &Request<'_>, raw: &[(&str, &str)]) -> Reply {
    let mut decoded: [Cow<'_, str>; PARAMS_MAX] = Default::default();
    for (slot, (name, value)) in decoded.iter_mut().zip(raw) {
        if !value.contains('%') {
            *slot = Cow::Borrowed(value);
            continue;
        }
        match percent_encoding::percent_decode_str(value).decode_utf8() {
            Ok(v) => *slot = v,
            Err(_) => {
                return Response::new(400)
                    .with_content_type("text/plain; charset=utf-8")
                    .with_body(format!(
                        "400 Bad Request: the path's {name} is not UTF-8 once decoded\n"
                    ))
                    .into()
            }
        }
    }
    let mut params: [(&str, &str); PARAMS_MAX] = [("", ""); PARAMS_MAX];
    for (i, (name, _)) in raw.iter().enumerate() {
        params[i] = (name, &decoded[i]);
    }
    route.handler.call(&req.with_params(&params[..raw.len()]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(router: &Router, method: &str, target: &str) -> (u16, String, Option<String>) {
        let req = Request::bare(method, target);
        match router.call(&req) {
            Reply::Now(r) => {
                let body = match r.body() {
                    crate::Body::Static(b) => String::from_utf8_lossy(b).into_owned(),
                    crate::Body::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
                    _ => String::new(),
                };
                (r.status(), body, r.header("Allow").map(str::to_owned))
            }
            Reply::Later | Reply::Upgrade(_) => panic!("deferred or upgraded"),
        }
    }

    /// A method outside IANA's registry is taken where a route names it,
    /// or by a fallback that takes it where no pattern matches; nowhere
    /// else (the engine answers 501 there).
    #[test]
    fn an_unknown_method_is_taken_only_by_a_route_for_it() {
        struct Any;
        impl Handler for Any {
            fn call(&self, _req: &Request<'_>) -> Reply {
                Response::text("any").into()
            }
            fn takes_unknown_method(&self, _req: &Request<'_>) -> bool {
                true
            }
        }
        let r = router().route("PURGE", "/cache/*key", |_: &Request<'_>| Response::text("purged"));
        assert!(r.takes_unknown_method(&Request::bare("PURGE", "/cache/a")));
        assert_eq!(call(&r, "PURGE", "/cache/a").1, "purged");
        assert!(!r.takes_unknown_method(&Request::bare("BAN", "/cache/a")));
        assert!(!r.takes_unknown_method(&Request::bare("PURGE", "/users/1")));
        assert!(!r.takes_unknown_method(&Request::bare("PURGE", "/nowhere")));
        // The route's Allow names it.
        assert_eq!(call(&r, "GET", "/cache/a").2.as_deref(), Some("PURGE, OPTIONS"));
        let r = router().fallback(Any);
        assert!(r.takes_unknown_method(&Request::bare("PURGE", "/nowhere")));
        assert!(!r.takes_unknown_method(&Request::bare("PURGE", "/users/1")));
        let r = router().fallback(|_: &Request<'_>| Response::text("plain"));
        assert!(!r.takes_unknown_method(&Request::bare("PURGE", "/nowhere")));
    }

    fn router() -> Router {
        Router::new()
            .get("/", |_: &Request<'_>| Response::text("root"))
            .get("/users/:id", |r: &Request<'_>| {
                Response::text(format!("user {}", r.param("id").unwrap()))
            })
            .get("/users/:id/posts/:post", |r: &Request<'_>| {
                Response::text(format!("{}/{}", r.param("id").unwrap(), r.param("post").unwrap()))
            })
            .post("/users", |_: &Request<'_>| Response::text("created"))
            .get("/static/*rest", |r: &Request<'_>| {
                Response::text(format!("file {}", r.param("rest").unwrap()))
            })
    }

    #[test]
    fn routes_match_by_method_and_pattern() {
        let r = router();
        assert_eq!(call(&r, "GET", "/").1, "root");
        assert_eq!(call(&r, "GET", "/users/42").1, "user 42");
        assert_eq!(call(&r, "GET", "/users/42?x=1").1, "user 42");
        assert_eq!(call(&r, "GET", "/users/7/posts/9").1, "7/9");
        assert_eq!(call(&r, "POST", "/users").1, "created");
        assert_eq!(call(&r, "GET", "/static/css/site.css").1, "file css/site.css");
        assert_eq!(call(&r, "GET", "/static/").1, "file ");
        assert_eq!(call(&r, "HEAD", "/users/5").1, "user 5");
    }

    #[test]
    fn unknown_paths_are_404_and_wrong_methods_405_with_allow() {
        let r = router();
        assert_eq!(call(&r, "GET", "/nope").0, 404);
        assert_eq!(call(&r, "GET", "/users").0, 405);
        assert_eq!(call(&r, "GET", "/users/").0, 404);
        assert_eq!(call(&r, "GET", "/users/1/extra").0, 404);
        let (status, _, allow) = call(&r, "DELETE", "/users/1");
        assert_eq!((status, allow.as_deref()), (405, Some("GET, HEAD, OPTIONS")));
        let (status, _, allow) = call(&r, "OPTIONS", "/users");
        assert_eq!((status, allow.as_deref()), (204, Some("POST, OPTIONS")));
    }

    #[test]
    fn params_are_percent_decoded() {
        let r = router();
        assert_eq!(call(&r, "GET", "/users/%E2%9C%93").1, "user \u{2713}");
        assert_eq!(call(&r, "GET", "/users/a%2Fb").1, "user a/b");
        assert_eq!(call(&r, "GET", "/users/a%2Fb/posts/%41").1, "a/b/A");
        assert_eq!(call(&r, "GET", "/static/a%20b/c").1, "file a b/c");
        assert_eq!(call(&r, "GET", "/users/%25").1, "user %");
        let (status, body, _) = call(&r, "GET", "/users/%FF");
        assert_eq!(status, 400);
        assert!(body.contains("id is not UTF-8"), "{body}");
    }

    #[test]
    fn encoded_literals_match_their_route() {
        let r = Router::new().get("/caf\u{e9}", |_: &Request<'_>| Response::text("menu"));
        assert_eq!(call(&r, "GET", "/caf%C3%A9").1, "menu");
        assert_eq!(call(&r, "GET", "/caf%c3%a9").1, "menu");
    }

    #[test]
    fn fallback_answers_unmatched_paths() {
        let r = router().fallback(|_: &Request<'_>| Response::text("spa"));
        assert_eq!(call(&r, "GET", "/anything/else").1, "spa");
    }

    #[test]
    #[should_panic(expected = "only the last segment")]
    fn rest_must_be_last() {
        let _ = Router::new().get("/a/*rest/b", |_: &Request<'_>| Response::text(""));
    }
}
