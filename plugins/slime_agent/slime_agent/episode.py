"""One sample's rollout through a decorated agent function (``slime_generate``).

Per sample: a fresh session of the run's agent API (:func:`slime_agent.run_agent_api`), an
``openai.AsyncOpenAI`` bound to it by a session base URL, the agent function called with the
arguments it names, then ``POST /sessions/{id}/finish``: the session's recorded tokens (the
model's ids with loss mask 1 and their log-probs, every other token (prompts, tool results,
user turns) with loss mask 0) replace the sample's response. The function's return value is
kept in ``sample.metadata["agent_reward"]`` and becomes the reward through ``slime_reward``.
An agent that rewrote its history gives several samples (one per segment, same group).

With ``held`` (a fully-async generator's episode: ``engine.holdable``) the session is
tracked by the API, whose ``hold_rollouts`` then holds its calls across a weight update
(:mod:`slime_agent.plugin`); an evaluation's episodes are never held.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
import weakref
from typing import Any
from urllib.parse import quote

from slime_hookspecs import Sample, SamplingParams

from slime_agent.entrypoint import EntryPoint

REWARD_KEY = "agent_reward"
INFO_KEY = "agent"
# one connection pool per rollout event loop: a client per episode would build its own
_HTTP: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _http(timeout: float | None) -> Any:
    import openai

    loop = asyncio.get_running_loop()
    client = _HTTP.get(loop)
    if client is None:
        client = openai.DefaultAsyncHttpxClient(timeout=timeout)
        _HTTP[loop] = client
    return client


def sampling_args(params: SamplingParams, limit: int) -> dict[str, Any]:
    """The rollout's sampling settings as ``chat.completions.create`` keyword arguments
    (``max_tokens`` per request, at most the agent API's limit)."""
    args: dict[str, Any] = {"temperature": params.temperature, "top_p": params.top_p,
                            "max_tokens": min(params.max_new_tokens, limit)}
    if params.stop:
        args["stop"] = list(params.stop)[:16]
    if params.top_k not in (-1, 0, None):
        args["extra_body"] = {"top_k": params.top_k}  # the agent API's extension
    return args


async def run_episode(config: Any, sample: Sample, params: SamplingParams, ep: EntryPoint,
                      timeout_s: float = 0.0, held: bool = False) -> Sample | list[Sample]:
    import openai
    from slime_agent.buffer.services import run_agent_api

    api = run_agent_api(config)
    sid = f"agent-{sample.group_index}-{sample.index}-{uuid.uuid4().hex[:12]}"
    http = _http(timeout_s or None)
    kw = {"api_key": api.token, "http_client": http, "max_retries": 0}
    # no retries: a retried request would be recorded as a second attempt of the same turn
    client = openai.AsyncOpenAI(base_url=api.session_url(sid), **kw)
    root = openai.AsyncOpenAI(base_url=api.url, **kw)
    available = {
        "client": client, "base_url": api.session_url(sid), "api_key": api.token,
        "model": api.model_name, "sampling": sampling_args(params, api.max_tokens),
        "sample": sample, "prompt": sample.prompt, "label": sample.label,
        "metadata": sample.metadata, "session_id": sid,
    }
    if held:
        api.track(sid)
    try:
        call = ep(**available)
        reward = await (asyncio.wait_for(call, timeout_s) if timeout_s > 0 else call)
    except BaseException:
        await _drop(root, sid)
        raise
    finally:
        api.untrack(sid)
    try:
        body = await root.post(f"/sessions/{quote(sid, safe='')}/finish", cast_to=object,
                               body={"rollout_id": rollout_id(sample)})
    except openai.APIStatusError as exc:
        # 404: the session never existed (no request reached it) or was evicted / expired;
        # 409: it exists without a completion. Either way there is nothing to train on.
        if exc.status_code in (404, 409):
            raise RuntimeError(f"agent {ep.name} made no chat completion through the client / "
                               f"base_url it was given, so there is nothing to train on (agent "
                               f"API: {exc.message})") from None
        raise
    recorded = [Sample.from_dict(d) for d in body["samples"]]  # type: ignore[index]
    return merge(sample, recorded, reward, ep.name)


async def _drop(root: Any, sid: str) -> None:
    try:
        await root.delete(f"/sessions/{quote(sid, safe='')}", cast_to=object)
    except Exception:  # noqa: BLE001 - nothing recorded, or already gone: nothing to free
        pass


def merge(orig: Sample, recorded: list[Sample], reward: Any, agent: str) -> Sample | list[Sample]:
    """``orig`` (its prompt, label, ids, metadata) with each recorded segment's tokens, masks,
    log-probs and status; one sample per segment."""
    out = []
    for i, rec in enumerate(recorded):
        s = copy.deepcopy(orig)
        s.tokens, s.response = list(rec.tokens), rec.response
        s.response_length = rec.response_length
        s.loss_mask, s.rollout_log_probs = list(rec.loss_mask), list(rec.rollout_log_probs)
        s.weight_versions, s.status, s.session_id = list(rec.weight_versions), rec.status, rec.session_id
        s.metadata[INFO_KEY] = {"entrypoint": agent, "segment": i, "segments": len(recorded),
                                "completions": rec.metadata.get("completions"),
                                "messages": rec.metadata.get("messages")}
        if reward is not None:
            s.metadata[REWARD_KEY] = reward
        out.append(s)
    return out[0] if len(out) == 1 else out


def rollout_id(sample: Sample) -> int:
    rid = sample.rollout_id
    return rid if isinstance(rid, int) and not isinstance(rid, bool) else -1
