"""bench/run's WebSocket scenarios (issue 31): echo over 100 connections and
10,000 idle WebSockets, Peregrine against uWebSockets, facil.io, Go
(coder/websocket), Node (ws), tokio-tungstenite and the ws-limit floor.

A group of its own beside the HTTP scenarios: its servers are echo servers,
not hello or file servers, and its client is bench/ws/wsload.c, not wrk.
Every peer runs one worker, one thread where it can (Go: GOMAXPROCS=1; Node
and Go keep their runtime's helper threads, whose CPU counts), pinned to the
server CPU; wsload runs where the layout probe put the clients.

Per scenario, repetition and server: start the server fresh, check that it
echoes (bench/ws/check.py: the 101 and its Sec-WebSocket-Accept, text and
binary frames, ten frames in one write, a frame split across writes, 16- and
64-bit lengths), then
- echo scenarios: wsload opens 100 WebSockets, warms up for WARMUP_S and
  measures for --duration seconds: it counts the echoes (each checked: FIN,
  binary, unmasked, the size and every byte sent) and reads the server's
  utime + stime from /proc/PID/stat (all threads) at the start and end of
  that same window, so CPU µs per echoed message = CPU / echoes;
- idle: wsload opens one WebSocket and echoes once, reads the server's VmRSS,
  opens 10,000 more (at most 256 handshakes in flight), waits for every 101,
  holds 1 s, reads VmRSS again: bytes per WebSocket = the difference / 10,000;
  then checks one echo on every 100th of them.
Repetitions go round the servers, starting one server later each time, so
the host's drift falls on all alike; ratios are taken within a repetition
(the same round) and their median reported.
"""
import csv
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time

import install
import load
import procs
import servers

BENCH = install.BENCH
REPO = servers.REPO
BUILD = os.path.join(BENCH, "build", "ws")
WS = os.path.join(BENCH, "ws")
PEERS = os.path.join(BENCH, "peers")
WARMUP_S = 1.0
CONNS = 100
IDLE_CONNS = 10_000
BEGIN = "<!-- bench-ws:begin -->"
END = "<!-- bench-ws:end -->"

# name -> (message bytes, frames per send); None: the idle scenario
SCENARIOS = {
    "ws32x1": (32, 1),
    "ws32x10": (32, 10),
    "ws4kx1": (4096, 1),
    "ws4kx10": (4096, 10),
    "wsidle10k": None,
}
DESCRIPTIONS = {
    "ws32x1": "32-byte binary messages, 100 WebSockets, 1 frame per send (closed loop: a connection sends again when its echo is back)",
    "ws32x10": "32-byte binary messages, 100 WebSockets, 10 frames per send (one write of 10 frames, then 10 echoes)",
    "ws4kx1": "4 KiB binary messages, 100 WebSockets, 1 frame per send",
    "ws4kx10": "4 KiB binary messages, 100 WebSockets, 10 frames per send",
    "wsidle10k": "10,000 idle WebSockets: server VmRSS after they are open minus before, per WebSocket",
}


def log(msg):
    print(f"bench: {msg}", flush=True)


def _run(argv, cwd=None, env=None, timeout=900):
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return None if r.returncode == 0 else f"{' '.join(argv[:3])} failed: " + (r.stderr or r.stdout).strip()[-800:]


def _checkout(env_name, default, url_sub):
    """A peer's source checkout: $env_name, else bench/build/ws/<default>,
    else a shallow `git clone` of each url into it (fails without network)."""
    path = os.environ.get(env_name) or os.path.join(BUILD, default)
    if os.path.isdir(path):
        return path, None
    for sub, url in url_sub:
        dest = os.path.join(path, sub) if sub else path
        why = _run(["git", "clone", "-q", "--depth", "1", url, dest], timeout=600)
        if why:
            return None, f"no {default} source ({env_name} unset, {path} missing, and {why})"
    return path, None


def _git_describe(path):
    r = subprocess.run(["git", "-C", path, "describe", "--tags", "--always"], capture_output=True, text=True)
    c = subprocess.run(["git", "-C", path, "log", "-1", "--format=%H %cs"], capture_output=True, text=True)
    return f"{r.stdout.strip()} ({c.stdout.strip()})"


