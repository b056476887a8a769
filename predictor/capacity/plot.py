"""Latency-versus-load curves as a PNG: p50 and p99 against offered load, with the p99 objective and
the planned load marked, so a plan's headroom can be seen rather than read off one number.

matplotlib is imported inside the functions: the predictor package, and the service that imports
it, must load without it (it comes with the ``plot`` extra). The figure is drawn on matplotlib's Agg
canvas directly (``matplotlib.figure.Figure``, no pyplot): no global backend is switched and no
figure is left registered in pyplot's state, which matters when a long-lived process draws many.
The y axis is logarithmic: near capacity p99 grows by orders of magnitude, and a linear axis would
flatten the part of the curve where a plan actually sits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from predictor.capacity.load_curve import LoadPoint

#: How to get matplotlib, named in the error when it is missing.
INSTALL_HINT = "pip install 'latpred[plot]'"
#: The PNG's size in pixels (width, height) unless asked otherwise, and its resolution.
DEFAULT_SIZE_PX = (1200, 800)
DPI = 100


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed, so no plot can be drawn; the message says how to install it."""


def require_matplotlib() -> None:
    """Raise :class:`PlotUnavailable` with the install command unless matplotlib imports. A command
    calls it before its slow part, so a missing extra is reported before minutes of simulation."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    except ImportError as exc:
        raise PlotUnavailable(f"plotting needs matplotlib, which is not installed ({exc}): {INSTALL_HINT}") from None


def curve_title(model: str, device: str, precision: str, mode: str, max_batch: int, max_queue_delay_us: float,
                gpus: int = 1, slow_end: bool = False, arrivals: str | None = None, instances: int = 1) -> str:
    """The title of one setting's curve: what was predicted (model, device, precision, mode), the
    batching it was simulated with, for a plan made for the slow end of the latency prediction's
    interval that its curve is the slow end's, the instances per GPU where more than one, and the
    arrivals where they are not Poisson
    (``arrivals``: a recorded load's name, or a cv), so a PNG found later still says what it shows."""
    where = ("one GPU" if gpus == 1 else f"per GPU of {gpus}") + (f", {instances} instances" if instances > 1 else "")
    end = "; latency at the slow end of its prediction's interval" if slow_end else ""
    return (f"{model} on {device}, {precision}, {mode}{end}\n"
            f"max batch {max_batch}, max queue delay {max_queue_delay_us:g} us, {where}"
            + (f"\narrivals: {arrivals}" if arrivals else ""))


def render_load_curves(path: Path, curves: Mapping[str, Sequence[LoadPoint]], *, title: str,
                       slo_p99_ms: float | None = None, planned_qps: float | None = None,
                       capacity_qps: float | None = None, xlabel: str = "offered load (requests/s)",
                       size_px: tuple[int, int] = DEFAULT_SIZE_PX) -> Path:
    """Write ``curves`` (label -> points; one unlabelled curve is ``{"": points}``) to ``path`` as a
    PNG of ``size_px`` pixels: p99 solid and p50 dashed against offered load (where a curve's points
    have a p99 range, shaded between its ends), a horizontal line at
    ``slo_p99_ms``, a vertical one at ``planned_qps`` and a dotted one at ``capacity_qps`` (each
    left out when None). Raises :class:`PlotUnavailable` without matplotlib, OSError when the
    file cannot be written."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    if not curves or any(len(points) == 0 for points in curves.values()):
        raise ValueError("curves: need at least one curve, each with at least one point")
    width, height = size_px
    if not 100 <= width <= 10_000 or not 100 <= height <= 10_000:
        raise ValueError(f"size_px: width and height must be in [100, 10000] pixels, not {size_px!r}")

    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI)
    FigureCanvasAgg(fig)  # attaches itself to fig: savefig then renders with Agg
    ax = fig.add_subplot()
    for i, (label, points) in enumerate(curves.items()):
        ordered = sorted(points, key=lambda p: p.qps)
        qps = [p.qps for p in ordered]
        colour = f"C{i % 10}"  # the default colour cycle, p50 and p99 of one curve alike
        prefix = f"{label}: " if label else ""
        ax.plot(qps, [p.p99_ms for p in ordered], "-", color=colour, marker=".", label=f"{prefix}p99")
        ax.plot(qps, [p.p50_ms for p in ordered], "--", color=colour, label=f"{prefix}p50")
        ranged = [p.p99_low_ms is not None and p.p99_high_ms is not None for p in ordered]
        if any(ranged):  # up to the load the slow end can serve (load_curve.LoadPoint)
            ax.fill_between(qps, [p.p99_low_ms or math.nan for p in ordered],
                            [p.p99_high_ms or math.nan for p in ordered], where=ranged, color=colour,
                            alpha=0.15, lw=0, label=f"{prefix}p99 at either end of the prediction's 90% interval")
    if slo_p99_ms is not None:
        ax.axhline(slo_p99_ms, color="tab:red", lw=1.2, label=f"p99 objective {slo_p99_ms:g} ms")
    if planned_qps is not None:
        ax.axvline(planned_qps, color="black", lw=1.2, label=f"planned load {planned_qps:.4g} qps")
    if capacity_qps is not None:
        ax.axvline(capacity_qps, color="grey", lw=1, ls=":", label=f"capacity {capacity_qps:.4g} qps")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda value, _pos: f"{value:g}")  # 2, 5, 20 ms rather than 10^0.3
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(FuncFormatter(
        lambda value, _pos: f"{value:g}" if round(value / 10 ** math.floor(math.log10(value))) in (2, 5) else ""))
    ax.set_xlim(left=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("latency, queueing included (ms, log scale)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, format="png")  # no bbox_inches="tight": that would change the pixel size
    return path


__all__: Sequence[str] = ["INSTALL_HINT", "PlotUnavailable", "curve_title", "render_load_curves",
                          "require_matplotlib"]
