//! Basic authentication's credentials (issue 27): who may read a protected
//! path, as password hashes, and the hook ([`Gate`]) through which the file
//! and archive servers ask whether a request may.
//!
//! - A user is `name:secret`; a secret is a hash as Caddy's `basic_auth`
//!   takes them: bcrypt (`$2a$`, `$2b$`, `$2y$`) or argon2 in PHC form
//!   (`$argon2id$v=19$m=19456,t=2,p=1$SALT$HASH`; argon2i and argon2d too).
//!   Netlify's `_headers` line (`Basic-Auth: alice:pw bob:pw2`) gives plain
//!   passwords; they are hashed as soon as they are read ([`seal`], bcrypt
//!   at [`BCRYPT_COST`]), so nothing keeps them: `pack` writes the hash,
//!   and `serve DIR` holds only the hash. A secret that parses as a hash is
//!   taken as one there too.
//! - Hash costs are bounded ([`BCRYPT_COST_MAX`], [`ARGON2_KIB_MAX`],
//!   [`ARGON2_PASSES_MAX`], [`ARGON2_LANES_MAX`]): a hash is computed for
//!   every request whose credentials are not cached yet, so a hash that
//!   takes a minute (or 4 GiB) to check would be a denial of service
//!   waiting in a configuration file or an archive.
//! - A path's users are those of the last `_headers` rule whose pattern
//!   matches it ([`auth_for`]), as a later rule's field replaces an earlier
//!   one's (`conventions::headers_for`); patterns are matched against the
//!   normalised path (`path::SitePath::key`), so `/%61dmin/` and
//!   `/x/../admin/` are `/admin/`.
//! - Checking is not done here: the file and archive servers hand each
//!   protected request to a [`Gate`] (the command line's has a pool of
//!   verifier threads, a cache of successes and a failure limit; a hash is
//!   never checked on an event loop). Without a gate a protected path is
//!   answered 500, never served.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use argon2::{Argon2, PasswordHash, PasswordVerifier};
use peregrine::pattern::Pattern;
use peregrine::{Reply, Request, Response};

/// bcrypt's cost for the plain passwords of `_headers`, hashed by `pack`
/// and `serve DIR` when they read them: 2^10 rounds, about 50 ms on one
/// core of a 2020s server, so that a site of a few users packs in well
/// under a second and a stolen archive still costs a guesser 50 ms a try.
/// (Caddy's `hash-password` uses 14; htpasswd's `-B` default is 5.)
pub const BCRYPT_COST: u32 = 10;

/// The highest bcrypt cost taken: 2^16 rounds is about 3 s a check on
/// today's hardware; more would let one request hold a verifier thread
/// for minutes.
pub const BCRYPT_COST_MAX: u32 = 16;

/// The most memory an argon2 hash may ask for, in KiB: 256 MiB (the
/// default is 19 MiB), held once per verifier thread while it checks.
pub const ARGON2_KIB_MAX: u32 = 256 * 1024;

/// The most passes over that memory an argon2 hash may ask for.
pub const ARGON2_PASSES_MAX: u32 = 16;

/// The most lanes an argon2 hash may ask for (the crate computes them on
/// one thread, so lanes cost time as passes do).
pub const ARGON2_LANES_MAX: u32 = 16;

/// Most users in one rule: far above any real `_headers` line; bounds
/// what a rule can make a reader hold.
pub const USERS_MAX: usize = 1000;

/// Plain passwords hashed already, remembered by [`seal`] so that `serve
/// DIR` re-reading an edited `_headers` (each worker, at each edit) does
/// not hash them all again: at most this many, forgotten all at once
/// when full.
const SEALED_MAX: usize = 4096;

/// A password hash, checked when it was read: its algorithm is bcrypt or
/// argon2, and its cost within the bounds above. Shown as `<hash>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Hash {
    text: String,
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Bcrypt,
    Argon2,
}

