"""The HTTP/2 scenarios' client: h2load runs, their report, and the check
that each server answers over h2 before it is measured.

h2load (nghttp2's load generator, Debian's nghttp2-client) runs one thread
pinned like wrk, `-c CONNS -m STREAMS` for `-D SECONDS`, over TLS (ALPN h2,
https URL) or over cleartext h2 with prior knowledge (h2c, http URL: h2load's
default for http). Over TLS it offers TLS 1.3 with the one cipher suite
nginx is pinned to (tls.TLS13_CIPHERSUITE, what rustls picks for wrk's
offer), so every server ends on the same suite; h2load does not verify the
certificate, the check below does.

What each run reports, parsed from h2load's output: requests done and
succeeded, failed / errored / timed out, status codes by class, traffic
(every byte read, and DATA payload alone), "time for request" (min, max,
mean, sd), and what was negotiated ("Application protocol", "Cipher",
"Server Temp Key"). Percentiles come from h2load's --log-file (one line per
request: start, status, duration in µs). h2load is a closed loop (a new
request when one ends), so these latencies include the queueing of
CONNS x STREAMS outstanding requests and no coordinated-omission
correction.

Before measuring, `check` asks the very URL with curl (--http2 verifying
the run's certificate, or --http2-prior-knowledge), which must answer 200
over HTTP/2 with the file's exact bytes, and then with `h2load -n 2 -c 1`,
which must report h2 (or h2c), two 2xx and twice the file's size in DATA:
two streams on one connection. (curl 7.88 fails a second prior-knowledge
request on a reused connection with nginx, "Error in the HTTP2 framing
layer", so curl asks once.)
"""
import os
import re
import shutil
import subprocess
import tempfile

import install
import load
import procs
import tls as tls_

H2LOAD_MARGIN_S = 60.0  # an h2load run that outlives -D by this much is killed


class WrongAnswer(Exception):
    """A server's answer over h2 is not the one the scenario measures."""


def ensure_h2load():
    """h2load (Debian: nghttp2-client) and curl; None or why they are missing."""
    if shutil.which("h2load") is None and not (install.apt_install("nghttp2-client") and shutil.which("h2load")):
        return "h2load is missing and apt-get install nghttp2-client failed"
    if shutil.which("curl") is None and not (install.apt_install("curl") and shutil.which("curl")):
        return "curl is missing and could not be installed"
    return None


def url(port, point):
    return f"{'https' if point.tls else 'http'}://127.0.0.1:{port}{point.path}"


def h2load_argv(port, point, duration_s, cpu, log_file=None, n_requests=None, conns=None, streams=None):
    argv = ["taskset", "-c", cpu, "h2load", "-t", "1",
            "-c", str(conns or point.conns), "-m", str(streams or point.depth)]
    argv += ["-n", str(n_requests)] if n_requests else ["-D", f"{duration_s:g}"]
    if point.tls:
        argv += ["--tls13-ciphers", tls_.TLS13_CIPHERSUITE]
    if log_file:
        argv += ["--log-file", log_file]
    return argv + [url(port, point)]


def _size(text):
    """h2load's bytes: it prints "137.79KB (141098)": the exact count is in ()."""
    m = re.match(r"\s*[\d.]+\w*\s*\((\d+)\)", text)
    return int(m.group(1)) if m else None


_UNITS_US = {"us": 1, "ms": 1_000, "s": 1_000_000}


def _duration_us(text):
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text.strip())
    return float(m.group(1)) * _UNITS_US[m.group(2)] if m else None


def parse(out):
    """h2load's report as a dict; raises WrongAnswer if it has none."""
    fig = {}
    m = re.search(r"^finished in ([\d.]+)(us|ms|s),", out, re.M)
    if not m:
        raise WrongAnswer(f"h2load gave no report: {out.strip()[-300:]}")
    fig["seconds"] = float(m.group(1)) * _UNITS_US[m.group(2)] / 1e6
    m = re.search(r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                  r"(\d+) errored, (\d+) timeout", out, re.M)
    if m:
        (fig["total"], fig["started"], fig["done"], fig["succeeded"], fig["failed"], fig["errored"],
         fig["timeout"]) = map(int, m.groups())
    m = re.search(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out, re.M)
    if m:
        fig["s2xx"], fig["s3xx"], fig["s4xx"], fig["s5xx"] = map(int, m.groups())
    m = re.search(r"^traffic: (.+?) total, (.+?) headers .*?, (.+?) data", out, re.M)
    if m:
        fig["bytes"], fig["header_bytes"], fig["data_bytes"] = (_size(g) for g in m.groups())
    m = re.search(r"^time for request:\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", out, re.M)
    if m:
        fig["lat_min_us"], fig["lat_max_us"], fig["lat_mean_us"], fig["lat_sd_us"] = \
            (_duration_us(g) for g in m.groups())
    for key, name in (("protocol", "Application protocol"), ("tls_version", "TLS Protocol"),
                      ("cipher", "Cipher"), ("temp_key", "Server Temp Key")):
        m = re.search(rf"^{name}: (.+)$", out, re.M)
        fig[key] = m.group(1).strip() if m else ""
    if "done" not in fig:
        raise WrongAnswer(f"h2load's report has no request counts: {out.strip()[-300:]}")
    return fig


