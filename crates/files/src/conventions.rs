//! The site conventions `pack` compiles into an archive, and `serve DIR`
//! follows live, so that a directory previews what its archive will serve:
//!
//! - `_headers` (Netlify/Cloudflare): a path pattern line, then indented
//!   `Name: value` lines, added to the responses of matching files;
//! - `_redirects` (Netlify): `FROM [QUERY=VALUE ...] TO [STATUS[!]]`;
//!   a rule applies where no file answers, unless forced with `!`, when it
//!   shadows the file (Netlify's shadowing). Statuses 301, 302, 307 and
//!   308 redirect; 200 rewrites (the target, a path on the same site, is
//!   served in its place); 404 serves the target with status 404. Query
//!   conditions (`id=:id`) must all be present for the rule to apply, and
//!   capture as `:placeholders` do. A target that begins with `//` or `/\`
//!   once the captures are put in (another host to a browser) is a 400;
//! - `_wildcard.*`: the page for any missing path below its folder (200),
//!   the deepest first;
//! - `404.html` in any folder, and `_404.html` at the root: the not-found
//!   page (404) for missing paths below its folder, the deepest first; at
//!   the root `_404.html` wins over `404.html` (it is the explicit name, and
//!   `404.html` stays an ordinary page there too);
//! - clean URLs ([`CleanUrls`]): `/about` serves `about.html`.
//!
//! The convention files themselves are never served. Patterns are
//! `peregrine::pattern`, the matcher the engine's router uses.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use peregrine::pattern::Pattern;

use crate::auth::{self, AuthRule, Secret, Users};
use crate::proxy_rules::ProxyAllow;

/// A `_headers` rule: a path pattern and its fields.
pub type HeaderRule = (String, Vec<(String, String)>);

/// A `_headers` `Basic-Auth` line: its pattern, and its users as written
/// (plain passwords or hashes; [`crate::auth::seal`] hashes the plain).
pub type CredentialRule = (String, Vec<(String, Secret)>);

/// A `_headers` file read: the fields by pattern, and the patterns
/// Netlify's `Basic-Auth` lines protect.
#[derive(Debug, Default)]
pub struct HeadersFile {
    /// Fields added to the answers of matching paths, in file order.
    pub fields: Vec<HeaderRule>,
    /// Protected patterns, in file order (the last that matches decides).
    pub auth: Vec<CredentialRule>,
}

impl HeadersFile {
    /// The protected patterns with their plain passwords hashed
    /// ([`crate::auth::seal`]): what `serve DIR` checks and `pack` stores.
    pub fn sealed_auth(&self) -> Vec<AuthRule> {
        self.auth
            .iter()
            .map(|(pattern, creds)| {
                AuthRule::new(pattern, auth::seal(creds.clone())).expect("the pattern was checked when read")
            })
            .collect()
    }

    /// Patterns a `Basic-Auth` line protects whose fields say
    /// `Cache-Control: public` (from any rule that matches the pattern's
    /// own text): `public` is dropped from their answers, and the operator
    /// is told at start.
    pub fn public_but_protected(&self) -> Vec<String> {
        self.auth
            .iter()
            .filter(|(pattern, _)| {
                headers_for(&self.fields, pattern)
                    .iter()
                    .any(|(n, v)| n.eq_ignore_ascii_case("cache-control") && auth::says_public(v))
            })
            .map(|(p, _)| p.clone())
            .collect()
    }
}

