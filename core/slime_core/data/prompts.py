"""From a raw prompt (text or chat messages) to what a sample carries: prompt and token ids.

Rules (``[data]`` keys):

* a text prompt first goes through ``prompt_template`` (``str.format(prompt=text)``; write
  literal braces as ``{{`` ``}}``);
* with ``apply_chat_template`` the text becomes one user message; ``system_prompt`` (when set
  and the messages do not start with a system message) is put first; the tokenizer's chat
  template renders the messages with ``add_generation_prompt=True`` and the row's tools
  (``tools_key``), and the rendered text is tokenized without adding special tokens (the
  template already holds them), as slime does; ``chat_template_kwargs`` go to every
  template call as extra keyword arguments (``enable_thinking = false`` for Qwen3);
* a prompt that already is a list of messages always goes through the chat template (there is
  no other way to turn it into ids); ``prompt_template`` is not applied to it;
* without the chat template the templated text is tokenized with ``add_special_tokens=False``
  (slime's convention); ``system_prompt`` is then unused.

``Sample.prompt`` is the templated text, or the message list (system message included) when
the chat template is used. The tokenizer is loaded lazily, once, with
``AutoTokenizer.from_pretrained(model.tokenizer or model.path)`` (the process's shared instance,
``slime_core.models.loading.shared_tokenizer``); it is not pickled.
"""

from __future__ import annotations

import copy
from typing import Any


class PromptEncoder:
    """Applies the ``[data]`` prompt rules and tokenizes; see the module docstring."""

    def __init__(self, config: Any, tokenizer: Any = None) -> None:
        data = config.data
        self.template = data.prompt_template or "{prompt}"
        self.apply_chat_template = bool(data.apply_chat_template)
        self.system_prompt = data.system_prompt
        self.chat_template_kwargs = dict(data.chat_template_kwargs)
        self.tokenizer_name = config.model.tokenizer or config.model.path
        self.trust_remote_code = bool(config.model.trust_remote_code)
        self._tokenizer = tokenizer
        try:
            self.template.format(prompt="x")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"data.prompt_template {self.template!r} is not a valid str.format template with "
                f"a {{prompt}} field ({type(exc).__name__}: {exc}); write literal braces as "
                "{{ and }}, e.g. '\\boxed{{}}'"
            ) from None

    # -- tokenizer -------------------------------------------------------------------------
    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            if not self.tokenizer_name:
                raise ValueError(
                    "model.tokenizer and model.path are both empty: the data source needs a "
                    "tokenizer to turn prompts into token ids; set one of them"
                )
            from slime_core.models.loading import shared_tokenizer

            # the train and eval data (and the trainer) share one load
            self._tokenizer = shared_tokenizer(self.tokenizer_name, self.trust_remote_code)
        return self._tokenizer

    def set_tokenizer(self, tokenizer: Any) -> None:
        """Use an already loaded tokenizer (must match the engine's)."""
        self._tokenizer = tokenizer

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_tokenizer"] = None  # reloaded lazily in the receiving process
        return state

    # -- encoding --------------------------------------------------------------------------
    def format_text(self, text: str) -> str:
        return self.template.format(prompt=text)

    def encode(self, prompt: Any, tools: list[Any] | None = None) -> tuple[Any, list[int]]:
        """``(sample_prompt, token_ids)`` for one raw prompt (see the module docstring)."""
        if isinstance(prompt, str) and not self.apply_chat_template:
            text = self.format_text(prompt)
            return text, self._ids(text)
        if isinstance(prompt, str):
            messages: list[dict[str, Any]] = [{"role": "user", "content": self.format_text(prompt)}]
        else:
            messages = copy.deepcopy(list(prompt))
        if self.system_prompt and not (messages and messages[0].get("role") == "system"):
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return messages, self._ids(self.render_chat(messages, tools))

    def render_chat(self, messages: list[dict[str, Any]], tools: list[Any] | None = None) -> str:
        tok = self.tokenizer
        if not getattr(tok, "chat_template", None):
            raise ValueError(
                f"tokenizer {self.tokenizer_name!r} has no chat template, but the prompt needs "
                "one (data.apply_chat_template is true, or the prompt is a list of messages)"
            )
        kwargs: dict[str, Any] = {**self.chat_template_kwargs, "tokenize": False,
                                  "add_generation_prompt": True}
        if tools:
            kwargs["tools"] = tools
        return tok.apply_chat_template(messages, **kwargs)

    def _ids(self, text: str) -> list[int]:
        return [int(t) for t in self.tokenizer(text, add_special_tokens=False)["input_ids"]]
