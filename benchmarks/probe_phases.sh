#!/bin/bash
# Where `latpred host probe`'s seconds go (benchmarks/probe_phases.py), as the machine is and on a
# core shared with a busy loop, and the import times of the command itself.
# On the GPU machine, from the repository's root: OUT=<folder> bash benchmarks/probe_phases.sh
set -u
source benchmarks/device_env.sh
{ echo "boot_id $(cat /proc/sys/kernel/random/boot_id)"; date -u; nproc; grep -m1 'model name' /proc/cpuinfo; } > $OUT/phases.txt
for i in 1 2 3; do
  LAUNCH_NS=$(date +%s%N) python3 benchmarks/probe_phases.py --label "as is $i" >> $OUT/phases.txt 2>>$OUT/stderr.txt
done
python3 -X importtime -m latpred host probe --no-references --out /tmp/p.json 2> $OUT/importtime.txt
sort -t'|' -k2 -n -r $OUT/importtime.txt | head -40 > $OUT/importtime_top.txt
taskset -c 3 python3 -c "while True: pass" & BUSY=$!
for i in 1 2 3; do
  LAUNCH_NS=$(date +%s%N) taskset -c 3 python3 benchmarks/probe_phases.py --label "contended $i" >> $OUT/phases.txt 2>>$OUT/stderr.txt
done
kill $BUSY
gzip $OUT/importtime.txt
cat $OUT/phases.txt $OUT/importtime_top.txt
