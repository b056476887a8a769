#!/bin/bash
# The serving check on the GPU host's CPU (issue #14: a CPU's p99 and its serving, which no run had
# checked): `latpred collect serving --device cpu`, the H200 check's dynamic-batching server and
# Poisson load process with eager fp32 forwards on the CPU (collectors.batching_server.CpuModel),
# resuming $OUT's copy of datasets/<cpu>/serving model by model. Small zoo models: a load needs 3,000
# requests, and a CPU serves a few hundred a second. On the GPU machine, from the repository's root:
#   OUT=<folder> bash benchmarks/cpu_serving_check.sh [MODELS=a,b] [LEVELS=0.3,0.6,0.85] [LOAD_SECONDS=4] [THREADS=N] [LIMIT=540]
# (THREADS: torch's intra-op threads for the server, measurements in serving-threads<N>/)
# (The 2026-12-04 runs read the load's length from SECONDS, which bash keeps as its own clock: they ran
# 6 s a load, as meta.json says; 3,000 requests a load either way at most of their rates.)
# Brings back $OUT/cpu_serving.tgz (<device-id>/serving/) and $OUT/cpu_serving.txt; score it here with
#   .venv/bin/python benchmarks/simulator_vs_server.py --folder datasets/<device-id>/serving --out <file>
set -u
source benchmarks/device_env.sh
mkdir -p $OUT/root
for d in datasets/cpu-*/serving*; do [ -d "$d" ] && mkdir -p "$OUT/root/$(dirname ${d#datasets/})" && cp -r "$d" "$OUT/root/${d#datasets/}"; done
{ echo "boot_id $(cat /proc/sys/kernel/random/boot_id)"; date -u; nproc; grep -m1 'model name' /proc/cpuinfo
  python3 -c "import torch; print('torch', torch.__version__, 'threads', torch.get_num_threads())"; } > $OUT/cpu_serving.txt
timeout -k 30 ${LIMIT:-540} python3 -m latpred collect serving --device cpu --out $OUT/root --precision fp32 \
  --models ${MODELS:-mobilenet_v3_small,shufflenet_v2_x0_5,alexnet} ${LEVELS:+--levels $LEVELS} --seconds ${LOAD_SECONDS:-4} \
  ${THREADS:+--threads $THREADS} \
  >> $OUT/cpu_serving.txt 2>&1 || echo "collect serving stopped (exit $?): the models done are kept" >> $OUT/cpu_serving.txt
date -u >> $OUT/cpu_serving.txt
tar -C $OUT/root -czf $OUT/cpu_serving.tgz $(cd $OUT/root && ls -d cpu-*)
rm -rf $OUT/root
tail -40 $OUT/cpu_serving.txt
