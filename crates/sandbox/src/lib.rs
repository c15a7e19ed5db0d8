//! The `peregrine` process's sandbox: Landlock limits which files it may
//! open (read beneath the root, the certificates' and the configuration's
//! directories; create and append beneath the access log's), and a seccomp
//! allow-list limits which system calls it may make (no exec, no fork, no
//! ptrace, no mount). A bug in request handling, even one that runs code of
//! the attacker's choosing, then cannot read the rest of the disk or start
//! a shell.
//!
//! Contract: [`apply`] must be called while the process has one thread,
//! before anything that serves starts. Landlock restricts the calling
//! thread and the threads it creates afterwards, never those already
//! running (the kernel's all-threads flag comes with Landlock ABI 8, Linux
//! 7.0), and threads share memory: a thread left outside would undo it for
//! all. Seccomp is installed with TSYNC all the same.
//!
//! An unlisted system call fails with EPERM instead of killing the
//! process: a call we missed becomes an error the server reports (a 500,
//! a line on stderr), not a crash of every connection. `clone3` fails with
//! ENOSYS, so that glibc falls back to `clone`, whose flags a filter can
//! read: only threads may be created (CLONE_THREAD, no new namespace).
//!
//! Left open, on purpose: binding and listening (a reload may add an
//! address), and datagrams to any address (`sendto`, `sendmsg`: systemd's
//! notifications, HTTP/3 later). `connect` is on the list only when the
//! policy says the process connects out (`Policy::connect`: the reverse
//! proxy's upstreams), and then Landlock's network rights (ABI 4) limit
//! TCP connections to the upstreams' ports (seccomp cannot read
//! `connect`'s address; the ports are what the kernel can check). Rights
//! newer than ABI 7 (connecting to a UNIX socket by path, ABI 9) are not
//! used: they would cut off NOTIFY_SOCKET.

#![forbid(unsafe_code)]

#[cfg(target_os = "linux")]
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

#[cfg(target_os = "linux")]
use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
#[cfg(target_os = "linux")]
use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

/// The Landlock ABI whose rights this code was written and tested for;
/// older kernels enforce the subset they know (best effort), newer ones
/// this.
#[cfg(target_os = "linux")]
const LANDLOCK_ABI: ABI = ABI::V7;

/// What the process may touch once sandboxed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Files and directories the process may read, with everything beneath
    /// (canonical paths).
    pub read: Vec<PathBuf>,
    /// Directories in which the process may create files and append to
    /// them (the access log's, so that a reopen after logrotate moved the
    /// file creates the new one).
    pub append: Vec<PathBuf>,
    /// Directories in which the process may make and remove Unix-domain
    /// socket files (`--bind unix:PATH`: bound, possibly at a reload, and
    /// removed at shutdown).
    pub sockets: Vec<PathBuf>,
    /// Whether setuid, setgid and setgroups stay allowed, for `--user` and
    /// `--group`, which give up root after binding.
    pub set_ids: bool,
    /// Whether the process may connect out (the reverse proxy's
    /// upstreams): `connect` is allowed by seccomp, and where Landlock
    /// has network rights (ABI 4, Linux 6.7) TCP connections only to
    /// `connect_ports`. Unix-domain upstreams are not limited by path
    /// (Landlock's rights for that come with ABI 9).
    pub connect: bool,
    /// The TCP ports the process may connect to when `connect` is set.
    pub connect_ports: Vec<u16>,
}

impl Policy {
    /// Grants reading `path` and everything beneath it. The path must
    /// exist; it is made canonical, as Landlock sees it (symlinks resolved).
    pub fn read(&mut self, path: &Path) -> std::io::Result<()> {
        let path = canonical(path)?;
        if !self.allows_read(&path) {
            self.read.push(path);
        }
        Ok(())
    }

    /// Grants creating and appending to files in `dir`.
    pub fn append(&mut self, dir: &Path) -> std::io::Result<()> {
        let dir = canonical(dir)?;
        if !self.allows_append(&dir) {
            self.append.push(dir);
        }
        Ok(())
    }

