"""Agentic rollouts: multi-turn generation with tools, the agent-facing OpenAI-compatible API,
and the rollout-buffer service.

Modules (import what you use; this package imports nothing heavy):

* :mod:`~slime_core.agent.config` -- the ``[tools]``, ``[agent_api]``, ``[rollout_buffer]`` sections;
* :mod:`~slime_core.agent.parsers` -- tool-call parsers (``hermes``);
* :mod:`~slime_core.agent.tools` / :mod:`~slime_core.agent.calculator` -- built-in tools;
* :mod:`~slime_core.agent.executor` -- validation, timeouts, error kinds;
* :mod:`~slime_core.agent.chat` -- observation / delta text from the chat template;
* :mod:`~slime_core.agent.multiturn` -- the multi-turn ``slime_generate``;
* :mod:`~slime_core.agent.metrics` -- ``rollout/tool_*`` metrics;
* :mod:`~slime_core.agent.api` -- ``/v1/chat/completions`` with session recording;
* :mod:`~slime_core.agent.buffer` -- the rollout-buffer service, its client and data source;
* :mod:`~slime_core.agent.worker` -- a reference agent worker for the buffer.
"""
