//! The error log: lines on standard error, each with a level, the least
//! severe written chosen once at start (`--log-level`, default `info`;
//! `PEREGRINE_DEBUG=1` also turns on `debug`). A line below the level costs
//! one relaxed load.
//!
//! `peregrine: error: ...`, `peregrine: warning: ...`, `peregrine: ...`
//! (info), `peregrine: debug: ...`.

use std::fmt;
use std::io::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};

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

/// 0: not set yet (the default, info, or debug under PEREGRINE_DEBUG).
static LEVEL: AtomicU8 = AtomicU8::new(0);

/// Sets the least severe level written, for the whole process.
pub fn set_level(level: Level) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

/// Whether lines of `level` are written.
pub fn enabled(level: Level) -> bool {
    let mut set = LEVEL.load(Ordering::Relaxed);
    if set == 0 {
        let debug = std::env::var_os("PEREGRINE_DEBUG").is_some_and(|v| !v.is_empty() && v != "0");
        set = if debug { Level::Debug } else { Level::Info } as u8;
        LEVEL.store(set, Ordering::Relaxed);
    }
    level as u8 <= set
}

/// Writes one line at `level` if it is enabled.
pub fn write(level: Level, args: fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    let prefix = match level {
        Level::Error => "error: ",
        Level::Warn => "warning: ",
        Level::Info => "",
        Level::Debug => "debug: ",
    };
    // Not eprintln!, which panics: a closed standard error (a supervisor
    // that read the first line and left) must not bring the server down.
    let _ = writeln!(std::io::stderr(), "peregrine: {prefix}{args}");
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
