"""slime_compat shim of THUDM/slime's `slime.rollout.filter_hub.dynamic_sampling_filters` (see plugins/slime_compat/README.md)."""
from slime_compat.filters import check_reward_nonzero_std, check_reward_nonzero_std_with_fallback

__all__ = ["check_reward_nonzero_std", "check_reward_nonzero_std_with_fallback"]
