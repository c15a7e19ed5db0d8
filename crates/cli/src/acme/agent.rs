//! The ACME process (`peregrine acme-agent`, started by `serve`: see
//! `mod.rs`): the account, orders, challenges, renewals and the state
//! directory. Its configuration is the first line of its standard input;
//! each later line either acknowledges one message it wrote on its
//! standard output (`ok`, `error`) or is a new configuration (a JSON
//! object: the serving process reloaded). It ends when its standard
//! input closes.
//!
//! State directory: `DIR` (0700) holds `account-HOST-HASH.json` (the
//! account's credentials at one CA directory, 0600, made once and kept;
//! `HASH` is of the whole directory URL, so that two directories on one
//! host, a CA's staging and production say, have two accounts), one
//! directory per site, named by its first name, with `cert.pem`,
//! `key.pem` (0600, ECDSA P-256 or RSA 2048: `--acme-key-type`) and `ca`
//! (the directory URL of the CA that issued it), and `locks/` (`lock.rs`:
//! one replica of a fleet orders a name at a time). A certificate found
//! there for the same names is sent to the serving process as it is, even
//! if due (it serves while its renewal is tried): a restart orders nothing
//! until renewal is due, and a replica picks up what another one renewed.
//! One whose key is not of the configured type, or that another CA issued
//! (`--acme-ca` changed, at a reload or a restart: staging to production,
//! the usual recipe), is served too, until its replacement, ordered at
//! once from the configured CA, is issued, as Caddy keeps serving a
//! certificate while it obtains one from a new issuer. A certificate
//! stored before the `ca` file existed (0.x) counts as the configured
//! CA's: upgrading must not re-order every certificate of a fleet.
//!
//! Renewal: where the CA offers ACME Renewal Information (RFC 9773), at
//! a random time in the window it suggests, but no later than two thirds
//! into the certificate's lifetime (Pebble's window may run to the
//! expiry; a renewal left that late has no time for retries); else at two
//! thirds. A failed order is tried again after 1 minute, doubling up to a
//! day, and at most 5 times per site in an hour; the current certificate
//! keeps serving. After a failure, a CA with a staging directory (Let's
//! Encrypt) gets a test order there first, as Caddy does, and the real
//! one only once that succeeds. Once less than a third of its lifetime is left and
//! renewing has failed, a warning says so, once per certificate (Let's
//! Encrypt no longer sends expiry e-mails).

use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, CertificateIdentifier, ChallengeType, ExternalAccountKey,
    Identifier, NewAccount, NewOrder, OrderStatus, RetryPolicy,
};

use super::lock::{self, Locked};

/// The first wait after a failed order; doubled after each failure.
const RETRY_FIRST: Duration = Duration::from_secs(60);
/// The longest wait between two orders of one site.
const RETRY_MAX: Duration = Duration::from_secs(24 * 3600);
/// At most this many failed orders per site in `FAILURES_WINDOW`
/// (Let's Encrypt's limit is 5 failed validations per name per hour).
const FAILURES_MAX: usize = 5;
const FAILURES_WINDOW: Duration = Duration::from_secs(3600);
/// How long an order may take to become ready, and its certificate to be
/// issued.
const ORDER_TIMEOUT: Duration = Duration::from_secs(90);
/// How often a replica waiting for another's lock looks again.
const LOCK_POLL: Duration = Duration::from_secs(10);
/// Bounds on how long to wait before asking for renewal information
/// again (the CA's Retry-After, within these).
const ARI_RECHECK_MIN: Duration = Duration::from_secs(3600);
const ARI_RECHECK_MAX: Duration = Duration::from_secs(24 * 3600);

/// The type of a certificate's key (`--acme-key-type`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) enum KeyType {
    #[default]
    EcdsaP256,
    Rsa2048,
}

impl KeyType {
    /// The setting's values, the default first.
    pub(crate) const NAMES: [&'static str; 2] = ["ecdsa-p256", "rsa2048"];

    pub(crate) fn parse(name: &str) -> anyhow::Result<KeyType> {
        match name {
            "ecdsa-p256" => Ok(KeyType::EcdsaP256),
            "rsa2048" => Ok(KeyType::Rsa2048),
            other => anyhow::bail!("unknown key type {other:?} (ecdsa-p256 or rsa2048)"),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            KeyType::EcdsaP256 => Self::NAMES[0],
            KeyType::Rsa2048 => Self::NAMES[1],
        }
    }

    /// A new key of this type, for one certificate.
    ///
    /// RSA: ring cannot generate RSA keys, so the `rsa` crate does, and
    /// only that; the key goes to rcgen (ring) as PKCS #8 for the CSR's
    /// signature, and the serving process signs handshakes with rustls's
    /// ring. RUSTSEC-2023-0071 (timing of the `rsa` crate's private-key
    /// operations) is therefore out of reach: it never signs or decrypts,
    /// and its key generation, once per order in this process, answers
    /// nobody (deny.toml).
    fn generate(self) -> anyhow::Result<rcgen::KeyPair> {
        match self {
            KeyType::EcdsaP256 => Ok(rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?),
            KeyType::Rsa2048 => {
                use rsa::pkcs8::EncodePrivateKey;
                let key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).context("RSA key")?;
                let der = key.to_pkcs8_der().context("RSA key as PKCS #8")?;
                let pair = rcgen::KeyPair::try_from(der.as_bytes())?;
                anyhow::ensure!(pair.algorithm() == &rcgen::PKCS_RSA_SHA256, "RSA key read as another");
                Ok(pair)
            }
        }
    }

