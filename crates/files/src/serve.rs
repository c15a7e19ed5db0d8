//! The pipeline: method → forced rule → path → lookup (clean URLs) →
//! directory → (missing: rule, wildcard, fallback, 404 pages) → encoding →
//! conditional → range → reply. Each step returns early with its answer.
//!
//! The site conventions (`conventions`: `_headers`, `_redirects`,
//! `404.html`, `_404.html`, `_wildcard.*`, clean URLs) are read from the
//! root and answered as `pack` compiles them into an archive, so that a
//! directory answers as its archive will. Each worker keeps its own copy of the two rule files,
//! trusted for `revalidate_interval` like any cached file, then `stat`ed;
//! when they change, the worker re-reads them and forgets its cached header
//! blocks (which `_headers` fed).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use globset::{Glob, GlobMatcher};
use peregrine::{Reply, Request, Response};

use crate::auth::{self, Gate};
use crate::cache::{self, Resource};
use crate::conventions::{self, CleanUrls, Conventions, RuleAnswer};
use crate::encoding::Encoding;
use crate::path::{self, SitePath};
use crate::reply::{self, bad_request, Fields, Method};
use crate::scope::{self, Scope};
use crate::{listing, sys, Error, Options};

/// Largest `_headers` or `_redirects` read: far above any real one (a
/// thousand rules fit in 100 KiB), and each worker keeps its own copy.
const CONVENTION_FILE_BYTES_MAX: u64 = 1 << 20;
/// Folders whose `_wildcard.*` each worker remembers; cleared when full
/// (missing paths name folders, so a client could otherwise grow it).
const WILDCARD_FOLDERS_MAX: usize = 4096;

/// The two rule files' identities (`None`: absent), to notice a change.
type RuleIds = [Option<sys::FileId>; 2];

/// One worker's view of a site's conventions.
struct Live {
    rules: Rc<Conventions>,
    ids: RuleIds,
    /// Until when the rule files need no look (last look + the interval):
    /// an `Instant` compared, not a `Duration` computed, per request.
    fresh_until: Instant,
    /// Folder (relative, no trailing slash) → its `_wildcard.*` file's
    /// name; forgotten at each look at the rule files.
    wildcards: HashMap<String, Option<String>>,
}

/// One worker's state for one site: its files cache and its view of the
/// site's conventions (`None` until first looked at). One record, so that
/// a request finds both with one thread-local lookup (issue 27's gate:
/// `bench/runs/2026-11-26-access-gate`).
struct Local {
    site: u64,
    cache: cache::Cache,
    live: Option<Live>,
}

thread_local! {
    static LOCAL: RefCell<Vec<Local>> = const { RefCell::new(Vec::new()) };
}

/// What a request's first look at its worker's state found.
enum Looked {
    /// The rules are fresh, none can shadow or gate a file, and a file is
    /// cached for the raw path: the rules are not needed at all.
    Hit(Rc<Resource>),
    /// Everything else: the rules, and what the cache said if it was asked.
    Rules(Rc<Conventions>, Cached),
}

/// Whether a request's first look asked the cache for its raw path (and
/// found nothing).
enum Cached {
    Miss,
    /// Not looked up: a rule may shadow or gate the path.
    NotLooked,
}

/// A served directory and its settings, shared by all workers.
pub struct Site {
    id: u64,
    root: sys::Root,
    options: Options,
    rules: Vec<(GlobMatcher, String)>,
    /// `_headers`' `Basic-Auth` rules at start, and the protected
    /// patterns it says `public` for (`FileServer::protection`).
    protection: (Vec<auth::AuthRule>, Vec<String>),
    /// The paths this server's route takes (`FileServer::with_scope`):
    /// a file of another name outside them is refused (`is_elsewhere`).
    /// `None`: a site without routes, where every path is the server's.
    pub(crate) scope: Option<Arc<dyn Scope>>,
}

