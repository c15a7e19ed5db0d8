"""bench/run's reverse-proxy scenarios (issue 26): each proxy in front of
limit (bench/limit/limit.c) as its upstream, Peregrine against HAProxy,
nginx and Caddy, with relay-limit (bench/limit/relay.c: one recv and one
send each way per request, a kept-alive upstream connection per client)
as the floor in the same run.

A group of its own beside the HTTP scenarios, as the WebSocket one is: its
servers are proxies, each needing the upstream, and the issue asks for
every process on CPU 0 (the upstream, the proxy and the client), as
bench/proxy-cpu.sh does, so that the proxy's CPU is not flattered by an
upstream answering from another core.

Scenarios:
- proxy-c50: wrk -t1 -c50, GET /, limit's 13-byte "Hello, World!";
- proxy-64k: wrk -t1 -c50, answers of 65,536 bytes (limit --response);
- proxy-1m: wrk -t1 -c50, answers of 1,048,576 bytes (limit --response):
  past Peregrine's whole-answer bound (64 KiB), so its body goes through
  the proxy's channel, read by read;
- proxy-h2-c50: h2load -c50 -m1 over cleartext HTTP/2 with prior
  knowledge (h2c) to the proxy, HTTP/1.1 to limit. relay-limit is a byte
  relay and cannot translate, so this scenario has no floor of its own:
  its ratios are to proxy-c50's relay figure of the same repetition.

Per scenario, repetition and proxy: the proxy is started fresh, its answer
checked (status 200 and the exact body length, over HTTP/1.1 or h2c with
curl), then the client warms up for WARMUP_S and runs for the duration;
the proxy's CPU is utime + stime of its process tree (/proc) over the
measured run, over the requests the client counted. Repetitions go round
the proxies, each starting one later, so drift falls on all alike.

Peers:
- relay: bench/limit/relay.c (gcc -O2);
- peregrine: `serve EMPTY --proxy /=http://127.0.0.1:UP`, one worker;
- nginx: proxy_pass to an upstream block with keepalive 64,
  proxy_http_version 1.1 and Connection "" (bench/proxy-cpu.sh's config),
  one worker, no access log; h2c on a `listen ... http2` port;
- haproxy: one thread, `http-reuse always` (bench/proxy-cpu.sh's config);
  h2c on a `bind ... proto h2` port;
- caddy: `reverse_proxy 127.0.0.1:UP` with 64 idle upstream connections
  kept (`keepalive_idle_conns_per_host 64`, as nginx's keepalive 64; its
  default, 32, would close and reopen connections under 50 clients),
  GOMAXPROCS=1, admin and automatic HTTPS off, protocols h1 h2c.
"""
import csv
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

import install
import procs
import servers

BENCH = install.BENCH
REPO = servers.REPO
BUILD = os.path.join(BENCH, "build", "proxy")
WARMUP_S = 1.0
CPU = servers.SERVER_CPU
BEGIN = "<!-- bench-proxy:begin -->"
END = "<!-- bench-proxy:end -->"
ORDER = ["relay", "peregrine", "nginx", "haproxy", "caddy"]

# name -> (answer body bytes, h2)
SCENARIOS = {
    "proxy-c50": (13, False),
    "proxy-64k": (65536, False),
    "proxy-1m": (1048576, False),
    "proxy-h2-c50": (13, True),
}
DESCRIPTIONS = {
    "proxy-c50": "wrk -t1 -c50, GET / answered by limit's 13-byte hello through the proxy",
    "proxy-64k": "wrk -t1 -c50, GET / answered with 65,536 bytes (limit --response) through the proxy",
    "proxy-1m": "wrk -t1 -c50, GET / answered with 1,048,576 bytes (limit --response) through the proxy",
    "proxy-h2-c50": "h2load -c50 -m1 over h2c (prior knowledge) to the proxy, HTTP/1.1 to limit; "
                    "relay-limit cannot translate: ratios to proxy-c50's relay in the same repetition",
}


def log(msg):
    print(f"bench: {msg}", flush=True)