    /// The type of a certificate's key, if one of these.
    fn of(cert: &x509_parser::certificate::X509Certificate<'_>) -> Option<KeyType> {
        use x509_parser::public_key::PublicKey;
        let spki = cert.public_key();
        match spki.parsed().ok()? {
            PublicKey::RSA(rsa) if rsa.key_size() == 2048 => Some(KeyType::Rsa2048),
            PublicKey::EC(_) => {
                let curve = spki.algorithm.parameters.as_ref().and_then(|p| p.as_oid().ok());
                (curve == Some(x509_parser::oid_registry::OID_EC_P256)).then_some(KeyType::EcdsaP256)
            }
            _ => None,
        }
    }

    /// The type of the key of a PEM chain's leaf.
    fn of_chain(chain_pem: &[u8]) -> Option<KeyType> {
        let der = rustls_pem_first(chain_pem)?;
        let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
        KeyType::of(&cert)
    }
}

/// The ACME process's settings, as `serve` sends them (`mod.rs`).
#[derive(Clone, PartialEq, Debug)]
pub(crate) struct Config {
    pub(crate) ca: String,
    pub(crate) email: Option<String>,
    pub(crate) ca_root: Option<PathBuf>,
    pub(crate) state_dir: PathBuf,
    pub(crate) challenge: String,
    /// External Account Binding: key id and the HMAC key, base64url.
    pub(crate) eab: Option<(String, String)>,
    /// The type of the certificates' keys.
    pub(crate) key_type: KeyType,
    /// Each site's names, its first name naming it.
    pub(crate) sites: Vec<Vec<String>>,
}

impl Config {
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "ca": self.ca,
            "email": self.email,
            "ca_root": self.ca_root,
            "state_dir": self.state_dir,
            "challenge": self.challenge,
            "eab_kid": self.eab.as_ref().map(|e| &e.0),
            "eab_hmac_key": self.eab.as_ref().map(|e| &e.1),
            "key_type": self.key_type.name(),
            "sites": self.sites,
        })
    }

    fn from_json(v: &serde_json::Value) -> anyhow::Result<Config> {
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
            challenge: text("challenge").unwrap_or_else(|| "tls-alpn-01".to_owned()),
            eab: text("eab_kid").zip(text("eab_hmac_key")),
            key_type: text("key_type").map_or(Ok(KeyType::default()), |t| KeyType::parse(&t))?,
            sites,
        })
    }

    fn challenge_type(&self) -> ChallengeType {
        match self.challenge.as_str() {
            "http-01" => ChallengeType::Http01,
            _ => ChallengeType::TlsAlpn01,
        }
    }

    /// Whether the account made under `self` serves under `other`.
    fn same_account(&self, other: &Config) -> bool {
        (self.ca == other.ca && self.ca_root == other.ca_root)
            && (self.state_dir == other.state_dir && self.eab == other.eab && self.email == other.email)
    }
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
    // Its lines go to the serving process, which writes them to its error
    // log (`mod.rs`): JSON, so that each keeps its level.
    crate::logger::Route::to(None, crate::logger::Format::Json)?.apply();
    // `systemctl kill -s USR2` (a binary upgrade) reaches every process of
    // the unit; it means nothing here, and must not end this one.
    signal_hook::flag::register(signal_hook::consts::SIGUSR2, std::sync::Arc::default()).context("signals")?;
    // This binary holds two rustls providers (the engine's aws-lc-rs,
    // ring for ACME), so rustls cannot pick a process default itself, and
    // instant-acme's HTTPS client asks for one (a panic otherwise). The
    // ACME client stays on ring, as rcgen's CSR signing does.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut lines = std::io::stdin().lock().lines();
    let first = lines.next().context("no configuration")??;
    let config = Config::from_json(&serde_json::from_str(&first)?)?;
    drop(lines);
    let (tx, acks) = mpsc::channel();
    let (configs_tx, configs) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            let line = line.trim();
            if line.starts_with('{') {
                match serde_json::from_str(line)
                    .map_err(anyhow::Error::from)
                    .and_then(|v| Config::from_json(&v))
                {
                    Ok(c) => {
                        let _ = configs_tx.send(c);
                    }
                    Err(e) => warn(&format!("a new configuration that does not parse: {e:#}")),
                }
            } else if tx.send(line == "ok").is_err() {
                break;
            }
        }
        // The serving process ended: so does this one.
        std::process::exit(0);
    });
    let link = Link { acks };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("ACME runtime")?;
    runtime.block_on(serve(config, configs, &link))
}

