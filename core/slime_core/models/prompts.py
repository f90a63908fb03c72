"""The checks every rollout engine makes on a ``generate`` call's inputs, in one place.

The local engine, ``vllm_rollout`` and ``sglang_rollout`` refuse the same bad inputs with the
same words (through ``slime_core.api.check_generate_inputs``): a count mismatch, an empty
prompt, a prompt as long as the model's context, a token id outside the vocabulary, and stop
strings without a tokenizer. An engine adds only what is its own (vLLM's truncated-sampling
log-probs, for one).
"""

from __future__ import annotations

from collections.abc import Sequence

from slime_hookspecs import SamplingParams


def check_generate_inputs(prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams],
                          vocab_size: int | None = None, context_length: int | None = None,
                          has_tokenizer: bool = True) -> list[list[int]]:
    """The prompts as lists of ``int``, or ``ValueError`` naming the first bad input.

    ``vocab_size`` / ``context_length`` None: not checked (an engine that does not know them,
    e.g. a remote server that answers for itself). ``has_tokenizer`` False: stop strings are
    refused (they are matched on decoded text)."""
    if len(prompts) != len(params):
        raise ValueError(f"generate: {len(prompts)} prompts but {len(params)} sampling params")
    out: list[list[int]] = []
    for i, (prompt, sp) in enumerate(zip(prompts, params, strict=True)):
        ids = [int(t) for t in prompt]
        if not ids:
            raise ValueError(f"generate: prompt {i} is empty")
        if context_length is not None and len(ids) >= context_length:
            raise ValueError(
                f"generate: prompt {i} has {len(ids)} tokens, the model's context is "
                f"{context_length} (max_position_embeddings)")
        if vocab_size is not None:
            bad = next((t for t in ids if not 0 <= t < vocab_size), None)
            if bad is not None:
                raise ValueError(
                    f"generate: prompt {i} has token id {bad}, outside the model's vocabulary "
                    f"(size {vocab_size})")
        if sp.stop and not has_tokenizer:
            raise ValueError(
                "generate: stop strings need a tokenizer; set model.tokenizer (or model.path)")
        out.append(ids)
    return out