impl Hash {
    /// A hash as written (`$2b$10$...`, `$argon2id$...`), or why not.
    pub fn parse(text: &str) -> Result<Hash, String> {
        if ["$2a$", "$2b$", "$2y$"].iter().any(|p| text.starts_with(p)) {
            let parts: bcrypt::HashParts = text.parse().map_err(|e| format!("not a valid bcrypt hash ({e})"))?;
            let cost = parts.get_cost();
            if cost > BCRYPT_COST_MAX {
                return Err(format!(
                    "bcrypt cost {cost} is above {BCRYPT_COST_MAX}: each check would take seconds to minutes"
                ));
            }
            return Ok(Hash {
                text: text.to_owned(),
                kind: Kind::Bcrypt,
            });
        }
        if ["$argon2id$", "$argon2i$", "$argon2d$"]
            .iter()
            .any(|p| text.starts_with(p))
        {
            let phc = PasswordHash::new(text).map_err(|e| format!("not a valid argon2 hash ({e})"))?;
            let params = argon2::Params::try_from(&phc).map_err(|e| format!("not a valid argon2 hash ({e})"))?;
            if phc.salt.is_none() || phc.hash.is_none() {
                return Err("not a valid argon2 hash (no salt or no output)".into());
            }
            let (m, t, p) = (params.m_cost(), params.t_cost(), params.p_cost());
            if m > ARGON2_KIB_MAX || t > ARGON2_PASSES_MAX || p > ARGON2_LANES_MAX {
                return Err(format!(
                    "argon2 m={m},t={t},p={p} is above m={ARGON2_KIB_MAX},t={ARGON2_PASSES_MAX},\
                     p={ARGON2_LANES_MAX}: each check would hold too much memory or time"
                ));
            }
            return Ok(Hash {
                text: text.to_owned(),
                kind: Kind::Argon2,
            });
        }
        Err("expected a bcrypt ($2b$...) or argon2 ($argon2id$...) password hash".into())
    }

    /// bcrypt at [`BCRYPT_COST`] of a plain password, with a random salt.
    pub fn of_plain(password: &str) -> Hash {
        // Fails only for a cost out of bcrypt's range, which ours is not,
        // or if the system cannot give random bytes for the salt.
        let text = bcrypt::hash(password, BCRYPT_COST).expect("bcrypt hashes at its own cost");
        Hash {
            text,
            kind: Kind::Bcrypt,
        }
    }

    /// Whether `password` is the one hashed. Slow by design (tens of
    /// milliseconds): never call it on an event loop.
    pub fn verify(&self, password: &[u8]) -> bool {
        match self.kind {
            Kind::Bcrypt => bcrypt::verify(password, &self.text).unwrap_or(false),
            Kind::Argon2 => {
                PasswordHash::new(&self.text).is_ok_and(|h| Argon2::default().verify_password(password, &h).is_ok())
            }
        }
    }

    /// The hash as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<hash>")
    }
}

/// A user's secret as written: a hash, or (Netlify's `_headers`) a plain
/// password, which [`seal`] hashes. Shown without its value.
#[derive(Clone, PartialEq, Eq)]
pub enum Secret {
    /// A hash ([`Hash::parse`] took it).
    Hash(Hash),
    /// A password as written.
    Plain(String),
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Secret::Hash(_) => "<hash>",
            Secret::Plain(_) => "<password>",
        })
    }
}

