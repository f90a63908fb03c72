"""The ``local`` rollout engine: a transformers causal LM in this process.

Implements :class:`slime_hookspecs.RolloutEngine`. Generation runs the batched loop of
:mod:`slime_std.engine.decoding` (own loop, not ``model.generate``, so log-probs follow the
``SamplingParams`` convention exactly); Llama-family models run their forward passes through
:mod:`slime_std.engine.fused_decoder` (``rollout.fused_decoder``, on by default; the reason
another model is not supported is in ``LocalEngine.fused_unsupported``); on a CPU their
products read weights packed for oneDNN (``rollout.packed_weights``,
:mod:`slime_std.engine.packed_weights`), packed again after each weight update. Requests with
different sampling settings share one batch; rows with equal (temperature, top_k, top_p,
seed) are sampled together.

Randomness: a request with ``seed`` draws from its own ``torch.Generator`` seeded with it
(requests sharing a seed in one call share that stream, so they still differ from each other;
the same call repeated gives the same outputs). Requests without a seed draw from the engine's
generator, seeded once with ``run.seed + engine_index``.

Stop conditions: ``stop_token_ids``, plus the tokenizer's and the model's generation-config
EOS ids unless ``ignore_eos`` (finish ``stop``, token kept); stop strings, found in the decoded
text of the generated ids (finish ``stop``, tokens kept up to the one that completed the
string); ``max_new_tokens`` (finish ``length``); :meth:`abort` (finish ``abort``).
``text`` is the generated ids decoded with ``skip_special_tokens=True`` (empty without a
tokenizer); generated text is never re-tokenized.

:meth:`abort` ends every ``generate`` call that has started (including one still waiting for
the lock): unfinished requests keep their tokens so far and finish ``abort``, later chunks of
the call come back empty. Calls made after it are not affected.

Mixture-of-experts models (Qwen3-MoE, Qwen2-MoE, OLMoE, Mixtral) run through the transformers
forward (no fused decoder, no CUDA graphs: their experts' dispatch is data-dependent). With
``train.routing_replay = "rollout"`` the engine records the experts each token was routed to
(``GenerateOutput.routed_experts``, :class:`slime_core.api.RoutingControl`).

With ``profile.rollout`` the engine records its phases per generate call, weight updates
and its start-up load (:mod:`slime_std.engine.profile`).

Thread safety: ``generate``, ``update_weights``, ``sleep``, ``wake_up`` and ``shutdown`` take
one lock; ``abort``, ``health`` and ``weight_version`` never wait for it. Under a schedule that
generates while the trainer trains (``run.rollout_mode`` other than ``sync``, local executor),
a GPU engine generates on a CUDA stream of its own, of high priority, with
``rollout.engine_stream`` (off: experimental, see its description), so the two overlap on the
device too.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from typing import Any, cast

import torch
from slime_core.api import (
    RoutingControl,
    check_generate_inputs,
    choose_kernel,
    config_moe_shape,
    load_causal_lm,
    load_tokenizer,
    resolve_dtype,
    rollout_dtype,
    routes_to_record,
)
from slime_hookspecs import Config, GenerateOutput, SamplingParams

from slime_std.engine import packed_weights
from slime_std.engine.decoding import Request, decode
from slime_std.engine.floors import config_head_dim
from slime_std.engine.fused_decoder import FusedDecoder, unsupported
from slime_std.engine.kernels.decode_attention import head_dim_unsupported
from slime_std.engine.output_head import stream_output_head
from slime_std.engine.profile import EngineProfile, PhaseClock
from slime_std.engine.rounding import NoisePool, stochastic_bf16
from slime_std.engine.sampler import GroupSampler, SamplingKey
from slime_std.engine.static_decode import StaticDecoders, compile_options
from slime_std.engine.stopping import StopStrings


def _engine_device(accelerator: Any, engine_index: int) -> torch.device:
    if accelerator is None:
        return torch.device("cpu")
    count = max(1, int(accelerator.device_count()))
    return torch.device(accelerator.device(engine_index % count))


def _engine_weights(config: Config, model: torch.nn.Module, weights: Mapping[str, Any],
                    version: int) -> Mapping[str, Any]:
    """``weights`` as the engine's own tensors: ``slime_engine_weights`` (a LoRA plugin merges
    adapters into the base), else as delivered. An engine built outside a run (no plugin
    manager in the process) takes them as delivered."""
    from slime_core.api import get_manager

    try:
        pm = get_manager()
    except RuntimeError:
        return weights
    out = pm.hook.slime_engine_weights(config=config, model=model, weights=weights,
                                      version=int(version))
    return weights if out is None else out


def _one_per_target(tensors: dict[str, torch.Tensor],
                    state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``tensors`` with one name per tensor of the model: of names that share one (tied
    embeddings: ``lm_head.weight`` is ``model.embed_tokens.weight``), the last given, which
    is what copying them in turn, as ``load_state_dict`` does, leaves. One multi-tensor copy
    into the same memory twice is a race on a GPU: the copies' blocks interleave, so the
    engine would serve a mix of the two (the engine-stream GPU test caught it), and a tied
    tensor's bytes would be copied twice."""
    last: dict[tuple[int, tuple[int, ...]], str] = {}
    for name in tensors:
        target = state[name]
        last[(target.data_ptr(), tuple(target.shape))] = name
    if len(last) == len(tensors):
        return tensors
    kept = set(last.values())
    return {n: t for n, t in tensors.items() if n in kept}