/// Netlify/Cloudflare `_headers`: a path pattern line, then indented
/// `Name: value` lines. `#` starts a comment. Netlify's `Basic-Auth` line
/// (`Basic-Auth: alice:pw bob:pw2`, users separated by spaces) protects
/// the pattern's paths with those users' passwords; it is never sent as a
/// field (that would publish the password). One per pattern line. Errors
/// name lines and users, never a password.
pub fn parse_headers(text: &[u8]) -> Result<HeadersFile, String> {
    let text = std::str::from_utf8(text).map_err(|_| "not UTF-8".to_owned())?;
    let mut out = HeadersFile::default();
    let mut protected_at: Option<usize> = None;
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
            out.fields.push((pattern.to_owned(), Vec::new()));
            protected_at = None;
            continue;
        }
        let Some(rule) = out.fields.last_mut() else {
            return Err(format!("line {n}: a header before any path pattern"));
        };
        let Some((name, value)) = line.trim().split_once(':') else {
            return Err(format!("line {n}: expected `Name: value`"));
        };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("basic-auth") {
            if let Some(first) = protected_at {
                return Err(format!(
                    "line {n}: a second `{name}` for {} (the first is on line {first}): put every user on one line",
                    rule.0
                ));
            }
            let creds = auth::parse_credentials(value, true).map_err(|e| format!("line {n}: `{name}`: {e}"))?;
            // A pattern protected again further down: the later rule
            // decides (the last that matches), so the earlier goes.
            out.auth.retain(|(p, _)| *p != rule.0);
            out.auth.push((rule.0.clone(), creds));
            protected_at = Some(n);
            continue;
        }
        if is_file_field(name) {
            return Err(format!("line {n}: header field {name} is written by the file server"));
        }
        peregrine::HeaderBlock::new(&[(name, value)]).map_err(|e| format!("line {n}: {e}"))?;
        rule.1.push((name.to_owned(), value.to_owned()));
    }
    Ok(out)
}

/// A `_redirects` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// The path pattern (literal, or with `:placeholders` and a splat).
    pub from: String,
    /// Query conditions, in order: `(name, value)`, the value a literal
    /// or a `:placeholder` that captures it.
    pub query: Vec<(String, String)>,
    /// The target; `:name` and `:splat` are replaced by the captures.
    pub to: String,
    /// 301, 302, 307 or 308 (redirects), 200 (rewrite) or 404.
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

    /// The rule as one string, `FROM` then `?name=value&...` for its
    /// query conditions: how an archive stores a rule matched in order
    /// ([`split_rule_text`] reads it back). FROM holds no `?`.
    pub fn text(&self) -> String {
        let mut out = self.from.clone();
        for (i, (n, v)) in self.query.iter().enumerate() {
            out.push(if i == 0 { '?' } else { '&' });
            out.push_str(n);
            out.push('=');
            out.push_str(v);
        }
        out
    }
}

/// Which rules are matched in file order at lookup ("ordered") rather
/// than found by their path: those with captures or query conditions, and
/// a literal rule for a path an earlier ordered rule names (so that
/// `/store id=:id /blog/:id` before `/store /shop` is tried first, as
/// Netlify's first match wins). Both servers compile rules with it.
pub fn ordered(rules: &[Redirect]) -> Vec<bool> {
    let mut conditioned: Vec<&str> = Vec::new();
    rules
        .iter()
        .map(|r| {
            if !r.query.is_empty() {
                conditioned.push(&r.from);
            }
            r.is_pattern() || !r.query.is_empty() || conditioned.contains(&r.from.as_str())
        })
        .collect()
}

/// [`Redirect::text`] read back: the path pattern and the conditions.
pub fn split_rule_text(text: &str) -> (&str, Vec<(String, String)>) {
    match text.split_once('?') {
        None => (text, Vec::new()),
        Some((from, q)) => (
            from,
            q.split('&')
                .filter_map(|c| c.split_once('='))
                .map(|(n, v)| (n.to_owned(), v.to_owned()))
                .collect(),
        ),
    }
}

/// The captures of an ordered rule (`from`, `query`) for a site path and
/// the request's raw query, or `None` when it does not apply: the path
/// must match and every condition must name a parameter the query holds
/// (its value percent-decoded; a literal condition must equal it, a
/// `:name` captures it). Parameters the rule does not name are ignored.
pub fn rule_captures(
    from: &Pattern,
    query: &[(String, String)],
    key: &str,
    raw_query: Option<&str>,
) -> Option<Vec<(String, String)>> {
    let mut caps = from.captures(key)?;
    for (name, want) in query {
        let value = raw_query?.split('&').find_map(|pair| {
            let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(n) == *name).then(|| decode(v))
        })?;
        match want.strip_prefix(':') {
            Some(cap) => caps.push((cap.to_owned(), value)),
            None if *want == value => {}
            None => return None,
        }
    }
    Some(caps)
}

/// Percent-decodes a query name or value (`+` stays: `_redirects`
/// compares what the URL says, not a form's encoding).
fn decode(s: &str) -> String {
    String::from_utf8_lossy(&peregrine::percent_decode(s.as_bytes())).into_owned()
}

