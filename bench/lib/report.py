"""What a run leaves behind: results.csv, summary.csv, summary.md, meta.txt,
and the section of BENCHMARKS.md between the bench markers.

Raw rows go to results.csv as they are measured, so an interrupted run keeps
what it had. Every summary figure is the median over the repetitions of one
server at one load point; ratios compare with `limit` (and, for the file
scenarios, with `nginx`) at the same point, in the same run. load100k rows
carry start-up times and RSS instead of wrk's figures.
"""
import csv
import os
import re
import statistics

import h3
import load
import servers

RESULT_FIELDS = [
    "server", "scenario", "point", "conns", "depth", "rep",
    "duration_s", "requests", "req_per_s",
    "p50_us", "p90_us", "p99_us", "p999_us", "lat_little_us",
    "wrk_p50_us", "wrk_p99_us", "lat_mean_wrk_us", "lat_max_us",
    "err_connect", "err_read", "err_write", "err_timeout", "err_status", "errors",
    "cpu_ticks", "cpu_us_per_req", "server_cpu_pct", "wrk_cpu_pct",
    "other_cpu_pct", "steal_pct", "resp_bytes", "head_bytes", "bytes", "bytes_per_s", "rss_kib",
    "idle_conns_ok", "idle_failed", "idle_closed_by_server",
    "idle_rss_before_kib", "idle_rss_after_kib", "idle_bytes_per_conn",
    "rate_asked", "p9999_us",
    "start_ms", "hello_start_ms", "load_ms", "start_cpu_ms",
    "rss_first_kib", "rss_anon_first_kib", "rss_file_first_kib",
    "rss_after_kib", "rss_anon_after_kib", "rss_file_after_kib", "paths_ok",
    "pack_s", "archive_bytes",
    "data_bytes", "cpu_us_per_mib", "h2_lat_min_us", "h2_lat_max_us", "h2_lat_mean_us", "h2_lat_sd_us",
    "request_headers", "checked", "tls", "note",
]

SUMMARY_FIGURES = ["req_per_s", "rate_asked", "p50_us", "p90_us", "p99_us", "p999_us", "p9999_us",
                   "lat_little_us", "errors", "rss_kib", "cpu_us_per_req", "server_cpu_pct", "wrk_cpu_pct", "other_cpu_pct", "steal_pct",
                   "resp_bytes", "head_bytes", "bytes_per_s", "idle_bytes_per_conn"]
LOAD_FIGURES = ["start_ms", "hello_start_ms", "load_ms", "start_cpu_ms",
                "rss_first_kib", "rss_anon_first_kib", "rss_file_first_kib",
                "rss_after_kib", "rss_anon_after_kib", "rss_file_after_kib", "paths_ok",
                "pack_s", "archive_bytes"]
SUMMARY_FIGURES += LOAD_FIGURES
# h2load's "time for request" (the HTTP/2 scenarios)
H2_FIGURES = ["h2_lat_min_us", "h2_lat_max_us", "h2_lat_mean_us", "h2_lat_sd_us", "cpu_us_per_mib"]
SUMMARY_FIGURES += H2_FIGURES
RATIOS = [("req_per_s", "limit"), ("cpu_us_per_req", "limit"),
          ("req_per_s", "nginx"), ("bytes_per_s", "nginx"), ("cpu_us_per_req", "nginx"),
          ("cpu_us_per_req", "kawipiko"),
          ("req_per_s", "h2o"), ("bytes_per_s", "h2o"), ("cpu_us_per_req", "h2o"),
          ("cpu_us_per_mib", "nginx"), ("cpu_us_per_mib", "h2o")]
SUMMARY_FIELDS = ["server", "scenario", "point", "conns", "depth", "reps"] + SUMMARY_FIGURES + \
    [f"{fig}_vs_{ref}" for fig, ref in RATIOS] + ["note"]

