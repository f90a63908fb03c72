"""``random``: 0.0 or 1.0 with equal odds (slime's ``random`` reward, a pipeline smoke test).

The coin is seeded with ``run.seed`` and the sample's rollout, group and index, so a resumed
or repeated run scores every sample the same way (slime draws from the process's global
generator, which a resume does not restore).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Any

from slime_hookspecs import Sample


def random_reward(sample: Sample, seed: int = 0) -> float:
    coin = random.Random(f"{seed}/{sample.rollout_id}/{sample.group_index}/{sample.index}")
    return float(coin.randint(0, 1))


def make_random_reward(config: Any) -> Callable[[Sample], float]:
    return functools.partial(random_reward, seed=int(config.run.seed))
