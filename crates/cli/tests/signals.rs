//! The binary owns its signals, and SIGTERM always ends it: sent at a
//! random moment of load, archive swaps, reloads (SIGHUP) and log reopens
//! (SIGUSR1), round after round, the process must exit with status 0
//! within the shutdown timeout. Some rounds hold a connection the server
//! cannot finish (a head cut short, a large body nobody reads), so that the
//! timeout itself is what ends them.
//!
//! `PEREGRINE_SIGNAL_ROUNDS` (default 300) sets the rounds,
//! `PEREGRINE_SIGNAL_SEED` the random sequence (printed, to replay a
//! failure).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{last_addr, peregrine, Lines, Scratch};

/// `--shutdown-timeout`: short, so that rounds whose stuck connections
/// run into it stay quick.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_millis(500);

/// Added to the shutdown timeout before a round fails: the time for the
/// process to be scheduled, join its threads and be reaped on a busy
/// machine. A process that ignored SIGTERM, or waited for a stuck
/// connection, would take forever, not a little longer.
const EXIT_SLACK: Duration = Duration::from_secs(10);

/// xorshift64*: enough randomness for choosing moments, reproducible from
/// its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn signal(child: &Child, name: &str) {
    common::signal(child.id(), name);
}

/// Requests in a loop until `stop`: three pipelined on each connection,
/// the last with `Connection: close`. Errors are expected once shutdown
/// begins; a read timeout keeps a client from outliving its round.
fn load(addr: String, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect(&addr) else { return };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let get = |path: &str, last: bool| {
            let close = if last { "Connection: close\r\n" } else { "" };
            format!("GET {path} HTTP/1.1\r\nHost: x\r\n{close}\r\n")
        };
        let batch = get("/", false) + &get("/a.txt", false) + &get("/nope", true);
        if s.write_all(batch.as_bytes()).is_err() {
            continue;
        }
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
    }
}

/// A connection the server cannot finish by itself: a head cut short, or
/// a large body asked for and never read.
fn stuck(addr: &str, unread_body: bool) -> Option<TcpStream> {
    let mut s = TcpStream::connect(addr).ok()?;
    let bytes: &[u8] = if unread_body {
        b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n"
    } else {
        b"GET / HTTP/1.1\r\nHost:"
    };
    s.write_all(bytes).ok()?;
    Some(s)
}

/// Packs `files` into `to` (through a directory beside it).
fn pack(dir: &Path, name: &str, files: &[(&str, &[u8])]) -> std::path::PathBuf {
    let site = dir.join(name);
    std::fs::create_dir_all(&site).unwrap();
    for (path, contents) in files {
        std::fs::write(site.join(path), contents).unwrap();
    }
    let archive = dir.join(format!("{name}.prg"));
    let out = peregrine()
        .arg("pack")
        .arg(&site)
        .arg("-o")
        .arg(&archive)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    archive
}

#[test]
fn sigterm_at_any_moment_ends_the_process_within_the_shutdown_timeout() {
    let rounds: u64 = std::env::var("PEREGRINE_SIGNAL_ROUNDS").map_or(300, |v| v.parse().unwrap());
    let seed: u64 = std::env::var("PEREGRINE_SIGNAL_SEED").map_or_else(
        |_| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            t.as_nanos() as u64 | 1
        },
        |v| v.parse().unwrap(),
    );
    eprintln!("PEREGRINE_SIGNAL_SEED={seed}");
    let mut rng = Rng(seed);

    let t = Scratch::new("peregrine-signals");
    let big = vec![b'x'; 4 << 20];
    let versions = [
        pack(
            &t.path(""),
            "one",
            &[("index.html", b"one"), ("a.txt", b"a1"), ("big.bin", &big)],
        ),
        pack(
            &t.path(""),
            "two",
            &[("index.html", b"two"), ("a.txt", b"a2"), ("big.bin", &big)],
        ),
    ];
    let live = t.path("live/site.prg");
    std::fs::create_dir_all(t.path("live")).unwrap();
    std::fs::copy(&versions[0], &live).unwrap();
    let log = t.path("logs/access.log");
    std::fs::create_dir_all(t.path("logs")).unwrap();

    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for round in 0..rounds {
        let mut child = peregrine()
            .arg("serve")
            .arg(&live)
            .args(["--bind", "127.0.0.1:0", "--workers", "2", "--shutdown-timeout"])
            .arg(SHUTDOWN_TIMEOUT.as_secs_f64().to_string())
            .arg("--access-log")
            .arg(&log)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Lines::of(child.stderr.take().unwrap());
        let addr = last_addr(&lines.line(" on http://"));

        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..2)
            .map(|_| {
                let (addr, stop) = (addr.clone(), stop.clone());
                std::thread::spawn(move || load(addr, stop))
            })
            .collect();
        // One round in ten holds a connection only the timeout ends.
        let _held = (round % 10 == 9).then(|| stuck(&addr, rng.below(2) == 0));

        // Up to four events at random moments, then SIGTERM at one.
        for _ in 0..rng.below(5) {
            std::thread::sleep(Duration::from_micros(rng.below(20_000)));
            match rng.below(3) {
                0 => {
                    let next = t.path("live/next.prg");
                    std::fs::copy(&versions[rng.below(2) as usize], &next).unwrap();
                    std::fs::rename(&next, &live).unwrap();
                }
                1 => signal(&child, "HUP"),
                _ => signal(&child, "USR1"),
            }
        }
        std::thread::sleep(Duration::from_micros(rng.below(30_000)));
        let sent = Instant::now();
        signal(&child, "TERM");

        // Reaped on a thread, so that a process that never exits fails the
        // round instead of hanging the test.
        let (tx, exited) = mpsc::channel();
        let pid = child.id().to_string();
        let waiter = std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        let Ok(status) = exited.recv_timeout(SHUTDOWN_TIMEOUT + EXIT_SLACK) else {
            let _ = std::process::Command::new("kill").args(["-KILL", &pid]).status();
            panic!(
                "round {round} (PEREGRINE_SIGNAL_SEED={seed}): no exit {:?} after SIGTERM",
                SHUTDOWN_TIMEOUT + EXIT_SLACK
            );
        };
        let status = status.unwrap();
        slowest = slowest.max(sent.elapsed());
        waiter.join().unwrap();
        assert_eq!(
            status.code(),
            Some(0),
            "round {round} (PEREGRINE_SIGNAL_SEED={seed}): {status}"
        );
        stop.store(true, Ordering::Relaxed);
        for client in clients {
            client.join().unwrap();
        }
    }
    eprintln!(
        "{rounds} rounds in {:.1?}; slowest exit after SIGTERM {slowest:.1?} (shutdown timeout {SHUTDOWN_TIMEOUT:?})",
        started.elapsed()
    );
}
