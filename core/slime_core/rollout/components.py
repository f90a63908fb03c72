"""Build the components of a run from registry records (every executor uses these)."""

from __future__ import annotations

from typing import Any

from slime_core.data.rowcheck import labels_required_by
from slime_core.pluginmgr import SlimePluginManager
from slime_core.pluginmgr.deprecation import warn_deprecated_impls


def make_data_source(manager: SlimePluginManager, config: Any, split: str) -> Any:
    """The source of ``split``; with ``eval.datasets`` the eval split is an
    :class:`~slime_core.evaluation.suite.EvalSuite` over them (and over ``data.eval_path``)."""
    if split == "eval" and config.eval.datasets:
        from slime_core.evaluation.suite import build_suite

        plain = _plain_source(manager, config, split) if _has_plain_eval(config, manager) else None
        return build_suite(manager, config, plain)
    return _plain_source(manager, config, split)


def _plain_source(manager: SlimePluginManager, config: Any, split: str) -> Any:
    with labels_required_by(_label_needed_by(manager, config, split)):
        warn_deprecated_impls(manager.hook.slime_make_data_source)  # data.source's alias
        custom = manager.hook.slime_make_data_source(config=config, split=split)
        if custom is not None:
            return custom
        return manager.registries.data_source.get(config.data.source).factory(config, split)


def _label_needed_by(manager: SlimePluginManager, config: Any, split: str) -> str | None:
    """The reward that will score ``split`` when it needs a label (``extra["needs_label"]``);
    ``None`` when a ``slime_reward``/``slime_reward_group`` plugin may score instead."""
    hook = manager.hook
    if hook.slime_reward.get_hookimpls() or hook.slime_reward_group.get_hookimpls():
        return None
    if split == "train" and config.train.loss == "sft":
        return None  # no reward is computed; chats need no label (the SFT rollout checks)
    name = (config.eval.reward if split == "eval" else "") or config.rollout.reward
    try:
        record = manager.registries.reward_function.get(name)
    except Exception:  # noqa: BLE001 - an unknown name is reported where the reward is built
        return None
    return name if record.extra.get("needs_label") else None


def has_eval(config: Any, manager: SlimePluginManager | None = None) -> bool:
    if config.eval.interval <= 0:
        return False
    return _has_plain_eval(config, manager) or bool(config.eval.datasets)


def _has_plain_eval(config: Any, manager: SlimePluginManager | None = None) -> bool:
    """``data.eval_path``, or a source that makes its own eval split (its record's
    ``extra["eval_split"]``); ``manager``: this process's by default."""
    if config.data.eval_path:
        return True
    if manager is None:
        from slime_core.context import get_manager

        manager = get_manager()
    registry = manager.registries.data_source
    if config.data.source not in registry:
        return False  # an unknown name fails where the source is built, naming the choices
    record = registry.get(config.data.source, require_available=False)
    return bool(record.extra.get("eval_split"))


def attach_buffer_filter(manager: SlimePluginManager, config: Any, source: Any) -> None:
    """Give ``source`` (if it takes one) the buffer filter: ``rollout.buffer_filter`` (any
    plugin's record), after the deprecated ``slime_buffer_filter`` hook when a plugin still
    implements it. Runs in the rollout manager's process."""
    if not hasattr(source, "set_buffer_filter"):
        return
    hook = manager.hook
    warn_deprecated_impls(hook.slime_buffer_filter)
    named = config.rollout.buffer_filter
    fallback = manager.registries.filter.get(named).factory(config) if named else None

    def choose(config: Any, rollout_id: int, buffer: list, num_groups: int) -> Any:
        out = hook.slime_buffer_filter(config=config, rollout_id=rollout_id,
                                     buffer=buffer, num_groups=num_groups)
        if out is None and fallback is not None:
            out = fallback(rollout_id, buffer, num_groups)
        return out

    source.set_buffer_filter(choose)