# The targets (issue 12): server CPU µs per request, as a ratio to a
# reference in the same run: (server, point, figure, op, goal, label). Only
# CPU ratios are judged; req/s and latency stay in the tables as context,
# since a req/s ratio often says how fast the one client was. "limit hello":
# limit answers every request of the file scenarios with its canned hello.
TARGETS = [
    ("peregrine", "c50", "cpu_us_per_req_vs_limit", "<=", 1.05, "hello c50 vs limit"),
    ("peregrine", "pipe16", "cpu_us_per_req_vs_limit", "<=", 1.3, "hello pipelined ×16 vs limit"),
    ("peregrine-archive", "f17", "cpu_us_per_req_vs_limit", "<=", 1.05, "archive 17 B c50 vs limit hello"),
    ("peregrine-archive", "fpipe16", "cpu_us_per_req_vs_limit", "<=", 1.5,
     "archive pipelined ×16 vs limit's pipelined hello"),
    ("peregrine", "f17", "cpu_us_per_req_vs_nginx", "<=", 0.45, "serve DIR 17 B vs nginx"),
    ("peregrine", "f4k", "cpu_us_per_req_vs_nginx", "<=", 0.45, "serve DIR 4 KiB vs nginx"),
    ("peregrine", "f64k", "cpu_us_per_req_vs_nginx", "<=", 0.65, "serve DIR 64 KiB vs nginx"),
    ("peregrine-archive", "f64k", "cpu_us_per_req_vs_nginx", "<=", 0.65, "archive 64 KiB vs nginx"),
    ("peregrine-archive", "f17", "cpu_us_per_req_vs_kawipiko", "<=", 0.4, "archive 17 B vs kawipiko"),
    ("peregrine-archive", "f17-c512", "cpu_us_per_req_vs_limit", "<=", 1.1,
     "archive 17 B, 512 connections, vs limit hello"),
]
# The engine's memory target (not a CPU ratio; bytes are absolute).
MEMORY_TARGETS = [
    ("peregrine", "idle10k", "idle_bytes_per_conn", "<=", 600, "idle10k bytes per connection"),
]
# HTTP/2 (issue 10), over TLS (h2-*) and h2c (h2c-*) alike: server CPU µs
# per request against nginx's and h2o's, and the 1 MiB file's bytes/s
# against nginx's (higher is better there).
H2_TARGETS = [
    t for mode in ("h2", "h2c") for t in (
        ("peregrine", f"{mode}-c50", "cpu_us_per_req_vs_nginx", "<=", 0.5, f"{mode}-c50 CPU µs/req vs nginx"),
        ("peregrine", f"{mode}-c50", "cpu_us_per_req_vs_h2o", "<=", 0.8, f"{mode}-c50 CPU µs/req vs h2o"),
        ("peregrine", f"{mode}-f4k", "cpu_us_per_req_vs_nginx", "<=", 0.5, f"{mode}-f4k CPU µs/req vs nginx"),
        ("peregrine", f"{mode}-f4k", "cpu_us_per_req_vs_h2o", "<=", 0.8, f"{mode}-f4k CPU µs/req vs h2o"),
        ("peregrine", f"{mode}-f1m", "bytes_per_s_vs_nginx", ">=", 1.0, f"{mode}-f1m bytes/s vs nginx"),
    )]
# Measured, without a goal: CPU ratios of the other scenarios.
MEASURED = [
    ("peregrine", "tls-c50", "cpu_us_per_req_vs_nginx", "TLS hello c50 vs nginx"),
    ("peregrine", "tls-f17", "cpu_us_per_req_vs_nginx", "TLS 17 B vs nginx"),
    ("peregrine-archive", "tls-f17", "cpu_us_per_req_vs_nginx", "archive, TLS 17 B vs nginx"),
    ("peregrine", "c512", "cpu_us_per_req_vs_limit", "hello, 512 connections, vs limit"),
    ("peregrine", "c4096", "cpu_us_per_req_vs_limit", "hello, 4,096 connections, vs limit"),
    ("peregrine-archive", "f17-c4096", "cpu_us_per_req_vs_limit", "archive 17 B, 4,096 connections, vs limit hello"),
    ("peregrine", "real10k", "cpu_us_per_req_vs_nginx", "serve DIR, real10k, vs nginx"),
    ("peregrine-archive", "real10k", "cpu_us_per_req_vs_nginx", "archive, real10k, vs nginx"),
]


class ResultsWriter:
    def __init__(self, path):
        self.path = path
        self.rows = []
        with open(path, "w", newline="") as f:
            csv.DictWriter(f, RESULT_FIELDS).writeheader()

    def add(self, row):
        self.rows.append(row)
        with open(self.path, "a", newline="") as f:
            csv.DictWriter(f, RESULT_FIELDS, extrasaction="ignore").writerow(row)


def _num(v):
    if v is None or v == "":
        return None
    return float(v)


def summarize(rows):
    """One summary row per (server, point), in table order."""
    groups = {}
    for r in rows:
        groups.setdefault((r["server"], r["point"]), []).append(r)
    out = {}
    for (server, point), rs in groups.items():
        s = {"server": server, "scenario": rs[0]["scenario"], "point": point,
             "conns": rs[0].get("conns", ""), "depth": rs[0].get("depth", ""),
             "reps": sum(1 for r in rs if _num(r.get("req_per_s")) is not None
                         or _num(r.get("idle_bytes_per_conn")) is not None
                         or _num(r.get("start_ms")) is not None)}
        for fig in SUMMARY_FIGURES:
            vals = [_num(r.get(fig)) for r in rs]
            vals = [v for v in vals if v is not None]
            s[fig] = statistics.median(vals) if vals else None
        notes = sorted({r["note"] for r in rs if r.get("note")})
        s["note"] = "; ".join(notes)
        out[(server, point)] = s
    for (server, point), s in out.items():
        for fig, ref_name in RATIOS:
            ref = out.get((ref_name, point))
            key = f"{fig}_vs_{ref_name}"
            s[key] = None
            if ref and ref[fig] and s[fig] is not None:
                s[key] = s[fig] / ref[fig]
    order = {name: i for i, name in enumerate(servers.ORDER)}
    point_order = {p.label: i for i, p in enumerate(p for ps in load.SCENARIOS.values() for p in ps)}
    return sorted(out.values(), key=lambda s: (point_order.get(s["point"], 99), order.get(s["server"], 99)))