    /// Whether `path` (which must exist) may be read under this policy.
    pub fn allows_read(&self, path: &Path) -> bool {
        canonical(path).is_ok_and(|p| self.read.iter().any(|r| p.starts_with(r)))
    }

    /// Grants making and removing socket files in `dir`.
    pub fn sockets(&mut self, dir: &Path) -> std::io::Result<()> {
        let dir = canonical(dir)?;
        if !self.allows_sockets(&dir) {
            self.sockets.push(dir);
        }
        Ok(())
    }

    /// Whether socket files may be made and removed in `dir`.
    pub fn allows_sockets(&self, dir: &Path) -> bool {
        canonical(dir).is_ok_and(|p| self.sockets.iter().any(|r| p.starts_with(r)))
    }

    /// Whether files may be created and appended to in `dir`.
    pub fn allows_append(&self, dir: &Path) -> bool {
        canonical(dir).is_ok_and(|p| self.append.iter().any(|r| p.starts_with(r)))
    }

    /// Whether everything `other` grants, this one grants too: a reload
    /// can only work within the sandbox set at start.
    pub fn covers(&self, other: &Policy) -> Result<(), Outside> {
        let read = other.read.iter().find(|p| !self.allows_read(p));
        let append = other.append.iter().find(|p| !self.allows_append(p));
        let sockets = other.sockets.iter().find(|p| !self.allows_sockets(p));
        if other.connect && !self.connect {
            return Err(Outside::Connect(None));
        }
        if let Some(port) = other.connect_ports.iter().find(|p| !self.connect_ports.contains(p)) {
            return Err(Outside::Connect(Some(*port)));
        }
        match (read, append, sockets) {
            (Some(p), _, _) => Err(Outside::Read(p.clone(), self.read.clone())),
            (None, Some(p), _) => Err(Outside::Append(p.clone(), self.append.clone())),
            (None, None, Some(p)) => Err(Outside::Sockets(p.clone(), self.sockets.clone())),
            (None, None, None) => Ok(()),
        }
    }
}

/// The path as the kernel resolves it; `.` for an empty parent.
fn canonical(path: &Path) -> std::io::Result<PathBuf> {
    let path = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    std::fs::canonicalize(path).map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// What a policy asked for that the one in force does not allow.
#[derive(Debug, PartialEq, Eq)]
pub enum Outside {
    /// A path to read, and what may be read.
    Read(PathBuf, Vec<PathBuf>),
    /// A log directory, and where logs may be written.
    Append(PathBuf, Vec<PathBuf>),
    /// A Unix socket's directory, and where sockets may be made.
    Sockets(PathBuf, Vec<PathBuf>),
    /// Connecting out (to this TCP port), which the start did not allow.
    Connect(Option<u16>),
}

impl fmt::Display for Outside {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outside::Read(p, allowed) => write!(
                f,
                "{} is outside what the sandbox set at start may read ({})",
                p.display(),
                list(allowed)
            ),
            Outside::Append(p, allowed) => write!(
                f,
                "{} is outside where the sandbox set at start may write logs ({})",
                p.display(),
                list(allowed)
            ),
            Outside::Sockets(p, allowed) => write!(
                f,
                "{} is outside where the sandbox set at start may make Unix sockets ({})",
                p.display(),
                list(allowed)
            ),
            Outside::Connect(None) => f.write_str(
                "the sandbox set at start does not allow connecting out (no proxy was configured then): restart",
            ),
            Outside::Connect(Some(port)) => write!(
                f,
                "TCP port {port} is outside the ports the sandbox set at start may connect to: restart"
            ),
        }
    }
}

fn list(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "nothing".into();
    }
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shown.join(", ")
}

/// What [`apply`] could enforce.
#[derive(Debug)]
pub struct Applied {
    /// Landlock's outcome.
    pub landlock: Landlock,
    /// Seccomp's outcome.
    pub seccomp: Seccomp,
    /// The TCP ports the process may connect to, if it connects out.
    pub connect: Option<Vec<u16>>,
}

