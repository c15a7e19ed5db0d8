//! Settings from a TOML file and `PEREGRINE_*` environment variables, merged
//! under the command line: flag > environment > file > default.
//!
//! The layer knows no flag by name. It walks the clap definition of each
//! serving subcommand (`hello`, `serve`), so every flag, present or added
//! later, has a file key (its long name: `--head-bytes-max` is
//! `head-bytes-max`; a positional has its id: `root`) and a variable
//! (`PEREGRINE_HEAD_BYTES_MAX`, `PEREGRINE_ROOT`), and nothing can drift.
//!
//! How: clap parses the command line with the variables attached to the
//! args (`Arg::env`), leniently (nothing required, no requirements or
//! conflicts between settings: the file may still supply or override them),
//! and `ArgMatches::value_source` says where each value came from. Where it
//! came from nowhere or from a default, the file's value is written into a
//! new argument list after the command line's own values; clap parses that
//! list again with the full rules and the derive structs are built from it,
//! so the rest of the program sees one ordinary command line. Values from
//! the file go through each arg's own value parser first, so a bad one is
//! reported at its line.
//!
//! The file has two keys no flag has: `version` (of the file's format,
//! [`VERSIONS`]) and the `[[site]]` tables (`SITE_TABLES`), which share
//! their name with `--site`'s key (`site = ["NAMES=DIR"]`, the flag's form;
//! TOML keeps the two forms apart, a key being one or the other). The
//! tables are read by what the parsed command completes itself with
//! ([`Complete`]: `serve`'s sites, `sites/`), from the merged
//! [`Settings`], on the same path at start and at each reload.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use clap::builder::{BoolishValueParser, Resettable, TypedValueParser};
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command, CommandFactory, FromArgMatches};
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// The subcommands that take a configuration.
pub const SERVING: [&str; 2] = ["hello", "serve"];
/// The flag naming the file, on each serving subcommand.
const CONFIG: &str = "config";
/// Prefix of every variable.
const ENV_PREFIX: &str = "PEREGRINE_";
/// The subcommand that checks a configuration instead of running it.
pub const CHECK: &str = "check-config";
/// The file's key for the version of its format.
const VERSION: &str = "version";
/// The versions of the file's format this binary reads; a file without
/// `version` is version 1.
pub const VERSIONS: std::ops::RangeInclusive<i64> = 1..=1;
/// The key of `serve`'s `[[site]]` tables (and of `--site`'s flag form).
pub const SITE_TABLES: &str = "site";

const CONFIG_HELP: &str = "\
Settings can also come from a TOML file (--config FILE) and from PEREGRINE_* \
environment variables. A file key is a long flag's name without its leading dashes \
(`head-bytes-max = 16384`, `bind = [\"127.0.0.1:8080\", \"[::1]:8080\"]`, \
`list-dirs = true`), `root` for DIR|ARCHIVE; a variable is the key in capitals \
with `_` for `-` after PEREGRINE_ (PEREGRINE_HEAD_BYTES_MAX). A flag beats a \
variable, which beats the file, which beats the default. The file may say \
`version = 1` (the format this binary reads). Several sites: `--site \
NAMES=DIR|ARCHIVE` (repeatable), or `[[site]]` tables in the file, each with \
`names`, `root`, and optionally `aliases` (308 to the first name), `default = \
true`, `tls-cert`/`tls-key`, `access-log`, the file settings (the top-level \
ones are their defaults) and `[[site.route]]` tables (`path`, `handler` = \
files, archive or redirect, `to`, `status`, `headers`, `cache-control`, `404`, \
`list-dirs`, `fallback`, `index`); the README says more. \
`peregrine check-config serve --config FILE` prints the result. SIGHUP makes \
a running server read them all again: new connections get the new settings, \
connections already open finish under the old ones.";

/// What the command line asked for.
pub enum Invocation<T> {
    /// Run it.
    Run(T),
    /// `check-config`: check it without running, then print the effective
    /// settings (already rendered as TOML).
    Check(T, String),
}

