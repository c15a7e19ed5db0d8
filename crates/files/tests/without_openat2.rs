//! `serve DIR` where openat2 is refused, as under a container's seccomp
//! profile or on Linux before 5.6: the server finds out at start and walks
//! paths itself, with the same rules. The server's threads run under a
//! seccomp filter that answers openat2 with ENOSYS.
//!
//! Alone in its binary: whether openat2 works is found once per process.
//!
//! Linux only: openat2 and seccomp are Linux's (elsewhere every path is
//! walked, and `sys`'s unit tests check that walk).
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use peregrine::Server;
use peregrine_files::{FileServer, Options};

#[test]
fn files_are_served_beneath_the_root_when_openat2_is_refused() {
    let dir = std::env::temp_dir().join(format!("peregrine-files-no-openat2-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("d")).unwrap();
    std::fs::write(dir.join("secret.txt"), "top secret").unwrap();
    std::fs::write(root.join("index.html"), "home").unwrap();
    std::fs::write(root.join("d/inner.txt"), "inside").unwrap();
    std::os::unix::fs::symlink("../secret.txt", root.join("out")).unwrap();
    std::os::unix::fs::symlink(dir.join("secret.txt"), root.join("abs")).unwrap();
    std::os::unix::fs::symlink("..", root.join("d/up")).unwrap();
    std::os::unix::fs::symlink("d/inner.txt", root.join("in")).unwrap();
    std::os::unix::fs::symlink(root.join("d/inner.txt"), root.join("abs-in")).unwrap();
    std::fs::write(root.join(".env"), "top secret too").unwrap();
    std::os::unix::fs::symlink(".env", root.join("env-link.txt")).unwrap();

    // Threads inherit the filter of the thread that creates them: the
    // server's workers are filtered, this test's client is not.
    let options = Options::new(&root);
    let server = std::thread::spawn(move || {
        refuse_openat2();
        Server::new()
            .bind("127.0.0.1:0")
            .workers(1)
            .start(FileServer::new(options).unwrap())
            .unwrap()
    })
    .join()
    .unwrap();
    assert!(!peregrine_files::has_openat2());
    let addr = server.local_addr();
    for (target, status, body) in [
        ("/", 200, "home"),
        ("/d/inner.txt", 200, "inside"),
        ("/in", 200, "inside"),
        ("/d/up/d/up/in", 200, "inside"),
        ("/abs-in", 200, "inside"),
    ] {
        assert_eq!(get(addr, target), (status, body.to_owned()), "{target}");
    }
    for target in [
        "/out",
        "/abs",
        "/d/up/../secret.txt",
        "/%2e%2e/secret.txt",
        "/d/up/out",
        "/env-link.txt",
        "/d/up/env-link.txt",
    ] {
        let (status, body) = get(addr, target);
        assert!(matches!(status, 400 | 404), "{target}: {status}");
        assert!(!body.contains("secret"), "{target} leaked the secret");
    }
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Installs, on the calling thread, a seccomp filter that fails openat2
/// with ENOSYS and allows everything else.
fn refuse_openat2() {
    #[cfg(target_arch = "x86_64")]
    const AUDIT_ARCH: u32 = 0xc000_003e;
    #[cfg(target_arch = "aarch64")]
    const AUDIT_ARCH: u32 = 0xc000_00b7;
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    let insn = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let mut program = [
        insn(LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        insn(JEQ_K, 0, 3, AUDIT_ARCH),
        insn(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        insn(JEQ_K, 0, 1, libc::SYS_openat2 as u32),
        insn(RET_K, 0, 0, RET_ERRNO | libc::ENOSYS as u32),
        insn(RET_K, 0, 0, RET_ALLOW),
    ];
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: prctl with integer arguments only; no memory involved.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    assert_eq!(rc, 0, "PR_SET_NO_NEW_PRIVS: {}", std::io::Error::last_os_error());
    // SAFETY: `fprog` points at `program`, both alive during the call; the
    // kernel copies the filter.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &fprog as *const libc::sock_fprog,
        )
    };
    assert_eq!(rc, 0, "PR_SET_SECCOMP: {}", std::io::Error::last_os_error());
}

fn get(addr: SocketAddr, target: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw[9..12].parse().unwrap();
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}
