"""The layout probe: where the clients run, chosen before anything is measured.

On some virtual machines waking a task on the other vCPU costs about a
millisecond (issue 12 measured `limit` at 0.8k req/s over one connection with
wrk on the other CPU, 1.2 ms per round trip, and 95,000 req/s at 50
connections with both on CPU 0). A run there measures the hypervisor, not the
servers. So the runner first asks `limit` over one connection for
PROBE_S seconds in both layouts:

- split: the server on CPU 0, the client (wrk, oha, the idle client) on CPU 1;
- same: both on CPU 0.

`--layout auto` (the default) keeps split, where the client has a CPU of its
own, unless its one-connection round trip is more than SLOW_FACTOR times the
same layout's: then a cross-CPU wake-up dominates every request and same is
chosen. `--layout split|same` forces a layout; the probe still runs and is
recorded. Either way the server CPU µs per request, the figure the targets
judge, is measured the same way; req/s and latency are the layout's.
"""
import load
import servers

PROBE_S = 2.0
PROBE_WARMUP_S = 0.5
# One connection, one request in flight: a round trip is two wake-ups.
# Same-CPU wake-ups are context switches; cross-CPU ones on a healthy host
# cost a few µs more each, so split is somewhat slower there (up to about
# 2x); on the hosts issue 12 describes it was 50x and more.
SLOW_FACTOR = 3.0
CPUS = {"split": "1", "same": servers.SERVER_CPU}


def probe(limit, log_path):
    """Measures limit over one connection in both layouts. Returns
    {layout: {"req_per_s", "rtt_us", "note"}}; leaves load.WRK_CPU as found."""
    point = load.Point("layout-probe", "layout-probe", 1)
    saved = load.WRK_CPU
    out = {}
    try:
        for name, cpu in CPUS.items():
            load.WRK_CPU = cpu
            running = servers.Running(limit, log_path)
            try:
                reason = running.start()
                if reason:
                    out[name] = {"note": f"limit did not start: {reason}"}
                    continue
                load.run_wrk(running.port, point, PROBE_WARMUP_S)
                fig, err = load.run_wrk(running.port, point, PROBE_S)
            finally:
                running.stop()
            if err:
                out[name] = {"note": err}
                continue
            rps = fig["requests"] / (fig["duration_us"] / 1e6)
            out[name] = {"req_per_s": rps, "rtt_us": 1e6 / rps if rps else None, "note": ""}
    finally:
        load.WRK_CPU = saved
    return out


def choose(asked, probed):
    """The layout to run (split or same) and why, in words."""
    split, same = probed.get("split", {}), probed.get("same", {})
    if asked != "auto":
        return asked, f"--layout {asked}"
    if not split.get("rtt_us") or not same.get("rtt_us"):
        return "split", "the probe failed, so the usual layout (split) was kept"
    ratio = split["rtt_us"] / same["rtt_us"]
    if ratio > SLOW_FACTOR:
        return "same", (f"auto: a one-connection round trip across CPUs took {ratio:.1f}x as long as on "
                        f"one CPU (more than {SLOW_FACTOR:g}x): cross-CPU wake-ups would dominate")
    return "split", (f"auto: a one-connection round trip across CPUs took {ratio:.1f}x as long as on one "
                     f"CPU (at most {SLOW_FACTOR:g}x): the client gets a CPU of its own")


def describe(probed, layout, why):
    """One line for meta.txt and the summary."""
    parts = []
    for name in CPUS:
        p = probed.get(name, {})
        where = f"server CPU {servers.SERVER_CPU}, client CPU {CPUS[name]}"
        if p.get("req_per_s"):
            parts.append(f"{name} ({where}): {p['req_per_s']:,.0f} req/s, {p['rtt_us']:,.0f} µs per round trip")
        else:
            parts.append(f"{name} ({where}): no figure ({p.get('note', 'not run')})")
    return (f"{layout} ({why}); probe: limit, wrk -c 1, {PROBE_S:g} s each: " + "; ".join(parts))