def negotiated(fig, tls):
    """E.g. "h2 TLSv1.3 TLS_AES_256_GCM_SHA384 X25519", or "h2c"."""
    if not tls:
        return fig["protocol"]
    return " ".join(x for x in (fig["protocol"], fig["tls_version"], fig["cipher"],
                                fig["temp_key"].split(" ")[0]) if x)


def percentiles(log_file):
    """p50, p90, p99, p99.9 (µs) of the per-request durations h2load logged
    (tab-separated: start in µs since the epoch, status, duration in µs), of
    the answers with a 2xx only: h2load logs a stream reset by a closing
    connection with a duration that means nothing (15,788 s once)."""
    durations = []
    with open(log_file) as f:
        for line in f:
            parts = line.split("\t")
            if len(parts) >= 3 and parts[1].startswith("2"):
                durations.append(int(parts[2]))
    if not durations:
        return {}
    durations.sort()
    n = len(durations)

    def at(p):
        return durations[min(n - 1, int(p / 100 * n))]

    return {"p50_us": at(50), "p90_us": at(90), "p99_us": at(99), "p999_us": at(99.9)}


def run(argv, timeout_s):
    rc, out, err = procs.run_bounded(argv, timeout_s)
    if rc is None:
        raise WrongAnswer(f"h2load did not finish within {timeout_s:.0f} s")
    return out + err


def _want_protocol(point):
    return "h2" if point.tls else "h2c"


def check(port, point, body, cert, cpu):
    """curl once (exact bytes, HTTP/2, certificate verified), then h2load
    with two streams on one connection. Returns what was checked; raises
    WrongAnswer."""
    tmp = tempfile.mkdtemp(prefix="peregrine-bench-h2check-")
    try:
        out_path = os.path.join(tmp, "body")
        argv = ["curl", "-sS", "--max-time", "20", "-o", out_path,
                "-w", "%{http_code} %{http_version} %{size_download}"]
        argv += ["--http2", "--cacert", cert.cert] if point.tls else ["--http2-prior-knowledge"]
        r = subprocess.run(argv + [url(port, point)], capture_output=True, text=True, timeout=30)
        got = r.stdout.split()
        if r.returncode != 0 or len(got) != 3:
            raise WrongAnswer(f"curl {url(port, point)}: exit {r.returncode}: {r.stderr.strip()[-200:]}")
        status, version, _n = got
        if version != "2":
            raise WrongAnswer(f"curl: answered over HTTP/{version}, not HTTP/2")
        with open(out_path, "rb") as f:
            data = f.read()
        if status != "200" or data != body:
            raise WrongAnswer(f"curl: {status} with {len(data):,} body bytes, not 200 with the file's {len(body):,}")
        fig = parse(run(h2load_argv(port, point, 0, cpu, n_requests=2, conns=1, streams=2), 60))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if fig["protocol"] != _want_protocol(point):
        raise WrongAnswer(f"h2load: application protocol {fig['protocol'] or 'none'}, not {_want_protocol(point)}")
    if fig.get("s2xx") != 2 or fig.get("succeeded") != 2 or fig.get("data_bytes") != 2 * len(body):
        raise WrongAnswer(f"h2load -n 2: {fig.get('s2xx')} 2xx, {fig.get('succeeded')} succeeded, "
                          f"{fig.get('data_bytes')} DATA bytes (expected 2, 2, {2 * len(body):,})")
    return (f"curl: 200 over HTTP/2 with the file's {len(body):,} bytes; h2load -n 2 -c 1 -m 2: "
            f"{negotiated(fig, point.tls)}, 2 x 2xx, {2 * len(body):,} DATA bytes")


