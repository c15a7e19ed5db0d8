//! File descriptors under a client that asks for many files: the files
//! caches of the process keep at most half of them (`cache::files_max`),
//! however many workers and spellings of a path there are, and a file that
//! cannot be opened for want of one is a 503, never a 404. A binary of its
//! own: it lowers the process's descriptor limit and counts
//! `/proc/self/fd`, and its tests run one at a time.

use std::fs::File;
use std::path::PathBuf;
use std::sync::{Mutex, Once};
use std::time::Duration;

use peregrine::{Running, Server};
use peregrine_files::{FileServer, Options};
use test_support::http::{get, Client};

/// The soft descriptor limit the tests run under: the caches may keep 256.
const LIMIT: u64 = 512;
/// Larger than `cache::SMALL_FILE_BYTES`: sent from its open file.
const BIG: u64 = 40_000;

/// One test at a time: each counts the process's descriptors.
static ALONE: Mutex<()> = Mutex::new(());

fn setup() -> std::sync::MutexGuard<'static, ()> {
    static LIMITED: Once = Once::new();
    LIMITED.call_once(|| {
        let nofile = rustix::process::Resource::Nofile;
        let mut limit = rustix::process::getrlimit(nofile);
        assert!(limit.maximum.is_none_or(|max| max >= LIMIT), "hard limit below {LIMIT}");
        limit.current = Some(LIMIT);
        rustix::process::setrlimit(nofile, limit).unwrap();
        peregrine_files::read_descriptor_limit();
    });
    ALONE.lock().unwrap_or_else(|e| e.into_inner())
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

struct Root(PathBuf);

impl Root {
    /// A root with `small.txt`, `other.txt` and `n_big` files of `BIG`
    /// bytes (sparse), `big0.bin`...
    fn new(tag: &str, n_big: usize) -> Root {
        let dir = std::env::temp_dir().join(format!("peregrine-fds-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("small.txt"), "small\n").unwrap();
        std::fs::write(dir.join("other.txt"), "other\n").unwrap();
        for i in 0..n_big {
            File::create(dir.join(format!("big{i}.bin")))
                .unwrap()
                .set_len(BIG)
                .unwrap();
        }
        Root(dir)
    }

    fn serve(&self, workers: usize) -> Running {
        let mut options = Options::new(&self.0);
        options.revalidate_interval = Duration::from_secs(600);
        Server::new()
            .bind("127.0.0.1:0")
            .workers(workers)
            .start(FileServer::new(options).unwrap())
            .unwrap()
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Sends `targets` as pipelined HEADs on one connection; their statuses.
fn heads(client: &mut Client, targets: &[String]) -> Vec<u16> {
    let mut batch = Vec::new();
    for t in targets {
        batch.extend_from_slice(format!("HEAD {t} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
    }
    client.send(&batch);
    targets.iter().map(|_| client.response_to("HEAD").status).collect()
}

/// The review's finding: `HEAD /cNvM/../big.bin` 25,600 times, each
/// spelling its own entry with its own descriptor. Spellings of one file
/// share its entry: the process holds one descriptor more, not hundreds.
#[test]
fn aliases_of_a_file_share_one_entry() {
    let _alone = setup();
    let root = Root::new("alias", 1);
    let server = root.serve(1);
    let mut client = Client::connect(server.local_addr());
    assert_eq!(heads(&mut client, &["/big0.bin".to_owned()]), [200]);
    let before = open_fds();
    let aliases: Vec<String> = (0..300)
        .map(|i| match i % 3 {
            0 => format!("/c{i}/../big0.bin"),
            1 => format!("/./c{i}/..//big0.bin"),
            _ => "/%62ig0.bin".to_owned(),
        })
        .collect();
    assert!(heads(&mut client, &aliases).iter().all(|&s| s == 200));
    let after = open_fds();
    assert!(after <= before + 2, "{before} descriptors before, {after} after");
}

/// Four workers' caches (as two workers with two sites) each holding a
/// quarter of the limit held them all: `accept` failed and uncached files
/// got 404s. Together they keep at most half, and a new client is served.
#[test]
fn caches_together_leave_descriptors_for_connections() {
    let _alone = setup();
    let n_big = 300;
    let root = Root::new("shared", n_big);
    let server = root.serve(4);
    let addr = server.local_addr();
    let targets: Vec<String> = (0..n_big).map(|i| format!("/big{i}.bin")).collect();
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let targets = targets.clone();
            std::thread::spawn(move || {
                let mut client = Client::connect(addr);
                heads(&mut client, &targets)
            })
        })
        .collect();
    for t in threads {
        let statuses = t.join().unwrap();
        assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    }
    let held = open_fds();
    assert!(held <= (LIMIT / 2) as usize + 64, "{held} descriptors open of {LIMIT}");
    for _ in 0..8 {
        let r = get(addr, "/other.txt");
        assert_eq!((r.status, r.text().as_str()), (200, "other\n"));
    }
}

/// A file that cannot be opened because the process has no descriptor
/// left is a 503 with `Retry-After`, not a 404 a cache in front may keep
/// (RFC 9111 §4.2.2) for a file that is there; once descriptors are back,
/// it is served.
#[test]
fn no_descriptor_left_is_503_not_404() {
    let _alone = setup();
    let root = Root::new("emfile", 0);
    let server = root.serve(1);
    let mut client = Client::connect(server.local_addr());
    client.send(b"GET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(client.response().status, 200);
    let mut taken = Vec::new();
    loop {
        match File::open("/dev/null") {
            Ok(f) => taken.push(f),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EMFILE));
                break;
            }
        }
    }
    client.send(b"GET /other.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = client.response();
    drop(taken);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("1"));
    client.send(b"GET /other.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = client.response();
    assert_eq!((r.status, r.text().as_str()), (200, "other\n"));
}
