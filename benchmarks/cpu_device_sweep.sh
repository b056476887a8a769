#!/bin/bash
# The GPU host's CPU as a measured device (issue #14): operators through torch on the CPU, then the
# zoo eagerly on it, both resuming datasets/cpu-*/ (the rows already there are not measured again).
# On the GPU machine, from the repository's root: OUT=<folder> bash benchmarks/cpu_device_sweep.sh
# [OPS_SECONDS=240] [MODELS_SECONDS=200] [MODELS=a,b] [NAS_SEEDS=6-11,18-23] [NAS_SECONDS=240] (a step given 0
# seconds, or no seeds, is skipped). Brings back $OUT/cpu_dataset.tgz (the device's dataset folder) and
# $OUT/cpu_sweep.txt. 2026-12-03 ran its steps as separate calls: the commands are in datasets/nvidia-h200/notes.md.
set -u
source benchmarks/device_env.sh
mkdir -p $OUT/root
cp -r datasets/cpu-* datasets/layer_shapes.json $OUT/root/
{ echo "boot_id $(cat /proc/sys/kernel/random/boot_id)"; date -u; nproc; grep -m1 'model name' /proc/cpuinfo
  python3 -c "import torch; print('torch', torch.__version__, 'threads', torch.get_num_threads())"; } > $OUT/cpu_sweep.txt
# The dataset is packed after each step: a step that runs past the call's limit loses only its own rows
# (files under $OUT more than a few folders deep do not come back; the tarball does).
pack() { tar -C $OUT/root -czf $OUT/cpu_dataset.tgz $(cd $OUT/root && ls -d cpu-*); }
if [ "${OPS_SECONDS:-240}" != 0 ]; then
  python3 -m latpred collect ops --device cpu --out $OUT/root --precisions fp32 --max-flops 1e10 \
    --budget-s ${OPS_SECONDS:-240} >> $OUT/cpu_sweep.txt 2>&1
  pack
fi
# the zoo eagerly, at most MODELS_SECONDS (the LLMs at batch 32 take seconds a forward on a CPU)
if [ "${MODELS_SECONDS:-200}" != 0 ]; then
  timeout ${MODELS_SECONDS:-200} python3 -m latpred collect models --device cpu --out $OUT/root --modes eager \
    --batches 1,8,32 --precisions fp32 --rounds 3 --reps 2 ${MODELS:+--models $MODELS} >> $OUT/cpu_sweep.txt 2>&1
  pack
fi
# NAS architectures eagerly (datasets/<device>/nas; nas-test's seeds are only ever scored)
if [ -n "${NAS_SEEDS:-}" ]; then
  python3 -m latpred collect nas --device cpu --out $OUT/root --seeds $NAS_SEEDS --modes eager --batches 1,8 \
    --precisions fp32 --rounds 3 --reps 2 --max-seconds ${NAS_SECONDS:-240} >> $OUT/cpu_sweep.txt 2>&1
  pack
fi
date -u >> $OUT/cpu_sweep.txt
rm -rf $OUT/root
tail -40 $OUT/cpu_sweep.txt
