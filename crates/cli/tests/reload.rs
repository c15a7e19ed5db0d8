//! SIGHUP reloads the configuration of a running `peregrine`: new
//! connections get the new settings, connections already open finish under
//! the old ones, and nothing is refused meanwhile.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use common::{Scratch, PATIENCE};
use test_support::process::Process;
use test_support::{wait_for, wait_until};

/// A scratch directory with a site to serve, `site/index.html`.
fn tmp(tag: &str) -> Scratch {
    let t = Scratch::new(&format!("peregrine-reload-{tag}"));
    std::fs::create_dir_all(t.path("site")).unwrap();
    std::fs::write(t.path("site/index.html"), "<p>hello</p>\n").unwrap();
    t
}

/// A running `peregrine`, killed when dropped; its stderr read line by
/// line (`Process`'s methods).
struct Server(Process);

impl Server {
    fn start(args: &[&str]) -> Server {
        Server(Process::spawn(common::peregrine().args(args)))
    }

    /// `host:port` of the first `http://` URL in the line with `needle`.
    fn addr(&self, needle: &str) -> String {
        let line = self.line(needle);
        let url = line
            .split("http://")
            .nth(1)
            .unwrap_or_else(|| panic!("no URL in {line:?}"));
        url.split('/').next().unwrap().to_owned()
    }

    fn terminate(self) {
        self.0.terminate();
    }
}

impl std::ops::Deref for Server {
    type Target = Process;

    fn deref(&self) -> &Process {
        &self.0
    }
}

/// A response: its head (lower-cased field names kept as sent) and body.
struct Answer {
    head: String,
    body: Vec<u8>,
}

impl Answer {
    fn field(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Reads one response (with Content-Length) from a keep-alive connection.
fn read_answer(s: &mut TcpStream) -> std::io::Result<Answer> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("closed after {:?}", String::from_utf8_lossy(&buf)),
            ));
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    let mut answer = Answer { head, body: Vec::new() };
    let n: usize = answer.field("content-length").map_or(0, |v| v.parse().unwrap());
    answer.body = vec![0; n];
    s.read_exact(&mut answer.body)?;
    Ok(answer)
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s
}

/// One request on a new connection.
fn get(addr: &str, path: &str) -> std::io::Result<Answer> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(PATIENCE))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
    read_answer(&mut s)
}

/// Asks on new connections until `check` holds for an answer.
fn eventually(addr: &str, path: &str, what: &str, check: impl Fn(&Answer) -> bool) -> Answer {
    wait_for(what, || Some(get(addr, path).unwrap()).filter(&check))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn sighup_gives_new_connections_the_new_settings_and_refuses_none() {
    let t = tmp("switch");
    let config = t.path("peregrine.toml");
    let site = t.path("site");
    std::fs::write(
        &config,
        format!("root = {:?}\ncache-control = \"max-age=1\"\n", s(&site)),
    )
    .unwrap();
    let server = Server::start(&[
        "serve",
        "--config",
        s(&config),
        "--bind",
        "127.0.0.1:0",
        "--workers",
        "2",
    ]);
    let addr = server.addr("serving");

    // An idle keep-alive connection, and one in the middle of a request.
    let mut idle = connect(&addr);
    write!(idle, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(
        read_answer(&mut idle).unwrap().field("cache-control"),
        Some("max-age=1")
    );
    // (Answered once first: a connection still waiting in the accept queue
    // at the reload would rightly go to the new workers.)
    let mut midway = connect(&addr);
    write!(midway, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(
        read_answer(&mut midway).unwrap().field("cache-control"),
        Some("max-age=1")
    );
    write!(midway, "GET / HTTP/1.1\r\nHost: x\r\n").unwrap();

    // Clients asking without pause, on new connections, all along.
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (addr, stop) = (addr.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut n_ok, mut failures) = (0, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    match get(&addr, "/") {
                        Ok(a) if a.head.starts_with("HTTP/1.1 200 ") => n_ok += 1,
                        Ok(a) => failures.push(a.head),
                        Err(e) => failures.push(e.to_string()),
                    }
                }
                (n_ok, failures)
            })
        })
        .collect();

    std::fs::write(
        &config,
        format!("root = {:?}\ncache-control = \"max-age=2\"\n", s(&site)),
    )
    .unwrap();
    server.signal("HUP");
    server.line("configuration reloaded (generation 2)");
    eventually(&addr, "/", "the new Cache-Control", |a| {
        a.field("cache-control") == Some("max-age=2")
    });

    // Connections open before finish under the old settings, then close
    // (once their worker has seen the hand-over: it may be a moment late).
    let deadline = Instant::now() + PATIENCE;
    loop {
        write!(idle, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let old = read_answer(&mut idle).unwrap();
        assert_eq!(old.field("cache-control"), Some("max-age=1"), "{}", old.head);
        if old.field("connection") == Some("close") {
            break;
        }
        assert!(Instant::now() < deadline, "never Connection: close");
    }
    write!(midway, "\r\n").unwrap();
    let old = read_answer(&mut midway).unwrap();
    assert_eq!(old.field("cache-control"), Some("max-age=1"), "{}", old.head);

    // Once more, with the loop still running: every answer was a 200.
    std::fs::write(
        &config,
        format!("root = {:?}\ncache-control = \"max-age=3\"\n", s(&site)),
    )
    .unwrap();
    server.signal("HUP");
    server.line("configuration reloaded (generation 3)");
    eventually(&addr, "/", "the third Cache-Control", |a| {
        a.field("cache-control") == Some("max-age=3")
    });
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        let (n_ok, failures) = client.join().unwrap();
        assert!(
            failures.is_empty(),
            "{} failed (of {}): {:?}",
            failures.len(),
            n_ok + failures.len(),
            failures
        );
        assert!(n_ok > 0);
    }
    server.terminate();
}