/// Landlock's outcome.
#[derive(Debug, PartialEq, Eq)]
pub enum Landlock {
    /// Enforced, with the kernel's ABI; `full` unless the kernel knows only
    /// part of what is asked for (before ABI 6, Linux 6.12: no signal
    /// scoping; before ABI 3: truncation is not handled).
    Enforced { abi: i32, full: bool },
    /// Not enforced, and why.
    Unavailable(String),
}

/// Seccomp's outcome.
#[derive(Debug, PartialEq, Eq)]
pub enum Seccomp {
    /// The allow-list is installed on every thread.
    Enforced { n_syscalls: usize },
    /// Not installed, and why.
    Unavailable(String),
}

/// Short, for the start line: "landlock ABI v7, seccomp 73 syscalls", or
/// what is missing and why.
impl fmt::Display for Applied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.landlock {
            Landlock::Enforced { abi, full: true } => write!(f, "landlock ABI v{abi}, ")?,
            Landlock::Enforced { abi, full: false } => write!(f, "landlock ABI v{abi} (partially enforced), ")?,
            Landlock::Unavailable(why) => write!(f, "no landlock ({why}), ")?,
        }
        match &self.seccomp {
            Seccomp::Enforced { n_syscalls } => write!(f, "seccomp {n_syscalls} syscalls")?,
            Seccomp::Unavailable(why) => write!(f, "no seccomp ({why})")?,
        }
        let Some(ports) = &self.connect else { return Ok(()) };
        let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
        match self.landlock {
            Landlock::Enforced { abi, .. } if abi >= 4 => {
                write!(f, ", connects out to TCP port {} only", ports.join(", "))
            }
            _ => f.write_str(", connects out to any port (Landlock's network rules need ABI 4, Linux 6.7)"),
        }
    }
}

/// Sandboxes the process: Landlock with `policy`, then the seccomp
/// allow-list. Call it while the process has one thread (see the module
/// documentation). A kernel without Landlock or seccomp is not an error:
/// the outcome says what was enforced. A path of the policy that cannot be
/// opened is.
pub fn apply(policy: &Policy) -> std::io::Result<Applied> {
    let n_threads = std::fs::read_dir("/proc/self/task").map_or(1, |d| d.count());
    if n_threads > 1 {
        return Err(std::io::Error::other(format!(
            "the sandbox must be set up before any thread starts ({n_threads} threads run)"
        )));
    }
    #[cfg(target_os = "linux")]
    let (landlock, seccomp) = (
        landlock(policy)?,
        match seccomp(policy) {
            Ok(n_syscalls) => Seccomp::Enforced { n_syscalls },
            Err(why) => Seccomp::Unavailable(why),
        },
    );
    // Both are Linux's: elsewhere the process runs unconfined, and the
    // start line says so.
    #[cfg(not(target_os = "linux"))]
    let (landlock, seccomp) = (
        Landlock::Unavailable("Linux only".into()),
        Seccomp::Unavailable("Linux only".into()),
    );
    let connect = policy.connect.then(|| policy.connect_ports.clone());
    Ok(Applied {
        landlock,
        seccomp,
        connect,
    })
}

