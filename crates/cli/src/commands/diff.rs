//! `peregrine archive diff OLD NEW`: what a deploy changes, URL by URL.
//!
//! Each archive is read into the answers it gives: per site (named as
//! `archive ls` names it), path and encoding, a status, the header fields
//! `pack` fixed, and the body's length and hash (a redirect: its status
//! and location). Two archives packed from the same tree are byte-identical
//! (FORMAT.md, "Determinism"), so an unchanged tree gives an empty diff,
//! and one edited file gives its own path, once per encoding stored.
//!
//! Credentials never reach the output: the values of `Set-Cookie`,
//! `Authorization` and `Proxy-Authorization` (and of any field whose name
//! says `auth`) are compared but shown as `<redacted>`, and a `Basic-Auth`
//! rule (`_headers`) as its count of users, with how many were added,
//! removed, or given another password: never a name's hash.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde_json::{json, Value};

use peregrine_archive::format::{FLAG_NOT_FOUND, KIND_AUTH, KIND_PATTERN, KIND_REDIRECT, KIND_REVOKED};
use peregrine_archive::{Archive, Mode};

use super::archive::{shown_key, site_labels, ENCODINGS};

/// Where an answer is: site, path, encoding (`-` for a redirect).
type Key = (String, String, &'static str);

/// What one URL answers, as far as a client can tell.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    /// Header fields in stored order, names lowercased.
    fields: Vec<(String, String)>,
    /// Body length and XXH3 hash (resources).
    body: Option<(u64, u64)>,
    /// Where a redirect sends.
    location: Option<String>,
    /// A `Basic-Auth` rule's users: (name, hash), compared, never shown.
    users: Option<Vec<(String, String)>>,
    /// A path `pack --revoke` named (no answer of its own: what a previous
    /// generation kept after the swap must not answer).
    revoked: bool,
}

