#!/bin/bash
# Issue #12's 15 s: CLI probes as is and on a core shared with a busy loop, with the reference
# forwards' rounds under the probe's budget; then each reference forward's first call
# (benchmarks/probe_phases.py) and the GPU tests of the probe.
# On the GPU machine, from the repository's root: OUT=<folder> bash benchmarks/probe_budget.sh
# (wheels of what that machine lacks, pydantic and pandera, in .whl/ if they are not installed).
set -u
source benchmarks/device_env.sh
mkdir -p $OUT/p
{ echo "boot_id $(cat /proc/sys/kernel/random/boot_id)"; date -u; nproc; } > $OUT/summary.txt
for i in 1 2; do
  s=$(date +%s%N); python3 -m latpred host probe --note "budget check, as is, $i" --out $OUT/p/asis-$i.json 2>>$OUT/p/stderr.txt; tail -1 $OUT/p/stderr.txt >> $OUT/summary.txt
  echo "as is $i: CLI wall $(( ($(date +%s%N) - s) / 1000000 )) ms" >> $OUT/summary.txt
done
taskset -c 3 python3 -c "while True: pass" & BUSY=$!
for i in 1 2 3; do
  s=$(date +%s%N); taskset -c 3 python3 -m latpred host probe --note "budget check, core 3 shared with a busy loop, $i" --out $OUT/p/contended-$i.json 2>>$OUT/p/stderr.txt; tail -1 $OUT/p/stderr.txt >> $OUT/summary.txt
  echo "contended $i: CLI wall $(( ($(date +%s%N) - s) / 1000000 )) ms" >> $OUT/summary.txt
done
kill $BUSY
python3 - >> $OUT/summary.txt <<'PY'
import json, glob, os
for f in sorted(glob.glob(os.environ["OUT"] + "/p/*.json")):
    p = json.load(open(f))
    print(os.path.basename(f), "probe_seconds", p["probe_seconds"], "elementwise us", round(p["costs_us"]["elementwise"], 2),
          "refs", len(p.get("reference_ms") or {}), "nas-1004|b1|fp32 ms", round((p.get("reference_ms") or {}).get("nas-1004|b1|fp32", float("nan")), 3), "note:", p.get("note"))
PY
LAUNCH_NS=$(date +%s%N) python3 benchmarks/probe_phases.py --label "warm-up order" --detail 2>&1 | grep -v -i warn > $OUT/first_calls.txt
python3 -m pytest -q -m gpu tests/collectors/test_host_probe.py -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1; tail -1 $OUT/gpu_tests.txt >> $OUT/summary.txt
tar -C $OUT -czf $OUT/probes.tgz p && rm -rf $OUT/p
cat $OUT/summary.txt; grep -v '^ *aten\|^ *cuda\|^---\|^ *Name' $OUT/first_calls.txt | head -30
