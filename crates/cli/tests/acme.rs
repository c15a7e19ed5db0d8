//! Automatic HTTPS against Pebble, Let's Encrypt's test CA, installed
//! from the Go module proxy by the test itself and run on 127.0.0.1 with
//! pebble-challtestsrv as its DNS (every name is 127.0.0.1) and its
//! challenge ports pointed at Peregrine's: certificates by TLS-ALPN-01
//! and by HTTP-01 that verify against Pebble's root, a restart that
//! orders nothing, RSA 2048 keys on request, the alert and the 503
//! before the first certificate, and the names refused at start. An install that fails fails the test.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use common::{peregrine, terminate, Lines, Scratch, PATIENCE};

/// Where Pebble's programs are installed, once per machine.
const PEBBLE_BIN: &str = "/tmp/peregrine-pebble-bin";
/// How long installing Pebble (fetch and build) may take.
const INSTALL_TIMEOUT_SECS: u64 = 600;
/// How long a certificate may take to be issued once serving.
const ISSUE_PATIENCE: Duration = Duration::from_secs(20);

/// pebble and pebble-challtestsrv, installed by `go install` under a lock,
/// and the module's directory (its test certificates).
fn pebble_programs() -> &'static (PathBuf, PathBuf) {
    static PROGRAMS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    PROGRAMS.get_or_init(|| {
        let go = test_support::install::go().unwrap_or_else(|e| panic!("Go, to install Pebble: {e}"));
        let script = r#"set -e
test -x "$1/pebble" && test -x "$1/pebble-challtestsrv" && exit 0
GOFLAGS=-mod=mod GOBIN="$1" "$2" install github.com/letsencrypt/pebble/v2/cmd/...@latest"#;
        let limit = INSTALL_TIMEOUT_SECS.to_string();
        let out = Command::new("timeout")
            .args([
                "--kill-after=10",
                &limit,
                "flock",
                "--wait",
                &limit,
                "/tmp/peregrine-pebble.lock",
            ])
            .args(["sh", "-c", script, "sh", PEBBLE_BIN])
            .arg(&go)
            .output()
            .expect("timeout(1) and flock(1)");
        assert!(
            out.status.success(),
            "installing Pebble from the Go module proxy failed (needs the network): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let modcache = Command::new(&go).args(["env", "GOMODCACHE"]).output().expect("go env");
        let modcache = PathBuf::from(String::from_utf8_lossy(&modcache.stdout).trim());
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(modcache.join("github.com/letsencrypt/pebble"))
            .expect("Pebble's module in the module cache")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("test/certs/localhost/cert.pem").is_file())
            .collect();
        dirs.sort();
        (
            PathBuf::from(PEBBLE_BIN),
            dirs.pop().expect("Pebble's test certificates"),
        )
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Pebble and its DNS, ended when dropped.
struct Pebble {
    children: Vec<Child>,
    /// The directory URL.
    url: String,
    /// The root Pebble's API is served under (for --acme-ca-root).
    api_root: PathBuf,
    /// The root of the certificates it issues (from its management API).
    issuing_root: Vec<u8>,
    /// What Pebble printed (its orders among it).
    log: PathBuf,
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// How long Pebble may take to answer once started: it generates its
/// keys first, and the machine may be busy building.
const PEBBLE_PATIENCE: Duration = Duration::from_secs(60);

/// Starts Pebble validating on `http_port` (HTTP-01) and `tls_port`
/// (TLS-ALPN-01) of 127.0.0.1, with `extra` settings. A start that fails
/// (a port taken between `free_port` and Pebble's bind) is tried once
/// more on other ports.
fn start_pebble(dir: &Path, http_port: u16, tls_port: u16) -> Pebble {
    start_pebble_with(dir, http_port, tls_port, serde_json::json!({}))
}

fn start_pebble_with(dir: &Path, http_port: u16, tls_port: u16, extra: serde_json::Value) -> Pebble {
    match try_start_pebble(dir, http_port, tls_port, &extra) {
        Ok(pebble) => pebble,
        Err(first) => try_start_pebble(dir, http_port, tls_port, &extra)
            .unwrap_or_else(|second| panic!("Pebble did not start, twice:\n{first}\n---\n{second}")),
    }
}

fn try_start_pebble(dir: &Path, http_port: u16, tls_port: u16, extra: &serde_json::Value) -> Result<Pebble, String> {
    let (bin, module) = pebble_programs();
    let (api, management, dns) = (free_port(), free_port(), free_port());
    let certs = module.join("test/certs");
    let mut settings = serde_json::json!({
        "listenAddress": format!("127.0.0.1:{api}"),
        "managementListenAddress": format!("127.0.0.1:{management}"),
        "certificate": certs.join("localhost/cert.pem"),
        "privateKey": certs.join("localhost/key.pem"),
        "httpPort": http_port,
        "tlsPort": tls_port,
        "ocspResponderURL": "",
        "externalAccountBindingRequired": false,
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        settings[k] = v.clone();
    }
    let config_path = dir.join("pebble.json");
    std::fs::write(&config_path, serde_json::json!({ "pebble": settings }).to_string()).unwrap();
    let dns_child = Command::new(bin.join("pebble-challtestsrv"))
        .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
        .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
        .args(["-management", &format!("127.0.0.1:{}", free_port())])
        .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("challtestsrv.err")).unwrap())
        .spawn()
        .expect("pebble-challtestsrv");
    let log = dir.join("pebble.log");
    let pebble_child = Command::new(bin.join("pebble"))
        .arg("-config")
        .arg(&config_path)
        .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
        .env("PEBBLE_VA_NOSLEEP", "1")
        .env("PEBBLE_WFE_NONCEREJECT", "0")
        .env("PEBBLE_AUTHZREUSE", "0")
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.join("pebble.err")).unwrap())
        .spawn()
        .expect("pebble");
    let mut pebble = Pebble {
        children: vec![dns_child, pebble_child],
        url: format!("https://127.0.0.1:{api}/dir"),
        api_root: certs.join("pebble.minica.pem"),
        issuing_root: Vec::new(),
        log,
    };
    let why = |pebble: &Pebble| {
        format!(
            "{}{}{}",
            read(&pebble.log),
            read(&dir.join("pebble.err")),
            read(&dir.join("challtestsrv.err"))
        )
    };
    // Ready when its management API gives the issuing root and its
    // directory answers; not if either program has ended.
    let deadline = Instant::now() + PEBBLE_PATIENCE;
    loop {
        for child in &mut pebble.children {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("a Pebble program ended ({status}): {}", why(&pebble)));
            }
        }
        let root = Command::new(common::curl())
            .args([
                "-sfk",
                "--max-time",
                "5",
                &format!("https://127.0.0.1:{management}/roots/0"),
            ])
            .output()
            .unwrap();
        let directory = Command::new(common::curl())
            .args(["-sfk", "--max-time", "5", &pebble.url])
            .output()
            .unwrap();
        if root.status.success()
            && root.stdout.starts_with(b"-----BEGIN CERTIFICATE")
            && directory.status.success()
            && directory.stdout.windows(8).any(|w| w == b"newOrder")
        {
            pebble.issuing_root = root.stdout;
            return Ok(pebble);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "Pebble did not answer within {PEBBLE_PATIENCE:?}: {}",
                why(&pebble)
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A rustls client configuration that trusts only `root` (PEM).
fn client_config(root: &[u8]) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(root) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// A TLS handshake for `name` at 127.0.0.1:`port`, verified against
/// `root`: the leaf's DER, or why it failed.
fn handshake(port: u16, name: &str, root: &[u8]) -> Result<Vec<u8>, String> {
    use rustls::pki_types::ServerName;
    let config = client_config(root);
    let server_name = ServerName::try_from(name.to_owned()).unwrap();
    let mut conn = rustls::ClientConnection::new(config, server_name).unwrap();
    let mut sock = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(PATIENCE)).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).map_err(|e| e.to_string())?;
    }
    Ok(conn.peer_certificates().unwrap()[0].to_vec())
}