/// Prints the difference between the archives at `old` and `new` (as
/// lines, or one JSON object); returns whether they differ.
pub(crate) fn diff(old: &Path, new: &Path, as_json: bool) -> anyhow::Result<bool> {
    let read = |p: &Path| -> anyhow::Result<BTreeMap<Key, Answer>> {
        let a = Archive::open(p, Mode::Map).with_context(|| format!("{}", p.display()))?;
        Ok(answers(&a))
    };
    let (before, after) = (read(old)?, read(new)?);
    let mut added = Vec::new();
    let mut removed = Vec::new();
    let mut changed = Vec::new();
    for (key, now) in &after {
        match before.get(key) {
            None => added.push((key, now)),
            Some(was) if was != now => changed.push((key, changes(was, now))),
            Some(_) => {}
        }
    }
    for (key, was) in &before {
        if !after.contains_key(key) {
            removed.push((key, was));
        }
    }
    let differ = !(added.is_empty() && removed.is_empty() && changed.is_empty());
    if as_json {
        let row = |(site, path, encoding): &Key| json!({"site": site, "path": path, "encoding": encoding});
        let with = |key: &Key, a: &Answer| {
            let mut v = row(key);
            if a.revoked {
                v["revoked"] = json!(true);
                return v;
            }
            v["status"] = json!(a.status);
            if let Some((len, _)) = a.body {
                v["body_bytes"] = json!(len);
            }
            if let Some(to) = &a.location {
                v["location"] = json!(to);
            }
            if let Some(users) = &a.users {
                v["users"] = json!(users.len());
            }
            v
        };
        let out = json!({
            "added": added.iter().map(|(k, a)| with(k, a)).collect::<Vec<Value>>(),
            "removed": removed.iter().map(|(k, a)| with(k, a)).collect::<Vec<Value>>(),
            "changed": changed.iter().map(|(k, c)| {
                let mut v = row(k);
                v["changes"] = Value::Array(c.iter().map(Change::to_json).collect());
                v
            }).collect::<Vec<Value>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        let shown = |(site, path, encoding): &Key| format!("{site} {path} [{encoding}]");
        let summary = |a: &Answer| match (&a.location, a.body) {
            _ if a.revoked => "revoked".to_owned(),
            _ if a.users.is_some() => format!("{}, Basic-Auth: {}", a.status, count(a.users.as_deref())),
            (Some(to), _) => format!("{} -> {to}", a.status),
            (None, Some((len, _))) => format!("{}, {len} bytes", a.status),
            (None, None) => a.status.to_string(),
        };
        for (k, a) in &added {
            println!("added    {}: {}", shown(k), summary(a));
        }
        for (k, a) in &removed {
            println!("removed  {}: {}", shown(k), summary(a));
        }
        for (k, c) in &changed {
            let what: Vec<String> = c.iter().map(Change::to_text).collect();
            println!("changed  {}: {}", shown(k), what.join("; "));
        }
    }
    eprintln!(
        "peregrine: {} added, {} removed, {} changed",
        added.len(),
        removed.len(),
        changed.len()
    );
    Ok(differ)
}

/// Every answer of `a`, by site, path and encoding.
fn answers(a: &Archive) -> BTreeMap<Key, Answer> {
    let labels = site_labels(a);
    let mut out = BTreeMap::new();
    for e in a.entries() {
        let site = labels
            .get(&e.site())
            .cloned()
            .unwrap_or_else(|| format!("site {}", e.site()));
        let path = shown_key(&e);
        if e.kind() == KIND_REVOKED {
            let answer = Answer {
                status: 0,
                fields: Vec::new(),
                body: None,
                location: None,
                users: None,
                revoked: true,
            };
            out.insert((site, path, "-"), answer);
            continue;
        }
        if e.kind() == KIND_AUTH {
            // `user:hash` pairs (`Users::text`), compared as they are.
            let users = String::from_utf8_lossy(e.location())
                .split_whitespace()
                .filter_map(|pair| pair.split_once(':'))
                .map(|(u, h)| (u.to_owned(), h.to_owned()))
                .collect();
            let answer = Answer {
                status: e.status(),
                fields: Vec::new(),
                body: None,
                location: None,
                users: Some(users),
                revoked: false,
            };
            out.insert((site, path, "-"), answer);
            continue;
        }
        if e.kind() == KIND_REDIRECT || e.kind() == KIND_PATTERN {
            let answer = Answer {
                status: e.status(),
                fields: Vec::new(),
                body: None,
                location: Some(super::archive::shown_bytes(e.location())),
                users: None,
                revoked: false,
            };
            out.insert((site, path, "-"), answer);
            continue;
        }
        let status = if e.flags() & FLAG_NOT_FOUND != 0 { 404 } else { 200 };
        for (i, encoding) in ENCODINGS.iter().enumerate() {
            let Some(v) = e.variant(i) else { continue };
            let head = a.slice(v.head_off, u64::from(v.head_len));
            let answer = Answer {
                status,
                fields: fields(head),
                body: Some((v.body_len, v.body_hash)),
                location: None,
                users: None,
                revoked: false,
            };
            out.insert((site.clone(), path.clone(), encoding), answer);
        }
    }
    out
}

/// A stored head's `Name: value` lines.
fn fields(head: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(head)
        .split("\r\n")
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect()
}

/// One way an answer changed.
#[derive(Debug)]
enum Change {
    Status(u16, u16),
    Location(String, String),
    Body {
        old: (u64, u64),
        new: (u64, u64),
    },
    /// A `Basic-Auth` rule's users: counts before and after, and how many
    /// were added, removed, or given another password (`count` says it).
    Users {
        old: usize,
        new: usize,
        added: usize,
        removed: usize,
        changed: usize,
    },
    /// A field's values before and after (`None`: absent).
    Field {
        name: String,
        old: Option<String>,
        new: Option<String>,
    },
}

impl Change {
    fn to_text(&self) -> String {
        let quoted = |v: &Option<String>| v.as_ref().map_or("(none)".to_owned(), |v| format!("{v:?}"));
        match self {
            Change::Status(a, b) => format!("status {a} -> {b}"),
            Change::Location(a, b) => format!("location {a} -> {b}"),
            Change::Body { old, new } if old.0 == new.0 => format!("body changed ({} bytes)", new.0),
            Change::Body { old, new } => format!("body {} -> {} bytes", old.0, new.0),
            Change::Users {
                old,
                new,
                added,
                removed,
                changed,
            } => format!(
                "Basic-Auth: {} -> {} ({added} added, {removed} removed, {changed} with another password)",
                users_n(*old),
                users_n(*new)
            ),
            Change::Field { name, old, new } => format!("{name}: {} -> {}", quoted(old), quoted(new)),
        }
    }

    fn to_json(&self) -> Value {
        match self {
            Change::Status(a, b) => json!({"what": "status", "old": a, "new": b}),
            Change::Location(a, b) => json!({"what": "location", "old": a, "new": b}),
            Change::Body { old, new } => json!({
                "what": "body",
                "old_bytes": old.0, "new_bytes": new.0,
                "old_hash": format!("{:016x}", old.1), "new_hash": format!("{:016x}", new.1),
            }),
            Change::Users {
                old,
                new,
                added,
                removed,
                changed,
            } => json!({
                "what": "basic-auth", "old_users": old, "new_users": new,
                "added": added, "removed": removed, "changed": changed,
            }),
            Change::Field { name, old, new } => json!({"what": "field", "name": name, "old": old, "new": new}),
        }
    }
}

/// What differs between two answers at one place.
fn changes(was: &Answer, now: &Answer) -> Vec<Change> {
    let mut out = Vec::new();
    if was.status != now.status {
        out.push(Change::Status(was.status, now.status));
    }
    if was.location != now.location {
        let show = |l: &Option<String>| l.clone().unwrap_or_default();
        out.push(Change::Location(show(&was.location), show(&now.location)));
    }
    if let (Some(old), Some(new)) = (&was.users, &now.users) {
        if old != new {
            let has = |list: &[(String, String)], name: &str| list.iter().any(|(u, _)| u == name);
            let changed = new
                .iter()
                .filter(|pair| has(old, &pair.0) && !old.contains(pair))
                .count();
            out.push(Change::Users {
                old: old.len(),
                new: new.len(),
                added: new.iter().filter(|(u, _)| !has(old, u)).count(),
                removed: old.iter().filter(|(u, _)| !has(new, u)).count(),
                changed,
            });
        }
    }
    if let (Some(old), Some(new)) = (was.body, now.body) {
        if old != new {
            out.push(Change::Body { old, new });
        }
    }
    // Fields by name, in the order the new head has them, then the ones
    // it dropped; a repeated field's values joined as a client would.
    let values = |a: &Answer, name: &str| -> Option<String> {
        let v: Vec<&str> = a
            .fields
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect();
        (!v.is_empty()).then(|| v.join(", "))
    };
    let mut names: Vec<&str> = Vec::new();
    for (n, _) in now.fields.iter().chain(&was.fields) {
        if !names.contains(&n.as_str()) {
            names.push(n);
        }
    }
    for name in names {
        let (old, new) = (values(was, name), values(now, name));
        if old != new {
            let (old, new) = if is_secret(name) {
                let hide = |v: Option<String>| v.map(|_| "<redacted>".to_owned());
                (hide(old), hide(new))
            } else {
                (old, new)
            };
            out.push(Change::Field {
                name: name.to_owned(),
                old,
                new,
            });
        }
    }
    out
}

/// `<N users>`.
fn users_n(n: usize) -> String {
    format!("<{n} user{}>", if n == 1 { "" } else { "s" })
}

/// A rule's users as `<N users>`.
fn count(users: Option<&[(String, String)]>) -> String {
    users_n(users.map_or(0, <[_]>::len))
}

/// A field whose value is a credential.
fn is_secret(name: &str) -> bool {
    matches!(name, "set-cookie" | "authorization" | "proxy-authorization" | "cookie") || name.contains("auth")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(fields: &[(&str, &str)], body: (u64, u64)) -> Answer {
        Answer {
            status: 200,
            fields: fields.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
            body: Some(body),
            location: None,
            users: None,
            revoked: false,
        }
    }

    /// A `Basic-Auth` rule's change is counted, never shown: no name's
    /// hash in the text or the JSON.
    #[test]
    fn basic_auth_users_are_counted_never_shown() {
        let rule = |pairs: &[(&str, &str)]| Answer {
            status: 401,
            fields: Vec::new(),
            body: None,
            location: None,
            users: Some(pairs.iter().map(|(u, h)| (u.to_string(), h.to_string())).collect()),
            revoked: false,
        };
        let was = rule(&[("alice", "$2b$10$aaa"), ("bob", "$2b$10$bbb")]);
        let now = rule(&[("alice", "$2b$10$AAA"), ("carol", "$2b$10$ccc"), ("dave", "$2b$10$ddd")]);
        let c = changes(&was, &now);
        let text: Vec<String> = c.iter().map(Change::to_text).collect();
        assert_eq!(
            text,
            ["Basic-Auth: <2 users> -> <3 users> (2 added, 1 removed, 1 with another password)"]
        );
        let json = serde_json::to_string(&c[0].to_json()).unwrap();
        assert!(!json.contains('$') && !json.contains("alice"), "{json}");
        assert!(changes(&was, &was).is_empty());
    }

    #[test]
    fn fields_are_compared_by_name_and_credentials_are_redacted() {
        let was = answer(
            &[
                ("cache-control", "no-cache"),
                ("set-cookie", "s=old-secret"),
                ("x-gone", "1"),
            ],
            (3, 1),
        );
        let now = answer(
            &[("cache-control", "max-age=60"), ("set-cookie", "s=new-secret")],
            (4, 2),
        );
        let text: Vec<String> = changes(&was, &now).iter().map(Change::to_text).collect();
        assert_eq!(
            text,
            [
                "body 3 -> 4 bytes",
                "cache-control: \"no-cache\" -> \"max-age=60\"",
                "set-cookie: \"<redacted>\" -> \"<redacted>\"",
                "x-gone: \"1\" -> (none)",
            ]
        );
        assert!(changes(&was, &was).is_empty());
    }

    #[test]
    fn a_stored_head_is_read_as_its_lines() {
        assert_eq!(
            fields(b"Content-Type: text/html\r\nETag: \"3-ab\"\r\n"),
            [
                ("content-type".to_owned(), "text/html".to_owned()),
                ("etag".to_owned(), "\"3-ab\"".to_owned())
            ]
        );
    }
}
