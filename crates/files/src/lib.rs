//! Static file serving for Peregrine: `peregrine serve DIR`.
//!
//! [`FileServer`] is a [`peregrine::Handler`]. Each request goes through one
//! linear pipeline (as static-web-server's handler does), each step a module
//! with its own tests:
//!
//! method → [`path`] (normalise, refuse) → lookup (`cache`, through `sys`,
//! which keeps every open beneath the root) → directory (index, redirect,
//! `listing`) → [`encoding`] (pre-compressed siblings) → [`conditional`]
//! (304/412) → [`range`] (206/416) → reply. The steps around the lookup
//! ([`reply`]) are the same for `serve ARCHIVE` (`peregrine_archive`), which
//! implements [`reply::Resource`] over its pre-built heads and bodies.
//!
//! ```no_run
//! use peregrine::Server;
//! use peregrine_files::{FileServer, Options};
//!
//! let files = FileServer::new(Options::new("./public")).unwrap();
//! Server::new().bind("127.0.0.1:8080").serve(files).unwrap();
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod auth;
mod cache;
pub mod compress;
/// Conditional requests: the engine's (`peregrine::conditional`), which
/// the proxy's response cache shares.
pub use peregrine::conditional;
pub mod conventions;
pub mod encoding;
mod listing;
pub mod mime;
pub mod path;
pub mod proxy_rules;
/// The `Range` header: the engine's (`peregrine::range`), shared with the
/// proxy's response cache.
pub use peregrine::range;
pub mod reply;
pub mod scope;
mod serve;
mod sys;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use peregrine::{BodyUse, Handler, Reply, Request};

pub use cache::read_descriptor_limit;
pub use cache::{security_headers, SECURITY_HEADERS};
pub use compress::settled as compression_settled;
pub use conventions::CleanUrls;
pub use sys::has_openat2;

/// The bounds of [`Options::revalidate_interval`]: zero re-`stat`s on
/// every request (a `stat` per file and sibling, measured at about 1 µs
/// each from the dentry cache); an hour is already longer than anyone
/// waits for an edit to show, and past it a mistake (seconds taken for
/// milliseconds) would leave a site stale for days.
pub const REVALIDATE_INTERVAL_RANGE: std::ops::RangeInclusive<Duration> = Duration::ZERO..=Duration::from_secs(3600);