/// What a rule that applies answers, its captures put in the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleAnswer {
    /// A redirect (301, 302, 307, 308) to this `Location`.
    Redirect(u16, String),
    /// 200: the file at this site path is served in the request's place.
    Rewrite(String),
    /// 404: the file at this site path is served with status 404.
    NotFound(String),
    /// The target begins with `//` or `/\`, which a browser reads as
    /// another host: answered 400, never sent (no open redirect).
    Refused,
    /// 200 to a URL (a proxy rule the operator's list let through): the
    /// request goes there (`ProxyAllow::forward`), its captures put in.
    Proxy(String),
}

impl RuleAnswer {
    /// The answer of a rule with `status` whose target, captures put in,
    /// is `to`. A rewrite's or 404's target loses any query (it names a
    /// file).
    pub fn new(status: u16, to: String) -> RuleAnswer {
        if to.starts_with("//") || to.starts_with("/\\") {
            return RuleAnswer::Refused;
        }
        if status == 200 && !to.starts_with('/') {
            return RuleAnswer::Proxy(to);
        }
        match status {
            200 | 404 => {
                let path = to.split(['?', '#']).next().unwrap_or_default().to_owned();
                if status == 200 {
                    RuleAnswer::Rewrite(path)
                } else {
                    RuleAnswer::NotFound(path)
                }
            }
            _ => RuleAnswer::Redirect(status, to),
        }
    }
}

/// The 400 a refused target gets, naming why.
pub fn refused_target() -> peregrine::Response {
    crate::reply::bad_request("a _redirects target beginning with // or /\\ would send the client to another host")
}

/// The answer of a proxy rule under a `_headers` `Basic-Auth` pattern: a
/// 500 and a line in the error log. The gate takes an answer made before
/// the password is proven and sends it after; a proxied request would be
/// sent before (as `basic-auth` on a proxy route is refused).
pub fn gated_proxy_rule(url: &str) -> peregrine::Response {
    peregrine::log::warn(format_args!(
        "_redirects: a proxy rule to {url} under a _headers Basic-Auth pattern is not followed: the request \
         would go upstream before the password is checked"
    ));
    peregrine::Response::error(500)
}

/// Netlify `_redirects`: `FROM [NAME=VALUE ...] TO [STATUS[!]]` per line,
/// `#` comments. Netlify's other conditions (`Country=`, `Language=`,
/// `Role=`, after the status) are refused, naming the line, rather than
/// ignored; so is every proxy rule (200 to a URL), no origin being
/// allowed here ([`parse_redirects_allowing`] takes the operator's list).
pub fn parse_redirects(text: &[u8]) -> Result<Vec<Redirect>, String> {
    parse_redirects_allowing(text, &ProxyAllow::default())
}

/// [`parse_redirects`], a proxy rule (200 to a URL) taken when `allow`
/// lets it through ([`ProxyAllow::refusal`]), else refused naming why.
pub fn parse_redirects_allowing(text: &[u8], allow: &ProxyAllow) -> Result<Vec<Redirect>, String> {
    let text = std::str::from_utf8(text).map_err(|_| "not UTF-8".to_owned())?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let mut parts: Vec<&str> = line.split_whitespace().collect();
        let from = parts.remove(0);
        // Query conditions come between FROM and TO: `name=value`, where
        // a target is a path or a URL (neither holds `=` before a `/`).
        let mut query = Vec::new();
        while parts.len() > 1 && !parts[0].starts_with('/') && !parts[0].contains("://") {
            let Some((name, value)) = parts[0].split_once('=') else {
                break;
            };
            if name.is_empty() {
                return Err(format!("line {n}: a query condition needs a name: {:?}", parts[0]));
            }
            query.push((name.to_owned(), value.to_owned()));
            parts.remove(0);
        }
        let (to, status) = match parts.as_slice() {
            [to] => (*to, "301"),
            [to, status] => (*to, *status),
            [_, _, rest @ ..] => {
                return Err(format!(
                    "line {n}: {:?}: conditions after the status (Netlify's Country, Language, Role) \
                     are not supported",
                    rest.join(" ")
                ))
            }
            [] => return Err(format!("line {n}: expected `FROM [NAME=VALUE ...] TO [STATUS]`")),
        };
        let (status, force) = match status.strip_suffix('!') {
            Some(s) => (s, true),
            None => (status, false),
        };
        let status: u16 = status.parse().map_err(|_| format!("line {n}: bad status {status:?}"))?;
        if !matches!(status, 200 | 301 | 302 | 307 | 308 | 404) {
            return Err(format!(
                "line {n}: status {status} is not one _redirects takes (301, 302, 307 or 308 to \
                 redirect, 200 to rewrite, 404)"
            ));
        }
        if status == 200 && !to.starts_with('/') {
            // Netlify's proxy rules: the server-side request forgery door,
            // since site files are built from content anyone may edit.
            if let Some(why) = allow.refusal(to) {
                return Err(format!("line {n}: {line:?}: refused: {why}"));
            }
        }
        if status == 404 && !to.starts_with('/') {
            return Err(format!(
                "line {n}: a 404 rule's target must be a path on this site (starting with /)"
            ));
        }
        if !from.starts_with('/') {
            return Err(format!("line {n}: FROM must start with /"));
        }
        if from.contains('?') {
            return Err(format!(
                "line {n}: FROM holds `?`: write query conditions apart (`/store id=:id /blog/:id`)"
            ));
        }
        Pattern::parse(from).map_err(|e| format!("line {n}: {e}"))?;
        peregrine::HeaderBlock::new(&[("Location", to)]).map_err(|e| format!("line {n}: {e}"))?;
        out.push(Redirect {
            from: from.to_owned(),
            query,
            to: to.to_owned(),
            status,
            force,
        });
    }
    Ok(out)
}

