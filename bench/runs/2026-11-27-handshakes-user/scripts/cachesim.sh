#!/bin/bash
# cachesim.sh: callgrind --cache-sim=yes, events per connection: base peregrine vs floor server thread (mlkem full)
set -euo pipefail
C=/tmp/tlshs/certs; F=/work/tg-tlshs/release/tls_floor; d=/tmp/tlshs/cs; mkdir -p $d; rm -f $d/*
for n in 40 120; do
  valgrind --tool=callgrind --cache-sim=yes --separate-threads=yes --callgrind-out-file=$d/floor.$n $F $C/ca.pem $C/ecdsa.pem $C/ecdsa.key mlkem full $n client-thread >/dev/null 2>&1
done
python3 - $d <<'PY'
import sys
d = sys.argv[1]
def ev(f):
    ev = names = None
    for l in open(f):
        if l.startswith("events:"): names = l.split()[1:]
        if l.startswith("summary:"): ev = list(map(int, l.split()[1:]))
    return dict(zip(names, ev))
a, b = ev(f"{d}/floor.40-01"), ev(f"{d}/floor.120-01")
print("floor per handshake:", {k: round((b[k] - a[k]) / 400) for k in a})
PY
port=$((20000 + RANDOM % 20000))
PEREGRINE_ALLOW_ROOT=1 valgrind --tool=callgrind --cache-sim=yes --callgrind-out-file=$d/p.%p /work/tg-tlshs/base-peregrine serve /tmp/tlshs/root --bind 127.0.0.1:$port --workers 1 --tls-cert $C/ecdsa.pem --tls-key $C/ecdsa.key > $d/log 2>&1 &
vpid=$!
for _ in $(seq 300); do grep -q -i serving $d/log 2>/dev/null && break; sleep 0.2; done
/work/tg-tlshs/release/tls_handshakes 127.0.0.1:$port $C/ca.pem mlkem full 5 >/dev/null
callgrind_control -z $vpid >/dev/null 2>&1
out=$(/work/tg-tlshs/release/tls_handshakes 127.0.0.1:$port $C/ca.pem mlkem full 20)
callgrind_control -d $vpid >/dev/null 2>&1; sleep 0.5; kill $vpid; wait $vpid 2>/dev/null || true
n=$(sed -E 's/.*connections=([0-9]+) .*/\1/' <<<"$out")
python3 - $d $n <<'PY'
import sys, glob
d, n = sys.argv[1], int(sys.argv[2])
f = [x for x in glob.glob(f"{d}/p.*.*") if x.rsplit(".", 1)[1].isdigit()][0]
for l in open(f):
    if l.startswith("events:"): names = l.split()[1:]
    if l.startswith("summary:"): ev = list(map(int, l.split()[1:]))
print(f"peregrine per connection (n={n}):", {k: round(v / n) for k, v in zip(names, ev)})
PY
