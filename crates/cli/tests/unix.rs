//! `--bind unix:PATH`: a Unix-domain socket served as nginx's `listen
//! unix:` is, with a std `UnixStream` client: HTTP/1.1 with keep-alive,
//! HTTP/2 with prior knowledge, the socket file's mode, the access log's
//! `unix:` client, a stale file replaced, a live one refused, the file
//! removed at exit, and `check-config`.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use common::{peregrine, Scratch, PATIENCE};
use test_support::process::Process;

const BODY: &str = "hello over a unix socket\n";

/// A site with one page, and the socket's path beside it.
fn site(name: &str) -> (Scratch, std::path::PathBuf) {
    let dir = Scratch::new(name);
    dir.write("www/index.html", BODY);
    let sock = dir.path("p.sock");
    (dir, sock)
}

fn serve(dir: &Scratch, sock: &Path, extra: &[&str]) -> Process {
    let bind = format!("unix:{}", sock.display());
    let www = dir.path("www");
    let mut cmd = peregrine();
    cmd.args(["serve", www.to_str().unwrap(), "--bind", &bind, "--workers", "2"])
        .args(extra);
    let server = Process::spawn(&mut cmd);
    let line = server.line(" on ");
    assert!(line.trim_end().ends_with(&bind), "{line}");
    server
}

fn connect(sock: &Path) -> UnixStream {
    let s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s
}

/// Reads one HTTP/1.1 response with a Content-Length: (head, body).
fn read_response(s: &mut UnixStream) -> (String, String) {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "closed within the head: {got:?}");
        got.push(byte[0]);
    }
    let head = String::from_utf8(got).unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .expect("a Content-Length");
    let mut body = vec![0; len];
    s.read_exact(&mut body).unwrap();
    (head, String::from_utf8(body).unwrap())
}

#[test]
fn http1_with_keep_alive_and_h2c_are_served_and_the_file_is_removed_at_exit() {
    let (dir, sock) = site("peregrine-unix-serve");
    let log = dir.path("access.log");
    let server = serve(&dir, &sock, &["--access-log", log.to_str().unwrap()]);
    let meta = std::fs::symlink_metadata(&sock).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660, "owner and group may connect");

    // Two requests on one connection.
    let mut s = connect(&sock);
    for path in ["/", "/index.html"] {
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let (head, body) = read_response(&mut s);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert_eq!(body, BODY);
    }
    drop(s);

    // HTTP/2 with prior knowledge: the page arrives in DATA on stream 1.
    let mut s = connect(&sock);
    let head = test_support::h2::get_head("/index.html", "x");
    let mut hello = test_support::h2::PREFACE.to_vec();
    hello.extend_from_slice(&[0, 0, 0, test_support::h2::SETTINGS, 0, 0, 0, 0, 0]);
    hello.extend_from_slice(&[0, 0, head.len() as u8, test_support::h2::HEADERS, 0x5, 0, 0, 0, 1]);
    hello.extend_from_slice(&head);
    s.write_all(&hello).unwrap();
    let (mut data, mut ended, mut saw_settings) = (Vec::new(), false, false);
    while !ended {
        let mut frame_head = [0u8; 9];
        s.read_exact(&mut frame_head).unwrap();
        let len = (usize::from(frame_head[0]) << 16) | (usize::from(frame_head[1]) << 8) | usize::from(frame_head[2]);
        let mut payload = vec![0; len];
        s.read_exact(&mut payload).unwrap();
        let (kind, flags) = (frame_head[3], frame_head[4]);
        assert!(
            kind != test_support::h2::GOAWAY && kind != test_support::h2::RST_STREAM,
            "{frame_head:?} {payload:?}"
        );
        saw_settings |= kind == test_support::h2::SETTINGS;
        if kind == test_support::h2::DATA {
            data.extend_from_slice(&payload);
        }
        if kind <= test_support::h2::HEADERS && flags & test_support::h2::END_STREAM != 0 {
            ended = true;
        }
    }
    assert!(saw_settings, "the server spoke HTTP/2");
    assert_eq!(String::from_utf8(data).unwrap(), BODY);
    drop(s);

    server.terminate();
    assert!(!sock.exists(), "the socket file is removed at exit");
    // The client is logged as nginx logs a Unix client: `unix:`.
    let logged = std::fs::read_to_string(&log).unwrap();
    assert_eq!(logged.lines().count(), 3, "{logged}");
    assert!(logged.lines().all(|l| l.starts_with("unix: - - [")), "{logged}");
    assert!(logged.contains("\"GET /index.html HTTP/2.0\" 200"), "{logged}");
}

