#!/bin/bash
# ustime.sh BIN GROUP MODE SECONDS [ROUNDS]: server utime and stime µs per connection (one worker, CPU 0; client CPU 1)
set -euo pipefail
bin=$1 group=$2 mode=$3 secs=$4 rounds=${5:-1}
C=/work/tg-tlshs/release/tls_handshakes
port=$((20000 + RANDOM % 20000))
PEREGRINE_ALLOW_ROOT=1 taskset -c 0 "$bin" serve /tmp/tlshs/root --bind 127.0.0.1:$port --workers 1 \
  --tls-cert /tmp/tlshs/certs/ecdsa.pem --tls-key /tmp/tlshs/certs/ecdsa.key >/dev/null 2>&1 &
pid=$!
trap "kill $pid 2>/dev/null || true" EXIT
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
taskset -c 1 $C 127.0.0.1:$port /tmp/tlshs/certs/ca.pem $group $mode 1 >/dev/null
tck=$(getconf CLK_TCK)
for r in $(seq $rounds); do
  read u0 s0 < <(awk '{print $14, $15}' /proc/$pid/stat)
  out=$(taskset -c 1 $C 127.0.0.1:$port /tmp/tlshs/certs/ca.pem $group $mode $secs)
  read u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
  n=$(sed -E 's/.*connections=([0-9]+).*/\1/' <<<"$out")
  python3 -c "u=($u1-$u0)*1e6/$tck/$n; s=($s1-$s0)*1e6/$tck/$n; print(f'$(basename $bin) $group $mode n=$n user={u:.1f} sys={s:.1f} total={u+s:.1f} us/conn (ticks u={$u1-$u0} s={$s1-$s0})')"
done
