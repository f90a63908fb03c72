"""The ``vllm`` rollout engine: vLLM's offline ``LLM`` behind slime's ``RolloutEngine`` protocol.

Generation: prompts go in as token ids (``TokensPrompt``), never as text. The engine steps vLLM's
``LLMEngine`` itself (``add_request`` + ``step``, outputs in DELTA mode) instead of calling
``LLM.generate``, so that :meth:`abort` can end a call between two engine steps and aborted
requests keep the tokens they produced so far (``finish_reason == "abort"``), as the ``local``
engine does. vLLM's continuous batching serves requests with different sampling settings in
one call.

Log-probs: slime's convention (``SamplingParams``) is ``log_softmax(logits / T)`` of the full
distribution (T = 1 when greedy). vLLM's ``logprobs_mode = "raw_logprobs"`` (its default) is
taken before temperature, so it only matches at T = 1; ``"processed_logprobs"`` is taken after
temperature, which is ours as long as no top-k / top-p truncation applies. The engine runs with
``processed_logprobs`` and :class:`~vllm_rollout.worker_ext.SlimeWorkerExtension` makes the
sampler return the full log-softmax under truncation too (token choice unchanged). Requested
with ``logprobs=0``: only the sampled token's log-prob comes back.

Stopping, as the ``local`` engine: ``stop_token_ids`` plus the tokenizer's and the model's
generation-config EOS ids unless ``ignore_eos`` (finish ``stop``, the token kept); stop strings
(finish ``stop``, tokens kept up to the one that completed the string); ``max_new_tokens``
(finish ``length``). EOS handling is done here and vLLM's own is switched off, so both engines
stop on exactly the same ids. ``text`` is the generated ids decoded with
``skip_special_tokens=True``.

Randomness: every request gets its own vLLM seed, so an output depends on its seed and the
weights only, not on how vLLM batched it. Requests without ``seed`` take seeds from the engine's
stream (seeded with ``run.seed + engine_index``, restarted by :meth:`reseed`); requests with
``seed = s`` take seeds from a stream seeded with ``s``, so several requests with the same seed
in one call differ from each other and the same call repeated gives the same outputs.

Weights: :meth:`update_weights` loads a name -> tensor mapping (Hugging Face names, as the torch
trainer exports) into the served model in place through vLLM's ``reload_weights``;
:meth:`update_weights_from_disk` (called by the core's ``disk`` transport) reloads from a version
directory of safetensors files. Both reset the prefix cache (cached KV was computed with the old
weights) and then report the new version. In a LoRA run (a plugin answers
``slime_engine_adapter``) syncs carry the adapter only: vLLM runs with ``enable_lora``, each
version is loaded as a new LoRA adapter and requests carry its ``LoRARequest``
(``vllm_rollout.lora``).

Routing replay (``train.routing_replay = "rollout"``, a mixture-of-experts model): the workers
record the experts vLLM's routers chose for every token (``vllm_rollout.routes``) and each
output carries them as ``GenerateOutput.routed_experts``; prefix caching is off then.

Thread safety: ``generate``, the weight updates, ``sleep``, ``wake_up`` and ``shutdown`` take one
lock; ``abort``, ``health`` and ``weight_version`` never wait for it.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import random
import shutil
import threading
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

# vLLM logs every engine start and step at INFO; a training run prints its own progress.
# Set before vllm is first imported (it reads this once); a user's value wins.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import torch  # noqa: E402
from slime_core.api import (  # noqa: E402
    check_generate_inputs,
    engine_adapter,
    replay_shape,
    rollout_dtype,
)
from slime_hookspecs import GenerateOutput, SamplingParams  # noqa: E402

from vllm_rollout.config import LOGPROBS_MODE  # noqa: E402
from vllm_rollout.lora import ServedAdapter, read_version_dir  # noqa: E402
from vllm_rollout.model_dir import (  # noqa: E402
    checkpoint_shapes,
    eos_token_ids,
    materialize_model,
)
from vllm_rollout.routes import routes_record  # noqa: E402
from vllm_rollout.worker_ext import from_wire, to_wire  # noqa: E402

_WORKER_EXTENSION = "vllm_rollout.worker_ext.SlimeWorkerExtension"
_SEED_BITS = 62  # vLLM seeds a torch.Generator: keep well inside its range
_CPU_KV_CACHE_MB = 512


@contextlib.contextmanager
def _engine_construction(multiprocessing: bool) -> Iterator[None]:
    """Guard this process against the side effects of building an in-process vLLM engine.

    vLLM's CPU worker replaces ``torch.set_num_threads`` with a no-op (it binds threads in
    its own process; here that process is ours, and the trainer must keep its threads), and
    the worker re-seeds the global python / numpy / torch RNGs with the engine seed (which
    would change the driver's random stream). ``VLLM_ENABLE_V1_MULTIPROCESSING`` picks where
    the engine core runs and is only read while the engine is built.
    """
    import numpy as np

    saved_env = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if multiprocessing else "0"
    set_threads, threads = torch.set_num_threads, torch.get_num_threads()
    py_state, np_state, torch_state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_num_threads = set_threads
        torch.set_num_threads(threads)
        random.setstate(py_state)
        np.random.set_state(np_state)
        torch.set_rng_state(torch_state)
        if saved_env is None:
            os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = saved_env


class VllmEngine:
    """``VllmEngine(config, engine_index, accelerator)``; see the module docstring."""

    def __init__(self, config: Any, engine_index: int = 0, accelerator: Any = None) -> None:
        from vllm import LLM
        from vllm.platforms import current_platform

        self.config = config
        self.engine_index = int(engine_index)
        self.accelerator = accelerator
        section = getattr(config, "vllm", None)
        if section is None:
            raise ValueError(
                "rollout.engine = 'vllm' needs the [vllm] config section: load the "
                "vllm_rollout plugin (--plugins ...,vllm_rollout)"
            )
        self.section = section
        self.on_cpu = bool(current_platform.is_cpu())
        # train.routing_replay: the MoE shape the recorded experts must have, from the model's
        # config (before any weight is read)
        self._moe = replay_shape(config, "vllm")
        self.model_dir, self.tokenizer_dir, self._tmp_dir = materialize_model(config)
        if self._tmp_dir:  # also removed at exit when shutdown() is never called
            weakref.finalize(self, shutil.rmtree, self._tmp_dir, ignore_errors=True)
        self._shapes, self._tied = checkpoint_shapes(self.model_dir)
        spec = engine_adapter(config)
        self.adapter = ServedAdapter(spec, self.engine_index) if spec is not None else None
        kwargs = self._engine_kwargs()
        try:
            with _engine_construction(bool(section.multiprocessing)):
                self._llm: Any = LLM(**kwargs)
        except Exception:
            self._remove_tmp()
            raise
        try:
            if self._moe is not None:
                self._bind_routes()
        except Exception:
            with contextlib.suppress(Exception):
                self._llm.llm_engine.engine_core.shutdown()
            self._remove_tmp()
            raise
        self.tokenizer = self._llm.get_tokenizer() if self.tokenizer_dir else None
        self.eos_token_ids = eos_token_ids(self.tokenizer, self.model_dir)
        self.vocab_size = int(self._llm.llm_engine.model_config.get_vocab_size())
        # every worker must serve full-distribution log-probs under top-k / top-p
        patched = self._llm.collective_rpc("slime_full_distribution_logprobs")
        self.exact_truncated_logprobs = bool(patched) and all(patched)
        self._rng = random.Random(int(config.run.seed) + self.engine_index)
        self._ids = itertools.count()
        self._version = 0
        self._lock = threading.Lock()
        self._aborts = itertools.count(1)
        self._abort_epoch = 0
        self._asleep = False

    def _engine_kwargs(self) -> dict[str, Any]:
        s, model = self.section, self.config.model
        dtype = s.dtype or rollout_dtype(self.config)
        if dtype == "auto":  # as the local engine and the trainer: fp32 on CPU, bf16 elsewhere
            dtype = "float32" if self.on_cpu else "bfloat16"
        kw: dict[str, Any] = {
            "model": self.model_dir,
            "tokenizer": self.tokenizer_dir or None,
            "skip_tokenizer_init": not self.tokenizer_dir,
            "trust_remote_code": bool(model.trust_remote_code),
            "dtype": dtype,
            "seed": int(self.config.run.seed) + self.engine_index,
            "enforce_eager": bool(s.enforce_eager),
            "enable_prefix_caching": bool(s.enable_prefix_caching),
            "tensor_parallel_size": int(s.tensor_parallel_size),
            "logprobs_mode": LOGPROBS_MODE,
            "worker_extension_cls": _WORKER_EXTENSION,
        }
        if s.max_model_len:
            kw["max_model_len"] = int(s.max_model_len)
        if s.max_num_seqs:
            kw["max_num_seqs"] = int(s.max_num_seqs)
        if s.kv_cache_memory_mb or self.on_cpu:
            # on CPU, gpu_memory_utilization would reserve that share of *host* memory
            kw["kv_cache_memory_bytes"] = int(s.kv_cache_memory_mb or _CPU_KV_CACHE_MB) << 20
        else:
            kw["gpu_memory_utilization"] = float(s.gpu_memory_utilization)
        if s.enable_sleep_mode and not self.on_cpu:
            kw["enable_sleep_mode"] = True
        if self.adapter is not None:
            kw.update(self.adapter.engine_kwargs())
        if self._moe is not None:
            # a prompt block served from the prefix cache is not routed again (no record)
            kw["enable_prefix_caching"] = False
        kw.update(s.engine_kwargs)
        return kw

    def _bind_routes(self) -> None:
        """Have every worker record its routers' choices (``vllm_rollout.routes``) and check
        that vLLM's MoE layers are the ones the model's config counts."""
        assert self._moe is not None
        layers = self._llm.collective_rpc("slime_record_routes")
        if any(int(n) != self._moe.layers for n in layers):
            raise ValueError(f"routing replay: vLLM's model has {layers[0]} MoE layers, the "
                             f"model's config counts {self._moe.layers}")

    # -- generation ----------------------------------------------------------------------
    def generate(
        self, prompts: list[list[int]], params: list[SamplingParams]
    ) -> list[GenerateOutput]:
        """One output per prompt: generated ids, their log-probs, finish reason, text."""
        epoch = self._abort_epoch  # an abort() from now on ends this call
        prompts = check_generate_inputs(prompts, params, vocab_size=self.vocab_size,
                                        has_tokenizer=self.tokenizer is not None)
        if not prompts:
            return []
        with self._lock:
            llm = self._live()
            version = self._version
            lora = self.adapter.request_for(version) if self.adapter is not None else None
            requests = self._requests(prompts, params)
            results = self._run(llm, requests, lambda: self._abort_epoch != epoch, lora)
        outs = []
        for i, (prompt, (ids, lps, reason, routes)) in enumerate(
                zip(prompts, results, strict=True)):
            routed = None
            if self._moe is not None and ids:
                routed = routes_record(
                    routes, len(prompt) + len(ids) - 1, self._moe,
                    f"vllm engine {self.engine_index}: prompt {i} of this call ({len(prompt)} "
                    f"prompt + {len(ids)} generated tokens, finish {reason}): routed experts")
            outs.append(GenerateOutput(token_ids=ids, log_probs=lps, finish_reason=reason,
                                       weight_version=version, text=self._text(ids),
                                       routed_experts=routed))
        return outs

    def _requests(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[Any]:
        from vllm import SamplingParams as VllmSamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        seeded: dict[int, random.Random] = {}
        out = []
        for i, (ids, sp) in enumerate(zip(prompts, params, strict=True)):
            if (sp.top_k > 0 or sp.top_p < 1) and sp.temperature > 0 \
                    and not self.exact_truncated_logprobs:
                raise ValueError(
                    f"generate: prompt {i} asks for top_k={sp.top_k} / top_p={sp.top_p}, but "
                    "this vLLM's sampler could not be set to return full-distribution "
                    "log-probs (slime's convention); use top_k=-1 and top_p=1"
                )
            if sp.seed is None:
                seed = self._rng.getrandbits(_SEED_BITS)
            else:
                seed = seeded.setdefault(sp.seed, random.Random(int(sp.seed))).getrandbits(
                    _SEED_BITS)
            stops = list(sp.stop_token_ids) + ([] if sp.ignore_eos else self.eos_token_ids)
            vsp = VllmSamplingParams(
                n=1,
                temperature=float(sp.temperature),
                top_p=float(sp.top_p),
                top_k=int(sp.top_k) if sp.top_k > 0 else 0,
                max_tokens=int(sp.max_new_tokens),
                stop=list(sp.stop) or None,
                stop_token_ids=list(dict.fromkeys(int(t) for t in stops)),
                include_stop_str_in_output=True,
                # EOS is in stop_token_ids above (or deliberately not): vLLM's own EOS check off
                ignore_eos=True,
                seed=seed,
                logprobs=0,
                detokenize=bool(sp.stop),  # only stop strings need vLLM's incremental text
                output_kind=RequestOutputKind.DELTA,
            )
            out.append((self._engine_input(TokensPrompt(prompt_token_ids=ids)), vsp))
        return out

    def _engine_input(self, prompt: Any) -> Any:
        # vLLM 0.32 renders prompts before add_request (raw prompts are deprecated there);
        # older versions take the raw TokensPrompt.
        render = getattr(self._llm, "_preprocess_cmpl_one", None)
        return render(prompt) if render is not None else prompt

    def _run(self, llm: Any, requests: list[Any], aborted: Any, lora: Any = None
             ) -> list[tuple[list[int], list[float], str, torch.Tensor | None]]:
        """(tokens, log-probs, finish reason, routed expert ids or None) per request; the
        ids (routing replay) are the workers' rows of the request, ``[positions, MoE layers,
        top_k]``, unchecked."""
        engine = llm.llm_engine
        ids = [f"slime-{self.engine_index}-{next(self._ids)}" for _ in requests]
        tokens: dict[str, list[int]] = {rid: [] for rid in ids}
        logps: dict[str, list[float]] = {rid: [] for rid in ids}
        reasons: dict[str, str] = {}
        if aborted():
            return [([], [], "abort", None) for _ in ids]
        added: list[str] = []
        internal: dict[str, str] = {}  # our id -> vLLM's (the workers know requests by it)
        try:
            for rid, (prompt, vsp) in zip(ids, requests, strict=True):
                internal[rid] = str(engine.add_request(rid, prompt, vsp, lora_request=lora))
                added.append(rid)
            while len(reasons) < len(ids):
                if aborted():
                    live = [rid for rid in ids if rid not in reasons]
                    engine.abort_request(live)
                    reasons.update((rid, "abort") for rid in live)
                    break
                for out in engine.step():
                    rid = out.request_id
                    if rid not in tokens:
                        continue
                    comp = out.outputs[0]
                    new = [int(t) for t in comp.token_ids]
                    tokens[rid].extend(new)
                    logps[rid].extend(_sampled_logprobs(new, comp.logprobs, rid))
                    if out.finished:
                        reasons[rid] = str(comp.finish_reason or "abort")
            routes: dict[str, torch.Tensor] = {}
            if self._moe is not None:
                wired = llm.collective_rpc("slime_take_routes",
                                           kwargs={"request_ids": list(internal.values())})[0]
                routes = {rid: from_wire(w) for rid, w in wired.items()}
        except BaseException:
            live = [rid for rid in added if rid not in reasons]
            if live:
                engine.abort_request(live)
            raise
        finally:
            if self._moe is not None:  # aborted requests' rows, and any left by an error
                llm.collective_rpc("slime_clear_routes")
        return [(tokens[rid], logps[rid], reasons[rid], routes.get(internal.get(rid, "")))
                for rid in ids]

    def _text(self, ids: list[int]) -> str:
        if self.tokenizer is None or not ids:
            return ""
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def _live(self) -> Any:
        if self._llm is None:
            raise RuntimeError(f"vllm engine {self.engine_index} was shut down")
        if self._asleep:
            raise RuntimeError(
                f"vllm engine {self.engine_index} is asleep; call wake_up() before generating"
            )
        return self._llm

    # -- weights ---------------------------------------------------------------------------
    def update_weights(self, weights: Any, version: int) -> None:
        """Load ``weights`` (Hugging Face name -> tensor) into the served model in place.

        Every name and shape is checked against the model's checkpoint before anything is
        loaded; the first unknown name or mismatching shape fails naming the tensor and nothing
        changes. Send every tensor of a layer together (the trainer sends all of them): vLLM
        fuses some (q/k/v, gate/up) and processes a layer once its tensors have arrived.

        In a LoRA run ``weights`` is the adapter (the trainer's names); it is served as a new
        LoRA adapter instead (:class:`~vllm_rollout.lora.ServedAdapter`).
        """
        if not isinstance(weights, Mapping):
            raise TypeError(
                f"update_weights: expected a mapping of name -> tensor, got {type(weights).__name__}"
            )
        if self.adapter is not None:
            self._load_adapter(weights, version)
            return
        named = []
        for name, value in weights.items():
            tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
            self._check_tensor(name, tuple(tensor.shape), version)
            if name == "lm_head.weight" and self._tied:
                continue  # vLLM serves the tied head from the embedding
            named.append((name, tensor.detach()))
        with self._lock:
            llm = self._llm_or_raise()
            if self.section.multiprocessing:
                # crosses into vLLM's engine-core process and on to its worker: raw bytes
                # (worker_ext.to_wire says why not tensors)
                llm.collective_rpc("slime_reload_weights",
                                   kwargs={"wired": [(n, to_wire(t)) for n, t in named]})
            else:
                llm.collective_rpc("slime_reload_weights", kwargs={"weights": named})
            self._weights_changed(llm, version)

    def update_weights_from_disk(self, version_dir: str, version: int) -> None:
        """Reload every weight from the safetensors files in ``version_dir`` (disk transport;
        the transport fires ``slime_before_weights_read`` in this process before it calls this).
        """
        files = sorted(f for f in os.listdir(version_dir) if f.endswith(".safetensors")) \
            if os.path.isdir(version_dir) else []
        if not files:
            raise FileNotFoundError(
                f"weight version {version}: {version_dir} holds no *.safetensors file"
            )
        if self.adapter is not None:
            self._load_adapter(read_version_dir(version_dir, files), version)
            return
        shapes, _ = checkpoint_shapes(version_dir)
        for name, shape in shapes.items():
            self._check_tensor(name, shape, version)
        with self._lock:
            llm = self._llm_or_raise()
            llm.collective_rpc("slime_reload_weights", kwargs={"path": str(version_dir)})
            self._weights_changed(llm, version)

    def _load_adapter(self, weights: Mapping[str, Any], version: int) -> None:
        assert self.adapter is not None
        with self._lock:
            llm = self._llm_or_raise()
            self.adapter.load(llm, weights, version)
            self._weights_changed(llm, version)

    def _check_tensor(self, name: str, shape: tuple[int, ...], version: int) -> None:
        if name not in self._shapes:
            raise KeyError(
                f"update_weights(version={version}): {name!r} is not a weight of the engine's "
                f"model {self.model_dir} ({len(self._shapes)} names, e.g. "
                f"{', '.join(list(self._shapes)[:3])})"
            )
        if tuple(shape) != self._shapes[name]:
            raise ValueError(
                f"update_weights(version={version}): {name!r} has shape {tuple(shape)} but "
                f"the engine's model has {self._shapes[name]}"
            )

    def _weights_changed(self, llm: Any, version: int) -> None:
        # KV blocks cached for shared prefixes were computed with the old weights
        llm.reset_prefix_cache()
        self._version = int(version)
        setter = getattr(llm.llm_engine, "set_weight_version", None)
        if setter is not None:  # vLLM tags its own outputs with it too
            setter(str(version))

    def named_parameters(self) -> dict[str, torch.Tensor]:
        """The served parameters under vLLM's names (CPU copies), to check a weight sync."""
        with self._lock:
            return self._llm_or_raise().collective_rpc("slime_named_parameters")[0]

    def weight_version(self) -> int:
        return self._version

    def reseed(self, seed: int) -> None:
        """Restart the seed stream of requests without a seed (the driver reseeds per step)."""
        self._rng = random.Random(int(seed))

    # -- lifecycle -------------------------------------------------------------------------
    def health(self) -> bool:
        return self._llm is not None

    def abort(self) -> None:
        """End generation calls in flight now; their unfinished requests finish ``abort``."""
        self._abort_epoch = next(self._aborts)

    def sleep(self) -> None:
        """Free device memory through vLLM's sleep mode (``vllm.enable_sleep_mode``).

        A no-op on CPU hosts (vLLM's CPU worker does not implement sleep mode) and when sleep
        mode is off.
        """
        with self._lock:
            if self._llm is None or self._asleep or not self._sleep_supported():
                return
            self._llm.sleep(level=int(self.section.sleep_level))
            self._asleep = True

    def wake_up(self) -> None:
        with self._lock:
            if self._llm is None or not self._asleep:
                return
            self._llm.wake_up()
            self._asleep = False

    def _sleep_supported(self) -> bool:
        return bool(self.section.enable_sleep_mode) and not self.on_cpu

    def shutdown(self) -> None:
        with self._lock:
            llm, self._llm = self._llm, None
            if llm is not None:
                with contextlib.suppress(Exception):
                    llm.llm_engine.engine_core.shutdown()
                del llm
                gc.collect()
            self._remove_tmp()
            if self.adapter is not None:
                self.adapter.close()

    def _llm_or_raise(self) -> Any:
        if self._llm is None:
            raise RuntimeError(f"vllm engine {self.engine_index} was shut down")
        return self._llm

    def _remove_tmp(self) -> None:
        if self._tmp_dir:
            shutil.rmtree(self._tmp_dir, ignore_errors=True)
            self._tmp_dir = None


def _sampled_logprobs(token_ids: list[int], logprobs: Any, rid: str) -> list[float]:
    """The log-prob of each sampled token from vLLM's per-position ``{token_id: Logprob}``."""
    if logprobs is None or len(logprobs) != len(token_ids):
        raise RuntimeError(
            f"vllm request {rid}: {len(token_ids)} new tokens but "
            f"{0 if logprobs is None else len(logprobs)} log-prob entries"
        )
    return [float(pos[tok].logprob) for tok, pos in zip(token_ids, logprobs, strict=True)]
