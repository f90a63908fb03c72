"""Built-in plugin ``core_loop``: the default single-turn generate.

It is ``trylast`` so any plugin's ``slime_generate`` is called first and wins by returning a
result (a firstresult hook). The default *rollout* is each rollout manager's own
``slime_rollout`` implementation (``slime_core.rollout.manager``), registered ``trylast`` on
its plugin manager when it is built, so it needs no process-global rollout manager.
"""

from __future__ import annotations

from typing import Any

from slime_hookspecs import Config, hookimpl


@hookimpl(trylast=True)
def slime_generate(config: Config, sample: Any, sampling_params: Any, engine: Any) -> Any:
    from slime_core.rollout.manager import default_generate

    return default_generate(config, sample, sampling_params, engine)
