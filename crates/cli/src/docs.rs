//! Shell completions, man pages and `--version`'s build information, all
//! made from the command line's definition so they cannot fall behind it.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use clap::Command;
use clap_complete::Shell;

/// `peregrine --version`: what was built, from what, with what (build.rs).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\nrevision: ",
    env!("PEREGRINE_GIT_REVISION"),
    "\nrustc: ",
    env!("PEREGRINE_RUSTC_VERSION"),
    "\ntarget: ",
    env!("PEREGRINE_TARGET"),
    "\nprofile: ",
    env!("PEREGRINE_PROFILE"),
);

/// Writes the completion script for `shell` to standard output.
pub fn completions(mut cmd: Command, shell: Shell) -> anyhow::Result<()> {
    let name = cmd.get_name().to_owned();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut out);
    write_stdout(&out)
}

/// Writes the man page of the whole command, or of one subcommand, as roff
/// to standard output; or every page into `dir` (`peregrine.1`,
/// `peregrine-serve.1`, ...).
pub fn man(cmd: Command, subcommand: Option<&str>, dir: Option<&Path>) -> anyhow::Result<()> {
    // The generated `help` subcommand has no page worth installing.
    let mut cmd = cmd.disable_help_subcommand(true);
    // Building names subcommands for their pages (`peregrine-serve`).
    cmd.build();
    if let Some(dir) = dir {
        // Made if missing, as `mkdir -p` would (`--out-dir share/man/man1`).
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        return write_pages(&cmd, dir).with_context(|| format!("cannot write man pages into {}", dir.display()));
    }
    let page = match subcommand {
        None => &cmd,
        Some(name) => cmd
            .find_subcommand(name)
            .with_context(|| format!("no subcommand {name:?}"))?,
    };
    write_stdout(&page_of(page)?)
}

/// Writes the page of `cmd` and of each of its subcommands into `dir`.
fn write_pages(cmd: &Command, dir: &Path) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir)?;
    }
    let name = clap_mangen::Man::new(cmd.clone()).get_filename();
    std::fs::write(dir.join(name), page_of(cmd)?)
}

/// One page: clap_mangen's sections, with a synopsis that shows each
/// option's value (`--bind ADDR`, not `--bind`), and the sections a
/// server's page needs that no flag carries: SIGNALS, FILES, ENVIRONMENT,
/// EXAMPLES.
fn page_of(cmd: &Command) -> std::io::Result<Vec<u8>> {
    use clap_mangen::roff::{bold, italic, roman, Roff};
    // Every page's footer names the program and its version; clap_mangen
    // would give a subcommand's page its bare name ("serve") instead, since
    // only the top command carries the version.
    let man = clap_mangen::Man::new(cmd.clone()).source(concat!("peregrine ", env!("CARGO_PKG_VERSION")));
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;

    let mut synopsis = Roff::new();
    synopsis.control("SH", ["SYNOPSIS"]);
    let name = cmd.get_bin_name().unwrap_or_else(|| cmd.get_name());
    let mut line = vec![bold(name)];
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let values = arg.get_value_names().map(|v| v.join(" "));
        let takes_value = arg.get_num_args().is_some_and(|n| n.takes_values());
        let repeated = matches!(arg.get_action(), clap::ArgAction::Append);
        let (open, close) = if arg.is_required_set() { ("", "") } else { ("[", "]") };
        line.push(roman(format!(" {open}")));
        match (arg.get_long(), arg.get_short()) {
            (Some(long), _) => line.push(bold(format!("--{long}"))),
            (None, Some(short)) => line.push(bold(format!("-{short}"))),
            // A positional: its value name alone.
            (None, None) => line.push(italic(values.clone().unwrap_or_else(|| arg.get_id().to_string()))),
        }
        if takes_value && !arg.is_positional() {
            line.push(roman(" "));
            line.push(italic(
                values.unwrap_or_else(|| arg.get_id().to_string().to_uppercase()),
            ));
        }
        line.push(roman(close));
        if repeated {
            line.push(roman("..."));
        }
    }
    if cmd.has_subcommands() {
        line.push(roman(" "));
        line.push(italic("COMMAND"));
    }
    synopsis.text(line);
    synopsis.to_writer(&mut out)?;

    man.render_description_section(&mut out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if cmd.has_subcommands() {
        man.render_subcommands_section(&mut out)?;
    }
    // The text after the options (configuration, what a subcommand is for)
    // under NOTES, a section man-pages(7) knows, not clap_mangen's "EXTRA".
    if let Some(text) = cmd.get_after_long_help().or_else(|| cmd.get_after_help()) {
        let mut notes = Roff::new();
        notes.control("SH", ["NOTES"]);
        for line in text.to_string().lines() {
            notes.text([roman(line)]);
        }
        notes.to_writer(&mut out)?;
    }

    let mut extra = Roff::new();
    // The pages of what serves, and of check-config, which reads the same.
    let serving = matches!(name, "peregrine" | "peregrine hello" | "peregrine serve");
    let configured = serving || name.starts_with("peregrine check-config");
    let sections: [(&str, Terms, bool); 3] = [
        ("SIGNALS", SIGNALS, serving),
        ("FILES", FILES, configured),
        ("ENVIRONMENT", ENVIRONMENT, configured),
    ];
    for (title, items, wanted) in sections {
        if !wanted {
            continue;
        }
        extra.control("SH", [title]);
        for (term, text) in items {
            extra.control("TP", []).text([bold(*term)]).text([roman(*text)]);
        }
    }
    // The top page shows every example; a subcommand's page its own.
    let prefix = name.to_owned();
    let examples: Vec<&(&str, &str)> = EXAMPLES.iter().filter(|(c, _)| c.starts_with(&prefix)).collect();
    if !examples.is_empty() {
        extra.control("SH", ["EXAMPLES"]);
        for (command, what) in examples {
            extra.control("TP", []).text([roman(*what)]);
            extra
                .control("RS", [])
                .control("EX", [])
                .text([roman(*command)])
                .control("EE", [])
                .control("RE", []);
        }
    }
    extra.to_writer(&mut out)?;
    if cmd.get_version().is_some() {
        man.render_version_section(&mut out)?;
    }
    Ok(out)
}

