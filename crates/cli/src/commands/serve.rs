//! `hello` and `serve`: what is refused before anything is bound (staying
//! root, flags that mean nothing for what ROOT is). Serving itself, with
//! its reloads, is `reload.rs`.

use std::path::Path;

use anyhow::Context;

use peregrine_files::Options;

use crate::config;
use crate::flags::{Command, FileArgs, ServeArchiveArgs, DEFAULT_INDEX};

/// Why `serve` must not run as this process: started as root and staying
/// root (no `--user`, or `--user` naming uid 0) without `--allow-root`.
/// Root reads every file whatever its mode, so a file locked away from
/// everyone (mode 000, or readable by its owner only) would be served,
/// where any other user gets 403. `hello` reads no file: not refused.
/// `run_as` is `--user` and `--group` resolved to numbers.
pub(crate) fn root_refusal(command: &Command, run_as: &peregrine::Identity) -> Option<String> {
    let Command::Serve {
        allow_root: false,
        server,
        ..
    } = command
    else {
        return None;
    };
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    const WHY: &str = "root reads every file, whatever its mode, so a file made unreadable (mode 000) \
                       would be served; pass --user NAME to give up root once the ports are bound, or \
                       --allow-root (allow-root = true) to serve as root anyway";
    match (run_as.user.as_deref(), &server.user) {
        (None, _) => Some(format!("refusing to run as root without --user: {WHY}")),
        (Some("0"), Some(user)) => Some(format!(
            "refusing to run as root: --user {user}{} is root (uid 0): {WHY}",
            config::origin("--user")
        )),
        _ => None,
    }
}

/// Whether `serve ROOT` serves an archive: any file that is not a
/// directory is taken for one, so that a wrong file is named as "not a
/// Peregrine archive" (with what it starts with) rather than as a directory
/// that cannot be opened. Refuses the flags that mean nothing for what ROOT
/// is, which would otherwise be silently ignored.
pub(crate) fn is_archive_root(root: &Path, files: &FileArgs, archive: &ServeArchiveArgs) -> anyhow::Result<bool> {
    // A root that is not there, named with where it was set (a file's line,
    // a variable) as the pairs' errors are.
    let metadata = std::fs::metadata(root)
        .with_context(|| format!("cannot serve {}{}", root.display(), config::origin("root")))?;
    let is_archive = !metadata.is_dir();
    let shown = root.display();
    if is_archive {
        // Each with where its setting lives in an archive.
        let misplaced = [
            (
                files.index != [DEFAULT_INDEX],
                "--index",
                "pack serves index.html for a directory",
            ),
            (files.list_dirs, "--list-dirs", "an archive has no listings"),
            (
                files.follow_symlinks,
                "--follow-symlinks",
                "pack decides which symlinks it follows",
            ),
            (files.not_found.is_some(), "--404", "pack takes _404.html"),
            (
                files.clean_urls != peregrine_files::CleanUrls::default(),
                "--clean-urls",
                "use pack --clean-urls",
            ),
            (files.fallback.is_some(), "--fallback", "pack takes _wildcard.*"),
            (
                !files.cache_control.is_empty(),
                "--cache-control",
                "use pack --cache-control or _headers",
            ),
            (
                files.no_security_headers,
                "--no-security-headers",
                "use pack --no-security-headers",
            ),
            (files.no_precompressed, "--no-precompressed", "use pack --no-compress"),
            (files.no_compress, "--no-compress", "use pack --no-compress"),
            (
                files.revalidate_interval != Some(Options::new("").revalidate_interval.as_secs_f64()),
                "--revalidate-interval",
                "an archive is swapped whole when its file is replaced",
            ),
            (
                files.cache_entries != Options::new("").cache_entries as u64,
                "--cache-entries",
                "an archive is mapped whole, with every head pre-built",
            ),
        ];
        let given: Vec<String> = misplaced
            .iter()
            .filter(|(given, ..)| *given)
            .map(|(_, flag, instead)| format!("{flag}{} ({instead})", config::origin(flag)))
            .collect();
        anyhow::ensure!(
            given.is_empty(),
            "{shown} is an archive, whose answers were fixed when it was packed, so these flags for a \
             directory mean nothing here: {}",
            given.join(", ")
        );
    } else {
        let misplaced = [
            (archive.in_memory, "--in-memory"),
            (archive.prefault, "--prefault"),
            (!archive.require_signature.is_empty(), "--require-signature"),
            (archive.allow_rollback, "--allow-rollback"),
            (archive.deploy_number_min.is_some(), "--deploy-number-min"),
            (archive.keep_previous.is_some(), "--keep-previous"),
            (archive.keep_previous_all, "--keep-previous-all"),
        ];
        let given: Vec<String> = misplaced
            .iter()
            .filter(|(given, _)| *given)
            .map(|(_, flag)| format!("{flag}{}", config::origin(flag)))
            .collect();
        anyhow::ensure!(
            given.is_empty(),
            "{} applies to an archive, and {shown} is a directory",
            given.join(" and ")
        );
    }
    Ok(is_archive)
}