class Peer:
    name = ""
    env = None
    threads_note = "one thread"

    def prepare(self):
        return None

    def argv(self, port):
        raise NotImplementedError

    def version(self):
        return ""


class WsLimit(Peer):
    name = "ws-limit"

    def prepare(self):
        self.binary = os.path.join(BUILD, "ws-limit")
        return _run(["gcc", "-O2", "-o", self.binary, os.path.join(WS, "ws-limit.c")])

    def argv(self, port):
        return [self.binary, str(port)]

    def version(self):
        return "bench/ws/ws-limit.c, gcc -O2"


class Peregrine(Peer):
    name = "peregrine"
    run_cargo = True
    threads_note = "one worker (the affinity of one CPU) and its signal thread"

    def prepare(self):
        target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
        self.binary = os.path.join(target, "release", "examples", "ws_echo")
        if self.run_cargo:
            cargo = shutil.which("cargo") or os.path.expanduser("~/.cargo/bin/cargo")
            log("cargo build --release -p peregrine --example ws_echo")
            why = _run([cargo, "build", "--release", "-p", "peregrine", "--example", "ws_echo"], cwd=REPO,
                       timeout=3600)
            if why:
                return why
        return None if os.access(self.binary, os.X_OK) else f"{self.binary} is missing"

    def argv(self, port):
        # Workers default to the CPUs in the affinity mask: one, pinned.
        return [self.binary, "--bind", f"127.0.0.1:{port}", "--n-conns-max", "65536", "--conns-per-ip-max", "0"]

    def version(self):
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "crates", "Cargo.lock"],
                               capture_output=True, text=True)
        return (f"git {rev.stdout.strip()}{' (dirty)' if dirty.stdout.strip() else ''}, "
                "crates/engine/examples/ws_echo.rs, cargo --release")


class UWebSockets(Peer):
    name = "uwebsockets"

    def prepare(self):
        self.src, why = _checkout("UWEBSOCKETS_SRC", "uWebSockets",
                                  [("", "https://github.com/uNetworking/uWebSockets"),
                                   ("uSockets", "https://github.com/uNetworking/uSockets")])
        if why:
            return why
        self.binary = os.path.join(BUILD, "uws-echo")
        return _run([os.path.join(PEERS, "uwebsockets", "build.sh"), self.src, self.binary])

    def argv(self, port):
        return [self.binary, str(port)]

    def version(self):
        return (f"uWebSockets {_git_describe(self.src)}, uSockets {_git_describe(os.path.join(self.src, 'uSockets'))}; "
                "bench/peers/uwebsockets/EchoServer.cpp, no SSL, no zlib, -O3 -flto -march=native")


class Facil(Peer):
    name = "facil.io"

    def prepare(self):
        self.src, why = _checkout("FACIL_SRC", "facil.io", [("", "https://github.com/boazsegev/facil.io")])
        if why:
            return why
        self.binary = os.path.join(BUILD, "ws-facil")
        return _run([os.path.join(PEERS, "ws-facil", "build.sh"), self.src, self.binary])

    def argv(self, port):
        return [self.binary, str(port)]

    def version(self):
        return f"facil.io {_git_describe(self.src)}; bench/peers/ws-facil/echo.c, -O2, no TLS"


class GoWebsocket(Peer):
    name = "go-websocket"
    env = dict(os.environ, GOMAXPROCS="1")
    threads_note = "GOMAXPROCS=1 (the runtime's other threads count)"

    def prepare(self):
        go = install.go_binary()
        if go is None:
            return "no Go toolchain"
        src = os.path.join(PEERS, "ws-go")
        why = install.ensure_go_modules(src)
        if why:
            return why
        self.binary = os.path.join(BUILD, "ws-go")
        return _run([go, "build", "-o", self.binary, "."], cwd=src, env=install.go_env())

    def argv(self, port):
        return [self.binary, "-bind", f"127.0.0.1:{port}"]

    def version(self):
        mod = "github.com/coder/websocket (version unknown)"
        with open(os.path.join(PEERS, "ws-go", "go.mod")) as f:
            m = re.search(r"github.com/coder/websocket (\S+)", f.read())
            if m:
                mod = f"github.com/coder/websocket {m.group(1)}"
        go = subprocess.run([install.go_binary(), "version"], capture_output=True, text=True).stdout.strip()
        return f"{mod}; {go}"


