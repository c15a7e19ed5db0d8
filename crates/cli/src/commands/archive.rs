//! Site archives: `pack` writes one, `archive ls|cat|verify|stat` reads
//! one back (`archive diff`: `diff.rs`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;

use peregrine_archive::format::{
    FLAG_NOT_FOUND, KIND_AUTH, KIND_PATTERN, KIND_REDIRECT, KIND_REVOKED, NOT_FOUND_SUFFIX, WILDCARD_KEY,
};
use peregrine_archive::{Archive, Mode, PackOptions, PublicKey, Seal, SigningKey};
use peregrine_files::auth::Users;

use crate::flags::{ArchiveCommand, Command};
use crate::messages::counted;

/// `peregrine pack DIR -o ARCHIVE`, with `--host NAME=DIR` sites, the
/// default Cache-Control and the switches, each skipped symlink named;
/// signed with `--sign`.
pub(crate) fn pack(command: Command) -> anyhow::Result<()> {
    let Command::Pack {
        root,
        output,
        hosts,
        cache_control,
        no_security_headers,
        no_compress,
        clean_urls,
        sign,
        deploy_number,
        revoke,
        proxy_allow,
        proxy_allow_network,
    } = command
    else {
        unreachable!("pack's flags")
    };
    let output = output.as_path();
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
    opts.revoked = revoke;
    // The list only: nothing is resolved or connected to while packing.
    opts.proxy_allow = (*crate::proxy::rule_allow(&proxy_allow, &proxy_allow_network, false)?).clone();
    if let Some(keyfile) = &sign {
        let key = read_signing_key(keyfile)?;
        let created = created()?;
        opts.seal = Some(Seal {
            key: Arc::new(key),
            created,
            deploy_number: deploy_number.unwrap_or(created),
        });
    }
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
    if let Some(seal) = &opts.seal {
        eprintln!(
            "peregrine: signed with key {} (created {}, deploy number {})",
            seal.key.public_key().id(),
            shown_time(seal.created),
            seal.deploy_number
        );
    }
    Ok(())
}

/// When an archive is signed: now, or `SOURCE_DATE_EPOCH` (the
/// reproducible-builds convention) when set.
fn created() -> anyhow::Result<u64> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) => v
            .trim()
            .parse()
            .with_context(|| format!("SOURCE_DATE_EPOCH={v:?} is not a whole number of seconds")),
        Err(_) => Ok(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .context("the clock is before 1970")?
            .as_secs()),
    }
}

/// Seconds since the epoch as an HTTP date, and the number.
fn shown_time(secs: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    format!("{} ({secs})", httpdate::fmt_http_date(t))
}

/// A `pack --sign` key file.
fn read_signing_key(path: &Path) -> anyhow::Result<SigningKey> {
    let text = std::fs::read_to_string(path).with_context(|| format!("--sign {}", path.display()))?;
    SigningKey::from_pem(&text).with_context(|| format!("--sign {}", path.display()))
}

/// An `archive verify --key` or `serve --require-signature` key file.
pub(crate) fn read_public_key(path: &Path) -> anyhow::Result<PublicKey> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    PublicKey::from_pem(&text).with_context(|| format!("{}", path.display()))
}

