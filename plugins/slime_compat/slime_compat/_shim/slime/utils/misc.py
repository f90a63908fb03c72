"""slime_compat shim of THUDM/slime's `slime.utils.misc` (see plugins/slime_compat/README.md)."""
from slime_compat.functions import load_function
from slime_compat.misc import SingletonMeta

__all__ = ["SingletonMeta", "load_function"]
