"""slime's agentic wing: the agent SDK, multi-turn rollouts with tools, the agent API, the
rollout-buffer service and the sandboxes tool code runs in.

Three plugins of this distribution (entry points): ``slime_agent`` (``@rollout_entrypoint``:
an async agent function is the rollout, ``[agent]``), ``core_tools`` (``[tools]``,
``[agent_api]``, ``[rollout_buffer]``, the ``calculator`` and ``python`` tools, the ``hermes``
parser, the ``rollout_buffer`` data source, ``core rollout-buffer``) and ``core_sandbox`` (the
``local`` bubblewrap sandbox). See ``plugins/slime_agent/README.md`` and ``docs/agentic.md``.

Modules (import what you use; this package imports nothing heavy):

* :mod:`~slime_agent.entrypoint` / :mod:`~slime_agent.episode` -- the agent SDK;
* :mod:`~slime_agent.sections` -- the ``[tools]``, ``[agent_api]``, ``[rollout_buffer]`` sections;
* :mod:`~slime_agent.parsers` -- tool-call parsers (``hermes``);
* :mod:`~slime_agent.tools` / :mod:`~slime_agent.calculator` -- built-in tools;
* :mod:`~slime_agent.executor` -- validation, timeouts, error kinds;
* :mod:`~slime_agent.chat` -- observation / delta text from the chat template;
* :mod:`~slime_agent.multiturn` -- the multi-turn ``slime_generate``;
* :mod:`~slime_agent.metrics` -- ``rollout/tool_*`` metrics;
* :mod:`~slime_agent.api` -- ``/v1/chat/completions`` with session recording;
* :mod:`~slime_agent.buffer` -- the rollout-buffer service, its client and data source;
* :mod:`~slime_agent.worker` -- a reference agent worker for the buffer;
* :mod:`~slime_agent.sandbox` -- the ``local`` sandbox (bubblewrap, cgroups, rlimits).
"""

from typing import Any

from slime_agent.entrypoint import PARAMETERS, EntryPoint, load_entrypoint, rollout_entrypoint

__all__ = ["PARAMETERS", "EntryPoint", "load_entrypoint", "rollout_entrypoint", "run_agent_api"]


def run_agent_api(config: Any) -> Any:
    """The run's agent API in front of this process's rollout engines
    (:func:`slime_agent.buffer.services.run_agent_api`)."""
    from slime_agent.buffer.services import run_agent_api as run

    return run(config)
