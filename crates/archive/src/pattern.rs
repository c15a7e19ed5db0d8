//! Path patterns of `_headers` and `_redirects`: literal segments,
//! `:name` placeholders (one segment each) and a `*` splat (the rest of the
//! path, possibly empty). Matching returns the captures; `substitute` puts
//! them into a redirect target (`:splat` for the `*`).

/// The captures of `pattern` on `path`, or `None` if it does not match.
pub fn matches(pattern: &str, path: &str) -> Option<Vec<(String, String)>> {
    let mut caps = Vec::new();
    let mut pat = pattern.split('/');
    let mut segs = path.split('/');
    loop {
        match (pat.next(), segs.next()) {
            (None, None) => return Some(caps),
            (Some(p), seg) if p.ends_with('*') => {
                // `*` or `prefix*`: the rest of the path.
                let prefix = &p[..p.len() - 1];
                let first = seg.unwrap_or_default();
                let first = first.strip_prefix(prefix)?;
                let mut rest = first.to_owned();
                for s in segs.by_ref() {
                    rest.push('/');
                    rest.push_str(s);
                }
                caps.push(("splat".to_owned(), rest));
                return pat.next().is_none().then_some(caps);
            }
            (Some(p), Some(s)) if p.starts_with(':') && !s.is_empty() => caps.push((p[1..].to_owned(), s.to_owned())),
            (Some(p), Some(s)) if p == s => {}
            _ => return None,
        }
    }
}

/// `to` with `:name` replaced by the captures (longest names first, so
/// `:splat` and `:s` do not clash).
pub fn substitute(to: &str, caps: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = caps.iter().collect();
    sorted.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
    let mut out = to.to_owned();
    for (name, value) in sorted {
        out = out.replace(&format!(":{name}"), value);
    }
    out
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
