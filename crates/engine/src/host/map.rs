//! Values by host name: exact names, one-label wildcards and a default,
//! for choosing a request's site by its normalised host.
//!
//! A wildcard is the whole leftmost label, `*.example.com`, and covers
//! exactly one label: `a.example.com`, not `example.com` nor
//! `a.b.example.com`. That is what a certificate's wildcard covers (RFC
//! 6125 §6.4.3, as webpki checks it) and what Caddy's site addresses do,
//! so a site and its certificate cover the same names. A lookup tries the
//! exact name, then the wildcard over its parent, then the default: a
//! caller with no default answers an unknown host (421 over TLS, 404 in
//! cleartext, issue 24).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt;

use super::{normalize_name, HostBuf, HostName};

/// Why `a.*.example.com`, `f*.example.com` or `*` is no pattern.
const PARTIAL_WILDCARD: &str = "a wildcard is a whole leftmost label: `*.example.com`";

/// See the module's documentation.
///
/// ```
/// use peregrine::host::{normalize, HostMap};
/// let mut sites = HostMap::new();
/// sites.insert("Example.com", "main").unwrap();
/// sites.insert("*.example.com", "subdomains").unwrap();
/// sites.set_default("fallback").unwrap();
/// let site = |host: &str| sites.get(&normalize(host.as_bytes()).unwrap()).copied();
/// assert_eq!(site("EXAMPLE.COM.:443"), Some("main"));
/// assert_eq!(site("www.example.com"), Some("subdomains"));
/// assert_eq!(site("a.b.example.com"), Some("fallback"));
/// ```
#[derive(Clone, Debug)]
pub struct HostMap<T> {
    exact: HashMap<Box<str>, T>,
    /// By the wildcard's parent: `example.com` for `*.example.com`.
    wildcard: HashMap<Box<str>, T>,
    default: Option<T>,
}

impl<T> Default for HostMap<T> {
    fn default() -> Self {
        HostMap {
            exact: HashMap::new(),
            wildcard: HashMap::new(),
            default: None,
        }
    }
}

impl<T> HostMap<T> {
    /// An empty map: every lookup finds nothing.
    pub fn new() -> Self {
        HostMap::default()
    }

    /// Adds `value` for `pattern`: a name (`example.com`, `127.0.0.1`,
    /// `[::1]`) or a wildcard (`*.example.com`), normalised as a host is
    /// (`*.Bücher.example` is `*.xn--bcher-kva.example`), without a port.
    /// A name already in the map, in any spelling, is refused.
    pub fn insert(&mut self, pattern: &str, value: T) -> Result<(), HostMapError> {
        let invalid = |reason| HostMapError::Invalid {
            pattern: pattern.into(),
            reason,
        };
        let (wild, name) = match pattern.strip_prefix("*.") {
            Some(parent) => (true, parent),
            None => (false, pattern),
        };
        if name.contains('*') {
            return Err(invalid(PARTIAL_WILDCARD));
        }
        let mut buf = HostBuf::new();
        let name = normalize_name(name.as_bytes(), &mut buf).map_err(|e| invalid(e.reason()))?;
        if wild && name.is_ip() {
            return Err(invalid("a wildcard covers names, not IP addresses"));
        }
        let map = if wild { &mut self.wildcard } else { &mut self.exact };
        match map.entry(name.as_str().into()) {
            Entry::Occupied(_) => {
                let name = if wild { format!("*.{name}") } else { name.to_string() };
                Err(HostMapError::Duplicate(name.into()))
            }
            Entry::Vacant(entry) => {
                entry.insert(value);
                Ok(())
            }
        }
    }

    /// Sets the value for a host that no name or wildcard covers. There
    /// is one default at most.
    pub fn set_default(&mut self, value: T) -> Result<(), HostMapError> {
        if self.default.is_some() {
            return Err(HostMapError::SecondDefault);
        }
        self.default = Some(value);
        Ok(())
    }

    /// The value for a host no name or wildcard covers, if one was set.
    pub fn default_value(&self) -> Option<&T> {
        self.default.as_ref()
    }

    /// The value for `host`: its exact name's, else its parent's
    /// wildcard's, else the default's.
    pub fn get(&self, host: &HostName<'_>) -> Option<&T> {
        let name = host.as_str();
        // An address's "parent" (`0.0.1` of `127.0.0.1`, `1.2.3.4]` of
        // `[::ffff:1.2.3.4]`) is never a wildcard's: `insert` refuses it.
        let wild = || name.split_once('.').and_then(|(_, parent)| self.wildcard.get(parent));
        self.exact.get(name).or_else(wild).or(self.default.as_ref())
    }
}

/// Why [`HostMap::insert`] or [`HostMap::set_default`] refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostMapError {
    /// The pattern is no name or wildcard.
    Invalid {
        /// The pattern as given.
        pattern: Box<str>,
        /// Why, for a person.
        reason: &'static str,
    },
    /// The name (normalised: `example.com`, `*.example.com`) is in the map
    /// already.
    Duplicate(Box<str>),
    /// A default is set already.
    SecondDefault,
}

