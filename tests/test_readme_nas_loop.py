"""The README's NAS-loop example runs as written and answers what it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_nas_loop_runs_and_ranks_wider_deeper_candidates_slower() -> None:
    pytest.importorskip("torch")
    section = README.read_text().split("## In a NAS loop", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code, "the README's NAS-loop section has no python example"
    scope: dict = {}
    exec(compile(code.group(1), "README.md", "exec"), scope)  # our own README
    graphs, results, kept = scope["graphs"], scope["results"], scope["kept"]
    assert len(results) == len(graphs) * len(scope["variants"]) == 8
    assert all(r.layers == [] and r.low_ms < r.total_ms < r.high_ms for r in results)
    batch1 = {g.name: r.total_ms for g, r in zip(graphs, results[::2])}
    assert batch1["w64-d4"] > batch1["w32-d2"]  # more and wider layers cost more
    assert [r.mode for r in results[:2]] == ["cudagraph", "eager"] and results[1].batch == 32
    assert set(kept) <= set(batch1)
    predictor = scope["predictor"]
    single = predictor.predict(graphs[3], 32, "fp16", "eager")
    assert results[7].total_ms == single.total_ms  # the batch path answers what one call does


def test_predict_many_refuses_a_variant_for_another_device() -> None:
    from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle
    from predictor.devices import resolve_device
    from predictor.predict import Predictor
    from predictor.variant import Variant
    from predictor.zoo import load_zoo_graph

    predictor = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200"), resolve_device("h200"))
    with pytest.raises(ValueError, match=r"variants\[1\]\.device"):
        predictor.predict_many([load_zoo_graph("resnet18")], [Variant(), Variant(device="a100")])


def test_predict_many_takes_generators_as_lists() -> None:
    """A NAS loop may hand over generators: each was walked three times, and the first walk spent
    it, so predict_many answered an empty list without a word."""
    from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle
    from predictor.devices import resolve_device
    from predictor.predict import Predictor
    from predictor.variant import Variant
    from predictor.zoo import load_zoo_graph

    predictor = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200"), resolve_device("h200"))
    graphs = [load_zoo_graph("resnet18"), load_zoo_graph("alexnet")]
    variants = [Variant(batch=1), Variant(batch=8, precision="fp16")]
    listed = [r.total_ms for r in predictor.predict_many(graphs, variants)]
    generated = predictor.predict_many((g for g in graphs), (v for v in variants))
    assert len(listed) == 4 and [r.total_ms for r in generated] == listed
