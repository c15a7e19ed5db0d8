#!/bin/bash
# bench/proxy-cpu.sh [ROUNDS] [BIN]: reverse-proxy CPU µs per request, each
# proxy in front of bench/limit/limit.c (the upstream), under
# `wrk -t1 -c50 -d4s` for small answers. Every process is pinned to CPU 0
# (the upstream, the proxy and wrk), as bench/ab-cpu.sh does; the proxy's
# CPU is user + system from /proc/PID/stat over the requests wrk counted.
# The proxies, measured alternately, ROUNDS times (default 3), medians
# printed last:
#   relay     bench/limit/relay.c, the floor: one recv and one send each way
#   peregrine `peregrine serve EMPTY --proxy /=http://127.0.0.1:UP`
#   nginx     proxy_pass to an upstream block with keepalive 64 (if installed)
#   haproxy   http-reuse always (if installed)
# Every proxy's answer is checked to be limit's 200 "Hello, World!" first.
# Evidence, not a test: nothing here fails on a number.
set -euo pipefail
ROUNDS=${1:-3}
BIN=${2:-target/release/peregrine}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
export PEREGRINE_ALLOW_ROOT=1
UP=19400
gcc -O2 -o "$work/limit" "$here/limit/limit.c"
gcc -O2 -o "$work/relay" "$here/limit/relay.c"
taskset -c 0 "$work/limit" $UP & pids+=($!)
sleep 0.3

declare -A PORT PID
start() { # name port cmd...
  local name=$1 port=$2; shift 2
  taskset -c 0 "$@" >"$work/$name.log" 2>&1 & PID[$name]=$!; pids+=($!)
  PORT[$name]=$port
}
start relay 19401 "$work/relay" 19401 $UP
mkdir -p "$work/empty"
start peregrine 19402 "$BIN" serve "$work/empty" --bind 127.0.0.1:19402 --workers 1 --proxy "/=http://127.0.0.1:$UP"
if command -v nginx >/dev/null; then
  cat >"$work/nginx.conf" <<EOF
worker_processes 1;
daemon off;
error_log $work/nginx-error.log;
pid $work/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  upstream up { server 127.0.0.1:$UP; keepalive 64; }
  server {
    listen 127.0.0.1:19403;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
EOF
  start nginx 19403 nginx -c "$work/nginx.conf"
fi
if command -v haproxy >/dev/null; then
  cat >"$work/haproxy.cfg" <<EOF
global
  nbthread 1
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  http-reuse always
frontend f
  bind 127.0.0.1:19404
  default_backend b
backend b
  server s1 127.0.0.1:$UP
EOF
  start haproxy 19404 haproxy -f "$work/haproxy.cfg"
fi
sleep 1
# nginx's master forks the worker that serves: measure the worker.
if [ -n "${PID[nginx]:-}" ]; then PID[nginx]=$(pgrep -P "${PID[nginx]}" | head -1); fi

names=()
for name in relay peregrine nginx haproxy; do
  [ -n "${PORT[$name]:-}" ] || continue
  body=$(curl -s "http://127.0.0.1:${PORT[$name]}/")
  if [ "$body" != "Hello, World!" ]; then
    echo "$name answered ${body:-nothing}: skipped" >&2
    continue
  fi
  names+=("$name")
done

hz=$(getconf CLK_TCK)
declare -A RES
for r in $(seq "$ROUNDS"); do
  for name in "${names[@]}"; do
    pid=${PID[$name]}
    t0=$(awk '{print $14+$15}' "/proc/$pid/stat")
    out=$(taskset -c 0 wrk -t1 -c50 -d4s "http://127.0.0.1:${PORT[$name]}/" 2>&1)
    t1=$(awk '{print $14+$15}' "/proc/$pid/stat")
    req=$(echo "$out" | awk '/requests in/ {print $1}')
    us=$(python3 -c "print(round(($t1-$t0)*1e6/$hz/$req,2))")
    echo "round $r  $name  $us us/req  $req req"
    RES[$name]="${RES[$name]:-} $us"
  done
done
echo "medians (us/req), and the ratio to relay:"
relay_median=$(python3 -c "import statistics,sys; print(statistics.median(map(float,sys.argv[1:])))" ${RES[relay]})
for name in "${names[@]}"; do
  python3 -c "import statistics,sys; m=statistics.median(map(float,sys.argv[2:])); print(f'{sys.argv[1]:10s} {m:6.2f}  x{m/$relay_median:.2f}')" "$name" ${RES[$name]}
done