/// One site as the ACME process keeps it.
struct Site {
    names: Vec<String>,
    /// The certificate the serving process has for these names.
    held: Option<Held>,
    /// When to look at this site next.
    due: SystemTime,
    /// The wait after the next failure.
    retry: Duration,
    /// When its orders failed, within the last `FAILURES_WINDOW`.
    failures: VecDeque<SystemTime>,
}

/// A certificate sent to the serving process.
struct Held {
    chain: String,
    /// The directory URL of the CA that issued it.
    ca: String,
    /// Its key's type (`None`: neither of `KeyType`'s).
    key_type: Option<KeyType>,
    not_before: u64,
    not_after: u64,
    renew_at: SystemTime,
    /// When to ask the CA's renewal information (again); `None` where the
    /// CA offers none.
    ari_at: Option<SystemTime>,
    /// The warning that little of its lifetime is left was given.
    warned: bool,
}

impl Held {
    fn new(chain: String, ca: String) -> Option<Held> {
        let (not_before, not_after) = lifetime(chain.as_bytes())?;
        Some(Held {
            key_type: KeyType::of_chain(chain.as_bytes()),
            chain,
            ca,
            not_before,
            not_after,
            renew_at: at(two_thirds(not_before, not_after)),
            ari_at: Some(SystemTime::now()),
            warned: false,
        })
    }

    /// When to look at it next: renewal, or renewal information.
    fn due(&self) -> SystemTime {
        self.ari_at.map_or(self.renew_at, |a| a.min(self.renew_at))
    }

    /// Whether it is what `config` asks for: from its CA, with a key of
    /// its type. Otherwise it serves until a replacement is issued.
    fn is_current(&self, config: &Config) -> bool {
        self.ca == config.ca && self.key_type == Some(config.key_type)
    }

    /// Why it is not current, after "the stored certificate", for the
    /// line that says a new one is ordered.
    fn outdated_by(&self, config: &Config) -> String {
        if self.ca == config.ca {
            format!("'s key is not {}", config.key_type.name())
        } else {
            format!(" is from another CA ({})", self.ca)
        }
    }
}

impl Site {
    fn new(names: Vec<String>) -> Site {
        Site {
            names,
            held: None,
            due: SystemTime::now(),
            retry: RETRY_FIRST,
            failures: VecDeque::new(),
        }
    }

    /// Takes the stored certificate if it is newer than the one held (a
    /// restart, or another replica renewed it), one current for `config`
    /// (its CA, its key type) counting before a newer one that is not:
    /// sent, and scheduled (at once if it is not current: it serves until
    /// the new one is issued).
    fn adopt_stored(&mut self, config: &Config, link: &Link) -> anyhow::Result<bool> {
        let Some((chain, key, ca)) = stored(config, &self.names) else {
            return Ok(false);
        };
        let Some(held) = Held::new(chain, ca.unwrap_or_else(|| config.ca.clone())) else {
            return Ok(false);
        };
        let now = secs(SystemTime::now());
        let current = held.is_current(config);
        let better = self.held.as_ref().is_none_or(|h| {
            let theirs = h.is_current(config);
            (current && !theirs) || (current == theirs && held.not_after > h.not_after)
        });
        if !better || held.not_after <= now {
            return Ok(false);
        }
        info(&format!("{}: using the stored certificate", self.names[0]));
        send_cert(link, &self.names, &held.chain, &key)?;
        if current {
            self.due = held.due();
        } else {
            info(&format!(
                "{}: the stored certificate{}; ordering a new certificate from {} (the stored one serves until it is issued)",
                self.names[0],
                held.outdated_by(config),
                config.ca
            ));
            self.due = SystemTime::now();
        }
        self.held = Some(held);
        Ok(true)
    }