def write_summary_csv(path, summary):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, SUMMARY_FIELDS)
        w.writeheader()
        for s in summary:
            w.writerow({k: ("" if s.get(k) is None else
                            round(s[k], 4) if isinstance(s.get(k), float) else s[k])
                        for k in SUMMARY_FIELDS})


def fmt_int(v):
    return "–" if v is None else f"{v:,.0f}"


def fmt_ratio(v):
    return "–" if v is None else f"{v:.2f}×"


def fmt_us(v):
    if v is None:
        return "–"
    if v < 1000:
        return f"{v:.0f} µs"
    if v < 1_000_000:
        return f"{v / 1000:.2f} ms"
    return f"{v / 1e6:.2f} s"


def fmt_cpu(v):
    return "–" if v is None else f"{v:.2f}"


def fmt_mib(v):
    """bytes/s as MiB/s (wrk's Transfer/sec uses binary units too)."""
    if v is None:
        return "–"
    v /= 1 << 20
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def _busy(s):
    return "–" if s["server_cpu_pct"] is None else \
        f"{s['server_cpu_pct']:.0f} / {s['wrk_cpu_pct']:.0f} / {s['other_cpu_pct']:.0f}"


def _row_cells(s, pipelined):
    lat = [fmt_us(s["lat_little_us"])] if pipelined else [fmt_us(s["p50_us"]), fmt_us(s["p99_us"])]
    busy = _busy(s)
    return [fmt_int(s["req_per_s"]), fmt_ratio(s["req_per_s_vs_limit"]), *lat,
            fmt_int(s["errors"]), fmt_cpu(s["cpu_us_per_req"]), fmt_ratio(s["cpu_us_per_req_vs_limit"]), busy]