impl Site {
    pub fn new(options: Options, id: u64) -> Result<Self, Error> {
        let root = sys::open_root(&options.root)
            .map_err(|e| Error(format!("cannot open {} as a directory: {e}", options.root.display())))?;
        let mut rules = Vec::new();
        for (glob, value) in &options.cache_rules {
            let matcher = Glob::new(glob)
                .map_err(|e| Error(format!("bad --cache-control glob {glob:?}: {e}")))?
                .compile_matcher();
            crate::check_cache_control(value).map_err(|e| Error(format!("--cache-control {glob}=...: {e}")))?;
            rules.push((matcher, value.clone()));
        }
        if let Some(cc) = &options.cache_control {
            crate::check_cache_control(cc).map_err(|e| Error(format!("--cache-control: {e}")))?;
        }
        for (flag, page) in [("--404", &options.not_found_page), ("--fallback", &options.fallback)] {
            if let Some(page) = page {
                let p = path::normalize(format!("/{}", page.trim_start_matches('/')).as_bytes())
                    .map_err(|e| Error(format!("{flag} {page:?}: {e}")))?;
                let file = sys::open_beneath(&root, &p.rel, options.follow_symlinks)
                    .map_err(|e| Error(format!("{flag} {page:?}: not found under the root: {e}")))?;
                if !sys::fstat(&file).is_ok_and(|id| id.is_file) {
                    return Err(Error(format!("{flag} {page:?}: not a regular file")));
                }
            }
        }
        if !crate::REVALIDATE_INTERVAL_RANGE.contains(&options.revalidate_interval) {
            return Err(Error(format!(
                "revalidate interval {:?} is out of range: at most {:?}",
                options.revalidate_interval,
                crate::REVALIDATE_INTERVAL_RANGE.end()
            )));
        }
        for name in &options.index {
            if name.is_empty() || name.contains('/') || name.starts_with('.') {
                return Err(Error(format!("bad index file name {name:?}")));
            }
        }
        let mut site = Site {
            id,
            root,
            options,
            rules,
            protection: (Vec::new(), Vec::new()),
            scope: None,
        };
        // A bad `_headers` or `_redirects` refuses the start, as it
        // refuses `pack` (and `check-config` says so).
        let (rules, _) = site
            .read_conventions()
            .map_err(|e| Error(format!("{}/{e}", site.options.root.display())))?;
        if let Some(paths) = site.redirect_loop(&rules) {
            return Err(Error(format!(
                "{}/{}",
                site.options.root.display(),
                conventions::loop_message(&paths)
            )));
        }
        site.protection = (rules.auth_rules().to_vec(), rules.public_but_protected().to_vec());
        Ok(site)
    }

    /// `_headers`' `Basic-Auth` rules at start (`FileServer::protection`).
    pub fn protection(&self) -> (Vec<auth::AuthRule>, Vec<String>) {
        self.protection.clone()
    }

    /// A loop between the `_redirects` rules and this directory's own
    /// 301s (`conventions::find_redirect_loop`), looked for at start as
    /// `pack` looks for it, so that `check-config` refuses it too.
    fn redirect_loop(&self, rules: &Conventions) -> Option<Vec<String>> {
        if rules.redirects().is_empty() {
            return None;
        }
        let found = |at: &str| -> Option<Found> {
            let p = path::normalize(at.as_bytes()).ok()?;
            if p.is_hidden() || conventions::is_convention_file(&p.rel) {
                return None;
            }
            Some(match self.lookup(&p, rules, true) {
                Found::Redirect => Found::Canonical(path::encode(&format!("/{}/", p.rel))),
                f => f,
            })
        };
        let own = |at: &str| match found(at) {
            Some(Found::Canonical(location)) => Some(location),
            _ => None,
        };
        let answers = |at: &str| !matches!(found(at), None | Some(Found::Missing));
        conventions::find_redirect_loop(rules.redirects(), &own, &answers)
    }

