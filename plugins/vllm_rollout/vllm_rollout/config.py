"""The ``[vllm]`` config section of the ``vllm`` rollout engine (torch- and vllm-free).

Sampling settings are not here: they come per request from ``rollout.*`` / ``eval.*`` as for
every engine. This section only says how the vLLM engine is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: the log-prob mode the engine always runs with; see ``vllm_rollout.engine`` for why
LOGPROBS_MODE = "processed_logprobs"


def _need(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{key}: {msg}")


@dataclass
class VllmSection:
    # vLLM's dtype; "" follows rollout.dtype, then model.dtype (auto: float32 on CPU, bfloat16
    # on GPU)
    dtype: str = ""
    # no torch.compile / CUDA graphs: fast start (compiling on a CPU host takes minutes);
    # set false on GPU hosts for throughput
    enforce_eager: bool = True
    max_model_len: int = 0  # longest prompt + response (0: the model's max_position_embeddings)
    max_num_seqs: int = 0  # concurrent sequences per engine step (0: vLLM's default)
    # KV cache size; 0: 512 MiB on CPU hosts, gpu_memory_utilization on GPU hosts
    kv_cache_memory_mb: int = 0
    gpu_memory_utilization: float = 0.5  # GPU hosts: share of device memory for weights + KV
    enable_prefix_caching: bool = True  # the cache is reset after every weight update
    tensor_parallel_size: int = 1  # vLLM's tensor parallelism per engine
    # false: vLLM's engine core runs in this process (weights are copied in memory, nothing
    # is serialized); true: in a child process (vLLM's default for servers)
    multiprocessing: bool = False
    # GPU hosts: allocate through vLLM's sleep-mode allocator so sleep()/wake_up() free and
    # re-take device memory (colocated runs); sleep() is a no-op without it and on CPU
    enable_sleep_mode: bool = False
    sleep_level: int = 1  # 1: weights to host memory, KV discarded; 2: both discarded
    # any other keyword of vllm.LLM(...), passed through unchanged
    engine_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _need(self.dtype in ("", "auto", "float32", "bfloat16", "float16"), "vllm.dtype",
              f"{self.dtype!r} is not one of '', auto, float32, bfloat16, float16")
        _need(self.max_model_len >= 0, "vllm.max_model_len", "must be >= 0 (0: the model's)")
        _need(self.max_num_seqs >= 0, "vllm.max_num_seqs", "must be >= 0 (0: vLLM's default)")
        _need(self.kv_cache_memory_mb >= 0, "vllm.kv_cache_memory_mb", "must be >= 0")
        _need(0 < self.gpu_memory_utilization <= 1, "vllm.gpu_memory_utilization",
              "must be in (0, 1]")
        _need(self.tensor_parallel_size >= 1, "vllm.tensor_parallel_size", "must be >= 1")
        _need(self.sleep_level in (1, 2), "vllm.sleep_level", "must be 1 or 2")
        owned = {"model", "tokenizer", "seed", "logprobs_mode", "worker_extension_cls",
                 "skip_tokenizer_init"}
        clash = sorted(owned & set(self.engine_kwargs))
        _need(not clash, "vllm.engine_kwargs",
              f"{', '.join(clash)} are set by the engine itself (model.*, run.seed); remove them")
