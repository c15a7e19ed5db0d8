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
//! serving process ended). It is started whenever `--acme-ca` is given,
//! even before any site needs it, since a reload cannot execute it (the
//! sandbox forbids exec): a reload writes it the new configuration, one
//! JSON line on the same standard input, once the new generation has
//! started (`Parent::adopt`).
//!
//! The ACME process's log lines are the serving process's: it writes them
//! as JSON on its standard error (a pipe), and the serving process's
//! `acme-log` thread (started once the first generation has set the
//! error log up) writes each to the error log with its level, where
//! `--error-log` and `--error-log-format` say (and where a reload or
//! SIGUSR1 moves them), as if it had written them itself.
//!
//! Which names: the configured names of each site without certificate
//! files, never one seen in SNI or Host. A wildcard (DNS-01, not built)
//! is refused at start, and so are names no public CA issues for
//! (`localhost`, IP addresses, `.local`, `.internal`, `.test`,
//! `.example`, `.invalid`, `.home.arpa`) unless the CA is private
//! (`--acme-ca-private`, or `--acme-ca-root`).

pub(crate) mod agent;
mod lock;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use peregrine::{log, TlsConfig};

use crate::config;
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
fn acme_sites<'a>(sites: &'a [SiteSpec], args: &TlsArgs) -> anyhow::Result<Vec<&'a SiteSpec>> {
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

/// The checks of the ACME settings that need no network, made at start,
/// at each reload and by `check-config`: the ACME sites' names, the
/// challenge's listener, the CA's URL, its root, the account binding,
/// the contact and the state directory. Returns the ACME sites.
pub(crate) fn check<'a>(sites: &'a [SiteSpec], args: &TlsArgs) -> anyhow::Result<Vec<&'a SiteSpec>> {
    let Some(ca) = &args.acme_ca else {
        let given = [
            ("--acme-email", args.acme_email.is_some()),
            ("--acme-key-type", args.acme_key_type.is_some()),
            ("--acme-ca-root", args.acme_ca_root.is_some()),
            ("--acme-ca-private", args.acme_ca_private),
            ("--acme-state-dir", args.acme_state_dir.is_some()),
            ("--acme-challenge", args.acme_challenge.is_some()),
            ("--acme-eab-kid", args.acme_eab_kid.is_some()),
            ("--acme-eab-hmac-key", args.acme_eab_hmac_key.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|(_, given)| *given) {
            anyhow::bail!(
                "{flag}{} needs --acme-ca (the CA's directory URL)",
                config::origin(flag)
            );
        }
        return Ok(Vec::new());
    };
    let url = ca.strip_prefix("https://").with_context(|| {
        format!(
            "--acme-ca {ca}{}: the CA's directory URL must be https://",
            config::origin("--acme-ca")
        )
    })?;
    anyhow::ensure!(
        !url.is_empty() && !url.starts_with('/'),
        "--acme-ca {ca}{}: no host",
        config::origin("--acme-ca")
    );
    if let Some(key_type) = &args.acme_key_type {
        agent::KeyType::parse(key_type)
            .with_context(|| format!("--acme-key-type{}", config::origin("--acme-key-type")))?;
    }
    if args.acme_challenge.as_deref() == Some("http-01") {
        anyhow::ensure!(
            args.redirect_http.is_some(),
            "--acme-challenge http-01{} is answered on the --redirect-http listener: give one",
            config::origin("--acme-challenge")
        );
    }
    match (&args.acme_eab_kid, &args.acme_eab_hmac_key) {
        (Some(_), Some(key)) => {
            agent::eab_key(key)
                .with_context(|| format!("--acme-eab-hmac-key{}", config::origin("--acme-eab-hmac-key")))?;
        }
        (None, None) => {}
        _ => anyhow::bail!("give both --acme-eab-kid and --acme-eab-hmac-key (External Account Binding), or neither"),
    }
    if let Some(email) = &args.acme_email {
        let ok = email.split_once('@').is_some_and(|(user, host)| {
            !user.is_empty() && host.contains('.') && !email.contains(|c: char| c.is_whitespace() || c == ',')
        });
        anyhow::ensure!(
            ok,
            "--acme-email {email:?}{}: not an e-mail address",
            config::origin("--acme-email")
        );
    }
    acme_sites(sites, args)
}

