#!/usr/bin/env bash
# Runs `peregrine` under `strace -f` through every workload the command
# line has, sandbox on, and prints (1) the system calls made after the
# seccomp filter was installed, with counts, and (2) those the filter
# refused (EPERM) or redirected (clone3: ENOSYS). A call serving needs that
# is missing from `allowed()` in src/lib.rs shows up in (2): add it there.
#
# Usage: crates/sandbox/derive-syscalls.sh [PATH/TO/peregrine]
# Needs strace, curl, openssl; gtlsclient (Debian's ngtcp2-client) for the
# HTTP/3 workload; run as root for the `--user nobody` workload (each
# skipped otherwise, and said so). Every port is picked by the kernel.
set -euo pipefail

bin=$(realpath "${1:-target/debug/peregrine}")
site=$(realpath "$(dirname "$0")/../../site")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
cp -r "$site" site
mkdir certs logs conf archive
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout certs/key.pem -out certs/cert.pem -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost 2>/dev/null
"$bin" pack site -o site.prg 2>/dev/null
cp site.prg archive/site.prg
echo "workers = 2" > conf/peregrine.toml

# Starts the binary under strace with $@ (every address `127.0.0.1:0`: the
# kernel picks free ports, so that runs beside other servers never clash),
# waits for its start line, and sets $pid to the server's own pid (strace's
# child) and $urls to the addresses it printed, in the order given.
start() {
    strace -f -qq -o "trace.$name" "$bin" "$@" 2> "err.$name" &
    spid=$!
    for _ in $(seq 100); do grep -q "sandbox.* on http" "err.$name" 2>/dev/null && break; sleep 0.1; done
    grep -q "sandbox.* on http" "err.$name" || { cat "err.$name" >&2; exit 1; }
    pid=$(pgrep -P "$spid")
    urls=$(grep -m1 "sandbox.* on http" "err.$name" | sed -E 's/.* on //; s/, / /g')
}
# The n-th address (1-based) of the start line: `127.0.0.1:PORT`.
addr() { echo "$urls" | tr ' ' '\n' | sed -n "${1}p" | sed -E 's|^[a-z]+://||; s|/$||'; }
# The port of the n-th address.
port() { addr "$1" | sed -E 's/.*://'; }
# The metrics listener's address, from its own line.
metrics() { grep -m1 "metrics on http" "err.$name" | sed -E 's|.*http://||; s|/metrics.*||'; }
get() { curl -sk -o /dev/null "$@"; }
stop() { kill -TERM "$pid"; wait || true; }

name=hello
start hello --bind 127.0.0.1:0 --tls-cert certs/cert.pem --tls-key certs/key.pem \
    --redirect-http 127.0.0.1:0 --hsts 100 --access-log logs/access.log \
    --access-log-format json --metrics 127.0.0.1:0 --config conf/peregrine.toml
tls=$(port 1); plain=$(addr 2); m=$(metrics)
get --resolve "localhost:$tls:127.0.0.1" "https://localhost:$tls/"; get "http://$plain/x"
get "http://$m/metrics"; get "http://$m/healthz"
# HTTP/3 on the TLS port (UDP): ngtcp2's client, where it is installed
# (Debian's ngtcp2-client); else this workload is left out, said below.
if command -v gtlsclient >/dev/null; then
    timeout 20 gtlsclient -q --exit-on-all-streams-close 127.0.0.1 "$tls" \
        "https://localhost:$tls/" "https://localhost:$tls/?a" >/dev/null 2>&1 || true
    h3=yes
fi
mv logs/access.log logs/access.log.1; kill -USR1 "$pid"; sleep 0.3
get --resolve "localhost:$tls:127.0.0.1" "https://localhost:$tls/"
echo "workers = 3" > conf/peregrine.toml; kill -HUP "$pid"; sleep 0.5
get --resolve "localhost:$tls:127.0.0.1" "https://localhost:$tls/"
if [ -n "${h3:-}" ]; then
    timeout 20 gtlsclient -q --exit-on-all-streams-close 127.0.0.1 "$tls" "https://localhost:$tls/" \
        >/dev/null 2>&1 || true
fi
stop

name=dir
start serve site --bind 127.0.0.1:0 --list-dirs --access-log - --workers 2
a=$(addr 1)
get "http://$a/"; get -H 'Accept-Encoding: br, gzip' "http://$a/"
get -r 0-10,20-30 "http://$a/index.html"; get "http://$a/assets/"
get "http://$a/nope"; get "http://$a/docs"
sleep 1.2; get "http://$a/"   # revalidated after revalidate_interval
kill -HUP "$pid"; sleep 0.5; get "http://$a/index.html"
stop

name=archive
start serve archive/site.prg --bind 127.0.0.1:0 --workers 2 --metrics 127.0.0.1:0
a=$(addr 1); m=$(metrics)
get "http://$a/"; get -r 0-10 "http://$a/"
cp site.prg archive/next.prg; mv archive/next.prg archive/site.prg; sleep 0.8   # swap by rename
get "http://$a/"; get "http://$m/metrics"
kill -HUP "$pid"; sleep 0.8; get "http://$a/"
cp site.prg archive/site.prg; sleep 1.5; get "http://$a/"        # rewrite in place: the lease
stop

if [ "$(id -u)" = 0 ]; then
    name=user
    chmod 755 "$work"
    start serve site --bind 127.0.0.1:0 --user nobody --workers 2 --access-log logs/user.log
    get "http://$(addr 1)/"
    kill -USR1 "$pid"; sleep 0.3; kill -HUP "$pid"; sleep 0.5; get "http://$(addr 1)/"
    stop
fi

# Everything after the filter's installation, from every trace.
for t in trace.*; do sed -n '/SECCOMP_FILTER_FLAG_TSYNC/,$p' "$t"; done > after.txt
echo "== system calls made once sandboxed (count, name)"
grep -oE '^[0-9]+ +[a-z0-9_]+\(' after.txt | sed -E 's/^[0-9]+ +//; s/\($//' | sort | uniq -c
echo "== refused (EPERM) or redirected (ENOSYS)"
grep -E '= -1 (EPERM|ENOSYS)' after.txt | sed -E 's/^[0-9]+ +//' | cut -c1-120 | sort | uniq -c || true
[ -n "${h3:-}" ] || echo "== note: no HTTP/3 workload (gtlsclient not found: apt-get install ngtcp2-client)"
[ "$(id -u)" = 0 ] || echo "== note: no --user workload (not root)"
