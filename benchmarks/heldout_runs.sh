#!/bin/bash
# Score a CPU's shipped bundle on whole-model runs it was never fitted on, kept in
# datasets/<cpu>/heldout/<set>/ (training reads only models/): a dataset of its fingerprint, host
# profiles and those runs is put together in a temporary folder and scored with `latpred check`
# (the shipped bundle as it is, nothing refitted; the torch trace and both ONNX exports, each run
# from the host profile probed beside it). Until 2026-12-05 this ran `latpred validate --suite zoo`,
# which refits composition leave-one-model-out on the runs it is given: on the other held-out
# runs, which made them no longer held out. From the repository's root:
#   bash benchmarks/heldout_runs.sh [DATASET=datasets/cpu-amd-epyc] [SET=batch32]
set -eu
DATASET=${DATASET:-datasets/cpu-amd-epyc}
SET=${SET:-batch32}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
id=$(basename "$DATASET")
mkdir -p "$TMP/$id/models"
cp "$DATASET/fingerprint.json" "$TMP/$id/"
cp -r "$DATASET/hosts" "$TMP/$id/"
cp "$DATASET/heldout/$SET"/part-*.parquet "$TMP/$id/models/"
.venv/bin/python -m latpred check "$TMP/$id" --out "runs/heldout-$id-$SET"
