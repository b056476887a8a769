"""latpred's predictor package: the operator catalogue, the graph IR and its importers, and
prediction (per-layer models from a bundle, composed into a whole-model latency).

Nothing here imports torch at module level: the service runs without it.
"""

__version__ = "0.1.0"
