"""Haywire's latency at a fixed rate (the rate and frate scenarios).

wrk keeps every connection busy: its latencies are those of a saturated
server. A server's latency at the loads it will really see is asked at a
fixed rate instead, by a client that sends on a schedule and counts each
request's latency from when it was due to be sent, not from when a late
client got round to it (coordinated omission). oha does both (`-q RATE
--latency-correction`); `cargo install oha --locked` installs it from
crates.io when it is missing (OHA=/path names one).

The rates are 25, 50 and 75 % of `limit`'s capacity at 50 connections,
measured once per run (`capacity`) by oha itself, pacing (`-q`) at a rate
far above what it reaches, so every server is asked the same rates in the
same run, and rates the client can hold. wrk's capacity is not: oha costs
about twice what wrk does per request, so where the client shares the
server's CPU, 50 % of wrk's capacity already filled the CPU and every row
measured a queue (bench/runs/2026-11-24T024034). Nor is oha's unthrottled
capacity: pacing costs oha more per request (limit: 165k req/s unthrottled,
118k paced), and at 75 % of the unthrottled figure the CPU was full again
(bench/runs/2026-11-24T031241). oha runs one worker thread, pinned like
wrk; a row where it could not hold the rate says so in its note, and then
the client, not the server, set the figures.
"""
import json
import os
import shutil
import subprocess

import load
import procs
import servers

OHA_WORKER_THREADS = "1"
HELD_MIN = 0.95  # a run that answered less of the asked rate than this is flagged


def log(msg):
    print(f"bench: {msg}", flush=True)


def oha_binary():
    found = os.environ.get("OHA") or shutil.which("oha")
    cargo_bin = os.path.expanduser("~/.cargo/bin/oha")
    if not found and os.access(cargo_bin, os.X_OK):
        found = cargo_bin
    return found


def ensure_oha():
    """The oha binary, installed with `cargo install oha --locked` if
    missing (a few minutes of building). Returns (path, None) or (None, why)."""
    found = oha_binary()
    if found:
        return found, None
    cargo = shutil.which("cargo") or os.path.expanduser("~/.cargo/bin/cargo")
    if not os.access(cargo, os.X_OK):
        return None, "no oha, and no cargo to install it"
    log("cargo install oha --locked (the fixed-rate client, from crates.io)")
    r = subprocess.run([cargo, "install", "oha", "--locked"], capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        return None, "cargo install oha --locked failed: " + (r.stderr or r.stdout).strip()[-300:]
    found = oha_binary()
    return (found, None) if found else (None, "oha is missing after cargo install")


def oha_version(binary):
    r = subprocess.run([binary, "--version"], capture_output=True, text=True)
    return r.stdout.strip()


def capacity(binary, limit, log_path, duration_s, warmup_s):
    """limit's req/s at 50 connections as oha (`binary`) reaches it when
    asked to pace far faster than it can, in the run's layout. Returns
    (req/s, None) or (None, why)."""
    running = servers.Running(limit, log_path)
    try:
        reason = running.start()
        if reason:
            return None, f"limit did not start: {reason}"
        point = load.Point("rate-capacity", "rate", 50)
        # the warm-up unthrottled; then paced at 2.5 times what it reached
        rate = None
        for seconds in (warmup_s, duration_s):
            argv = oha_argv(binary, running.port, point, rate, seconds)
            rc, out, err = procs.run_bounded(argv, seconds + load.WRK_MARGIN_S)
            try:
                fig = json.loads(out)
            except ValueError:
                return None, f"oha exited {rc} without a report: {(err or out).strip()[-300:]}"
            answered = sum((fig.get("statusCodeDistribution") or {}).values())
            total = fig["summary"]["total"]
            if not answered or not total:
                return None, "oha answered nothing when measuring limit's capacity"
            rate = 2.5 * answered / total
    finally:
        running.stop()
    return rate / 2.5, None


def oha_argv(binary, port, point, rate, duration_s, headers=()):
    """oha's command line; `rate` None: as fast as it can (no -q)."""
    argv = ["taskset", "-c", load.WRK_CPU, binary]
    if rate is not None:
        argv += ["-q", f"{rate:.0f}", "--latency-correction"]
    argv += ["-c", str(point.conns), "-z", f"{duration_s:g}s", "--no-tui", "--output-format", "json",
             "--worker-threads", OHA_WORKER_THREADS, "-t", load.WRK_TIMEOUT]
    for h in headers:
        argv += ["-H", h]
    return argv + [f"http://127.0.0.1:{port}{point.path}"]


def measure(binary, running, point, rate, duration_s, headers=()):
    """One oha run at `rate` requests/s against a running server, with the
    server's CPU time. A row like measure_wrk's, plus rate_asked and
    p9999_us; latencies are oha's, corrected for coordinated omission."""
    argv = oha_argv(binary, running.port, point, rate, duration_s, headers)
    with load.CpuWindow(running.proc.pid) as window:
        rc, out, err = procs.run_bounded(argv, duration_s + load.WRK_MARGIN_S)
    row = {"conns": point.conns, "depth": 1, "rate_asked": round(rate, 1), **window.figures}
    try:
        fig = json.loads(out)
    except ValueError:
        row["note"] = f"oha exited {rc} without a report: {(err or out).strip()[-300:]}"
        return row
    statuses = {int(k): v for k, v in (fig.get("statusCodeDistribution") or {}).items()}
    answered = sum(statuses.values())
    # oha stops at the deadline and counts the requests then in flight as
    # "aborted due to deadline": those are not errors
    failed = {k: v for k, v in (fig.get("errorDistribution") or {}).items() if "deadline" not in k}
    seconds = fig["summary"]["total"]
    pct = fig.get("latencyPercentiles") or {}

    def us(key):
        return round(pct[key] * 1e6, 1) if pct.get(key) is not None else ""

    ticks = window.cpu_after - window.cpu_before
    row.update({
        "duration_s": round(seconds, 3),
        "requests": answered,
        "req_per_s": round(answered / seconds, 1) if seconds else "",
        "errors": sum(failed.values()) + sum(v for k, v in statuses.items() if k >= 400),
        "err_status": sum(v for k, v in statuses.items() if k >= 400),
        "cpu_ticks": ticks,
        "cpu_us_per_req": round(procs.ticks_to_us(ticks) / answered, 3) if answered else "",
        "rss_kib": procs.rss_kib(running.proc.pid),
        "p50_us": us("p50"), "p90_us": us("p90"), "p99_us": us("p99"),
        "p999_us": us("p99.9"), "p9999_us": us("p99.99"),
    })
    notes = []
    if failed:
        notes.append("oha errors: " + ", ".join(f"{k} x{v}" for k, v in failed.items()))
    if answered and seconds and answered / seconds < HELD_MIN * rate:
        notes.append(f"answered {answered / seconds:,.0f} req/s of the {rate:,.0f} asked: the rate was not "
                     f"held, so the client or the server was saturated (see CPU %)")
    return load.with_notes(row, notes, running)
