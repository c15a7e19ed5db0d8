#!/bin/bash
# bench/syscalls-live.sh ROUNDS BIN...: system calls per request under full
# load, counted by perf's syscall tracepoints (no strace: strace slows the
# server, which changes how many readinesses one epoll_wait returns, so
# bench/syscalls.sh's counts are exact per request but not the batching a
# real run has). Per round, limit (bench/limit/limit.c) then each BIN's
# `hello`, one worker, server and `wrk -t1 -c50 -d4s` on CPU 0; perf stat
# attached to the server before wrk starts and stopped after it ends, so
# every request wrk counts falls in the window. Columns: epoll_wait, read
# (read+recvfrom), write (write+sendto+writev) and context switches per
# request, and the server's CPU per request (perf's task-clock, perf's own
# cost included: compare builds within one run only). Needs perf with
# tracepoints (/sys/kernel/tracing). Example:
#   bench/syscalls-live.sh 3 /tmp/base/peregrine target/release/peregrine
set -euo pipefail
export PEREGRINE_ALLOW_ROOT=1
R=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -o "$tmp/limit" "$here/limit/limit.c"
ev=syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_write,syscalls:sys_enter_sendto,syscalls:sys_enter_writev,context-switches,task-clock
printf '%-24s %8s %10s %6s %6s %6s %8s\n' build req/s epoll_wait read write cs cpu_us
for _ in $(seq "$R"); do
  for b in limit "$@"; do
    port=$(python3 "$here/lib/free_port.py")
    if [ "$b" = limit ]; then taskset -c 0 "$tmp/limit" "$port" >/dev/null 2>&1 & pid=$!
    else taskset -c 0 "$b" hello --bind "127.0.0.1:$port" --workers 1 >/dev/null 2>&1 & pid=$!; fi
    sleep 0.6
    taskset -c 0 wrk -t1 -c50 -d1s "http://127.0.0.1:$port/" >/dev/null 2>&1   # warm-up
    perf stat -x, -e "$ev" -p "$pid" -o "$tmp/stat" >/dev/null 2>&1 & sp=$!
    sleep 0.3
    taskset -c 0 wrk -t1 -c50 -d4s "http://127.0.0.1:$port/" > "$tmp/wrk" 2>&1
    sleep 0.1
    kill -INT $sp; wait $sp 2>/dev/null || true
    kill $pid; wait $pid 2>/dev/null || true
    python3 - "$b" "$tmp/wrk" "$tmp/stat" <<'PY'
import sys, re
name, wrk, stat = sys.argv[1:]
w = open(wrk).read()
n = int(re.search(r'(\d+) requests in', w).group(1))
rps = float(re.search(r'Requests/sec:\s+([\d.]+)', w).group(1))
d = {}
for l in open(stat):
    p = l.strip().split(',')
    if len(p) > 2 and p[0].replace('.', '').isdigit():
        d[p[2].split(':')[-1]] = float(p[0])
g = lambda *k: sum(d.get(x, 0) for x in k) / n
label = '/'.join(name.split('/')[-2:]) if name != 'limit' else 'limit'
print(f"{label:<24} {rps:8.0f} {g('sys_enter_epoll_wait','sys_enter_epoll_pwait'):10.3f} "
      f"{g('sys_enter_read','sys_enter_recvfrom'):6.3f} {g('sys_enter_write','sys_enter_sendto','sys_enter_writev'):6.3f} "
      f"{g('context-switches'):6.3f} {d.get('task-clock', 0) * 1000 / n:8.3f}")
PY
  done
done
