#!/bin/bash
# bench/peers/kawipiko/build.sh SOURCES OUT: builds kawipiko-server and
# kawipiko-archiver into OUT from a checkout of kawipiko's `sources` folder
# (github.com/volution/kawipiko, AGPL-3.0; not vendored here).
#
# Its Go module is not served by the module proxy on our machines, so bench/run
# cannot fetch it; with a copy of the source (any way you can get one), this
# builds it, and `KAWIPIKO=OUT/kawipiko-server bench/run ...` takes it in.
# kawipiko pins quic-go v0.29, which refuses to build with Go 1.20 or later;
# the benchmarks use kawipiko over HTTP/1.1 only, so quic-go and its http3
# are replaced by the stand-ins in stub/ (types only: --bind-quic fails).
# The rest of kawipiko is built as it is, with its own pinned dependencies.
set -euo pipefail
SRC=$(cd "$1" && pwd); OUT=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$SRC"/. "$work/"
mkdir -p "$work/stub"
cp -r "$here/stub/quic" "$here/stub/http3" "$work/stub/"
sed -i 's|import "github.com/lucas-clemente/quic-go"|import "github.com/volution/kawipiko/stub/quic"|;
        s|import "github.com/lucas-clemente/quic-go/http3"|import "github.com/volution/kawipiko/stub/http3"|' \
  "$work/cmd/server/server.go"
mkdir -p "$OUT"
cd "$work"
GOFLAGS=-mod=mod go build -o "$OUT/kawipiko-server" ./cmd/server.go
GOFLAGS=-mod=mod go build -o "$OUT/kawipiko-archiver" ./cmd/archiver.go
echo "built $OUT/kawipiko-server and $OUT/kawipiko-archiver"
