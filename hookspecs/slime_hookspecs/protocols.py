"""Protocols of the components that plugins provide.

They are structural (``typing.Protocol``): a plugin implements the methods, it does not
inherit. Every argument and return value crosses process boundaries under the ``ray``
executor, so they are picklable: dataclasses, lists, dicts, tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, runtime_checkable

from slime_hookspecs.batch import TrainBatch
from slime_hookspecs.sample import Sample
from slime_hookspecs.sampling import SamplingParams


@dataclass
class GenerateOutput:
    """What an engine returns for one request."""

    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str  # "stop" | "length" | "abort"
    weight_version: int
    text: str = ""


@runtime_checkable
class RolloutEngine(Protocol):
    """Generates from token ids; never re-tokenizes text the model produced."""

    def generate(
        self, prompts: list[list[int]], params: list[SamplingParams]
    ) -> list[GenerateOutput]:
        """One output per prompt, with per-token log-probs of the distribution sampled from."""
        ...

    def update_weights(self, weights: Any, version: int) -> None:
        """Load new weights (transport-specific payload) and report ``version`` afterwards."""
        ...

    def weight_version(self) -> int:
        """The version of the weights the next generation uses."""
        ...

    def health(self) -> bool:
        """True while the engine can serve requests."""
        ...

    def abort(self) -> None:
        """Cancel in-flight requests; they finish with ``finish_reason == "abort"``."""
        ...

    def sleep(self) -> None:
        """Free device memory (colocated runs); a no-op where unsupported."""
        ...

    def wake_up(self) -> None:
        """Re-take memory freed by :meth:`sleep`."""
        ...

    def shutdown(self) -> None: ...


@runtime_checkable
class Trainer(Protocol):
    """One trainer rank."""

    def compute_log_probs(self, batch: TrainBatch, role: str) -> list[Any]:
        """Per-sample response log-probs under ``role`` (``actor``, ``ref``)."""
        ...

    def train_step(self, batch: TrainBatch, rollout_id: int) -> dict[str, float]:
        """Optimise on ``batch`` (one or more optimizer steps); return metrics."""
        ...

    def export_weights(self) -> dict[str, Any]:
        """Name -> tensor of the policy, as the engine expects them."""
        ...

    def save(self, path: str) -> None:
        """Write model, optimizer, scheduler and RNG state under ``path``."""
        ...

    def load(self, path: str) -> None: ...


@runtime_checkable
class WeightTransport(Protocol):
    """Moves trainer weights to engines; reports bytes and seconds."""

    def send(self, weights: dict[str, Any], version: int, engines: list[Any]) -> dict[str, float]:
        """Deliver ``weights`` as ``version`` to every engine; return ``{"bytes", "seconds"}``."""
        ...


@runtime_checkable
class Accelerator(Protocol):
    """Device-specific calls; everything else asks the record's static fields.

    Optional attribute ``fused_optimizer: bool`` (read with ``getattr``, default False): the
    trainer builds AdamW with ``fused=True`` when it is set, i.e. when torch's fused AdamW
    kernel runs on this device type.
    """

    def device_count(self) -> int: ...

    def memory_stats(self) -> dict[str, float]: ...

    def empty_cache(self) -> None: ...

    def get_rng_state(self) -> Any: ...

    def set_rng_state(self, state: Any) -> None: ...

    def device(self, index: int = 0) -> Any:
        """The torch device for local index ``index``."""
        ...


@dataclass
class ExecResult:
    """Result of one command in a sandbox. Output beyond the cap is cut and flagged."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False
    duration_s: float = 0.0


@runtime_checkable
class Sandbox(Protocol):
    """An isolated place to run untrusted code; an async context manager."""

    async def exec(
        self, cmd: str | list[str], timeout: float = 30.0, env: dict[str, str] | None = None
    ) -> ExecResult: ...

    async def write_file(self, path: str, data: str | bytes) -> None: ...

    async def read_file(self, path: str) -> bytes: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Sandbox: ...

    async def __aexit__(self, *exc: Any) -> None: ...


@runtime_checkable
class DataSource(Protocol):
    """The data buffer: hands out groups of samples and takes back unfinished ones."""

    def get_samples(self, num_groups: int) -> list[list[Sample]]:
        """``num_groups`` groups of ``n_samples_per_prompt`` fresh (PENDING) samples."""
        ...

    def add_samples(self, groups: list[list[Sample]]) -> None:
        """Return groups (aborted or partial) to the buffer; they are handed out first."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def __len__(self) -> int:
        """Number of prompts per epoch (or a large number for procedural sources)."""
        ...


@runtime_checkable
class Logger(Protocol):
    """A metrics sink (JSONL, TensorBoard, W&B ...)."""

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


@dataclass
class RolloutResult:
    """What ``slime_rollout`` returns: kept groups plus metrics of the step."""

    groups: list[list[Sample]]
    metrics: dict[str, float] = field(default_factory=dict)

    def samples(self) -> Iterator[Sample]:
        for g in self.groups:
            yield from g