def peregrine_binary():
    """The release binary: $PEREGRINE_BIN, else $CARGO_TARGET_DIR's, else
    target/release/peregrine."""
    if os.environ.get("PEREGRINE_BIN"):
        return os.environ["PEREGRINE_BIN"]
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    return os.path.join(target, "release", "peregrine")


class Proxy:
    name = ""
    h2 = True
    env = None

    def prepare(self, work):
        return None

    def argv(self, port, h2_port, up, work):
        raise NotImplementedError

    def version(self):
        return ""

    def pid_to_measure(self, proc):
        return proc.pid


class Relay(Proxy):
    name = "relay"
    h2 = False

    def prepare(self, work):
        self.binary = os.path.join(BUILD, "relay")
        r = subprocess.run(["gcc", "-O2", "-o", self.binary, os.path.join(BENCH, "limit", "relay.c")],
                           capture_output=True, text=True)
        return None if r.returncode == 0 else f"gcc relay.c failed: {r.stderr.strip()[-300:]}"

    def argv(self, port, h2_port, up, work):
        return [self.binary, str(port), str(up)]

    def version(self):
        return "bench/limit/relay.c, gcc -O2"


class Peregrine(Proxy):
    name = "peregrine"
    env = {**os.environ, "PEREGRINE_ALLOW_ROOT": "1"}

    def prepare(self, work):
        self.binary = peregrine_binary()
        if not os.access(self.binary, os.X_OK):
            return f"{self.binary} is missing (cargo build --release -p peregrine-cli, or set PEREGRINE_BIN)"
        os.makedirs(os.path.join(work, "empty"), exist_ok=True)
        return None

    def argv(self, port, h2_port, up, work):
        # one listener speaks HTTP/1.1 and h2c with prior knowledge
        return [self.binary, "serve", os.path.join(work, "empty"), "--bind", f"127.0.0.1:{port}",
                "--workers", "1"] + servers.PEREGRINE_LOAD_LIMITS + ["--proxy", f"/=http://127.0.0.1:{up}"]

    def version(self):
        r = subprocess.run([self.binary, "--version"], capture_output=True, text=True)
        return " ".join(r.stdout.split()[:4])


class Nginx(Proxy):
    name = "nginx"

    def prepare(self, work):
        return None if shutil.which("nginx") else "nginx is not installed"

    def argv(self, port, h2_port, up, work):
        conf = os.path.join(work, f"nginx-{port}.conf")
        with open(conf, "w") as f:
            f.write(f"""worker_processes 1;
daemon off;
master_process off;
error_log {work}/nginx-error.log;
pid {work}/nginx-{port}.pid;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 10000000;
  upstream up {{ server 127.0.0.1:{up}; keepalive 64; keepalive_requests 10000000; }}
  server {{
    listen 127.0.0.1:{port};
    listen 127.0.0.1:{h2_port} http2;
    location / {{ proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }}
  }}
}}
""")
        return ["nginx", "-c", conf]

    def version(self):
        return subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()


class Haproxy(Proxy):
    name = "haproxy"

    def prepare(self, work):
        return None if shutil.which("haproxy") else "haproxy is not installed"

    def argv(self, port, h2_port, up, work):
        conf = os.path.join(work, f"haproxy-{port}.cfg")
        with open(conf, "w") as f:
            f.write(f"""global
  nbthread 1
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  http-reuse always
frontend f
  bind 127.0.0.1:{port}
  bind 127.0.0.1:{h2_port} proto h2
  default_backend b
backend b
  server s1 127.0.0.1:{up}
""")
        return ["haproxy", "-f", conf]

    def version(self):
        r = subprocess.run(["haproxy", "-v"], capture_output=True, text=True)
        return r.stdout.splitlines()[0] if r.stdout else ""


