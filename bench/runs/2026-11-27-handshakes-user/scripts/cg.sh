#!/bin/bash
# cg.sh BIN GROUP MODE SECONDS OUTDIR [CERT]: Ir per connection of BIN serve under callgrind
set -euo pipefail
bin=$1 group=$2 mode=$3 secs=$4 out=$5 cert=${6:-ecdsa}
C=/work/tg-tlshs/release/tls_handshakes
mkdir -p "$out"; rm -f "$out"/cg.*
port=$((20000 + RANDOM % 20000))
PEREGRINE_ALLOW_ROOT=1 valgrind --tool=callgrind --callgrind-out-file="$out/cg.%p" \
  "$bin" serve /tmp/tlshs/root --bind 127.0.0.1:$port --workers 1 \
  --tls-cert /tmp/tlshs/certs/$cert.pem --tls-key /tmp/tlshs/certs/$cert.key >"$out/log" 2>&1 &
vpid=$!
for _ in $(seq 300); do grep -q -i serving "$out/log" 2>/dev/null && break; sleep 0.2; done
$C 127.0.0.1:$port /tmp/tlshs/certs/ca.pem $group $mode 5 > "$out/warm.txt"
callgrind_control -z $vpid >/dev/null 2>&1
$C 127.0.0.1:$port /tmp/tlshs/certs/ca.pem $group $mode $secs > "$out/client.txt"
callgrind_control -d $vpid >/dev/null 2>&1
sleep 0.5
kill $vpid; wait $vpid 2>/dev/null || true
ir=$(grep -h "^summary:" "$out"/cg.*.[0-9]* | awk "{print \$2}")
n=$(sed -E 's/.*connections=([0-9]+).*/\1/' "$out/client.txt")
echo "$(cat $out/client.txt) Ir=$ir Ir_per_conn=$(python3 -c "print(round($ir / $n))")"