def ready(port, point, body, cert, timeout_s=1.0):
    """One GET over h2 with curl: None when it is 200 with body, else what
    went wrong (the readiness probe of servers.Running for h2 points: an
    nginx h2c listener speaks no HTTP/1.1)."""
    argv = ["curl", "-sS", "--max-time", f"{timeout_s:g}", "-o", "-", "-w", "\n%{http_code}"]
    argv += ["--http2", "--cacert", cert.cert] if point.tls else ["--http2-prior-knowledge"]
    r = subprocess.run(argv + [url(port, point)], capture_output=True, timeout=timeout_s + 5)
    if r.returncode != 0:
        return f"curl exit {r.returncode}: {r.stderr.decode(errors='replace').strip()[-200:]}"
    got, _, status = r.stdout.rpartition(b"\n")
    if status != b"200" or got != body:
        return f"{status.decode()} with {len(got):,} bytes"
    return None


def measure(running, point, duration_s, body_bytes, cpu):
    """A measured h2load run against a running server, with its CPU time
    (load.CpuWindow, as wrk's runs). Returns a results.csv row."""
    tmp = tempfile.mkdtemp(prefix="peregrine-bench-h2load-")
    log_file = os.path.join(tmp, "requests.log")
    pid = running.proc.pid
    row = {"conns": point.conns, "depth": point.depth}
    try:
        with load.CpuWindow(pid) as window:
            try:
                out, err = run(h2load_argv(running.port, point, duration_s, cpu, log_file),
                               duration_s + H2LOAD_MARGIN_S), None
            except WrongAnswer as e:
                out, err = "", str(e)
        row.update(window.figures)
        if err is None:
            try:
                fig = parse(out)
            except WrongAnswer as e:
                err = str(e)
        if err:
            row["note"] = err
            return row
        lat = percentiles(log_file)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    requests, seconds = fig["succeeded"], fig["seconds"]
    err_status = fig.get("s4xx", 0) + fig.get("s5xx", 0)
    errors = fig["failed"] + fig["errored"] + fig["timeout"]
    ticks = window.cpu_after - window.cpu_before
    row.update({
        "duration_s": round(seconds, 3),
        "requests": requests,
        "req_per_s": round(requests / seconds, 1) if seconds > 0 else "",
        "err_timeout": fig["timeout"], "err_status": err_status, "errors": errors,
        "cpu_ticks": ticks,
        "cpu_us_per_req": round(procs.ticks_to_us(ticks) / requests, 3) if requests else "",
        # the 1 MiB file: at 1,600 streams outstanding many answers are cut
        # at the end of the run, so CPU per byte read is the fairer figure
        "cpu_us_per_mib": round(procs.ticks_to_us(ticks) / (fig["bytes"] / 2**20), 2) if fig.get("bytes") else "",
        "rss_kib": procs.rss_kib(pid),
        # every byte h2load read (frames, HPACK heads, DATA) per answer and
        # per second; data_bytes: DATA payload alone
        "resp_bytes": round(fig["bytes"] / requests, 1) if requests and fig.get("bytes") else "",
        "bytes": fig.get("bytes"),
        "bytes_per_s": round(fig["bytes"] / seconds, 1) if seconds > 0 and fig.get("bytes") else "",
        "data_bytes": fig.get("data_bytes"),
        "h2_lat_min_us": fig.get("lat_min_us"), "h2_lat_max_us": fig.get("lat_max_us"),
        "h2_lat_mean_us": fig.get("lat_mean_us"), "h2_lat_sd_us": fig.get("lat_sd_us"),
        "tls": negotiated(fig, point.tls),
        **lat,
    })
    if requests and seconds > 0:
        row["lat_little_us"] = round(point.conns * point.depth / (requests / seconds) * 1e6, 1)
    notes = []
    if fig["protocol"] != _want_protocol(point):
        notes.append(f"application protocol {fig['protocol'] or 'none'}, not {_want_protocol(point)}")
    # h2load counts a status when the head arrives, a success when the
    # body ends: streams still in flight at the end have one, not the other
    if fig.get("s2xx", 0) < requests or fig.get("s3xx") or err_status:
        notes.append(f"status codes: {fig.get('s2xx')} 2xx, {fig.get('s3xx')} 3xx, {fig.get('s4xx')} 4xx, "
                     f"{fig.get('s5xx')} 5xx for {requests:,} succeeded")
    if errors:
        notes.append(f"{fig['failed']} failed, {fig['errored']} errored, {fig['timeout']} timed out")
    if requests and fig.get("data_bytes") is not None:
        # DATA also counts the streams still in flight when h2load stopped
        # (up to CONNS x STREAMS of them), which it does not count as done
        per = fig["data_bytes"] / requests
        in_flight = point.conns * point.depth * body_bytes / requests
        if not body_bytes <= per <= body_bytes + in_flight:
            notes.append(f"{per:,.0f} DATA bytes per answer, not the checked {body_bytes:,}-byte body: "
                         f"the answers changed during the run")
    return load.with_notes(row, notes, running)
