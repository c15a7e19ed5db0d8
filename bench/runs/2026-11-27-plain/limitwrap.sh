#!/bin/bash
# limitwrap.sh [--response FILE] --bind 127.0.0.1:PORT --workers 1 : limit on PORT (for ab-cpu.sh)
resp=""; port=""
while [ $# -gt 0 ]; do case $1 in --response) resp=$2; shift 2;; --bind) port=${2##*:}; shift 2;; *) shift;; esac; done
if [ -n "$resp" ]; then exec /tmp/pipeprof/limit "$port" --response "$resp"; else exec /tmp/pipeprof/limit "$port"; fi
