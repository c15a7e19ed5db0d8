//! Binary upgrade on SIGUSR2, as nginx's: a new executable takes the
//! listening sockets (TCP, UDP, Unix, the metrics listener's), says it
//! serves, and only then does this process drain and exit. If the new one
//! fails to start, or does not say it serves within `READY_TIMEOUT`, this
//! one goes on serving and logs why.
//!
//! The serving process is sandboxed and cannot execute a program, so the
//! executing is done by a small unsandboxed process, the upgrader
//! (`peregrine upgrade-helper`), started before the sandbox with this
//! program's path as it was started, as nginx re-executes its `argv[0]`:
//! made absolute against the working directory of the start (or found in
//! `PATH` for a bare name), but not resolved through symbolic links, so
//! that an install that swaps a `current` link to a new release directory
//! has the new release run (`/proc/self/exe`, `current_exe()`, is the old
//! release's file, or a deleted inode once a package manager has replaced
//! it); and the command line. It is this process's child
//! rather than its parent, so the pid that systemd, scripts and the
//! operator signal stays the serving one, with every signal's meaning
//! unchanged. What it does for the serving process is one thing: given
//! the listening sockets (one `SOCK_SEQPACKET` message with SCM_RIGHTS,
//! each descriptor checked with the kernel to be a listening stream socket
//! or a UDP socket), it starts the path it was given, with the command
//! line it was given, after checking that neither the file nor any
//! directory above it is writable by anyone but root or its own user; it
//! answers whether the new process confirmed. A compromised serving
//! process could at most ask for that: a restart of the same, checked
//! program with the same arguments.
//!
//! The new process finds its sockets through `PEREGRINE_UPGRADE`, set by
//! the upgrader: its parent's pid (checked, as sd_listen_fds(3) checks
//! LISTEN_PID, so a grandchild never takes them), the descriptor of the
//! confirmation socket, the sockets' descriptors, and which listener of
//! the configuration each group is (`Origin`). It builds its first
//! generation on them as a reload does, sends systemd `MAINPID=` and
//! `READY=1` (the unit has `NotifyAccess=all`), then writes `ready` on
//! the confirmation socket.
//!
//! The session-ticket keys go too (issue 29: a client's ticket must
//! resume on the new process): as hex in the channel's message (`k=HEX`),
//! which the upgrader writes into a socket pair whose other end the new
//! process inherits, named in `PEREGRINE_UPGRADE` by its descriptor
//! (`k=FD`); the keys are never in an argument or the environment.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use peregrine::{log, Listening};

use crate::reload::Origin;

/// The argument that makes `peregrine` the upgrader, not a command.
pub(crate) const HELPER_ARG: &str = "upgrade-helper";

/// The variable that hands the sockets to the new process.
const ENV: &str = "PEREGRINE_UPGRADE";

/// How long the new process has to say it serves: building a generation
/// reads certificates and may hash a large archive whole (seconds per
/// GiB), so a minute, as nginx leaves the operator to judge. Past it the
/// new process is killed and this one goes on.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the serving process waits for the upgrader's answer at a
/// time before it looks at its signals again: a SIGTERM during an upgrade
/// is acted on within this (the unit's TimeoutStopSec is 40 s, the new
/// process may take `READY_TIMEOUT`).
const ANSWER_POLL: Duration = Duration::from_millis(100);

/// How long a cancelled upgrade may take to be answered: the upgrader
/// kills the new process and says so at once.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// What the serving process writes to the upgrader to stop the upgrade
/// under way (a SIGTERM came): the new process is killed.
const CANCEL: &[u8] = b"cancel";

/// The serving process's end: the upgrader, and who may ask.
pub(crate) struct Upgrader {
    /// A sequenced-packet socket (held as a `UnixStream` for its receive
    /// timeout, `ANSWER_POLL`).
    channel: UnixStream,
    child: Child,
    /// The real user the process was started as (root, before `--user`):
    /// SIGUSR2 is taken from root or this user only.
    owner_uid: u32,
    /// The program's path as it was started (`program_path`), which an
    /// upgrade executes anew (for the log lines).
    pub(crate) exe: PathBuf,
    sender: peregrine::upgrade::SignalSender,
}

/// A listener to hand over: where it came from and its sockets.
pub(crate) struct Handed {
    pub(crate) origin: Tag,
    pub(crate) listening: Listening,
}

