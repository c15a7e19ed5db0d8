//! The command line as clap reads it: the subcommands and their flags,
//! each value checked by its parser and nothing more. What the flags mean
//! for the libraries (limits, certificates, file options, the identity to
//! run as) is worked out in `resolve.rs`, as ripgrep keeps its low-level
//! arguments apart from the high-level ones.

mod files;
pub(crate) mod numbers;
mod resolve;
mod server;

use std::path::PathBuf;

use clap::builder::{OsStringValueParser, TypedValueParser};
use clap::{Parser, Subcommand};

use crate::docs;

pub(crate) use files::{FileArgs, ServeArchiveArgs, DEFAULT_INDEX};
pub(crate) use server::{parse_bind, ServerArgs, TlsArgs};

/// Peregrine: a web server for static sites and site archives, over
/// HTTP/1.1, HTTP/2 and HTTP/3 (`about` is the package's description).
#[derive(Parser, Debug)]
#[command(name = "peregrine", version, long_version = docs::LONG_VERSION, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

// `Serve` is the large one (its flags, and its sites since issue 24): a
// command line is parsed once per start or reload, never copied per request.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Answer `Hello, World!` (text/plain) on every path: the engine alone.
    Hello {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Serve the files of a directory, or a site archive made by `pack`.
    Serve {
        /// The directory or archive to serve, for every host. Default:
        /// none; required unless sites are given (--site, or [[site]]
        /// tables in the --config file), each with its own root.
        // Empty when not given (a PathBuf must hold something): the
        // positional is optional, and `sites::resolve` asks for it when
        // there are no sites, in the words a missing setting gets.
        #[arg(
            value_name = "DIR|ARCHIVE",
            default_value = "",
            hide_default_value = true,
            value_parser = OsStringValueParser::new().map(PathBuf::from)
        )]
        root: PathBuf,
        /// A site, chosen by the Host the client asks for (and SNI):
        /// `NAMES=DIR|ARCHIVE`, its names comma-separated (exact, or
        /// `*.example.com`), e.g. `--site example.com,www.example.com=site`;
        /// repeatable. Each serves its root with the file settings given at
        /// the top level; [[site]] tables in the --config file say more
        /// (aliases, routes, a default site). With sites, DIR|ARCHIVE is not
        /// given. Default: none (DIR|ARCHIVE for every host).
        #[arg(long = "site", value_name = "NAMES=DIR|ARCHIVE", value_parser = crate::sites::parse_site_flag)]
        site: Vec<String>,
        /// The sites, resolved from `--site` and the file's [[site]] tables
        /// once the settings are merged (`sites::resolve`, called by
        /// `config::parse`); empty: DIR|ARCHIVE for every host.
        #[arg(skip)]
        sites: Vec<crate::sites::SiteSpec>,
        /// Requests under PREFIX go to an upstream HTTP server:
        /// `PREFIX=http[s]://HOST[:PORT][/PATH]`, `PREFIX=h2c://HOST[:PORT][/PATH]`
        /// (HTTP/2 by prior knowledge: a gRPC server), `PREFIX=h2s://...`
        /// (HTTP/2 over TLS) or `PREFIX=unix:PATH`, e.g.
        /// `--proxy /api/=http://127.0.0.1:9000`; repeatable, the longest
        /// prefix winning; for every site. A PATH replaces the prefix
        /// (`/api/=http://up/v1/` sends `/api/x` as `/v1/x`); without one
        /// the path goes unchanged. The upstream gets the client's Host and
        /// X-Forwarded-For, -Proto, -Host, Forwarded and Via. An https://
        /// upstream is verified against the system's roots (a route's
        /// `proxy-ca` and `insecure-skip-verify` change that). A
        /// [[site.route]] takes `proxy = "URL"` for one site. Default: none.
        #[arg(long = "proxy", value_name = "PREFIX=URL", value_parser = crate::proxy::parse_proxy_flag)]
        proxy: Vec<String>,
        /// As --proxy, but a GET or HEAD under PREFIX is answered by the
        /// site first (its files or archive, and its routes), and goes to
        /// the upstream only when the site has nothing there (404); other
        /// methods go upstream (nginx's `try_files $uri @backend`: an
        /// application with its static assets, a single-page app with its
        /// API). Refused with a fallback (which would answer every
        /// missing path). A [[site.route]] takes `files-first = true`
        /// for one site. Default: none.
        #[arg(
            long = "proxy-files-first",
            value_name = "PREFIX=URL",
            value_parser = crate::proxy::parse_proxy_flag
        )]
        proxy_files_first: Vec<String>,
        /// The CA certificates (a PEM file) that `https://` upstreams of
        /// `--proxy` and `--proxy-files-first` are verified against, in
        /// place of the system's roots. A [[site.route]] takes
        /// `proxy-ca = "PATH"` for its own. Default: the system's roots.
        #[arg(long = "proxy-ca", value_name = "PATH")]
        proxy_ca: Option<std::path::PathBuf>,
        /// Keeps the answers of proxy routes (--proxy, --proxy-files-first
        /// and [[site.route]]'s `proxy`), each route in its own cache,
        /// that say they may be kept (RFC 9111: `max-age`, `s-maxage` or
        /// `Expires`; never `private`, `no-store`, `no-cache`, `Vary: *` or
        /// a `Set-Cookie` answer), up to SIZE per worker (`64M`, `1G`,
        /// `512K`, or bytes), the least recently used going first, and
        /// answers GETs and HEADs from them without asking the upstream
        /// (nginx's `proxy_cache`). Honours `Vary`, `stale-while-revalidate`
        /// and `stale-if-error`; a request with Authorization or Cookie is
        /// answered only from a `public` answer; concurrent misses of one
        /// key wait for the first. Bodies up to 1 MiB (or SIZE/8) are kept.
        /// A hit answers If-None-Match and If-Modified-Since (304) and a
        /// single Range (206). Purged by `POST /purge[?host=H&path=PREFIX]`
        /// on the --metrics listener or by SIGWINCH, and emptied at a
        /// reload. check-config's memory per worker counts 2 x SIZE per
        /// cached route (entries, and answers being read in). Default:
        /// none (no cache).
        #[arg(long = "proxy-cache", value_name = "SIZE", value_parser = numbers::size_within(64 * 1024..=1 << 40))]
        proxy_cache: Option<u64>,
        /// Origins `_redirects` proxy rules may send requests to (Netlify's
        /// rules with status 200 to a URL: `/api/* https://api.example.com/:splat
        /// 200`): `http[s]://HOST[:PORT]`; repeatable; for every site. A rule
        /// to an origin not listed, to a `unix:` socket, to a loopback,
        /// link-local or private address (unless --proxy-allow-network
        /// holds it) or to a cloud metadata service (never) is refused at
        /// start (a directory) or at load (an archive: checked against this
        /// list, whatever list `pack` was given). A listed name that comes to
        /// resolve to such an address gets 502, never a connection. The
        /// request is proxied as --proxy's are (X-Forwarded-*, Via), with
        /// the origin's own Host; redirects are relayed, never followed;
        /// GET and HEAD only (the files' handler reads no body). Default:
        /// none (every proxy rule refused).
        #[arg(long = "proxy-allow", value_name = "ORIGIN")]
        proxy_allow: Vec<String>,
        /// Non-public networks --proxy-allow's origins may be reached at
        /// (`127.0.0.0/8`, `10.0.0.0/8`, `fd00::/8`); repeatable. Cloud
        /// metadata addresses (169.254.169.254, fd00:ec2::254) stay refused
        /// whatever it holds. Default: none (public addresses only).
        #[arg(long = "proxy-allow-network", value_name = "CIDR")]
        proxy_allow_network: Vec<String>,
        #[command(flatten)]
        files: FileArgs,
        #[command(flatten)]
        archive: ServeArchiveArgs,
        /// Serve as root, when started as root without --user (or with
        /// --user root). Without it that start is refused: root reads every
        /// file whatever its mode, so a file its owner made unreadable (mode
        /// 000) would be served. Prefer --user NAME, which gives root up
        /// once the ports are bound. Read at start only.
        #[arg(long)]
        allow_root: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Pack a directory into a site archive (written atomically).
    #[command(
        after_help = "pack writes DIR's files, with their compressed variants and response heads, into one \
                      archive file (-o) that `peregrine serve ARCHIVE` serves: peregrine pack site -o site.prg"
    )]
    Pack {
        /// The directory to pack (the default site).
        #[arg(value_name = "DIR")]
        root: PathBuf,
        /// The archive to write, e.g. `-o site.prg`.
        #[arg(short, long, value_name = "ARCHIVE")]
        output: PathBuf,
        /// Another site, chosen by the Host header: `NAME=DIR`; repeatable.
        #[arg(long = "host", value_name = "NAME=DIR")]
        hosts: Vec<String>,
        /// Cache-Control for files `_headers` gives none.
        #[arg(long, default_value = "no-cache", value_name = "VALUE", value_parser = files::parse_cache_control)]
        cache_control: String,
        /// Do not add X-Content-Type-Options, X-Frame-Options, Referrer-Policy.
        #[arg(long)]
        no_security_headers: bool,
        /// Store identity only (no gzip, brotli, zstd variants).
        #[arg(long)]
        no_compress: bool,
        /// Clean URLs, as `serve DIR --clean-urls` takes them: `on` stores
        /// `about.html` under `/about` too; `redirect` makes `/about.html`
        /// and `/about/index.html` 301s to `/about` and `/about/`; `off`.
        #[arg(long, value_name = "MODE", default_value = "on", value_parser = files::clean_urls_parser())]
        clean_urls: peregrine_files::CleanUrls,
        /// Sign the archive with this Ed25519 private key (a PKCS#8 PEM
        /// file: `archive keygen` makes one, as does `openssl genpkey
        /// -algorithm ed25519`): a SHA-256 of every byte, the creation time
        /// and the deploy number, checked by `serve --require-signature`
        /// and `archive verify --key`.
        #[arg(long, value_name = "KEYFILE")]
        sign: Option<PathBuf>,
        /// With --sign, the deploy number signed: a server requiring
        /// signatures refuses a lower one than it serves. Default: the
        /// creation time in seconds since the epoch (SOURCE_DATE_EPOCH when
        /// set, as reproducible builds give it), which grows from one
        /// deploy to the next.
        #[arg(long, value_name = "N", requires = "sign")]
        deploy_number: Option<u64>,
        /// A path the archive replaced by this one must never answer while
        /// kept (`serve --keep-previous`): a leaked file, or everything
        /// below a folder given with its `/` (`--revoke /private/`);
        /// repeatable, in every site of the archive.
        #[arg(long, value_name = "PATH")]
        revoke: Vec<String>,
        /// Origins `_redirects` proxy rules (status 200 to a URL) may name:
        /// `http[s]://HOST[:PORT]`; repeatable. A rule to any other origin,
        /// to a `unix:` socket, to a loopback, link-local or private address
        /// (unless --proxy-allow-network holds it) or to a cloud metadata
        /// service is refused. The server checks the archive against its
        /// own `serve --proxy-allow` again at every load. Default: none.
        #[arg(long = "proxy-allow", value_name = "ORIGIN")]
        proxy_allow: Vec<String>,
        /// Non-public networks the rules' origins may be (`127.0.0.0/8`);
        /// repeatable. Default: none.
        #[arg(long = "proxy-allow-network", value_name = "CIDR")]
        proxy_allow_network: Vec<String>,
    },
    /// Inspect a site archive.
    Archive {
        #[command(subcommand)]
        command: ArchiveCommand,
    },
    /// Ask a health endpoint (by default `/livez` of `--metrics
    /// 127.0.0.1:9090`; `/readyz` says whether to send traffic): exit 0 if
    /// it answers 2xx within 2 seconds, else 1. For container health
    /// checks on images without a shell or curl.
    Probe {
        /// `http://HOST:PORT/PATH`.
        #[arg(default_value = "http://127.0.0.1:9090/livez", value_name = "URL")]
        url: String,
    },
    /// Write a shell completion script to standard output.
    Completions { shell: clap_complete::Shell },
    /// Write the man page (roff) to standard output.
    Man {
        /// The subcommand whose page to write (default: `peregrine`'s own).
        command: Option<String>,
        /// Write every page into DIR instead (peregrine.1, peregrine-serve.1, ...).
        #[arg(long, value_name = "DIR", conflicts_with = "command")]
        out_dir: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum ArchiveCommand {
    /// List the entries: site, path, kind, status, sizes per encoding.
    Ls { archive: PathBuf },
    /// Write one entry's body (identity) to standard output.
    Cat {
        archive: PathBuf,
        /// The path, e.g. /index.html.
        path: String,
        /// The site's host name (default: the default site).
        #[arg(long)]
        host: Option<String>,
    },
    /// Check every checksum and, with --key, the signature; exit 1 if the
    /// archive is damaged, or not signed by one of the keys. Prints a
    /// signed archive's key id, creation time and deploy number.
    Verify {
        archive: PathBuf,
        /// An Ed25519 public key (PEM) trusted to have signed it;
        /// repeatable, as `serve --require-signature`.
        #[arg(long, value_name = "PUBKEY")]
        key: Vec<PathBuf>,
    },
    /// Make an Ed25519 key pair for `pack --sign`: the private key in OUT
    /// (PKCS#8 PEM, mode 0600, never overwritten), the public key in
    /// OUT.pub (for `serve --require-signature`), and the public key and
    /// its id printed.
    Keygen {
        #[arg(value_name = "OUT")]
        out: PathBuf,
    },
    /// Counts and sizes.
    Stat { archive: PathBuf },
    /// What a deploy changes: every URL (per site and encoding) added,
    /// removed, or whose status, header fields or body changed between
    /// OLD and NEW. Identical archives print nothing. Values of
    /// credential fields (Set-Cookie, Authorization) are shown as
    /// `<redacted>`, so a CI log does not publish them.
    Diff {
        old: PathBuf,
        new: PathBuf,
        /// Print one JSON object (`added`, `removed`, `changed`) instead
        /// of lines.
        #[arg(long)]
        json: bool,
        /// Exit 1 when the archives differ (as `git diff --exit-code`).
        #[arg(long)]
        exit_code: bool,
    },
}

impl Command {
    /// The serving flags of `hello` or `serve`.
    pub(crate) fn server_args(&self) -> &ServerArgs {
        match self {
            Command::Hello { server } | Command::Serve { server, .. } => server,
            _ => unreachable!("only hello and serve are served"),
        }
    }
}