def _eos_ids(tokenizer: Any, model: Any) -> list[int]:
    ids: list[int] = []
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None) if gen is not None else None
    if extra is not None:
        ids.extend(int(i) for i in (extra if isinstance(extra, (list, tuple)) else [extra]))
    return list(dict.fromkeys(ids))


class LocalEngine:
    """``LocalEngine(config, engine_index, accelerator)``; see the module docstring."""

    def __init__(self, config: Config, engine_index: int = 0, accelerator: Any = None) -> None:
        self.config = config
        self.engine_index = engine_index
        self.accelerator = accelerator
        self.device = _engine_device(accelerator, engine_index)
        # rollout.dtype: the engine may serve in another dtype than the trainer trains in
        # (bf16 beside fp32 training); a weight update's copy casts
        self.dtype = resolve_dtype(rollout_dtype(config), self.device)
        self._stochastic = (self.dtype == torch.bfloat16
                            and config.rollout.dtype_rounding == "stochastic")
        self._noise: NoisePool | None = None  # a CPU's stochastic-rounding noise
        loading = time.perf_counter()
        model = load_causal_lm(config.model, self.device, self.dtype, role="actor",
                               seed=config.run.seed)
        loaded = time.perf_counter()
        model.requires_grad_(False)
        if self.device.type == "cpu":  # same logits, faster decode-sized LM head products
            stream_output_head(model)
        self._model: torch.nn.Module | None = model
        self.tokenizer = load_tokenizer(config.model, required=False)
        self.eos_token_ids = _eos_ids(self.tokenizer, model)
        pad = getattr(self.tokenizer, "pad_token_id", None)
        self.pad_token_id = int(pad if pad is not None else (self.eos_token_ids or [0])[0])
        self.vocab_size = int(cast(Any, model).get_input_embeddings().weight.shape[0])
        # the longest prompt accepted: a longer one is refused before it reaches attention,
        # whose masks grow with its square (a 900 kB prompt asked for 810 GB)
        ctx = getattr(model.config, "max_position_embeddings", None)
        self.context_length: int | None = int(ctx) if isinstance(ctx, int) and ctx > 0 else None
        self.generate_batch_size = int(config.rollout.generate_batch_size or 0)
        # rollout.cuda_graphs: static KV cache + one CUDA graph per decode step (CUDA only;
        # the CPU keeps the dynamic cache, which drops finished rows and attends no further
        # than the longest row)
        # (`is True`: an unresolved "auto", in a config that did not go through slime_configure,
        # where slime_std/fast_path.py resolves it, stays off)
        self._static: StaticDecoders | None = None
        # MoE: routing replay records through the transformers forward; a captured graph
        # would also freeze the experts' data-dependent dispatch
        # (read from the config: a router of a family replay does not know is no error here)
        self._moe = config_moe_shape(model.config)
        self._routing: RoutingControl | None = None
        if config.train.routing_replay == "rollout":
            self._routing = RoutingControl(model)  # a model without routers fails here
        if (config.rollout.cuda_graphs is True and self.device.type == "cuda"
                and self._moe is None):
            setting = str(config.rollout.decode_attention)
            triton = choose_kernel(setting, self.device, "rollout.decode_attention")
            # a head dim the kernel cannot take ("triton" given, or an "auto" resolved without
            # the model's config.json) leaves the decode steps to SDPA, said once here rather
            # than failing mid-rollout
            why = head_dim_unsupported(config_head_dim(model.config)) if triton else None
            if why is not None:
                warnings.warn(f"rollout.decode_attention = {setting!r}: the Triton kernel "
                              f"cannot take this model ({why}); decode steps use SDPA",
                              stacklevel=2)
                triton = False
            compile_step = config.rollout.compile_decode is True
            # inductor's options only where there is a compilation to take them (a missing
            # PDL option warns, which is noise for an uncompiled step)
            options = compile_options(
                bool(config.rollout.compile_autotune),
                bool(config.rollout.compile_pdl)) if compile_step else None
            self._static = StaticDecoders(
                capture=True, compile_step=compile_step,
                decode_attention="triton" if triton else "sdpa",
                splits=int(config.rollout.decode_attention_splits) or None,
                fuse_rope=bool(config.rollout.decode_fuse_rope),
                options=options, prefill_graphs=bool(config.rollout.prefill_graphs))
        # with a compiled decode step, the full-vocabulary sampler is compiled too
        self._compile_sampler = self._static is not None and self._static.compile_step
        # rollout.sample_kernel: the full-vocabulary race as one Triton pass, where the
        # kernels run (as rollout.decode_attention)
        self._sample_kernel = choose_kernel(
            str(config.rollout.sample_kernel), self.device,
            "rollout.sample_kernel")
        # rollout.fused_decoder: Llama-family forward passes with fused projections (the
        # model's q/k/v and gate/up weights become views of the fused tensors)
        self._fused: FusedDecoder | None = None
        self.fused_unsupported: str | None = "rollout.fused_decoder is off"
        if config.rollout.fused_decoder:
            self.fused_unsupported = unsupported(model)
            self._fuse()
        # rollout.common_prefix: the prompts' common first tokens computed once (`is True`:
        # an unresolved "auto" stays off)
        self._common_prefix = config.rollout.common_prefix is True
        # rollout.packed_weights: the fused decoder's CPU products read weights packed for
        # oneDNN (`is True`: an unresolved "auto" stays off, as cuda_graphs)
        self._packed = False
        if config.rollout.packed_weights is True:
            reason = packed_weights.unsupported(self.device, self.dtype)
            if reason is not None:
                raise ValueError(f"rollout.packed_weights = true: {reason}")
            if self._fused is None:
                warnings.warn(f"rollout.packed_weights: the products stay unpacked, they are "
                              f"transformers' ({self.fused_unsupported})", stacklevel=2)
            else:
                self._packed = True
                self._fused.pack()
        # a one-step-off or fully-async rollout generates on a worker thread of this process
        # while the main thread trains
        run = config.run
        overlapping = ((run.async_rollout or run.rollout_mode != "sync")
                       and run.executor == "local")
        # rollout.async_threads: on the CPU both compete for the same cores
        self._overlap_threads = 0
        if overlapping and self.device.type == "cpu":
            self._overlap_threads = int(config.rollout.async_threads or 0)
            # a thread takes torch's process-wide count when it first asks for it; asking
            # now fixes this (constructing) thread's count before a worker changes it
            torch.get_num_threads()
        # rollout.engine_stream, on a GPU: generate on a stream of the engine's own, so that
        # the decode's kernels run beside the trainer's instead of queueing behind them on
        # the default stream. At a high priority, so that a decode step's small kernels take
        # the SMs the training's blocks free first instead of waiting behind them (the decode
        # is latency-bound, the training throughput-bound; not yet measured apart)
        self._stream: Any = None
        if overlapping and self.device.type == "cuda" and config.rollout.engine_stream:
            self._stream = torch.cuda.Stream(self.device, priority=-1)
            # the loaded and fused weights, written on this thread's stream
            self._stream.wait_stream(torch.cuda.current_stream(self.device))
        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(int(config.run.seed) + int(engine_index))
        self._version = 0
        self._lock = threading.Lock()
        self._aborts = itertools.count(1)
        self._abort_epoch = 0
        self._asleep = False
        # profile.rollout: the phases of every generate call (None: off, nothing recorded)
        self._profile = EngineProfile.from_config(config, model, self.device, self.dtype,
                                                  engine_index, moe=self._moe is not None)
        if self._profile is not None:
            self._profile.record("weight_load", loading, loaded)

    # -- generation ----------------------------------------------------------------------
    def generate(
        self, prompts: list[list[int]], params: list[SamplingParams]
    ) -> list[GenerateOutput]:
        """One output per prompt: generated ids, their log-probs, finish reason, text."""
        epoch = self._abort_epoch  # an abort() from now on ends this call
        prompts = check_generate_inputs(prompts, params, self.vocab_size, self.context_length,
                                        self.tokenizer is not None)
        if not prompts:
            return []
        with self._lock, self._on_stream():
            clock = self._profile.clock() if self._profile is not None else None
            model = self._live_model()
            version = self._version
            requests = self._requests(prompts, params)

            def aborted() -> bool:
                return self._abort_epoch != epoch

            order = list(range(len(requests)))
            cap = self.generate_batch_size or len(requests)
            if cap < len(requests):  # similar lengths together: less padding per chunk
                order.sort(key=lambda i: len(requests[i].prompt))
            results: list[Any] = [None] * len(requests)
            with torch.inference_mode(), self._threads():
                for start in range(0, len(order), cap):
                    chunk = order[start:start + cap]
                    if aborted():
                        for i in chunk:
                            results[i] = ([], [], "abort", None)
                        continue
                    outs = self._decode(model, [requests[i] for i in chunk], aborted, clock)
                    for i, out in zip(chunk, outs, strict=True):
                        routed = (routes_to_record(out.routes, self._routing.shape)
                                  if out.routes is not None and self._routing is not None
                                  else None)
                        results[i] = (out.token_ids, out.log_probs, out.finish_reason, routed)
            # under the lock (text included): a profiled call ends before an update_weights
            # can start, so the engine's spans nest on its track
            outputs = [GenerateOutput(token_ids=ids, log_probs=lps, finish_reason=reason,
                                      weight_version=version, text=self._text(ids),
                                      routed_experts=routed)
                       for ids, lps, reason, routed in results]
            if clock is not None:
                clock.finish(rows=len(requests),
                             prompt_tokens=sum(len(r.prompt) for r in requests),
                             new_tokens=sum(len(o.token_ids) for o in outputs))
        return outputs

    def _decode(self, model: torch.nn.Module, requests: list[Request],
                aborted: Any, clock: PhaseClock | None = None) -> list[Any]:
        if self._routing is None:
            return decode(model, requests, self.pad_token_id, aborted, self._new_cache,
                          self._static, self._fused, clock=clock,
                          common_prefix=self._common_prefix)
        with self._routing.recording():
            return decode(model, requests, self.pad_token_id, aborted, self._new_cache,
                          None, None, routing=self._routing, clock=clock)

    def score_tokens(self, sequences: list[list[int]], response_lengths: list[int],
                     temperature: float = 1.0) -> list[list[float]]:
        """Log-probs of the last ``response_lengths[i]`` ids of each sequence given the ids
        before them, generating nothing (what SGLang returns for ``max_new_tokens = 0`` with
        ``return_logprob`` and ``logprob_start_len = 0``). The distribution is the model's at
        ``temperature`` (greedy 0 counts as 1), as for generated tokens. Used by on-policy
        distillation's engine mode to score the student's tokens with a teacher."""
        if len(sequences) != len(response_lengths):
            raise ValueError(f"score_tokens: {len(sequences)} sequences but "
                             f"{len(response_lengths)} response lengths")
        temp = float(temperature) if temperature and temperature > 0 else 1.0
        for ids, n in zip(sequences, response_lengths, strict=True):
            if not 0 <= n < len(ids):
                raise ValueError(f"score_tokens: response length {n} of a sequence of "
                                 f"{len(ids)} ids (at least one prompt id is needed)")
        out: list[list[float]] = [[] for _ in sequences]
        todo = sorted((i for i, n in enumerate(response_lengths) if n), key=lambda i: len(sequences[i]))
        cap = self.generate_batch_size or 64
        with self._lock, self._on_stream(), torch.inference_mode():
            model = self._live_model()
            for start in range(0, len(todo), cap):
                rows = todo[start:start + cap]
                width = max(len(sequences[i]) for i in rows)
                # right padding: a causal model's logits at the real positions do not see it
                x = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for r, i in enumerate(rows):
                    x[r, :len(sequences[i])] = torch.tensor(sequences[i], dtype=torch.long)
                    mask[r, :len(sequences[i])] = 1
                x, mask = x.to(self.device), mask.to(self.device)
                logits = model(input_ids=x, attention_mask=mask).logits
                for r, i in enumerate(rows):
                    L, n = len(sequences[i]), response_lengths[i]
                    lp = torch.log_softmax(logits[r, L - n - 1:L - 1].float() / temp, dim=-1)
                    out[i] = lp.gather(1, x[r, L - n:L, None])[:, 0].cpu().tolist()
        return out

    @contextlib.contextmanager
    def _threads(self) -> Iterator[None]:
        """``rollout.async_threads`` intra-op threads for a generate called off the main thread
        (an async rollout overlapping training), restored afterwards. torch's setting is per
        calling thread (OpenMP, MKL), so the trainer's thread keeps its own count."""
        n = self._overlap_threads
        if not n or threading.current_thread() is threading.main_thread():
            yield
            return
        before = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    @contextlib.contextmanager
    def _on_stream(self) -> Iterator[None]:
        """The engine's own CUDA stream (one-step-off and fully-async schedules on a GPU) for
        the work inside, and the calling thread's stream ordered after it. The engine's
        stream does not wait for the caller's: that would hold the decode behind whatever the
        trainer had queued on the default stream when the call began. What the engine reads
        and others write (its weights) is ordered by :meth:`_after_stream`. Every tensor of
        a call is allocated inside, so the caching allocator reuses its blocks on this stream
        only."""
        if self._stream is None:
            yield
            return
        caller = torch.cuda.current_stream(self.device)
        try:
            with torch.cuda.stream(self._stream):
                yield
        finally:
            caller.wait_stream(self._stream)

    @contextlib.contextmanager
    def _after_stream(self) -> Iterator[None]:
        """Work on the calling thread's stream that changes what the engine reads (a weight
        update's copies, a model moved back to the device) ordered after the engine stream's
        work so far, and the engine stream's next work after it, whichever thread generates
        next."""
        if self._stream is None:
            yield
            return
        caller = torch.cuda.current_stream(self.device)
        caller.wait_stream(self._stream)
        try:
            yield
        finally:
            self._stream.wait_stream(caller)

    def _requests(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[Request]:
        """Requests of checked prompts (:func:`check_generate_inputs`)."""
        samplers: dict[SamplingKey, GroupSampler] = {}
        out = []
        for prompt, sp in zip(prompts, params, strict=True):
            key = SamplingKey(float(sp.temperature), int(sp.top_k), float(sp.top_p), sp.seed)
            if key not in samplers:
                gen = self._generator
                if sp.seed is not None:
                    gen = torch.Generator(device=self.device)
                    gen.manual_seed(int(sp.seed))
                samplers[key] = GroupSampler(key, gen, compiled=self._compile_sampler,
                                             kernel=self._sample_kernel)
            stops = list(sp.stop_token_ids) + ([] if sp.ignore_eos else self.eos_token_ids)
            out.append(Request(
                prompt=prompt,
                max_new_tokens=int(sp.max_new_tokens),
                stop_token_ids=list(dict.fromkeys(int(t) for t in stops)),
                sampler=samplers[key],
                stop_strings=StopStrings(self.tokenizer, list(sp.stop)) if sp.stop else None,
            ))
        return out

    def _new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=cast(Any, self._live_model().config))

    def _text(self, ids: list[int]) -> str:
        if self.tokenizer is None or not ids:
            return ""
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def _live_model(self) -> torch.nn.Module:
        if self._model is None:
            raise RuntimeError(f"local engine {self.engine_index} was shut down")
        if self._asleep:
            raise RuntimeError(
                f"local engine {self.engine_index} is asleep; call wake_up() before generating"
            )
        return self._model

    # -- weights ---------------------------------------------------------------------------
    def update_weights(self, weights: Any, version: int) -> None:
        """Copy ``weights`` (name -> tensor, all or some of the state dict) into the model.

        Every name and shape is checked before anything is copied; the first unknown name or
        mismatching shape fails naming the tensor and nothing changes.
        """
        if not isinstance(weights, Mapping):
            raise TypeError(
                f"update_weights: expected a mapping of name -> tensor, got {type(weights).__name__}"
            )
        with self._lock:
            if self._model is None:
                raise RuntimeError(f"local engine {self.engine_index} was shut down")
            if self._profile is not None:
                self._profile.sync()
            started = time.perf_counter()
            model = self._model
            weights = _engine_weights(self.config, model, weights, version)
            state = model.state_dict(keep_vars=True)
            tensors = {}
            for name, value in weights.items():
                if name not in state:
                    raise KeyError(
                        f"update_weights(version={version}): {name!r} is not a parameter or "
                        f"buffer of the engine's model ({len(state)} names, e.g. "
                        f"{', '.join(list(state)[:3])})"
                    )
                tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
                if tuple(tensor.shape) != tuple(state[name].shape):
                    raise ValueError(
                        f"update_weights(version={version}): {name!r} has shape "
                        f"{tuple(tensor.shape)} but the engine's model has "
                        f"{tuple(state[name].shape)}"
                    )
                tensors[name] = tensor
            tensors = _one_per_target(tensors, state)
            if self._stochastic:
                tensors = self._rounded(tensors, state, version)
            # one multi-tensor copy: load_state_dict walks every module and copies tensor by
            # tensor (12 ms for a 0.5B model on an H200 against a 0.6 ms bandwidth bound)
            targets = [state[n] for n in tensors]
            with torch.no_grad(), self._after_stream():
                torch._foreach_copy_(targets, list(tensors.values()))
                if self._packed and self._fused is not None:
                    self._fused.pack(changed=targets)
            self._version = int(version)
            if self._profile is not None:
                self._profile.sync()
                self._profile.record("weight_update", started, time.perf_counter(),
                                     nbytes=sum(t.numel() * t.element_size()
                                                for t in tensors.values()),
                                     total=True, version=int(version), tensors=len(tensors))

    def _rounded(self, tensors: dict[str, torch.Tensor], state: Mapping[str, torch.Tensor],
                 version: int) -> dict[str, torch.Tensor]:
        """float32 tensors bound for bfloat16 weights, stochastically rounded
        (``rollout.dtype_rounding``); seeded by run.seed and ``version``, so a resumed run
        serves what an uninterrupted one did."""
        generators: dict[torch.device, torch.Generator] = {}
        out = {}
        for name, t in tensors.items():
            if t.dtype == torch.float32 and state[name].dtype == torch.bfloat16:
                gen = generators.get(t.device)
                if gen is None:
                    gen = generators[t.device] = torch.Generator(device=t.device)
                    gen.manual_seed(int(self.config.run.seed) * 1_000_003 + int(version))
                t = stochastic_bf16(t, gen, self._noise_pool(t.device))
            out[name] = t
        return out

    def _noise_pool(self, device: torch.device) -> NoisePool | None:
        """A CPU's noise pool (drawn once, seeded by run.seed); None on an accelerator,
        which draws every weight's noise in parallel at no cost worth saving."""
        if device.type != "cpu":
            return None
        if self._noise is None:
            gen = torch.Generator().manual_seed(int(self.config.run.seed) * 1_000_003 - 1)
            self._noise = NoisePool(gen)
        return self._noise

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The served weights, detached (to check a weight sync against the trainer's)."""
        with self._lock:
            if self._model is None:
                raise RuntimeError(f"local engine {self.engine_index} was shut down")
            return {k: v.detach().clone() for k, v in self._model.state_dict().items()}

    def reseed(self, seed: int) -> None:
        """Restart the shared sampling stream (the driver reseeds per step so a resumed run
        draws exactly what an uninterrupted one would)."""
        self._generator.manual_seed(int(seed))

    def weight_version(self) -> int:
        return self._version

    # -- lifecycle -------------------------------------------------------------------------
    def health(self) -> bool:
        return self._model is not None

    def abort(self) -> None:
        """End generation calls in flight now; their unfinished requests finish ``abort``."""
        self._abort_epoch = next(self._aborts)

    def sleep(self) -> None:
        """Move the model to host memory (a no-op on CPU)."""
        with self._lock:
            if self._model is None or self.device.type == "cpu" or self._asleep:
                return
            self._drop_static()
            self._fused = None  # it holds the device tensors the model's views shared
            self._model.to("cpu")
            self._asleep = True
            self._empty_cache()

    def wake_up(self) -> None:
        with self._lock:
            if self._model is None or not self._asleep:
                return
            self._drop_static()
            with self._after_stream():
                self._model.to(self.device)
                self._fuse()  # moving the model replaced the tensors the fused views shared
            self._asleep = False

    def shutdown(self) -> None:
        with self._lock:
            self._drop_static()
            self._model = None
            gc.collect()
            self._empty_cache()

    def _fuse(self) -> None:
        if self._model is not None and self.fused_unsupported is None:
            self._fused = FusedDecoder(self._model)

    def _drop_static(self) -> None:
        """Captured graphs and static caches hold the model's device addresses: drop them."""
        if self._static is not None:
            self._static.clear()

    def _empty_cache(self) -> None:
        if self.device.type != "cpu" and self.accelerator is not None:
            self.accelerator.empty_cache()
