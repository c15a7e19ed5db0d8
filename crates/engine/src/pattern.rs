//! Path patterns, the one matcher behind [`crate::Router`] and the
//! `_headers` / `_redirects` conventions of `peregrine serve` and `pack`.
//!
//! A pattern is `/`-separated segments, each one of:
//! - a literal (`users`, or empty for a trailing slash): equal to the
//!   path's segment; a segment sent percent-encoded (`caf%C3%A9`) equals
//!   the literal it decodes to (`café`);
//! - `:name`: any non-empty segment, captured as `name`;
//! - a splat, last only: `*name` (the router's form), `*` (captured as
//!   `splat`, Netlify's form) or `prefix*` (the segment must start with
//!   `prefix`; captured as `splat`). It takes the rest of the path, slashes
//!   included, and may be empty: `/a/*` matches `/a/x/y`, `/a/` and `/a`,
//!   as Netlify's `_redirects` do.
//!
//! Matching borrows from the path and the pattern and allocates nothing;
//! captures are as they appear in the path (a router decodes them after,
//! `Router`'s `decode_params`).

/// Most captures in one pattern (`:name` and splats).
pub const CAPTURES_MAX: usize = 8;

/// A parsed path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param(String),
    Splat { prefix: String, name: String },
}

/// Why a pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternError(String);

impl std::fmt::Display for PatternError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PatternError {}

impl Pattern {
    /// Parses a pattern. Refused: one that does not start with `/`, a splat
    /// that is not the last segment, an empty `:` name, or more than
    /// [`CAPTURES_MAX`] captures.
    pub fn parse(pattern: &str) -> Result<Pattern, PatternError> {
        let Some(rest) = pattern.strip_prefix('/') else {
            return Err(PatternError(format!("pattern {pattern:?} must start with '/'")));
        };
        let mut segments = Vec::new();
        for s in rest.split('/') {
            let segment = if let Some(name) = s.strip_prefix(':') {
                if name.is_empty() {
                    return Err(PatternError(format!("pattern {pattern:?} has a ':' without a name")));
                }
                Segment::Param(name.to_owned())
            } else if let Some(name) = s.strip_prefix('*') {
                let name = if name.is_empty() { "splat" } else { name };
                Segment::Splat {
                    prefix: String::new(),
                    name: name.to_owned(),
                }
            } else if let Some(prefix) = s.strip_suffix('*') {
                Segment::Splat {
                    prefix: prefix.to_owned(),
                    name: "splat".to_owned(),
                }
            } else {
                Segment::Literal(s.to_owned())
            };
            if matches!(segments.last(), Some(Segment::Splat { .. })) {
                return Err(PatternError(format!(
                    "in pattern {pattern:?}, only the last segment may be a splat (*)"
                )));
            }
            segments.push(segment);
        }
        let n_captures = segments.iter().filter(|s| !matches!(s, Segment::Literal(_))).count();
        if n_captures > CAPTURES_MAX {
            return Err(PatternError(format!(
                "pattern {pattern:?} has more than {CAPTURES_MAX} captures"
            )));
        }
        Ok(Pattern { segments })
    }

    /// Whether the pattern names one path only (no captures).
    pub fn is_literal(&self) -> bool {
        self.segments.iter().all(|s| matches!(s, Segment::Literal(_)))
    }