#[test]
fn a_bad_config_on_sighup_is_named_and_the_old_settings_stay() {
    let t = tmp("bad");
    let config = t.path("peregrine.toml");
    let site = t.path("site");
    std::fs::write(&config, format!("root = {:?}\nindex = [\"index.html\"]\n", s(&site))).unwrap();
    let server = Server::start(&[
        "serve",
        "--config",
        s(&config),
        "--bind",
        "127.0.0.1:0",
        "--workers",
        "1",
    ]);
    let addr = server.addr("serving");
    assert!(get(&addr, "/").unwrap().head.starts_with("HTTP/1.1 200 "));

    // A misspelt key on line 3: named with its file and line.
    std::fs::write(
        &config,
        format!("root = {:?}\nindex = [\"index.html\"]\nlist-dir = true\n", s(&site)),
    )
    .unwrap();
    server.signal("HUP");
    let line = server.line("configuration not reloaded");
    assert!(line.contains("still serving generation 1"), "{line}");
    assert!(line.contains(&format!("{}:3", s(&config))), "{line}");
    assert!(line.contains("\"list-dir\""), "{line}");
    assert!(line.contains("did you mean \"list-dirs\""), "{line}");
    // A bad value: named too.
    std::fs::write(&config, format!("root = {:?}\nworkers = -2\n", s(&site))).unwrap();
    server.signal("HUP");
    let line = server.line("configuration not reloaded");
    assert!(line.contains(&format!("{}:2: workers", s(&config))), "{line}");
    // The old settings still serve: no listing, the index page.
    assert!(get(&addr, "/").unwrap().head.starts_with("HTTP/1.1 200 "));
    std::fs::create_dir_all(t.path("site/empty")).unwrap();
    assert!(get(&addr, "/empty/").unwrap().head.starts_with("HTTP/1.1 404 "));

    // Fixed: the next generation is number 2.
    std::fs::write(&config, format!("root = {:?}\nlist-dirs = true\n", s(&site))).unwrap();
    server.signal("HUP");
    server.line("configuration reloaded (generation 2)");
    eventually(&addr, "/empty/", "a directory listing", |a| {
        a.head.starts_with("HTTP/1.1 200 ")
    });
    server.terminate();
}

#[test]
fn hello_reloads_its_worker_count() {
    let t = tmp("hello");
    let config = t.path("peregrine.toml");
    std::fs::write(&config, "workers = 1\nmetrics = \"127.0.0.1:0\"\n").unwrap();
    let server = Server::start(&["hello", "--config", s(&config), "--bind", "127.0.0.1:0"]);
    let metrics = server.addr("metrics on");
    let addr = server.addr("hello on");
    let scrape = || String::from_utf8(get(&metrics, "/metrics").unwrap().body).unwrap();
    assert!(scrape().lines().any(|l| l == "peregrine_workers 1"));
    assert_eq!(get(&addr, "/").unwrap().body, b"Hello, World!");

    std::fs::write(&config, "workers = 2\nmetrics = \"127.0.0.1:0\"\n").unwrap();
    server.signal("HUP");
    server.line("configuration reloaded (generation 2)");
    // The old generation's worker finishes; two new ones run. The metrics
    // listener is the same (its address did not change).
    wait_until("two workers", || scrape().lines().any(|l| l == "peregrine_workers 2"));
    assert_eq!(get(&addr, "/").unwrap().body, b"Hello, World!");
    // Counters add up across generations: one request before, one after.
    let text = scrape();
    assert!(
        text.lines().any(|l| l == "peregrine_requests_total{class=\"2xx\"} 2"),
        "{text}"
    );
    server.terminate();
}