#[test]
fn a_stale_socket_is_replaced_and_a_live_one_or_a_plain_file_refused() {
    let (dir, sock) = site("peregrine-unix-stale");
    // A server that died leaves its socket file, with nobody listening.
    drop(UnixListener::bind(&sock).unwrap());
    assert!(std::fs::symlink_metadata(&sock).unwrap().file_type().is_socket());
    let server = serve(&dir, &sock, &[]);
    let mut s = connect(&sock);
    write!(s, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s).1, BODY);
    drop(s);

    // A second server on the live socket is refused, and takes nothing.
    let www = dir.path("www");
    let bind = format!("unix:{}", sock.display());
    let out = peregrine()
        .args(["serve", www.to_str().unwrap(), "--bind", &bind])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("--bind {bind}: a server is listening on this socket")),
        "{stderr}"
    );
    let mut s = connect(&sock);
    write!(s, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s).1, BODY, "the first server still serves");
    drop(s);
    server.terminate();

    // A file that is not a socket is never removed.
    let plain = dir.write("plain", "keep me");
    let out = peregrine()
        .args([
            "serve",
            www.to_str().unwrap(),
            "--bind",
            &format!("unix:{}", plain.display()),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("exists and is not a socket"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&plain).unwrap(), "keep me");
}

#[test]
fn check_config_accepts_a_unix_bind_and_refuses_it_with_tls_or_for_metrics() {
    let (dir, sock) = site("peregrine-unix-check");
    let www = dir.path("www");
    let bind = format!("unix:{}", sock.display());
    let out = peregrine()
        .args(["check-config", "serve", www.to_str().unwrap(), "--bind", &bind])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("bind = [\"{bind}\"]  # flag")), "{stdout}");
    assert!(!sock.exists(), "check-config binds nothing");

    let pem = dir.write("x.pem", "");
    let out = peregrine()
        .args(["check-config", "serve", www.to_str().unwrap(), "--bind", &bind])
        .args(["--tls-cert", pem.to_str().unwrap(), "--tls-key", pem.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("TLS on a Unix-domain socket is not supported"),
        "{stderr}"
    );

    let out = peregrine()
        .args(["check-config", "serve", www.to_str().unwrap(), "--metrics", &bind])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("a Unix-domain socket is for --bind only"), "{stderr}");
}

#[test]
fn a_reload_keeps_the_socket_and_its_file() {
    let (dir, sock) = site("peregrine-unix-reload");
    let server = serve(&dir, &sock, &[]);
    let before = std::fs::symlink_metadata(&sock).unwrap();
    // Connected and answered before the reload: the old generation's,
    // idle when it hands over.
    let mut old = connect(&sock);
    write!(old, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut old).1, BODY);
    server.signal("HUP");
    server.line("configuration reloaded (generation 2)");
    // The same socket file (not bound again), served by the new one.
    let after = std::fs::symlink_metadata(&sock).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((before.dev(), before.ino()), (after.dev(), after.ino()));
    let mut s = connect(&sock);
    write!(s, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s).1, BODY);
    write!(old, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let (head, body) = read_response(&mut old);
    assert!(head.to_ascii_lowercase().contains("connection: close"), "{head}");
    assert_eq!(body, BODY);
    drop((s, old));
    server.terminate();
    assert!(!sock.exists(), "the socket file is removed at exit");
}

/// What systemd does for `ListenStream=/path`: a listening Unix socket at
/// descriptor 3. The file is systemd's: served, and left at exit.
#[test]
fn a_unix_socket_passed_by_systemd_is_served_and_its_file_left() {
    let (dir, sock) = site("peregrine-unix-systemd");
    let launcher = r#"
import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(128)
if s.fileno() != 3:
    os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
os.environ["LISTEN_FDS"] = "1"
os.environ["LISTEN_PID"] = str(os.getpid())
os.execv(sys.argv[2], sys.argv[2:])
"#;
    let www = dir.path("www");
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-c", launcher, sock.to_str().unwrap(), env!("CARGO_BIN_EXE_peregrine")])
        .args(["serve", www.to_str().unwrap(), "--workers", "2"])
        // As root (CI), serving as root is what is meant here.
        .arg("--allow-root");
    let server = Process::spawn(&mut cmd);
    let line = server.line(" on ");
    assert!(line.trim_end().ends_with(&format!("unix:{}", sock.display())), "{line}");
    let mut s = connect(&sock);
    write!(s, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s).1, BODY);
    drop(s);
    server.terminate();
    assert!(sock.exists(), "systemd's socket file is systemd's to remove");
}

/// With `--user`, the socket is the user's (and its group's), so a proxy
/// in the group can connect, and the server, no longer root, can remove
/// it at exit from a directory the user owns. Only checkable as root.
#[test]
fn with_user_the_socket_is_given_to_the_user_and_still_removed_at_exit() {
    if !test_support::process::is_root() {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let (dir, _) = site("peregrine-unix-user");
    // `nobody` must reach the files and own the socket's directory.
    for path in [dir.dir(), &dir.path("www"), &dir.path("www/index.html")] {
        let mode = if path.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let run = dir.path("run");
    std::fs::create_dir(&run).unwrap();
    std::os::unix::fs::chown(&run, Some(65534), None).unwrap();
    let sock = run.join("p.sock");
    let server = serve(&dir, &sock, &["--user", "nobody"]);
    let meta = std::fs::symlink_metadata(&sock).unwrap();
    assert_eq!(meta.uid(), 65534, "owned by nobody");
    assert_eq!(meta.mode() & 0o777, 0o660);
    let mut s = connect(&sock);
    write!(s, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s).1, BODY);
    drop(s);
    server.terminate();
    assert!(!sock.exists(), "removed at exit by the user it runs as");
}