/// `user:secret` pairs separated by spaces (Netlify's `Basic-Auth` value,
/// and the form an archive stores its users in), each secret a hash, or,
/// when `plain` allows, a password. A user name is not empty and holds no
/// `:` (RFC 7617 §2: the first colon ends it) nor control characters;
/// a user named twice is refused. Errors name users, never secrets.
pub fn parse_credentials(value: &str, plain: bool) -> Result<Vec<(String, Secret)>, String> {
    let mut out: Vec<(String, Secret)> = Vec::new();
    for pair in value.split_whitespace() {
        let Some((user, secret)) = pair.split_once(':') else {
            return Err("expected user:password pairs separated by spaces".into());
        };
        if user.is_empty() || user.chars().any(char::is_control) {
            return Err("a user name is empty or holds a control character".into());
        }
        if secret.is_empty() {
            return Err(format!("user {user:?} has an empty password"));
        }
        if out.iter().any(|(u, _)| u == user) {
            return Err(format!("user {user:?} is given twice"));
        }
        let secret = if secret.starts_with('$') {
            match Hash::parse(secret) {
                Ok(h) => Secret::Hash(h),
                Err(_) if plain => Secret::Plain(secret.to_owned()),
                Err(why) => return Err(format!("user {user:?}: {why}")),
            }
        } else if plain {
            Secret::Plain(secret.to_owned())
        } else {
            return Err(format!(
                "user {user:?}: expected a bcrypt ($2b$...) or argon2 ($argon2id$...) password hash, \
                 not a password (make one with `htpasswd -nbBC 10 USER PASSWORD` or `caddy hash-password`)"
            ));
        };
        out.push((user.to_owned(), secret));
    }
    if out.is_empty() {
        return Err("no user: expected user:password pairs".into());
    }
    if out.len() > USERS_MAX {
        return Err(format!(
            "{} users, more than the {USERS_MAX} a rule may have",
            out.len()
        ));
    }
    Ok(out)
}

/// The users of a protected path, each with a password hash.
#[derive(Clone, PartialEq, Eq)]
pub struct Users {
    list: Vec<(String, Hash)>,
    /// Whether some of them were plain passwords where they were written
    /// (hashed when read).
    from_plain: bool,
}

impl Users {
    /// Users whose secrets are all hashes ([`parse_credentials`] without
    /// plain passwords): a configuration's, an archive's.
    pub fn parse(value: &str) -> Result<Users, String> {
        let list = parse_credentials(value, false)?
            .into_iter()
            .map(|(u, s)| match s {
                Secret::Hash(h) => (u, h),
                Secret::Plain(_) => unreachable!("plain passwords were refused"),
            })
            .collect();
        Ok(Users {
            list,
            from_plain: false,
        })
    }

    /// The same users, marked as having had plain passwords where they
    /// were written (an archive's `FLAG_FROM_PLAIN`).
    pub fn with_from_plain(mut self, from_plain: bool) -> Users {
        self.from_plain = from_plain;
        self
    }

    /// The hash of `user`, if there is such a user.
    pub fn hash_of(&self, user: &str) -> Option<&Hash> {
        self.list.iter().find(|(u, _)| u == user).map(|(_, h)| h)
    }

    /// A hash of the same kind and cost as the real ones, checked for a
    /// user who does not exist so that an unknown name costs what a known
    /// one does (the answer is then thrown away).
    pub fn decoy(&self) -> &Hash {
        &self.list[0].1
    }

    /// How many users.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Never true: a rule has at least one user.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Whether some passwords were written in the clear (and hashed when
    /// read): worth a warning where they travel in the clear.
    pub fn from_plain(&self) -> bool {
        self.from_plain
    }

    /// The users as `user:hash` pairs separated by spaces: what an archive
    /// stores ([`Users::parse`] reads it back). It holds hashes only.
    pub fn text(&self) -> String {
        let pairs: Vec<String> = self.list.iter().map(|(u, h)| format!("{u}:{}", h.as_str())).collect();
        pairs.join(" ")
    }

    /// How `archive ls`, `cat` and `diff` show them: a count, never a
    /// credential.
    pub fn shown(&self) -> String {
        let n = self.list.len();
        format!("<{n} user{}>", if n == 1 { "" } else { "s" })
    }
}

impl fmt::Debug for Users {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.list.iter().map(|(u, _)| u.as_str()).collect();
        f.debug_struct("Users").field("names", &names).finish_non_exhaustive()
    }
}

