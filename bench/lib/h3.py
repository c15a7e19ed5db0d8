"""The HTTP/3 scenarios (h3-f17, h3-f4k, h3-10m): their client, the check of
every answer, and their table.

No load generator for HTTP/3 is to be had here: Debian's h2load (nghttp2
1.52) is built without QUIC, and no other is packaged. The client is
ngtcp2's test client `gtlsclient` (Debian's ngtcp2-client), pinned like
wrk: one QUIC connection per run, single-threaded, as many concurrent
streams as the server allows (both servers here allow 100), N requests
(`-n N`). Its limits, stated in every summary: it is a test client, not a
load generator, so wall time and req/s measure it more than the servers;
its receive buffer overflows during 10 MiB downloads (the server then
sees loss and retransmits, which is part of what it pays); the figure
compared is the server's CPU, not the client's speed.

Every answer is checked, in the measured run itself: each request asks a
URL of its own (the file's path with `?rN` appended, which both servers
ignore for a static file), gtlsclient writes each answer's body to a file
of that name (`--download`), and each of the N bodies must be the file's
exact bytes, N of them. The status is not written by gtlsclient when
quiet; its HTTP dump (`--no-quic-dump`, not quiet) is too slow to measure
with (it hex-dumps every body: 10 MiB took 18 s instead of 0.3 s), so
before each measured run a check run of the same shape (CHECK_SMALL or
CHECK_LARGE requests) must show `:status: 200` on every stream and exact
bodies. A body with the file's exact bytes cannot be an error page.

The server's CPU is the sum of its threads' on-CPU nanoseconds from
/proc/PID/task/*/schedstat (every process of its tree) before and after the
run: clock ticks (10 ms) are too coarse for runs of a few hundred ms.
Caddy's threads are long-lived (GOMAXPROCS=1 bounds the ones running Go
code), and so are Peregrine's; a thread that exits during a run would take
its time with it, so the clock-tick figure (which keeps it) is in the row
too (cpu_ticks).
"""
import os
import re
import shutil
import subprocess
import tempfile
import time

import install
import load
import procs

SMALL_REQUESTS = 5000  # per measured run of h3-f17 and h3-f4k (quick: 1000)
LARGE_DOWNLOADS = 3    # 10 MiB downloads per measured run of h3-10m (quick: 1)
CHECK_SMALL = 20
CHECK_LARGE = 1
RUN_TIMEOUT_S = 300.0


class WrongAnswer(Exception):
    """A server's answer over h3 is not the one the scenario measures."""


def ensure_client():
    """gtlsclient (Debian: ngtcp2-client); None or why it is missing."""
    if shutil.which("gtlsclient") is None and not (install.apt_install("ngtcp2-client")
                                                    and shutil.which("gtlsclient")):
        return "gtlsclient is missing and apt-get install ngtcp2-client failed"
    return None


def client_version():
    r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "ngtcp2-client"], capture_output=True, text=True)
    return f"gtlsclient (ngtcp2-client {r.stdout.strip() or 'not from Debian'})"


def n_requests(point, quick):
    if point.path == "/10m.txt":
        return 1 if quick else LARGE_DOWNLOADS
    return 1000 if quick else SMALL_REQUESTS


def _argv(port, point, n, download, tag, quiet, cpu):
    urls = [f"https://localhost:{port}{point.path}?{tag}{i}" for i in range(n)]
    argv = ["taskset", "-c", cpu, "gtlsclient", "--exit-on-all-streams-close", "--timeout=30s",
            "-n", str(n), "--download", download]
    argv += ["-q"] if quiet else ["--no-quic-dump"]
    return argv + ["127.0.0.1", str(port)] + urls


