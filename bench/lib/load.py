"""The scenarios and the load they apply: wrk runs and the idle10k client.

A scenario is a list of load points (sweep has four). Every wrk run is
bounded by its -d duration plus a margin after which it is killed; the idle
client is bounded by its own deadline and by the runner's read timeouts.

Two families: the hello scenarios (GET / on each server's hello mode) and
the file scenarios (f17 ... frange, fpipe16: GETs of files from
filetree.Tree, served by each server's file mode; limit answers its hello as
the reference). tls-c50 and tls-f17 are c50 and f17 over TLS (https URLs;
wrk's OpenSSL client), for the servers with a TLS mode. And load100k, which runs no wrk: it starts a server on
filetree.ManyFiles (100,000 small files; peregrine-archive packs them) and
times its first answer, then reads its RSS (measure_load).

And the seeds' own scenarios: c512 ... c4096 and f17-c512 ... f17-c4096
(kawipiko's stress points: many connections, p99 beside CPU per request);
real10k (kawipiko's "real" scenario: filetree.RealFiles, 10,000 small files
asked in a fixed shuffled order by bench/wrk/paths.lua, RSS after the run);
rate and frate (Haywire's latency at a fixed rate: rate.py, oha holding 25,
50 and 75 % of limit's c50 capacity, corrected for coordinated omission).

WRK_CPU is where every client runs (wrk, oha, the idle client, the runner's
own probes in load100k): "1" in the split layout, "0" (the servers' CPU)
in the same layout; the runner sets it from its layout probe (layout.py).
"""
import json
import os
import resource
import selectors
import subprocess
import sys
import time
from dataclasses import dataclass

import filetree
import procs

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRK_CPU = "1"
WRK_TIMEOUT = "2s"          # wrk's per-request timeout; late answers count as timeouts
WRK_MARGIN_S = 30.0         # a wrk run that outlives -d by this much is killed
IDLE_CONNS = 10_000
IDLE_DEADLINE_S = 60.0
HEAD_BYTES_MAX = 2048       # file scenarios: a status line and headers are shorter than this
LOAD_DEADLINE_S = 120.0     # load100k: a server that has not answered by then is reported
LOAD_POLL_S = 0.0005        # load100k: pause between two attempts at the first GET


STRESS_CONNS = (512, 2048, 4096)
H2_CONNS, H2_STREAMS = 50, 32  # h2load -c 50 -m 32 (issue 10)
RATE_PCTS = (25, 50, 75)


@dataclass(frozen=True)
class Point:
    label: str      # e.g. "c50", "pipe16", "sweep-c1000"
    scenario: str   # the --scenarios name it belongs to
    conns: int
    depth: int = 1  # pipelined requests per write
    path: str = "/"  # request target
    # "hello": GET / of the hello servers; file scenarios: "file" (200 with
    # the whole file), "304" (If-None-Match with the server's own ETag),
    # "range" (Range: bytes=0-1023, 206); "load": load100k (no wrk)
    kind: str = "hello"
    # file scenarios: whether limit's hello runs as the reference (only
    # where answers are small enough for a hello to say something)
    limit_ref: bool = True
    # over TLS (https, the run's certificate: tls.py); only servers with a
    # TLS mode take part
    tls: bool = False
    # rate and frate: oha holds this % of limit's c50 capacity (rate.py)
    rate_pct: int = 0
    # HTTP/2 (h2.py): h2load instead of wrk, `depth` streams per connection;
    # with tls, ALPN h2 on the server's TLS listener, else h2c with prior
    # knowledge on its cleartext one; only servers with an h2 mode take part
    h2: bool = False
    # HTTP/3 (h3.py): gtlsclient instead of wrk, over QUIC on the server's
    # TLS port; only servers with an h3 mode take part
    h3: bool = False
    # the servers that take part, when only some do (proxy-cache-hit: the
    # archive and the proxy's cache, nobody else)
    only: tuple = ()

    @property
    def files(self):
        """A wrk scenario on the file tree (not load100k or real10k, which
        have their own)."""
        return self.kind in ("file", "304", "range")

    @property
    def file_mode(self):
        """Whether servers run in their file mode (on Tree or RealFiles)."""
        return self.files or self.kind == "real"