/// Users from [`parse_credentials`], plain passwords hashed (bcrypt, at
/// [`BCRYPT_COST`]). A password hashed before in this process, for the
/// same user, gets the hash it got then (remembered under an HMAC of the
/// user and password with a key made at random for this process, so no
/// password is kept): `serve DIR` reads `_headers` again in every worker
/// after an edit, and 50 ms a user each time would stall their loops.
pub fn seal(credentials: Vec<(String, Secret)>) -> Users {
    let mut from_plain = false;
    let list = credentials
        .into_iter()
        .map(|(user, secret)| match secret {
            Secret::Hash(h) => (user, h),
            Secret::Plain(password) => {
                from_plain = true;
                let hash = sealed(&user, &password);
                (user, hash)
            }
        })
        .collect();
    Users { list, from_plain }
}

/// The hash of a plain password, remembered ([`seal`]).
fn sealed(user: &str, password: &str) -> Hash {
    static KEY: OnceLock<ring::hmac::Key> = OnceLock::new();
    static SEALED: OnceLock<Mutex<HashMap<[u8; 32], Hash>>> = OnceLock::new();
    let key = KEY.get_or_init(|| {
        ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &ring::rand::SystemRandom::new())
            .expect("the system gives random bytes")
    });
    let mut ctx = ring::hmac::Context::with_key(key);
    ctx.update(user.as_bytes());
    ctx.update(b"\0");
    ctx.update(password.as_bytes());
    let mut id = [0u8; 32];
    id.copy_from_slice(ctx.sign().as_ref());
    let memo = SEALED.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(hash) = memo.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
        return hash.clone();
    }
    let hash = Hash::of_plain(password);
    let mut memo = memo.lock().unwrap_or_else(|e| e.into_inner());
    if memo.len() >= SEALED_MAX {
        memo.clear();
    }
    memo.insert(id, hash.clone());
    hash
}

/// A protected pattern and its users.
#[derive(Clone)]
pub struct AuthRule {
    /// The pattern as written (`/admin/*`).
    pub pattern: String,
    compiled: Pattern,
    /// Who may read what it matches.
    pub users: Arc<Users>,
}

impl AuthRule {
    /// A rule for `pattern` (checked as `_headers` patterns are).
    pub fn new(pattern: &str, users: Users) -> Result<AuthRule, String> {
        let compiled = Pattern::parse(pattern).map_err(|e| e.to_string())?;
        Ok(AuthRule {
            pattern: pattern.to_owned(),
            compiled,
            users: Arc::new(users),
        })
    }

    /// Whether the rule covers `key` (a normalised site path).
    pub fn covers(&self, key: &str) -> bool {
        self.compiled.captures(key).is_some()
    }
}

impl fmt::Debug for AuthRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthRule")
            .field("pattern", &self.pattern)
            .field("users", &self.users.shown())
            .finish()
    }
}

/// The users who may read `key` (a normalised site path): the last rule's
/// that covers it.
pub fn auth_for<'a>(rules: &'a [AuthRule], key: &str) -> Option<&'a Arc<Users>> {
    rules.iter().rev().find(|r| r.covers(key)).map(|r| &r.users)
}

/// What checks the credentials of a request to a protected path, given to
/// `FileServer` and `ArchiveServer` (`with_gate`). It is asked on the
/// event loop, so it must not check a hash there: it answers at once
/// (a refusal, or a success it remembers), or defers the request
/// (`Request::defer`, `Reply::Later`) and answers from another thread.
pub trait Gate: Send + Sync + 'static {
    /// `req` asks for a path `users` protect. `answer` makes the answer the
    /// server would give were the path open (on this thread, now: called
    /// only once the gate will send it, or may: never for a request
    /// without credentials); the gate sends it only to a client whose
    /// credentials it has proven, with `Cache-Control: private`
    /// ([`private`]).
    fn guard(&self, req: &Request<'_>, users: &Arc<Users>, answer: &mut dyn FnMut() -> Response) -> Reply;
}

