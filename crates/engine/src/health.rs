//! Whether a running server is alive and whether it is ready, for the
//! health endpoints a program serves (`peregrine`'s `/livez` and
//! `/readyz`): asked from another thread, never on the request path.
//!
//! Alive: every worker's loop has turned lately. Each worker stamps its
//! own [`Heartbeat`] after every wake-up with the time it already took for
//! the turn (two relaxed stores a turn, no system call), and marks it
//! "waiting" before it sleeps in `epoll_wait`: a loop with nothing to do
//! is idle, not dead, so it need not wake up to prove it. A loop stuck in a
//! handler (a deadlock, a blocking call, an endless loop) keeps the stamp
//! of the turn it is stuck in, which grows old. A loop that has ended
//! (its drain is done: a worker with nothing left in flight ends before
//! the others) is marked "exited": done, not stuck, however long the other
//! workers drain.
//!
//! Ready: not draining (shutdown or hand-over not begun) and no name
//! waiting for its first ACME certificate ([`TlsConfig::set_waiting`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::tls::TlsConfig;

/// The heartbeat's value while its loop waits for events.
const WAITING: u64 = u64::MAX;

/// The heartbeat's value once its loop has ended.
const EXITED: u64 = u64::MAX - 1;

/// What the heartbeats count from.
static EPOCH: OnceLock<Instant> = OnceLock::new();

fn epoch() -> Instant {
    *EPOCH.get_or_init(Instant::now)
}

fn millis(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(epoch()).as_millis()).unwrap_or(EXITED - 1)
}

/// One worker's last turn: milliseconds since [`EPOCH`], [`WAITING`] or
/// [`EXITED`].
/// Each in its own allocation, so that workers stamping theirs share no
/// cache line.
#[derive(Debug)]
pub(crate) struct Heartbeat(AtomicU64);

impl Heartbeat {
    pub(crate) fn new() -> Arc<Heartbeat> {
        Arc::new(Heartbeat(AtomicU64::new(millis(Instant::now()))))
    }

    /// The loop woke up at `now` and is working.
    pub(crate) fn beat(&self, now: Instant) {
        self.0.store(millis(now), Ordering::Relaxed);
    }

    /// The loop is about to wait for events: alive however long it waits.
    pub(crate) fn wait(&self) {
        self.0.store(WAITING, Ordering::Relaxed);
    }

    /// The loop has ended (its drain is done): not stuck.
    pub(crate) fn exit(&self) {
        self.0.store(EXITED, Ordering::Relaxed);
    }

    /// Whether the loop waits or has ended, or turned within `within` of
    /// `now`.
    fn is_live(&self, now: Instant, within: Duration) -> bool {
        match self.0.load(Ordering::Relaxed) {
            WAITING | EXITED => true,
            ms => millis(now).saturating_sub(ms) <= u64::try_from(within.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// A running server's health, from any thread ([`crate::Running::health`]).
#[derive(Clone, Debug)]
pub struct Health {
    pub(crate) beats: Vec<Arc<Heartbeat>>,
    /// The server's shutdown flag: set when a shutdown or hand-over begins.
    pub(crate) draining: Arc<AtomicBool>,
    pub(crate) tls: Vec<TlsConfig>,
}

impl Health {
    /// How many workers have neither turned within `within` nor wait for
    /// events nor have ended: stuck. 0 means alive.
    pub fn n_stuck(&self, within: Duration) -> usize {
        let now = Instant::now();
        self.beats.iter().filter(|b| !b.is_live(now, within)).count()
    }

    /// How many workers the server has.
    pub fn n_workers(&self) -> usize {
        self.beats.len()
    }

    /// Whether shutdown (or a hand-over to a newer server) has begun.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// The names still waiting for their first ACME certificate, across
    /// the server's TLS addresses.
    pub fn waiting_names(&self) -> Vec<String> {
        self.tls.iter().flat_map(TlsConfig::waiting_names).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_loop_is_alive_and_a_stuck_one_is_not() {
        let beat = Heartbeat::new();
        let start = Instant::now();
        beat.beat(start);
        assert!(beat.is_live(start + Duration::from_millis(1999), Duration::from_secs(2)));
        assert!(!beat.is_live(start + Duration::from_millis(2100), Duration::from_secs(2)));
        beat.wait();
        assert!(beat.is_live(start + Duration::from_secs(3600), Duration::from_secs(2)));
    }

    /// A worker whose drain is done ends while another still drains (a
    /// download): it is done, not stuck, long after its last turn.
    #[test]
    fn an_exited_loop_is_not_stuck() {
        let beat = Heartbeat::new();
        let start = Instant::now();
        beat.beat(start);
        beat.exit();
        assert!(beat.is_live(start + Duration::from_secs(3600), Duration::from_secs(2)));
    }
}