SCENARIOS = {
    "c10": [Point("c10", "c10", 10)],
    "c50": [Point("c50", "c50", 50)],
    "c100": [Point("c100", "c100", 100)],
    "c400": [Point("c400", "c400", 400)],
    "pipe16": [Point("pipe16", "pipe16", 50, 16)],
    "pipe32": [Point("pipe32", "pipe32", 50, 32)],
    "sweep": [Point(f"sweep-c{c}", "sweep", c) for c in (1, 10, 100, 1000)],
    "idle10k": [Point("idle10k", "idle10k", IDLE_CONNS)],
    # Static files (peregrine serve DIR against nginx, h2o, lighttpd, Go).
    "f17": [Point("f17", "f17", 50, path="/17.txt", kind="file")],
    "f4k": [Point("f4k", "f4k", 50, path="/4k.txt", kind="file")],
    "f64k": [Point("f64k", "f64k", 50, path="/64k.txt", kind="file", limit_ref=False)],
    # 10 connections, not 50: one 10 MiB answer already fills a connection's
    # socket buffers (loopback autotunes them to MiBs), so 10 keep the
    # server busy; 50 would park hundreds of MiB in kernel buffers and
    # measure memory pressure and wrk's reads more than the server.
    "f10m": [Point("f10m", "f10m", 10, path="/10m.txt", kind="file", limit_ref=False)],
    "f304": [Point("f304", "f304", 50, path="/4k.txt", kind="304")],
    "frange": [Point("frange", "frange", 50, path="/64k.txt", kind="range")],
    # pipe16 on the 17-byte file: pipeline.lua repeats GET of the URL's path
    "fpipe16": [Point("fpipe16", "fpipe16", 50, 16, path="/17.txt", kind="file")],
    # issue 32: the proxy's cache hit against the archive's answer of the
    # same file (17 B, c50, as f17): peregrine-cache is `serve EMPTY
    # --proxy --proxy-cache` in front of limit answering the file's bytes
    # with max-age (every request after the first a hit), beside
    # peregrine-archive serving it from the packed tree.
    "proxy-cache-hit": [Point("proxy-cache-hit", "proxy-cache-hit", 50, path="/17.txt", kind="file",
                              limit_ref=False, only=("peregrine-archive", "peregrine-cache"))],
    # Over TLS (the run's ECDSA P-256 certificate; every server on the
    # same protocol, cipher suite and group: tls.py): the hello and the
    # 17-byte file, keep-alive, so each connection's handshake is paid once
    # and the figures are the cost of the records (limit has no TLS).
    "tls-c50": [Point("tls-c50", "tls-c50", 50, tls=True)],
    "tls-f17": [Point("tls-f17", "tls-f17", 50, path="/17.txt", kind="file", limit_ref=False, tls=True)],
    # Bulk over TLS (issue 29): 1 MiB and 10 MiB files, 10 connections as
    # f10m, so the figure is the cost of encrypting the bytes (no kTLS on
    # either side here: this kernel has no `tls` module); bytes per
    # CPU-second is the size over the CPU µs per request.
    "tls-f1m": [Point("tls-f1m", "tls-f1m", 10, path="/1m.txt", kind="file", limit_ref=False, tls=True)],
    "tls-f10m": [Point("tls-f10m", "tls-f10m", 10, path="/10m.txt", kind="file", limit_ref=False, tls=True)],
    # Start-up and memory on 100,000 small files (no wrk; measure_load).
    "load100k": [Point("load100k", "load100k", 1, kind="load")],
    # kawipiko's stress points: the hello and the 17-byte file at 512, 2,048
    # and 4,096 connections (RLIMIT_NOFILE raised by procs.raise_nofile).
    **{f"c{n}": [Point(f"c{n}", f"c{n}", n)] for n in STRESS_CONNS},
    **{f"f17-c{n}": [Point(f"f17-c{n}", f"f17-c{n}", n, path="/17.txt", kind="file")] for n in STRESS_CONNS},
    # kawipiko's "real" scenario: 10,000 small files in a shuffled order.
    "real10k": [Point("real10k", "real10k", 50, path="/", kind="real", limit_ref=False)],
    # Haywire's latency at a fixed rate (oha -q, rate.py), 50 connections.
    "rate": [Point(f"rate{pct}", "rate", 50, rate_pct=pct) for pct in RATE_PCTS],
    "frate": [Point(f"frate{pct}", "frate", 50, path="/17.txt", kind="file", rate_pct=pct) for pct in RATE_PCTS],
    # HTTP/2 (issue 10): h2load -c 50 -m 32 (50 connections, 32 streams
    # each: 1,600 requests outstanding) on the file servers, over TLS
    # (h2-*: ALPN h2) and cleartext (h2c-*: prior knowledge). The same load
    # for the 1 MiB file: h2 flow control, not the socket, paces its
    # streams, and the issue asks for this one shape (bench/README.md).
    **{f"{mode}-{name}": [Point(f"{mode}-{name}", f"{mode}-{name}", H2_CONNS, H2_STREAMS, path=path,
                                kind="file", limit_ref=False, tls=mode == "h2", h2=True)]
       for mode in ("h2", "h2c") for name, path in (("c50", "/17.txt"), ("f4k", "/4k.txt"), ("f1m", "/1m.txt"))},
    # HTTP/3 (issue 11): gtlsclient, one QUIC connection, up to 100 streams
    # at once (h3.py: N requests per run, every answer checked).
    **{f"h3-{name}": [Point(f"h3-{name}", f"h3-{name}", 1, 100, path=path, kind="file", limit_ref=False,
                            tls=True, h3=True)]
       for name, path in (("f17", "/17.txt"), ("f4k", "/4k.txt"), ("10m", "/10m.txt"))},
}

