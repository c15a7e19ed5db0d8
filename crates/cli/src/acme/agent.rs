//! The ACME process (`peregrine acme-agent`, started by `serve`: see
//! `mod.rs`): the account, orders, challenges, renewals and the state
//! directory. Its configuration is the first line of its standard input;
//! each later line acknowledges one message it wrote on its standard
//! output. It ends when its standard input closes.
//!
//! State directory: `DIR` (0700) holds `account-HOST.json` (the account's
//! credentials at the CA of that host, 0600, made once and kept) and one
//! directory per site, named by its first name, with `cert.pem` and
//! `key.pem` (0600, ECDSA P-256). A certificate found there for the same
//! names and not yet due for renewal is sent to the serving process as
//! it is: a restart orders nothing.
//!
//! Renewal at two thirds of the lifetime (ARI, RFC 9773, is not used
//! yet); a failed order is tried again after 1 minute, doubling up to a
//! day, while the current certificate keeps serving.

use std::io::{BufRead, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount, NewOrder, OrderStatus,
    RetryPolicy,
};

/// The first wait after a failed order; doubled after each failure.
const RETRY_FIRST: Duration = Duration::from_secs(60);
/// The longest wait between two orders of one site.
const RETRY_MAX: Duration = Duration::from_secs(24 * 3600);
/// How long an order may take to become ready, and its certificate to be
/// issued.
const ORDER_TIMEOUT: Duration = Duration::from_secs(90);

struct Config {
    ca: String,
    email: Option<String>,
    ca_root: Option<PathBuf>,
    state_dir: PathBuf,
    challenge: ChallengeType,
    sites: Vec<Vec<String>>,
}

/// Talks to the serving process: one message out, one acknowledgement in.
struct Link {
    acks: mpsc::Receiver<bool>,
}

impl Link {
    fn send(&self, msg: serde_json::Value) -> anyhow::Result<()> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{msg}")
            .and_then(|()| out.flush())
            .context("serving process gone")?;
        drop(out);
        match self.acks.recv() {
            Ok(true) => Ok(()),
            Ok(false) => anyhow::bail!("the serving process could not install it"),
            Err(_) => anyhow::bail!("serving process gone"),
        }
    }
}

/// Runs the ACME process until its standard input closes.
pub(crate) fn run() -> anyhow::Result<()> {
    // `systemctl kill -s USR2` (a binary upgrade) reaches every process of
    // the unit; it means nothing here, and must not end this one.
    signal_hook::flag::register(signal_hook::consts::SIGUSR2, std::sync::Arc::default()).context("signals")?;
    let mut lines = std::io::stdin().lock().lines();
    let first = lines.next().context("no configuration")??;
    let config = parse_config(&first)?;
    let (tx, acks) = mpsc::channel();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line.trim() == "ok").is_err() {
                break;
            }
        }
        // The serving process ended: so does this one.
        std::process::exit(0);
    });
    drop(lines);
    let link = Link { acks };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("ACME runtime")?;
    runtime.block_on(serve(&config, &link))
}