/// Why a `_redirects` rule with status 200 whose target is not a path
/// (Netlify's proxy rules) is refused by a server that allows no origin
/// (`ProxyAllow::refusal` with an empty list).
pub fn proxy_rule_refusal(to: &str) -> String {
    ProxyAllow::default().refusal(to).unwrap_or_default()
}

/// [`substitute`] for a rule of `status`: a proxy rule's captures go into
/// its URL's path and query only, so that none can change its origin
/// (`https://api.example.com/:splat` stays on `api.example.com`).
pub fn substitute_rule(status: u16, to: &str, caps: &[(String, String)]) -> String {
    match (status, crate::proxy_rules::path_start(to)) {
        (200, Some(at)) => format!("{}{}", &to[..at], substitute(&to[at..], caps)),
        _ => substitute(to, caps),
    }
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

/// Whether a `_headers` field is one the file server writes from the file
/// and the request, and `_headers` may not set: each is a singleton (RFC
/// 9110 §5.3), and one added beside the server's own gave a 206 two
/// `Content-Range`s and two `ETag`s (review finding). Refused rather than
/// replacing ours: a validator, a range or a coding that does not describe
/// the bytes sent breaks caches and resumed downloads (`Accept-Ranges:
/// none` would not stop ranges being served; a `Content-Encoding` would
/// not make a file compressed).
pub fn is_file_field(name: &str) -> bool {
    [
        "etag",
        "last-modified",
        "content-range",
        "accept-ranges",
        "content-encoding",
    ]
    .iter()
    .any(|f| name.eq_ignore_ascii_case(f))
}

/// Whether a `_headers` field goes on a 304 too: RFC 9110 §15.4.5, "the
/// server generating a 304 response MUST generate any of the following
/// header fields that would have been sent in a 200 (OK) response to the
/// same request: Content-Location, Date, ETag, and Vary; Cache-Control and
/// Expires" (Date and ETag are the server's; Cache-Control replaces).
pub fn is_304_field(name: &str) -> bool {
    ["expires", "content-location", "vary"]
        .iter()
        .any(|f| name.eq_ignore_ascii_case(f))
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

/// Clean URLs: how a page `about.html` is reached (Cloudflare Pages',
/// GitHub Pages' and Netlify's "pretty URLs"). `serve DIR` and `pack`
/// take the same setting, so that a directory answers as its archive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CleanUrls {
    /// Only the file's own name: `/about` is missing.
    Off,
    /// `/about` serves `about.html` where no file or directory index
    /// answers `/about` itself (a directory `about/` does not: with both,
    /// `/about` serves `about.html` and `/about/` the directory's index);
    /// `/about.html` serves it too (GitHub Pages).
    #[default]
    On,
    /// As `On`, and the clean form is canonical: `/about.html` answers 301
    /// to `/about`, and `/about/index.html` 301 to `/about/` (Cloudflare
    /// Pages, which says 308; the issue asks for 301), the query kept.
    Redirect,
}

impl std::str::FromStr for CleanUrls {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(CleanUrls::Off),
            "on" => Ok(CleanUrls::On),
            "redirect" => Ok(CleanUrls::Redirect),
            _ => Err(format!("{s:?}: expected off, on or redirect")),
        }
    }
}