/// A port free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn addresses_added_on_reload_are_bound_and_removed_ones_close() {
    let t = tmp("addrs");
    let config = t.path("peregrine.toml");
    let site = t.path("site");
    let root = format!("root = {:?}\n", s(&site));
    std::fs::write(&config, format!("{root}bind = [\"127.0.0.1:0\"]\n")).unwrap();
    let server = Server::start(&["serve", "--config", s(&config), "--workers", "1"]);
    let first = server.addr("serving");
    let second = format!("127.0.0.1:{}", free_port());

    std::fs::write(&config, format!("{root}bind = [\"127.0.0.1:0\", {second:?}]\n")).unwrap();
    server.signal("HUP");
    server.line("configuration reloaded (generation 2)");
    // The first address kept its socket (and the port 0 gave it).
    assert!(get(&first, "/").unwrap().head.starts_with("HTTP/1.1 200 "));
    assert!(get(&second, "/").unwrap().head.starts_with("HTTP/1.1 200 "));

    std::fs::write(&config, format!("{root}bind = [{second:?}]\n")).unwrap();
    server.signal("HUP");
    server.line("configuration reloaded (generation 3)");
    assert!(get(&second, "/").unwrap().head.starts_with("HTTP/1.1 200 "));
    // The old generation has nothing left to finish: the removed port closes.
    let deadline = Instant::now() + PATIENCE;
    while TcpStream::connect(&first).is_ok() {
        assert!(Instant::now() < deadline, "{first} is still open");
        std::thread::yield_now();
    }
    server.terminate();
}

