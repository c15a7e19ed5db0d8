"""Child processes for the bench runner: process groups, clean-up, /proc figures.

Every child (server, wrk, idle client) starts in its own session, so it and
anything it forks form one process group that `kill_all` can end, on normal
exit, on an exception, and on Ctrl-C or SIGTERM. CPU time and RSS are read
from /proc and summed over the whole process tree, so a server that forks
workers (nginx with a master) is measured as a whole.
"""
import atexit
import os
import resource
import signal
import subprocess
import sys

CLK_TCK = os.sysconf("SC_CLK_TCK")

# Descriptors wanted: 10,000 idle connections on each side, plus slack.
NOFILE_WANTED = 65536

_live = {}  # pid -> Popen, every process group started and not yet reaped


def raise_nofile():
    """Raises RLIMIT_NOFILE for this process and so for every child it starts.

    Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = NOFILE_WANTED
    try:
        # root may raise the hard limit up to fs.nr_open
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    except (ValueError, OSError):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def spawn(argv, **kwargs):
    """Starts argv in a new session (its own process group) and tracks it."""
    proc = subprocess.Popen(argv, start_new_session=True, **kwargs)
    _live[proc.pid] = proc
    return proc


def kill(proc, grace_s=3.0):
    """Ends a process group started by `spawn`: SIGTERM, then SIGKILL."""
    if proc is None:
        return
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    # The leader may be gone while others in its group live on.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _live.pop(proc.pid, None)


_cleanups = {}  # key -> function, run after kill_all (temporary directories)


def add_cleanup(key, fn):
    _cleanups[key] = fn


def remove_cleanup(key):
    _cleanups.pop(key, None)


def kill_all():
    for proc in list(_live.values()):
        kill(proc, grace_s=1.0)
    for key, fn in list(_cleanups.items()):
        _cleanups.pop(key, None)
        try:
            fn()
        except OSError:
            pass


def _on_signal(signum, _frame):
    kill_all()
    sys.stderr.write(f"\nbench: stopped by signal {signum}; children killed\n")
    os._exit(128 + signum)


def install_cleanup():
    atexit.register(kill_all)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)


def _children_of():
    """Maps ppid -> [pid] for every process now alive."""
    tree = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def process_tree(pid):
    """pid and all its live descendants."""
    tree = _children_of()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(tree.get(p, []))
    return out


def cpu_ticks(pid):
    """utime+stime (all threads) of pid and its descendants, plus the time of
    reaped children (cutime+cstime), in clock ticks."""
    total = 0
    for p in process_tree(pid):
        try:
            with open(f"/proc/{p}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # Fields after the command name, which may contain spaces: state is
        # field 3, utime 14, stime 15, cutime 16, cstime 17 (1-based).
        fields = stat[stat.rindex(b")") + 2:].split()
        total += sum(int(x) for x in fields[11:15])
    return total


def ticks_to_us(ticks):
    return ticks * 1_000_000 / CLK_TCK


def rss_kib(pid):
    """VmRSS of pid and its descendants, in KiB."""
    total = 0
    for p in process_tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue
    return total


def rss_detail_kib(pid):
    """VmRSS and its parts (RssAnon: heap and stacks; RssFile: mapped files,
    an archive's map included, pages the kernel can drop and share;
    RssShmem) of pid and its descendants, in KiB, keyed by those names."""
    keys = ("VmRSS", "RssAnon", "RssFile", "RssShmem")
    total = dict.fromkeys(keys, 0)
    for p in process_tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    name = line.split(":", 1)[0]
                    if name in total:
                        total[name] += int(line.split()[1])
        except OSError:
            continue
    return total


def system_ticks():
    """(busy, steal) clock ticks of the whole machine from /proc/stat, all CPUs.

    busy counts user, nice, system, irq, softirq and steal; steal alone is
    time the hypervisor gave to someone else while this VM wanted to run."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return user + nice + system + irq + softirq + steal, steal


def run_bounded(argv, timeout_s, **kwargs):
    """Runs argv to completion in its own group; kills it past timeout_s.

    Returns (returncode or None on timeout, stdout, stderr)."""
    proc = spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        kill(proc, grace_s=1.0)
        out, err = proc.communicate()
        rc = None
    _live.pop(proc.pid, None)
    return rc, out.decode(errors="replace"), err.decode(errors="replace")


