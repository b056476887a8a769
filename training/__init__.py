"""Features to models: splits, XGBoost and LightGBM fits, composition constants, validation,
bundle export and MLflow tracking and registry."""
