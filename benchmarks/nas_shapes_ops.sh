#!/bin/bash
# The NAS training architectures' operator shapes swept at fp16 on a GPU's green-context partitions
# and on the whole GPU, in one device call. The transfer model's only rows of these shapes were the
# H200's (132 SMs): on the H100's 40- and 72-SM partitions the NAS suites' kernels alone summed to
# 1.01-1.07x of the measured runs at the median (nas-dev), where on the H200 and the H100 they sum
# to 0.91-0.96x (composition adding the rest), though the partitions' zoo-shape kernels under 50 us
# come out 0.99-1.01x (benchmarks/partition_nas_gap.py). The shapes: datasets/layer_shapes_nas.json (NAS seeds 1000-1287 only)
# with the block swaps' transposes of datasets/layer_shapes_transposed.json, one catalogue.
# For each of TARGETS (SMs asked for, or "all" for the whole GPU; default "66 all 33"), in a process
# of its own, `latpred collect ops [--sms N] --precisions fp16 --random-shapes 0` for SWEEP_S
# (default 200) or what is left. The GPU's dataset folders (datasets/<device-id>*) are copied into
# the root first, so each sweep continues its folder's shard numbering and skips what it holds.
# Brings back $OUT/nas_shapes_ops.tgz (what the sweeps wrote or appended to: new shards, host
# profiles, sweep logs; not the copies, which the H200's 200,000 rows would make too large to
# return) and $OUT/nas_shapes_ops.txt; untar it into datasets/.
#   OUT=<folder> NOTE="machine 23, 2026-12-05" [LIMIT=560] [TARGETS="66 all 33"] [SWEEP_S=200] bash benchmarks/nas_shapes_ops.sh
set -u
source benchmarks/device_env.sh
start=$(date +%s)
limit=${LIMIT:-560}
log=$OUT/nas_shapes_ops.txt
root=$OUT/root
gpu_machine_header $log
device=$(python3 -m latpred device 2>>$log | awk '/device_id:/ {print $2}')
echo "device $device" >> $log
mkdir -p $root
for folder in datasets/${device}*; do
  [ -d "$folder" ] && cp -r "$folder" $root/
done
stamp=$(mktemp) && sleep 1 && touch $stamp  # what the sweeps write is newer
python3 - "$root/layer_shapes.json" <<'EOF'
import json, sys
nas, swaps = (json.load(open(f"datasets/{name}.json")) for name in ("layer_shapes_nas", "layer_shapes_transposed"))
meta = {"made_by": "benchmarks/nas_shapes_ops.sh: datasets/layer_shapes_nas.json + datasets/layer_shapes_transposed.json",
        "nas": nas["meta"], "transposed": swaps["meta"]}
json.dump({"meta": meta, "shapes": nas["shapes"] + swaps["shapes"]}, open(sys.argv[1], "w"))
EOF
for target in ${TARGETS:-66 all 33}; do
  left=$(( limit - ($(date +%s) - start) - 30 ))
  if [ $left -lt 60 ]; then echo "$target: not started, ${left} s left" >> $log; continue; fi
  budget=$(( ${SWEEP_S:-200} < left - 25 ? ${SWEEP_S:-200} : left - 25 ))
  sms=""; [ "$target" != all ] && sms="--sms $target"
  echo "== $target ($(date -u +%T), ${left} s left, ${budget} s of sweeping)" >> $log
  timeout $left python3 -m latpred collect ops $sms --precisions fp16 --random-shapes 0 --budget-s $budget \
    --out $root --host-note "${NOTE:-unnamed machine}, NAS-shape ops on $target SMs" >> $log 2>&1 \
    || echo "$target: stopped (exit $?)" >> $log
done
date -u >> $log
rm $root/layer_shapes.json
(cd $root && find . -type f -newer $stamp | sort > $stamp.list)
cat $stamp.list >> $log
tar -C $root -czf $OUT/nas_shapes_ops.tgz -T $stamp.list && rm -rf $root
tail -30 $log
