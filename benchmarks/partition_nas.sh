#!/bin/bash
# The NAS suites on the H200's green-context partitions, in one device call: each partition's
# composition then fits NAS training runs beside its zoo (as the H200's and the H100's do), its
# interval is calibrated on nas-dev, and nas-test scores it on graphs no fit saw. For each of
# PARTS (SMs asked for; default 33 66 99, which give 40, 72 and 104), in a process of its own (one
# green context per process): `latpred collect nas --sms N` over nas-train (seeds 1000-1071), then
# nas-dev and nas-test (0-143), as CUDA graphs at fp16, batch 1/8/32, as the partitions' zoo runs
# were measured. STEPS (default nas) may add zoo: first the zoo as CUDA graphs at fp16, batch
# 1/8/32, 3 rounds (as the H200's partitions' zoo runs), whole models to score a partition by; and
# ops: 60 s of fp16 operator rows drawn from the zoo's layer shapes (as the H200's partitions' sweeps),
# kernels to score it by per family.
# SEEDS (default 1000-1071,0-143) picks the NAS architectures: 0-143 alone (nas-dev, nas-test) for a
# partition kept out of every fit, which nas-train's runs would serve only in a fit.
# Resumable: a second call measures what the first had no time for.
# Brings back $OUT/partition_nas.tgz (<device-id>-sm<N>/{nas,models,ops,hosts,sweep_log.jsonl,fingerprint.json})
# and $OUT/partition_nas.txt; untar it into datasets/.
#   OUT=<folder> NOTE="machine 22, 2026-12-05" [LIMIT=560] [PARTS="33 66 99"] [STEPS=zoo,ops,nas] [SEEDS=0-143] bash benchmarks/partition_nas.sh
set -u
source benchmarks/device_env.sh
start=$(date +%s)
limit=${LIMIT:-560}
log=$OUT/partition_nas.txt
root=$OUT/root
gpu_machine_header $log
for sms in ${PARTS:-33 66 99}; do
  left=$(( limit - ($(date +%s) - start) - 20 ))
  if [ $left -lt 60 ]; then echo "sms $sms: not started, ${left} s left" >> $log; continue; fi
  echo "== sms $sms ($(date -u +%T), ${left} s left)" >> $log
  if [[ ",${STEPS:-nas}," == *",zoo,"* ]]; then
    timeout $left python3 -m latpred collect models --sms $sms --modes cudagraph --batches 1,8,32 \
      --precisions fp16 --rounds 3 --reps 3 --out $root \
      --host-note "${NOTE:-unnamed machine}, zoo on a partition of $sms SMs asked for" >> $log 2>&1 \
      || echo "sms $sms zoo: stopped (exit $?)" >> $log
    left=$(( limit - ($(date +%s) - start) - 20 ))
  fi
  if [[ ",${STEPS:-nas}," == *",ops,"* ]] && [ $left -gt 90 ]; then
    mkdir -p $root && cp datasets/layer_shapes.json $root/  # the sweep reads its shapes from <root>
    timeout $left python3 -m latpred collect ops --sms $sms --precisions fp16 --random-shapes 0 --budget-s 60 \
      --out $root --host-note "${NOTE:-unnamed machine}, ops on a partition of $sms SMs asked for" >> $log 2>&1 \
      || echo "sms $sms ops: stopped (exit $?)" >> $log
    rm -f $root/layer_shapes.json
    left=$(( limit - ($(date +%s) - start) - 20 ))
  fi
  if [[ ",${STEPS:-nas}," == *",nas,"* ]] && [ $left -gt 60 ]; then
    timeout $left python3 -m latpred collect nas --sms $sms --seeds ${SEEDS:-1000-1071,0-143} --modes cudagraph \
      --precisions fp16 --batches 1,8,32 --group 24 --max-seconds $(( left - 15 )) --out $root \
      --host-note "${NOTE:-unnamed machine}, partition of $sms SMs asked for" >> $log 2>&1 \
      || echo "sms $sms nas: stopped (exit $?)" >> $log
  fi
done
date -u >> $log
tar -C $root -czf $OUT/partition_nas.tgz . && rm -rf $root
tail -30 $log
