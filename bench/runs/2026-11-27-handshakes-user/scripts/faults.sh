#!/bin/bash
# faults.sh BIN GROUP MODE SECONDS: minor faults and context switches per connection of the server
set -euo pipefail
bin=$1 group=$2 mode=$3 secs=$4
C=/work/tg-tlshs/release/tls_handshakes
port=$((20000 + RANDOM % 20000))
PEREGRINE_ALLOW_ROOT=1 taskset -c 0 "$bin" serve /tmp/tlshs/root --bind 127.0.0.1:$port --workers 1 \
  --tls-cert /tmp/tlshs/certs/ecdsa.pem --tls-key /tmp/tlshs/certs/ecdsa.key >/dev/null 2>&1 &
pid=$!
trap "kill $pid 2>/dev/null || true" EXIT
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
taskset -c 1 $C 127.0.0.1:$port /tmp/tlshs/certs/ca.pem $group $mode 1 >/dev/null
f0=$(awk '{print $10}' /proc/$pid/stat)
out=$(taskset -c 1 $C 127.0.0.1:$port /tmp/tlshs/certs/ca.pem $group $mode $secs)
f1=$(awk '{print $10}' /proc/$pid/stat)
n=$(sed -E 's/.*connections=([0-9]+).*/\1/' <<<"$out")
grep -h ctxt /proc/$pid/task/*/status | head -4
python3 -c "print('minflt per conn', ($f1-$f0)/$n, 'n=$n')"
