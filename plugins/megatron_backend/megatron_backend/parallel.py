"""Megatron's parallel state on top of the default ``torch.distributed`` process group.

Under ``--executor ray`` every trainer rank arrives with the default group initialised over
all ``train.num_ranks`` ranks (gloo on the CPU); a single local rank has none, and gets a
one-process group of its own (Megatron's ``parallel_state`` needs one). Rank order is
Megatron's (``tp-cp-ep-dp-pp``): consecutive ranks share a tensor-parallel group.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import torch.distributed as dist


def ensure_default_group(rank: int, world_size: int, backend: str) -> None:
    if dist.is_initialized():
        if dist.get_world_size() != world_size:
            raise RuntimeError(
                f"megatron backend: the default process group has {dist.get_world_size()} "
                f"ranks but train.num_ranks = {world_size}")
        return
    if world_size != 1:
        raise RuntimeError(
            f"megatron backend: train.num_ranks = {world_size} needs the executor to initialise "
            "the default torch.distributed group on every rank (use --executor ray)")
    fd, path = tempfile.mkstemp(prefix="slime-megatron-pg-")
    os.close(fd)
    os.unlink(path)  # the file store creates it; a stale one would hang the rendezvous
    dist.init_process_group(backend, init_method=f"file://{path}", rank=0, world_size=1)


def init_model_parallel(mg: Any) -> None:
    """(Re-)initialise tensor/pipeline/context/data-parallel groups for ``[megatron]``."""
    from megatron.core import parallel_state as ps

    if ps.model_parallel_is_initialized():
        ps.destroy_model_parallel()
    ps.initialize_model_parallel(
        tensor_model_parallel_size=mg.tensor_model_parallel_size,
        pipeline_model_parallel_size=mg.pipeline_model_parallel_size,
        context_parallel_size=mg.context_parallel_size,
        expert_model_parallel_size=int(getattr(mg, "expert_model_parallel_size", 1)),
    )


def tp_rank() -> int:
    from megatron.core import parallel_state as ps

    return int(ps.get_tensor_model_parallel_rank())


def tp_size() -> int:
    from megatron.core import parallel_state as ps

    return int(ps.get_tensor_model_parallel_world_size())


def tp_group() -> Any:
    from megatron.core import parallel_state as ps

    return ps.get_tensor_model_parallel_group()


def dp_rank() -> int:
    from megatron.core import parallel_state as ps

    return int(ps.get_data_parallel_rank())


def dp_size() -> int:
    from megatron.core import parallel_state as ps

    return int(ps.get_data_parallel_world_size())


def dp_group() -> Any:
    from megatron.core import parallel_state as ps

    return ps.get_data_parallel_group()


def ep_rank() -> int:
    """This rank's place in its expert-parallel group (which experts it holds)."""
    from megatron.core import parallel_state as ps

    return int(ps.get_expert_model_parallel_rank())


def ep_size() -> int:
    """The expert-parallel size (1 where Megatron's groups are not set up: no experts split)."""
    from megatron.core import parallel_state as ps

    if not ps.model_parallel_is_initialized():
        return 1
    return int(ps.get_expert_model_parallel_world_size())


def ep_group() -> Any:
    """The ranks that split the experts (tokens travel between them)."""
    from megatron.core import parallel_state as ps

    return ps.get_expert_model_parallel_group()


def expert_model_size() -> int:
    """Ranks over which one layer's experts are split: expert tensor x expert parallel (1
    where Megatron's groups are not set up)."""
    from megatron.core import parallel_state as ps

    if not ps.model_parallel_is_initialized():
        return 1
    return int(ps.get_expert_tensor_and_model_parallel_world_size())


def expert_model_group() -> Any:
    from megatron.core import parallel_state as ps

    return ps.get_expert_tensor_and_model_parallel_group()


def expert_dp_group() -> Any:
    """The ranks that hold the same experts: expert gradients are summed over these only."""
    from megatron.core import parallel_state as ps

    return ps.get_expert_data_parallel_group()
