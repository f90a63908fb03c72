"""Built-in plugin ``core_loop``: the default rollout and single-turn generate.

Both are ``trylast`` so any plugin's implementation of ``slime_rollout`` / ``slime_generate``
is called first and wins by returning a result (firstresult hooks).
"""

from __future__ import annotations

from typing import Any

from slime_hookspecs import hookimpl


@hookimpl(trylast=True)
def slime_rollout(config: Any, rollout_id: int, data_source: Any, evaluation: bool) -> Any:
    from slime_core.context import get_rollout_manager

    return get_rollout_manager().default_rollout(rollout_id, data_source, evaluation)  # type: ignore[attr-defined]


@hookimpl(trylast=True)
def slime_generate(config: Any, sample: Any, sampling_params: Any, engine: Any) -> Any:
    from slime_core.runner.rollout import default_generate

    return default_generate(config, sample, sampling_params, engine)
