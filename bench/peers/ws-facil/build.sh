#!/bin/sh
# Builds bench/peers/ws-facil/echo.c against a facil.io checkout
# (github.com/boazsegev/facil.io, its lib/facil sources, without TLS and
# without the Redis engine), -O2 as its makefile does.
#   build.sh FACIL_DIR OUT
set -eu
src=$1/lib/facil
out=$2
here=$(cd "$(dirname "$0")" && pwd)
gcc -O2 -std=gnu11 -w -DNDEBUG -DFIO_PRINT_STATE=0 \
    -I"$src" -I"$src/http" -I"$src/http/parsers" -I"$src/fiobj" -I"$src/cli" -I"$src/tls" \
    "$here/echo.c" "$src/fio.c" "$src"/fiobj/*.c "$src"/http/*.c "$src/tls/fio_tls_missing.c" "$src/cli/fio_cli.c" \
    -lpthread -lm -o "$out"
