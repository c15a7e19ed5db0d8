//! `peregrine pack`: walks a tree (or several, one per virtual host),
//! applies the site conventions, compresses, and writes the archive
//! atomically (a temporary file beside the target, then `rename`).
//!
//! Conventions (as kawipiko and static hosts use them):
//! - `dir/index.html` also answers `/dir/`; `/dir` redirects (301) there;
//! - clean URLs (`CleanUrls`): `dir/about.html` also answers `/dir/about`,
//!   before a directory `dir/about/` does; with `Redirect`, the `.html`
//!   and `index.html` forms are 301s to the clean ones;
//! - `_wildcard.*` answers any missing path below its folder, deepest first;
//! - `404.html` is the not-found page below its folder, deepest first; at
//!   the root `_404.html` wins over it;
//! - `_headers` adds header fields by path pattern; `_redirects` lists
//!   rules (Netlify syntax: redirects 301, 302, 307, 308, rewrites 200,
//!   404s, `!`, `*` splats, `:placeholders`, query conditions); both are
//!   compiled here, nothing is parsed at serve time but the patterns and
//!   the users of `_headers`' `Basic-Auth` lines, whose plain passwords
//!   are hashed here (bcrypt, `auth::BCRYPT_COST`): an archive holds none. The
//!   parsers live in `peregrine_files::conventions`, which `serve DIR`
//!   follows too, so a directory answers as its archive. A loop between
//!   the rules and the 301s above is refused.

use std::fmt;
use std::fs;
use std::io::{self, IsTerminal};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use peregrine_files::compress::{encode, Encoded};
use peregrine_files::conventions::{find_redirect_loop, headers_for, loop_message, ordered, CleanUrls};
pub use peregrine_files::conventions::{
    parse_headers, parse_redirects, parse_redirects_allowing, HeaderRule, HeadersFile, Redirect,
};
use peregrine_files::encoding::Encoding;
pub use peregrine_files::proxy_rules::ProxyAllow;

use crate::format::*;
use crate::sign::Seal;
use crate::write::{VariantIn, Writer};

/// Files read and compressed at once, across threads, before they are
/// written: bounds pack's memory whatever the tree's size.
const PACK_BATCH_FILES: usize = 256;
/// Bytes of files read at once (their sizes as the walk saw them): a batch
/// ends before the file that would pass it, so pack holds at most this
/// much, or one file larger than it, and its compressed forms. Without it
/// 256 large media files were held at once (a 4.4 GB file took 9 GB).
const PACK_BATCH_BYTES: u64 = 128 << 20;

/// What to pack.
#[derive(Debug, Clone)]
pub struct PackOptions {
    /// The default site's tree.
    pub root: PathBuf,
    /// Further sites: (host name, tree).
    pub hosts: Vec<(String, PathBuf)>,
    /// The archive to write.
    pub output: PathBuf,
    /// `Cache-Control` for files `_headers` does not give one (`no-cache`).
    pub cache_control: String,
    /// Add the security headers `serve DIR` sends by default.
    pub security_headers: bool,
    /// Compress: gzip, brotli and zstd variants kept when smaller.
    pub compress: bool,
    /// Print progress on standard error (when it is a terminal).
    pub progress: bool,
    /// Threads that read and compress (0: one per core). The archive is
    /// the same bytes whatever the number.
    pub threads: usize,
    /// Clean URLs, as `serve DIR` takes them (default `On`).
    pub clean_urls: CleanUrls,
    /// Paths a previous generation kept after a swap must never answer
    /// (`--revoke`), in every site: `/leak.txt`, or `/private/` for
    /// everything below it.
    pub revoked: Vec<String>,
    /// Sign the archive (`--sign`): key, creation time, deploy number.
    pub seal: Option<Seal>,
    /// The origins `_redirects` proxy rules may name (`--proxy-allow`),
    /// and the non-public networks they may reach; default none: every
    /// proxy rule refused. The server checks them against its own list
    /// again at each load.
    pub proxy_allow: ProxyAllow,
}

