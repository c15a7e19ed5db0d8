//! An upstream's host name, resolved at start (never on an event loop) and
//! again every [`REFRESH_INTERVAL`] by one thread of the process's, as
//! nginx's `resolver ... valid=30s` does for a `proxy_pass` with a
//! variable and Caddy's dynamic upstreams do: an upstream that moves (a
//! container restarted, a DNS failover) is followed without a reload. A
//! lookup that fails, or finds no address, keeps the last good addresses
//! (and says so in the error log): a resolver hiccup never takes an
//! upstream away. The standard library's resolver gives no TTL, so the
//! interval is fixed. An IP literal is never looked up again. New
//! connections take the addresses of the moment (`Resolved::current`,
//! one short lock per connection made, not per request); connections
//! open stay where they are.
//!
//! Under the sandbox, names in `/etc/hosts` resolve again; DNS does not
//! (`connect` to a resolver is refused), so the start's addresses stay.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// How often a name is looked up again (nginx's `resolver valid=30s`).
pub(crate) const REFRESH_INTERVAL: Duration = Duration::from_secs(30);

/// A host and port, and the addresses they resolved to last.
#[derive(Debug)]
pub(crate) struct Resolved {
    host: String,
    port: u16,
    addrs: Mutex<Arc<[SocketAddr]>>,
}

impl Resolved {
    /// Looks `host` up now; a name (not an IP literal) is then looked up
    /// again every `REFRESH_INTERVAL` while the upstream lives.
    pub(crate) fn new(host: &str, port: u16) -> io::Result<Arc<Resolved>> {
        let addrs = lookup(host, port)?;
        if addrs.is_empty() {
            return Err(io::Error::other(format!("{host} resolves to no address")));
        }
        let resolved = Arc::new(Resolved {
            host: host.to_owned(),
            port,
            addrs: Mutex::new(addrs.into()),
        });
        if host.parse::<IpAddr>().is_err() {
            watch(&resolved);
        }
        Ok(resolved)
    }

    /// The addresses to connect to now, in order.
    pub(crate) fn current(&self) -> Arc<[SocketAddr]> {
        self.addrs.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Looks the name up again with `lookup`: `Ok(true)` if the addresses
    /// changed; on a failure or an empty answer the last good addresses
    /// stay, and the error says why.
    pub(crate) fn refresh(&self, lookup: impl Fn(&str, u16) -> io::Result<Vec<SocketAddr>>) -> Result<bool, String> {
        match lookup(&self.host, self.port) {
            Ok(addrs) if !addrs.is_empty() => {
                let mut current = self.addrs.lock().unwrap_or_else(|e| e.into_inner());
                let changed = **current != *addrs;
                if changed {
                    *current = addrs.into();
                }
                Ok(changed)
            }
            Ok(_) => Err(format!(
                "{} resolves to no address now; keeping {:?}",
                self.host,
                self.current()
            )),
            Err(e) => Err(format!(
                "cannot resolve {} now ({e}); keeping {:?}",
                self.host,
                self.current()
            )),
        }
    }
}

/// The system resolver's answer (blocking: off the loops only).
fn lookup(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    Ok((host, port).to_socket_addrs()?.collect())
}

/// The names the resolver thread looks up again.
static WATCHED: Mutex<Vec<Weak<Resolved>>> = Mutex::new(Vec::new());

/// Adds `resolved` to the names the resolver thread looks up again.
fn watch(resolved: &Arc<Resolved>) {
    WATCHED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Arc::downgrade(resolved));
}

/// Starts the resolver thread, once per process, when a server starts
/// with names to look up (not when an upstream is parsed: a program
/// sandboxes itself between reading its configuration and starting, and a
/// sandbox wants no thread before it). Names parsed later (a reload's)
/// join the same thread, or start it.
pub(crate) fn start() {
    static THREAD: OnceLock<()> = OnceLock::new();
    if WATCHED.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
        return;
    }
    THREAD.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("peregrine-resolve".into())
            .spawn(|| loop {
                std::thread::sleep(REFRESH_INTERVAL);
                let names: Vec<Arc<Resolved>> = {
                    let mut watched = WATCHED.lock().unwrap_or_else(|e| e.into_inner());
                    // Upstreams of finished generations (and of checks)
                    // are dropped here.
                    watched.retain(|w| w.strong_count() > 0);
                    watched.iter().filter_map(Weak::upgrade).collect()
                };
                for name in names {
                    match name.refresh(lookup) {
                        Ok(true) => log::info!("proxy: {} now resolves to {:?}", name.host, name.current()),
                        Ok(false) => {}
                        Err(why) => log::warn!("proxy: {why}"),
                    }
                }
            });
        if let Err(e) = spawned {
            log::warn!("proxy: no thread to resolve upstream names again ({e}); the start's addresses stay");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    #[test]
    fn a_new_answer_replaces_the_addresses_and_a_failure_keeps_the_last_good_ones() {
        let r = Resolved {
            host: "api.internal".into(),
            port: 80,
            addrs: Mutex::new(vec![at(1)].into()),
        };
        assert_eq!(r.refresh(|_, _| Ok(vec![at(1)])), Ok(false));
        assert_eq!(r.refresh(|_, _| Ok(vec![at(2), at(3)])), Ok(true));
        assert_eq!(&*r.current(), &[at(2), at(3)]);
        let failed = r.refresh(|_, _| Err(io::Error::other("SERVFAIL"))).unwrap_err();
        assert!(
            failed.contains("cannot resolve api.internal now (SERVFAIL); keeping"),
            "{failed}"
        );
        let empty = r.refresh(|_, _| Ok(Vec::new())).unwrap_err();
        assert!(empty.contains("resolves to no address now"), "{empty}");
        assert_eq!(&*r.current(), &[at(2), at(3)]);
    }

    #[test]
    fn a_literal_is_resolved_to_itself() {
        let r = Resolved::new("127.0.0.1", 9000).unwrap();
        assert_eq!(&*r.current(), &[SocketAddr::from(([127, 0, 0, 1], 9000))]);
    }
}
