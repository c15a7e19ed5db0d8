//! What a worker hosts: the kinds of event source a token names (mio's
//! tokens and the mailbox's are their encodings, decoded in one place),
//! and the one set of timers the sources' deadlines go into.
//!
//! A new kind of source (an upstream connection of the reverse proxy, a
//! handler's timer) is a new `Source` arm and a range of tokens here; the
//! worker's loop matches on `Source`, never on token arithmetic.

use std::collections::BTreeSet;
use std::time::Instant;

/// Tokens below this are TCP and Unix connections (slab keys); from here
/// to `QUIC_BASE`, the reverse proxy's upstream connections (their slab
/// keys, offset).
const UPSTREAM_BASE: usize = usize::MAX / 8;
/// From here to `QUIC_BASE`, the upstream sockets of the reverse proxy's
/// WebSocket tunnels: their client connection's key times
/// `TUNNEL_STRIDE`, plus the HTTP/2 stream (0 for HTTP/1.1).
const TUNNEL_BASE: usize = UPSTREAM_BASE + usize::MAX / 16;
const TUNNEL_STRIDE: usize = 1 << 31;
const QUIC_BASE: usize = usize::MAX / 4;
/// Tokens of one QUIC endpoint's connections: its index times this, plus
/// quinn-proto's connection handle.
const QUIC_STRIDE: usize = 1 << 24;
/// From here to `LISTENER_BASE`, the upstream sockets of WebSocket
/// tunnels on HTTP/3 request streams: their QUIC connection's token (less
/// `QUIC_BASE`) times `QUIC_TUNNEL_STRIDE`, plus the stream's index (its
/// id over 4: request streams are the client's bidirectional ones).
const QUIC_TUNNEL_BASE: usize = QUIC_BASE + usize::MAX / 8;
pub(crate) const QUIC_TUNNEL_STRIDE: usize = 1 << 32;
const LISTENER_BASE: usize = usize::MAX / 2;
const UDP_BASE: usize = LISTENER_BASE + (1 << 24);
const TIMER: usize = usize::MAX - 2;
const WAKER: usize = usize::MAX - 1;

/// What a token names in a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// A TCP or Unix-domain connection: its key in the worker's slab.
    Conn(usize),
    /// A reverse proxy's connection to an upstream (`proxy/pool.rs`): its
    /// key in the worker's `Upstreams`.
    Upstream(usize),
    /// The upstream socket of a WebSocket tunnel (`conn/tunnel.rs`): the
    /// client's connection and its HTTP/2 stream (0: the connection).
    Tunnel { conn: usize, stream: u32 },
    /// A QUIC connection (in the mailbox only: its datagrams come through
    /// its endpoint's socket): the endpoint's index, quinn-proto's handle.
    Quic { endpoint: usize, conn: usize },
    /// The upstream socket of a WebSocket tunnel on an HTTP/3 request
    /// stream (`conn/tunnel.rs`): the QUIC connection's token (a
    /// `Source::Quic`'s) and the stream's id (below
    /// `4 * QUIC_TUNNEL_STRIDE`).
    QuicTunnel { quic: usize, stream: u64 },
    /// A listening socket: its index in the worker's list.
    Listener(usize),
    /// A QUIC endpoint's UDP socket: its index in the worker's list.
    Udp(usize),
    /// The precise timer (a timerfd) QUIC's microsecond deadlines need.
    Timer,
    /// The mailbox's waker: answers and wakes from other threads.
    Waker,
}

impl Source {
    /// The token that names this source.
    pub(crate) fn token(self) -> usize {
        match self {
            Source::Conn(key) => {
                debug_assert!(key < UPSTREAM_BASE);
                key
            }
            Source::Upstream(key) => {
                debug_assert!(key < TUNNEL_BASE - UPSTREAM_BASE);
                UPSTREAM_BASE + key
            }
            Source::Tunnel { conn, stream } => TUNNEL_BASE + conn * TUNNEL_STRIDE + stream as usize,
            Source::Quic { endpoint, conn } => QUIC_BASE + endpoint * QUIC_STRIDE + conn,
            Source::QuicTunnel { quic, stream } => {
                debug_assert!(stream % 4 == 0 && stream < 4 * QUIC_TUNNEL_STRIDE as u64);
                QUIC_TUNNEL_BASE + (quic - QUIC_BASE) * QUIC_TUNNEL_STRIDE + (stream / 4) as usize
            }
            Source::Listener(i) => LISTENER_BASE + i,
            Source::Udp(i) => UDP_BASE + i,
            Source::Timer => TIMER,
            Source::Waker => WAKER,
        }
    }

