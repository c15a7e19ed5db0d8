#!/bin/bash
# bench/syscalls.sh [PEREGRINE] [N]: system calls per answered request (issue
# 29's second host-independent count, beside bench/instructions.sh's
# instructions), by `strace -c -f` attached to the server for an h2load run of
# exactly N requests (HTTP/1.1: --h1), against limit (bench/limit/limit.c)
# in the same shape. Rows: hello at 50 connections and with 16 pipelined
# requests per connection (-m 16), limit beside them sending the same
# bytes; an archive answering a 17-byte entry, likewise. One worker each.
# strace slows the server, so only the counts mean anything, not the time.
# Example: bench/syscalls.sh target/release/peregrine 20000
set -euo pipefail
export PEREGRINE_ALLOW_ROOT=1
BIN=${1:-target/release/peregrine}
N=${2:-20000}
here=$(cd "$(dirname "$0")" && pwd)
for tool in strace h2load gcc; do
  command -v $tool >/dev/null || { echo "syscalls.sh: $tool is missing" >&2; exit 1; }
done
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
gcc -O2 -o "$tmp/limit" "$here/limit/limit.c"
mkdir -p "$tmp/site"
head -c 17 /dev/zero | tr '\0' 'a' > "$tmp/site/17.txt"
"$BIN" pack "$tmp/site" -o "$tmp/site.prg" >/dev/null 2>&1
port() { python3 "$here/lib/free_port.py"; }
wait_up() { for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$1/$2" && return; sleep 0.1; done; echo "no answer on $1" >&2; exit 1; }

# count PID PORT PATH M: system calls per request over N requests
count() {
  local pid=$1 p=$2 path=$3 m=$4
  h2load --h1 -n 2000 -c 50 -m "$m" "http://127.0.0.1:$p/$path" >/dev/null 2>&1   # warm-up
  strace -c -f -p "$pid" -o "$tmp/strace.txt" 2>/dev/null &
  local st=$!
  sleep 0.5
  local out
  out=$(h2load --h1 -n "$N" -c 50 -m "$m" "http://127.0.0.1:$p/$path" 2>&1)
  sleep 0.2
  kill -INT $st; wait $st 2>/dev/null || true
  local ok
  ok=$(echo "$out" | sed -n 's/.*status codes: \([0-9]*\) 2xx.*/\1/p')
  [ "$ok" = "$N" ] || { echo "only $ok of $N answered 2xx at $p/$path" >&2; exit 1; }
  awk -v n="$N" '/total$/ {printf "%.2f", $(NF-2)/n}' "$tmp/strace.txt"
}

p=$(port); taskset -c 0 "$BIN" hello --bind "127.0.0.1:$p" --workers 1 >/dev/null 2>&1 & pids+=($!); hp=$p; hpid=$!
wait_up $hp ""
curl -s -i -o "$tmp/hello.resp" "http://127.0.0.1:$hp/"
p=$(port); taskset -c 0 "$BIN" serve "$tmp/site.prg" --bind "127.0.0.1:$p" --workers 1 >/dev/null 2>&1 & pids+=($!); ap=$p; apid=$!
wait_up $ap 17.txt
curl -s -i -o "$tmp/archive.resp" "http://127.0.0.1:$ap/17.txt"
# limit answers with Peregrine's own bytes (captured above).
lp=$(port); taskset -c 0 "$tmp/limit" $lp --response "$tmp/hello.resp" >/dev/null 2>&1 & pids+=($!); lpid=$!
lap=$(port); taskset -c 0 "$tmp/limit" $lap --response "$tmp/archive.resp" >/dev/null 2>&1 & pids+=($!); lapid=$!
wait_up $lp ""; wait_up $lap ""
echo "system calls per answered request (strace -c -f, h2load --h1 -n $N -c 50 [-m 16])"
printf '%-16s %10s %10s %8s\n' scenario peregrine limit ratio
row() { # NAME PID PORT LIMIT_PID LIMIT_PORT PATH M
  local a b
  a=$(count "$2" "$3" "$6" "$7"); b=$(count "$4" "$5" "$6" "$7")
  printf '%-16s %10s %10s %8s\n' "$1" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f", a/b}')"
}
row hello-c50 $hpid $hp $lpid $lp "" 1
row hello-pipe16 $hpid $hp $lpid $lp "" 16
row archive-c50 $apid $ap $lapid $lap 17.txt 1
row archive-pipe16 $apid $ap $lapid $lap 17.txt 16
