"""Does a large file's first request hold the worker's other requests?

    python3 bench/lib/stall.py [--binary target/release/peregrine] [--seconds 12] [--client-cpu 1]

`peregrine serve DIR --workers 1` (pinned to CPU 0) serves a 17-byte file
and a 1 GiB file (written once, so in the page cache). oha asks for the small
file at a fixed rate (RATE req/s, 10 connections, corrected for coordinated
omission) for `--seconds`, twice: alone (the baseline), then while the
runner asks for the 1 GiB file's first byte (`Range: bytes=0-0`) every
BIG_EVERY_S seconds, each time after giving the file a new mtime, so each
is a first request for a new identity (the server re-stats after its 1 s
revalidation interval). Printed: the small requests' percentiles in both
runs, and how long each 1 GiB request took to its answer.

Evidence, not a test (STYLE.md, habit 9): on a shared machine read it as
such. BENCHMARKS.md quotes a run of it.
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import rate  # noqa: E402
import servers  # noqa: E402

RATE = 2000
CONNS = 10
BIG_BYTES = 1 << 30
BIG_EVERY_S = 1.5


def big_requests(port, path, stop, took):
    """Until stop: a new mtime for the file, a pause for the server's
    revalidation interval, then GET its first byte, timed to the answer."""
    n = 0
    while not stop.wait(BIG_EVERY_S):
        n += 1
        os.utime(path, (1_767_225_600 + n, 1_767_225_600 + n))
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"GET /big.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=0-0\r\nConnection: close\r\n\r\n")
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        took.append(((time.monotonic() - t0) * 1000, data.split(b"\r\n", 1)[0].decode()))


def small_run(oha, port, seconds, client_cpu):
    argv = ["taskset", "-c", client_cpu, oha, "-q", str(RATE), "-c", str(CONNS), "-z", f"{seconds:g}s",
            "--latency-correction", "--no-tui", "--output-format", "json", "--worker-threads", "1",
            f"http://127.0.0.1:{port}/17.txt"]
    fig = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    p = fig["latencyPercentiles"]
    return {k: p[k] * 1e6 for k in ("p50", "p99", "p99.9")} | {"max": fig["summary"]["slowest"] * 1e6,
                                                               "answered": sum(fig["statusCodeDistribution"].values())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(servers.REPO, "target", "release", "peregrine"))
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--client-cpu", default="1")
    args = ap.parse_args()
    oha = rate.oha_binary()
    if not oha:
        sys.exit("no oha (cargo install oha --locked, or OHA=/path)")
    root = tempfile.mkdtemp(prefix="peregrine-stall-")
    try:
        with open(os.path.join(root, "17.txt"), "wb") as f:
            f.write(b"Hello, Peregrine\n")
        big = os.path.join(root, "big.bin")
        block = bytes(range(256)) * 4096  # 1 MiB, not a hole: every page is read
        with open(big, "wb") as f:
            for _ in range(BIG_BYTES // len(block)):
                f.write(block)
        port = servers.free_port()
        server = subprocess.Popen(["taskset", "-c", servers.SERVER_CPU, args.binary, "serve", root,
                                   "--bind", f"127.0.0.1:{port}", "--workers", "1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  # as root, `serve` stays root only when told
                                  env={**os.environ, "PEREGRINE_ALLOW_ROOT": "1"})
        try:
            for _ in range(200):
                if servers.probe(port, path="/17.txt", body=b"Hello, Peregrine\n") is None:
                    break
                time.sleep(0.05)
            # the big file read once so that the page cache holds it
            subprocess.run(["cat", big], stdout=subprocess.DEVNULL, check=True)
            base = small_run(oha, port, args.seconds, args.client_cpu)
            stop, took = threading.Event(), []
            t = threading.Thread(target=big_requests, args=(port, big, stop, took))
            t.start()
            loaded = small_run(oha, port, args.seconds, args.client_cpu)
            stop.set()
            t.join()
        finally:
            server.terminate()
            server.wait()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"binary: {args.binary}")
    print(f"small requests: GET /17.txt, oha -q {RATE} -c {CONNS} -z {args.seconds:g}s --latency-correction, "
          f"server CPU {servers.SERVER_CPU}, oha CPU {args.client_cpu}")
    for name, r in (("alone", base), (f"with a first 1 GiB request every {BIG_EVERY_S:g} s", loaded)):
        print(f"  {name}: p50 {r['p50']:,.0f} µs, p99 {r['p99']:,.0f} µs, p99.9 {r['p99.9']:,.0f} µs, "
              f"max {r['max']:,.0f} µs ({r['answered']:,} answered)")
    print(f"1 GiB first requests (Range: bytes=0-0), time to the answer: "
          + ", ".join(f"{ms:,.1f} ms" for ms, _ in took) + f" ({took[0][1] if took else 'none'})")


if __name__ == "__main__":
    main()
