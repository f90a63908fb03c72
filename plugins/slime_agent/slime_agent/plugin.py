"""Entry point of ``slime-agent``: with ``[agent] entrypoint`` set, every sample (train and
eval) is rolled out by the decorated agent function through the run's agent API.

* ``slime_add_config``: the ``[agent]`` section;
* ``slime_run_start`` (driver): imports the entry point and checks that ``model.tokenizer``
  has a chat template (the agent API needs one), so either fails before step 1;
* ``slime_generate`` (rollout manager, ``tryfirst``): :func:`slime_agent.episode.run_episode`;
* ``slime_configure`` and the ``agent_episode`` reward records (:mod:`slime_agent.reward`):
  ``rollout.reward`` (and a set ``eval.reward``) names the record that gives the function's
  returned reward; a sample whose function returned ``None`` goes on to the reward the user
  chose;
* ``slime_hold_rollouts`` / ``slime_release_rollouts`` (rollout manager, fully-async mode):
  the agent API holds the engine calls of the generator's episodes across a weight update,
  so an episode longer than the interval between updates continues instead of restarting.
  The promise the hold makes (the episodes reach the engines only through the API) is this
  plugin's to keep: its ``slime_generate`` answers every sample, and an agent gets no other
  way to the engines.

Nothing heavy is imported here (openai loads with the first episode).
"""

from __future__ import annotations

import functools
from typing import Any

from slime_hookspecs import Config, ConfigSection, hookimpl

from slime_agent.config import AgentSection
from slime_agent.reward import slime_register_reward_functions  # noqa: F401 - its records


def _entry(config: Config) -> str:
    sec = getattr(config, "agent", None)
    return sec.entrypoint if sec is not None else ""


@functools.lru_cache(maxsize=8)
def _load(spec: str) -> Any:
    from slime_agent.entrypoint import load_entrypoint

    return load_entrypoint(spec)


@hookimpl
def slime_add_config(schema: Any) -> ConfigSection:
    return ConfigSection(name="agent", schema=AgentSection,
                         summary="agent SDK: the @rollout_entrypoint function that rolls out "
                                 "each sample against the agent API, episode timeout")


@hookimpl
def slime_run_start(config: Config, run_dir: str) -> None:
    spec = _entry(config)
    if not spec:
        return
    tools = getattr(config, "tools", None)
    if tools is not None and list(tools.enabled):
        raise ValueError(f"agent.entrypoint = {spec!r} and tools.enabled = {list(tools.enabled)} "
                         "both generate the rollout; the agent runs its own tools, so empty "
                         "tools.enabled (or unset agent.entrypoint)")
    _load(spec)
    from slime_core.api import load_tokenizer

    from slime_agent.api import require_chat_template

    # the agent API refuses such a tokenizer when it starts, at the first episode: say it now
    require_chat_template(load_tokenizer(config.model))


@hookimpl(tryfirst=True)
def slime_generate(config: Config, sample: Any, sampling_params: Any, engine: Any) -> Any:
    spec = _entry(config)
    if not spec:
        return None
    from slime_agent.episode import run_episode

    return run_episode(config, sample, sampling_params, _load(spec), config.agent.timeout_s,
                       held=bool(getattr(engine, "holdable", False)))


@hookimpl
def slime_hold_rollouts(config: Config) -> bool | None:
    if not _entry(config):
        return None
    from slime_agent.buffer.services import hold_rollouts

    hold_rollouts()
    return True


@hookimpl
def slime_release_rollouts(config: Config, end: bool) -> None:
    if not _entry(config):
        return
    from slime_agent.buffer.services import release_rollouts

    release_rollouts(end)


@hookimpl
def slime_configure(config: Config) -> None:
    if not _entry(config):
        return
    from slime_agent.reward import take_over

    take_over(config)