#[cfg(target_os = "linux")]
fn landlock(policy: &Policy) -> std::io::Result<Landlock> {
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    let append = AccessFs::WriteFile | AccessFs::MakeReg;
    let sockets = AccessFs::MakeSock | AccessFs::RemoveFile;
    let rule = |path: &PathBuf, access: BitFlags<AccessFs>| -> std::io::Result<PathBeneath<PathFd>> {
        let fd = PathFd::new(path).map_err(|e| std::io::Error::other(format!("{}: {e}", path.display())))?;
        // A file carries only file rights (ReadDir on a file is refused).
        let access = if path.is_dir() {
            access
        } else {
            access & AccessFs::from_file(LANDLOCK_ABI)
        };
        Ok(PathBeneath::new(fd, access))
    };
    let rules = (policy.read.iter().map(|p| rule(p, read)))
        .chain(policy.append.iter().map(|p| rule(p, append)))
        .chain(policy.sockets.iter().map(|p| rule(p, sockets)))
        .collect::<std::io::Result<Vec<_>>>()?;
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        // Every file right is handled, so all that is not granted is denied:
        // exec, writing, removing, renaming, making nodes, truncating.
        .handle_access(AccessFs::from_all(LANDLOCK_ABI))
        // No signals to processes outside the sandbox (ABI 6). Abstract
        // UNIX sockets stay reachable: systemd's NOTIFY_SOCKET may be one.
        .and_then(|r| r.scope(Scope::Signal))
        // Connecting out: TCP only to the upstreams' ports (ABI 4); binding
        // is not handled, so a reload may still listen anywhere.
        .and_then(|r| {
            if policy.connect {
                r.handle_access(AccessNet::ConnectTcp)
            } else {
                Ok(r)
            }
        })
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(rules.into_iter().map(Ok::<_, landlock::RulesetError>)))
        .and_then(|r| {
            let ports = policy.connect_ports.iter();
            r.add_rules(ports.map(|&p| Ok::<_, landlock::RulesetError>(NetPort::new(p, AccessNet::ConnectTcp))))
        })
        .and_then(|r| r.restrict_self())
        .map_err(|e| std::io::Error::other(format!("landlock: {e}")))?;
    Ok(match (status.ruleset, status.landlock) {
        (RulesetStatus::NotEnforced, LandlockStatus::NotEnabled) => {
            Landlock::Unavailable("the kernel has it but it is not enabled (lsm= boot parameter)".into())
        }
        (RulesetStatus::NotEnforced, LandlockStatus::NotImplemented) => {
            Landlock::Unavailable("the kernel was built without it".into())
        }
        (RulesetStatus::NotEnforced, _) => Landlock::Unavailable("the kernel enforces none of it".into()),
        (
            enforced,
            LandlockStatus::Available {
                effective_abi,
                kernel_abi,
            },
        ) => Landlock::Enforced {
            abi: kernel_abi.unwrap_or(effective_abi as i32),
            full: enforced == RulesetStatus::FullyEnforced,
        },
        (enforced, _) => Landlock::Enforced {
            abi: 0,
            full: enforced == RulesetStatus::FullyEnforced,
        },
    })
}

/// Installs the allow-list on every thread; returns how many system calls
/// it allows, or why it could not be installed.
#[cfg(target_os = "linux")]
fn seccomp(policy: &Policy) -> Result<usize, String> {
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|_| format!("no filter for {}", std::env::consts::ARCH))?;
    let mut rules = allowed(policy.set_ids).map_err(|e| e.to_string())?;
    if policy.connect {
        // The reverse proxy's upstreams (Landlock limits TCP's ports).
        rules.insert(libc::SYS_connect, Vec::new());
    }
    let n_syscalls = rules.len();
    let allow_list: BpfProgram = SeccompFilter::new(
        rules,
        SeccompAction::Errno(libc::EPERM as u32),
        SeccompAction::Allow,
        arch,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|e| e.to_string())?;
    // clone3 answers ENOSYS, ahead of the list (a second filter could not
    // be installed: the first refuses seccomp and prctl). Checking the
    // number before the list checks the architecture only ever refuses.
    let ld = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    let jeq = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    let ret = (libc::BPF_RET | libc::BPF_K) as u16;
    let no_clone3 = [
        sock_filter {
            code: ld,
            jt: 0,
            jf: 0,
            k: 0,
        }, // seccomp_data.nr
        sock_filter {
            code: jeq,
            jt: 0,
            jf: 1,
            k: libc::SYS_clone3 as u32,
        },
        sock_filter {
            code: ret,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        },
    ];
    let program: BpfProgram = no_clone3.into_iter().chain(allow_list).collect();
    seccompiler::apply_filter_all_threads(&program).map_err(|e| e.to_string())?;
    Ok(n_syscalls)
}

