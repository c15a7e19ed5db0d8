//! The operating system: the only place that calls libc. Linux only for
//! now (SO_REUSEPORT load balancing, sendfile).
//!
//! Contract: every function here takes and returns ordinary Rust types;
//! every `unsafe` block says why it is sound.

pub(crate) mod privileges;
pub(crate) mod sendfile;
pub(crate) mod socket;
pub(crate) mod systemd;
pub(crate) mod timer;

/// Raises the soft limit on open files to the hard limit, as Go's runtime
/// does: a server with 10,000 connections needs more than the usual 1,024.
/// Returns the new soft limit.
pub fn raise_open_files_limit() -> std::io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for the duration of the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: `lim` is a valid rlimit; raising the soft limit up to the
        // hard limit is always permitted.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(lim.rlim_cur)
}