#[test]
fn a_reload_is_announced_to_systemd() {
    use std::os::unix::net::UnixDatagram;
    let t = tmp("notify");
    let notify_path = t.path("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_peregrine"))
        .args(["hello", "--bind", "127.0.0.1:0", "--workers", "1"])
        .env("NOTIFY_SOCKET", &notify_path)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 128];
    let mut next = || {
        let n = notify.recv(&mut buf).expect("a notification");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert_eq!(next(), "READY=1");
    let kill = |signal: &str| {
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    kill("-HUP");
    let reloading = next();
    let usec = reloading
        .strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
        .unwrap_or_else(|| panic!("{reloading:?}"));
    assert!(usec.parse::<u64>().unwrap() > 0, "{reloading:?}");
    assert_eq!(next(), "READY=1");
    kill("-TERM");
    assert_eq!(next(), "STOPPING=1");
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn after_dropping_root_a_reload_keeps_its_ports_and_refuses_a_new_privileged_one() {
    // Only root can drop root (process.rs checks the refusal otherwise).
    let root = test_support::process::is_root();
    if !root {
        return;
    }
    let t = tmp("user");
    let config = t.path("peregrine.toml");
    std::fs::write(&config, "bind = [\"127.0.0.1:0\"]\nworkers = 1\n").unwrap();
    let server = Server::start(&["hello", "--config", s(&config), "--user", "nobody"]);
    let addr = server.addr("hello on");

    std::fs::write(&config, "bind = [\"127.0.0.1:0\"]\nworkers = 2\n").unwrap();
    server.signal("HUP");
    server.line("configuration reloaded (generation 2)");
    assert_eq!(get(&addr, "/").unwrap().body, b"Hello, World!");

    std::fs::write(&config, "bind = [\"127.0.0.1:0\", \"127.0.0.1:1\"]\nworkers = 2\n").unwrap();
    server.signal("HUP");
    let line = server.line("configuration not reloaded");
    assert!(line.contains("127.0.0.1:1"), "{line}");
    assert!(line.contains("root was given up"), "{line}");
    assert_eq!(get(&addr, "/").unwrap().body, b"Hello, World!");
    server.terminate();
}

/// The lines of a log file once one holds `needle` (the error log, which
/// takes the lines standard error would have had).
fn logged(file: &Path, needle: &str) -> String {
    wait_for(&format!("{needle:?} in {}", file.display()), || {
        std::fs::read_to_string(file).ok().filter(|l| l.contains(needle))
    })
}

#[test]
fn after_dropping_root_sigusr1_and_sighup_reopen_the_logs_root_created() {
    if !test_support::process::is_root() {
        return; // only root can drop root
    }
    use std::os::unix::fs::PermissionsExt;
    let t = tmp("user-logs");
    let logs = t.path("logs");
    std::fs::create_dir(&logs).unwrap();
    // Writable by nobody, as systemd's LogsDirectory= makes it: a rotated
    // file can be created again.
    std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (access, error) = (logs.join("access.log"), logs.join("error.log"));
    let config = t.path("peregrine.toml");
    std::fs::write(
        &config,
        format!(
            "root = {:?}\nbind = [\"127.0.0.1:0\"]\nworkers = 1\n",
            s(&t.path("site"))
        ),
    )
    .unwrap();
    let server = Server::start(&[
        "serve",
        "--config",
        s(&config),
        "--user",
        "nobody",
        "--access-log",
        s(&access),
        "--error-log",
        s(&error),
    ]);
    let addr = common::last_addr(logged(&error, " on http://").lines().last().unwrap());
    assert_eq!(get(&addr, "/").unwrap().body, b"<p>hello</p>\n");

    server.signal("USR1");
    logged(&error, "access log reopened");
    std::fs::write(
        &config,
        format!(
            "root = {:?}\nbind = [\"127.0.0.1:0\"]\nworkers = 2\n",
            s(&t.path("site"))
        ),
    )
    .unwrap();
    server.signal("HUP");
    logged(&error, "configuration reloaded (generation 2)");

    // logrotate without `create`: the file is moved away, SIGUSR1 makes
    // a new one, as the user the server now is.
    std::fs::rename(&access, logs.join("access.log.1")).unwrap();
    server.signal("USR1");
    wait_until("the access log reopened twice", || {
        std::fs::read_to_string(&error)
            .unwrap()
            .matches("access log reopened")
            .count()
            == 2
    });
    assert_eq!(get(&addr, "/rotated").unwrap().head.split(' ').nth(1), Some("404"));
    let lines = logged(&access, "/rotated");
    assert_eq!(lines.lines().count(), 1, "{lines}");
    let errors = std::fs::read_to_string(&error).unwrap();
    assert!(!errors.contains("error:"), "{errors}");
    server.terminate();
}

#[test]
fn after_dropping_root_what_a_reload_or_reopen_cannot_reach_is_warned_of_at_start() {
    if !test_support::process::is_root() {
        return; // only root can drop root
    }
    use std::os::unix::fs::PermissionsExt;
    let t = tmp("user-unreachable");
    let logs = t.path("logs");
    std::fs::create_dir(&logs).unwrap();
    std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = t.path("peregrine.toml");
    std::fs::write(&config, "bind = [\"127.0.0.1:0\"]\n").unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let access = logs.join("access.log");
    let server = Server::start(&[
        "hello",
        "--config",
        s(&config),
        "--user",
        "nobody",
        "--access-log",
        s(&access),
    ]);
    let line = server.line("cannot create files in");
    assert!(
        line.contains(&format!("user nobody cannot create files in {}", logs.display())),
        "{line}"
    );
    assert!(line.contains("copytruncate"), "{line}");
    let line = server.line("reload (SIGHUP) will fail");
    assert!(
        line.contains(&format!(
            "the configuration file {} cannot be read by user nobody",
            config.display()
        )),
        "{line}"
    );
    // The file root created is the user's: SIGUSR1 reopens it.
    server.signal("USR1");
    server.line("access log reopened");
    server.terminate();
}

#[test]
fn serve_archive_reloads_the_same_archive_once_and_opens_a_new_path() {
    let t = tmp("archive");
    let pack = |body: &str, out: &Path| {
        let dir = t.path(body);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("index.html"), body).unwrap();
        let status = Command::new(env!("CARGO_BIN_EXE_peregrine"))
            .args(["pack", s(&dir), "-o", s(out)])
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    };
    let (a, b) = (t.path("a.prg"), t.path("b.prg"));
    pack("first", &a);
    pack("second", &b);
    let config = t.path("peregrine.toml");
    std::fs::write(&config, format!("root = {:?}\n", s(&a))).unwrap();
    let server = Server::start(&[
        "serve",
        "--config",
        s(&config),
        "--bind",
        "127.0.0.1:0",
        "--workers",
        "1",
    ]);
    let addr = server.addr("serving");
    assert_eq!(get(&addr, "/").unwrap().body, b"first");

    // The same path: the archive is read again (its own line), once.
    server.signal("HUP");
    server.lines(&["configuration reloaded (generation 2)", "loaded as generation 2"]);
    // Another path: that archive is served.
    std::fs::write(&config, format!("root = {:?}\n", s(&b))).unwrap();
    server.signal("HUP");
    server.line("configuration reloaded (generation 3)");
    eventually(&addr, "/", "the second archive", |a| a.body == b"second");
    server.terminate();
}

/// One HTTP/2 frame read whole: (type, flags, stream id, payload), or
/// `None` once the server has closed the connection.
fn h2_frame(s: &mut TcpStream) -> Option<(u8, u8, u32, Vec<u8>)> {
    let mut head = [0u8; 9];
    match s.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return None,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
        Err(e) => panic!("reading a frame: {e}"),
    }
    let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
    let mut payload = vec![0; len];
    s.read_exact(&mut payload).expect("a frame's payload");
    let id = u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff;
    Some((head[3], head[4], id, payload))
}

