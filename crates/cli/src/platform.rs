//! What this build leaves off because the system is not Linux: the start
//! line says it once, so that a user on a laptop (macOS) or a BSD knows
//! what is slower or unguarded there, rather than finding out.
//!
//! Each Linux-only piece is gated in its own `sys` module (the engine's
//! `sys/`, the files crate's `sys.rs`, the archive's `map.rs`, the sandbox
//! crate), with the portable fallback named here.

/// The line for a system named `os` (as `std::env::consts::OS`), or
/// `None` on Linux, where nothing is off.
pub(crate) fn features_off(os: &str) -> Option<String> {
    if os == "linux" {
        return None;
    }
    let mut off = vec![
        "sendfile (file bytes are copied through a buffer)",
        "MSG_MORE",
        "timerfd (QUIC's timers use the poll timeout)",
        "HTTP/3 steering by connection ID (by address instead)",
        "openat2 (paths are walked one component at a time)",
        "archive maps and leases (archives are read into memory)",
        "the Landlock and seccomp sandbox",
        "systemd's abstract NOTIFY_SOCKET",
    ];
    // FreeBSD balances a group with SO_REUSEPORT_LB (`engine::sys::socket`);
    // elsewhere one listener of the group takes every connection.
    if os != "freebsd" {
        off.push("SO_REUSEPORT balancing (one worker takes every connection)");
    }
    Some(format!("{os}, not Linux: off here: {}", off.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_line_names_what_is_off_outside_linux() {
        assert_eq!(features_off("linux"), None);
        let freebsd = features_off("freebsd").unwrap();
        assert!(
            freebsd.starts_with("freebsd, not Linux: off here: sendfile"),
            "{freebsd}"
        );
        assert!(
            freebsd.contains("sandbox") && !freebsd.contains("SO_REUSEPORT"),
            "{freebsd}"
        );
        let macos = features_off("macos").unwrap();
        assert!(macos.contains("SO_REUSEPORT balancing"), "{macos}");
    }
}
