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
from predictor.catalogue.families import conv_costs, conv_shape
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


def _geometry(family: str, p: Mapping[str, int], batch: int, variant: str,
              shape: tuple[int, int, int, int] | None = None) -> tuple[float, float, float, float, float]:
    """(output tiles, GEMM M, N, K, output elements) of one call: ``output_tiles``,
    ``gemm_dims`` and the output size in one pass, a convolution's ``conv_shape`` computed once
    (given, where the caller has it: every new kernel configuration of a prediction asks for all
    five, and for its FLOPs and bytes)."""
    if family == "conv2d":
        ho, wo, kh, kw = shape or conv_shape(p, variant)
        per_group = math.ceil(batch * ho * wo / TILE) * math.ceil(p["c_out"] / p["groups"] / TILE)
        return (float(per_group * p["groups"]), float(batch * ho * wo), p["c_out"] / p["groups"],
                p["c_in"] / p["groups"] * kh * kw, float(batch * p["c_out"] * ho * wo))
    if family == "linear":
        return (float(math.ceil(batch * p["tokens"] / TILE) * math.ceil(p["n"] / TILE)),
                float(batch * p["tokens"]), float(p["n"]), float(p["k"]), float(batch * p["tokens"] * p["n"]))
    if family == "matmul":
        return (float(batch * p["heads"] * math.ceil(p["m"] / TILE) * math.ceil(p["n"] / TILE)),
                float(p["m"]), float(p["n"]), float(p["k"]), float(batch * p["heads"] * p["m"] * p["n"]))
    if family == "sdpa":
        return (float(batch * p["heads"] * math.ceil(p["seq_q"] / TILE)), float(p["seq_q"]), float(p["seq_kv"]),
                float(p["head_dim"]), float(batch * p["heads"] * p["seq_q"] * p["head_dim"]))
    # Memory-bound families: blocks over the elements written or read.
    blocks = bytes_moved(family, p, "relu" if family == "activation" else get_family(family).variants[0], batch, 1)
    return max(1.0, blocks / 2 / ELEMENTS_PER_BLOCK), 0.0, 0.0, 0.0, 0.0


def output_tiles(family: str, p: Mapping[str, int], batch: int, variant: str = "") -> float:
    """Thread-block tiles of the output: what the SMs share out among themselves."""
    return _geometry(family, p, batch, variant)[0]


def gemm_dims(family: str, p: Mapping[str, int], batch: int, variant: str = "") -> tuple[float, float, float]:
    """(M, N, K) of the matrix product a GEMM-like call runs, per group for grouped convs
    (implicit GEMM for convolutions); zeros for other families."""
    _, m, n, k, _ = _geometry(family, p, batch, variant)
    return m, n, k


def roofline_us(family: str, params: Mapping[str, int], variant: str, batch: int,
                precision: str, device: DeviceSpec) -> float:
    """max(FLOPs / peak, bytes / bandwidth) in microseconds: the floor no kernel beats."""
    prec = PRECISIONS[precision]
    peak = device.peak_flops(family, precision, prec.allow_tf32_cudnn, prec.allow_tf32_matmul)
    f = flops(family, params, variant, batch)
    b = bytes_moved(family, params, variant, batch, prec.element_bytes)
    return max(f / peak, device.memory_seconds(b)) * 1e6


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


#: where each parameter's column is among the parameter features
_PARAM_INDEX = {name: i for i, name in enumerate(PARAMETERS)}


def features_and_cold_weight(family: str, params: Mapping[str, int], variant: str, layout: str, batch: int,
                             precision: str, device: DeviceSpec) -> tuple[list[float], float]:
    """``feature_values`` and ``cold_weight_us`` of one call at once, sharing the FLOPs and bytes
    they both need: a batch of new graphs computes thousands, and a cold graph's features were a
    sixth of its prediction."""
    fam = get_family(family)
    prec = PRECISIONS[precision]
    e = prec.element_bytes
    shape = None
    if family == "conv2d":  # its three formulas and its tiles share one shape, computed here once
        shape = conv_shape(params, variant)
        f, b, w = conv_costs(params, variant, batch, e, shape)
    else:
        f = float(fam.flops(params, variant, batch))
        b = float(fam.bytes_moved(params, variant, batch, e))
        w = float(fam.weight_bytes(params, variant, e))
    bandwidth = device.memory_bandwidth
    peak = device.peak_flops(family, precision, prec.allow_tf32_cudnn, prec.allow_tf32_matmul)
    compute, memory = f / peak, device.memory_seconds(b)
    roof = max(compute, memory) * 1e6
    tiles, m, n, k, out = _geometry(family, params, batch, variant, shape)
    waves = tiles / device.sm_count
    values = [np.nan] * len(PARAMETERS)
    for name, value in params.items():
        if name in _PARAM_INDEX:
            values[_PARAM_INDEX[name]] = float(value)
    row = [
        FAMILY_CODES[family], VARIANT_CODES.get(variant, -1), LAYOUT_CODES.get(layout, 0), PRECISION_CODES[precision],
        e, math.log2(batch), *values,
        math.log10(f + 1), math.log10(b + 1), math.log10((f + 1) / (b + 1)), math.log10(roof + 1e-6),
        float(compute > memory), math.log10(tiles), waves, waves / math.ceil(waves),
        math.log2(m + 1), math.log2(n + 1), math.log2(k + 1), math.log2(out + 1),
    ]
    cold = 0.0 if not w or b > device.l2_bytes else w / bandwidth * 1e6
    return row, cold


def feature_values(family: str, params: Mapping[str, int], variant: str, layout: str, batch: int,
                   precision: str, device: DeviceSpec) -> list[float]:
    """The features of one call (family, per-sample params, variant, layout, batch, precision),
    in FEATURE_COLUMNS order: a batch of new graphs computes thousands of rows, and a list goes
    to the boosters' matrix without a lookup per column."""
    return features_and_cold_weight(family, params, variant, layout, batch, precision, device)[0]


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
        records.append(feature_values(family, params, r.variant, r.layout, int(r.batch), r.precision, device))
    return pd.DataFrame.from_records(records, columns=list(FEATURE_COLUMNS))
