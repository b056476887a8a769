"""A batching setting named on the command line (`latpred collect serving --setting NAME`)."""

from __future__ import annotations

import re

import pytest

from collectors.batching_server import ServerSettings
from collectors.serving_check import SETTINGS


def test_the_committed_settings_read_back_from_their_names() -> None:
    for setting in SETTINGS:
        assert ServerSettings.parse(setting.name) == setting


def test_a_name_gives_max_batch_preferred_sizes_and_delay() -> None:
    assert ServerSettings.parse("mb32-pref8,16-delay2000us") == ServerSettings(
        "mb32-pref8,16-delay2000us", max_batch=32, preferred=(8, 16), max_queue_delay_us=2000.0)
    assert ServerSettings.parse("mb16-delay500us").preferred == ()


def test_a_name_may_end_in_the_instances_the_setting_serves_with() -> None:
    assert ServerSettings.parse("mb4-nodelay-x2") == ServerSettings("mb4-nodelay-x2", max_batch=4, instances=2)
    assert ServerSettings.parse("mb32-pref16,32-delay1000us-x4").instances == 4
    assert ServerSettings.parse("mb8-nodelay").instances == 1
    with pytest.raises(ValueError, match=re.escape("instances must be 1-4")):
        ServerSettings.parse("mb4-nodelay-x5")
    with pytest.raises(ValueError, match=re.escape("instances must be 1-4")):
        ServerSettings.parse("mb4-nodelay-x0")


@pytest.mark.parametrize(("name", "says"), [
    ("mb8", "expected mb<max batch>"),
    ("mb8-x2", "expected mb<max batch>"),
    ("mb8-delay", "expected mb<max batch>"),
    ("mb8-pref16-nodelay", "in 1..max batch 8"),
    ("mb8-pref4,4-nodelay", "distinct"),
    ("mb0-nodelay", "in 1..max batch 0"),
])
def test_a_malformed_name_is_refused_with_what_to_write(name: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        ServerSettings.parse(name)