    /// After an order failed: when to try again, and the warning once
    /// little of the certificate's lifetime is left.
    fn failed(&mut self, e: &anyhow::Error) {
        let now = SystemTime::now();
        self.failures.push_back(now);
        let next = next_try(&mut self.failures, now, self.retry);
        warn(&format!(
            "{}: no certificate this time ({e:#}); trying again in {} s",
            self.names[0],
            next.duration_since(now).unwrap_or_default().as_secs()
        ));
        self.due = next;
        self.retry = (self.retry * 2).min(RETRY_MAX);
        self.warn_if_expiring(now);
    }

    fn warn_if_expiring(&mut self, now: SystemTime) {
        let Some(held) = &mut self.held else { return };
        let left = held.not_after.saturating_sub(secs(now));
        if held.warned || left * 3 >= held.not_after.saturating_sub(held.not_before) {
            return;
        }
        held.warned = true;
        warn(&format!(
            "{}: the certificate expires in {} and could not be renewed; it is served until then",
            self.names[0],
            hours(left)
        ));
    }
}

/// When to try again after a failure at `now`: after `retry`, and no
/// sooner than an hour after the oldest of the last `FAILURES_MAX`
/// failures. Forgets failures older than the window.
fn next_try(failures: &mut VecDeque<SystemTime>, now: SystemTime, retry: Duration) -> SystemTime {
    while failures.front().is_some_and(|f| *f + FAILURES_WINDOW <= now) {
        failures.pop_front();
    }
    let mut next = now + retry;
    if failures.len() >= FAILURES_MAX {
        let oldest = failures[failures.len() - FAILURES_MAX];
        next = next.max(oldest + FAILURES_WINDOW);
    }
    next
}

/// What the process holds between turns.
struct State {
    config: Config,
    sites: Vec<Site>,
    account: Option<Account>,
    /// The account at the CA's staging directory, for the test order
    /// after a failure (`staging_for`).
    staging: Option<Account>,
    owner: String,
}

/// Each site's certificate, kept fresh, until the serving process ends.
async fn serve(
    config: Config,
    mut configs: tokio::sync::mpsc::UnboundedReceiver<Config>,
    link: &Link,
) -> anyhow::Result<()> {
    make_private_dir(&config.state_dir)?;
    let mut state = State {
        sites: Vec::new(),
        account: None,
        staging: None,
        owner: lock::owner_id(),
        config: Config {
            sites: Vec::new(),
            ..config.clone()
        },
    };
    apply(&mut state, config, link)?;
    loop {
        let now = SystemTime::now();
        let next = (state.sites.iter().enumerate()).min_by_key(|(_, s)| s.due);
        let wait = match next {
            Some((_, s)) => s.due.duration_since(now).unwrap_or_default(),
            None => RETRY_MAX,
        };
        if !wait.is_zero() {
            // Asleep until the next site is due, or a reload.
            match tokio::time::timeout(wait, configs.recv()).await {
                Ok(Some(config)) => apply(&mut state, config, link)?,
                // The serving process is gone.
                Ok(None) => return Ok(()),
                Err(_) => {}
            }
            continue;
        }
        let idx = next.map(|(i, _)| i).unwrap_or_default();
        turn(&mut state, idx, link).await?;
    }
}

/// A new configuration (the first, or a reload's): the sites kept keep
/// their state; new ones start with what is stored, or are ordered now;
/// removed ones are no longer renewed.
fn apply(state: &mut State, config: Config, link: &Link) -> anyhow::Result<()> {
    if config == state.config {
        return Ok(());
    }
    if !config.same_account(&state.config) {
        state.account = None;
        state.staging = None;
        make_private_dir(&config.state_dir)?;
    }
    let mut old = std::mem::take(&mut state.sites);
    for names in &config.sites {
        let site = match old.iter().position(|s| &s.names == names) {
            Some(i) => {
                let mut site = old.swap_remove(i);
                // Another CA or key type: ordered now, the certificate
                // held serving until then (its turn takes a stored one
                // that is current first, if a replica made one).
                if let Some(held) = site.held.as_ref().filter(|h| !h.is_current(&config)) {
                    if held.ca != config.ca {
                        info(&format!(
                            "{}: the CA is now {}; ordering a new certificate (the current one serves until it is issued)",
                            names[0], config.ca
                        ));
                    } else {
                        info(&format!(
                            "{}: the key type is now {}; ordering a new certificate",
                            names[0],
                            config.key_type.name()
                        ));
                    }
                    site.due = SystemTime::now();
                    site.retry = RETRY_FIRST;
                }
                site
            }
            None => {
                let mut site = Site::new(names.clone());
                site.adopt_stored(&config, link)?;
                site
            }
        };
        state.sites.push(site);
    }
    for gone in old {
        info(&format!(
            "{}: no longer in the configuration, not renewed",
            gone.names[0]
        ));
    }
    state.config = config;
    Ok(())
}

