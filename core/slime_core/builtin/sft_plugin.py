"""Built-in plugin ``core_sft``: supervised fine-tuning with the same ``core run``.

With ``train.loss = "sft"`` the rollout is replaced by demonstrations: each prompt's target
(``data.response_key``, else ``data.label_key``) is tokenized and appended to the prompt ids
with loss mask 1, followed by EOS. The loss is ``reducer(-log p)`` over those tokens.
Tokenizing the target is correct here: it is data, not model output.
"""

from __future__ import annotations

from typing import Any

from slime_hookspecs import RolloutResult, Status, hookimpl


class _Tokenizer:
    _tok: Any = None

    @classmethod
    def get(cls, config: Any) -> Any:
        if cls._tok is None:
            from slime_core.engine.model_loading import load_tokenizer

            cls._tok = load_tokenizer(config.model)
        return cls._tok


@hookimpl
def slime_rollout(config: Any, rollout_id: int, data_source: Any, evaluation: bool) -> Any:
    if config.train.loss != "sft" or evaluation:
        return None
    tok = _Tokenizer.get(config)
    groups = data_source.get_samples(config.rollout.batch_size)
    for group in groups:
        for s in group:
            target = s.metadata.get("response", s.label)
            ids = tok.encode(str(target), add_special_tokens=False)
            if tok.eos_token_id is not None:
                ids = ids + [tok.eos_token_id]
            s.rollout_id = rollout_id
            s.append_response_tokens(ids, [0.0] * len(ids), text=str(target))
            s.status, s.reward = Status.COMPLETED, 0.0
    return RolloutResult(groups=groups, metrics={})