/// What a protected path answers without a gate: nothing of the page.
pub fn ungated() -> Response {
    peregrine::log::error(format_args!(
        "a path protected by a Basic-Auth rule was asked for, and this server has no gate to check \
         credentials with: answered 500"
    ));
    Response::error(500)
}

/// `response` made private to the client that asked (RFC 9111 §5.2.2.7:
/// a shared cache must not store it): its `Cache-Control` without
/// `public` (nor `s-maxage`, meant for shared caches), with `private`
/// first. Every answer to an authenticated request gets it (RFC 9111
/// §3.5 would otherwise let a `public` answer be shared).
pub fn private(response: Response) -> Response {
    let value = private_cache_control(response.header("cache-control"));
    response
        .without_header("cache-control")
        .with_header("Cache-Control", value)
}

/// A `Cache-Control` value made private ([`private`]).
pub fn private_cache_control(value: Option<&str>) -> String {
    let mut out = vec!["private".to_owned()];
    for directive in value.unwrap_or_default().split(',') {
        let d = directive.trim();
        let name = d.split('=').next().unwrap_or_default().trim();
        if d.is_empty()
            || ["public", "private", "s-maxage"]
                .iter()
                .any(|n| name.eq_ignore_ascii_case(n))
        {
            continue;
        }
        out.push(d.to_owned());
    }
    out.join(", ")
}

/// Whether a `Cache-Control` value says `private` (an answer
/// authentication made private).
pub fn says_private(value: &str) -> bool {
    value.split(',').any(|d| {
        d.split('=')
            .next()
            .unwrap_or_default()
            .trim()
            .eq_ignore_ascii_case("private")
    })
}

