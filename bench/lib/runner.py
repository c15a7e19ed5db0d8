"""bench/run's main: installs, builds, runs every scenario on every server,
and writes the run directory. See bench/README.md for what is measured.

Order of work: install what is missing; build the selected servers that
take part in a selected scenario (skipping those that fail); probe the
layout (layout.py: limit over one connection with the client on the other
CPU and on the same one) and choose where the clients run; write the file
tree if a file scenario is selected, and pack it for peregrine-archive; make
a throwaway certificate if a TLS scenario is selected; then
for each scenario, repetition and server start the server fresh, check its
answers (file and TLS scenarios; for TLS also what it negotiates), warm up,
measure, stop it (load100k writes and
packs its own 100,000 files first, and times start-up instead; real10k
writes its 10,000 files and packs them first; rate and frate measure limit's
capacity first and run oha instead of wrk); last, write the summary, charts and meta, and rewrite
BENCHMARKS.md's bench section.
"""
import argparse
import datetime
import os
import platform
import shlex
import subprocess
import sys
import time

import filetree
import h2
import h3
import install
import layout
import load
import procs
import proxy
import rate
import report
import servers
import tls
import ws

BENCH = install.BENCH
REPO = servers.REPO
WARMUP_S = 1.0


def log(msg):
    print(f"bench: {msg}", flush=True)


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="bench/run",
        description="Peregrine's peer benchmarks: every server pinned to CPU 0, wrk on CPU 1.")
    ap.add_argument("--quick", action="store_true",
                    help="1 s runs, 1 repetition, into runs/<stamp>-quick/ (a smoke test, not evidence)")
    known_servers = servers.ORDER + [n for n in ws.ORDER if n not in servers.ORDER]
    known_servers += [n for n in proxy.ORDER if n not in known_servers]
    known_scenarios = list(load.SCENARIOS) + list(ws.SCENARIOS) + list(proxy.SCENARIOS)
    ap.add_argument("--only", metavar="SERVER,...",
                    help="servers to run, from: " + ",".join(known_servers)
                    + " (the WebSocket scenarios take " + ",".join(ws.ORDER) + ")")
    ap.add_argument("--scenarios", metavar="NAME,...",
                    help="scenarios to run, from: " + ",".join(known_scenarios))
    ap.add_argument("--duration", type=float, help="seconds per measured run (default 5, quick 1)")
    ap.add_argument("--reps", type=int, help="repetitions per load point (default 3, quick 1)")
    ap.add_argument("--layout", choices=("auto", "split", "same"), default="auto",
                    help="where the clients run: split (CPU 1, the servers on CPU 0), same (CPU 0 too), "
                         "or auto (default): split unless the layout probe finds cross-CPU wake-ups slow")
    ap.add_argument("--no-cargo", action="store_true",
                    help="do not run cargo build --release; measure target/release/peregrine as it is")
    ap.add_argument("--benchmarks-md", metavar="PATH",
                    help="write the bench section into PATH instead of BENCHMARKS.md at the repo root "
                         "(also for quick runs)")
    ap.add_argument("--no-benchmarks-md", action="store_true",
                    help="leave BENCHMARKS.md alone")
    args = ap.parse_args(argv)

    def pick(value, known, what):
        if not value:
            return list(known)
        names = [n.strip() for n in value.split(",") if n.strip()]
        unknown = [n for n in names if n not in known]
        if unknown:
            ap.error(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
        return [n for n in known if n in names]  # canonical order

    asked_servers = pick(args.only, known_servers, "server")
    args.servers = [n for n in asked_servers if n in servers.ORDER]
    args.ws_servers = [n for n in ws.ORDER if n in asked_servers]
    args.proxy_servers = [n for n in proxy.ORDER if n in asked_servers]
    asked_scenarios = pick(args.scenarios, known_scenarios, "scenario")
    args.scenario_names = [sc for sc in asked_scenarios if sc in load.SCENARIOS]
    args.ws_scenarios = [sc for sc in asked_scenarios if sc in ws.SCENARIOS]
    args.proxy_scenarios = [sc for sc in asked_scenarios if sc in proxy.SCENARIOS]
    args.duration = args.duration or (1.0 if args.quick else 5.0)
    args.reps = args.reps or (1 if args.quick else 3)
    return args


def sh(argv):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        return (r.stdout + r.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"({argv[0]}: {e})"


def cpu_model():
    for line in sh(["lscpu"]).splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def mem_total():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return "unknown"


def machine_busy_pct(seconds=1.0):
    """How much CPU the machine used over `seconds`, in % of one CPU."""
    before = procs.system_ticks()[0]
    time.sleep(seconds)
    return 100 * procs.ticks_to_us(procs.system_ticks()[0] - before) / 1e6 / seconds


def write_meta(path, args, command, started, prepared, skipped, venv_python, nofile, tree=None,
               many_notes=(), cert=None, tls_seen=None, real=None):
    lines = [
        f"command: {command}",
        f"started: {started.isoformat(timespec='seconds')} (local), "
        f"{started.astimezone(datetime.timezone.utc).isoformat(timespec='seconds')}",
        f"finished: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"uname -a: {sh(['uname', '-a'])}",
        f"cpu: {cpu_model()}; nproc {os.cpu_count()}",
        f"load average at start: {args.loadavg_start}; CPU busy over 1 s at start: "
        f"{args.busy_start:.0f} % of one CPU",
        f"memory: {mem_total()}",
        f"pinning: servers taskset -c {servers.SERVER_CPU}; wrk -t 1, oha and the idle client taskset -c "
        f"{load.WRK_CPU}",
        f"layout: {args.layout_line}",
        f"runs: {args.reps} x {args.duration:g} s per load point after a {WARMUP_S:g} s warm-up; "
        f"wrk --timeout {load.WRK_TIMEOUT}",
        f"scenarios: {','.join(args.scenario_names + args.ws_scenarios)}",
        f"servers asked: {','.join(args.servers)}"
        + (f"; WebSocket peers asked: {','.join(args.ws_servers)}" if args.ws_scenarios else ""),
        f"RLIMIT_NOFILE: {nofile}",
    ]
    if tree is not None:
        lines.append(f"file tree (file scenarios; one temporary directory all file servers served, "
                     f"mtime {filetree.MTIME}): {tree.describe()}")
    lines += [f"load100k: {n}" for n in many_notes]
    if real is not None:
        lines.append(f"real10k tree: {real.describe()}")
    if args.rate:
        lines.append(f"rate scenarios: {args.rate['line']}")
    if cert is not None:
        lines.append(f"TLS scenarios' certificate: {cert.describe()}")
        lines.append(f"TLS: nginx pinned to TLSv1.3, ssl_conf_command Ciphersuites {tls.TLS13_CIPHERSUITE}, "
                     f"ssl_ecdh_curve {tls.GROUPS} (bench/peers/nginx/tls.conf.in); h2o minimum-version TLSv1.3 "
                     f"with OpenSSL's server defaults; Peregrine with rustls on aws-lc-rs (X25519MLKEM768, X25519, "
                     f"P-256, P-384; TLS 1.3 and 1.2); wrk offers OpenSSL's defaults")
        if any(sc in load.H2_SCENARIOS for sc in args.scenario_names):
            lines.append(f"HTTP/2 scenarios: h2load -t 1 -c {load.H2_CONNS} -m {load.H2_STREAMS} -D SECONDS, "
                         f"over TLS with --tls13-ciphers {tls.TLS13_CIPHERSUITE} (h2-*) or h2c with prior "
                         f"knowledge (h2c-*); nginx with bench/peers/nginx/h2.conf.in, h2o and Peregrine "
                         f"with their file configurations (h2 on by default); what h2load negotiated is in "
                         f"each row's tls column of results.csv")
        for (name, scenario), seen in sorted((tls_seen or {}).items()):
            if scenario in load.H2_SCENARIOS:
                lines.append(f"HTTP/2 negotiated by {name} at {scenario} (as h2load reported it; per "
                             f"repetition): {'; '.join(sorted(seen))}")
                continue
            lines.append(f"TLS negotiated by {name} at {scenario} (openssl s_client with OpenSSL's default "
                         f"offer, as wrk; per repetition): {'; '.join(sorted(seen))}")
    for name, server in prepared.items():
        lines += [f"{name}: {n}" for n in server.setup_notes()]
    for knob in ("net/core/somaxconn", "net/ipv4/tcp_tw_reuse", "net/ipv4/ip_local_port_range"):
        try:
            with open(f"/proc/sys/{knob}") as f:
                lines.append(f"{knob}: {f.read().strip()}")
        except OSError:
            pass
    lines += ["", "versions:",
              f"  wrk: {sh(['wrk', '-v']).splitlines()[0] if sh(['wrk', '-v']) else 'missing'}",
              f"  python: {sys.version.split()[0]}",
              f"  gcc: {sh(['gcc', '--version']).splitlines()[0]}"]
    if cert is not None:
        lines.append(f"  openssl (wrk's and s_client's library): {sh(['openssl', 'version'])}")
    if any(sc in load.H2_SCENARIOS for sc in args.scenario_names):
        lines.append(f"  h2load: {sh(['h2load', '--version'])}; curl: {sh(['curl', '--version']).splitlines()[0]}")
    if args.rate and args.rate.get("oha"):
        lines.append(f"  oha: {rate.oha_version(args.rate['oha'])} ({args.rate['oha']})")
    if any(sc in load.H3_SCENARIOS for sc in args.scenario_names):
        lines.append(f"  h3 client: {h3.client_version()}")
    if venv_python:
        lines.append("  matplotlib: " + sh([venv_python, "-c", "import matplotlib; print(matplotlib.__version__)"]))
    for name, server in prepared.items():
        try:
            lines.append(f"  {name}: {server.version()}")
        except Exception as e:  # a version is information, never a reason to fail
            lines.append(f"  {name}: (version unknown: {e})")
    if skipped:
        lines += ["", "skipped:"] + [f"  {n}: {why}" for n, why in skipped.items()]
    lines += ["", "lscpu:"] + ["  " + line for line in sh(["lscpu"]).splitlines()]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv):
    args = parse_args(argv)
    command = "bench/run" + ("" if not argv else " " + shlex.join(argv))
    started = datetime.datetime.now().astimezone()
    stamp = started.strftime("%Y-%m-%dT%H%M%S") + ("-quick" if args.quick else "")
    run_dir = os.path.join(BENCH, "runs", stamp)
    logs = os.path.join(run_dir, "logs")
    os.makedirs(logs, exist_ok=True)
    with open("/proc/loadavg") as f:
        args.loadavg_start = f.read().strip()
    args.busy_start = machine_busy_pct()

    procs.install_cleanup()
    nofile = procs.raise_nofile()
    log(f"run directory {os.path.relpath(run_dir, REPO)}; RLIMIT_NOFILE {nofile}")
    most = max([p.conns for sc in args.scenario_names for p in load.SCENARIOS[sc]]
               + [ws.IDLE_CONNS if "wsidle10k" in args.ws_scenarios else ws.CONNS if args.ws_scenarios else 0])
    if nofile < most + 100:
        log(f"WARNING: RLIMIT_NOFILE is {nofile}; {most:,} connections need more")
    if os.cpu_count() < 2:
        log("WARNING: one CPU only: the server and wrk will share it")

    busy = args.busy_start
    if busy > 20:
        log(f"WARNING: the machine is busy before the run ({busy:.0f} % of a CPU over 1 s): "
            "numbers will be disturbed; the summary shows how much, per row")

    # 1. install
    if not install.ensure_wrk():
        log("ERROR: wrk is missing and could not be installed")
        return 1
    venv_python = install.ensure_venv()
    if any(sc in load.H2_SCENARIOS for sc in args.scenario_names):
        why = h2.ensure_h2load()
        if why:
            log(f"ERROR: {why}: the HTTP/2 scenarios are not run")
            args.scenario_names = [sc for sc in args.scenario_names if sc not in load.H2_SCENARIOS]
    if any(sc in load.H3_SCENARIOS for sc in args.scenario_names):
        why = h3.ensure_client()
        if why:
            log(f"ERROR: {why}: the HTTP/3 scenarios are not run")
            args.scenario_names = [sc for sc in args.scenario_names if sc not in load.H3_SCENARIOS]

    # the reverse-proxy scenarios: a group of their own (proxy.py), every
    # process on the server CPU, with relay-limit as their floor
    args.proxy_md, args.proxy_versions = "", {}
    if args.proxy_scenarios:
        if any(proxy.SCENARIOS[sc][1] for sc in args.proxy_scenarios):
            why = h2.ensure_h2load()
            if why:
                log(f"ERROR: {why}: the HTTP/2 proxy scenario is not run")
                args.proxy_scenarios = [sc for sc in args.proxy_scenarios if not proxy.SCENARIOS[sc][1]]
        args.proxy_md, args.proxy_versions, proxy_skipped = proxy.run(
            args.proxy_servers, args.proxy_scenarios, args.reps, args.duration, run_dir)
        if not args.scenario_names and not args.ws_scenarios:
            return finish_proxy_only(args, command, started, run_dir, proxy_skipped, venv_python, nofile)

    # 2. build
    servers.Peregrine.run_cargo = not args.no_cargo
    prepared, skipped = {}, {}
    points = [p for sc in args.scenario_names for p in load.SCENARIOS[sc]]
    for name in args.servers:
        server = servers.ALL[name]()
        if not any(server.takes_part(p) for p in points):
            log(f"{name} takes part in none of the scenarios asked: not prepared")
            continue
        log(f"preparing {name}")
        try:
            reason = server.prepare()
        except Exception as e:
            reason = f"{type(e).__name__}: {e}"
        if reason:
            skipped[name] = reason
            log(f"skipping {name}: {reason}")
        else:
            prepared[name] = server
    if "limit" not in prepared:
        log("WARNING: no limit server: ratios to limit will be empty")

    # 3. layout: where the clients run (layout.py), from a probe of limit
    limit = prepared.get("limit")
    if limit is None:
        limit = servers.Limit()
        why = limit.prepare()
        if why:
            log(f"WARNING: no limit server for the layout probe: {why}")
            limit = None
    probed = layout.probe(limit, os.path.join(logs, "layout-probe.log")) if limit else {}
    args.layout, why = layout.choose(args.layout, probed)
    load.WRK_CPU = layout.CPUS[args.layout]
    args.layout_line = layout.describe(probed, args.layout, why)
    log(args.layout_line)

    # the WebSocket scenarios: a group of their own (ws.py), in this layout
    args.ws_md, args.ws_versions = "", {}
    if args.ws_scenarios:
        args.ws_md, args.ws_versions, ws_skipped = ws.run(
            args.ws_servers, args.ws_scenarios, args.reps, args.duration, load.WRK_CPU, run_dir,
            quick=args.quick, no_cargo=args.no_cargo)
        skipped.update({f"{n} (ws)": why for n, why in ws_skipped.items()})
        if not args.scenario_names:
            args.rate = None
            return finish_ws_only(args, command, started, run_dir, prepared, skipped, venv_python, nofile)

    # the rate scenarios' client and rates: limit's c50 capacity, this layout
    args.rate = None
    if any(sc in load.RATE_SCENARIOS for sc in args.scenario_names):
        oha, why = rate.ensure_oha()
        cap = None
        if oha and limit:
            cap, why = rate.capacity(oha, limit, os.path.join(logs, "rate-capacity.log"), args.duration, WARMUP_S)
        elif oha:
            why = "no limit server to measure the capacity the rates are fractions of"
        if cap:
            line = (f"limit's capacity at 50 connections (oha pacing at 2.5 x what it reached unthrottled, {args.duration:g} s): {cap:,.0f} req/s; "
                    f"oha -q at " + ", ".join(f"{p} % = {cap * p / 100:,.0f}" for p in load.RATE_PCTS)
                    + " req/s, --latency-correction, one worker thread")
            args.rate = {"oha": oha, "capacity": cap, "line": line}
            log(f"rate scenarios: {line}")
        else:
            skipped["rate scenarios"] = why
            log(f"skipping the rate scenarios: {why}")

    # 4. measure
    tree = None
    if any(p.files for p in points):
        # one tree for the whole run, served by every file server alike
        tree = filetree.Tree()
        procs.add_cleanup(tree.root, tree.remove)
        log(f"file tree {tree.root}: {tree.describe()}")
        # work done once per tree (peregrine-archive packs it)
        for name, server in list(prepared.items()):
            if not any(server.takes_part(p) for p in points if p.files):
                continue
            try:
                reason = server.prepare_files(tree, os.path.join(logs, f"{name}-prepare.log"))
            except Exception as e:
                reason = f"{type(e).__name__}: {e}"
            if reason:
                skipped[name] = reason
                log(f"skipping {name}: {reason}")
                del prepared[name]
    real = None
    if "real10k" in args.scenario_names and any(s.takes_part(load.SCENARIOS["real10k"][0])
                                                   for s in prepared.values()):
        t0 = time.monotonic()
        real = filetree.RealFiles()
        procs.add_cleanup(real.root, real.remove)
        log(f"real10k tree {real.root}: {real.describe()} ({time.monotonic() - t0:.1f} s)")
        for name, server in list(prepared.items()):
            if not server.takes_part(load.SCENARIOS["real10k"][0]):
                continue
            try:
                reason = server.prepare_files(real, os.path.join(logs, f"{name}-prepare.log"), "real10k")
            except Exception as e:
                reason = f"{type(e).__name__}: {e}"
            if reason:
                skipped[f"{name} at real10k"] = reason
                log(f"{name} sits out real10k: {reason}")
    cert = None
    if any(p.tls for p in points) and any(s.takes_part(p) for s in prepared.values() for p in points if p.tls):
        # one certificate for the whole run, given to every TLS server
        try:
            if not tls.ensure_openssl():
                raise RuntimeError("the openssl CLI is missing and could not be installed")
            cert = tls.Cert()
            log(f"TLS certificate {cert.cert}: {cert.describe()}")
        except (RuntimeError, OSError) as e:
            log(f"ERROR: no certificate, the TLS scenarios are not run: {e}")
            skipped["TLS scenarios"] = f"no certificate: {e}"
    tls_seen = {}  # (server, scenario) -> {what it negotiated}
    results = report.ResultsWriter(os.path.join(run_dir, "results.csv"))
    many_notes = []  # load100k: its tree and archive, for meta.txt
    # Repetitions go round the servers (rep 1 of every server, then rep 2,
    # ...) so that the host's noise, which drifts over minutes here, falls on
    # every server alike instead of on whichever ran during a bad spell.
    for scenario in args.scenario_names:
        taking_part = {n: s for n, s in prepared.items()
                       if any(s.takes_part(p) for p in load.SCENARIOS[scenario])}
        left_out = [n for n in prepared if n not in taking_part]
        if left_out:
            mode = {"hello": "hello", "load": "load100k"}.get(load.SCENARIOS[scenario][0].kind, "file")
            if load.SCENARIOS[scenario][0].tls:
                mode = f"TLS {mode}"
            if load.SCENARIOS[scenario][0].h2:
                mode = f"HTTP/2 {mode}"
            log(f"{scenario}: without {', '.join(left_out)} (no {mode} mode"
                f"{', or limit where its hello says nothing' if 'limit' in left_out and mode == 'file' else ''})")
        if scenario == "load100k":
            run_load100k(taking_part, args, results, logs, skipped, many_notes)
            continue
        if load.SCENARIOS[scenario][0].tls and cert is None:
            continue
        if scenario in load.RATE_SCENARIOS and args.rate is None:
            continue
        if scenario == "real10k":
            taking_part = {n: s for n, s in taking_part.items() if f"{n} at real10k" not in skipped}
        for rep in range(1, args.reps + 1):
            for name, server in taking_part.items():
                log_path = os.path.join(logs, f"{name}-{scenario}.log")
                if scenario == "idle10k":
                    run_idle(server, args, results, log_path, skipped, rep)
                else:
                    run_scenario(server, scenario, args, results, log_path, skipped, rep,
                                 real if scenario == "real10k" else tree, cert, tls_seen)
        if load.SCENARIOS[scenario][0].tls:
            seen = {name: got for (name, sc), got in tls_seen.items() if sc == scenario}
            if len(set().union(*seen.values()) if seen else ()) > 1:
                log(f"WARNING: {scenario}: the servers negotiated different TLS parameters: "
                    + "; ".join(f"{n} {', '.join(sorted(g))}" for n, g in sorted(seen.items())))

    # 5. report
    summary = report.summarize(results.rows)
    report.write_summary_csv(os.path.join(run_dir, "summary.csv"), summary)
    ctx = {"stamp": stamp, "command": command, "quick": args.quick, "reps": args.reps,
           "many_notes": many_notes,
           "duration_s": args.duration, "warmup_s": WARMUP_S, "cpu_model": cpu_model(),
           "n_cpus": os.cpu_count(), "skipped": skipped, "scenarios": args.scenario_names,
           "rows": results.rows, "tls_seen": tls_seen, "layout_line": args.layout_line,
           "layout": args.layout, "client_cpu": load.WRK_CPU, "server_cpu": servers.SERVER_CPU,
           "rate_line": args.rate["line"] if args.rate else None,
           "real_line": real.describe() if real else None}
    summary_md = report.summary_markdown(summary, ctx)
    with open(os.path.join(run_dir, "summary.md"), "w") as f:
        f.write(summary_md + "\n")
    write_meta(os.path.join(run_dir, "meta.txt"), args, command, started, prepared, skipped,
               venv_python, nofile, tree, many_notes, cert, tls_seen, real)
    if real is not None:
        real.remove()
        procs.remove_cleanup(real.root)

    charts = []
    if venv_python:
        r = subprocess.run([venv_python, os.path.join(BENCH, "lib", "charts.py"), run_dir],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            log("WARNING: charts failed: " + r.stderr.strip()[-500:])
        made = r.stdout.split()
        alts = {"chart.png": "requests per second", "cpu.png": "server CPU µs per request",
                "memory.png": "bytes per idle connection",
                "files.png": "static files: requests per second, CPU µs per request, bytes per second",
                "tls.png": "over TLS: requests per second and CPU µs per request",
                "h2.png": "HTTP/2 (h2load): requests per second, CPU µs per request, bytes per second",
                "latency.png": "latency at a fixed rate (oha, corrected for coordinated omission)"}
        charts = [(m, alts.get(m, m)) for m in made]
    else:
        log("WARNING: no matplotlib: no charts")

    print()
    print(summary_md)
    print()
    log(f"wrote {os.path.relpath(run_dir, REPO)}/: results.csv summary.csv summary.md meta.txt "
        + " ".join(m for m, _ in charts))

    if args.no_benchmarks_md:
        return 0
    if args.quick and not args.benchmarks_md:
        log("quick run: BENCHMARKS.md left alone (quick runs are not evidence)")
        return 0
    md_path = args.benchmarks_md or os.path.join(REPO, "BENCHMARKS.md")
    report.update_benchmarks_md(md_path, os.path.relpath(run_dir, REPO), command,
                                started.strftime("%Y-%m-%d %H:%M %Z"), summary_md, charts)
    log(f"updated the bench section of {md_path}")
    if args.ws_md:
        ws.update_benchmarks_md(md_path, os.path.relpath(run_dir, REPO), command,
                                started.strftime("%Y-%m-%d %H:%M %Z"), args.ws_md)
        log(f"updated the WebSocket section of {md_path}")
    if args.proxy_md:
        proxy.update_benchmarks_md(md_path, os.path.relpath(run_dir, REPO), command,
                                   started.strftime("%Y-%m-%d %H:%M %Z"), args.proxy_md)
        log(f"updated the proxy section of {md_path}")
    return 0


def finish_proxy_only(args, command, started, run_dir, skipped, venv_python, nofile):
    """A run of reverse-proxy scenarios only: meta.txt, proxy.md printed,
    and the proxy section of BENCHMARKS.md."""
    args.layout_line = f"proxy scenarios only: every process on CPU {servers.SERVER_CPU} (no layout probe)"
    args.rate = None
    write_meta(os.path.join(run_dir, "meta.txt"), args, command, started, {}, skipped, venv_python, nofile)
    with open(os.path.join(run_dir, "meta.txt"), "a") as f:
        f.write("\nproxy scenarios: " + ",".join(args.proxy_scenarios) + "\n")
        f.write("".join(f"  {n}: {v}\n" for n, v in args.proxy_versions.items()))
    print()
    print(args.proxy_md)
    print()
    log(f"wrote {os.path.relpath(run_dir, REPO)}/: proxy.csv proxy.md meta.txt logs/")
    if args.no_benchmarks_md or (args.quick and not args.benchmarks_md):
        return 0
    md_path = args.benchmarks_md or os.path.join(REPO, "BENCHMARKS.md")
    proxy.update_benchmarks_md(md_path, os.path.relpath(run_dir, REPO), command,
                               started.strftime("%Y-%m-%d %H:%M %Z"), args.proxy_md)
    log(f"updated the proxy section of {md_path}")
    return 0


def finish_ws_only(args, command, started, run_dir, prepared, skipped, venv_python, nofile):
    """A run of WebSocket scenarios only: meta.txt, ws.md printed, and the
    WebSocket section of BENCHMARKS.md (not its HTTP pointer)."""
    write_meta(os.path.join(run_dir, "meta.txt"), args, command, started, prepared, skipped, venv_python, nofile)
    with open(os.path.join(run_dir, "meta.txt"), "a") as f:
        f.write("\nWebSocket scenarios: " + ",".join(args.ws_scenarios) + "\n")
        f.write("".join(f"  {n}: {v}\n" for n, v in args.ws_versions.items()))
    print()
    print(args.ws_md)
    print()
    log(f"wrote {os.path.relpath(run_dir, REPO)}/: ws.csv ws.md meta.txt logs/")
    if args.no_benchmarks_md or (args.quick and not args.benchmarks_md):
        return 0
    md_path = args.benchmarks_md or os.path.join(REPO, "BENCHMARKS.md")
    ws.update_benchmarks_md(md_path, os.path.relpath(run_dir, REPO), command,
                            started.strftime("%Y-%m-%d %H:%M %Z"), args.ws_md)
    log(f"updated the WebSocket section of {md_path}")
    return 0


def _start(server, log_path, skipped, scenario, tree=None, cert=None, h2_point=None):
    running = servers.Running(server, log_path, tree, cert, h2_point)
    reason = running.start()
    if reason:
        log(f"{server.name} failed to start for {scenario}: {reason}")
        running.stop()
        skipped.setdefault(server.name, f"failed to start ({scenario}): {reason.splitlines()[0][:200]}")
        return None, reason
    return running, None


def run_scenario(server, scenario, args, results, log_path, skipped, rep, tree=None, cert=None,
                 tls_seen=None):
    """One repetition of a scenario on a freshly started server. In a file
    or TLS scenario the server's answers are checked first, with the very
    requests wrk will send; a server that answers wrong is not measured. In
    a TLS scenario what the server negotiates with OpenSSL's default offer
    (wrk's) is recorded in the row (and in meta.txt)."""
    files = load.SCENARIOS[scenario][0].file_mode
    over_tls = load.SCENARIOS[scenario][0].tls
    if load.SCENARIOS[scenario][0].h2:
        return run_h2(server, scenario, args, results, log_path, skipped, rep, tree, cert, tls_seen)
    if load.SCENARIOS[scenario][0].h3:
        return run_h3(server, scenario, args, results, log_path, skipped, rep, tree, cert)
    running, reason = _start(server, log_path, skipped, scenario, tree if files else None,
                             cert if over_tls else None)
    try:
        for point in load.SCENARIOS[scenario]:
            base = {"server": server.name, "scenario": scenario, "point": point.label,
                    "conns": point.conns, "depth": point.depth}
            if running is None:
                results.add({**base, "rep": rep, "note": f"did not start: {reason.splitlines()[0][:200]}"})
                continue
            if not running.alive():
                results.add({**base, "rep": rep, "note": f"server exited with {running.proc.returncode}"})
                continue
            headers, body_bytes, head_bytes, checked, negotiated = (), None, "", "", ""
            script_args = ()
            if point.file_mode or point.tls:
                try:
                    if point.kind == "real":
                        checked = filetree.check_real(running.port, tree)
                        script_args = (tree.list_path,)
                    else:
                        headers, body_bytes, head_bytes, checked = filetree.check(
                            running.port, point, tree,
                            servers.BODY if server.files_hello or not point.files else None, running.ssl_ctx)
                    if point.tls:
                        try:
                            negotiated = tls.short(tls.negotiated(running.port, cert))
                        except RuntimeError as e:
                            raise filetree.WrongAnswer(str(e)) from e
                        tls_seen.setdefault((server.name, scenario), set()).add(negotiated)
                        checked += f"; {negotiated}"
                except filetree.WrongAnswer as e:
                    why = f"wrong answer, not measured: {e}"
                    log(f"ERROR: {server.name} at {point.label}: {why}")
                    skipped.setdefault(f"{server.name} at {point.label}", why)
                    results.add({**base, "rep": rep, "note": why})
                    continue
            load.run_wrk(running.port, point, WARMUP_S, headers, script_args)  # warm-up, not recorded
            if point.rate_pct:
                row = rate.measure(args.rate["oha"], running, point, args.rate["capacity"] * point.rate_pct / 100,
                                   args.duration, headers)
            else:
                row = load.measure_wrk(running, point, args.duration, headers, body_bytes, script_args)
            results.add({**base, "rep": rep, "request_headers": " | ".join(headers),
                         "checked": checked, "head_bytes": head_bytes, "tls": negotiated, **row})
            log(f"{scenario:8} {point.label:12} {server.name:12} rep {rep}: "
                + (f"{row['req_per_s']:>12,.0f} req/s  cpu {row['cpu_us_per_req']} µs/req  "
                   f"errors {row['errors']}" if row.get("req_per_s") not in (None, "") else "")
                + (f"  {row['bytes_per_s'] / 2**20:,.1f} MiB/s"
                   if point.files and row.get("bytes_per_s") not in (None, "") else "")
                + (f"  {negotiated}" if negotiated else "")
                + (f"  [{row['note']}]" if row.get("note") else ""))
    finally:
        if running:
            running.stop()


def run_h2(server, scenario, args, results, log_path, skipped, rep, tree, cert, tls_seen):
    """One repetition of an HTTP/2 scenario (h2.py) on a freshly started
    server in its h2 mode: its answer checked over h2 (curl, then h2load
    with two streams), a warm-up h2load run, then the measured one."""
    [point] = load.SCENARIOS[scenario]
    base = {"server": server.name, "scenario": scenario, "point": point.label,
            "conns": point.conns, "depth": point.depth, "rep": rep}
    running, reason = _start(server, log_path, skipped, scenario, tree, cert if point.tls else None, point)
    if running is None:
        results.add({**base, "note": f"did not start: {reason.splitlines()[0][:200]}"})
        return
    try:
        body = tree.files[point.path]
        try:
            checked = h2.check(running.port, point, body, cert, load.WRK_CPU)
        except h2.WrongAnswer as e:
            why = f"wrong answer, not measured: {e}"
            log(f"ERROR: {server.name} at {point.label}: {why}")
            skipped.setdefault(f"{server.name} at {point.label}", why)
            results.add({**base, "note": why})
            return
        try:  # warm-up, not recorded
            h2.run(h2.h2load_argv(running.port, point, WARMUP_S, load.WRK_CPU), WARMUP_S + h2.H2LOAD_MARGIN_S)
        except h2.WrongAnswer:
            pass
        row = h2.measure(running, point, args.duration, len(body), load.WRK_CPU)
        if row.get("tls"):
            tls_seen.setdefault((server.name, scenario), set()).add(row["tls"])
        results.add({**base, "checked": checked, **row})
        log(f"{scenario:8} {point.label:12} {server.name:12} rep {rep}: "
            + (f"{row['req_per_s']:>12,.0f} req/s  cpu {row['cpu_us_per_req']} µs/req  errors {row['errors']}  "
               f"{row['bytes_per_s'] / 2**20:,.1f} MiB/s  p50 {row.get('p50_us')} µs  p99 {row.get('p99_us')} µs  "
               f"{row.get('tls')}" if row.get("req_per_s") not in (None, "") else "")
            + (f"  [{row['note']}]" if row.get("note") else ""))
    finally:
        running.stop()


def run_h3(server, scenario, args, results, log_path, skipped, rep, tree, cert):
    """One repetition of an HTTP/3 scenario (h3.py) on a freshly started
    server over TLS (h3 on its TLS port): a check run (every status and
    body), a warm-up run, then the measured one (every body checked)."""
    [point] = load.SCENARIOS[scenario]
    base = {"server": server.name, "scenario": scenario, "point": point.label,
            "conns": point.conns, "depth": point.depth, "rep": rep}
    running, reason = _start(server, log_path, skipped, scenario, tree, cert)
    if running is None:
        results.add({**base, "note": f"did not start: {reason.splitlines()[0][:200]}"})
        return
    try:
        body = tree.files[point.path]
        checked = None
        for attempt in range(10):  # the UDP side may come up after the TCP probe answered
            try:
                checked = h3.check(running.port, point, body, load.WRK_CPU, args.quick)
                break
            except h3.WrongAnswer as e:
                why = f"wrong answer, not measured: {e}"
                time.sleep(0.5)
        if checked is None:
            log(f"ERROR: {server.name} at {point.label}: {why}")
            skipped.setdefault(f"{server.name} at {point.label}", why)
            results.add({**base, "note": why})
            return
        h3.measure(running, point, body, load.WRK_CPU, True)  # warm-up, not recorded
        row = h3.measure(running, point, body, load.WRK_CPU, args.quick)
        row["checked"] = f"{checked}; measured run: {row['checked']}"
        results.add({**base, **row})
        log(f"{scenario:8} {point.label:12} {server.name:12} rep {rep}: "
            + (f"{row['requests']:,} answers exact, cpu {row['cpu_us_per_req']} µs/req, "
               f"{row['cpu_us_per_mib']} µs/MiB, client-bound {row['req_per_s']:,.0f} req/s"
               if row.get("cpu_us_per_req") not in (None, "") else "")
            + (f"  [{row['note']}]" if row.get("note") else ""))
    finally:
        running.stop()


def run_idle(server, args, results, log_path, skipped, rep):
    """One repetition of idle10k on a freshly started server."""
    hold_s = 1.0 if args.quick else 2.0
    base = {"server": server.name, "scenario": "idle10k", "point": "idle10k",
            "conns": load.IDLE_CONNS, "depth": 1, "rep": rep}
    running, reason = _start(server, log_path, skipped, "idle10k")
    if running is None:
        results.add({**base, "note": f"did not start: {reason.splitlines()[0][:200]}"})
        return
    try:
        row = load.measure_idle(running, hold_s)
    finally:
        running.stop()
    results.add({**base, **row})
    log(f"idle10k  {'':12} {server.name:12} rep {rep}: "
        f"{row.get('idle_bytes_per_conn', '–')} B/conn, errors {row.get('errors', '–')}"
        + (f"  [{row['note']}]" if row.get("note") else ""))


def run_load100k(taking_part, args, results, logs, skipped, notes):
    """load100k: writes filetree.ManyFiles (100,000 small files) once,
    packs it once for peregrine-archive (pack time and archive size), then
    per repetition, round the servers: a fresh server on that tree (nginx,
    peregrine serve DIR) or its archive (peregrine-archive), timed from
    process creation to its first right answer, RSS then and after one GET
    of each of 1,000 paths (load.measure_load). For peregrine-archive each
    repetition first times `peregrine hello` the same way: what starting
    the process costs without an archive."""
    if not taking_part:
        return
    t0 = time.monotonic()
    many = filetree.ManyFiles()
    procs.add_cleanup(many.root, many.remove)
    took = time.monotonic() - t0
    notes.append(f"tree {many.root}: {many.describe()}; written in {took:.1f} s")
    log(f"load100k tree {many.root}: {many.describe()} ({took:.1f} s)")
    archive, packed = None, {}
    try:
        if "peregrine-archive" in taking_part:
            server = taking_part["peregrine-archive"]
            try:
                archive, seconds, size, said = server.pack_many(
                    many.root, os.path.join(logs, "peregrine-archive-load100k-pack.log"))
                packed = {"pack_s": round(seconds, 2), "archive_bytes": size}
                note = (f"pack: `peregrine pack` of the tree took {seconds:.2f} s; archive "
                        f"{size:,} bytes for {many.bytes:,} bytes of files ({said})")
                notes.append(note)
                log(f"load100k {note}")
            except RuntimeError as e:
                why = str(e)
                log(f"ERROR: peregrine-archive at load100k: {why}")
                skipped["peregrine-archive at load100k"] = why
        for rep in range(1, args.reps + 1):
            for name, server in taking_part.items():
                log_path = os.path.join(logs, f"{name}-load100k.log")
                base = {"server": name, "scenario": "load100k", "point": "load100k",
                        "conns": 1, "depth": 1, "rep": rep, **packed}
                if name == "peregrine-archive" and archive is None:
                    results.add({**base, "note": "not measured: pack failed"})
                    continue
                row = {}
                if name == "peregrine-archive":
                    # the baseline: the same binary, no archive to open
                    hello = servers.Running(server, log_path)
                    try:
                        ms, err = load.start_to_first_answer(hello, server.argv(hello.port, hello.tmp),
                                                             "/", servers.BODY)
                    finally:
                        hello.stop()
                    if ms is not None:
                        row["hello_start_ms"] = round(ms, 2)
                    else:
                        row["note"] = f"peregrine hello: {err}"
                running = servers.Running(server, log_path)
                try:
                    got = load.measure_load(
                        running, server.load_argv(running.port, running.tmp, many.root, archive), many)
                finally:
                    running.stop()
                if row.get("note") and got.get("note"):
                    got["note"] = row.pop("note") + "; " + got["note"]
                row.update(got)
                if "start_ms" in row and "hello_start_ms" in row:
                    row["load_ms"] = round(row["start_ms"] - row["hello_start_ms"], 2)
                results.add({**base, **row})
                log(f"load100k {'':12} {name:17} rep {rep}: "
                    + (f"first answer after {row['start_ms']:.1f} ms"
                       + (f" (peregrine hello: {row['hello_start_ms']:.1f} ms)" if "hello_start_ms" in row else "")
                       + f", RSS {row['rss_first_kib'] / 1024:,.1f} MiB, after {row['paths_ok']:,} paths "
                       f"{row['rss_after_kib'] / 1024:,.1f} MiB (anon {row['rss_anon_after_kib'] / 1024:,.1f}, "
                       f"file {row['rss_file_after_kib'] / 1024:,.1f})" if "start_ms" in row else "")
                    + (f"  [{row['note']}]" if row.get("note") else ""))
    finally:
        many.remove()
        procs.remove_cleanup(many.root)
        if archive:
            try:
                os.remove(archive)
            except OSError:
                pass
