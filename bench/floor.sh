#!/bin/bash
# bench/floor.sh ROUNDS [PEREGRINE]: what a file's answer costs at the least,
# beside what `peregrine serve DIR` and nginx spend on it.
# For a 17-byte, a 4 KiB and a 64 KiB file, per round, server CPU µs per
# request (user + system ticks from /proc/PID/stat over `wrk -t1 -c50 -d4s`,
# server and wrk both on CPU 0, as bench/ab-cpu.sh) of:
#   floor      bench/limit/limit.c answering every request with Peregrine's
#              own answer to that file, byte for byte (captured first): for
#              17 B and 4 KiB the whole answer from memory in one send
#              (`limit --response`), for 64 KiB the head with MSG_MORE and
#              the body with sendfile (`limit --head --sendfile`), the
#              calls Peregrine makes. It parses nothing: what is left is
#              the kernel's cost of those bytes and calls.
#   peregrine  `PEREGRINE serve DIR --workers 1`
#   nginx      bench/peers/nginx/files.conf.in (sendfile, open_file_cache)
# Rounds interleave the three; take medians. The ratios peregrine/nginx and
# floor/nginx say how far a target "≤ x × nginx" is from what the kernel
# alone costs.
# Then the same for the archive's 17-byte answer against limit's hello (the
# reference of the archive targets): limit, limit --response with the
# archive's answer (captured from `PEREGRINE serve x.prg`), and the archive,
# at c50 and with 16 pipelined GETs per write (bench/wrk/pipeline.lua).
# Example: bench/floor.sh 3 target/release/peregrine
set -euo pipefail
# Run as root, `peregrine serve` stays root only when told (older builds
# ignore the variable).
export PEREGRINE_ALLOW_ROOT=1
R=${1:-3}
BIN=${2:-target/release/peregrine}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
gcc -O2 -o "$tmp/limit" "$here/limit/limit.c"
nginx=$(command -v nginx || echo /usr/sbin/nginx)
mkdir -p "$tmp/root"
head -c 17 /dev/zero | tr '\0' 'a' > "$tmp/root/17.txt"
head -c 4096 /dev/zero | tr '\0' 'b' > "$tmp/root/4k.txt"
head -c 65536 /dev/zero | tr '\0' 'c' > "$tmp/root/64k.txt"
hz=$(getconf CLK_TCK)
port() { python3 "$here/lib/free_port.py"; }

