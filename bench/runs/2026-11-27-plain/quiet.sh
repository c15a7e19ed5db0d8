#!/bin/bash
# quiet.sh ROUNDS: ab-cpu rounds of limit, base and new (hello), floor/base/new (archive /)
cd /work/wt-pipe
R=$1; out=/tmp/pipeprof/quiet.txt; : > $out
for r in $(seq $R); do
  for who in limit base new; do
    case $who in
      limit) bin=/tmp/pipeprof/limitwrap.sh;; base) bin=/work/tg-pipe/base/peregrine;; new) bin=/work/tg-pipe/c3-peregrine;;
    esac
    echo "round $r hello $who $(bench/ab-cpu.sh $bin 19231 hello 2>&1 | tr '\n' ' ')" >> $out
  done
  for who in floor base new; do
    case $who in
      floor) echo "round $r archive floor $(bench/ab-cpu.sh /tmp/pipeprof/limitwrap.sh 19232 --response /tmp/pipeprof/archive-answer 2>&1 | tr '\n' ' ')" >> $out ;;
      base) echo "round $r archive base $(bench/ab-cpu.sh /work/tg-pipe/base/peregrine 19233 serve /tmp/pipeprof/site.prg 2>&1 | tr '\n' ' ')" >> $out ;;
      new) echo "round $r archive new $(bench/ab-cpu.sh /work/tg-pipe/c3-peregrine 19234 serve /tmp/pipeprof/site.prg 2>&1 | tr '\n' ' ')" >> $out ;;
    esac
  done
done
