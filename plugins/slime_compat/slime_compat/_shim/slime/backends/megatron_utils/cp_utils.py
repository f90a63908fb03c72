"""slime_compat shim of THUDM/slime's `slime.backends.megatron_utils.cp_utils` (see plugins/slime_compat/README.md).

Context parallelism is not used by the hooks' callers here (each hook sees whole responses), so
these are slime's ``cp_size == 1`` branches: what slime's own code returns on one CP rank.
"""
from __future__ import annotations

from typing import Any


def all_gather_with_cp(tensor: Any, total_length: int, response_length: int) -> Any:
    return tensor


def slice_log_prob_with_cp(log_prob: Any, total_length: int, response_length: int) -> Any:
    # slime checks this before slicing; a wrong length is a caller bug either way
    assert len(log_prob) == response_length, (
        f"log_prob length mismatch: len(log_prob)={len(log_prob)}, "
        f"response_length={response_length}, total_length={total_length}"
    )
    return log_prob


def slice_with_cp(tokens: Any, pad_value: Any = None, *args: Any, **kwargs: Any) -> Any:
    return tokens


__all__ = ["all_gather_with_cp", "slice_log_prob_with_cp", "slice_with_cp"]
