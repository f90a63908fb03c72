from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "examples" / "tiny_arith" / "model"
LADDER = [{"min_digits": 1, "max_digits": 1}, {"min_digits": 2, "max_digits": 2},
          {"min_digits": 3, "max_digits": 3}]
BASE = {"min_terms": 2, "max_terms": 2, "operators": ["+"], "allow_parentheses": False,
        "allow_negation": False}


def rlve_data(**rlve: Any) -> dict[str, Any]:
    return {
        "run": {"seed": 3, "num_rollouts": 2},
        "model": {"path": str(TINY)},
        "data": {"source": "rlve"},
        "rollout": {"n_samples_per_prompt": 2, "batch_size": 2, "reward": "reasoning_gym"},
        "rlve": {"task": "basic_arithmetic", "base_kwargs": BASE, "levels": LADDER,
                 "window": 4, "up_threshold": 0.75, "down_threshold": 0.25,
                 "prompt_format": "{expression}=", "prompt_replace": {" ": ""},
                 "eval_size": 3, **rlve},
    }


@pytest.fixture
def make_config():
    from slime_core.pluginmgr import PluginSelection
    from slime_core.session import resolve

    def make(**rlve: Any) -> Any:
        _, config = resolve(PluginSelection(plugins=["rlve"]), None, (), rlve_data(**rlve))
        return config

    return make
