"""slime_compat shim of THUDM/slime's `slime.backends.megatron_utils.loss` (see plugins/slime_compat/README.md)."""
from slime_compat.ppo import get_log_probs_and_entropy

__all__ = ["get_log_probs_and_entropy"]
