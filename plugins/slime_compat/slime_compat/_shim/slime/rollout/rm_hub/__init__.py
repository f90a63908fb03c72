"""slime_compat shim of THUDM/slime's `slime.rollout.rm_hub` (see plugins/slime_compat/README.md)."""
from slime_compat.rewards import async_rm, batched_async_rm

__all__ = ["async_rm", "batched_async_rm"]
