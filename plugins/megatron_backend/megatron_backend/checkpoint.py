"""Checkpoints of the megatron backend: Megatron's own state per rank, plus an HF export.

Layout under the trainer's checkpoint ``path``::

    megatron/mp_rank_{tp:02d}_{pp:03d}/model_optim.pt   TP shard + its AdamW state + scheduler
                                                         (mp_rank_{tp:02d}_{pp:03d}_{ep:03d} with
                                                         expert parallelism: its experts too)
    megatron/mp_rank_{tp:02d}_{pp:03d}/model_optim.dp{dp:03d}.pt
                                                         with use_distributed_optimizer: the
                                                         AdamW state of data-parallel rank dp
    megatron/rng/rank_{rank:05d}.pt                      RNG of every rank (torch, python,
                                                         Megatron tracker, device)
    hf/config.json, hf/model.safetensors (+ tokenizer)   what transformers and engines load

The shard files are written by data-parallel rank 0 of each TP index (DP replicas are equal;
with expert parallelism by expert-data-parallel rank 0 of each expert-parallel index, which
holds that index's experts and the replicated rest);
every rank writes its RNG file. Loading restores exactly what was saved, so a resumed run
continues with the same numbers as an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import os
import random
import warnings
from typing import Any

import torch
from slime_core.api import check_finite_weights

from megatron_backend import parallel
from megatron_backend.gather import load_local_state, local_state
from megatron_backend.zero import DistributedAdamW

MEGATRON_DIR = "megatron"
HF_DIR = "hf"


def shard_file(path: str) -> str:
    from megatron.core import parallel_state as ps

    pp = int(ps.get_pipeline_model_parallel_rank())
    ep = f"_{parallel.ep_rank():03d}" if parallel.ep_size() > 1 else ""
    return os.path.join(path, MEGATRON_DIR, f"mp_rank_{parallel.tp_rank():02d}_{pp:03d}{ep}",
                        "model_optim.pt")


def writes_shard() -> bool:
    """Whether this rank writes its shard file: one rank per (TP, PP[, EP]) index."""
    from megatron.core import parallel_state as ps

    if parallel.ep_size() > 1:
        return int(ps.get_expert_data_parallel_rank()) == 0
    return parallel.dp_rank() == 0


def rng_file(path: str, rank: int) -> str:
    return os.path.join(path, MEGATRON_DIR, "rng", f"rank_{rank:05d}.pt")


def _tracker() -> Any:
    from megatron.core import tensor_parallel

    return tensor_parallel.get_cuda_rng_tracker()


def save(trainer: Any, path: str) -> None:
    """Every rank calls it (the HF export is a TP collective)."""
    # every rank checks its shard before writing it: a NaN weight fails the save on the rank
    # that holds it (its error names the tensor), so the checkpoint is never marked complete
    model = {k: v.cpu() for k, v in local_state(trainer.model).items()}
    check_finite_weights(model.items(), shard_file(path))
    if writes_shard():
        f = shard_file(path)
        os.makedirs(os.path.dirname(f), exist_ok=True)
        torch.save({
            "model": model,
            "optimizer": unsharded_state(trainer.optimizer),
            "scheduler": trainer.scheduler.state_dict(),
            "layout": dataclasses.asdict(trainer.layout),
            "megatron": dataclasses.asdict(trainer.mg),
        }, f)
    save_optimizer_shard(trainer.optimizer, shard_file(path))
    f = rng_file(path, trainer.rank)
    os.makedirs(os.path.dirname(f), exist_ok=True)
    acc = trainer.accelerator
    torch.save({
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
        "tracker": _tracker().get_states(),
        "device_rng": (acc.get_rng_state() if acc is not None
                       and trainer.device.type != "cpu" else None),
    }, f)
    if trainer.mg.save_hf:
        weights = trainer.export_weights()
        if trainer.rank == 0:
            save_hf(trainer, weights, os.path.join(path, HF_DIR))


def optimizer_shard_file(model_file: str, dp_rank: int) -> str:
    """Where data-parallel rank ``dp_rank`` keeps its part of a sharded optimizer's state."""
    return model_file[:-len(".pt")] + f".dp{dp_rank:03d}.pt"


