#!/bin/bash
# cg.sh BIN OUT MODE(c50|pipe16) [ARGS...]: callgrind of BIN ARGS under h2load, N=10000
bin=$1 out=$2 mode=$3; shift 3
[ $# -eq 0 ] && set -- hello
port=$((21000 + RANDOM % 5000))
rm -f $out.*
PEREGRINE_ALLOW_ROOT=1 valgrind --tool=callgrind --callgrind-out-file=$out.%p $bin "$@" --bind 127.0.0.1:$port --workers 1 > /dev/null 2>&1 &
V=$!
for i in $(seq 100); do sleep 0.2; curl -s -o /dev/null http://127.0.0.1:$port/ && break; done
m=""; [ $mode = pipe16 ] && m="-m 16"
h2load --h1 -n 2500 -c 50 $m http://127.0.0.1:$port/${PATHX:-} > /dev/null
callgrind_control -z $V > /dev/null
h2load --h1 -n 10000 -c 50 $m http://127.0.0.1:$port/${PATHX:-} | grep "status codes"
callgrind_control -d $V > /dev/null; sleep 0.5; kill $V; wait $V 2>/dev/null
f=$(ls $out.*.[0-9]* | head -1); ir=$(awk '/^(summary|totals):/ {print $2; exit}' $f); echo "$out $(python3 -c "print(round($ir/10000))") Ir/req"