FILE_SCENARIOS = [name for name, points in SCENARIOS.items()
                  if points[0].files and not points[0].tls and not points[0].rate_pct and not points[0].h2]
RATE_SCENARIOS = [name for name, points in SCENARIOS.items() if points[0].rate_pct]
TLS_SCENARIOS = [name for name, points in SCENARIOS.items() if points[0].tls and not points[0].h2
                 and not points[0].h3]
H2_SCENARIOS = [name for name, points in SCENARIOS.items() if points[0].h2]
H3_SCENARIOS = [name for name, points in SCENARIOS.items() if points[0].h3]

DESCRIPTIONS = {
    "c10": "keep-alive GET /, 10 connections",
    "c50": "keep-alive GET /, 50 connections",
    "c100": "keep-alive GET /, 100 connections",
    "c400": "keep-alive GET /, 400 connections",
    "pipe16": "50 connections, 16 pipelined GETs per write",
    "pipe32": "50 connections, 32 pipelined GETs per write",
    "sweep": "keep-alive GET / at 1, 10, 100 and 1000 connections",
    "idle10k": "memory per idle keep-alive connection, 10,000 connections",
    "f17": "keep-alive GET of a 17-byte file, 50 connections",
    "f4k": "keep-alive GET of a 4 KiB file, 50 connections",
    "f64k": "keep-alive GET of a 64 KiB file, 50 connections",
    "f10m": "keep-alive GET of a 10 MiB file, 10 connections",
    "f304": "GET of the 4 KiB file with If-None-Match: the server's own ETag (every answer 304), 50 connections",
    "frange": "GET of the 64 KiB file with Range: bytes=0-1023 (every answer 206), 50 connections",
    "fpipe16": "GET of the 17-byte file, 50 connections, 16 pipelined GETs per write",
    "proxy-cache-hit": "GET of the 17-byte file, 50 connections: the archive's answer beside the proxy cache's hit "
                       "(issue 32)",
    "tls-c50": "keep-alive GET / over TLS, 50 connections (one handshake per connection)",
    "tls-f17": "keep-alive GET of the 17-byte file over TLS, 50 connections (one handshake per connection)",
    "tls-f1m": "keep-alive GET of a 1 MiB file over TLS, 10 connections",
    "tls-f10m": "keep-alive GET of a 10 MiB file over TLS, 10 connections",
    "load100k": "start-up and memory with 100,000 small files",
    **{f"c{n}": f"keep-alive GET /, {n:,} connections" for n in STRESS_CONNS},
    **{f"f17-c{n}": f"keep-alive GET of the 17-byte file, {n:,} connections" for n in STRESS_CONNS},
    "real10k": "10,000 small files (1 to 20 KiB, three folder levels) asked in a shuffled order, "
               "50 connections",
    "rate": "GET / at a fixed rate (25, 50 and 75 % of limit's c50 capacity), 50 connections, "
            "oha with coordinated-omission correction",
    **{f"{mode}-{name}": f"GET of the {what} over {over}, h2load, 50 connections x 32 streams"
       for mode, over in (("h2", "HTTP/2 over TLS (ALPN h2)"), ("h2c", "cleartext HTTP/2 (h2c, prior knowledge)"))
       for name, what in (("c50", "17-byte file"), ("f4k", "4 KiB file"), ("f1m", "1 MiB file"))},
    "frate": "GET of the 17-byte file at a fixed rate (25, 50 and 75 % of limit's c50 capacity), "
             "50 connections, oha with coordinated-omission correction",
    **{f"h3-{name}": f"GET of the {what} over HTTP/3, gtlsclient, one QUIC connection, up to 100 streams"
       for name, what in (("f17", "17-byte file"), ("f4k", "4 KiB file"), ("10m", "10 MiB file"))},
}


