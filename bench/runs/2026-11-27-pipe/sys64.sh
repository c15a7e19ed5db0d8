#!/bin/bash
# sys64.sh BIN N: strace -c per request for a 64 KiB file, peregrine serve DIR vs limit --head --sendfile
set -euo pipefail
export PEREGRINE_ALLOW_ROOT=1
BIN=$1 N=$2
here=/work/wt-pipe/bench
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"' EXIT
gcc -O2 -o "$tmp/limit" "$here/limit/limit.c"
mkdir -p "$tmp/root"; head -c 65536 /dev/zero | tr '\0' 'c' > "$tmp/root/64k.txt"
port() { echo $((20000 + RANDOM % 9000)); }
wait_up() { for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$1/$2" && return; sleep 0.1; done; exit 1; }
p=$(port); taskset -c 0 "$BIN" serve "$tmp/root" --bind "127.0.0.1:$p" --workers 1 >/dev/null 2>&1 & pids+=($!); pp=$p; ppid=$!
wait_up $pp 64k.txt
curl -s -i "http://127.0.0.1:$pp/64k.txt" > "$tmp/whole"
python3 - "$tmp" <<'PY'
import sys; t=sys.argv[1]; b=open(t+'/whole','rb').read(); i=b.index(b'\r\n\r\n')+4
open(t+'/head','wb').write(b[:i]); print("head bytes", i, "body", len(b)-i)
PY
lp=$(port); taskset -c 0 "$tmp/limit" $lp --head "$tmp/head" --sendfile "$tmp/root/64k.txt" >/dev/null 2>&1 & pids+=($!); lpid=$!
wait_up $lp 64k.txt
count() {
  local pid=$1 p=$2
  h2load --h1 -n 2000 -c 50 "http://127.0.0.1:$p/64k.txt" >/dev/null 2>&1
  strace -c -f -p "$pid" -o "$tmp/strace.$pid" 2>/dev/null & local st=$!
  sleep 0.5
  h2load --h1 -n "$N" -c 50 "http://127.0.0.1:$p/64k.txt" | grep -E 'status codes' 
  sleep 0.2; kill -INT $st; wait $st 2>/dev/null || true
  cat "$tmp/strace.$pid"
}
echo "== peregrine"; count $ppid $pp
echo "== limit"; count $lpid $lp
