//! Socket activation leaves the environment alone (no `remove_var` with
//! threads alive) and takes systemd's sockets at most once per process.
//!
//! The only test in this binary: it sets variables before any server starts.

#[test]
fn listen_fds_keeps_the_variables_and_takes_the_sockets_once() {
    std::env::set_var("LISTEN_PID", std::process::id().to_string());
    std::env::set_var("LISTEN_FDS", "0");
    assert!(peregrine::systemd::listen_fds().unwrap().is_empty());
    assert_eq!(std::env::var("LISTEN_FDS").as_deref(), Ok("0"));
    assert_eq!(std::env::var("LISTEN_PID"), Ok(std::process::id().to_string()));
    // A second call takes nothing, whatever the variables say now: it must
    // not wrap descriptor 3 again.
    std::env::set_var("LISTEN_FDS", "1");
    assert!(peregrine::systemd::listen_fds().unwrap().is_empty());
}