    /// Reads and compiles `_headers` and `_redirects` from the root.
    fn read_conventions(&self) -> Result<(Conventions, RuleIds), String> {
        let mut texts: [Option<Vec<u8>>; 2] = [None, None];
        let mut ids: RuleIds = [None, None];
        for (i, name) in ["_headers", "_redirects"].into_iter().enumerate() {
            let file = match sys::open_beneath(&self.root, name, self.options.follow_symlinks) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(format!("{name}: {e}")),
            };
            let id = sys::fstat(&file).map_err(|e| format!("{name}: {e}"))?;
            if !id.is_file {
                continue;
            }
            if id.size > CONVENTION_FILE_BYTES_MAX {
                return Err(format!(
                    "{name}: {} bytes, more than the {CONVENTION_FILE_BYTES_MAX} read",
                    id.size
                ));
            }
            let mut text = Vec::new();
            file.take(CONVENTION_FILE_BYTES_MAX)
                .read_to_end(&mut text)
                .map_err(|e| format!("{name}: {e}"))?;
            texts[i] = Some(text);
            ids[i] = Some(id);
        }
        let c = Conventions::allowing(texts[0].as_deref(), texts[1].as_deref(), &self.options.proxy_allow)?;
        Ok((c, ids))
    }

    /// Runs `f` with this worker's state for the site (made the first
    /// time). `f` must not come back here: the state is borrowed.
    #[inline(always)]
    fn with_local<R>(&self, f: impl FnOnce(&mut Local) -> R) -> R {
        LOCAL.with(|all| {
            let mut all = all.borrow_mut();
            let idx = match all.iter().position(|l| l.site == self.id) {
                Some(i) => i,
                None => self.first_local(&mut all),
            };
            f(&mut all[idx])
        })
    }

    #[cold]
    #[inline(never)]
    fn first_local(&self, all: &mut Vec<Local>) -> usize {
        all.push(Local {
            site: self.id,
            cache: cache::Cache::new(self.options.cache_entries),
            live: None,
        });
        all.len() - 1
    }

    /// This worker's rules, re-read when a rule file changed (looked at
    /// once per `revalidate_interval`; a rule file that no longer parses
    /// is logged and the rules read before stay), and, when no rule can
    /// shadow or gate a file, the cached file for the raw path: one look
    /// at the worker's state for both. The rest (stat the rule files,
    /// re-read them) is out of line.
    #[inline(always)]
    fn look(&self, raw: &[u8], now: Instant) -> Looked {
        let interval = self.options.revalidate_interval;
        let fresh = self.with_local(|l| {
            let live = l.live.as_ref().filter(|live| now < live.fresh_until)?;
            if live.rules.has_auth() || live.rules.has_forced() {
                return Some(Looked::Rules(live.rules.clone(), Cached::NotLooked));
            }
            Some(match l.cache.get(raw, &self.root, interval, now) {
                Some(res) => Looked::Hit(res),
                None => Looked::Rules(live.rules.clone(), Cached::Miss),
            })
        });
        match fresh {
            Some(looked) => looked,
            None => Looked::Rules(self.conventions_checked(now), Cached::NotLooked),
        }
    }

    /// `conventions` when this worker has no rules yet or their interval
    /// has passed: the rule files are looked at again.
    #[cold]
    #[inline(never)]
    fn conventions_checked(&self, now: Instant) -> Rc<Conventions> {
        let interval = self.options.revalidate_interval;
        self.with_local(|local| {
            let l = match &mut local.live {
                Some(l) => l,
                None => {
                    let (rules, ids) = self.read_conventions().unwrap_or_default();
                    local.live.insert(Live {
                        rules: Rc::new(rules),
                        ids,
                        fresh_until: now + interval,
                        wildcards: HashMap::new(),
                    })
                }
            };
            if now < l.fresh_until {
                return l.rules.clone();
            }
            l.fresh_until = now + interval;
            let ids =
                ["_headers", "_redirects"].map(|name| sys::stat_beneath(&self.root, name).ok().filter(|id| id.is_file));
            // Folders may have gained or lost a wildcard too.
            l.wildcards.clear();
            if ids == l.ids {
                return l.rules.clone();
            }
            l.ids = ids;
            match self.read_conventions() {
                Ok((rules, ids)) => {
                    l.ids = ids;
                    l.rules = Rc::new(rules);
                    let rules = l.rules.clone();
                    local.cache.clear();
                    rules
                }
                Err(e) => {
                    peregrine::log::error(format_args!(
                        "{}/{e}; still following the rules read before",
                        self.options.root.display()
                    ));
                    l.rules.clone()
                }
            }
        })
    }

    /// The `_wildcard.*` file of a folder (relative, no trailing slash), by
    /// name: the first in byte order, as `pack` takes it, siblings
    /// (`_wildcard.html.gz`) left out. Remembered per worker until the next
    /// look at the rule files.
    fn wildcard_name(&self, folder: &str) -> Option<String> {
        let known = self.with_local(|l| l.live.as_ref()?.wildcards.get(folder).cloned());
        if let Some(name) = known {
            return name;
        }
        let found = self.find_wildcard(folder);
        self.with_local(|l| {
            if let Some(l) = &mut l.live {
                if l.wildcards.len() >= WILDCARD_FOLDERS_MAX {
                    l.wildcards.clear();
                }
                l.wildcards.insert(folder.to_owned(), found.clone());
            }
        });
        found
    }

    fn find_wildcard(&self, folder: &str) -> Option<String> {
        let dir = sys::open_beneath(&self.root, folder, self.options.follow_symlinks).ok()?;
        if !sys::fstat(&dir).is_ok_and(|id| id.is_dir) {
            return None;
        }
        // Read from the directory opened beneath the root (as listings are).
        let entries = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())).ok()?;
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("_wildcard."))
            .collect();
        names.sort_unstable();
        let is_sibling = |n: &str| {
            Encoding::ALL.iter().any(|e| {
                n.strip_suffix(e.suffix())
                    .is_some_and(|base| names.iter().any(|m| m == base))
            })
        };
        names.iter().find(|n| !is_sibling(n)).cloned()
    }

    /// Answers `req`; a path a `_headers` `Basic-Auth` rule protects goes
    /// to `gate` first, before anything is looked up (`auth`), so that
    /// its answer is the gate's whether or not a file is there.
    /// Inlined into `FileServer::call`, its one caller: the call between
    /// them only moved the request and the reply through memory.
    #[inline(always)]
    pub fn call(&self, req: &Request<'_>, gate: Option<&dyn Gate>) -> Reply {
        let now = peregrine::now();
        let (rules, cached) = match self.look(req.path().as_bytes(), now) {
            Looked::Hit(res) => return Reply::Now(self.respond_hit(req, &res)),
            Looked::Rules(rules, cached) => (rules, cached),
        };
        if rules.has_auth() {
            if let Some(reply) = self.guarded(req, &rules, gate, now) {
                return reply;
            }
        }
        self.respond(req, &rules, now, cached, false)
    }

    /// `call` for a site with `Basic-Auth` rules: the gate's answer when
    /// one covers the path. Out of line, so that `respond` is inlined
    /// into `call` for every other request (92 instructions a request:
    /// `bench/instructions.sh`, f17-c50).
    #[cold]
    #[inline(never)]
    fn guarded(&self, req: &Request<'_>, rules: &Conventions, gate: Option<&dyn Gate>, now: Instant) -> Option<Reply> {
        // Matched on the normalised path: `/%61dmin/` is `/admin/`. A
        // path that does not normalise gets its 400 in `respond`.
        let users = path::normalize(req.path().as_bytes())
            .ok()
            .and_then(|p| rules.auth_for(&p.key()).cloned())?;
        let Some(gate) = gate else {
            return Some(Reply::Now(auth::ungated()));
        };
        Some(gate.guard(req, &users, &mut || self.respond_out_of_line(req, rules, now)))
    }

    /// `respond` for a cached file no rule shadows or gates.
    #[inline(always)]
    fn respond_hit(&self, req: &Request<'_>, res: &Resource) -> Response {
        let head = match reply::method(req) {
            Method::Get => false,
            Method::Head => true,
            Method::Answer(answer) => return answer,
        };
        // No field the steps read (the codec's note): no pass over the head,
        // and identity whole, here rather than through `reply`'s call.
        if !req.may_carry(peregrine::FieldNames::ALL) {
            return reply::reply_plain(&mut &*res, 200);
        }
        self.reply(res, &Fields::scan(req), head, 200)
    }

    /// `respond` for a gate, which takes an answer made now: a proxy rule
    /// (whose answer comes later) is not followed there (`rule_answer`).
    #[inline(never)]
    fn respond_out_of_line(&self, req: &Request<'_>, rules: &Conventions, now: Instant) -> Response {
        match self.respond(req, rules, now, Cached::NotLooked, true) {
            Reply::Now(answer) => answer,
            // `gated` kept every deferring path out.
            _ => Response::error(500),
        }
    }

    /// The answer for `req`; `gated`: a `_headers` Basic-Auth gate asks,
    /// and takes only an answer made now.
    #[inline(always)]
    fn respond(&self, req: &Request<'_>, rules: &Conventions, now: Instant, cached: Cached, gated: bool) -> Reply {
        // 1. Method (RFC 9110 §9.3).
        let head = match reply::method(req) {
            Method::Get => false,
            Method::Head => true,
            Method::Answer(answer) => return answer.into(),
        };
        let raw = req.path().as_bytes();
        let fields = if req.may_carry(peregrine::FieldNames::ALL) {
            Fields::scan(req)
        } else {
            Fields::default()
        };
        // A forced rule shadows any file, cached or not. A raw path
        // without escapes or dot segments is already its key.
        let plain = path::is_key(req.path());
        if plain && rules.has_forced() {
            if let Some(answer) = rules.forced(req.path(), req.query()) {
                return self.rule_answer(req, answer, req.path(), rules, &fields, gated);
            }
        }
        // Hot path: a cached file for exactly this raw path.
        let interval = self.options.revalidate_interval;
        let hit = match cached {
            Cached::NotLooked if plain => self.with_local(|l| l.cache.get(raw, &self.root, interval, now)),
            _ => None,
        };
        if let Some(res) = hit {
            return self.reply(&res, &fields, head, 200).into();
        }
        // 2. Path.
        let site_path = match path::normalize(raw) {
            Ok(p) => p,
            Err(e) => return bad_request(e.reason()).into(),
        };
        let key = site_path.key();
        if !plain && rules.has_forced() {
            if let Some(answer) = rules.forced(&key, req.query()) {
                return self.rule_answer(req, answer, &key, rules, &fields, gated);
            }
        }
        // Dotfiles and the convention files are not served (an archive
        // has no entry for them either): what a missing path gets.
        if site_path.is_hidden() || conventions::is_convention_file(&site_path.rel) {
            return self.missing(req, &site_path, &key, rules, &fields, gated);
        }
        // An alias (`/a/../f`, `/%66`) is answered from the entry of the
        // path it names: one entry and descriptor per file, not one per
        // spelling a client makes up (review finding: 25,600 of one file).
        let stored = stored_key(plain, &key);
        if !plain {
            if let Some(res) = self.with_local(|l| l.cache.get(stored.as_bytes(), &self.root, interval, now)) {
                return self.reply(&res, &fields, head, 200).into();
            }
        }
        // 3. Lookup.
        Reply::Now(match self.lookup(&site_path, rules, true) {
            Found::File(res) => {
                self.with_local(|l| l.cache.insert(stored.as_bytes(), res.clone()));
                self.reply(&res, &fields, head, 200)
            }
            Found::Redirect => {
                let mut location = path::encode(&format!("/{}/", site_path.rel));
                if location == "//" {
                    location.truncate(1);
                }
                moved(location, req.query())
            }
            Found::Canonical(location) => moved(location, req.query()),
            Found::Listing(dir) => {
                let shown = if site_path.rel.is_empty() {
                    "/".to_owned()
                } else {
                    format!("/{}/", site_path.rel)
                };
                let format = listing::Format::asked(req.query(), req.header("accept"));
                let order = listing::Order::asked(req.query());
                match listing::render(&dir, &shown, format, order, self.options.precompressed) {
                    Ok(page) => {
                        let mut r = Response::new(200)
                            .with_content_type(format.content_type())
                            .with_body(page)
                            .with_header("Cache-Control", "no-cache")
                            .with_header("Vary", "Accept")
                            .with_header("Content-Security-Policy", listing::CSP);
                        if self.options.security_headers {
                            for (n, v) in cache::SECURITY_HEADERS {
                                r = r.with_header(n, v);
                            }
                        }
                        r
                    }
                    Err(_) => Response::error(500),
                }
            }
            Found::Forbidden => Response::error(403),
            Found::Elsewhere => scope::crossing(),
            Found::Unavailable => unavailable(),
            Found::Missing => return self.missing(req, &site_path, &key, rules, &fields, gated),
        })
    }

    /// What a `_redirects` rule that applies answers: its redirect, or the
    /// file it names served with 200 (a rewrite) or 404, or a 400 for a
    /// target that would leave the site, or the request proxied (a proxy
    /// rule the operator allowed; under a `Basic-Auth` gate, which takes
    /// only answers made now, a 500 and a line in the error log). A
    /// rewrite's target that names no file gets the not-found page of the
    /// path asked for (`key`). A target another route of the site takes
    /// (or whose index or clean page it takes) is refused with 403
    /// (`scope`): its route's rules were not asked; a 404 rule's page
    /// there is left out as if it named no file.
    fn rule_answer(
        &self,
        req: &Request<'_>,
        answer: RuleAnswer,
        key: &str,
        rules: &Conventions,
        fields: &Fields<'_>,
        gated: bool,
    ) -> Reply {
        let head = req.method() == "HEAD";
        let (target, status) = match answer {
            RuleAnswer::Redirect(status, to) => return conventions::redirect(status, &to).into(),
            RuleAnswer::Refused => return conventions::refused_target().into(),
            RuleAnswer::Proxy(url) if gated => return conventions::gated_proxy_rule(&url).into(),
            RuleAnswer::Proxy(url) => return self.options.proxy_allow.forward(req, &url),
            RuleAnswer::Rewrite(target) => (target, 200),
            RuleAnswer::NotFound(target) => (target, 404),
        };
        let found = path::normalize(target.as_bytes())
            .ok()
            .filter(|p| !p.is_hidden() && !conventions::is_convention_file(&p.rel))
            .map(|p| {
                if self.is_elsewhere(&p.key()) {
                    Found::Elsewhere
                } else {
                    self.lookup(&p, rules, false)
                }
            });
        match found {
            Some(Found::File(res)) => self.reply(&res, fields, head, status),
            Some(Found::Elsewhere) if status == 200 => scope::crossing(),
            _ => self.not_found(key, rules, fields, head),
        }
        .into()
    }

    /// Finds what a normalised path names. `canonical`: a page asked for
    /// by a form clean URLs redirect from gets that redirect (not for a
    /// rewrite's target, which names the file itself).
    fn lookup(&self, p: &SitePath, rules: &Conventions, canonical: bool) -> Found {
        let file = match sys::open_beneath(&self.root, &p.rel, self.options.follow_symlinks) {
            Ok(f) => f,
            Err(e) => {
                return match found_for(&e) {
                    Found::Missing => self.clean_page(p, rules).unwrap_or(Found::Missing),
                    found => found,
                };
            }
        };
        let Ok(id) = sys::fstat(&file) else {
            return Found::Missing;
        };
        if id.is_file {
            if p.trailing_slash && !p.rel.is_empty() {
                // `/file.txt/` names nothing (nginx and Caddy: 404).
                return Found::Missing;
            }
            // `x.js.gz` beside `x.js` is a variant of it, not a resource
            // (`pack` makes no entry for it).
            if self.options.precompressed && self.is_sibling(&p.rel) {
                return Found::Missing;
            }
            drop(file);
            if canonical && self.options.clean_urls == CleanUrls::Redirect {
                if let Some(location) = self.canonical_form(&p.rel) {
                    return Found::Canonical(location);
                }
            }
            return self.load(&p.rel, rules);
        }
        if !id.is_dir {
            // FIFOs, sockets, devices are never served.
            return Found::Forbidden;
        }
        let index = |name: &String| {
            if p.rel.is_empty() {
                name.clone()
            } else {
                format!("{}/{name}", p.rel)
            }
        };
        if !p.trailing_slash {
            // `about.html` answers `/about` before the directory `about/`
            // does (Cloudflare Pages: each serves its own form).
            if let Some(found) = self.clean_page(p, rules) {
                return found;
            }
            // Redirected to `/dir/` only if something answers there; else
            // it is missing, as in an archive (which has no entry for a
            // directory without an index file).
            let answered = self.options.list_dirs || self.options.index.iter().any(|name| self.is_file(&index(name)));
            return if answered { Found::Redirect } else { Found::Missing };
        }
        for name in &self.options.index {
            let rel = index(name);
            match self.load(&rel, rules) {
                Found::Missing => continue,
                Found::File(_) if self.is_elsewhere(&format!("/{rel}")) => return Found::Elsewhere,
                found => return found,
            }
        }
        if self.options.list_dirs {
            Found::Listing(file)
        } else {
            Found::Missing
        }
    }

    /// Clean URLs: the page `NAME.html` for `/NAME` (no trailing slash),
    /// if there is one. `index` and the convention files have no clean
    /// form, as `pack` gives them none.
    fn clean_page(&self, p: &SitePath, rules: &Conventions) -> Option<Found> {
        if self.options.clean_urls == CleanUrls::Off || p.trailing_slash || p.file_name() == Some("index") {
            return None;
        }
        let rel = format!("{}.html", p.rel);
        if conventions::is_convention_file(&rel) {
            return None;
        }
        match self.load(&rel, rules) {
            Found::File(_) if self.is_elsewhere(&format!("/{rel}")) => Some(Found::Elsewhere),
            Found::File(res) => Some(Found::File(res)),
            _ => None,
        }
    }

    /// Whether the file at site path `key`, answered in place of the
    /// path asked for, is another route's (`scope`): never for a site
    /// without routes.
    fn is_elsewhere(&self, key: &str) -> bool {
        self.scope.as_ref().is_some_and(|s| !s.covers(key))
    }

    /// Where clean URLs redirect a file's own name to (`NAME.html` →
    /// `/NAME`, `DIR/index.html` → `/DIR/`), if that form serves it: no
    /// file `NAME` beside it, and `index.html` the first index file found.
    fn canonical_form(&self, rel: &str) -> Option<String> {
        let (folder, name) = match rel.rsplit_once('/') {
            Some((folder, name)) => (folder, name),
            None => ("", rel),
        };
        let in_folder = |n: &str| {
            if folder.is_empty() {
                n.to_owned()
            } else {
                format!("{folder}/{n}")
            }
        };
        if name == "index.html" {
            let first = self.options.index.iter().find(|n| self.is_file(&in_folder(n)));
            return (first.map(String::as_str) == Some("index.html")).then(|| {
                if folder.is_empty() {
                    "/".to_owned()
                } else {
                    path::encode(&format!("/{folder}/"))
                }
            });
        }
        let stem = name.strip_suffix(".html").filter(|s| !s.is_empty() && *s != "index")?;
        if conventions::is_convention_file(rel) || self.is_file(&in_folder(stem)) {
            return None;
        }
        Some(path::encode(&format!("/{}", in_folder(stem))))
    }

    /// Whether `rel` is a pre-compressed sibling of a file beside it.
    fn is_sibling(&self, rel: &str) -> bool {
        Encoding::ALL
            .iter()
            .any(|e| rel.strip_suffix(e.suffix()).is_some_and(|base| self.is_file(base)))
    }

    /// Whether `rel` opens, under the rules for symlinks, as a regular
    /// file: what would be served there, as `pack` has an entry only for
    /// what it follows (a `stat` would follow a symlink to `.env` or out of
    /// the root, and a directory would redirect to an index that is 404).
    fn is_file(&self, rel: &str) -> bool {
        sys::open_beneath(&self.root, rel, self.options.follow_symlinks)
            .and_then(|f| sys::fstat(&f))
            .is_ok_and(|id| id.is_file)
    }

    fn load(&self, rel: &str, rules: &Conventions) -> Found {
        let cc = self.cache_control(rel);
        let custom = rules.headers_for(&format!("/{rel}"));
        let fields = cache::Fields {
            cache_control: cc,
            security_headers: self.options.security_headers,
            etag_hash_bytes_max: self.options.etag_hash_bytes_max,
            custom: &custom,
        };
        let room = self.with_local(|l| l.cache.room());
        match cache::load(
            &self.root,
            rel,
            self.options.follow_symlinks,
            self.options.precompressed,
            self.options.compress,
            &fields,
            room,
        ) {
            Ok(Some(res)) => Found::File(Rc::new(res)),
            Ok(None) => Found::Missing,
            Err(e) => found_for(&e),
        }
    }

    fn cache_control(&self, rel: &str) -> Option<&str> {
        let site_path = format!("/{rel}");
        self.rules
            .iter()
            .find(|(m, _)| m.is_match(&site_path))
            .map(|(_, v)| v.as_str())
            .or(self.options.cache_control.as_deref())
    }

    /// A path that names nothing (`key`: its site path, `/a/b`): a
    /// `_redirects` rule, the deepest `_wildcard.*` above it, the SPA
    /// fallback for extension-less routes, else the 404 page.
    fn missing(
        &self,
        req: &Request<'_>,
        p: &SitePath,
        key: &str,
        rules: &Conventions,
        fields: &Fields<'_>,
        gated: bool,
    ) -> Reply {
        let head = req.method() == "HEAD";
        if let Some(answer) = rules.redirect_for(key, req.query()) {
            return self.rule_answer(req, answer, key, rules, fields, gated);
        }
        for folder in folders(key) {
            if let Some(name) = self.wildcard_name(folder) {
                let rel = if folder.is_empty() {
                    name
                } else {
                    format!("{folder}/{name}")
                };
                if let Some(res) = self.page(&rel, rules) {
                    return self.reply(&res, fields, head, 200).into();
                }
            }
        }
        if let Some(fallback) = &self.options.fallback {
            let is_route = p.file_name().is_none_or(|name| !name.contains('.'));
            if is_route {
                if let Some(res) = self.page(fallback, rules) {
                    return self.reply(&res, fields, head, 200).into();
                }
            }
        }
        self.not_found(key, rules, fields, head).into()
    }

    /// The not-found page for `key`, with status 404: the `--404` page,
    /// else the deepest folder's `404.html` above the path, the root's
    /// `_404.html` before its `404.html` (as `pack` stores them), else a
    /// short built-in page.
    fn not_found(&self, key: &str, rules: &Conventions, fields: &Fields<'_>, head: bool) -> Response {
        if let Some(page) = &self.options.not_found_page {
            return match self.page(page, rules) {
                Some(res) => self.reply(&res, fields, head, 404),
                None => Response::error(404),
            };
        }
        for folder in folders(key) {
            let names: &[&str] = if folder.is_empty() {
                &["_404.html", "404.html"]
            } else {
                &["404.html"]
            };
            for name in names {
                let rel = if folder.is_empty() {
                    (*name).to_owned()
                } else {
                    format!("{folder}/{name}")
                };
                if let Some(res) = self.page(&rel, rules) {
                    return self.reply(&res, fields, head, 404);
                }
            }
        }
        Response::error(404)
    }

    /// A page (a path within the root) through the cache like any file,
    /// under a key no request path can have (it starts with NUL), so that
    /// asking for `/_404.html` is not answered from it.
    fn page(&self, page: &str, rules: &Conventions) -> Option<Rc<Resource>> {
        let key = format!("\0/{}", page.trim_start_matches('/'));
        let now = peregrine::now();
        let interval = self.options.revalidate_interval;
        if let Some(res) = self.with_local(|l| l.cache.get(key.as_bytes(), &self.root, interval, now)) {
            return Some(res);
        }
        let p = path::normalize(&key.as_bytes()[1..]).ok()?;
        match self.load(&p.rel, rules) {
            Found::File(res) => {
                self.with_local(|l| l.cache.insert(key.as_bytes(), res.clone()));
                Some(res)
            }
            _ => None,
        }
    }

    /// Steps 4 to 7 for a file (`reply`): encoding, conditional, range,
    /// reply. `status` is 200, or 404 for the not-found page.
    fn reply(&self, res: &Resource, fields: &Fields<'_>, head: bool, status: u16) -> Response {
        // No `Accept-Encoding`: no coding is wanted (`want_coding` does
        // nothing), and no other step applies.
        if fields.is_empty() {
            return reply::reply_plain(&mut &*res, status);
        }
        res.want_coding(fields.accept_encoding);
        reply::reply(&mut &*res, fields, head, status)
    }
}

