//! The site conventions `pack` compiles into an archive, and `serve DIR`
//! follows live, so that a directory previews what its archive will serve:
//!
//! - `_headers` (Netlify/Cloudflare): a path pattern line, then indented
//!   `Name: value` lines, added to the responses of matching files;
//! - `_redirects` (Netlify): `FROM TO [STATUS[!]]`; a literal FROM applies
//!   where no file answers, unless forced with `!`, when it shadows the
//!   file; a FROM with `:placeholders` or a splat applies where no file
//!   answers, forced or not;
//! - `_404.html` at the root: the not-found page (404);
//! - `_wildcard.*`: the page for any missing path below its folder (200),
//!   the deepest first.
//!
//! The convention files themselves are never served. Patterns are
//! `peregrine::pattern`, the matcher the engine's router uses.

use std::collections::{BTreeMap, HashMap};

use peregrine::pattern::Pattern;

/// A `_headers` rule: a path pattern and its fields.
pub type HeaderRule = (String, Vec<(String, String)>);

/// Netlify/Cloudflare `_headers`: a path pattern line, then indented
/// `Name: value` lines. `#` starts a comment. Netlify's `Basic-Auth` line
/// (a password for the pattern's paths) is refused, never sent as a
/// field: it is no header, and sending it would publish the password.
pub fn parse_headers(text: &[u8]) -> Result<Vec<HeaderRule>, String> {
    let text = std::str::from_utf8(text).map_err(|_| "not UTF-8".to_owned())?;
    let mut rules: Vec<HeaderRule> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if !line.starts_with([' ', '\t']) {
            if !line.starts_with('/') {
                return Err(format!("line {n}: a path pattern must start with /"));
            }
            let pattern = line.trim();
            Pattern::parse(pattern).map_err(|e| format!("line {n}: {e}"))?;
            rules.push((pattern.to_owned(), Vec::new()));
            continue;
        }
        let Some(rule) = rules.last_mut() else {
            return Err(format!("line {n}: a header before any path pattern"));
        };
        let Some((name, value)) = line.trim().split_once(':') else {
            return Err(format!("line {n}: expected `Name: value`"));
        };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("basic-auth") {
            // Netlify reads this line as a password on the pattern's
            // paths. Sent as a header it would publish the password to
            // every client and leave the pages open.
            return Err(format!(
                "line {n}: `{name}` is Netlify's password protection, which this server does not \
                 implement yet: sent as a response header it would publish the password to every \
                 client and leave the pages open; remove the line"
            ));
        }
        peregrine::HeaderBlock::new(&[(name, value)]).map_err(|e| format!("line {n}: {e}"))?;
        rule.1.push((name.to_owned(), value.to_owned()));
    }
    Ok(rules)
}

/// A `_redirects` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// The path pattern (literal, or with `:placeholders` and a splat).
    pub from: String,
    /// The target; `:name` and `:splat` are replaced by the captures.
    pub to: String,
    /// 301, 302, 307 or 308.
    pub status: u16,
    /// `!`: shadows a file at the same path.
    pub force: bool,
}

impl Redirect {
    /// Whether FROM has captures (matched at lookup) rather than naming
    /// one path.
    pub fn is_pattern(&self) -> bool {
        Pattern::parse(&self.from).is_ok_and(|p| !p.is_literal())
    }
}

/// Netlify `_redirects`: `FROM TO [STATUS[!]]` per line, `#` comments.
pub fn parse_redirects(text: &[u8]) -> Result<Vec<Redirect>, String> {
    let text = std::str::from_utf8(text).map_err(|_| "not UTF-8".to_owned())?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let parts: Vec<&str> = line.split_whitespace().collect();
        let (from, to, status) = match parts.as_slice() {
            [from, to] => (*from, *to, "301"),
            [from, to, status] => (*from, *to, *status),
            _ => return Err(format!("line {n}: expected `FROM TO [STATUS]`")),
        };
        let (status, force) = match status.strip_suffix('!') {
            Some(s) => (s, true),
            None => (status, false),
        };
        let status: u16 = status.parse().map_err(|_| format!("line {n}: bad status {status:?}"))?;
        if !matches!(status, 301 | 302 | 307 | 308) {
            return Err(format!(
                "line {n}: status {status} is not a redirect (301, 302, 307 or 308)"
            ));
        }
        if !from.starts_with('/') {
            return Err(format!("line {n}: FROM must start with /"));
        }
        Pattern::parse(from).map_err(|e| format!("line {n}: {e}"))?;
        peregrine::HeaderBlock::new(&[("Location", to)]).map_err(|e| format!("line {n}: {e}"))?;
        out.push(Redirect {
            from: from.to_owned(),
            to: to.to_owned(),
            status,
            force,
        });
    }
    Ok(out)
}

