"""Measure one operator configuration and turn it into a dataset row.

A configuration that fails (out of memory, a dtype the kernel lacks, invalid parameters) becomes
a row with status "failed" and the reason, so the sweep records it and moves on.
"""

from __future__ import annotations

import gc
from typing import Any

import pandas as pd
import torch

from collectors.fingerprint import DeviceFingerprint, Nvml
from collectors.op_builders import BuildSpec, build
from collectors.op_config import OpConfig
from collectors.precision_flags import precision_flags, torch_dtype
from collectors.timing import Timer
from predictor.catalogue import FAMILIES, PARAMETERS, bytes_moved, flops, get_family
from predictor.clock_reasons import THROTTLE_MASK
from predictor.dataset_schema import SCHEMA_VERSION
from predictor.precision import get_precision


def provenance(fp: DeviceFingerprint) -> dict[str, Any]:
    """The columns that say which device and software stack measured a row."""
    return {
        "device_id": fp.device_id, "device_name": fp.name, "fingerprint": fp.digest,
        "torch_version": fp.torch_version or "", "cuda_version": fp.cuda_version,
        "cudnn_version": fp.cudnn_version, "driver_version": fp.driver_version,
    }


class OpMeasurer:
    """Callable that measures one ``OpConfig`` on one device and returns its row."""

    def __init__(self, fingerprint: DeviceFingerprint, timer: Timer, nvml: Nvml | None = None,
                 seed: int = 0, host_profile: str | None = None) -> None:
        """``host_profile`` is the id of the host profile probed before the sweep: every row
        carries it, so training learns host time relative to the host that measured it."""
        self.fp = fingerprint
        self.host_profile = host_profile
        self.device = torch.device("cuda" if fingerprint.kind == "cuda" else "cpu")
        self.timer = timer
        self.nvml = nvml
        self.seed = seed
        self._provenance = provenance(fingerprint)

    def _refused(self, cfg: OpConfig, exc: Exception) -> dict[str, Any]:
        """A failed row for a configuration that cannot even be costed; nothing is measured."""
        known = cfg.family in FAMILIES
        return {
            "schema_version": SCHEMA_VERSION, "config_id": cfg.config_id, "status": "failed",
            "error": f"{type(exc).__name__}: {exc}"[:500], **self._provenance,
            "family": cfg.family, "variant": cfg.variant, "layout": cfg.layout,
            "precision": cfg.precision, "batch": cfg.batch,
            **{name: cfg.param_dict.get(name) if known else None for name in PARAMETERS},
            "flops": 0.0, "bytes": 0.0, "l2_state": "none", "source": cfg.source, "seed": self.seed,
            "host_profile": self.host_profile,
            "allow_tf32_cudnn": False, "allow_tf32_matmul": False, "throttled": False,
            **{name: None for name in ("kernel_us", "dispatch_us", "p10_us", "p50_us", "p90_us",
                                       "cv", "repetitions", "calls_per_replay", "clock_reasons",
                                       "sm_clock_mhz")},
            "timestamp": pd.Timestamp.now(tz="UTC"),
        }

    def _l2_state(self, nbytes: float) -> str:
        if self.fp.kind != "cuda" or not self.fp.l2_bytes:
            return "none"
        # Replays reuse the same buffers, so inputs that fit in L2 are served from it.
        return "warm" if nbytes <= self.fp.l2_bytes else "exceeds_l2"

    def __call__(self, cfg: OpConfig) -> dict[str, Any]:
        params = cfg.param_dict
        try:
            precision = get_precision(cfg.precision)
            get_family(cfg.family).check(params, cfg.variant, cfg.layout)
        except ValueError as exc:  # a hand-made configuration the catalogue refuses
            return self._refused(cfg, exc)
        nbytes = bytes_moved(cfg.family, params, cfg.variant, cfg.batch, precision.element_bytes)
        row: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION, "config_id": cfg.config_id, "status": "ok",
            "error": None, **self._provenance, "family": cfg.family, "variant": cfg.variant,
            "layout": cfg.layout, "precision": cfg.precision, "batch": cfg.batch,
            **{name: params.get(name) for name in PARAMETERS},
            "flops": flops(cfg.family, params, cfg.variant, cfg.batch), "bytes": nbytes,
            "l2_state": self._l2_state(nbytes), "source": cfg.source, "seed": self.seed,
            "host_profile": self.host_profile,
            "kernel_us": None, "dispatch_us": None, "p10_us": None, "p50_us": None,
            "p90_us": None, "cv": None, "repetitions": None, "calls_per_replay": None,
            "clock_reasons": None, "sm_clock_mhz": None, "throttled": False,
        }
        call = None
        try:
            with precision_flags(precision) as (tf32_cudnn, tf32_matmul), torch.inference_mode():
                row["allow_tf32_cudnn"], row["allow_tf32_matmul"] = tf32_cudnn, tf32_matmul
                torch.manual_seed(self.seed)
                call = build(BuildSpec(cfg.family, params, cfg.variant, cfg.layout, cfg.batch,
                                       torch_dtype(precision), self.device))
                before = self.nvml.clock_event_reasons() if self.nvml else None
                timing = self.timer.time(call)
                after = self.nvml.clock_event_reasons() if self.nvml else None
            reasons = None if before is None and after is None else (before or 0) | (after or 0)
            row.update(
                kernel_us=timing.kernel_us, dispatch_us=timing.dispatch_us, p10_us=timing.p10_us,
                p50_us=timing.p50_us, p90_us=timing.p90_us, cv=timing.cv,
                repetitions=timing.repetitions, calls_per_replay=timing.calls_per_replay,
                clock_reasons=reasons, throttled=bool(reasons and reasons & THROTTLE_MASK),
                sm_clock_mhz=self.nvml.sm_clock_mhz() if self.nvml else None,
            )
        except Exception as exc:  # recorded as a failed row; the sweep goes on
            row.update(status="failed", error=f"{type(exc).__name__}: {exc}"[:500])
            row.setdefault("allow_tf32_cudnn", precision.allow_tf32_cudnn)
            row.setdefault("allow_tf32_matmul", precision.allow_tf32_matmul)
            if isinstance(exc, torch.OutOfMemoryError):
                call = None  # drop the inputs before returning the cached blocks
                gc.collect()
                torch.cuda.empty_cache()
        row["timestamp"] = pd.Timestamp.now(tz="UTC")
        return row
