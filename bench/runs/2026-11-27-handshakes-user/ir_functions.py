#!/usr/bin/env python3
"""fdiff.py A.spec B.spec: per-function exclusive Ir per handshake, A vs B.
spec: FILE:N (Ir over N) or FILE1-FILE0:N (difference of two profiles over N)."""
import subprocess, sys, re, collections
def prof(f):
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", f], capture_output=True, text=True).stdout
    d = collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(.*)$", line)
        if not m or "PROGRAM TOTALS" in line: continue
        name = m.group(2)
        name = re.sub(r" \[[^\]]*\]$", "", name)
        fn = name.split(":", 1)[1] if ":" in name else name
        # Frames on the stack when callgrind_control dumped (not costs).
        if fn in ("clone", "start_thread", "core::ops::function::FnOnce::call_once{{vtable.shim}}", "<std::sys::thread::unix::Thread>::new::thread_start", "std::sys::backtrace::__rust_begin_short_backtrace", ".spawn(move || worker.run())"): continue
        d[fn] += int(m.group(1).replace(",", ""))
    return d
def load(spec):
    f, n = spec.rsplit(":", 1)
    n = float(n)
    if "@" in f:
        b, a = f.split("@")
        pb, pa = prof(b), prof(a)
        d = collections.Counter({k: pb[k] - pa.get(k, 0) for k in pb})
    else:
        d = prof(f)
    return {k: v / n for k, v in d.items()}
A, B = load(sys.argv[1]), load(sys.argv[2])
keys = set(A) | set(B)
rows = sorted(keys, key=lambda k: -abs(B.get(k, 0) - A.get(k, 0)))
print(f"{'A':>10} {'B':>10} {'B-A':>10}  function   (sum A={sum(A.values()):.0f} B={sum(B.values()):.0f})")
lim = int(sys.argv[3]) if len(sys.argv) > 3 else 60
for k in rows[:lim]:
    a, b = A.get(k, 0), B.get(k, 0)
    print(f"{a:10.0f} {b:10.0f} {b-a:+10.0f}  {k[:150]}")
