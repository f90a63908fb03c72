"""slime_compat shim of THUDM/slime's `slime.utils.ppo_utils` (see plugins/slime_compat/README.md)."""
from slime_compat.ppo import compute_approx_kl, compute_policy_loss, get_grpo_returns

__all__ = ["compute_approx_kl", "compute_policy_loss", "get_grpo_returns"]
