"""Where the repository's datasets are: found from this file, so that the commands that read them
(train, validate, the transfer fit, the serving checks) work from any directory, not only from the
repository's root. (A module of its own: the CLI imports it without pandas.)"""

from __future__ import annotations

from pathlib import Path

DATASETS_DIR = Path(__file__).resolve().parents[1] / "datasets"
#: the H200's dataset, what training and validation read by default
H200_DATASET = DATASETS_DIR / "nvidia-h200"
#: the suites' graphs, exports and runs (zoo, nas-train, nas-dev, nas-test)
SUITES_DIR = DATASETS_DIR / "suites"
