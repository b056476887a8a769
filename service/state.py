"""What one app holds (settings, bundles, stored graphs and host profiles, metrics), reachable from any handler."""

from __future__ import annotations

from dataclasses import dataclass, field

from flask import current_app

from predictor.host_profile import HostStore
from service.config import ServiceConfig
from service.graph_store import GraphStore
from service.metrics import Metrics
from service.predictions import PredictionCache
from service.registry import ModelRegistry
from service.sources import GraphResolver


@dataclass
class ServiceState:
    config: ServiceConfig
    registry: ModelRegistry
    store: GraphStore
    resolver: GraphResolver
    metrics: Metrics
    #: host profiles posted to /v1/hosts (the bundles' own are read from the bundles)
    host_store: HostStore
    predictions: PredictionCache = field(default_factory=PredictionCache)


def state() -> ServiceState:
    """The current app's state (``app.extensions['latpred']``)."""
    return current_app.extensions["latpred"]
