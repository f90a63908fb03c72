"""slime_compat shim of THUDM/slime's `slime.rollout.sglang_rollout` (see plugins/slime_compat/README.md)."""
from slime_compat.generation import (
    GenerateState,
    generate,
    generate_and_rm,
    generate_and_rm_group,
    generate_rollout,
    get_model_url,
)

__all__ = ["GenerateState", "generate", "generate_and_rm", "generate_and_rm_group",
           "generate_rollout", "get_model_url"]