/// The folders above a site path `key` (`/a/b/c` and `/a/b/`: `a/b`,
/// `a`, then the root, ``), deepest first, leaving out hidden ones (a
/// dot segment, `.well-known` at the root aside): where wildcards and 404
/// pages are looked for.
fn folders(key: &str) -> impl Iterator<Item = &str> {
    let mut next = Some(&key[1..key.rfind('/').unwrap_or(0).max(1)]);
    std::iter::from_fn(move || {
        let folder = next?;
        next = (!folder.is_empty()).then(|| &folder[..folder.rfind('/').unwrap_or(0)]);
        Some(folder)
    })
    .filter(|folder| {
        !folder
            .split('/')
            .enumerate()
            .any(|(i, s)| s.starts_with('.') && !(i == 0 && s == ".well-known"))
    })
}

/// A 301 to `location` (already encoded), the request's query kept, as
/// nginx and Caddy keep it on a directory's redirect.
fn moved(mut location: String, query: Option<&str>) -> Response {
    if let Some(q) = query {
        location.push('?');
        location.push_str(q);
    }
    Response::new(301)
        .with_content_type("text/plain; charset=utf-8")
        .with_header("Location", location)
        .with_body("301 Moved Permanently\n")
}

/// What a normalised path names.
enum Found {
    File(Rc<Resource>),
    /// A directory asked for without its trailing slash.
    Redirect,
    /// A page asked for by a form clean URLs redirect from: its canonical
    /// form (encoded, no query).
    Canonical(String),
    Listing(File),
    Forbidden,
    /// A file of another name (an index, a clean URL's page, a rewrite's
    /// target) that another route of the site takes: refused (`scope`).
    Elsewhere,
    /// The process (EMFILE) or the system (ENFILE) has no descriptor
    /// left to open it with: says nothing of the file.
    Unavailable,
    Missing,
}

