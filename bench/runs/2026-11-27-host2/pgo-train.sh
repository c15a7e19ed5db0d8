#!/bin/bash
# train.sh BIN: run the instrumented BIN through the hot paths (hello, files, archive, h2c, TLS, proxy)
set -u
BIN=$1; here=/work/main/bench
export PEREGRINE_ALLOW_ROOT=1
t=$(mktemp -d)
gcc -O2 -o $t/limit $here/limit/limit.c
mkdir -p $t/root $t/empty
head -c 17 /dev/zero | tr '\0' a > $t/root/17.txt
head -c 4096 /dev/zero | tr '\0' b > $t/root/4k.txt
head -c 65536 /dev/zero | tr '\0' c > $t/root/64k.txt
cp -r /work/main/site/* $t/root/
$BIN pack $t/root -o $t/x.prg > /dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $t/k.pem -out $t/c.pem -days 2 -subj /CN=localhost > /dev/null 2>&1
start() { "$@" > /dev/null 2>&1 & pid=$!; sleep 0.8; }
stop() { kill -TERM $pid; wait $pid 2>/dev/null; }
W="wrk -t1 -c50 -d3s"; P="-s $here/wrk/pipeline.lua"
start $BIN hello --bind 127.0.0.1:7001 --workers 1
$W http://127.0.0.1:7001/; $W $P http://127.0.0.1:7001/ -- 16; h2load -n 50000 -c 10 -m 10 http://127.0.0.1:7001/ > /dev/null; stop
start $BIN serve $t/root --bind 127.0.0.1:7002 --workers 1
for f in 17.txt 4k.txt 64k.txt index.html; do $W http://127.0.0.1:7002/$f; done
$W $P http://127.0.0.1:7002/17.txt -- 16
h2load -n 50000 -c 10 -m 10 http://127.0.0.1:7002/17.txt > /dev/null
wrk -t1 -c10 -d2s -H 'Accept-Encoding: gzip, br' http://127.0.0.1:7002/index.html
wrk -t1 -c10 -d1s -H 'If-None-Match: "x"' http://127.0.0.1:7002/4k.txt
wrk -t1 -c10 -d1s http://127.0.0.1:7002/missing
stop
start $BIN serve $t/x.prg --bind 127.0.0.1:7003 --workers 1
$W http://127.0.0.1:7003/17.txt; $W $P http://127.0.0.1:7003/17.txt -- 16; $W http://127.0.0.1:7003/64k.txt
h2load -n 50000 -c 10 -m 10 http://127.0.0.1:7003/17.txt > /dev/null; stop
start $BIN serve $t/root --bind 127.0.0.1:7004 --workers 1 --tls-cert $t/c.pem --tls-key $t/k.pem
wrk -t1 -c50 -d3s https://127.0.0.1:7004/17.txt
h2load -n 30000 -c 10 -m 10 https://127.0.0.1:7004/17.txt > /dev/null
h2load -n 2000 -c 1 --h1 https://127.0.0.1:7004/17.txt > /dev/null
for i in $(seq 300); do curl -sk -o /dev/null https://127.0.0.1:7004/17.txt; done
stop
taskset -c 0 $t/limit 7005 > /dev/null 2>&1 & lp=$!; sleep 0.3
start $BIN serve $t/empty --proxy /=http://127.0.0.1:7005 --bind 127.0.0.1:7006 --workers 1
$W http://127.0.0.1:7006/; h2load -n 30000 -c 10 -m 10 http://127.0.0.1:7006/ > /dev/null; stop
kill $lp
rm -rf $t
