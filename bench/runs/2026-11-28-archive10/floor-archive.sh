#!/bin/bash
# floor-archive.sh ROUNDS BASE NEW: bench/floor.sh's archive rows alone, for
# two builds in the same rounds: per round and mode (c50, pipe16), server
# CPU µs per request (user + system ticks over `wrk -t1 -c50 -d4s`, server
# and wrk on CPU 0, as floor.sh measures) of limit.c answering the
# archive's exact 17-byte answer (`limit --response`, captured from BASE),
# then BASE and NEW serving the same archive (packed by BASE), GET /17.txt.
# The same functions as floor.sh, with its file and nginx rows left out.
set -euo pipefail
export PEREGRINE_ALLOW_ROOT=1
R=$1 BASE=$2 NEW=$3
here=/work/wt-archive10/bench
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
gcc -O2 -o "$tmp/limit" "$here/limit/limit.c"
hz=$(getconf CLK_TCK)
port() { python3 "$here/lib/free_port.py"; }
start() {
  local p=$1; shift
  taskset -c 0 "$@" >/dev/null 2>&1 &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 50); do
    curl -s -o /dev/null "http://127.0.0.1:$p/17.txt" && break
    sleep 0.1
  done
  echo "$pid"
}
measure() {
  local pid=$1 p=$2 path=$3 t0 t1 out req
  shift 3
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p$path")
  [ "$code" = 200 ] || { echo "port $p answered $code" >&2; exit 1; }
  local script=() pipe=()
  [ $# -gt 0 ] && script=(-s "$here/wrk/pipeline.lua") && pipe=(-- "$@")
  taskset -c 0 wrk -t1 -c50 -d1s "${script[@]}" "http://127.0.0.1:$p$path" "${pipe[@]}" >/dev/null 2>&1
  t0=$(awk '{print $14+$15}' "/proc/$pid/stat")
  out=$(taskset -c 0 wrk -t1 -c50 -d4s "${script[@]}" "http://127.0.0.1:$p$path" "${pipe[@]}" 2>&1)
  t1=$(awk '{print $14+$15}' "/proc/$pid/stat")
  req=$(echo "$out" | awk '/requests in/ {print $1}')
  python3 -c "print(round(($t1-$t0)*1e6/$hz/$req,3))"
}
mkdir -p "$tmp/one"
head -c 17 /dev/zero | tr '\0' 'a' > "$tmp/one/17.txt"
"$BASE" pack "$tmp/one" -o "$tmp/x.prg" >/dev/null 2>&1
p=$(port)
pid=$(start "$p" "$BASE" serve "$tmp/x.prg" --bind "127.0.0.1:$p" --workers 1)
curl -s -i -o "$tmp/archive.whole" "http://127.0.0.1:$p/17.txt"
kill "$pid"; wait "$pid" 2>/dev/null || true
echo "round mode floor base new (server CPU µs/req)  base/floor new/floor"
for r in $(seq "$R"); do
  for mode in c50 pipe16; do
    args=(); [ "$mode" = pipe16 ] && args=(16)
    p=$(port); pid=$(start "$p" "$tmp/limit" "$p" --response "$tmp/archive.whole")
    fl=$(measure "$pid" "$p" /17.txt "${args[@]}"); kill "$pid"; wait "$pid" 2>/dev/null || true
    # base and new alternate which goes first, round by round
    if [ $((r % 2)) = 1 ]; then order=("$BASE" "$NEW"); else order=("$NEW" "$BASE"); fi
    for b in "${order[@]}"; do
      p=$(port); pid=$(start "$p" "$b" serve "$tmp/x.prg" --bind "127.0.0.1:$p" --workers 1)
      v=$(measure "$pid" "$p" /17.txt "${args[@]}"); kill "$pid"; wait "$pid" 2>/dev/null || true
      if [ "$b" = "$BASE" ]; then ba=$v; else nw=$v; fi
    done
    echo "$r $mode $fl $ba $nw  $(python3 -c "print(round($ba/$fl,3), round($nw/$fl,3))")"
  done
done
