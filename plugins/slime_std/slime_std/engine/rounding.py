"""Stochastic rounding of float32 weight updates to bfloat16 (``rollout.dtype_rounding``).

A bf16 engine beside an fp32 trainer (``rollout.dtype = "bfloat16"``) that rounds each update
to the nearest bf16 value keeps serving the weights it started with while the trainer's steps
stay below bf16's spacing (about 1/256 of a weight): the SmolLM2 example's updates at lr 5e-6
are ~1/50 of it, so the served policy barely moves while the trainer's does (CPU,
``grpo_cpu.toml``, 30 steps: held-out accuracy 0.31 -> 0.35, the train/rollout log-prob
mismatch 0.08 -> 0.43 at step 20). Rounding up with the probability of the dropped fraction
makes each served weight equal the trainer's in expectation, so the served policy follows the
trainer's at the cost of zero-mean noise of the size of the rounding itself (the same run:
0.31 -> 0.71, mismatch 0.02-0.03; fp32 throughout: 0.29 -> 0.68).
"""

from __future__ import annotations

import torch

_LOW = 1 << 16  # the float32 bits bf16 drops
_KEEP = -_LOW  # 0xFFFF0000 as an int32 mask


class NoisePool:
    """Uniform noise in [0, 2**16), drawn once and read in windows at random offsets.

    A CPU draws random numbers one at a time (``torch.randint`` on a CPU generator is one
    Mersenne Twister stream): for SmolLM2's 135M weights on 2 cores that was 0.55-0.6 s of a
    0.7-0.9 s sync. Here each ``window`` of a tensor adds the pool's values from an offset
    drawn from the sync's generator: every weight's noise is still uniform (an entry of an
    i.i.d. uniform pool at an independent offset), so the rounding stays unbiased; weights
    of one sync share values only across windows, and a weight's noise changes from one
    sync to the next with the offsets."""

    def __init__(self, generator: torch.Generator, device: torch.device | str = "cpu",
                 window: int = 1 << 22) -> None:
        self.window = int(window)
        self.values = torch.randint(0, _LOW, (2 * self.window,), dtype=torch.int32,
                                    device=device, generator=generator)

    def added(self, bits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """``bits`` (int32, flat) plus noise, in a new tensor."""
        out = torch.empty_like(bits)
        n, w = int(bits.numel()), self.window
        offsets = torch.randint(0, w + 1, (-(-n // w),), generator=generator,
                                device=generator.device).tolist()
        for i, off in enumerate(offsets):
            lo, hi = i * w, min(n, (i + 1) * w)
            torch.add(bits[lo:hi], self.values[off:off + hi - lo], out=out[lo:hi])
        return out


def stochastic_bf16(x: torch.Tensor, generator: torch.Generator,
                    pool: NoisePool | None = None) -> torch.Tensor:
    """``x`` (float32) rounded to bfloat16, up (in magnitude) with the probability of the
    dropped low 16 bits' share: adding uniform noise below the kept bits and truncating.
    Infinities stay infinite; the largest finite values may round up to infinity, as
    round-to-nearest may. ``pool``: the noise read from it (a CPU's choice, see
    :class:`NoisePool`) instead of drawn for every weight."""
    bits = x.contiguous().view(torch.int32)
    if pool is not None:
        noise = pool.added(bits.reshape(-1), generator).view(bits.shape)
    else:
        noise = torch.randint(0, _LOW, bits.shape, dtype=torch.int32, device=x.device,
                              generator=generator)
        # in place on the noise: two passes fewer over the tensor
        noise.add_(bits)
    noise.bitwise_and_(_KEEP)
    return noise.view(torch.float32).to(torch.bfloat16)
