"""Decode steps over a static KV cache, replayed from a captured CUDA graph (``rollout.cuda_graphs``).

The eager loop of :mod:`slime_std.engine.decoding` pays Python and one kernel launch per
operation of every layer for each new token: hundreds of launches a step, which on a GPU cost
far more than the step's arithmetic. Here a batch's decode forward runs against a transformers
``StaticCache`` whose key/value tensors, write position (each layer's ``cumulative_length``
tensor, advanced in place by the cache itself), input ids, position ids and attention mask
all live in fixed buffers, so one captured CUDA graph replays a whole step.

Layout: cache length ``L`` = prompt width + ``max_new`` rounded up to a multiple of 64 (so the
graphs of similar calls are shared). The decode mask [B, 1, 1, L] holds each row's prompt
padding; column ``width + s`` is switched on before step ``s``, so a row attends to its prompt
and its tokens so far and never to the unwritten cache beyond. The prefill writes the prompt
with the [B, 1, W, L] causal-and-padding mask transformers itself builds for SDPA; through
the fused decoder, a prompt shape (distinct prompts x width) seen before replays a graph of
its prefill (``rollout.prefill_graphs``; shapes repeat: a group's prompt count is fixed and
a task's prompt widths vary little), the rest run eagerly.

Attention of a decode step: grouped-query heads are computed as ``n_rep`` queries against
their key/value head (one SDPA call over [B, H_kv, n_rep, D]) instead of transformers'
``repeat_kv`` copy of the whole cache per layer and step; the same sums, without the copy.
With ``rollout.decode_attention`` = ``triton`` (``auto`` on CUDA with triton) that call is
one Triton kernel which also skips the unwritten columns (:mod:`slime_std.engine.kernels`).

Rows are never dropped (a graph has a fixed batch): finished rows keep computing and their
extra tokens are discarded by the caller. Graphs are kept per (batch, L) and reused across
``generate`` calls; weight updates copy in place, so a graph reads the current weights.
Moving the model (sleep, wake_up) must drop them (:meth:`StaticDecoders.clear`).

With ``rollout.compile_decode`` the decode forward is first compiled by ``torch.compile``
(fixed shapes, one compilation per batch size and cache length, paid in the first call) and
the compiled step is what the graph captures: inductor fuses the per-layer chains of small
elementwise kernels (norms, rotary embedding, cache writes, activations) that dominate a
graph-replayed step of a small model (about 600 kernels a step for a 24-layer Qwen2).
Two options of that compilation (:func:`compile_options`): ``rollout.compile_autotune``
(inductor benchmarks Triton templates against cuBLAS for each product and may fuse the
following elementwise work into the chosen template) and ``rollout.compile_pdl`` (inductor's
kernels launch with programmatic dependent launch, so a kernel's start overlaps the end of the
one before it: a replayed step of ~350 kernels spends ~1.3 us between each two on an H200).

Without CUDA (tests) the same static path runs eagerly (``capture=False``), which is how its
results are checked against the dynamic-cache loop.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from slime_core.api import attention_implementation, cuda_graph_capture, rms_norm

from slime_std.engine.fused_decoder import FusedDecoder
from slime_std.engine.kernels.decode_attention import (  # imports no triton
    decode_attention,
    decode_attention_rope,
)

ATTENTION_NAME = "slime_grouped_decode_sdpa"
TRITON_ATTENTION_NAME = "slime_grouped_decode_triton"
BUCKET = 64
PREFILL_GRAPHS = 8  # captured prefill shapes a decoder keeps
# the largest prefill (prompts x width) captured: the engine's pool of prefill graphs keeps
# the largest one's activations and keys and values, and a prefill this large has kernels that
# outlast its launches
PREFILL_GRAPH_TOKENS = 16384
_log = logging.getLogger(__name__)


def grouped_decode_attention(module: Any, query: torch.Tensor, key: torch.Tensor,
                             value: torch.Tensor, attention_mask: torch.Tensor | None,
                             dropout: float = 0.0, scaling: float | None = None,
                             **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers attention function: SDPA, with one-token GQA queries grouped per KV head.

    Query head ``h`` uses key/value head ``h // n_rep`` (transformers' ``repeat_kv`` order), so
    viewing the queries [B, H, 1, D] as [B, H_kv, n_rep, D] gives the same attention without
    repeating the keys and values. Anything else goes to transformers' own SDPA function.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = int(getattr(module, "num_key_value_groups", 1))
    b, h, q_len, d = query.shape
    if q_len != 1 or groups == 1 or dropout or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      dropout=dropout, scaling=scaling, **kwargs)
    q = query.view(b, h // groups, groups, d)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, key, value, attn_mask=attention_mask, scale=scaling)
    return out.reshape(b, h, 1, d).transpose(1, 2).contiguous(), None


def triton_decode_attention(module: Any, query: torch.Tensor, key: torch.Tensor,
                            value: torch.Tensor, attention_mask: torch.Tensor | None,
                            dropout: float = 0.0, scaling: float | None = None,
                            **kwargs: Any) -> tuple[torch.Tensor, None]:
    """:func:`grouped_decode_attention` with the one-token case as one Triton kernel
    (:mod:`slime_std.engine.kernels.decode_attention`), which reads only the cache columns a row
    has written; anything else (prefill, a non-boolean mask) goes the SDPA way."""
    b, h, q_len, d = query.shape
    if (q_len != 1 or dropout or attention_mask is None or attention_mask.dtype != torch.bool
            or kwargs.get("position_bias") is not None):
        return grouped_decode_attention(module, query, key, value, attention_mask,
                                        dropout=dropout, scaling=scaling, **kwargs)
    groups = int(getattr(module, "num_key_value_groups", 1))
    scale = float(scaling) if scaling is not None else d ** -0.5
    q = query.view(b, h // groups, groups, d)
    out = decode_attention(q, key, value, attention_mask[..., : key.shape[2]], scale)
    return out.reshape(b, h, 1, d).transpose(1, 2).contiguous(), None


def _register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, grouped_decode_attention)
    AttentionInterface.register(TRITON_ATTENTION_NAME, triton_decode_attention)


def compile_options(autotune: bool, pdl: bool) -> dict[str, Any]:
    """The inductor options of the compiled decode step (``torch.compile(options=...)``).

    ``autotune``: inductor's ``max-autotune-no-cudagraphs`` mode (the CUDA graph is captured
    here, not by inductor); ``pdl``: ``triton.enable_pdl`` where this torch's inductor has it
    (inductor itself uses it only on CUDA devices of compute capability 9 and newer). PDL
    changes when kernels start, never what they compute, so where it is missing the step
    compiles without it and a warning says so."""
    options: dict[str, Any] = {}
    if autotune:
        from torch._inductor import list_mode_options

        options.update(list_mode_options("max-autotune-no-cudagraphs"))
    if pdl:
        from torch._inductor import config as inductor_config

        if hasattr(inductor_config.triton, "enable_pdl"):
            options["triton.enable_pdl"] = True
        else:
            _log.warning("rollout.compile_pdl: torch %s's inductor has no programmatic dependent "
                         "launch (triton.enable_pdl); the decode step compiles without it",
                         torch.__version__)
    return options


def cache_length(width: int, max_new: int) -> int:
    return -(-(width + max_new) // BUCKET) * BUCKET


class StaticDecoder:
    """One batch size and cache length: static buffers, the cache and (on CUDA) the graph."""

    def __init__(self, model: Any, batch: int, length: int, capture: bool,
                 compile_step: bool = False, attention: str = ATTENTION_NAME,
                 fused: FusedDecoder | None = None, splits: int | None = None,
                 fuse_rope: bool = False, options: dict[str, Any] | None = None,
                 prefill_graphs: bool = False,
                 prefill_pool: Callable[[], Any] | None = None) -> None:
        """``options``: inductor options of the compiled step (:func:`compile_options`);
        ``prefill_graphs``: with ``capture`` and ``fused``, replay the fused prefill of a
        prompt shape seen before from a graph (:meth:`_graphed_prefill`), captured into the
        memory pool ``prefill_pool()`` returns (None: a pool of each graph's own)."""
        from transformers import StaticCache

        self.model, self.batch, self.length = model, batch, length
        self.capture = capture
        self.attention = attention  # the attention function of decode steps
        # prefill and decode steps through the fused projections (one q/k/v and one gate/up
        # product a layer) instead of transformers' modeling code
        self.fused = fused
        self.splits = splits  # the Triton attention's column splits (None: its heuristic)
        # with the Triton attention: each layer's rotary embedding and cache write inside the
        # attention kernel (layers without q/k norms)
        self.fuse_rope = fuse_rope
        forward = self._fused_forward if fused is not None else self._forward
        # the decode forward, compiled when asked (prefill has other shapes and stays eager)
        self._step_forward = (torch.compile(forward, dynamic=False, options=options or None)
                              if compile_step else forward)
        device = next(model.parameters()).device
        self.column = torch.zeros(1, dtype=torch.long, device=device)  # a step's cache column
        self.cache = StaticCache(config=model.config, max_cache_len=length)
        self.ids = torch.zeros((batch, 1), dtype=torch.long, device=device)
        self.pos = torch.zeros((batch, 1), dtype=torch.long, device=device)
        self.mask = torch.zeros((batch, 1, 1, length), dtype=torch.bool, device=device)
        self.graph: Any = None
        self.logits: torch.Tensor | None = None
        # (the engine asks for them only where it captures)
        self.prefill_graphs = prefill_graphs and fused is not None
        self._prefills: dict[tuple[int, int, bool, int], _PrefillGraph] = {}
        self._prefill_pool = prefill_pool
        self._prefill_seen: set[tuple[int, int, bool, int]] = set()

    def _layers(self) -> list[Any]:
        return list(self.cache.layers)

    def _set_written(self, n: int) -> None:
        for layer in self._layers():
            if getattr(layer, "is_initialized", False):
                layer.cumulative_length.fill_(n)

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos,
                         past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1, :]

    def _fused_forward(self, ids: torch.Tensor, mask: torch.Tensor,
                       pos: torch.Tensor) -> torch.Tensor:
        """One decode step with :class:`FusedDecoder`'s fused weights, reading and writing the
        static cache's key/value tensors (column ``self.column``): the function of
        :meth:`_forward` (transformers' Llama-family decoder layer) with three products a
        layer fewer. Shapes are fixed and nothing syncs with the host, so it compiles and is
        captured like :meth:`_forward`."""
        f = self.fused
        assert f is not None
        b = ids.shape[0]
        h, hkv, d = f.h, f.hkv, f.d
        x = f.embed(ids).reshape(b, -1)
        cos, sin = f.rotary(x, pos)  # [B, 1, D] in the model's dtype
        half = d // 2
        cos = cos.reshape(b, 1, d)
        # rotate_half(x) = roll(x, D/2) * sign: the sign goes on sin
        sin = torch.cat((-sin[..., :half], sin[..., half:]), -1).reshape(b, 1, d)
        triton = self.attention == TRITON_ATTENTION_NAME
        for i, layer in enumerate(f.layers):
            cache: Any = self.cache.layers[i]
            if triton and self.fuse_rope and layer.q_norm is None:
                qkv = layer.qkv(rms_norm(x, layer.ln1))
                out = decode_attention_rope(
                    qkv[:, : h * d].view(b, hkv, h // hkv, d),
                    qkv[:, h * d:(h + hkv) * d].view(b, hkv, d),
                    qkv[:, (h + hkv) * d:].view(b, hkv, d),
                    cos.view(b, d), sin.view(b, d), self.column, cache.keys, cache.values,
                    mask, layer.scaling, self.splits)
            else:
                qk, v = layer.rotated_qkv(x, cos, sin, h, hkv, d)
                cache.keys.index_copy_(2, self.column, qk[:, h:].reshape(b, hkv, 1, d))
                cache.values.index_copy_(2, self.column, v.reshape(b, hkv, 1, d))
                q = qk[:, :h].reshape(b, hkv, h // hkv, d)
                if triton:
                    out = decode_attention(q, cache.keys, cache.values, mask, layer.scaling,
                                           self.splits)
                else:
                    out = F.scaled_dot_product_attention(q, cache.keys, cache.values,
                                                         attn_mask=mask, scale=layer.scaling)
            # the residual is added after the product's own rounding, as transformers' layer
            # (and so the trainer) does: one addmm would round once, and the rollout's
            # log-probs would drift from the trainer's (H200 anchor: mismatch 0.0084 -> 0.0094)
            x = x + layer.o(out.reshape(b, h * d))
            x = x + layer.down(layer.gated(x))
        return f._logits(rms_norm(x, f.norm))

    def prefill(self, ids: torch.Tensor, prompt_mask: torch.Tensor, pos: torch.Tensor,
                distinct: torch.Tensor | None = None,
                rows: torch.Tensor | None = None, prefix: int = 0) -> torch.Tensor:
        """Write the left-padded prompts ``ids`` [B, W] (``prompt_mask`` [B, W], 1 = token).

        With ``distinct`` [U] (one batch row per distinct prompt) and ``rows`` [B] (batch row
        i holds the prompt of ``distinct[rows[i]]``), only the distinct prompts go through the
        model (into a dynamic cache of U rows) and their keys and values are written to every
        row holding them: a group's samples share their prompt, so a rollout of 16 prompts x 8
        samples computes 16 rows, not 128."""
        width = ids.shape[1]
        self._set_written(0)
        valid = torch.zeros((self.batch, self.length), dtype=torch.bool, device=ids.device)
        valid[:, :width] = prompt_mask.bool()
        self.mask.copy_(valid[:, None, None, :])
        if self.fused is not None:
            return self._fused_prefill(ids, valid[:, :width], pos, distinct, rows, prefix)
        q = torch.arange(width, device=ids.device)
        if distinct is None or rows is None:
            k = torch.arange(self.length, device=ids.device)
            causal = k.unsqueeze(0) <= q.unsqueeze(1)  # [W, L]
            mask = causal.unsqueeze(0) & valid.unsqueeze(1)  # [B, W, L]
            with attention_implementation(self.model, "sdpa"):
                return self._forward(ids, mask.unsqueeze(1), pos)
        from transformers import DynamicCache

        causal = q.unsqueeze(0) <= q.unsqueeze(1)  # [W, W]
        mask = causal.unsqueeze(0) & valid[:, :width].index_select(0, distinct).unsqueeze(1)
        cache: Any = DynamicCache()
        with attention_implementation(self.model, "sdpa"):
            out = self.model(input_ids=ids.index_select(0, distinct), attention_mask=mask.unsqueeze(1),
                             position_ids=pos.index_select(0, distinct), past_key_values=cache,
                             use_cache=True, logits_to_keep=1)
        # the static layers' own update: it allocates them on first use and advances their
        # write position, as the full prefill's forward would
        for static, layer in zip(self._layers(), cache.layers, strict=True):
            static.update(layer.keys.index_select(0, rows), layer.values.index_select(0, rows))
        return out.logits[:, -1, :].index_select(0, rows)

    def _fused_prefill(self, ids: torch.Tensor, valid: torch.Tensor, pos: torch.Tensor,
                       distinct: torch.Tensor | None, rows: torch.Tensor | None,
                       prefix: int = 0) -> torch.Tensor:
        """:meth:`prefill` through the fused projections: transformers' forward cost the
        SmolLM2 example's prefill ~30 ms of host time a rollout (H100 profile, 2026-12-06),
        several times the fused layers' launches."""
        assert self.fused is not None
        if distinct is not None and rows is not None:
            ids, valid, pos = (t.index_select(0, distinct) for t in (ids, valid, pos))
        else:
            rows = None
        if self.prefill_graphs:
            return self._graphed_prefill(ids, valid, pos, rows, prefix)
        return self._prefill_body(ids, valid, pos, rows, prefix)

    def _prefill_body(self, ids: torch.Tensor, valid: torch.Tensor, pos: torch.Tensor,
                      rows: torch.Tensor | None, prefix: int = 0) -> torch.Tensor:
        """The fused prefill of ``ids`` [U, W] into the static cache (rows ``rows`` [B] of
        the U computed ones; None: U = B; the first ``prefix`` columns computed once): the
        last position's logits [B, V]. Nothing in it syncs with the host, so it can be
        captured."""
        assert self.fused is not None
        # the mask always (an unpadded batch's is all true): asking would sync with the host
        logits, keys, values = self.fused.prompt_cache(ids, pos, valid, prefix)
        for static, k, v in zip(self._layers(), keys, values, strict=True):
            if rows is not None:
                k, v = k.index_select(0, rows), v.index_select(0, rows)
            static.update(k, v)
        return logits if rows is None else logits.index_select(0, rows)

    def _graphed_prefill(self, ids: torch.Tensor, valid: torch.Tensor, pos: torch.Tensor,
                         rows: torch.Tensor | None, prefix: int = 0) -> torch.Tensor:
        """:meth:`_prefill_body` replayed from a CUDA graph of its shape (U prompts, width W,
        shared or not, common prefix). A shape runs eagerly at its first sight (which also
        allocates the static cache), is captured at its second and replayed from then on, up
        to ``PREFILL_GRAPHS`` shapes of at most ``PREFILL_GRAPH_TOKENS`` prompt tokens (U x W);
        the rest stay eager. The eager prefill of the SmolLM2 example (16 prompts of ~40
        tokens, 30 layers) was ~25 operations a layer, ~20 ms of an H100 host's time against
        ~1 ms of kernels; the graphs take its rollout from 0.128-0.133 s to 0.110-0.111 s."""
        key = (ids.shape[0], ids.shape[1], rows is not None, prefix)
        graph = self._prefills.get(key)
        if graph is None:
            ready = all(getattr(layer, "is_initialized", False) for layer in self._layers())
            kept = len(self._prefills) < PREFILL_GRAPHS and ids.numel() <= PREFILL_GRAPH_TOKENS
            if key not in self._prefill_seen or not ready or not kept:
                self._prefill_seen.add(key)
                return self._prefill_body(ids, valid, pos, rows, prefix)
            try:
                graph = self._capture_prefill(ids, valid, pos, rows, prefix)
            except torch.OutOfMemoryError as e:
                self._stop_prefill_graphs(f"{ids.shape[0]} x {ids.shape[1]}", e)
                return self._prefill_body(ids, valid, pos, rows, prefix)
            self._prefills[key] = graph
        return graph.replay(ids, valid, pos, rows)

    def _stop_prefill_graphs(self, shape: str, error: torch.OutOfMemoryError) -> None:
        """A capture that ran out of device memory ends this decoder's prefill graphs: the
        graphs are released and its prefills run eagerly from here (a rollout is never lost
        to an optimisation), with a warning."""
        self.prefill_graphs = False
        self._prefills.clear()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        first = str(error).split("\n")[0][:300]
        warnings.warn(f"rollout.prefill_graphs: capturing the prefill of {shape} prompt tokens "
                      f"ran out of device memory ({first}); this batch shape's prefills run "
                      "eagerly from here", stacklevel=4)

    def _capture_prefill(self, ids: torch.Tensor, valid: torch.Tensor, pos: torch.Tensor,
                         rows: torch.Tensor | None, prefix: int) -> _PrefillGraph:
        """Inputs copied into buffers of their own, then :meth:`_PrefillGraph.capture` of
        :meth:`_prefill_body` over them; its warm-up advances each layer's write position,
        which is put back before the capture (the replay advances it again)."""
        graph = _PrefillGraph(ids, valid, pos, rows)
        written = [layer.cumulative_length.clone() for layer in self._layers()]

        def rewind() -> None:
            for layer, n in zip(self._layers(), written, strict=True):
                layer.cumulative_length.copy_(n)

        try:
            graph.capture(lambda: self._prefill_body(graph.ids, graph.valid, graph.pos,
                                                     graph.rows, prefix), rewind,
                          None if self._prefill_pool is None else self._prefill_pool())
        except torch.OutOfMemoryError:
            rewind()  # (the warm-up may have advanced the write positions)
            raise
        return graph

    def step(self, next_ids: torch.Tensor, pos: torch.Tensor, column: int) -> torch.Tensor:
        """Logits [B, V] after feeding ``next_ids`` [B, 1] at positions ``pos`` [B, 1]; the
        token goes to cache column ``column`` (= prompt width + step)."""
        self.ids.copy_(next_ids)
        self.pos.copy_(pos)
        self.mask[..., column] = True
        self.column.fill_(column)
        if not self.capture:
            with attention_implementation(self.model, self.attention):
                return self._step_forward(self.ids, self.mask, self.pos)
        if self.graph is None:
            self._capture(column)
        self.graph.replay()
        assert self.logits is not None
        return self.logits

    def _capture(self, column: int) -> None:
        """Warm up on a side stream (this writes one throwaway entry at ``column``, which the
        replay overwrites), rewind the write position, then capture one step."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), attention_implementation(self.model, self.attention):
            for _ in range(2):  # (the first compiles, when compiling)
                self._set_written(column)
                self._step_forward(self.ids, self.mask, self.pos)
        torch.cuda.current_stream().wait_stream(stream)
        self._set_written(column)
        graph = torch.cuda.CUDAGraph()
        with cuda_graph_capture(graph), attention_implementation(self.model, self.attention):
            self.logits = self._step_forward(self.ids, self.mask, self.pos)
        self.graph = graph


class _PrefillGraph:
    """One prompt shape's captured prefill: its input buffers, graph and logits."""

    def __init__(self, ids: torch.Tensor, valid: torch.Tensor, pos: torch.Tensor,
                 rows: torch.Tensor | None) -> None:
        self.ids, self.valid, self.pos = ids.clone(), valid.clone(), pos.clone()
        self.rows = None if rows is None else rows.clone()
        self.graph: Any = None
        self.logits: torch.Tensor | None = None

    def capture(self, body: Callable[[], torch.Tensor], rewind: Callable[[], None],
                pool: Any = None) -> None:
        """``body()`` (the prefill over this object's buffers) once on a side stream, which
        also writes the cache entries the replay writes again; ``rewind()``; then captured
        into memory pool ``pool`` (None: one of its own)."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            body()
        torch.cuda.current_stream().wait_stream(stream)
        rewind()
        self.graph = torch.cuda.CUDAGraph()
        with cuda_graph_capture(self.graph, pool):
            self.logits = body()

    def replay(self, ids: torch.Tensor, valid: torch.Tensor, pos: torch.Tensor,
               rows: torch.Tensor | None) -> torch.Tensor:
        """The logits [B, V] of these inputs (the graph's own tensor: read it before the
        next replay)."""
        self.ids.copy_(ids)
        self.valid.copy_(valid)
        self.pos.copy_(pos)
        if self.rows is not None and rows is not None:
            self.rows.copy_(rows)
        self.graph.replay()
        assert self.logits is not None
        return self.logits


class StaticDecoders:
    """The decoders of one engine, by (batch, cache length)."""

    def __init__(self, capture: bool, compile_step: bool = False,
                 decode_attention: str = "sdpa", splits: int | None = None,
                 fuse_rope: bool = False, options: dict[str, Any] | None = None,
                 prefill_graphs: bool = False) -> None:
        """``decode_attention``: ``"sdpa"`` or ``"triton"`` (resolved by the caller);
        ``splits``: the Triton kernel's column splits in fused decode steps (None: its
        heuristic); ``fuse_rope``: the rotary embedding and cache write in that kernel;
        ``options``: inductor options of compiled steps (:func:`compile_options`);
        ``prefill_graphs``: fused prefills of a shape seen before replayed from a graph."""
        self.capture = capture
        self.prefill_graphs = prefill_graphs and capture
        # one memory pool for every prefill graph of the engine: its generate calls run one
        # at a time (the engine's lock) and a replayed prefill's one output read outside the
        # graph, its logits, is read before the next prefill replays (keys and values go to
        # the static caches, outside the pool), so the shapes' graphs may reuse each other's
        # memory: the engine holds its largest prefill's activations once, not each shape's
        self._prefill_pool: Any = None
        self.options = dict(options or {})
        self.splits = splits
        self.fuse_rope = fuse_rope
        self.compile_step = compile_step
        self.attention = TRITON_ATTENTION_NAME if decode_attention == "triton" else ATTENTION_NAME
        self._by_shape: dict[tuple[int, int], StaticDecoder] = {}
        _register_attention()

    def get(self, model: Any, batch: int, width: int, max_new: int,
            fused: FusedDecoder | None = None) -> StaticDecoder:
        """The decoder of this batch size and cache length; with ``fused`` (the engine's
        :class:`FusedDecoder` of ``model``) its decode steps use the fused projections."""
        key = (batch, cache_length(width, max_new))
        dec = self._by_shape.get(key)
        if dec is None or dec.model is not model or dec.fused is not fused:
            dec = StaticDecoder(model, key[0], key[1], self.capture, self.compile_step,
                                self.attention, fused, self.splits, self.fuse_rope,
                                self.options, self.prefill_graphs, self.prefill_pool)
            self._by_shape[key] = dec
        return dec

    def prefill_pool(self) -> Any:
        """The memory pool the prefill graphs of this engine are captured into (made at the
        first capture)."""
        if self._prefill_pool is None:
            self._prefill_pool = torch.cuda.graph_pool_handle()
        return self._prefill_pool

    def clear(self) -> None:
        self._by_shape.clear()
        self._prefill_pool = None
        if self.capture and torch.cuda.is_available():
            torch.cuda.empty_cache()
