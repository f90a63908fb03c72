"""A plugin module (``run.plugin_modules = ["tests.reward_workers"]``) with reward records
that say where they ran: 1.0 in a process other than the one that built them, else 0.0.
``pid_pure`` allows worker processes (``extra["processes"]``), ``pid_plain`` does not."""

from __future__ import annotations

import functools
import os

from slime_hookspecs import RewardFunctionRecord, Sample, hookimpl


def elsewhere(parent: int, sample: Sample) -> float:
    return 1.0 if os.getpid() != parent else 0.0


def die(sample: Sample) -> float:
    os._exit(3)  # a worker killed while scoring


def pid_factory(config: object) -> functools.partial[float]:
    return functools.partial(elsewhere, os.getpid())


@hookimpl
def slime_register_reward_functions() -> list[RewardFunctionRecord]:
    return [
        RewardFunctionRecord(name="pid_pure", factory=pid_factory, extra={"processes": True},
                             summary="1.0 when scored in a worker process"),
        RewardFunctionRecord(name="pid_plain", factory=pid_factory,
                             summary="the same, without allowing worker processes"),
    ]


def odd_fails(sample: Sample) -> float:
    if sample.index % 2:
        raise ValueError(f"sample {sample.index} is odd")
    return float(sample.index)


def touch(directory: str, sample: Sample) -> float:
    """Leave a file named after this process's id in ``directory``."""
    with open(os.path.join(directory, str(os.getpid())), "w", encoding="utf-8") as f:
        f.write(str(sample.response))
    return 1.0


def refuses(sample: Sample) -> float:
    raise ValueError("this reward fails every sample")
