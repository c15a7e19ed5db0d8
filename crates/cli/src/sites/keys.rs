//! Which settings belong where, written once: the settings of `serve` a
//! site may set (and inherits from the top level), the keys of `[[site]]`
//! and `[[site.route]]` tables that are no flag's, and the keys later
//! issues fill. Every other setting of `serve` is process-wide: a
//! `[[site]]` that sets one is refused at its line.
//!
//! A setting is per site by what it is: how files and archives are
//! answered (each site has its own root), the site's certificates, and its
//! access log. Listeners, workers, limits, protocols, the identity, the
//! sandbox, the error log, metrics, `hsts`, `redirect-http` and the access
//! log's format are the process's.

/// What kind of root a per-site setting means something for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applies {
    /// Any root.
    Both,
    /// A directory; for an archive, why not (the archive's answers were
    /// fixed by `pack`), as `serve ARCHIVE` says it.
    Directory(&'static str),
    /// An archive (how it is held in memory).
    Archive,
}

/// The settings of `serve` that are per site, by file key (each a flag's
/// long name), in the order `check-config` shows them. The top level's
/// value of each is every site's default; a site's own replaces it whole
/// (a list included, as a flag replaces the file's list). A test checks
/// that every flag of `FileArgs` and `ServeArchiveArgs` is here.
pub(crate) const PER_SITE: &[(&str, Applies)] = &[
    ("index", Applies::Directory("pack serves index.html for a directory")),
    ("list-dirs", Applies::Directory("an archive has no listings")),
    (
        "follow-symlinks",
        Applies::Directory("pack decides which symlinks it follows"),
    ),
    ("404", Applies::Directory("pack takes _404.html")),
    ("clean-urls", Applies::Directory("use pack --clean-urls")),
    ("fallback", Applies::Directory("pack takes _wildcard.*")),
    (
        "cache-control",
        Applies::Directory("use pack --cache-control or _headers"),
    ),
    (
        "no-security-headers",
        Applies::Directory("use pack --no-security-headers"),
    ),
    ("no-precompressed", Applies::Directory("use pack --no-compress")),
    ("no-compress", Applies::Directory("use pack --no-compress")),
    (
        "revalidate-interval",
        Applies::Directory("an archive is swapped whole when its file is replaced"),
    ),
    (
        "cache-entries",
        Applies::Directory("an archive is mapped whole, with every head pre-built"),
    ),
    ("in-memory", Applies::Archive),
    ("prefault", Applies::Archive),
    ("require-signature", Applies::Archive),
    ("allow-rollback", Applies::Archive),
    ("deploy-number-min", Applies::Archive),
    ("keep-previous", Applies::Archive),
    ("keep-previous-all", Applies::Archive),
    ("access-log", Applies::Both),
    ("tls-cert", Applies::Both),
    ("tls-key", Applies::Both),
];

/// Per-site settings whose values are paths: relative to the file's
/// directory when a `[[site]]` table gives them (`-`, standard output,
/// aside).
pub(crate) const PATHS: &[&str] = &["access-log", "tls-cert", "tls-key", "require-signature"];

/// The keys of a `[[site]]` table that are no flag's.
pub(crate) const SITE_KEYS: &[&str] = &["names", "aliases", "root", "default", "route"];

/// The settings a route may override, a subset of [`PER_SITE`], by file key.
pub(crate) const ROUTE_SETTINGS: &[&str] = &["index", "list-dirs", "404", "fallback", "cache-control"];

/// The keys of a `[[site.route]]` table besides [`ROUTE_SETTINGS`].
pub(crate) const ROUTE_KEYS: &[&str] = &[
    "path",
    "handler",
    "root",
    "to",
    "status",
    "proxy",
    "files-first",
    "error-page",
    "proxy-ca",
    "insecure-skip-verify",
    "trace",
    "proxy-authorization",
    "headers",
    "ip",
    "rate-limit",
    "cors",
    "basic-auth",
    "forward-auth",
    "balance",
    "encode",
    "cache",
];

/// The keys of a proxy route's `encode` table.
pub(crate) const ENCODE_KEYS: &[&str] = &["min-length", "set-cookie"];

/// The keys of a route's `ip` table.
pub(crate) const IP_KEYS: &[&str] = &["allow", "deny"];

/// The keys of a route's `rate-limit` table.
pub(crate) const RATE_LIMIT_KEYS: &[&str] = &["rate", "burst"];

/// The keys of a route's `basic-auth` table.
pub(crate) const BASIC_AUTH_KEYS: &[&str] = &["users", "realm"];

/// The keys of a route's `forward-auth` table.
pub(crate) const FORWARD_AUTH_KEYS: &[&str] = &["url", "uri", "copy-headers", "timeout"];

/// The keys of a proxy route's `balance` table.
pub(crate) const BALANCE_KEYS: &[&str] = &[
    "policy",
    "max-fails",
    "fail-timeout",
    "fail-status",
    "health-uri",
    "health-interval",
    "health-timeout",
];

/// The keys of a route's `cors` table.
pub(crate) const CORS_KEYS: &[&str] = &["origins", "methods", "headers", "expose", "credentials", "max-age"];

/// The handlers a route may name.
pub(crate) const HANDLERS: &[&str] = &["files", "archive", "redirect", "proxy"];

/// Keys later issues fill, with the issue: refused until then (never
/// ignored), on a route or a site. None today (forward auth, issue 27,
/// was the last).
pub(crate) const RESERVED: &[(&str, u32)] = &[];

/// The statuses a redirect route may answer with (RFC 9110 §15.4), and its
/// default: 308 keeps the method, as a permanent move should.
pub(crate) const REDIRECT_STATUSES: &[u16] = &[301, 302, 303, 307, 308];
pub(crate) const REDIRECT_STATUS_DEFAULT: u16 = 308;

/// What a per-site key means for a root, if it is one.
pub(crate) fn per_site(key: &str) -> Option<Applies> {
    PER_SITE.iter().find(|(k, _)| *k == key).map(|(_, a)| *a)
}

/// The issue that fills a reserved key.
pub(crate) fn reserved(key: &str) -> Option<u32> {
    RESERVED.iter().find(|(k, _)| *k == key).map(|(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use clap::{Args, Command};

    use super::*;
    use crate::flags::{FileArgs, ServeArchiveArgs};

    /// A new flag for files or archives is per site unless this list says
    /// otherwise: it cannot become process-wide by being forgotten.
    #[test]
    fn every_file_and_archive_flag_is_per_site() {
        let cmd = ServeArchiveArgs::augment_args(FileArgs::augment_args(Command::new("x")));
        for arg in cmd.get_arguments() {
            let key = crate::config::key(arg);
            assert!(per_site(key).is_some(), "{key} is not in PER_SITE");
        }
        for key in ROUTE_SETTINGS {
            assert!(matches!(per_site(key), Some(Applies::Directory(_))), "{key}");
        }
    }

    /// Every per-site key is a setting of `serve` (a typo here would make
    /// a real setting process-wide).
    #[test]
    fn every_per_site_key_is_a_setting_of_serve() {
        let mut cmd = crate::config::command::<crate::flags::Cli>();
        cmd.build();
        let serve = cmd.find_subcommand("serve").unwrap();
        for (key, _) in PER_SITE {
            assert!(
                serve.get_arguments().any(|a| crate::config::key(a) == *key),
                "{key} is no setting of serve"
            );
        }
    }
}
