#!/bin/bash
# /tmp/bolt-train.sh BIN: run BIN through hello/DIR/archive/h2c/proxy load (for BOLT instrumentation)
set -u
B=$1
W=/tmp/bolt-work; rm -rf $W; mkdir -p $W/tree
printf '0123456789abcdef\n' > $W/tree/17.txt
head -c 4096 /dev/urandom | base64 -w0 | head -c 4096 > $W/tree/4k.txt
$B pack /work/main/site -o $W/site.prg >/dev/null 2>&1
gcc -O2 -o $W/limit /work/main/bench/limit/limit.c
export PEREGRINE_ALLOW_ROOT=1
run() { # port mode path args...
  local port=$1 mode=$2 path=$3; shift 3
  $B "$@" --bind 127.0.0.1:$port --workers 1 > $W/log.$port 2>&1 &
  local p=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  for m in $mode; do
    case $m in
      c50) h2load --h1 -n 60000 -c 50 http://127.0.0.1:$port$path | grep "status codes";;
      pipe16) h2load --h1 -n 150000 -c 50 -m 16 http://127.0.0.1:$port$path | grep "status codes";;
      h2c) h2load -n 30000 -c 50 -m 10 http://127.0.0.1:$port$path | grep "status codes";;
    esac
  done
  kill -TERM $p; wait $p
}
run 31001 "c50 pipe16 h2c" / hello
run 31002 "c50 pipe16" /17.txt serve $W/tree
run 31003 "c50" /4k.txt serve $W/tree
run 31004 "c50 pipe16" / serve $W/site.prg
$W/limit 31010 > /dev/null 2>&1 &
L=$!
sleep 0.3
mkdir -p $W/empty
run 31005 "c50" / serve $W/empty --proxy /=http://127.0.0.1:31010
kill $L
