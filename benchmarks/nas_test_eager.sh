#!/bin/bash
# nas-test's 72 architectures eagerly on this machine (issue #11's eager target, issue #12's host):
# `latpred collect nas` in groups of 24, each group probing the host before and after and sampling
# it, reference forwards included, between rounds, as the dataset's runs were measured. A fresh
# measurement of the scored suite on another host and day: scored beside the dataset's, never
# fitted or tuned on.
#   OUT=<folder> NOTE="machine 19, 2026-12-05" [MAX_SECONDS=240] bash benchmarks/nas_test_eager.sh
# Brings back $OUT/nas_test_eager.tgz (<device-id>/{nas,hosts,sweep_log.jsonl}); score it here with
#   latpred validate --suite nas-test --dataset <that folder>/<device-id>
set -u
source benchmarks/device_env.sh
NAS_TEST=6-11,18-23,30-35,42-47,54-59,66-71,78-83,90-95,102-107,114-119,126-131,138-143
{ echo "boot_id $(cat /proc/sys/kernel/random/boot_id)"; date -u; } > $OUT/nas_test_eager.txt
python3 -m latpred collect nas --out $OUT/root --modes eager --seeds $NAS_TEST --group 24 \
  --max-seconds ${MAX_SECONDS:-240} --host-note "${NOTE:-unnamed machine}, nas-test eager" >> $OUT/nas_test_eager.txt 2>&1 \
  || echo "collect nas stopped (exit $?)" >> $OUT/nas_test_eager.txt
date -u >> $OUT/nas_test_eager.txt
tar -C $OUT/root -czf $OUT/nas_test_eager.tgz . && rm -rf $OUT/root
tail -20 $OUT/nas_test_eager.txt
