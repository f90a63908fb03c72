"""slime_compat shim of THUDM/slime's `slime.utils.types` (see plugins/slime_compat/README.md)."""
from slime_compat.samples import Sample

__all__ = ["Sample"]
