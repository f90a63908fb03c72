"""Protocols of the components that plugins provide.

They are structural (``typing.Protocol``): a plugin implements the methods, it does not
inherit. Every argument and return value crosses process boundaries under the ``ray``
executor, so they are picklable: dataclasses, lists, dicts, tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from slime_hookspecs.batch import TrainBatch
from slime_hookspecs.routing import RoutedExperts
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
    # the experts a mixture-of-experts model routed the prompt and the generated tokens to
    # (all but the last), when the engine records them (train.routing_replay = "rollout")
    routed_experts: RoutedExperts | None = None



@dataclass
class EngineAdapter:
    """The LoRA adapter a run's weight syncs carry, as an engine that serves adapters natively
    needs it (the answer of ``slime_engine_adapter``).

    Built in the engine's process and used there (``write`` is a plain callable, not sent
    anywhere): the engine reserves LoRA slots of ``rank`` when it starts, and at every weight
    sync calls ``write(weights, path)`` with the tensors that sync delivered (the mapping
    ``slime_trainer_weights`` chose, as the transport handed it over) and a new, empty
    directory; ``write`` leaves a PEFT adapter directory there (``adapter_config.json`` +
    ``adapter_model.safetensors``) that the engine loads as a new adapter (vLLM's
    ``LoRARequest``, SGLang's ``/load_lora_adapter``). ``write`` raises on tensors that are
    not a complete adapter, before the engine changes anything.
    """

    rank: int  # r of every adapted layer (what the engine must reserve)
    alpha: float  # lora_alpha: the update is alpha / rank * B @ A
    # module-name suffixes the adapter covers (q_proj, ...); ["all-linear"]: every linear
    # layer but the output head
    target_modules: list[str]
    write: Callable[[Any, str], None]  # write(weights, path): a PEFT adapter directory

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


@dataclass
class CriticSpec:
    """What an algorithm plugin asks of a trainer backend's critic (``critic_factory``).

    ``init``: ``"policy"`` (the trunk is a copy of the policy's architecture and initial
    weights, as OpenRLHF and slime initialise their critic) or ``"random"`` (the same
    architecture, weights seeded with ``seed + 1``). The value head is ``Linear(hidden, 1)``
    with weights ``N(0, 1/(hidden + 1))`` seeded with ``seed`` and bias 0. AdamW with ``lr``
    (constant), ``weight_decay`` and ``train.adam_betas`` / ``train.adam_eps``;
    ``micro_batch_tokens``: token budget of one micro-batch (0: ``train.micro_batch_tokens``).
    """

    lr: float
    weight_decay: float = 0.0
    init: str = "policy"
    seed: int = 0
    micro_batch_tokens: int = 0


# loss_fn(indices, values) -> (loss, metrics): the loss of the samples ``indices`` (positions in
# the lists given to CriticModel.train_step) from their differentiable per-token ``values``
CriticLossFn = Callable[[list[int], list[Any]], tuple[Any, dict[str, float]]]


@runtime_checkable
class CriticModel(Protocol):
    """A value model and its optimizer, built by a trainer backend (``critic_factory``) in the
    trainer rank's process and sharded like that backend's policy.

    The algorithm (the value loss, its clipping, how samples split into optimizer steps) stays
    in the plugin that asks for it; the backend owns the forward, the micro-batching, the
    reductions over its own process groups, clipping and the optimizer.
    """

    def values(self, tokens: list[Any], response_lengths: list[int]) -> list[Any]:
        """Per-sample values ``V_t`` of the response tokens (no gradient), float32 on the CPU.

        ``V_t`` is the value at the position *before* response token ``t`` (the state from
        which the token was generated: the position whose logits give its log-prob)."""
        ...

    def train_step(self, tokens: list[Any], response_lengths: list[int],
                   loss_masks: list[Any], loss_fn: CriticLossFn,
                   weighting: str) -> tuple[dict[str, float], float]:
        """One optimizer step on this rank's samples: micro-batches by token budget, each
        micro-batch's ``loss_fn`` weighted by its share of the step's loss-masked tokens
        (``weighting = "tokens"``) or samples (``"samples"``), the shares of the totals over
        data-parallel ranks and the gradients summed over them, clipped by ``train.grad_clip``
        over the whole (unsharded) model. Returns the weighted metrics (summed over
        data-parallel ranks) and the gradient norm before clipping. A collective: under data
        parallelism every rank calls it, also with no samples."""
        ...

    def lr(self) -> float:
        """The optimizer's current learning rate."""
        ...

    def save(self, path: str, extra: dict[str, Any] | None = None) -> None:
        """Write weights and optimizer state (and the picklable ``extra``) under the directory
        ``path``; every rank calls it, the backend decides which ranks write."""
        ...

    def load(self, path: str) -> dict[str, Any]:
        """Restore what :meth:`save` wrote; returns ``extra``. A missing checkpoint raises
        ``FileNotFoundError`` naming ``path``."""
        ...


@runtime_checkable
class WeightTransport(Protocol):
    """Moves trainer weights to engines; reports bytes and seconds."""

    def send(self, weights: dict[str, Any], version: int, engines: list[Any]) -> dict[str, float]:
        """Deliver ``weights`` as ``version`` to every engine; return ``{"bytes", "seconds"}``.

        ``weights`` holds one name per tensor: of tied names (``lm_head.weight`` sharing
        ``model.embed_tokens.weight``) only the first is given, since the engine's model is tied
        the same way and one write updates both."""
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
class FinishedGroupSource(DataSource, Protocol):
    """A data source whose groups are generated elsewhere (agent workers) and come back
    finished: ``delivers_finished_samples = True``. The rollout manager rewards the samples
    that have no reward yet instead of generating them.

    The synchronous modes call :meth:`get_samples` (it blocks until the groups asked for
    are complete). ``run.rollout_mode = "fully_async"`` calls the methods below instead:
    :meth:`poll_finished` and :meth:`open_groups` from its generator thread, the pause pair
    around every weight update and checkpoint; never two of them (nor ``add_samples`` or
    ``state_dict``) at once.
    """

    delivers_finished_samples: bool

    def poll_finished(self, max_open: int) -> list[list[Sample]]:
        """Without waiting: keep at most ``max_open`` groups open elsewhere (handed to the
        workers and not yet returned here, complete ones included; fewer when more are open
        already), then return the complete groups ready now. Raises ``TimeoutError`` naming
        the source's setting when open groups make no progress for too long."""
        ...

    def open_groups(self) -> int:
        """Groups handed out to the workers and not yet returned by :meth:`poll_finished`
        (part of what ``run.async_buffer_groups`` bounds)."""
        ...

    def pause_generation(self) -> None:
        """A weight update follows: stop the workers' generation on the run's engines and
        return once none of their engine calls runs (what happens to those calls is the
        source's to document)."""
        ...

    def resume_generation(self) -> None:
        """The engines hold the new weights: the workers' generation may go on."""
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
