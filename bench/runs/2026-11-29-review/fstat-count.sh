#!/bin/bash
# fstat-count.sh BIN PORT: fstat, statx, sendfile and epoll_wait per request
# of `serve DIR` answering a 64 KiB file (one worker, wrk -t1 -c50, both on
# CPU 0; perf's syscall tracepoints over 3 s).
B=$1; P=$2
mkdir -p /tmp/fst/root
[ -f /tmp/fst/root/64k.txt ] || head -c 65536 /dev/zero | tr '\0' 'c' > /tmp/fst/root/64k.txt
PEREGRINE_ALLOW_ROOT=1 taskset -c 0 $B serve /tmp/fst/root --bind 127.0.0.1:$P --workers 1 >/dev/null 2>&1 & pid=$!
sleep 0.6
taskset -c 0 wrk -t1 -c50 -d1s http://127.0.0.1:$P/64k.txt >/dev/null 2>&1
perf stat -x, -e syscalls:sys_enter_newfstat,syscalls:sys_enter_statx,syscalls:sys_enter_sendfile64,syscalls:sys_enter_epoll_wait,task-clock -p $pid -o /tmp/fst/stat >/dev/null 2>&1 & sp=$!
sleep 0.3
taskset -c 0 wrk -t1 -c50 -d3s http://127.0.0.1:$P/64k.txt > /tmp/fst/wrk 2>&1
sleep 0.1; kill -INT $sp; wait $sp 2>/dev/null; kill $pid; wait $pid 2>/dev/null
n=$(grep -o "[0-9]* requests in" /tmp/fst/wrk | cut -d' ' -f1)
awk -F, -v n=$n -v b=$(basename $B) '/^[0-9.]/ {split($3,a,":"); printf "%s %s %.3f\n", b, a[length(a)], $1/n}' /tmp/fst/stat
