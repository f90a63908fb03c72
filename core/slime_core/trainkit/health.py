"""Training health: a non-finite value never reaches the weights.

Every optimizer step is checked for non-finite values in four places, in this order:

* ``rewards``: the batch's shaped and raw rewards (a reward function's NaN fails its sample
  before this; a reward post-process hook or a custom conversion can still bring one in);
* ``advantages``: after the estimator (a finite reward of 1e308 overflows a group's mean and
  std and turns every advantage of the batch into NaN);
* ``loss``: each micro-batch's loss before its backward pass (kept on the device, read once
  with the gradient norm: no host sync per micro-batch);
* ``grad_norm``: the gradient norm after the data-parallel all-reduce, before clipping.

A step with any of them non-finite is **skipped**: no optimizer step and no scheduler step (as
Megatron's skipped iterations), so the weights stay those of the last good step. The ranks
that train one model must take the same decision, or the ones that step would wait forever in
collectives the others skip: the flags are all-reduced (MAX) over the group the backend names
(the data-parallel group for the torch backend, every rank for megatron, whose loss lives on
the last pipeline stage only) before anyone decides.

What a skip reports, in the step's metrics (the driver reads them): :data:`SKIPPED_STEPS`, the
number of optimizer steps of the rollout that were skipped (``0.0`` on a healthy rollout), and
``train/nonfinite_<what>`` = 1.0 for each quantity of :data:`QUANTITIES` that went non-finite.
:func:`check_finite_weights` is the last guard: a checkpoint writer calls it before writing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from slime_core.trainkit.flat import flat_cat

#: the checked quantities, in the order a step meets them
QUANTITIES = ("rewards", "advantages", "loss", "grad_norm")
#: optimizer steps of the rollout that were skipped (0.0 when none was)
SKIPPED_STEPS = "train/skipped_steps"


def nonfinite_key(what: str) -> str:
    """The metric that flags a non-finite ``what`` (one of :data:`QUANTITIES`)."""
    return f"train/nonfinite_{what}"


class NonFiniteWeightsError(RuntimeError):
    """A checkpoint (or an export) was about to write a weight holding NaN or inf."""


class TrainingHealth:
    """The non-finite checks of one trainer rank.

    ``device``: where the flags are reduced (an nccl group reduces device tensors only);
    ``group``: the ``torch.distributed`` group whose ranks must agree (``None``: the default
    group); ``distributed``: whether to reduce at all (one rank: no collective). With
    ``distributed``, :meth:`check_batch` and :meth:`check_step` are collectives every rank of
    ``group`` must call equally often, with or without samples.
    """

    def __init__(self, device: Any = "cpu", group: Any = None, distributed: bool = False) -> None:
        self.device = torch.device(device) if not isinstance(device, torch.device) else device
        self.group = group
        self.distributed = distributed
        self._bad_loss: torch.Tensor | None = None  # OR of the step's losses, on the device

    # -- the batch, once per rollout --------------------------------------------------------
    def check_batch(self, batch: Any) -> dict[str, float]:
        """Agreed skip metrics for a prepared batch whose rewards or advantages hold a
        non-finite value (``{}`` when every rank's batch is finite)."""
        rewards = [*(batch.rewards or []), *(batch.raw_rewards or [])]
        bad_rewards = any(not math.isfinite(float(r)) for r in rewards)
        bad_adv = False
        if batch.advantages:
            # a custom estimator may answer lists of floats; one host sync for the batch
            adv = [a if isinstance(a, torch.Tensor) else torch.as_tensor(a, dtype=torch.float64)
                   for a in batch.advantages]
            adv = [a for a in adv if a.numel()]
            if adv and len({a.device for a in adv}) == 1:  # one check over the packed batch
                bad_adv = not bool(torch.isfinite(flat_cat(adv)).all())
            elif adv:
                bad_adv = not bool(torch.stack([torch.isfinite(a).all().to(adv[0].device)
                                                for a in adv]).all())
        return self._verdict({"rewards": bad_rewards, "advantages": bad_adv})

    # -- one optimizer step ----------------------------------------------------------------
    def watch_loss(self, loss: torch.Tensor) -> None:
        """Note a micro-batch's loss (before its backward); read at :meth:`check_step`."""
        bad = ~torch.isfinite(loss.detach()).all()
        self._bad_loss = bad if self._bad_loss is None else (self._bad_loss | bad)

    def check_step(self, grad_norm: float | torch.Tensor) -> dict[str, float]:
        """Agreed skip metrics for the optimizer step whose losses :meth:`watch_loss` saw and
        whose gradient norm (all-reduced, before clipping) is ``grad_norm``; ``{}`` when the
        step may be taken. Resets the loss watch for the next step."""
        bad_loss = bool(self._bad_loss) if self._bad_loss is not None else False
        self._bad_loss = None
        norm = float(grad_norm)
        return self._verdict({"loss": bad_loss, "grad_norm": not math.isfinite(norm)})

    def _verdict(self, flags: dict[str, bool]) -> dict[str, float]:
        names = list(flags)
        if self.distributed:
            import torch.distributed as dist

            t = torch.tensor([float(flags[n]) for n in names], dtype=torch.float32,
                             device=self.device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
            flags = {n: bool(v) for n, v in zip(names, t.tolist(), strict=True)}
        bad = [n for n in names if flags[n]]
        if not bad:
            return {}
        return {SKIPPED_STEPS: 1.0, **{nonfinite_key(n): 1.0 for n in bad}}


def skip_reason(metrics: Mapping[str, float]) -> str:
    """``"non-finite advantages, loss"``: what a step's metrics flag (``""`` when nothing)."""
    bad = [w for w in QUANTITIES if metrics.get(nonfinite_key(w), 0.0)]
    return f"non-finite {', '.join(bad)}" if bad else ""


def finish_step_metrics(sums: Mapping[str, float], counts: Mapping[str, int]) -> dict[str, float]:
    """A rollout's metrics from the sums (and counts) of its optimizer steps' metrics: each
    averaged over
    the steps that reported it, except :data:`SKIPPED_STEPS` (summed: how many were skipped,
    present as 0.0 when none was) and the ``train/nonfinite_*`` flags (1.0 if any step set
    them)."""
    flags = {nonfinite_key(w) for w in QUANTITIES}
    out: dict[str, float] = {}
    for k, v in sums.items():
        if k == SKIPPED_STEPS:
            out[k] = v
        elif k in flags:
            out[k] = 1.0 if v else 0.0
        else:
            out[k] = v / counts[k]
    out.setdefault(SKIPPED_STEPS, 0.0)
    return out


def check_finite_weights(named: Iterable[tuple[str, torch.Tensor]], where: str) -> None:
    """Raise :class:`NonFiniteWeightsError` naming ``where`` (the file about to be written)
    and the first tensors that hold NaN or inf; the writer calls it before writing, so no
    checkpoint ever holds a non-finite weight (a skipped step keeps them finite; this is the
    guard for whatever else could write them: a hook, a plugin's optimizer)."""
    bad = [name for name, t in named
           if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all())]
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise NonFiniteWeightsError(
            f"{where}: not written, {len(bad)} weight tensor(s) hold NaN or inf ({shown}); "
            "the checkpoints already written are intact, resume from the newest one"
        )
