#!/bin/sh
# prof.sh K SIZE SECONDS OUT: perf record of ws_echo (pinned CPU 0) under wsload (CPU 0)
set -eu
K=$1; S=$2; D=$3; OUT=$4
B=/work/wt-wsb/bench/build/ws
P=$(python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])")
taskset -c 0 /work/tgt-wsb/release/examples/ws_echo --bind 127.0.0.1:$P >/dev/null &
SP=$!
sleep 0.5
python3 /work/wt-wsb/bench/ws/check.py $P
taskset -c 0 $B/wsload --port $P --pid $SP -c 100 -k $K -s $S -d $((D+3)) -w 1 > $OUT.wsload &
LP=$!
sleep 2
perf record -F 1000 --call-graph dwarf,8192 -p $SP -o $OUT.data -- sleep $D 2> $OUT.perf.log
wait $LP
kill $SP
cat $OUT.wsload
