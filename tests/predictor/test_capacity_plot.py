"""predictor.capacity.load_curve and .plot, and ``latpred capacity --plot``: a curve whose p99 rises with
load and whose throughput follows the load, a real PNG of the asked size, the CLI writing it from the
shipped H200 bundle, and clear errors for a bad path or a missing matplotlib."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from latpred import main
from predictor.capacity.load_curve import LoadPoint, capacity_qps, load_curve, qps_range
from predictor.capacity.planner import plan
from predictor.capacity.plot import INSTALL_HINT, PlotUnavailable, curve_title, render_load_curves
from predictor.capacity.simulator import BatchingConfig, LatencyModel

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: 2 ms plus 0.05 ms a sample, with a little run-to-run spread: batch 16 serves 5,714 qps
LATENCY = LatencyModel(lambda batch: 2.0 + 0.05 * batch, sigma=0.05)
CONFIG = BatchingConfig(max_batch=16)


@pytest.fixture(scope="module")
def curve() -> list[LoadPoint]:
    return load_curve(LATENCY, CONFIG, qps_range(capacity_qps(LATENCY, CONFIG), points=16))


def test_capacity_is_the_best_batch_back_to_back() -> None:
    assert capacity_qps(LATENCY, CONFIG) == pytest.approx(16 / 2.8 * 1e3)
    assert capacity_qps(LATENCY, BatchingConfig(max_batch=16, instances=3)) == pytest.approx(3 * 16 / 2.8 * 1e3)
    assert capacity_qps(LATENCY, BatchingConfig(max_batch=1)) == pytest.approx(1 / 2.05 * 1e3)


def test_the_range_spans_five_to_98_percent_of_capacity_and_holds_the_loads_asked() -> None:
    values = qps_range(1_000, points=10)
    assert len(values) == 10 and values[0] == pytest.approx(50) and values[-1] == pytest.approx(980)
    assert list(values) == sorted(values)
    with_plan = qps_range(1_000, points=10, include=[333, 1_500])
    assert 333 in with_plan and with_plan[-1] == 1_500 and len(with_plan) == 12
    for bad in ({"capacity": 0}, {"capacity": 1_000, "points": 1}, {"capacity": 1_000, "low": 0.5, "high": 0.4}):
        with pytest.raises(ValueError):
            qps_range(**bad)


def test_p99_never_falls_as_the_load_grows_and_the_knee_shows(curve: list[LoadPoint]) -> None:
    p99 = [p.p99_ms for p in curve]
    assert all(later >= earlier for earlier, later in zip(p99, p99[1:])), p99
    assert p99[-1] > 3 * p99[0]  # 98% of capacity queues; 5% barely does
    assert all(p.p50_ms <= p.p99_ms for p in curve)
    batches = [p.mean_batch_size for p in curve]
    assert all(later >= earlier for earlier, later in zip(batches, batches[1:])) and batches[-1] > 10


def test_throughput_follows_the_offered_load_below_capacity(curve: list[LoadPoint]) -> None:
    for point in curve:
        assert point.throughput_qps == pytest.approx(point.qps, rel=0.03)
        assert 0 < point.utilisation <= 1


def test_the_curve_passes_through_the_plans_own_point() -> None:
    chosen = plan(LATENCY, 2_000, 10.0)
    config = BatchingConfig(max_batch=chosen.max_batch, max_queue_delay_us=chosen.max_queue_delay_us)
    (point,) = load_curve(LATENCY, config, [chosen.per_gpu_qps])
    assert point.p99_ms == pytest.approx(chosen.p99_ms) and point.p50_ms == pytest.approx(chosen.p50_ms)


def test_a_predicted_latency_gives_each_point_its_p99_range_and_the_plot_shades_it(tmp_path: Path) -> None:
    """A latency with an interval (as a prediction has) is also simulated at both ends of it at each
    load, on the same draws: the plan's p99 range at the plan's own load, a band around the p99
    elsewhere, shaded in the PNG (it has more coloured pixels than the same curve without it)."""
    import matplotlib.image

    predicted = LatencyModel(LATENCY.median_ms, 0.05, interval_ms=lambda b: (0.85 * LATENCY(b)[0],
                                                                             1.2 * LATENCY(b)[0]))
    chosen = plan(predicted, 2_000, 10.0)
    config = BatchingConfig(max_batch=chosen.max_batch, max_queue_delay_us=chosen.max_queue_delay_us)
    (point,) = load_curve(predicted, config, [chosen.per_gpu_qps])
    assert (point.p99_low_ms, point.p99_high_ms) == pytest.approx((chosen.p99_low_ms, chosen.p99_high_ms))
    loads = qps_range(capacity_qps(predicted, config), points=8)
    banded, plain = load_curve(predicted, config, loads), load_curve(LATENCY, config, loads)
    assert all(p.p99_low_ms is None for p in plain)
    assert [p.p99_ms for p in banded] == pytest.approx([p.p99_ms for p in plain])
    slow_capacity = capacity_qps(predicted.at_bound("high"), config)
    assert all(p.p99_low_ms is not None and p.p99_high_ms is not None and p.p99_low_ms < p.p99_ms < p.p99_high_ms
               for p in banded if p.qps < slow_capacity)
    beyond = [p for p in banded if p.qps >= slow_capacity]  # the slow end's queue would never drain there
    assert beyond and all(p.p99_low_ms is None and p.p99_high_ms is None for p in beyond)
    # a slow-end model's own run is its range's high end, and its low end is the median model's
    slow = load_curve(predicted.for_plan("slow_end"), config, loads)
    ranged = [p for p in slow if p.qps < slow_capacity]
    assert [p.p99_high_ms for p in ranged] == [p.p99_ms for p in ranged]
    assert [p.p99_low_ms for p in slow] == [p.p99_low_ms for p in banded]
    shaded = {}
    for name, points in (("banded", banded), ("plain", plain)):
        path = render_load_curves(tmp_path / f"{name}.png", {"": points}, title=name)
        pixels = matplotlib.image.imread(path)[..., :3]
        shaded[name] = int((pixels.min(axis=2) < 0.97).sum())
    assert shaded["banded"] > shaded["plain"] * 3  # (a legend entry alone makes it about 1.5x)


@pytest.mark.parametrize("values", [[], [100, -5], [float("nan")], [2e7]])
def test_loads_that_are_not_rates_are_refused(values: list[float]) -> None:
    with pytest.raises(ValueError, match="qps_values"):
        load_curve(LATENCY, CONFIG, values)


@pytest.mark.parametrize("size", [(1200, 800), (640, 480)])
def test_the_plot_is_a_png_of_the_asked_size(curve: list[LoadPoint], tmp_path: Path, size: tuple[int, int]) -> None:
    import matplotlib.image

    path = render_load_curves(tmp_path / "curve.png", {"": curve}, title=curve_title(
        "toy", "NVIDIA H200", "fp16", "cudagraph", 16, 0), slo_p99_ms=10, planned_qps=2_000,
        capacity_qps=capacity_qps(LATENCY, CONFIG), size_px=size)
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[:2] == (size[1], size[0])
    assert pixels[..., :3].min() < 0.5  # something is drawn on the white page


def test_several_curves_share_one_plot(curve: list[LoadPoint], tmp_path: Path) -> None:
    delayed = load_curve(LATENCY, BatchingConfig(max_batch=16, max_queue_delay_us=1000), [p.qps for p in curve])
    path = render_load_curves(tmp_path / "two.png", {"delay 0": curve, "delay 1000 us": delayed}, title="two")
    assert path.read_bytes().startswith(PNG_MAGIC)
    with pytest.raises(ValueError, match="curves"):
        render_load_curves(tmp_path / "none.png", {"": []}, title="empty")


def test_without_matplotlib_the_error_says_how_to_install_it(curve: list[LoadPoint], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what `import matplotlib` meets when it is absent
    with pytest.raises(PlotUnavailable, match=INSTALL_HINT.replace("[", r"\[").replace("]", r"\]")):
        render_load_curves(tmp_path / "curve.png", {"": curve}, title="t")
    assert not (tmp_path / "curve.png").exists()
    result = CliRunner().invoke(main, ["capacity", "resnet50", "--qps", "100", "--slo-p99-ms", "20",
                                       "--plot", str(tmp_path / "curve.png")])
    assert result.exit_code == 1 and INSTALL_HINT in result.output


def test_the_service_side_imports_without_matplotlib() -> None:
    code = ("import sys; import predictor.cli, predictor.capacity.plot, predictor.capacity.load_curve; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def capacity(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["capacity", "resnet50", "--qps", "2000", "--slo-p99-ms", "20", *args])
    return result.exit_code, result.stdout, result.stderr


def test_the_cli_writes_the_plans_load_curve_and_says_where(tmp_path: Path) -> None:
    target = tmp_path / "resnet50.png"
    code, plain, _ = capacity()
    assert code == 0, plain
    code, out, _ = capacity("--plot", str(target))
    assert code == 0, out
    assert target.read_bytes().startswith(PNG_MAGIC)
    assert out.startswith(plain)  # the plan's own output is what it was, then one line more
    added = out[len(plain):]
    assert added.count("\n") == 1 and str(target) in added and "load curve" in added


def test_under_json_the_plot_message_stays_off_stdout(tmp_path: Path) -> None:
    target = tmp_path / "curve.png"
    code, out, err = capacity("--format", "json", "--plot", str(target))
    assert code == 0, out + err
    assert json.loads(out)["model"] == "resnet50"
    assert str(target) in err and target.read_bytes().startswith(PNG_MAGIC)


def test_a_bursty_plans_curve_is_drawn_for_its_arrivals(tmp_path: Path) -> None:
    target = tmp_path / "bursty.png"
    code, out, _ = capacity("--arrival-cv", "3", "--plot", str(target))
    assert code == 0, out
    assert target.read_bytes().startswith(PNG_MAGIC) and "cv 3" in out and str(target) in out


@pytest.mark.parametrize("name, message", [("missing/curve.png", "does not exist"),
                                           ("curve.jpg", "must end in .png"),
                                           (".", "is a directory")])
def test_a_bad_plot_path_is_a_clear_usage_error(tmp_path: Path, name: str, message: str) -> None:
    code, out, err = capacity("--plot", str(tmp_path / name))
    assert code == 2 and "--plot" in err and message in err, err
    assert out == ""  # refused before planning
    assert list(tmp_path.iterdir()) == []


def test_a_slow_end_curve_simulates_only_the_low_end_again_for_each_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """The high end of a slow-end model's range is the point's own run, taken as it is: one more
    run a ranged point, where a median model's range takes two (``p99_at_ends``' runs, counted)."""
    import predictor.capacity.simulator as simulator

    runs: list[int] = []
    real = simulator.simulate

    def counted(*args: Any, **kwargs: Any) -> Any:
        runs.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(simulator, "simulate", counted)  # the runs p99_at_ends makes, not load_curve's own
    predicted = LatencyModel(LATENCY.median_ms, 0.05, interval_ms=lambda b: (0.85 * LATENCY(b)[0],
                                                                             1.2 * LATENCY(b)[0]))
    loads = [1_000.0, 2_000.0]
    assert all(p.p99_low_ms is not None for p in load_curve(predicted, CONFIG, loads))
    median_runs, runs[:] = len(runs), []
    assert all(p.p99_low_ms is not None for p in load_curve(predicted.for_plan("slow_end"), CONFIG, loads))
    assert (median_runs, len(runs)) == (2 * len(loads), len(loads))