/// How a directory is served. Defaults are those of `peregrine serve`.
#[derive(Debug, Clone)]
pub struct Options {
    /// The directory served.
    pub root: PathBuf,
    /// File names tried, in order, for a directory (default `index.html`).
    pub index: Vec<String>,
    /// List a directory without an index file as HTML (default off: 404).
    pub list_dirs: bool,
    /// Follow symlinks that point outside the root (default off: only
    /// symlinks that resolve inside the root are followed).
    pub follow_symlinks: bool,
    /// A page (path within the root) sent with 404 for a missing path,
    /// instead of the site's `404.html` and `_404.html` files.
    pub not_found_page: Option<String>,
    /// Whether `/about` serves `about.html`, and which form is canonical
    /// (default [`CleanUrls::On`]; `pack` takes the same setting).
    pub clean_urls: CleanUrls,
    /// A page (path within the root) sent with 200 for a missing path that
    /// has no file extension: single-page applications' routes. Missing
    /// assets (`/app.js`) still get a real 404.
    pub fallback: Option<String>,
    /// `Cache-Control` for files no rule matches (default `no-cache`:
    /// always revalidate, which the validators make cheap).
    pub cache_control: Option<String>,
    /// `Cache-Control` per path glob (`/assets/**`, `*.woff2`), first match
    /// wins; matched against the file's path within the root, with a
    /// leading `/`.
    pub cache_rules: Vec<(String, String)>,
    /// Send `X-Content-Type-Options: nosniff`, `X-Frame-Options:
    /// SAMEORIGIN` and `Referrer-Policy: strict-origin-when-cross-origin`
    /// (default on).
    pub security_headers: bool,
    /// Look for `NAME.br`, `NAME.zst` and `NAME.gz` next to each file and
    /// serve them to clients that accept them (default on). A sibling older
    /// than its file is not served (a warning says so).
    pub precompressed: bool,
    /// Compress text files that have no sibling on the fly, once, off the
    /// event loop, keeping the results within a memory bound
    /// ([`compress`]; default on). Until a file's forms are ready it is
    /// sent in identity.
    pub compress: bool,
    /// How long a cached lookup is trusted before the file is `stat`ed
    /// again to see whether it changed (default 1 s; zero: every request;
    /// at most [`REVALIDATE_INTERVAL_RANGE`]'s end). An edited file may be
    /// served as it was for this long; so may `_headers` and `_redirects`.
    pub revalidate_interval: Duration,
    /// Files up to this size get a content hash as their ETag on the
    /// worker, the first time a file is asked for (the same bytes, the same
    /// tag, whatever their mtime); every request on that worker waits for
    /// it: from the page cache it runs at about 5 GiB/s here (1 GiB took
    /// 200 ms), so 1 MiB costs about 0.2 ms, once per file. Larger files
    /// get the same tag from a hasher thread of their own, and are sent
    /// without an ETag (Last-Modified only) until it is made (default
    /// 1 MiB). Files up to 32 KiB are read whole anyway.
    pub etag_hash_bytes_max: u64,
    /// Files (site paths) each worker remembers per site: open
    /// handles, validators, header blocks and small files' bytes, as
    /// nginx's `open_file_cache max` (default 16,384). Past it the least
    /// recently asked (CLOCK) are dropped; a tree larger than this costs an
    /// `open` and `fstat` per miss. The caches of every worker and site
    /// together keep at most half of `RLIMIT_NOFILE` files open, whatever
    /// this says.
    pub cache_entries: usize,
    /// The operator's list for `_redirects` proxy rules (status 200 to a
    /// URL), connected ([`proxy_rules::ProxyAllow::connect`]); default
    /// none: every such rule is refused at start, as `pack` refuses it.
    pub proxy_allow: Arc<proxy_rules::ProxyAllow>,
}

impl Options {
    /// The defaults, serving `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Options {
            root: root.into(),
            index: vec!["index.html".to_owned()],
            list_dirs: false,
            follow_symlinks: false,
            not_found_page: None,
            clean_urls: CleanUrls::On,
            fallback: None,
            cache_control: Some("no-cache".to_owned()),
            cache_rules: Vec::new(),
            security_headers: true,
            precompressed: true,
            compress: true,
            proxy_allow: Arc::default(),
            revalidate_interval: Duration::from_secs(1),
            etag_hash_bytes_max: 1 << 20,
            cache_entries: cache::ENTRIES_DEFAULT,
        }
    }
}

/// Checks a Cache-Control value given by an operator (`--cache-control`,
/// `pack --cache-control`): a comma-separated list of directives, each a
/// token with an optional `=token` or `="quoted string"` argument (RFC 9111
/// §5.2: `Cache-Control = #cache-directive`, `cache-directive = token [ "="
/// ( token / quoted-string ) ]`). An empty value, an empty directive, a
/// control character (CR, LF among them: a second field smuggled in) or a
/// byte outside visible ASCII is refused with the reason, rather than
/// sent to every client.
pub fn check_cache_control(value: &str) -> Result<(), String> {
    let is_tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if value.trim().is_empty() {
        return Err("an empty Cache-Control value: give directives, e.g. no-cache or max-age=3600".into());
    }
    if let Some(c) = value
        .chars()
        .find(|&c| !(c == ' ' || c == '\t' || c.is_ascii_graphic()))
    {
        return Err(format!(
            "{:?} in a Cache-Control value: only visible ASCII, spaces and tabs may be sent in a field",
            c
        ));
    }
    let mut rest = value;
    loop {
        rest = rest.trim_start_matches([' ', '\t']);
        let name_len = rest.find(|c: char| !is_tchar(c)).unwrap_or(rest.len());
        if name_len == 0 {
            return Err(format!(
                "{value:?}: expected a directive (a name such as no-cache or max-age) at {:?}",
                if rest.is_empty() { "the end" } else { rest }
            ));
        }
        rest = &rest[name_len..];
        if let Some(arg) = rest.strip_prefix('=') {
            rest = if let Some(quoted) = arg.strip_prefix('"') {
                let mut chars = quoted.char_indices();
                let mut end = None;
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => {
                            end = Some(i + 1);
                            break;
                        }
                        _ => {}
                    }
                }
                let end = end.ok_or_else(|| format!("{value:?}: a quoted string is not closed"))?;
                &quoted[end..]
            } else {
                let len = arg.find(|c: char| !is_tchar(c)).unwrap_or(arg.len());
                if len == 0 {
                    return Err(format!("{value:?}: `=` must be followed by a value (max-age=3600)"));
                }
                &arg[len..]
            };
        }
        rest = rest.trim_start_matches([' ', '\t']);
        match rest.strip_prefix(',') {
            Some(next) => rest = next,
            None if rest.is_empty() => return Ok(()),
            None => return Err(format!("{value:?}: expected `,` between directives at {rest:?}")),
        }
    }
}