class NodeWs(Peer):
    name = "node-ws"
    threads_note = "one event loop (V8's and libuv's helper threads count)"

    def prepare(self):
        self.node = shutil.which("node")
        npm = shutil.which("npm")
        if not self.node or not npm:
            return "no node or npm on PATH"
        src = os.path.join(PEERS, "ws-node")
        if not os.path.isdir(os.path.join(src, "node_modules", "ws")):
            why = _run([npm, "ci", "--no-audit", "--no-fund"], cwd=src, timeout=600)
            if why:
                return why
        return None

    def argv(self, port):
        return [self.node, os.path.join(PEERS, "ws-node", "echo.js"), f"127.0.0.1:{port}"]

    def version(self):
        r = subprocess.run([self.node, "-p", "require('ws/package.json').version"],
                           cwd=os.path.join(PEERS, "ws-node"), capture_output=True, text=True)
        v = subprocess.run([self.node, "--version"], capture_output=True, text=True)
        return f"ws {r.stdout.strip()}; node {v.stdout.strip()}"


class Tokio(Peer):
    name = "tokio-tungstenite"
    threads_note = "tokio current_thread runtime"

    def prepare(self):
        cargo = shutil.which("cargo") or os.path.expanduser("~/.cargo/bin/cargo")
        src = os.path.join(PEERS, "ws-tokio")
        env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(src, "target"))
        self.binary = os.path.join(src, "target", "release", "ws-tokio")
        return _run([cargo, "build", "--release", "--locked"], cwd=src, env=env, timeout=3600)

    def argv(self, port):
        return [self.binary, f"127.0.0.1:{port}"]

    def version(self):
        versions = {}
        with open(os.path.join(PEERS, "ws-tokio", "Cargo.lock")) as f:
            for name, ver in re.findall(r'name = "([^"]+)"\nversion = "([^"]+)"', f.read()):
                versions[name] = ver
        rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
        return (f"tokio-tungstenite {versions.get('tokio-tungstenite')}, tungstenite {versions.get('tungstenite')}, "
                f"tokio {versions.get('tokio')} (Cargo.lock); {rustc}")


ALL = {cls.name: cls for cls in (WsLimit, Peregrine, UWebSockets, Facil, GoWebsocket, NodeWs, Tokio)}
ORDER = list(ALL)


