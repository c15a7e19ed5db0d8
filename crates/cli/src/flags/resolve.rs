//! What the flags mean for the libraries: the engine's `Limits`, the
//! certificates (`TlsConfig`), the files' `Options`, the identity to run
//! as, the Unix-domain sockets and whether HTTP/3 is spoken. Each refusal
//! names the flag (and the file line or variable that set it).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use peregrine::{Limits, TlsConfig};
use peregrine_files::Options;

use super::files::{split_cache_rule, FileArgs, ServeArchiveArgs};
use super::server::{LimitArgs, ServerArgs, TlsArgs};
use crate::config;
use crate::messages::counted;

impl ServeArchiveArgs {
    /// How the archive is held: read into memory (`--in-memory`), mapped
    /// with every page faulted in (`--prefault`), or mapped.
    pub(crate) fn mode(&self) -> peregrine_archive::Mode {
        use peregrine_archive::Mode;
        match (self.in_memory, self.prefault) {
            (true, _) => Mode::Heap,
            (false, true) => Mode::MapPopulate,
            (false, false) => Mode::Map,
        }
    }

    /// Everything the archive server is told: the mode, the keys read
    /// from their files, rollbacks, the previous generations kept. The
    /// flags that mean nothing without another are refused, named.
    pub(crate) fn options(&self) -> anyhow::Result<peregrine_archive::ServeOptions> {
        let named = |flag: &str| format!("{flag}{}", config::origin(flag));
        if self.require_signature.is_empty() {
            let alone: Vec<String> = [
                (self.allow_rollback, "--allow-rollback"),
                (self.deploy_number_min.is_some(), "--deploy-number-min"),
            ]
            .iter()
            .filter(|(given, _)| *given)
            .map(|(_, flag)| named(flag))
            .collect();
            anyhow::ensure!(
                alone.is_empty(),
                "{} means nothing without --require-signature: only a signed archive has a deploy number",
                alone.join(" and ")
            );
        }
        anyhow::ensure!(
            !self.keep_previous_all || self.keep_previous.is_some(),
            "{} means nothing without --keep-previous SECS",
            named("--keep-previous-all")
        );
        let mut trusted = Vec::with_capacity(self.require_signature.len());
        for path in &self.require_signature {
            let key = crate::commands::archive::read_public_key(path).with_context(|| named("--require-signature"))?;
            trusted.push(key);
        }
        Ok(peregrine_archive::ServeOptions {
            mode: self.mode(),
            trusted,
            allow_rollback: self.allow_rollback,
            deploy_number_min: self.deploy_number_min.unwrap_or(0),
            // In range: the value parser checked it; 0 keeps nothing.
            keep_previous: self
                .keep_previous
                .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
                .filter(|d| !d.is_zero()),
            keep_previous_all: self.keep_previous_all,
            proxy_allow: self.proxy_allow.clone(),
        })
    }
}

impl FileArgs {
    pub(crate) fn options(&self, root: PathBuf) -> Options {
        let mut o = Options::new(root);
        o.index = self.index.clone();
        o.list_dirs = self.list_dirs;
        o.follow_symlinks = self.follow_symlinks;
        o.not_found_page = self.not_found.clone();
        o.clean_urls = self.clean_urls;
        o.fallback = self.fallback.clone();
        for rule in &self.cache_control {
            match split_cache_rule(rule) {
                (Some(glob), value) => o.cache_rules.push((glob.to_owned(), value.to_owned())),
                (None, _) => o.cache_control = Some(rule.clone()),
            }
        }
        o.security_headers = !self.no_security_headers;
        o.precompressed = !self.no_precompressed;
        o.compress = !self.no_compress;
        if let Some(secs) = self.revalidate_interval {
            // In range: the value parser checked it.
            o.revalidate_interval = Duration::try_from_secs_f64(secs).unwrap_or(o.revalidate_interval);
        }
        o.cache_entries = usize::try_from(self.cache_entries).unwrap_or(o.cache_entries);
        o.proxy_allow = self.proxy_allow.clone();
        o
    }
}

