#!/bin/bash
# Run on the H200 through the device tool from the checkout (2026-12-02, machine 9):
# bash datasets/nvidia-h200/diagnostics/reference_forward_groups.sh, with
# the wheels of .whl carried. Diagnostic: nas-dev's eager runs again, in four groups of 18 architectures, each group's rounds
# also timing three nas-train architectures (nas-1002 MBConv, nas-1003 encoder, nas-1004 ResNet) as
# reference forwards: does a reference forward in the same rounds follow the host better than probes?
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u; cat /proc/sys/kernel/random/boot_id
DEV=(0 1 2 3 4 5 12 13 14 15 16 17 24 25 26 27 28 29 36 37 38 39 40 41 48 49 50 51 52 53 60 61 62 63 64 65 72 73 74 75 76 77 84 85 86 87 88 89 96 97 98 99 100 101 108 109 110 111 112 113 120 121 122 123 124 125 132 133 134 135 136 137)
for g in 0 1 2 3; do
  S=$(IFS=,; echo "${DEV[*]:$((g*18)):18}"),1002,1003,1004
  timeout 130 python3 -m latpred collect nas --out /tmp/ref$g --modes eager --seeds "$S" --group 24 \
     --host-note "reference-forward diagnostic, group $g" 2>&1 | grep -v -i warn | tail -2
done
mkdir -p /tmp/pack && for g in 0 1 2 3; do cp -r /tmp/ref$g/*/ /tmp/pack/group$g; done
(cd /tmp/pack && tar czf $OUT/refdiag.tgz .) && ls -la $OUT; date -u