fn parse_config(line: &str) -> anyhow::Result<Config> {
    let v: serde_json::Value = serde_json::from_str(line)?;
    let text = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    let sites = (v.get("sites").and_then(|s| s.as_array()).into_iter().flatten())
        .map(|names| {
            (names.as_array().into_iter().flatten())
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .filter(|names| !names.is_empty())
        .collect();
    Ok(Config {
        ca: text("ca").context("no CA")?,
        email: text("email"),
        ca_root: text("ca_root").map(PathBuf::from),
        state_dir: PathBuf::from(text("state_dir").context("no state directory")?),
        challenge: match text("challenge").as_deref() {
            Some("http-01") => ChallengeType::Http01,
            _ => ChallengeType::TlsAlpn01,
        },
        sites,
    })
}

/// Each site's certificate, kept fresh, forever.
async fn serve(config: &Config, link: &Link) -> anyhow::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&config.state_dir)
        .with_context(|| format!("ACME state directory {}", config.state_dir.display()))?;
    // An existing directory keeps its owner; its mode is made 0700.
    std::fs::set_permissions(&config.state_dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("ACME state directory {}", config.state_dir.display()))?;
    // Stored certificates first: serving starts without waiting for the CA.
    let mut due: Vec<SystemTime> = Vec::with_capacity(config.sites.len());
    for names in &config.sites {
        let at = match stored(config, names) {
            Some((chain, key, renew_at)) => {
                info(&format!("{}: using the stored certificate", names[0]));
                send_cert(link, names, &chain, &key)?;
                renew_at
            }
            None => SystemTime::now(),
        };
        due.push(at);
    }
    let mut account: Option<Account> = None;
    let mut retry = vec![RETRY_FIRST; config.sites.len()];
    loop {
        let now = SystemTime::now();
        let next = (due.iter().enumerate())
            .min_by_key(|(_, at)| **at)
            .map(|(i, at)| (i, *at));
        let Some((idx, at)) = next else {
            // No site: nothing to do but wait for the end.
            tokio::time::sleep(RETRY_MAX).await;
            continue;
        };
        if at > now {
            tokio::time::sleep(at.duration_since(now).unwrap_or_default()).await;
            continue;
        }
        let names = &config.sites[idx];
        let outcome = match &account {
            Some(a) => order(config, a, link, names).await,
            None => match load_account(config).await {
                Ok(a) => {
                    let outcome = order(config, &a, link, names).await;
                    account = Some(a);
                    outcome
                }
                Err(e) => Err(e.context("ACME account")),
            },
        };
        match outcome {
            Ok(renew_at) => {
                retry[idx] = RETRY_FIRST;
                due[idx] = renew_at;
            }
            Err(e) => {
                warn(&format!(
                    "{}: no certificate this time ({e:#}); trying again in {} s",
                    names[0],
                    retry[idx].as_secs()
                ));
                due[idx] = SystemTime::now() + retry[idx];
                retry[idx] = (retry[idx] * 2).min(RETRY_MAX);
            }
        }
    }
}

/// The account, made once at this CA and kept in the state directory.
async fn load_account(config: &Config) -> anyhow::Result<Account> {
    let host = config.ca.split('/').nth(2).unwrap_or("ca").replace([':', '.'], "_");
    let path = config.state_dir.join(format!("account-{host}.json"));
    let builder = || match &config.ca_root {
        Some(root) => Account::builder_with_root(root),
        None => Account::builder(),
    };
    if let Ok(text) = std::fs::read_to_string(&path) {
        let credentials: AccountCredentials = serde_json::from_str(&text).context("stored account")?;
        return Ok(builder()?.from_credentials(credentials).await?);
    }
    let contact = config.email.as_ref().map(|e| format!("mailto:{e}"));
    let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
    let (account, credentials) = builder()?
        .create(
            &NewAccount {
                contact: &contacts,
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            config.ca.clone(),
            None,
        )
        .await?;
    write_private(&path, serde_json::to_string(&credentials)?.as_bytes())?;
    info(&format!("account made at {}", config.ca));
    Ok(account)
}

/// One order for `names`, its challenges answered through the serving
/// process; the certificate stored, then sent. Returns when to renew it.
async fn order(config: &Config, account: &Account, link: &Link, names: &[String]) -> anyhow::Result<SystemTime> {
    info(&format!(
        "{}: ordering a certificate for {}",
        names[0],
        names.join(", ")
    ));
    let ids: Vec<Identifier> = names.iter().map(|n| Identifier::Dns(n.clone())).collect();
    let mut order = account.new_order(&NewOrder::new(&ids)).await?;
    let mut answered: Vec<serde_json::Value> = Vec::new();
    let result = async {
        let mut authzs = order.authorizations();
        while let Some(authz) = authzs.next().await {
            let mut authz = authz?;
            match authz.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                other => anyhow::bail!("authorization {other:?}"),
            }
            let name = match authz.identifier().identifier {
                Identifier::Dns(n) => n.clone(),
                other => anyhow::bail!("identifier {other:?}"),
            };
            let mut challenge = authz
                .challenge(config.challenge.clone())
                .with_context(|| format!("the CA offers no {:?} challenge for {name}", config.challenge))?;
            let ka = challenge.key_authorization();
            match config.challenge {
                ChallengeType::Http01 => {
                    let token = challenge.token.clone();
                    link.send(serde_json::json!({"kind": "http01", "token": token, "key_authorization": ka.as_str()}))?;
                    answered.push(serde_json::json!({"kind": "http01-clear", "token": token}));
                }
                _ => {
                    let (chain, key) = alpn_certificate(&name, ka.digest().as_ref())?;
                    link.send(serde_json::json!({"kind": "alpn", "name": name, "chain": chain, "key": key}))?;
                    answered.push(serde_json::json!({"kind": "alpn-clear", "name": name}));
                }
            }
            challenge.set_ready().await?;
        }
        let policy = RetryPolicy::new().timeout(ORDER_TIMEOUT);
        let status = order.poll_ready(&policy).await?;
        anyhow::ensure!(status == OrderStatus::Ready, "order {status:?}");
        let key = order.finalize().await?;
        let chain = order.poll_certificate(&policy).await?;
        Ok((chain, key))
    }
    .await;
    for clear in answered {
        let _ = link.send(clear);
    }
    let (chain, key) = result?;
    let renew_at = renewal_time(chain.as_bytes()).context("the CA's certificate")?;
    let dir = config.state_dir.join(&names[0]);
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
    // The key first: a reader never finds a certificate without its key.
    write_private(&dir.join("key.pem"), key.as_bytes())?;
    write_private(&dir.join("cert.pem"), chain.as_bytes())?;
    info(&format!(
        "{}: certificate issued, stored in {}",
        names[0],
        dir.display()
    ));
    send_cert(link, names, &chain, &key)?;
    Ok(renew_at)
}