/// One site's turn: its renewal information asked, or its stored
/// certificate taken, or it ordered under the fleet's lock.
async fn turn(state: &mut State, idx: usize, link: &Link) -> anyhow::Result<()> {
    let now = SystemTime::now();
    let State {
        config,
        sites,
        account,
        staging,
        owner,
    } = state;
    let site = &mut sites[idx];
    // Another replica may have renewed it.
    if site.held.is_some() && site.adopt_stored(config, link)? {
        return Ok(());
    }
    if let Some(held) = &mut site.held {
        if held.renew_at > now && held.is_current(config) {
            // Not due: it was the renewal information's turn.
            if let Ok(a) = account_for(config, account).await {
                ask_renewal_info(a, held).await;
            } else {
                held.ari_at = Some(now + ARI_RECHECK_MIN);
            }
            site.due = held.due();
            return Ok(());
        }
    }
    let locks = config.state_dir.join("locks");
    let guard = match lock::acquire(&locks, &site.names[0], owner) {
        Ok(Locked::Ours(guard)) => guard,
        Ok(Locked::Theirs(other)) => {
            info(&format!(
                "{}: {other} is ordering it; looking again in {} s",
                site.names[0],
                LOCK_POLL.as_secs()
            ));
            site.due = now + LOCK_POLL;
            site.warn_if_expiring(now);
            return Ok(());
        }
        Err(e) => {
            site.failed(&anyhow::Error::from(e).context(format!("lock in {}", locks.display())));
            return Ok(());
        }
    };
    // Under the lock, what another replica finished just before counts.
    if site.adopt_stored(config, link)? {
        return Ok(());
    }
    // After a failure, a test order at the CA's staging directory first
    // (Caddy's way): a broken setup spends staging's generous limits, not
    // the real CA's.
    if let Some(url) = staging_for(&config.ca).filter(|_| site.retry > RETRY_FIRST) {
        let test = Config {
            ca: url.to_owned(),
            ..config.clone()
        };
        let outcome = match account_for(&test, staging).await {
            Ok(a) => order(&test, a, link, &site.names, false).await,
            Err(e) => Err(e),
        };
        if let Err(e) = outcome {
            drop(guard);
            site.failed(&e.context("the test order at the staging CA"));
            return Ok(());
        }
        info(&format!("{}: the staging CA issued; now the CA", site.names[0]));
    }
    let outcome = match account_for(config, account).await {
        Ok(a) => order(config, a, link, &site.names, true).await,
        Err(e) => Err(e),
    };
    drop(guard);
    match outcome {
        Ok((chain, key)) => {
            send_cert(link, &site.names, &chain, &key)?;
            let mut held = Held::new(chain, config.ca.clone()).context("the CA's certificate")?;
            if let Some(a) = account.as_ref() {
                ask_renewal_info(a, &mut held).await;
            }
            site.retry = RETRY_FIRST;
            site.due = held.due();
            site.held = Some(held);
        }
        Err(e) => site.failed(&e),
    }
    Ok(())
}

/// The staging directory of a CA that has one: orders there test a
/// setup without counting against the real CA's limits.
fn staging_for(ca: &str) -> Option<&'static str> {
    const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";
    const LETS_ENCRYPT_STAGING: &str = "https://acme-staging-v02.api.letsencrypt.org/directory";
    (ca.trim_end_matches('/') == LETS_ENCRYPT).then_some(LETS_ENCRYPT_STAGING)
}

/// The account, loaded or made once per configuration.
async fn account_for<'a>(config: &Config, account: &'a mut Option<Account>) -> anyhow::Result<&'a Account> {
    if account.is_none() {
        *account = Some(load_account(config).await.context("ACME account")?);
    }
    Ok(account.as_ref().expect("just set"))
}

/// The renewal time from the CA's renewal information (RFC 9773 §4.2: a
/// random time within the suggested window), no later than two thirds
/// into the lifetime; asked again after the CA's Retry-After.
async fn ask_renewal_info(account: &Account, held: &mut Held) {
    let now = SystemTime::now();
    let Some(id) = ari_id(held.chain.as_bytes()) else {
        held.ari_at = None;
        return;
    };
    match account.renewal_info(&id).await {
        Ok((info, retry_after)) => {
            let start = secs(SystemTime::from(info.suggested_window.start));
            let end = secs(SystemTime::from(info.suggested_window.end));
            let latest = two_thirds(held.not_before, held.not_after);
            let end = if start < latest { end.min(latest) } else { start };
            let chosen = start + random_below(end.saturating_sub(start) + 1);
            held.renew_at = at(chosen);
            held.ari_at = Some(now + retry_after.clamp(ARI_RECHECK_MIN, ARI_RECHECK_MAX));
        }
        Err(instant_acme::Error::Unsupported(_)) => held.ari_at = None,
        Err(e) => {
            warn(&format!("renewal information: {e}; asking again in an hour"));
            held.ari_at = Some(now + ARI_RECHECK_MIN);
        }
    }
}

