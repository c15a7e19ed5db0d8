//! The outbound channel end to end (`peregrine::outbound`): a broker over a
//! real TCP listener and a real Unix listener hands back sockets connected
//! to them, by index, across a thread and across a process.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use peregrine::outbound::{pair, Broker, Requester, Target};
use test_support::process::Process;
use test_support::{wait_for, Scratch, PATIENCE};

/// The upstreams of a test: a TCP and a Unix listener, indexes 0 and 1.
struct Upstreams {
    tcp: TcpListener,
    unix: UnixListener,
    path: PathBuf,
    _dir: Scratch,
}

impl Upstreams {
    fn new(name: &str) -> Upstreams {
        let dir = Scratch::new(name);
        let path = dir.path("upstream.sock");
        Upstreams {
            tcp: TcpListener::bind("127.0.0.1:0").unwrap(),
            unix: UnixListener::bind(&path).unwrap(),
            path,
            _dir: dir,
        }
    }

    fn targets(&self) -> Vec<Target> {
        vec![
            Target::Tcp {
                host: "127.0.0.1".into(),
                port: self.tcp.local_addr().unwrap().port(),
            },
            Target::Unix(self.path.clone()),
        ]
    }
}

/// A broker over `targets` serving on a thread, and the requester.
fn serve(broker: Broker) -> (Requester, JoinHandle<io::Result<()>>) {
    let (end, requester) = pair().unwrap();
    (requester, std::thread::spawn(move || broker.serve(end)))
}

/// The next reply, waited for (at most `PATIENCE`).
fn reply(requester: &mut Requester) -> (u64, io::Result<OwnedFd>) {
    wait_for("a reply from the broker", || requester.poll_reply().unwrap())
}

/// The connection asked for by index, or the broker's errno.
fn connect(requester: &mut Requester, index: u32) -> io::Result<OwnedFd> {
    let id = requester.request(index).unwrap();
    let (replied, conn) = reply(requester);
    assert_eq!(replied, id);
    conn
}

/// `conn` came as the protocol promises (non-blocking, close-on-exec) and
/// is connected to the peer `accepted` is: bytes written on either side
/// are read on the other.
fn check_connected(conn: impl Read + Write + AsFd, mut accepted: impl Read + Write) {
    let mut conn = conn;
    let flags = rustix::io::fcntl_getfd(conn.as_fd()).unwrap();
    assert!(flags.contains(rustix::io::FdFlags::CLOEXEC), "close-on-exec");
    assert_eq!(
        conn.read(&mut [0; 8]).unwrap_err().kind(),
        io::ErrorKind::WouldBlock,
        "non-blocking, with nothing to read yet"
    );
    conn.write_all(b"ping").unwrap();
    let mut buf = [0; 4];
    accepted.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"ping");
    accepted.write_all(b"pong").unwrap();
    let got = wait_for("the upstream's bytes through the handed-over socket", || {
        match conn.read(&mut buf) {
            Ok(n) => Some(buf[..n].to_vec()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            Err(e) => panic!("{e}"),
        }
    });
    assert_eq!(got, b"pong");
}

fn check_tcp(conn: OwnedFd, upstreams: &Upstreams) {
    let conn = TcpStream::from(conn);
    assert!(conn.nodelay().unwrap(), "TCP_NODELAY");
    let (accepted, peer) = upstreams.tcp.accept().unwrap();
    assert_eq!(
        peer,
        conn.local_addr().unwrap(),
        "the upstream accepted this very socket"
    );
    accepted.set_read_timeout(Some(PATIENCE)).unwrap();
    check_connected(conn, accepted);
}

fn check_unix(conn: OwnedFd, upstreams: &Upstreams) {
    let conn = UnixStream::from(conn);
    assert_eq!(conn.peer_addr().unwrap().as_pathname(), Some(upstreams.path.as_path()));
    let (accepted, _) = upstreams.unix.accept().unwrap();
    accepted.set_read_timeout(Some(PATIENCE)).unwrap();
    check_connected(conn, accepted);
}

#[test]
fn indexes_zero_and_one_give_sockets_connected_to_the_tcp_and_unix_upstreams() {
    let upstreams = Upstreams::new("peregrine-outbound-indexes");
    let (mut requester, broker) = serve(Broker::new(upstreams.targets()));
    check_tcp(connect(&mut requester, 0).unwrap(), &upstreams);
    check_unix(connect(&mut requester, 1).unwrap(), &upstreams);
    // Again: one connection per request, the channel reused.
    check_tcp(connect(&mut requester, 0).unwrap(), &upstreams);
    drop(requester);
    broker.join().unwrap().unwrap();
}

