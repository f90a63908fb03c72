"""Default plugin ``core_sft``: supervised fine-tuning with the same ``core run``.

With ``train.loss = "sft"`` the rollout is replaced by demonstrations: each prompt's target
(``data.response_key``, else ``data.label_key``) is tokenized and appended to the prompt ids
with loss mask 1, followed by EOS. The loss is ``reducer(-log p)`` over those tokens.

A row whose prompt is a chat with assistant turns (``{"prompt": [{"role": "user", ...},
{"role": "assistant", ...}, ...]}``) is a multi-turn demonstration (slime's ``sft_loss``): the
whole chat is rendered by the chat template and only the assistant turns are trained on
(:mod:`slime_std.data.sft_chat`); no label is needed.
Tokenizing the target is correct here: it is data, not model output.
"""

from __future__ import annotations

from typing import Any

from slime_hookspecs import Config, RolloutResult, Status, hookimpl


class _Tokenizer:
    _tok: Any = None

    @classmethod
    def get(cls, config: Config) -> Any:
        if cls._tok is None:
            from slime_core.api import load_tokenizer

            cls._tok = load_tokenizer(config.model)
        return cls._tok


@hookimpl
def slime_rollout(config: Config, rollout_id: int, data_source: Any, evaluation: bool) -> Any:
    if config.train.loss != "sft" or evaluation:
        return None
    tok = _Tokenizer.get(config)
    groups = data_source.get_samples(config.rollout.batch_size)
    for group in groups:
        for s in group:
            if _is_chat(s.prompt):
                _set_chat(tok, s, rollout_id, config.data.chat_template_kwargs)
                continue
            target = s.metadata.get("response", s.label)
            if target is None or str(target) == "":
                raise ValueError(
                    f"SFT: sample {s.index} has neither a target (metadata.response or the "
                    f"label, data.label_key) nor a chat with assistant turns as its prompt")
            ids = tok.encode(str(target), add_special_tokens=False)
            if tok.eos_token_id is not None:
                ids = ids + [tok.eos_token_id]
            s.rollout_id = rollout_id
            s.append_response_tokens(ids, [0.0] * len(ids), text=str(target))
            s.status, s.reward = Status.COMPLETED, 0.0
    return RolloutResult(groups=groups, metrics={})


def _is_chat(prompt: Any) -> bool:
    return isinstance(prompt, list) and any(
        isinstance(m, dict) and m.get("role") == "assistant" for m in prompt)


def _set_chat(tok: Any, s: Any, rollout_id: int, template_kwargs: dict[str, Any]) -> None:
    """Prompt ids, response ids and the loss mask of a whole chat, from its template."""
    from slime_std.data.sft_chat import chat_loss_mask, split_prompt_response

    ids, mask = chat_loss_mask(tok, s.prompt, s.metadata.get("tools"), template_kwargs)
    prompt_ids, response_ids, response_mask = split_prompt_response(ids, mask)
    s.tokens, s.response, s.response_length = list(prompt_ids), "", 0
    s.loss_mask, s.rollout_log_probs = [], []
    # runs of trained (assistant) and masked (user, tool, headers) tokens, in order
    start = 0
    for j in range(1, len(response_ids) + 1):
        if j == len(response_ids) or response_mask[j] != response_mask[start]:
            run = response_ids[start:j]
            trained = bool(response_mask[start])
            s.append_response_tokens(run, [0.0] * len(run) if trained else None,
                                     trainable=trained)
            start = j
    s.response = tok.decode(response_ids)
    s.rollout_id = rollout_id
    s.status, s.reward = Status.COMPLETED, 0.0
