"""slime_compat shim of THUDM/slime's `slime.rollout.base_types` (see plugins/slime_compat/README.md)."""
from slime_compat.rollout_types import RolloutFnEvalOutput, RolloutFnTrainOutput, call_rollout_fn

__all__ = ["RolloutFnEvalOutput", "RolloutFnTrainOutput", "call_rollout_fn"]
