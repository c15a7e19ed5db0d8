//! The binary's logger for the `log` facade the libraries write to, on
//! standard error or appended to `--error-log PATH`, which SIGUSR1
//! reopens (for logrotate) with the access log. Lines of other crates are
//! left out: they are not Peregrine's to show.
//!
//! A command that runs and ends (`pack`, `check-config`) writes what a
//! tool writes: `peregrine: error: ...`, `peregrine: warning: ...`,
//! `peregrine: ...`, `peregrine: debug: ...`. A server (`serve`, `hello`,
//! from its first generation on) writes an error log: each line with its
//! time (RFC 3339, UTC, milliseconds) and level, as nginx's error log
//! has them, in text
//! (`2026-11-26T16:32:23.123Z [warn] peregrine: ROOT is empty: ...`) or in
//! JSON (`--error-log-format json`:
//! `{"time":"2026-11-26T16:32:23.123Z","level":"warn","message":"ROOT is empty: ..."}`),
//! one object a line for a collector.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use log::{Level, LevelFilter, Log, Metadata, Record};

/// How each line is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// A tool's lines, before a server starts: `peregrine: warning: ...`.
    #[value(skip)]
    #[default]
    Tool,
    /// `TIME [LEVEL] peregrine: MESSAGE`.
    Text,
    /// `{"time":...,"level":...,"message":...}`.
    Json,
}

/// Where the lines go.
enum Destination {
    Stderr,
    File { path: PathBuf, file: File },
}

struct Logger {
    destination: Mutex<(Destination, Format)>,
}

static LOGGER: Logger = Logger {
    destination: Mutex::new((Destination::Stderr, Format::Tool)),
};

/// Installs the logger, writing to standard error, at level info (debug
/// with `PEREGRINE_DEBUG=1`) until `--log-level` says otherwise.
pub(crate) fn install() {
    let debug = std::env::var_os("PEREGRINE_DEBUG").is_some_and(|v| !v.is_empty() && v != "0");
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(if debug { LevelFilter::Debug } else { LevelFilter::Info });
}

/// Where the lines are to go next, and how written: `--error-log PATH`
/// (appended, created if missing), or standard error. Opened first,
/// applied once the rest of a (re)configuration has succeeded.
pub(crate) struct Route(Destination, Format);

impl Route {
    pub(crate) fn to(path: Option<&Path>, format: Format) -> std::io::Result<Route> {
        let destination = match path {
            None => Destination::Stderr,
            Some(path) => Destination::File {
                path: path.to_owned(),
                file: open(path)?,
            },
        };
        Ok(Route(destination, format))
    }

    /// The lines from now on go there.
    pub(crate) fn apply(self) {
        *LOGGER.destination.lock().unwrap_or_else(|e| e.into_inner()) = (self.0, self.1);
    }
}

/// Opens the error log file again under its path (after logrotate moved
/// it); `false` when the lines go to standard error.
pub(crate) fn reopen() -> std::io::Result<bool> {
    let mut destination = LOGGER.destination.lock().unwrap_or_else(|e| e.into_inner());
    match &mut destination.0 {
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
        let destination = self.destination.lock().unwrap_or_else(|e| e.into_inner());
        let line = line(
            destination.1,
            record.level(),
            SystemTime::now(),
            &record.args().to_string(),
        );
        // One write per line, so that lines of different threads never
        // interleave (O_APPEND writes are atomic), and never a panic: a
        // closed standard error (a supervisor that read the first line and
        // left) or a full disk must not bring the server down.
        let _ = match &destination.0 {
            Destination::Stderr => std::io::stderr().write_all(line.as_bytes()),
            Destination::File { file, .. } => (&*file).write_all(line.as_bytes()),
        };
    }

    fn flush(&self) {}
}

/// One line, its newline included.
fn line(format: Format, level: Level, time: SystemTime, message: &str) -> String {
    let name = match level {
        Level::Error => "error",
        Level::Warn => "warn",
        Level::Info => "info",
        Level::Debug | Level::Trace => "debug",
    };
    match format {
        Format::Tool => {
            let prefix = match level {
                Level::Error => "error: ",
                Level::Warn => "warning: ",
                Level::Info => "",
                Level::Debug | Level::Trace => "debug: ",
            };
            format!("peregrine: {prefix}{message}\n")
        }
        Format::Text => format!("{} [{name}] peregrine: {message}\n", rfc3339_ms(time)),
        Format::Json => {
            // The time first, as collectors show it; the message escaped.
            let message = serde_json::Value::from(message);
            format!(
                "{{\"time\":\"{}\",\"level\":\"{name}\",\"message\":{message}}}\n",
                rfc3339_ms(time)
            )
        }
    }
}

/// `2026-11-26T16:32:23.123Z`: RFC 3339 in UTC with milliseconds.
fn rfc3339_ms(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard
/// Hinnant's `civil_from_days`, for days that are not negative).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64, millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis)
    }

    #[test]
    fn times_are_rfc3339_with_milliseconds() {
        assert_eq!(rfc3339_ms(at(0, 0)), "1970-01-01T00:00:00.000Z");
        // RFC 7231's example date, and a leap day.
        assert_eq!(rfc3339_ms(at(784_111_777, 7)), "1994-11-06T08:49:37.007Z");
        assert_eq!(rfc3339_ms(at(951_825_600, 999)), "2000-02-29T12:00:00.999Z");
        assert_eq!(rfc3339_ms(at(1_795_710_743, 123)), "2026-11-26T16:32:23.123Z");
    }

    #[test]
    fn server_lines_carry_time_and_level() {
        let t = at(784_111_777, 7);
        assert_eq!(
            line(Format::Text, Level::Warn, t, "x is empty"),
            "1994-11-06T08:49:37.007Z [warn] peregrine: x is empty\n"
        );
        assert_eq!(
            line(Format::Json, Level::Info, t, "say \"hi\""),
            "{\"time\":\"1994-11-06T08:49:37.007Z\",\"level\":\"info\",\"message\":\"say \\\"hi\\\"\"}\n"
        );
        assert_eq!(line(Format::Tool, Level::Error, t, "no"), "peregrine: error: no\n");
    }
}
