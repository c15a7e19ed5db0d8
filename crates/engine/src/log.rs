//! The error log, through the `log` facade: every line the libraries
//! (`peregrine`, `peregrine_files`, `peregrine_archive`) write goes to
//! `log` with the target `peregrine`, and the program's logger decides
//! where it goes and which levels it keeps. Without a logger the lines go
//! nowhere, as with any library that uses `log`. The `peregrine` binary
//! installs one that writes `peregrine: error: ...`, `peregrine: warning:
//! ...`, `peregrine: ...` (info) and `peregrine: debug: ...` to standard
//! error or to `--error-log`.
//!
//! A line below `log::max_level()` costs one relaxed load.

use std::fmt;

/// The target of every line the libraries write, for a logger's filters.
pub const TARGET: &str = "peregrine";

/// How severe a line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Something failed: a request answered 500, a reload refused.
    Error = 1,
    /// Something is wrong but served around: no read lease, accept failing.
    Warn = 2,
    /// What the server does: listening, archive swapped, log reopened.
    Info = 3,
    /// Per-connection detail: TLS handshakes that fail, plaintext on a TLS
    /// port. Off by default: a scanner would fill the log.
    Debug = 4,
}

impl std::str::FromStr for Level {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "error" => Ok(Level::Error),
            "warn" | "warning" => Ok(Level::Warn),
            "info" => Ok(Level::Info),
            "debug" => Ok(Level::Debug),
            _ => Err(format!("unknown log level {s:?} (expected error, warn, info or debug)")),
        }
    }
}

impl From<Level> for log::Level {
    fn from(level: Level) -> log::Level {
        match level {
            Level::Error => log::Level::Error,
            Level::Warn => log::Level::Warn,
            Level::Info => log::Level::Info,
            Level::Debug => log::Level::Debug,
        }
    }
}

/// Sets the least severe level written, for the whole process: the `log`
/// crate's maximum level (which also filters other crates' lines).
pub fn set_level(level: Level) {
    log::set_max_level(log::Level::from(level).to_level_filter());
}

/// Whether lines of `level` would reach the logger.
pub fn enabled(level: Level) -> bool {
    log::log_enabled!(target: TARGET, level.into())
}

/// Writes one line at `level`.
pub fn write(level: Level, args: fmt::Arguments<'_>) {
    log::log!(target: TARGET, level.into(), "{args}");
}

/// An error line.
pub fn error(args: fmt::Arguments<'_>) {
    write(Level::Error, args);
}

/// A warning line.
pub fn warn(args: fmt::Arguments<'_>) {
    write(Level::Warn, args);
}

/// An info line.
pub fn info(args: fmt::Arguments<'_>) {
    write(Level::Info, args);
}

/// A debug line.
pub fn debug(args: fmt::Arguments<'_>) {
    write(Level::Debug, args);
}