/// Keeps every line the engine logs (the broker's warnings).
struct Keeper(Mutex<Vec<(log::Level, String)>>);

impl log::Log for Keeper {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        if record.target() == peregrine::log::TARGET {
            let line = (record.level(), record.args().to_string());
            self.0.lock().unwrap().push(line);
        }
    }

    fn flush(&self) {}
}

static KEEPER: Keeper = Keeper(Mutex::new(Vec::new()));

#[test]
fn an_index_out_of_range_is_einval_with_a_warning_and_the_channel_goes_on() {
    // The only test here that installs a logger.
    log::set_logger(&KEEPER).unwrap();
    log::set_max_level(log::LevelFilter::Warn);
    let upstreams = Upstreams::new("peregrine-outbound-range");
    let (mut requester, broker) = serve(Broker::new(upstreams.targets()));
    for index in [7, 2, u32::MAX] {
        let id = requester.request(index).unwrap();
        let (replied, conn) = reply(&mut requester);
        assert_eq!(replied, id);
        let e = conn.unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "index {index}: {e}");
        let warning = format!("outbound: request {id} asks for upstream {index}, but there are 2 (refused: EINVAL)");
        let kept = KEEPER.0.lock().unwrap();
        assert!(kept.contains(&(log::Level::Warn, warning)), "{kept:?}");
    }
    check_unix(connect(&mut requester, 1).unwrap(), &upstreams);
    drop(requester);
    broker.join().unwrap().unwrap();
}

#[test]
fn an_upstream_with_nothing_listening_is_econnrefused() {
    let dir = Scratch::new("peregrine-outbound-refused");
    // A TCP port just closed, and a Unix socket file bound but not
    // listening: both refuse at once.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let path = dir.path("not-listening.sock");
    let bound = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None).unwrap();
    bound.bind(&socket2::SockAddr::unix(&path).unwrap()).unwrap();
    let targets = vec![
        Target::Tcp {
            host: "127.0.0.1".into(),
            port,
        },
        Target::Unix(path),
    ];
    let (mut requester, broker) = serve(Broker::new(targets));
    for index in [0, 1] {
        let e = connect(&mut requester, index).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ECONNREFUSED), "index {index}: {e}");
    }
    drop(requester);
    broker.join().unwrap().unwrap();
}

#[test]
fn a_name_is_resolved_by_the_broker() {
    // `localhost` resolves to 127.0.0.1 (and perhaps ::1 first, where
    // nothing listens: the next address is tried).
    let upstreams = Upstreams::new("peregrine-outbound-name");
    let targets = vec![Target::Tcp {
        host: "localhost".into(),
        port: upstreams.tcp.local_addr().unwrap().port(),
    }];
    let (mut requester, broker) = serve(Broker::new(targets));
    check_tcp(connect(&mut requester, 0).unwrap(), &upstreams);
    drop(requester);
    broker.join().unwrap().unwrap();
}

#[test]
fn an_upstream_that_never_accepts_is_etimedout_and_stalls_nothing_after_it() {
    // A Unix listener with a backlog of 0 holds one connection unaccepted;
    // the next connect waits for room that never comes.
    let upstreams = Upstreams::new("peregrine-outbound-timeout");
    let path = upstreams.path.with_file_name("full.sock");
    let full = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None).unwrap();
    full.bind(&socket2::SockAddr::unix(&path).unwrap()).unwrap();
    full.listen(0).unwrap();
    let _queued = UnixStream::connect(&path).unwrap();
    let mut targets = upstreams.targets();
    targets.push(Target::Unix(path));
    let broker = Broker::new(targets).connect_timeout(Duration::from_millis(200));
    let (mut requester, broker) = serve(broker);
    let e = connect(&mut requester, 2).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ETIMEDOUT), "{e}");
    check_tcp(connect(&mut requester, 0).unwrap(), &upstreams);
    drop(requester);
    broker.join().unwrap().unwrap();
}

#[test]
fn replies_are_matched_by_id_with_two_requests_in_flight() {
    let upstreams = Upstreams::new("peregrine-outbound-ids");
    let (mut requester, broker) = serve(Broker::new(upstreams.targets()));
    let unix_id = requester.request(1).unwrap();
    let tcp_id = requester.request(0).unwrap();
    let refused_id = requester.request(9).unwrap();
    assert!(unix_id != tcp_id && tcp_id != refused_id && unix_id != refused_id);
    let mut replies: Vec<(u64, io::Result<OwnedFd>)> = (0..3).map(|_| reply(&mut requester)).collect();
    // Whatever order they came in, each id has its own answer.
    replies.sort_by_key(|(id, _)| [unix_id, tcp_id, refused_id].iter().position(|i| i == id).unwrap());
    let mut replies = replies.into_iter().map(|(_, conn)| conn);
    check_unix(replies.next().unwrap().unwrap(), &upstreams);
    check_tcp(replies.next().unwrap().unwrap(), &upstreams);
    assert_eq!(replies.next().unwrap().unwrap_err().raw_os_error(), Some(libc::EINVAL));
    assert!(
        requester.poll_reply().unwrap().is_none(),
        "three requests, three replies"
    );
    drop(requester);
    broker.join().unwrap().unwrap();
}

