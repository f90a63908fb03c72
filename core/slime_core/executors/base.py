"""What the driver loop needs from an executor, whatever places the components.

The driver (``slime_core.runner.driver``) runs the same loop under every executor; an executor
builds the components and hands the driver objects with the local components' methods:

* ``trainer``: ``train_step(batch, rollout_id)``, ``save(path)``, ``load(path)`` (the
  :class:`~slime_hookspecs.Trainer` protocol; under ray a group of data-parallel ranks);
* ``engines``: one object per rollout engine with ``weight_version()``, ``reseed(seed)``,
  ``health()``, ``shutdown()``;
* ``rollouts``: ``rollout(rollout_id, evaluation=False) -> RolloutResult`` and ``clients``
  (objects with ``index`` and ``weight_version()``), i.e. the rollout manager;
* ``train_source`` / ``eval_source``: ``state_dict()`` / ``load_state_dict()`` of the data
  sources, which live wherever the rollout manager lives;
* ``send_weights(version)``: the trainer's weights to every engine through the configured
  transport, returning ``{"bytes", "seconds", ...}``;
* ``submit_rollout(rollout_id)``: start a rollout and return a future (``result()``,
  ``done()``), for one-step-off asynchronous training;
* ``rollout_side(name)``: the ``rollout_side`` of the rollout schedule record ``name``
  (:class:`~slime_hookspecs.RolloutScheduleRecord`), built once where the rollout manager
  lives: the object itself, or a handle whose method calls run there;
* ``shutdown()``: release everything the executor started.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Protocol

from slime_hookspecs import RolloutResult


class RolloutFuture(Protocol):
    def result(self) -> RolloutResult: ...

    def done(self) -> bool: ...

    def exception(self) -> BaseException | None:
        """The rollout's error once done (``None``: it succeeded); like
        ``concurrent.futures.Future.exception``."""
        ...


class Executor(Protocol):
    accelerator: Any
    trainer: Any
    engines: list[Any]
    rollouts: Any
    train_source: Any
    eval_source: Any | None

    def send_weights(self, version: int) -> dict[str, float]: ...

    def submit_rollout(self, rollout_id: int) -> RolloutFuture: ...

    def rollout_side(self, name: str) -> Any: ...

    def shutdown(self) -> None: ...


def build_rollout_side(registries: Any, config: Any, rollouts: Any, schedule: str) -> Any:
    """The ``rollout_side`` of the rollout schedule record ``schedule``, built beside
    ``rollouts`` (the rollout manager of this process)."""
    rec = registries.rollout_schedule.get(schedule)
    if rec.rollout_side is None:
        raise RuntimeError(
            f"rollout schedule {schedule!r} (plugin {rec.owner or '?'}) has no rollout side: "
            "its RolloutScheduleRecord gives no rollout_side(config, rollouts), so its "
            "driver side cannot call one")
    return rec.rollout_side(config, rollouts)


def weights_digest(state: Mapping[str, Any]) -> str:
    """SHA-256 over names, dtypes, shapes and raw bytes: equal digests mean equal weights."""
    import torch

    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name]
        t = t if isinstance(t, torch.Tensor) else torch.as_tensor(t)
        t = t.detach().contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def engine_weights(engine: Any) -> Mapping[str, Any] | None:
    """The weights an engine serves (``state_dict()``), or None if it does not expose them."""
    fn = getattr(engine, "state_dict", None)
    return fn() if callable(fn) else None


def check_weight_agreement(trainer_digest: str, engine_digests: list[str | None],
                           version: int) -> None:
    """Fail naming the first engine whose weights differ from the trainer's after a sync."""
    for i, d in enumerate(engine_digests):
        if d is None:
            raise RuntimeError(
                f"weights.verify: engine {i} does not expose its weights (state_dict())"
            )
        if d != trainer_digest:
            raise RuntimeError(
                f"weight sync of version {version}: engine {i}'s weights differ from the "
                f"trainer's (digest {d[:12]} != {trainer_digest[:12]})"
            )


def local_only_plugins(manager: Any, selection: Any) -> list[str]:
    """Plugin objects registered in this process that a worker process cannot rebuild."""
    return sorted(i.name for i in manager.infos.values()
                  if i.source == "module" and i.name not in selection.modules
                  and i.status == "active")
