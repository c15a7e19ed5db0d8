#!/bin/bash
# bench/proxy-syscalls.sh [PEREGRINE] [N]: system calls per proxied request,
# by name and by side (the client's sockets, the upstream's, the rest), for
# Peregrine's reverse proxy and for bench/limit/relay.c (the floor), both
# in front of bench/limit/limit.c. Issue 26's relay cost: the kernel's share
# dominates, so this says where the calls go. Each proxy is traced with
# `strace -f` (the full trace, not -c: a call is put on its side by its
# descriptor) over an h2load --h1 run of exactly N GETs on 50 connections
# after a warm-up of 2,000 (so the upstream pool is warm, as under wrk).
# Every process is on CPU 0, one worker. strace slows the proxy, which
# changes how many events one epoll_wait returns: the counts are the
# evidence, not the time; compare runs of the same N only.
# A third argument, BYTES, makes limit answer bodies of that many bytes
# (limit --response) instead of its 13-byte hello: past 65,536 the proxy
# relays them through its channel (relay.c spins on a full socket then,
# so its counts are no floor for them).
# Example: bench/proxy-syscalls.sh target/release/peregrine 20000
#          bench/proxy-syscalls.sh target/release/peregrine 2000 1048576
set -euo pipefail
export PEREGRINE_ALLOW_ROOT=1
BIN=${1:-target/release/peregrine}
N=${2:-20000}
BYTES=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
for tool in strace h2load gcc python3; do
  command -v $tool >/dev/null || { echo "proxy-syscalls.sh: $tool is missing" >&2; exit 1; }
