//! `serve`'s flags for what it serves: a directory's (`FileArgs`, with the
//! `--cache-control` rules' parsers) and an archive's (`ServeArchiveArgs`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use peregrine_files::{CleanUrls, Options};

use super::numbers::{seconds_or_suffixed_within, seconds_within};

/// How `serve` holds an archive.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct ServeArchiveArgs {
    /// Archives: read the whole archive into memory instead of mapping it.
    #[arg(long)]
    pub(crate) in_memory: bool,
    /// Archives: fault every page of the map in at load.
    #[arg(long)]
    pub(crate) prefault: bool,
    /// Archives: serve only archives signed (`pack --sign`) by one of
    /// these Ed25519 public keys (PEM files, as `archive keygen` writes
    /// them); repeatable, to trust a new key beside the old one while
    /// rotating. An unsigned archive, one signed by another key, one
    /// changed after it was signed, or one with a lower deploy number
    /// than the one being served is refused: at start the server does
    /// not start; at a swap the archive being served keeps serving, and
    /// peregrine_archive_refused_total and the log say why. The same
    /// deploy number is accepted for the same archive only (a reload).
    /// Default: none (any valid archive is served).
    #[arg(long, value_name = "PUBKEY")]
    pub(crate) require_signature: Vec<PathBuf>,
    /// Archives: with --require-signature, accept a lower deploy number
    /// than the one being served, or than --deploy-number-min: a
    /// deliberate rollback. The signature is still required.
    #[arg(long)]
    pub(crate) allow_rollback: bool,
    /// Archives: with --require-signature, the lowest deploy number
    /// accepted at start, when no archive is being served to compare with
    /// (nothing is remembered across restarts). Default: 0.
    #[arg(long, value_name = "N")]
    pub(crate) deploy_number_min: Option<u64>,
    /// Archives: after a swap, keep the archive replaced for SECS (`60`
    /// or `60s`, at most a day): a request the new archive answers 404
    /// (no file, rule, wildcard) gets the old one's 200 for the same
    /// path, if it is a content-hashed asset (`app.3f2a9c1b.js`,
    /// `index-D2sCh2pS.js`) or `immutable`, and no --revoke in a newer
    /// archive names it; never on a route with access rules. Browsers
    /// that loaded the old HTML just before the swap still get its
    /// scripts. At most two previous archives per site, 1 GiB for all;
    /// a replaced file's disk space is freed when its archive is
    /// released. Default: off (a removed file is gone at the swap).
    #[arg(long, value_name = "SECS", value_parser = seconds_or_suffixed_within(Duration::ZERO..=Duration::from_secs(86_400)))]
    pub(crate) keep_previous: Option<f64>,
    /// Archives: with --keep-previous, let every path fall back, not only
    /// content-hashed or immutable assets (pages, and a file a deploy
    /// removed on purpose, too: only --revoke stops those).
    #[arg(long)]
    pub(crate) keep_previous_all: bool,
    /// `serve --proxy-allow`'s list, connected: set for every archive by
    /// `Complete` once the settings are merged.
    #[arg(skip)]
    pub(crate) proxy_allow: std::sync::Arc<peregrine_files::proxy_rules::ProxyAllow>,
}

/// The file tried for a directory unless `--index` names others.
pub(crate) const DEFAULT_INDEX: &str = "index.html";

