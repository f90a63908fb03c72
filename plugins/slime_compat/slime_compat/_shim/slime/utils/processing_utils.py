"""slime_compat shim of THUDM/slime's `slime.utils.processing_utils` (see plugins/slime_compat/README.md)."""
from slime_compat.misc import load_processor, load_tokenizer

__all__ = ["load_processor", "load_tokenizer"]
