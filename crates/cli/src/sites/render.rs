//! What `check-config` prints of the sites, after the settings: each site
//! a `[[site]]` table and each of its routes a `[[site.route]]` table, in
//! the order they are tried, every setting with where it came from. The
//! values are the effective ones (inherited ones written out, paths as
//! resolved), so the output is a configuration that gives the same sites.

use std::fmt::Write as _;

use super::{Origin, SiteSpec};
use crate::config;

/// One setting as `check-config` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shown {
    /// The file key.
    pub(crate) key: &'static str,
    /// The value as TOML.
    pub(crate) value: String,
    pub(crate) origin: Origin,
}

impl Shown {
    pub(crate) fn new(key: &'static str, value: String, origin: Origin) -> Self {
        Shown { key, value, origin }
    }
}

/// The sites as TOML tables; empty for none (one root for every host).
pub(crate) fn render(sites: &[SiteSpec]) -> String {
    if sites.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    let defaults = match sites.iter().find(|s| s.default) {
        Some(site) => format!("the default site ({}) answers", site.names[0]),
        None => "no site is the default, so the answer is 421 over TLS and 404 in cleartext".to_owned(),
    };
    let _ = writeln!(
        out,
        "\n# {} (names in normal form, paths as resolved); a host no site names: {defaults}.",
        crate::messages::counted(sites.len(), "site")
    );
    for site in sites {
        let _ = writeln!(out, "\n[[site]]  # {}", site.given);
        write_settings(&mut out, &site.shown);
        if !site.routes.is_empty() {
            let _ = writeln!(
                out,
                "# {}, in the order they are tried (most specific first); other paths: the site's root",
                crate::messages::counted(site.routes.len(), "route")
            );
        }
        for route in &site.routes {
            let _ = writeln!(out, "\n[[site.route]]  # {}", route.given);
            write_settings(&mut out, &route.shown);
        }
    }
    out
}

fn write_settings(out: &mut String, shown: &[Shown]) {
    for s in shown {
        let _ = writeln!(out, "{} = {}  # {}", config::toml_key(s.key), s.value, s.origin);
    }
}

/// `["a", "b"]`.
pub(crate) fn toml_list(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|i| config::toml_string(i)).collect();
    format!("[{}]", items.join(", "))
}