def _bodies(download, point, n, tag, body):
    """Each of the n answers' bodies must be the file's bytes; returns how
    many were not, with the first few named."""
    name = os.path.basename(point.path)
    wrong = []
    for i in range(n):
        path = os.path.join(download, f"{name}?{tag}{i}")
        try:
            with open(path, "rb") as f:
                got = f.read()
        except OSError:
            got = None
        if got != body:
            wrong.append(f"?{tag}{i}: " + ("no answer" if got is None else f"{len(got):,} bytes, not the file's"))
    return wrong


def check(port, point, body, cpu, quick):
    """The check run: every stream `:status: 200` and every body exact.
    Returns what was checked; raises WrongAnswer."""
    n = CHECK_LARGE if point.path == "/10m.txt" else CHECK_SMALL
    tmp = tempfile.mkdtemp(prefix="peregrine-bench-h3check-")
    try:
        out_path = os.path.join(tmp, "dump")
        download = os.path.join(tmp, "dl")
        os.mkdir(download)
        argv = _argv(port, point, n, download, "c", False, cpu)
        # the dump goes to a file: large, and read once
        with open(out_path, "wb") as out:
            proc = procs.spawn(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                rc = proc.wait(timeout=RUN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                procs.kill(proc, grace_s=1.0)
                rc = None
        statuses = {}
        with open(out_path, "rb") as f:
            for line in f:
                m = re.match(rb"http: stream 0x([0-9a-f]+) \[:status: (\d+)\]", line)
                if m:
                    statuses[int(m.group(1), 16)] = int(m.group(2))
        if rc != 0:
            raise WrongAnswer(f"gtlsclient -n {n} exited with {rc}")
        wrong = _bodies(download, point, n, "c", body)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if len(statuses) != n or set(statuses.values()) != {200}:
        codes = sorted(set(statuses.values()))
        raise WrongAnswer(f"gtlsclient -n {n}: {len(statuses)} statuses ({codes}), not {n} x 200")
    if wrong:
        raise WrongAnswer(f"{len(wrong)} of {n} bodies wrong: {'; '.join(wrong[:3])}")
    return f"gtlsclient -n {n}: {n} x :status 200, each body the file's {len(body):,} bytes"


def schedstat_ns(pid):
    """On-CPU nanoseconds of every thread of pid's process tree."""
    total = 0
    for p in procs.process_tree(pid):
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return total


def measure(running, point, body, cpu, quick):
    """One measured run: N requests on one connection, the server's CPU
    around it, then every body checked. Returns a results.csv row."""
    n = n_requests(point, quick)
    tmp = tempfile.mkdtemp(prefix="peregrine-bench-h3-")
    pid = running.proc.pid
    row = {"conns": point.conns, "depth": point.depth}
    try:
        download = os.path.join(tmp, "dl")
        os.mkdir(download)
        argv = _argv(running.port, point, n, download, "r", True, cpu)
        ns_before = schedstat_ns(pid)
        t0 = time.monotonic()
        with load.CpuWindow(pid) as window:
            rc, out, err = procs.run_bounded(argv, RUN_TIMEOUT_S)
        wall = time.monotonic() - t0
        ns = schedstat_ns(pid) - ns_before
        row.update(window.figures)
        wrong = _bodies(download, point, n, "r", body)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    good = n - len(wrong)
    cpu_us = ns / 1e3
    row.update({
        "duration_s": round(wall, 3),
        "requests": good,
        "req_per_s": round(good / wall, 1) if wall > 0 else "",
        "errors": len(wrong),
        "cpu_ticks": window.cpu_after - window.cpu_before,
        "cpu_us_per_req": round(cpu_us / good, 3) if good else "",
        "cpu_us_per_mib": round(cpu_us / (good * len(body) / 2**20), 2) if good else "",
        "rss_kib": procs.rss_kib(pid),
        "bytes": good * len(body),
        "bytes_per_s": round(good * len(body) / wall, 1) if wall > 0 else "",
        "data_bytes": good * len(body),
        "checked": f"every answer's body exact ({good:,} of {n:,})",
        "tls": "h3",
    })
    notes = []
    if rc != 0:
        notes.append(f"gtlsclient exited with {rc}: {(out + err).decode(errors='replace').strip()[-200:]}")
    if wrong:
        notes.append(f"{len(wrong)} of {n} answers wrong: {'; '.join(wrong[:3])}")
    return load.with_notes(row, notes, running)


def describe(quick):
    """The summary's paragraph on the h3 scenarios: how, and the client's limits."""
    small, large = (1000, 1) if quick else (SMALL_REQUESTS, LARGE_DOWNLOADS)
    return [
        f"- HTTP/3 scenarios (h3-*): the file servers with an h3 mode (peregrine `serve DIR` with the "
        f"run's certificate, h3 on by default; Caddy 2.6 from Debian, `file_server`, protocols h1 h2 h3, "
        f"GOMAXPROCS=1), the run's file tree. The client is ngtcp2's test client `gtlsclient` "
        f"(Debian's h2load has no QUIC, and no HTTP/3 load generator is packaged): one QUIC "
        f"connection per run, one thread, as many streams at once as the server allows (100 for "
        f"both), {small:,} requests per run for the small files and {large} download(s) of the 10 MiB "
        f"file. It is a test client, not a load generator: req/s and wall time are its own speed "
        f"more than the servers' (it writes every answer to its own file, for the check), and its "
        f"receive buffer overflows during 10 MiB downloads (the server retransmits, which it pays "
        f"for). The compared figures are the server's CPU: µs per request and bytes per CPU-second "
        f"(the sum of its threads' schedstat on-CPU time around the run). Every answer of every "
        f"measured run is checked (each request has its own URL, `?rN`, and its body must be the "
        f"file's exact bytes), and before it a check run of {CHECK_SMALL} requests (1 for the 10 MiB "
        f"file) must show `:status: 200` on every stream; a row with a note failed a check.",
    ]


def table(points, by_point, fmt_ratio):
    """The h3 scenario's table rows (markdown lines)."""
    head = ["server", "CPU µs/req", "× caddy", "MB/CPU-s", "× caddy", "wrong answers", "req/s (client-bound)",
            "CPU % srv / client / other", "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in points:
        rows = by_point[p.label]
        ref = next((s for s in rows if s["server"] == "caddy"), None)
        for s in rows:
            us = s.get("cpu_us_per_req")
            mib = s.get("cpu_us_per_mib")
            # bytes per CPU-second says something only for the large file
            mb_per_cpu_s = (2**20 / (mib / 1e6) / 1e6) if mib and p.path == "/10m.txt" else None
            ref_us = ref.get("cpu_us_per_req") if ref else None
            ref_mib = ref.get("cpu_us_per_mib") if ref else None
            cells = [
                s["server"],
                "–" if us is None else f"{us:,.1f}",
                fmt_ratio(us / ref_us) if us and ref_us and s is not ref else "–",
                "–" if mb_per_cpu_s is None else f"{mb_per_cpu_s:,.0f}",
                fmt_ratio(ref_mib / mib) if mb_per_cpu_s and ref_mib and s is not ref else "–",
                "–" if s.get("errors") is None else f"{s['errors']:,.0f}",
                "–" if s.get("req_per_s") is None else f"{s['req_per_s']:,.0f}",
                "/".join("–" if s.get(k) is None else f"{s[k]:.0f}"
                         for k in ("server_cpu_pct", "wrk_cpu_pct", "other_cpu_pct")),
                s.get("note") or "",
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return lines + ["", "CPU µs/req: the server's on-CPU time over the run divided by the answers "
                    "checked exact (median of the repetitions); MB/CPU-s: body bytes per second of "
                    "server CPU (10^6 bytes); × caddy: Peregrine's figure over Caddy's (CPU µs: lower "
                    "is better; MB/CPU-s: Caddy's µs/MiB over Peregrine's, higher is better)."]