def _table(header, rows):
    align = [":---" if h in ("server", "note", "target", "negotiated", "") else "---:" for h in header]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def summary_markdown(summary, ctx):
    """ctx: stamp, command, quick, reps, duration_s, warmup_s, cpu_model, skipped, scenarios."""
    md = [f"# Peer benchmark run {ctx['stamp']}", ""]
    if ctx["quick"]:
        md += [f"**Quick run** ({ctx['reps']} repetition(s) of {ctx['duration_s']:g} s): a check that the "
               "runner works, not evidence. Do not quote these numbers.", ""]
    md += [
        f"- Command: `{ctx['command']}`",
        f"- Machine: {ctx['cpu_model']}, {ctx['n_cpus']} CPUs; every server pinned to CPU {ctx['server_cpu']}, "
        f"wrk (`-t 1`), oha and the idle client to CPU {ctx['client_cpu']}. Versions in `meta.txt`.",
        f"- Layout: {ctx['layout_line']}.",
        f"- Each figure is the median of {ctx['reps']} run(s) of {ctx['duration_s']:g} s after a "
        f"{ctx['warmup_s']:g} s warm-up; a fresh server per scenario (per repetition for idle10k and load100k, which run no wrk).",
        "- `× limit` compares with the `limit` server (bench/limit/limit.c, which parses nothing) "
        "at the same load point of this run. req/s: higher is better; CPU µs/req: lower is better.",
        "- CPU µs/req: the server's user+system CPU time over the run divided by the requests "
        "wrk completed (h2load in the HTTP/2 scenarios, where it stands for wrk in what follows). CPU % srv / wrk / other: how busy the server and wrk were, and "
        "how much CPU went to neither (other processes, the kernel, and time the hypervisor stole); wrk near 100 % with the server "
        "below it means the client set that row's req/s, and only CPU µs/req compares the servers "
        "there; other above a few % means the row was disturbed. Latencies are wrk's (see bench/README.md).",
    ]
    if any(sc in load.FILE_SCENARIOS for sc in ctx["scenarios"]):
        md += [
            "- File scenarios (f17 ... frange, fpipe16): every file server serves the same generated "
            "directory (meta.txt lists its files), peregrine-archive the same directory packed "
            "once by `peregrine pack` and served with `peregrine serve FILE.prg`; "
            "each answer was checked before the run "
            "(status, body, Content-Range; the 304 scenario sends each server its own ETag). "
            "`× nginx` compares with nginx at the same point; `× limit` with limit's canned "
            "13-byte hello, which it sends to every request (only where answers are small). "
            "MiB/s is wrk's Transfer/sec: every byte it read, heads and bodies, over the run. "
            "head B: the size of the server's status line and header fields in the checked answer "
            "(bodies are the same for all).",
        ]
    if any(sc in load.H2_SCENARIOS for sc in ctx["scenarios"]):
        md += [
            "- HTTP/2 scenarios (h2-* over TLS with ALPN h2, h2c-* cleartext with prior knowledge): "
            "h2load (`-t 1 -c 50 -m 32 -D SECONDS`, pinned like wrk; over TLS it offers TLS 1.3 with "
            "the one cipher suite nginx is pinned to) instead of wrk, on every file server's h2 mode, "
            "the run's file tree. Each server's answer was checked over h2 first (curl: 200 over "
            "HTTP/2 with the file's exact bytes; h2load with two streams on one connection: the "
            "protocol, two 2xx, the DATA bytes). Each run's status codes, errors, negotiated "
            "protocol and DATA bytes per answer are checked again (a row with a note failed one). "
            "Latencies are h2load's: \"time for request\" min / mean / sd / max, and percentiles of "
            "its per-request log; a closed loop with 1,600 requests outstanding, so they include "
            "queueing and no coordinated-omission correction. MiB/s: every byte h2load read (frames, "
            "HPACK heads, DATA) over the run.",
        ]
    if any(sc in load.H3_SCENARIOS for sc in ctx["scenarios"]):
        md += h3.describe(ctx["quick"])
    if any(sc in load.TLS_SCENARIOS for sc in ctx["scenarios"]):
        md += [
            "- TLS scenarios (tls-c50, tls-f17): c50 and f17 over TLS, wrk's OpenSSL client, every "
            "server with the run's throwaway ECDSA P-256 certificate; keep-alive, so each of the 50 "
            "connections pays its handshake once and the figures are the cost of the records. "
            "What each server negotiated with wrk's offer (`openssl s_client`, same library and "
            "defaults) is in its table and in meta.txt; answers were checked over TLS with the "
            "certificate verified. limit has no TLS and sits them out; `× nginx` compares with "
            "nginx at the same point.",
        ]
    md += _interference(ctx["rows"]) + _response_sizes(summary) + [""]
    by_point = {}
    for s in summary:
        by_point.setdefault(s["point"], []).append(s)

    targets = _targets(by_point, TARGETS) + _targets(by_point, MEMORY_TARGETS)
    measured = _measured(by_point, MEASURED) + _load_target_rows(by_point)
    if targets or measured:
        md += ["## Targets: server CPU µs per request (issue 12)", ""]
        md += _table(["target", "measured", "goal", ""], targets + measured)
        md += ["", "Each ratio divides the server's CPU µs per request (user + system of its "
               "processes over the requests answered) by the reference's at the same load point "
               "of this run; lower is better. Only these ratios are judged: req/s and latency "
               "depend on the client and the layout, and stay in the tables below as context. "
               "idle10k is memory, judged in bytes.", ""]
    if any(sc in load.TLS_SCENARIOS for sc in ctx["scenarios"]):
        md += _tls_agreement(ctx.get("tls_seen") or {}) + [""]
    h2_targets = _targets(by_point, H2_TARGETS)
    if h2_targets:
        md += ["## HTTP/2 targets (issue 10)", ""]
        md += _table(["target", "measured", "goal", ""], h2_targets)
        md += ["", "CPU ratios: the server's CPU µs per request over nginx's or h2o's at the same "
               "point of this run, lower is better; bytes/s: every byte h2load read per second "
               "over nginx's, higher is better. h2-*: over TLS (ALPN h2); h2c-*: cleartext with "
               "prior knowledge.", ""]

    for scenario in ctx["scenarios"]:
        points = [p for p in load.SCENARIOS[scenario] if p.label in by_point]
        if not points:
            continue
        md += [f"## {scenario}: {load.DESCRIPTIONS[scenario]}", ""]
        if scenario in load.TLS_SCENARIOS:
            md += _tls_table(points, by_point, ctx.get("tls_seen") or {}) + [""]
            continue
        if scenario in load.H2_SCENARIOS:
            md += _h2_table(points, by_point, ctx.get("tls_seen") or {}) + [""]
            continue
        if scenario in load.H3_SCENARIOS:
            md += h3.table(points, by_point, fmt_ratio) + [""]
            continue
        if scenario in load.FILE_SCENARIOS:
            md += _files_table(points, by_point) + [""]
            continue
        if scenario == "load100k":
            md += _load_table(by_point["load100k"], ctx.get("many_notes", [])) + [""]
            continue
        if scenario == "real10k":
            md += _real_table(by_point["real10k"], ctx.get("real_line")) + [""]
            continue
        if scenario in load.RATE_SCENARIOS:
            md += _rate_table(points, by_point, ctx.get("rate_line")) + [""]
            continue
        if scenario == "idle10k":
            rows = []
            for s in by_point["idle10k"]:
                rows.append([s["server"], fmt_int(s["errors"]),
                             "–" if s["idle_bytes_per_conn"] is None else f"{s['idle_bytes_per_conn']:,.0f}",
                             s["note"] or ""])
            md += _table(["server", "errors", "bytes/conn", "note"], rows)
            md += ["", "bytes/conn: growth of the server's resident memory (VmRSS, whole process "
                   "tree) from before the 10,000 connections were opened to after all were "
                   "answered and left idle, divided by the connections still open.", ""]
            continue
        pipelined = points[0].depth > 1
        lat_head = ["mean RTT"] if pipelined else ["p50", "p99"]
        head = ["server"] + (["conns"] if scenario == "sweep" else []) + \
            ["req/s", "× limit", *lat_head, "errors", "CPU µs/req", "× limit", "CPU % srv / wrk / other"]
        rows = []
        for p in points:
            for s in by_point[p.label]:
                rows.append([s["server"]] + ([str(p.conns)] if scenario == "sweep" else []) + _row_cells(s, pipelined))
        md += _table(head, rows)
        notes = [f"{s['server']} at {s['point']}: {s['note']}" for p in points for s in by_point[p.label] if s["note"]]
        if pipelined:
            md += ["", "wrk gives no valid latency percentiles with pipelining (bench/wrk/report.lua "
                   "says why); mean RTT is the mean time from a write of the batch to its last "
                   "answer, by Little's law: connections × depth / (req/s)."]
        if notes:
            md += [""] + [f"- {n}" for n in notes]
        md += [""]

    if ctx["skipped"]:
        md += ["## Skipped or failed", ""] + [f"- {name}: {why}" for name, why in ctx["skipped"].items()] + [""]
    return "\n".join(md)