impl fmt::Display for HostMapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostMapError::Invalid { pattern, reason } => write!(f, "{pattern:?}: {reason}"),
            HostMapError::Duplicate(name) => write!(f, "{name} is named twice"),
            HostMapError::SecondDefault => f.write_str("a second default"),
        }
    }
}

impl std::error::Error for HostMapError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::normalize;

    fn site(map: &HostMap<&'static str>, authority: &str) -> Option<&'static str> {
        map.get(&normalize(authority.as_bytes()).unwrap()).copied()
    }

    fn map(patterns: &[(&str, &'static str)]) -> HostMap<&'static str> {
        let mut map = HostMap::new();
        for &(pattern, value) in patterns {
            map.insert(pattern, value).unwrap();
        }
        map
    }

    #[test]
    fn the_exact_name_comes_first_then_the_wildcard_then_the_default() {
        let mut sites = map(&[
            ("*.example.com", "wild"),
            ("www.example.com", "www"),
            ("example.com", "apex"),
        ]);
        assert_eq!(site(&sites, "www.example.com"), Some("www"));
        assert_eq!(site(&sites, "api.example.com"), Some("wild"));
        assert_eq!(site(&sites, "example.com"), Some("apex"));
        assert_eq!(site(&sites, "other.test"), None, "no default: nothing");
        sites.set_default("default").unwrap();
        assert_eq!(site(&sites, "other.test"), Some("default"));
        assert_eq!(site(&sites, "127.0.0.1"), Some("default"));
        assert_eq!(site(&sites, "www.example.com"), Some("www"));
        assert_eq!(sites.set_default("again"), Err(HostMapError::SecondDefault));
    }

    #[test]
    fn a_wildcard_covers_exactly_one_leftmost_label() {
        let sites = map(&[("*.example.com", "wild"), ("*.a.example.com", "deeper")]);
        assert_eq!(site(&sites, "a.example.com"), Some("wild"));
        assert_eq!(site(&sites, "b.a.example.com"), Some("deeper"));
        assert_eq!(site(&sites, "example.com"), None);
        assert_eq!(site(&sites, "c.b.example.com"), None);
        assert_eq!(site(&sites, "xexample.com"), None);
    }

    #[test]
    fn every_spelling_of_a_name_finds_its_site() {
        let sites = map(&[
            ("Example.COM.", "example"),
            ("*.Bücher.example", "books"),
            ("127.0.0.1", "v4"),
            ("[0:0::1]", "v6"),
        ]);
        for (authority, want) in [
            ("example.com", "example"),
            ("EXAMPLE.com:8443", "example"),
            ("example.com.", "example"),
            ("a.xn--bcher-kva.example", "books"),
            ("A.BÜCHER.example.:443", "books"),
            ("www.XN--BCHER-KVA.example", "books"),
            ("127.0.0.1:8080", "v4"),
            ("[::1]:443", "v6"),
            ("[0000::0001]", "v6"),
        ] {
            assert_eq!(site(&sites, authority), Some(want), "{authority}");
        }
    }

    #[test]
    fn a_name_given_twice_in_any_spelling_is_refused() {
        let mut sites = map(&[("example.com", "a"), ("*.example.com", "b")]);
        assert_eq!(
            sites.insert("EXAMPLE.com.", "c"),
            Err(HostMapError::Duplicate("example.com".into()))
        );
        assert_eq!(
            sites.insert("*.Example.Com", "c"),
            Err(HostMapError::Duplicate("*.example.com".into()))
        );
        assert_eq!(sites.insert("bücher.example", "d"), Ok(()));
        let err = sites.insert("xn--bcher-kva.example", "e").unwrap_err();
        assert_eq!(err, HostMapError::Duplicate("xn--bcher-kva.example".into()));
        assert_eq!(err.to_string(), "xn--bcher-kva.example is named twice");
        // The first value stays.
        assert_eq!(site(&sites, "example.com"), Some("a"));
    }

    #[test]
    fn a_pattern_that_is_no_name_or_wildcard_is_refused() {
        let mut sites = HostMap::new();
        for (pattern, reason) in [
            ("*", PARTIAL_WILDCARD),
            ("*.", "empty host"),
            ("a.*.example.com", PARTIAL_WILDCARD),
            ("f*.example.com", PARTIAL_WILDCARD),
            ("*.*.example.com", PARTIAL_WILDCARD),
            ("example.com:80", "port where only a host name belongs"),
            ("*.example.com:443", "port where only a host name belongs"),
            ("*.127.0.0.1", "a wildcard covers names, not IP addresses"),
            ("*.[::1]", "a wildcard covers names, not IP addresses"),
            ("*.0.0.1", "host ending in a number that is no IPv4 address"),
            (".example.com", "empty label in host"),
            ("", "empty host"),
        ] {
            assert_eq!(
                sites.insert(pattern, ()),
                Err(HostMapError::Invalid {
                    pattern: pattern.into(),
                    reason
                }),
                "{pattern:?}"
            );
        }
    }
}