    /// Matches `path` (starting with `/`, query excluded), writing the
    /// captures, in pattern order, into `caps`; returns their number.
    pub fn matches<'p>(&'p self, path: &'p str, caps: &mut [(&'p str, &'p str); CAPTURES_MAX]) -> Option<usize> {
        let mut rest = Some(path.strip_prefix('/')?);
        let mut n = 0;
        for segment in &self.segments {
            if let Segment::Splat { prefix, name } = segment {
                // The rest of the path, whatever its slashes; a path that
                // stops just before the splat's segment matches it empty.
                let tail = rest.unwrap_or_default().strip_prefix(prefix.as_str())?;
                caps[n] = (name, tail);
                return Some(n + 1);
            }
            let r = rest?;
            let (part, tail) = match r.find('/') {
                Some(slash) => (&r[..slash], Some(&r[slash + 1..])),
                None => (r, None),
            };
            match segment {
                Segment::Literal(lit) if literal_eq(lit, part) => {}
                Segment::Param(name) if !part.is_empty() => {
                    caps[n] = (name, part);
                    n += 1;
                }
                _ => return None,
            }
            rest = tail;
        }
        rest.is_none().then_some(n)
    }

    /// The captures of `path` as owned pairs, or `None` if it does not
    /// match (for callers off the request's hot path).
    pub fn captures(&self, path: &str) -> Option<Vec<(String, String)>> {
        let mut caps = [("", ""); CAPTURES_MAX];
        let n = self.matches(path, &mut caps)?;
        Some(
            caps[..n]
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }
}

/// A path segment equals a literal as sent or once percent-decoded
/// (compared byte by byte, without allocating).
fn literal_eq(literal: &str, segment: &str) -> bool {
    literal == segment || (segment.contains('%') && percent_encoding::percent_decode_str(segment).eq(literal.bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, path: &str) -> Option<Vec<String>> {
        Pattern::parse(pattern)
            .unwrap()
            .captures(path)
            .map(|c| c.into_iter().map(|(_, v)| v).collect())
    }

    #[test]
    fn literals_params_and_splats_match() {
        let table: &[(&str, &str, Option<&[&str]>)] = &[
            ("/", "/", Some(&[])),
            ("/", "/a", None),
            ("/a/b", "/a/b", Some(&[])),
            ("/a/b", "/a/c", None),
            ("/a/b", "/a/b/", None),
            ("/a/", "/a/", Some(&[])),
            ("/a/", "/a", None),
            ("/a/*", "/a/b/c", Some(&["b/c"])),
            ("/a/*", "/a/", Some(&[""])),
            ("/a/*", "/a", Some(&[""])),
            ("/a/*", "/b/c", None),
            ("/a/*", "/ab", None),
            ("/*", "/anything/at/all", Some(&["anything/at/all"])),
            ("/static/*rest", "/static/css/site.css", Some(&["css/site.css"])),
            ("/blog/:year/:slug", "/blog/2024/hello", Some(&["2024", "hello"])),
            ("/blog/:year/:slug", "/blog/2024", None),
            ("/blog/:year/:slug", "/blog/2024/hello/more", None),
            ("/blog/:year", "/blog/", None),
            ("/img*", "/img-1/x.png", Some(&["-1/x.png"])),
            ("/img*", "/im", None),
            ("/old/:id/*", "/old/7/a/b", Some(&["7", "a/b"])),
            ("/caf\u{e9}", "/caf%C3%A9", Some(&[])),
            ("/caf\u{e9}", "/caf%C3%A8", None),
            ("/a/b", "a/b", None),
        ];
        for (pattern, path, want) in table {
            let want = want.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(m(pattern, path), want, "{pattern} on {path}");
        }
    }

    #[test]
    fn captures_are_named() {
        let p = Pattern::parse("/users/:id/*rest").unwrap();
        let caps = p.captures("/users/7/a/b").unwrap();
        assert_eq!(caps, vec![("id".into(), "7".into()), ("rest".into(), "a/b".into())]);
        let caps = Pattern::parse("/x/*").unwrap().captures("/x/y").unwrap();
        assert_eq!(caps, vec![("splat".into(), "y".into())]);
    }

    #[test]
    fn bad_patterns_are_refused() {
        for bad in ["a/b", "", "/a/*/b", "/a/*rest/b", "/:", "/:a/:b/:c/:d/:e/:f/:g/:h/:i"] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(Pattern::parse("/:a/:b/:c/:d/:e/:f/:g/:h").is_ok());
        assert!(Pattern::parse("/a/b").unwrap().is_literal());
        assert!(!Pattern::parse("/a/:b").unwrap().is_literal());
    }
}
