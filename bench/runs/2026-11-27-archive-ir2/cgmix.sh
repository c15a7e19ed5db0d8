#!/bin/bash
# cgmix.sh BIN OUT PATHS ARGS...: as cg.sh (c50, N=10000), h2load cycling through PATHS (comma separated)
bin=$1 out=$2 paths=$3; shift 3
port=$((21000 + RANDOM % 5000))
rm -f $out.*
PEREGRINE_ALLOW_ROOT=1 valgrind --tool=callgrind --callgrind-out-file=$out.%p $bin "$@" --bind 127.0.0.1:$port --workers 1 > /dev/null 2>&1 &
V=$!
for i in $(seq 100); do sleep 0.2; curl -s -o /dev/null http://127.0.0.1:$port/ && break; done
urls=(); IFS=, read -ra ps <<< "$paths"; for p in "${ps[@]}"; do urls+=("http://127.0.0.1:$port$p"); done
h2load --h1 -n 2500 -c ${C:-50} "${urls[@]}" > /dev/null
callgrind_control -z $V > /dev/null
h2load --h1 -n 10000 -c ${C:-50} "${urls[@]}" | grep "status codes"
callgrind_control -d $V > /dev/null; sleep 0.5; kill $V; wait $V 2>/dev/null
f=$(ls $out.*.[0-9]* | head -1); ir=$(awk '/^(summary|totals):/ {print $2; exit}' $f); echo "$out $(python3 -c "print(round($ir/10000))") Ir/req"
