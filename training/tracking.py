"""MLflow tracking and registry for ``latpred train`` (embedded sqlite store, no server).

Each run logs its parameters, metrics, the dataset hash and the device fingerprint, and the
bundle as artifacts; the bundle is registered under ``latpred-<device>``. The alias
``champion`` moves to the new version only if it is at least as accurate (share of held-out
whole-model predictions within +-10%) as the current champion: a worse retrain never
replaces the served model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHAMPION = "champion"
SCORE_METRIC = "lomo_within_10pct"


def registered_name(device_id: str) -> str:
    return f"latpred-{device_id}"


def tracking_uri(store: Path) -> str:
    store = Path(store).resolve()
    store.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{store}"


REGISTRY_MODEL_CODE = Path(__file__).with_name("registry_model.py")


def track_training(store: Path, device_id: str, params: dict[str, Any], metrics: dict[str, float],
                   tags: dict[str, str], bundle_dir: Path, force: bool = False) -> dict[str, Any]:
    """Log one training run, register its bundle, move ``champion`` if it is no worse (or if
    ``force``: ``latpred train --force`` installs the bundle, and the alias names what is served).

    The registered model is the whole bundle (what is served), as an MLflow pyfunc defined from
    code (``registry_model.py``), so nothing is pickled."""
    import mlflow
    from mlflow.tracking import MlflowClient

    mlflow.set_tracking_uri(tracking_uri(store))
    mlflow.set_registry_uri(tracking_uri(store))
    experiment = f"latpred-{device_id}"
    if mlflow.get_experiment_by_name(experiment) is None:
        # Artifacts beside the store, not in ./mlruns of whatever folder training runs from.
        artifacts = (Path(store).resolve().parent / "artifacts").as_uri()
        mlflow.create_experiment(experiment, artifact_location=artifacts)
    mlflow.set_experiment(experiment)
    name = registered_name(device_id)
    with mlflow.start_run() as run:
        mlflow.log_params(params)
        mlflow.log_metrics(metrics)
        mlflow.set_tags(tags)
        mlflow.log_artifacts(str(bundle_dir), artifact_path="bundle")
        info = mlflow.pyfunc.log_model(name="bundle_model", python_model=str(REGISTRY_MODEL_CODE),
                                       artifacts={"bundle": str(bundle_dir)},
                                       pip_requirements=["latpred[predict]"])
    version = mlflow.register_model(info.model_uri, name, tags={SCORE_METRIC: str(metrics.get(SCORE_METRIC, 0.0)),
                                                                "run_id": run.info.run_id})
    client = MlflowClient(tracking_uri=tracking_uri(store), registry_uri=tracking_uri(store))
    promoted = _maybe_promote(client, name, version.version, metrics.get(SCORE_METRIC, 0.0), force)
    return {"run_id": run.info.run_id, "registered_model": name, "version": int(version.version),
            "champion": promoted}


def _maybe_promote(client: Any, name: str, version: str, score: float, force: bool = False) -> bool:
    try:
        current = client.get_model_version_by_alias(name, CHAMPION)
        current_score = float(current.tags.get(SCORE_METRIC, "0"))
    except Exception:  # no champion yet
        current_score = -1.0
    if force or score >= current_score:
        client.set_registered_model_alias(name, CHAMPION, version)
        return True
    return False


def champion_version(store: Path, device_id: str) -> int | None:
    """The registry version the ``champion`` alias points at (None if there is none)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri(store), registry_uri=tracking_uri(store))
    try:
        return int(client.get_model_version_by_alias(registered_name(device_id), CHAMPION).version)
    except Exception:
        return None