/// A section's terms, each with its paragraph.
type Terms = &'static [(&'static str, &'static str)];

const SIGNALS: Terms = &[
    (
        "SIGHUP",
        "Reload: read the command line, the --config file and the PEREGRINE_* variables again, with \
         the certificates and the archive, and start a new generation of workers on the same \
         listening sockets; the old one finishes what it has in flight. A configuration that does \
         not load changes nothing, and one line says why.",
    ),
    (
        "SIGUSR1",
        "Reopen the --access-log and --error-log files under their paths (for logrotate).",
    ),
    (
        "SIGWINCH",
        "Purge every --proxy-cache response cache (as POST /purge on the --metrics listener), when \
         root or the server's own user sends it; a terminal's resize does not.",
    ),
    (
        "SIGINT, SIGTERM",
        "Shut down gracefully: stop accepting, give requests in flight --shutdown-timeout to \
         finish, close idle connections. A second signal exits at once.",
    ),
];

const FILES: Terms = &[
    (
        "--config FILE",
        "TOML; each key is a flag's long name (root for DIR|ARCHIVE), and version = 1 the \
         format's version. [[site]] tables (names, root, aliases, default, the file settings, \
         [[site.route]] tables) configure several sites. The repository's \
         peregrine.example.toml shows every key. peregrine check-config prints the effective \
         settings, and each site and route, as such a file.",
    ),
    (
        "DIR|ARCHIVE",
        "A directory, or an archive made from one by peregrine pack; both follow the same \
         conventions (_headers, _redirects, _404.html, _wildcard.*, NAME.br/.zst/.gz siblings) \
         with the same answers, and none of these files is served as itself. A directory's \
         edited files show within --revalidate-interval; an archive replaced by rename is \
         swapped in while serving.",
    ),
    (
        "--access-log PATH, --error-log PATH",
        "Appended to (created if missing); SIGUSR1 reopens both. The access log's lines follow \
         --access-log-format: combined, json, or a template of $variables such as \
         '$remote_addr \"$request\" $status $body_bytes_sent $request_time_us $host $protocol' \
         (the full list is in --help); an unknown variable is refused at start and by \
         check-config. The error log holds the lines otherwise written to standard error. Under \
         the sandbox both may only be created beneath the directories they had at start.",
    ),
    (
        "--tls-cert PEM, --tls-key PEM",
        "Certificate chains and keys, read again on SIGHUP; they must stay readable by --user.",
    ),
    (
        "dist/systemd/peregrine.service, dist/systemd/peregrine.socket",
        "Example units in the repository: Type=notify, and socket activation.",
    ),
];

const ENVIRONMENT: Terms = &[
    (
        "PEREGRINE_<KEY>",
        "Every setting, named as its file key in capitals with _ for - (PEREGRINE_WORKERS, \
         PEREGRINE_ROOT); a flag beats a variable, which beats the file.",
    ),
    ("PEREGRINE_CONFIG", "The configuration file, as --config."),
    (
        "PEREGRINE_DEBUG",
        "1: log at debug level (failed TLS handshakes and the like), as --log-level debug.",
    ),
    (
        "LISTEN_FDS, LISTEN_PID",
        "Listening sockets passed by systemd (socket activation); they are always served.",
    ),
    (
        "NOTIFY_SOCKET",
        "systemd's notification socket: READY=1, RELOADING=1 and STOPPING=1 are sent to it.",
    ),
];

/// (command, what it does); each shown on its command's page and the top one.
const EXAMPLES: Terms = &[
    (
        "peregrine serve site",
        "Serve the directory site on http://127.0.0.1:8080/.",
    ),
    (
        "peregrine serve /srv/www --bind :80 --bind [::]:80 --user www-data",
        "Serve on port 80 of every IPv4 and IPv6 interface, as www-data once the port is bound.",
    ),
    (
        "peregrine serve site.prg --bind :443 --tls-cert cert.pem --tls-key key.pem --redirect-http :80",
        "Serve an archive over HTTPS, redirecting plain HTTP on port 80 to it.",
    ),
    (
        "peregrine serve site.prg --bind unix:/run/peregrine/web.sock",
        "Serve behind a proxy on a Unix-domain socket (mode 0660: the owner and group may connect).",
    ),
    (
        "peregrine pack site -o site.prg",
        "Pack a directory into one archive, with compressed variants.",
    ),
    (
        "peregrine archive ls site.prg",
        "List what an archive answers, by site and path.",
    ),
    (
        "peregrine check-config serve --config /etc/peregrine.toml",
        "Check a configuration and print the effective settings, with where each came from.",
    ),
    (
        "peregrine hello --bind 127.0.0.1:0",
        "The engine alone, on a free port.",
    ),
];

fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        // A closed pipe (`| head`) is not an error.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
