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
    if let Some(dir) = dir {
        return clap_mangen::generate_to(cmd, dir)
            .with_context(|| format!("cannot write man pages into {}", dir.display()));
    }
    // Building names subcommands for their pages (`peregrine-serve`).
    cmd.build();
    let page = match subcommand {
        None => cmd,
        Some(name) => cmd
            .find_subcommand(name)
            .with_context(|| format!("no subcommand {name:?}"))?
            .clone(),
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page).render(&mut out)?;
    write_stdout(&out)
}

fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        // A closed pipe (`| head`) is not an error.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