/// `to` with `:name` replaced by the captures (longest names first, so
/// `:splat` and `:s` do not clash). The captures come from the decoded
/// path, so each is percent-encoded again (`/` kept): the `Location` stays
/// a valid URI reference (RFC 9110 §10.2.2), with no space, `?`, `#` or
/// raw UTF-8 a client would read otherwise.
pub fn substitute(to: &str, caps: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = caps.iter().collect();
    sorted.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
    let mut out = to.to_owned();
    for (name, value) in sorted {
        out = out.replace(&format!(":{name}"), &crate::path::encode(value));
    }
    out
}

/// The fields `_headers` gives the file at `path` (a site path, `/a/b`):
/// every matching rule's, a later rule's value replacing an earlier one's
/// of the same name (case-insensitive), in name order.
pub fn headers_for(rules: &[HeaderRule], path: &str) -> Vec<(String, String)> {
    let mut out: BTreeMap<String, (String, String)> = BTreeMap::new();
    for (pattern, fields) in rules {
        if Pattern::parse(pattern).is_ok_and(|p| p.captures(path).is_some()) {
            for (n, v) in fields {
                out.insert(n.to_ascii_lowercase(), (n.clone(), v.clone()));
            }
        }
    }
    out.into_values().collect()
}

/// The Content-Type of the file `name` with the fields `_headers` gives
/// it: theirs when they set one (it replaces the type guessed from the
/// name, as Netlify's and Cloudflare's `_headers` do, rather than adding a
/// second Content-Type field), else the guess.
pub fn content_type(custom: &[(String, String)], name: &str) -> String {
    custom
        .iter()
        .rev()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        .map_or_else(|| crate::mime::content_type(name), |(_, v)| v.clone())
}

/// Whether a `_headers` field is one the head is built with rather than
/// added to it as given: Content-Type and Cache-Control replace the
/// values the server would have sent.
pub fn is_replacing_field(name: &str) -> bool {
    name.eq_ignore_ascii_case("content-type") || name.eq_ignore_ascii_case("cache-control")
}

/// Whether a site-relative path (`a/b`, no leading `/`) names a
/// convention file, which is never served as itself.
pub fn is_convention_file(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    matches!(rel, "_headers" | "_redirects" | "_404.html") || name.starts_with("_wildcard.")
}

/// A `_redirects` answer (`serve DIR` and archives alike): the status, a
/// `Location`, and a short text body naming the status.
pub fn redirect(status: u16, location: &str) -> peregrine::Response {
    peregrine::Response::new(status)
        .with_content_type("text/plain; charset=utf-8")
        .with_body(format!("{status} {}\n", peregrine::codec::write::reason(status)))
        .with_header("Location", location.to_owned())
}

/// A site's `_headers` and `_redirects`, compiled for `serve DIR`.
#[derive(Default)]
pub struct Conventions {
    headers: Vec<HeaderRule>,
    /// Literal FROMs with `!`: looked up before any file.
    forced: HashMap<String, (u16, String)>,
    /// Literal FROMs without `!`: where no file answers.
    literal: HashMap<String, (u16, String)>,
    /// FROMs with captures, in file order: where no file answers.
    patterns: Vec<(Pattern, u16, String)>,
}

impl Conventions {
    /// Compiles the two files' contents (`None`: the file is absent).
    pub fn new(headers: Option<&[u8]>, redirects: Option<&[u8]>) -> Result<Self, String> {
        let mut c = Conventions::default();
        if let Some(text) = headers {
            c.headers = parse_headers(text).map_err(|e| format!("_headers: {e}"))?;
        }
        if let Some(text) = redirects {
            for r in parse_redirects(text).map_err(|e| format!("_redirects: {e}"))? {
                let pattern = Pattern::parse(&r.from).map_err(|e| format!("_redirects: {e}"))?;
                if !pattern.is_literal() {
                    c.patterns.push((pattern, r.status, r.to));
                    continue;
                }
                // The first rule for a path wins, as in the archive.
                let map = if r.force { &mut c.forced } else { &mut c.literal };
                map.entry(r.from).or_insert((r.status, r.to));
            }
        }
        Ok(c)
    }

    /// The fields `_headers` adds to the file at site path `path`.
    pub fn headers_for(&self, path: &str) -> Vec<(String, String)> {
        if self.headers.is_empty() {
            return Vec::new();
        }
        headers_for(&self.headers, path)
    }

    /// A forced redirect for `key` (a site path), which shadows any file.
    pub fn forced(&self, key: &str) -> Option<(u16, &str)> {
        self.forced.get(key).map(|(s, to)| (*s, to.as_str()))
    }

    /// Whether any redirect is forced (else the lookup is skipped).
    pub fn has_forced(&self) -> bool {
        !self.forced.is_empty()
    }

