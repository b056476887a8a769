"""The registered MLflow model: a latpred bundle behind MLflow's pyfunc interface.

Logged as "models from code" (this file, not a pickled object). Input: a frame with columns
``model`` (a zoo name or a graph's JSON), ``batch``, ``precision`` and ``mode``; output: the
predicted latency with its interval, one row per input row.
"""

from __future__ import annotations

import json
from typing import Any

import mlflow
import pandas as pd
from mlflow.pyfunc import PythonModel


class BundleModel(PythonModel):
    """Predicts whole-model latency with the bundle logged beside it."""

    def load_context(self, context: Any) -> None:
        from pathlib import Path

        from predictor.bundle import Bundle
        from predictor.devices import resolve_device
        from predictor.predict import Predictor

        bundle = Bundle.load(Path(context.artifacts["bundle"]))
        self.predictor = Predictor(bundle, resolve_device(bundle.device_id))

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        from predictor.graph import Graph
        from predictor.zoo import load_zoo_graph

        rows = []
        r: Any  # a row's namedtuple: pandas-stubs types its fields as any scalar
        for r in model_input.itertuples(index=False):
            text = str(r.model)
            graph = Graph.from_json(json.loads(text)) if text.lstrip().startswith("{") else load_zoo_graph(text)
            p = self.predictor.predict(graph, int(r.batch), str(r.precision), str(r.mode))
            rows.append({"total_ms": p.total_ms, "low_ms": p.low_ms, "high_ms": p.high_ms})
        return pd.DataFrame(rows)


mlflow.models.set_model(BundleModel())
