#!/bin/bash
# The zoo's ONNX exports (`latpred collect onnx`, both exporters, every model exported as_trained),
# in 8 processes at once, each on its share of the models balanced by the seconds the last
# exports took; then a dozen NAS architectures exported the same way, to compare with the
# suite's committed exports (made before as_trained). On the GPU machine (which has onnxscript,
# torchvision and transformers), from the repository's root: OUT=<folder> bash benchmarks/export_zoo_onnx.sh
# Brings back $OUT/zoo_onnx.tgz (dynamo/, legacy/, exports.jsonl), $OUT/nas_check.tgz and $OUT/export.txt.
set -u
source benchmarks/device_env.sh
WORKERS=${WORKERS:-8}
{ echo "boot_id $(cat /proc/sys/kernel/random/boot_id)"; date -u; nproc
  python3 -c "import torch, onnx, onnxscript, torchvision, transformers; print('torch', torch.__version__, 'onnx', onnx.__version__, 'onnxscript', onnxscript.__version__, 'torchvision', torchvision.__version__, 'transformers', transformers.__version__)"
} > $OUT/export.txt 2>&1
python3 - "$WORKERS" > $OUT/groups.txt <<'PY'
import json, sys
from collectors.zoo_models import HELD_OUT_GRAPH_MODELS, ZOO
seconds: dict[str, float] = {}
for line in open("datasets/suites/zoo/onnx/exports.jsonl"):
    record = json.loads(line)
    seconds[record["model"]] = seconds.get(record["model"], 0.0) + (record["seconds"] or 60.0)
groups: list[list[str]] = [[] for _ in range(int(sys.argv[1]))]
load = [0.0] * len(groups)
for name in sorted({**ZOO, **HELD_OUT_GRAPH_MODELS}, key=lambda n: -seconds.get(n, 60.0)):
    i = load.index(min(load))
    groups[i].append(name)
    load[i] += seconds.get(name, 60.0)
for group in groups:
    print(",".join(group))
PY
i=0
pids=()
while read -r models; do
  [ -n "$models" ] || continue  # (more workers than models: an empty --models would export them all)
  OMP_NUM_THREADS=2 python3 -m latpred collect onnx --out $OUT/w$i --models "$models" > $OUT/w$i.log 2>&1 &
  pids+=($!); i=$((i + 1))
done < $OUT/groups.txt
OMP_NUM_THREADS=2 python3 -m latpred collect onnx --out $OUT/nas_check --nas-seeds 0-11 > $OUT/nas_check.log 2>&1 &
pids+=($!)
started=$(date +%s)
for pid in "${pids[@]}"; do wait $pid || echo "an export process failed (exit $?): see its log below" >> $OUT/export.txt; done
echo "exports took $(( $(date +%s) - started )) s" >> $OUT/export.txt
mkdir -p $OUT/zoo/dynamo $OUT/zoo/legacy
for w in $OUT/w*/; do
  cp $w/dynamo/*.onnx.gz $OUT/zoo/dynamo/ 2>/dev/null; cp $w/legacy/*.onnx.gz $OUT/zoo/legacy/ 2>/dev/null
  cat $w/exports.jsonl >> $OUT/zoo/exports.jsonl
done
cat $OUT/w*.log $OUT/nas_check.log >> $OUT/export.txt
tar -C $OUT/zoo -czf $OUT/zoo_onnx.tgz . && tar -C $OUT -czf $OUT/nas_check.tgz nas_check
rm -rf $OUT/zoo $OUT/w* $OUT/nas_check $OUT/groups.txt $OUT/nas_check.log
tail -60 $OUT/export.txt
