//! `deploy/`: the Kubernetes manifests pass the Kubernetes schemas (strict:
//! an unknown or misspelt field fails), say what the guide promises, and
//! the container's health check (`peregrine probe`) answers as it should.
//! The image is built only when asked (`--ignored`), where a container
//! engine runs.
//!
//! The schema checker is `kubernetes-validate` (PyPI), which ships the
//! schemas of every Kubernetes release: kubeconform installs through the Go
//! module proxy but downloads its schemas from GitHub when it runs, which
//! these machines cannot reach. The test installs the checker itself if it
//! is missing; where it cannot, it says so on a line of its own (written
//! past the test harness's capture) and checks the rest.

mod common;

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{peregrine, terminate};

/// The checker's version: its schemas are those of Kubernetes up to 1.37.
const KUBERNETES_VALIDATE: &str = "kubernetes-validate==1.37.0";
/// Oldest and newest Kubernetes checked: 1.30 turned `preStop.sleep` on by
/// default.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.30.0", "1.37.0"];
/// The manifests `kubectl apply -k deploy/kubernetes` applies.
const MANIFESTS: [&str; 3] = ["deployment.yaml", "service.yaml", "volume.yaml"];

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// A line for whoever runs the tests, not swallowed by the harness (which
/// captures only `print!` and `eprint!`).
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "deploy.rs: {line}");
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(deploy_dir().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Where the checker is, installed there if it was missing: the directory
/// to put on PYTHONPATH, or why it cannot be had.
fn schema_checker() -> Result<PathBuf, String> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kubernetes-validate");
    let importable = |dir: &Path| {
        Command::new("python3")
            .args(["-c", "import kubernetes_validate"])
            .env("PYTHONPATH", dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if importable(&dir) {
        return Ok(dir);
    }
    // Installed beside, then renamed into place: a run stopped halfway
    // leaves nothing that looks installed.
    let partial = dir.with_extension(format!("partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    let out = Command::new("timeout")
        .args([
            "300",
            "python3",
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .arg("--target")
        .arg(&partial)
        .arg(KUBERNETES_VALIDATE)
        .output()
        .map_err(|e| format!("cannot run python3 -m pip: {e}"))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(format!(
            "pip install {KUBERNETES_VALIDATE} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&partial, &dir).map_err(|e| format!("cannot move the checker into place: {e}"))?;
    if importable(&dir) {
        Ok(dir)
    } else {
        Err("kubernetes_validate installed but cannot be imported".to_owned())
    }
}

/// Runs the checker on `files` for one Kubernetes version.
fn check_schemas(checker: &Path, version: &str, files: &[PathBuf]) -> (bool, String) {
    let out = Command::new("python3")
        .args(["-m", "kubernetes_validate", "--strict", "--quiet", "-k", version])
        .args(files)
        .env("PYTHONPATH", checker)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn kubernetes_manifests_pass_the_schemas() {
    let checker = match schema_checker() {
        Ok(dir) => dir,
        Err(why) => {
            say(&format!("SKIPPED the Kubernetes schema check: {why}"));
            return;
        }
    };
    let files: Vec<PathBuf> = MANIFESTS
        .iter()
        .map(|m| deploy_dir().join("kubernetes").join(m))
        .collect();
    for version in KUBERNETES_VERSIONS {
        let (ok, text) = check_schemas(&checker, version, &files);
        assert!(ok, "Kubernetes {version}:\n{text}");
    }
    // The check can fail: a misspelt field is refused.
    let broken = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("broken-{}.yaml", std::process::id()));
    std::fs::write(
        &broken,
        read("kubernetes/deployment.yaml").replace("readinessProbe:", "readynessProbe:"),
    )
    .unwrap();
    let (ok, text) = check_schemas(&checker, KUBERNETES_VERSIONS[1], std::slice::from_ref(&broken));
    let _ = std::fs::remove_file(&broken);
    assert!(
        !ok && text.contains("readynessProbe"),
        "a misspelt field passed:\n{text}"
    );
}

/// What deploy/README.md promises of the manifests, beyond the schemas.
#[test]
fn the_deployment_probes_livez_and_readyz_and_mounts_the_archives_directory() {
    let d = read("kubernetes/deployment.yaml");
    // Comments may say anything; the checks are on the settings.
    let settings: String = d
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    for (probe, path) in [("readinessProbe:", "/readyz"), ("livenessProbe:", "/livez")] {
        let at = settings.find(probe).unwrap_or_else(|| panic!("no {probe}"));
        let rest = &settings[at..];
        let http = &rest[..rest.find("Seconds").unwrap()];
        assert!(
            http.contains(&format!("path: {path}")) && http.contains("port: metrics"),
            "{probe} is not on {path} of the metrics port:\n{http}"
        );
    }
    // The version preStop's sleep needs is said beside it.
    assert!(settings.contains("preStop:\n              sleep:"));
    assert!(d.contains("Kubernetes 1.30 or later"));
    // A CPU request beside the memory limit.
    assert!(settings.contains("requests:\n              cpu: "), "no CPU request");
    assert!(settings.contains("limits:\n              memory: "), "no memory limit");
    // Only the state directory is writable.
    assert!(settings.contains("mountPath: /var/lib/peregrine"));
    assert!(
        settings.contains("- --metrics\n            - 0.0.0.0:9090"),
        "the health endpoints need --metrics"
    );
    assert!(settings.contains("name: metrics\n              containerPort: 9090"));
    assert!(settings.contains("- /srv/site/site.prg"));
    assert!(settings.contains("mountPath: /srv/site\n"));
    assert!(!settings.contains("subPath"), "a subPath mount never sees a rename");
    assert!(settings.contains("runAsNonRoot: true"));
    assert!(settings.contains("readOnlyRootFilesystem: true"));
    assert!(settings.contains("persistentVolumeClaim:\n            claimName: peregrine-site"));
    let kustomization = read("kubernetes/kustomization.yaml");
    for m in MANIFESTS {
        assert!(kustomization.contains(&format!("- {m}")), "{m} is not applied by -k");
    }
}

/// The image: static, distroless, non-root, health-checked through
/// `peregrine probe` on the address the command serves /livez on, its
/// state directory a volume (the one place written under a read-only
/// root). Built only where a container engine answers.
#[test]
fn the_container_image_is_static_non_root_and_health_checked() {
    let f = read("Dockerfile");
    assert!(f.contains("--target x86_64-unknown-linux-musl"));
    assert!(f.contains("FROM gcr.io/distroless/static"));
    assert!(f.contains("USER 65532:65532"));
    assert!(f.contains(r#"CMD ["/usr/local/bin/peregrine", "probe", "http://127.0.0.1:9090/livez"]"#));
    assert!(f.contains("--chown=65532:65532 /state /var/lib/peregrine"));
    assert!(f.contains("VOLUME /var/lib/peregrine"));
    assert!(f.contains(r#""--metrics", "0.0.0.0:9090""#));
}

/// Building the image needs a container engine, which CI machines and
/// these ones do not run. It printed SKIPPED and counted as passed there
/// (issue 33); stable Rust cannot mark a test ignored once it runs, so it
/// is ignored here, with its reason in the harness's own report (`test
/// ... ignored, needs a running container engine`), and where it is run
/// (`cargo test -p peregrine-cli --test deploy -- --ignored`) an engine
/// that does not answer fails it.
#[test]
#[ignore = "needs a running container engine (docker): run with --ignored where one runs"]
fn the_container_image_builds() {
    let engine_runs = Command::new("docker")
        .arg("info")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(engine_runs, "no container engine answers here (`docker info` failed)");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("docker")
        .args(["build", "-q", "-f", "deploy/Dockerfile", "-t", "peregrine:test", "."])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The container health check's command: 0 for a 2xx from /livez (its
/// default URL's path), 1 for anything else or nothing listening.
#[test]
fn probe_says_whether_livez_answers() {
    let mut child = peregrine()
        .args(["hello", "--bind", "127.0.0.1:0", "--metrics", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut metrics = None;
    for _ in 0..20 {
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        if let Some(url) = line.trim().split("metrics on http://").nth(1) {
            metrics = Some(url.trim_end_matches("/metrics").to_owned());
            break;
        }
    }
    let metrics = metrics.expect("a line naming the metrics address");
    let probe = |url: &str| peregrine().args(["probe", url]).output().unwrap();
    for path in ["/livez", "/readyz", "/healthz"] {
        let ok = probe(&format!("http://{metrics}{path}"));
        assert!(ok.status.success(), "{path}: {}", String::from_utf8_lossy(&ok.stderr));
    }
    let missing = probe(&format!("http://{metrics}/nothing-here"));
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("unhealthy") && err.contains("404"), "{err}");
    let bad = probe("https://example.com/");
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("plain HTTP only"));
    child.stderr = Some(stderr.into_inner());
    terminate(child);
    let gone = probe(&format!("http://{metrics}/livez"));
    assert_eq!(gone.status.code(), Some(1), "nothing listens any more");
}
