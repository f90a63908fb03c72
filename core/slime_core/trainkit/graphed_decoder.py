"""The training forward's decoder replayed from CUDA graphs at bucketed shapes (``train.cuda_graphs``).

A small model's GPU training step is bound by kernel launches, not by the device (SmolLM2-135M
on an H100: ~10,000 kernels a step, the GPU busy a quarter of the time). Capturing the
decoder's forward and backward once per shape and replaying them costs one launch each way.

Shapes: the right-padded batch ``ids`` [R, W] is padded further, rows to a multiple of
``row_multiple`` and columns to a multiple of ``width_multiple`` (``pad_id``; the rows are
right-padded, so under the causal mask no real position sees the added ones, and their
outputs are never read), and each (rows, columns) bucket is captured on first use by
:func:`capture_accumulating`, up to ``max_graphs`` buckets; a shape beyond them runs eagerly
(said once).

The shared-prefix forward (``train.shared_prefix``: a group's prompt computed once, its
responses attending to its cached keys and values) is captured the same way by
:meth:`GraphedDecoder.two_pass`, bucketed by (prompts, prompt width, responses, response width)
(:meth:`GraphedDecoder.prefix_bucket`), its attention masks built whole from tensors
(:func:`shared_prefix.two_pass` with ``full_masks``) since transformers' mask building reads the
masks on the host.

Gradients: the captured backward adds into the parameters' own ``.grad`` tensors in place, as
eager autograd does once they are allocated, so a replay hands autograd no gradient to
accumulate (``torch.cuda.make_graphed_callables`` returns each parameter's gradient from the
graph's buffers, and autograd then adds each into ``.grad``: an operator and a kernel a
parameter and micro-batch, 272 for SmolLM2, and a gradient-sized buffer a bucket); the plain
linear layers add theirs in the weight-gradient product itself
(:mod:`~slime_core.trainkit.accumulating_linear`).

What the caller must keep to:

* one micro-batch at a time: forward, then its backward, before the next forward. All buckets
  share one memory pool, so a bucket's activations may sit where another's were captured;
  interleaving two forwards before their backwards would overwrite them.
* :meth:`zero_grads` instead of ``optimizer.zero_grad(set_to_none=True)``, before the first
  forward: a captured backward adds into the ``.grad`` tensors that were allocated when it
  was captured, so they must exist then and stay the same tensors (a replay finding one
  replaced raises).
* the decoder's parameters stay the same tensors (optimizers update them in place), and no
  hooks are added to the decoder while graphs exist (they would not run on replay).

Compiled (``train.compile`` with ``train.cuda_graphs``): what a bucket captures is the
decoder compiled by ``torch.compile`` at that bucket's fixed shapes, so one replay launches
inductor's fused kernels (the norms, activations, residual additions and their backwards in a
few kernels a layer instead of dozens) without their launch cost. The compilation is paid at
the bucket's capture (its warm-up passes). Its parameters' gradients are added into ``.grad``
by autograd's own accumulation, captured with the rest (the accumulating linear layers, a
custom autograd function writing ``.grad``, are not traced by the compiler).

Memory: each captured bucket keeps its own input, output and output gradient; the
activations are shared through the pool. :func:`graph_budget`
bounds the buckets by a share of the device's memory. The pool cannot use the memory the
caching allocator keeps for eager tensors, so that cache is returned to the device before each
capture. A capture that still runs out of memory (a large model beside an engine's cache:
Qwen2-1.5B's anchor on an 80 GB H100, whose one-pass forward at 16 x 1040 tokens alone did not
fit) ends the graphs: they and their pool are released, :class:`CaptureOutOfMemory` is raised
for the caller to redo the micro-batch in a form of its own, and later calls run eagerly. So
does a capture that fits but leaves less free than ``reserve`` says the rest of the step needs:
the pool keeps its activations' memory after the backward, where eager autograd frees it for
the optimizer's step (Qwen2-1.5B's anchor on an 80 GB H100: the pool held 46.8 GB after the
first capture, and AdamW's first step, which then made its moment buffers, ran out of memory).
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, cast

import torch

from slime_core.trainkit.accumulating_linear import accumulating_linears
from slime_core.trainkit.capture import cuda_graph_capture
from slime_core.trainkit.shared_prefix import two_pass

GraphMaker = Callable[..., Any]
Compiler = Callable[[torch.nn.Module], torch.nn.Module]


def settings_conflict(train: Any) -> str | None:
    """Why the ``[train]`` settings ``train`` exclude ``train.cuda_graphs`` (None when they do
    not): what the trainer refuses and what its ``auto`` resolves off for, in one place."""
    if not train.fused_head:
        return "needs train.fused_head = true"
    if train.gradient_checkpointing:
        return "is not combined with train.gradient_checkpointing"
    if train.routing_replay != "off" or train.moe_aux_loss_coef or train.moe_z_loss_coef:
        return ("is not combined with train.routing_replay or the router losses (they read "
                "each forward's routing, which a replayed graph does not report)")
    return None


def trainable_bytes(module: torch.nn.Module) -> int:
    """Bytes of ``module``'s trainable parameters: the unit :func:`graph_budget` counts
    buckets in."""
    return sum(int(p.numel()) * int(p.element_size()) for p in module.parameters()
               if p.requires_grad)


def graph_budget(decoder: torch.nn.Module, device_bytes: int, share: float = 0.125,
                 most: int = 8) -> int:
    """How many buckets to capture: at most ``most``, and as many as keep a gradient-sized
    buffer a bucket within ``share`` of the device's ``device_bytes`` (0: not even one). A
    bucket of :func:`capture_accumulating` keeps no gradient buffer of its own (its input,
    output and output gradient, and activations in the shared pool), so the bound is
    conservative: it was sized for :func:`torch.cuda.make_graphed_callables`' buckets."""
    per_bucket = max(trainable_bytes(decoder), 1)
    return max(0, min(most, int(device_bytes * share) // per_bucket))


def _cuda_free_bytes(device: torch.device) -> int:
    """Free memory of the CUDA ``device`` once the caching allocator's free blocks are back."""
    torch.cuda.empty_cache()
    return int(torch.cuda.mem_get_info(device)[0])


class CaptureOutOfMemory(RuntimeError):
    """A bucket's capture ran out of device memory. The decoder has released its graphs and
    their pool and runs eagerly from then on; the call that raised this computed nothing."""


class ReplacedGradients(RuntimeError):
    """A parameter's ``.grad`` is not the tensor a captured backward adds into."""


def _trainable(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in module.parameters() if p.requires_grad]


def _allocated_grads(params: list[torch.nn.Parameter]) -> list[torch.Tensor | None]:
    """The gradients a capture of ``params`` adds into (each must be allocated)."""
    grads: list[torch.Tensor | None] = [p.grad for p in params]
    if any(g is None for g in grads):
        raise ReplacedGradients(
            "train.cuda_graphs: capturing needs the trainable parameters' gradients allocated "
            "(GraphedDecoder.zero_grads(model) before the first forward)")
    return grads


def _check_grads(module: torch.nn.Module, params: list[torch.nn.Parameter],
                 grads: list[torch.Tensor | None]) -> None:
    bad = [i for i, (p, g) in enumerate(zip(params, grads, strict=True)) if p.grad is not g]
    if bad:
        names = {id(p): n for n, p in module.named_parameters()}
        raise ReplacedGradients(
            f"train.cuda_graphs: the gradients of {len(bad)} parameter(s) (first: "
            f"{names.get(id(params[bad[0]]), '?')}) are not the tensors the captured backward "
            "adds into; allocate and clear them with GraphedDecoder.zero_grads(model), not "
            "optimizer.zero_grad(set_to_none=True)")


def capture_accumulating(module: torch.nn.Module, sample_args: tuple[torch.Tensor, ...],
                         pool: Any = None, warmup: int = 2,
                         fuse_linears: bool = True) -> Callable[..., torch.Tensor]:
    """``module``'s forward and backward at the shapes of ``sample_args`` captured as two CUDA
    graphs (in the memory pool ``pool``); returns the callable that replays them, a drop-in
    for :func:`torch.cuda.make_graphed_callables` of one module whose backward adds the
    trainable parameters' gradients into their ``.grad`` in place (captured with them: they
    must be allocated, and stay the same tensors; a replay finding one replaced raises
    :class:`ReplacedGradients`). The inputs get no gradient. ``warmup``: forward and backward
    passes on a side stream before the capture (library initialisation, autotuning); their
    gradients are discarded. ``fuse_linears``: the plain linear layers add their weight
    gradients into ``.grad`` in the weight-gradient product itself
    (:func:`~slime_core.trainkit.accumulating_linear.accumulating_linears`), so the graph holds
    no separate addition for them."""
    params = _trainable(module)
    grads = _allocated_grads(params)
    static_in = tuple(a.clone() for a in sample_args)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with accumulating_linears(module) if fuse_linears else nullcontext():
        with torch.cuda.stream(side), torch.enable_grad():
            for _ in range(warmup):
                # (the fused linears add the zero output gradient's products into .grad)
                out = module(*static_in)
                torch.autograd.grad(out, params, torch.zeros_like(out), allow_unused=True)
                del out
        torch.cuda.current_stream().wait_stream(side)
        forward, backward = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with cuda_graph_capture(forward, pool=pool), torch.enable_grad():
            out = module(*static_in)
    static_grad = torch.empty_like(out)
    with cuda_graph_capture(backward, pool=pool):
        # AccumulateGrad with allocated gradients and grad mode off: `grad += new`, captured
        torch.autograd.backward(out, static_grad, inputs=params)
    static_out = out.detach()
    # a leaf that makes the replay's output require grad (the inputs are token ids)
    anchor = torch.empty((), device=static_grad.device, requires_grad=True)

    class _Replay(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, _anchor: torch.Tensor, *args: torch.Tensor) -> torch.Tensor:
            for buf, a in zip(static_in, args, strict=True):
                buf.copy_(a)
            forward.replay()
            return static_out.detach()  # a new tensor object over the graph's output

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> Any:
            _check_grads(module, params, grads)
            static_grad.copy_(grad)
            backward.replay()
            return (None, *([None] * len(static_in)))

    def replay(*args: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, _Replay.apply(anchor, *args))

    return replay


class _Forward(torch.nn.Module):
    """The decoder as ``ids -> hidden states``: the callable the graphs capture (its own
    module, so the capture replaces this wrapper's forward and not the decoder's)."""

    def __init__(self, decoder: torch.nn.Module) -> None:
        super().__init__()
        self.decoder = decoder

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.decoder(input_ids=ids, use_cache=False)[0]


def _shape_text(shape: tuple[Any, ...]) -> str:
    if shape[0] == "prefix":
        return (f"{shape[1]} x {shape[2]} prompt and {shape[3]} x {shape[4]} response tokens "
                "(shared prefix)")
    return f"{shape[0]} x {shape[1]} tokens"


class _TwoPass(torch.nn.Module):
    """The shared-prefix forward's two passes as one callable of tensors
    (:func:`shared_prefix.two_pass` with full masks): what a prefix bucket's graphs capture."""

    def __init__(self, decoder: torch.nn.Module) -> None:
        super().__init__()
        self.decoder = decoder

    def forward(self, ids1: torch.Tensor, mask1: torch.Tensor, ids2: torch.Tensor,
                mask2: torch.Tensor, pos2: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return two_pass(self.decoder, ids1, mask1, ids2, mask2, pos2, rows, full_masks=True)


class GraphedDecoder:
    """``ids`` [R, W] -> the decoder's hidden states [R, W, H], forward and backward replayed
    from a CUDA graph of the bucket (see the module docstring); :meth:`two_pass`: the
    shared-prefix forward's two passes likewise."""

    def __init__(self, decoder: torch.nn.Module, pad_id: int, row_multiple: int = 16,
                 width_multiple: int = 16, max_graphs: int = 8,
                 make_graphed: GraphMaker | None = None,
                 compiler: Compiler | None = None,
                 reserve: Callable[[], int] | None = None,
                 free_bytes: Callable[[torch.device], int] | None = None) -> None:
        """``make_graphed(module, sample_args, pool=..., fuse_linears=...)`` captures (default
        :func:`capture_accumulating`; tests give a maker that captures nothing).
        ``compiler``: what each bucket's module goes through before its capture (the trainer's
        ``torch.compile(module, dynamic=False)`` under ``train.compile``; None: captured as
        it runs eagerly). Shapes past the buckets run the decoder eagerly, uncompiled.
        ``reserve()``: device bytes that must stay free after a capture (the trainer's: what
        its optimizer's next step allocates), read after each capture; a capture leaving less
        ends the graphs as one out of memory does. ``free_bytes(device)``: the free device
        memory then (default: the CUDA driver's, after the caching allocator's free blocks
        went back to it)."""
        self.decoder, self.pad_id = decoder, int(pad_id)
        self.compiler = compiler
        self.row_multiple, self.width_multiple = row_multiple, width_multiple
        self.max_graphs = max_graphs
        self._make = make_graphed or capture_accumulating
        self.reserve = reserve
        self._free_bytes = free_bytes or _cuda_free_bytes
        # (rows, columns) of the one-pass forward; ("prefix", G, W1, R, T) of the two passes
        self._graphs: dict[tuple[Any, ...], Any] = {}
        self._pool: Any = None
        self._warned = False
        self.eager_calls = 0  # shapes beyond max_graphs, or every shape after an out-of-memory
        self.given_up: str | None = None  # why the graphs ended (a capture out of memory)

    @property
    def buckets(self) -> list[tuple[Any, ...]]:
        """The shapes captured so far: (rows, columns) of the one-pass forward, ("prefix",
        prompts, prompt width, responses, response width) of the two passes."""
        return list(self._graphs)

    def bucket(self, rows: int, width: int) -> tuple[int, int]:
        r, w = self.row_multiple, self.width_multiple
        return -(-rows // r) * r, -(-width // w) * w

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        """The hidden states of ``ids``: replayed from its bucket's graph (captured on first
        use), or eagerly past ``max_graphs`` buckets or once a capture ran out of memory."""
        rows, width = (int(n) for n in ids.shape)
        shape = self.bucket(rows, width)
        graphed = self._graphs.get(shape)
        if graphed is None:
            if self.given_up is not None:
                self.eager_calls += 1
                return _Forward(self.decoder)(ids)
            if len(self._graphs) >= self.max_graphs:
                self.eager_calls += 1
                self._say_eager(f"a micro-batch of {rows} x {width} tokens (bucket "
                                f"{shape[0]} x {shape[1]})")
                return _Forward(self.decoder)(ids)
            graphed = self._capture(shape, ids.device)
        padded = ids.new_full(shape, self.pad_id)
        padded[:rows, :width] = ids
        return graphed(padded)[:rows, :width]

    def prefix_bucket(self, shape: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
        """The bucket of a shared-prefix layout's (prompts, prompt width, responses, response
        width): prompts to a multiple of 4, the others as :meth:`bucket` rounds them."""
        g, w1, r, t = shape
        (rows, w1), (_, t) = self.bucket(r, w1), self.bucket(1, t)
        return -(-g // 4) * 4, w1, rows, t

    def two_pass(self, *layout: torch.Tensor) -> torch.Tensor:
        """:func:`shared_prefix.two_pass` of a layout at a :meth:`prefix_bucket` shape (ids1,
        mask1, ids2, mask2, pos2, rows), replayed from the bucket's graphs (captured on first
        use), or eagerly as :meth:`__call__` falls back."""
        ids1, _, ids2 = layout[:3]
        key = ("prefix", *ids1.shape, *ids2.shape)
        graphed = self._graphs.get(key)
        if graphed is None:
            if self.given_up is not None or len(self._graphs) >= self.max_graphs:
                self.eager_calls += 1
                if self.given_up is None:
                    self._say_eager(f"a shared-prefix layout {tuple(key[1:])}")
                return cast(torch.Tensor, _TwoPass(self.decoder)(*layout))
            graphed = self._capture(key, ids1.device, _TwoPass(self.decoder), layout)
        return cast(torch.Tensor, graphed(*layout))

    def _say_eager(self, what: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(f"train.cuda_graphs: {what} is past the {self.max_graphs} captured "
                          f"shapes ({', '.join(sorted(map(_shape_text, self._graphs)))}); "
                          "such micro-batches run eagerly", stacklevel=3)

    def _capture(self, shape: Any, device: torch.device, module: torch.nn.Module | None = None,
                 sample: tuple[torch.Tensor, ...] | None = None) -> Any:
        """The bucket's graphed callable (:class:`CaptureOutOfMemory` when the capture runs out
        of memory): of the one-pass forward at ``shape`` (rows, columns), or of ``module`` at
        the shapes of ``sample``."""
        if device.type == "cuda":
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            torch.cuda.empty_cache()  # the eager cache's free blocks, for the graph's pool
        if module is None or sample is None:
            module = _Forward(self.decoder)
            sample = (torch.full(shape, self.pad_id, dtype=torch.long, device=device),)
        if self.compiler is not None:
            module = self.compiler(module)
        try:
            # (a compiled module's linear layers accumulate through autograd: the compiler
            # does not trace the accumulating linears' writes into .grad)
            graphed = self._make(module, sample, pool=self._pool,
                                 fuse_linears=self.compiler is None)
        except torch.OutOfMemoryError as e:
            failure = str(e).split("\n")[0][:300]
        except ReplacedGradients:
            raise
        except RuntimeError as e:  # e.g. a host sync inside the model's forward
            raise RuntimeError(
                f"train.cuda_graphs: capturing the decoder's forward and backward at "
                f"{_shape_text(shape)} failed ({e}); set train.cuda_graphs = false"
            ) from e
        else:
            short = self._short_of_reserve(device)  # (measured with this graph's pool held)
            if short is None:
                self._graphs[shape] = graphed
                return graphed
            failure = short
            del graphed
        # outside the handler: the error's traceback holds the warm-up's frames (activations,
        # gradients) in a reference cycle that only a collection frees
        self._give_up(shape, device, failure)
        raise CaptureOutOfMemory(f"train.cuda_graphs: {self.given_up}")

    def _short_of_reserve(self, device: torch.device) -> str | None:
        """Why the memory left after a capture is too little for ``reserve`` (None: enough)."""
        if self.reserve is None:
            return None
        need, free = int(self.reserve()), int(self._free_bytes(device))
        if free >= need:
            return None
        return (f"the graphs' memory pool leaves {free / 2**30:.1f} GB free, under the "
                f"{need / 2**30:.1f} GB the optimizer's step needs")

    def _give_up(self, shape: tuple[Any, ...], device: torch.device, failure: str) -> None:
        """Drop every captured graph and their pool (the memory goes back to eager tensors)."""
        kept = sorted(map(_shape_text, self._graphs))
        self._graphs.clear()
        self._pool = None
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        before = (f"the {len(kept)} graphs captured before ({', '.join(kept)}) are released"
                  if kept else "no graph is kept")
        self.given_up = (f"capturing the decoder at {_shape_text(shape)} ran out of "
                         f"device memory ({failure}); {before}")

    def zero_grads(self, model: torch.nn.Module | None = None) -> None:
        """Every trainable decoder parameter's gradient allocated and zero (see the module
        docstring); with ``model`` (the causal LM around the decoder), its other parameters'
        gradients set to None, so that this replaces ``optimizer.zero_grad``. Gradients
        allocated once are kept and zeroed in place: the per-step allocation and fill (one
        each a parameter) were host time of a small model's step."""
        params = _trainable(self.decoder)
        for p in params:
            if p.grad is None:
                p.grad = torch.empty_like(p)
        torch._foreach_zero_([cast(torch.Tensor, p.grad) for p in params])
        if model is not None:
            mine = {id(p) for p in params}
            for p in model.parameters():
                if id(p) not in mine:
                    p.grad = None
