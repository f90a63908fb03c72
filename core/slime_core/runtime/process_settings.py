"""Process-wide torch settings of a run, applied in every process that runs its components.

The driver applies them to itself, each Ray worker and each spawned local rank in
:func:`slime_core.executors.ray_workers.bootstrap`, before any model is built, so that a
component behaves the same whichever process the executor put it in.
"""

from __future__ import annotations

from typing import Any


def apply(config: Any) -> None:
    """``run.num_threads`` (torch intra-op threads) and ``run.cudnn_attention``.

    ``run.cudnn_attention = false`` takes cuDNN out of the backends torch's
    ``scaled_dot_product_attention`` may pick (flash, memory-efficient and math remain). cuDNN
    builds an execution graph for every new attention shape, which costs hundreds of
    milliseconds on Hopper GPUs, and an RL run's shapes change every step (prompt widths in
    prefill, micro-batch lengths in training). The setting is process-wide in torch, so it
    is one key for the rollout and the trainer alike (they may share a process and threads).
    """
    import torch

    if config.run.num_threads:
        torch.set_num_threads(config.run.num_threads)
    # set both ways: a process that ran an earlier configuration in-process (tests, notebooks)
    # must not keep its value
    torch.backends.cuda.enable_cudnn_sdp(bool(config.run.cudnn_attention))