/// Which listener of the configuration a group of sockets is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tag {
    /// One of the generation's.
    Served(Origin),
    /// The `--metrics` listener, at its configured address.
    Metrics(SocketAddr),
}

/// The path an upgrade executes: `argv[0]` as the program was started,
/// absolute (against the working directory now, at the start, or the
/// first `PATH` entry holding an executable file of that name for a bare
/// name) but with its symbolic links kept, as nginx's `ngx_argv[0]`; the
/// running file (`this`) when `argv[0]` names no file (a caller that set
/// it to something else, `exec -a`).
fn program_path(argv: &[std::ffi::OsString], this: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let Some(arg0) = argv.first().map(Path::new).filter(|p| !p.as_os_str().is_empty()) else {
        return this.to_owned();
    };
    let is_program = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    let found = if arg0.is_absolute() {
        Some(arg0.to_owned())
    } else if arg0.components().count() > 1 || arg0.starts_with(".") {
        std::env::current_dir().ok().map(|cwd| lexical(&cwd.join(arg0)))
    } else {
        let path = std::env::var_os("PATH").unwrap_or_default();
        (std::env::split_paths(&path))
            .filter(|dir| dir.is_absolute())
            .map(|dir| dir.join(arg0))
            .find(|p| is_program(p))
    };
    found.filter(|p| is_program(p)).unwrap_or_else(|| this.to_owned())
}

/// `path` with its `.` components dropped and each `..` taking the
/// component before it off, without looking at the file system (a `..`
/// after a symbolic link is then the link's parent, as a shell's `cd`
/// has it).
fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

impl Upgrader {
    /// Starts the upgrader, before the sandbox and before any thread.
    /// `argv` is the command line as given (argument 0 included).
    pub(crate) fn start(argv: &[std::ffi::OsString]) -> anyhow::Result<Upgrader> {
        let sender = peregrine::upgrade::track_sender(signal_hook::consts::SIGUSR2)
            .context("cannot watch for SIGUSR2 (binary upgrade)")?;
        // The upgrader is this very file; what it executes at an upgrade
        // is the path as started.
        let this = std::env::current_exe().context("cannot find this program's path (binary upgrade)")?;
        let exe = program_path(argv, &this);
        let (ours, theirs) = peregrine::upgrade::pair().context("cannot make the upgrader's channel")?;
        let child = Command::new(&this)
            .arg(HELPER_ARG)
            .arg(&exe)
            .arg("--")
            .args(argv)
            .env_remove(ENV)
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start the upgrader process (binary upgrade)")?;
        // Set now: the sandbox may forbid setsockopt later.
        let channel = UnixStream::from(ours);
        channel
            .set_read_timeout(Some(ANSWER_POLL))
            .context("the upgrader's channel")?;
        Ok(Upgrader {
            channel,
            child,
            owner_uid: peregrine::upgrade::uid(),
            exe,
            sender,
        })
    }

    /// The pid of the upgrader, for the start line.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the last SIGUSR2 came from root or the user the process
    /// was started as; otherwise the line to log.
    pub(crate) fn allowed(&self) -> Result<(), String> {
        match self.sender.last_uid() {
            Some(0) => Ok(()),
            Some(uid) if uid == self.owner_uid => Ok(()),
            Some(uid) => Err(format!(
                "SIGUSR2 from uid {uid} ignored: a binary upgrade is asked for by root or uid {} only",
                self.owner_uid
            )),
            None => Err("SIGUSR2 from an unknown sender ignored".to_owned()),
        }
    }

    /// Hands `listeners` to the upgrader, which starts the new process on
    /// them; its outcome comes from `answer` (or `cancel`).
    pub(crate) fn hand_over(&self, listeners: &[Handed]) -> Result<(), String> {
        let mut layout = String::new();
        let mut fds: Vec<BorrowedFd<'_>> = Vec::new();
        for h in listeners {
            let (streams, udp) = h.listening.fds();
            let origin = match h.origin {
                Tag::Served(Origin::Configured(addr)) => format!("c={addr}"),
                Tag::Served(Origin::Inherited(i)) => format!("i={i}"),
                Tag::Served(Origin::Unix(_)) => "u".to_owned(),
                Tag::Metrics(addr) => format!("m={addr}"),
            };
            let remove = u8::from(h.listening.removes_socket_file());
            layout.push_str(&format!("{origin}/{}/{}/{remove} ", streams.len(), udp.len()));
            fds.extend(streams);
            fds.extend(udp);
        }
        layout.push_str(&format!("k={}", hex(&peregrine::TicketKeys::process().to_bytes())));
        peregrine::upgrade::send(self.channel.as_fd(), layout.as_bytes(), &fds)
            .map_err(|e| format!("cannot hand the sockets to the upgrader (pid {}): {e}", self.pid()))
    }

