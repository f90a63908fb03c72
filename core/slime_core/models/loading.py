"""Build the causal LM and tokenizer named by ``config.model``; shared by engines and trainers.

``model.path`` names a local directory (``config.json`` + weights); ``model.init_config`` is a
dict for ``AutoConfig.for_model`` that builds randomly initialised weights (tests, examples).
Random initialisation is seeded with ``seed`` (callers pass ``config.run.seed``) inside a
forked RNG, so every process that builds the model gets identical weights and the caller's
random stream is left untouched.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import torch

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(name: str, device: Any) -> torch.dtype:
    """``model.dtype`` as a torch dtype; ``auto`` is float32 on CPU and bfloat16 elsewhere."""
    if name == "auto":
        return torch.float32 if torch.device(device).type == "cpu" else torch.bfloat16
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(
            f"model.dtype: {name!r} is not one of auto, {', '.join(_DTYPES)}"
        ) from None


def rollout_dtype(config: Any) -> str:
    """The dtype name a rollout engine holds its weights in: ``rollout.dtype``, or
    ``model.dtype`` when that is empty. ``auto`` stays ``auto`` (:func:`resolve_dtype` makes it
    float32 on CPU, bfloat16 elsewhere); the trainer always uses ``model.dtype``."""
    return str(getattr(config.rollout, "dtype", "") or config.model.dtype)


def _check_dir(path: str, key: str, holds: str = "a local model directory with config.json") -> None:
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"{key}: {path!r} is not a directory (expected {holds}; hub names are not "
            "downloaded)"
        )


def load_causal_lm(
    model_cfg: Any,
    device: Any,
    dtype: torch.dtype,
    role: str = "actor",
    *,
    seed: int | None = None,
) -> torch.nn.Module:
    """The causal LM of ``model_cfg`` (``config.model``) on ``device`` in ``dtype``, eval mode.

    ``seed`` seeds random initialisation from ``model.init_config`` and is required there
    (pass ``config.run.seed``: trainer and engines must build identical weights); it is unused
    for ``model.path``. ``role`` (actor, ref, critic) only labels errors.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    trust = bool(model_cfg.trust_remote_code)
    if model_cfg.path:
        _check_dir(model_cfg.path, "model.path")
        model = AutoModelForCausalLM.from_pretrained(
            model_cfg.path, dtype=dtype, trust_remote_code=trust
        )
    elif model_cfg.init_config:
        init = dict(model_cfg.init_config)
        model_type = init.pop("model_type", None)
        if not model_type:
            raise ValueError(
                f"model.init_config needs a 'model_type' key (e.g. 'qwen2') to build the {role} model"
            )
        if seed is None:
            raise ValueError(
                f"load_causal_lm({role}): building from model.init_config needs seed= "
                "(pass config.run.seed so the trainer and the engines build identical weights)"
            )
        hf_config = AutoConfig.for_model(model_type, **init)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            # Initialise in fp32 on the CPU whatever the target, so every caller gets the same
            # values before the cast.
            model = AutoModelForCausalLM.from_config(
                hf_config, trust_remote_code=trust, dtype=torch.float32
            )
        model = model.to(dtype=dtype)
    else:
        raise ValueError(
            f"no model to build for {role}: set model.path (a local directory) or model.init_config"
        )
    return model.to(device).eval()


_SHARED: dict[tuple[str, bool, tuple[tuple[str, int, int], ...]], Any] = {}
_SHARED_LOCK = threading.Lock()


def _dir_state(path: str) -> tuple[tuple[str, int, int], ...]:
    """The files of directory ``path`` by name, modification time and size: a tokenizer
    shared by :func:`shared_tokenizer` is loaded again once they change (empty for a path
    that is not a directory)."""
    if not os.path.isdir(path):
        return ()
    with os.scandir(path) as entries:
        return tuple(sorted((e.name, e.stat().st_mtime_ns, e.stat().st_size)
                            for e in entries if e.is_file()))


def shared_tokenizer(path: str, trust_remote_code: bool = False) -> Any:
    """``AutoTokenizer.from_pretrained(path)``, loaded once per process and directory state and
    then handed to every caller: each load took 0.3-0.9 s of a run's start, and a run loaded
    the same tokenizer for the train data, the eval data and the trainer. For callers that do
    not change the tokenizer's settings (padding, truncation, special tokens); one that does
    (or that uses it from a thread of its own beside the others) loads its own."""
    from transformers import AutoTokenizer

    key = (os.path.realpath(path), bool(trust_remote_code), _dir_state(path))
    with _SHARED_LOCK:
        tok = _SHARED.get(key)
        if tok is None:
            tok = AutoTokenizer.from_pretrained(path, trust_remote_code=bool(trust_remote_code))
            _SHARED[key] = tok
    return tok


def load_tokenizer(model_cfg: Any, required: bool = True, shared: bool = False) -> Any:
    """The tokenizer at ``model.tokenizer`` (default ``model.path``).

    With neither set: an error naming ``model.tokenizer``, or ``None`` when not ``required``
    (an engine can generate token ids without one, but then reports no text and cannot
    honour stop strings). ``shared``: the process's one instance (:func:`shared_tokenizer`;
    only for callers that leave its settings as they are).
    """
    from transformers import AutoTokenizer

    path = model_cfg.tokenizer or model_cfg.path
    if not path:
        if not required:
            return None
        raise ValueError(
            "model.tokenizer: no tokenizer configured; set model.tokenizer (or model.path) to a "
            "local directory with the tokenizer files"
        )
    _check_dir(path, "model.tokenizer" if model_cfg.tokenizer else "model.path",
               "a local directory with the tokenizer files")
    if shared:
        return shared_tokenizer(path, bool(model_cfg.trust_remote_code))
    return AutoTokenizer.from_pretrained(
        path, trust_remote_code=bool(model_cfg.trust_remote_code)
    )
