"""AdamW with fp32 master weights for a model held in bf16 / fp16 (``train.master_weights``).

AdamW stepping bf16 parameters rounds every update to the parameter's precision: at the
learning rates of RL fine-tuning (1e-6) an update is about 1% of a bf16 weight's spacing, so
most weights never move (measured on a bf16 ``Linear(896, 896)``: 1.4% of the weights changed
after ten steps at lr 1e-6). Megatron, DeepSpeed and verl keep fp32 copies for the optimizer;
so does :class:`MasterAdamW`: AdamW runs on fp32 copies of the parameters, whose gradients are
the model's cast up, and each step writes the copies back into the model in its own dtype. The
copies travel in ``state_dict`` so a checkpoint resumes exactly.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any, cast

import torch


@torch.no_grad()
def refresh_copy(copy: torch.Tensor, current: torch.Tensor) -> None:
    """Take ``current``'s values into ``copy`` (an optimizer's copy of a weight, fp32 for a
    bf16 model) where the two differ in ``current``'s dtype: a weight set from outside since
    the last step (a checkpoint load, a hook) is read again, one that is the copy rounded keeps
    the copy's precision.

    Elementwise on the device, without a host sync: with a check on the host (``.any()``) per
    weight, re-reading the 290 weights of a 0.5B model took 63 ms of host time a step on an
    H200 (2026-12-02 profile), when it ran at every step."""
    same = copy.to(current.dtype) == current
    copy.copy_(torch.where(same, copy, current.to(copy.dtype)))


class WeightVersions:
    """Which of some tensors were written in place since :meth:`mark`, from torch's version
    counter (bumped by every in-place write through the tensor or a view of it: ``copy_``,
    ``load_state_dict``, optimizer steps) and the storage address (``p.data = ...``).

    An optimizer that keeps copies of the weights re-reads only the weights this names, so a
    step costs no pass over every weight. Not seen: writes through ``p.data`` (a tensor with its
    own version counter); code that writes weights that way calls the optimizer's ``reread``."""

    def __init__(self, tensors: Iterable[torch.Tensor]) -> None:
        self.tensors = list(tensors)
        self._seen: list[tuple[int, int] | None] = [None] * len(self.tensors)

    @staticmethod
    def _key(t: torch.Tensor) -> tuple[int, int]:
        return t.data_ptr(), t._version

    def changed(self) -> list[int]:
        """Indices of the tensors written since the last :meth:`mark` (all before the first)."""
        return [i for i, t in enumerate(self.tensors) if self._seen[i] != self._key(t)]

    def mark(self) -> None:
        """Remember the tensors as they are now."""
        self._seen = [self._key(t) for t in self.tensors]


class MasterAdamW(torch.optim.AdamW):
    """torch's AdamW on fp32 master copies of ``params`` (see the module).

    ``zero_grad`` clears the model's gradients too; ``step`` casts the model's gradients up
    (after the trainer reduced and clipped them), steps the copies and writes them back. A
    parameter written from outside since the last step (a checkpoint load into the model, a
    hook that sets weights; :class:`WeightVersions` says which) is re-read: its copy is taken
    from the model again where the two differ in the model's dtype. :meth:`reread` re-reads
    every parameter (after writes the version counter does not see)."""

    def __init__(self, params: Iterable[torch.nn.Parameter], **adamw: Any) -> None:
        self.model_params = [p for p in params if p.requires_grad]
        self.masters = [p.detach().float().clone() for p in self.model_params]
        super().__init__(self.masters, **adamw)
        self._versions = WeightVersions(self.model_params)
        self._versions.mark()

    @torch.no_grad()
    def reread(self) -> None:
        """Take every weight written from outside into its copy (see :func:`refresh_copy`)."""
        for p, m in zip(self.model_params, self.masters, strict=True):
            refresh_copy(m, p)
        self._versions.mark()

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none)
        for p in self.model_params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # noqa: ANN401 - torch's signature
        # only the weights written since the last step: re-reading all of them was four small
        # kernels a weight, ~1,200 launches a step that the GPU waited for (the step spanned
        # 42 ms of the GPU timeline for a 0.5B model, 2026-12-02 eager profile)
        for i in self._versions.changed():
            refresh_copy(self.masters[i], self.model_params[i])
        # the gradients cast up in one multi-tensor copy (a cast kernel per weight was ~290
        # launches a step, which the GPU waits for)
        grads: list[torch.Tensor] = []
        copies: list[torch.Tensor] = []
        for p, m in zip(self.model_params, self.masters, strict=True):
            m.grad = None if p.grad is None else torch.empty_like(m)
            if p.grad is not None:
                grads.append(p.grad)
                copies.append(m.grad)  # type: ignore[arg-type]  # set just above (empty_like)
        if grads:
            torch._foreach_copy_(copies, grads)
        loss = super().step(closure)
        # one multi-tensor copy back (casting to the model's dtype), not a kernel per weight
        torch._foreach_copy_(cast(list[torch.Tensor], self.model_params), self.masters)
        self._versions.mark()
        return loss

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["master_weights"] = [m.detach().clone() for m in self.masters]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        masters = state.pop("master_weights", None)
        if masters is not None and len(masters) != len(self.masters):
            raise ValueError(f"optimizer state with {len(masters)} fp32 master weights for a "
                             f"model of {len(self.masters)} trainable tensors (another model)")
        super().load_state_dict(state)
        if masters is None:
            # a checkpoint of AdamW on the model's own weights (train.master_weights = false,
            # or written before the setting existed): the copies start from the loaded model,
            # re-read at the next step; only the precision below its dtype is new
            warnings.warn("optimizer state has no fp32 master weights: they start from the "
                          "model's loaded weights", stacklevel=2)
            return
        with torch.no_grad():
            for m, saved in zip(self.masters, masters, strict=True):
                m.copy_(saved)