    /// The source `token` names.
    #[inline(always)]
    pub(crate) fn of(token: usize) -> Source {
        match token {
            // A client's connection first: nearly every event is one's,
            // and the ranges below were tested top-down before it (seven
            // compares a request; callgrind, hello-c50).
            t if t < UPSTREAM_BASE => Source::Conn(t),
            WAKER => Source::Waker,
            TIMER => Source::Timer,
            t if t >= UDP_BASE => Source::Udp(t - UDP_BASE),
            t if t >= LISTENER_BASE => Source::Listener(t - LISTENER_BASE),
            t if t >= QUIC_TUNNEL_BASE => Source::QuicTunnel {
                quic: QUIC_BASE + (t - QUIC_TUNNEL_BASE) / QUIC_TUNNEL_STRIDE,
                stream: ((t - QUIC_TUNNEL_BASE) % QUIC_TUNNEL_STRIDE * 4) as u64,
            },
            t if t >= QUIC_BASE => Source::Quic {
                endpoint: (t - QUIC_BASE) / QUIC_STRIDE,
                conn: (t - QUIC_BASE) % QUIC_STRIDE,
            },
            t if t >= TUNNEL_BASE => Source::Tunnel {
                conn: (t - TUNNEL_BASE) / TUNNEL_STRIDE,
                stream: ((t - TUNNEL_BASE) % TUNNEL_STRIDE) as u32,
            },
            t => Source::Upstream(t - UPSTREAM_BASE),
        }
    }

    pub(crate) fn mio(self) -> mio::Token {
        mio::Token(self.token())
    }
}

/// The worker's connection deadlines, ordered (nginx's timer tree, with
/// its laziness): a source is armed at its deadline, and a deadline that
/// moves later, as a keep-alive connection's does with every request,
/// costs nothing here. The entry fires at the old time and is armed again
/// then for the new one. Only a deadline that moves earlier is re-inserted.
/// Each source keeps the time it is armed at (`armed`), so the set holds
/// at most one entry per source.
#[derive(Default)]
pub(crate) struct Timers(BTreeSet<(Instant, usize)>);

impl Timers {
    /// Makes sure `token` fires no later than `deadline`; `armed` is the
    /// source's record of its entry.
    #[inline(always)]
    pub(crate) fn arm(&mut self, token: usize, deadline: Option<Instant>, armed: &mut Option<Instant>) {
        let Some(deadline) = deadline else { return };
        // The common case, a keep-alive deadline moved later, is this
        // compare in the caller's code: a call of its own cost every
        // request 32 instructions (callgrind, hello-c50).
        if let Some(at) = *armed {
            if at <= deadline {
                return;
            }
        }
        self.insert(token, deadline, armed);
    }

    /// `arm` when the set must change: `token` is not armed, or is armed
    /// later than `deadline`.
    #[inline(never)]
    fn insert(&mut self, token: usize, deadline: Instant, armed: &mut Option<Instant>) {
        if let Some(at) = armed.take() {
            self.0.remove(&(at, token));
        }
        self.0.insert((deadline, token));
        *armed = Some(deadline);
    }

    /// Removes `token`'s entry (the source is gone).
    pub(crate) fn disarm(&mut self, token: usize, armed: &mut Option<Instant>) {
        if let Some(at) = armed.take() {
            self.0.remove(&(at, token));
        }
    }

    /// When the earliest entry fires.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.0.first().map(|&(at, _)| at)
    }

    /// Takes the earliest entry if it is due by `now`: the source's token.
    /// The caller clears the source's `armed`, then checks its real
    /// deadline (it may have moved later) and arms it again if it has.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<usize> {
        match self.0.first() {
            Some(&(at, _)) if at <= now => self.0.pop_first().map(|(_, token)| token),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_source_round_trips_through_its_token() {
        for s in [
            Source::Conn(0),
            Source::Conn(123_456),
            Source::Upstream(0),
            Source::Upstream(42),
            Source::Tunnel { conn: 0, stream: 0 },
            Source::Tunnel { conn: 77, stream: 7 },
            Source::Tunnel {
                conn: 1 << 20,
                stream: (1 << 31) - 1,
            },
            Source::Quic { endpoint: 0, conn: 0 },
            Source::Quic { endpoint: 3, conn: 77 },
            Source::QuicTunnel {
                quic: Source::Quic { endpoint: 0, conn: 0 }.token(),
                stream: 0,
            },
            Source::QuicTunnel {
                quic: Source::Quic { endpoint: 3, conn: 77 }.token(),
                stream: 4 * (QUIC_TUNNEL_STRIDE as u64 - 1),
            },
            Source::Listener(0),
            Source::Listener(9),
            Source::Udp(0),
            Source::Udp(5),
            Source::Timer,
            Source::Waker,
        ] {
            assert_eq!(Source::of(s.token()), s, "{s:?}");
        }
    }

    /// A deadline moving later keeps its entry (it fires early, once, and
    /// is armed again); one moving earlier replaces it; a disarmed source
    /// leaves nothing behind.
    #[test]
    fn timers_are_armed_lazily() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut timers = Timers::default();
        let (mut a, mut b) = (None, None);
        timers.arm(1, Some(t0 + 10 * s), &mut a);
        timers.arm(1, Some(t0 + 20 * s), &mut a);
        assert_eq!((timers.next(), a), (Some(t0 + 10 * s), Some(t0 + 10 * s)));
        timers.arm(2, Some(t0 + 15 * s), &mut b);
        timers.arm(2, Some(t0 + 5 * s), &mut b);
        assert_eq!(timers.0.len(), 2);
        assert_eq!(timers.pop_due(t0 + s), None);
        assert_eq!(timers.pop_due(t0 + 12 * s), Some(2));
        assert_eq!(timers.pop_due(t0 + 12 * s), Some(1));
        assert_eq!(timers.pop_due(t0 + 12 * s), None);
        let mut c = None;
        timers.arm(3, Some(t0), &mut c);
        timers.disarm(3, &mut c);
        assert_eq!((timers.next(), c), (None, None));
    }
}