/// A compiled ordered rule: path pattern, query conditions, status, target.
type OrderedRule = (Pattern, Vec<(String, String)>, u16, String);

/// A site's `_headers` and `_redirects`, compiled for `serve DIR`.
#[derive(Default)]
pub struct Conventions {
    headers: Vec<HeaderRule>,
    /// `Basic-Auth` rules, plain passwords hashed (`HeadersFile::sealed_auth`).
    auth: Vec<AuthRule>,
    /// Protected patterns whose `_headers` fields say `public`.
    public_but_protected: Vec<String>,
    /// Literal FROMs with `!`: looked up before any file.
    forced: HashMap<String, (u16, String)>,
    /// Ordered rules with `!`, in file order: tried before any file.
    forced_ordered: Vec<OrderedRule>,
    /// Literal FROMs without `!`: where no file answers.
    literal: HashMap<String, (u16, String)>,
    /// Ordered rules without `!` ([`ordered`]), in file order: where no
    /// file answers.
    patterns: Vec<OrderedRule>,
    /// The rules as parsed, for [`find_redirect_loop`].
    rules: Vec<Redirect>,
}

impl Conventions {
    /// Compiles the two files' contents (`None`: the file is absent).
    pub fn new(headers: Option<&[u8]>, redirects: Option<&[u8]>) -> Result<Self, String> {
        Conventions::allowing(headers, redirects, &ProxyAllow::default())
    }

    /// [`Conventions::new`], the proxy rules `allow` lets through taken.
    pub fn allowing(headers: Option<&[u8]>, redirects: Option<&[u8]>, allow: &ProxyAllow) -> Result<Self, String> {
        let mut c = Conventions::default();
        if let Some(text) = headers {
            let file = parse_headers(text).map_err(|e| format!("_headers: {e}"))?;
            c.auth = file.sealed_auth();
            c.public_but_protected = file.public_but_protected();
            c.headers = file.fields;
        }
        if let Some(text) = redirects {
            let rules = parse_redirects_allowing(text, allow).map_err(|e| format!("_redirects: {e}"))?;
            for (r, is_ordered) in rules.iter().zip(ordered(&rules)) {
                let pattern = Pattern::parse(&r.from).map_err(|e| format!("_redirects: {e}"))?;
                if is_ordered {
                    let list = if r.force {
                        &mut c.forced_ordered
                    } else {
                        &mut c.patterns
                    };
                    list.push((pattern, r.query.clone(), r.status, r.to.clone()));
                    continue;
                }
                // The first rule for a path wins, as in the archive.
                let map = if r.force { &mut c.forced } else { &mut c.literal };
                map.entry(r.from.clone()).or_insert((r.status, r.to.clone()));
            }
            c.rules = rules;
        }
        Ok(c)
    }

    /// The rules of `_redirects`, as parsed.
    pub fn redirects(&self) -> &[Redirect] {
        &self.rules
    }

    /// The fields `_headers` adds to the file at site path `path`.
    pub fn headers_for(&self, path: &str) -> Vec<(String, String)> {
        if self.headers.is_empty() {
            return Vec::new();
        }
        headers_for(&self.headers, path)
    }

    /// A forced rule for `key` (a site path) and the request's query,
    /// which shadows any file: a literal rule, else the first ordered one
    /// that applies.
    pub fn forced(&self, key: &str, query: Option<&str>) -> Option<RuleAnswer> {
        if let Some((status, to)) = self.forced.get(key) {
            return Some(RuleAnswer::new(*status, to.clone()));
        }
        first_applying(&self.forced_ordered, key, query)
    }

    /// Whether `_headers` protects any path (else no path is looked at).
    pub fn has_auth(&self) -> bool {
        !self.auth.is_empty()
    }

    /// The users who may read `key` (a normalised site path), if a
    /// `Basic-Auth` rule protects it.
    pub fn auth_for(&self, key: &str) -> Option<&Arc<Users>> {
        auth::auth_for(&self.auth, key)
    }

    /// The `Basic-Auth` rules.
    pub fn auth_rules(&self) -> &[AuthRule] {
        &self.auth
    }

