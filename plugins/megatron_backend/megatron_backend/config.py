"""The ``[megatron]`` config section and the checks of a run on the megatron backend (torch-free).

``train.num_ranks`` is the world size; data parallelism is what is left over once tensor,
pipeline and context parallelism are taken: ``dp = num_ranks / (tp * pp * cp)``. Expert
parallelism splits a mixture-of-experts model's experts over ``ep`` of those data-parallel
ranks (Megatron's layout: the dense layers stay data-parallel, each expert lives on one rank of
its expert group and is data-parallel over ``dp / ep`` ranks).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields
from typing import Any

BACKEND = "megatron"
RECOMPUTE = ("none", "selective", "full")


def _need(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{key}: {msg}")


@dataclass
class MegatronSection:
    tensor_model_parallel_size: int = 1  # TP: ranks that split every linear layer and the vocabulary
    pipeline_model_parallel_size: int = 1  # PP: stages of equal numbers of layers (one micro-batch in flight at a time)
    context_parallel_size: int = 1  # CP: ranks that split the sequence (only 1 is implemented yet)
    expert_model_parallel_size: int = 1  # EP: data-parallel ranks that split a mixture-of-experts model's experts (each holds experts / ep of every layer; tokens travel to their experts through the token dispatcher)
    sequence_parallel: bool = False  # split norms/dropout activations over TP ranks (needs TransformerEngine: refused on the CPU)
    use_distributed_optimizer: bool = False  # ZeRO-1: each data-parallel rank keeps the AdamW state of 1/dp of the parameters (gradients reduce-scattered, parameters all-gathered; same step as unsharded); a checkpoint then resumes at the same data-parallel size only
    recompute: str = "none"  # activation recomputation: none | selective (core attention) | full (whole layers)
    recompute_num_layers: int = 1  # recompute = full: layers per recomputed chunk (uniform method)
    make_vocab_size_divisible_by: int = 128  # the embedding is padded to a multiple of this x TP (padded rows never reach the log-probs)
    vocab_parallel_logprobs: bool = True  # each TP rank keeps its vocabulary slice of the logits (parallel_output) and log-probs/entropy reduce over the TP group; false: gather the full logits on every rank
    export_bucket_mb: float = 512.0  # weight export gathers TP shards in buckets of this many MiB (one all-gather each, per dtype); 0: one all-gather per tensor
    save_hf: bool = True  # checkpoints also hold hf/ (config.json + model.safetensors + tokenizer) that transformers loads

    def __post_init__(self) -> None:
        for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                    "context_parallel_size", "expert_model_parallel_size", "recompute_num_layers",
                    "make_vocab_size_divisible_by"):
            _need(getattr(self, key) >= 1, f"megatron.{key}", "must be >= 1")
        _need(self.recompute in RECOMPUTE, "megatron.recompute",
              f"{self.recompute!r} is not one of {', '.join(RECOMPUTE)}")

    def model_parallel_size(self) -> int:
        return (self.tensor_model_parallel_size * self.pipeline_model_parallel_size
                * self.context_parallel_size)


def check_config(config: Any) -> None:
    """Reject what this backend cannot run, naming the keys (``slime_configure``)."""
    mg: MegatronSection = config.megatron
    if config.train.backend != BACKEND:
        # kept (one config may serve both backends, as -o train.backend=torch comparisons do),
        # but said: a TP size that silently does nothing is a surprise
        changed = [f"megatron.{f.name}" for f in fields(MegatronSection)
                   if getattr(mg, f.name) != f.default]
        if changed:
            warnings.warn(f"{', '.join(changed)} set, but train.backend = "
                          f"{config.train.backend!r}: [megatron] applies only to train.backend "
                          f"= {BACKEND!r}", stacklevel=2)
        return
    _need(config.train.ref_update_interval == 0, "train.ref_update_interval",
          f"{config.train.ref_update_interval}: a moving reference model is not implemented in "
          "slime-megatron-backend (train.backend = \"torch\" has it)")
    _need(not config.train.keep_old_actor, "train.keep_old_actor",
          "the old actor is not implemented in slime-megatron-backend (train.backend = "
          "\"torch\" has it)")
    _need(mg.context_parallel_size == 1, "megatron.context_parallel_size",
          f"{mg.context_parallel_size}: context parallelism is not implemented in this version "
          "of slime-megatron-backend")
    n = config.train.num_ranks
    _need(n % mg.model_parallel_size() == 0, "train.num_ranks",
          f"{n} is not a multiple of tensor x pipeline x context parallel size "
          f"({mg.model_parallel_size()}); data parallelism takes the rest")
    ep = mg.expert_model_parallel_size
    if ep > 1:
        dp = n // mg.model_parallel_size()
        _need(dp % ep == 0, "megatron.expert_model_parallel_size",
              f"{ep} must divide the data-parallel size {dp} (train.num_ranks / (tensor x "
              "pipeline x context parallel size)): experts are split over data-parallel ranks")
        _need(mg.pipeline_model_parallel_size == 1, "megatron.expert_model_parallel_size",
              f"{ep} with megatron.pipeline_model_parallel_size = "
              f"{mg.pipeline_model_parallel_size}: expert parallelism is implemented for one "
              "pipeline stage only")
        _need(not mg.use_distributed_optimizer, "megatron.expert_model_parallel_size",
              f"{ep} with megatron.use_distributed_optimizer = true: the sharded optimizer "
              "does not keep expert gradients out of the data-parallel reduction yet")