/// Why a [`FileServer`] could not be made.
#[derive(Debug)]
pub struct Error(String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// Serves a directory. Cheap to share: workers keep their own caches.
pub struct FileServer {
    inner: Arc<serve::Site>,
    /// What checks credentials for paths `_headers` protects
    /// ([`auth`]); without one they are answered 500.
    gate: Option<Arc<dyn auth::Gate>>,
}

impl FileServer {
    /// Opens the root and checks the options.
    pub fn new(options: Options) -> Result<Self, Error> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let site = serve::Site::new(options, id)?;
        Ok(FileServer {
            inner: Arc::new(site),
            gate: None,
        })
    }

    /// The same server, answering only with files whose paths `scope`
    /// covers: a file of another name (a rewrite's target, a clean URL's
    /// page, a directory's index) outside it is refused with 403
    /// ([`scope`]). For a server that answers one route of a site.
    pub fn with_scope(mut self, scope: Arc<dyn scope::Scope>) -> Self {
        // Not shared yet: `FileServer` is not `Clone`, and `new` made it.
        if let Some(site) = Arc::get_mut(&mut self.inner) {
            site.scope = Some(scope);
        }
        self
    }

    /// The same server, asking `gate` about every request to a path a
    /// `_headers` `Basic-Auth` rule protects.
    pub fn with_gate(mut self, gate: Arc<dyn auth::Gate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// The `Basic-Auth` rules `_headers` had when the server was made,
    /// and the protected patterns whose fields say `Cache-Control:
    /// public` (dropped from their answers): for the warnings at start.
    /// Edits later are followed as for every rule.
    pub fn protection(&self) -> (Vec<auth::AuthRule>, Vec<String>) {
        self.inner.protection()
    }
}

impl Handler for FileServer {
    fn call(&self, req: &Request<'_>) -> Reply {
        self.inner.call(req, self.gate.as_deref())
    }

    /// Files are answered from the head alone (a 405 for a POST, the file
    /// for a GET that carries a body): no body is ever read or kept.
    fn body_use(&self, _req: &Request<'_>) -> BodyUse {
        BodyUse::Ignore
    }
}

#[cfg(test)]
mod tests {
    use super::check_cache_control;

    #[test]
    fn cache_control_values_are_directives_or_refused() {
        for good in [
            "no-cache",
            "max-age=3600",
            "public, max-age=31536000, immutable",
            "private,no-store",
            "no-cache=\"Set-Cookie, X-A\"",
            "s-maxage=60 ,\tmust-revalidate",
            "x-ext=\"a \\\" quote\"",
        ] {
            assert_eq!(check_cache_control(good), Ok(()), "{good:?}");
        }
        for bad in [
            "",
            "   ",
            "max-age=60\r\nSet-Cookie: a=b",
            "no-cache\n",
            "a\u{1}b",
            "max-age=60, é",
            "max-age=",
            "max-age=60,",
            ", no-cache",
            "no-cache,,max-age=1",
            "max age=60",
            "no-cache=\"unclosed",
            "=60",
            "max-age=6 0",
        ] {
            assert!(check_cache_control(bad).is_err(), "{bad:?} accepted");
        }
    }
}