    /// Protected patterns whose `_headers` fields say `Cache-Control:
    /// public` (dropped from their answers).
    pub fn public_but_protected(&self) -> &[String] {
        &self.public_but_protected
    }

    /// Whether any rule is forced (else the lookup is skipped).
    pub fn has_forced(&self) -> bool {
        !self.forced.is_empty() || !self.forced_ordered.is_empty()
    }

    /// The rule for `key`, a path no file answers: a literal rule, else
    /// the first ordered one that applies, with its captures put in.
    pub fn redirect_for(&self, key: &str, query: Option<&str>) -> Option<RuleAnswer> {
        if let Some((status, to)) = self.literal.get(key) {
            return Some(RuleAnswer::new(*status, to.clone()));
        }
        first_applying(&self.patterns, key, query)
    }

    /// Whether the rules change nothing (no file, or empty files).
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty() && self.rules.is_empty()
    }
}

/// The first of `rules` that applies to `key` and `query`, its captures
/// put in its target.
fn first_applying(rules: &[OrderedRule], key: &str, query: Option<&str>) -> Option<RuleAnswer> {
    rules.iter().find_map(|(p, conds, status, to)| {
        rule_captures(p, conds, key, query).map(|caps| RuleAnswer::new(*status, substitute_rule(*status, to, &caps)))
    })
}

/// Redirects at most followed when looking for a loop: a chain longer
/// than this is reported as one (browsers give up after 20).
const REDIRECT_CHAIN_MAX: usize = 20;

/// A redirect loop between the `_redirects` rules and the server's own
/// 301s (a directory's `/dir` → `/dir/`, clean URLs' canonical forms), if
/// there is one: the paths visited, the first repeated at the end. Only
/// rules whose FROM names one path and that have no query condition are
/// followed from, to targets that are paths on the site. `own` is the
/// server's own redirect of a path; `answers` whether a file answers it
/// (then a rule without `!` does not apply). `pack`, `serve DIR` and
/// `check-config` refuse a site with one.
pub fn find_redirect_loop(
    rules: &[Redirect],
    own: &dyn Fn(&str) -> Option<String>,
    answers: &dyn Fn(&str) -> bool,
) -> Option<Vec<String>> {
    let literal: Vec<&Redirect> = rules
        .iter()
        .zip(ordered(rules))
        .filter(|(r, o)| !o && matches!(r.status, 301 | 302 | 307 | 308))
        .map(|(r, _)| r)
        .collect();
    // The first rule for a path wins, forced ones before any file.
    let rule_at = |path: &str| -> Option<&str> {
        let forced = literal.iter().find(|r| r.force && r.from == path);
        let any = forced.or_else(|| literal.iter().find(|r| !r.force && r.from == path && !answers(path)));
        any.map(|r| r.to.as_str())
    };
    let step = |path: &str| -> Option<String> {
        let to = rule_at(path).map(str::to_owned).or_else(|| own(path))?;
        // Only paths on this site (not `//host`, not a URL), query dropped.
        let to = to.split(['?', '#']).next().unwrap_or_default();
        (to.starts_with('/') && !to.starts_with("//")).then(|| to.to_owned())
    };
    for r in &literal {
        let mut seen = vec![r.from.clone()];
        let mut at = r.from.clone();
        while let Some(next) = step(&at) {
            let repeated = seen.contains(&next);
            seen.push(next.clone());
            if repeated || seen.len() > REDIRECT_CHAIN_MAX {
                return Some(seen);
            }
            at = next;
        }
    }
    None
}

