"""Translate slime launch flags into this project's config (``core slime-import``).

Input: a slime launch script (bash: ``NAME=( --flag value ... )`` arrays and the
``python3 train.py ...`` command, as slime's ``scripts/run-*.sh``) or a plain flag list.
Output: TOML sections, and for every flag that could not be mapped the reason. ``RULES`` is the
table of mappings; ``DROPPED`` groups the flags with a shared reason. A value slime itself would
refuse at parse time (bad JSON in ``--apply-chat-template-kwargs``) raises :class:`FlagError`
instead of being dropped: the script would not run under slime either.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from slime_compat.config import ESTIMATOR_RECORDS, FLAGS

Value = list[str]
_DEFAULT = re.compile(r"^\$\{\w+:?-([^}$]*)\}$")
Apply = Callable[[dict[str, dict[str, Any]], Value], None]


def _set(dotted: str, conv: Callable[[Value], Any]) -> Apply:
    section, _, key = dotted.partition(".")

    def apply(cfg: dict[str, dict[str, Any]], v: Value) -> None:
        cfg.setdefault(section, {})[key] = conv(v)

    return apply


def _one(v: Value) -> str:
    if len(v) != 1:
        raise ValueError(f"expects one value, got {v}")
    return v[0]


def _int(v: Value) -> int:
    return int(_one(v))


def _float(v: Value) -> float:
    return float(_one(v))


def _true(v: Value) -> bool:
    return True


def _false(v: Value) -> bool:
    return False


class FlagError(Exception):
    """A flag value slime would refuse too; the import stops naming the flag (not a
    ``ValueError``, which ``to_config`` reports as a dropped flag)."""


def _toml_ready(value: Any, where: str) -> None:
    """TOML has no null: a ``null`` anywhere in the JSON cannot be written (``where`` names it)."""
    if value is None:
        raise FlagError(f"{where} is null, which TOML cannot hold; leave the key out instead")
    if isinstance(value, dict):
        for k, v in value.items():
            _toml_ready(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _toml_ready(v, f"{where}[{i}]")


def _chat_template_kwargs(cfg: dict[str, dict[str, Any]], v: Value) -> None:
    # slime parses the flag with json.loads into the kwargs of apply_chat_template; an
    # unquoted value the shell split into words is joined back first
    text = " ".join(v)
    flag = "--apply-chat-template-kwargs"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FlagError(f"{flag} {text!r}: not JSON ({exc.msg} at column {exc.colno}); slime "
                        """expects a JSON object, e.g. '{"enable_thinking": false}'""") from None
    if not isinstance(value, dict):
        raise FlagError(f"{flag} {text!r}: expected a JSON object (the keyword arguments of "
                        f"apply_chat_template), got a JSON {type(value).__name__}")
    _toml_ready(value, flag)
    cfg.setdefault("data", {})["chat_template_kwargs"] = value


def _max_prompt_len(v: Value) -> int:
    n = _int(v)
    if n < 1:  # slime would drop every prompt; 0 means "no limit" here
        raise ValueError(f"{n} would drop every prompt (the limit must be >= 1 here)")
    return n


def _adam_beta(i: int) -> Apply:
    def apply(cfg: dict[str, dict[str, Any]], v: Value) -> None:
        betas = cfg.setdefault("train", {}).setdefault("adam_betas", [0.9, 0.999])
        betas[i] = _float(v)

    return apply


def _eval_data(cfg: dict[str, dict[str, Any]], v: Value) -> None:
    # slime: --eval-prompt-data NAME PATH [NAME PATH ...]; the project has one eval set
    if len(v) < 2:
        raise ValueError("expects NAME PATH pairs")
    cfg.setdefault("data", {})["eval_path"] = v[1]
    if len(v) > 2:
        raise ValueError(f"only the first eval dataset ({v[0]}) is kept: one eval set per run")


def _slime(key: str) -> Apply:
    def apply(cfg: dict[str, dict[str, Any]], v: Value) -> None:
        sec = cfg.setdefault("slime", {})
        if key == "rollout_sample_hook_path":
            sec.setdefault(key, []).extend(v)
        else:
            sec[key] = _one(v)

    return apply


def _rm_type(cfg: dict[str, dict[str, Any]], v: Value) -> None:
    cfg.setdefault("rollout", {})["reward"] = _one(v)


def _use_tis(cfg: dict[str, dict[str, Any]], v: Value) -> None:
    cfg.setdefault("algorithm", {})["is_correction"] = "tis"


def _advantage_estimator(cfg: dict[str, dict[str, Any]], v: Value) -> None:
    name = _one(v)
    cfg.setdefault("algorithm", {})["advantage_estimator"] = ESTIMATOR_RECORDS.get(name, name)


def _ref_load(cfg: dict[str, dict[str, Any]], v: Value) -> None:
    # slime's --ref-load is usually the Megatron (torch_dist) conversion of --hf-checkpoint,
    # i.e. the initial policy, which is this project's default reference anyway
    path = _one(v)
    if not (Path(path) / "config.json").is_file():
        raise ValueError(
            f"{path} is not a Hugging Face model directory (no config.json; a Megatron "
            "checkpoint?): the reference stays the initial policy (model.path); to load "
            "another one, give its Hugging Face directory with --set ref-load=DIR")
    cfg.setdefault("model", {})["ref_path"] = path


def _kl_loss_type(cfg: dict[str, dict[str, Any]], v: Value) -> None:
    cfg.setdefault("algorithm", {})["kl_estimator"] = _one(v)


# -- slime's delta weight sync (--update-weight-mode delta over --update-weight-transport disk)
# maps onto the disk transport's weights.delta; the encoding flag may come before the mode, so
# it waits in a scratch key that _finish_delta resolves (slime's default encoding is xor)
_ENCODING = "_update_weight_delta_encoding"


def _update_weight_mode(cfg: dict[str, dict[str, Any]], v: Value) -> None:
    mode = _one(v)
    if mode not in ("full", "delta"):
        raise ValueError(f"{mode!r} is not full or delta")
    cfg.setdefault("weights", {})["delta"] = mode  # "delta" becomes the encoding below


def _update_weight_transport(cfg: dict[str, dict[str, Any]], v: Value) -> None:
    if _one(v) != "disk":
        raise ValueError("only disk maps (weights.transport = 'disk'); slime's nccl broadcast "
                         "is weights.transport = 'broadcast' under run.executor = 'ray'")
    cfg.setdefault("weights", {})["transport"] = "disk"


def _update_weight_delta_encoding(cfg: dict[str, dict[str, Any]], v: Value) -> None:
    encoding = _one(v)
    if encoding not in ("xor", "overwrite"):
        raise ValueError(f"{encoding!r} is not xor or overwrite")
    cfg.setdefault("weights", {})[_ENCODING] = encoding


def _finish_delta(cfg: dict[str, dict[str, Any]]) -> None:
    w = cfg.get("weights", {})
    encoding = w.pop(_ENCODING, "xor")
    if w.get("delta") == "delta":
        w["delta"], w["transport"] = encoding, "disk"  # slime: delta mode is disk only
    elif w.get("delta") == "full":
        w["delta"] = "off"


DELTA_RULES: dict[str, Apply] = {
    "update-weight-mode": _update_weight_mode,
    "update-weight-transport": _update_weight_transport,
    "update-weight-delta-encoding": _update_weight_delta_encoding,
    "update-weight-disk-dir": _set("weights.dir", _one),
}
DELTA_DROPPED: dict[str, str] = {
    "update-weight-delta-checksum": "delta checksums are sha256 here, named in each delta's manifest",
    "update-weight-local-checkpoint-dir": "engines that apply deltas hold their base in memory; engines that load files themselves (vLLM, SGLang) get full versions",
    "update-weight-disk-keep-files": "the disk transport keeps the two newest versions and the newest full one",
}

RULES: dict[str, Apply] = {
    "hf-checkpoint": _set("model.path", _one),
    "seed": _set("run.seed", _int),
    "num-rollout": _set("run.num_rollouts", _int),
    "save-interval": _set("run.save_interval", _int),
    "prompt-data": _set("data.path", _one),
    "input-key": _set("data.input_key", _one),
    "label-key": _set("data.label_key", _one),
    "metadata-key": _set("data.metadata_key", _one),
    "tool-key": _set("data.tools_key", _one),
    "apply-chat-template": _set("data.apply_chat_template", _true),
    "apply-chat-template-kwargs": _chat_template_kwargs,
    "rollout-max-prompt-len": _set("data.max_prompt_len", _max_prompt_len),
    "rollout-shuffle": _set("data.shuffle", _true),
    "rm-type": _rm_type,
    "reward-key": _set("rollout.reward_key", _one),
    "rollout-batch-size": _set("rollout.batch_size", _int),
    "n-samples-per-prompt": _set("rollout.n_samples_per_prompt", _int),
    "rollout-max-response-len": _set("rollout.max_new_tokens", _int),
    "rollout-max-context-len": _set("rollout.max_context_len", _int),
    "rollout-temperature": _set("rollout.temperature", _float),
    "rollout-top-p": _set("rollout.top_p", _float),
    "rollout-top-k": _set("rollout.top_k", _int),
    "rollout-stop": _set("rollout.stop", list),
    "rollout-stop-token-ids": _set("rollout.stop_token_ids", lambda v: [int(x) for x in v]),
    "over-sampling-batch-size": _set("rollout.over_sampling_batch_size", _int),
    "partial-rollout": _set("rollout.partial_rollout", _true),
    "mask-offpolicy-in-partial-rollout": _set("rollout.mask_offpolicy_in_partial_rollout", _true),
    "eval-interval": _set("eval.interval", _int),
    "eval-prompt-data": _eval_data,
    "n-samples-per-eval-prompt": _set("eval.n_samples_per_prompt", _int),
    "eval-max-response-len": _set("eval.max_new_tokens", _int),
    "eval-max-prompt-len": _set("eval.max_prompt_len", _max_prompt_len),
    "eval-top-p": _set("eval.top_p", _float),
    "eval-temperature": _set("eval.temperature", _float),
    "max-tokens-per-gpu": _set("train.micro_batch_tokens", _int),
    "lr": _set("train.lr", _float),
    "min-lr": _set("train.min_lr", _float),
    "lr-decay-style": _set("train.lr_decay", _one),
    "lr-warmup-iters": _set("train.warmup_steps", _int),
    "weight-decay": _set("train.weight_decay", _float),
    "adam-beta1": _adam_beta(0),
    "adam-beta2": _adam_beta(1),
    "adam-eps": _set("train.adam_eps", _float),
    "clip-grad": _set("train.grad_clip", _float),
    "advantage-estimator": _advantage_estimator,
    "use-kl-loss": _set("algorithm.use_kl_loss", _true),
    "kl-loss-coef": _set("algorithm.kl_loss_coef", _float),
    "kl-loss-type": _kl_loss_type,
    "ref-load": _ref_load,
    "ref-update-interval": _set("train.ref_update_interval", _int),
    "keep-old-actor": _set("train.keep_old_actor", _true),
    # R3: the rollout's experts replayed in training (docs/moe.md)
    "use-rollout-routing-replay": _set("train.routing_replay", lambda v: "rollout"),
    "kl-coef": _set("algorithm.kl_in_reward_coef", _float),
    "entropy-coef": _set("algorithm.entropy_coef", _float),
    "eps-clip": _set("algorithm.eps_clip", _float),
    "eps-clip-high": _set("algorithm.eps_clip_high", _float),
    "eps-clip-c": _set("algorithm.eps_clip_c", _float),
    "gamma": _set("algorithm.gamma", _float),
    "lambd": _set("algorithm.lam", _float),
    "normalize-advantages": _set("algorithm.whiten_advantages", _true),
    "disable-grpo-std-normalization": _set("algorithm.normalize_std", _false),
    "use-tis": _use_tis,
    "group-rm": _set("slime.group_rm", _true),
    "custom-config-path": _slime("custom_config_path"),
    "value-clip": _set("ppo.value_clip", _float),
    "critic-lr": _set("ppo.critic_lr", _float),
    "num-critic-only-steps": _set("ppo.num_critic_only_steps", _int),
}
RULES.update({k.replace("_", "-"): _slime(k) for k in FLAGS})
RULES.update(DELTA_RULES)

_GPU = "GPU serving/placement of slime's SGLang engines: the project's engines are chosen with rollout.engine (and [sglang] for SGLang)"
_MEGATRON = "Megatron parallelism/kernel setting: the default torch backend has none (train.backend = 'megatron' with the megatron_backend plugin has [megatron])"
_ARCH = "model architecture: read from the Hugging Face config.json at model.path"
DROPPED: dict[str, str] = {
    **{f: _ARCH for f in ("swiglu", "num-layers", "hidden-size", "ffn-hidden-size",
                          "num-attention-heads", "group-query-attention", "num-query-groups",
                          "use-rotary-position-embeddings", "disable-bias-linear",
                          "normalization", "norm-epsilon", "rotary-base", "vocab-size",
                          "kv-channels", "qk-layernorm", "untie-embeddings-and-output-weights",
                          "max-position-embeddings", "seq-length", "make-vocab-size-divisible-by",
                          "position-embedding-type", "add-qkv-bias", "moe-ffn-hidden-size",
                          "num-experts", "moe-router-topk")},
    **{f: _MEGATRON for f in ("tensor-model-parallel-size", "sequence-parallel",
                              "pipeline-model-parallel-size", "context-parallel-size",
                              "expert-model-parallel-size", "expert-tensor-parallel-size",
                              "recompute-granularity", "recompute-method", "recompute-num-layers",
                              "use-dynamic-batch-size", "micro-batch-size",
                              "attention-dropout", "hidden-dropout",
                              "accumulate-allreduce-grads-in-fp32", "attention-softmax-in-fp32",
                              "attention-backend", "bf16", "fp16", "use-distributed-optimizer",
                              "megatron-to-hf-mode", "optimizer-cpu-offload")},
    "critic-lr-warmup-iters": "the critic's learning rate is constant here (ppo.critic_lr)",
    **{f: _GPU for f in ("rollout-num-gpus-per-engine", "rollout-num-gpus", "sglang-mem-fraction-static",
                         "sglang-server-concurrency", "sglang-router-ip", "sglang-router-port",
                         "sglang-enable-deterministic-inference", "use-distributed-post")},
    **{f: "cluster layout: train.num_ranks is the data-parallel world size; run.executor = 'ray' places components"
       for f in ("actor-num-nodes", "actor-num-gpus-per-node", "num-gpus-per-node", "colocate",
                 "offload", "offload-train", "offload-rollout")},
    **{f: "Megatron checkpoints (torch_dist): this project starts from model.path and keeps its own checkpoints in the run directory"
       for f in ("load", "save", "no-save-optim", "ckpt-format")},
    **{f: "logging to Weights & Biases is not built in (run.loggers: jsonl, tensorboard)"
       for f in ("use-wandb", "wandb-project", "wandb-group", "wandb-key", "wandb-host")},
    "balance-data": "no effect here: micro-batches are cut by token budget (train.micro_batch_tokens)",
    "optimizer": "AdamW is the only optimizer (train.lr, adam_betas, weight_decay)",
    "global-batch-size": "becomes train.num_steps_per_rollout = rollout_batch_size * n_samples_per_prompt / global_batch_size",
    **DELTA_DROPPED,
}


def _recompute(cfg: dict[str, dict[str, Any]], v: Value) -> None:
    granularity = _one(v)
    if granularity not in ("full", "selective"):
        raise ValueError(f"{granularity!r} is not full or selective")
    cfg.setdefault("megatron", {})["recompute"] = granularity


def _recompute_method(cfg: dict[str, dict[str, Any]], v: Value) -> None:
    if _one(v) != "uniform":  # megatron.recompute_num_layers chunks layers uniformly
        raise ValueError(f"{_one(v)!r}: only uniform is built")


# with --backend megatron (train.backend = "megatron", the megatron_backend plugin): slime's
# Megatron flags that have a [megatron] key; the rest keep their DROPPED reason
MEGATRON_RULES: dict[str, Apply] = {
    "tensor-model-parallel-size": _set("megatron.tensor_model_parallel_size", _int),
    "pipeline-model-parallel-size": _set("megatron.pipeline_model_parallel_size", _int),
    "context-parallel-size": _set("megatron.context_parallel_size", _int),
    "use-distributed-optimizer": _set("megatron.use_distributed_optimizer", _true),
    "recompute-granularity": _recompute,
    "recompute-method": _recompute_method,
    "recompute-num-layers": _set("megatron.recompute_num_layers", _int),
    "make-vocab-size-divisible-by": _set("megatron.make_vocab_size_divisible_by", _int),
}
_MEGATRON_BACKEND = ("Megatron setting the megatron backend has no key for (dense models on the "
                     "local layer spec; model.dtype sets the precision, train.micro_batch_tokens "
                     "the micro-batches)")
MEGATRON_DROPPED = {
    "sequence-parallel": "needs TransformerEngine, which the megatron backend does not use (it "
                         "saves activation memory; the step is the same without it)",
}
BACKENDS = ("torch", "megatron")


@dataclass
class Translation:
    config: dict[str, dict[str, Any]] = field(default_factory=dict)
    mapped: list[str] = field(default_factory=list)
    dropped: list[tuple[str, str, str]] = field(default_factory=list)  # flag, value, reason
    warnings: list[str] = field(default_factory=list)


def _tokens(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError:
        return []


_SOURCE = re.compile(r"^\s*(?:source|\.)\s+(.+)$")
_VAR = re.compile(r"\$\{[^}]*\}|\$\w+|^~")


def _source_candidates(raw: str, script_dir: Path) -> list[Path]:
    """Where the file of ``source RAW`` may be, found without running bash: RAW itself, then
    its path with the variable prefix (``${SCRIPT_DIR}``, ``${SLIME_DIR}``) or an absolute
    prefix (``/root/slime/``) removed, under the script's directory and each directory above it
    (slime's scripts source ``scripts/models/X.sh`` from the checkout's root)."""
    words = _tokens(raw)
    if not words:
        return []
    path = words[0]
    out: list[Path] = []
    if not _VAR.search(path):
        p = Path(path)
        out.append(p if p.is_absolute() else script_dir / p)
    tail = _VAR.split(path)[-1].lstrip("/")
    parts = Path(tail).parts
    bases = [script_dir, *script_dir.parents]
    for i in range(len(parts)):
        rel = Path(*parts[i:])
        out += [b / rel for b in bases]
    return out


@dataclass
class Script:
    text: str
    sourced: list[Path] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)


def read_script(path: Path, extra_sources: list[Path] | None = None) -> Script:
    """The script's text with every file it ``source``s inlined where the ``source`` line is
    (so a later array still wins, as in bash). A file in ``extra_sources`` stands in for the
    ``source`` line naming a file of the same name (a path not on this machine); one that no
    line names is read before the script. A ``source`` whose file is not found is
    listed in ``unresolved`` (its flags are then missing from the translation)."""
    sc = Script(text="")
    given = [Path(p) for p in extra_sources or []]

    def inline(file: Path, depth: int) -> str:
        lines = []
        for ln in file.read_text(encoding="utf-8").splitlines():
            m = _SOURCE.match(ln)
            if not m:
                lines.append(ln)
                continue
            raw = m.group(1).strip()
            name = Path(_VAR.split(_tokens(raw)[0] if _tokens(raw) else raw)[-1]).name
            found = next((g for g in given if g.name == name), None)  # given with --source
            found = found or next((c for c in _source_candidates(raw, file.parent) if c.is_file()), None)
            if found is None or depth > 8:
                sc.unresolved.append(raw)
                continue
            sc.sourced.append(found)
            lines.append(inline(found, depth + 1))
        return "\n".join(lines)

    body = inline(Path(path), 0)
    # given files that no source line named: read before the script
    rest = [g for g in given if g not in sc.sourced]
    sc.sourced += rest
    sc.text = "\n".join([g.read_text(encoding="utf-8") for g in rest] + [body])
    return sc


def parse_script(text: str) -> list[tuple[str, str | None]]:
    """``(flag, value)`` pairs (value ``None`` for a switch; several values joined by NUL) from
    the script's flag arrays and ``train.py`` command, or from every line of a flag list."""
    text = re.sub(r"\\\n", " ", text)
    lines = text.splitlines()
    scripted = any(re.match(r"\s*\w+=\(", ln.strip()) or "train.py" in ln or
                   "train_async.py" in ln for ln in lines)
    tokens: list[str] = []
    in_array = False
    for ln in lines:
        s = ln.strip()
        if not scripted:
            tokens += _tokens(s)
            continue
        if re.match(r"^\w+=\($", s):
            in_array = True
            continue
        one = re.match(r"^\w+=\((.*)\)$", s)
        if one:  # NAME=( --flag value ) on one line
            tokens += _tokens(one.group(1))
            continue
        if in_array:
            if s.startswith(")"):
                in_array = False
                continue
            tokens += _tokens(s)
        elif re.search(r"\btrain(_async)?\.py\b", s):
            tokens += _tokens(s.split("train_async.py" if "train_async.py" in s else "train.py", 1)[1])
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            i += 1  # ${ARRAY[@]} expansions and stray words
            continue
        flag, eq, inline = tok[2:].partition("=")
        values = [inline] if eq else []
        i += 1
        while i < len(tokens) and not tokens[i].startswith("--") and not re.match(r"^\$\{\w+\[@\]\}$", tokens[i]):
            values.append(tokens[i])
            i += 1
        out.append((flag, "\0".join(values) if values else None))
    return out