/// Whether a `Cache-Control` value says `public`: dropped from protected
/// answers, which the operator is told at start.
pub fn says_public(value: &str) -> bool {
    value.split(',').any(|d| {
        d.split('=')
            .next()
            .unwrap_or_default()
            .trim()
            .eq_ignore_ascii_case("public")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bcrypt hash at the lowest cost bcrypt takes (4: a millisecond).
    fn quick_bcrypt(password: &str) -> String {
        bcrypt::hash(password, 4).unwrap()
    }

    /// An argon2id hash at the lowest costs argon2 takes.
    fn quick_argon2(password: &str) -> String {
        use argon2::PasswordHasher;
        let params = argon2::Params::new(8, 1, 1, None).unwrap();
        let a = Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
        a.hash_password(password.as_bytes()).unwrap().to_string()
    }

    #[test]
    fn bcrypt_and_argon2_hashes_verify_their_password_only() {
        for text in [quick_bcrypt("s3cret"), quick_argon2("s3cret")] {
            let h = Hash::parse(&text).unwrap();
            assert!(h.verify(b"s3cret"), "{text}");
            assert!(!h.verify(b"s3cret "), "{text}");
            assert!(!h.verify(b""), "{text}");
        }
        for prefix in ["$2a$", "$2y$"] {
            let text = quick_bcrypt("x").replacen("$2b$", prefix, 1);
            assert!(Hash::parse(&text).unwrap().verify(b"x"), "{prefix}");
        }
    }

    #[test]
    fn costly_or_broken_hashes_are_refused() {
        let too_slow = quick_bcrypt("x").replacen("$04$", "$17$", 1);
        assert!(Hash::parse(&too_slow).unwrap_err().contains("cost 17"));
        let too_big = "$argon2id$v=19$m=4194304,t=1,p=1$c29tZXNhbHQ$aGFzaGhhc2hoYXNoaGFzaA";
        assert!(
            Hash::parse(too_big).unwrap_err().contains("m=4194304"),
            "{:?}",
            Hash::parse(too_big)
        );
        for bad in ["s3cret", "$2b$10$short", "$argon2id$nonsense", "$1$md5$crypt", "{SHA}x"] {
            assert!(Hash::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn credentials_are_user_secret_pairs_and_errors_never_show_a_secret() {
        let c = parse_credentials("alice:s3cret  bob:pw:with:colons", true).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!((c[0].0.as_str(), &c[0].1), ("alice", &Secret::Plain("s3cret".into())));
        assert_eq!(c[1].1, Secret::Plain("pw:with:colons".into()));
        for (bad, why) in [
            ("", "no user"),
            ("alice", "user:password"),
            (":pw", "empty"),
            ("alice:", "empty password"),
            ("alice:a alice:b", "twice"),
        ] {
            let err = parse_credentials(bad, true).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        let err = parse_credentials("alice:hunter2", false).unwrap_err();
        assert!(err.contains("not a password") && !err.contains("hunter2"), "{err}");
        let hashed = quick_bcrypt("x");
        let c = parse_credentials(&format!("alice:{hashed}"), true).unwrap();
        assert!(matches!(c[0].1, Secret::Hash(_)));
        assert_eq!(format!("{:?}", c[0].1), "<hash>");
        assert_eq!(format!("{:?}", Secret::Plain("hunter2".into())), "<password>");
    }

    /// Plain passwords come out as hashes (none of the text is the
    /// password), the same hash for the same user and password in one
    /// process, and an archive's text reads back to the same users.
    #[test]
    fn sealing_hashes_plain_passwords_once() {
        let users = seal(parse_credentials("carol:hunter2 dave:pw", true).unwrap());
        assert!(users.from_plain());
        assert!(!users.text().contains("hunter2"));
        assert!(users.hash_of("carol").unwrap().verify(b"hunter2"));
        assert!(users.hash_of("carol").unwrap().as_str().starts_with("$2b$10$"));
        assert!(users.hash_of("eve").is_none());
        let again = seal(parse_credentials("carol:hunter2", true).unwrap());
        assert_eq!(again.hash_of("carol"), users.hash_of("carol"));
        let read = Users::parse(&users.text()).unwrap();
        assert_eq!(read.text(), users.text());
        assert!(!read.from_plain());
        assert_eq!(read.shown(), "<2 users>");
        assert_eq!(format!("{users:?}"), "Users { names: [\"carol\", \"dave\"], .. }");
    }

    #[test]
    fn the_last_rule_that_covers_a_path_decides() {
        let users = |s: &str| Users::parse(&format!("{s}:{}", quick_bcrypt("x"))).unwrap();
        let rules = vec![
            AuthRule::new("/*", users("all")).unwrap(),
            AuthRule::new("/admin/*", users("admin")).unwrap(),
        ];
        let who = |key: &str| {
            auth_for(&rules, key)
                .and_then(|u| u.list.first())
                .map(|(n, _)| n.clone())
        };
        assert_eq!(who("/admin/x").as_deref(), Some("admin"));
        assert_eq!(who("/admin").as_deref(), Some("admin"));
        assert_eq!(who("/").as_deref(), Some("all"));
        assert_eq!(auth_for(&rules[1..], "/other"), None);
    }

    #[test]
    fn private_answers_lose_public_and_keep_the_rest() {
        assert_eq!(private_cache_control(None), "private");
        assert_eq!(private_cache_control(Some("no-cache")), "private, no-cache");
        assert_eq!(
            private_cache_control(Some("public, max-age=3600, s-maxage=60, immutable")),
            "private, max-age=3600, immutable"
        );
        assert_eq!(private_cache_control(Some("Private, no-store")), "private, no-store");
        assert!(says_public("max-age=60, PUBLIC") && !says_public("no-cache"));
        let r = private(Response::text("x").with_header("Cache-Control", "public, max-age=60"));
        assert_eq!(r.header("cache-control"), Some("private, max-age=60"));
    }
}
