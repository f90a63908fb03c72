"""Training from rollout dumps (``debug.replay_rollouts = DIR``), with no inference engine.

How the engine is kept from being built: when ``debug.replay_rollouts`` is set,
``core_observe``'s ``slime_configure`` switches ``rollout.engine`` to ``replay``, a rollout-engine
record of the same plugin whose engine holds no model: it only records the weight version each
sync delivers (so the driver's version checks keep working) and refuses to generate. The driver
is unchanged: it builds "the configured engine" as always, which is now one that costs nothing.
We chose this over a driver flag ("skip engines") because it keeps every driver invariant
(engines report versions, weight sync runs, ``slime_after_weight_sync`` fires) and needs no new
hook; the resolved ``config.toml`` of the replay run says ``engine = "replay"`` honestly.

Every rollout then comes from ``slime_rollout`` (``tryfirst``), which returns the dumped
groups of ``rollout_<id>.jsonl`` (``eval_<id>.jsonl`` for evaluations) as they were after every
plugin had seen them, so conversion, advantages and training see the same numbers.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from slime_core.api import DumpError, dump_path, list_dumps, read_dump
from slime_hookspecs import RolloutResult

ENGINE_NAME = "replay"


class ReplayEngine:
    """A rollout engine that never generates; it reports the weight version it was sent."""

    def __init__(self, config: Any, engine_index: int = 0, accelerator: Any = None) -> None:
        self.index = engine_index
        self._version = -1

    def generate(self, prompts: list[Any], params: list[Any]) -> list[Any]:
        raise RuntimeError(
            "the replay engine cannot generate: with debug.replay_rollouts every rollout comes "
            "from the dump directory; a plugin's slime_rollout or slime_generate asked the engine "
            "for new tokens"
        )

    def update_weights(self, weights: Any, version: int) -> None:
        self._version = int(version)  # nothing to load: no model here

    def update_weights_from_disk(self, version_dir: str, version: int) -> None:
        self._version = int(version)  # the disk transport's file is not read

    def weight_version(self) -> int:
        return self._version

    def health(self) -> bool:
        return True

    def abort(self) -> None:
        pass

    def sleep(self) -> None:
        pass

    def wake_up(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


def make_replay_engine(config: Any, engine_index: int = 0, accelerator: Any = None) -> ReplayEngine:
    """``factory(config, engine_index, accelerator)`` of the ``replay`` record."""
    return ReplayEngine(config, engine_index, accelerator)


def configure_replay(config: Any) -> None:
    """Check ``debug.replay_rollouts`` / ``debug.save_rollouts`` and switch to the replay engine."""
    replay, save = config.debug.replay_rollouts, config.debug.save_rollouts
    if save and replay and Path(save).resolve() == Path(replay).resolve():
        raise ValueError(
            f"debug.save_rollouts and debug.replay_rollouts are the same directory ({save}); "
            "dump a replay elsewhere or leave debug.save_rollouts empty"
        )
    if not replay:
        return
    found = list_dumps(replay)
    if not found["train"] and not found["eval"]:
        raise ValueError(
            f"debug.replay_rollouts = {replay!r}: no rollout_*.jsonl dumps there (write them with "
            "debug.save_rollouts in an earlier run)"
        )
    if config.weights.verify:
        raise ValueError(
            "debug.replay_rollouts with weights.verify = true: the replay engine holds no weights "
            "to compare with the trainer's; set weights.verify = false"
        )
    if config.rollout.engine != ENGINE_NAME:
        print(f"debug.replay_rollouts: rollouts come from {replay}; rollout.engine "
              f"{config.rollout.engine!r} -> {ENGINE_NAME!r} (no engine is started)", file=sys.stderr)
        config.rollout.engine = ENGINE_NAME


def replay_rollout(directory: str, rollout_id: int, evaluation: bool) -> RolloutResult:
    """The dumped result of rollout ``rollout_id``; a missing file names what is there."""
    path = dump_path(directory, rollout_id, evaluation)
    if not path.is_file():
        found = list_dumps(directory)["eval" if evaluation else "train"]
        have = f"ids {found[0]}..{found[-1]} ({len(found)} files)" if found else "none"
        what = "evaluation" if evaluation else "rollout"
        hint = (" (set eval.interval = 0 to replay without evaluations)" if evaluation
                else " (lower run.num_rollouts to the number of dumped steps)")
        raise DumpError(
            f"debug.replay_rollouts: no dump of {what} {rollout_id} in {directory}: "
            f"expected {path.name}; dumps of that kind there: {have}{hint}"
        )
    header, result = read_dump(path)
    if header.get("rollout_id") != rollout_id:
        raise DumpError(f"{path}: header says rollout_id {header.get('rollout_id')}, "
                        f"file name says {rollout_id}")
    return result