/// Namespace flags of clone(2): none may be asked for.
#[cfg(target_os = "linux")]
const NAMESPACES: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u64;

/// The system calls serving needs, each with the conditions on its
/// arguments (none: any arguments). Derived with `strace -f` of the binary
/// from the moment the filter is installed (`derive-syscalls.sh` beside
/// this crate's manifest does it), under every workload the command line
/// has: `hello` with TLS, the redirect listener, metrics and
/// a JSON access log; `serve DIR` with listings, ranges and precompressed
/// files; `serve ARCHIVE` with a swap by rename, a rewrite in place (the
/// lease) and SIGHUP; SIGUSR1 after logrotate; `--user`; shutdown. Added
/// beyond what was seen: the UDP calls HTTP/3 will need (`recvmmsg`,
/// `sendmmsg`, `recvmsg`, `sendmsg`), and the `epoll_pwait`, `nanosleep`,
/// `poll` variants the libraries may pick instead.
#[cfg(target_os = "linux")]
fn allowed(set_ids: bool) -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
    use SeccompCmpOp::{Eq, MaskedEq};
    let arg = |idx, op, value| SeccompCondition::new(idx, SeccompCmpArgLen::Qword, op, value);
    let rule = |conditions| SeccompRule::new(conditions);
    let any = [
        // Reading, writing, sending files and answers.
        libc::SYS_read,
        libc::SYS_write,
        libc::SYS_readv,
        libc::SYS_writev,
        libc::SYS_pread64,
        libc::SYS_sendfile,
        libc::SYS_lseek,
        libc::SYS_close,
        // Files: the root (openat2 RESOLVE_BENEATH), archives, certificates,
        // the configuration, the access log; leases (fcntl).
        libc::SYS_openat,
        libc::SYS_openat2,
        libc::SYS_newfstatat,
        libc::SYS_fstat,
        libc::SYS_statx,
        libc::SYS_getdents64,
        libc::SYS_readlinkat,
        libc::SYS_getcwd,
        libc::SYS_fcntl,
        // Memory.
        libc::SYS_munmap,
        libc::SYS_madvise,
        libc::SYS_mremap,
        libc::SYS_brk,
        // Threads and their synchronisation.
        libc::SYS_futex,
        libc::SYS_sched_yield,
        libc::SYS_sched_getaffinity,
        libc::SYS_set_robust_list,
        libc::SYS_rseq,
        libc::SYS_gettid,
        libc::SYS_getpid,
        libc::SYS_tgkill,
        libc::SYS_exit,
        libc::SYS_exit_group,
        libc::SYS_restart_syscall,
        // Signals (signal-hook's handlers, the stack-overflow guard).
        libc::SYS_rt_sigaction,
        libc::SYS_rt_sigprocmask,
        libc::SYS_rt_sigreturn,
        libc::SYS_sigaltstack,
        // Time.
        libc::SYS_clock_gettime,
        libc::SYS_clock_nanosleep,
        libc::SYS_nanosleep,
        // Sockets: accepting, reading, writing; binding an address a reload
        // adds; systemd's notifications (sendto); UDP for HTTP/3.
        libc::SYS_bind,
        libc::SYS_listen,
        // `--bind unix:PATH`: the socket file's mode is set through the
        // umask around bind; the file is removed at shutdown (Landlock
        // allows removing only in the sockets' directories).
        libc::SYS_umask,
        libc::SYS_unlink,
        libc::SYS_unlinkat,
        libc::SYS_accept4,
        libc::SYS_getsockname,
        libc::SYS_getpeername,
        libc::SYS_setsockopt,
        libc::SYS_getsockopt,
        libc::SYS_shutdown,
        libc::SYS_recvfrom,
        libc::SYS_sendto,
        libc::SYS_recvmsg,
        libc::SYS_sendmsg,
        libc::SYS_recvmmsg,
        libc::SYS_sendmmsg,
        // Event loops and their wakers.
        libc::SYS_epoll_create1,
        libc::SYS_epoll_ctl,
        libc::SYS_epoll_pwait,
        libc::SYS_epoll_pwait2,
        libc::SYS_eventfd2,
        // The workers' precise timer for QUIC (engine `sys/timer.rs`).
        libc::SYS_timerfd_create,
        libc::SYS_timerfd_settime,
        libc::SYS_ppoll,
        // Randomness (TLS, hash maps), who we are.
        libc::SYS_getrandom,
        libc::SYS_geteuid,
        libc::SYS_getuid,
        libc::SYS_getegid,
        libc::SYS_getgid,
        // quinn-udp reads the kernel's version once, to know if UDP GSO
        // works (4.18+); refused, HTTP/3 would only lose GSO.
        libc::SYS_uname,
    ];
    #[cfg(target_arch = "x86_64")]
    let any = any
        .into_iter()
        .chain([libc::SYS_epoll_wait, libc::SYS_readlink, libc::SYS_poll]);
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = (any.into_iter())
        // `--user`: giving up root after binding, `unix:` sockets given
        // to the user and group first.
        .chain(
            [
                libc::SYS_setuid,
                libc::SYS_setgid,
                libc::SYS_setgroups,
                libc::SYS_lchown,
                libc::SYS_fchownat,
            ]
            .into_iter()
            .filter(|_| set_ids),
        )
        .map(|nr| (nr, Vec::new()))
        .collect();
    let no_exec = libc::PROT_EXEC as u64;
    // No new executable memory once serving: no code loaded, none written.
    rules.insert(libc::SYS_mmap, vec![rule(vec![arg(2, MaskedEq(no_exec), 0)?])?]);
    rules.insert(libc::SYS_mprotect, vec![rule(vec![arg(2, MaskedEq(no_exec), 0)?])?]);
    // Threads only: CLONE_THREAD set, no namespace flag.
    let thread = libc::CLONE_THREAD as u64;
    rules.insert(
        libc::SYS_clone,
        vec![rule(vec![
            arg(0, MaskedEq(thread), thread)?,
            arg(0, MaskedEq(NAMESPACES), 0)?,
        ])?],
    );
    // Thread names only.
    rules.insert(
        libc::SYS_prctl,
        vec![
            rule(vec![arg(0, Eq, libc::PR_SET_NAME as u64)?])?,
            rule(vec![arg(0, Eq, libc::PR_GET_NAME as u64)?])?,
        ],
    );
    // Reading this process's own limits (rustix's getrlimit is prlimit64:
    // the file cache sizes itself by RLIMIT_NOFILE), never setting them.
    rules.insert(libc::SYS_prlimit64, vec![rule(vec![arg(0, Eq, 0)?, arg(2, Eq, 0)?])?]);
    // Non-blocking mode only (socket2, mio).
    rules.insert(libc::SYS_ioctl, vec![rule(vec![arg(1, Eq, libc::FIONBIO)?])?]);
    // Internet sockets (a reload's new addresses, HTTP/3's UDP) and UNIX
    // ones (systemd's NOTIFY_SOCKET).
    rules.insert(
        libc::SYS_socket,
        [libc::AF_INET, libc::AF_INET6, libc::AF_UNIX]
            .into_iter()
            .map(|family| rule(vec![arg(0, Eq, family as u64)?]))
            .collect::<Result<_, _>>()?,
    );
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_covers_what_lies_beneath_its_grants() {
        let dir = std::env::temp_dir();
        let mut start = Policy::default();
        start.read(&dir).unwrap();
        let mut next = Policy::default();
        next.read(&dir.join(".")).unwrap();
        assert_eq!(start.covers(&next), Ok(()));
        next.read(Path::new("/")).unwrap();
        assert!(matches!(start.covers(&next), Err(Outside::Read(p, _)) if p == Path::new("/")));
        next = Policy::default();
        next.append(&dir).unwrap();
        assert!(matches!(start.covers(&next), Err(Outside::Append(..))));
    }
}
