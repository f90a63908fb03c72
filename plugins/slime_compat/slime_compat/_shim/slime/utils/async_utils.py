"""slime_compat shim of THUDM/slime's `slime.utils.async_utils` (see plugins/slime_compat/README.md)."""
from slime_compat.aio import run

__all__ = ["run"]
