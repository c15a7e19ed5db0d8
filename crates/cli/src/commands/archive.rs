//! Site archives: `pack` writes one, `archive ls|cat|verify|stat` reads
//! one back (`archive diff`: `diff.rs`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use peregrine_archive::format::{
    FLAG_NOT_FOUND, KIND_AUTH, KIND_PATTERN, KIND_REDIRECT, NOT_FOUND_SUFFIX, WILDCARD_KEY,
};
use peregrine_archive::{Archive, Mode, PackOptions};
use peregrine_files::auth::Users;

use crate::flags::ArchiveCommand;
use crate::messages::counted;

/// `peregrine pack DIR -o ARCHIVE`, with `--host NAME=DIR` sites, the
/// default Cache-Control and the switches, each skipped symlink named.
pub(crate) fn pack(
    root: PathBuf,
    output: &Path,
    hosts: Vec<String>,
    cache_control: String,
    no_security_headers: bool,
    no_compress: bool,
    clean_urls: peregrine_files::CleanUrls,
) -> anyhow::Result<()> {
    let mut opts = PackOptions::new(root, output);
    opts.clean_urls = clean_urls;
    for h in hosts {
        let (name, dir) = h
            .split_once('=')
            .with_context(|| format!("--host {h:?}: expected NAME=DIR"))?;
        opts.hosts.push((name.to_owned(), PathBuf::from(dir)));
    }
    opts.cache_control = cache_control;
    opts.security_headers = !no_security_headers;
    opts.compress = !no_compress;
    let opts_compress = opts.compress;
    opts.progress = true;
    let stats = peregrine_archive::pack(&opts).map_err(anyhow::Error::msg)?;
    for (s, why) in &stats.skipped_symlinks {
        eprintln!("peregrine: skipped {s}: {why}");
    }
    for w in &stats.warnings {
        eprintln!("peregrine: {w}");
    }
    for s in &stats.skipped_loops {
        eprintln!("peregrine: skipped {s}: a symlink loop (it leads back to a directory above it)");
    }
    eprintln!(
        "peregrine: packed {} ({} bytes read) into {}: {} bytes, with every response's head{}",
        counted(stats.n_files, "file"),
        stats.bytes_in,
        output.display(),
        stats.archive_bytes,
        if opts_compress {
            " and its compressed variants"
        } else {
            ""
        }
    );
    Ok(())
}

