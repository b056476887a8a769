#!/bin/bash
# What a second, third and fourth model instance on one GPU (Triton's instance_group count) do to each
# batch's latency and to throughput, in one device call: benchmarks/instance_concurrency.py, CUDA-graph
# replays at fp16, k instances each on its own stream and thread, against one alone, interleaved rounds.
# Uses the machine's own torch, torchvision and transformers (as benchmarks/unseen_gpu.sh does); a model
# whose package is missing there is skipped with its reason.
# Brings back $OUT/instance_concurrency.jsonl (a header record, then one record per unit) and
# $OUT/instance_concurrency.txt (the machine, every unit's line, the ratio table).
#   OUT=<folder> [MODELS=resnet101,densenet169] [BATCHES=1,4,8,16,32] [INSTANCES=1,2,3,4] [UNIT_SECONDS=1.0] \
#     [ROUNDS=2] [LIMIT=540] [BUDGET=500] [RESUME=runs/instance_concurrency.jsonl] bash benchmarks/instance_concurrency.sh
# (UNIT_SECONDS, not SECONDS: bash's own variable of that name counts the script's seconds.)
# RESUME: a file brought back by an earlier call (carried to the device): copied to $OUT first, so the
# units already in it are skipped and the new ones appended.
set -u
source benchmarks/device_env.sh
log=$OUT/instance_concurrency.txt
out=$OUT/instance_concurrency.jsonl
gpu_machine_header $log
if [ -n "${RESUME:-}" ] && [ -f "$RESUME" ]; then cp "$RESUME" $out && echo "resuming from $RESUME" >> $log; fi
flags=()
[ -n "${MODELS:-}" ] && flags+=(--models "$MODELS")
[ -n "${BATCHES:-}" ] && flags+=(--batches "$BATCHES")
[ -n "${INSTANCES:-}" ] && flags+=(--instances "$INSTANCES")
[ -n "${UNIT_SECONDS:-}" ] && flags+=(--seconds "$UNIT_SECONDS")
[ -n "${ROUNDS:-}" ] && flags+=(--rounds "$ROUNDS")
timeout ${LIMIT:-540} python3 benchmarks/instance_concurrency.py --out $out --limit-s ${BUDGET:-500} "${flags[@]}" \
  >> $log 2>&1 || echo "stopped (exit $?)" >> $log
date -u >> $log
# the table and what was left undone; the whole log's tail where the script never got to its table
if grep -q '^== instance concurrency' $log; then
  grep -E '^(skip |[0-9]+ units left undone|all [0-9]+ units|wall time|stopped)|: stopped by ' $log
  sed -n '/^== instance concurrency/,$p' $log
else
  tail -40 $log
fi
