"""The ``auto`` settings of the fast path, resolved once per run on the accelerator it runs on.

A user on a GPU gets captured decode graphs and the Triton kernels without knowing a key (and
bf16, which ``model.dtype = "auto"`` gives where the model is loaded); on the CPU the same keys
stay off. What the device can do comes from its accelerator record (``graph_capture``) and from
whether the Triton kernels run there (``slime_core.api.choose_kernel``), never from the
device's name. The keys are the local engine's (``rollout.cuda_graphs``,
``rollout.compile_decode``, ``rollout.decode_attention``, ``rollout.sample_kernel``,
``rollout.packed_weights``, ``rollout.common_prefix``) and the
torch trainer's (``train.compile``, ``train.head_kernel``, ``train.cuda_graphs``,
``run.retain_host_memory``), and
``rollout.reward_processes`` for the built-in rewards: the default plugins ``local_engine``,
``torch_trainer`` and ``core_rewards`` resolve their own in ``slime_configure``
(:func:`configure`), before the run's ``config.toml`` is written, so the file records what ran
(``true``/``false``, a kernel name), and print one line per choice with its reason. An engine
or trainer built from a config whose keys are still ``auto`` (its plugin disabled, a config
built without ``slime_configure``) keeps them off.

Compilation is chosen by whether it pays for the run's length, from the warm-up and the
per-step saving measured on an H200 (``bench/README.md``):

* ``rollout.compile_decode``: a 20-25 s first compile (a few seconds once inductor's cache in
  ``run.compile_cache_dir`` holds it) saved about 1 ms per decode step of the 0.5b anchor
  (0.26 s of a 256-token rollout). It is on when the run decodes at least
  :data:`COMPILE_DECODE_MIN_TOKENS` steps (``num_rollouts x max_new_tokens``).
* ``train.compile``: about 200 s of warm-up (dynamic shapes recompile as lengths change) for
  about 0.4 s a step, and it turns the shared-prefix forward off. It is on from
  :data:`TRAIN_COMPILE_MIN_STEPS` optimizer steps.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slime_hookspecs import AcceleratorRecord

AUTO = "auto"
COMPILE_DECODE_MIN_TOKENS = 25_000  # decode steps that repay the compiled decode step's warm-up
TRAIN_COMPILE_MIN_STEPS = 1_000  # optimizer steps that repay train.compile's warm-up
REWARD_PROCESSES_MAX = 8  # reward workers "auto" starts at most (measured: 8 on 16 cores)


@dataclass(frozen=True)
class Choice:
    """One resolved ``auto`` key: its dotted name, the value it got and why."""

    key: str
    value: Any
    reason: str

    def line(self) -> str:
        shown = str(self.value).lower() if isinstance(self.value, bool) else repr(self.value)
        return f"auto: {self.key} = {shown} ({self.reason})"


def _chooser(config: Any, choices: list[Choice]) -> Callable[[str, Any, str], Any]:
    """``choose(key, value, reason)``: set ``key`` to ``value`` when it is ``auto`` (and note
    the choice); the key's value either way. Keys the user set are left alone, unreported."""

    def choose(key: str, value: Any, reason: str) -> Any:
        section_name, name = key.split(".")
        section = getattr(config, section_name)
        if getattr(section, name) != AUTO:
            return getattr(section, name)
        setattr(section, name, value)
        choices.append(Choice(key, value, reason))
        return value

    return choose


