"""The model directory vLLM serves, and what the engine reads from it.

vLLM loads models from a directory only. ``model.path`` is used as it is; a model given as
``model.init_config`` (tests, examples) is built exactly as the trainer builds it (same code,
same ``run.seed``, so the engine starts from the trainer's weights) and saved to a temporary
directory that the engine removes at shutdown.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from typing import Any, cast


def materialize_model(config: Any) -> tuple[str, str, str | None]:
    """``(model_dir, tokenizer_dir or "", temporary_dir_to_remove or None)`` for ``config.model``.

    A built model's directory gets a copy of the tokenizer too: vLLM reads a separate
    tokenizer directory as a model directory first and logs errors when it has no config.json.
    """
    model = config.model
    tokenizer = model.tokenizer or model.path or ""
    if model.path:
        if not os.path.isfile(os.path.join(model.path, "config.json")):
            raise FileNotFoundError(
                f"model.path: {model.path!r} is not a model directory with config.json "
                "(vLLM serves local directories only; hub names are not downloaded)"
            )
        return str(model.path), tokenizer, None
    if not model.init_config:
        raise ValueError(
            "no model for the vllm engine: set model.path (a local directory) or model.init_config"
        )
    import torch
    from slime_core.api import load_causal_lm, load_tokenizer

    tmp = tempfile.mkdtemp(prefix="slime-vllm-model-")
    try:
        built = load_causal_lm(model, "cpu", torch.float32, role="actor", seed=config.run.seed)
        cast(Any, built).save_pretrained(tmp)
        if tokenizer:
            load_tokenizer(model).save_pretrained(tmp)
    except Exception:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp, (tmp if tokenizer else ""), tmp


def checkpoint_shapes(model_dir: str) -> tuple[dict[str, tuple[int, ...]], bool]:
    """(checkpoint name -> shape, tied embeddings?) read from headers only (no tensor loaded).

    With tied embeddings ``lm_head.weight`` is accepted too (the trainer exports it; vLLM
    serves the head from the embedding and skips it).
    """
    from safetensors import safe_open

    shapes: dict[str, tuple[int, ...]] = {}
    for fname in sorted(os.listdir(model_dir)):
        if not fname.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(model_dir, fname), framework="pt") as f:
            for name in f.keys():
                shapes[name] = tuple(f.get_slice(name).get_shape())
    tied = False
    cfg_path = os.path.join(model_dir, "config.json")
    if os.path.isfile(cfg_path):
        with open(cfg_path) as fh:
            cfg = json.load(fh)
        tied = bool(cfg.get("tie_word_embeddings", cfg.get("text_config", {}).get(
            "tie_word_embeddings", False)))
    embed = shapes.get("model.embed_tokens.weight")
    if tied and embed is not None:
        shapes.setdefault("lm_head.weight", embed)
    shapes.update(fused_expert_shapes(shapes))
    return shapes, tied


_EXPERT = re.compile(r"^(?P<prefix>.+\.experts)\.(?P<e>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)"
                     r"\.weight$")


def fused_expert_shapes(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The fused expert tensors transformers 5 keeps in memory for checkpoints that store one
    tensor per expert (Qwen3-MoE, Qwen2-MoE, OLMoE): ``<prefix>.experts.gate_up_proj``
    ``[E, 2 x I, H]`` (gate rows first) and ``<prefix>.experts.down_proj`` ``[E, H, I]``, from
    ``<prefix>.experts.<e>.{gate,up,down}_proj.weight``. The trainer exports these names (its
    ``state_dict``); vLLM's expert loader takes them as they are (fused ``[E, N, K]``
    tensors). Mixtral's ``w1/w2/w3`` under ``block_sparse_moe`` are renamed as well as fused
    by transformers and are not mapped here."""
    experts: dict[str, dict[str, list[tuple[int, ...]]]] = {}
    for name, shape in shapes.items():
        m = _EXPERT.match(name)
        if m:
            experts.setdefault(m["prefix"], {}).setdefault(m["proj"], []).append(shape)
    out: dict[str, tuple[int, ...]] = {}
    for prefix, projs in experts.items():
        gate, up, down = (projs.get(k, []) for k in ("gate_proj", "up_proj", "down_proj"))
        if not (len(gate) == len(up) == len(down) > 0) or len(set(gate + up)) != 1 \
                or len(set(down)) != 1:
            continue  # not the uniform per-expert layout transformers fuses
        (inter, hidden) = gate[0]
        out[f"{prefix}.gate_up_proj"] = (len(gate), 2 * inter, hidden)
        out[f"{prefix}.down_proj"] = (len(down), *down[0])
    return out


def eos_token_ids(tokenizer: Any, model_dir: str) -> list[int]:
    """EOS ids as the ``local`` engine takes them: the tokenizer's, then the generation config's."""
    ids: list[int] = []
    if tokenizer is not None and getattr(tokenizer, "eos_token_id", None) is not None:
        ids.append(int(tokenizer.eos_token_id))
    # transformers builds the generation config from config.json when the file is missing
    for fname in ("generation_config.json", "config.json"):
        path = os.path.join(model_dir, fname)
        if not os.path.isfile(path):
            continue
        with open(path) as fh:
            extra = json.load(fh).get("eos_token_id")
        if extra is not None:
            ids.extend(int(i) for i in (extra if isinstance(extra, (list, tuple)) else [extra]))
        break
    return list(dict.fromkeys(ids))
