"""The end of a benchmark that writes a results file: its lines printed, and kept where it was
asked to write them (``benchmarks/results/`` by default), so that what was printed is what is
committed."""

from __future__ import annotations

from pathlib import Path


def publish(lines: list[str], out: Path) -> None:
    """Print ``lines`` and write them to ``out`` (its folder made where missing), one per line."""
    text = "\n".join(lines) + "\n"
    print(text, end="")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
