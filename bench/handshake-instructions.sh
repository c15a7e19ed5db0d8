#!/bin/bash
# bench/handshake-instructions.sh CLIENT_DIR BIN [BIN...]: user-space
# instructions (valgrind --tool=callgrind, Ir) per TLS connection of each
# build, beside the floor's per handshake (issue 29's "full handshake ≤
# 1.15 × the TLS floor", counted so that the host's noise cannot decide).
#
# CLIENT_DIR holds test-support's `tls_handshakes` and `tls_floor`
# (`cargo build --release -p test-support --bin tls_handshakes --bin tls_floor`).
# Each build: `serve` with one worker under callgrind (ECDSA P-256 leaf
# from a throwaway CA, the bench/handshakes fixture), a 5 s warm-up of
# tls_handshakes, counters zeroed, RUN_SECONDS of tls_handshakes (each
# connection: a handshake offering one group, `GET /` with `Connection:
# close`, the answer read to its end), counters dumped: Ir over the
# client's count of connections. Every thread of the server is counted.
# The floor: tls_floor's `client-thread` mode under callgrind with
# --separate-threads=yes, the server's thread only (rustls on aws-lc-rs,
# the same key and groups, in memory, tickets sent as Peregrine sends
# them), N=40 and N=120 handshakes per batch: the difference over the
# 400 handshakes between them, so that start-up (certificate loading, the
# DRBG's first seeding) cancels out. Callgrind sees user space only:
# pair this with bench/handshakes for the kernel's part and the time.
#
# TLS_GROUPS (default "mlkem x25519"), TLS_MODES (default "full";
# "full resumed" adds resumed handshakes), CERT (ecdsa or rsa2048),
# RUN_SECONDS (default 20). (Not GROUPS or SECONDS: bash's own.)
# Example, base against new:
#   bench/handshake-instructions.sh target/release /tmp/base/peregrine target/release/peregrine
set -euo pipefail
export PEREGRINE_ALLOW_ROOT=1
[ $# -ge 2 ] || { echo "usage: $0 CLIENT_DIR BIN [BIN...]" >&2; exit 2; }
client_dir=$1
shift
TLS_GROUPS=${TLS_GROUPS:-mlkem x25519}
TLS_MODES=${TLS_MODES:-full}
CERT=${CERT:-ecdsa}
RUN_SECONDS=${RUN_SECONDS:-20}
for tool in valgrind callgrind_control openssl; do
  command -v $tool >/dev/null || { echo "$0: $tool is missing" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ca_key=$work/ca.key
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$ca_key" \
  -out "$work/ca.pem" -days 2 -subj "/CN=bench CA" >/dev/null 2>&1
printf 'basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$work/ext.cnf"
case $CERT in
  ecdsa) newkey=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1) ;;
  rsa2048) newkey=(-newkey rsa:2048) ;;
  *) echo "CERT: ecdsa or rsa2048" >&2; exit 2 ;;
esac
openssl req "${newkey[@]}" -nodes -keyout "$work/leaf.key" -out "$work/leaf.csr" -subj /CN=localhost >/dev/null 2>&1
openssl x509 -req -in "$work/leaf.csr" -CA "$work/ca.pem" -CAkey "$ca_key" -CAcreateserial \
  -out "$work/leaf.pem" -days 2 -sha256 -extfile "$work/ext.cnf" >/dev/null 2>&1
mkdir -p "$work/root"
printf 'hello\n' >"$work/root/index.html"

# floor GROUP MODE: the server thread's Ir per handshake.
floor() {
  local group=$1 mode=$2 n ir=()
  for n in 40 120; do
    local out=$work/floor.$n
    rm -f "$out"*
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out" \
      "$client_dir/tls_floor" "$work/ca.pem" "$work/leaf.pem" "$work/leaf.key" "$group" "$mode" $n client-thread \
      >"$out.log" 2>&1 || { echo "tls_floor $group $mode $n failed: $(tail -3 "$out.log")" >&2; exit 1; }
    # The main thread (-01) is the server's.
    ir+=("$(awk '/^summary:/ {print $2}' "$out-01")")
  done
  python3 -c "print(round((${ir[1]} - ${ir[0]}) / (5 * 80)))"
}

# server BIN GROUP MODE: Ir per connection and the client's line.
server() {
  local bin=$1 group=$2 mode=$3
  local port out
  port=$(python3 "$(dirname "$0")/lib/free_port.py")
  out=$(mktemp -d -p "$work")
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.%p" \
    "$bin" serve "$work/root" --bind "127.0.0.1:$port" --workers 1 \
    --tls-cert "$work/leaf.pem" --tls-key "$work/leaf.key" >"$out/log" 2>&1 &
  vpid=$!
  # (This runs in a subshell of its own: a failing client stops it, and
  # the server under valgrind must not outlive it.)
  trap 'kill "${vpid:-}" 2>/dev/null || true' EXIT
  for _ in $(seq 300); do
    grep -q -i "serving" "$out/log" 2>/dev/null && break
    sleep 0.2
  done
  "$client_dir/tls_handshakes" "127.0.0.1:$port" "$work/ca.pem" "$group" "$mode" 5 >/dev/null
  callgrind_control -z "$vpid" >/dev/null 2>&1
  local line
  line=$("$client_dir/tls_handshakes" "127.0.0.1:$port" "$work/ca.pem" "$group" "$mode" "$RUN_SECONDS")
  callgrind_control -d "$vpid" >/dev/null 2>&1
  sleep 0.5
  kill "$vpid"
  wait "$vpid" 2>/dev/null || true
  # The dump taken after the run is the file with a part number.
  local ir n
  ir=$(cat "$out"/cg.*.[0-9]* | awk '/^summary:/ {print $2}')
  n=$(sed -E 's/.*connections=([0-9]+) .*/\1/' <<<"$line")
  echo "$(python3 -c "print(round($ir / $n))") $n"
}

printf '%-8s %-8s %-7s %12s' cert group mode "floor Ir"
for bin in "$@"; do printf ' %26s' "$("$bin" --version | awk '/^revision/ {print $2}')"; done
echo
for group in $TLS_GROUPS; do
  for mode in $TLS_MODES; do
    f=$(floor "$group" "$mode")
    printf '%-8s %-8s %-7s %12s' "$CERT" "$group" "$mode" "$f"
    for bin in "$@"; do
      read -r ir n < <(server "$bin" "$group" "$mode")
      printf ' %26s' "$ir ($(python3 -c "print(f'{$ir / $f:.3f}')") ×, n=$n)"
    done
    echo
  done
done
