"""latpred's measuring half: device fingerprint, timing, operator sweeps and whole-model runs.

Runs on the GPU machine, which has torch, pynvml, pandas and pyarrow but no xgboost, lightgbm,
mlflow or flask; nothing here may import those.
"""
