"""slime_compat shim of THUDM/slime's `slime.rollout.filter_hub.base_types` (see plugins/slime_compat/README.md)."""
from slime_compat.filters import DynamicFilterOutput, call_dynamic_filter

__all__ = ["DynamicFilterOutput", "call_dynamic_filter"]
