"""Multi-turn generation with tools: the ``slime_generate`` of ``core_tools``.

One episode, up to ``tools.max_turns`` model turns:

1. generate from ``sample.tokens`` (prompt + everything so far) with the remaining budget
   ``max_new_tokens - response_length`` (model *and* observation tokens count, since both
   take room in the trained sequence), stopping at EOS, at the configured stop strings and at
   the parser's stop strings (``</tool_call>`` for Hermes);
2. append the model's ids verbatim as trainable, with their log-probs;
3. parse the turn (its ids decoded, special tokens kept) for tool calls; none -> COMPLETED;
4. run the calls in order (bad ones become error observations, see
   :mod:`slime_agent.executor`), cut each result to ``tools.max_observation_tokens``,
   and append the observation text's ids with loss mask 0 (only that text is tokenized,
   see :mod:`slime_agent.chat`).

The episode ends TRUNCATED when the budget runs out (a turn hits its length limit, or the
observation would leave no room to answer), ABORTED when the engine aborts, COMPLETED when a
turn has no call or the last allowed turn is done (its calls are then not run:
``metadata["max_turns_reached"]``). Counts for the metrics go to ``sample.metadata``:
``turns``, ``tool_calls`` (calls answered, errors included), ``tool_errors`` (kind -> count)
and ``tool_trace`` (name, ok, kind per call).
"""

from __future__ import annotations

from typing import Any

from slime_hookspecs import Sample, SamplingParams, Status

from slime_agent import chat
from slime_agent.executor import ToolExecutor, ToolOutcome
from slime_agent.runtime import AgentRuntime, get_runtime
from slime_agent.sections import DEFAULT_RAW_OBSERVATION

_FINISH = {"stop": Status.COMPLETED, "length": Status.TRUNCATED, "abort": Status.ABORTED}
_COUNTS = ("turns", "tool_calls", "tool_errors", "tool_trace", "max_turns_reached",
           "observations_truncated", "observation_over_budget")


async def generate_with_tools(config: Any, sample: Sample, sampling_params: SamplingParams,
                              engine: Any, runtime: AgentRuntime | None = None) -> Sample:
    """Run one tool-using episode on ``sample`` (see the module docstring)."""
    rt = runtime or get_runtime(config)
    cfg = rt.settings
    tok = rt.tokenizer
    stops = list(sampling_params.stop) + [s for s in rt.stop if s not in sampling_params.stop]
    budget = sampling_params.max_new_tokens
    meta = sample.metadata
    if sample.response_length == 0:  # a fresh episode (also a prompt back from the buffer)
        for key in _COUNTS:
            meta.pop(key, None)
    meta.setdefault("turns", 0)
    meta.setdefault("tool_calls", 0)
    meta.setdefault("tool_errors", {})
    meta.setdefault("tool_trace", [])
    # the tools the prompt was rendered with (data.tools_key), so the template renders alike
    prompt_tools = meta.get("tools") if isinstance(meta.get("tools"), list) else None
    ctx = rt.context(sample)
    try:
        for turn in range(cfg.max_turns):
            remaining = budget - sample.response_length
            if remaining <= 0:
                sample.status = Status.TRUNCATED
                break
            out = await engine.generate(
                sample.tokens, sampling_params.replace(max_new_tokens=remaining, stop=stops)
            )
            text = out.text or tok.decode(out.token_ids, skip_special_tokens=True)
            sample.append_response_tokens(out.token_ids, out.log_probs, text=text,
                                          weight_version=out.weight_version)
            meta["turns"] += 1
            sample.status = _FINISH.get(out.finish_reason, Status.COMPLETED)
            if sample.status != Status.COMPLETED:
                break
            parsed = rt.parser(tok.decode(out.token_ids, skip_special_tokens=False))
            if not parsed.calls and not parsed.errors:
                break
            if turn == cfg.max_turns - 1:
                meta["max_turns_reached"] = True
                break
            outcomes = await _answer(rt.executor, parsed, ctx, cfg.max_calls_per_turn)
            results = []
            for o in outcomes:
                _count(meta, o)
                text, cut = chat.truncate_to_tokens(tok, o.text, cfg.max_observation_tokens)
                if cut:
                    meta["observations_truncated"] = meta.get("observations_truncated", 0) + 1
                results.append((o.name or "tool", text))
            obs = chat.observation_text(
                tok, sample.prompt, results, cfg.observation_template, DEFAULT_RAW_OBSERVATION,
                last_token_id=out.token_ids[-1] if out.token_ids else None, tools=prompt_tools,
                template_kwargs=config.data.chat_template_kwargs,
            )
            ids = chat.encode(tok, obs)
            if sample.response_length + len(ids) >= budget:
                # No room left for the model to read the result and answer.
                meta["observation_over_budget"] = True
                sample.status = Status.TRUNCATED
                break
            sample.append_response_tokens(ids, None, trainable=False, text=obs)
    finally:
        await ctx.close()
    return sample


async def _answer(executor: ToolExecutor, parsed: Any, ctx: Any,
                  max_calls: int) -> list[ToolOutcome]:
    """Outcomes of a turn's calls and parse errors, in the order they appear in the text."""
    items = sorted([*parsed.calls, *parsed.errors], key=lambda x: x.position)
    outcomes: list[ToolOutcome] = []
    for i, item in enumerate(items):
        if i >= max_calls:
            outcomes.append(ToolOutcome(
                name=getattr(item, "name", ""), ok=False, kind="too_many_calls",
                text=f"Error: at most {max_calls} tool calls per turn; this one was not run",
            ))
        elif hasattr(item, "arguments"):
            outcomes.append(await executor.run(item, ctx))
        else:
            outcomes.append(executor.parse_error(item))
    return outcomes


def _count(meta: dict[str, Any], outcome: ToolOutcome) -> None:
    meta["tool_calls"] += 1
    if not outcome.ok:
        meta["tool_errors"][outcome.kind] = meta["tool_errors"].get(outcome.kind, 0) + 1
    meta["tool_trace"].append({"name": outcome.name, "ok": outcome.ok, "kind": outcome.kind})