def _interference(rows):
    """One line on how quiet the machine was during the measured runs."""
    other = [(_num(r.get("other_cpu_pct")), r) for r in rows if _num(r.get("other_cpu_pct")) is not None]
    steal = [_num(r.get("steal_pct")) for r in rows if _num(r.get("steal_pct")) is not None]
    if not other:
        return []
    worst, r = max(other, key=lambda x: x[0])
    return [f"- Interference: CPU used by neither the server nor wrk was at most {worst:.0f} % of one CPU "
            f"(median {statistics.median(v for v, _ in other):.0f} %; worst: {r['server']} at {r['point']} "
            f"rep {r['rep']}); hypervisor steal (part of that) at most {max(steal):.0f} %. Per-run figures in results.csv."]


def _files_table(points, by_point):
    with_limit = any(p.limit_ref for p in points)
    pipelined = points[0].depth > 1
    with_cpu_limit = pipelined  # fpipe16 compares with limit's pipelined hello
    head = ["server", "req/s", "× nginx"] + (["× limit"] if with_limit else []) + \
        ["MiB/s", "× nginx"] + (["mean RTT"] if pipelined else ["p50", "p99"]) + \
        ["errors", "CPU µs/req", "× nginx"] + (["× limit"] if with_cpu_limit else []) + \
        ["head B", "CPU % srv / wrk / other"]
    rows, notes = [], []
    for p in points:
        for s in by_point[p.label]:
            name = s["server"] + (" (hello)" if s["server"] == "limit" else "")
            rows.append([name, fmt_int(s["req_per_s"]), fmt_ratio(s["req_per_s_vs_nginx"])]
                        + ([fmt_ratio(s["req_per_s_vs_limit"])] if with_limit else [])
                        + [fmt_mib(s["bytes_per_s"]), fmt_ratio(s["bytes_per_s_vs_nginx"])]
                        + ([fmt_us(s["lat_little_us"])] if pipelined
                           else [fmt_us(s["p50_us"]), fmt_us(s["p99_us"])])
                        + [fmt_int(s["errors"]),
                           fmt_cpu(s["cpu_us_per_req"]), fmt_ratio(s["cpu_us_per_req_vs_nginx"])]
                        + ([fmt_ratio(s["cpu_us_per_req_vs_limit"])] if with_cpu_limit else [])
                        + [fmt_int(s["head_bytes"]), _busy(s)])
            if s["note"]:
                notes.append(f"{s['server']} at {s['point']}: {s['note']}")
    out = _table(head, rows) + ([""] + [f"- {n}" for n in notes] if notes else [])
    if pipelined:
        out += ["", "16 pipelined GETs of the file per write, as pipe16 (bench/wrk/pipeline.lua); "
                "limit answers its hello, so `× limit` compares with its pipe16. Mean RTT by "
                "Little's law, as in pipe16: wrk's percentiles are void with pipelining."]
    return out