/// The certificate's identifier for renewal information (RFC 9773 §4.1):
/// base64url of its Authority Key Identifier's keyIdentifier, a dot, and
/// base64url of its serial number's DER bytes.
fn ari_id(chain_pem: &[u8]) -> Option<CertificateIdentifier<'static>> {
    use base64::Engine;
    let der = rustls_pem_first(chain_pem)?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    let aki = cert.iter_extensions().find_map(|ext| match ext.parsed_extension() {
        x509_parser::extensions::ParsedExtension::AuthorityKeyIdentifier(aki) => aki.key_identifier.clone(),
        _ => None,
    })?;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    Some(CertificateIdentifier {
        authority_key_identifier: b64.encode(aki.0).into(),
        serial: b64.encode(cert.tbs_certificate.raw_serial()).into(),
    })
}

/// The CA's host, for a file name: `127_0_0_1_14000`.
fn ca_host(ca: &str) -> String {
    ca.split('/').nth(2).unwrap_or("ca").replace([':', '.'], "_")
}

/// Where the account at `config.ca` is kept: named by the CA's host (for
/// the reader) and a hash of the whole directory URL (two directories on
/// one host are two CAs, with two accounts).
fn account_path(config: &Config) -> PathBuf {
    let digest = ring::digest::digest(&ring::digest::SHA256, config.ca.as_bytes());
    let hash: String = digest.as_ref()[..6].iter().map(|b| format!("{b:02x}")).collect();
    (config.state_dir).join(format!("account-{}-{hash}.json", ca_host(&config.ca)))
}

/// The account stored under the name of 0.x (`account-HOST.json`, one per
/// host), if it was made at this very directory (its credentials say
/// which): taken over under the new name, so that an upgrade makes no new
/// account.
fn legacy_account(config: &Config) -> Option<String> {
    let path = (config.state_dir).join(format!("account-{}.json", ca_host(&config.ca)));
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    (v.get("directory")?.as_str()? == config.ca).then_some(text)
}

/// The account, made once at this CA and kept in the state directory.
async fn load_account(config: &Config) -> anyhow::Result<Account> {
    let path = account_path(config);
    let builder = || match &config.ca_root {
        Some(root) => Account::builder_with_root(root),
        None => Account::builder(),
    };
    let stored = std::fs::read_to_string(&path).ok().or_else(|| {
        let text = legacy_account(config)?;
        write_private(&path, text.as_bytes()).ok()?;
        Some(text)
    });
    if let Some(text) = stored {
        let credentials: AccountCredentials = serde_json::from_str(&text).context("stored account")?;
        return Ok(builder()?.from_credentials(credentials).await?);
    }
    let contact = config.email.as_ref().map(|e| format!("mailto:{e}"));
    let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
    let eab = match &config.eab {
        Some((kid, key)) => Some(ExternalAccountKey::new(kid.clone(), &eab_key(key)?)),
        None => None,
    };
    let (account, credentials) = builder()?
        .create(
            &NewAccount {
                contact: &contacts,
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            config.ca.clone(),
            eab.as_ref(),
        )
        .await?;
    write_private(&path, serde_json::to_string(&credentials)?.as_bytes())?;
    info(&format!(
        "account made at {}{}",
        config.ca,
        if eab.is_some() {
            " (external account binding)"
        } else {
            ""
        }
    ));
    Ok(account)
}

/// An External Account Binding's HMAC key as the CA gives it: base64url,
/// padded or not.
pub(crate) fn eab_key(text: &str) -> anyhow::Result<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim().trim_end_matches('='))
        .context("the external account binding's HMAC key is not base64url")
}

