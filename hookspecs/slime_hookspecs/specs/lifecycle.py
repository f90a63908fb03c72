"""Lifecycle hooks: plain notifications; ``wrapper=True`` implementations may time or retry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slime_hookspecs.markers import hookspec

if TYPE_CHECKING:
    from slime_hookspecs.config import Config
    from slime_hookspecs.protocols import RolloutResult


@hookspec
def slime_run_start(config: Config, run_dir: str) -> None:
    """The run begins (after components exist, before the first rollout; also on resume).

    **Process**: the driver. **Returns**: nothing.

    .. versionadded:: 0.1
    """


@hookspec
def slime_rollout_engines_ready(config: Config, clients: list[Any]) -> None:
    """The rollout manager has built the async client of each rollout engine.

    ``clients`` are the :class:`~slime_core.api.EngineClient` of the engines, in engine order
    (``client.index``; ``client.engine`` the engine itself): what a plugin serves when it
    generates outside ``slime_generate``, such as an HTTP front of the engines or the agent API.
    Keep the list; it is the same for the run. Fires once per rollout manager, before its first
    rollout (again if the manager is rebuilt).

    **Process**: the rollout manager's (the driver under the local executor, the rollout
    actor under ray). **Returns**: nothing.

    .. versionadded:: 0.1
    """


@hookspec
def slime_run_end(config: Config, run_dir: str, status: str) -> None:
    """The run ends; ``status`` is ``"completed"``, ``"failed"`` or ``"interrupted"``.

    **Process**: the driver. Fires even after an error. **Returns**: nothing.

    .. versionadded:: 0.1
    """


@hookspec
def slime_before_rollout(config: Config, rollout_id: int) -> None:
    """Before the rollout of step ``rollout_id``. **Process**: the driver.

    With ``run.async_rollout`` (one-step-off) it fires when that rollout is submitted, before
    ``slime_before_train`` of the step before. With ``run.rollout_mode = "fully_async"`` the
    engines generate continuously, so no generation starts here: it fires when step
    ``rollout_id`` starts taking its groups from the buffer.

    .. versionadded:: 0.1
    """


@hookspec
def slime_after_rollout(config: Config, rollout_id: int, result: RolloutResult) -> None:
    """After the rollout of step ``rollout_id``; ``result`` holds the kept groups.

    With ``run.rollout_mode = "fully_async"``: once step ``rollout_id`` has taken its
    ``rollout.batch_size`` groups from the buffer; they may come from several generation
    windows and weight versions (``Sample.weight_versions``), and ``result.metrics`` adds the
    buffer's counts (``rollout/stale_dropped``, ``rollout/partial_resumed``, ...).

    **Process**: the driver. **Returns**: nothing.

    .. versionadded:: 0.1
    """


@hookspec
def slime_before_train(config: Config, rollout_id: int) -> None:
    """Before the training of step ``rollout_id``. **Process**: the driver.

    .. versionadded:: 0.1
    """


@hookspec
def slime_after_train(config: Config, rollout_id: int, metrics: dict[str, float]) -> None:
    """After the training of step ``rollout_id``, with its training metrics.

    **Process**: the driver. **Returns**: nothing.

    .. versionadded:: 0.1
    """


@hookspec
def slime_before_save(config: Config, rollout_id: int, path: str) -> None:
    """Before a checkpoint is written to ``path`` (not yet existing).

    **Process**: the driver. **Returns**: nothing.

    .. versionadded:: 0.1
    """


@hookspec
def slime_after_save(config: Config, rollout_id: int, path: str) -> None:
    """After a checkpoint is complete and atomically renamed to ``path``.

    **Process**: the driver. **Returns**: nothing.

    .. versionadded:: 0.1
    """


@hookspec
def slime_before_weight_sync(config: Config, version: int) -> None:
    """Before trainer weights are sent to the engines as ``version``.

    **Process**: the driver. **Returns**: nothing.

    .. versionadded:: 0.1
    """


@hookspec
def slime_after_weight_sync(config: Config, version: int, stats: dict[str, float]) -> None:
    """After every engine reports ``version``; ``stats`` has ``bytes`` and ``seconds``.

    **Process**: the driver. **Returns**: nothing.

    .. versionadded:: 0.1
    """


@hookspec
def slime_on_error(config: Config, phase: str, error: BaseException) -> None:
    """An exception escaped ``phase`` (``rollout``, ``train``, ``save``, ``weight_sync``, ``eval``).

    **When**: before the run stops; the last complete checkpoint is left intact.
    **Process**: the driver. **Returns**: nothing.

    .. versionadded:: 0.1
    """