def _wait_port(port, proc, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"exited with {proc.returncode}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return None
        except OSError:
            time.sleep(0.05)
    return f"not listening after {timeout_s:g} s"


def _parse(out):
    row = {}
    for line in out.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            try:
                row[k] = float(v)
            except ValueError:
                row[k] = v
    return row


def _one(peer, scenario, rep, duration_s, client_cpu, log_dir):
    """One start, check and measurement. Returns a row (dict)."""
    row = {"server": peer.name, "scenario": scenario, "rep": rep}
    port = servers.free_port()
    log_path = os.path.join(log_dir, f"{peer.name}-{scenario}.log")
    with open(log_path, "a") as logf:
        logf.write(f"--- rep {rep}: taskset -c {servers.SERVER_CPU} {' '.join(peer.argv(port))}\n")
        logf.flush()
        proc = procs.spawn(["taskset", "-c", servers.SERVER_CPU] + peer.argv(port), stdout=logf,
                           stderr=subprocess.STDOUT, env=peer.env)
    try:
        why = _wait_port(port, proc)
        if why:
            row["note"] = f"did not start: {why}"
            return row
        r = subprocess.run([sys.executable, os.path.join(WS, "check.py"), str(port)], capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            row["note"] = f"wrong echo, not measured: {r.stdout.strip()}"
            return row
        row["threads"] = len(os.listdir(f"/proc/{proc.pid}/task"))
        client = os.path.join(BUILD, "wsload")
        base = ["taskset", "-c", client_cpu, client, "--port", str(port), "--pid", str(proc.pid)]
        spec = SCENARIOS[scenario]
        if spec is None:
            argv = base + ["--idle", str(IDLE_CONNS)]
            timeout = 300
        else:
            size, frames = spec
            argv = base + ["-c", str(CONNS), "-k", str(frames), "-s", str(size), "-d", f"{duration_s:g}",
                           "-w", f"{WARMUP_S:g}"]
            timeout = duration_s + WARMUP_S + 60
        busy0, steal0 = procs.system_ticks()
        t0 = time.monotonic()
        rc, out, err = procs.run_bounded(argv, timeout)
        wall = time.monotonic() - t0
        busy1, steal1 = procs.system_ticks()
        row.update(_parse(out))
        # the whole machine's busy CPU over the client's run, in % of one CPU
        row["machine_busy_pct"] = round(100 * procs.ticks_to_us(busy1 - busy0) / 1e6 / wall, 1)
        row["steal_pct"] = round(100 * procs.ticks_to_us(steal1 - steal0) / 1e6 / wall, 1)
        if rc != 0:
            row["note"] = f"wsload exited {rc}: {err.strip()[-300:]}"
        elif err.strip():
            row["note"] = err.strip()[-300:]
        return row
    finally:
        procs.kill(proc)


def run(names, scenario_names, reps, duration_s, client_cpu, run_dir, quick=False, no_cargo=False):
    """Builds the peers and wsload, runs every scenario, writes ws.csv and
    ws.md into run_dir. Returns (summary markdown, {peer: version}, skipped)."""
    os.makedirs(BUILD, exist_ok=True)
    log_dir = os.path.join(run_dir, "logs")
    os.makedirs(log_dir, exist_ok=True)
    skipped = {}
    why = _run(["gcc", "-O2", "-o", os.path.join(BUILD, "wsload"), os.path.join(WS, "wsload.c")])
    if why:
        log(f"ERROR: no WebSocket load client: {why}")
        return "", {}, {"ws scenarios": why}
    Peregrine.run_cargo = not no_cargo
    prepared = {}
    for name in names:
        peer = ALL[name]()
        log(f"preparing {name} (ws)")
        t0 = time.monotonic()
        try:
            why = peer.prepare()
        except Exception as e:  # a peer that cannot be built is reported, never fatal
            why = f"{type(e).__name__}: {e}"
        if why:
            skipped[name] = why
            log(f"skipping {name}: {why}")
        else:
            prepared[name] = peer
            log(f"{name} ready ({time.monotonic() - t0:.0f} s)")
    rows = []
    order = list(prepared.values())
    for scenario in scenario_names:
        for rep in range(1, reps + 1):
            # each round starts one server later: no server always runs first
            shift = (rep - 1) % max(1, len(order))
            for peer in order[shift:] + order[:shift]:
                row = _one(peer, scenario, rep, duration_s, client_cpu, log_dir)
                rows.append(row)
                if SCENARIOS[scenario] is None:
                    log(f"{scenario:9} {peer.name:18} rep {rep}: {row.get('bytes_per_conn', '-')} B/WebSocket"
                        + (f"  [{row['note']}]" if row.get("note") else ""))
                else:
                    log(f"{scenario:9} {peer.name:18} rep {rep}: {row.get('echoes_per_s', 0):>10,.0f} msg/s  "
                        f"cpu {row.get('srv_us_per_echo', '-')} µs/msg  client {row.get('client_us_per_echo', '-')}"
                        f"  busy {row.get('machine_busy_pct')} %"
                        + (f"  [{row['note']}]" if row.get("note") else ""))
    fields = ["server", "scenario", "rep", "echoes", "seconds", "echoes_per_s", "srv_ticks", "srv_cpu_s",
              "srv_us_per_echo", "client_cpu_s", "client_us_per_echo", "open", "rss_before_kib", "rss_after_kib",
              "bytes_per_conn", "echo_checked", "echo_ok", "errors", "threads", "machine_busy_pct", "steal_pct",
              "note"]
    with open(os.path.join(run_dir, "ws.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    versions = {}
    for name, peer in prepared.items():
        try:
            versions[name] = peer.version()
        except Exception as e:
            versions[name] = f"(version unknown: {e})"
    md = summary(rows, [n for n in names if n in prepared], scenario_names, reps, duration_s, client_cpu,
                 versions, skipped)
    with open(os.path.join(run_dir, "ws.md"), "w") as f:
        f.write(md + "\n")
    return md, versions, skipped


def _ok(row):
    return not row.get("note") or not (row["note"].startswith(("did not", "wrong", "wsload exited")))


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _ratio_median(rows, scenario, name, ref, key):
    """The median over repetitions of name's key / ref's key in the same repetition."""
    by = {}
    for r in rows:
        if r["scenario"] == scenario and _ok(r) and r.get(key) not in (None, ""):
            by[(r["server"], r["rep"])] = r[key]
    ratios = [by[(name, rep)] / by[(ref, rep)] for (n, rep) in by
              if n == name and (ref, rep) in by and by[(ref, rep)]]
    return _median(ratios)


def _fmt(v, spec):
    return "–" if v is None else format(v, spec)


def summary(rows, names, scenario_names, reps, duration_s, client_cpu, versions, skipped):
    out = [f"## WebSocket echo (issue 31): server CPU µs per echoed message",
           "",
           f"Medians of {reps} repetitions; wsload (bench/ws/wsload.c) with {CONNS} WebSockets, "
           f"{WARMUP_S:g} s warm-up, {duration_s:g} s measured; servers on CPU {servers.SERVER_CPU}, wsload on "
           f"CPU {client_cpu}. `× ws-limit` and `× uWS` are medians of the ratios within each repetition. "
           "`busy` is the whole machine's CPU over the client's run, in % of one CPU (200 % = both CPUs full); "
           "whatever exceeds the server's and the client's own CPU there is other processes' (or stolen).",
           ""]
    for sc in scenario_names:
        sc_rows = [r for r in rows if r["scenario"] == sc]
        out += [f"### {sc}: {DESCRIPTIONS[sc]}", ""]
        if SCENARIOS[sc] is None:
            out += ["| server | bytes per WebSocket | RSS before → after (KiB) | echo check | note |",
                    "|---|---:|---|---|---|"]
            for n in names:
                rs = [r for r in sc_rows if r["server"] == n]
                good = [r for r in rs if _ok(r)]
                b = _median([r.get("bytes_per_conn") for r in good])
                before = _median([r.get("rss_before_kib") for r in good])
                after = _median([r.get("rss_after_kib") for r in good])
                check = ", ".join(f"{int(r.get('echo_ok', 0))}/{int(r.get('echo_checked', 0))}" for r in good)
                notes = "; ".join(sorted({r["note"][:120] for r in rs if r.get("note")}))
                out.append(f"| {n} | {_fmt(b, ',.0f')} | {_fmt(before, ',.0f')} → {_fmt(after, ',.0f')} | "
                           f"{check} | {notes} |")
            out.append("")
            continue
        out += ["| server | msg/s | CPU µs/msg | × ws-limit | × uWS | client µs/msg | busy % | threads | note |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for n in names:
            rs = [r for r in sc_rows if r["server"] == n]
            good = [r for r in rs if _ok(r)]
            notes = "; ".join(sorted({r["note"][:120] for r in rs if r.get("note")}))
            out.append(
                f"| {n} | {_fmt(_median([r.get('echoes_per_s') for r in good]), ',.0f')} "
                f"| {_fmt(_median([r.get('srv_us_per_echo') for r in good]), '.2f')} "
                f"| {_fmt(_ratio_median(rows, sc, n, 'ws-limit', 'srv_us_per_echo'), '.2f')} "
                f"| {_fmt(_ratio_median(rows, sc, n, 'uwebsockets', 'srv_us_per_echo'), '.2f')} "
                f"| {_fmt(_median([r.get('client_us_per_echo') for r in good]), '.2f')} "
                f"| {_fmt(_median([r.get('machine_busy_pct') for r in good]), '.0f')} "
                f"| {_fmt(_median([r.get('threads') for r in good]), '.0f')} | {notes} |")
        out.append("")
    # targets
    out += ["### Targets (issue 31): Peregrine's CPU µs per echoed message as a ratio in the same repetition "
            "(median of the repetitions' ratios)", "",
            "`ws-limit's` is the floor's own ratio to the same reference: what a server that does no more "
            "than reframe and unmask reaches; a target below it asks for less than the kernel's share.", "",
            "| scenario | reference | target | measured | met | ws-limit's |", "|---|---|---:|---:|---|---:|"]
    limits = {"uwebsockets": 1.0, "ws-limit": 1.1}
    for sc in scenario_names:
        if SCENARIOS[sc] is None:
            rs = [r for r in rows if r["scenario"] == sc and r["server"] == "peregrine" and _ok(r)]
            b = _median([r.get("bytes_per_conn") for r in rs])
            floor = _median([r.get("bytes_per_conn") for r in rows
                             if r["scenario"] == sc and r["server"] == "ws-limit" and _ok(r)])
            out.append(f"| {sc} | bytes per idle WebSocket | ≤ 1,024 | {_fmt(b, ',.0f')} | "
                       f"{'–' if b is None else ('yes' if b <= 1024 else 'no')} | {_fmt(floor, ',.0f')} B |")
            continue
        for ref in names:
            if ref == "peregrine":
                continue
            target = limits.get(ref, 0.5)
            ratio = _ratio_median(rows, sc, "peregrine", ref, "srv_us_per_echo")
            met = "–" if ratio is None else ("yes" if ratio <= target else "no")
            floor = None if ref == "ws-limit" else _ratio_median(rows, sc, "ws-limit", ref, "srv_us_per_echo")
            out.append(f"| {sc} | {ref} | ≤ {target:g} × | {_fmt(ratio, '.2f')} × | {met} | "
                       f"{_fmt(floor, '.2f')}{'' if floor is None else ' ×'} |")
    out += ["", "Versions:", ""]
    out += [f"- {n}: {v}" for n, v in versions.items()]
    out += [f"- wsload: bench/ws/wsload.c, gcc -O2 ({subprocess.run(['gcc', '--version'], capture_output=True, text=True).stdout.splitlines()[0]})"]
    if skipped:
        out += ["", "Skipped:", ""] + [f"- {n}: {why}" for n, why in skipped.items()]
    return "\n".join(out)


def update_benchmarks_md(path, run_rel, command, date, md):
    """Rewrites the WebSocket section between its markers (appended if absent)."""
    section = "\n".join([BEGIN,
                         "<!-- Written by bench/run's ws scenarios from one run; edits inside the markers are "
                         "overwritten. -->", "",
                         f"Run: [`{run_rel}/`]({run_rel}/), {date}, with `{command}`; raw rows in "
                         f"[ws.csv]({run_rel}/ws.csv).", "",
                         md.replace("## WebSocket echo", "### WebSocket echo", 1).replace("\n### ", "\n#### "),
                         END])
    with open(path) as f:
        text = f.read()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n## WebSocket\n\n" + section + "\n"
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def resummarize(run_dir):
    """Rewrites run_dir/ws.md from its ws.csv and meta.txt (the versions),
    with this file's summary: `python3 bench/lib/ws.py --summarize RUN_DIR`."""
    rows = []
    with open(os.path.join(run_dir, "ws.csv")) as f:
        for r in csv.DictReader(f):
            row = {}
            for k, v in r.items():
                if v in ("", None):
                    continue
                try:
                    row[k] = v if k in ("server", "scenario", "note") else float(v)
                except ValueError:
                    row[k] = v
            row["rep"] = int(row["rep"])
            rows.append(row)
    versions, in_ws, reps, duration, client_cpu = {}, False, 1, 5.0, "?"
    with open(os.path.join(run_dir, "meta.txt")) as f:
        for line in f:
            if line.startswith("WebSocket scenarios:"):
                in_ws = True
            elif in_ws and line.startswith("  ") and ": " in line:
                n, v = line.strip().split(": ", 1)
                versions[n] = v
            m = re.match(r"runs: (\d+) x ([\d.]+) s", line)
            if m:
                reps, duration = int(m.group(1)), float(m.group(2))
            m = re.search(r"the idle client taskset -c (\d+)", line)
            if m:
                client_cpu = m.group(1)
    names = [n for n in ORDER if any(r["server"] == n for r in rows)]
    scenario_names = [sc for sc in SCENARIOS if any(r["scenario"] == sc for r in rows)]
    md = summary(rows, names, scenario_names, reps, duration, client_cpu, versions, {})
    with open(os.path.join(run_dir, "ws.md"), "w") as f:
        f.write(md + "\n")
    return md


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--summarize":
        print(resummarize(sys.argv[2]))
    else:
        sys.exit("usage: ws.py --summarize RUN_DIR")