impl ServerArgs {
    /// `--user` and `--group` by number, looked up in the user and group
    /// databases; an error names the flags (and the file line) given.
    pub(crate) fn run_as(&self) -> anyhow::Result<peregrine::Identity> {
        let identity = peregrine::Identity {
            user: self.user.clone(),
            group: self.group.clone(),
        };
        identity.resolve().with_context(|| {
            let given: Vec<String> = [("--user", &self.user), ("--group", &self.group)]
                .iter()
                .filter_map(|(flag, v)| v.as_ref().map(|v| format!("{flag} {v}{}", config::origin(flag))))
                .collect();
            given.join(", ")
        })
    }

    /// The `--bind unix:PATH` sockets' paths. Refused with `--tls-cert`
    /// (every --bind would speak TLS, and TLS on a Unix socket is not
    /// supported).
    pub(crate) fn unix_binds(&self) -> anyhow::Result<Vec<&Path>> {
        let paths: Vec<&Path> = self.bind.iter().filter_map(|b| b.1.as_deref()).collect();
        if let (Some(path), false) = (paths.first(), self.tls.certs.is_empty()) {
            anyhow::bail!(
                "--bind unix:{}{}: with --tls-cert every --bind address speaks TLS, and TLS on a \
                 Unix-domain socket is not supported: serve it from a server without --tls-cert",
                path.display(),
                config::origin("--bind")
            );
        }
        Ok(paths)
    }

    /// Whether TLS addresses speak HTTP/3: `--http3`, `--http3=false` and
    /// `--no-http3` (which clap keeps apart), else on with TLS. `tls`:
    /// there are certificates, from `--tls-cert`, from the sites' own
    /// `tls-cert` or by ACME (`--acme-ca`). Asking for HTTP/3 without
    /// any is refused rather than ignored: QUIC is always encrypted, so
    /// there is nothing to speak it on.
    pub(crate) fn http3(&self, tls: bool) -> anyhow::Result<bool> {
        let tls = tls || !self.tls.certs.is_empty() || self.tls.acme_ca.is_some();
        match (self.http3, self.no_http3) {
            (Some(true), _) if !tls => anyhow::bail!(
                "--http3{} needs certificates (--tls-cert and --tls-key, a site's tls-cert, or \
                 --acme-ca): HTTP/3 runs over QUIC, which is always encrypted, on the TLS addresses' ports",
                config::origin("--http3")
            ),
            (Some(wanted), _) => Ok(wanted),
            (None, no) => Ok(!no),
        }
    }
}

impl TlsArgs {
    /// The certificates, if HTTPS was asked for.
    pub(crate) fn config(&self) -> anyhow::Result<Option<TlsConfig>> {
        // Each named with where it was set, when that was a file's line.
        anyhow::ensure!(
            self.certs.len() == self.keys.len(),
            "give one --tls-key per --tls-cert ({}{}, {}{})",
            counted(self.certs.len(), "certificate"),
            config::origin("--tls-cert"),
            counted(self.keys.len(), "key"),
            config::origin("--tls-key"),
        );
        for (cert, key) in self.certs.iter().zip(&self.keys) {
            swapped_pem(cert, key)?;
        }
        let mut pairs = self.certs.iter().zip(&self.keys);
        let Some((cert, key)) = pairs.next() else {
            // Sites without files get theirs by ACME (`acme/`).
            if self.acme_ca.is_some() {
                return Ok(None);
            }
            let given = [
                ("--redirect-http", self.redirect_http.is_some()),
                ("--hsts", self.hsts.is_some()),
            ];
            if let Some((flag, _)) = given.iter().find(|(_, given)| *given) {
                anyhow::bail!("{flag}{} needs --tls-cert and --tls-key", config::origin(flag));
            }
            return Ok(None);
        };
        let mut tls = TlsConfig::from_pem_files(cert, key)?;
        for (cert, key) in pairs {
            tls = tls.with_cert(cert, key)?;
        }
        if let Some(secs) = self.hsts {
            tls = tls.hsts(Duration::from_secs(secs));
        }
        Ok(Some(tls))
    }
}