impl PackOptions {
    /// The defaults for packing `root` into `output`.
    pub fn new(root: impl Into<PathBuf>, output: impl Into<PathBuf>) -> Self {
        PackOptions {
            root: root.into(),
            hosts: Vec::new(),
            output: output.into(),
            cache_control: "no-cache".to_owned(),
            security_headers: true,
            compress: true,
            progress: false,
            threads: 0,
            clean_urls: CleanUrls::On,
            revoked: Vec::new(),
            seal: None,
            proxy_allow: ProxyAllow::default(),
        }
    }
}

/// What was packed.
#[derive(Debug, Default, Clone)]
pub struct PackStats {
    pub n_files: usize,
    pub n_entries: usize,
    /// Bytes of the files packed, as read.
    pub bytes_in: u64,
    pub archive_bytes: u64,
    /// Symlinks not followed (site path, why).
    pub skipped_symlinks: Vec<(String, SymlinkSkip)>,
    /// Symlinks to one of their own ancestor directories, not followed.
    pub skipped_loops: Vec<String>,
    /// What the operator should know of the archive written (a `public`
    /// dropped from protected answers).
    pub warnings: Vec<String>,
}

/// Why `pack` did not follow a symlink. What it refuses, `serve DIR`
/// refuses too (404), so a directory answers as its archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SymlinkSkip {
    /// It resolves outside the tree.
    Outside,
    /// Its target does not exist.
    Dangling,
    /// Resolving it never ends: it leads back to itself, directly (`ln -s
    /// loop loop`) or through other links (ELOOP).
    Loop,
    /// It resolves to a dotfile or into a dot-directory (`ln -s .env
    /// env.txt`, `ln -s .git gitdir`), which are not served; `.well-known`
    /// only from a path under `/.well-known/` itself.
    Dotfile,
    /// It cannot be resolved for another reason (a directory on the way
    /// that may not be searched, a file where a directory should be).
    Unresolved(io::ErrorKind),
}

impl SymlinkSkip {
    /// Why resolving failed with `e`.
    fn of(e: &io::Error) -> SymlinkSkip {
        if e.raw_os_error() == Some(libc::ELOOP) {
            SymlinkSkip::Loop
        } else if e.kind() == io::ErrorKind::NotFound {
            SymlinkSkip::Dangling
        } else {
            SymlinkSkip::Unresolved(e.kind())
        }
    }
}

/// What `pack` says of a symlink it skipped: "skipped /x: {this}".
impl fmt::Display for SymlinkSkip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SymlinkSkip::Outside => f.write_str("a symlink leading outside the tree"),
            SymlinkSkip::Dangling => f.write_str("a dangling symlink (its target does not exist)"),
            SymlinkSkip::Loop => f.write_str("a symlink loop (resolving it leads back to itself)"),
            SymlinkSkip::Dotfile => f.write_str("a symlink to a dotfile (dotfiles are not served)"),
            SymlinkSkip::Unresolved(kind) => write!(f, "a symlink that cannot be followed ({kind})"),
        }
    }
}

