//! Path patterns of `_headers` and `_redirects`, for callers that hold
//! them as text (the archive stores its `_redirects` patterns so): the
//! matcher is `peregrine::pattern`, the one the engine's router uses, and
//! the substitution is `peregrine_files::conventions`'.

pub use peregrine_files::conventions::substitute;

/// The captures of `pattern` on `path`, or `None` if it does not match
/// (or is not a pattern `peregrine::pattern::Pattern` accepts).
pub fn matches(pattern: &str, path: &str) -> Option<Vec<(String, String)>> {
    peregrine::pattern::Pattern::parse(pattern).ok()?.captures(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_and_capture() {
        let m = |p: &str, s: &str| matches(p, s).map(|c| c.into_iter().map(|(_, v)| v).collect::<Vec<_>>());
        assert_eq!(m("/a/b", "/a/b"), Some(vec![]));
        assert_eq!(m("/a/b", "/a/c"), None);
        assert_eq!(m("/a/*", "/a/b/c"), Some(vec!["b/c".into()]));
        assert_eq!(m("/a/*", "/a/"), Some(vec!["".into()]));
        assert_eq!(m("/a/*", "/b/c"), None);
        assert_eq!(m("/*", "/anything/at/all"), Some(vec!["anything/at/all".into()]));
        assert_eq!(
            m("/blog/:year/:slug", "/blog/2024/hello"),
            Some(vec!["2024".into(), "hello".into()])
        );
        assert_eq!(m("/blog/:year/:slug", "/blog/2024"), None);
        assert_eq!(m("/blog/:year", "/blog/"), None);
        assert_eq!(m("/img*", "/img-1/x.png"), Some(vec!["-1/x.png".into()]));
    }

    #[test]
    fn targets_get_the_captures() {
        let caps = matches("/old/:id/*", "/old/7/a/b").unwrap();
        assert_eq!(substitute("/new/:id/:splat", &caps), "/new/7/a/b");
    }
}
