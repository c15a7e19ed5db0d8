#!/bin/bash
# bench/ab-user.sh ROUNDS MODES BIN...: A/B of builds' server CPU per request
# and its user-space part, in interleaved rounds with `limit` in each.
# MODES: c50, pipe16 or both (c50,pipe16). Per round, mode and binary, for
# hello (GET /) and an archive (GET /17.txt of ARCHIVE, default a 17-byte
# file packed by the first binary into $TMPDIR):
#   CPU ns/req  = the server's threads' run time (/proc/PID/task/*/schedstat)
#                 over `wrk -t1 -c50 -d4s` (pipe16: bench/wrk/pipeline.lua, 16
#                 GETs per write), server and wrk on CPU 0;
#   user share  = samples outside the kernel in `perf record -F 2999` over a
#                 second, 3 s run (perf's own cost is not in the CPU figure);
#   user ns/req = CPU x share.
# One line per run; take medians over rounds (never compare across runs made
# at different times). Example:
#   bench/ab-user.sh 4 pipe16 /tmp/before/peregrine target/release/peregrine
set -euo pipefail
# Run as root, `peregrine serve` stays root only when told (older builds
# ignore the variable).
export PEREGRINE_ALLOW_ROOT=1
R=$1; MODES=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
tmp=${TMPDIR:-/tmp}/ab-user.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -o "$tmp/limit" "$here/limit/limit.c"
if [ -z "${ARCHIVE:-}" ]; then
  mkdir -p "$tmp/site" && printf '12345678901234567' > "$tmp/site/17.txt"
  "$1" pack "$tmp/site" -o "$tmp/x.prg" >/dev/null 2>&1
  ARCHIVE=$tmp/x.prg
fi
run() { # BIN|limit KIND MODE NAME
  local b=$1 kind=$2 mode=$3 name=$4 port path=/ pid
  port=$(python3 "$here/lib/free_port.py")
  if [ "$b" = limit ]; then taskset -c 0 "$tmp/limit" $port >/dev/null 2>&1 & pid=$!
  elif [ "$kind" = hello ]; then taskset -c 0 "$b" hello --bind 127.0.0.1:$port --workers 1 >/dev/null 2>&1 & pid=$!
  else taskset -c 0 "$b" serve "$ARCHIVE" --bind 127.0.0.1:$port --workers 1 >/dev/null 2>&1 & pid=$!; path=/17.txt; fi
  sleep 0.6
  local w=() x=()
  if [ "$mode" = pipe16 ]; then w=(-s "$here/wrk/pipeline.lua"); x=(-- 16); fi
  cpu() { cat /proc/$pid/task/*/schedstat | awk '{s+=$1} END {print s}'; }
  local s0 s1 req share
  s0=$(cpu)
  taskset -c 0 wrk -t1 -c50 -d4s "${w[@]}" "http://127.0.0.1:$port$path" "${x[@]}" > "$tmp/wrk" 2>&1
  s1=$(cpu)
  taskset -c 0 wrk -t1 -c50 -d3s "${w[@]}" "http://127.0.0.1:$port$path" "${x[@]}" > /dev/null 2>&1 &
  local wp=$!
  sleep 0.3
  perf record -q -F 2999 -o "$tmp/perf.data" -p $pid -- sleep 2 >/dev/null 2>&1 || true
  wait $wp || true
  kill $pid; wait $pid 2>/dev/null || true
  req=$(awk '/requests in/ {print $1}' "$tmp/wrk")
  share=$(perf report -i "$tmp/perf.data" --stdio --sort dso 2>/dev/null |
    awk '/%/ && $1 ~ /%$/ {p=$1; sub("%","",p); if ($2=="[kernel.kallsyms]") k+=p; else u+=p} END {printf "%.4f", u/(u+k)}')
  python3 -c "c=($s1-$s0)/$req; print('$name $kind $mode', round(c/1000,4), 'us/req', round(c*$share,1), 'user-ns', $share, 'share', $req, 'req')"
}
for _ in $(seq "$R"); do
  for mode in ${MODES//,/ }; do
    run limit hello "$mode" limit
    for b in "$@"; do
      run "$b" hello "$mode" "$(basename "$(dirname "$b")")/$(basename "$b")"
      run "$b" arch "$mode" "$(basename "$(dirname "$b")")/$(basename "$b")"
    done
  done
done