/// Waits until a handshake for `name` verifies; the leaf.
fn wait_for_certificate(port: u16, name: &str, root: &[u8], log: &dyn Fn() -> String) -> Vec<u8> {
    let deadline = Instant::now() + ISSUE_PATIENCE;
    loop {
        match handshake(port, name, root) {
            Ok(leaf) => return leaf,
            Err(e) if Instant::now() > deadline => panic!("no certificate for {name}: {e}\n{}", log()),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// `serve` with `sites` (names) by ACME at `pebble`, on `tls_port` and
/// `http_port`; its stderr collected in a thread.
fn serve_acme(
    dir: &Path,
    ca: &str,
    ca_root: &Path,
    state: &Path,
    sites: &[&str],
    ports: (u16, u16, u16),
    challenge: &str,
) -> (Served, Log) {
    let root = dir.join("www");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), "hello").unwrap();
    let mut cmd = peregrine();
    cmd.arg("serve")
        .args(["--bind", &format!("127.0.0.1:{}", ports.0)])
        .args(["--redirect-http", &format!("127.0.0.1:{}", ports.1)])
        .args(["--acme-ca", ca])
        .arg("--acme-ca-root")
        .arg(ca_root)
        .arg("--acme-state-dir")
        .arg(state)
        .args(["--acme-challenge", challenge])
        .args(["--metrics", &format!("127.0.0.1:{}", ports.2)])
        .args(["--workers", "1"]);
    for site in sites {
        cmd.arg("--site").arg(format!("{site}={}", root.display()));
    }
    spawn_logged(cmd)
}

/// The log a test reads while the server goes on writing it.
type Log = Arc<std::sync::Mutex<String>>;

/// Starts `cmd` (a `serve`) and returns once it has said where it
/// serves, its stderr collected in a thread from then on.
fn spawn_logged(mut cmd: Command) -> (Served, Log) {
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let lines = Lines::of(child.stderr.take().unwrap());
    let child = Served(Some(child));
    let text = Arc::new(std::sync::Mutex::new(String::new()));
    // The ACME process may speak before the start line.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let line = lines
            .next_before(deadline)
            .unwrap_or_else(|| panic!("no start line: {}", text.lock().unwrap()));
        text.lock().unwrap().push_str(&line);
        if line.contains("serving") {
            break;
        }
    }
    let sink = text.clone();
    std::thread::spawn(move || {
        while let Some(line) = lines.next_before(Instant::now() + Duration::from_secs(3600)) {
            sink.lock().unwrap().push_str(&line);
        }
    });
    (child, text)
}