/// One order for `names`, its challenges answered through the serving
/// process; the certificate stored. Returns the chain and key.
async fn order(
    config: &Config,
    account: &Account,
    link: &Link,
    names: &[String],
    store: bool,
) -> anyhow::Result<(String, String)> {
    info(&format!(
        "{}: ordering a certificate for {}",
        names[0],
        names.join(", ")
    ));
    let ids: Vec<Identifier> = names.iter().map(|n| Identifier::Dns(n.clone())).collect();
    let mut order = account.new_order(&NewOrder::new(&ids)).await?;
    let mut answered: Vec<serde_json::Value> = Vec::new();
    let kind = config.challenge_type();
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
                .challenge(kind.clone())
                .with_context(|| format!("the CA offers no {kind:?} challenge for {name}"))?;
            let ka = challenge.key_authorization();
            match kind {
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
        // The CSR made here rather than by `finalize` (always ECDSA
        // P-256): the configured key type.
        let key = config.key_type.generate()?;
        let mut params = rcgen::CertificateParams::new(names.to_vec())?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        order.finalize_csr(params.serialize_request(&key)?.der()).await?;
        let key = key.serialize_pem();
        let chain = order.poll_certificate(&policy).await?;
        Ok((chain, key))
    }
    .await;
    for clear in answered {
        let _ = link.send(clear);
    }
    let (chain, key) = result?;
    lifetime(chain.as_bytes()).context("the CA's certificate")?;
    if !store {
        return Ok((chain, key));
    }
    let dir = config.state_dir.join(&names[0]);
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
    // The key first: a reader never finds a certificate without its key
    // (a replica reading between the two renames finds a key that does
    // not match and skips it: `stored`).
    write_private(&dir.join("key.pem"), key.as_bytes())?;
    write_private(&dir.join("cert.pem"), chain.as_bytes())?;
    // The CA last: a reader between the renames takes the new certificate
    // for the old CA's (a needless order), never an old one for the new
    // CA's (an untrusted one kept).
    write_private(&dir.join("ca"), config.ca.as_bytes())?;
    info(&format!(
        "{}: certificate issued, stored in {}",
        names[0],
        dir.display()
    ));
    Ok((chain, key))
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

/// A stored certificate for exactly `names`, whose key matches it: chain,
/// key, and the directory URL of the CA that issued it (`None`: stored
/// before that was recorded).
fn stored(config: &Config, names: &[String]) -> Option<(String, String, Option<String>)> {
    let dir = config.state_dir.join(&names[0]);
    let chain = std::fs::read_to_string(dir.join("cert.pem")).ok()?;
    let key = std::fs::read_to_string(dir.join("key.pem")).ok()?;
    let ca = std::fs::read_to_string(dir.join("ca"))
        .ok()
        .map(|c| c.trim().to_owned());
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
    let pair = rcgen::KeyPair::from_pem(&key).ok()?;
    (rcgen::PublicKeyData::subject_public_key_info(&pair) == cert.public_key().raw).then_some((chain, key, ca))
}

/// The leaf's notBefore and notAfter, in seconds since the epoch.
fn lifetime(chain_pem: &[u8]) -> Option<(u64, u64)> {
    let der = rustls_pem_first(chain_pem)?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    let from = u64::try_from(cert.validity().not_before.timestamp()).ok()?;
    let until = u64::try_from(cert.validity().not_after.timestamp()).ok()?;
    (from < until).then_some((from, until))
}

/// Two thirds into a lifetime.
fn two_thirds(from: u64, until: u64) -> u64 {
    from + (until - from) * 2 / 3
}

/// The leaf's notAfter, in seconds since the epoch.
pub(crate) fn not_after(chain_pem: &[u8]) -> Option<u64> {
    lifetime(chain_pem).map(|(_, until)| until)
}

/// The first certificate of a PEM chain, as DER.
fn rustls_pem_first(pem: &[u8]) -> Option<Vec<u8>> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    Some(p.contents)
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

/// "3 h 20 min", "40 s".
fn hours(secs: u64) -> String {
    match secs {
        0..120 => format!("{secs} s"),
        120..7200 => format!("{} min", secs / 60),
        _ => format!("{} h {} min", secs / 3600, secs % 3600 / 60),
    }
}

/// A uniform number in `0..n` (0 if `n` is 0).
fn random_below(n: u64) -> u64 {
    use ring::rand::SecureRandom;
    let mut bytes = [0; 8];
    if n == 0 || ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        return 0;
    }
    u64::from_le_bytes(bytes) % n
}

/// A directory only its owner enters (0700); an existing one keeps its
/// owner and is made 0700.
fn make_private_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
        .with_context(|| format!("ACME state directory {}", dir.display()))
}

/// Writes a file only its owner reads (0600), replacing it whole.
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    // Unique to this process: replicas may write the same file.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
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

pub(super) fn info(msg: &str) {
    peregrine::log::info(format_args!("ACME: {msg}"));
}

