"""LoRA runs on the SGLang engine: each synced adapter served as an SGLang LoRA adapter.

When a plugin answers ``slime_engine_adapter`` (slime_lora with ``lora.enabled``), weight syncs
carry only the adapter. The engine then launches its server with SGLang's LoRA flags
(:func:`launch_flags`: ``--enable-lora``, ``--max-lora-rank`` = the adapter's rank,
``--lora-target-modules`` = its layer kinds in SGLang's names, ``--max-loras-per-batch 2`` and
``--max-loaded-loras 2``: one adapter serving plus room for the next one, which loads before
the previous one goes) and keeps the base model exactly as loaded. Every sync, inside
``/pause_generation`` ... ``/continue_generation``:

1. the plugin's ``write(weights, path)`` turns the tensors into a PEFT adapter directory
   ``<lora dir>/slime-v<version>`` (``sglang.lora_dir``, a folder the server can read; by
   default a temporary folder of the engine, i.e. the engine's host: launched servers);
2. ``POST /load_lora_adapter {"lora_name": "slime-v<version>", "lora_path": <dir>}``; SGLang
   answers ``LoRAUpdateOutput`` (200 with ``success`` true, or 400 with ``error_message``); a
   failure leaves the previous adapter serving (nothing else was changed) and raises naming
   the endpoint and the answer;
3. ``POST /unload_lora_adapter {"lora_name": <previous>}`` and its directory deleted; the
   server must then hold exactly the new adapter (``loaded_adapters`` of the answer);
4. every ``/generate`` carries ``lora_path`` = the current adapter's name (SGLang's
   ``lora_path`` field takes a loaded adapter's name).

Before the first sync the engine serves the base model (no ``lora_path``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from sglang_rollout import api

# --lora-target-modules choices of SGLang 0.5.17 (sglang/srt/utils/common.py,
# SUPPORTED_LORA_TARGET_MODULES); "all" is LORA_TARGET_ALL_MODULES
SGLANG_TARGETS = (
    "q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "kv_a_proj_with_mqa", "q_b_proj",
    "kv_b_proj", "wq_b", "wk", "weights_proj", "gate_proj", "up_proj", "down_proj", "qkv_proj",
    "gate_up_proj", "embed_tokens", "lm_head", "qkvr", "wo_ud")
SGLANG_ALL = "all"
SLOTS = 2  # adapters per batch and in memory: the serving one + the next one while it loads


def sglang_target_modules(targets: list[str]) -> list[str]:
    """The adapter's target modules as ``--lora-target-modules`` takes them: peft's
    ``all-linear`` -> ``all``; module names SGLang adapts pass as they are; others fail."""
    if list(targets) in (["all-linear"], ["all_linear"], [SGLANG_ALL]):
        return [SGLANG_ALL]
    unknown = [t for t in targets if t not in SGLANG_TARGETS]
    if unknown:
        raise ValueError(f"sglang engine: LoRA target module(s) {unknown} are not among the "
                         f"ones SGLang serves adapters for (--lora-target-modules: "
                         f"{', '.join(SGLANG_TARGETS)}, or all-linear)")
    return list(dict.fromkeys(targets))


def launch_flags(spec: Any) -> list[str]:
    """``sglang.launch_server`` flags that reserve LoRA slots for ``spec`` (an EngineAdapter)."""
    return ["--enable-lora", "--max-lora-rank", str(int(spec.rank)),
            "--lora-target-modules", *sglang_target_modules(list(spec.target_modules)),
            "--max-loras-per-batch", str(SLOTS), "--max-loaded-loras", str(SLOTS)]


class ServedAdapter:
    """The adapter versions one SGLang server serves; see the module docstring."""

    def __init__(self, spec: Any, engine_index: int, lora_dir: str = "") -> None:
        self.spec = spec
        if lora_dir:
            os.makedirs(lora_dir, exist_ok=True)
        self.root = tempfile.mkdtemp(prefix=f"slime-sglang-lora-{engine_index}-",
                                     dir=lora_dir or None)
        weakref.finalize(self, shutil.rmtree, self.root, ignore_errors=True)
        self.name: str | None = None  # the adapter served now (None: the base model)
        self.path: str | None = None
        self.version: int | None = None  # the weight version it holds

    def _new_name(self, version: int) -> str:
        name, n = f"slime-v{int(version)}", 1
        while name == self.name:  # the same version synced again: SGLang refuses a held name
            name, n = f"slime-v{int(version)}-{n}", n + 1
        return name

    def load(self, call: Callable[[str, dict[str, Any]], Any], where: str,
             weights: Mapping[str, Any], version: int) -> None:
        """Serve ``weights`` (one sync's adapter) as weight version ``version``;
        ``call(endpoint, body)`` posts to the server and returns the parsed answer (raising on
        an HTTP error, whose message names the endpoint and the body)."""
        name = self._new_name(version)
        path = os.path.join(self.root, name)
        try:
            self.spec.write(weights, path)
            loaded = api.parse_lora_update(f"{where}: POST /load_lora_adapter {name!r}",
                                           call("/load_lora_adapter",
                                                api.load_lora_adapter_body(name, path)))
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        previous, previous_path = self.name, self.path
        self.name, self.path, self.version = name, path, int(version)
        if previous is not None:
            loaded = api.parse_lora_update(
                f"{where}: POST /unload_lora_adapter {previous!r}",
                call("/unload_lora_adapter", api.unload_lora_adapter_body(previous)))
            if previous_path:
                shutil.rmtree(previous_path, ignore_errors=True)
        if set(loaded) != {name}:
            raise RuntimeError(f"{where}: weight version {version}: the server holds LoRA "
                               f"adapters {sorted(loaded)} after loading {name!r} and unloading "
                               f"the previous one ({previous!r})")

    def name_for(self, version: int) -> str | None:
        """The adapter name for generating at the engine's weight version ``version`` (None
        before the first sync: the base model)."""
        if self.name is not None and self.version != version:
            raise RuntimeError(f"the engine reports weight version {version} but its LoRA "
                               f"adapter {self.name!r} holds version {self.version}: a weight "
                               "sync failed half-way; sync again")
        return self.name

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def read_version_dir(version_dir: str, version: int) -> dict[str, Any]:
    """The tensors of a disk-transport version directory (name -> tensor)."""
    import glob

    from safetensors.torch import load_file

    files = sorted(glob.glob(os.path.join(version_dir, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"weight version {version}: {version_dir} holds no "
                                "*.safetensors file")
    out: dict[str, Any] = {}
    for path in files:
        out.update(load_file(path))
    return out
