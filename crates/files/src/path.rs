//! From a request path to a path relative to the served root, or a reason
//! to refuse it. Pure: no file system access, so it is tested as a byte
//! table and fuzzed.
//!
//! The steps, in order:
//! 1. percent-decode once (`%2e%2e` is `..`; `%252e` stays the literal
//!    `%2e`, a file name like any other);
//! 2. refuse what no file path should hold: NUL (`%00`), backslashes, bytes
//!    that are not UTF-8 (overlong forms such as `%c0%ae` among them), other
//!    control bytes;
//! 3. remove dot segments (RFC 3986 §5.2.4: `..` above the root stays at the
//!    root) and collapse empty segments (`//`).
//!
//! The result never starts with `/`, never contains `.` or `..` segments or
//! empty ones, so joining it to the root cannot leave the root (symlinks are
//! the file system layer's business: see `sys`).

use std::fmt;

/// A request path made safe to join to the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SitePath {
    /// Segments joined by `/`, without a leading `/`; empty for the root.
    pub rel: String,
    /// The request path ended with `/` (or was the root).
    pub trailing_slash: bool,
}

impl SitePath {
    /// The segments, in order.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.rel.split('/').filter(|s| !s.is_empty())
    }

    /// Whether a segment names a dotfile or dot-directory, other than a
    /// leading `.well-known` (RFC 8615).
    pub fn is_hidden(&self) -> bool {
        self.segments()
            .enumerate()
            .any(|(i, s)| s.starts_with('.') && !(i == 0 && s == ".well-known"))
    }

    /// The last segment, if any.
    pub fn file_name(&self) -> Option<&str> {
        self.segments().last()
    }

    /// The key this path has in an archive, and the form rules match:
    /// `/`, `/a/b` or `/a/b/`.
    pub fn key(&self) -> String {
        if self.rel.is_empty() {
            "/".to_owned()
        } else if self.trailing_slash {
            format!("/{}/", self.rel)
        } else {
            format!("/{}", self.rel)
        }
    }
}

/// Whether a path reached through symlinks must not be served: `resolved`,
/// the path within the root that `asked` (a relative path or a site path)
/// led to, component by component, names a dotfile or dot-directory in any
/// component. A leading `.well-known` is allowed only when `asked` itself
/// starts with it: the exception is for request paths under
/// `/.well-known/` (RFC 8615), never for a symlink elsewhere leading there.
/// `serve DIR` judges what it opens through a symlink by this, and `pack`
/// what it packs, so that an archive holds nothing a directory refuses.
pub fn is_hidden_resolved<S: AsRef<[u8]>>(asked: &str, resolved: &[S]) -> bool {
    let well_known = asked.split('/').find(|s| !s.is_empty()) == Some(".well-known");
    resolved.iter().enumerate().any(|(i, s)| {
        let s = s.as_ref();
        s.starts_with(b".") && !(well_known && i == 0 && s == b".well-known")
    })
}

/// Whether a raw request path is already its own key ([`SitePath::key`]):
/// no escapes, no backslash, no dot segment or dotfile, no empty segment.
/// Such a path is looked up as it is, before (and without) [`normalize`]:
/// the hot path of both `serve DIR` and `serve ARCHIVE`. It may still be
/// refused by `normalize` for a control byte; a lookup of it finds nothing
/// either way, since no key holds one.
pub fn is_key(raw: &str) -> bool {
    // One pass over the bytes, the previous byte carried in a flag: three
    // `contains` built two substring searchers per request (2.2 % of a
    // pipelined archive profile), and a look-ahead with a bounds check per
    // byte was 1.5 % of a pipelined `serve DIR` profile.
    let mut after_slash = false;
    for &c in raw.as_bytes() {
        if c == b'%' || c == b'\\' || (after_slash && (c == b'.' || c == b'/')) {
            return false;
        }
        after_slash = c == b'/';
    }
    true
}

/// Why a path was refused; each becomes a 400 naming the problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// The path does not start with `/` (e.g. `*`).
    NotAbsolute,
    /// `%00`, or a raw NUL.
    Nul,
    /// A raw backslash: no URI character, and on some systems a
    /// separator. (`%5C` is a byte of a name, served like any other.)
    Backslash,
    /// A control byte other than NUL.
    Control,
    /// The decoded bytes are not UTF-8 (this includes overlong encodings).
    NotUtf8,
}

