"""Checkpoints of the megatron backend: Megatron's own state per rank, plus an HF export.

Layout under the trainer's checkpoint ``path``::

    megatron/mp_rank_{tp:02d}_{pp:03d}/model_optim.pt   TP shard + its AdamW state + scheduler
    megatron/rng/rank_{rank:05d}.pt                      RNG of every rank (torch, python,
                                                         Megatron tracker, device)
    hf/config.json, hf/model.safetensors (+ tokenizer)   what transformers and engines load

The shard files are written by data-parallel rank 0 of each TP index (DP replicas are equal);
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

from megatron_backend import parallel
from megatron_backend.gather import load_local_state, local_state

MEGATRON_DIR = "megatron"
HF_DIR = "hf"


def shard_file(path: str) -> str:
    from megatron.core import parallel_state as ps

    pp = int(ps.get_pipeline_model_parallel_rank())
    return os.path.join(path, MEGATRON_DIR, f"mp_rank_{parallel.tp_rank():02d}_{pp:03d}",
                        "model_optim.pt")


def rng_file(path: str, rank: int) -> str:
    return os.path.join(path, MEGATRON_DIR, "rng", f"rank_{rank:05d}.pt")


def _tracker() -> Any:
    from megatron.core import tensor_parallel

    return tensor_parallel.get_cuda_rng_tracker()


def save(trainer: Any, path: str) -> None:
    """Every rank calls it (the HF export is a TP collective)."""
    if trainer.data_parallel_rank == 0:
        f = shard_file(path)
        os.makedirs(os.path.dirname(f), exist_ok=True)
        torch.save({
            "model": {k: v.cpu() for k, v in local_state(trainer.model).items()},
            "optimizer": trainer.optimizer.state_dict(),
            "scheduler": trainer.scheduler.state_dict(),
            "layout": dataclasses.asdict(trainer.layout),
            "megatron": dataclasses.asdict(trainer.mg),
        }, f)
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
    trainer.optimizer.load_state_dict(state["optimizer"])
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
