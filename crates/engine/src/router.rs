//! Routing by method and path pattern: `/users/:id`, `/static/*rest`.
//!
//! Routes are tried in the order they were added; the first whose pattern
//! matches the path and whose method matches wins. A path that matches some
//! pattern but no method gets 405 with `Allow`; `HEAD` is answered by `GET`
//! routes and `OPTIONS` with 204 and `Allow`, unless routes say otherwise.
//! Patterns are matched against the path as sent (percent-encoded), segment
//! by segment. A method the engine does not recognise never gets here: the
//! codec answers it 501 (RFC 9110 §9.1), so 405 means "known, not here".

use crate::handler::{Handler, Reply};
use crate::request::Request;
use crate::response::Response;

/// Most `:name` and `*name` captures in one pattern.
pub const PARAMS_MAX: usize = 8;

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
    segments: Vec<Segment>,
    handler: Box<dyn Handler>,
}

enum Segment {
    Literal(String),
    Param(String),
    Rest(String),
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
    /// not last, or has more than [`PARAMS_MAX`] captures: these are
    /// programming errors, found when the router is built.
    pub fn route(mut self, method: &str, pattern: &str, handler: impl Handler) -> Self {
        assert!(
            pattern.starts_with('/'),
            "route pattern {pattern:?} must start with '/'"
        );
        let segments: Vec<Segment> = pattern[1..]
            .split('/')
            .map(|s| match s.as_bytes().first() {
                Some(b':') => Segment::Param(s[1..].to_owned()),
                Some(b'*') => Segment::Rest(s[1..].to_owned()),
                _ => Segment::Literal(s.to_owned()),
            })
            .collect();
        let n_rest = segments.iter().filter(|s| matches!(s, Segment::Rest(_))).count();
        assert!(
            n_rest == 0 || (n_rest == 1 && matches!(segments.last(), Some(Segment::Rest(_)))),
            "in route pattern {pattern:?}, only the last segment may be *rest"
        );
        let n_params = segments.iter().filter(|s| !matches!(s, Segment::Literal(_))).count();
        assert!(
            n_params <= PARAMS_MAX,
            "route pattern {pattern:?} has more than {PARAMS_MAX} captures"
        );
        self.routes.push(Route {
            method: method.to_owned(),
            segments,
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
                return route.handler.call(&req.with_params(&params[..n]));
            }
            if method == "HEAD" && route.method == "GET" && head_route.is_none() {
                head_route = Some((route, n));
            }
        }
        if let Some((route, _)) = head_route {
            // Captures were overwritten by later candidates: match again.
            let n = route.matches(path, &mut params).unwrap_or(0);
            return route.handler.call(&req.with_params(&params[..n]));
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
        let mut rest = path.strip_prefix('/')?;
        let mut n = 0;
        for (i, segment) in self.segments.iter().enumerate() {
            let last = i + 1 == self.segments.len();
            if let Segment::Rest(name) = segment {
                params[n] = (name, rest);
                return Some(n + 1);
            }
            let (part, tail) = match rest.find('/') {
                Some(slash) => (&rest[..slash], Some(&rest[slash + 1..])),
                None => (rest, None),
            };
            match segment {
                Segment::Literal(lit) if lit == part => {}
                Segment::Param(name) if !part.is_empty() => {
                    params[n] = (name, part);
                    n += 1;
                }
                _ => return None,
            }
            match (tail, last) {
                (None, true) => return Some(n),
                (None, false) | (Some(_), true) => return None,
                (Some(t), false) => rest = t,
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Version;

    fn call(router: &Router, method: &str, target: &str) -> (u16, String, Option<String>) {
        let req = Request::new(
            method,
            target,
            Version::Http11,
            &[],
            None,
            b"",
            "127.0.0.1:1".parse().unwrap(),
        );
        match router.call(&req) {
            Reply::Now(r) => {
                let body = match r.body() {
                    crate::Body::Static(b) => String::from_utf8_lossy(b).into_owned(),
                    crate::Body::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
                    _ => String::new(),
                };
                (r.status(), body, r.header("Allow").map(str::to_owned))
            }
            Reply::Later => panic!("deferred"),
        }
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