class Caddy(Proxy):
    name = "caddy"
    env = {**os.environ, "GOMAXPROCS": "1"}

    def prepare(self, work):
        return None if shutil.which("caddy") else "caddy is not installed"

    def argv(self, port, h2_port, up, work):
        conf = os.path.join(work, f"Caddyfile-{port}")
        with open(conf, "w") as f:
            f.write(f"""{{
  admin off
  auto_https off
  servers {{
    protocols h1 h2c
  }}
}}
http://127.0.0.1:{port} {{
  bind 127.0.0.1
  reverse_proxy 127.0.0.1:{up} {{
    transport http {{
      keepalive_idle_conns 64
      keepalive_idle_conns_per_host 64
    }}
  }}
}}
""")
        return ["caddy", "run", "--config", conf, "--adapter", "caddyfile"]

    def version(self):
        r = subprocess.run(["caddy", "version"], capture_output=True, text=True)
        return "caddy " + r.stdout.strip()


ALL = {cls.name: cls for cls in (Relay, Peregrine, Nginx, Haproxy, Caddy)}


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


def _check(port, size, h2):
    """The answer through the proxy: (status, body bytes), by curl."""
    argv = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download} %{http_version}",
            "--max-time", "5", f"http://127.0.0.1:{port}/"]
    if h2:
        argv.insert(1, "--http2-prior-knowledge")
    r = subprocess.run(argv, capture_output=True, text=True)
    try:
        status, got, version = r.stdout.split()
        return int(status), int(got), version
    except ValueError:
        return 0, 0, r.stderr.strip()[-200:]


def _client(port, h2, duration_s):
    """The client's argv, pinned to the same CPU as the proxy."""
    if h2:
        return ["taskset", "-c", CPU, "h2load", "-c", "50", "-m", "1", "-t", "1",
                "-D", f"{duration_s:g}", f"http://127.0.0.1:{port}/"]
    return ["taskset", "-c", CPU, "wrk", "-t1", "-c50", f"-d{duration_s:g}s", f"http://127.0.0.1:{port}/"]


def _parse_client(out, h2):
    """(requests answered 2xx, requests not 2xx, bytes read)."""
    if h2:
        ok = bad = 0
        got = 0
        for line in out.splitlines():
            line = line.strip()
            if line.startswith("status codes:"):
                parts = line.replace(",", "").split()
                ok = int(parts[2])
                bad = int(parts[4]) + int(parts[6]) + int(parts[8])
            if line.startswith("traffic:"):
                # traffic: 1.23MB (1289912) total, ...
                got = int(line.split("(")[1].split(")")[0])
        return ok, bad, got
    total = bad = got = 0
    for line in out.splitlines():
        line = line.strip()
        if "requests in" in line:
            total = int(line.split()[0])
            size = line.split(",")[1].split()[0]
            mult = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3}
            for unit in ("GB", "MB", "KB", "B"):
                if size.endswith(unit):
                    got = int(float(size[: -len(unit)]) * mult[unit])
                    break
        if line.startswith("Non-2xx or 3xx responses:"):
            bad = int(line.split(":")[1])
    return total - bad, bad, got