/// Packs the trees into the archive. Any unreadable file, bad convention
/// file or conflicting entry is an error naming it; nothing is written
/// under the target name unless the whole archive is.
pub fn pack(opts: &PackOptions) -> Result<PackStats, String> {
    let dir = opts
        .output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = opts.output.file_name().ok_or("the output needs a file name")?;
    let tmp = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
    let result = pack_into(opts, &tmp);
    match result {
        Ok(stats) => {
            fs::rename(&tmp, &opts.output).map_err(|e| {
                let _ = fs::remove_file(&tmp);
                format!("cannot rename into {}: {e}", opts.output.display())
            })?;
            Ok(stats)
        }
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn pack_into(opts: &PackOptions, tmp: &Path) -> Result<PackStats, String> {
    peregrine_files::check_cache_control(&opts.cache_control).map_err(|e| format!("--cache-control: {e}"))?;
    let revoked = opts
        .revoked
        .iter()
        .map(|p| revoked_key(p))
        .collect::<Result<Vec<String>, String>>()?;
    // Read and written: a signature is made over the bytes read back.
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)
        .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let mut w = Writer::new(file).map_err(|e| e.to_string())?;
    let mut stats = PackStats::default();
    let mut sites = vec![(None, opts.root.clone())];
    sites.extend(opts.hosts.iter().map(|(h, p)| (Some(h.clone()), p.clone())));
    for (site, (host, root)) in sites.iter().enumerate() {
        let site = u32::try_from(site).map_err(|_| "too many sites")?;
        if let Some(host) = host {
            w.add_host(host, site).map_err(|e| e.to_string())?;
        }
        pack_site(opts, &mut w, site, root, &mut stats)?;
        for path in &revoked {
            w.add_revoked(site, path).map_err(|e| format!("--revoke {path}: {e}"))?;
        }
    }
    w.set_default_site(0);
    stats.n_entries = 0;
    stats.archive_bytes = w
        .finish_sealed(opts.seal.as_ref())
        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    Ok(stats)
}

/// A `--revoke` path as it is stored: normalised as a request path is
/// (percent-decoded, dot segments removed), a trailing `/` kept (it
/// revokes everything below).
fn revoked_key(path: &str) -> Result<String, String> {
    match peregrine_files::path::normalize(path.as_bytes()) {
        Ok(p) => Ok(p.key()),
        Err(e) => Err(format!("--revoke {path:?}: {}", e.reason())),
    }
}

/// A file found in the tree.
struct Found {
    /// Site path, decoded, starting with `/`.
    path: String,
    disk: PathBuf,
    mtime: u64,
    /// Its length when walked (batches are bounded by it).
    size: u64,
}

fn pack_site(opts: &PackOptions, w: &mut Writer, site: u32, root: &Path, stats: &mut PackStats) -> Result<(), String> {
    let root = fs::canonicalize(root).map_err(|e| format!("cannot open {}: {e}", root.display()))?;
    if !root.is_dir() {
        return Err(format!("{} is not a directory", root.display()));
    }
    let mut files = Vec::new();
    let mut errors = Vec::new();
    walk(
        &root,
        &mut files,
        &mut errors,
        &mut stats.skipped_symlinks,
        &mut stats.skipped_loops,
        &mut stats.warnings,
    );
    if !errors.is_empty() {
        return Err(format!("cannot pack {}:\n  {}", root.display(), errors.join("\n  ")));
    }
    let headers_file = match files.iter().find(|f| f.path == "/_headers") {
        Some(f) => parse_headers(&read(&f.disk)?).map_err(|e| format!("{}: {e}", f.disk.display()))?,
        None => HeadersFile::default(),
    };
    // `Basic-Auth` rules, plain passwords hashed here: the archive holds
    // hashes only (FORMAT.md, KIND_AUTH).
    for rule in headers_file.sealed_auth() {
        w.add_auth(site, &rule.pattern, &rule.users.text(), rule.users.from_plain())
            .map_err(|e| e.to_string())?;
    }
    for pattern in headers_file.public_but_protected() {
        stats.warnings.push(format!(
            "{}/_headers: {pattern} is protected by Basic-Auth, so `Cache-Control: public` is dropped from \
             its answers (they are private to the user who signed in)",
            root.display()
        ));
    }
    let headers = headers_file.fields;
    let redirects = match files.iter().find(|f| f.path == "/_redirects") {
        Some(f) => parse_redirects_allowing(&read(&f.disk)?, &opts.proxy_allow)
            .map_err(|e| format!("{}: {e}", f.disk.display()))?,
        None => Vec::new(),
    };
    // Forced rules shadow files; others come after them.
    let is_ordered = ordered(&redirects);
    for (r, &is_ordered) in redirects.iter().zip(&is_ordered).filter(|(r, _)| r.force) {
        add_rule(w, site, r, is_ordered)?;
    }
    // `x.js.gz` beside `x.js` is a pre-compressed sibling for `serve DIR`;
    // the archive makes its own variants, so siblings are not entries.
    let paths: std::collections::HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let is_sibling = |p: &str| {
        Encoding::ALL
            .iter()
            .any(|e| p.strip_suffix(e.suffix()).is_some_and(|base| paths.contains(base)))
    };
    let files: Vec<&Found> = files
        .iter()
        .filter(|f| !is_sibling(&f.path) && !matches!(f.path.as_str(), "/_headers" | "/_redirects"))
        .collect();
    let total = files.len();
    let show = opts.progress && io::stderr().is_terminal() && total > 200;
    // Reading and compressing (brotli 11 and zstd 19 are most of pack's
    // time) run on every core, a batch at a time; entries are then added
    // in the walk's order, so the archive is the same bytes whatever the
    // number of threads.
    let n_threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let mut done = 0;
    for batch in batches(&files) {
        if show {
            eprint!("\rpacking {}: {done}/{total} files", root.display());
        }
        done += batch.len();
        let prepared = prepare_batch(opts, batch, &headers, n_threads);
        for (f, prepared) in batch.iter().zip(prepared) {
            let Prepared { variants, heads } = prepared?;
            add_file(w, site, f, &variants, &heads, opts.clean_urls, &paths, stats)?;
        }
    }
    if show {
        eprintln!("\rpacking {}: {total}/{total} files", root.display());
    }
    for (r, &is_ordered) in redirects.iter().zip(&is_ordered).filter(|(r, _)| !r.force) {
        add_rule(w, site, r, is_ordered)?;
    }
    // A loop between the rules and the archive's own 301s (a directory's,
    // clean URLs'), judged on the entries as written.
    let own = |at: &str| {
        let key = peregrine_files::path::normalize(at.as_bytes()).ok()?.key();
        w.own_redirect(site, &key)
    };
    let answers =
        |at: &str| peregrine_files::path::normalize(at.as_bytes()).is_ok_and(|p| w.is_resource(site, &p.key()));
    if let Some(paths) = find_redirect_loop(&redirects, &own, &answers) {
        return Err(format!("{}/{}", root.display(), loop_message(&paths)));
    }
    Ok(())
}

/// Adds a `_redirects` rule: under its path, unless a rule or (without
/// `!`) a file is there already (the first rule for a path wins; files win
/// unless forced); or, matched in order ([`ordered`]), as a pattern, keyed
/// by its text with its query conditions, flagged `FLAG_FORCED` with `!`.
fn add_rule(w: &mut Writer, site: u32, r: &Redirect, is_ordered: bool) -> Result<(), String> {
    let added = if is_ordered {
        let text = r.text();
        if w.has(site, &format!("\0pattern{text}")) {
            return Ok(()); // an earlier rule the same: it always wins
        }
        let flags = if r.force { FLAG_FORCED } else { 0 };
        w.add_redirect(site, KIND_PATTERN, flags, &text, r.status, &r.to)
    } else {
        if w.has(site, &r.from) {
            return Ok(());
        }
        // Flagged forced, so that a reader tries it before forced patterns.
        let flags = if r.force { FLAG_FORCED } else { 0 };
        w.add_redirect(site, KIND_REDIRECT, flags, &r.from, r.status, &r.to)
    };
    added.map_err(|e| e.to_string())
}

/// A file read, encoded and given its heads, ready to be added.
struct Prepared {
    variants: Encoded,
    /// The 200 and 304 header blocks of each variant, in `variants` order.
    heads: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Reads, compresses and builds the heads of a batch of files on
/// `n_threads` threads; the results come back in the batch's order.
fn prepare_batch(
    opts: &PackOptions,
    batch: &[&Found],
    headers: &[HeaderRule],
    n_threads: usize,
) -> Vec<Result<Prepared, String>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<Option<Result<Prepared, String>>> = Vec::new();
    out.resize_with(batch.len(), || None);
    let done = std::sync::Mutex::new(&mut out);
    std::thread::scope(|scope| {
        for _ in 0..n_threads.min(batch.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(f) = batch.get(i) else { break };
                let result = prepare(opts, f, headers);
                done.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(result);
            });
        }
    });
    out.into_iter()
        .map(|r| r.unwrap_or_else(|| Err("a packing thread stopped".to_owned())))
        .collect()
}

