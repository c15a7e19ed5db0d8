#!/bin/bash
# the final runs of record: the target rows + kawipiko + real10k + rate/frate, then floor.sh
cd /work/main
export KAWIPIKO=/tmp/kawi2/bin/kawipiko-server
bench/run --no-cargo --only limit,peregrine,peregrine-archive,nginx,kawipiko --scenarios c50,pipe16,c512,f17,f4k,f64k,fpipe16,f17-c512,real10k,rate,frate --reps 3 --duration 5 --no-benchmarks-md > /tmp/final-run.log 2>&1
echo "run rc=$?" >> /tmp/final-run.log
bench/floor.sh 3 target/release/peregrine > /tmp/final-floor.txt 2>&1
echo "floor rc=$?" >> /tmp/final-floor.txt
