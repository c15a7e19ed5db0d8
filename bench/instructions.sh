#!/bin/bash
# bench/instructions.sh BIN [BIN...]: user-space instructions per request
# (valgrind --tool=callgrind, Ir) of each build over a fixed replay, a count
# that does not move with the host's noise (issue 29: "a change is kept when
# the counts fall and the ratio does not rise"; the 1 % gate on hello and
# f17 for new features). Each row: the server with one worker under
# callgrind, a warm-up of N/4 requests, counters zeroed, N requests,
# counters dumped; Ir over N. The load runs on the same machine: h2load for
# HTTP/1.1 (-c50, and -m16 pipelined) and h2c (-m10), ngtcp2's gtlsclient
# for HTTP/3 (one connection, each request its own URL). Kernel time is not
# counted (callgrind sees user space only): pair it with bench/ab-cpu.sh.
#
# Scenarios (SCENARIOS, default all): hello-c50 hello-pipe16 hello-h2c
# archive-c50 archive-pipe16 f17-c50 f17-h3; and, when named (it needs gcc
# and is not in the default gate), proxy-c50: `serve EMPTY --proxy` in
# front of bench/limit/limit.c (the upstream, outside callgrind), so the
# count is the proxy's own work per request (issue 26's relay cost);
# and proxy-cache-hit: the same with `--proxy-cache 64M` in front of
# limit.c answering the bundled site's index.html (the bytes archive-c50
# serves, uncompressed) with `Cache-Control: max-age=86400`: after the
# warm-up every request is a hit, so the count is the cache's hit path,
# to compare with archive-c50 in the same run (issue 32).
# Example, base against new:
#   bench/instructions.sh /tmp/base/peregrine target/release/peregrine
# ACCESS_LOG=FORMAT (combined, json, or a template) runs every server with
# an access log of that format written to a file (`--access-log`), so the
# cost of logging is counted too (issue 30 asks it within 1 %); the line
# buffer is written out every 64 KiB, as in production.
# Needs valgrind, h2load (nghttp2-client) and, for h3, gtlsclient
# (ngtcp2-client) and openssl.
set -euo pipefail
export PEREGRINE_ALLOW_ROOT=1
here=$(cd "$(dirname "$0")" && pwd)
N=${N:-20000}
N_H3=${N_H3:-2000}
SCENARIOS=${SCENARIOS:-hello-c50 hello-pipe16 hello-h2c archive-c50 archive-pipe16 f17-c50 f17-h3}
for tool in valgrind callgrind_control h2load; do
  command -v $tool >/dev/null || { echo "instructions.sh: $tool is missing (apt-get install valgrind nghttp2-client)" >&2; exit 1; }
done
work=$(mktemp -d)
UP_PID=""
CACHE_UP_PID=""
trap 'for p in $UP_PID $CACHE_UP_PID; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
# The fixture: a 17-byte file, the bundled site packed (by the first build),
# a certificate for h3.
mkdir -p "$work/tree"
printf '0123456789abcdef\n' > "$work/tree/17.txt"
"$1" pack "$here/../site" -o "$work/site.prg" >/dev/null 2>&1
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$work/key.pem" -out "$work/cert.pem" -days 2 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 >/dev/null 2>&1

# measure BIN MODE N PATH ARGS...: prints Ir per request.
measure() {
  local bin=$1 mode=$2 n=$3 path=$4; shift 4
  # (called in a subshell: a fresh port and directory each time)
  local port out
  port=$(python3 "$here/lib/free_port.py")
  out=$(mktemp -d -p "$work")
  local logging=()
  if [ -n "${ACCESS_LOG:-}" ]; then
    logging=(--access-log "$out/access.log" --access-log-format "$ACCESS_LOG")
  fi
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.%p" \
    "$bin" "$@" "${logging[@]}" --bind "127.0.0.1:$port" --workers 1 >"$out/log" 2>&1 &
  local vpid=$!
  # Ready when its port takes a connection (the start line's words differ
  # between `hello` and `serve`); under valgrind that takes seconds.
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    kill -0 "$vpid" 2>/dev/null || { echo "instructions.sh: the server exited: $(tail -3 "$out/log")" >&2; return 1; }
    sleep 0.2
  done
  load() {
    case $mode in
      c50) h2load --h1 -n "$1" -c 50 "http://127.0.0.1:$port$path" >/dev/null ;;
      pipe16) h2load --h1 -n "$1" -c 50 -m 16 "http://127.0.0.1:$port$path" >/dev/null ;;
      h2c) h2load -n "$1" -c 50 -m 10 "http://127.0.0.1:$port$path" >/dev/null ;;
      h3)
        local urls=() i
        for i in $(seq "$1"); do urls+=("https://localhost:$port$path?r$i"); done
        gtlsclient --exit-on-all-streams-close --timeout=60s -q -n "$1" \
          --download "$out/dl" 127.0.0.1 "$port" "${urls[@]}" >/dev/null 2>&1 ;;
    esac
  }
  load $((n / 4))
  callgrind_control -z "$vpid" >/dev/null 2>&1
  load "$n"
  callgrind_control -d "$vpid" >/dev/null 2>&1
  sleep 0.5
  kill "$vpid"
  wait "$vpid" 2>/dev/null || true
  # The dump taken after the replay is the file with a part number.
  local ir
  ir=$(cat "$out"/cg.*.[0-9]* | awk '/^(summary|totals):/ {print $2; exit}')
  python3 -c "print(round($ir / $n))"
}

