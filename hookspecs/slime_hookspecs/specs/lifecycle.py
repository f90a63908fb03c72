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


@hookspec(firstresult=True)
def slime_hold_rollouts(config: Config) -> bool | None:
    """Fully-async mode (``run.rollout_mode = "fully_async"``): the generator pauses for a
    weight update or a checkpoint; hold the engine calls that this plugin makes for the
    generator's rollouts, i.e. the ``slime_generate`` calls whose ``engine`` has
    ``engine.holdable`` set (an evaluation's are not held).

    Holding means: no such engine call starts until :func:`slime_release_rollouts`; those in
    flight are aborted and, after the release, continued from where they stopped with the
    weights the engines hold then, so the rollout sees one answer, later, and the sample's
    ``weight_versions`` lists both versions. The rollouts stay in flight, suspended: an
    agent episode longer than the interval between weight updates survives them instead of
    being aborted and restarted from its prompt at every update.

    Return ``True`` once none of the held calls runs on an engine. That is a promise that
    every rollout of the generator in flight reaches the engines only through what this
    plugin holds: the generator then returns from its pause without waiting for those
    rollouts to end (it cannot see inside them; a rollout that made engine calls elsewhere
    could overlap the weight update). ``None``: nothing held here (stops at the first
    non-``None`` result); the generator aborts the engine calls in flight and waits until
    its rounds end, the aborted samples continuing through the partial-rollout path.

    Paired with :func:`slime_release_rollouts`: at the resume after a weight update, at a
    checkpoint (held rollouts cannot be serialised: they are released and waited for, the
    weights do not change before the resume that follows a save), and at the generator's
    stop (``end=True``).

    **Process**: the rollout manager's (the driver under the local executor, the rollout
    manager actor under ray), on the thread that pauses the generator. **Returns**: ``True``
    when held, else ``None``.

    .. versionadded:: 0.1
    """


@hookspec
def slime_release_rollouts(config: Config, end: bool) -> None:
    """End a :func:`slime_hold_rollouts`: the held engine calls go on (``end=False``), with
    the weights the engines hold now; or (``end=True``, the generator stops with the run) the
    generator's rollouts end: their held and later engine calls are refused, so each ends
    soon, as a failed sample that nothing trains on.

    ``end=False`` fires only after a hold that some plugin answered ``True``; ``end=True``
    fires at every stop of a fully-async generator that generates its own groups (an
    implementation with nothing held just returns).

    **Process**: the rollout manager's, as :func:`slime_hold_rollouts`. **Returns**: nothing.

    .. versionadded:: 0.1
    """


@hookspec
def slime_on_error(config: Config, phase: str, error: BaseException) -> None:
    """An exception escaped ``phase`` (``rollout``, ``train``, ``save``, ``weight_sync``, ``eval``).

    **When**: before the run stops; the last complete checkpoint is left intact.
    **Process**: the driver. **Returns**: nothing.

    .. versionadded:: 0.1
    """
