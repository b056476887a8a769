"""``/v1/hosts``: the host profiles eager predictions can be asked for.

A profile itself is predictor's ``HostProfile`` (its JSON Schema is published beside it): the
service only says where each one comes from. A bundle carries the profile of the host that
measured it (its default) and those of the other hosts of its dataset; the service's own store
holds the profiles posted to it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from predictor.host_profile import ID_PATTERN, HostProfile
from service.schemas.common import RequestModel, ResponseModel

Source = Literal["bundle", "stored"]


class HostPath(RequestModel):
    LOCATION = "path"

    # HostId's pattern without its ``examples`` list, which an OpenAPI parameter cannot hold
    host_id: Annotated[str, Field(pattern=ID_PATTERN, description="id of a host profile")]


class HostListItem(ResponseModel):
    """One profile a prediction's ``host`` can name, and where it is known from."""

    id: str
    label: Literal["measured", "estimated"]
    cpu_model: str
    cpu_cores: int
    gpu: str | None = None
    measured_at: str
    costs_us: dict[str, float] = Field(description="host time of one call of each kind, in microseconds")
    forward_spread: float | None = Field(None, description="how steadily the host ran its reference forwards "
                                                           "(p90/p10; schema version 3): an eager interval for it "
                                                           "is sized by it")
    source: Source = Field(description="'bundle': carried by a served model bundle; 'stored': posted to "
                                       "/v1/hosts. A bundle's profile wins over a stored one of the same id")
    device: str | None = Field(None, description="the device whose bundle carries it (source 'bundle')")
    default: bool = Field(False, description="the profile the bundle predicts eager latency for when a "
                                             "request names no host")
    url: str


class UnreadableHost(ResponseModel):
    id: str
    problem: str = Field(description="why the stored file is not a profile this latpred reads")


class HostsResponse(ResponseModel):
    hosts: list[HostListItem] = Field(description="the bundles' profiles (by device, default first), then "
                                                  "the stored ones (by id)")
    unreadable: list[UnreadableHost] = Field(default_factory=list, description=(
        "stored files that are not profiles this latpred reads (damaged, or written by a newer latpred): "
        "left out of the list, and a prediction that names one is refused naming it"))


class HostAnswer(ResponseModel):
    """One profile as stored (POST it again and it is the same profile), and where it is known from."""

    profile: HostProfile
    source: Source
    devices: list[str] = Field(default_factory=list, description="the devices whose bundle carries it")
    created: bool | None = Field(None, description="POST only: false when the same profile was already known")
    url: str
