"""Loss masks of multi-turn chats from the chat template: assistant turns only.

slime's ``--loss-type sft_loss`` with its ``MultiTurnLossMaskGenerator``, without its
per-family offsets (``qwen``, ``qwen3``, ``distill``): the template itself says where each
assistant turn is. For assistant message ``i`` its tokens are those between

* the conversation up to message ``i - 1`` rendered with the generation prompt (the
  assistant header the model is given, never trained on), and
* the conversation up to message ``i`` rendered without it,

so the turn's content and its end-of-turn marker (what the model must learn to emit to stop)
have mask 1; system, user and tool messages and every header have mask 0. A message with
``"step_loss_mask": 0`` (slime's field) is masked too. The sample's prompt is everything
before the first trained token, its response the rest (later user turns inside the response
keep mask 0).

This needs a template whose rendering of a conversation starts with the rendering of every
shorter one (true of Llama, Qwen2, Mistral, ChatML templates); one that rewrites earlier turns
(Qwen3 drops earlier ``<think>`` blocks) fails naming the message where the prefix broke.
"""

from __future__ import annotations

from typing import Any


def _ids(tokenizer: Any, text: str) -> list[int]:
    return [int(t) for t in tokenizer(text, add_special_tokens=False)["input_ids"]]


def _render(tokenizer: Any, messages: list[dict[str, Any]], tools: Any, gen: bool,
            template_kwargs: dict[str, Any]) -> str:
    kwargs: dict[str, Any] = {**template_kwargs, "tokenize": False, "add_generation_prompt": gen}
    if tools:
        kwargs["tools"] = tools
    return tokenizer.apply_chat_template(messages, **kwargs) if messages else ""


def chat_loss_mask(tokenizer: Any, messages: list[dict[str, Any]], tools: Any = None,
                   template_kwargs: dict[str, Any] | None = None) -> tuple[list[int], list[int]]:
    """``(token_ids, mask)`` of the whole chat; ``mask[j]`` is 1 on assistant-turn tokens.

    ``template_kwargs`` (``data.chat_template_kwargs``) go to every template call.
    """
    kw = dict(template_kwargs or {})
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("multi-turn SFT needs a tokenizer with a chat template "
                         "(model.tokenizer's tokenizer_config.json has none)")
    full = _ids(tokenizer, _render(tokenizer, messages, tools, False, kw))
    mask = [0] * len(full)
    for i, msg in enumerate(messages):
        if msg.get("role") != "assistant" or msg.get("step_loss_mask", 1) != 1:
            continue
        before = _ids(tokenizer, _render(tokenizer, messages[:i], tools, True, kw))
        upto = _ids(tokenizer, _render(tokenizer, messages[: i + 1], tools, False, kw))
        for ids, what in ((before, "with the generation prompt"), (upto, "")):
            if full[:len(ids)] != ids:
                raise ValueError(
                    f"chat template: the conversation up to message {i} ({what or 'as is'}) is "
                    "not a prefix of the whole conversation's tokens, so turns cannot be "
                    "located (does the template rewrite earlier turns?)")
        for j in range(len(before), len(upto)):
            mask[j] = 1
    return full, mask


def split_prompt_response(ids: list[int], mask: list[int]) -> tuple[list[int], list[int], list[int]]:
    """``(prompt_ids, response_ids, response_mask)``: the response starts at the first 1."""
    if 1 not in mask:
        raise ValueError("the chat has no assistant turn to train on")
    start = mask.index(1)
    return ids[:start], ids[start:], mask[start:]