fn send_cert(link: &Link, names: &[String], chain: &str, key: &str) -> anyhow::Result<()> {
    link.send(serde_json::json!({"kind": "cert", "names": names, "chain": chain, "key": key}))
}

/// The TLS-ALPN-01 certificate for `name` (RFC 8737 §3): self-signed,
/// with the critical acmeIdentifier extension holding the digest.
fn alpn_certificate(name: &str, digest: &[u8]) -> anyhow::Result<(String, String)> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()])?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A stored certificate for exactly `names`, not yet due: chain, key,
/// when to renew it.
fn stored(config: &Config, names: &[String]) -> Option<(String, String, SystemTime)> {
    let dir = config.state_dir.join(&names[0]);
    let chain = std::fs::read_to_string(dir.join("cert.pem")).ok()?;
    let key = std::fs::read_to_string(dir.join("key.pem")).ok()?;
    let der = rustls_pem_first(chain.as_bytes())?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    let mut covered: Vec<String> = (cert.subject_alternative_name().ok().flatten().into_iter())
        .flat_map(|san| san.value.general_names.iter())
        .filter_map(|g| match g {
            x509_parser::extensions::GeneralName::DNSName(n) => Some(n.to_ascii_lowercase()),
            _ => None,
        })
        .collect();
    let mut wanted: Vec<String> = names.to_vec();
    covered.sort();
    covered.dedup();
    wanted.sort();
    wanted.dedup();
    if covered != wanted {
        return None;
    }
    let renew_at = renewal_time(chain.as_bytes())?;
    (renew_at > SystemTime::now()).then_some((chain, key, renew_at))
}

/// Two thirds into the leaf's lifetime.
fn renewal_time(chain_pem: &[u8]) -> Option<SystemTime> {
    let der = rustls_pem_first(chain_pem)?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    let from = cert.validity().not_before.timestamp();
    let until = cert.validity().not_after.timestamp();
    let at = from + (until - from) * 2 / 3;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(at).ok()?))
}

/// The leaf's notAfter, in seconds since the epoch.
pub(crate) fn not_after(chain_pem: &[u8]) -> Option<u64> {
    let der = rustls_pem_first(chain_pem)?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    u64::try_from(cert.validity().not_after.timestamp()).ok()
}

/// The first certificate of a PEM chain, as DER.
fn rustls_pem_first(pem: &[u8]) -> Option<Vec<u8>> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    Some(p.contents)
}

/// Writes a file only its owner reads (0600), replacing it whole.
fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| tmp.display().to_string())?;
    f.write_all(bytes).and_then(|()| f.sync_all())?;
    std::fs::rename(&tmp, path).with_context(|| path.display().to_string())?;
    Ok(())
}

fn info(msg: &str) {
    peregrine::log::info(format_args!("ACME: {msg}"));
}

fn warn(msg: &str) {
    peregrine::log::warn(format_args!("ACME: {msg}"));
}
