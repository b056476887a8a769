#!/bin/bash
# Issue #12's verification on one GPU machine, in one device call: the zoo eager (batch 1/8/32,
# fp32/fp16/bf16; `latpred collect models`, which probes the host before and after and samples it,
# reference forwards included, between rounds) under three conditions, one after the other:
#   as-is        the machine as it is;
#   contended    the issuing process and a busy loop pinned to one core (taskset -c 3);
#   as-is-again  the machine as it is, minutes later: how far the same eager runs repeat on one
#                host, the ceiling any prediction of them is under.
# A condition starts only with time left for it (LIMIT, default 560 s, counted from the start), and
# each comes back as $OUT/<condition>.tgz (ROOT/<device-id>/{models,hosts,sweep_log.jsonl}); bring
# them into datasets/<device-id>/host_runs/<machine>-<condition>/ and its profiles into hosts/.
#   OUT=<folder> NOTE="machine 19, 2026-12-05" bash benchmarks/host_conditions.sh
set -u
source benchmarks/device_env.sh
start=$(date +%s)
limit=${LIMIT:-560}
log=$OUT/host_conditions.txt
{ echo "boot_id $(cat /proc/sys/kernel/random/boot_id)"; date -u; nproc; grep -m1 'model name' /proc/cpuinfo; } > $log

# condition rounds seconds-it-needs [a command prefix, e.g. taskset -c 3]
condition() {
  local name=$1 rounds=$2 needs=$3; shift 3
  local left=$(( limit - ($(date +%s) - start) ))
  if [ $left -lt $needs ]; then echo "$name: not started, ${left} s left of the ${needs} it needs" >> $log; return; fi
  echo "== $name ($(date -u +%T), ${left} s left)" >> $log
  "$@" timeout $left python3 -m latpred collect models --out $OUT/$name --modes eager --batches 1,8,32 \
    --precisions fp32,fp16,bf16 --rounds $rounds --reps 3 --host-note "${NOTE:-unnamed machine}, $name" >> $log 2>&1 \
    || echo "$name: collect models stopped (exit $?)" >> $log
  tar -C $OUT -czf $OUT/$name.tgz $name && rm -rf $OUT/$name
}

condition as-is 5 170
taskset -c 3 python3 -c 'while True: pass' &  # (core 3: the GPU machine has 16)
busy=$!
trap 'kill $busy 2>/dev/null' EXIT
condition contended 4 270 taskset -c 3
kill $busy
condition as-is-again 4 130
date -u >> $log
tail -30 $log
