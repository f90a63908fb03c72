"""Text that follows a model turn: tool results or new messages, rendered by the chat template.

Multi-turn token sequences are built by appending ids: the model's ids are kept verbatim and
only the text that comes *after* them is tokenized. That text is found by rendering the
conversation with the last assistant message replaced by a marker and taking everything after
the marker: the template's end-of-turn for the assistant, the new messages (tool results,
user turns) and the generation prompt of the next assistant turn. Whatever the template does
(``<|im_end|>``, ``<tool_response>`` wrapping for Hermes/Qwen, role headers) is reproduced
without ever re-tokenizing the model's text.

When the model's own last token already is the template's end-of-turn (it stopped on EOS),
that text is removed from the front of the continuation so it is not doubled.

Prompts that are plain text (no chat template) use a fixed format per tool result instead:
``tools.observation_template`` or :data:`~slime_agent.sections.DEFAULT_RAW_OBSERVATION`.
"""

from __future__ import annotations

import copy
from typing import Any

MARKER = "\ue000slime-assistant-turn\ue001"  # private-use characters: no template emits them


def render_chat(tokenizer: Any, messages: list[dict[str, Any]], tools: list[Any] | None = None,
                add_generation_prompt: bool = True,
                template_kwargs: dict[str, Any] | None = None) -> str:
    """The chat template's text of ``messages`` (``tools`` passed when given).

    ``template_kwargs`` (the run's ``data.chat_template_kwargs``, e.g. Qwen3's
    ``enable_thinking``) go to the template too, so every turn renders as the prompt did.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template, but chat messages must be rendered")
    kwargs: dict[str, Any] = {**(template_kwargs or {}), "tokenize": False,
                              "add_generation_prompt": add_generation_prompt}
    if tools:
        kwargs["tools"] = tools
    return tokenizer.apply_chat_template(list(messages), **kwargs)


def continuation_text(tokenizer: Any, history: list[dict[str, Any]],
                      new_messages: list[dict[str, Any]], tools: list[Any] | None = None,
                      last_token_id: int | None = None,
                      template_kwargs: dict[str, Any] | None = None) -> str:
    """Text after the last assistant message of ``history`` up to the next generation prompt.

    ``history`` ends with the assistant message the model produced (its content is replaced
    by the marker); ``last_token_id`` is the model's last token (end-of-turn overlap).
    """
    if not history or history[-1].get("role") != "assistant":
        raise ValueError("continuation_text needs a history that ends with an assistant message")
    msgs = copy.deepcopy(list(history))
    msgs[-1] = {"role": "assistant", "content": MARKER}
    text = render_chat(tokenizer, msgs + list(new_messages), tools, add_generation_prompt=True,
                       template_kwargs=template_kwargs)
    pos = text.rfind(MARKER)
    if pos < 0:
        raise ValueError(
            "the chat template dropped the last assistant message's content, so the text after "
            "it cannot be found; use tools.observation_template for this model"
        )
    return strip_turn_end_overlap(tokenizer, text[pos + len(MARKER):], last_token_id)


def strip_turn_end_overlap(tokenizer: Any, text: str, last_token_id: int | None) -> str:
    """Drop the model's last token's text from the front of ``text`` when it is a special token
    the template also writes there (the end-of-turn the model already produced)."""
    if last_token_id is None:
        return text
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    if int(last_token_id) not in special:
        return text
    piece = tokenizer.decode([int(last_token_id)], skip_special_tokens=False)
    if piece and text.startswith(piece):
        return text[len(piece):]
    return text


def tool_messages(results: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """``[(tool name, text), ...]`` as chat ``tool`` messages."""
    return [{"role": "tool", "name": name, "content": text} for name, text in results]


def observation_text(tokenizer: Any, prompt: Any, results: list[tuple[str, str]],
                     template: str, default_raw: str, last_token_id: int | None,
                     tools: list[Any] | None = None,
                     template_kwargs: dict[str, Any] | None = None) -> str:
    """The text appended after a model turn that called tools.

    ``template`` set: ``template.format(observation=text)`` per result, joined. Otherwise a
    chat prompt (``prompt`` is a message list) gets the chat template's tool messages, and a
    plain-text prompt gets ``default_raw`` per result.
    """
    if template:
        return "".join(template.format(observation=text) for _, text in results)
    if isinstance(prompt, list) and getattr(tokenizer, "chat_template", None):
        history = list(prompt) + [{"role": "assistant", "content": ""}]
        return continuation_text(tokenizer, history, tool_messages(results), tools, last_token_id,
                                 template_kwargs)
    return "".join(default_raw.format(observation=text) for _, text in results)


def encode(tokenizer: Any, text: str) -> list[int]:
    """Ids of ``text`` with no special tokens added (the text already holds what it needs)."""
    return [int(t) for t in tokenizer(text, add_special_tokens=False)["input_ids"]]


def truncate_to_tokens(tokenizer: Any, text: str, max_tokens: int) -> tuple[str, bool]:
    """``text`` cut to ``max_tokens`` tokens (tool output, not model output), and whether it was."""
    ids = encode(tokenizer, text)
    if len(ids) <= max_tokens:
        return text, False
    cut = tokenizer.decode(ids[:max_tokens], skip_special_tokens=False)
    return f"{cut}\n[truncated: {len(ids) - max_tokens} more tokens]", True
