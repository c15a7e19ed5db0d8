//! The `Date` header value, formatted at most once per second per worker
//! (RFC 9110 §6.6.1: an origin server with a clock MUST send Date). Owned by
//! the worker, not shared: no lock, no atomic (see hyper's `common/date.rs`).

use std::cell::Cell;
use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

thread_local! {
    /// The time a worker's event loop last woke (see [`now`]).
    static LOOP_NOW: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The time the calling worker's event loop last woke up, read once per
/// loop iteration, as nginx's `ngx_current_msec` and h2o's `h2o_now`: a
/// handler that needs "about now" (a cache's trust interval, a rate
/// limiter) gets it without a clock read of its own (`Instant::now()` per
/// request was about 1.2 % of a 17-byte file's CPU). It may lag by the
/// length of the worker's current turn: use `Instant::now()` to time
/// something precisely. Off a worker thread it is `Instant::now()`.
#[inline]
pub fn now() -> Instant {
    LOOP_NOW.with(Cell::get).unwrap_or_else(Instant::now)
}

/// Records the loop's time for [`now`] (the worker, after each wake-up).
#[inline]
pub(crate) fn set_now(now: Instant) {
    LOOP_NOW.with(|c| c.set(Some(now)));
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` is 29 bytes.
pub(crate) const DATE_LEN: usize = 29;

/// A worker's cached Date, and the Common Log Format timestamp derived from it.
pub(crate) struct DateCache {
    secs: u64,
    /// When the wall clock's second will next change: until then `tick`
    /// needs no second clock read.
    next_tick: Instant,
    http: [u8; DATE_LEN],
    /// `06/Nov/1994:08:49:37 +0000`
    clf: [u8; 26],
}

impl DateCache {
    pub(crate) fn new() -> Self {
        let now = Instant::now();
        let mut cache = DateCache {
            secs: u64::MAX,
            next_tick: now,
            http: [b' '; DATE_LEN],
            clf: [b' '; 26],
        };
        cache.tick(now);
        cache
    }

    /// Called once per loop iteration with the time just read: reads the
    /// wall clock only when its second may have changed.
    pub(crate) fn tick(&mut self, now: Instant) {
        if now < self.next_tick {
            return;
        }
        let wall = SystemTime::now();
        let into_second = wall.duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        self.next_tick = now + Duration::from_secs(1) - Duration::from_nanos(u64::from(into_second));
        self.update(wall);
    }

    /// Re-formats if the second has changed. Does not allocate.
    pub(crate) fn update(&mut self, now: SystemTime) {
        let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if secs == self.secs {
            return;
        }
        self.secs = secs;
        let mut cursor = std::io::Cursor::new(&mut self.http[..]);
        // Cannot fail: the output is always exactly 29 bytes.
        let _ = write!(
            cursor,
            "{}",
            httpdate::HttpDate::from(UNIX_EPOCH + std::time::Duration::from_secs(secs))
        );
        // "Sun, 06 Nov 1994 08:49:37 GMT" → "06/Nov/1994:08:49:37 +0000"
        let h = &self.http;
        let clf = &mut self.clf;
        clf[0..2].copy_from_slice(&h[5..7]);
        clf[2] = b'/';
        clf[3..6].copy_from_slice(&h[8..11]);
        clf[6] = b'/';
        clf[7..11].copy_from_slice(&h[12..16]);
        clf[11] = b':';
        clf[12..20].copy_from_slice(&h[17..25]);
        clf[20..26].copy_from_slice(b" +0000");
    }

    /// The value for the `Date` header.
    pub(crate) fn http(&self) -> &[u8; DATE_LEN] {
        &self.http
    }

    /// The timestamp for an access log line.
    pub(crate) fn clf(&self) -> &[u8] {
        &self.clf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// On a thread whose loop recorded its time, `now` is that time (not
    /// a fresh read); elsewhere it reads the clock.
    #[test]
    fn now_is_the_loop_time_where_there_is_one() {
        let before = Instant::now();
        assert!(now() >= before, "off a worker: a clock read");
        let loop_time = before - Duration::from_secs(5);
        set_now(loop_time);
        assert_eq!(now(), loop_time);
        assert_eq!(now(), loop_time, "read again: still the loop's time");
        let other = std::thread::spawn(now).join().unwrap();
        assert!(other >= before, "another thread has no loop time");
    }

    #[test]
    fn formats_imf_fixdate_and_clf() {
        let mut d = DateCache::new();
        d.update(UNIX_EPOCH + Duration::from_secs(784_111_777));
        assert_eq!(&d.http()[..], b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(d.clf(), b"06/Nov/1994:08:49:37 +0000");
    }
}