def _one(proxy, scenario, rep, duration_s, up_ports, work, log_dir):
    size, h2 = SCENARIOS[scenario]
    row = {"server": proxy.name, "scenario": scenario, "rep": rep}
    port, h2_port = servers.free_port(), servers.free_port()
    up = up_ports[size]
    argv = proxy.argv(port, h2_port, up, work)
    log_path = os.path.join(log_dir, f"proxy-{proxy.name}-{scenario}.log")
    with open(log_path, "a") as logf:
        logf.write(f"--- rep {rep}: taskset -c {CPU} {' '.join(argv)}\n")
        logf.flush()
        proc = procs.spawn(["taskset", "-c", CPU] + argv, stdout=logf, stderr=subprocess.STDOUT, env=proxy.env)
    try:
        why = _wait_port(port, proc)
        if why:
            row["note"] = f"did not start: {why}"
            return row
        # nginx speaks h2c on its own port; the others on the same one
        target = h2_port if (h2 and proxy.name in ("nginx", "haproxy")) else port
        status, got, version = _check(target, size, h2)
        row["check"] = f"{status} {got} B {version}"
        if status != 200 or got != size:
            row["note"] = f"wrong answer, not measured: {row['check']}"
            return row
        subprocess.run(_client(target, h2, WARMUP_S), capture_output=True, text=True)
        pid = proxy.pid_to_measure(proc)
        t0 = procs.cpu_ticks(pid)
        busy0, _ = procs.system_ticks()
        w0 = time.monotonic()
        r = subprocess.run(_client(target, h2, duration_s), capture_output=True, text=True)
        wall = time.monotonic() - w0
        t1 = procs.cpu_ticks(pid)
        busy1, _ = procs.system_ticks()
        ok, bad, got = _parse_client(r.stdout, h2)
        row.update({"requests": ok, "non_2xx": bad, "bytes_read": got, "seconds": round(wall, 2),
                    "req_per_s": round(ok / wall) if wall else None,
                    "cpu_s": round(procs.ticks_to_us(t1 - t0) / 1e6, 3),
                    "machine_busy_pct": round(100 * procs.ticks_to_us(busy1 - busy0) / 1e6 / wall, 1)})
        if ok:
            row["us_per_req"] = round(procs.ticks_to_us(t1 - t0) / ok, 2)
            row["bytes_per_req"] = round(got / (ok + bad))
        if r.returncode != 0 or bad:
            row["note"] = f"client exited {r.returncode}, {bad} not 2xx: {r.stderr.strip()[-200:]}"
        return row
    finally:
        procs.kill(proc)