def _tls_table(points, by_point, tls_seen):
    head = ["server", "req/s", "× nginx", "p50", "p99", "errors", "CPU µs/req", "× nginx",
            "head B", "negotiated", "CPU % srv / wrk / other"]
    rows, notes = [], []
    for p in points:
        for s in by_point[p.label]:
            seen = "; ".join(sorted(tls_seen.get((s["server"], p.scenario), ()))) or "–"
            rows.append([s["server"], fmt_int(s["req_per_s"]), fmt_ratio(s["req_per_s_vs_nginx"]),
                         fmt_us(s["p50_us"]), fmt_us(s["p99_us"]), fmt_int(s["errors"]),
                         fmt_cpu(s["cpu_us_per_req"]), fmt_ratio(s["cpu_us_per_req_vs_nginx"]),
                         fmt_int(s["head_bytes"]), seen, _busy(s)])
            if s["note"]:
                notes.append(f"{s['server']} at {s['point']}: {s['note']}")
    return _table(head, rows) + ([""] + [f"- {n}" for n in notes] if notes else []) + [
        "", "negotiated: protocol, cipher suite, key-exchange group and signature that the server "
            "chose for OpenSSL's default client offer (wrk's), by `openssl s_client`, in every "
            "repetition. head B: the status line and header fields of the checked answer."]


def _h2_table(points, by_point, tls_seen):
    large = points[0].path == "/1m.txt"
    head = ["server", "req/s", "× nginx", "× h2o", "MiB/s", "× nginx", "× h2o",
            "min / mean ± sd / max", "p50", "p90", "p99", "p99.9", "errors",
            "CPU µs/req", "× nginx", "× h2o"] + (["CPU µs/MiB", "× nginx", "× h2o"] if large else []) + \
        ["negotiated", "CPU % srv / h2load / other"]
    rows, notes = [], []
    for p in points:
        for s in by_point[p.label]:
            seen = "; ".join(sorted(tls_seen.get((s["server"], p.scenario), ()))) or ("h2c" if not p.tls else "–")
            lat = "–" if s["h2_lat_mean_us"] is None else (
                f"{fmt_us(s['h2_lat_min_us'])} / {fmt_us(s['h2_lat_mean_us'])} ± {fmt_us(s['h2_lat_sd_us'])}"
                f" / {fmt_us(s['h2_lat_max_us'])}")
            rows.append([s["server"], fmt_int(s["req_per_s"]), fmt_ratio(s["req_per_s_vs_nginx"]),
                         fmt_ratio(s["req_per_s_vs_h2o"]), fmt_mib(s["bytes_per_s"]),
                         fmt_ratio(s["bytes_per_s_vs_nginx"]), fmt_ratio(s["bytes_per_s_vs_h2o"]), lat,
                         fmt_us(s["p50_us"]), fmt_us(s["p90_us"]), fmt_us(s["p99_us"]), fmt_us(s["p999_us"]),
                         fmt_int(s["errors"]), fmt_cpu(s["cpu_us_per_req"]),
                         fmt_ratio(s["cpu_us_per_req_vs_nginx"]), fmt_ratio(s["cpu_us_per_req_vs_h2o"])]
                        + ([fmt_cpu(s["cpu_us_per_mib"]), fmt_ratio(s["cpu_us_per_mib_vs_nginx"]),
                            fmt_ratio(s["cpu_us_per_mib_vs_h2o"])] if large else [])
                        + [seen, _busy(s)])
            if s["note"]:
                notes.append(f"{s['server']} at {s['point']}: {s['note']}")
    return _table(head, rows) + ([""] + [f"- {n}" for n in notes] if notes else []) + [
        "", "h2load -t 1 -c 50 -m 32: 50 connections, 32 streams each. Latency: h2load's \"time for "
            "request\" (median over the repetitions of each figure) and percentiles of its per-request "
            "log. negotiated: what h2load reported (application protocol; over TLS also the version, "
            "cipher suite and key-exchange group)."] + (
        ["", "1 MiB file: with 1,600 streams outstanding, each answer takes about a second, so many "
             "are cut when h2load stops and CPU µs/req (CPU over answers completed) overstates the cost; "
             "CPU µs/MiB (CPU over every byte h2load read) does not, and MiB/s is the judged figure."]
        if large else [])


def _tls_agreement(tls_seen):
    """A line saying whether every server negotiated the same, per TLS scenario."""
    out = []
    for scenario in load.TLS_SCENARIOS:
        per = {name: seen for (name, sc), seen in tls_seen.items() if sc == scenario}
        if not per:
            continue
        all_seen = set().union(*per.values())
        if len(all_seen) == 1:
            out.append(f"- {scenario}: every server negotiated {next(iter(all_seen))}.")
        else:
            out.append(f"- **{scenario}: the servers negotiated different parameters, the comparison "
                       f"is not like for like**: " + "; ".join(
                           f"{name} {', '.join(sorted(seen))}" for name, seen in sorted(per.items())))
    return out


