"""Draws a run's charts from its summary.csv; run by bench/run in bench/.venv.

chart.png: requests/s, grouped bars (one group per load point, one bar per
server), in up to three panels so that pipelined throughput does not flatten the
rest, stacked top to bottom. cpu.png: CPU µs per request, same layout. memory.png: idle10k bytes
per connection, when that scenario ran. files.png: the file scenarios, in
panels of their own figure: requests/s and CPU µs per request for the small
answers (f17, f4k, f304, frange), requests/s for the pipelined 17-byte file
(fpipe16), bytes/s for the large files (f64k, f10m). peregrine-archive
(`peregrine serve FILE.prg`) is drawn next to peregrine (`serve DIR`).
tls.png: the TLS scenarios (tls-c50, tls-f17): requests/s and CPU µs per
request, when they ran. chart.png and cpu.png also have a panel for the
stress points (c512 ... c4096, f17-c512 ... f17-c4096) and real10k.
latency.png: the rate scenarios, latency against percentile (50 to 99.99,
log scales) per server, one panel per rate and scenario. h2.png: the
HTTP/2 scenarios (h2-*, h2c-*): requests/s and CPU µs per request for the
17-byte and 4 KiB files, bytes/s for the 1 MiB file.

Usage: .venv/bin/python bench/lib/charts.py RUN_DIR
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

ORDER = ["limit", "peregrine", "peregrine-archive", "nginx", "kawipiko", "h2o", "lighttpd", "go-fasthttp",
         "go-nethttp", "node"]
COLORS = {"limit": "#7f7f7f", "peregrine": "#d62728", "peregrine-archive": "#e377c2", "nginx": "#2ca02c",
          "kawipiko": "#bcbd22", "h2o": "#9467bd",
          "lighttpd": "#8c564b", "go-fasthttp": "#17becf", "go-nethttp": "#1f77b4", "node": "#ff7f0e"}
PANELS = [
    ("keep-alive", ["c10", "c50", "c100", "c400"]),
    ("pipelined (50 conns)", ["pipe16", "pipe32"]),
    ("sweep (connections)", ["sweep-c1", "sweep-c10", "sweep-c100", "sweep-c1000"]),
    ("many connections (hello; 17-byte file) and real10k",
     ["c512", "c2048", "c4096", "f17-c512", "f17-c2048", "f17-c4096", "real10k"]),
]
RATE_PCTS = (25, 50, 75)
PERCENTILES = [("p50_us", 50), ("p90_us", 90), ("p99_us", 99), ("p999_us", 99.9), ("p9999_us", 99.99)]
SMALL_FILES = ["f17", "f4k", "f304", "frange"]
LARGE_FILES = ["f64k", "f10m"]
PIPELINED_FILES = ["fpipe16"]
TLS = ["tls-c50", "tls-f17"]
H2_SMALL = ["h2-c50", "h2c-c50", "h2-f4k", "h2c-f4k"]
H2_LARGE = ["h2-f1m", "h2c-f1m"]


def load(run_dir):
    with open(os.path.join(run_dir, "summary.csv")) as f:
        return list(csv.DictReader(f))


def value(row, fig):
    v = row.get(fig, "")
    return float(v) if v not in ("", None) else None


def human(v):
    if v >= 1e6:
        return f"{v / 1e6:g}M"
    if v >= 1e3:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def grouped(run_dir, rows, fig, ylabel, title, out_name, fmt, panels=PANELS):
    """panels: (title, points), all of figure `fig`; or (title, points, fig,
    ylabel, fmt) for a panel with a figure of its own."""
    panels = [p if len(p) == 5 else (p[0], p[1], fig, ylabel, fmt) for p in panels]
    table = {(r["server"], r["point"], f): value(r, f) for r in rows for f in {p[2] for p in panels}}
    names = [s for s in ORDER if any(k[0] == s and v is not None for k, v in table.items())]
    panels = [(t, [p for p in pts if any(table.get((s, p, f)) is not None for s in names)], f, yl, fm)
              for t, pts, f, yl, fm in panels]
    panels = [p for p in panels if p[1]]
    if not panels:
        return None
    # servers with a figure in some panel shown
    names = [s for s in names if any(table.get((s, p, f)) is not None for _, pts, f, _, _ in panels for p in pts)]
    fig_, axes = plt.subplots(len(panels), 1, figsize=(10, 3.4 * len(panels) + 1.2), squeeze=False)
    bar_w = 0.8 / max(len(names), 1)
    for ax, (panel_title, pts, f, ylabel, fmt) in zip(axes[:, 0], panels):
        scale = 2 ** 20 if f == "bytes_per_s" else 1  # bytes/s drawn in MiB/s
        for i, s in enumerate(names):
            xs = [j + (i - (len(names) - 1) / 2) * bar_w for j in range(len(pts))]
            ys = [(table.get((s, p, f)) or 0) / scale for p in pts]
            bars = ax.bar(xs, ys, bar_w, label=s, color=COLORS.get(s))
            for b, y in zip(bars, ys):
                if y:
                    ax.annotate(fmt(y), (b.get_x() + b.get_width() / 2, y), ha="center", va="bottom",
                                fontsize=7, rotation=90, xytext=(0, 2), textcoords="offset points")
        ax.set_xticks(range(len(pts)))
        ax.set_xticklabels([p.replace("sweep-", "") for p in pts])
        ax.set_title(panel_title, fontsize=10)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.margins(y=0.18)
        ax.grid(axis="y", alpha=0.3)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: human(v)))
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig_.suptitle(title, fontsize=11)
    bottom = 0.6 / fig_.get_figheight()  # room for the legend, in figure fraction
    fig_.tight_layout(rect=(0, bottom, 1, 1))
    fig_.legend(handles, labels, loc="lower center", ncol=len(names), frameon=False,
                bbox_to_anchor=(0.5, 0.0))
    path = os.path.join(run_dir, out_name)
    fig_.savefig(path, dpi=130)
    plt.close(fig_)
    return path


def memory(run_dir, rows, stamp):
    data = [(r["server"], value(r, "idle_bytes_per_conn")) for r in rows if r["point"] == "idle10k"]
    data = [(s, v) for s, v in sorted(data, key=lambda d: ORDER.index(d[0]) if d[0] in ORDER else 99)
            if v is not None]
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    bars = ax.bar([s for s, _ in data], [v for _, v in data], color=[COLORS.get(s) for s, _ in data])
    for b, (_, v) in zip(bars, data):
        ax.annotate(f"{v:,.0f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("bytes of RSS per idle connection")
    ax.set_title(f"idle10k: memory per idle keep-alive connection\n{stamp}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.margins(y=0.15)
    fig.tight_layout()
    path = os.path.join(run_dir, "memory.png")
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def latency(run_dir, rows, stamp):
    """The rate scenarios: one panel per scenario and rate, latency (log)
    against percentile, spaced as 1 / (1 - p) (log), a line per server."""
    panels = [(sc, pct) for sc in ("rate", "frate") for pct in RATE_PCTS
              if any(r["point"] == f"{sc}{pct}" for r in rows)]
    if not panels:
        return None
    n_rows = len({sc for sc, _ in panels})
    fig, axes = plt.subplots(n_rows, len(RATE_PCTS), figsize=(4.2 * len(RATE_PCTS), 3.6 * n_rows + 1.0),
                             squeeze=False)
    scenarios = sorted({sc for sc, _ in panels}, key=["rate", "frate"].index)
    xs = [1 / (1 - p / 100) for _, p in PERCENTILES]
    for i, sc in enumerate(scenarios):
        for j, pct in enumerate(RATE_PCTS):
            ax = axes[i][j]
            here = [r for r in rows if r["point"] == f"{sc}{pct}"]
            here.sort(key=lambda r: ORDER.index(r["server"]) if r["server"] in ORDER else 99)
            for r in here:
                ys = [value(r, f) for f, _ in PERCENTILES]
                pts = [(x, y / 1000) for x, y in zip(xs, ys) if y]
                if pts:
                    ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", markersize=3,
                            label=r["server"], color=COLORS.get(r["server"]))
            asked = next((value(r, "rate_asked") for r in here if value(r, "rate_asked")), None)
            what = "GET /" if sc == "rate" else "17-byte file"
            ax.set_title(f"{what} at {pct} % of limit" + (f" ({asked / 1000:,.0f}k req/s)" if asked else ""),
                         fontsize=9)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xticks(xs)
            ax.set_xticklabels([f"{p:g}" for _, p in PERCENTILES], fontsize=8)
            ax.set_xlabel("percentile", fontsize=8)
            ax.set_ylabel("latency, ms", fontsize=8)
            plain = FuncFormatter(lambda v, _: f"{v:g}")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
            ax.tick_params(axis="y", which="both", labelsize=7)
            ax.grid(alpha=0.3, which="both")
    handles = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.suptitle(f"Latency at a fixed rate, 50 connections (oha, corrected for coordinated omission; "
                 f"lower is better)\n{stamp}", fontsize=10)
    bottom = 0.5 / fig.get_figheight()
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.legend(list(handles.values()), list(handles.keys()), loc="lower center", ncol=len(handles),
               frameon=False, bbox_to_anchor=(0.5, 0.0))
    path = os.path.join(run_dir, "latency.png")
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def main():
    run_dir = sys.argv[1]
    stamp = os.path.basename(os.path.normpath(run_dir))
    rows = load(run_dir)
    made = [
        grouped(run_dir, rows, "req_per_s", "requests per second",
                f"Requests per second, one worker pinned to one CPU (higher is better)\n{stamp}",
                "chart.png", lambda v: f"{v / 1000:.0f}k"),
        grouped(run_dir, rows, "cpu_us_per_req", "server CPU µs per request",
                f"Server CPU time per request (lower is better)\n{stamp}",
                "cpu.png", lambda v: f"{v:.1f}"),
        memory(run_dir, rows, stamp),
        grouped(run_dir, rows, None, None,
                f"Static files, one worker pinned to one CPU; limit: its 13-byte hello\n{stamp}",
                "files.png", None, panels=[
                    ("small answers: requests per second (higher is better)", SMALL_FILES,
                     "req_per_s", "requests per second", lambda v: f"{v / 1000:.0f}k"),
                    ("small answers: server CPU µs per request (lower is better)", SMALL_FILES,
                     "cpu_us_per_req", "server CPU µs per request", lambda v: f"{v:.1f}"),
                    ("17-byte file, 16 pipelined GETs per write: requests per second (higher is better)",
                     PIPELINED_FILES, "req_per_s", "requests per second", lambda v: f"{v / 1000:.0f}k"),
                    ("large files: MiB per second read by wrk (higher is better)", LARGE_FILES,
                     "bytes_per_s", "MiB per second", lambda v: f"{v:,.0f}"),
                ]),
        grouped(run_dir, rows, None, None,
                f"Over TLS (same certificate and cipher suite), keep-alive, one worker pinned to one CPU\n{stamp}",
                "tls.png", None, panels=[
                    ("requests per second (higher is better)", TLS,
                     "req_per_s", "requests per second", lambda v: f"{v / 1000:.0f}k"),
                    ("server CPU µs per request (lower is better)", TLS,
                     "cpu_us_per_req", "server CPU µs per request", lambda v: f"{v:.1f}"),
                ]),
        grouped(run_dir, rows, None, None,
                f"HTTP/2 (h2load -c 50 -m 32; h2: TLS, ALPN h2; h2c: cleartext), one worker pinned to one CPU\n{stamp}",
                "h2.png", None, panels=[
                    ("17-byte and 4 KiB files: requests per second (higher is better)", H2_SMALL,
                     "req_per_s", "requests per second", lambda v: f"{v / 1000:.0f}k"),
                    ("17-byte and 4 KiB files: server CPU µs per request (lower is better)", H2_SMALL,
                     "cpu_us_per_req", "server CPU µs per request", lambda v: f"{v:.2f}"),
                    ("1 MiB file: MiB per second read by h2load (higher is better)", H2_LARGE,
                     "bytes_per_s", "MiB per second", lambda v: f"{v:,.0f}"),
                ]),
        latency(run_dir, rows, stamp),
    ]
    for p in made:
        if p:
            print(os.path.basename(p))


if __name__ == "__main__":
    main()
