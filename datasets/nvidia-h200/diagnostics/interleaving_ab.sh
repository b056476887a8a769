#!/bin/bash
# Does interleaving inflate a small model's eager time? nas-dev's third group of 24 architectures
# (nas-133 among them: 1.03 ms in the dataset, 0.36 ms timed alone back to back), eager, fp32,
# batch 1, timed by `latpred collect nas` with its 24 architectures interleaved (--group 24), and
# six of them one at a time (--group 1: each group probes the host before and after), 3 rounds of 3.
# On the GPU machine from the repository root: OUT=<folder> bash datasets/nvidia-h200/diagnostics/interleaving_ab.sh
# (wheels of what that machine lacks, pydantic and pandera, in .whl/ if they are not installed).
set -u
source benchmarks/device_env.sh
mkdir -p /tmp/ab
SEEDS=96-101,108-113,120-125,132-137
for g in 24 1; do
  [ $g = 1 ] && SEEDS=97,133-137
  python3 -m latpred collect nas --out /tmp/ab/group$g --seeds $SEEDS --modes eager --precisions fp32 --batches 1 \
    --rounds 3 --reps 3 --group $g --host-note "interleaving A/B, group $g" > /tmp/ab/log$g.txt 2>&1 || tail -5 /tmp/ab/log$g.txt
done
python3 datasets/nvidia-h200/diagnostics/eager_outliers.py nas-133 nas-97 nas-134 nas-135 nas-136 nas-137 2>&1 | grep '^==' > /tmp/ab/alone.txt
tar -C /tmp/ab -czf $OUT/interleaving_ab.tgz .
cat /tmp/ab/alone.txt; tail -2 /tmp/ab/log*.txt