    /// The upgrader's answer to the hand-over, if it came within
    /// `ANSWER_POLL`: the new process's pid once it serves, or why it
    /// does not. `None`: not yet (the new process is starting).
    pub(crate) fn answer(&self) -> Option<Result<u32, String>> {
        let reply = match peregrine::upgrade::recv(self.channel.as_fd()) {
            Ok((reply, _)) => reply,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return None,
            Err(e) => return Some(Err(format!("no answer from the upgrader (pid {}): {e}", self.pid()))),
        };
        let reply = String::from_utf8_lossy(&reply).into_owned();
        Some(match reply.split_once(' ') {
            Some(("ready", pid)) => pid.parse().map_err(|_| format!("the upgrader said {reply:?}")),
            Some(("failed", why)) => Err(why.to_owned()),
            _ if reply.is_empty() => Err(format!("the upgrader (pid {}) has exited", self.pid())),
            _ => Err(format!("the upgrader said {reply:?}")),
        })
    }

    /// Stops the upgrade under way: the upgrader kills the new process.
    /// Its answer: `Err` (cancelled), or the new process's pid if it said
    /// it serves before the cancel reached the upgrader.
    pub(crate) fn cancel(&self) -> Result<u32, String> {
        peregrine::upgrade::send(self.channel.as_fd(), CANCEL, &[])
            .map_err(|e| format!("cannot cancel the upgrade (upgrader pid {}): {e}", self.pid()))?;
        let deadline = Instant::now() + CANCEL_WAIT;
        while Instant::now() < deadline {
            if let Some(outcome) = self.answer() {
                return outcome;
            }
        }
        Err(format!("the upgrader (pid {}) did not answer the cancel", self.pid()))
    }
}

/// What a process started by an upgrade was given.
pub(crate) struct Inherited {
    /// Each listener with its origin, in the old process's order.
    pub(crate) listeners: Vec<Handed>,
    /// Where to say "ready".
    confirm: UnixStream,
}