/// `peregrine archive keygen OUT`: the private key in OUT (created, never
/// replaced, readable by its owner only), the public key in OUT.pub.
fn keygen(out: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let (key, private) = SigningKey::generate()?;
    let public = key.public_key();
    let mut pub_path = out.as_os_str().to_owned();
    pub_path.push(".pub");
    let pub_path = PathBuf::from(pub_path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .with_context(|| format!("cannot create {} (an existing key is never replaced)", out.display()))?;
    file.write_all(private.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", out.display()))?;
    std::fs::write(&pub_path, public.to_pem()).with_context(|| format!("cannot write {}", pub_path.display()))?;
    eprintln!(
        "peregrine: wrote the private key to {} (for pack --sign; keep it secret) and the public key to {} (for \
         serve --require-signature)",
        out.display(),
        pub_path.display()
    );
    println!("key id: {}", public.id());
    print!("{}", public.to_pem());
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
                    KIND_REVOKED => {
                        rows.push([site, shown_key(&e), "-".to_owned(), "-".to_owned()]);
                        continue;
                    }
                    KIND_REDIRECT | KIND_PATTERN => (e.status(), format!("-> {}", shown_bytes(e.location()))),
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
        ArchiveCommand::Verify { archive, key } => verify(&archive, &key)?,
        ArchiveCommand::Keygen { out } => keygen(&out)?,
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
            let (mut resources, mut redirects, mut revoked, mut bodies, mut protected) = (0, 0, 0, 0u64, 0);
            for e in a.entries() {
                if e.kind() == KIND_REVOKED {
                    revoked += 1;
                } else if e.kind() == KIND_REDIRECT || e.kind() == KIND_PATTERN {
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
            if revoked > 0 {
                println!("revoked paths: {revoked}");
            }
            if let Some(sig) = a.signature() {
                println!(
                    "signed: key {}, created {}, deploy number {}",
                    sig.key_id,
                    shown_time(sig.created),
                    sig.deploy_number
                );
            }
            for (host, site) in a.hosts() {
                println!("host: {host} -> site {site}");
            }
        }
    }
    Ok(())
}

/// `archive verify ARCHIVE [--key PUBKEY]...`: each body's checksum (so
/// that a damaged one is named), the data checksum (which covers the
/// heads too), and with keys the signature over every byte. A signed
/// archive's key id, creation time and deploy number are printed, on
/// standard output, one `name: value` a line.
fn verify(archive: &Path, keys: &[PathBuf]) -> anyhow::Result<()> {
    let trusted = keys
        .iter()
        .map(|k| read_public_key(k).context("--key"))
        .collect::<anyhow::Result<Vec<PublicKey>>>()?;
    let a = Archive::open(archive, Mode::Map)?;
    let shown = archive.display();
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
    if let Some(sig) = a.signature() {
        println!("key id: {}", sig.key_id);
        println!("created: {}", shown_time(sig.created));
        println!("deploy number: {}", sig.deploy_number);
    }
    if trusted.is_empty() {
        a.verify_data().with_context(|| format!("{shown}: damaged"))?;
        if a.signature().is_some() {
            println!("signature: not checked (no --key)");
        }
    } else {
        a.verify_signed(&trusted).with_context(|| format!("{shown}: refused"))?;
        println!("signature: OK");
    }
    eprintln!("peregrine: {shown}: OK ({} entries)", a.n_entries());
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
            Some(folder) => format!("{}* (the 404 page)", shown_bytes(folder)),
        };
    }
    if let Some(folder) = path.strip_suffix(WILDCARD_KEY.as_bytes()) {
        return format!("{}* (wildcard)", shown_bytes(folder));
    }
    if e.kind() == KIND_AUTH {
        return format!("{} (Basic-Auth)", shown_bytes(path));
    }
    if e.kind() == KIND_REVOKED {
        return format!("{} (revoked)", shown_bytes(path));
    }
    shown_bytes(path)
}

/// Bytes of a path or location as a terminal should show them: UTF-8 as it
/// is (`/héllo wörld.txt`), and as escapes only what is not UTF-8 (`\xff`),
/// a control character (`\n`, `\u{1b}`) or an invisible one that reorders
/// or hides text (the bidirectional overrides and isolates, zero-width
/// characters, U+FEFF). A backslash is shown doubled, so that an escape is
/// never confused with a name that spells one.
pub(super) fn shown_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() || is_invisible(c) => out.extend(c.escape_default()),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Characters that print as nothing yet change what a terminal shows: the
/// zero-width ones, the bidirectional marks, embeddings, overrides and
/// isolates (the "Trojan Source" characters, CVE-2021-42574), and the BOM.
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

#[cfg(test)]
mod tests {
    use super::shown_bytes;

    #[test]
    fn names_are_shown_as_written_and_only_what_cannot_print_is_escaped() {
        for (bytes, shown) in [
            (&b"/h\xc3\xa9llo w\xc3\xb6rld.txt"[..], "/héllo wörld.txt"),
            ("/日本語/索引.html".as_bytes(), "/日本語/索引.html"),
            (b"/latin1-\xe9t\xe9", "/latin1-\\xe9t\\xe9"),
            (b"/cut-\xc3", "/cut-\\xc3"),
            (b"/a\nb\tc\x1b[31m", "/a\\nb\\tc\\u{1b}[31m"),
            (b"/del\x7f", "/del\\u{7f}"),
            ("/rtl\u{202e}txt.exe".as_bytes(), "/rtl\\u{202e}txt.exe"),
            (b"/back\\slash", "/back\\\\slash"),
        ] {
            assert_eq!(shown_bytes(bytes), shown, "{}", bytes.escape_ascii());
        }
    }
}
