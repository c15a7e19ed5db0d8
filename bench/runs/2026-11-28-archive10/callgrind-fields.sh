#!/bin/bash
# bench/callgrind.sh whose h2load lines take H2ARGS (e.g. H2ARGS="-H accept-encoding:gzip,br"), for a request with fields.
# (now a wrapper: each `-H FIELD` of H2ARGS becomes a line of bench/callgrind.sh's FIELDS)
FIELDS=""
read -r -a args <<< "${H2ARGS:-}"
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[i]}" = -H ] && FIELDS+="${args[i + 1]}"$'\n'
done
FIELDS="$FIELDS" exec "$(dirname "$0")/../../callgrind.sh" "$@"
