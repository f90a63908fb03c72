"""Entry point of ``slime-sglang-rollout``: the ``sglang`` rollout engine and the ``[sglang]``
config section.

Kept light: the engine (aiohttp, and torch only for tensor weight updates) is imported by the
factory, so ``core plugins`` never imports torch, aiohttp or sglang.

Availability (the record's probe) is about *launching* servers here: it says why when the
``sglang`` package is missing or there is no NVIDIA driver. Attaching to running servers
(``sglang.urls``) needs neither, only HTTP, so once a run's resolved config lists ``urls``
(seen by ``slime_configure`` in this process) the probe answers "available" for as long as that
config object lives (its plugin manager keeps it for the run). ``core plugins`` resolves no config and so shows the launch answer.
Limitation: a Ray engine worker rebuilds its plugins without ``slime_configure``, so attaching
from Ray workers needs ``sglang`` installed on their hosts (true on GPU nodes).
"""

from __future__ import annotations

import weakref
from typing import Any

from slime_hookspecs import Config, ConfigSection, RolloutEngineRecord, hookimpl

from sglang_rollout.config import SECTION, SGLangSection
from sglang_rollout.probe import launch_unavailable_reason

ENGINE_NAME = "sglang"

# the last resolved config in this process whose [sglang] section attaches to running servers
_attaching: weakref.ref[Any] | None = None
# the last resolved config that launches servers with its own interpreter or environment
# (sglang.python / sglang.env), and the probe's answer for it (asked once: a subprocess)
_launching: tuple[weakref.ref[Any], str | None] | None = None


def probe() -> str | None:
    """None when a live resolved config attaches to ``sglang.urls``; else the launch probe
    (for ``sglang.python`` / ``sglang.env`` of a live config, asked in that interpreter)."""
    if _attaching is not None and _attaching() is not None:
        return None
    if _launching is not None and _launching[0]() is not None:
        return _launching[1]
    return launch_unavailable_reason()


def make_engine(config: Config, engine_index: int = 0, accelerator: Any = None) -> Any:
    """``factory(config, engine_index, accelerator)`` of the ``sglang`` record."""
    from sglang_rollout.engine import SGLangEngine

    return SGLangEngine(config, engine_index, accelerator)


@hookimpl
def slime_register_rollout_engines() -> list[RolloutEngineRecord]:
    return [RolloutEngineRecord(
        name=ENGINE_NAME, factory=make_engine, probe=probe,
        library="sglang", routing_replay=True,  # meta_info.routed_experts (docs/moe.md)
        lora_adapters=True,  # slime_engine_adapter: served as SGLang LoRA adapters (lora.py)
        summary="SGLang servers (launched here or sglang.urls), native /generate with "
                "input_ids and log-probs; weights from disk, tensors or NCCL; LoRA adapters "
                "through /load_lora_adapter",
    )]


@hookimpl
def slime_add_config(schema: Any) -> ConfigSection:
    return ConfigSection(name=SECTION, schema=SGLangSection,
                         summary="SGLang servers: attach (urls) or launch, router, timeouts")


@hookimpl
def slime_configure(config: Config) -> None:
    global _attaching, _launching
    sec = getattr(config, SECTION, None) if SECTION in config else None
    attach = isinstance(sec, SGLangSection) and sec.attach
    _attaching = weakref.ref(config) if attach else None
    _launching = None
    if isinstance(sec, SGLangSection) and not attach and (sec.python or sec.env) \
            and getattr(getattr(config, "rollout", None), "engine", "") == ENGINE_NAME:
        _launching = (weakref.ref(config), launch_unavailable_reason(sec.python, sec.env))