/// What a parsed command line completes itself with once its settings are
/// merged: what the flags alone do not say (`serve`'s sites, from `--site`
/// and the file's `[[site]]` tables). Called by [`parse`] and [`reparse`]
/// alike, so a reload checks what the start checks.
pub trait Complete {
    /// Resolves and checks it; returns what `check-config` prints of it
    /// after the settings (empty: nothing).
    fn complete(&mut self, settings: &Settings<'_>) -> anyhow::Result<String>;
}

/// The file key of an arg: its long name, or its id for a positional.
pub fn key(arg: &Arg) -> &str {
    arg.get_long().unwrap_or(arg.get_id().as_str())
}

/// The variable of an arg: `PEREGRINE_` and the key in capitals, `_` for `-`.
pub fn env_var(arg: &Arg) -> String {
    format!("{ENV_PREFIX}{}", key(arg).to_uppercase().replace('-', "_"))
}

/// Whether an arg is a setting (not `--help`, `--version`, `--config`).
pub fn is_setting(arg: &Arg) -> bool {
    !matches!(
        arg.get_action(),
        ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
    ) && arg.get_id() != CONFIG
}

/// The full command line: `T`'s definition with `--config` and a variable on
/// every setting of the serving subcommands, and `check-config`. Completions
/// and man pages are made from this, so they show both.
pub fn command<T: CommandFactory>() -> Command {
    let mut cmd = T::command();
    for name in SERVING {
        cmd = cmd.mut_subcommand(name, serving);
    }
    let check = Command::new(CHECK)
        .about("Check a configuration and print the effective settings, without serving")
        .long_about(
            "Check a configuration and print the effective settings, without serving.\n\n\
             Give it the command line you would run: `peregrine check-config serve --config \
             peregrine.toml`. It reads the file and the PEREGRINE_* variables as that command \
             would, checks every value, opens the root, and prints each setting as TOML with \
             where it came from (flag, env, file:line, default). Nothing is bound.",
        )
        .subcommand_required(true)
        .subcommands(SERVING.map(|n| cmd.find_subcommand(n).expect("serving subcommand").clone()));
    cmd.subcommand(check)
}

/// The command for the first parse, which only collects the command line's
/// values: no setting is required, requires or conflicts with another yet,
/// since the file may still supply or override it. The merged line gets
/// `command`'s full rules.
fn lenient(cmd: Command) -> Command {
    fn relax(sub: Command) -> Command {
        let ids: Vec<_> = sub.get_arguments().map(|a| a.get_id().clone()).collect();
        let mut sub = sub;
        for id in ids {
            sub = sub.mut_arg(id, |arg| {
                arg.required(false)
                    .required_unless_present(Resettable::Reset)
                    .requires(Resettable::Reset)
                    .conflicts_with(Resettable::Reset)
            });
        }
        sub
    }
    let mut cmd = cmd;
    for name in SERVING {
        cmd = cmd.mut_subcommand(name, relax);
    }
    cmd.mut_subcommand(CHECK, |check| {
        let mut check = check;
        for name in SERVING {
            check = check.mut_subcommand(name, relax);
        }
        check
    })
}

/// Adds `--config` and the variables to one serving subcommand.
fn serving(sub: Command) -> Command {
    let ids: Vec<_> = sub.get_arguments().map(|a| a.get_id().clone()).collect();
    let mut sub = sub;
    for id in ids {
        sub = sub.mut_arg(id, |arg| {
            let var = env_var(&arg);
            let mut arg = arg.env(var);
            // A required arg (serve's DIR|ARCHIVE) may come from the file.
            if arg.is_required_set() {
                arg = arg.required(false).required_unless_present(CONFIG);
            }
            // `--idle-timeout -1` is a value out of range, not an unknown
            // flag `-1` (clap's default reading).
            if arg.get_action().takes_values() {
                arg = arg.allow_negative_numbers(true);
            }
            // `PEREGRINE_LIST_DIRS=1` (or yes, on, true) switches a flag on.
            if matches!(arg.get_action(), ArgAction::SetTrue) {
                arg = arg.value_parser(BoolishValueParser::new());
            }
            arg
        });
    }
    sub.arg(
        Arg::new(CONFIG)
            .long(CONFIG)
            .value_name("FILE")
            .value_parser(clap::value_parser!(PathBuf))
            .env(format!("{ENV_PREFIX}CONFIG"))
            .help("Read settings from a TOML file; flags and PEREGRINE_* variables override it"),
    )
    .after_long_help(CONFIG_HELP)
}

/// Parses the command line, merging in the file and the variables for a
/// serving subcommand. Exits as clap does for `--help` and usage errors.
pub fn parse<T: CommandFactory + FromArgMatches + Complete>(
    argv: impl IntoIterator<Item = OsString>,
) -> anyhow::Result<Invocation<T>> {
    parse_with(argv, OnUsageError::Exit)
}

/// Parses the command line again, as [`parse`] does, to reload the file
/// and the variables while serving: a usage error (a setting the file now
/// gives that conflicts with another, say) is returned, not printed with an
/// exit.
pub fn reparse<T: CommandFactory + FromArgMatches + Complete>(
    argv: impl IntoIterator<Item = OsString>,
) -> anyhow::Result<T> {
    match parse_with(argv, OnUsageError::Return)? {
        Invocation::Run(parsed) | Invocation::Check(parsed, _) => Ok(parsed),
    }
}

/// What a usage error does: at start, clap's message and exit; on a
/// reload, an error (the server keeps running).
#[derive(Clone, Copy, PartialEq)]
enum OnUsageError {
    Exit,
    Return,
}

/// clap's usage error and exit; when a required argument is missing, also
/// what the subcommand does and an example (its `after_help`), so that
/// `peregrine pack DIR` says what `-o` is for rather than only that it is
/// missing.
fn exit_saying_what_it_needs(cmd: &Command, argv: &[OsString], e: clap::Error) -> ! {
    if let Some(says) = another_servers_flag(argv, &e) {
        eprintln!("error: {says}");
        std::process::exit(e.exit_code());
    }
    if e.kind() == ErrorKind::MissingRequiredArgument {
        let name = argv.get(1).and_then(|a| a.to_str());
        if let Some(help) = name
            .and_then(|n| cmd.find_subcommand(n))
            .and_then(|sub| sub.get_after_help())
        {
            let _ = e.print();
            eprintln!("\nnote: {help}");
            std::process::exit(e.exit_code());
        }
    }
    e.exit()
}

/// For `--port N` and `--root DIR`, which Caddy's, nginx's and other
/// servers' users type, the flag or argument that says it here (clap alone
/// would suggest `--list-dirs` or nothing). `--listen`, Caddy's word, is
/// an alias of `--bind` and never gets here.
fn another_servers_flag(argv: &[OsString], e: &clap::Error) -> Option<String> {
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(unknown)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let (flag, inline) = match unknown.split_once('=') {
        Some((flag, value)) => (flag, Some(value.to_owned())),
        None => (unknown.as_str(), None),
    };
    // clap names `--port=80` as `--port`: the value is found on the line.
    let value = inline.or_else(|| {
        let args: Vec<&str> = argv.iter().filter_map(|a| a.to_str()).collect();
        let at = args
            .iter()
            .position(|a| *a == flag || a.starts_with(&format!("{flag}=")))?;
        match args[at].split_once('=') {
            Some((_, value)) => Some(value.to_owned()),
            None => args
                .get(at + 1)
                .filter(|v| !v.starts_with('-'))
                .map(|v| (*v).to_owned()),
        }
    });
    match flag {
        "--port" => {
            let port = value.unwrap_or_else(|| "PORT".to_owned());
            Some(format!(
                "there is no --port: give the address with --bind (or --listen): --bind :{port} for every \
                 interface, --bind 127.0.0.1:{port} for this machine only"
            ))
        }
        "--root" => {
            let dir = value.unwrap_or_else(|| "DIR".to_owned());
            Some(format!(
                "there is no --root: the directory or archive to serve is serve's argument: peregrine serve {dir} \
                 (with sites, each --site NAMES=DIR has its own)"
            ))
        }
        _ => None,
    }
}

/// The first line of a clap error, without clap's `error: `.
fn usage_error(e: &clap::Error) -> anyhow::Error {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or("usage error");
    anyhow!("{}", first.trim_start_matches("error: "))
}

fn parse_with<T: CommandFactory + FromArgMatches + Complete>(
    argv: impl IntoIterator<Item = OsString>,
    on_error: OnUsageError,
) -> anyhow::Result<Invocation<T>> {
    let argv: Vec<OsString> = argv.into_iter().collect();
    let mut cmd = command::<T>();
    cmd.build();
    let mut first = lenient(command::<T>());
    first.build();
    let matches = match first.clone().try_get_matches_from(&argv) {
        Ok(m) => m,
        Err(e) => match bad_env_var(&first, &argv, &e) {
            Some(named) => return Err(named),
            None if on_error == OnUsageError::Return => return Err(usage_error(&e)),
            None => exit_saying_what_it_needs(&first, &argv, e),
        },
    };
    let (check, name, sub_matches) = match matches.subcommand() {
        Some((CHECK, m)) => {
            let (name, m) = m.subcommand().expect("check-config requires a subcommand");
            (true, name, m)
        }
        Some((name, m)) if SERVING.contains(&name) => (false, name, m),
        _ => {
            let parsed = T::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut cmd).exit());
            return Ok(Invocation::Run(parsed));
        }
    };
    let sub = cmd.find_subcommand(name).expect("parsed subcommand");
    let file = match sub_matches.get_one::<PathBuf>(CONFIG) {
        Some(path) => Some(File::load(path, &cmd, name)?),
        None => None,
    };

    let (flags, sources) = merged_line(sub, sub_matches, file.as_ref());
    let file_path = file.as_ref().map(|f| f.path.as_path());
    require_given(
        T::command().find_subcommand(name),
        name,
        sub_matches,
        &sources,
        file_path,
    )?;
    remember_origins(sub, &sources, file_path);
    let merged = cmd.clone().try_get_matches_from(flags);
    if let (Err(e), OnUsageError::Return) = (&merged, on_error) {
        return Err(usage_error(e));
    }
    let merged = merged.unwrap_or_else(|e| {
        // Requirements and conflicts between settings are checked here, on
        // the merged line, where clap names every setting by its flag.
        let _ = e.print();
        if sources.values().any(|s| matches!(s, Source::File(_) | Source::Env)) {
            eprintln!("note: settings from the --config file and PEREGRINE_* variables are named by their flags");
        }
        std::process::exit(e.exit_code())
    });
    let mut parsed = match T::from_arg_matches(&merged) {
        Ok(parsed) => parsed,
        Err(e) if on_error == OnUsageError::Return => return Err(usage_error(&e)),
        Err(e) => e.format(&mut T::command()).exit(),
    };
    let merged_sub = merged.subcommand_matches(name).expect("merged subcommand");
    let settings = Settings {
        sub,
        matches: merged_sub,
        sources: &sources,
        file: file.as_ref(),
    };
    let completed = parsed.complete(&settings)?;
    if !check {
        return Ok(Invocation::Run(parsed));
    }
    let mut report = render(&settings, !completed.is_empty());
    report.push_str(&completed);
    Ok(Invocation::Check(parsed, report))
}

