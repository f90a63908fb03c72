"""The reward of an agent episode: a record that ``rollout.reward`` names while the agent runs.

An agent function may return the sample's reward (kept in ``sample.metadata["agent_reward"]``,
:mod:`slime_agent.episode`); a sample whose function returned none is scored by the reward
the user chose. With ``[agent] entrypoint`` set, ``slime_configure`` points ``rollout.reward``
(and ``eval.reward`` when set) at one of the records here
(``slime_core.api.replace_choice``), which builds the user's choice
(``replaced_choice``) for the samples without an agent reward. The ``_group`` records serve a
user's choice that scores whole groups.
"""

from __future__ import annotations

from typing import Any

from slime_hookspecs import Records, RewardFunctionRecord

from slime_agent.episode import REWARD_KEY

records = Records()

TRAIN, TRAIN_GROUP = "agent_episode", "agent_episode_group"
EVAL, EVAL_GROUP = "agent_episode_eval", "agent_episode_eval_group"


def _users(config: Any, key: str) -> Any:
    """The reward record the user chose for ``key`` (``eval.reward`` empty: ``rollout.reward``'s)."""
    from slime_core.api import get_registries, replaced_choice

    name = replaced_choice(config, key) or ""
    if not name and key == "eval.reward":
        name = replaced_choice(config, "rollout.reward") or config.rollout.reward
    return get_registries().reward_function.get(name)


def _per_sample(config: Any, key: str) -> Any:
    fn = _users(config, key).factory(config)

    def reward(sample: Any) -> Any:
        r = sample.metadata.get(REWARD_KEY)
        return r if r is not None else fn(sample)

    return reward


def _per_group(config: Any, key: str) -> Any:
    fn = _users(config, key).factory(config)

    async def reward(samples: list[Any]) -> list[Any]:
        todo = [s for s in samples if s.metadata.get(REWARD_KEY) is None]
        out = fn(todo) if todo else []
        scored = iter(await out if hasattr(out, "__await__") else out)
        return [s.metadata[REWARD_KEY] if s.metadata.get(REWARD_KEY) is not None else next(scored)
                for s in samples]

    return reward


_SUMMARY = "the agent function's returned reward, else the configured reward; set by slime_agent"


@records.register(RewardFunctionRecord, TRAIN, summary=_SUMMARY)
def agent_episode(config: Any) -> Any:
    return _per_sample(config, "rollout.reward")


@records.register(RewardFunctionRecord, TRAIN_GROUP, group=True, summary=_SUMMARY)
def agent_episode_group(config: Any) -> Any:
    return _per_group(config, "rollout.reward")


@records.register(RewardFunctionRecord, EVAL, summary=_SUMMARY + " (evaluation)")
def agent_episode_eval(config: Any) -> Any:
    return _per_sample(config, "eval.reward")


@records.register(RewardFunctionRecord, EVAL_GROUP, group=True, summary=_SUMMARY + " (evaluation)")
def agent_episode_eval_group(config: Any) -> Any:
    return _per_group(config, "eval.reward")


slime_register_reward_functions = records.hook(RewardFunctionRecord)


def take_over(config: Any) -> None:
    """Point ``rollout.reward`` (and a set ``eval.reward``) at the agent's records."""
    from slime_core.api import get_registries, replace_choice

    rewards = get_registries().reward_function
    group = rewards.get(config.rollout.reward).group if config.rollout.reward not in (
        TRAIN, TRAIN_GROUP) else config.rollout.reward == TRAIN_GROUP
    replace_choice(config, "rollout.reward", TRAIN_GROUP if group else TRAIN)
    if config.eval.reward and config.eval.reward not in (EVAL, EVAL_GROUP):
        group = rewards.get(config.eval.reward).group
        replace_choice(config, "eval.reward", EVAL_GROUP if group else EVAL)