impl PathError {
    /// The reason given in the 400 response.
    pub fn reason(self) -> &'static str {
        match self {
            PathError::NotAbsolute => "path does not start with /",
            PathError::Nul => "NUL byte in path",
            PathError::Backslash => "backslash in path",
            PathError::Control => "control byte in path",
            PathError::NotUtf8 => "path is not UTF-8",
        }
    }
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for PathError {}

/// Normalises a raw (still percent-encoded) request path, query excluded.
pub fn normalize(raw: &[u8]) -> Result<SitePath, PathError> {
    if raw.first() != Some(&b'/') {
        return Err(PathError::NotAbsolute);
    }
    // A raw backslash is no URI character (RFC 3986 §2: it must be
    // percent-encoded), and some systems in front read it as a separator:
    // refused. Encoded (`%5C`) it is a byte of a file name on Linux, as a
    // listing links to `a\b.txt`: one segment, never a separator here.
    if raw.contains(&b'\\') {
        return Err(PathError::Backslash);
    }
    let decoded = peregrine::percent_decode(raw);
    for &b in decoded.iter() {
        match b {
            0 => return Err(PathError::Nul),
            0x01..=0x1f | 0x7f => return Err(PathError::Control),
            _ => {}
        }
    }
    let decoded = std::str::from_utf8(&decoded).map_err(|_| PathError::NotUtf8)?;
    let trailing_slash = decoded.ends_with('/');
    let mut out: Vec<&str> = Vec::new();
    let mut last_was_dot = false;
    for seg in decoded.split('/') {
        last_was_dot = false;
        match seg {
            "" => {}
            "." => last_was_dot = true,
            ".." => {
                out.pop();
                last_was_dot = true;
            }
            s => out.push(s),
        }
    }
    Ok(SitePath {
        rel: out.join("/"),
        // `/a/.` and `/a/..` name directories (RFC 3986 §5.2.4 leaves a
        // trailing slash for them).
        trailing_slash: trailing_slash || last_was_dot || out.is_empty(),
    })
}

/// Percent-encodes a site path for a `Location` header or a link: every
/// byte outside RFC 3986's unreserved set and `/` is escaped.
pub fn encode(path: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(path.len());
    for &b in path.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 15)] as char);
        }
    }
    out
}

