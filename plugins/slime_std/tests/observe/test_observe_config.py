"""``[trace]`` and ``[profile]`` sections: defaults and errors naming the key."""

from __future__ import annotations

import pytest
from slime_core.config import ConfigError
from slime_core.pluginmgr import PluginSelection
from slime_core.session import resolve


def _config(**sections):
    return resolve(PluginSelection(plugins=[]), data=sections)[1]


def test_defaults() -> None:
    cfg = _config()
    assert cfg.trace.enabled and cfg.trace.samples and cfg.profile.steps == []
    assert cfg.debug.save_rollouts == "" and cfg.debug.replay_rollouts == ""
    assert cfg.profile.rollout is False  # the engine's profile is off unless asked for


@pytest.mark.parametrize("section,values,message", [
    ("profile", {"steps": [3]}, "profile.steps: expected [first, last], got [3]"),
    ("profile", {"steps": [4, 2]}, "profile.steps: need 0 <= first <= last, got [4, 2]"),
    ("profile", {"scope": "gpu"}, "profile.scope: must be 'train' or 'all'"),
    ("profile", {"sort_by": "speed"}, "profile.sort_by: 'speed' is not one of"),
    ("profile", {"peak_tflops": -1.0}, "profile.peak_tflops: must be >= 0"),
    ("trace", {"max_events": 0}, "trace.max_events: must be >= 1"),
    ("trace", {"sampels": True}, "trace.samples"),
])
def test_bad_values_name_the_key(section: str, values: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _config(**{section: values})
    assert message in str(err.value)