/// The ACME files the serving process reads: the CA's root, and the state
/// directory's kind (at start and by `check-config`, before the sandbox:
/// the ACME process, unsandboxed, reads them again at a reload).
pub(crate) fn check_files(args: &TlsArgs) -> anyhow::Result<()> {
    if args.acme_ca.is_none() {
        return Ok(());
    }
    if let Some(root) = &args.acme_ca_root {
        let pem = std::fs::read(root)
            .with_context(|| format!("--acme-ca-root {}{}", root.display(), config::origin("--acme-ca-root")))?;
        anyhow::ensure!(
            x509_parser::pem::Pem::iter_from_buffer(&pem).any(|p| p.is_ok_and(|p| p.label == "CERTIFICATE")),
            "--acme-ca-root {}{}: no PEM certificate in it",
            root.display(),
            config::origin("--acme-ca-root")
        );
    }
    let state_dir = state_dir(args);
    anyhow::ensure!(
        !state_dir.exists() || state_dir.is_dir(),
        "--acme-state-dir {}{}: not a directory",
        state_dir.display(),
        config::origin("--acme-state-dir")
    );
    Ok(())
}

fn state_dir(args: &TlsArgs) -> PathBuf {
    (args.acme_state_dir.clone()).unwrap_or_else(|| PathBuf::from(STATE_DIR_DEFAULT))
}

/// The ACME process's settings for these sites.
fn agent_config(sites: &[&SiteSpec], args: &TlsArgs) -> Option<agent::Config> {
    let ca = args.acme_ca.clone()?;
    let challenge = match (&args.acme_challenge, args.redirect_http) {
        (Some(c), _) => c.clone(),
        (None, Some(_)) => "http-01".to_owned(),
        (None, None) => "tls-alpn-01".to_owned(),
    };
    Some(agent::Config {
        ca,
        email: args.acme_email.clone(),
        ca_root: args.acme_ca_root.clone(),
        state_dir: state_dir(args),
        challenge,
        eab: args.acme_eab_kid.clone().zip(args.acme_eab_hmac_key.clone()),
        key_type: (args.acme_key_type.as_deref())
            .and_then(|t| agent::KeyType::parse(t).ok())
            .unwrap_or_default(),
        sites: (sites.iter())
            .map(|s| s.names.iter().chain(&s.aliases).cloned().collect())
            .collect(),
    })
}

/// Whether every name of every ACME site has a certificate: a cheap
/// query (one atomic load) for readiness (`/readyz`), cloned into
/// whatever asks. True without ACME sites.
#[derive(Clone, Default)]
pub(crate) struct Readiness(Arc<AtomicBool>);

