#!/bin/bash
# bench/proxy-sched.sh [BIN] [ROUNDS] [SECS] [SPIN...]: where a proxy's kernel
# time goes on one CPU (issue 26). Peregrine's proxy makes the floor's system
# calls (bench/proxy-syscalls.sh) yet costs more kernel time per request than
# bench/limit/relay.c; this measures, per request under `wrk -t1 -c50`, what
# differs: the proxy's user and system CPU (/proc/PID/stat, all threads), its
# voluntary and involuntary context switches (/proc/PID/task/*/status), the
# wake-ups and switches made in its own context and its epoll_waits (perf
# stat tracepoints), limit's and wrk's CPU, and "foreign %", the CPU's busy
# time not spent by the test's processes (another engineer's load: a row
# with more than a few % is not clean; with PROXY_CPU, of both CPUs).
# The control: relay.c built with -DRELAY_SPIN, the same relay plus SPIN
# iterations of a loop after each recv, i.e. user-space time and nothing
# else. A relay-spin whose user time matches Peregrine's tells how much kernel
# time the user time alone brings on one CPU.
# Every process on CPU $CPU (default 0, as bench/run's proxy scenarios), or,
# with PROXY_CPU set, the proxies on that CPU and limit and wrk on $CPU;
# the proxies measured alternately, ROUNDS times (default 3), SECS seconds
# each (default 3); SPIN defaults to "150 300 600".
# Example: bench/proxy-sched.sh target/release/peregrine 3 3 150 300 600
set -euo pipefail
export PEREGRINE_ALLOW_ROOT=1
BIN=${1:-target/release/peregrine}
ROUNDS=${2:-3}
SECS=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
SPINS=${*:-150 300 600}
CPU=${CPU:-0}
PCPU=${PROXY_CPU:-$CPU}
here=$(cd "$(dirname "$0")" && pwd)
for tool in perf wrk gcc python3 curl; do
  command -v $tool >/dev/null || { echo "proxy-sched.sh: $tool is missing" >&2; exit 1; }
done
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
gcc -O2 -o "$tmp/limit" "$here/limit/limit.c"
gcc -O2 -o "$tmp/relay" "$here/limit/relay.c"
gcc -O2 -DRELAY_SPIN -o "$tmp/relay-spin" "$here/limit/relay.c"
port() { python3 "$here/lib/free_port.py"; }
up=$(port)
taskset -c "$CPU" "$tmp/limit" "$up" >/dev/null 2>&1 & pids+=($!); lpid=$!
sleep 0.3
declare -A PORT PID
names=(relay)
PORT[relay]=$(port); taskset -c "$PCPU" "$tmp/relay" "${PORT[relay]}" "$up" >/dev/null 2>&1 & PID[relay]=$!; pids+=($!)
for s in $SPINS; do
  n=spin$s; names+=("$n")
  PORT[$n]=$(port); taskset -c "$PCPU" "$tmp/relay-spin" "${PORT[$n]}" "$up" "$s" >/dev/null 2>&1 & PID[$n]=$!; pids+=($!)
done
mkdir -p "$tmp/empty"
names+=(peregrine)
PORT[peregrine]=$(port)
taskset -c "$PCPU" "$BIN" serve "$tmp/empty" --bind "127.0.0.1:${PORT[peregrine]}" --workers 1 \
  --proxy "/=http://127.0.0.1:$up" >"$tmp/peregrine.log" 2>&1 & PID[peregrine]=$!; pids+=($!)
sleep 1
for n in "${names[@]}"; do
  body=$(curl -s "http://127.0.0.1:${PORT[$n]}/")
  [ "$body" = "Hello, World!" ] || { echo "$n answered ${body:-nothing}" >&2; exit 1; }
done
echo "# $(date -u +%FT%TZ), CPU $CPU (the proxies on $PCPU), $ROUNDS rounds of wrk -t1 -c50 -d${SECS}s, $("$BIN" --version | sed -n 2p)"
echo "# per request: CPU in us (user, sys, total: the proxy's; limit's; wrk's), counts (vol, invol: context switches"
echo "# of the proxy's threads; waking, switch: sched tracepoints in its context; epollw: its epoll_waits)"
printf "%-10s %5s %8s %6s %6s %6s %6s %6s %6s %6s %6s %6s %6s %8s\n" \
  name round req user sys total vol invol waking switch limit wrk epollw foreign%
for r in $(seq "$ROUNDS"); do
  for n in "${names[@]}"; do
    pid=${PID[$n]}; p=${PORT[$n]}
    taskset -c "$CPU" wrk -t1 -c50 -d1s "http://127.0.0.1:$p/" >/dev/null 2>&1
    before="$(awk '{print $14, $15}' /proc/$pid/stat) $(cat /proc/$pid/task/*/status | awk '/^voluntary_ctxt/ {v+=$2} /^nonvoluntary_ctxt/ {n+=$2} END {print v, n}') $(awk '{print $14+$15}' /proc/$lpid/stat) $(awk -v c="cpu$CPU" -v d="cpu$PCPU" '$1==c || ($1==d && c!=d) {t+=$2+$3+$4+$7+$8} END {print t}' /proc/stat)"
    perf stat -x, -e sched:sched_waking,sched:sched_switch,syscalls:sys_enter_epoll_wait -p "$pid" -o "$tmp/tp" &
    st=$!
    out=$(perf stat -x, -e task-clock -o "$tmp/wrk" -- taskset -c "$CPU" wrk -t1 -c50 -d"${SECS}"s "http://127.0.0.1:$p/" 2>&1)
    kill -INT $st; wait $st 2>/dev/null || true
    after="$(awk '{print $14, $15}' /proc/$pid/stat) $(cat /proc/$pid/task/*/status | awk '/^voluntary_ctxt/ {v+=$2} /^nonvoluntary_ctxt/ {n+=$2} END {print v, n}') $(awk '{print $14+$15}' /proc/$lpid/stat) $(awk -v c="cpu$CPU" -v d="cpu$PCPU" '$1==c || ($1==d && c!=d) {t+=$2+$3+$4+$7+$8} END {print t}' /proc/stat)"
    req=$(echo "$out" | awk '/requests in/ {print $1}')
    python3 - "$n" "$r" "$req" "$(getconf CLK_TCK)" "$tmp" $before $after <<'PY'
import sys
n, r, req, hz, tmp = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
u0, s0, v0, n0, l0, c0, u1, s1, v1, n1, l1, c1 = map(int, sys.argv[6:18])
tp = {}
for line in open(f"{tmp}/tp"):
    f = line.strip().split(",")
    if len(f) > 2 and f[0].isdigit():
        tp[f[2].split(":")[-1]] = int(f[0])
wrk_ms = [float(l.split(",")[0]) for l in open(f"{tmp}/wrk") if "task-clock" in l][0]
us = 1e6 / hz  # one tick
foreign = (c1 - c0) - (u1 - u0) - (s1 - s0) - (l1 - l0) - wrk_ms * hz / 1e3
print(f"{n:10s} {r:>5s} {req:8d} {(u1-u0)*us/req:6.2f} {(s1-s0)*us/req:6.2f} {((u1-u0)+(s1-s0))*us/req:6.2f} "
      f"{(v1-v0)/req:6.3f} {(n1-n0)/req:6.3f} {tp.get('sched_waking', 0)/req:6.3f} {tp.get('sched_switch', 0)/req:6.3f} "
      f"{(l1-l0)*us/req:6.2f} {wrk_ms*1e3/req:6.2f} {tp.get('sys_enter_epoll_wait', 0)/req:6.3f} {100*foreign/max(c1-c0, 1):8.1f}")
PY
  done
done
