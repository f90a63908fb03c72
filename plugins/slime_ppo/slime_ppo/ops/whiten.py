"""Masked advantage whitening: the one implementation in ``slime_core.api.whiten``
(formula, epsilon and the data-parallel ``all_sum`` are documented there)."""

from slime_core.api import WHITEN_EPS, AllSum, whiten

__all__ = ["WHITEN_EPS", "AllSum", "whiten"]
