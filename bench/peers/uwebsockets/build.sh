#!/bin/sh
# Builds bench/peers/uwebsockets/EchoServer.cpp against a uWebSockets checkout
# (github.com/uNetworking/uWebSockets, with github.com/uNetworking/uSockets in
# its uSockets/ folder): uSockets as its Makefile builds it without SSL
# (-O3 -flto), then the server with the flags of uWebSockets' own build.c for
# its examples (-march=native -O3 -flto -std=c++2b), and -DUWS_NO_ZLIB: no
# permessage-deflate at all, as its build does with WITH_ZLIB=0.
#   build.sh UWS_DIR OUT
set -eu
src=$1
out=$2
here=$(cd "$(dirname "$0")" && pwd)
make -C "$src/uSockets" >/dev/null
g++ -march=native -O3 -flto=auto -std=c++2b -DUWS_NO_ZLIB -DLIBUS_NO_SSL \
    -I"$src/src" -I"$src/uSockets/src" "$here/EchoServer.cpp" "$src"/uSockets/*.o -o "$out"
