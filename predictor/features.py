"""Features of one operator call, computed the same way for training and for prediction.

Besides the raw parameters, the features say what bounds the call: FLOPs, bytes, arithmetic
intensity and the roofline time on the device, plus wave quantization (how many waves of
thread blocks the output tiles make over the SMs, and how full the last wave is), because a GEMM
whose tiles make 1.1 waves costs nearly as much as one that makes 2.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from predictor.catalogue import FAMILIES, PARAMETERS, bytes_moved, flops, get_family, weight_bytes
from predictor.catalogue.families import conv_out_hw, conv_window
from predictor.devices import DeviceSpec
from predictor.precision import PRECISIONS

FAMILY_CODES = {name: i for i, name in enumerate(FAMILIES)}
PRECISION_CODES = {name: i for i, name in enumerate(PRECISIONS)}
VARIANT_CODES = {v: i for i, v in enumerate(sorted({v for f in FAMILIES.values() for v in f.variants}))}
LAYOUT_CODES = {"contiguous": 0, "nchw": 1, "nhwc": 2, "strided": 3}
TILE = 128  # output tile edge of a typical tensor-core GEMM kernel
ELEMENTS_PER_BLOCK = 4096  # elements one block of an elementwise kernel covers (rough)

def feature_codes() -> dict[str, dict[str, int]]:
    """The integer codes categorical features use; a bundle records them, and a bundle whose
    codes differ from this latpred's (a family or variant added since) must be retrained."""
    return {"family": FAMILY_CODES, "variant": VARIANT_CODES, "layout": LAYOUT_CODES,
            "precision": PRECISION_CODES}


FEATURE_COLUMNS: tuple[str, ...] = (
    "family_code", "variant_code", "layout_code", "precision_code", "element_bytes",
    "log_batch", *[f"p_{p}" for p in PARAMETERS], "log_flops", "log_bytes", "log_intensity",
    "log_roofline_us", "compute_bound", "log_tiles", "waves", "wave_efficiency",
    "log_gemm_m", "log_gemm_n", "log_gemm_k", "log_out_elements",
)


def _output_elements(family: str, p: Mapping[str, int], batch: int, variant: str = "") -> float:
    if family == "conv2d":
        ho, wo = conv_out_hw(p, variant)
        return float(batch * p["c_out"] * ho * wo)
    if family == "linear":
        return float(batch * p["tokens"] * p["n"])
    if family == "matmul":
        return float(batch * p["heads"] * p["m"] * p["n"])
    if family == "sdpa":
        return float(batch * p["heads"] * p["seq_q"] * p["head_dim"])
    return 0.0


def output_tiles(family: str, p: Mapping[str, int], batch: int, variant: str = "") -> float:
    """Thread-block tiles of the output: what the SMs share out among themselves."""
    if family == "conv2d":
        ho, wo = conv_out_hw(p, variant)
        per_group = math.ceil(batch * ho * wo / TILE) * math.ceil(p["c_out"] / p["groups"] / TILE)
        return float(per_group * p["groups"])
    if family == "linear":
        return float(math.ceil(batch * p["tokens"] / TILE) * math.ceil(p["n"] / TILE))
    if family == "matmul":
        return float(batch * p["heads"] * math.ceil(p["m"] / TILE) * math.ceil(p["n"] / TILE))
    if family == "sdpa":
        return float(batch * p["heads"] * math.ceil(p["seq_q"] / TILE))
    # Memory-bound families: blocks over the elements written or read.
    return max(1.0, bytes_moved(family, p, "relu" if family == "activation" else
                                get_family(family).variants[0], batch, 1) / 2 / ELEMENTS_PER_BLOCK)


def gemm_dims(family: str, p: Mapping[str, int], batch: int, variant: str = "") -> tuple[float, float, float]:
    """(M, N, K) of the matrix product a GEMM-like call runs, per group for grouped convs
    (implicit GEMM for convolutions); zeros for other families."""
    if family == "conv2d":
        ho, wo = conv_out_hw(p, variant)
        kh, kw = conv_window(p, variant)
        return (float(batch * ho * wo), p["c_out"] / p["groups"], p["c_in"] / p["groups"] * kh * kw)
    if family == "linear":
        return float(batch * p["tokens"]), float(p["n"]), float(p["k"])
    if family == "matmul":
        return float(p["m"]), float(p["n"]), float(p["k"])
    if family == "sdpa":
        return float(p["seq_q"]), float(p["seq_kv"]), float(p["head_dim"])
    return 0.0, 0.0, 0.0


