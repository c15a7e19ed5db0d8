//! The programs some tests run (Chromium, Node.js, curl, nghttp2, Go for
//! h2spec): found on PATH or named by a variable, else installed from
//! Debian's packages by the test itself: once per machine at a time (under
//! `APT_LOCK`, the lock engineers' own `flock ... apt-get` takes too), and
//! bounded in time, so that an install never outlives its test binary.
//! And the independent clients some tests drive, from their language's
//! registry: a venv from PyPI (aioquic, websockets), a node_modules by
//! `npm ci`, a Go program by `go build`; each made once into a cache
//! directory the test names, under a lock of its own, bounded in time too.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A program a test runs: the variable that may name it, the names it has
/// on PATH, and the Debian package that provides it.
pub struct Program {
    pub var: &'static str,
    pub names: &'static [&'static str],
    pub package: &'static str,
}

/// The lock every installation by these tests takes (and the one the
/// engineers' own `flock ... apt-get` takes): apt's own locks make a second
/// `apt-get update` fail at once rather than wait, so two test binaries, or
/// two runs of `cargo test` on one machine, must not run apt side by side.
pub const APT_LOCK: &str = "/tmp/peregrine-apt.lock";

/// Everything one installation may take, waiting for the lock included.
/// Chromium and its libraries are about 100 MB to fetch and unpack: a few
/// minutes on a slow mirror. Past this the whole apt process group is
/// killed, so that an install never outlives its test binary and slows the
/// binaries cargo runs after it.
pub const APT_INSTALL_TIMEOUT_SECS: u64 = 900;

/// How long each apt step waits for dpkg's and apt's own locks, held by a
/// process that does not take `APT_LOCK` (unattended-upgrades, a person).
/// `install` waits by itself (`DPkg::Lock::Timeout`); `update` does not:
/// its lock on the package lists fails it at once whatever that option says
/// (apt 2.6: "Could not get lock /var/lib/apt/lists/lock", exit 100 after
/// 0.8 s with the option at 8 s), so it is tried again every
/// `APT_UPDATE_RETRY_SECS` for as long while that is why it failed.
const APT_STEP_LOCK_TIMEOUT_SECS: u64 = 300;

/// The pause between two tries of `apt-get update` (see above).
const APT_UPDATE_RETRY_SECS: u64 = 5;

/// Each program's path: the one its variable names, else the first of its
/// names on PATH, else the one Debian's package installs. The missing
/// packages are installed together in one `apt-get` run under `APT_LOCK`;
/// callers keep the answer in a `OnceLock` so that a test binary installs at
/// most once however many threads ask. The error says what failed.
pub fn find_or_install(programs: &[Program]) -> Result<Vec<std::path::PathBuf>, String> {
    let find = |p: &Program| {
        std::env::var_os(p.var)
            .map(Into::into)
            .or_else(|| find_on_path(p.names))
    };
    let missing: Vec<&str> = programs
        .iter()
        .filter(|p| find(p).is_none())
        .map(|p| p.package)
        .collect();
    if !missing.is_empty() {
        apt_install(&missing)?;
    }
    programs
        .iter()
        .map(|p| {
            find(p).ok_or_else(|| {
                format!(
                    "Debian's {} is installed but none of {:?} is on PATH (or set {})",
                    p.package, p.names, p.var
                )
            })
        })
        .collect()
}

