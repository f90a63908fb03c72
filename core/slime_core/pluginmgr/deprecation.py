"""Deprecated per-call hooks: one way per extension point (docs/plugin_api.md).

Where the config names a choice (``algorithm.advantage_estimator``, ``rollout.reward``,
``data.source`` ...), the choice is a record; the per-call hook that used to answer first is
kept only as a deprecated alias. It still works: the core still calls it where it did. The
first time the core meets a plugin's implementation of one (at the call site, so plugins
registered late are seen too), it emits one :class:`HookDeprecationWarning` per hook and
plugin for the whole process, naming the plugin, the hook, where it is defined and the
replacement. Wrappers (``wrapper=True`` / ``hookwrapper=True``) answer nothing and are not
warned about.

``HookDeprecationWarning`` is a ``DeprecationWarning`` shown by default (Python hides plain
``DeprecationWarning`` raised outside ``__main__``): the user running a plugin is the one who
has to know.
"""

from __future__ import annotations

import inspect
import threading
import warnings
from typing import Any

# hook -> what to do instead (the text after "use ...")
DEPRECATED_HOOKS: dict[str, str] = {
    "slime_compute_advantages": "an AdvantageEstimatorRecord (slime_register_advantage_estimators) "
                                "named by algorithm.advantage_estimator",
    "slime_is_correction": "an ISCorrectionRecord (slime_register_is_corrections) named by "
                           "algorithm.is_correction",
    "slime_pg_loss_reducer": "a LossReducerRecord (slime_register_loss_reducers) named by "
                             "algorithm.loss_reducer",
    "slime_reward": "a RewardFunctionRecord (slime_register_reward_functions) named by "
                    "rollout.reward",
    "slime_reward_group": "a RewardFunctionRecord with group=True (slime_register_reward_functions) "
                          "named by rollout.reward",
    "slime_dynamic_sampling_filter": 'a FilterRecord with stage="dynamic_sampling" '
                                     "(slime_register_filters) named by "
                                     "rollout.dynamic_sampling_filter",
    "slime_buffer_filter": 'a FilterRecord with stage="buffer" (slime_register_filters) named by '
                           "rollout.buffer_filter",
    "slime_rollout_sample_filter": 'a FilterRecord with stage="sample" (slime_register_filters) '
                                   "named by rollout.sample_filter",
    "slime_make_data_source": "a DataSourceRecord (slime_register_data_sources) named by "
                              "data.source",
}


class HookDeprecationWarning(DeprecationWarning):
    """A plugin implements a deprecated hook (shown by default, once per hook and plugin)."""


warnings.filterwarnings("default", category=HookDeprecationWarning)

_WARNED: set[tuple[str, str]] = set()
_LOCK = threading.Lock()


def warn_deprecated_impls(caller: Any) -> None:
    """Warn once per process for each plugin implementing the deprecated hook ``caller``
    (a pluggy ``HookCaller``: ``manager.hook.slime_reward``); a no-op for other hooks and once
    every implementation has been reported, so it is cheap at a per-call site."""
    hook = caller.name
    replacement = DEPRECATED_HOOKS.get(hook)
    if replacement is None:
        return
    for impl in caller.get_hookimpls():
        if impl.hookwrapper or getattr(impl, "wrapper", False):
            continue
        key = (hook, impl.plugin_name)
        if key in _WARNED:
            continue
        with _LOCK:
            if key in _WARNED:
                continue
            _WARNED.add(key)
        warnings.warn(
            f'plugin "{impl.plugin_name}" implements the deprecated hook {hook} '
            f"({_where(impl.function)}); it still works in this release, use {replacement} "
            "instead (docs/plugin_api.md, \"One way per extension point\")",
            HookDeprecationWarning, stacklevel=2,
        )


def reset_warned() -> None:
    """Forget which implementations were reported (tests that assert the warning)."""
    with _LOCK:
        _WARNED.clear()


def _where(fn: Any) -> str:
    try:
        return f"{inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]}"
    except (OSError, TypeError):
        return getattr(fn, "__qualname__", repr(fn))