/// `peregrine archive ls|cat|verify|stat ARCHIVE`.
pub(crate) fn inspect(command: ArchiveCommand) -> anyhow::Result<()> {
    match command {
        ArchiveCommand::Ls { archive } => {
            let a = Archive::open(&archive, Mode::Map)?;
            let labels = site_labels(&a);
            let mut rows = vec![[
                "SITE".to_owned(),
                "PATH".to_owned(),
                "STATUS".to_owned(),
                format!("BODY BYTES ({})", ENCODINGS.join(" ")),
            ]];
            for e in a.entries() {
                let site = labels
                    .get(&e.site())
                    .cloned()
                    .unwrap_or_else(|| format!("site {}", e.site()));
                let (status, body) = match e.kind() {
                    KIND_REDIRECT | KIND_PATTERN => (e.status(), format!("-> {}", e.location().escape_ascii())),
                    // Who may read it, counted: never a hash.
                    KIND_AUTH => (e.status(), format!("Basic-Auth: {}", users_shown(&e))),
                    _ => {
                        let sizes: Vec<String> = (0..ENCODINGS.len())
                            .map(|i| e.variant(i).map_or("-".to_owned(), |v| v.body_len.to_string()))
                            .collect();
                        let status = if e.flags() & FLAG_NOT_FOUND != 0 { 404 } else { 200 };
                        (status, sizes.join(" "))
                    }
                };
                rows.push([site, shown_key(&e), status.to_string(), body]);
            }
            let mut widths = [0; 3];
            for row in &rows {
                for (w, cell) in widths.iter_mut().zip(row) {
                    *w = (*w).max(cell.chars().count());
                }
            }
            let mut out = std::io::stdout().lock();
            for [site, path, status, body] in rows {
                let [w0, w1, w2] = widths;
                if writeln!(out, "{site:w0$}  {path:w1$}  {status:w2$}  {body}").is_err() {
                    break; // a closed pipe (`| head`) is not an error
                }
            }
        }
        ArchiveCommand::Cat { archive, path, host } => {
            let a = Archive::open(&archive, Mode::Map)?;
            let site = a.site_for_host(host.as_deref());
            // A protected pattern itself, as `_headers` would say it, its
            // users counted: an archive's hashes are never printed.
            if let Some(rule) = a.auth_rules(site).find(|r| r.pattern == path) {
                println!("{}\n  Basic-Auth: {}", rule.pattern, rule.users.shown());
                return Ok(());
            }
            let e = a
                .get(site, path.as_bytes())
                .with_context(|| format!("{path}: no such entry in {}", archive.display()))?;
            let v = e
                .variant(0)
                .with_context(|| format!("{path}: not a file (a redirect)"))?;
            if let Some(users) = a.auth_for(site, &path) {
                eprintln!("peregrine: {path} is protected (Basic-Auth: {})", users.shown());
            }
            std::io::stdout().write_all(a.slice(v.body_off, v.body_len))?;
        }
        ArchiveCommand::Verify { archive } => {
            let a = Archive::open(&archive, Mode::Map)?;
            let shown = archive.display();
            // Each body first, so that a damaged one is named; then the
            // data checksum, which also covers the response heads.
            let labels = site_labels(&a);
            let mut damaged = Vec::new();
            for e in a.entries() {
                for (i, encoding) in ENCODINGS.iter().enumerate() {
                    let Some(v) = e.variant(i) else { continue };
                    if peregrine_archive::format::hash(a.slice(v.body_off, v.body_len)) != v.body_hash {
                        let site = labels.get(&e.site()).map_or("?", String::as_str);
                        damaged.push(format!("{} ({encoding}, site {site})", shown_key(&e)));
                    }
                }
            }
            anyhow::ensure!(
                damaged.is_empty(),
                "{shown}: damaged: checksum mismatch in the body of {}",
                damaged.join(", ")
            );
            a.verify_data().with_context(|| format!("{shown}: damaged"))?;
            eprintln!("peregrine: {shown}: OK ({} entries)", a.n_entries());
        }
        ArchiveCommand::Diff {
            old,
            new,
            json,
            exit_code,
        } => {
            let differ = super::diff::diff(&old, &new, json)?;
            if differ && exit_code {
                std::process::exit(1);
            }
        }
        ArchiveCommand::Stat { archive } => {
            let a = Archive::open(&archive, Mode::Map)?;
            let (mut resources, mut redirects, mut bodies, mut protected) = (0, 0, 0u64, 0);
            for e in a.entries() {
                if e.kind() == KIND_REDIRECT || e.kind() == KIND_PATTERN {
                    redirects += 1;
                } else if e.kind() == KIND_AUTH {
                    protected += 1;
                } else {
                    resources += 1;
                    bodies += (0..4).filter_map(|i| e.variant(i)).map(|v| v.body_len).sum::<u64>();
                }
            }
            println!("archive: {}", archive.display());
            println!("bytes: {}", a.len());
            println!(
                "entries: {} ({resources} resources, {redirects} redirects, {protected} Basic-Auth rules)",
                a.n_entries()
            );
            println!("body bytes referenced (all encodings, before dedup): {bodies}");
            for (host, site) in a.hosts() {
                println!("host: {host} -> site {site}");
            }
        }
    }
    Ok(())
}

/// The body encodings an archive entry may hold, in variant order.
pub(super) const ENCODINGS: [&str; 4] = ["identity", "br", "zstd", "gzip"];

/// How `archive ls` and `verify` name an archive's sites: `default` for the
/// site served when no `--host` name matches, else its host names.
pub(super) fn site_labels(a: &Archive) -> BTreeMap<u32, String> {
    let mut labels = BTreeMap::from([(0, "default".to_owned())]);
    for (host, site) in a.hosts() {
        labels
            .entry(site)
            .and_modify(|l| {
                if site != 0 {
                    *l = format!("{l},{host}");
                }
            })
            .or_insert(host);
    }
    labels
}

/// A `Basic-Auth` entry's users as `archive ls`, `cat` and `diff` show
/// them: `<N users>`.
pub(super) fn users_shown(e: &peregrine_archive::read::Entry<'_>) -> String {
    match std::str::from_utf8(e.location()).map(Users::parse) {
        Ok(Ok(users)) => users.shown(),
        _ => "<unreadable>".to_owned(),
    }
}

/// An entry's key as a reader would write it: the conventions' internal
/// keys (`/\0not-found`, `DIR/\0not-found`, `DIR/\0wildcard`) by what they are, other bytes
/// that are not printable escaped.
pub(super) fn shown_key(e: &peregrine_archive::read::Entry<'_>) -> String {
    let path = e.path();
    if e.flags() & FLAG_NOT_FOUND != 0 {
        // The root's, or a folder's (`404.html` below it).
        return match path.strip_suffix(NOT_FOUND_SUFFIX.as_bytes()) {
            Some(b"/") | None => "(the 404 page)".to_owned(),
            Some(folder) => format!("{}* (the 404 page)", folder.escape_ascii()),
        };
    }
    if let Some(folder) = path.strip_suffix(WILDCARD_KEY.as_bytes()) {
        return format!("{}* (wildcard)", folder.escape_ascii());
    }
    if e.kind() == KIND_AUTH {
        return format!("{} (Basic-Auth)", path.escape_ascii());
    }
    path.escape_ascii().to_string()
}