def wrk_argv(port, point, duration_s, headers=(), script_args=()):
    """headers: request header lines ("Name: value") wrk adds with -H; the
    request stays static (no Lua per request), report.lua only reports.
    real10k runs paths.lua, which builds each request from its list of
    paths (script_args: the list's file)."""
    script = "pipeline.lua" if point.depth > 1 else "paths.lua" if point.kind == "real" else "report.lua"
    argv = ["taskset", "-c", WRK_CPU, "wrk", "-t", "1", "-c", str(point.conns),
            "-d", f"{duration_s:g}s", "--timeout", WRK_TIMEOUT]
    for h in headers:
        argv += ["-H", h]
    scheme = "https" if point.tls else "http"
    argv += ["-s", os.path.join(BENCH, "wrk", script), f"{scheme}://127.0.0.1:{port}{point.path}"]
    if point.depth > 1:
        argv += ["--", str(point.depth)]
    elif script_args:
        argv += ["--", *script_args]
    return argv


def run_wrk(port, point, duration_s, headers=(), script_args=()):
    """One wrk run. Returns (figures dict, None) or (None, error string)."""
    argv = wrk_argv(port, point, duration_s, headers, script_args)
    rc, out, err = procs.run_bounded(argv, duration_s + WRK_MARGIN_S)
    if rc is None:
        return None, f"wrk did not finish within {duration_s + WRK_MARGIN_S:.0f} s"
    for line in out.splitlines():
        if line.startswith("BENCH_JSON "):
            return json.loads(line[len("BENCH_JSON "):]), None
    return None, f"wrk exited {rc} without a report: {(err or out).strip()[-300:]}"


def measure_wrk(running, point, duration_s, headers=(), body_bytes=None, script_args=()):
    """A measured wrk run against a running server, with its CPU time.

    body_bytes: the body each answer was checked to carry (file scenarios);
    wrk's bytes per response must then lie between it and it plus a head,
    else the run is flagged: the server answered something else mid-run."""
    with CpuWindow(running.proc.pid) as window:
        fig, err = run_wrk(running.port, point, duration_s, headers, script_args)
    row = {"conns": point.conns, "depth": point.depth, **window.figures}
    cpu_after, cpu_before = window.cpu_after, window.cpu_before
    pid = running.proc.pid
    if err:
        row["note"] = err
        return row
    requests = fig["requests"]
    seconds = fig["duration_us"] / 1e6
    errors = sum(fig[k] for k in ("err_connect", "err_read", "err_write", "err_timeout", "err_status"))
    row.update({
        "duration_s": round(seconds, 3),
        "requests": requests,
        "req_per_s": round(requests / seconds, 1) if seconds > 0 else "",
        "err_connect": fig["err_connect"], "err_read": fig["err_read"],
        "err_write": fig["err_write"], "err_timeout": fig["err_timeout"],
        "err_status": fig["err_status"], "errors": errors,
        "cpu_ticks": cpu_after - cpu_before,
        "cpu_us_per_req": round(procs.ticks_to_us(cpu_after - cpu_before) / requests, 3) if requests else "",
        "rss_kib": procs.rss_kib(pid),
        # bytes per response, head and body: the servers' headers differ
        "resp_bytes": round(fig["bytes"] / requests, 1) if requests else "",
        # wrk's Transfer/sec: every byte it read (heads and bodies) / run time
        "bytes": fig["bytes"],
        "bytes_per_s": round(fig["bytes"] / seconds, 1) if seconds > 0 else "",
        "wrk_p50_us": fig["p50_us"], "wrk_p99_us": fig["p99_us"],
        "lat_mean_wrk_us": fig["lat_mean_us"], "lat_max_us": fig["lat_max_us"],
    })
    # Little's law: a closed loop keeps conns x depth requests outstanding,
    # so the mean time from write to answer is outstanding / throughput.
    if requests and seconds > 0:
        row["lat_little_us"] = round(point.conns * point.depth / (requests / seconds) * 1e6, 1)
    # wrk's percentiles are void with pipelining (see bench/wrk/report.lua)
    if point.depth == 1:
        row.update({"p50_us": fig["p50_us"], "p90_us": fig["p90_us"],
                    "p99_us": fig["p99_us"], "p999_us": fig["p999_us"]})
    notes = []
    if body_bytes is not None and requests:
        # wrk's bytes also count the answers still in flight when it
        # stopped (up to one per connection), which it does not count as
        # requests: with 10 MiB answers that is a lot per request
        per = fig["bytes"] / requests
        in_flight = point.conns * point.depth * (body_bytes + HEAD_BYTES_MAX) / requests
        if not body_bytes <= per <= body_bytes + HEAD_BYTES_MAX + in_flight:
            notes.append(f"{per:,.0f} bytes per answer, not the checked {body_bytes:,}-byte body "
                         f"plus a head: the answers changed during the run")
    return with_notes(row, notes, running)