/// `files` cut into batches of at most `PACK_BATCH_FILES` files and
/// `PACK_BATCH_BYTES` bytes (a larger file is a batch alone), in order.
fn batches<'a>(files: &'a [&'a Found]) -> impl Iterator<Item = &'a [&'a Found]> {
    let mut rest = files;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = 0u64;
        let mut n = 0;
        while n < rest.len().min(PACK_BATCH_FILES) {
            bytes = bytes.saturating_add(rest[n].size);
            if n > 0 && bytes > PACK_BATCH_BYTES {
                break;
            }
            n += 1;
        }
        let (batch, after) = rest.split_at(n);
        rest = after;
        Some(batch)
    })
}

/// Reads one file, makes its variants and their heads.
fn prepare(opts: &PackOptions, f: &Found, headers: &[HeaderRule]) -> Result<Prepared, String> {
    let name = f.path.rsplit('/').next().unwrap_or_default();
    let body = read(&f.disk)?;
    let custom = headers_for(headers, &f.path);
    let content_type = peregrine_files::conventions::content_type(&custom, name);
    // The same settings `serve DIR` compresses with on the fly, so that a
    // directory and its archive send the same bytes.
    let variants = encode(body, &content_type, opts.compress).map_err(|e| format!("{}: {e}", f.disk.display()))?;
    let heads = variants
        .iter()
        .map(|(coding, bytes)| {
            heads(
                opts,
                &content_type,
                *coding,
                bytes,
                f.mtime,
                variants.len() > 1,
                &custom,
            )
        })
        .collect::<Result<_, _>>()?;
    Ok(Prepared { variants, heads })
}

