#!/usr/bin/env bash
# Runs `peregrine` under `strace -f` through every workload the command
# line has, sandbox on, and prints (1) the system calls made after the
# seccomp filter was installed, with counts, and (2) those the filter
# refused (EPERM) or redirected (clone3: ENOSYS). A call serving needs that
# is missing from `allowed()` in src/lib.rs shows up in (2): add it there.
#
# Usage: crates/sandbox/derive-syscalls.sh [PATH/TO/peregrine]
# Needs strace, curl, openssl; run as root for the `--user nobody` workload
# (skipped otherwise).
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

# Starts the binary under strace with $@, waits for its start line, and
# sets $pid to the server's own pid.
start() {
    strace -f -qq -o "trace.$name" "$bin" "$@" 2> "err.$name" &
    for _ in $(seq 100); do grep -q " on http" "err.$name" 2>/dev/null && break; sleep 0.1; done
    pid=$(pgrep -n -f "^$bin $1")
}
get() { curl -sk -o /dev/null "$@"; }
stop() { kill -TERM "$pid"; wait || true; }

name=hello
start hello --bind 127.0.0.1:18443 --tls-cert certs/cert.pem --tls-key certs/key.pem \
    --redirect-http 127.0.0.1:18080 --hsts 100 --access-log logs/access.log \
    --access-log-format json --metrics 127.0.0.1:18090 --config conf/peregrine.toml
get https://localhost:18443/; get http://127.0.0.1:18080/x
get http://127.0.0.1:18090/metrics; get http://127.0.0.1:18090/healthz
mv logs/access.log logs/access.log.1; kill -USR1 "$pid"; sleep 0.3; get https://localhost:18443/
echo "workers = 3" > conf/peregrine.toml; kill -HUP "$pid"; sleep 0.5; get https://localhost:18443/
stop

name=dir
start serve site --bind 127.0.0.1:18081 --list-dirs --access-log - --workers 2
get http://127.0.0.1:18081/; get -H 'Accept-Encoding: br, gzip' http://127.0.0.1:18081/
get -r 0-10,20-30 http://127.0.0.1:18081/index.html; get http://127.0.0.1:18081/assets/
get http://127.0.0.1:18081/nope; get http://127.0.0.1:18081/docs
sleep 1.2; get http://127.0.0.1:18081/   # revalidated after revalidate_interval
kill -HUP "$pid"; sleep 0.5; get http://127.0.0.1:18081/index.html
stop

name=archive
start serve archive/site.prg --bind 127.0.0.1:18082 --workers 2 --metrics 127.0.0.1:18091
get http://127.0.0.1:18082/; get -r 0-10 http://127.0.0.1:18082/
cp site.prg archive/next.prg; mv archive/next.prg archive/site.prg; sleep 0.8   # swap by rename
get http://127.0.0.1:18082/; get http://127.0.0.1:18091/metrics
kill -HUP "$pid"; sleep 0.8; get http://127.0.0.1:18082/
cp site.prg archive/site.prg; sleep 1.5; get http://127.0.0.1:18082/        # rewrite in place: the lease
stop

if [ "$(id -u)" = 0 ]; then
    name=user
    start serve site --bind 127.0.0.1:80 --user nobody --workers 2
    get http://127.0.0.1:80/
    stop
fi

# Everything after the filter's installation, from every trace.
for t in trace.*; do sed -n '/SECCOMP_FILTER_FLAG_TSYNC/,$p' "$t"; done > after.txt
echo "== system calls made once sandboxed (count, name)"
grep -oE '^[0-9]+ +[a-z0-9_]+\(' after.txt | sed -E 's/^[0-9]+ +//; s/\($//' | sort | uniq -c
echo "== refused (EPERM) or redirected (ENOSYS)"
grep -E '= -1 (EPERM|ENOSYS)' after.txt | sed -E 's/^[0-9]+ +//' | cut -c1-120 | sort | uniq -c || true
