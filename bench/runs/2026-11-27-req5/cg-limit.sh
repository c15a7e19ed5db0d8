#!/bin/bash
# cg-limit.sh OUT c50|pipe16: bench/callgrind.sh's replay (h2load, 2,500
# warm-up requests, 10,000 counted), for bench/limit/limit.c built as bench
# builds it (gcc -O2; -g only adds line tables). CG_ARGS as callgrind.sh's.
set -u
out=$1 mode=$2
here=$(cd "$(dirname "$0")" && pwd)
limit=$(mktemp)
gcc -O2 -g -o "$limit" "$here/../../limit/limit.c"
port=$((21000 + RANDOM % 5000))
rm -f "$out".*
valgrind --tool=callgrind ${CG_ARGS:-} --callgrind-out-file="$out.%p" "$limit" $port > /dev/null 2>&1 &
V=$!
for _ in $(seq 100); do sleep 0.2; curl -s -o /dev/null http://127.0.0.1:$port/ && break; done
m=""
[ "$mode" = pipe16 ] && m="-m 16"
h2load --h1 -n 2500 -c 50 $m "http://127.0.0.1:$port/" > /dev/null
callgrind_control -z $V > /dev/null
h2load --h1 -n 10000 -c 50 $m "http://127.0.0.1:$port/" | grep "status codes"
callgrind_control -d $V > /dev/null
sleep 0.5
kill $V
wait $V 2>/dev/null
f=$(ls "$out".*.[0-9]* | head -1)
ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$f")
echo "$out $((ir / 10000)) Ir/request"
rm -f "$limit"