/// Waits until `log` holds `needle`, for at most `patience`.
fn wait_log(log: &Log, needle: &str, patience: Duration, show: &dyn Fn() -> String) {
    let deadline = Instant::now() + patience;
    while !log.lock().unwrap().contains(needle) {
        assert!(Instant::now() < deadline, "no {needle:?} in the log:\n{}", show());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A server killed if a test fails before it is stopped.
struct Served(Option<Child>);

impl Served {
    fn stop(mut self) {
        terminate(self.0.take().unwrap());
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A GET on the cleartext port for `host`: the whole answer.
fn plain_get(port: u16, host: &str, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn acme_sites_get_certificates_by_tls_alpn_01_and_http_01_and_a_restart_orders_none() {
    let scratch = Scratch::new("acme");
    let dir = scratch.dir();
    let ports = (free_port(), free_port(), free_port());
    let pebble = start_pebble(dir, ports.1, ports.0);
    let state = dir.join("state");
    let sites = ["a.acme.test", "b.acme.test"];

    // TLS-ALPN-01, two sites.
    let (child, log) = serve_acme(dir, &pebble.url, &pebble.api_root, &state, &sites, ports, "tls-alpn-01");
    assert!(
        log.lock().unwrap().contains("ACME (tls-alpn-01"),
        "{}",
        log.lock().unwrap()
    );
    let show = || format!("{}\n{}", log.lock().unwrap(), read(&pebble.log));
    let leaves: Vec<Vec<u8>> = (sites.iter())
        .map(|name| wait_for_certificate(ports.0, name, &pebble.issuing_root, &show))
        .collect();
    // A site's certificate is for its names only.
    assert_ne!(leaves[0], leaves[1]);
    // Its expiry, in seconds from now: Pebble's certificates last days.
    let metrics = common::get(&format!("127.0.0.1:{}", ports.2), "/metrics");
    let expiry = (metrics.lines())
        .find_map(|l| l.strip_prefix(r#"peregrine_certificate_expiry_seconds{site="b.acme.test",name="b.acme.test"} "#))
        .unwrap_or_else(|| panic!("no expiry for b.acme.test: {metrics}"));
    assert!(expiry.parse::<u64>().unwrap() > 24 * 3600, "{expiry}");
    // A reload (SIGHUP) builds new certificate sets: the ACME ones stay.
    common::signal(child.0.as_ref().unwrap().id(), "HUP");
    let deadline = Instant::now() + PATIENCE;
    while !log.lock().unwrap().contains("configuration reloaded (generation 2)") {
        assert!(Instant::now() < deadline, "no reload: {}", show());
        std::thread::sleep(Duration::from_millis(50));
    }
    for (name, leaf) in sites.iter().zip(&leaves) {
        assert!(
            &handshake(ports.0, name, &pebble.issuing_root).unwrap() == leaf,
            "{name} after the reload"
        );
    }
    let mode = |p: &Path| std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions()) & 0o777;
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&state.join("a.acme.test/key.pem")), 0o600);
    child.stop();
    let issued = read(&pebble.log).matches("Issued certificate serial").count();
    assert_eq!(issued, 2, "{}", read(&pebble.log));

    // A restart serves the stored certificates and orders nothing.
    let (child, log) = serve_acme(dir, &pebble.url, &pebble.api_root, &state, &sites, ports, "tls-alpn-01");
    let show = || format!("{}\n{}", log.lock().unwrap(), read(&pebble.log));
    for (name, leaf) in sites.iter().zip(&leaves) {
        let served = wait_for_certificate(ports.0, name, &pebble.issuing_root, &show);
        assert!(
            &served == leaf,
            "{name}: another certificate after the restart\n{}",
            show()
        );
    }
    child.stop();
    assert_eq!(read(&pebble.log).matches("Issued certificate serial").count(), issued);
    assert!(!log.lock().unwrap().contains("ordering"), "{}", log.lock().unwrap());

    // HTTP-01, on the cleartext listener; a new state directory.
    let state = dir.join("state-http");
    let (child, log) = serve_acme(
        dir,
        &pebble.url,
        &pebble.api_root,
        &state,
        &["c.acme.test"],
        ports,
        "http-01",
    );
    let show = || format!("{}\n{}", log.lock().unwrap(), read(&pebble.log));
    wait_for_certificate(ports.0, "c.acme.test", &pebble.issuing_root, &show);
    assert!(log.lock().unwrap().contains("ACME (http-01"), "{}", show());
    // Now served: the cleartext port redirects.
    assert!(plain_get(ports.1, "c.acme.test", "/").starts_with("HTTP/1.1 308"));
    child.stop();
}

#[test]
fn before_its_first_certificate_a_site_fails_handshakes_and_answers_503_in_cleartext() {
    let scratch = Scratch::new("acme-waiting");
    let dir = scratch.dir();
    let ports = (free_port(), free_port());
    // A CA that is not there: the certificate never comes. Beside the
    // ACME site, the default site with certificate files, whose
    // certificate an unknown name would get: the ACME site's name must not.
    let ca = format!("https://127.0.0.1:{}/dir", free_port());
    let files = rcgen::generate_simple_self_signed(vec!["files.test".to_owned()]).unwrap();
    std::fs::write(dir.join("files.pem"), files.cert.pem()).unwrap();
    std::fs::write(dir.join("files.key"), files.signing_key.serialize_pem()).unwrap();
    std::fs::create_dir_all(dir.join("www")).unwrap();
    let config = dir.join("peregrine.toml");
    std::fs::write(
        &config,
        format!(
            r#"bind = ["127.0.0.1:{}"]
redirect-http = "127.0.0.1:{}"
acme-ca = "{ca}"
acme-ca-private = true
acme-state-dir = "state"
workers = 1

[[site]]
names = ["files.test"]
root = "www"
default = true
tls-cert = "files.pem"
tls-key = "files.key"

[[site]]
names = ["w.acme.test"]
root = "www"
"#,
            ports.0, ports.1
        ),
    )
    .unwrap();
    let mut cmd = peregrine();
    cmd.arg("serve").arg("--config").arg(&config).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let lines = Lines::of(child.stderr.take().unwrap());
    let child = Served(Some(child));
    // The ACME process, finding no CA, says it will try again: before the
    // start line or after it, whichever process is first.
    let deadline = Instant::now() + PATIENCE;
    let (mut start, mut retries) = (None, false);
    while start.is_none() || !retries {
        let line = lines
            .next_before(deadline)
            .unwrap_or_else(|| panic!("no start line ({start:?}) or no retry ({retries}) within {PATIENCE:?}"));
        if line.contains("trying again in 60 s") {
            retries = true;
        } else if line.contains("serving") {
            start = Some(line);
        }
    }
    let start = start.unwrap_or_default();
    assert!(start.contains("ACME (http-01"), "{start}");
    let pem = files.cert.pem();
    // The site with files is served; the ACME site is refused with an
    // alert, not given the default site's certificate.
    handshake(ports.0, "files.test", pem.as_bytes()).unwrap();
    let err = handshake(ports.0, "w.acme.test", pem.as_bytes()).unwrap_err();
    assert!(err.contains("UnrecognisedName"), "{err}");
    let answer = plain_get(ports.1, "w.acme.test", "/");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("Retry-After: 60"), "{answer}");
    // The other site's cleartext requests still redirect.
    let answer = plain_get(ports.1, "files.test", "/");
    assert!(answer.starts_with("HTTP/1.1 308"), "{answer}");
    // A token nobody set.
    let answer = plain_get(
        ports.1,
        "w.acme.test",
        "/.well-known/acme-challenge/AAAAAAAAAAAAAAAAAAAAAAAA",
    );
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    child.stop();
}

#[test]
fn names_no_public_ca_issues_for_and_wildcards_are_refused_at_start() {
    let scratch = Scratch::new("acme-refused");
    let dir = scratch.dir();
    let run = |site: &str, private: bool| {
        let mut cmd = peregrine();
        cmd.args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--acme-ca",
            "https://acme.example.com/dir",
        ])
        .arg("--acme-state-dir")
        .arg(dir.join("state"))
        .arg("--site")
        .arg(format!("{site}={}", dir.display()));
        if private {
            cmd.arg("--acme-ca-private");
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run("shop.test", false);
    assert!(
        err.contains("no public ACME CA issues a certificate for a name under .test"),
        "{err}"
    );
    let err = run("*.example.org", true);
    assert!(err.contains("DNS-01, which is not supported"), "{err}");
    // Nothing was ordered, nothing written.
    assert!(!dir.join("state").exists());
}

#[test]
fn check_config_refuses_bad_acme_settings_before_anything_is_ordered() {
    let scratch = Scratch::new("acme-check");
    let dir = scratch.dir();
    std::fs::write(dir.join("index.html"), "hello").unwrap();
    std::fs::write(dir.join("not-a-cert.pem"), "hello").unwrap();
    let ca = "https://acme.example.com/dir";
    let check = |site: &str, args: &[&str]| {
        let mut cmd = peregrine();
        cmd.args(["check-config", "serve", "--bind", "127.0.0.1:0"])
            .arg("--acme-state-dir")
            .arg(dir.join("state"))
            .args(args)
            .arg("--site")
            .arg(format!("{site}={}", dir.display()));
        let out = cmd.output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let missing = dir.join("missing.pem");
    let not_pem = dir.join("not-a-cert.pem");
    let refused: &[(&str, Vec<&str>, &str)] = &[
        (
            "a.example.com",
            vec!["--acme-email", "ops@example.com"],
            "--acme-email needs --acme-ca",
        ),
        (
            "a.example.com",
            vec!["--acme-ca", "http://acme.example.com/dir"],
            "must be https://",
        ),
        ("a.example.com", vec!["--acme-ca", "https:///dir"], "no host"),
        (
            "a.example.com",
            vec!["--acme-ca", ca, "--acme-challenge", "http-01"],
            "answered on the --redirect-http listener",
        ),
        (
            "a.example.com",
            vec!["--acme-key-type", "rsa2048"],
            "--acme-key-type needs --acme-ca",
        ),
        (
            "a.example.com",
            vec!["--acme-ca", ca, "--acme-key-type", "rsa4096"],
            "invalid value 'rsa4096' for '--acme-key-type",
        ),
        (
            "a.example.com",
            vec!["--acme-ca", ca, "--acme-eab-kid", "kid-1"],
            "give both --acme-eab-kid and --acme-eab-hmac-key",
        ),
        (
            "a.example.com",
            vec![
                "--acme-ca",
                ca,
                "--acme-eab-kid",
                "kid-1",
                "--acme-eab-hmac-key",
                "not base64!",
            ],
            "not base64url",
        ),
        (
            "a.example.com",
            vec!["--acme-ca", ca, "--acme-email", "ops at example"],
            "not an e-mail address",
        ),
        (
            "a.example.com",
            vec!["--acme-ca", ca, "--acme-ca-root", missing.to_str().unwrap()],
            "--acme-ca-root",
        ),
        (
            "a.example.com",
            vec!["--acme-ca", ca, "--acme-ca-root", not_pem.to_str().unwrap()],
            "no PEM certificate in it",
        ),
        (
            "shop.test",
            vec!["--acme-ca", ca],
            "no public ACME CA issues a certificate for a name under .test",
        ),
        (
            "*.example.org",
            vec!["--acme-ca", ca, "--acme-ca-private"],
            "DNS-01, which is not supported",
        ),
    ];
    for (site, args, why) in refused {
        let (ok, err) = check(site, args);
        assert!(
            !ok && err.contains(why),
            "{site} {args:?}: expected {why:?}, got:\n{err}"
        );
    }
    // A good one passes, and nothing was ordered or written.
    let (ok, err) = check(
        "a.example.com",
        &[
            "--acme-ca",
            ca,
            "--acme-email",
            "ops@example.com",
            "--acme-challenge",
            "tls-alpn-01",
            "--acme-key-type",
            "rsa2048",
        ],
    );
    assert!(ok, "{err}");
    assert!(!dir.join("state").exists());
}

/// A `serve --config` file with ACME by TLS-ALPN-01 for `sites`.
fn acme_config(pebble: &Pebble, state: &Path, www: &Path, port: u16, sites: &[&str]) -> String {
    let mut text = format!(
        "bind = [\"127.0.0.1:{port}\"]\nacme-ca = \"{}\"\nacme-ca-root = \"{}\"\nacme-state-dir = \"{}\"\n\
         acme-challenge = \"tls-alpn-01\"\nworkers = 1\n",
        pebble.url,
        pebble.api_root.display(),
        state.display()
    );
    for site in sites {
        text.push_str(&format!(
            "\n[[site]]\nnames = [\"{site}\"]\nroot = \"{}\"\n",
            www.display()
        ));
    }
    text
}

#[test]
fn a_reload_orders_a_new_sites_certificate_and_stops_renewing_a_removed_one() {
    let scratch = Scratch::new("acme-reload");
    let dir = scratch.dir();
    let port = free_port();
    let pebble = start_pebble(dir, free_port(), port);
    let (state, www) = (dir.join("state"), dir.join("www"));
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), "hello").unwrap();
    let config = dir.join("peregrine.toml");
    std::fs::write(&config, acme_config(&pebble, &state, &www, port, &["old.acme.test"])).unwrap();
    let mut cmd = peregrine();
    cmd.arg("serve").arg("--config").arg(&config);
    let (child, log) = spawn_logged(cmd);
    let show = || format!("{}\n{}", log.lock().unwrap(), read(&pebble.log));
    wait_for_certificate(port, "old.acme.test", &pebble.issuing_root, &show);

    std::fs::write(&config, acme_config(&pebble, &state, &www, port, &["new.acme.test"])).unwrap();
    common::signal(child.0.as_ref().unwrap().id(), "HUP");
    wait_log(&log, "configuration reloaded (generation 2)", PATIENCE, &show);
    // The new name is ordered and served, the old one is not renewed.
    wait_for_certificate(port, "new.acme.test", &pebble.issuing_root, &show);
    wait_log(
        &log,
        "old.acme.test: no longer in the configuration, not renewed",
        PATIENCE,
        &show,
    );
    let err = handshake(port, "old.acme.test", &pebble.issuing_root).unwrap_err();
    assert!(err.contains("UnrecognisedName"), "{err}");
    assert_eq!(
        read(&pebble.log).matches("Issued certificate serial").count(),
        2,
        "{}",
        show()
    );
    child.stop();
}

/// The leaf's key: "rsa2048", "ecdsa-p256" or what else it is.
fn key_type(leaf: &[u8]) -> String {
    use x509_parser::public_key::PublicKey;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).unwrap();
    let spki = cert.public_key();
    match spki.parsed().unwrap() {
        PublicKey::RSA(rsa) => format!("rsa{}", rsa.key_size()),
        PublicKey::EC(_)
            if spki.algorithm.parameters.as_ref().and_then(|p| p.as_oid().ok())
                == Some(x509_parser::oid_registry::OID_EC_P256) =>
        {
            "ecdsa-p256".to_owned()
        }
        _ => format!("{:?}", spki.algorithm.algorithm),
    }
}

/// Waits until `name` is served (and answers a GET) with a key of type
/// `want`; the leaf.
fn wait_for_key_type(port: u16, name: &str, root: &[u8], want: &str, show: &dyn Fn() -> String) -> Vec<u8> {
    let deadline = Instant::now() + ISSUE_PATIENCE;
    loop {
        let leaf = tls_get(port, name, root).unwrap_or_else(|e| panic!("{name}: {e}\n{}", show()));
        if key_type(&leaf) == want {
            return leaf;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: still {}\n{}",
            key_type(&leaf),
            show()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn rsa_keys_on_request_and_a_change_of_key_type_orders_a_new_certificate() {
    let scratch = Scratch::new("acme-rsa");
    let dir = scratch.dir();
    let port = free_port();
    let pebble = start_pebble(dir, free_port(), port);
    let (state, www) = (dir.join("state"), dir.join("www"));
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), "hello").unwrap();
    let config = dir.join("peregrine.toml");
    let ecdsa = acme_config(&pebble, &state, &www, port, &["k.acme.test"]);
    let rsa = format!("acme-key-type = \"rsa2048\"\n{ecdsa}");
    let issued = || read(&pebble.log).matches("Issued certificate serial").count();
    let serve = || {
        let mut cmd = peregrine();
        cmd.arg("serve").arg("--config").arg(&config);
        spawn_logged(cmd)
    };

    // The default: ECDSA P-256.
    std::fs::write(&config, &ecdsa).unwrap();
    let (child, log) = serve();
    let show = || format!("{}\n{}", log.lock().unwrap(), read(&pebble.log));
    assert!(log.lock().unwrap().contains("ecdsa-p256 keys"), "{}", show());
    let leaf = wait_for_certificate(port, "k.acme.test", &pebble.issuing_root, &show);
    assert_eq!(key_type(&leaf), "ecdsa-p256");

    // A reload to RSA 2048 orders a new certificate at once (the old one
    // is far from its renewal), which clients then see.
    std::fs::write(&config, &rsa).unwrap();
    common::signal(child.0.as_ref().unwrap().id(), "HUP");
    wait_log(&log, "configuration reloaded (generation 2)", PATIENCE, &show);
    let rsa_leaf = wait_for_key_type(port, "k.acme.test", &pebble.issuing_root, "rsa2048", &show);
    assert!(
        log.lock().unwrap().contains("k.acme.test: the key type is now rsa2048"),
        "{}",
        show()
    );
    let mode = |p: &Path| std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions()) & 0o777;
    assert_eq!(mode(&state.join("k.acme.test/key.pem")), 0o600);
    child.stop();
    assert_eq!(issued(), 2, "{}", read(&pebble.log));

    // A restart with RSA serves the stored RSA certificate, ordering none.
    let (child, log) = serve();
    let show = || format!("{}\n{}", log.lock().unwrap(), read(&pebble.log));
    assert_eq!(
        wait_for_certificate(port, "k.acme.test", &pebble.issuing_root, &show),
        rsa_leaf
    );
    child.stop();
    assert_eq!(issued(), 2, "{}", read(&pebble.log));
    assert!(!log.lock().unwrap().contains("ordering"), "{}", log.lock().unwrap());

    // A restart back to ECDSA serves the stored RSA one until a new
    // ECDSA one, ordered at once, is issued.
    std::fs::write(&config, &ecdsa).unwrap();
    let (child, log) = serve();
    let show = || format!("{}\n{}", log.lock().unwrap(), read(&pebble.log));
    wait_for_certificate(port, "k.acme.test", &pebble.issuing_root, &show);
    wait_for_key_type(port, "k.acme.test", &pebble.issuing_root, "ecdsa-p256", &show);
    assert!(
        log.lock()
            .unwrap()
            .contains("k.acme.test: the stored certificate's key is not ecdsa-p256"),
        "{}",
        show()
    );
    child.stop();
    assert_eq!(issued(), 3, "{}", read(&pebble.log));
}

/// A TLS connection for `name` verified against `root` and one GET of
/// `/` on it: the leaf it was served, or what failed.
fn tls_get(port: u16, name: &str, root: &[u8]) -> Result<Vec<u8>, String> {
    use rustls::pki_types::ServerName;
    let config = client_config(root);
    let conn = rustls::ClientConnection::new(config, ServerName::try_from(name.to_owned()).unwrap()).unwrap();
    let sock = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    write!(tls, "GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    let mut buf = [0; 4096];
    while !answer.ends_with(b"hello") {
        match tls.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("{e} after {:?}", String::from_utf8_lossy(&answer))),
        }
    }
    if !answer.starts_with(b"HTTP/1.1 200") || !answer.ends_with(b"hello") {
        return Err(format!("answer {:?}", String::from_utf8_lossy(&answer)));
    }
    Ok(tls.conn.peer_certificates().unwrap()[0].to_vec())
}

