//! Automatic HTTPS (issue 28): sites with no certificate files get theirs
//! from an ACME CA (RFC 8555), and the serving process never talks to it.
//!
//! What runs where: `serve` starts, before it enters its sandbox, a child
//! process (this binary again, `acme-agent`: `agent.rs`), unsandboxed and
//! under the identity `serve` was started with. Only the child connects
//! to the CA and reads and writes the state directory (the account key,
//! each site's certificate and key). It tells the serving process what
//! to install over its standard output, one JSON object a line, and waits
//! for each to be acknowledged on its standard input before going on (so
//! a challenge is answered before the CA is told to look): a certificate
//! for a site's names (PEM chain and key: the serving process never reads
//! the state directory), a TLS-ALPN-01 challenge certificate for a name,
//! an HTTP-01 token and its key authorization. The serving process's
//! reader thread installs each into the current generation's certificate
//! set (`TlsConfig::set_cert_pem_for`, `set_acme_challenge`,
//! `set_http01`), which handshakes see at once; it keeps the last
//! certificate of each site, which a reload installs in the next
//! generation. The child ends when its standard input closes (the
//! serving process ended).
//!
//! Which names: the configured names of each site without certificate
//! files, never one seen in SNI or Host. A wildcard (DNS-01, not built)
//! is refused at start, and so are names no public CA issues for
//! (`localhost`, IP addresses, `.local`, `.internal`, `.test`,
//! `.example`, `.invalid`, `.home.arpa`) unless the CA is private
//! (`--acme-ca-private`, or `--acme-ca-root`).

pub(crate) mod agent;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use peregrine::{log, TlsConfig};

use crate::flags::TlsArgs;
use crate::sites::SiteSpec;

/// Where the state lives when `--acme-state-dir` is not given.
const STATE_DIR_DEFAULT: &str = "/var/lib/peregrine";

/// Name suffixes no public CA issues for (RFC 6761, RFC 8375, ...).
const NON_PUBLIC_SUFFIXES: &[&str] = &[
    "local",
    "internal",
    "test",
    "example",
    "invalid",
    "home.arpa",
    "localhost",
];

/// The argument that makes this binary the ACME process.
pub(crate) const AGENT_ARG: &str = "acme-agent";

/// The sites that get their certificate by ACME: those with no
/// certificate files, when a CA is configured. Refuses what cannot be.
pub(crate) fn acme_sites<'a>(sites: &'a [SiteSpec], args: &TlsArgs) -> anyhow::Result<Vec<&'a SiteSpec>> {
    if args.acme_ca.is_none() {
        return Ok(Vec::new());
    }
    let private = args.acme_ca_private || args.acme_ca_root.is_some();
    let mut chosen = Vec::new();
    for site in sites.iter().filter(|s| s.tls.is_empty()) {
        for name in site.names.iter().chain(&site.aliases) {
            check_name(name, private).with_context(|| format!("site {}", site.names[0]))?;
        }
        chosen.push(site);
    }
    Ok(chosen)
}

/// Whether ACME may order a certificate for `name`.
fn check_name(name: &str, private: bool) -> anyhow::Result<()> {
    anyhow::ensure!(
        !name.starts_with("*."),
        "{name}: a wildcard needs the ACME challenge DNS-01, which is not supported; give this site \
         certificate files (tls-cert, tls-key)"
    );
    if private {
        return Ok(());
    }
    let ip = name
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .is_ok();
    let suffix = NON_PUBLIC_SUFFIXES
        .iter()
        .find(|s| name == **s || name.ends_with(&format!(".{s}")));
    anyhow::ensure!(
        !ip && suffix.is_none(),
        "{name}: no public ACME CA issues a certificate for {}; give this site certificate files, or \
         mark the CA private (--acme-ca-private) if it is yours",
        if ip {
            "an IP address".to_owned()
        } else {
            format!("a name under .{}", suffix.unwrap_or(&""))
        }
    );
    Ok(())
}

/// The ACME process, as the serving process sees it.
pub(crate) struct Parent {
    child: Child,
    /// Until `listen` gives it to the reader thread.
    stdin: Option<ChildStdin>,
    shared: Arc<Mutex<Shared>>,
    /// The ACME sites' names, by site (its first name).
    sites: Vec<Vec<String>>,
    /// For the start line.
    pub(crate) summary: String,
    /// `--hsts`, for a set with ACME certificates only.
    hsts: Option<u64>,
}

