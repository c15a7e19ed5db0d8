#!/bin/bash
# sc.sh BIN GROUP SECONDS: system calls (strace -c -f) and the worker's voluntary context switches per connection
set -euo pipefail
bin=$1 group=$2 secs=$3
C=/work/tg-tlshs/release/tls_handshakes
port=$((20000 + RANDOM % 20000))
PEREGRINE_ALLOW_ROOT=1 "$bin" serve /tmp/tlshs/root --bind 127.0.0.1:$port --workers 1 \
  --tls-cert /tmp/tlshs/certs/ecdsa.pem --tls-key /tmp/tlshs/certs/ecdsa.key >/dev/null 2>&1 &
pid=$!
trap "kill $pid 2>/dev/null || true" EXIT
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
$C 127.0.0.1:$port /tmp/tlshs/certs/ca.pem $group full 1 >/dev/null
vcs() { cat /proc/$pid/task/*/status | awk '/^voluntary_ctxt_switches/ {s+=$2} END {print s}'; }
v0=$(vcs)
out=$($C 127.0.0.1:$port /tmp/tlshs/certs/ca.pem $group full $secs)
v1=$(vcs)
n=$(sed -E 's/.*connections=([0-9]+) .*/\1/' <<<"$out")
echo "$(basename $bin) ${EXP_NOLINGER:+nolinger }n=$n voluntary context switches per connection: $(python3 -c "print(round(($v1-$v0)/$n, 2))")"
strace -c -f -p $pid -o /tmp/tlshs/strace-c.$$ &
spid=$!
sleep 0.5
out=$($C 127.0.0.1:$port /tmp/tlshs/certs/ca.pem $group full $secs)
kill -INT $spid; wait $spid 2>/dev/null || true
n=$(sed -E 's/.*connections=([0-9]+) .*/\1/' <<<"$out")
python3 - /tmp/tlshs/strace-c.$$ $n <<'PY'
import sys, re
n = int(sys.argv[2]); tot = 0; rows = []
for line in open(sys.argv[1]):
    m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(\d+)?\s*(\w+)$", line)
    if m and m.group(3) not in ("total",):
        calls = int(m.group(1)); errs = int(m.group(2) or 0); rows.append((m.group(3), calls, errs))
per = {k: (c / n, e / n) for k, c, e in rows if k not in ("futex", "restart_syscall", "clock_nanosleep", "statx")}
print(f"strace n={n}: " + ", ".join(f"{k} {c:.2f}" + (f" ({e:.2f} err)" if e else "") for k, (c, e) in sorted(per.items(), key=lambda x: -x[1][0])) + f"; all {sum(c for c, e in per.values()):.2f}")
PY
rm -f /tmp/tlshs/strace-c.$$
