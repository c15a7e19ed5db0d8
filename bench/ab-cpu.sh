#!/bin/bash
# bench/ab-cpu.sh BIN PORT ARGS...: server CPU µs per request of
# `BIN ARGS --bind 127.0.0.1:PORT --workers 1` (pinned to CPU 0) under
# `wrk -t1 -c50 -d4s` on CPU 0, plain and with 16 pipelined GETs
# (bench/wrk/pipeline.lua). CPU is user + system from /proc/PID/stat over the
# requests wrk counted. For A/B runs of two builds: alternate them, take
# medians. Example: bench/ab-cpu.sh target/release/peregrine 19102 hello
# URL_PATH (default /) names the path asked, e.g. for an archive:
# URL_PATH=/17.txt bench/ab-cpu.sh target/release/peregrine 19103 serve site.prg
set -euo pipefail
# Run as root, `peregrine serve` stays root only when told (older builds
# ignore the variable).
export PEREGRINE_ALLOW_ROOT=1
BIN=$1; PORT=$2; shift 2
URL_PATH=${URL_PATH:-/}
here=$(cd "$(dirname "$0")" && pwd)
taskset -c 0 "$BIN" "$@" --bind "127.0.0.1:$PORT" --workers 1 >/dev/null 2>&1 &
PID=$!
sleep 0.6
hz=$(getconf CLK_TCK)
tick() { awk '{print $14+$15}' "/proc/$PID/stat"; }
for mode in c50 pipe16; do
  args=()
  [ "$mode" = pipe16 ] && args=(-s "$here/wrk/pipeline.lua")
  t0=$(tick)
  if [ "$mode" = pipe16 ]; then
    out=$(taskset -c 0 wrk -t1 -c50 -d4s "${args[@]}" "http://127.0.0.1:$PORT$URL_PATH" -- 16 2>&1)
  else
    out=$(taskset -c 0 wrk -t1 -c50 -d4s "http://127.0.0.1:$PORT$URL_PATH" 2>&1)
  fi
  t1=$(tick)
  req=$(echo "$out" | awk '/requests in/ {print $1}')
  echo "$mode $(python3 -c "print(round(($t1-$t0)*1e6/$hz/$req,3))") us/req  $req req"
done
kill "$PID"; wait "$PID" 2>/dev/null || true
