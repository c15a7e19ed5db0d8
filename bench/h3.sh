#!/usr/bin/env bash
# HTTP/3 (issue 11): Peregrine against Caddy, both from Debian-installed or
# built binaries, one worker each (Peregrine --workers 1, Caddy GOMAXPROCS=1),
# both pinned to CPU 0 and the client to CPU 1. What is measured is the
# server's CPU time (the sum of its threads' on-CPU nanoseconds from
# /proc/PID/task/*/schedstat, before and after each run), so the client's
# own speed does not enter the figures:
#   h3-f17   N requests for a 17-byte file on one connection: server CPU
#            microseconds per request;
#   h3-f4k   the same with a 4 KiB file;
#   h3-f10m  a 10 MiB file, downloaded R times: bytes per server CPU-second.
# The client is ngtcp2's gtlsclient (Debian's ngtcp2-client): one QUIC
# connection per run, as many concurrent streams as the server allows
# (100 for both), no body written to disk for the small files. It is a
# test client, not a load generator: wall times are given but they
# measure the client (Python-free, but single-threaded and verbose), not
# the servers. Nothing here is a test; no figure is asserted.
#
# Usage: bench/h3.sh [--binary PATH] [--requests N] [--repeat R]
set -euo pipefail
cd "$(dirname "$0")/.."

binary=target/release/peregrine
requests=5000
repeat=3
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) binary=$2; shift 2 ;;
        --requests) requests=$2; shift 2 ;;
        --repeat) repeat=$2; shift 2 ;;
        *) echo "usage: bench/h3.sh [--binary PATH] [--requests N] [--repeat R]" >&2; exit 2 ;;
    esac
done

need=()
command -v gtlsclient >/dev/null || need+=(ngtcp2-client)
command -v caddy >/dev/null || need+=(caddy)
command -v openssl >/dev/null || need+=(openssl)
if [ ${#need[@]} -gt 0 ]; then
    flock --wait 900 /tmp/peregrine-apt.lock sh -c \
        "apt-get -q update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends ${need[*]}"
fi
[ -x "$binary" ] || cargo build --release -p peregrine-cli

work=$(mktemp -d /tmp/peregrine-h3-bench.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
[ -n "${H3_BENCH_KEEP:-}" ] && trap - EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout "$work/key.pem" -out "$work/cert.pem" -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost 2>/dev/null
mkdir -p "$work/site"
printf 'Hello, World! h3\n' > "$work/site/f17"
head -c 4096 /dev/urandom > "$work/site/f4k"
head -c $((10 << 20)) /dev/urandom > "$work/site/f10m"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The server's CPU time so far, in nanoseconds (all its threads).
cpu_ns() {
    local sum=0 t
    for t in /proc/"$1"/task/*/schedstat; do
        sum=$((sum + $(cut -d' ' -f1 "$t")))
    done
    echo "$sum"
}

wait_udp() { # until the port answers a QUIC client
    for _ in $(seq 50); do
        if timeout 5 gtlsclient -q --exit-on-all-streams-close 127.0.0.1 "$1" "https://localhost:$1/f17" >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.2
    done
    echo "server on $1 never answered over QUIC" >&2
    exit 1
}

pport=$(free_port)
taskset -c 0 "$binary" serve "$work/site" --bind "127.0.0.1:$pport" --workers 1 --no-sandbox \
    --tls-cert "$work/cert.pem" --tls-key "$work/key.pem" 2>"$work/peregrine.log" &
pids+=($!); ppid=$!

cport=$(free_port)
cat > "$work/Caddyfile" <<CADDY
{
	admin off
	auto_https disable_redirects
	servers {
		protocols h1 h2 h3
	}
}
https://localhost:$cport {
	bind 127.0.0.1
	tls $work/cert.pem $work/key.pem
	root * $work/site
	file_server
}
CADDY
XDG_DATA_HOME=$work/caddy-data XDG_CONFIG_HOME=$work/caddy-config GOMAXPROCS=1 \
    taskset -c 0 caddy run --config "$work/Caddyfile" --adapter caddyfile 2>"$work/caddy.log" &
pids+=($!); cpid=$!

wait_udp "$pport"
wait_udp "$cport"

echo "# bench/h3.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nproc) CPUs; $("$binary" --version | head -1); $(caddy version | cut -d' ' -f1); gtlsclient (ngtcp2 $(dpkg-query -W -f='${Version}' ngtcp2-client 2>/dev/null))"
echo "# requests per small-file run: $requests; 10 MiB downloads per run: $repeat; one QUIC connection per run"
printf '%-10s %-9s %3s %12s %12s %16s\n' server scenario run "wall s" "server ms" "per unit"
run() { # server pid port scenario rep
    local name=$1 pid=$2 port=$3 scenario=$4 rep=$5 before after t0 t1 n url
    case $scenario in
        h3-f17) url=f17; n=$requests ;;
        h3-f4k) url=f4k; n=$requests ;;
        h3-f10m) url=f10m; n=$repeat ;;
    esac
    before=$(cpu_ns "$pid"); t0=$(date +%s.%N)
    if [ "$scenario" = h3-f10m ]; then
        mkdir -p "$work/dl"
        taskset -c 1 gtlsclient -q --exit-on-all-streams-close -n "$n" --download "$work/dl" \
            127.0.0.1 "$port" "https://localhost:$port/$url" >/dev/null 2>&1
        cmp -s "$work/dl/f10m" "$work/site/f10m" || { echo "$name: f10m differs" >&2; exit 1; }
    else
        taskset -c 1 gtlsclient -q --exit-on-all-streams-close -n "$n" \
            127.0.0.1 "$port" "https://localhost:$port/$url" >/dev/null 2>&1
    fi
    t1=$(date +%s.%N); after=$(cpu_ns "$pid")
    python3 - "$name" "$scenario" "$rep" "$t0" "$t1" "$before" "$after" "$n" <<'PY'
import sys
name, scenario, rep, t0, t1, before, after, n = sys.argv[1:]
wall = float(t1) - float(t0)
cpu_s = (int(after) - int(before)) / 1e9
n = int(n)
if scenario == "h3-f10m":
    unit = "%.0f MB/CPU-s" % (n * 10 * 2**20 / cpu_s / 1e6)
else:
    unit = "%.1f us/req" % (cpu_s * 1e6 / n)
print("%-10s %-9s %3s %12.2f %12.1f %16s" % (name, scenario, rep, wall, cpu_s * 1e3, unit))
PY
}
for scenario in h3-f17 h3-f4k h3-f10m; do
    for rep in 1 2 3; do
        run peregrine "$ppid" "$pport" "$scenario" "$rep"
        run caddy "$cpid" "$cport" "$scenario" "$rep"
    done
done
