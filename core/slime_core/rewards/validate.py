"""Reward values are checked where they enter the rollout, naming who produced them.

A reward is a finite real number (``int``, ``float``, ``bool`` as 0/1, numpy scalars, a
one-element tensor) or a non-empty dict of them (``rollout.reward_key`` picks the scalar).
Anything else -- ``NaN``, ``inf``, a string such as ``"1.0"`` or ``"correct"``, ``None`` from a
reward function -- raises :class:`RewardValueError` whose message names the source (plugin and
hook, or reward function and its plugin), the sample (group and index) and the value. Strings
are refused even when they parse as numbers: a verifier returning text is a bug, and silently
reading ``"0"`` as 0.0 would train on it.

The rollout catches the error like any reward exception: the sample is FAILED with the message
as its reason, the step goes on unless every sample failed (see
:func:`summarise_failures` for the log line that reports them).
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from collections.abc import Iterable
from typing import Any

from slime_hookspecs import Sample, Status

_EXPECTED = "a reward must be a finite number or a non-empty dict of finite numbers"


class RewardValueError(ValueError):
    """A reward function or hook returned something that is not a usable reward."""


def sample_label(sample: Sample) -> str:
    """``"sample group=3 index=17"``: how messages name a sample."""
    return f"sample group={sample.group_index} index={sample.index}"


def _scalar(value: Any) -> float | None:
    """The float of a finite real scalar, else ``None``."""
    if isinstance(value, str):
        return None
    if not isinstance(value, numbers.Real):
        item = getattr(value, "item", None)  # numpy / torch scalars and one-element tensors
        if item is None or getattr(value, "ndim", 0) not in (0, 1):
            return None
        try:
            value = item()
        except (TypeError, ValueError, RuntimeError):
            return None
        if not isinstance(value, numbers.Real):
            return None
    out = float(value)
    return out if math.isfinite(out) else None


def reward_bound_error(value: float, bound: float) -> str | None:
    """Why ``value`` is refused under ``rollout.max_abs_reward = bound``, or ``None``.

    A finite reward such as ``1e308`` passes a finiteness check yet overflows the group's
    standard deviation to ``inf`` and every advantage to NaN; rewards beyond ``+-bound`` are
    refused where they enter (reward functions, the rollout buffer, the agent API) and take the
    same per-sample error path as NaN. ``bound == 0`` disables the check; non-finite values are
    always refused.
    """
    if not math.isfinite(value):
        return f"{value!r} is not finite"
    if bound and abs(value) > bound:
        return f"{value!r} is beyond rollout.max_abs_reward = {bound:g}"
    return None


def check_reward(value: Any, source: str, sample: Sample,
                 bound: float = 0.0) -> float | dict[str, float]:
    """``value`` as a float or a dict of floats; :class:`RewardValueError` otherwise.

    ``source`` names who returned it (``"plugin 'judge' hook slime_reward"``); ``bound`` is
    ``rollout.max_abs_reward`` (0: no bound; see :func:`reward_bound_error`).
    """
    def bounded(scalar: float, where: str) -> float:
        why = reward_bound_error(scalar, bound)
        if why is not None:
            raise RewardValueError(f"{source} returned {why}{where} for {sample_label(sample)}")
        return scalar

    if isinstance(value, dict):
        if not value:
            raise RewardValueError(
                f"{source} returned an empty dict for {sample_label(sample)}; {_EXPECTED}"
            )
        out: dict[str, float] = {}
        for key, item in value.items():
            scalar = _scalar(item)
            if scalar is None:
                raise RewardValueError(
                    f"{source} returned {_show(item)} under key {key!r} for "
                    f"{sample_label(sample)}; {_EXPECTED}"
                )
            out[str(key)] = bounded(scalar, f" under key {key!r}")
        return out
    scalar = _scalar(value)
    if scalar is None:
        raise RewardValueError(f"{source} returned {_show(value)} for {sample_label(sample)}; {_EXPECTED}")
    return bounded(scalar, "")


def _show(value: Any) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


def summarise_failures(samples: Iterable[Sample], what: str, first: int = 3) -> str | None:
    """One line for the log: how many samples FAILED, by phase, and the first reasons.

    ``None`` when none failed. ``what`` names the rollout (``"rollout 3"``, ``"eval at step 5"``).
    """
    every = list(samples)
    failed = [s for s in every if s.status == Status.FAILED]
    if not failed:
        return None
    by_phase = Counter((s.error or "unknown").split(":")[0] for s in failed)
    phases = ", ".join(f"{k}: {v}" for k, v in sorted(by_phase.items()))
    reasons: list[str] = []
    for s in failed:
        label = sample_label(s)
        error = s.error or "no reason recorded"
        reason = error if label in error else f"{error} [{label}]"
        if len(reason) > 300:
            reason = reason[:297] + "..."
        if reason not in reasons:
            reasons.append(reason)
        if len(reasons) == first:
            break
    return (f"{what}: {len(failed)} of {len(every)} samples failed ({phases}); first: "
            + "; ".join(reasons))