/// RFC 9113 §6.8: a server that shuts a connection down sends GOAWAY with
/// the last stream it will answer, and finishes that stream. A reload is
/// such a shutdown for the old generation's connections: an HTTP/2 client
/// with a response in flight (held here by a flow-control window of 0)
/// gets GOAWAY NO_ERROR naming it (after the first, naming 2^31-1, and a
/// PING acknowledged), then the whole body once it opens the
/// window, then the close; new connections go to the new generation.
#[test]
fn a_reload_sends_goaway_to_http2_connections_and_finishes_their_streams() {
    use test_support::h2::{END_HEADERS, END_STREAM, GOAWAY, HEADERS, NO_ERROR, PING, PREFACE, SETTINGS};
    const DATA: u8 = test_support::h2::DATA;
    const WINDOW_UPDATE: u8 = test_support::h2::WINDOW_UPDATE;
    const ACK: u8 = 0x1;
    let t = tmp("h2");
    let body: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(t.path("site/big.bin"), &body).unwrap();
    let site = t.path("site");
    let server = Server::start(&["serve", s(&site), "--bind", "127.0.0.1:0", "--workers", "1"]);
    let addr = server.addr("serving");

    let mut c = connect(&addr);
    // The preface, SETTINGS_INITIAL_WINDOW_SIZE = 0 (no DATA until we say
    // so), and a GET of the file on stream 1.
    let mut hello = PREFACE.to_vec();
    hello.extend_from_slice(&[0, 0, 6, SETTINGS, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0]);
    let head = test_support::h2::get_head("/big.bin", "localhost");
    hello.extend_from_slice(&[
        0,
        0,
        u8::try_from(head.len()).unwrap(),
        HEADERS,
        END_STREAM | END_HEADERS,
    ]);
    hello.extend_from_slice(&1u32.to_be_bytes());
    hello.extend_from_slice(&head);
    c.write_all(&hello).unwrap();
    loop {
        let (kind, flags, id, payload) = h2_frame(&mut c).expect("the response's HEADERS");
        match kind {
            SETTINGS if flags & ACK == 0 => c.write_all(&[0, 0, 0, SETTINGS, ACK, 0, 0, 0, 0]).unwrap(),
            HEADERS if id == 1 => break,
            DATA => panic!("DATA on stream {id} through a window of 0: {} bytes", payload.len()),
            _ => {}
        }
    }

    server.signal("HUP");
    server.line("configuration reloaded (generation 2)");
    // First a GOAWAY naming 2^31-1 with a PING; the final GOAWAY, naming
    // the last stream answered, once the PING is acknowledged (§6.8).
    let mut goaways = Vec::new();
    while goaways.len() < 2 {
        let (kind, flags, id, payload) = h2_frame(&mut c).expect("GOAWAY before the close");
        match kind {
            GOAWAY => goaways.push(payload),
            PING if flags & ACK == 0 => {
                let mut ack = vec![0, 0, 8, PING, ACK, 0, 0, 0, 0];
                ack.extend_from_slice(&payload);
                c.write_all(&ack).unwrap();
            }
            DATA => panic!("DATA on stream {id} through a window of 0"),
            _ => {}
        }
    }
    let last = |g: &[u8]| u32::from_be_bytes(g[..4].try_into().unwrap()) & 0x7fff_ffff;
    let code = |g: &[u8]| u32::from_be_bytes(g[4..8].try_into().unwrap());
    assert_eq!(
        (last(&goaways[0]), code(&goaways[0])),
        ((1 << 31) - 1, NO_ERROR),
        "the first GOAWAY"
    );
    assert_eq!(
        (last(&goaways[1]), code(&goaways[1])),
        (1, NO_ERROR),
        "GOAWAY's last stream id and error code"
    );

    // The stream in flight is finished: open both windows, read the body.
    let mut update = Vec::new();
    for id in [0u32, 1] {
        update.extend_from_slice(&[0, 0, 4, WINDOW_UPDATE, 0]);
        update.extend_from_slice(&id.to_be_bytes());
        update.extend_from_slice(&(1u32 << 30).to_be_bytes());
    }
    c.write_all(&update).unwrap();
    let mut got = Vec::new();
    loop {
        let (kind, flags, id, payload) = h2_frame(&mut c).expect("the rest of the body before the close");
        if kind == DATA && id == 1 {
            got.extend_from_slice(&payload);
            if flags & END_STREAM != 0 {
                break;
            }
        }
    }
    assert!(
        got == body,
        "{} bytes of {} came, or not the file's",
        got.len(),
        body.len()
    );
    // Then the old generation closes the connection.
    while let Some((kind, _, id, _)) = h2_frame(&mut c) {
        assert!(
            kind != HEADERS && kind != DATA,
            "a frame of type {kind} on stream {id} after the last stream"
        );
    }
    // New connections are served by the new generation.
    assert!(get(&addr, "/index.html").unwrap().head.starts_with("HTTP/1.1 200 "));
    server.terminate();
}

