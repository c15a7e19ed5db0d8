#!/bin/bash
# bench/callgrind.sh BIN OUT c50|pipe16 [SERVER ARGS...]: user-space
# instructions per request of one worker, callgrind over a fixed replay.
# Starts `BIN ARGS --bind 127.0.0.1:PORT --workers 1` (ARGS default:
# `hello`) under callgrind, warms it with 2,500 requests from h2load (50
# connections; `pipe16`: 16 requests in flight each), zeroes the counts,
# sends 10,000 more, dumps, and prints the instructions per request. The
# profile is OUT.PID.N: read it with `callgrind_annotate --auto=yes
# --inclusive=no` (or `--inclusive=yes`).
#   PATHX=17.txt          the path asked for (default /)
#   FIELDS="accept-encoding: gzip, deflate, br, zstd"
#                         request fields added to every request, one per
#                         line (a browser's request: FIELDS="$(cat
#                         bench/lib/browser-fields.txt)", Chrome's 12)
#   CG_ARGS="--cache-sim=yes [--D1=4096,4,64 --LL=65536,8,64]"
#                         more valgrind options: cache misses per function
#                         (callgrind does not see the kernel's use of the
#                         caches, so a small simulated D1 stands in)
# BIN `limit` replays the same against bench/limit/limit.c (built as bench
# builds it, gcc -O2, with -g for line tables; ARGS are not used): the
# floor's counts beside ours.
# bench/instructions.sh runs the same replay over the gated scenarios.
# Example: PATHX=index.html bench/callgrind.sh target/release/peregrine /tmp/a c50 serve site.prg
set -u
H=()
while IFS= read -r field; do
  [ -n "$field" ] && H+=(-H "$field")
done <<< "${FIELDS:-}"
bin=$1 out=$2 mode=$3
shift 3
[ $# -eq 0 ] && set -- hello
here=$(cd "$(dirname "$0")" && pwd)
port=$(python3 "$here/lib/free_port.py")
case $bin in
  limit)
    bin=$(mktemp)
    trap 'rm -f "$bin"' EXIT
    gcc -O2 -g -o "$bin" "$here/limit/limit.c"
    set -- "$bin" $port
    ;;
  *)
    case $bin in */*) ;; *) bin=./$bin ;; esac
    set -- "$bin" "$@" --bind 127.0.0.1:$port --workers 1
    ;;
esac
rm -f "$out".*
# shellcheck disable=SC2086 # CG_ARGS is a list of options
PEREGRINE_ALLOW_ROOT=1 valgrind --tool=callgrind ${CG_ARGS:-} --callgrind-out-file="$out.%p" \
  "$@" > /dev/null 2>&1 &
V=$!
for _ in $(seq 100); do sleep 0.2; curl -s -o /dev/null http://127.0.0.1:$port/ && break; done
m=""
[ "$mode" = pipe16 ] && m="-m 16"
# shellcheck disable=SC2086
h2load --h1 -n 2500 -c 50 $m "${H[@]}" "http://127.0.0.1:$port/${PATHX:-}" > /dev/null
callgrind_control -z $V > /dev/null
# shellcheck disable=SC2086
h2load --h1 -n 10000 -c 50 $m "${H[@]}" "http://127.0.0.1:$port/${PATHX:-}" | grep "status codes"
callgrind_control -d $V > /dev/null
sleep 0.5
kill $V
wait $V 2>/dev/null
f=$(ls "$out".*.[0-9]* | head -1)
ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$f")
echo "$out $((ir / 10000)) Ir/request"
