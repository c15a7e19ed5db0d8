//! The binary's logger for the `log` facade the libraries write to: the
//! lines Peregrine has always written (`peregrine: error: ...`,
//! `peregrine: warning: ...`, `peregrine: ...`, `peregrine: debug: ...`),
//! on standard error or appended to `--error-log PATH`, which SIGUSR1
//! reopens (for logrotate) with the access log. Lines of other crates are
//! left out: they are not Peregrine's to show.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use log::{Level, LevelFilter, Log, Metadata, Record};

/// Where the lines go.
enum Destination {
    Stderr,
    File { path: PathBuf, file: File },
}

struct Logger {
    destination: Mutex<Destination>,
}

static LOGGER: Logger = Logger {
    destination: Mutex::new(Destination::Stderr),
};

/// Installs the logger, writing to standard error, at level info (debug
/// with `PEREGRINE_DEBUG=1`) until `--log-level` says otherwise.
pub(crate) fn install() {
    let debug = std::env::var_os("PEREGRINE_DEBUG").is_some_and(|v| !v.is_empty() && v != "0");
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(if debug { LevelFilter::Debug } else { LevelFilter::Info });
}

/// Where the lines are to go next: `--error-log PATH` (appended, created
/// if missing), or standard error. Opened first, applied once the rest of
/// a (re)configuration has succeeded.
pub(crate) struct Route(Destination);

impl Route {
    pub(crate) fn to(path: Option<&Path>) -> std::io::Result<Route> {
        Ok(Route(match path {
            None => Destination::Stderr,
            Some(path) => Destination::File {
                path: path.to_owned(),
                file: open(path)?,
            },
        }))
    }

    /// The lines from now on go there.
    pub(crate) fn apply(self) {
        *LOGGER.destination.lock().unwrap_or_else(|e| e.into_inner()) = self.0;
    }
}

/// Opens the error log file again under its path (after logrotate moved
/// it); `false` when the lines go to standard error.
pub(crate) fn reopen() -> std::io::Result<bool> {
    let mut destination = LOGGER.destination.lock().unwrap_or_else(|e| e.into_inner());
    match &mut *destination {
        Destination::Stderr => Ok(false),
        Destination::File { path, file } => {
            *file = open(path)?;
            Ok(true)
        }
    }
}

fn open(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot open error log {}: {e}", path.display())))
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with(peregrine::log::TARGET) && metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let prefix = match record.level() {
            Level::Error => "error: ",
            Level::Warn => "warning: ",
            Level::Info => "",
            Level::Debug | Level::Trace => "debug: ",
        };
        // One write per line, so that lines of different threads never
        // interleave (O_APPEND writes are atomic), and never a panic: a
        // closed standard error (a supervisor that read the first line and
        // left) or a full disk must not bring the server down.
        let line = format!("peregrine: {prefix}{}\n", record.args());
        let destination = self.destination.lock().unwrap_or_else(|e| e.into_inner());
        let _ = match &*destination {
            Destination::Stderr => std::io::stderr().write_all(line.as_bytes()),
            Destination::File { file, .. } => (&*file).write_all(line.as_bytes()),
        };
    }

    fn flush(&self) {}
}
