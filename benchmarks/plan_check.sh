#!/bin/bash
# Capacity plans served by Triton, in one device call (benchmarks/plan_check.py makes the plans here
# and scores what comes back). Each plan of PLANS (default benchmarks/results/plan_check_plans.json)
# is served in a Triton of its own, its model under its setting at its rate (`latpred collect
# serving --server triton --rates`, its stdin closed: the loop reads the plans there), so that a
# server that dies takes no other plan's load with it;
# then the empty model at two settings, the serving host's own path. PyTriton travels as in
# triton_serving.sh (carry .whl; datasets and bundles stay behind).
# With LATENCIES (comma-separated files of benchmarks/own_path_plans.py latencies), the plans are
# made here instead, with the serving host's own path: the empty model is served first, its path
# fitted, and the plans made from the committed latencies with it (root/plans.json, root/own_path.json).
# Brings back $OUT/plan_check.tgz (a folder per plan, plan-<model>-<setting>-<qps>/, and empty/, each
# with <device>/serving-triton inside; host_before.json, host_after.json) and $OUT/plan_check.txt.
#   OUT=<folder> [PLANS=...|LATENCIES=...] [LOAD_SECONDS=5] [LIMIT=540] bash benchmarks/plan_check.sh
set -u
source benchmarks/device_env.sh
log=$OUT/plan_check.txt
gpu_machine_header $log
unpack_pytriton $log
plans=${PLANS:-benchmarks/results/plan_check_plans.json}
LOAD_SECONDS=${LOAD_SECONDS:-5}
LIMIT=${LIMIT:-540}
root=$OUT/root
mkdir -p $root
ends=$(( $(date +%s) + LIMIT ))
python3 -m latpred host probe --no-references --note "before the plans" --out $root/host_before.json >> $log 2>&1
# the serving host's own path: the empty model at two settings (before the plans when they are made with it)
serve_empty() {
  local left=$(( ends - $(date +%s) - $1 ))
  if [ $left -lt 30 ]; then echo "empty: not served, out of time" >> $log; return 1; fi
  echo "== empty" >> $log
  timeout -k 10 $left python3 -m latpred collect serving --server triton --precision fp16 --models empty \
    --setting mb16-delay500us --setting mb8-nodelay --levels 0.3,0.6 --seconds $LOAD_SECONDS \
    --out $root/empty >> $log 2>&1 || { echo "empty: stopped (exit $?)" >> $log; return 1; }
}
kept=60  # seconds the plans' loop leaves for what follows it: the empty model and the probe
if [ -n "${LATENCIES:-}" ]; then
  [ -z "${PLANS:-}" ] || echo "PLANS ignored: with LATENCIES the plans are made here" >> $log
  kept=15  # the probe only
  plans=$root/plans.json
  # a path fitted on an empty model whose server failed is no host's path: no plans then
  serve_empty 300 && timeout -k 10 120 python3 benchmarks/own_path_plans.py plan --latencies "$LATENCIES" \
    --root $root >> $log 2>&1 || echo "no plans made with the host's own path (exit $?)" >> $log
fi
echo "plans $plans, $LOAD_SECONDS s a load, limit $LIMIT s" >> $log
# one line per plan: its folder (plan_check.py's run_name), model, setting and rate, exactly; the
# lightest loads first, so that a call short of time leaves out the heaviest (those most likely to be
# over what Triton serves anyway)
python3 - "$plans" > $root/plans.txt 2>> $log <<'PY'
import json, sys
for p in sorted(json.load(open(sys.argv[1]))["plans"], key=lambda p: p["fraction"]):
    print(f"plan-{p['model']}-{p['setting']}-{p['qps']:.0f} {p['model']} {p['setting']} {p['qps']!r}")
PY
[ -s $root/plans.txt ] || echo "no plan read from $plans" >> $log
while read -r name model setting rate; do
  left=$(( ends - $(date +%s) - kept ))
  if [ $left -lt 30 ]; then echo "$name: not served, out of time" >> $log; continue; fi
  echo "== $name" >> $log
  timeout -k 10 $(( left < 120 ? left : 120 )) python3 -m latpred collect serving --server triton --precision fp16 \
    --models $model --setting $setting --rates $rate --seconds $LOAD_SECONDS --out $root/$name < /dev/null >> $log 2>&1 \
    || echo "$name: stopped (exit $?)" >> $log
done < $root/plans.txt
[ -n "${LATENCIES:-}" ] || serve_empty 15
python3 -m latpred host probe --no-references --note "after the plans" --out $root/host_after.json >> $log 2>&1
date -u >> $log
tar -C $root -czf $OUT/plan_check.tgz . && rm -rf $root
grep -v -E '^[IW][0-9]{4} |^[|+]' $log | tail -80
