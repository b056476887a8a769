#!/bin/bash
# The CPU latpred itself runs on as a measured device (issue #14): this workplace's machine (2 cores),
# timed through torch on its CPU: operators, the zoo eagerly, then NAS architectures, resuming datasets/cpu-<model>/.
# The project's .venv has torch 2.13's CPU build, beside which PyPI's torchvision does not import, so
# the zoo is built in a venv of its own (VENV, default /tmp/latpred-measure): torch 2.14.1 and
# torchvision 0.29.1 from this machine's disk, transformers from PyPI. Run it on a quiet machine
# (nothing else on the two cores), from the repository's root:
#   bash benchmarks/workplace_cpu_sweep.sh [OPS_SECONDS=900] [LARGE_OPS_SECONDS=600] [MODELS=a,b] [BATCHES=1,8] [NAS_SEEDS=6-11,...]
# NAS_SEEDS (default: nas-train's 72, which composition fits beside the zoo, nas-dev's 72, which calibrate
# the interval, and nas-test's 72, which are only ever scored) times NAS architectures too.
# Measure every operator row in one sitting: the device's speed is its host's, which moves from day
# to day (datasets/cpu-amd-epyc/notes.md). Then, with the project's venv:
#   .venv/bin/latpred train --dataset datasets/cpu-<model> --host-speed-exponent 0.6
set -eu
VENV=${VENV:-/tmp/latpred-measure}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch==2.14.1 torchvision==0.29.1
  "$VENV/bin/pip" install -q -e ".[collect]" "transformers>=5,<6"
fi
PY="$VENV/bin/python"
"$PY" -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'threads', torch.get_num_threads())"
date -u
"$PY" -m latpred collect ops --device cpu --out datasets --precisions fp32 --max-flops 2e9 \
  --budget-s "${OPS_SECONDS:-900}"
date -u
# the larger calls the first sweep's 2 GFLOP cap left out, which the zoo runs at batch 32 (2026-12-05)
"$PY" -m latpred collect ops --device cpu --out datasets --precisions fp32 --families linear,matmul,conv2d,sdpa \
  --min-flops 2e9 --max-flops 5e10 --budget-s "${LARGE_OPS_SECONDS:-600}"
date -u
"$PY" -m latpred collect models --device cpu --out datasets --modes eager --batches "${BATCHES:-1,8}" \
  --precisions fp32 --rounds 3 --reps 2 ${MODELS:+--models $MODELS}
date -u
NAS_ALL=1000-1071,0-143
"$PY" -m latpred collect nas --device cpu --out datasets --seeds "${NAS_SEEDS:-$NAS_ALL}" --modes eager \
  --batches 1,8 --precisions fp32 --rounds 3 --reps 2
date -u