def roofline_us(family: str, params: Mapping[str, int], variant: str, batch: int,
                precision: str, device: DeviceSpec) -> float:
    """max(FLOPs / peak, bytes / bandwidth) in microseconds: the floor no kernel beats."""
    prec = PRECISIONS[precision]
    peak = device.peak_flops(family, precision, prec.allow_tf32_cudnn, prec.allow_tf32_matmul)
    f = flops(family, params, variant, batch)
    b = bytes_moved(family, params, variant, batch, prec.element_bytes)
    return max(f / peak, b / device.memory_bandwidth) * 1e6


def cold_weight_us(family: str, params: Mapping[str, int], variant: str, batch: int,
                   precision: str, device: DeviceSpec) -> float:
    """Microseconds to read a layer's parameters from HBM: what the layer adds inside a model to
    its time alone. The sweep replays a call on the same buffers, so a call whose bytes fit in L2
    found its weights there ('warm'); in a model each weight is read once per forward, cold. A
    call that does not fit in L2 was measured cold already, and adds nothing."""
    e = PRECISIONS[precision].element_bytes
    w = weight_bytes(family, params, variant, e)
    if not w or bytes_moved(family, params, variant, batch, e) > device.l2_bytes:
        return 0.0
    return w / device.memory_bandwidth * 1e6


def feature_values(family: str, params: Mapping[str, int], variant: str, layout: str, batch: int,
                   precision: str, device: DeviceSpec) -> list[float]:
    """The features of one call (family, per-sample params, variant, layout, batch, precision),
    in FEATURE_COLUMNS order: a batch of new graphs computes thousands of rows, and a list goes
    to the boosters' matrix without a lookup per column."""
    prec = PRECISIONS[precision]
    f = flops(family, params, variant, batch)
    b = bytes_moved(family, params, variant, batch, prec.element_bytes)
    peak = device.peak_flops(family, precision, prec.allow_tf32_cudnn, prec.allow_tf32_matmul)
    roof = max(f / peak, b / device.memory_bandwidth) * 1e6
    tiles = output_tiles(family, params, batch, variant)
    waves = tiles / device.sm_count
    m, n, k = gemm_dims(family, params, batch, variant)
    return [
        FAMILY_CODES[family], VARIANT_CODES.get(variant, -1), LAYOUT_CODES.get(layout, 0), PRECISION_CODES[precision],
        prec.element_bytes, math.log2(batch),
        *[float(params[p]) if p in params else np.nan for p in PARAMETERS],
        math.log10(f + 1), math.log10(b + 1), math.log10((f + 1) / (b + 1)), math.log10(roof + 1e-6),
        float(f / peak > b / device.memory_bandwidth), math.log10(tiles), waves, waves / math.ceil(waves),
        math.log2(m + 1), math.log2(n + 1), math.log2(k + 1),
        math.log2(_output_elements(family, params, batch, variant) + 1),
    ]


def feature_row(family: str, params: Mapping[str, int], variant: str, layout: str, batch: int,
                precision: str, device: DeviceSpec) -> dict[str, float]:
    """``feature_values`` by column name."""
    return dict(zip(FEATURE_COLUMNS, feature_values(family, params, variant, layout, batch, precision, device)))


def feature_frame(rows: pd.DataFrame, device: DeviceSpec) -> pd.DataFrame:
    """Features for a frame of dataset rows (family, variant, layout, precision, batch, params)."""
    records = []
    r: Any  # a row's namedtuple: pandas-stubs types its fields as any scalar
    for r in rows.itertuples(index=False):
        family = r.family
        params = {p: int(getattr(r, p)) for p in get_family(family).params}
        records.append(feature_row(family, params, r.variant, r.layout, int(r.batch), r.precision, device))
    return pd.DataFrame.from_records(records, columns=list(FEATURE_COLUMNS))