/// How `serve` answers for files.
#[derive(Args, Debug, Clone)]
pub(crate) struct FileArgs {
    /// File names tried for a directory, in order (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_INDEX, value_name = "NAMES")]
    pub(crate) index: Vec<String>,
    /// List directories that have no index file, as HTML.
    #[arg(long)]
    pub(crate) list_dirs: bool,
    /// Follow symlinks that lead outside the directory (by default only
    /// symlinks that resolve inside it are followed).
    #[arg(long)]
    pub(crate) follow_symlinks: bool,
    /// Page sent with 404 for missing paths (a path within DIR). Default: a
    /// short built-in page.
    #[arg(long = "404", value_name = "PATH")]
    pub(crate) not_found: Option<String>,
    /// Clean URLs: `on` serves `/about` from `about.html` (and
    /// `/about.html` itself); `redirect` also answers `/about.html` and
    /// `/about/index.html` with a 301 to `/about` and `/about/`; `off`
    /// serves files by their own names only. `pack --clean-urls` takes the
    /// same values.
    #[arg(long, value_name = "MODE", default_value = "on", value_parser = clean_urls_parser())]
    pub(crate) clean_urls: CleanUrls,
    /// Page sent with 200 for missing paths without a file extension, for
    /// single-page applications (a path within DIR, e.g. index.html).
    /// Default: none (404).
    #[arg(long, value_name = "PATH")]
    pub(crate) fallback: Option<String>,
    /// Cache-Control for paths matching GLOB: `GLOB=VALUE`, repeatable, first
    /// match wins; `VALUE` alone sets the value for other paths. Default:
    /// no-cache.
    #[arg(long = "cache-control", value_name = "[GLOB=]VALUE", value_parser = parse_cache_rule)]
    pub(crate) cache_control: Vec<String>,
    /// Do not send X-Content-Type-Options, X-Frame-Options and
    /// Referrer-Policy.
    #[arg(long)]
    pub(crate) no_security_headers: bool,
    /// Do not look for pre-compressed siblings (NAME.br, NAME.zst, NAME.gz).
    /// A sibling older than its file is never served.
    #[arg(long)]
    pub(crate) no_precompressed: bool,
    /// Do not compress text files that have no sibling on the fly (by
    /// default each is compressed once, off the event loop, when a client
    /// first accepts a coding for it, and the results kept within 64 MiB;
    /// it is sent in identity until then).
    #[arg(long)]
    pub(crate) no_compress: bool,
    /// Seconds a cached file (and `_headers`, `_redirects`) is trusted
    /// before it is looked at again: an edited file may be served as it
    /// was for this long. 0: look at every request.
    #[arg(long, value_name = "SECS", default_value = Options::new("").revalidate_interval.as_secs_f64().to_string(), value_parser = seconds_within(peregrine_files::REVALIDATE_INTERVAL_RANGE))]
    pub(crate) revalidate_interval: Option<f64>,
    /// Files each worker keeps in its cache (open handles, validators,
    /// pre-built heads, small files' bytes), as nginx's `open_file_cache
    /// max`; past it the least recently asked are dropped. Half of the
    /// descriptor limit bounds how many files the caches of every worker
    /// and site keep open together.
    #[arg(long, value_name = "N", default_value_t = Options::new("").cache_entries as u64, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub(crate) cache_entries: u64,
    /// `serve --proxy-allow`'s list, connected: set for every directory
    /// by `Complete` once the settings are merged.
    #[arg(skip)]
    pub(crate) proxy_allow: std::sync::Arc<peregrine_files::proxy_rules::ProxyAllow>,
}

/// The values of `--clean-urls` (serve and pack), offered to completions.
pub(crate) fn clean_urls_parser() -> impl clap::builder::TypedValueParser<Value = CleanUrls> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["off", "on", "redirect"])
        .map(|s| s.parse::<CleanUrls>().unwrap_or_default())
}

/// A `--cache-control` rule as `(GLOB, VALUE)`, or `(None, VALUE)`: a
/// glob starts with `/` or holds `*` (`max-age=60` is a value).
pub(crate) fn split_cache_rule(rule: &str) -> (Option<&str>, &str) {
    match rule.split_once('=') {
        Some((glob, value)) if glob.starts_with('/') || glob.contains('*') => (Some(glob), value),
        _ => (None, rule),
    }
}

/// A value parser for `pack --cache-control VALUE`: directives, or refused
/// with the reason (`peregrine_files::check_cache_control`).
pub(crate) fn parse_cache_control(s: &str) -> Result<String, String> {
    peregrine_files::check_cache_control(s)?;
    Ok(s.to_owned())
}

/// A value parser for `serve --cache-control [GLOB=]VALUE`.
fn parse_cache_rule(s: &str) -> Result<String, String> {
    match split_cache_rule(s) {
        (Some(glob), value) => peregrine_files::check_cache_control(value).map_err(|e| format!("{glob}=...: {e}"))?,
        (None, value) => peregrine_files::check_cache_control(value)?,
    }
    Ok(s.to_owned())
}