def unsharded_state(optimizer: Any) -> dict[str, Any] | None:
    """What the shard file holds of the optimizer: its state, or ``None`` when the state is
    sharded over data-parallel ranks (each rank then writes its own file)."""
    return None if isinstance(optimizer, DistributedAdamW) else optimizer.state_dict()


def save_optimizer_shard(optimizer: Any, model_file: str) -> None:
    """Every data-parallel rank writes its part of a sharded optimizer (nothing otherwise)."""
    if not isinstance(optimizer, DistributedAdamW):
        return
    f = optimizer_shard_file(model_file, optimizer.dp_rank)
    os.makedirs(os.path.dirname(f), exist_ok=True)
    torch.save({"optimizer": optimizer.state_dict(), "dp_size": optimizer.dp_size}, f)


def load_optimizer(optimizer: Any, saved: dict[str, Any] | None, model_file: str) -> None:
    """Restore the optimizer from the shard file's state, or from this data-parallel rank's own
    file when the checkpoint's state is sharded; a checkpoint written with the other
    ``megatron.use_distributed_optimizer`` or another data-parallel size is refused, naming it."""
    sharded = isinstance(optimizer, DistributedAdamW)
    if not sharded:
        if saved is None:
            raise ValueError(f"megatron backend: {model_file} holds no optimizer state: it was "
                             "written with megatron.use_distributed_optimizer = true (its state "
                             "is one file per data-parallel rank); resume with the same setting")
        optimizer.load_state_dict(saved)
        return
    f = optimizer_shard_file(model_file, optimizer.dp_rank)
    if saved is not None or not os.path.isfile(f):
        raise FileNotFoundError(
            f"megatron backend: no sharded optimizer state {f} (the checkpoint was written with "
            "megatron.use_distributed_optimizer = false or with fewer data-parallel ranks)")
    state = torch.load(f, weights_only=False, map_location="cpu")
    if state["dp_size"] != optimizer.dp_size:
        raise ValueError(f"megatron backend: {f} is one of {state['dp_size']} optimizer shards; "
                         f"this run has {optimizer.dp_size} data-parallel ranks (resume with the "
                         "same train.num_ranks and parallel sizes)")
    optimizer.load_state_dict(state["optimizer"])


def save_hf(trainer: Any, weights: dict[str, torch.Tensor], out: str) -> None:
    """An HF checkpoint of ``weights``: config, safetensors, and the tokenizer when known."""
    from safetensors.torch import save_file

    os.makedirs(out, exist_ok=True)
    trainer.hf_config.save_pretrained(out)
    state = {k: v.detach().contiguous().cpu() for k, v in weights.items()}
    if trainer.layout.tied:  # transformers re-ties lm_head to the embedding on load
        state.pop("lm_head.weight", None)
    save_file(state, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    if trainer.tokenizer is not None:
        trainer.tokenizer.save_pretrained(out)


def load(trainer: Any, path: str) -> None:
    f = shard_file(path)
    if not os.path.isfile(f):
        raise FileNotFoundError(f"megatron backend: checkpoint {path} has no shard {f} (was it "
                                "written with another tensor_model_parallel_size or backend?)")
    state = torch.load(f, weights_only=False, map_location="cpu")
    if state["layout"] != dataclasses.asdict(trainer.layout):
        raise ValueError(f"megatron backend: checkpoint {path} was written for another model "
                         f"layout ({state['layout']})")
    load_local_state(trainer.model, state["model"])
    load_optimizer(trainer.optimizer, state["optimizer"], f)
    trainer.scheduler.load_state_dict(state["scheduler"])
    f = rng_file(path, trainer.rank)
    if not os.path.isfile(f):
        warnings.warn(f"checkpoint {path}: no RNG state for rank {trainer.rank}; the run "
                      "continues with this process's generators", stacklevel=2)
        return
    rng = torch.load(f, weights_only=False)
    torch.set_rng_state(rng["torch_rng"])
    random.setstate(rng["python_rng"])
    _tracker().set_states(rng["tracker"])
    if rng.get("device_rng") is not None and trainer.accelerator is not None:
        trainer.accelerator.set_rng_state(rng["device_rng"])