#[test]
fn short_lived_certificates_renew_under_load_with_no_failed_request_and_serving_outlives_the_ca() {
    let scratch = Scratch::new("acme-renew");
    let dir = scratch.dir();
    let ports = (free_port(), free_port(), free_port());
    // Certificates that last 30 s (renewed within 20 s), and an account
    // that needs External Account Binding.
    let hmac = "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W";
    let pebble = start_pebble_with(
        dir,
        ports.1,
        ports.0,
        serde_json::json!({
            "profiles": {"default": {"description": "short", "validityPeriod": 30}},
            "externalAccountBindingRequired": true,
            "externalAccountMACKeys": {"kid-peregrine": hmac},
        }),
    );
    let state = dir.join("state");
    let www = dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), "hello").unwrap();
    let name = "r.acme.test";
    let mut cmd = peregrine();
    cmd.arg("serve")
        .args(["--bind", &format!("127.0.0.1:{}", ports.0)])
        .args(["--acme-ca", &pebble.url])
        .arg("--acme-ca-root")
        .arg(&pebble.api_root)
        .arg("--acme-state-dir")
        .arg(&state)
        .args(["--acme-challenge", "tls-alpn-01"])
        .args(["--acme-eab-kid", "kid-peregrine", "--acme-eab-hmac-key", hmac])
        .args(["--workers", "1"])
        .arg("--site")
        .arg(format!("{name}={}", www.display()));
    let (child, log) = spawn_logged(cmd);
    let show = || format!("{}\n{}", log.lock().unwrap(), read(&pebble.log));
    let first = wait_for_certificate(ports.0, name, &pebble.issuing_root, &show);
    assert!(log.lock().unwrap().contains("(external account binding)"), "{}", show());

    // Four clients, each a new TLS connection and a GET after another.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let leaves = Arc::new(std::sync::Mutex::new(vec![first]));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let n_ok = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let root = Arc::new(pebble.issuing_root.clone());
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (stop, leaves, failures, n_ok, root) = (
                stop.clone(),
                leaves.clone(),
                failures.clone(),
                n_ok.clone(),
                root.clone(),
            );
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    match tls_get(ports.0, name, &root) {
                        Ok(leaf) => {
                            n_ok.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let mut leaves = leaves.lock().unwrap();
                            if !leaves.contains(&leaf) {
                                leaves.push(leaf);
                            }
                        }
                        Err(e) => failures.lock().unwrap().push(e),
                    }
                }
            })
        })
        .collect();
    // Two renewals seen by the clients.
    let deadline = Instant::now() + Duration::from_secs(120);
    while leaves.lock().unwrap().len() < 3 {
        assert!(Instant::now() < deadline, "fewer than two renewals seen:\n{}", show());
        std::thread::sleep(Duration::from_millis(100));
    }
    // The CA goes away: the next renewal fails and is put off; serving
    // goes on with the certificate it has.
    let issued = read(&pebble.log).matches("Issued certificate serial").count();
    drop(pebble);
    wait_log(&log, "no certificate this time", Duration::from_secs(60), &|| {
        log.lock().unwrap().clone()
    });
    assert!(
        log.lock().unwrap().contains("trying again in 60 s"),
        "{}",
        log.lock().unwrap()
    );
    let served_after = n_ok.load(std::sync::atomic::Ordering::Relaxed);
    while n_ok.load(std::sync::atomic::Ordering::Relaxed) < served_after + 20 {
        assert!(failures.lock().unwrap().is_empty(), "{:?}", failures.lock().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} requests failed: {:?}",
        failures.len(),
        n_ok.load(std::sync::atomic::Ordering::Relaxed),
        &failures[..failures.len().min(5)]
    );
    assert!(issued >= 3, "{issued}");
    child.stop();
}