/// Adds a prepared file under its keys, and the redirects that lead to
/// them: a directory's (`/dir` → `/dir/`), and with `CleanUrls::Redirect`
/// the file's own name to its clean form. `paths`: every file of the site.
#[allow(clippy::too_many_arguments)]
fn add_file(
    w: &mut Writer,
    site: u32,
    f: &Found,
    variants: &Encoded,
    heads: &[(Vec<u8>, Vec<u8>)],
    clean: CleanUrls,
    paths: &std::collections::HashSet<&str>,
    stats: &mut PackStats,
) -> Result<(), String> {
    let name = f.path.rsplit('/').next().unwrap_or_default();
    let folder = &f.path[..f.path.len() - name.len()];
    // (key, flags) of the resource; (from, to) of redirects to it.
    let mut keys: Vec<(String, u8)> = Vec::new();
    let mut canonical: Option<(String, String)> = None;
    if name == "_404.html" && folder == "/" {
        keys.push((NOT_FOUND_KEY.to_owned(), FLAG_NOT_FOUND));
    } else if name.starts_with("_wildcard.") {
        keys.push((format!("{folder}{WILDCARD_KEY}"), FLAG_WILDCARD));
    } else {
        let stem = name.strip_suffix(".html").filter(|s| !s.is_empty() && *s != "index");
        let clean_key = stem
            .filter(|_| clean != CleanUrls::Off)
            .map(|stem| format!("{folder}{stem}"))
            .filter(|key| !paths.contains(key.as_str()));
        if name == "index.html" {
            keys.push((folder.to_owned(), 0));
            if clean == CleanUrls::Redirect {
                canonical = Some((f.path.clone(), folder.to_owned()));
            } else {
                keys.push((f.path.clone(), 0));
            }
        } else if let Some(clean_key) = clean_key {
            keys.push((clean_key.clone(), 0));
            if clean == CleanUrls::Redirect {
                canonical = Some((f.path.clone(), clean_key));
            } else {
                keys.push((f.path.clone(), 0));
            }
        } else {
            keys.push((f.path.clone(), 0));
        }
        if name == "404.html" && !(folder == "/" && paths.contains("/_404.html")) {
            keys.push((format!("{folder}{NOT_FOUND_SUFFIX}"), FLAG_NOT_FOUND));
        }
    }
    stats.n_files += 1;
    // The file as read (its identity variant), not the encodings made of it.
    stats.bytes_in += variants
        .iter()
        .find(|(coding, _)| coding.is_none())
        .map_or(0, |(_, body)| body.len() as u64);
    for (key, flags) in &keys {
        if w.has(site, key) {
            continue; // a forced redirect shadows it
        }
        let mut slots: [Option<VariantIn<'_>>; N_VARIANTS] = Default::default();
        for ((coding, bytes), (h200, h304)) in variants.iter().zip(heads) {
            slots[variant_index(*coding)] = Some(VariantIn {
                body: bytes,
                head_200: h200,
                head_304: h304,
            });
        }
        w.add_resource(site, key, *flags, f.mtime, slots)
            .map_err(|e| format!("{}: {e}", f.disk.display()))?;
    }
    if let Some((from, to)) = canonical {
        if !w.has(site, &from) {
            let location = peregrine_files::path::encode(&to);
            w.add_redirect(
                site,
                KIND_REDIRECT,
                FLAG_KEEP_QUERY | FLAG_CANONICAL,
                &from,
                301,
                &location,
            )
            .map_err(|e| e.to_string())?;
        }
    }
    if name == "index.html" && folder != "/" {
        let dir = folder.trim_end_matches('/');
        // `dir.html` answers `/dir` with clean URLs.
        let page = clean != CleanUrls::Off && paths.contains(format!("{dir}.html").as_str());
        if !w.has(site, dir) && !page {
            let location = peregrine_files::path::encode(folder);
            w.add_redirect(site, KIND_REDIRECT, FLAG_KEEP_QUERY, dir, 301, &location)
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

fn variant_index(coding: Option<Encoding>) -> usize {
    match coding {
        None => 0,
        Some(Encoding::Brotli) => 1,
        Some(Encoding::Zstd) => 2,
        Some(Encoding::Gzip) => 3,
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Walks the tree in byte order of names (depth first, as `walkdir` sorts).
/// Dotfiles are left out (except `.well-known`); symlinks are followed only
/// when they resolve inside the root and not to a dotfile (`serve DIR`'s
/// rules), and a symlink back to one of its own ancestors (`ln -s .. d/up`)
/// is a loop: skipped once, named in `loops`, not followed 40 levels deep.
/// Other symlinks not followed are named in `skipped` with why, and what is
/// not a regular file (a FIFO, a socket, a device) in `warnings`.
fn walk(
    root: &Path,
    out: &mut Vec<Found>,
    errors: &mut Vec<String>,
    skipped: &mut Vec<(String, SymlinkSkip)>,
    loops: &mut Vec<String>,
    warnings: &mut Vec<String>,
) {
    // Decided before walkdir descends, so nothing refused is read.
    let mut refused: Vec<Result<(String, SymlinkSkip), String>> = Vec::new();
    let entries = walkdir::WalkDir::new(root)
        .follow_links(true)
        .sort_by_file_name()
        .min_depth(1)
        .into_iter()
        .filter_entry(|e| admit(root, e, &mut refused));
    for entry in entries {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                let path = e.path().unwrap_or(root).to_owned();
                if e.loop_ancestor().is_some() {
                    loops.push(site_path(root, &path));
                } else if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
                    // Its target could not be read: missing, a loop, ...
                    let why = e.io_error().map_or(SymlinkSkip::Dangling, SymlinkSkip::of);
                    skipped.push((site_path(root, &path), why));
                } else {
                    errors.push(format!("{}: {}", path.display(), io::Error::from(e)));
                }
                continue;
            }
        };
        if !entry.file_type().is_file() {
            use std::os::unix::fs::FileTypeExt;
            let t = entry.file_type();
            let kind = if t.is_fifo() {
                "a FIFO"
            } else if t.is_socket() {
                "a Unix socket"
            } else if t.is_block_device() || t.is_char_device() {
                "a device"
            } else {
                continue; // a directory
            };
            warnings.push(format!(
                "skipped {}: {kind} (only regular files are packed)",
                site_path(root, entry.path())
            ));
            continue;
        }
        let meta = match entry.metadata() {
            Ok(m) => m,
            Err(e) => {
                errors.push(format!("{}: {}", entry.path().display(), io::Error::from(e)));
                continue;
            }
        };
        // A file nobody may read (mode 000) is one its owner withheld: root
        // could read it, and would publish it; anyone else cannot. Refused
        // alike for every user, as `serve DIR` refuses to run as root.
        if std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o444 == 0 {
            errors.push(format!(
                "{}: readable by no one (mode {:03o}); give it a read bit or move it out of the tree",
                entry.path().display(),
                std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777
            ));
            continue;
        }
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        out.push(Found {
            path: site_path(root, entry.path()),
            disk: entry.into_path(),
            mtime,
            size: meta.len(),
        });
    }
    for r in refused {
        match r {
            Ok(symlink) => skipped.push(symlink),
            Err(e) => errors.push(e),
        }
    }
}

/// Whether the walk takes `e` (and, for a directory, descends into it).
/// Refusals worth a word go to `refused`: `Ok((site path, why))` for a
/// symlink not followed, `Err(message)` for a name that is not UTF-8.
fn admit(root: &Path, e: &walkdir::DirEntry, refused: &mut Vec<Result<(String, SymlinkSkip), String>>) -> bool {
    let Some(name) = e.file_name().to_str() else {
        refused.push(Err(format!("{}: file name is not UTF-8", e.path().display())));
        return false;
    };
    if name.starts_with('.') && !(e.depth() == 1 && name == ".well-known") {
        return false;
    }
    if e.path_is_symlink() {
        if let Some(why) = symlink_refusal(root, e.path()) {
            refused.push(Ok((site_path(root, e.path()), why)));
            return false;
        }
    }
    true
}

/// Why the symlink at `path` is not followed, if it is not: where it
/// resolves to must be inside `root` (itself resolved) and name no
/// dotfile there, as `serve DIR` judges what it opens through a symlink
/// (`peregrine_files::path::is_hidden_resolved`). An entry below a symlink
/// followed, and not itself one, resolves to a followed directory and a
/// name the walk admitted: nothing more to judge.
fn symlink_refusal(root: &Path, path: &Path) -> Option<SymlinkSkip> {
    let target = match fs::canonicalize(path) {
        Ok(target) => target,
        Err(e) => return Some(SymlinkSkip::of(&e)),
    };
    let Ok(inside) = target.strip_prefix(root) else {
        return Some(SymlinkSkip::Outside);
    };
    let resolved: Vec<&[u8]> = inside.components().map(|c| c.as_os_str().as_bytes()).collect();
    peregrine_files::path::is_hidden_resolved(&site_path(root, path), &resolved).then_some(SymlinkSkip::Dotfile)
}

/// `/a/b` for `root/a/b`: every name on the way was admitted, so is UTF-8.
fn site_path(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    rel.components().fold(String::new(), |mut s, c| {
        s.push('/');
        s.push_str(&c.as_os_str().to_string_lossy());
        s
    })
}

fn heads(
    opts: &PackOptions,
    content_type: &str,
    coding: Option<Encoding>,
    body: &[u8],
    mtime: u64,
    negotiable: bool,
    custom: &[(String, String)],
) -> Result<(Vec<u8>, Vec<u8>), String> {
    let etag = etag(body.len() as u64, hash(body));
    let lm = httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(mtime));
    let cache_control = custom
        .iter()
        .rev()
        .find(|(n, _)| n.eq_ignore_ascii_case("cache-control"))
        .map_or(opts.cache_control.as_str(), |(_, v)| v.as_str());
    let mut f200: Vec<(&str, &str)> = vec![
        ("Content-Type", content_type),
        ("ETag", &etag),
        ("Last-Modified", &lm),
        ("Accept-Ranges", "bytes"),
        ("Cache-Control", cache_control),
    ];
    if negotiable {
        f200.push(("Vary", "Accept-Encoding"));
    }
    if let Some(c) = coding {
        f200.push(("Content-Encoding", c.name()));
    }
    if opts.security_headers {
        for &(n, v) in peregrine_files::security_headers(content_type) {
            if !custom.iter().any(|(cn, _)| cn.eq_ignore_ascii_case(n)) {
                f200.push((n, v));
            }
        }
    }
    for (n, v) in custom {
        if !peregrine_files::conventions::is_replacing_field(n) {
            f200.push((n, v));
        }
    }
    let mut f304: Vec<(&str, &str)> = vec![
        ("ETag", &etag),
        ("Last-Modified", &lm),
        ("Cache-Control", cache_control),
    ];
    if negotiable {
        f304.push(("Vary", "Accept-Encoding"));
    }
    // What a 304 must repeat of the 200 (RFC 9110 §15.4.5), as `serve DIR`
    // builds its 304s.
    for (n, v) in custom {
        if peregrine_files::conventions::is_304_field(n) {
            f304.push((n, v));
        }
    }
    let block = |f: &[(&str, &str)]| peregrine::HeaderBlock::new(f).map(|b| b.as_bytes().to_vec());
    Ok((block(&f200)?, block(&f304)?))
}