done
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
gcc -O2 -o "$tmp/limit" "$here/limit/limit.c"
gcc -O2 -o "$tmp/relay" "$here/limit/relay.c"
port() { python3 "$here/lib/free_port.py"; }
wait_up() { for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$1/" && return; sleep 0.1; done; echo "no answer on $1" >&2; exit 1; }

answer=()
if [ -n "$BYTES" ]; then
  python3 -c "import sys; n = int(sys.argv[1]); sys.stdout.buffer.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n' % n + b'x' * n)" "$BYTES" >"$tmp/answer.resp"
  answer=(--response "$tmp/answer.resp")
fi
up=$(port); taskset -c 0 "$tmp/limit" "$up" "${answer[@]}" >/dev/null 2>&1 & pids+=($!)
wait_up "$up"
rp=$(port); taskset -c 0 "$tmp/relay" "$rp" "$up" >/dev/null 2>&1 & pids+=($!); rpid=$!
mkdir -p "$tmp/empty"
pp=$(port); taskset -c 0 "$BIN" serve "$tmp/empty" --bind "127.0.0.1:$pp" --workers 1 --conns-per-ip-max 0 \
  --proxy "/=http://127.0.0.1:$up" >"$tmp/peregrine.log" 2>&1 & pids+=($!); ppid=$!
wait_up "$rp"; wait_up "$pp"

# trace NAME PID PORT: the trace of N requests, and the upstream's sockets
trace() {
  local name=$1 pid=$2 p=$3
  taskset -c 0 h2load --h1 -n 2000 -c 50 "http://127.0.0.1:$p/" >/dev/null 2>&1   # warm-up
  strace -f -qq -tt -p "$pid" -o "$tmp/$name.trace" 2>/dev/null &
  local st=$!
  sleep 0.5
  local out
  out=$(taskset -c 0 h2load --h1 -n "$N" -c 50 "http://127.0.0.1:$p/" 2>&1)
  # The upstream sockets: descriptors whose peer is limit's port (the
  # pool's, still open: they are kept alive).
  python3 - "$pid" "$up" >"$tmp/$name.upfds" <<'EOF'
import os, sys
pid, port = sys.argv[1], int(sys.argv[2])
inodes = set()
for line in open("/proc/net/tcp").readlines()[1:]:
    f = line.split()
    if int(f[2].split(":")[1], 16) == port:
        inodes.add(f[9])
fds = []
for fd in os.listdir(f"/proc/{pid}/fd"):
    try:
        t = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        continue
    if t.startswith("socket:[") and t[8:-1] in inodes:
        fds.append(fd)
print(" ".join(fds))
EOF
  sleep 0.2
  kill -INT $st; wait $st 2>/dev/null || true
  local ok
  ok=$(echo "$out" | sed -n 's/.*status codes: \([0-9]*\) 2xx.*/\1/p')
  [ "$ok" = "$N" ] || { echo "$name: only $ok of $N answered 2xx" >&2; exit 1; }
}
trace relay "$rpid" "$rp"
trace peregrine "$ppid" "$pp"

# count NAME PID PORT: the same N requests at full speed, untraced, the
# calls counted by the kernel's tracepoints (perf stat), all sides
# together: how many events one epoll_wait returns depends on speed.
count() {
  local name=$1 pid=$2 p=$3
  taskset -c 0 h2load --h1 -n 2000 -c 50 "http://127.0.0.1:$p/" >/dev/null 2>&1   # warm-up
  perf stat -x, -e 'syscalls:sys_enter_*' -p "$pid" -o "$tmp/$name.perf" &
  local st=$!
  sleep 0.5
  local out
  out=$(taskset -c 0 h2load --h1 -n "$N" -c 50 "http://127.0.0.1:$p/" 2>&1)
  sleep 0.2
  kill -INT $st; wait $st 2>/dev/null || true
  local ok
  ok=$(echo "$out" | sed -n 's/.*status codes: \([0-9]*\) 2xx.*/\1/p')
  [ "$ok" = "$N" ] || { echo "$name: only $ok of $N answered 2xx" >&2; exit 1; }
}
count relay "$rpid" "$rp"
count peregrine "$ppid" "$pp"

python3 - "$N" "$tmp" relay peregrine <<'EOF'
import collections, re, sys
n, tmp, names = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
# the descriptor a call acts on: its first argument, epoll_ctl's third
line_re = re.compile(r"^\d+\s+[\d:.]+\s+(?:<\.\.\. )?(\w+)(?:\(| resumed>)(.*)$")
def side_of(call, args, up, clients):
    if call in ("epoll_wait", "epoll_pwait", "epoll_pwait2", "futex", "clock_gettime", "statx", "madvise",
                "mmap", "munmap", "brk", "getrandom", "sched_yield", "rt_sigprocmask"):
        return "loop"
    m = re.match(r"(\d+)(?:, (\w+), (\d+))?", args)
    if not m:
        return "other"
    fd = m.group(3) if call == "epoll_ctl" else m.group(1)
    if fd in up:
        return "upstream"
    if call in ("accept4", "accept"):
        return "client"
    return "client" if fd in clients else "other"
tables = {}
for name in names:
    up = set(open(f"{tmp}/{name}.upfds").read().split())
    clients = set()
    counts = collections.Counter()
    pending = {}
    for line in open(f"{tmp}/{name}.trace"):
        if "<unfinished ...>" in line:
            m = line_re.match(line)
            if m:
                pending[line.split()[0]] = m.group(2)
            # counted when it resumes, with the arguments it began with
            continue
        m = line_re.match(line)
        if not m:
            continue
        call, rest = m.group(1), m.group(2)
        if " resumed>" in line:
            rest = pending.pop(line.split()[0], "") + rest
        r = re.search(r"= (\d+)", rest)
        if r and call in ("accept4", "accept"):
            clients.add(r.group(1))
        elif r and call == "socket":
            # relay.c opens its upstream sockets during the run (one per
            # client); they are closed by its end, so not in .upfds
            up.add(r.group(1))
        counts[(call, side_of(call, rest, up, clients))] += 1
    tables[name] = counts
keys = sorted(set().union(*tables.values()), key=lambda k: (k[1], k[0]))
print(f"system calls per proxied GET (strace -f, h2load --h1 -n {n} -c 50, after 2,000)")
print(f"{'side':9s} {'call':14s} " + " ".join(f"{nm:>10s}" for nm in names))
for side in ("client", "upstream", "loop", "other"):
    for k in [k for k in keys if k[1] == side]:
        print(f"{side:9s} {k[0]:14s} " + " ".join(f"{tables[nm][k] / n:10.3f}" for nm in names))
print(f"{'total':24s} " + " ".join(f"{sum(tables[nm].values()) / n:10.3f}" for nm in names))
EOF

python3 - "$N" "$tmp" relay peregrine <<'EOF'
import collections, sys
n, tmp, names = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
tables = {}
for name in names:
    c = collections.Counter()
    for line in open(f"{tmp}/{name}.perf"):
        f = line.strip().split(",")
        if len(f) > 2 and f[2].startswith("syscalls:sys_enter_") and f[0].isdigit():
            c[f[2][len("syscalls:sys_enter_"):]] += int(f[0])
    tables[name] = c
keys = sorted(k for k in set().union(*tables.values()) if any(tables[nm][k] / n >= 0.001 for nm in names))
print()
print(f"the same, untraced (perf stat -e 'syscalls:sys_enter_*', h2load --h1 -n {n} -c 50, after 2,000)")
print(f"{'call':24s} " + " ".join(f"{nm:>10s}" for nm in names))
for k in keys:
    print(f"{k:24s} " + " ".join(f"{tables[nm][k] / n:10.3f}" for nm in names))
print(f"{'total':24s} " + " ".join(f"{sum(tables[nm].values()) / n:10.3f}" for nm in names))
EOF