/// A loop [`find_redirect_loop`] found, as an error says it.
pub fn loop_message(paths: &[String]) -> String {
    format!(
        "_redirects: a redirect loop ({}): a client would never get an answer",
        paths.join(" -> ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_rules_are_refused_naming_why() {
        for (to, why) in [
            ("http://127.0.0.1:9000/x", "loopback"),
            ("http://[::1]/x", "loopback"),
            ("http://localhost/x", "loopback"),
            ("http://api.localhost./x", "loopback"),
            ("http://169.254.169.254/latest/meta-data/", "metadata"),
            ("http://[fd00:ec2::254]/latest", "metadata"),
            ("http://[::ffff:169.254.169.254]/", "metadata"),
            ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
            ("http://169.254.1.1/", "link-local"),
            ("http://[fe80::1]/", "link-local"),
            ("http://0.0.0.0:80/", "unspecified"),
            ("http://2130706433/", "not a host name"),
            ("http://user@127.0.0.1/", "no user"),
            ("unix:/run/app.sock", "unix:"),
            ("https://api.example.com/v1/:splat", "another origin (api.example.com)"),
            ("ftp://x/", "neither a path"),
        ] {
            let why_now = proxy_rule_refusal(to);
            assert!(why_now.contains(why), "{to}: {why_now}");
        }
        let err = parse_redirects(b"/api/* http://169.254.169.254/:splat 200\n").unwrap_err();
        assert!(
            err.contains("line 1: \"/api/* http://169.254.169.254/:splat 200\": refused")
                && err.contains("cloud metadata"),
            "{err}"
        );
    }

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

    /// Netlify's `Basic-Auth` line protects its pattern and is never a
    /// field; users are separated by spaces; errors name the line, never
    /// the password.
    #[test]
    fn a_netlify_basic_auth_line_protects_its_pattern_and_is_never_a_field() {
        let text =
            "/private/*\n  X-A: 1\n  basic-auth: alice:s3cret bob:pw\n  Cache-Control: public\n/other\n  X-B: 2\n";
        let file = parse_headers(text.as_bytes()).unwrap();
        assert_eq!(file.fields.len(), 2);
        assert!(file
            .fields
            .iter()
            .all(|(_, f)| f.iter().all(|(n, _)| !n.eq_ignore_ascii_case("basic-auth"))));
        assert_eq!(file.auth.len(), 1);
        assert_eq!(file.auth[0].0, "/private/*");
        assert_eq!(file.auth[0].1.len(), 2);
        assert_eq!(file.public_but_protected(), vec!["/private/*".to_owned()]);
        for (bad, why) in [
            (
                "/a\n  Basic-Auth: alice\n",
                "line 2: `Basic-Auth`: expected user:password",
            ),
            (
                "/a\n  Basic-Auth: alice:s3cret\n  Basic-Auth: bob:s3cret\n",
                "line 3: a second",
            ),
            (
                "/a\n  Basic-Auth: alice:s3cret alice:s3cret2\n",
                "\"alice\" is given twice",
            ),
        ] {
            let e = parse_headers(bad.as_bytes()).unwrap_err();
            assert!(e.contains(why), "{e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
        let c = Conventions::new(Some(text.as_bytes()), None).unwrap();
        assert!(c.has_auth());
        let users = c.auth_for("/private/x").unwrap();
        assert!(users.hash_of("alice").unwrap().verify(b"s3cret"));
        assert!(c.auth_for("/other").is_none());
        // Its fields are still the pattern's, Basic-Auth not among them.
        assert!(c.headers_for("/private/x").iter().all(|(n, _)| n != "basic-auth"));
    }

    #[test]
    fn a_headers_content_type_replaces_the_guess() {
        let custom = vec![("content-type".to_owned(), "text/plain; charset=utf-8".to_owned())];
        assert_eq!(content_type(&custom, "a.html"), "text/plain; charset=utf-8");
        assert_eq!(content_type(&[], "a.html"), crate::mime::content_type("a.html"));
    }

    #[test]
    fn redirects_parse_and_refuse() {
        let r = parse_redirects(
            b"# c\n/a /b\n/c /d 302!\n/e/:x /f/:x 307 # trailing\n/app/* /app/index.html 200\n\
              /store id=:id  /blog/:id  301\n/gone /404.html 404\n",
        )
        .unwrap();
        assert_eq!(r.len(), 6);
        assert_eq!((r[0].status, r[0].force, r[0].is_pattern()), (301, false, false));
        assert_eq!((r[1].status, r[1].force), (302, true));
        assert!(r[2].is_pattern());
        assert_eq!(r[3].status, 200);
        assert_eq!(r[4].query, [("id".to_owned(), ":id".to_owned())]);
        assert_eq!((r[4].to.as_str(), r[4].text().as_str()), ("/blog/:id", "/store?id=:id"));
        assert_eq!(r[5].status, 404);
        refused(
            parse_redirects,
            &[
                b"/a",
                b"a /b",
                b"/a /b 303",
                b"/a /b x",
                b"/a/*/b /c",
                b"/a /b\r\nc 301",
                b"/a https://example.com/ 200",
                b"/a /b 302 Country=us",
                b"/a?x=1 /b",
                b"/a =1 /b",
            ],
        );
    }

    #[test]
    fn query_conditions_must_all_be_present_and_capture() {
        let c = Conventions::new(
            None,
            Some(b"/store id=:id /blog/:id 301\n/store id=all /all 302\n/store /shop\n/x a=1 b=:b /y/:b 301\n"),
        )
        .unwrap();
        let r = |key, q| c.redirect_for(key, q);
        assert_eq!(
            r("/store", Some("id=7")),
            Some(RuleAnswer::Redirect(301, "/blog/7".into()))
        );
        assert_eq!(
            r("/store", Some("x=1&id=a%20b")),
            Some(RuleAnswer::Redirect(301, "/blog/a%20b".into()))
        );
        // The literal rule after a conditional one for its path is tried
        // in order, so it comes after it (Netlify's first match wins).
        assert_eq!(r("/store", None), Some(RuleAnswer::Redirect(301, "/shop".into())));
        assert_eq!(r("/x", Some("b=2")), None);
        assert_eq!(r("/x", Some("a=2&b=2")), None);
        assert_eq!(r("/x", Some("b=2&a=1")), Some(RuleAnswer::Redirect(301, "/y/2".into())));
    }

    #[test]
    fn rewrites_and_404_rules_name_a_file_and_open_redirects_are_refused() {
        let c = Conventions::new(
            None,
            Some(b"/app/* /app/index.html 200\n/gone /gone.html 404\n/r/* /:splat 302\n/b/* /\\:splat 301\n"),
        )
        .unwrap();
        assert_eq!(
            c.redirect_for("/app/a/b", Some("q=1")),
            Some(RuleAnswer::Rewrite("/app/index.html".into()))
        );
        assert_eq!(
            c.redirect_for("/gone", None),
            Some(RuleAnswer::NotFound("/gone.html".into()))
        );
        assert_eq!(
            c.redirect_for("/r/x", None),
            Some(RuleAnswer::Redirect(302, "/x".into()))
        );
        // `/r//evil.example` captures `/evil.example`: `//evil.example`.
        assert_eq!(c.redirect_for("/r//evil.example", None), Some(RuleAnswer::Refused));
        assert_eq!(c.redirect_for("/b/evil.example", None), Some(RuleAnswer::Refused));
    }

    #[test]
    fn redirect_loops_with_the_servers_own_redirects_are_found() {
        let rules = parse_redirects(b"/about /about.html 301!\n/a /b\n/b /c\n/docs/ /docs 301\n").unwrap();
        // Clean URLs' canonical form: /about.html -> /about.
        let own = |p: &str| match p {
            "/about.html" => Some("/about".to_owned()),
            "/docs" => Some("/docs/".to_owned()),
            _ => None,
        };
        let found = find_redirect_loop(&rules, &own, &|_| false).unwrap();
        assert_eq!(found, ["/about", "/about.html", "/about"]);
        let rules = parse_redirects(b"/a /b\n/b /c\n/docs/ /docs 301\n").unwrap();
        // `/docs/` is answered by its index: the rule does not apply.
        let answers = |p: &str| p == "/docs/";
        assert_eq!(find_redirect_loop(&rules, &own, &answers), None);
        let found = find_redirect_loop(&rules, &own, &|_| false).unwrap();
        assert_eq!(found, ["/docs/", "/docs", "/docs/"]);
        let rules = parse_redirects(b"/a /b\n/b /a 302\n").unwrap();
        assert_eq!(
            find_redirect_loop(&rules, &|_| None, &|_| false).unwrap(),
            ["/a", "/b", "/a"]
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
        let rules = parse_headers(b"/*\n  X-A: 1\n  Cache-Control: no-cache\n/a/*\n  x-a: 2\n")
            .unwrap()
            .fields;
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
        let to = |status, to: &str| Some(RuleAnswer::Redirect(status, to.into()));
        assert_eq!(c.redirect_for("/old", None), to(301, "/new"));
        assert_eq!(c.forced("/f", None), to(302, "/g"));
        assert_eq!(c.forced("/old", None), None);
        assert_eq!(c.redirect_for("/blog/2024/a/b", None), to(308, "/posts/2024/a/b"));
        assert_eq!(c.redirect_for("/blog/x", None), to(301, "/lit"));
        assert_eq!(c.redirect_for("/nothing", None), None);
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
