"""Helpers behind the shim's ``slime.utils.misc`` and ``processing_utils``."""

from __future__ import annotations

from typing import Any


class SingletonMeta(type):
    """slime's ``SingletonMeta``: one instance per class. :func:`clear_singletons` forgets
    them all when a new run (a new ``args``) starts in the same process."""

    _instances: dict[type, Any] = {}

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls not in SingletonMeta._instances:
            SingletonMeta._instances[cls] = super().__call__(*args, **kwargs)
        return SingletonMeta._instances[cls]

    def clear_instances(cls) -> None:
        SingletonMeta._instances.pop(cls, None)


def clear_singletons() -> None:
    SingletonMeta._instances.clear()


def load_tokenizer(name_or_path: str, **kwargs: Any) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name_or_path, **kwargs)


def load_processor(name_or_path: str, **kwargs: Any) -> Any:
    """Text-only models have no processor (slime returns ``None`` for them too)."""
    return None