/// Pebble's HTTP-01 requests, given to each server in turn until one
/// answers 200 (the one holding the token): two servers behind one port,
/// as replicas behind a load balancer.
fn forward_http01(listener: TcpListener, backends: Vec<u16>) {
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let backends = backends.clone();
        std::thread::spawn(move || {
            let mut head = Vec::new();
            let mut byte = [0; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match conn.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => return,
                }
            }
            let head = String::from_utf8_lossy(&head);
            let head = format!("{}\r\nConnection: close\r\n\r\n", head.trim_end_matches("\r\n"));
            let mut last = Vec::new();
            for port in backends {
                let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                    continue;
                };
                let mut answer = Vec::new();
                if s.write_all(head.as_bytes()).is_err() || s.read_to_end(&mut answer).is_err() {
                    continue;
                }
                let ok = answer.starts_with(b"HTTP/1.1 200");
                last = answer;
                if ok {
                    break;
                }
            }
            let _ = conn.write_all(&last);
        });
    }
}

#[test]
fn two_servers_on_one_state_directory_order_each_certificate_once() {
    let scratch = Scratch::new("acme-fleet");
    let dir = scratch.dir();
    let front = TcpListener::bind("127.0.0.1:0").unwrap();
    let front_port = front.local_addr().unwrap().port();
    let replicas = [(free_port(), free_port()), (free_port(), free_port())];
    std::thread::spawn(move || forward_http01(front, replicas.iter().map(|r| r.1).collect()));
    let pebble = start_pebble(dir, front_port, free_port());
    let state = dir.join("state");
    let www = dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), "hello").unwrap();
    let names = ["f1.acme.test", "f2.acme.test"];
    let served: Vec<(Served, Log)> = replicas
        .iter()
        .map(|(tls, http)| {
            let mut cmd = peregrine();
            cmd.arg("serve")
                .args(["--bind", &format!("127.0.0.1:{tls}")])
                .args(["--redirect-http", &format!("127.0.0.1:{http}")])
                .args(["--acme-ca", &pebble.url])
                .arg("--acme-ca-root")
                .arg(&pebble.api_root)
                .arg("--acme-state-dir")
                .arg(&state)
                .args(["--acme-challenge", "http-01"])
                .args(["--workers", "1"]);
            for name in names {
                cmd.arg("--site").arg(format!("{name}={}", www.display()));
            }
            spawn_logged(cmd)
        })
        .collect();
    let show = || {
        let logs: Vec<String> = served.iter().map(|(_, l)| l.lock().unwrap().clone()).collect();
        format!("{}\n---\n{}", logs.join("\n---\n"), read(&pebble.log))
    };
    for name in names {
        let leaves: Vec<Vec<u8>> = (replicas.iter())
            .map(|(tls, _)| {
                let deadline = Instant::now() + Duration::from_secs(90);
                loop {
                    match handshake(*tls, name, &pebble.issuing_root) {
                        Ok(leaf) => break leaf,
                        Err(e) => assert!(Instant::now() < deadline, "{name} on {tls}: {e}\n{}", show()),
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            })
            .collect();
        assert!(
            leaves[0] == leaves[1],
            "{name}: the replicas serve different certificates\n{}",
            show()
        );
    }
    assert_eq!(
        read(&pebble.log).matches("Issued certificate serial").count(),
        names.len(),
        "{}",
        show()
    );
    for (child, _) in served {
        child.stop();
    }
}

#[test]
fn a_rewritten_certificate_file_is_served_without_a_reload_once_its_key_matches() {
    let scratch = Scratch::new("acme-watch");
    let dir = scratch.dir();
    let name = "watched.test";
    let first = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
    let second = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
    // Replaced as certbot and Kubernetes do: a new file renamed over.
    let replace = |file: &str, text: String| {
        std::fs::write(dir.join("new.tmp"), text).unwrap();
        std::fs::rename(dir.join("new.tmp"), dir.join(file)).unwrap();
    };
    replace("cert.pem", first.cert.pem());
    replace("key.pem", first.signing_key.serialize_pem());
    std::fs::create_dir_all(dir.join("www")).unwrap();
    std::fs::write(dir.join("www/index.html"), "hello").unwrap();
    let port = free_port();
    let mut cmd = peregrine();
    cmd.arg("serve")
        .arg(dir.join("www"))
        .args(["--bind", &format!("127.0.0.1:{port}"), "--workers", "1"])
        .arg("--tls-cert")
        .arg(dir.join("cert.pem"))
        .arg("--tls-key")
        .arg(dir.join("key.pem"));
    let (child, log) = spawn_logged(cmd);
    let show = || log.lock().unwrap().clone();
    let (first_pem, second_pem) = (first.cert.pem(), second.cert.pem());
    assert_eq!(
        handshake(port, name, first_pem.as_bytes()).unwrap(),
        first.cert.der().to_vec()
    );

    // The certificate alone: it does not match the key, the old pair
    // goes on serving.
    replace("cert.pem", second.cert.pem());
    wait_log(&log, "certificate files changed but do not load", PATIENCE, &show);
    assert_eq!(
        handshake(port, name, first_pem.as_bytes()).unwrap(),
        first.cert.der().to_vec()
    );
    // Then its key: the new pair is served, without SIGHUP.
    replace("key.pem", second.signing_key.serialize_pem());
    wait_log(
        &log,
        "certificate files changed: 1 certificate loaded again",
        PATIENCE,
        &show,
    );
    assert_eq!(
        handshake(port, name, second_pem.as_bytes()).unwrap(),
        second.cert.der().to_vec()
    );
    assert!(!show().contains("configuration reloaded"), "{}", show());
    child.stop();
}

#[test]
fn a_reload_that_adds_acme_to_a_server_started_without_it_is_refused_and_serving_goes_on() {
    let scratch = Scratch::new("acme-added");
    let dir = scratch.dir();
    let www = dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), "hello").unwrap();
    let port = free_port();
    let config = dir.join("peregrine.toml");
    let site = format!(
        "[[site]]\nnames = [\"added.acme.test\"]\nroot = \"{}\"\n",
        www.display()
    );
    std::fs::write(&config, format!("bind = [\"127.0.0.1:{port}\"]\nworkers = 1\n\n{site}")).unwrap();
    let mut cmd = peregrine();
    cmd.arg("serve").arg("--config").arg(&config);
    let (child, log) = spawn_logged(cmd);
    let show = || log.lock().unwrap().clone();
    std::fs::write(
        &config,
        format!(
            "bind = [\"127.0.0.1:{port}\"]\nworkers = 1\nacme-ca = \"https://127.0.0.1:{}/dir\"\n\
             acme-ca-private = true\nacme-state-dir = \"{}\"\n\n{site}",
            free_port(),
            dir.join("state").display()
        ),
    )
    .unwrap();
    common::signal(child.0.as_ref().unwrap().id(), "HUP");
    wait_log(&log, "configuration not reloaded", PATIENCE, &show);
    assert!(show().contains("restart to begin using ACME"), "{}", show());
    // Still serving, in cleartext, as before.
    assert!(
        plain_get(port, "added.acme.test", "/").starts_with("HTTP/1.1 200"),
        "{}",
        show()
    );
    assert!(!dir.join("state").exists());
    child.stop();
}

