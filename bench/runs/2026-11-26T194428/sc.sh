#!/bin/sh
# sc.sh NAME K SIZE -- ARGV...: system calls per echo of a server (pinned CPU 0) under wsload (CPU 0)
set -eu
NAME=$1; K=$2; S=$3; shift 4
P=$(python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])")
ARGV=$(echo "$@" | sed "s/PORT/$P/g")
taskset -c 0 $ARGV >/dev/null 2>&1 &
SP=$!
sleep 0.7
python3 /work/wt-wsb/bench/ws/check.py $P >/dev/null
taskset -c 0 /work/wt-wsb/bench/build/ws/wsload --port $P --pid $SP -c 100 -k $K -s $S -d 4 -w 1 > /tmp/wsb-perf/$NAME.sc.wsload &
LP=$!
sleep 1
perf stat -x, -e 'syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_epoll_ctl,raw_syscalls:sys_enter' -p $SP -o /tmp/wsb-perf/$NAME.sc.txt -- sleep 4
wait $LP
kill $SP
E=$(grep echoes= /tmp/wsb-perf/$NAME.sc.wsload | cut -d= -f2)
awk -F, -v e=$E -v n=$NAME '$1 ~ /^[0-9]+$/ && $1 > 0 { printf "%s %s %.3f per echo\n", n, $3, $1 / e }' /tmp/wsb-perf/$NAME.sc.txt
