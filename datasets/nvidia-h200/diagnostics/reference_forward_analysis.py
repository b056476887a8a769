"""Would a reference forward timed in the same rounds follow the host better than its probes?

Reads ``nas_dev_reference_forwards_2026-12-02.json.gz`` (written from the four groups that
``reference_forward_groups.sh`` measured on one H200 lease) and predicts every run with the shipped
bundle from its group's run profile. Prints, for nas-dev's runs, the share within +-10% as
predicted from the profile, and divided by the median predicted/measured of the group's reference
runs (three nas-train architectures at every batch and precision, timed in the same rounds); as
predicted now, from the group's profile carrying those reference runs at batch 1 and 8 as its
reference forwards (predictor.host_references: calibrated by the fp32 ones), and as calibrated
by all 18 (until commit f751b6a, 2026-12-03); and how the runs compare with the dataset's measurement of the
same units on another lease.

    .venv/bin/python datasets/nvidia-h200/diagnostics/reference_forward_analysis.py  # -> its .txt
    .venv/bin/python datasets/nvidia-h200/diagnostics/reference_forward_analysis.py --pack DIR

``--pack DIR`` first writes the diagnostic file from the device's ``refdiag.tgz`` unpacked in DIR
(``group0`` .. ``group3``, each a ``collect nas`` root's device folder).
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import pandas as pd

from predictor.bundle import Bundle
from predictor.devices import resolve_device
from predictor.graph import Graph
from predictor.host_profile import REFERENCE_KEYS, HostProfile, reference_key
from predictor.predict import Predictor
from training.suites import load_nas_runs

HERE = Path(__file__).parent
DIAGNOSTIC = HERE / "nas_dev_reference_forwards_2026-12-02.json.gz"
REFERENCES = ("nas-1002", "nas-1003", "nas-1004")
SUITES = Path("datasets/suites")


WHAT = ("nas-dev's eager runs measured again on one H200 lease (machine 9, boot id 0e94f657, 2026-12-02), in "
        "four groups of 18 architectures whose interleaved rounds also timed three nas-train architectures "
        "(nas-1002 MBConv, nas-1003 encoder, nas-1004 ResNet) as reference forwards; written by "
        "reference_forward_groups.sh, read by reference_forward_analysis.py; not training data")
KEPT = ["model", "batch", "precision", "mode", "latency_ms", "p10_ms", "p90_ms", "cv", "host_profile", "timestamp"]


def pack(unpacked: Path) -> None:
    """The four groups' runs, sweep logs and host profiles as one gzipped JSON (``DIAGNOSTIC``)."""
    groups = []
    for g in range(4):
        root = unpacked / f"group{g}"
        runs = pd.concat([pd.read_parquet(p) for p in sorted((root / "nas").glob("part-*.parquet"))])
        runs = runs[KEPT].assign(timestamp=runs["timestamp"].astype(str))
        hosts = {}
        for path in (root / "hosts").glob("*.json"):
            profile = json.loads(path.read_text())
            hosts[profile["id"]] = profile
        log = [json.loads(line) for line in (root / "sweep_log.jsonl").read_text().splitlines() if line.strip()]
        groups.append({"group": g, "sweep_log": log, "host_profiles": hosts, "runs": runs.to_dict("records")})
    with gzip.open(DIAGNOSTIC, "wt") as f:
        json.dump({"what": WHAT, "groups": groups}, f, sort_keys=True)


def within(ratios: pd.Series) -> float:
    return float(((ratios - 1).abs() <= 0.1).mean())


def main() -> None:
    bundle = Bundle.load(Path("predictor/bundles/nvidia-h200"))
    # calibrating, as predictions did until 2026-12-05 (now Predictor's opt-in)
    predictor = Predictor(bundle, resolve_device(bundle.device_id), calibrate_hosts=True)
    rows = []
    for group in json.loads(gzip.open(DIAGNOSTIC, "rt").read())["groups"]:
        hosts = {i: HostProfile.model_validate(p) for i, p in group["host_profiles"].items()}
        forwards: dict[str, dict[str, float]] = {}  # profile -> its group's reference runs, as reference forwards
        for r in group["runs"]:
            key = reference_key(r["model"], r["batch"], r["precision"])
            if key in REFERENCE_KEYS:
                forwards.setdefault(r["host_profile"], {})[key] = r["latency_ms"]
        calibrated = {i: h.model_copy(update={"schema_version": 2, "reference_ms": forwards.get(i)})
                      for i, h in hosts.items()}
        for r in group["runs"]:
            reference = r["model"] in REFERENCES
            graph = Graph.load(SUITES / ("nas-train" if reference else "nas") / "torch" / f"{r['model']}.json")
            p = predictor.predict(graph, r["batch"], r["precision"], "eager", with_layers=False,
                                  host=hosts[r["host_profile"]])
            q = predictor.predict(graph, r["batch"], r["precision"], "eager", with_layers=False,
                                  host=calibrated[r["host_profile"]])
            all18 = predictor.calibrated_host(calibrated[r["host_profile"]], keys=REFERENCE_KEYS)[0]
            q18 = predictor.predict(graph, r["batch"], r["precision"], "eager", with_layers=False, host=all18)
            rows.append({**r, "group": group["group"], "reference": reference, "ratio": p.total_ms / r["latency_ms"],
                         "as_predicted_now": q.total_ms / r["latency_ms"],
                         "from_all_18": q18.total_ms / r["latency_ms"]})
    runs = pd.DataFrame(rows)
    dev = runs[~runs["reference"]].copy()
    by_group = runs[runs["reference"]].groupby("group")["ratio"].median()
    dev["calibrated"] = dev["ratio"] / dev["group"].map(by_group)
    print(f"bundle {bundle.version}; nas-dev eager runs: {len(dev)}, reference runs: {int(runs['reference'].sum())}")
    print("per group, median predicted/measured: nas-dev", dev.groupby("group")["ratio"].median().round(3).to_dict(),
          "references", by_group.round(3).to_dict())
    print(f"within +-10% from the group's profile: {within(dev['ratio']):.1%}; "
          f"divided by its reference runs' median: {within(dev['calibrated']):.1%}; "
          "calibrated by the fp32 ones at batch 1 and 8, as predictions now are: "
          f"{within(dev['as_predicted_now']):.1%}; "
          f"by all 18 (fp16 and bf16 too, as until commit f751b6a): {within(dev['from_all_18']):.1%}")
    earlier = load_nas_runs(Path("datasets/nvidia-h200"))
    earlier = earlier[earlier["mode"] == "eager"][["model", "batch", "precision", "latency_ms"]]
    again = dev.merge(earlier, on=["model", "batch", "precision"], suffixes=("", "_dataset"))
    moved = again["latency_ms"] / again["latency_ms_dataset"]
    print(f"the same units as the dataset measured them on another lease: median {moved.median():.3f}x, "
          f"{within(moved):.1%} within +-10%")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pack", type=Path, help="the device's refdiag.tgz, unpacked: write the diagnostic file first")
    args = parser.parse_args()
    if args.pack:
        pack(args.pack)
    main()