/// The first of `names` found on PATH.
pub fn find_on_path(names: &[&str]) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// Installs `packages` with apt-get, once per machine at a time: under
/// flock(1) on `APT_LOCK`, skipping what another process installed while
/// this one waited, each apt step waiting for apt's own locks, the whole
/// bounded by `APT_INSTALL_TIMEOUT_SECS` (timeout(1) signals its whole
/// process group, apt and dpkg included).
fn apt_install(packages: &[&str]) -> Result<(), String> {
    const LOCK_BUSY: i32 = 75;
    const TIMED_OUT: i32 = 124;
    let apt = format!("apt-get -q -o DPkg::Lock::Timeout={APT_STEP_LOCK_TIMEOUT_SECS} -o Acquire::Retries=3");
    let tries = APT_STEP_LOCK_TIMEOUT_SECS / APT_UPDATE_RETRY_SECS;
    let script = format!(
        "missing=; for p in \"$@\"; do \
           dpkg-query -W -f='${{Status}}' \"$p\" 2>/dev/null | grep -q ' installed$' || missing=\"$missing $p\"; \
         done; \
         [ -z \"$missing\" ] || {{ \
           n=1; until out=$({apt} update 2>&1); do \
             printf '%s\\n' \"$out\" >&2; \
             case \"$out\" in *'Could not get lock'*) ;; *) exit 100;; esac; \
             [ $n -ge {tries} ] && exit 100; n=$((n + 1)); sleep {APT_UPDATE_RETRY_SECS}; \
           done; \
           printf '%s\\n' \"$out\"; \
           {apt} install -y --no-install-recommends $missing; }}"
    );
    let started = std::time::Instant::now();
    let out = Command::new("timeout")
        .args(["--kill-after=10", &APT_INSTALL_TIMEOUT_SECS.to_string()])
        .args(["flock", "--conflict-exit-code", &LOCK_BUSY.to_string()])
        .args(["--wait", &APT_INSTALL_TIMEOUT_SECS.to_string(), APT_LOCK])
        .args(["sh", "-c", &script, "sh"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .map_err(|e| format!("cannot run timeout(1) to install {packages:?} with apt-get: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let why = match out.status.code() {
        Some(LOCK_BUSY) => format!("{APT_LOCK} stayed locked by another install for {APT_INSTALL_TIMEOUT_SECS} s"),
        Some(TIMED_OUT) | Some(137) => format!("apt-get took more than {APT_INSTALL_TIMEOUT_SECS} s and was killed"),
        _ => format!(
            "apt-get failed ({}; it needs root and Debian's package repositories)",
            out.status
        ),
    };
    let tail = |bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    };
    Err(format!(
        "could not install {packages:?} after {:.0?}: {why}\n--- stdout (end)\n{}\n--- stderr (end)\n{}",
        started.elapsed(),
        tail(&out.stdout),
        tail(&out.stderr),
    ))
}

/// Everything one `go install` may take: the module and what it needs,
/// fetched through the Go module proxy and built.
pub const GO_INSTALL_TIMEOUT_SECS: u64 = 600;

/// `go install PACKAGE` with `go`, its binary put in `gobin`, bounded by
/// `GO_INSTALL_TIMEOUT_SECS` (timeout(1) signals the whole process group).
/// The error says what failed.
pub fn go_install(go: &std::path::Path, package: &str, gobin: &std::path::Path) -> Result<(), String> {
    let out = Command::new("timeout")
        .args(["--kill-after=10", &GO_INSTALL_TIMEOUT_SECS.to_string()])
        .arg(go)
        .args(["install", package])
        .env("GOBIN", gobin)
        .output()
        .map_err(|e| format!("cannot run timeout(1) and {}: {e}", go.display()))?;
    match out.status.code() {
        Some(0) => Ok(()),
        Some(124) | Some(137) => Err(format!(
            "go install {package} took more than {GO_INSTALL_TIMEOUT_SECS} s and was killed"
        )),
        _ => Err(format!(
            "go install {package} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

/// A Python with aioquic (the independent HTTP/3 client the tests drive):
/// `PEREGRINE_H3_PYTHON` if set, else a venv at `venv` made and filled from
/// PyPI once (under a lock, so that test binaries and runs do not race;
/// bounded by `timeout`).
pub fn aioquic_python(venv: &Path) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("PEREGRINE_H3_PYTHON") {
        return Ok(p.into());
    }
    python_venv(venv, "aioquic", "aioquic>=1,<2")
}

/// A Python with `websockets` (an independent WebSocket client, whose sync
/// API the tests use: version 13 or later): `PEREGRINE_WS_PYTHON` if set,
/// else a venv at `venv` made and filled from PyPI once, as
/// `aioquic_python` does.
pub fn websockets_python(venv: &Path) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("PEREGRINE_WS_PYTHON") {
        return Ok(p.into());
    }
    python_venv(venv, "websockets.sync.client", "websockets>=15,<16")
}

/// Autobahn|Testsuite's `testdata/` folder (the files its compression
/// cases 12.x and 13.x send: a JSON and an HTML file, Goethe's Faust, a
/// bitmap, a PDF), taken from its PyPI sdist (25.10.1, the version the
/// ported cases come from) by `pip download` into `dir` once: not copied
/// into this repository, since not all of it may be.
pub fn autobahn_testdata(dir: &Path) -> Result<PathBuf, String> {
    let script = "test -f \"$1/testdata/data1.json\" || \
         { rm -rf \"$1\" && mkdir -p \"$1\" && python3 -m venv \"$1/venv\" && \
           \"$1/venv/bin/pip\" download -q --disable-pip-version-check --no-deps --no-binary :all: \
             -d \"$1/sdist\" autobahntestsuite==25.10.1 && \
           tar -xzf \"$1\"/sdist/autobahntestsuite-25.10.1.tar.gz -C \"$1/sdist\" && \
           mkdir \"$1/testdata.part\" && \
           cp \"$1\"/sdist/autobahntestsuite-25.10.1/autobahntestsuite/testdata/* \"$1/testdata.part/\" && \
           mv \"$1/testdata.part\" \"$1/testdata\"; }";
    locked_sh(
        &format!("fetching autobahntestsuite's testdata into {}", dir.display()),
        "needs python3 with venv, and PyPI",
        "/tmp/peregrine-pip.lock",
        script,
        &[dir.as_os_str()],
        &[],
    )?;
    Ok(dir.join("testdata"))
}

/// The Python of a venv (at `venv`) with python-hyper's `h2`, for the
/// HTTP/2 WebSocket client (`PEREGRINE_H2_PYTHON` overrides it).
pub fn h2_python(venv: &Path) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("PEREGRINE_H2_PYTHON") {
        return Ok(p.into());
    }
    python_venv(venv, "h2.connection", "h2>=4.1,<5")
}

/// A Python with grpcio and python-hyper's `h2` (the gRPC server and
/// clients of `tests/proxy_grpc.rs`): `PEREGRINE_GRPC_PYTHON` if set, else
/// a venv at `venv` filled once from `requirements` (a pip requirements
/// file), as `aioquic_python` does.
pub fn grpc_python(venv: &Path, requirements: &Path) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("PEREGRINE_GRPC_PYTHON") {
        return Ok(p.into());
    }
    let script = "test -x \"$1/bin/python\" && \"$1/bin/python\" -c \"import grpc, h2.connection\" 2>/dev/null || \
         { rm -rf \"$1\" && python3 -m venv \"$1\" && \"$1/bin/pip\" install -q --disable-pip-version-check -r \"$2\"; }";
    locked_sh(
        &format!("installing {} into {}", requirements.display(), venv.display()),
        "needs python3 with venv, and PyPI",
        "/tmp/peregrine-pip.lock",
        script,
        &[venv.as_os_str(), requirements.as_os_str()],
        &[],
    )?;
    Ok(venv.join("bin/python"))
}

/// Everything one installation of a test's client may take (a venv from
/// PyPI, `npm ci`, a `go build` fetching its modules), waiting for its lock
/// included. Past this the whole process group is killed, so that an
/// install never outlives its test binary.
pub const CLIENT_INSTALL_TIMEOUT_SECS: u64 = 600;

/// The Python of a venv at `venv` in which `module` imports: the one there
/// if it does, else a new venv filled by `pip install REQUIREMENT`.
fn python_venv(venv: &Path, module: &str, requirement: &str) -> Result<PathBuf, String> {
    let script = "test -x \"$1/bin/python\" && \"$1/bin/python\" -c \"import $2\" 2>/dev/null || \
         { rm -rf \"$1\" && python3 -m venv \"$1\" && \"$1/bin/pip\" install -q --disable-pip-version-check \"$3\"; }";
    locked_sh(
        &format!("installing {requirement} into {}", venv.display()),
        "needs python3 with venv, and PyPI",
        "/tmp/peregrine-pip.lock",
        script,
        &[venv.as_os_str(), module.as_ref(), requirement.as_ref()],
        &[],
    )?;
    Ok(venv.join("bin/python"))
}

/// The `node_modules` of the npm project in `project` (its package.json and
/// package-lock.json), installed by `npm ci` into `cache` once: again only
/// when the lock file changed, or an earlier install did not finish. Run
/// by `npm` with `node`'s directory first on PATH (npm is a Node.js
/// script); under a lock, bounded by `CLIENT_INSTALL_TIMEOUT_SECS`. Give
/// the `node_modules` to Node.js as NODE_PATH (CommonJS `require` looks
/// there).
pub fn npm_modules(node: &Path, npm: &Path, project: &Path, cache: &Path) -> Result<PathBuf, String> {
    // `installed` is written last: a cache without it is half made.
    let script = "cmp -s \"$1/package-lock.json\" \"$2/package-lock.json\" && test -f \"$2/installed\" || \
         { rm -rf \"$2\" && mkdir -p \"$2\" && cp \"$1/package.json\" \"$1/package-lock.json\" \"$2/\" && cd \"$2\" && \
           \"$3\" ci --ignore-scripts --no-audit --no-fund --loglevel=error && touch installed; }";
    let mut path = std::ffi::OsString::from(node.parent().unwrap_or(Path::new("/")));
    if let Some(rest) = std::env::var_os("PATH") {
        path.push(":");
        path.push(rest);
    }
    locked_sh(
        &format!("npm ci of {} into {}", project.display(), cache.display()),
        "needs npm and the npm registry",
        "/tmp/peregrine-npm.lock",
        script,
        &[project.as_os_str(), cache.as_os_str(), npm.as_os_str()],
        &[("PATH", &path)],
    )?;
    Ok(cache.join("node_modules"))
}

/// The Go toolchain: `PEREGRINE_GO` if set, else `go` on PATH, else the one
/// the Go project's archive puts in /usr/local/go, else Debian's
/// `golang-go`, installed.
pub fn go() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("PEREGRINE_GO") {
        return Ok(p.into());
    }
    if let Some(go) =
        find_on_path(&["go"]).or_else(|| Some(PathBuf::from("/usr/local/go/bin/go")).filter(|p| p.is_file()))
    {
        return Ok(go);
    }
    Ok(find_or_install(&[Program {
        var: "PEREGRINE_GO",
        names: &["go"],
        package: "golang-go",
    }])?
    .remove(0))
}

/// The program of the Go module in `module` (its go.mod, go.sum and .go
/// files), built by `go build` once into `cache`: its name is `NAME-HASH`,
/// the hash of those files, so that a changed source is built anew and
/// an unchanged one never again. Modules come through the Go module proxy
/// as go.sum pins them (`-mod=readonly`); the toolchain is the local one
/// (`GOTOOLCHAIN=local`: none is downloaded). Under a lock, bounded by
/// `CLIENT_INSTALL_TIMEOUT_SECS`.
pub fn go_build(go: &Path, module: &Path, cache: &Path, name: &str) -> Result<PathBuf, String> {
    let mut sources: Vec<PathBuf> = std::fs::read_dir(module)
        .map_err(|e| format!("cannot list {}: {e}", module.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .filter(|p| {
            let file = p.file_name().unwrap_or_default().to_string_lossy();
            file == "go.mod" || file == "go.sum" || file.ends_with(".go")
        })
        .collect();
    sources.sort();
    // FNV-1a over each file's name and bytes.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for source in &sources {
        let bytes = std::fs::read(source).map_err(|e| format!("cannot read {}: {e}", source.display()))?;
        let name = source.file_name().unwrap_or_default().as_encoded_bytes();
        for b in name.iter().chain([0].iter()).chain(bytes.iter()) {
            hash = (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    let program = cache.join(format!("{name}-{hash:016x}"));
    std::fs::create_dir_all(cache).map_err(|e| format!("cannot create {}: {e}", cache.display()))?;
    let script = "test -x \"$3\" || { cd \"$1\" && \"$2\" build -o \"$3.part\" . && mv \"$3.part\" \"$3\"; }";
    locked_sh(
        &format!("go build of {} with {}", module.display(), go.display()),
        "needs Go as recent as go.mod says, and the Go module proxy",
        "/tmp/peregrine-go.lock",
        script,
        &[module.as_os_str(), go.as_os_str(), program.as_os_str()],
        &[("GOFLAGS", "-mod=readonly".as_ref()), ("GOTOOLCHAIN", "local".as_ref())],
    )?;
    Ok(program)
}

/// Runs `sh -c SCRIPT sh ARGS...` (with `envs` set) under flock(1) on
/// `lock`, the whole bounded by `CLIENT_INSTALL_TIMEOUT_SECS` (timeout(1)
/// signals the whole process group). The error says that `what` failed,
/// why, what it `needs`, and the end of what the script printed.
fn locked_sh(
    what: &str,
    needs: &str,
    lock: &str,
    script: &str,
    args: &[&OsStr],
    envs: &[(&str, &OsStr)],
) -> Result<(), String> {
    const TIMED_OUT: i32 = 124;
    let limit = CLIENT_INSTALL_TIMEOUT_SECS.to_string();
    let out = Command::new("timeout")
        .args(["--kill-after=10", &limit, "flock", "--wait", &limit, lock])
        .args(["sh", "-c", script, "sh"])
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .map_err(|e| format!("{what}: cannot run timeout(1): {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let why = match out.status.code() {
        Some(TIMED_OUT) | Some(137) => format!("took more than {CLIENT_INSTALL_TIMEOUT_SECS} s and was killed"),
        _ => out.status.to_string(),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    Err(format!(
        "{what} failed ({why}; {needs}):\n{}",
        lines[lines.len().saturating_sub(30)..].join("\n")
    ))
}