    /// The redirect for `key`, a path no file answers: a literal rule,
    /// else the first pattern that matches, with its captures put in.
    pub fn redirect_for(&self, key: &str) -> Option<(u16, String)> {
        if let Some((status, to)) = self.literal.get(key) {
            return Some((*status, to.clone()));
        }
        self.patterns
            .iter()
            .find_map(|(p, status, to)| p.captures(key).map(|caps| (*status, substitute(to, &caps))))
    }

    /// Whether the rules change nothing (no file, or empty files).
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty() && self.forced.is_empty() && self.literal.is_empty() && self.patterns.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_get_the_captures() {
        let caps = Pattern::parse("/old/:id/*").unwrap().captures("/old/7/a/b").unwrap();
        assert_eq!(substitute("/new/:id/:splat", &caps), "/new/7/a/b");
    }

    /// Captures are taken from the decoded path: they go into Location
    /// percent-encoded again.
    #[test]
    fn captures_go_into_the_target_percent_encoded() {
        let caps = Pattern::parse("/old/:id/*")
            .unwrap()
            .captures("/old/a b?#/caf\u{e9}/100%")
            .unwrap();
        assert_eq!(
            substitute("/new/:id/:splat", &caps),
            "/new/a%20b%3F%23/caf%C3%A9/100%25"
        );
    }

    #[test]
    fn a_netlify_basic_auth_line_is_refused_never_sent() {
        for line in ["Basic-Auth: alice:s3cret", "basic-auth: alice:s3cret bob:pw"] {
            let text = format!("/private/*\n  X-A: 1\n  {line}\n");
            let e = parse_headers(text.as_bytes()).unwrap_err();
            assert!(e.starts_with("line 3: `"), "{e}");
            assert!(e.contains("password protection") && !e.contains("s3cret"), "{e}");
        }
    }

    #[test]
    fn a_headers_content_type_replaces_the_guess() {
        let custom = vec![("content-type".to_owned(), "text/plain; charset=utf-8".to_owned())];
        assert_eq!(content_type(&custom, "a.html"), "text/plain; charset=utf-8");
        assert_eq!(content_type(&[], "a.html"), crate::mime::content_type("a.html"));
    }

    #[test]
    fn redirects_parse_and_refuse() {
        let r = parse_redirects(b"# c\n/a /b\n/c /d 302!\n/e/:x /f/:x 307 # trailing\n").unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].status, r[0].force, r[0].is_pattern()), (301, false, false));
        assert_eq!((r[1].status, r[1].force), (302, true));
        assert!(r[2].is_pattern());
        refused(
            parse_redirects,
            &[
                b"/a",
                b"a /b",
                b"/a /b 200",
                b"/a /b x",
                b"/a/*/b /c",
                b"/a /b\r\nc 301",
            ],
        );
    }

    /// Every input of `bad` is refused by `parse`.
    fn refused<T>(parse: impl Fn(&[u8]) -> Result<T, String>, bad: &[&[u8]]) {
        for bad in bad {
            assert!(parse(bad).is_err(), "{:?} accepted", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn headers_parse_merge_and_refuse() {
        let rules = parse_headers(b"/*\n  X-A: 1\n  Cache-Control: no-cache\n/a/*\n  x-a: 2\n").unwrap();
        assert_eq!(
            headers_for(&rules, "/a/b"),
            vec![("Cache-Control".into(), "no-cache".into()), ("x-a".into(), "2".into())]
        );
        assert_eq!(headers_for(&rules, "/b").len(), 2);
        refused(
            parse_headers,
            &[
                b"  X: 1\n",
                b"a\n",
                b"/a\n  nocolon\n",
                b"/a/*/b\n  X: 1\n",
                b"/\n  X: a\x01\n",
            ],
        );
    }

    #[test]
    fn compiled_redirects_answer_in_the_archive_order() {
        let c = Conventions::new(
            None,
            Some(b"/old /new\n/old /other\n/f /g 302!\n/blog/:y/* /posts/:y/:splat 308\n/blog/x /lit\n"),
        )
        .unwrap();
        assert_eq!(c.redirect_for("/old"), Some((301, "/new".into())));
        assert_eq!(c.forced("/f"), Some((302, "/g")));
        assert_eq!(c.forced("/old"), None);
        assert_eq!(c.redirect_for("/blog/2024/a/b"), Some((308, "/posts/2024/a/b".into())));
        assert_eq!(c.redirect_for("/blog/x"), Some((301, "/lit".into())));
        assert_eq!(c.redirect_for("/nothing"), None);
    }

    #[test]
    fn convention_files_are_recognised() {
        for yes in [
            "_headers",
            "_redirects",
            "_404.html",
            "_wildcard.html",
            "a/b/_wildcard.txt",
        ] {
            assert!(is_convention_file(yes), "{yes}");
        }
        for no in [
            "a/_headers",
            "a/_404.html",
            "_wildcard",
            "x_wildcard.html",
            "index.html",
        ] {
            assert!(!is_convention_file(no), "{no}");
        }
    }
}