/// Whether two keys (request paths, stored paths) are the same bytes. Most
/// are short: up to 16 bytes they are compared in two words that may
/// overlap (as `bcmp` does, without its call: the slice compare was 25
/// to 31 instructions of an archive or cache lookup, callgrind c50);
/// longer ones by `==`.
#[inline(always)]
pub fn same_key(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if (8..=16).contains(&n) {
        let word = |s: &[u8], at: usize| u64::from_ne_bytes(s[at..at + 8].try_into().expect("8 bytes"));
        return word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8);
    }
    if (4..8).contains(&n) {
        let word = |s: &[u8], at: usize| u32::from_ne_bytes(s[at..at + 4].try_into().expect("4 bytes"));
        return word(a, 0) == word(b, 0) && word(a, n - 4) == word(b, n - 4);
    }
    if n < 4 {
        return a.iter().zip(b).all(|(x, y)| x == y);
    }
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys of every length up to 40, equal and differing in each byte.
    #[test]
    fn same_key_is_byte_equality() {
        for n in 0..40usize {
            let a: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(same_key(&a, &a.clone()), "{n}");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!same_key(&a, &b), "{n} {at}");
            }
            let mut longer = a.clone();
            longer.push(b'a');
            assert!(!same_key(&a, &longer), "{n}");
        }
    }

    fn ok(raw: &str) -> (String, bool) {
        let p = normalize(raw.as_bytes()).unwrap_or_else(|e| panic!("{raw}: {e}"));
        (p.rel, p.trailing_slash)
    }

    #[test]
    fn dot_segments_and_empty_segments_are_removed() {
        let table: &[(&str, &str, bool)] = &[
            ("/", "", true),
            ("/a", "a", false),
            ("/a/", "a", true),
            ("//a///b", "a/b", false),
            ("/a/./b", "a/b", false),
            ("/a/b/..", "a", true),
            ("/a/b/.", "a/b", true),
            ("/abc/../def/../../", "", true),
            ("/../../etc/passwd", "etc/passwd", false),
            ("/a/../../../b", "b", false),
            ("/%2e%2e/%2e%2e/etc/passwd", "etc/passwd", false),
            ("/%2E%2E/secret", "secret", false),
            ("/.%2e/secret", "secret", false),
            ("/a%2f..%2f..%2fsecret", "secret", false),
            // Decoded once only: `%252e` is the file name `%2e`.
            ("/%252e%252e/secret", "%2e%2e/secret", false),
            ("/a%20b", "a b", false),
            ("/caf%C3%A9", "café", false),
            ("/...", "...", false),
            ("/a/..b", "a/..b", false),
        ];
        for (raw, rel, slash) in table {
            assert_eq!(ok(raw), (rel.to_string(), *slash), "{raw}");
        }
    }

    #[test]
    fn dangerous_bytes_are_refused() {
        let table: &[(&[u8], PathError)] = &[
            (b"/a%00.html", PathError::Nul),
            (b"/a\0", PathError::Nul),
            (b"/..\\..\\etc", PathError::Backslash),
            (b"/%c0%ae%c0%ae/secret", PathError::NotUtf8),
            (b"/%e0%80%ae", PathError::NotUtf8),
            (b"/%ff", PathError::NotUtf8),
            (b"/a%0d%0aX: y", PathError::Control),
            (b"/a%7f", PathError::Control),
            (b"*", PathError::NotAbsolute),
            (b"", PathError::NotAbsolute),
            (b"a/b", PathError::NotAbsolute),
        ];
        for (raw, want) in table {
            assert_eq!(normalize(raw), Err(*want), "{:?}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn dotfiles_are_hidden_except_well_known() {
        let hidden = |raw: &str| normalize(raw.as_bytes()).unwrap().is_hidden();
        assert!(hidden("/.env"));
        assert!(hidden("/.git/config"));
        assert!(hidden("/a/.htpasswd"));
        assert!(hidden("/%2egit/HEAD"));
        assert!(!hidden("/.well-known/security.txt"));
        assert!(hidden("/a/.well-known/x"));
        assert!(hidden("/.well-known/.secret"));
        assert!(!hidden("/a.b/c"));
        assert!(!hidden("/../x"));
    }

    #[test]
    fn a_resolved_path_is_judged_in_every_component() {
        let table: &[(&str, &str, bool)] = &[
            ("env-link.txt", ".env", true),
            ("gitdir/config", ".git/config", true),
            ("/gitdir/config", ".git/config", true),
            ("a/b", "c/.hidden/d", true),
            ("a/b", "c/d", false),
            ("a", "", false),
            ("a/b", "a..b/c", false),
            // `.well-known` only for a path asked under it.
            (".well-known/alias.txt", ".well-known/security.txt", false),
            ("/.well-known/alias.txt", ".well-known/security.txt", false),
            ("wk/security.txt", ".well-known/security.txt", true),
            (".well-known/leak", ".env", true),
            (".well-known/x", ".well-known/.secret", true),
            (".well-known/x", "d/.well-known/y", true),
            (".well-known-not/x", ".well-known/y", true),
        ];
        for (asked, resolved, hidden) in table {
            let parts: Vec<&str> = resolved.split('/').filter(|s| !s.is_empty()).collect();
            assert_eq!(is_hidden_resolved(asked, &parts), *hidden, "{asked} -> {resolved}");
        }
    }

    #[test]
    fn encoding_round_trips_through_normalize() {
        for rel in ["a b/c?d#e", "café/%2e", "x+y&z=1"] {
            let encoded = encode(&format!("/{rel}"));
            assert_eq!(normalize(encoded.as_bytes()).unwrap().rel, rel);
        }
    }

    /// `%5C` is a byte of one segment's name, never a separator.
    #[test]
    fn an_encoded_backslash_is_a_byte_of_a_name() {
        let p = normalize(b"/%5c..%5csecret").unwrap();
        assert_eq!((p.rel.as_str(), p.key().as_str()), ("\\..\\secret", "/\\..\\secret"));
        assert_eq!(normalize(b"/a%5Cb.txt").unwrap().rel, "a\\b.txt");
    }

    #[test]
    fn a_plain_path_is_its_own_key() {
        for raw in ["/", "/a", "/a/b/", "/caf\u{e9}.txt", "/a.b/c"] {
            assert!(is_key(raw), "{raw}");
            assert_eq!(normalize(raw.as_bytes()).unwrap().key(), raw);
        }
        for raw in ["/a%2fb", "/a\\b", "/./a", "/a/../b", "//a", "/a//b", "/.env"] {
            assert!(!is_key(raw), "{raw}");
        }
        assert_eq!(normalize(b"/a/./b/").unwrap().key(), "/a/b/");
        assert_eq!(normalize(b"/..").unwrap().key(), "/");
    }
}
