"""Masked advantage whitening: the one implementation in :mod:`slime_core.algo.whiten`
(formula, epsilon and the data-parallel ``all_sum`` are documented there)."""

from slime_core.algo.whiten import WHITEN_EPS, AllSum, whiten

__all__ = ["WHITEN_EPS", "AllSum", "whiten"]