/// What the reader thread and the generations share.
#[derive(Default)]
struct Shared {
    /// The current generation's certificates.
    tls: Option<TlsConfig>,
    /// The last certificate of each site (by its first name): names,
    /// PEM chain, PEM key.
    certs: HashMap<String, Issued>,
    /// Where `peregrine_certificate_expiry_seconds` goes (`--metrics`).
    metrics: Option<Arc<peregrine::Metrics>>,
}

/// A site's certificate as the ACME process sent it: its names, the PEM
/// chain and the PEM key.
type Issued = (Vec<String>, Vec<u8>, Vec<u8>);

impl Parent {
    /// Starts the ACME process for `sites` (before the sandbox: it
    /// executes a program). `None` without ACME sites.
    pub(crate) fn start(sites: &[&SiteSpec], args: &TlsArgs) -> anyhow::Result<Option<Parent>> {
        let Some(ca) = &args.acme_ca else {
            return Ok(None);
        };
        if sites.is_empty() {
            return Ok(None);
        }
        let challenge = match (&args.acme_challenge, args.redirect_http) {
            (Some(c), _) => c.clone(),
            (None, Some(_)) => "http-01".to_owned(),
            (None, None) => "tls-alpn-01".to_owned(),
        };
        anyhow::ensure!(
            challenge != "http-01" || args.redirect_http.is_some(),
            "--acme-challenge http-01 is answered on the --redirect-http listener: give one"
        );
        let state_dir = args
            .acme_state_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(STATE_DIR_DEFAULT));
        let names: Vec<Vec<String>> = (sites.iter())
            .map(|s| s.names.iter().chain(&s.aliases).cloned().collect())
            .collect();
        let config = serde_json::json!({
            "ca": ca,
            "email": args.acme_email,
            "ca_root": args.acme_ca_root,
            "state_dir": state_dir,
            "challenge": challenge,
            "sites": names,
        });
        let exe = std::env::current_exe().context("ACME: cannot find this program to start its ACME process")?;
        let mut child = Command::new(exe)
            .arg(AGENT_ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("ACME: cannot start the ACME process")?;
        let mut stdin = child.stdin.take().context("ACME process's stdin")?;
        writeln!(stdin, "{config}").context("ACME: cannot configure the ACME process")?;
        let shared = Arc::new(Mutex::new(Shared::default()));
        let summary = format!(
            "ACME ({challenge}, {ca}) in process {} (unsandboxed; the only one that connects to the CA and \
             writes {})",
            child.id(),
            state_dir.display()
        );
        Ok(Some(Parent {
            child,
            stdin: Some(stdin),
            shared,
            sites: names,
            summary,
            hsts: args.hsts,
        }))
    }

    /// Starts reading what the ACME process sends (once the sandbox is
    /// entered: it wants no thread before it).
    pub(crate) fn listen(&mut self) -> anyhow::Result<()> {
        let stdout = self.child.stdout.take().context("ACME process's stdout")?;
        let stdin = self.stdin.take().context("ACME process's stdin")?;
        let shared = self.shared.clone();
        std::thread::Builder::new()
            .name("acme-reader".into())
            .spawn(move || read_agent(stdout, stdin, &shared))
            .context("ACME: cannot start the reader thread")?;
        Ok(())
    }

    /// The certificate set of a generation about to start, with the ACME
    /// sites' names: each site's last certificate installed, or its names
    /// waiting for one. `tls` holds the sites' certificate files, if any.
    pub(crate) fn attach(&self, tls: Option<TlsConfig>) -> anyhow::Result<TlsConfig> {
        let tls = match tls {
            Some(tls) => tls,
            None => match self.hsts {
                Some(secs) => TlsConfig::empty().hsts(std::time::Duration::from_secs(secs)),
                None => TlsConfig::empty(),
            },
        }
        .acme();
        let mut shared = lock(&self.shared);
        for names in &self.sites {
            match shared.certs.get(&names[0]) {
                Some((names, chain, key)) => tls
                    .set_cert_pem_for(names, chain, key)
                    .with_context(|| format!("ACME certificate for {}", names[0]))?,
                None => tls.set_waiting(names, true),
            }
        }
        shared.tls = Some(tls.clone());
        Ok(tls)
    }

