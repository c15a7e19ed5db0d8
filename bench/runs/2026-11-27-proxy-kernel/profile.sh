#!/bin/bash
# profile.sh BIN [CPU]: kernel and user profiles per request of relay, relay-spin 300 and Peregrine (BIN),
# each with `perf record -e cpu-clock -g -p PID` over exactly one `wrk -t1 -c50 -d4s` run (after a 1 s
# warm-up), 2 rounds; profile.py prints µs per request by object and by symbol (round 1/round 2).
# perf -p switches its per-task context at every context switch of the task, which inflates
# finish_task_switch; compare the same symbol across proxies, not as an absolute.
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
taskset -c "$CPU" "$tmp/limit" 19900 >/dev/null 2>&1 & pids+=($!)
sleep 0.3
taskset -c "$CPU" "$tmp/relay" 19901 19900 >/dev/null 2>&1 & pids+=($!); declare -A PID=([relay]=$!)
taskset -c "$CPU" "$tmp/relay-spin" 19903 19900 300 >/dev/null 2>&1 & pids+=($!); PID[spin300]=$!
mkdir -p "$tmp/empty"
taskset -c "$CPU" "$BIN" serve "$tmp/empty" --bind 127.0.0.1:19902 --workers 1 --proxy /=http://127.0.0.1:19900 \
  >/dev/null 2>&1 & pids+=($!); PID[peregrine]=$!
declare -A PORT=([relay]=19901 [peregrine]=19902 [spin300]=19903)
sleep 1
for r in 1 2; do
  for n in relay spin300 peregrine; do
    taskset -c "$CPU" wrk -t1 -c50 -d1s "http://127.0.0.1:${PORT[$n]}/" >/dev/null
    perf record -q -e cpu-clock -g -p "${PID[$n]}" -o "$tmp/$r-$n.data" -- /bin/sleep 4.6 2>/dev/null & p=$!
    sleep 0.3
    taskset -c "$CPU" wrk -t1 -c50 -d4s "http://127.0.0.1:${PORT[$n]}/" | awk '/requests in/ {print $1}' >"$tmp/$r-$n.req"
    wait $p
  done
done
python3 "$here/profile.py" "$tmp" 45 relay spin300 peregrine
