"""One blueprint per resource; each handler validates, calls ``predictor`` and shapes the answer."""