/// The command line to parse again: the command line's own values, then the
/// file's where neither the command line nor a variable gave one (variables
/// are not written out: clap reads them again). Also where each setting came
/// from, by arg id.
fn merged_line(
    sub: &Command,
    sub_matches: &ArgMatches,
    file: Option<&File>,
) -> (Vec<OsString>, BTreeMap<String, Source>) {
    let mut sources = BTreeMap::new();
    let mut flags: Vec<OsString> = vec!["peregrine".into(), sub.get_name().into()];
    let mut positionals: Vec<OsString> = Vec::new();
    for arg in sub.get_arguments().filter(|a| is_setting(a)) {
        let id = arg.get_id().as_str();
        let (source, values) = match sub_matches.value_source(id) {
            Some(ValueSource::CommandLine) => {
                let values = if is_flag(arg) {
                    vec![OsString::from(sub_matches.get_flag(id).to_string())]
                } else {
                    raw_values(sub_matches, id)
                };
                (Source::Flag, values)
            }
            Some(ValueSource::EnvVariable) => (Source::Env, Vec::new()),
            _ => match file.and_then(|f| f.values.get(key(arg))) {
                Some(v) => (Source::File(v.line), v.values.clone()),
                None => (Source::Default, Vec::new()),
            },
        };
        for value in values {
            if arg.is_positional() {
                positionals.push(value);
            } else if is_flag(arg) {
                if value == "true" {
                    flags.push(format!("--{}", key(arg)).into());
                }
            } else {
                // `--key=value`: a value starting with `-` stays a value.
                let mut flag = OsString::from(format!("--{}=", key(arg)));
                flag.push(value);
                flags.push(flag);
            }
        }
        sources.insert(id.to_owned(), source);
    }
    if !positionals.is_empty() {
        flags.push("--".into());
        flags.extend(positionals);
    }
    (flags, sources)
}

