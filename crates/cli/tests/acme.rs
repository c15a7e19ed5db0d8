//! Automatic HTTPS against Pebble, Let's Encrypt's test CA, installed
//! from the Go module proxy by the test itself and run on 127.0.0.1 with
//! pebble-challtestsrv as its DNS (every name is 127.0.0.1) and its
//! challenge ports pointed at Peregrine's: certificates by TLS-ALPN-01
//! and by HTTP-01 that verify against Pebble's root, a restart that
//! orders nothing, the alert and the 503 before the first certificate,
//! and the names refused at start. An install that fails fails the test.

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

/// Starts Pebble validating on `http_port` (HTTP-01) and `tls_port`
/// (TLS-ALPN-01) of 127.0.0.1.
fn start_pebble(dir: &Path, http_port: u16, tls_port: u16) -> Pebble {
    let (bin, module) = pebble_programs();
    let (api, management, dns) = (free_port(), free_port(), free_port());
    let certs = module.join("test/certs");
    let config = serde_json::json!({"pebble": {
        "listenAddress": format!("127.0.0.1:{api}"),
        "managementListenAddress": format!("127.0.0.1:{management}"),
        "certificate": certs.join("localhost/cert.pem"),
        "privateKey": certs.join("localhost/key.pem"),
        "httpPort": http_port,
        "tlsPort": tls_port,
        "ocspResponderURL": "",
        "externalAccountBindingRequired": false,
    }});
    let config_path = dir.join("pebble.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let dns_child = Command::new(bin.join("pebble-challtestsrv"))
        .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
        .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
        .args(["-management", &format!("127.0.0.1:{}", free_port())])
        .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
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
    // Ready when its management API gives the issuing root.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let out = Command::new(common::curl())
            .args(["-sfk", &format!("https://127.0.0.1:{management}/roots/0")])
            .output()
            .unwrap();
        if out.status.success() && out.stdout.starts_with(b"-----BEGIN CERTIFICATE") {
            pebble.issuing_root = out.stdout;
            return pebble;
        }
        assert!(
            Instant::now() < deadline,
            "Pebble did not start: {}{}",
            read(&pebble.log),
            read(&dir.join("pebble.err"))
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A TLS handshake for `name` at 127.0.0.1:`port`, verified against
/// `root`: the leaf's DER, or why it failed.
fn handshake(port: u16, name: &str, root: &[u8]) -> Result<Vec<u8>, String> {
    use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
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
    let server_name = ServerName::try_from(name.to_owned()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), server_name).unwrap();
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
) -> (Served, Arc<std::sync::Mutex<String>>) {
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
    let start = lines.line("serving");
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
    lines.line("trying again in 60 s");
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