/// `--acme-ca` changed (staging to production is the usual recipe), at a
/// reload and at a restart: the new CA is ordered from at once, and its
/// certificate served once issued, the old CA's serving meanwhile; each
/// CA has its own account. Run with `--error-log-format json`: the ACME
/// process's lines reach the error log as the serving process's do, each
/// a JSON object with its time and level.
#[test]
fn a_changed_ca_is_ordered_from_at_a_reload_and_at_a_restart() {
    let scratch = Scratch::new("acme-ca-switch");
    let dir = scratch.dir();
    let port = free_port();
    let (dir1, dir2) = (dir.join("ca1"), dir.join("ca2"));
    std::fs::create_dir_all(&dir1).unwrap();
    std::fs::create_dir_all(&dir2).unwrap();
    let ca1 = start_pebble(&dir1, free_port(), port);
    let ca2 = start_pebble(&dir2, free_port(), port);
    let (state, www) = (dir.join("state"), dir.join("www"));
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), "hello").unwrap();
    let config = dir.join("peregrine.toml");
    let write_config = |ca: &Pebble| {
        let text = acme_config(ca, &state, &www, port, &["s.acme.test"]);
        std::fs::write(&config, format!("error-log-format = \"json\"\n{text}")).unwrap();
    };
    let issued = |ca: &Pebble| read(&ca.log).matches("Issued certificate serial").count();
    let serve = || {
        let mut cmd = peregrine();
        cmd.arg("serve").arg("--config").arg(&config);
        spawn_logged(cmd)
    };

    write_config(&ca1);
    let (child, log) = serve();
    let show = || format!("{}\n{}\n{}", log.lock().unwrap(), read(&ca1.log), read(&ca2.log));
    wait_for_certificate(port, "s.acme.test", &ca1.issuing_root, &show);
    // The ACME process's lines, as JSON objects with time and level.
    wait_log(&log, "s.acme.test: certificate issued", PATIENCE, &show);
    let acme_lines: Vec<String> = (log.lock().unwrap().lines())
        .filter(|l| l.contains("ACME: s.acme.test"))
        .map(str::to_owned)
        .collect();
    assert!(acme_lines.len() >= 2, "{}", show());
    for line in &acme_lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{line}");
        assert_eq!(v["level"], "info", "{line}");
    }

    // A reload to the other CA: ordered from it, served once issued.
    write_config(&ca2);
    common::signal(child.0.as_ref().unwrap().id(), "HUP");
    wait_log(&log, "configuration reloaded (generation 2)", PATIENCE, &show);
    wait_for_certificate(port, "s.acme.test", &ca2.issuing_root, &show);
    wait_log(&log, "s.acme.test: the CA is now", PATIENCE, &show);
    child.stop();
    assert_eq!((issued(&ca1), issued(&ca2)), (1, 1), "{}", show());

    // A restart back on the first CA: the stored certificate (the second
    // CA's) is not taken for the first's; one is ordered from it.
    write_config(&ca1);
    let (child, log) = serve();
    let show = || format!("{}\n{}\n{}", log.lock().unwrap(), read(&ca1.log), read(&ca2.log));
    wait_for_certificate(port, "s.acme.test", &ca1.issuing_root, &show);
    wait_log(&log, "the stored certificate is from another CA", PATIENCE, &show);
    child.stop();
    assert_eq!((issued(&ca1), issued(&ca2)), (2, 1), "{}", show());
    // One account per CA directory.
    let accounts = (std::fs::read_dir(&state).unwrap().filter_map(Result::ok))
        .filter(|e| e.file_name().to_string_lossy().starts_with("account-"))
        .count();
    assert_eq!(accounts, 2);
}