/// An arg the definition requires (serve's DIR|ARCHIVE) that no source gave:
/// an error naming every way to give it.
fn require_given(
    base: Option<&Command>,
    name: &str,
    sub_matches: &ArgMatches,
    sources: &BTreeMap<String, Source>,
    file: Option<&Path>,
) -> anyhow::Result<()> {
    for arg in base
        .into_iter()
        .flat_map(|b| b.get_arguments())
        .filter(|a| a.is_required_set())
    {
        let id = arg.get_id().as_str();
        let given = sub_matches.contains_id(id) || matches!(sources.get(id), Some(Source::File(_) | Source::Flag));
        if !given {
            return Err(anyhow!(
                "`{name}` needs {}: give it {}",
                shown(arg),
                ways_to_give(arg, file)
            ));
        }
    }
    Ok(())
}

/// An arg as its help shows it: `DIR|ARCHIVE` for a positional.
fn shown(arg: &Arg) -> String {
    arg.get_value_names()
        .and_then(|v| v.first())
        .map_or(arg.get_id().to_string(), |n| n.to_string())
}

/// "on the command line, as `root` in F (which has no `root` line), or in
/// PEREGRINE_ROOT": where a setting no source gave can be given.
fn ways_to_give(arg: &Arg, file: Option<&Path>) -> String {
    let in_file = match file {
        Some(path) => format!("{} (which has no `{}` line)", path.display(), key(arg)),
        None => "the --config file".to_owned(),
    };
    format!(
        "on the command line, as `{}` in {in_file}, or in {}",
        key(arg),
        env_var(arg)
    )
}

/// A serving command's settings once merged, for what it completes itself
/// with ([`Complete`]): each setting's value and where it came from, the
/// file (whose tables no flag reads), and each setting's value parser.
pub struct Settings<'a> {
    sub: &'a Command,
    matches: &'a ArgMatches,
    sources: &'a BTreeMap<String, Source>,
    file: Option<&'a File>,
}

impl Settings<'_> {
    /// The setting whose file key is `key`.
    pub fn arg(&self, key: &str) -> Option<&Arg> {
        self.sub.get_arguments().find(|a| is_setting(a) && self::key(a) == key)
    }

    /// The effective value of `key` as command-line values (`"true"` or
    /// `"false"` for a switch; a default included); empty when unset.
    pub fn values(&self, key: &str) -> Vec<OsString> {
        let Some(arg) = self.arg(key) else { return Vec::new() };
        let id = arg.get_id().as_str();
        if is_flag(arg) {
            return vec![self.matches.get_flag(id).to_string().into()];
        }
        let values = raw_values(self.matches, id);
        // An optional positional's stand-in (serve's DIR|ARCHIVE: "") is
        // no value.
        if arg.is_positional() && values.iter().all(|v| v.is_empty()) {
            return Vec::new();
        }
        values
    }

    /// Where `key`'s value came from (`flag`, `env PEREGRINE_X`, `file
    /// F:LINE`); `None` for a default.
    pub fn origin(&self, key: &str) -> Option<String> {
        let arg = self.arg(key)?;
        match self.sources.get(arg.get_id().as_str()) {
            None | Some(Source::Default) => None,
            Some(source) => Some(source.describe(arg, self.file_path())),
        }
    }

    /// The configuration file's path.
    pub fn file_path(&self) -> Option<&Path> {
        self.file.map(|f| f.path.as_path())
    }

    /// The configuration file's text.
    pub fn file_text(&self) -> Option<&str> {
        self.file.map(|f| f.text.as_str())
    }

    /// `key` as help shows it, and where it can be given: `DIR|ARCHIVE`,
    /// "on the command line, as `root` in F (...), or in PEREGRINE_ROOT".
    pub fn how_to_give(&self, key: &str) -> Option<(String, String)> {
        let arg = self.arg(key)?;
        Some((shown(arg), ways_to_give(arg, self.file_path())))
    }
}