def run(names, scenario_names, reps, duration_s, run_dir):
    """Runs the proxy scenarios; writes proxy.csv and proxy.md into run_dir.
    Returns (summary markdown, {proxy: version}, skipped)."""
    os.makedirs(BUILD, exist_ok=True)
    log_dir = os.path.join(run_dir, "logs")
    os.makedirs(log_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="peregrine-bench-proxy-")
    procs.add_cleanup(work, lambda: shutil.rmtree(work, ignore_errors=True))
    skipped = {}
    limit_bin = os.path.join(BUILD, "limit")
    r = subprocess.run(["gcc", "-O2", "-o", limit_bin, os.path.join(BENCH, "limit", "limit.c")],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return "", {}, {"proxy scenarios": f"gcc limit.c failed: {r.stderr.strip()[-300:]}"}
    # the upstreams: limit's hello, and limit answering each larger size
    # the scenarios asked for (64 KiB, 1 MiB)
    up_ports, ups = {}, []
    sizes = sorted({13} | {SCENARIOS[sc][0] for sc in scenario_names})
    for size in sizes:
        extra = []
        if size != 13:
            big = os.path.join(work, f"{size}.resp")
            with open(big, "wb") as f:
                f.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                        + f"Content-Length: {size}\r\n\r\n".encode() + b"x" * size)
            extra = ["--response", big]
        p = servers.free_port()
        proc = procs.spawn(["taskset", "-c", CPU, limit_bin, str(p)] + extra,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        why = _wait_port(p, proc)
        if why:
            return "", {}, {"proxy scenarios": f"limit did not start: {why}"}
        up_ports[size] = p
        ups.append(proc)
    prepared = {}
    for name in names:
        proxy = ALL[name]()
        why = proxy.prepare(work)
        if why:
            skipped[name] = why
            log(f"skipping {name} (proxy): {why}")
        else:
            prepared[name] = proxy
    rows = []
    order = list(prepared.values())
    try:
        for scenario in scenario_names:
            for rep in range(1, reps + 1):
                shift = (rep - 1) % max(1, len(order))
                for proxy in order[shift:] + order[:shift]:
                    if SCENARIOS[scenario][1] and not proxy.h2:
                        continue
                    row = _one(proxy, scenario, rep, duration_s, up_ports, work, log_dir)
                    rows.append(row)
                    log(f"{scenario:13} {proxy.name:10} rep {rep}: {row.get('req_per_s') or 0:>8,} req/s  "
                        f"cpu {row.get('us_per_req', '-')} µs/req  answer {row.get('check', '-')}  "
                        f"busy {row.get('machine_busy_pct', '-')} %"
                        + (f"  [{row['note']}]" if row.get("note") else ""))
    finally:
        for proc in ups:
            procs.kill(proc)
    fields = ["server", "scenario", "rep", "check", "requests", "non_2xx", "bytes_read", "bytes_per_req",
              "seconds", "req_per_s", "cpu_s", "us_per_req", "machine_busy_pct", "note"]
    with open(os.path.join(run_dir, "proxy.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    versions = {n: p.version() for n, p in prepared.items()}
    md = summary(rows, [n for n in names if n in prepared], scenario_names, reps, duration_s, versions, skipped)
    with open(os.path.join(run_dir, "proxy.md"), "w") as f:
        f.write(md + "\n")
    return md, versions, skipped


def _ok(row):
    return row.get("us_per_req") is not None and not row.get("note")


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _fmt(v, spec):
    return "–" if v is None else format(v, spec)


def _ratio(rows, scenario, name):
    """Median over repetitions of name's µs/req over relay's in the same
    repetition (proxy-c50's relay for the h2 scenario)."""
    floor_sc = "proxy-c50" if SCENARIOS[scenario][1] else scenario
    by = {(r["server"], r["scenario"], r["rep"]): r["us_per_req"] for r in rows if _ok(r)}
    ratios = [v / by[("relay", floor_sc, rep)] for (n, sc, rep), v in by.items()
              if n == name and sc == scenario and ("relay", floor_sc, rep) in by]
    return _median(ratios)


def summary(rows, names, scenario_names, reps, duration_s, versions, skipped):
    out = ["## Reverse proxy (issue 26): proxy CPU µs per request, limit as the upstream", "",
           f"Medians of {reps} repetitions, {WARMUP_S:g} s warm-up, {duration_s:g} s measured; every process "
           f"(limit, the proxy, the client) on CPU {CPU}. `× relay` is the median of the ratios to relay-limit "
           "within each repetition. `answer` is curl's status, body bytes and HTTP version through the proxy, "
           "checked before measuring; `B/req` the client's bytes read per request (head and body).", ""]
    for sc in scenario_names:
        out += [f"### {sc}: {DESCRIPTIONS[sc]}", "",
                "| proxy | req/s | CPU µs/req | × relay | answer | B/req | busy % | note |",
                "|---|---:|---:|---:|---|---:|---:|---|"]
        for n in names:
            rs = [r for r in rows if r["scenario"] == sc and r["server"] == n]
            if not rs:
                continue
            good = [r for r in rs if _ok(r)]
            notes = "; ".join(sorted({r["note"][:120] for r in rs if r.get("note")}))
            checks = ", ".join(sorted({r.get("check", "–") for r in rs}))
            out.append(f"| {n} | {_fmt(_median([r.get('req_per_s') for r in good]), ',.0f')} "
                       f"| {_fmt(_median([r.get('us_per_req') for r in good]), '.2f')} "
                       f"| {_fmt(_ratio(rows, sc, n), '.2f')} | {checks} "
                       f"| {_fmt(_median([r.get('bytes_per_req') for r in good]), ',.0f')} "
                       f"| {_fmt(_median([r.get('machine_busy_pct') for r in good]), '.0f')} | {notes} |")
        out.append("")
    out += ["Versions:", ""] + [f"- {n}: {v}" for n, v in versions.items()]
    if skipped:
        out += ["", "Skipped:", ""] + [f"- {n}: {why}" for n, why in skipped.items()]
    return "\n".join(out)


def update_benchmarks_md(path, run_rel, command, date, md):
    """Rewrites the proxy section between its markers (appended if absent)."""
    section = "\n".join([BEGIN,
                         "<!-- Written by bench/run's proxy scenarios from one run; edits inside the markers "
                         "are overwritten. -->", "",
                         f"Run: [`{run_rel}/`]({run_rel}/), {date}, with `{command}`; raw rows in "
                         f"[proxy.csv]({run_rel}/proxy.csv).", "",
                         md.replace("## Reverse proxy", "### bench/run: reverse proxy", 1)
                           .replace("\n### ", "\n#### "),
                         END])
    with open(path) as f:
        text = f.read()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
