"""The reference model of the KL terms: where it comes from and when it moves.

By default the reference is the initial policy (``model.path`` or ``model.init_config``).
``model.ref_path`` loads it from its own directory instead (slime's ``--ref-load``; same
architecture and tokenizer as the policy, or the KL compares different vocabularies), and
``train.ref_update_interval = N`` makes it take the policy's weights after every N-th step
(slime's ``--ref-update-interval``). Both backends use these helpers.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from slime_hookspecs import Config


def ref_model_config(config: Config) -> Any:
    """``config.model`` as the reference is loaded: ``model.ref_path`` when set (its own
    weights, nothing of ``init_config``), else the policy's own settings."""
    if not config.model.ref_path:
        return config.model
    return dataclasses.replace(cast(Any, config.model), path=config.model.ref_path, init_config={})


def ref_update_due(config: Config, rollout_id: int) -> bool:
    """Whether the reference takes the policy's weights after training on ``rollout_id``."""
    interval = config.train.ref_update_interval
    return interval > 0 and (rollout_id + 1) % interval == 0
