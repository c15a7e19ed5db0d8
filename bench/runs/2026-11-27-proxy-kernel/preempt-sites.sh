#!/bin/bash
# preempt-sites.sh BIN [CPU]: where each proxy leaves the CPU under wrk -t1 -c50, and to whom: its
# sched:sched_switch events with call chains (perf record -g -p PID, 2 s), summarised by
# preempt-sites.py as (state, next task, the kernel path, the user frame); per request.
# relay, relay-spin 300 and Peregrine (BIN), every process on CPU (default 0).
set -euo pipefail
export PEREGRINE_ALLOW_ROOT=1
BIN=$1; CPU=${2:-0}
here=$(cd "$(dirname "$0")" && pwd); bench=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
gcc -O2 -o "$tmp/limit" "$bench/limit/limit.c"
gcc -O2 -o "$tmp/relay" "$bench/limit/relay.c"
gcc -O2 -DRELAY_SPIN -o "$tmp/relay-spin" "$bench/limit/relay.c"
taskset -c "$CPU" "$tmp/limit" 19800 >/dev/null 2>&1 & pids+=($!)
sleep 0.3
taskset -c "$CPU" "$tmp/relay" 19801 19800 >/dev/null 2>&1 & pids+=($!); declare -A PID=([relay]=$!)
taskset -c "$CPU" "$tmp/relay-spin" 19803 19800 300 >/dev/null 2>&1 & pids+=($!); PID[spin300]=$!
mkdir -p "$tmp/empty"
taskset -c "$CPU" "$BIN" serve "$tmp/empty" --bind 127.0.0.1:19802 --workers 1 --proxy /=http://127.0.0.1:19800 \
  >/dev/null 2>&1 & pids+=($!); PID[peregrine]=$!
declare -A PORT=([relay]=19801 [peregrine]=19802 [spin300]=19803)
sleep 1
for n in relay spin300 peregrine; do
  taskset -c "$CPU" wrk -t1 -c50 -d1s "http://127.0.0.1:${PORT[$n]}/" >/dev/null
  taskset -c "$CPU" wrk -t1 -c50 -d3s "http://127.0.0.1:${PORT[$n]}/" >"$tmp/wrk" & w=$!
  sleep 0.5
  # the requests served in the 2 s recorded: the proxy's recvfrom calls on client sockets are not
  # separable here, so count wrk's rate over its 3 s and take 2 s of it
  perf record -q -e sched:sched_switch -g -p "${PID[$n]}" -o "$tmp/$n.data" -- /bin/sleep 2 2>/dev/null
  wait $w
  req=$(awk '/requests in/ {printf "%d", $1 * 2 / $4}' "$tmp/wrk")
  echo "== $n: ~$req requests in the 2 s recorded ($(grep 'requests in' "$tmp/wrk"))"
  perf script -i "$tmp/$n.data" 2>/dev/null | python3 "$here/preempt-sites.py" "$req"
done
