//! A minimum receive rate, checked over fixed windows (Apache's
//! `mod_reqtimeout` `MinRate`): after a grace period, a request that
//! brings fewer than `rate × window` bytes in a window is ended. A timer
//! restarted by every read would keep alive a client that sends one byte
//! every `timeout - 1` seconds (50 such connections held 51 MB for over
//! 70 s); a rate ends it within the grace period.
//!
//! The clock starts when the request does (its head complete, or its first
//! frame); the first window ends with the grace period, so a client that
//! sends nothing, or too little in the grace's last window, is ended at
//! the grace's end. Past it, the check repeats every window. Where the
//! server itself stops reading (a reader that is behind, a budget), the
//! caller restarts the clock when reading resumes: no rate is asked of a
//! client we do not read.

use std::time::{Duration, Instant};

/// The window the rate is averaged over.
pub(crate) const WINDOW: Duration = Duration::from_secs(5);

/// A request's receive clock; see the module's documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MinRate {
    /// When the window being measured began, and the byte count then
    /// (not yet taken while `marked` is false: the window starts later).
    since: Instant,
    mark: u64,
    marked: bool,
    /// When the grace period ends.
    grace_end: Instant,
}

/// What a check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rate {
    /// Fast enough (or not yet measured): wait until `MinRate::deadline`.
    Held,
    /// Too slow: end the request.
    TooSlow,
}

impl MinRate {
    /// Starts the clock at `now`, with `bytes` counted so far.
    pub(crate) fn start(now: Instant, bytes: u64, grace: Duration) -> MinRate {
        let grace_end = now + grace;
        // The window that ends with the grace begins `WINDOW` before it
        // (or now, for a grace shorter than a window).
        let since = grace_end.checked_sub(WINDOW).filter(|t| *t > now).unwrap_or(now);
        MinRate {
            since,
            mark: bytes,
            marked: since == now,
            grace_end,
        }
    }

    /// When the next check is due.
    pub(crate) fn deadline(&self) -> Instant {
        if self.marked {
            (self.since + WINDOW).max(self.grace_end)
        } else {
            self.since
        }
    }

    /// The deadline passed: takes the count at a window's start, or checks
    /// the bytes counted now (`bytes`) against `rate` bytes per second over
    /// the window that ends, and starts the next one. `rate` 0 asks
    /// nothing.
    pub(crate) fn check(&mut self, now: Instant, bytes: u64, rate: u64) -> Rate {
        if now < self.deadline() {
            return Rate::Held;
        }
        if !self.marked {
            self.since = now;
            self.mark = bytes;
            self.marked = true;
            return Rate::Held;
        }
        // A check that fires late asks no more than a window's worth.
        let elapsed = now.saturating_duration_since(self.since).min(WINDOW);
        let needed = (rate as f64 * elapsed.as_secs_f64()) as u64;
        if bytes.saturating_sub(self.mark) < needed {
            return Rate::TooSlow;
        }
        self.since = now;
        self.mark = bytes;
        Rate::Held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(20);

    #[test]
    fn a_silent_client_is_ended_at_the_end_of_the_grace() {
        let t0 = Instant::now();
        let mut r = MinRate::start(t0, 0, GRACE);
        assert_eq!(r.deadline(), t0 + GRACE - WINDOW);
        assert_eq!(r.check(r.deadline(), 0, 500), Rate::Held);
        assert_eq!(r.deadline(), t0 + GRACE);
        assert_eq!(r.check(t0 + GRACE, 0, 500), Rate::TooSlow);
    }

    #[test]
    fn a_byte_now_and_then_does_not_keep_a_request_alive() {
        // One byte every 4 s: a per-read timer of 5 s would never fire.
        let t0 = Instant::now();
        let mut r = MinRate::start(t0, 0, GRACE);
        assert_eq!(r.check(r.deadline(), 3, 500), Rate::Held);
        assert_eq!(r.check(r.deadline(), 5, 500), Rate::TooSlow);
    }

    #[test]
    fn a_steady_sender_is_checked_every_window_and_kept() {
        let t0 = Instant::now();
        let mut r = MinRate::start(t0, 0, GRACE);
        let mut now = r.deadline();
        assert_eq!(r.check(now, 600 * 15, 500), Rate::Held);
        now = r.deadline();
        // 600 B/s from the start.
        for _ in 0..10 {
            let bytes = 600 * now.duration_since(t0).as_secs();
            assert_eq!(r.check(now, bytes, 500), Rate::Held);
            assert_eq!(r.deadline(), now + WINDOW);
            now = r.deadline();
        }
        // Then it slows to 100 B/s: ended at the next window's end.
        let bytes = 600 * now.duration_since(t0).as_secs() - 600 * 5 + 500;
        assert_eq!(r.check(now, bytes, 500), Rate::TooSlow);
    }

    #[test]
    fn the_rate_counts_only_the_grace_periods_last_window() {
        // Everything in the first second, nothing after: the last window
        // of the grace saw no byte.
        let t0 = Instant::now();
        let mut r = MinRate::start(t0, 0, GRACE);
        assert_eq!(r.check(t0 + Duration::from_secs(1), 10_000, 500), Rate::Held);
        assert_eq!(
            r.deadline(),
            t0 + GRACE - WINDOW,
            "a check before the window measures nothing"
        );
        assert_eq!(r.check(r.deadline(), 10_000, 500), Rate::Held);
        assert_eq!(r.check(t0 + GRACE, 10_000, 500), Rate::TooSlow);
    }

    #[test]
    fn rate_zero_asks_nothing_past_the_grace() {
        let t0 = Instant::now();
        let mut r = MinRate::start(t0, 0, GRACE);
        assert_eq!(r.check(r.deadline(), 0, 0), Rate::Held);
        assert_eq!(r.check(t0 + GRACE, 0, 0), Rate::Held);
    }
}
