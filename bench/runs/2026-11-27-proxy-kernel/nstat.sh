#!/bin/bash
# nstat.sh BIN [CPU]: TCP counters per request (nstat deltas, system-wide: run it on a quiet machine)
# over one `wrk -t1 -c50 -d3s` through relay and through Peregrine (BIN), 2 rounds; and the socket
# options, epoll registrations and send flags each proxy uses (strace of 200 requests on 2 connections).
set -euo pipefail
export PEREGRINE_ALLOW_ROOT=1
BIN=$1; CPU=${2:-0}
here=$(cd "$(dirname "$0")" && pwd); bench=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
gcc -O2 -o "$tmp/limit" "$bench/limit/limit.c"
gcc -O2 -o "$tmp/relay" "$bench/limit/relay.c"
taskset -c "$CPU" "$tmp/limit" 19950 >/dev/null 2>&1 & pids+=($!)
sleep 0.3
taskset -c "$CPU" "$tmp/relay" 19951 19950 >/dev/null 2>&1 & pids+=($!); declare -A PID=([relay]=$!)
mkdir -p "$tmp/empty"
taskset -c "$CPU" "$BIN" serve "$tmp/empty" --bind 127.0.0.1:19952 --workers 1 --proxy /=http://127.0.0.1:19950 \
  >/dev/null 2>&1 & pids+=($!); PID[peregrine]=$!
declare -A PORT=([relay]=19951 [peregrine]=19952)
sleep 1
C="TcpInSegs TcpOutSegs TcpExtTCPPureAcks TcpExtDelayedACKs TcpExtTCPHPAcks TcpExtTCPOrigDataSent IpExtInOctets"
printf "%-10s %5s %8s" name round req; for c in $C; do printf " %12s" "${c#TcpExt}"; done; echo
for r in 1 2; do
  for n in relay peregrine; do
    taskset -c "$CPU" wrk -t1 -c50 -d1s "http://127.0.0.1:${PORT[$n]}/" >/dev/null
    nstat -n >/dev/null
    req=$(taskset -c "$CPU" wrk -t1 -c50 -d3s "http://127.0.0.1:${PORT[$n]}/" | awk '/requests in/ {print $1}')
    nstat -z $C >"$tmp/nstat"
    nstat -n >/dev/null
    printf "%-10s %5s %8s" $n $r $req
    for c in $C; do printf " %12.3f" "$(awk -v c=$c -v q=$req '$1==c {print $2/q}' "$tmp/nstat")"; done; echo
  done
done
for n in relay peregrine; do
  strace -f -qq -p "${PID[$n]}" -e trace=setsockopt,epoll_ctl,sendto,sendmsg,writev,recvfrom -o "$tmp/$n.st" & s=$!
  sleep 0.5
  taskset -c "$CPU" h2load --h1 -n 200 -c 2 "http://127.0.0.1:${PORT[$n]}/" >/dev/null 2>&1
  sleep 0.3; kill -INT $s; wait $s 2>/dev/null || true
  echo "== $n: the calls of 200 requests on 2 connections (strace), numbers folded"
  awk '{$1=""; print}' "$tmp/$n.st" | sed -E 's/"[^"]*"(\.\.\.)?/"..."/; s/[0-9]+/N/g' | sort | uniq -c | sort -rn
done
