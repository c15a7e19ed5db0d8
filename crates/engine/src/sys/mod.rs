//! The operating system: the only place that makes system calls. Made for
//! Linux (SO_REUSEPORT load balancing, sendfile, MSG_MORE, timerfd, BPF
//! steering of QUIC packets); each Linux-only call is gated with
//! `cfg(target_os = "linux")` in its file, beside a portable fallback for
//! the BSDs and macOS (kqueue comes through mio). Through `rustix` where
//! it has the call with the same meaning (safe signatures, no `unsafe`
//! here), libc where it has not (process-wide set*id, the user database,
//! a descriptor's flags before it is owned).
//!
//! Contract: every function here takes and returns ordinary Rust types;
//! every `unsafe` block says why it is sound.

pub(crate) mod outbound;
pub(crate) mod privileges;
pub(crate) mod sendfile;
pub(crate) mod socket;
pub(crate) mod stream;
pub(crate) mod systemd;
pub(crate) mod timer;
pub(crate) mod upgrade;

/// Raises the soft limit on open files to the hard limit, as Go's runtime
/// does: a server with 10,000 connections needs more than the usual 1,024.
/// Returns the new soft limit.
pub fn raise_open_files_limit() -> std::io::Result<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    // The soft limit is never above the hard one (None is RLIM_INFINITY).
    if lim.current != lim.maximum {
        lim.current = lim.maximum;
        // Raising the soft limit up to the hard limit is always permitted.
        setrlimit(Resource::Nofile, lim)?;
    }
    Ok(lim.current.unwrap_or(u64::MAX))
}
