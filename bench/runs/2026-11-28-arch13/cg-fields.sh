#!/bin/bash
# arch13: bench/callgrind.sh with request fields added to both h2load runs:
#   AE="gzip, deflate, br, zstd" (Accept-Encoding), INM='"tag"' (If-None-Match).
# Run from anywhere: bench/runs/2026-11-28-arch13/cg-fields.sh BIN OUT c50 serve site.prg
# (now a wrapper: bench/callgrind.sh takes the fields as FIELDS)
FIELDS=""
[ -n "${AE:-}" ] && FIELDS+="accept-encoding: $AE"$'\n'
[ -n "${INM:-}" ] && FIELDS+="if-none-match: $INM"$'\n'
FIELDS="$FIELDS" exec "$(dirname "$0")/../../callgrind.sh" "$@"
