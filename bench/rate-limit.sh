#!/bin/bash
# bench/rate-limit.sh [BIN]: does a route's `rate-limit` let through what it
# says at a fixed offered rate? (issue 27: "end to end, oha at a fixed rate
# accepts ±20 %"; a measurement, not a test: it depends on the clock.)
# One `serve DIR` with a route `rate-limit = { rate = "R/s", burst = B }`,
# then oha from 127.0.0.1 (one client address) at fixed rates for D
# seconds each: below R everything is accepted; above it, R per second
# plus the burst, each accepted count compared with that expectation.
# Needs oha (`cargo install oha --locked`).
set -euo pipefail
export PEREGRINE_ALLOW_ROOT=1
BIN=${1:-target/release/peregrine}
R=${R:-200}; B=${B:-20}; D=${D:-10}
OHA=${OHA:-$(command -v oha || echo ~/.cargo/bin/oha)}
[ -x "$OHA" ] || { echo "rate-limit.sh: oha is missing (cargo install oha --locked)" >&2; exit 1; }
work=$(mktemp -d)
trap 'kill $PID 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work/site/limited"
echo ok > "$work/site/limited/x.txt"
cat > "$work/peregrine.toml" <<TOML
[[site]]
names = ["localhost"]
default = true
root = "$work/site"

[[site.route]]
path = "/limited/*"
rate-limit = { rate = "$R/s", burst = $B }
TOML
port=$(python3 "$(dirname "$0")/lib/free_port.py")
"$BIN" serve --config "$work/peregrine.toml" --bind "127.0.0.1:$port" --workers 2 >"$work/log" 2>&1 &
PID=$!
for _ in $(seq 50); do grep -q serving "$work/log" 2>/dev/null && break; sleep 0.2; done
echo "rate-limit = { rate = \"$R/s\", burst = $B }; oha -c 4 -q RATE -z ${D}s --latency-correction; $("$BIN" --version | head -1)"
printf '%-12s %10s %10s %10s %8s\n' "offered/s" "sent" "200" "expected" "ratio"
for rate in $((R / 2)) $((R * 2)) $((R * 5)); do
  # A fresh bucket for each run: the previous run's client must be forgotten,
  # so wait until the bucket is full again (B / R seconds, and a margin).
  sleep $(python3 -c "print($B / $R + 1)")
  out=$("$OHA" --no-tui -c 4 -q "$rate" -z "${D}s" --latency-correction \
    "http://127.0.0.1:$port/limited/x.txt" 2>&1)
  ok=$(echo "$out" | awk '/\[200\]/ {print $2}'); ok=${ok:-0}
  limited=$(echo "$out" | awk '/\[429\]/ {print $2}'); limited=${limited:-0}
  sent=$((ok + limited))
  if [ "$rate" -le "$R" ]; then expected=$sent; else expected=$((R * D + B)); fi
  printf '%-12s %10s %10s %10s %8s\n' "$rate" "$sent" "$ok" "$expected" "$(python3 -c "print(round($ok / $expected, 3))")"
done