/// Where a setting's value came from.
enum Source {
    Flag,
    Env,
    File(usize),
    Default,
}

impl Source {
    /// As `check-config` shows it: `flag`, `env PEREGRINE_X`, `file F:LINE`.
    fn describe(&self, arg: &Arg, file: Option<&Path>) -> String {
        match self {
            Source::Flag => "flag".to_owned(),
            Source::Env => format!("env {}", env_var(arg)),
            Source::File(line) => format!("file {}:{line}", file.map_or("?".into(), |p| p.display().to_string())),
            Source::Default => "default".to_owned(),
        }
    }
}

/// Where each setting of the last serving command line parsed came from,
/// by its long name (its file key), when it was the file or a variable: for the checks made after
/// parsing (settings that go in pairs), so that their errors point at the
/// line to fix. Replaced at each reload.
static ORIGINS: std::sync::Mutex<BTreeMap<String, String>> = std::sync::Mutex::new(BTreeMap::new());

fn remember_origins(sub: &Command, sources: &BTreeMap<String, Source>, file: Option<&Path>) {
    let origins = sub
        .get_arguments()
        .filter_map(|arg| match sources.get(arg.get_id().as_str()) {
            Some(source @ (Source::File(_) | Source::Env)) => Some((key(arg).to_owned(), source.describe(arg, file))),
            _ => None,
        })
        .collect();
    *ORIGINS.lock().unwrap_or_else(|e| e.into_inner()) = origins;
}

/// ` (file peregrine.toml:3)` or ` (env PEREGRINE_X)` when the setting
/// `--flag` came from there; empty for a flag or a default.
pub fn origin(flag: &str) -> String {
    let origins = ORIGINS.lock().unwrap_or_else(|e| e.into_inner());
    let key = flag.trim_start_matches("--");
    origins.get(key).map_or(String::new(), |o| format!(" ({o})"))
}

pub(crate) fn is_flag(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::SetTrue)
}

fn raw_values(m: &ArgMatches, id: &str) -> Vec<OsString> {
    m.get_raw(id)
        .map(|vals| vals.map(OsStr::to_owned).collect())
        .unwrap_or_default()
}

/// When clap refused a value that came from a variable, an error that names
/// the variable (clap's own names only the flag).
fn bad_env_var(cmd: &Command, argv: &[OsString], err: &clap::Error) -> Option<anyhow::Error> {
    if !matches!(err.kind(), ErrorKind::ValueValidation | ErrorKind::InvalidValue) {
        return None;
    }
    let Some(ContextValue::String(refused)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    for name in SERVING {
        let sub = cmd.find_subcommand(name)?;
        for arg in sub.get_arguments().filter(|a| is_setting(a)) {
            if arg.to_string() != *refused {
                continue;
            }
            let on_line = arg.get_long().is_some_and(|long| {
                let flag = format!("--{long}");
                argv.iter()
                    .filter_map(|a| a.to_str())
                    .any(|a| a == flag || a.strip_prefix(&flag).is_some_and(|rest| rest.starts_with('=')))
            });
            let var = env_var(arg);
            let Some(value) = std::env::var_os(&var) else {
                continue;
            };
            if on_line {
                continue;
            }
            if let Err(e) = check_value(arg, &value) {
                return Some(anyhow!("environment variable {var}={value:?}: {}", why_refused(&e)));
            }
        }
    }
    None
}

/// Runs one value through an arg's own value parser: the same check the
/// command line gets, and clap keeps the direct call to itself.
pub(crate) fn check_value(arg: &Arg, value: &OsStr) -> Result<(), clap::Error> {
    let mut flag = OsString::from("--value=");
    flag.push(value);
    Command::new("value")
        .no_binary_name(true)
        .arg(
            Arg::new("value")
                .long("value")
                .action(ArgAction::Set)
                .value_parser(arg.get_value_parser().clone()),
        )
        .try_get_matches_from([flag])
        .map(drop)
}

/// The reason inside a clap value error, without clap's framing.
pub(crate) fn why_refused(e: &clap::Error) -> String {
    if let Some(source) = std::error::Error::source(e) {
        return source.to_string();
    }
    if let Some(ContextValue::Strings(valid)) = e.get(ContextKind::ValidValue) {
        return format!("expected one of {}", valid.join(", "));
    }
    let text = e.to_string();
    let first = text.lines().next().unwrap_or("invalid value");
    first.trim_start_matches("error: ").to_owned()
}

/// A configuration file's values, checked against one subcommand.
struct File {
    path: PathBuf,
    /// As read, for the tables no flag reads (`[[site]]`).
    text: String,
    /// The line of `version`, if the file says it.
    version: Option<usize>,
    /// By key.
    values: BTreeMap<String, FileValue>,
}

struct FileValue {
    /// 1-based line of the key.
    line: usize,
    /// As they would be written on the command line; `"true"`/`"false"` for
    /// a flag.
    values: Vec<OsString>,
}

/// What TOML type a setting takes, from its value parser's output type.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Kind {
    Bool,
    Unsigned,
    Signed,
    Number,
    Text,
}