/// A certificate given as the key, or a key as the certificate (the two
/// files swapped, or the same file twice), said in those words: what the
/// PEM parser would say ("no private key found") does not tell which
/// mistake it was. Files that cannot be read are left to the loader's
/// message.
fn swapped_pem(cert: &Path, key: &Path) -> anyhow::Result<()> {
    // The labels of a PEM file's blocks: CERTIFICATE, PRIVATE KEY, ...
    let labels = |path: &Path| -> Option<Vec<String>> {
        let text = std::fs::read(path).ok()?;
        let text = String::from_utf8_lossy(&text);
        Some(
            text.lines()
                .filter_map(|l| l.trim().strip_prefix("-----BEGIN ")?.strip_suffix("-----"))
                .map(str::to_owned)
                .collect(),
        )
    };
    let is_key = |label: &String| label.ends_with("PRIVATE KEY");
    if let Some(labels) = labels(key) {
        if !labels.iter().any(is_key) && labels.iter().any(|l| l == "CERTIFICATE") {
            anyhow::bail!(
                "--tls-key {}{}: this file holds a certificate, not a private key (give the key that \
                 goes with --tls-cert {})",
                key.display(),
                config::origin("--tls-key"),
                cert.display()
            );
        }
    }
    if let Some(labels) = labels(cert) {
        if labels.iter().any(is_key) && !labels.iter().any(|l| l == "CERTIFICATE") {
            anyhow::bail!(
                "--tls-cert {}{}: this file holds a private key, not a certificate (give the \
                 certificate chain, leaf first)",
                cert.display(),
                config::origin("--tls-cert")
            );
        }
    }
    Ok(())
}

impl LimitArgs {
    pub(crate) fn to_limits(&self) -> anyhow::Result<Limits> {
        let mut l = Limits::default();
        let secs = |name: &str, v: f64| -> anyhow::Result<Duration> {
            Duration::try_from_secs_f64(v)
                .ok()
                .filter(|d| !d.is_zero())
                .with_context(|| format!("--{name} must be a positive number of seconds, not {v}"))
        };
        if let Some(v) = self.head_bytes_max {
            l.head_bytes_max = v;
        }
        if let Some(v) = self.uri_bytes_max {
            l.uri_bytes_max = v;
        }
        if let Some(v) = self.n_headers_max {
            l.n_headers_max = v;
        }
        if let Some(v) = self.body_bytes_max {
            l.body_bytes_max = v;
        }
        if let Some(v) = self.discard_bytes_max {
            l.discard_bytes_max = v;
        }
        if let Some(v) = self.head_timeout {
            l.head_timeout = secs("head-timeout", v)?;
        }
        if let Some(v) = self.head_timeout_max {
            l.head_timeout_max = secs("head-timeout-max", v)?;
        }
        if let Some(v) = self.proxy_header_timeout {
            l.proxy_header_timeout = secs("proxy-header-timeout", v)?;
        }
        if let Some(v) = self.body_timeout {
            l.body_timeout = secs("body-timeout", v)?;
        }
        if let Some(v) = self.min_rate_bytes_per_sec {
            l.min_rate_bytes_per_sec = v;
        }
        if let Some(v) = self.idle_timeout {
            l.idle_timeout = secs("idle-timeout", v)?;
        }
        if let Some(v) = self.send_timeout {
            l.send_timeout = secs("send-timeout", v)?;
        }
        if let Some(v) = self.n_conns_max {
            l.n_conns_max = v;
        }
        if let Some(v) = self.conns_per_ip_max {
            l.conns_per_ip_max = v;
        }
        if let Some(v) = self.body_budget_bytes {
            l.body_budget_bytes = v;
        }
        if let Some(v) = self.output_budget_bytes {
            l.output_budget_bytes = v;
        }
        if let Some(v) = self.write_buffer_bytes_max {
            l.write_buffer_bytes_max = v;
        }
        if let Some(v) = self.h2_streams_max {
            l.h2_streams_max = v;
        }
        if let Some(v) = self.h3_streams_max {
            l.h3_streams_max = v;
        }
        if let Some(v) = self.h3_idle_timeout {
            l.h3_idle_timeout = secs("h3-idle-timeout", v)?;
        }
        if let Some(v) = self.h3_udp_payload_bytes_max {
            l.h3_udp_payload_bytes_max = v;
        }
        if let Some(v) = self.h3_handshakes_before_retry {
            l.h3_handshakes_before_retry = v;
        }
        if let Some(v) = self.upstream_conns_max {
            l.upstream_conns_max = v;
        }
        if let Some(v) = self.shutdown_timeout {
            l.shutdown_timeout = secs("shutdown-timeout", v)?;
        }
        Ok(l)
    }
}
