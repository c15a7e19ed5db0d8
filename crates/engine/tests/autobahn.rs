//! RFC 6455 conformance under Autobahn|Testsuite's case numbers: the
//! fuzzing-client cases 1-10 (ported to Python 3 in `tests/autobahn/`, see
//! its README) run against the `ws_echo` example, and the compression
//! cases 12.x and 13.x (RFC 7692) against it with `--deflate`; every one must pass
//! by Autobahn's rules (OK, NON-STRICT or INFORMATIONAL, and no close that
//! Autobahn's report marks failed or unclean).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use test_support::process::{last_addr, Process};

/// Longest the whole run may take. 301 cases took 16 s against a fast
/// server (websockets): most end at once, a few wait on their own timers
/// (1-2 s each), the 9.x ones move up to 16 MiB each way.
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// Longest one case may take before the driver drops its connection: the
/// cases' own timers end every case within a few seconds of a server that
/// answers; this bounds one that does not.
const CASE_LIMIT_S: &str = "30";

/// The largest message the 9.x cases send (9.1.6, 9.2.6): 16 MiB.
const MESSAGE_BYTES_MAX: &str = "16777216";

/// An example's binary: `target/<profile>/examples/NAME`, next to `deps/`
/// where this test runs from. `cargo test` builds the examples when no
/// target is named; `cargo test --test autobahn` alone does not.
fn example(name: &str) -> Command {
    let exe = std::env::current_exe().unwrap();
    let dir: PathBuf = exe.parent().unwrap().parent().unwrap().join("examples");
    let bin = dir.join(name);
    assert!(
        bin.is_file(),
        "no {} (cargo build -p peregrine --example {name} makes it)",
        bin.display()
    );
    let mut cmd = Command::new(bin);
    cmd.env_remove("PEREGRINE_BIND");
    cmd
}

/// `python3` on the PATH: the driver needs only its standard library.
fn python3() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("python3"))
        .find(|p| p.is_file())
        .expect("python3 on the PATH: the Autobahn driver is a Python 3 script")
}

/// The ids of the cases a line of the driver's says FAILED ("2.5 FAILED
/// (close FAILED, code 1001)").
fn failed_cases(lines: &[String]) -> Vec<&str> {
    lines
        .iter()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let id = words.next()?;
            let first_digit = id.starts_with(|c: char| c.is_ascii_digit());
            (first_digit && words.next() == Some("FAILED")).then_some(id)
        })
        .collect()
}

/// The compression cases run by default: every payload and every offer
/// (12.1-12.5, 13.1-13.7) at the sizes up to 8 KiB, whole and in 256-byte
/// frames (the subcases 1-6 and 11). The others send 1,000 messages of
/// 16 to 128 KiB each and take minutes on a busy machine;
/// `PEREGRINE_AUTOBAHN_ALL=1` runs them too.
fn compression_cases() -> String {
    let subcases = [1, 2, 3, 4, 5, 6, 11];
    let series = [(12, 5), (13, 7)];
    let mut ids = Vec::new();
    for (series, n) in series {
        for group in 1..=n {
            ids.extend(subcases.iter().map(|i| format!("{series}.{group}.{i}")));
        }
    }
    ids.join(",")
}

#[test]
fn ws_echo_with_deflate_passes_the_autobahn_compression_cases() {
    let python = python3();
    let testdata = test_support::install::autobahn_testdata(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("autobahn"))
        .unwrap_or_else(|e| panic!("the compression cases need autobahntestsuite's testdata: {e}"));
    let echo = Process::spawn_stdout(example("ws_echo").args(["--bind", "127.0.0.1:0", "--deflate"]));
    let line = echo.first_line();
    let addr = last_addr(&line);
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/autobahn/run.py");
    let url = format!("ws://{addr}/echo");
    let all = std::env::var_os("PEREGRINE_AUTOBAHN_ALL").is_some();
    let cases = if all {
        "12.*,13.*".to_owned()
    } else {
        compression_cases()
    };
    let run = Process::spawn_stdout(Command::new(&python).arg("-B").arg(&driver).args([
        "--url",
        &url,
        "--cases",
        &cases,
        "--case-timeout",
        CASE_LIMIT_S,
        "--testdata",
        testdata.to_str().unwrap(),
    ]));
    let deadline = Instant::now() + if all { RUN_LIMIT * 10 } else { RUN_LIMIT };
    let mut lines = Vec::new();
    while let Some(line) = run.next_line_before(deadline) {
        print!("{line}");
        lines.push(line);
    }
    assert!(Instant::now() < deadline, "the Autobahn driver ran past its limit");
    let status = run.wait();
    let failed = failed_cases(&lines);
    // Every case must have been run compressed: UNIMPLEMENTED (the
    // server declined the offer) is no pass here.
    let unimplemented: Vec<&String> = lines.iter().filter(|l| l.contains(" UNIMPLEMENTED")).collect();
    let n_ok = lines
        .iter()
        .filter(|l| l.starts_with("1") && l.split_whitespace().nth(1) == Some("OK"))
        .count();
    assert!(
        status.success() && failed.is_empty() && unimplemented.is_empty() && n_ok >= 84,
        "Autobahn compression cases failed: {failed:?}, declined: {unimplemented:?}, {n_ok} OK (run \
         `python3 crates/engine/tests/autobahn/run.py --url {url} --testdata {} --cases ID --verbose`)",
        testdata.display()
    );
    echo.terminate();
}

#[test]
fn ws_echo_passes_the_autobahn_fuzzing_client_cases() {
    let python = python3();
    // The 9.x cases send 16 MiB messages, and 4 MiB in 64-byte frames
    // (65,536 of them): past the defaults (1 MiB, 1,024 frames), which
    // refuse them with 1009 as they should.
    let echo = Process::spawn_stdout(example("ws_echo").args([
        "--bind",
        "127.0.0.1:0",
        "--max-message",
        MESSAGE_BYTES_MAX,
        "--max-fragments",
        "65537",
    ]));
    let line = echo.first_line();
    assert!(line.starts_with("listening on http://"), "first line: {line:?}");
    let addr = last_addr(&line);

    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/autobahn/run.py");
    let report = Path::new(env!("CARGO_TARGET_TMPDIR")).join("autobahn-report.json");
    let url = format!("ws://{addr}/echo");
    // -B: no __pycache__ left in the source tree.
    let run = Process::spawn_stdout(Command::new(&python).arg("-B").arg(&driver).args([
        "--url",
        &url,
        "--case-timeout",
        CASE_LIMIT_S,
        "--json",
        report.to_str().unwrap(),
    ]));

    let deadline = Instant::now() + RUN_LIMIT;
    let mut lines = Vec::new();
    while let Some(line) = run.next_line_before(deadline) {
        print!("{line}");
        lines.push(line);
    }
    assert!(
        Instant::now() < deadline,
        "the Autobahn driver ran past {RUN_LIMIT:?}; its last lines:\n{}",
        lines[lines.len().saturating_sub(20)..].concat()
    );
    let status = run.wait();
    let failed = failed_cases(&lines);
    assert!(
        status.success() && failed.is_empty(),
        "Autobahn cases failed: {failed:?} (driver {status}; details in {}, or run \
         `python3 crates/engine/tests/autobahn/run.py --url {url} --cases ID --verbose`)",
        report.display()
    );
    echo.terminate();
}