impl Kind {
    pub(crate) fn of(arg: &Arg) -> Kind {
        use std::any::TypeId;
        if is_flag(arg) {
            return Kind::Bool;
        }
        let t = arg.get_value_parser().type_id();
        let unsigned = [
            TypeId::of::<u8>(),
            TypeId::of::<u16>(),
            TypeId::of::<u32>(),
            TypeId::of::<u64>(),
            TypeId::of::<u128>(),
            TypeId::of::<usize>(),
        ];
        let signed = [
            TypeId::of::<i8>(),
            TypeId::of::<i16>(),
            TypeId::of::<i32>(),
            TypeId::of::<i64>(),
            TypeId::of::<i128>(),
            TypeId::of::<isize>(),
        ];
        if t == TypeId::of::<bool>() {
            // `--http3[=BOOL]`: a setting with a value that is a boolean.
            Kind::Bool
        } else if unsigned.iter().any(|u| t == *u) {
            Kind::Unsigned
        } else if signed.iter().any(|s| t == *s) {
            Kind::Signed
        } else if t == TypeId::of::<f64>() || t == TypeId::of::<f32>() {
            Kind::Number
        } else {
            Kind::Text
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Kind::Bool => "true or false",
            Kind::Unsigned => "a whole number",
            Kind::Signed => "an integer",
            Kind::Number => "a number",
            Kind::Text => "a string",
        }
    }
}

impl File {
    /// Reads the file and checks it against the settings of `cmd`'s
    /// subcommand `name`.
    fn load(path: &Path, cmd: &Command, name: &str) -> anyhow::Result<File> {
        let sub = cmd.find_subcommand(name).expect("serving subcommand");
        let shown = path.display();
        let text = std::fs::read_to_string(path).map_err(|e| anyhow!("cannot read config file {shown}: {e}"))?;
        let doc = DeTable::parse(&text).map_err(|e| {
            let line = e.span().map_or(1, |s| line_of(&text, s.start));
            anyhow!("{shown}:{line}: TOML syntax error: {}", e.message().trim())
        })?;
        let mut entries: Vec<_> = doc.get_ref().iter().collect();
        entries.sort_by_key(|(k, _)| k.span().start);

        let settings: Vec<&Arg> = sub.get_arguments().filter(|a| is_setting(a)).collect();
        let mut values = BTreeMap::new();
        let mut version = None;
        let mut errors = Vec::new();
        for (k, v) in entries {
            let line = line_of(&text, k.span().start);
            let name: &str = k.get_ref();
            if name == VERSION {
                match check_version(v.get_ref()) {
                    Ok(()) => version = Some(line),
                    Err(why) => errors.push(format!("{shown}:{line}: {VERSION}: {why}")),
                }
                continue;
            }
            let Some(arg) = settings.iter().find(|a| key(a) == name) else {
                // A setting of another subcommand is no typo: say whose it is.
                let owner = SERVING.iter().find(|other| {
                    cmd.find_subcommand(other)
                        .is_some_and(|o| o.get_arguments().any(|a| is_setting(a) && key(a) == name))
                });
                let hint = match owner {
                    Some(owner) => format!(" (a setting of `{owner}` only)"),
                    None => suggest(name, settings.iter().map(|a| key(a)))
                        .map(|s| format!(" (did you mean \"{s}\"?)"))
                        .unwrap_or_default(),
                };
                let is_tables = |v: &DeValue<'_>| matches!(v, DeValue::Array(items) if !items.is_empty() && items.iter().all(|i| i.get_ref().is_table()));
                let what = if v.get_ref().is_table() || is_tables(v.get_ref()) {
                    "unknown table"
                } else {
                    "unknown key"
                };
                errors.push(format!(
                    "{shown}:{line}: {what} \"{name}\" for `{}`{hint}",
                    sub.get_name()
                ));
                continue;
            };
            if name == SITE_TABLES {
                match v.get_ref() {
                    // `[[site]]`: read by `Complete` (sites/), after the flags.
                    DeValue::Array(items) if !items.is_empty() && items.iter().all(|i| i.get_ref().is_table()) => {
                        continue;
                    }
                    DeValue::Table(_) => {
                        errors.push(format!(
                            "{shown}:{line}: {name}: a site is a [[{SITE_TABLES}]] table (two brackets, one \
                             table per site), not [{SITE_TABLES}]"
                        ));
                        continue;
                    }
                    _ => {}
                }
            }
            match file_values(arg, v, &text) {
                Ok(vals) => {
                    values.insert(name.to_owned(), FileValue { line, values: vals });
                }
                Err((at, why)) => errors.push(format!("{shown}:{at}: {name}: {why}")),
            }
        }
        if !errors.is_empty() {
            return Err(anyhow!(errors.join("\n")));
        }
        Ok(File {
            path: path.to_owned(),
            text,
            version,
            values,
        })
    }
}

/// A `version` this binary reads, or why not.
fn check_version(value: &DeValue<'_>) -> Result<(), String> {
    let reads = match (VERSIONS.start(), VERSIONS.end()) {
        (a, b) if a == b => format!("version {a}"),
        (a, b) => format!("versions {a} to {b}"),
    };
    let DeValue::Integer(i) = value else {
        return Err(format!("expected a whole number ({reads}), found {}", describe(value)));
    };
    match i64::from_str_radix(i.as_str(), i.radix()) {
        Ok(n) if VERSIONS.contains(&n) => Ok(()),
        _ => Err(format!(
            "this peregrine reads {reads} of the configuration format, not {}: a newer \
             peregrine's file, or a typo",
            i.as_str()
        )),
    }
}