def to_config(flags: list[tuple[str, str | None]], model_path: str | None = None,
              backend: str = "torch") -> Translation:
    """Apply ``RULES`` in order (a later flag wins, as with argparse); with ``backend =
    "megatron"`` also ``MEGATRON_RULES`` (slime's parallelism flags into ``[megatron]``)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    tr = Translation()
    # a slime script means slime's numerics, whatever this project's default becomes
    tr.config.setdefault("algorithm", {})["numerics"] = "slime"
    rules, dropped = RULES, DROPPED
    if backend == "megatron":
        tr.config.setdefault("train", {})["backend"] = "megatron"
        rules = {**RULES, **MEGATRON_RULES}
        dropped = {**{f: _MEGATRON_BACKEND if r == _MEGATRON else r for f, r in DROPPED.items()},
                   **MEGATRON_DROPPED}
    gbs: int | None = None
    refused: dict[str, FlagError] = {}  # raised at the end unless a later value of the flag worked
    for flag, raw in flags:
        value = raw.split("\0") if raw is not None else []
        shown = " ".join(value)
        rule = rules.get(flag)
        if rule is None and flag != "global-batch-size":
            # the reason the flag has no equivalent, whether its value is a variable or not
            tr.dropped.append((flag, shown, dropped.get(flag, "no equivalent known to slime-import")))
            continue
        defaults = [_DEFAULT.match(v) for v in value]
        if value and all(defaults):  # ${VAR:-default}: bash's value when VAR is unset
            value = [m.group(1) for m in defaults]  # type: ignore[union-attr]
            tr.warnings.append(f"{flag}: took the script's default {' '.join(value)} (--set {flag}=VALUE overrides)")
        elif any("$" in v for v in value):
            tr.dropped.append((flag, shown, "its value comes from a shell variable; give it "
                                            f"with --set {flag}=VALUE"))
            continue
        if flag == "global-batch-size":
            gbs = int(value[0])
            tr.mapped.append(flag)
            continue
        assert rule is not None
        try:
            rule(tr.config, value)
            tr.mapped.append(flag)
            refused.pop(flag, None)
        except FlagError as exc:
            refused[flag] = exc
        except (ValueError, IndexError) as exc:
            tr.dropped.append((flag, shown, f"cannot translate the value: {exc}"))
    if refused:
        raise FlagError("; ".join(str(e) for e in refused.values())
                        + " (--set FLAG=VALUE gives a value that replaces the script's)")
    _finish_delta(tr.config)
    # a flag given later (--set after a shell-variable value) is translated, not dropped
    tr.dropped = [d for d in tr.dropped if d[0] not in set(tr.mapped)]
    if model_path:
        tr.config.setdefault("model", {})["path"] = model_path
        if tr.config.get("data", {}).get("apply_chat_template") and not _has_chat_template(Path(model_path)):
            # the script's model had a template; the stand-in (e.g. a tiny test model) has none
            tr.config["data"]["apply_chat_template"] = False
            tr.warnings.append(f"apply-chat-template: {model_path} has no chat template; "
                               "data.apply_chat_template = false")
    if gbs:
        r = tr.config.get("rollout", {})
        total = r.get("batch_size", 8) * r.get("n_samples_per_prompt", 8)
        if total % gbs == 0:
            tr.config.setdefault("train", {})["num_steps_per_rollout"] = total // gbs
        else:
            tr.warnings.append(f"global-batch-size {gbs} does not divide the rollout's "
                               f"{total} samples; train.num_steps_per_rollout left at 1")
    if backend == "megatron":
        mg = tr.config.setdefault("megatron", {})
        model_parallel = (mg.get("tensor_model_parallel_size", 1)
                          * mg.get("pipeline_model_parallel_size", 1)
                          * mg.get("context_parallel_size", 1))
        # one data-parallel replica: the script's GPU count is a cluster's, not this machine's
        tr.config["train"]["num_ranks"] = model_parallel
        tr.warnings.append(f"train.num_ranks = {model_parallel} (tensor x pipeline x context "
                           "parallel: one data-parallel replica); more ranks add data "
                           "parallelism (-o train.num_ranks=N)")
    if tr.config.get("slime", {}).get("custom_loss_function_path") is None and "loss-type" in dict(flags):
        tr.warnings.append("loss-type: only custom_loss (with custom-loss-function-path) is mapped")
    return tr


def _has_chat_template(model: Path) -> bool:
    """Whether the tokenizer at ``model`` has a chat template (unknown, e.g. a hub id: yes)."""
    cfg = model / "tokenizer_config.json"
    if not cfg.is_file():
        return not model.is_dir()
    if (model / "chat_template.jinja").is_file() or (model / "chat_template.json").is_file():
        return True
    return bool(json.loads(cfg.read_text(encoding="utf-8")).get("chat_template"))


def render_report(dropped: list[tuple[str, str, str]]) -> str:
    width = max(len(f) for f, _, _ in dropped) + 2
    rows = [f"{'flag'.ljust(width + 2)}{'value'.ljust(24)}reason"]
    for flag, value, reason in dropped:
        v = value if len(value) <= 22 else value[:19] + "..."
        rows.append(f"--{flag.ljust(width)}{v.ljust(24)}{reason}")
    return "not translated:\n" + "\n".join(rows)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML for {value!r}")


ORDER = ["run", "model", "data", "rollout", "eval", "train", "megatron", "algorithm", "ppo",
         "slime"]


def run_plugins(config: dict[str, dict[str, Any]]) -> str:
    """The ``--plugins`` a translated config runs with: GRPO's losses and estimators, slime's
    flags, the critic when the estimator is GAE (slime's ``ppo``), megatron when chosen."""
    plugins = ["slime_grpo", "slime_compat"]
    if config.get("algorithm", {}).get("advantage_estimator") == ESTIMATOR_RECORDS["ppo"]:
        plugins.append("slime_ppo")
    if config.get("train", {}).get("backend") == "megatron":
        plugins.append("megatron_backend")
    return ",".join(plugins)


def write_toml(config: dict[str, dict[str, Any]], path: Path, source: str = "") -> None:
    plugins = run_plugins(config)
    lines = [f"# written by `core slime-import {source}`",
             f"# run: core run --plugins {plugins} --config {path}", ""]
    for name in sorted(config, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER)):
        lines.append(f"[{name}]")
        lines += [f"{k} = {_toml(v)}" for k, v in config[name].items()]
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
