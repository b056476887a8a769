"""The serving process's collector runs at request boundaries: when the last running request ends,
every OVERLAPPED_EVERY requests under steady overlap, and fully every FULL_EVERY."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from service.gc_policy import FULL_EVERY, OVERLAPPED_EVERY, RequestBoundaryCollector, collect_between_requests


@pytest.fixture
def restored_gc() -> Iterator[None]:
    """collect_between_requests turns automatic collection off for the process: turn it back on."""
    yield
    gc.enable()
    gc.unfreeze()


def test_the_last_request_to_end_collects_the_young_generation() -> None:
    c = RequestBoundaryCollector()
    c.started()
    c.started()
    assert c.ended() is None  # another request is still being built: its objects are not scanned
    assert c.ended() == 0


def test_under_steady_overlap_it_still_collects_every_so_many_requests() -> None:
    c = RequestBoundaryCollector()
    c.started()  # a request that never ends
    generations = []
    for _ in range(OVERLAPPED_EVERY * 3):
        c.started()
        generations.append(c.ended())
    assert generations.count(0) == 3
    assert generations[OVERLAPPED_EVERY - 1] == 0 and set(generations) == {None, 0}


def test_every_so_many_requests_all_generations_are_collected() -> None:
    c = RequestBoundaryCollector()
    generations = []
    for _ in range(FULL_EVERY):
        c.started()
        generations.append(c.ended())
    assert generations[-1] == 2 and generations[:-1] == [0] * (FULL_EVERY - 1)


def test_a_reference_cycle_a_request_leaves_is_freed_when_it_ends(app: Any, restored_gc: None) -> None:
    class Cyclic:
        pass

    left: list[weakref.ref] = []

    @app.get("/test-cycle")
    def make_cycle() -> str:
        a, b = Cyclic(), Cyclic()
        a.other, b.other = b, a  # type: ignore[attr-defined]
        left.append(weakref.ref(a))
        return "ok"

    collect_between_requests(app)
    assert not gc.isenabled()
    assert app.test_client().get("/test-cycle").status_code == 200
    assert left and left[0]() is None  # reference counting alone could not free it