/// One key's value as command-line values, or the line and reason it is
/// refused.
pub(crate) fn file_values(
    arg: &Arg,
    value: &Spanned<DeValue<'_>>,
    text: &str,
) -> Result<Vec<OsString>, (usize, String)> {
    let repeatable = matches!(arg.get_action(), ArgAction::Append);
    let items: Vec<&Spanned<DeValue<'_>>> = match value.get_ref() {
        DeValue::Array(items) if repeatable => {
            if items.is_empty() {
                return Err((
                    line_of(text, value.span().start),
                    "an empty list: leave the key out for the default".to_owned(),
                ));
            }
            items.iter().collect()
        }
        _ => vec![value],
    };
    let kind = Kind::of(arg);
    let mut out = Vec::new();
    for item in items {
        let line = line_of(text, item.span().start);
        let found = item.get_ref();
        let wrong_type = || {
            let list = if repeatable { " (or a list of them)" } else { "" };
            (
                line,
                format!("expected {}{list}, found {}", kind.expected(), describe(found)),
            )
        };
        let text_value = match (kind, found) {
            (Kind::Bool, DeValue::Boolean(b)) => b.to_string(),
            (Kind::Unsigned | Kind::Signed | Kind::Number, DeValue::Integer(i)) => {
                let n = i128::from_str_radix(i.as_str(), i.radix()).map_err(|_| wrong_type())?;
                if kind == Kind::Unsigned && n < 0 {
                    return Err((line, format!("{n}: must not be negative")));
                }
                n.to_string()
            }
            (Kind::Number, DeValue::Float(f)) => f.as_str().to_owned(),
            (Kind::Text, DeValue::String(s)) => s.to_string(),
            _ => return Err(wrong_type()),
        };
        if kind != Kind::Bool {
            if let Err(e) = check_value(arg, OsStr::new(&text_value)) {
                return Err((line, format!("bad value {text_value:?}: {}", why_refused(&e))));
            }
        }
        out.push(OsString::from(text_value));
    }
    Ok(out)
}

pub(crate) fn describe(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date-time",
        DeValue::Array(_) => "a list",
        DeValue::Table(_) => "a table",
    }
}