def _measured(by_point, measured):
    rows = []
    for server, point, fig, label in measured:
        s = next((s for s in by_point.get(point, []) if s["server"] == server), None)
        if s is not None:
            rows.append([label, "–" if s.get(fig) is None else f"{s[fig]:.3f}×", "measured",
                         "lower is better"])
    return rows


def fmt_ms(v):
    return "–" if v is None else f"{v:,.1f} ms"


def fmt_mib_kib(v):
    """KiB as MiB."""
    return "–" if v is None else f"{v / 1024:,.1f} MiB"


def _noted_table(head, summaries, cells):
    """A table of one row per summary (`cells` makes it), then each row's
    note as a bullet."""
    notes = [f"{s['server']} at {s['point']}: {s['note']}" for s in summaries if s["note"]]
    return _table(head, [cells(s) for s in summaries]) + ([""] + [f"- {n}" for n in notes] if notes else [])


def _real_table(rows_, real_line):
    head = ["server", "req/s", "× nginx", "p50", "p99", "errors", "CPU µs/req", "× nginx",
            "RSS after", "CPU % srv / wrk / other"]
    return _noted_table(head, rows_, lambda s: [
        s["server"], fmt_int(s["req_per_s"]), fmt_ratio(s["req_per_s_vs_nginx"]),
        fmt_us(s["p50_us"]), fmt_us(s["p99_us"]), fmt_int(s["errors"]),
        fmt_cpu(s["cpu_us_per_req"]), fmt_ratio(s["cpu_us_per_req_vs_nginx"]),
        fmt_mib_kib(s["rss_kib"]), _busy(s)]) + [
        "", "kawipiko's \"real\" scenario: wrk (bench/wrk/paths.lua) asks every file of the tree in "
            "turn, in a fixed shuffled order, so each request is for a different file than the last "
            "thousands: a file server's lookup and caches, not one hot entry. peregrine: `serve DIR` "
            "(its per-worker cache holds 16,384 entries, compresses only for clients that accept a coding); peregrine-archive: the tree packed once; nginx: "
            "`open_file_cache max=20000`. RSS after: VmRSS of the server's process tree at the end of "
            "the run (an archive's map counts as file pages)."] + (["", f"- tree: {real_line}"] if real_line else [])


def _rate_table(points, by_point, rate_line):
    head = ["server", "rate", "asked req/s", "answered", "p50", "p90", "p99", "p99.9", "p99.99",
            "errors", "CPU µs/req", "× limit", "CPU % srv / oha / other"]
    pct = {p.label: p.rate_pct for p in points}
    return _noted_table(head, [s for p in points for s in by_point.get(p.label, [])], lambda s: [
        s["server"], f"{pct[s['point']]} %", fmt_int(s["rate_asked"]), fmt_int(s["req_per_s"]),
        fmt_us(s["p50_us"]), fmt_us(s["p90_us"]), fmt_us(s["p99_us"]), fmt_us(s["p999_us"]),
        fmt_us(s["p9999_us"]), fmt_int(s["errors"]), fmt_cpu(s["cpu_us_per_req"]),
        fmt_ratio(s["cpu_us_per_req_vs_limit"]), _busy(s)]) + [
        "", "Haywire's latency at a fixed rate: oha sends on a schedule at the asked rate over 50 "
            "connections and, with --latency-correction, times each request from when it was due, "
            "so a stall counts for every request it delayed (no coordinated omission). The rates are "
            "fractions of limit's capacity at 50 connections in this run, as oha reached it when pacing far faster."] + \
        (["", f"- {rate_line}"] if rate_line else [])