impl Inherited {
    /// The sockets of an upgrade, if this process was started by one
    /// (`PEREGRINE_UPGRADE` set by its parent). Called first thing, before
    /// any other program is started, so that none inherits them.
    pub(crate) fn take() -> anyhow::Result<Option<Inherited>> {
        let Some(value) = std::env::var_os(ENV) else {
            return Ok(None);
        };
        let value = value.to_str().context("PEREGRINE_UPGRADE is not text")?.to_owned();
        let mut words = value.split(' ');
        let mut next = |what: &str| words.next().with_context(|| format!("PEREGRINE_UPGRADE: no {what}"));
        let parent: u32 = next("parent")?.parse().context("PEREGRINE_UPGRADE: parent")?;
        if parent != peregrine::upgrade::parent_pid() {
            // Set for another process (this one's parent, say): not ours.
            return Ok(None);
        }
        let confirm: i32 = next("confirmation descriptor")?
            .parse()
            .context("PEREGRINE_UPGRADE: descriptor")?;
        let numbers: Vec<i32> = (next("descriptors")?.split(',').filter(|s| !s.is_empty()))
            .map(|n| n.parse().context("PEREGRINE_UPGRADE: a descriptor"))
            .collect::<anyhow::Result<_>>()?;
        let (keys, entries): (Vec<&str>, Vec<&str>) = words.partition(|w| w.starts_with("k="));
        let keys: Option<i32> = match keys[..] {
            [] => None,
            [k] => Some(
                k[2..]
                    .parse()
                    .context("PEREGRINE_UPGRADE: the ticket keys' descriptor")?,
            ),
            _ => anyhow::bail!("PEREGRINE_UPGRADE: ticket keys twice"),
        };
        let mut all = vec![confirm];
        all.extend(keys);
        all.extend(&numbers);
        let mut fds = peregrine::upgrade::take_inherited(&all)
            .context("the upgrade's sockets")?
            .into_iter();
        let confirm = UnixStream::from(fds.next().context("no confirmation socket")?);
        if keys.is_some() {
            let from = UnixStream::from(fds.next().context("no ticket keys' socket")?);
            peregrine::TicketKeys::process().install(read_keys(from)?);
        }
        let mut listeners = Vec::new();
        for entry in entries {
            let mut parts = entry.split('/');
            let (Some(origin), Some(n_streams), Some(n_udp), Some(remove), None) =
                (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
            else {
                anyhow::bail!("PEREGRINE_UPGRADE: {entry:?} is not a listener");
            };
            let count = |s: &str| {
                s.parse::<usize>()
                    .with_context(|| format!("PEREGRINE_UPGRADE: {entry:?}"))
            };
            let (n_streams, n_udp) = (count(n_streams)?, count(n_udp)?);
            let streams: Vec<OwnedFd> = fds.by_ref().take(n_streams).collect();
            let udp: Vec<OwnedFd> = fds.by_ref().take(n_udp).collect();
            anyhow::ensure!(
                streams.len() == n_streams && udp.len() == n_udp,
                "PEREGRINE_UPGRADE: fewer descriptors than listeners"
            );
            let listening = Listening::from_fds(streams, udp, remove == "1")
                .with_context(|| format!("PEREGRINE_UPGRADE: {entry:?}"))?;
            let addr = |s: &str| {
                s.parse::<SocketAddr>()
                    .with_context(|| format!("PEREGRINE_UPGRADE: {entry:?}"))
            };
            let origin = match origin.split_once('=') {
                Some(("c", a)) => Tag::Served(Origin::Configured(addr(a)?)),
                Some(("i", i)) => Tag::Served(Origin::Inherited(count(i)?)),
                Some(("m", a)) => Tag::Metrics(addr(a)?),
                None if origin == "u" => Tag::Served(Origin::Unix(usize::MAX)),
                _ => anyhow::bail!("PEREGRINE_UPGRADE: {entry:?} has no origin"),
            };
            listeners.push(Handed { origin, listening });
        }
        anyhow::ensure!(
            fds.next().is_none(),
            "PEREGRINE_UPGRADE: more descriptors than listeners"
        );
        Ok(Some(Inherited { listeners, confirm }))
    }

    /// Serving: systemd is told this is the service's main process now,
    /// then the upgrader that this process serves.
    pub(crate) fn confirm(mut self) {
        let state = format!("MAINPID={}\nREADY=1", std::process::id());
        if let Err(e) = peregrine::systemd::notify(&state) {
            log::warn(format_args!("cannot notify systemd: {e}"));
        }
        if let Err(e) = self.confirm.write_all(b"ready\n") {
            log::warn(format_args!("upgrade: cannot confirm to the old process: {e}"));
        }
    }
}

/// The longest hex of ticket keys taken (two 80-byte keys make 342).
const KEYS_HEX_MAX: usize = 1024;

/// The ticket keys the old process handed over, read from the socket the
/// upgrader wrote them into (and closed).
fn read_keys(from: UnixStream) -> anyhow::Result<peregrine::TicketKeys> {
    let mut text = Vec::new();
    (&from)
        .take(KEYS_HEX_MAX as u64 + 1)
        .read_to_end(&mut text)
        .context("the ticket keys")?;
    anyhow::ensure!(text.len() <= KEYS_HEX_MAX, "PEREGRINE_UPGRADE: ticket keys too long");
    let bytes = unhex(&text).context("PEREGRINE_UPGRADE: ticket keys not hex")?;
    Ok(peregrine::TicketKeys::from_bytes(&bytes)?)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    text.chunks(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect()
}

/// `peregrine upgrade-helper EXE -- ARGV...`: the upgrader. Its standard
/// input is the channel; it answers each hand-over until the serving
/// process closes it (exits).
pub(crate) fn run_helper(args: &[std::ffi::OsString]) -> anyhow::Result<()> {
    // `systemctl kill -s USR2` reaches every process of the unit: this one
    // must not die of it (nor of the other signals that mean something
    // to the serving process only).
    for signal in [
        signal_hook::consts::SIGUSR2,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGUSR1,
    ] {
        signal_hook::flag::register(signal, std::sync::Arc::default()).context("signals")?;
    }
    anyhow::ensure!(
        args.len() >= 4 && args[1] == HELPER_ARG && args[3] == "--",
        "upgrade-helper is started by `serve`, not by hand"
    );
    let exe = PathBuf::from(&args[2]);
    let argv = &args[4..];
    anyhow::ensure!(!argv.is_empty(), "upgrade-helper: no command line");
    let stdin = std::io::stdin();
    let channel = stdin.as_fd();
    // The channel is read by a thread, so that a "cancel" (or the serving
    // process's end) is seen while a new process is being waited for.
    let incoming = {
        let reader = channel.try_clone_to_owned().context("upgrade-helper: the channel")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("upgrade-channel".into())
            .spawn(move || loop {
                let received = peregrine::upgrade::recv(reader.as_fd());
                // Only a message cut short is worth reading on after.
                let last = match &received {
                    Ok((bytes, _)) => bytes.is_empty(),
                    Err(e) => e.kind() != std::io::ErrorKind::InvalidData,
                };
                if tx.send(received).is_err() || last {
                    return;
                }
            })
            .context("upgrade-helper: the channel's thread")?;
        rx
    };
    loop {
        let (layout, fds) = match incoming.recv() {
            Ok(Ok((layout, _))) if layout.is_empty() => return Ok(()),
            // A cancel that crossed the answer "ready": nothing to stop.
            Ok(Ok((layout, _))) if layout == CANCEL => continue,
            Ok(Ok(received)) => received,
            Ok(Err(e)) => {
                let _ = peregrine::upgrade::send(channel, format!("failed {e}").as_bytes(), &[]);
                continue;
            }
            Err(_) => return Ok(()),
        };
        let reply = match start(&exe, argv, &layout, fds, &incoming) {
            Ok(pid) => format!("ready {pid}"),
            Err(why) => format!("failed {why}"),
        };
        if peregrine::upgrade::send(channel, reply.as_bytes(), &[]).is_err() {
            return Ok(());
        }
    }
}

/// What the upgrader's channel brings: a message and its descriptors.
type Incoming = std::sync::mpsc::Receiver<std::io::Result<(Vec<u8>, Vec<OwnedFd>)>>;

/// How often the upgrader, waiting for the new process, looks for a
/// cancel from the serving process.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// Starts the new process on `fds` and waits for its "ready".
/// A "cancel" on `incoming` (or the serving process's end) kills it.
fn start(
    exe: &Path,
    argv: &[std::ffi::OsString],
    layout: &[u8],
    fds: Vec<OwnedFd>,
    incoming: &Incoming,
) -> Result<u32, String> {
    if !layout.iter().all(|&b| b.is_ascii_graphic() || b == b' ') {
        return Err("the listeners' description is not plain text".to_owned());
    }
    for fd in &fds {
        if peregrine::upgrade::socket_kind(fd.as_fd()) == peregrine::upgrade::SocketKind::Other {
            return Err("a descriptor handed over is not a listening or UDP socket".to_owned());
        }
    }
    check_binary(exe)?;
    // The ticket keys (`k=HEX`) go through a socket, not the environment.
    let layout = String::from_utf8_lossy(layout);
    let (keys, words): (Vec<&str>, Vec<&str>) = layout.split(' ').partition(|w| w.starts_with("k="));
    let keys = match keys[..] {
        [] => None,
        [k] if k.len() - 2 <= KEYS_HEX_MAX => {
            let (mut write, read) = UnixStream::pair().map_err(|e| format!("cannot make the keys' socket: {e}"))?;
            // A few hundred bytes: the socket's buffer takes them at once.
            write
                .write_all(&k.as_bytes()[2..])
                .map_err(|e| format!("cannot pass the ticket keys: {e}"))?;
            Some(read)
        }
        _ => return Err("the ticket keys are not in the expected form".to_owned()),
    };
    let (mut ours, theirs) = UnixStream::pair().map_err(|e| format!("cannot make the confirmation socket: {e}"))?;
    let inheritable = std::iter::once(theirs.as_fd())
        .chain(keys.as_ref().map(AsFd::as_fd))
        .chain(fds.iter().map(AsFd::as_fd));
    for fd in inheritable {
        peregrine::upgrade::set_inheritable(fd, true).map_err(|e| format!("cannot pass a descriptor: {e}"))?;
    }
    let numbers: Vec<String> = fds.iter().map(|f| f.as_raw_fd().to_string()).collect();
    let mut layout = words.join(" ");
    if let Some(keys) = &keys {
        layout.push_str(&format!(" k={}", keys.as_raw_fd()));
    }
    let value = format!(
        "{} {} {} {}",
        std::process::id(),
        theirs.as_raw_fd(),
        numbers.join(","),
        layout.trim()
    );
    let spawned = Command::new(exe)
        .arg0(&argv[0])
        .args(&argv[1..])
        .env(ENV, value.trim_end())
        .stdin(Stdio::null())
        .spawn();
    // The new process has its copies (or there is none): these close.
    drop(theirs);
    drop(keys);
    drop(fds);
    let mut child = spawned.map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let pid = child.id();
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut said = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "{} (pid {pid}) did not say it serves within {} s; it was killed",
                exe.display(),
                READY_TIMEOUT.as_secs()
            ));
        }
        // The serving process is stopping (SIGTERM), or gone: the new
        // process must not serve on its own.
        let stop = match incoming.try_recv() {
            Ok(Ok((msg, _))) if msg == CANCEL => Some("the upgrade was cancelled (the old process is stopping)"),
            Ok(Ok((msg, _))) if msg.is_empty() => Some("the old process has exited"),
            Ok(_) | Err(std::sync::mpsc::TryRecvError::Empty) => None,
            Err(std::sync::mpsc::TryRecvError::Disconnected) => Some("the old process has exited"),
        };
        if let Some(why) = stop {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{} (pid {pid}) was killed: {why}", exe.display()));
        }
        let _ = ours.set_read_timeout(Some(left.min(CANCEL_POLL)));
        match ours.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                said.extend_from_slice(&buf[..n]);
                if said.starts_with(b"ready\n") {
                    return Ok(pid);
                }
                if said.len() > 64 {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => return Err(format!("cannot read the confirmation: {e}")),
        }
    }
    // It closed the socket without saying it serves: it is exiting.
    let status = wait_briefly(&mut child);
    Err(format!("{} (pid {pid}) {status}", exe.display()))
}

