//! A timer with nanosecond precision for a worker's event loop (Linux's
//! timerfd), registered in its `mio::Poll` like a socket. epoll's own
//! timeout counts whole milliseconds, which is too coarse for QUIC: its
//! pacing releases a burst every few hundred microseconds on a fast path,
//! and a loop that can only sleep 1 ms at a time caps a connection at a
//! burst per millisecond (measured: 10 MiB in 1.4 s of wall time for 47 ms
//! of CPU before this timer).
//!
//! Elsewhere there is no such timer ([`Timer`] has no value, so the
//! worker's `Option<Timer>` is always `None`): kqueue's own timeout is a
//! `timespec`, as precise, and the worker sleeps until QUIC's deadline
//! through it.

#[cfg(target_os = "linux")]
pub(crate) use linux::Timer;

/// No timer outside Linux: a type with no value, so that code holding an
/// `Option<Timer>` compiles everywhere and holds `None` there.
#[cfg(not(target_os = "linux"))]
pub(crate) enum Timer {}

#[cfg(not(target_os = "linux"))]
impl Timer {
    pub(crate) fn set(&self, _after: std::time::Duration) -> std::io::Result<()> {
        match *self {}
    }

    pub(crate) fn clear(&self) {
        match *self {}
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Duration;

    use mio::event::Source;
    use mio::unix::SourceFd;
    use mio::{Interest, Registry, Token};

    /// A monotonic one-shot timer: readable once it has expired.
    pub(crate) struct Timer {
        fd: OwnedFd,
    }

    impl Timer {
        pub(crate) fn new() -> io::Result<Timer> {
            // SAFETY: timerfd_create takes no pointer; a negative result is an
            // error, checked below.
            let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `fd` was just created and is owned by nothing else.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            Ok(Timer { fd })
        }

        /// Arms the timer to expire `after` from now (at least 1 ns: a zero
        /// value would disarm it), replacing any earlier setting.
        pub(crate) fn set(&self, after: Duration) -> io::Result<()> {
            let after = after.max(Duration::from_nanos(1));
            let spec = libc::itimerspec {
                it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
                it_value: libc::timespec {
                    tv_sec: after.as_secs().min(i64::MAX as u64) as libc::time_t,
                    tv_nsec: after.subsec_nanos() as libc::c_long,
                },
            };
            // SAFETY: `spec` is a valid itimerspec for the duration of the
            // call; the old value is not asked for (null).
            if unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }

        /// Reads the expiry count, so that the timer stops being readable.
        pub(crate) fn clear(&self) {
            let mut count = [0u8; 8];
            // SAFETY: `count` is 8 writable bytes, as timerfd's read needs; an
            // error (EAGAIN: not expired) is harmless and ignored.
            let _ = unsafe { libc::read(self.fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
        }
    }

    impl Source for Timer {
        fn register(&mut self, registry: &Registry, token: Token, interests: Interest) -> io::Result<()> {
            SourceFd(&self.fd.as_raw_fd()).register(registry, token, interests)
        }

        fn reregister(&mut self, registry: &Registry, token: Token, interests: Interest) -> io::Result<()> {
            SourceFd(&self.fd.as_raw_fd()).reregister(registry, token, interests)
        }

        fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
            SourceFd(&self.fd.as_raw_fd()).deregister(registry)
        }
    }
}
