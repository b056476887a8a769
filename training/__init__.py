"""Features to models: splits, XGBoost and LightGBM fits, metrics, MLflow tracking (to come)."""