/// `watch-config = true`: the configuration file laid out as Kubernetes
/// mounts a ConfigMap (`peregrine.toml -> ..data/peregrine.toml`, `..data
/// -> ..v1`) is reloaded when `..data` is swapped to a new directory, and
/// again when the file it leads to is rewritten in place; each reload is
/// the one SIGHUP makes (its line, new connections get the new settings).
#[test]
fn watch_config_reloads_when_a_configmap_swaps_its_symlink_or_the_file_changes() {
    use std::os::unix::fs::symlink;
    let t = tmp("watch");
    let site = t.path("site");
    let cm = t.path("cm");
    let version = |n: u32| {
        let dir = cm.join(format!("..v{n}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("peregrine.toml"),
            format!(
                "root = {:?}\nwatch-config = true\ncache-control = \"max-age={n}\"\n",
                s(&site)
            ),
        )
        .unwrap();
    };
    version(1);
    symlink("..v1", cm.join("..data")).unwrap();
    symlink("..data/peregrine.toml", cm.join("peregrine.toml")).unwrap();
    let config = cm.join("peregrine.toml");
    let server = Server::start(&[
        "serve",
        "--config",
        s(&config),
        "--bind",
        "127.0.0.1:0",
        "--workers",
        "1",
    ]);
    let addr = server.addr("serving");
    server.line("watching");
    assert_eq!(get(&addr, "/").unwrap().field("cache-control"), Some("max-age=1"));
    // The kubelet's update: a new directory, a new symlink renamed over
    // the old one.
    version(2);
    symlink("..v2", cm.join("..data_tmp")).unwrap();
    std::fs::rename(cm.join("..data_tmp"), cm.join("..data")).unwrap();
    server.line("configuration reloaded (generation 2)");
    eventually(&addr, "/", "max-age=2 after the swap", |a| {
        a.field("cache-control") == Some("max-age=2")
    });
    // An edit in place of the file the path leads to.
    std::fs::write(
        cm.join("..v2/peregrine.toml"),
        format!(
            "root = {:?}\nwatch-config = true\ncache-control = \"max-age=33\"\n",
            s(&site)
        ),
    )
    .unwrap();
    server.line("configuration reloaded (generation 3)");
    eventually(&addr, "/", "max-age=33 after the edit", |a| {
        a.field("cache-control") == Some("max-age=33")
    });
    server.terminate();
}
