"""LoRA runs on the vLLM engine: each synced adapter served as a vLLM LoRA adapter.

When a plugin answers ``slime_engine_adapter`` (slime_lora with ``lora.enabled``), weight syncs
carry only the adapter. The engine then starts vLLM with ``enable_lora`` (``max_lora_rank``:
the smallest rank vLLM offers that holds the adapter's; one adapter per batch, room for two in
vLLM's CPU-side cache so the next version loads before the previous one goes) and keeps the
base model exactly as loaded. Every sync:

1. the plugin's ``write(weights, path)`` turns the tensors into a PEFT adapter directory
   (``<tmp>/v<version>-id<lora id>``); vLLM 0.32 loads LoRA adapters from directories only
   (``LoRARequest.lora_path`` is required, its worker manager reads ``adapter_config.json``
   and the safetensors file), so tensors cannot be handed over in memory;
2. ``add_lora`` loads it under a new LoRA id (ids are never reused: vLLM skips loading an id
   it already holds); a failure leaves the previous adapter serving;
3. the previous id is removed (``remove_lora``) and its directory deleted, and vLLM must then
   hold exactly the new id;
4. requests carry the ``LoRARequest`` of the adapter whose version the engine reports
   (``generate`` checks that the two agree before it adds a request).

Before the first sync the engine serves the base model (no ``LoRARequest``, version 0).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import weakref
from collections.abc import Mapping
from typing import Any

_CPU_CACHE_SLOTS = 2  # the new adapter loads before the previous one is removed


def max_lora_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` this vLLM accepts that holds ``rank``."""
    from typing import get_args

    try:
        from vllm.config.lora import MaxLoRARanks
    except ImportError:  # a vLLM without the list: take the rank as it is
        return int(rank)
    allowed = sorted(int(r) for r in get_args(MaxLoRARanks))
    for r in allowed:
        if r >= rank:
            return r
    raise ValueError(f"lora.rank = {rank}: this vLLM serves LoRA ranks up to {allowed[-1]} "
                     f"(max_lora_rank one of {allowed})")


class ServedAdapter:
    """The adapter versions one engine serves; see the module docstring."""

    def __init__(self, spec: Any, engine_index: int) -> None:
        self.spec = spec
        self.root = tempfile.mkdtemp(prefix=f"slime-vllm-lora-{engine_index}-")
        weakref.finalize(self, shutil.rmtree, self.root, ignore_errors=True)
        self.current: Any = None  # the LoRARequest served now
        self.version: int | None = None  # the weight version it holds
        self._ids = itertools.count(1)

    def engine_kwargs(self) -> dict[str, Any]:
        return {"enable_lora": True, "max_lora_rank": max_lora_rank(int(self.spec.rank)),
                "max_loras": 1, "max_cpu_loras": _CPU_CACHE_SLOTS}

    def load(self, llm: Any, weights: Mapping[str, Any], version: int) -> None:
        """Serve ``weights`` (one sync's adapter) as weight version ``version``."""
        from vllm.lora.request import LoRARequest

        engine = llm.llm_engine
        lora_id = next(self._ids)
        path = os.path.join(self.root, f"v{version}-id{lora_id}")
        try:
            self.spec.write(weights, path)
            request = LoRARequest(lora_name=f"slime-v{version}", lora_int_id=lora_id,
                                  lora_path=path)
            if not engine.add_lora(request):
                raise RuntimeError(f"vLLM did not load LoRA id {lora_id} from {path}")
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        previous, self.current, self.version = self.current, request, int(version)
        if previous is not None:
            engine.remove_lora(previous.lora_int_id)
            shutil.rmtree(previous.lora_path, ignore_errors=True)
        held = set(engine.list_loras())
        if held != {lora_id}:
            raise RuntimeError(f"weight version {version}: vLLM holds LoRA ids {sorted(held)} "
                               f"after loading id {lora_id} and removing the previous one")

    def request_for(self, version: int) -> Any:
        """The ``LoRARequest`` for generating at the engine's weight version ``version``
        (None before the first sync: the base model)."""
        if self.current is not None and self.version != version:
            raise RuntimeError(f"the engine reports weight version {version} but its LoRA "
                               f"adapter {self.current.lora_name!r} holds version "
                               f"{self.version}: a weight sync failed half-way; sync again")
        return self.current

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def read_version_dir(version_dir: str, files: list[str]) -> dict[str, Any]:
    """The tensors of a disk-transport version directory (name -> tensor)."""
    from safetensors.torch import load_file

    out: dict[str, Any] = {}
    for fname in files:
        out.update(load_file(os.path.join(version_dir, fname)))
    return out