s_hello_c50() { measure "$1" c50 "$N" / hello; }
s_hello_pipe16() { measure "$1" pipe16 "$N" / hello; }
s_hello_h2c() { measure "$1" h2c "$N" / hello; }
s_archive_c50() { measure "$1" c50 "$N" / serve "$work/site.prg"; }
s_archive_pipe16() { measure "$1" pipe16 "$N" / serve "$work/site.prg"; }
s_f17_c50() { measure "$1" c50 "$N" /17.txt serve "$work/tree"; }
s_proxy_c50() {
  measure "$1" c50 "$N" / serve "$work/empty" --proxy "/=http://127.0.0.1:$UP_PORT"
}
s_proxy_cache_hit() {
  measure "$1" c50 "$N" / serve "$work/empty" --proxy "/=http://127.0.0.1:$CACHE_UP_PORT" --proxy-cache 64M
}
s_f17_h3() {
  measure "$1" h3 "$N_H3" /17.txt serve "$work/tree" --tls-cert "$work/cert.pem" --tls-key "$work/key.pem"
}

# proxy-c50's upstream, started once here (each scenario runs in a
# subshell): every build is measured against the same one.
if [[ " $SCENARIOS " == *" proxy-c50 "* ]]; then
  gcc -O2 -o "$work/limit" "$here/limit/limit.c"
  UP_PORT=$(python3 "$here/lib/free_port.py")
  "$work/limit" "$UP_PORT" >/dev/null 2>&1 &
  UP_PID=$!
  mkdir -p "$work/empty"
  sleep 0.3
fi

# proxy-cache-hit's upstream: limit.c with a cacheable answer (no Date:
# its age starts at 0 when it is stored).
if [[ " $SCENARIOS " == *" proxy-cache-hit "* ]]; then
  [ -x "$work/limit" ] || gcc -O2 -o "$work/limit" "$here/limit/limit.c"
  body="$here/../site/index.html"
  {
    printf 'HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n'
    printf 'Cache-Control: max-age=86400\r\nContent-Length: %d\r\n\r\n' "$(stat -c %s "$body")"
    cat "$body"
  } > "$work/cacheable.http"
  CACHE_UP_PORT=$(python3 "$here/lib/free_port.py")
  "$work/limit" "$CACHE_UP_PORT" --response "$work/cacheable.http" >/dev/null 2>&1 &
  CACHE_UP_PID=$!
  mkdir -p "$work/empty"
  sleep 0.3
fi

bins=("$@")
printf '%-16s' "Ir/request"
for bin in "${bins[@]}"; do printf ' %18s' "$("$bin" --version | awk '/^revision/ {print $2}')"; done
echo
for s in $SCENARIOS; do
  fn="s_${s//-/_}"
  declare -F "$fn" >/dev/null || { echo "unknown scenario $s" >&2; exit 2; }
  if [ "$s" = f17-h3 ] && ! command -v gtlsclient >/dev/null; then
    echo "$s: gtlsclient is missing (apt-get install ngtcp2-client)"
    continue
  fi
  printf '%-16s' "$s"
  first=""
  for bin in "${bins[@]}"; do
    v=$("$fn" "$bin")
    if [ -z "$first" ]; then
      first=$v
      printf ' %18s' "$v"
    else
      printf ' %18s' "$v ($(python3 -c "print(f'{($v / $first - 1) * 100:+.1f} %')"))"
    fi
  done
  echo
done