def resolve_engine(config: Any, accelerator: AcceleratorRecord) -> list[Choice]:
    """Replace every ``auto`` of the local engine's keys in ``config`` (in place) by the value
    for a run on ``accelerator`` (the selected record); the choices made, in a stable order."""
    choices: list[Choice] = []
    choose = _chooser(config, choices)
    run, rollout = config.run, config.rollout
    local = rollout.engine == "local"

    if not local:
        why = f"rollout.engine is {rollout.engine!r}; the key is the local engine's"
        graphs = choose("rollout.cuda_graphs", False, why)
    elif accelerator.graph_capture:
        graphs = choose("rollout.cuda_graphs", True,
                        f"{accelerator.name} captures graphs: static KV cache, each decode step "
                        "replays a captured graph")
    else:
        graphs = choose("rollout.cuda_graphs", False,
                        f"{accelerator.name} does not capture graphs")

    decode_tokens = run.num_rollouts * rollout.max_new_tokens
    if not graphs:
        choose("rollout.compile_decode", False, "needs the captured decode graphs")
    elif rollout.compile_autotune:
        choose("rollout.compile_decode", True, "rollout.compile_autotune is an option of it")
    elif decode_tokens >= COMPILE_DECODE_MIN_TOKENS:
        choose("rollout.compile_decode", True,
               f"{decode_tokens} decode steps (num_rollouts x max_new_tokens) >= "
               f"{COMPILE_DECODE_MIN_TOKENS}: the compile warm-up pays for itself")
    else:
        choose("rollout.compile_decode", False,
               f"{decode_tokens} decode steps (num_rollouts x max_new_tokens) < "
               f"{COMPILE_DECODE_MIN_TOKENS}: too short to repay the compile warm-up; "
               "set it true to compile anyway")

    if local:
        triton, why = _kernels(accelerator.device_type)
        head = _head_dim_unsupported(config) if triton else None
        choose("rollout.decode_attention", "triton" if triton and head is None else "sdpa",
               why if head is None else f"the decode attention kernel cannot take the model: "
               f"{head}")
        choose("rollout.sample_kernel", "triton" if triton else "torch", why)
        choose("rollout.packed_weights", *_packed_weights(config, accelerator))
        if accelerator.device_type == "cpu":
            choose("rollout.common_prefix", True,
                   "a CPU's prefill is bound by its arithmetic: the prompts' common first "
                   "tokens are computed once")
        else:
            choose("rollout.common_prefix", False,
                   f"not measured on {accelerator.name}, where a small model's prefill is "
                   "bound by the host's launches (replayed from graphs: "
                   "rollout.prefill_graphs), not by its arithmetic")
    return choices


def _packed_weights(config: Any, accelerator: AcceleratorRecord) -> tuple[bool, str]:
    """``rollout.packed_weights``' ``auto``: on a CPU whose oneDNN takes the rollout's dtype
    (measured on 2 cores, SmolLM2's decode products: 39.7 -> 25.6 ms a step in fp32, 26.0 ->
    14.5 ms in bf16; a generate of 8 x 128 tokens 8.3 -> 5.2 s, ``bench/cpu_packed_weights.py``)."""
    if accelerator.device_type != "cpu":
        return False, f"the weights live on {accelerator.name}; the packed layout is a CPU's"
    import torch
    from slime_core.api import resolve_dtype, rollout_dtype

    from slime_std.engine.packed_weights import unsupported

    dtype = resolve_dtype(rollout_dtype(config), torch.device("cpu"))
    reason = unsupported(torch.device("cpu"), dtype)
    if reason is not None:
        return False, reason
    return True, (f"{dtype} decode products on the CPU read weights packed for oneDNN, "
                  "which stream from memory 1.5-1.8x faster than torch's row-major product")


def resolve_trainer(config: Any, accelerator: AcceleratorRecord) -> list[Choice]:
    """The same for the torch trainer's keys (``train.head_kernel``, ``train.compile``,
    ``train.cuda_graphs``)."""
    choices: list[Choice] = []
    choose = _chooser(config, choices)
    triton, why = _kernels(accelerator.device_type)
    choose("train.head_kernel", "triton" if triton else "torch", why)

    steps = config.run.num_rollouts * config.train.num_steps_per_rollout
    if not accelerator.graph_capture:
        choose("train.compile", False,
               f"not compiled on {accelerator.name} (compiling pays only with graph capture)")
    elif steps >= TRAIN_COMPILE_MIN_STEPS:
        choose("train.compile", True,
               f"{steps} optimizer steps >= {TRAIN_COMPILE_MIN_STEPS}: the compile warm-up pays "
               "for itself")
    else:
        choose("train.compile", False,
               f"{steps} optimizer steps < {TRAIN_COMPILE_MIN_STEPS}: too short to repay the "
               "compile warm-up (minutes); set it true to compile anyway")
    choose("train.cuda_graphs", *_training_graphs(config, accelerator))
    choose("run.retain_host_memory", *_retain_host_memory(accelerator))
    return choices


def _retain_host_memory(accelerator: AcceleratorRecord) -> tuple[bool, str]:
    """``run.retain_host_memory``'s ``auto``: on where the training's tensors live in host
    memory (measured on 2 cores, SmolLM2 in fp32: training 5.3-5.7 -> 4.6-4.8 s a step, no
    page faults after the second step); a GPU run's host allocations are few and small."""
    from slime_core.api import can_retain_host_memory

    if accelerator.device_type != "cpu":
        return False, f"the tensors live on {accelerator.name}, not in host memory"
    if not can_retain_host_memory():
        return False, "the C library is not glibc"
    return True, ("training on the CPU: each step reuses the pages the last one touched "
                  "instead of page-faulting fresh ones; resident memory stays at its peak")


