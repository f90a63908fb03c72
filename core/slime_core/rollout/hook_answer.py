"""Call a ``firstresult`` hook and learn which plugin answered.

pluggy's ``firstresult`` returns the first non-``None`` value but not who gave it, so an invalid
reward could only be blamed on "some implementation of slime_reward". :class:`FirstAnswer`
calls the implementations one at a time, in pluggy's call order, each through a
``subset_hook_caller`` (so ``--trace-hooks`` monitoring and wrappers still apply), and returns
``(value, plugin name)``. Coroutines are awaited before deciding: an async implementation that
resolves to ``None`` passes the call on to the next one.
"""

from __future__ import annotations

import inspect
from typing import Any

import pluggy


class FirstAnswer:
    """The implementations of hook ``name`` of ``pluggy_manager``, fixed when built (plugins registered
    later are not seen: build it after the plugin set is final)."""

    def __init__(self, pluggy_manager: pluggy.PluginManager, name: str) -> None:
        self.name = name
        caller = getattr(pluggy_manager.hook, name)
        impls = [i for i in caller.get_hookimpls() if not (i.hookwrapper or i.wrapper)]
        plugins = [i.plugin for i in impls]
        # pluggy runs the list from its end (tryfirst last, trylast first)
        self.calls: list[tuple[str, Any]] = []
        for impl in reversed(impls):
            if len(impls) == 1:
                self.calls.append((impl.plugin_name, caller))
            else:
                others = [p for p in plugins if p is not impl.plugin]
                self.calls.append((impl.plugin_name, pluggy_manager.subset_hook_caller(name, others)))

    def __bool__(self) -> bool:
        return bool(self.calls)

    async def __call__(self, **kwargs: Any) -> tuple[Any, str | None]:
        """``(first non-None answer, its plugin)``, or ``(None, None)``; exceptions carry the
        plugin in :class:`HookCallError`."""
        for plugin, caller in self.calls:
            try:
                value = caller(**kwargs)
                if inspect.isawaitable(value):
                    value = await value
            except Exception as exc:
                raise HookCallError(plugin, self.name, exc) from exc
            if value is not None:
                return value, plugin
        return None, None


class HookCallError(Exception):
    """An implementation raised; ``plugin`` and ``hook`` say whose."""

    def __init__(self, plugin: str, hook: str, error: Exception) -> None:
        super().__init__(f"plugin {plugin!r} hook {hook} raised {type(error).__name__}: {error}")
        self.plugin, self.hook, self.error = plugin, hook, error
