#!/bin/bash
# (bench/runs/2026-11-28-pxrq: bench/callgrind.sh with a browser's 12 request fields
# added to every request; run from anywhere.)
# callgrind-headers.sh BIN OUT c50|pipe16 [SERVER ARGS...]: see bench/callgrind.sh
# (now a wrapper: the fields are bench/lib/browser-fields.txt, passed as FIELDS)
bench=$(cd "$(dirname "$0")/../.." && pwd)
FIELDS="$(cat "$bench/lib/browser-fields.txt")" exec "$bench/callgrind.sh" "$@"