# PID of a started server; waits until it answers
start() { # PORT ARGV...
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

measure() { # PID PORT PATH [wrk script args...] -> µs/req
  local pid=$1 p=$2 path=$3 t0 t1 out req
  shift 3
  # a cheap refusal (403, 404) would measure nothing: every server must
  # answer 200 before it is timed
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p$path")
  if [ "$code" != 200 ]; then
    echo "server on port $p answered $code for $path, not 200" >&2
    exit 1
  fi
  local script=() pipe=()
  [ $# -gt 0 ] && script=(-s "$here/wrk/pipeline.lua") && pipe=(-- "$@")
  taskset -c 0 wrk -t1 -c50 -d1s "${script[@]}" "http://127.0.0.1:$p$path" "${pipe[@]}" >/dev/null 2>&1
  t0=$(awk '{print $14+$15}' "/proc/$pid/stat")
  out=$(taskset -c 0 wrk -t1 -c50 -d4s "${script[@]}" "http://127.0.0.1:$p$path" "${pipe[@]}" 2>&1)
  t1=$(awk '{print $14+$15}' "/proc/$pid/stat")
  req=$(echo "$out" | awk '/requests in/ {print $1}')
  python3 -c "print(round(($t1-$t0)*1e6/$hz/$req,3))"
}

# Peregrine's answers, captured once (head and body split at the blank line)
p=$(port)
pid=$(start "$p" "$BIN" serve "$tmp/root" --bind "127.0.0.1:$p" --workers 1)
for f in 17.txt 4k.txt 64k.txt; do
  python3 - "$p" "$f" "$tmp" <<'PY'
import socket, sys
port, name, tmp = int(sys.argv[1]), sys.argv[2], sys.argv[3]
s = socket.create_connection(("127.0.0.1", port))
s.sendall(f"GET /{name} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
buf = b""
while b"\r\n\r\n" not in buf:
    buf += s.recv(65536)
head, body = buf.split(b"\r\n\r\n", 1)
length = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0])
while len(body) < length:
    body += s.recv(65536)
open(f"{tmp}/{name}.head", "wb").write(head + b"\r\n\r\n")
open(f"{tmp}/{name}.whole", "wb").write(head + b"\r\n\r\n" + body)
PY
done
kill "$pid"; wait "$pid" 2>/dev/null || true
mkdir -p "$tmp/one" && cp "$tmp/root/17.txt" "$tmp/one/"
"$BIN" pack "$tmp/one" -o "$tmp/x.prg" >/dev/null 2>&1
p=$(port)
pid=$(start "$p" "$BIN" serve "$tmp/x.prg" --bind "127.0.0.1:$p" --workers 1)
curl -s -i -o "$tmp/archive.whole" "http://127.0.0.1:$p/17.txt"
kill "$pid"; wait "$pid" 2>/dev/null || true

echo "round size floor peregrine nginx (server CPU µs/req)"
for r in $(seq "$R"); do
  for f in 17.txt 4k.txt 64k.txt; do
    p=$(port)
    if [ "$f" = 64k.txt ]; then
      pid=$(start "$p" "$tmp/limit" "$p" --head "$tmp/$f.head" --sendfile "$tmp/root/$f")
    else
      pid=$(start "$p" "$tmp/limit" "$p" --response "$tmp/$f.whole")
    fi
    fl=$(measure "$pid" "$p" "/$f"); kill "$pid"; wait "$pid" 2>/dev/null || true
    p=$(port)
    pid=$(start "$p" "$BIN" serve "$tmp/root" --bind "127.0.0.1:$p" --workers 1)
    pg=$(measure "$pid" "$p" "/$f"); kill "$pid"; wait "$pid" 2>/dev/null || true
    p=$(port); mkdir -p "$tmp/ngx$p"
    sed -e "s|@TMP@|$tmp/ngx$p|g" -e "s|@PORT@|$p|g" -e "s|@ROOT@|$tmp/root|g" \
      "$here/peers/nginx/files.conf.in" > "$tmp/ngx$p/nginx.conf"
    pid=$(start "$p" "$nginx" -p "$tmp/ngx$p" -c "$tmp/ngx$p/nginx.conf" -e "$tmp/ngx$p/error.log")
    ng=$(measure "$pid" "$p" "/$f"); kill "$pid"; wait "$pid" 2>/dev/null || true
    echo "$r $f $fl $pg $ng  peregrine/nginx $(python3 -c "print(round($pg/$ng,3))") floor/nginx $(python3 -c "print(round($fl/$ng,3))")"
  done
done

echo "round mode limit-hello floor-archive-answer archive (server CPU µs/req)"
for r in $(seq "$R"); do
  for mode in c50 pipe16; do
    args=(); [ "$mode" = pipe16 ] && args=(16)
    p=$(port); pid=$(start "$p" "$tmp/limit" "$p")
    lh=$(measure "$pid" "$p" /17.txt "${args[@]}"); kill "$pid"; wait "$pid" 2>/dev/null || true
    p=$(port); pid=$(start "$p" "$tmp/limit" "$p" --response "$tmp/archive.whole")
    fl=$(measure "$pid" "$p" /17.txt "${args[@]}"); kill "$pid"; wait "$pid" 2>/dev/null || true
    p=$(port); pid=$(start "$p" "$BIN" serve "$tmp/x.prg" --bind "127.0.0.1:$p" --workers 1)
    ar=$(measure "$pid" "$p" /17.txt "${args[@]}"); kill "$pid"; wait "$pid" 2>/dev/null || true
    echo "$r $mode $lh $fl $ar  archive/limit $(python3 -c "print(round($ar/$lh,3))") floor/limit $(python3 -c "print(round($fl/$lh,3))")"
  done
done
