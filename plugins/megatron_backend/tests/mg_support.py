"""Helpers of the megatron backend tests: configs, a fixed GRPO batch, two-process gloo runs.

``spawn(fn, world_size, *args)`` runs ``fn(rank, world_size, *args)`` in fresh processes with
the default gloo group initialised (tcp on 127.0.0.1), as the ray executor leaves a trainer
rank; what ``fn`` returns on each rank comes back as a list. Each process imports megatron-core
itself (about 10 s on two busy cores), so a test runs all its scenarios in one spawn.
"""

from __future__ import annotations

import copy
import os
import pickle
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[3]
TINY_LLAMA = REPO / "examples" / "tiny_arith" / "model"
PLUGINS = ["slime_grpo", "megatron_backend"]


def make_config(data: dict[str, Any], overrides: tuple[str, ...] = (),
                plugins: tuple[str, ...] = ()) -> Any:
    """A resolved config (slime_grpo + megatron_backend + ``plugins``); the manager becomes
    this process's."""
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection
    from slime_core.session import resolve

    manager, config = resolve(PluginSelection(plugins=[*PLUGINS, *plugins]), None, overrides,
                              data)
    set_manager(manager)
    return config


def base_data(model: dict[str, Any] | None = None, **sections: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, dict[str, Any]] = {
        "run": {"seed": 1, "num_rollouts": 4},
        "model": model or {"path": str(TINY_LLAMA)},
        "rollout": {"n_samples_per_prompt": 4, "temperature": 1.0},
        "train": {"lr": 1e-3, "grad_clip": 1.0, "adam_betas": [0.9, 0.99],
                  "micro_batch_tokens": 64},
        "algorithm": {"advantage_estimator": "grpo", "policy_loss": "ppo",
                      "loss_reducer": "seq_mean_token_mean", "entropy_coef": 0.01},
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return data


def grpo_batch(vocab: int, groups: int = 2, n: int = 4, seed: int = 0) -> Any:
    """Rewarded groups of random prompt + response ids of uneven lengths (several micro-batches
    under a 64-token budget), with rollout log-probs near the policy's."""
    from slime_hookspecs import TrainBatch

    g = torch.Generator().manual_seed(seed)
    b = TrainBatch()
    for gi in range(groups):
        prompt = torch.randint(3, vocab, (int(torch.randint(4, 9, (1,), generator=g)),), generator=g)
        for si in range(n):
            r = int(torch.randint(2, 7, (1,), generator=g))
            resp = torch.randint(3, vocab, (r,), generator=g)
            b.tokens.append(torch.cat([prompt, resp]))
            b.response_lengths.append(r)
            mask = torch.ones(r)
            if si == 1:
                mask[-1] = 0.0  # a masked token (tool output) must not count
            b.loss_masks.append(mask)
            reward = float(torch.rand((), generator=g) > 0.5)
            b.rewards.append(reward)
            b.raw_rewards.append(reward)
            b.group_indices.append(gi)
            b.sample_indices.append(gi * n + si)
            b.rollout_ids.append(0)
    return b


def copy_batch(batch: Any) -> Any:
    return copy.deepcopy(batch)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, world_size: int, port: int, out_dir: str, fn: Callable[..., Any],
            args: tuple[Any, ...]) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    try:
        result = fn(rank, world_size, *args)
        with open(os.path.join(out_dir, f"{rank}.pkl"), "wb") as f:
            pickle.dump(result, f)
    finally:
        dist.destroy_process_group()


def spawn(fn: Callable[..., Any], world_size: int, *args: Any) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` gloo processes; their results."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="mg-test-") as out:
        mp.spawn(_worker, args=(world_size, free_port(), out, fn, args), nprocs=world_size,
                 join=True)
        results = []
        for r in range(world_size):
            with open(os.path.join(out, f"{r}.pkl"), "rb") as f:
                results.append(pickle.load(f))
    return results
