import subprocess, sys, re, collections
def prof(f):
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", f], capture_output=True, text=True).stdout
    d = collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(.*)$", line)
        if not m or "PROGRAM TOTALS" in line: continue
        name = m.group(2)
        obj = re.search(r"\[([^\]]*)\]$", name)
        name = re.sub(r" \[[^\]]*\]$", "", name)
        file, fn = name.split(":", 1) if ":" in name else ("", name)
        if fn in ("clone", "start_thread", "core::ops::function::FnOnce::call_once{{vtable.shim}}", "<std::sys::thread::unix::Thread>::new::thread_start", "std::sys::backtrace::__rust_begin_short_backtrace", ".spawn(move || worker.run())"): continue
        d[(file, fn)] += int(m.group(1).replace(",", ""))
    return d
def cls(file, fn):
    if "malloc" in file or fn in ("malloc", "free", "realloc", "calloc", "cfree") or "_int_" in fn or "unlink_chunk" in fn or "malloc_consolidate" in fn: return "malloc"
    if "memcpy" in fn or "memmove" in fn or "memset" in fn or "memcmp" in fn or "bcmp" in fn: return "mem*"
    if "/aws-lc" in file or fn.startswith("aws_lc") or "mlkem" in fn or fn.startswith("0x") or "aws-lc-rs" in file or "aws_lc_rs" in fn or "GFMUL" in fn or "aead_" in fn or "aes" in fn.lower(): return "aws-lc"
    if "rustls" in file or fn.startswith("rustls") or "<rustls" in fn: return "rustls"
    if "peregrine" in fn or "/crates/engine" in file or "/crates/files" in file or "/crates/cli" in file: return "peregrine"
    if "mio" in file: return "mio"
    if "/rustc/" in file: return "std/core"
    if "libc.so" in file or "sysdeps" in file or "nptl" in file: return "libc other"
    return "other"
def load(spec):
    f, n = spec.rsplit(":", 1); n = float(n)
    if "@" in f:
        b, a = f.split("@"); pb, pa = prof(b), prof(a)
        d = {k: pb[k] - pa.get(k, 0) for k in pb}
    else:
        d = prof(f)
    c = collections.Counter()
    for (file, fn), v in d.items(): c[cls(file, fn)] += v / n
    return c, d, n
(A, dA, nA), (B, dB, nB) = load(sys.argv[1]), load(sys.argv[2])
print(f"{'class':12} {'floor':>10} {'peregrine':>10} {'diff':>9}")
for k in sorted(set(A) | set(B), key=lambda k: -B.get(k, 0)):
    print(f"{k:12} {A.get(k,0):10.0f} {B.get(k,0):10.0f} {B.get(k,0)-A.get(k,0):+9.0f}")
print(f"{'total':12} {sum(A.values()):10.0f} {sum(B.values()):10.0f} {sum(B.values())-sum(A.values()):+9.0f}")
if len(sys.argv) > 3:
    want = sys.argv[3]
    rows = sorted(((v / nB, fn) for (file, fn), v in dB.items() if cls(file, fn) == want), reverse=True)
    for v, fn in rows[:40]: print(f"{v:9.0f}  {fn[:140]}")