pub(super) fn warn(msg: &str) {
    peregrine::log::warn(format_args!("ACME: {msg}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_orders_back_off_and_stop_at_five_in_an_hour() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut failures = VecDeque::new();
        let mut retry = RETRY_FIRST;
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..7 {
            failures.push_back(now);
            let next = next_try(&mut failures, now, retry);
            waits.push(next.duration_since(now).unwrap().as_secs());
            retry = (retry * 2).min(RETRY_MAX);
            now = next;
        }
        // 1, 2, 4, 8 minutes; then the fifth failure (at 15 min) waits
        // for the hour since the first; doubling goes on after.
        assert_eq!(waits[..4], [60, 120, 240, 480]);
        assert_eq!(waits[4], 3600 - 15 * 60);
        // No hour ever holds more than five failed orders.
        let times: Vec<u64> = std::iter::once(0)
            .chain(waits.iter().scan(0, |t, w| {
                *t += w;
                Some(*t)
            }))
            .collect();
        for (i, t) in times.iter().enumerate() {
            let in_hour = times[i..].iter().filter(|u| **u < t + 3600).count();
            assert!(in_hour <= FAILURES_MAX, "{times:?}");
        }
    }

    #[test]
    fn an_old_failure_is_forgotten() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut failures: VecDeque<SystemTime> = (0..5).map(|i| t0 + Duration::from_secs(i)).collect();
        let now = t0 + Duration::from_secs(7200);
        assert_eq!(next_try(&mut failures, now, RETRY_FIRST), now + RETRY_FIRST);
        assert!(failures.is_empty());
    }

    #[test]
    fn only_lets_encrypt_has_a_staging_directory_to_test_with() {
        assert_eq!(
            staging_for("https://acme-v02.api.letsencrypt.org/directory"),
            Some("https://acme-staging-v02.api.letsencrypt.org/directory")
        );
        assert_eq!(
            staging_for("https://acme-staging-v02.api.letsencrypt.org/directory"),
            None
        );
        assert_eq!(staging_for("https://acme.zerossl.com/v2/DV90"), None);
    }

    #[test]
    fn keys_are_of_the_configured_type_and_load_in_rustls() {
        use rustls::pki_types::{pem::PemObject, PrivateKeyDer};
        for (key_type, algorithm) in [
            (KeyType::EcdsaP256, rustls::SignatureAlgorithm::ECDSA),
            (KeyType::Rsa2048, rustls::SignatureAlgorithm::RSA),
        ] {
            let pair = key_type.generate().unwrap();
            // As the serving process loads it (`TlsConfig::set_cert_pem_for`).
            let der = PrivateKeyDer::from_pem_slice(pair.serialize_pem().as_bytes()).unwrap();
            let signing = rustls::crypto::ring::sign::any_supported_type(&der).unwrap();
            assert_eq!(signing.algorithm(), algorithm, "{key_type:?}");
            // A certificate for it is recognised as of that type (2048
            // bits for RSA), as `stored` and `Held` tell them apart.
            let params = rcgen::CertificateParams::new(vec!["a.test".to_owned()]).unwrap();
            let cert = params.self_signed(&pair).unwrap();
            assert_eq!(KeyType::of_chain(cert.pem().as_bytes()), Some(key_type));
            assert_eq!(KeyType::parse(key_type.name()).unwrap(), key_type);
        }
        assert!(KeyType::parse("rsa4096").is_err());
    }

    /// Two directories on one host (a CA's staging and production, two
    /// Pebbles' paths) are two accounts; one directory is always the same.
    #[test]
    fn accounts_are_kept_per_directory_url_not_per_host() {
        let config = |ca: &str| Config {
            ca: ca.to_owned(),
            email: None,
            ca_root: None,
            state_dir: PathBuf::from("/state"),
            challenge: "tls-alpn-01".to_owned(),
            eab: None,
            key_type: KeyType::default(),
            sites: Vec::new(),
        };
        let staging = account_path(&config("https://ca.example:14000/staging/dir"));
        let production = account_path(&config("https://ca.example:14000/dir"));
        assert_ne!(staging, production);
        assert_eq!(production, account_path(&config("https://ca.example:14000/dir")));
        let name = production.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("account-ca_example_14000-"), "{name}");
    }

    #[test]
    fn eab_keys_are_base64url_padded_or_not() {
        assert_eq!(eab_key("aGVsbG8").unwrap(), b"hello");
        assert_eq!(eab_key("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(eab_key("_-8").unwrap(), [0xff, 0xef]);
        assert!(eab_key("not base64!").is_err());
    }

    #[test]
    fn the_warning_comes_once_a_third_of_the_lifetime_is_left_and_renewal_failed() {
        let now = SystemTime::now();
        let mut site = Site::new(vec!["a.test".into()]);
        let n = secs(now);
        site.held = Some(Held {
            chain: String::new(),
            ca: String::new(),
            key_type: None,
            not_before: n - 500,
            not_after: n + 400,
            renew_at: now,
            ari_at: None,
            warned: false,
        });
        site.warn_if_expiring(now);
        assert!(!site.held.as_ref().unwrap().warned);
        site.held.as_mut().unwrap().not_after = n + 200;
        site.warn_if_expiring(now);
        assert!(site.held.as_ref().unwrap().warned);
    }
}