/// 1-based line of a byte offset.
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The known key closest to a misspelt one, if it is close.
pub(crate) fn suggest<'a>(wrong: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let dashed = wrong.replace('_', "-");
    known
        .map(|k| (strsim::levenshtein(&dashed, k), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The effective settings as a TOML file that would reproduce them, each
/// line saying where its value came from.
/// `sites_below`: the sites are shown after the settings as `[[site]]`
/// tables, those `--site` gave among them, so `site`'s own line is a
/// comment (TOML has no key that is both strings and tables).
fn render(settings: &Settings<'_>, sites_below: bool) -> String {
    let name = settings.sub.get_name();
    let file = settings.file_path();
    let mut out = format!("# Effective settings of `peregrine {name}` (flag > env > file > default).\n");
    if let Some(path) = file {
        let _ = writeln!(out, "# Config file: {}", path.display());
    }
    let version = match settings.file.and_then(|f| f.version) {
        Some(line) => Source::File(line),
        None => Source::Default,
    };
    let version_from = match version {
        Source::File(line) => format!("file {}:{line}", file.map_or("?".into(), |p| p.display().to_string())),
        _ => "default".to_owned(),
    };
    let _ = writeln!(out, "{VERSION} = {}  # {version_from}", VERSIONS.end());
    for arg in settings.sub.get_arguments().filter(|a| is_setting(a)) {
        let id = arg.get_id().as_str();
        let k = key(arg);
        let from = settings.sources.get(id).unwrap_or(&Source::Default).describe(arg, file);
        let value = if is_flag(arg) {
            Some(settings.matches.get_flag(id).to_string())
        } else {
            let kind = Kind::of(arg);
            let values: Vec<String> = settings
                .values(k)
                .iter()
                .map(|v| toml_scalar(kind, &v.to_string_lossy()))
                .collect();
            match values.len() {
                0 => None,
                1 if !matches!(arg.get_action(), ArgAction::Append) => values.into_iter().next(),
                _ => Some(format!("[{}]", values.join(", "))),
            }
        };
        let _ = match value {
            Some(v) if sites_below && k == SITE_TABLES => writeln!(
                out,
                "# {} = {v}  # {from}; shown below as [[{SITE_TABLES}]] tables",
                toml_key(k)
            ),
            Some(v) => writeln!(out, "{} = {v}  # {from}", toml_key(k)),
            None if sites_below && k == SITE_TABLES => writeln!(
                out,
                "# {} is not set; the sites are the [[{SITE_TABLES}]] tables shown below",
                toml_key(k)
            ),
            None => writeln!(
                out,
                "# {} is not set, so the built-in default applies: {}{}",
                toml_key(k),
                default_in_help(arg).as_deref().unwrap_or("see --help"),
                default_here(k)
            ),
        };
    }
    out
}

/// The value a default that depends on the machine takes on this one: the
/// worker count is one per core the process may use (as `serve` counts
/// them), so say how many that is.
fn default_here(key: &str) -> String {
    match key {
        "workers" => {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            format!(" ({n} here)")
        }
        _ => String::new(),
    }
}

/// What a setting without a default value does when unset: the "Default:
/// ..." sentence that ends its help, written once beside the flag.
fn default_in_help(arg: &Arg) -> Option<String> {
    let help = arg.get_long_help().or(arg.get_help())?.to_string();
    let (_, default) = help.rsplit_once("Default: ")?;
    Some(default.trim().trim_end_matches('.').replace('\n', " "))
}

pub(crate) fn toml_key(k: &str) -> String {
    if k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        k.to_owned()
    } else {
        toml_string(k)
    }
}

pub(crate) fn toml_scalar(kind: Kind, raw: &str) -> String {
    match kind {
        Kind::Unsigned | Kind::Signed => raw.trim_start_matches('+').to_owned(),
        // `60s` (`--keep-previous`) is 60 in the file, which takes numbers.
        Kind::Number => match raw.strip_suffix('s').unwrap_or(raw).parse::<f64>() {
            Ok(f) if f.is_finite() => format!("{f}"),
            _ => toml_string(raw),
        },
        Kind::Bool => match BoolishValueParser::new().parse_ref(&clap::Command::new("bool"), None, OsStr::new(raw)) {
            Ok(b) => b.to_string(),
            Err(_) => toml_string(raw),
        },
        Kind::Text => toml_string(raw),
    }
}

/// A TOML basic string.
pub(crate) fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every setting of every serving subcommand has a key and a variable,
    /// each unique, and a kind of action this layer writes back: a new flag
    /// cannot slip past the file and the environment.
    #[test]
    fn every_serving_flag_has_a_unique_key_and_variable() {
        let mut cmd = command::<crate::flags::Cli>();
        cmd.build();
        for name in SERVING {
            let sub = cmd.find_subcommand(name).unwrap();
            let mut keys = std::collections::HashSet::new();
            let mut vars = std::collections::HashSet::new();
            let mut n = 0;
            for arg in sub.get_arguments().filter(|a| is_setting(a)) {
                n += 1;
                assert!(keys.insert(key(arg).to_owned()), "{name}: key {} twice", key(arg));
                let var = env_var(arg);
                assert_eq!(arg.get_env(), Some(OsStr::new(&var)), "{name}: {}", key(arg));
                assert!(vars.insert(var), "{name}: variable of {} twice", key(arg));
                assert!(
                    matches!(
                        arg.get_action(),
                        ArgAction::Set | ArgAction::Append | ArgAction::SetTrue
                    ),
                    "{name}: {}: action {:?} cannot be set from a file",
                    key(arg),
                    arg.get_action()
                );
                assert!(arg.is_positional() || arg.get_long().is_some(), "{name}: {}", key(arg));
            }
            assert!(n >= 14, "{name}: only {n} settings found");
        }
    }

    /// A command line shaped like peregrine's, with settings that require
    /// each other (as `--tls-cert` and `--tls-key` may).
    #[derive(clap::Parser, Debug)]
    struct PairCli {
        #[command(subcommand)]
        command: PairCommand,
    }

    #[derive(clap::Subcommand, Debug, PartialEq)]
    enum PairCommand {
        Hello {
            #[arg(long, requires = "key")]
            cert: Option<String>,
            #[arg(long, requires = "cert")]
            key: Option<String>,
        },
        Serve {
            root: PathBuf,
        },
    }

    impl Complete for PairCli {
        fn complete(&mut self, _: &Settings<'_>) -> anyhow::Result<String> {
            Ok(String::new())
        }
    }

    /// The first parse must not insist on `--key` when the file gives it.
    #[test]
    fn a_setting_may_require_one_that_comes_from_the_file() {
        let path = std::env::temp_dir().join(format!("peregrine-pair-{}.toml", std::process::id()));
        std::fs::write(&path, "key = \"k.pem\"\n").unwrap();
        let argv = ["peregrine", "hello", "--cert", "c.pem", "--config"]
            .map(OsString::from)
            .into_iter()
            .chain([path.clone().into_os_string()]);
        let parsed = parse::<PairCli>(argv);
        std::fs::remove_file(&path).unwrap();
        let Ok(Invocation::Run(cli)) = parsed else {
            panic!("not parsed");
        };
        assert_eq!(
            cli.command,
            PairCommand::Hello {
                cert: Some("c.pem".into()),
                key: Some("k.pem".into())
            }
        );
    }

    #[test]
    fn misspelt_keys_get_a_suggestion() {
        let known = ["workers", "bind", "head-bytes-max", "list-dirs"];
        assert_eq!(suggest("wrokers", known.into_iter()), Some("workers"));
        assert_eq!(suggest("head_bytes_max", known.into_iter()), Some("head-bytes-max"));
        assert_eq!(suggest("listdirs", known.into_iter()), Some("list-dirs"));
        assert_eq!(suggest("colour", known.into_iter()), None);
    }

    #[test]
    fn lines_are_counted_from_one() {
        assert_eq!(line_of("a = 1\nb = 2\n", 0), 1);
        assert_eq!(line_of("a = 1\nb = 2\n", 6), 2);
    }

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_string("a\"b\\c\u{1}"), "\"a\\\"b\\\\c\\u0001\"");
    }
}
