"""The names a whole-model run is classified by: its execution modes and its model kinds (the
zoo's two and the NAS suite's search spaces).

They live apart from the run contract (predictor.model_run_schema, which needs pandas and the
dataset schema) so that what builds a model, the NAS generator and the host probe's reference
forwards among them, can name a space without importing a dataframe library: on a contended
core pandas alone took a second of ``latpred host probe``'s 15.
"""

from __future__ import annotations

MODES = ("eager", "cudagraph")
#: the search spaces of the NAS suite's generator (collectors.nas_space): a NAS run's model_kind
NAS_SPACES = ("mbconv", "transformer", "resnet", "convnext", "attention", "mixer")
MODEL_KINDS = ("vision", "text", *NAS_SPACES)
