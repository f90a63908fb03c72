"""Methods mixed into every vLLM worker (``LLM(worker_extension_cls=...)``).

vLLM adds this class's methods to its worker class, in whichever process the worker lives (this
one, or vLLM's engine-core child with ``vllm.multiprocessing = true``), and the engine calls them
by name through ``LLM.collective_rpc``: nothing is pickled but the method name and arguments.
"""

from __future__ import annotations

from typing import Any

import torch


class SlimeWorkerExtension:
    """Worker-side helpers of :class:`vllm_rollout.engine.VllmEngine`."""

    model_runner: Any  # set by vLLM's worker

    def slime_full_distribution_logprobs(self) -> bool:
        """Make returned log-probs ignore top-k / top-p truncation.

        With ``logprobs_mode = "processed_logprobs"`` vLLM returns ``log_softmax`` of the logits
        after temperature *and after* top-k / top-p masking, i.e. the log-prob renormalised over
        the kept tokens. slime's convention (``SamplingParams``) is the full distribution at
        temperature T, which the trainer recomputes. The sampler's top-k/top-p step receives the
        temperature-scaled logits, so the full log-softmax is taken there, before truncation,
        and returned in place of vLLM's; token choice is unchanged. Returns False when this
        vLLM has no such step (then only untruncated requests can be served exactly).
        """
        sampler = getattr(self.model_runner, "sampler", None)
        step = getattr(sampler, "topk_topp_sampler", None)
        if step is None or not callable(getattr(step, "forward", None)):
            return False
        if getattr(step, "_slime_full_logprobs", False):
            return True
        inner = step.forward

        def forward(logits: torch.Tensor, generators: Any, k: Any, p: Any) -> Any:
            # apply_top_k_top_p masks ``logits`` in place: take the full log-softmax first
            full = None if k is None and p is None else logits.log_softmax(
                dim=-1, dtype=torch.float32)
            sampled, processed = inner(logits, generators, k, p)
            if processed is None or full is None:
                return sampled, processed
            return sampled, full

        step.forward = forward
        step._slime_full_logprobs = True
        return True

    def slime_reload_weights(self, weights: list[tuple[str, torch.Tensor]] | None = None,
                             path: str | None = None) -> None:
        """vLLM's in-place ``reload_weights`` (from ``weights`` or from the directory ``path``),
        then re-pack the modules that share a reloaded parameter.

        On CPU, vLLM packs every GEMM weight into a private copy (``layer.cpu_linear``) when a
        layer is processed. ``reload_weights`` re-processes each layer it loads, but a tied LM
        head receives no tensor of its own (its weight *is* the embedding's), so it would go
        on computing logits with the packed copy of the first weights. Processing it again
        packs the updated embedding.
        """
        self.reload_weights(weights_iterator=weights, weights_path=path,  # type: ignore[attr-defined]
                            is_checkpoint_format=True)
        model = self.model_runner.get_model()
        owners: dict[int, list[torch.nn.Module]] = {}
        for module in model.modules():
            for param in module.parameters(recurse=False):
                owners.setdefault(id(param), []).append(module)
        for modules in owners.values():
            if len(modules) < 2:
                continue
            for module in modules:
                method = getattr(module, "quant_method", None)
                if method is not None and hasattr(module, "cpu_linear"):
                    method.process_weights_after_loading(module)

    def slime_named_parameters(self) -> dict[str, torch.Tensor]:
        """The served model's parameters (vLLM names, CPU copies); for checks and tests."""
        model = self.model_runner.get_model()
        return {name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters()}
