"""Pipeline parallelism: one micro-batch at a time through the stages, then back.

The schedule is the simplest correct one (no overlap between micro-batches): stage k receives
the hidden states ``[s, b, h]`` from stage k - 1, runs its layers and sends them on; the last
stage computes the logits and the loss; gradients with respect to each stage's input travel
back the same way. Every micro-batch's gradients are accumulated before the optimizer step,
so the update equals the one-stage update. Point-to-point transfers use the default process
group's ``send``/``recv`` (gloo on the CPU).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


class Stages:
    """This rank's place in its pipeline (one stage when PP = 1)."""

    def __init__(self) -> None:
        from megatron.core import parallel_state as ps

        self.size = int(ps.get_pipeline_model_parallel_world_size())
        self.rank = int(ps.get_pipeline_model_parallel_rank())
        self.first = self.rank == 0
        self.last = self.rank == self.size - 1
        self.group = ps.get_pipeline_model_parallel_group()
        ranks = dist.get_process_group_ranks(self.group)
        self.ranks = ranks
        self.prev = ranks[self.rank - 1] if not self.first else None
        self.next = ranks[self.rank + 1] if not self.last else None

    def broadcast_from_last(self, obj: Any) -> Any:
        """The last stage's ``obj`` on every stage (identity with one stage)."""
        if self.size == 1:
            return obj
        box = [obj if self.last else None]
        dist.broadcast_object_list(box, src=self.ranks[-1], group=self.group)
        return box[0]


class StagePass:
    """The forward (and, with gradients, the backward) of one micro-batch on this stage."""

    def __init__(self, stages: Stages, model: Any, hidden: int, dtype: torch.dtype) -> None:
        self.stages, self.model, self.hidden, self.dtype = stages, model, hidden, dtype
        self.received: torch.Tensor | None = None
        self.output: torch.Tensor | None = None

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                **kwargs: Any) -> torch.Tensor | None:
        """The logits on the last stage, ``None`` elsewhere (hidden states sent on);
        ``kwargs`` go to the model (``padding_mask``)."""
        st = self.stages
        if st.size == 1:
            return self.model(ids, positions, attention_mask=mask, **kwargs)
        if not st.first:
            b, s = ids.shape
            buf = torch.empty((s, b, self.hidden), dtype=self.dtype, device=ids.device)
            dist.recv(buf, src=st.prev)
            self.received = buf.requires_grad_(torch.is_grad_enabled())
            self.model.set_input_tensor(self.received)
        out = self.model(ids, positions, attention_mask=mask, **kwargs)
        if st.last:
            return out
        self.output = out
        dist.send(out.detach().contiguous(), dst=st.next)
        return None

    def backward(self) -> None:
        """After the last stage's ``loss.backward()`` (or on other stages, instead of it): take
        the gradient of this stage's output from the next stage, back-propagate, pass the
        gradient of its input on to the previous stage."""
        st = self.stages
        if st.size == 1:
            return
        if not st.last:
            assert self.output is not None
            grad = torch.empty_like(self.output)
            dist.recv(grad, src=st.next)
            torch.autograd.backward(self.output, grad)
        if not st.first:
            assert self.received is not None
            g = self.received.grad
            dist.send((g if g is not None else torch.zeros_like(self.received)).contiguous(),
                      dst=st.prev)
