#!/bin/bash
# A model served with several instances on one GPU under Poisson load, in one device call
# (collectors/instance_serving.py: k copies of the model's CUDA graphs, each replayed on its own stream,
# one polling thread, Triton's documented batching without a delay); what the capacity simulator's
# sharing of a GPU between instances is checked against (benchmarks/instances_vs_server.py, here).
# Uses the machine's own torch, torchvision and transformers, as instance_concurrency.sh does.
# Brings back $OUT/instance_serving.tgz (the serving-instances folder: untar it into datasets/) and
# $OUT/instance_serving.txt.
#   OUT=<folder> [MODELS=resnet34,convnext_small,electra-small] [SETTINGS=mb1-nodelay-x1,mb1-nodelay-x2,...]
#     [LEVELS=0.3,0.6,0.8] [LOAD_SECONDS=4] [LIMIT=540] bash benchmarks/instance_serving.sh
set -u
source benchmarks/device_env.sh
log=$OUT/instance_serving.txt
gpu_machine_header $log
flags=()
[ -n "${MODELS:-}" ] && flags+=(--models "$MODELS")
[ -n "${SETTINGS:-}" ] && flags+=(--settings "$SETTINGS")
[ -n "${LEVELS:-}" ] && flags+=(--levels "$LEVELS")
timeout -k 30 ${LIMIT:-540} python3 -m collectors.instance_serving --out $OUT/root --seconds ${LOAD_SECONDS:-4} "${flags[@]}" \
  >> $log 2>&1 || echo "stopped (exit $?)" >> $log
date -u >> $log
tar -C $OUT/root -czf $OUT/instance_serving.tgz . && rm -rf $OUT/root
tail -60 $log