fn found_for(e: &std::io::Error) -> Found {
    match e.raw_os_error() {
        // EXDEV: a symlink leads out of the root; ELOOP: too many links; a
        // symlink to a dotfile is NotFound (no errno). All look like
        // nothing there, as for a missing file.
        Some(libc::EACCES) | Some(libc::EPERM) => Found::Forbidden,
        // Not a 404, which a cache may keep (RFC 9111 §4.2.2) for a file
        // that is there.
        Some(libc::EMFILE) | Some(libc::ENFILE) => {
            warn_exhausted(e);
            Found::Unavailable
        }
        _ => Found::Missing,
    }
}

/// The cache key of a request's site path `key` (`plain`: the raw path
/// was already `key`, as `path::is_key` says, and looked up as it is):
/// `key` itself when a raw path can be it; else (a name with `%` or `\`,
/// or under `.well-known`) `key` behind a byte no raw path starts with,
/// so that no raw path that would not normalise to it finds its entry
/// (`\0` is for `page`'s keys).
fn stored_key(plain: bool, key: &str) -> std::borrow::Cow<'_, str> {
    if plain || path::is_key(key) {
        key.into()
    } else {
        format!("\u{1}{key}").into()
    }
}

/// RFC 9110 §15.6.4: 503 for a temporary overload; descriptors come back
/// as connections close and caches let go, so the client may try again in
/// a second (as the proxy's answer when its upstream is full).
fn unavailable() -> Response {
    Response::error(503).with_header("Retry-After", "1")
}

/// Says that files cannot be opened for want of descriptors, at most once
/// a minute per process (it comes with every request while it lasts).
fn warn_exhausted(e: &std::io::Error) {
    static SAID_AT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let said = SAID_AT.load(std::sync::atomic::Ordering::Relaxed);
    if now >= said + 60
        && SAID_AT
            .compare_exchange(
                said,
                now,
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
            )
            .is_ok()
    {
        peregrine::log::error(format_args!(
            "cannot open files: {e}; answering 503 (raise the descriptor limit: LimitNOFILE=, ulimit -n)"
        ));
    }
}