    /// Reports each ACME certificate's expiry in `metrics` from now on.
    pub(crate) fn report_to(&self, metrics: Option<&Arc<peregrine::Metrics>>) {
        let mut shared = lock(&self.shared);
        shared.metrics = metrics.cloned();
        if let Some(m) = &shared.metrics {
            for (names, chain, _) in shared.certs.values() {
                expiry_gauges(m, names, chain);
            }
        }
    }
}

impl Drop for Parent {
    fn drop(&mut self) {
        // Its stdin closes with the reader thread; it may be waiting on
        // the CA: it is told to end now.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The reader thread: each line from the ACME process installed, then
/// acknowledged. Ends when the process does.
fn read_agent(stdout: std::process::ChildStdout, mut stdin: ChildStdin, shared: &Mutex<Shared>) {
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let outcome = match serde_json::from_str::<serde_json::Value>(&line) {
            Ok(msg) => install(&msg, shared),
            Err(e) => Err(anyhow::anyhow!("{e}")),
        };
        if let Err(e) = &outcome {
            log::warn(format_args!("ACME: cannot install what the ACME process sent: {e:#}"));
        }
        let ack = if outcome.is_ok() { "ok" } else { "error" };
        if writeln!(stdin, "{ack}").is_err() {
            break;
        }
    }
    log::warn(format_args!(
        "ACME: the ACME process ended; certificates are no longer renewed"
    ));
}

/// Installs one message of the ACME process (see `agent::Message`).
fn install(msg: &serde_json::Value, shared: &Mutex<Shared>) -> anyhow::Result<()> {
    let text = |key: &str| msg.get(key).and_then(|v| v.as_str()).unwrap_or_default();
    let mut shared = lock(shared);
    let kind = text("kind");
    if kind == "cert" {
        let names: Vec<String> = (msg.get("names").and_then(|n| n.as_array()).into_iter().flatten())
            .filter_map(|n| n.as_str().map(str::to_owned))
            .collect();
        anyhow::ensure!(!names.is_empty(), "a certificate for no name");
        let (chain, key) = (text("chain").as_bytes().to_vec(), text("key").as_bytes().to_vec());
        if let Some(tls) = &shared.tls {
            tls.set_cert_pem_for(&names, &chain, &key)?;
        }
        if let Some(m) = &shared.metrics {
            expiry_gauges(m, &names, &chain);
        }
        shared.certs.insert(names[0].clone(), (names, chain, key));
        return Ok(());
    }
    let Some(tls) = &shared.tls else {
        anyhow::bail!("no certificate set yet");
    };
    match kind {
        "alpn" => tls.set_acme_challenge(text("name"), Some((text("chain").as_bytes(), text("key").as_bytes())))?,
        "alpn-clear" => tls.set_acme_challenge(text("name"), None)?,
        "http01" => tls.set_http01(text("token"), Some(text("key_authorization")))?,
        "http01-clear" => tls.set_http01(text("token"), None)?,
        other => anyhow::bail!("unknown message {other:?}"),
    }
    Ok(())
}

/// `peregrine_certificate_expiry_seconds{site,name}` for each name of a
/// site's certificate: the seconds left until its notAfter (0 once past).
fn expiry_gauges(metrics: &peregrine::Metrics, names: &[String], chain: &[u8]) {
    let Some(not_after) = agent::not_after(chain) else {
        return;
    };
    for name in names {
        metrics.gauge_with(
            "peregrine_certificate_expiry_seconds",
            &[("site", &names[0]), ("name", name)],
            "Seconds until the ACME certificate for this name expires.",
            move || {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
                let now = now.map_or(0, |d| d.as_secs());
                not_after.saturating_sub(now)
            },
        );
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::check_name;

    #[test]
    fn public_cas_get_only_public_names_and_no_wildcard() {
        let table: &[(&str, bool, bool)] = &[
            ("example.com", false, true),
            ("www.example.org", false, true),
            ("localhost", false, false),
            ("a.localhost", false, false),
            ("printer.local", false, false),
            ("db.internal", false, false),
            ("site.test", false, false),
            ("example", false, false),
            ("x.invalid", false, false),
            ("nas.home.arpa", false, false),
            ("127.0.0.1", false, false),
            ("[::1]", false, false),
            ("site.test", true, true),
            ("127.0.0.1", true, true),
            ("*.example.com", false, false),
            ("*.example.com", true, false),
            ("contest.com", false, true),
        ];
        for &(name, private, ok) in table {
            assert_eq!(check_name(name, private).is_ok(), ok, "{name} private={private}");
        }
    }
}
