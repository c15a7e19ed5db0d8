//! The `peregrine` command: glue between the command line and the libraries.
//! The flags are in `flags/`, each subcommand's work in `commands/`,
//! serving with its reloads in `reload.rs`; this file parses, dispatches
//! and turns the outcome into an exit code.

mod access;
mod acme;
mod commands;
mod config;
mod docs;
mod flags;
mod health;
mod logger;
mod messages;
mod platform;
mod proxy;
mod reload;
mod sandbox;
mod sites;
mod upgrade;

use std::ffi::OsString;
use std::process::ExitCode;

use commands::{archive, check, probe};
use flags::{Cli, Command};

fn main() -> ExitCode {
    logger::install();
    // Flags, PEREGRINE_* variables and a --config file, merged (config.rs).
    let argv: Vec<OsString> = std::env::args_os().collect();
    // The ACME process `serve` starts (acme/mod.rs): not a command.
    if argv.len() == 2 && argv[1] == acme::AGENT_ARG {
        return match acme::agent::run() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                // Through its logger: the serving process relays it.
                peregrine::log::error(format_args!("ACME process: {e:#}"));
                ExitCode::FAILURE
            }
        };
    }
    // The process that starts a new executable on SIGUSR2 (upgrade.rs).
    if argv.get(1).is_some_and(|a| a == upgrade::HELPER_ARG) {
        return match upgrade::run_helper(&argv) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("peregrine: upgrader: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let result = config::parse::<Cli>(argv.clone()).and_then(|invocation| match invocation {
        config::Invocation::Run(cli) => run(cli, argv),
        config::Invocation::Check(cli, settings) => check::check_config(&cli, &argv).map(|()| print!("{settings}")),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("peregrine: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli, argv: Vec<OsString>) -> anyhow::Result<()> {
    // Thousands of connections need more than the usual 1,024 descriptors.
    if let Err(e) = peregrine::raise_open_files_limit() {
        peregrine::log::warn(format_args!("cannot raise the open files limit: {e}"));
    }
    match cli.command {
        // Served until SIGINT/SIGTERM; SIGHUP reloads the configuration.
        command @ (Command::Hello { .. } | Command::Serve { .. }) => reload::serve(argv, command),
        command @ Command::Pack { .. } => archive::pack(command),
        Command::Archive { command } => archive::inspect(command),
        Command::Probe { url } => probe::probe(&url),
        Command::Completions { shell } => docs::completions(config::command::<Cli>(), shell),
        Command::Man { command, out_dir } => {
            docs::man(config::command::<Cli>(), command.as_deref(), out_dir.as_deref())
        }
    }
}