def with_notes(row, notes, running):
    """row with its notes joined, and one more if the server died."""
    if not running.alive():
        notes.append(f"server exited with {running.proc.returncode} during the run")
    if notes:
        row["note"] = "; ".join(notes)
    return row


class CpuWindow:
    """The server's CPU ticks, the client's (children of the runner) and the
    machine's over a `with` block: `figures` has the CPU % of each, and
    `cpu_before` / `cpu_after` the server's ticks."""

    def __init__(self, pid):
        self.pid = pid

    def __enter__(self):
        self.cpu_before = procs.cpu_ticks(self.pid)
        self.client_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.sys_before = procs.system_ticks()
        self.t_before = time.monotonic()
        return self

    def __exit__(self, *_exc):
        wall_s = time.monotonic() - self.t_before
        sys_after = procs.system_ticks()
        client_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu_after = procs.cpu_ticks(self.pid)
        # How busy each side was: a server well under 100 % while wrk sits at
        # 100 % means the client, not the server, set the req/s of this run.
        client_s = (client_after.ru_utime + client_after.ru_stime) - \
            (self.client_before.ru_utime + self.client_before.ru_stime)
        f = {"server_cpu_pct": round(100 * procs.ticks_to_us(self.cpu_after - self.cpu_before) / 1e6 / wall_s, 1),
             "wrk_cpu_pct": round(100 * client_s / wall_s, 1)}
        # Interference: CPU that neither side used (other processes, the
        # runner, the kernel's own threads) and CPU stolen by the hypervisor, in
        # % of one CPU. Evidence for judging a noisy row, not a correction.
        busy_pct = 100 * procs.ticks_to_us(sys_after[0] - self.sys_before[0]) / 1e6 / wall_s
        f["other_cpu_pct"] = round(max(0.0, busy_pct - f["server_cpu_pct"] - f["wrk_cpu_pct"]), 1)
        f["steal_pct"] = round(100 * procs.ticks_to_us(sys_after[1] - self.sys_before[1]) / 1e6 / wall_s, 1)
        self.figures = f
        return False


def _read_line(stream, timeout_s):
    """Reads one line from a pipe, or returns None after timeout_s."""
    deadline = time.monotonic() + timeout_s
    buf = b""
    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)
    try:
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(timeout=left):
                return None
            chunk = os.read(stream.fileno(), 4096)
            if not chunk:
                return None
            buf += chunk
    finally:
        sel.close()
    return buf.split(b"\n", 1)[0].decode()