// Made for `/readyz` (another change): nothing in this one asks yet.
#[allow(dead_code)]
impl Readiness {
    pub(crate) fn all_issued(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The ACME process, as the serving process sees it.
pub(crate) struct Parent {
    child: Child,
    /// Until `listen` gives it to the reader thread; a reload writes its
    /// new configuration there too.
    stdin: Arc<Mutex<Option<ChildStdin>>>,
    shared: Arc<Mutex<Shared>>,
    /// The configuration the ACME process was last given.
    config: Mutex<agent::Config>,
    /// For the start line.
    pub(crate) summary: String,
    /// `--hsts`, for a set with ACME certificates only.
    hsts: Option<u64>,
    /// `--ktls`, likewise.
    ktls: peregrine::KernelTls,
}

/// What the reader thread and the generations share.
#[derive(Default)]
struct Shared {
    /// The current generation's certificates.
    tls: Option<TlsConfig>,
    /// The ACME sites' names, by site (its first name first).
    sites: Vec<Vec<String>>,
    /// The last certificate of each site (by its first name): names,
    /// PEM chain, PEM key.
    certs: HashMap<String, Issued>,
    /// Where `peregrine_certificate_expiry_seconds` goes (`--metrics`).
    metrics: Option<Arc<peregrine::Metrics>>,
    ready: Readiness,
    /// The challenges being answered (by name or token), installed again
    /// in a generation that starts while the CA may look. As many as the
    /// ACME process has orders open: one site's names at a time.
    challenges: Vec<(String, serde_json::Value)>,
    /// A generation has started (`adopt`): its listeners take the CA's
    /// validation connections.
    serving: bool,
}

/// How long a challenge from the ACME process waits for the first
/// generation to start before it is refused (the CA would find no
/// listener). Building one may hash a large archive: a minute, as an
/// upgrade's new process has.
const SERVING_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

impl Shared {
    /// Every site's names covered by its last certificate.
    fn update_readiness(&self) {
        let all = self.sites.iter().all(|names| {
            (self.certs.get(&names[0])).is_some_and(|(covered, _, _)| names.iter().all(|n| covered.contains(n)))
        });
        self.ready.0.store(all, Ordering::Relaxed);
    }
}

/// One line of the ACME process's standard error, written to this
/// process's error log: a JSON line (`agent::run` sets its logger so) at
/// its level; anything else (a panic's message) as an error.
fn relay_line(line: &str) {
    if line.trim().is_empty() {
        return;
    }
    let parsed: Option<(String, String)> = serde_json::from_str::<serde_json::Value>(line).ok().and_then(|v| {
        let level = v.get("level")?.as_str()?.to_owned();
        let message = v.get("message")?.as_str()?.to_owned();
        Some((level, message))
    });
    match parsed {
        Some((level, message)) => {
            let level = match level.as_str() {
                "error" => log::Level::Error,
                "warn" => log::Level::Warn,
                "debug" => log::Level::Debug,
                _ => log::Level::Info,
            };
            log::write(level, format_args!("{message}"));
        }
        None => log::error(format_args!("ACME process: {line}")),
    }
}

/// A site's certificate as the ACME process sent it: its names, the PEM
/// chain and the PEM key.
type Issued = (Vec<String>, Vec<u8>, Vec<u8>);

impl Parent {
    /// Starts the ACME process when a CA is configured (before the
    /// sandbox: it executes a program), even for no ACME site yet, so
    /// that a reload may add some. `None` without a CA.
    pub(crate) fn start(sites: &[&SiteSpec], args: &TlsArgs) -> anyhow::Result<Option<Parent>> {
        let Some(config) = agent_config(sites, args) else {
            return Ok(None);
        };
        let exe = std::env::current_exe().context("ACME: cannot find this program to start its ACME process")?;
        let mut child = Command::new(exe)
            .arg(AGENT_ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("ACME: cannot start the ACME process")?;
        let mut stdin = child.stdin.take().context("ACME process's stdin")?;
        writeln!(stdin, "{}", config.to_json()).context("ACME: cannot configure the ACME process")?;
        let shared = Arc::new(Mutex::new(Shared {
            sites: config.sites.clone(),
            ..Shared::default()
        }));
        lock(&shared).update_readiness();
        let summary = format!(
            "ACME ({}, {} keys, {}) in process {} (unsandboxed; the only one that connects to the CA and writes {})",
            config.challenge,
            config.key_type.name(),
            config.ca,
            child.id(),
            config.state_dir.display()
        );
        Ok(Some(Parent {
            child,
            stdin: Arc::new(Mutex::new(Some(stdin))),
            shared,
            config: Mutex::new(config),
            summary,
            hsts: args.hsts,
            ktls: args.ktls,
        }))
    }

    /// Starts reading what the ACME process sends (once the sandbox is
    /// entered: it wants no thread before it).
    pub(crate) fn listen(&mut self) -> anyhow::Result<()> {
        let stdout = self.child.stdout.take().context("ACME process's stdout")?;
        let stdin = self.stdin.clone();
        let shared = self.shared.clone();
        std::thread::Builder::new()
            .name("acme-reader".into())
            .spawn(move || read_agent(stdout, &stdin, &shared))
            .context("ACME: cannot start the reader thread")?;
        Ok(())
    }

    /// Starts writing the ACME process's log lines to the error log, once
    /// the first generation has set where it is and its format (until
    /// then they wait in the pipe: the first order's lines go where the
    /// server's own go).
    pub(crate) fn relay_logs(&mut self) -> anyhow::Result<()> {
        let Some(stderr) = self.child.stderr.take() else {
            return Ok(());
        };
        std::thread::Builder::new()
            .name("acme-log".into())
            .spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    relay_line(&line);
                }
            })
            .context("ACME: cannot start the log thread")?;
        Ok(())
    }

    /// Whether every ACME name has a certificate (`Readiness`).
    #[allow(dead_code)]
    pub(crate) fn readiness(&self) -> Readiness {
        lock(&self.shared).ready.clone()
    }

    /// The certificate set of a generation about to start, with the ACME
    /// sites' names: each site's last certificate installed (for the
    /// names it covers), or its names waiting for one. `tls` holds the
    /// sites' certificate files, if any. Nothing changes for the
    /// current generation until `adopt`.
    pub(crate) fn attach(&self, tls: Option<TlsConfig>, sites: &[&SiteSpec]) -> anyhow::Result<TlsConfig> {
        let tls = match tls {
            Some(tls) => tls,
            None => match self.hsts {
                Some(secs) => TlsConfig::empty().hsts(std::time::Duration::from_secs(secs)),
                None => TlsConfig::empty(),
            }
            .kernel_tls(self.ktls),
        }
        .acme();
        let mut shared = lock(&self.shared);
        for site in sites {
            let names: Vec<String> = site.names.iter().chain(&site.aliases).cloned().collect();
            install_held(&tls, &shared, &names)?;
        }
        // The first generation: nothing is served yet, the ACME process
        // may install from now on; what it sent before is installed now.
        if shared.tls.is_none() {
            for (_, msg) in &shared.challenges {
                install_challenge(&tls, msg)?;
            }
            shared.tls = Some(tls.clone());
        }
        Ok(tls)
    }

