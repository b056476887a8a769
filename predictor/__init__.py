"""latpred's predictor package: the operator catalogue, graph IR and (later) prediction.

Nothing here imports torch at module level: the service runs without it.
"""

__version__ = "0.1.0"