#[test]
fn dropping_the_requester_ends_serve_with_ok() {
    let upstreams = Upstreams::new("peregrine-outbound-drop");
    let (requester, broker) = serve(Broker::new(upstreams.targets()));
    drop(requester);
    broker.join().unwrap().unwrap();

    // Even with a request left unanswered: the reply finds nobody.
    let (mut requester, broker) = serve(Broker::new(upstreams.targets()));
    requester.request(0).unwrap();
    drop(requester);
    broker.join().unwrap().unwrap();
}

/// In the child: the descriptor number of the broker's end, and the
/// targets, one a line (`tcp HOST PORT` or `unix PATH`).
const BROKER_FD: &str = "PEREGRINE_TEST_BROKER_FD";
const BROKER_TARGETS: &str = "PEREGRINE_TEST_BROKER_TARGETS";

#[test]
fn a_broker_in_another_process_hands_connections_across() {
    if let Ok(fd) = std::env::var(BROKER_FD) {
        return be_the_broker(fd.parse().unwrap());
    }
    let upstreams = Upstreams::new("peregrine-outbound-process");
    let targets: String = upstreams
        .targets()
        .iter()
        .map(|target| match target {
            Target::Tcp { host, port } => format!("tcp {host} {port}\n"),
            Target::Unix(path) => format!("unix {}\n", path.display()),
            _ => unreachable!(),
        })
        .collect();
    let (end, mut requester) = pair().unwrap();
    let raw = end.as_raw_fd();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "a_broker_in_another_process_hands_connections_across",
        "--nocapture",
    ])
    .env(BROKER_FD, raw.to_string())
    .env(BROKER_TARGETS, targets)
    .stdout(Stdio::null());
    // SAFETY: the closure runs in the child between fork and exec, where
    // only async-signal-safe calls are sound; fcntl is one, and it changes
    // the flags of the child's copy of `raw` (open: inherited from us,
    // `end` is alive until after the spawn) so that it survives the exec.
    unsafe {
        cmd.pre_exec(move || match libc::fcntl(raw, libc::F_SETFD, 0) {
            -1 => Err(io::Error::last_os_error()),
            _ => Ok(()),
        });
    }
    let child = Process::spawn(&mut cmd);
    // Only the child holds the broker's end now: when it exits, we read
    // end-of-file, and when we drop the requester, its `serve` returns.
    drop(end);

    let (tcp, unix) = (connect(&mut requester, 0), connect(&mut requester, 1));
    check_tcp(tcp.unwrap(), &upstreams);
    check_unix(unix.unwrap(), &upstreams);
    assert_eq!(
        connect(&mut requester, 7).unwrap_err().raw_os_error(),
        Some(libc::EINVAL)
    );
    let pid = child.pid();
    drop(requester);
    let mut lines = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while let Some(line) = child.next_line_before(deadline) {
        lines.push(line);
    }
    // The lines end when the child closes its stderr, at its exit; the
    // deadline is only for a broker that would not end (killed on drop).
    assert!(
        Instant::now() < deadline,
        "the broker is still running: {}",
        lines.concat()
    );
    let status = child.wait();
    assert!(
        status.success(),
        "the broker (pid {pid}) exited {status}: {}",
        lines.concat()
    );
    assert!(lines.concat().contains("broker: served"), "{}", lines.concat());
}

/// The child's half of `a_broker_in_another_process_hands_connections_across`.
fn be_the_broker(fd: i32) {
    let targets = std::env::var(BROKER_TARGETS)
        .unwrap()
        .lines()
        .map(|line| match line.split(' ').collect::<Vec<_>>()[..] {
            ["tcp", host, port] => Target::Tcp {
                host: host.into(),
                port: port.parse().unwrap(),
            },
            ["unix", path] => Target::Unix(path.into()),
            _ => panic!("target {line:?}"),
        })
        .collect();
    // SAFETY: the parent cleared close-on-exec on this descriptor for us
    // and passed its number; nothing else in this process owns it.
    let end = unsafe { OwnedFd::from_raw_fd(fd) };
    Broker::new(targets).serve(end).unwrap();
    eprintln!("broker: served, pid {}", std::process::id());
}
