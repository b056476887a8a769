#!/bin/bash
# A GPU latpred has never measured, in one device call: what the transfer bundle predicts for it
# checked against what it really takes (issue #14's "check the transfer honestly", on a real GPU
# rather than a partition of the H200). Measures, one after the other while time is left:
#   1. the zoo as CUDA graphs, batch 1/8/32, fp32/fp16/bf16, interleaved rounds (as the H200's);
#   2. the zoo eagerly, the same grid, probing the host before and after (issue #12's other host);
#   3. an fp16 operator subset, as the H200's partitions were swept (per-family transfer error);
#   4. (named in STEPS only) the NAS suites' 144 architectures, both modes: unseen graphs on it;
#   5. (named in STEPS only) the operator subset in fp32 and bf16;
#   6. (named in STEPS only) nas-train's 72 architectures (seeds 1000-1071) as CUDA graphs: the NAS
#      runs a measured device's composition fits on beside its zoo, as the H200's does.
# STEPS picks which run (default: the first three), so a second call can measure what the first
# had no time for.
# Brings back $OUT/unseen_gpu.tgz (<device-id>/{models,ops,hosts,sweep_log.jsonl,fingerprint.json})
# and $OUT/unseen_gpu.txt; untar it into datasets/ and score it here with
#   latpred check datasets/<device-id> --out runs/check-<device-id>
#   OUT=<folder> NOTE="machine 22, 2026-12-05" [LIMIT=560] [STEPS=nas,ops-fp32-bf16] bash benchmarks/unseen_gpu.sh
set -u
source benchmarks/device_env.sh
start=$(date +%s)
limit=${LIMIT:-560}
steps=${STEPS:-zoo-cudagraph,zoo-eager,ops-fp16}
log=$OUT/unseen_gpu.txt
root=$OUT/root
gpu_machine_header $log

# step name seconds-it-needs latpred-arguments...
step() {
  local name=$1 needs=$2; shift 2
  [[ ",$steps," == *",$name,"* ]] || return 0
  local left=$(( limit - ($(date +%s) - start) ))
  if [ $left -lt $needs ]; then echo "$name: not started, ${left} s left of the ${needs} it needs" >> $log; return; fi
  echo "== $name ($(date -u +%T), ${left} s left)" >> $log
  timeout $left python3 -m latpred "$@" --out $root --host-note "${NOTE:-unnamed machine}, $name" >> $log 2>&1 \
    || echo "$name: stopped (exit $?)" >> $log
}

python3 -m latpred device >> $log 2>&1
step zoo-cudagraph 200 collect models --modes cudagraph --batches 1,8,32 --precisions fp32,fp16,bf16 --rounds 3 --reps 3
step zoo-eager 150 collect models --modes eager --batches 1,8,32 --precisions fp32,fp16,bf16 --rounds 4 --reps 3
# the operator sweep reads its shapes from <root>/layer_shapes.json: the zoo's catalogue, as the H200's
mkdir -p $root && cp datasets/layer_shapes.json $root/
step nas 200 collect nas --seeds 0-143 --modes eager,cudagraph --group 24 --max-seconds 280
step nas-train 150 collect nas --seeds 1000-1071 --modes cudagraph --group 24 --max-seconds 400
left=$(( limit - ($(date +%s) - start) - 20 ))
[ $left -gt 30 ] && step ops-fp16 30 collect ops --precisions fp16 --random-shapes 0 --budget-s $(( left - 25 ))
left=$(( limit - ($(date +%s) - start) - 20 ))
[ $left -gt 30 ] && step ops-fp32-bf16 30 collect ops --precisions fp32,bf16 --random-shapes 0 --budget-s $(( left - 25 ))
date -u >> $log
rm $root/layer_shapes.json
tar -C $root -czf $OUT/unseen_gpu.tgz . && rm -rf $root
tail -40 $log