def measure_idle(running, hold_s):
    """Opens IDLE_CONNS idle keep-alive connections; RSS per connection."""
    pid = running.proc.pid
    row = {"conns": IDLE_CONNS, "depth": 1}
    rss_before = procs.rss_kib(pid)
    client = procs.spawn(
        ["taskset", "-c", WRK_CPU, sys.executable, os.path.join(BENCH, "lib", "idle_client.py"),
         "--port", str(running.port), "--conns", str(IDLE_CONNS), "--deadline", str(IDLE_DEADLINE_S)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = _read_line(client.stdout, IDLE_DEADLINE_S + 15)
        if line is None:
            row["note"] = "idle client gave no report: " + (client.stderr.read1(500).decode(errors="replace") if client.poll() is not None else "timeout")
            return row
        opened = json.loads(line)
        time.sleep(hold_s)  # idle: nothing is sent on any connection
        rss_after = procs.rss_kib(pid)
        client.stdin.write(b"check\n")
        client.stdin.flush()
        line = _read_line(client.stdout, 30)
        checked = json.loads(line) if line else {"still_open": 0, "closed_by_server": opened["ok"]}
    finally:
        procs.kill(client, grace_s=5.0)
    n_ok = checked["still_open"]
    row.update({
        "idle_conns_ok": opened["ok"],
        "idle_failed": opened["failed"],
        "idle_closed_by_server": checked["closed_by_server"],
        "errors": opened["failed"] + checked["closed_by_server"],
        "idle_rss_before_kib": rss_before,
        "idle_rss_after_kib": rss_after,
        "rss_kib": rss_after,
        "duration_s": opened["elapsed_s"],
    })
    if n_ok:
        row["idle_bytes_per_conn"] = round((rss_after - rss_before) * 1024 / n_ok, 1)
    notes = []
    if opened["why"]:
        notes.append("failed: " + ", ".join(f"{k} x{v}" for k, v in opened["why"].items()))
    if checked["closed_by_server"]:
        notes.append(f"server closed {checked['closed_by_server']} idle connections")
    if not running.alive():
        notes.append(f"server exited with {running.proc.returncode}")
    if notes:
        row["note"] = "; ".join(notes)
    return row


# -- load100k ---------------------------------------------------------------

def _pinned_to(cpu):
    """Pins this process (the runner) to `cpu`; returns the mask to restore.
    While a server starts on CPU 0, the runner polls from wrk's CPU."""
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {int(cpu)})
    except OSError:
        pass
    return before


def start_to_first_answer(running, argv, path, body, deadline_s=LOAD_DEADLINE_S):
    """Starts argv (pinned like every server) and GETs path on a fresh
    connection every LOAD_POLL_S until the answer is 200 with body. Returns
    (milliseconds from just before the process was created to the end of
    that answer, None) or (None, why not). The time includes the process's
    own start (exec, dynamic linking), the server's set-up (an archive's
    open and checks) and one request."""
    before = _pinned_to(WRK_CPU)
    try:
        t0 = time.monotonic()
        running.launch(argv)
        deadline = t0 + deadline_s
        last = "no answer"
        while True:
            now = time.monotonic()
            if now > deadline:
                return None, f"no right answer to GET {path} after {deadline_s:.0f} s ({last})"
            if running.proc.poll() is not None:
                return None, f"exited with {running.proc.returncode} before answering: {running.log_tail()}"
            try:
                [(status, _h, got)] = filetree.get(running.port, path, timeout_s=max(1.0, deadline - now))
                if status == 200 and got == body:
                    return (time.monotonic() - t0) * 1000, None
                last = f"GET {path}: {status} with {len(got):,} body bytes"
            except filetree.WrongAnswer as e:
                last = str(e)
            time.sleep(LOAD_POLL_S)
    finally:
        os.sched_setaffinity(0, before)


def measure_load(running, argv, many):
    """load100k on one fresh server: start to first answer (GET of the
    tree's first file), RSS then, one GET of each of many.probed() on one
    keep-alive connection (each answer checked), RSS again."""
    row = {}
    ms, err = start_to_first_answer(running, argv, many.path(0), many.content(0))
    if ms is None:
        row["note"] = err
        return row
    pid = running.proc.pid
    first = procs.rss_detail_kib(pid)
    row.update({"start_ms": round(ms, 2),
                "start_cpu_ms": round(procs.ticks_to_us(procs.cpu_ticks(pid)) / 1000, 1),
                "rss_first_kib": first["VmRSS"], "rss_anon_first_kib": first["RssAnon"],
                "rss_file_first_kib": first["RssFile"]})
    probed = many.probed()
    ok, wrong = 0, []
    try:
        answers = filetree.get_many(running.port, [many.path(i) for i in probed])
    except filetree.WrongAnswer as e:
        answers, wrong = [], [str(e)]
    for i, (status, body) in zip(probed, answers):
        if status == 200 and body == many.content(i):
            ok += 1
        elif len(wrong) < 3:
            wrong.append(f"GET {many.path(i)}: {status} with {len(body):,} body bytes")
    after = procs.rss_detail_kib(pid)
    row.update({"paths_ok": ok, "errors": len(probed) - ok,
                "rss_kib": after["VmRSS"], "rss_after_kib": after["VmRSS"],
                "rss_anon_after_kib": after["RssAnon"], "rss_file_after_kib": after["RssFile"]})
    notes = []
    if wrong:
        notes.append(f"{len(probed) - ok} of {len(probed)} answers wrong: " + "; ".join(wrong))
    if not running.alive():
        notes.append(f"server exited with {running.proc.returncode}")
    if notes:
        row["note"] = "; ".join(notes)
    return row