/// How a child that gave up ended (waiting at most a few seconds; killed
/// if it has not ended by then).
fn wait_briefly(child: &mut Child) -> String {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return format!("exited before serving ({status})"),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return "closed its confirmation socket without serving; it was killed".to_owned();
            }
            Err(e) => return format!("ended, status unknown ({e})"),
        }
    }
}

/// The program to execute, and every directory above it, must be owned by
/// root or this process's user and writable by no one else (a sticky
/// directory, /tmp's kind, aside: there only an entry's owner may replace
/// it); the file must be a regular, executable file. Otherwise anyone who
/// could write there could have root run their program. Both the path as
/// given and the file it resolves to are checked: a symbolic link on the
/// way (`/opt/peregrine/current`) may be repointed by whoever may write
/// the directory holding it.
fn check_binary(exe: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if !exe.is_absolute() {
        return Err(format!("{} is not an absolute path", exe.display()));
    }
    let uid = peregrine::upgrade::uid();
    let meta = std::fs::metadata(exe).map_err(|e| format!("{}: {e}", exe.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", exe.display()));
    }
    if meta.mode() & 0o111 == 0 {
        return Err(format!("{} is not executable", exe.display()));
    }
    let real = std::fs::canonicalize(exe).map_err(|e| format!("{}: {e}", exe.display()))?;
    let chains = [real.as_path(), exe];
    for p in chains.iter().flat_map(|start| start.ancestors()) {
        let m = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let sticky_dir = m.is_dir() && m.mode() & 0o1000 != 0;
        if m.uid() != 0 && m.uid() != uid {
            return Err(format!(
                "{} is owned by uid {}, neither root nor this process's uid {uid}: refused",
                p.display(),
                m.uid()
            ));
        }
        if m.mode() & 0o022 != 0 && !sticky_dir {
            return Err(format!(
                "{} is writable by its group or by everyone (mode {:o}): refused",
                p.display(),
                m.mode() & 0o7777
            ));
        }
    }
    Ok(())
}