def _training_graphs(config: Any, accelerator: AcceleratorRecord) -> tuple[bool, str]:
    """``train.cuda_graphs``' ``auto``: on where the training is launch-bound and the graphs
    apply (measured on an H100, ``bench/README.md``: the 0.5b anchor in bf16 trained in 0.46 s
    instead of 0.64; SmolLM2 in fp32 without TF32, whose products are bound by arithmetic,
    gained nothing)."""
    from slime_core.api import graphs_settings_conflict

    if not accelerator.graph_capture:
        return False, f"{accelerator.name} does not capture graphs"
    conflict = graphs_settings_conflict(config.train)
    if conflict is not None:
        return False, f"it {conflict}"
    if config.train.compile is True:
        # 0.5b anchor, H100, one process each: compile alone trained in 0.299 s after a 197 s
        # first step; compiled graphs 0.325 s after 65-90 s; graphs alone 0.421 s
        return False, ("beside train.compile only when set to true: compiled graphs warm up "
                       "in half the time but trained 9% slower than compile alone")
    if config.model.dtype == "float32" and config.run.matmul_precision == "highest":
        return False, ("fp32 products without TF32 are bound by arithmetic, not launches: no "
                       "gain measured; on with run.matmul_precision = \"high\" or bf16 weights")
    return True, ("the training forward and backward replay captured graphs (tensor-core "
                  "products leave a small model's step bound by kernel launches)")


def resolve_rewards(config: Any, accelerator: AcceleratorRecord) -> list[Choice]:
    """``rollout.reward_processes``: worker processes for the rewards that allow them. On an
    accelerator that captures graphs (a GPU) the host's cores wait while the device works, and
    the reward (math-verify, ~0.5 ms a sample) was the rollout's biggest host cost: SmolLM2's
    128 samples took 60 ms on the rollout's thread and 19 ms in 8 workers on an H100 host
    (rollout 0.23 -> 0.18 s a step; bench/README.md). On a CPU the training's threads use the
    cores, so it stays 0."""
    choices: list[Choice] = []
    choose = _chooser(config, choices)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = min(REWARD_PROCESSES_MAX, cores // 2)
    if not accelerator.graph_capture:
        choose("rollout.reward_processes", 0,
               f"rewards on the rollout's thread: on {accelerator.name} the training uses the cores")
    elif workers < 2:
        choose("rollout.reward_processes", 0, f"{cores} cores: too few to share")
    else:
        choose("rollout.reward_processes", workers,
               f"{accelerator.name}: the host's cores are idle while the device works; "
               f"min({REWARD_PROCESSES_MAX}, {cores} cores / 2) workers")
    return choices


def resolve(config: Any, accelerator: AcceleratorRecord) -> list[Choice]:
    """Both: the engine's keys, then the trainer's."""
    return resolve_engine(config, accelerator) + resolve_trainer(config, accelerator)


def configure(config: Any, part: Callable[[Any, AcceleratorRecord], list[Choice]]) -> None:
    """``slime_configure``'s part: resolve with this run's accelerator record and print each
    choice. Without a record here (``run.accelerator`` unknown or unavailable) nothing is
    resolved: the driver fails where it selects the accelerator, naming it."""
    from slime_core.api import accelerator_record, config_notice

    try:
        record = accelerator_record(config)
    except (KeyError, RuntimeError):
        return
    for choice in part(config, record):
        config_notice(choice.line())


def _head_dim_unsupported(config: Any) -> str | None:
    """Why the Triton decode attention cannot take ``model.path``'s head dim, read from its
    ``config.json`` (None: it can, or the file does not say; the engine checks the loaded
    model again)."""
    import json
    from pathlib import Path
    from types import SimpleNamespace

    from slime_std.engine.floors import config_head_dim
    from slime_std.engine.kernels.decode_attention import head_dim_unsupported

    try:
        model = json.loads((Path(str(config.model.path)) / "config.json").read_text())
        d = config_head_dim(SimpleNamespace(**model))
    except (OSError, ValueError, AttributeError, TypeError, ZeroDivisionError):
        return None
    return head_dim_unsupported(d)


def _kernels(device_type: str) -> tuple[bool, str]:
    """Whether the Triton kernels run on a device of this type (as the engine and trainer
    decide ``auto`` with ``choose_kernel``), and why."""
    from slime_core.api import choose_kernel

    if choose_kernel("auto", device_type, ""):
        return True, f"triton runs on {device_type}"
    return False, f"the Triton kernels do not run on {device_type}"