    /// The generation built with `attach` has started: certificates go
    /// to it from now on, and the ACME process is told the sites (a
    /// reload may have added some, which it orders, or removed some,
    /// which it stops renewing).
    pub(crate) fn adopt(&self, tls: Option<&TlsConfig>, sites: &[&SiteSpec], args: &TlsArgs) {
        let mut config = lock(&self.config);
        let next = match agent_config(sites, args) {
            Some(next) => next,
            // No CA any more: no site is renewed.
            None => agent::Config {
                sites: Vec::new(),
                ..config.clone()
            },
        };
        let mut shared = lock(&self.shared);
        shared.sites = next.sites.clone();
        if let Some(tls) = tls.filter(|_| !next.sites.is_empty()) {
            // What arrived between `attach` and now.
            for names in &next.sites {
                if let Err(e) = install_held(tls, &shared, names) {
                    log::warn(format_args!("ACME: {e:#}"));
                }
            }
            for (_, msg) in &shared.challenges {
                if let Err(e) = install_challenge(tls, msg) {
                    log::warn(format_args!("ACME: {e:#}"));
                }
            }
            shared.tls = Some(tls.clone());
        }
        shared.serving = true;
        shared.update_readiness();
        drop(shared);
        if *config != next {
            let mut stdin = lock(&self.stdin);
            if let Some(Err(e)) = stdin.as_mut().map(|s| writeln!(s, "{}", next.to_json())) {
                log::warn(format_args!(
                    "ACME: cannot reconfigure the ACME process ({e}); certificates are no longer renewed"
                ));
            }
            *config = next;
        }
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

/// The last certificate of the site named `names` installed in `tls` for
/// the names it covers; the others wait.
fn install_held(tls: &TlsConfig, shared: &Shared, names: &[String]) -> anyhow::Result<()> {
    let mut waiting: Vec<&String> = names.iter().collect();
    if let Some((covered, chain, key)) = shared.certs.get(&names[0]) {
        let both: Vec<&String> = covered.iter().filter(|n| names.contains(n)).collect();
        if !both.is_empty() {
            tls.set_cert_pem_for(&both, chain, key)
                .with_context(|| format!("ACME certificate for {}", names[0]))?;
            waiting.retain(|n| !covered.contains(n));
        }
    }
    if !waiting.is_empty() {
        tls.set_waiting(&waiting, true);
    }
    Ok(())
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
fn read_agent(stdout: std::process::ChildStdout, stdin: &Mutex<Option<ChildStdin>>, shared: &Mutex<Shared>) {
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let outcome = match serde_json::from_str::<serde_json::Value>(&line) {
            Ok(msg) => {
                // A challenge waits for the first generation to serve:
                // the agent tells the CA to look once it is acknowledged,
                // and a start that takes a while (a busy machine, a large
                // archive) lost the first order ("no certificate set
                // yet"), retried only a minute later.
                if msg.get("kind").and_then(|k| k.as_str()) != Some("cert") {
                    let until = std::time::Instant::now() + SERVING_WAIT;
                    while !lock(shared).serving && std::time::Instant::now() < until {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                }
                install(&msg, shared)
            }
            Err(e) => Err(anyhow::anyhow!("{e}")),
        };
        if let Err(e) = &outcome {
            log::warn(format_args!("ACME: cannot install what the ACME process sent: {e:#}"));
        }
        let ack = if outcome.is_ok() { "ok" } else { "error" };
        let mut stdin = lock(stdin);
        if stdin.as_mut().is_none_or(|s| writeln!(s, "{ack}").is_err()) {
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
        shared.update_readiness();
        return Ok(());
    }
    // Kept for the next generation while the CA may look; and, before the
    // first generation is built (a loaded machine can run the ACME
    // process's first order ahead of it), for that one: `attach`
    // installs them. Refusing one then failed the order, which was tried
    // again only a minute later.
    let id = format!("{}{}", text("name"), text("token"));
    match kind.strip_suffix("-clear") {
        Some(_) => {
            shared.challenges.retain(|(i, _)| *i != id);
        }
        None => shared.challenges.push((id, msg.clone())),
    }
    match &shared.tls {
        Some(tls) => install_challenge(tls, msg),
        None => Ok(()),
    }
}

/// A challenge answer (or its end) installed in `tls`.
fn install_challenge(tls: &TlsConfig, msg: &serde_json::Value) -> anyhow::Result<()> {
    let text = |key: &str| msg.get(key).and_then(|v| v.as_str()).unwrap_or_default();
    match text("kind") {
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