def make_adamw(params: Iterable[torch.nn.Parameter], master_weights: bool,
               **adamw: Any) -> torch.optim.Optimizer:
    """AdamW over ``params``: :class:`MasterAdamW` when ``master_weights`` is set and some
    trainable parameter is not fp32 (bf16 / fp16 models), torch's AdamW otherwise (an fp32
    model needs no copies). Its state exists from the start (:func:`init_adamw_state`)."""
    params = list(params)
    low = any(p.requires_grad and p.dtype != torch.float32 for p in params)
    opt = (MasterAdamW(params, **adamw) if master_weights and low
           else torch.optim.AdamW(params, **adamw))
    init_adamw_state(opt)
    return opt


def init_adamw_state(optimizer: torch.optim.Optimizer) -> None:
    """Give every parameter of an Adam / AdamW ``optimizer`` that has no state yet the state
    its first step would create (frozen parameters get none): step 0 and zeroed moments (and
    ``max_exp_avg_sq`` with ``amsgrad``), in the parameter's dtype and layout, the step
    counter where torch keeps it (on the parameter's device for ``fused`` and ``capturable``
    groups). The updates are the lazy state's, bit for bit (``test_master_weights.py`` holds
    this against torch).

    Why before the first step: torch allocates the moments inside it, after that step's
    backward freed its activations, so on the CPU (glibc's heap) twice the trained parameters'
    bytes settle among the freed activations and the second step's activations no longer fit
    in what is left: the heap grows again and every new page is a page fault (SmolLM2 on 2
    cores: the second step's training 300,000 -> 49,000 faults, 7.5 -> 5.6 s; 270,000 fewer
    over the first three steps). Allocated before any activation, they sit below them."""
    if not isinstance(optimizer, torch.optim.Adam):  # AdamW is one
        raise TypeError(f"init_adamw_state: {type(optimizer).__name__} is not torch's Adam "
                        "or AdamW")
    # torch keeps a host step counter in float64 where that is the default dtype
    host_dtype = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
    # MasterAdamW's copies take gradients without requiring them; elsewhere a frozen
    # parameter never gets a gradient, so torch would never give it state either
    copies = isinstance(optimizer, MasterAdamW)
    for group in optimizer.param_groups:
        on_device = bool(group.get("fused") or group.get("capturable"))
        for p in group["params"]:
            if optimizer.state.get(p) or not (p.requires_grad or copies):
                continue
            state = optimizer.state[p]
            state["step"] = (torch.zeros((), dtype=torch.float32, device=p.device) if on_device
                             else torch.tensor(0.0, dtype=host_dtype))
            names = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"] else ())
            for name in names:
                state[name] = torch.zeros_like(p, memory_format=torch.preserve_format)


def step_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Device bytes an AdamW step of ``optimizer`` (:func:`make_adamw`'s) may allocate beyond
    what exists when it is asked: the two moment buffers of each parameter that has no state
    yet (allocated by its first step), the fp32 gradient copies :class:`MasterAdamW` makes every
    step, and one multi-tensor temporary the size of the parameters. An upper estimate, for a
    caller that must leave that much free (the training graphs' pool, which eager tensors cannot
    use)."""
    total = 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            size = int(p.numel()) * int(p.element_size())
            if not optimizer.state.get(p):
                total += 2 * size  # exp_avg, exp_avg_sq
            total += size  # the multi-tensor update's temporaries
    if isinstance(optimizer, MasterAdamW):
        total += sum(int(m.numel()) * int(m.element_size()) for m in optimizer.masters)
    return total