def _load_table(rows_, notes):
    head = ["server", "start → first answer", "peregrine hello", "difference", "CPU to first answer",
            "RSS at first answer", "RSS after 1,000 paths", "anon / file", "errors", "note"]
    rows = []
    for s in rows_:
        rows.append([s["server"], fmt_ms(s["start_ms"]), fmt_ms(s["hello_start_ms"]), fmt_ms(s["load_ms"]),
                     fmt_ms(s["start_cpu_ms"]), fmt_mib_kib(s["rss_first_kib"]),
                     fmt_mib_kib(s["rss_after_kib"]),
                     "–" if s["rss_anon_after_kib"] is None else
                     f"{s['rss_anon_after_kib'] / 1024:,.1f} / {s['rss_file_after_kib'] / 1024:,.1f}",
                     fmt_int(s["errors"]), s["note"] or ""])
    out = _table(head, rows)
    out += ["", "The server is started fresh per repetition on 100,000 small files (100 to 2,000 B, "
            "three folder levels): peregrine-archive on their archive, peregrine (`serve DIR`) and "
            "nginx on the files themselves. start → first answer: from just before the process is "
            "created to the end of the first right answer to a GET of a known path, polled every "
            "0.5 ms from wrk's CPU: it includes starting the process and, for the archive, opening and "
            "checking it. peregrine hello: the same measure of `peregrine hello` in the same "
            "repetition, the cost of starting the process alone; difference: the archive's share "
            "(median of the per-repetition differences). CPU to first answer: the server's CPU "
            "time until then (10 ms ticks). RSS: VmRSS right after the first answer, and after "
            "one GET of each of 1,000 paths spread over the tree on one connection (each answer "
            "checked); anon / file splits the latter into the heap and mapped files (an archive's "
            "map is file pages: page cache, shared, droppable)."]
    if notes:
        out += [""] + [f"- {n}" for n in notes]
    return out


def _load_target_rows(by_point):
    """load100k's figures for the archive targets table (measured, no goal)."""
    rows = []
    by_server = {s["server"]: s for s in by_point.get("load100k", [])}
    a = by_server.get("peregrine-archive")
    if a is None:
        return rows
    ng = by_server.get("nginx")
    if a["start_ms"] is not None:
        rows.append(["load100k: start → first answer (100,000 files)", fmt_ms(a["start_ms"]),
                     "measured", f"peregrine hello {fmt_ms(a['hello_start_ms'])}"
                     + (f"; nginx {fmt_ms(ng['start_ms'])}" if ng and ng["start_ms"] is not None else "")])
    if a["rss_after_kib"] is not None:
        rows.append(["load100k: RSS after 1,000 paths", fmt_mib_kib(a["rss_after_kib"]), "measured",
                     f"anon {fmt_mib_kib(a['rss_anon_after_kib'])}"
                     + (f"; nginx {fmt_mib_kib(ng['rss_after_kib'])}" if ng and ng["rss_after_kib"] is not None else "")])
    if a["pack_s"] is not None:
        rows.append(["load100k: pack time, archive size", f"{a['pack_s']:,.1f} s",
                     "measured", f"{a['archive_bytes'] / 2**20:,.1f} MiB"])
    return rows


def _response_sizes(summary):
    sizes = {}
    hello = {p.label for sc, ps in load.SCENARIOS.items() for p in ps if p.kind == "hello" and not p.tls}
    for s in summary:
        if s["point"] in hello and s.get("resp_bytes") is not None:
            sizes.setdefault(s["server"], s["resp_bytes"])
    if not sizes:
        return []
    return ["- Bytes per response (status line, headers and the 13-byte body, as wrk counted them): "
            + ", ".join(f"{name} {size:.0f}" for name, size in sizes.items()) + "."]


def _targets(by_point, targets):
    rows = []
    for server, point, fig, op, goal, label in targets:
        s = next((s for s in by_point.get(point, []) if s["server"] == server), None)
        if s is None:
            continue
        v = s.get(fig)
        if v is None:
            rows.append([label, "–", f"{op.replace('>=', '≥').replace('<=', '≤')} {goal:g}", "no figure"])
            continue
        met = v >= goal if op == ">=" else v <= goal
        unit = "" if fig == "idle_bytes_per_conn" else "×"
        shown = f"{v:,.0f}" if fig == "idle_bytes_per_conn" else f"{v:.3f}"
        rows.append([label, shown + unit, f"{op.replace('>=', '≥').replace('<=', '≤')} {goal:g}{unit}",
                     "met" if met else "not met"])
    return rows


BEGIN = "<!-- bench:begin -->"
END = "<!-- bench:end -->"


def update_benchmarks_md(path, run_rel, command, date, summary_md, charts):
    """Rewrites the section between the markers, keeping all other prose."""
    # Only a pointer: the run's own summary.md holds its tables, so the page
    # a reader opens stays short (the current tables above the markers are
    # chosen by hand, each naming its run).
    section = [BEGIN,
               "<!-- Written by bench/run from one run; edits inside the markers are overwritten. -->",
               "",
               f"Last run: [`{run_rel}/`]({run_rel}/), {date}, with `{command}`.",
               f"Its tables are the run's [summary.md]({run_rel}/summary.md).",
               ""]
    for name, alt in charts:
        section += [f"![{alt}]({run_rel}/{name})", ""]
    section += [END]
    section_text = "\n".join(section)
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    else:
        text = ("# Benchmarks\n\n"
                "How to run them and what each scenario means: [bench/README.md](bench/README.md).\n\n")
    if BEGIN in text and END in text and text.index(BEGIN) < text.index(END):
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = head + section_text + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section_text + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
