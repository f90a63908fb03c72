"""An HTTP server with SGLang's native endpoints and response shapes, over any rollout engine.

For tests on hosts where SGLang cannot run (it needs CUDA). It is a stand-in, not SGLang: the
routes, status codes and JSON shapes follow ``sglang/srt/entrypoints/http_server.py`` and
``managers/tokenizer_manager.py`` of SGLang 0.5.23, and generation is done by the engine given
(the core's ``LocalEngine`` for real tokens and exact log-probs, or :class:`ScriptedEngine`).
LoRA (``--enable-lora``, ``/load_lora_adapter``, ``/unload_lora_adapter``, ``lora_path`` on
``/generate``) follows SGLang 0.5.17, the adapter merged into the engine's weights while
requests naming it run. What it does not emulate is listed in the plugin README.

``python -m sglang_rollout.fake_server --model-path X --host H --port P`` serves a
:class:`ScriptedEngine` with ``sglang.launch_server``'s basic flags (others are ignored), which
is what the launch tests start in place of SGLang.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import glob
import itertools
import os
import pickle
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from slime_hookspecs import GenerateOutput, SamplingParams

from sglang_rollout.scripted_engine import ScriptedEngine

# field names of GenerateReqInput and SamplingParams in SGLang 0.5.23 (io_struct.py,
# sampling_params.py), plus "model", which sglang-router adds and SGLang ignores; any other key
# is refused, so a misspelled field fails here instead of being silently ignored
GENERATE_KEYS = set("""
audio_data background bootstrap_host bootstrap_pair_key bootstrap_port bootstrap_room cache_salt
conversation_id custom_labels custom_logit_processor data_parallel_rank decode_tp_size
disagg_prefill_dp_rank encoder_urls external_trace_header extra_key http_worker_ipc image_data
image_max_dynamic_patch images_config input_embeds input_ids kv_hints log_metrics
logprob_start_len lora_id lora_path max_dynamic_patch max_thinking_tokens min_dynamic_patch
mm_content_hashes mm_hashes mm_processor_kwargs modalities multi_item_delimiter_indices
need_wait_for_mm_inputs no_logs num_items_assigned positional_embed_overrides priority
received_time require_reasoning return_bytes return_entropy return_flat_raw_output_top_logprobs
return_flat_raw_top_logprobs return_flat_raw_top_logprobs_b64 return_hidden_states
return_indexer_topk return_logprob return_prompt_token_ids return_routed_experts
return_sampling_mask return_text_in_logprobs rid routed_dp_rank routed_experts_start_len
routing_key sampling_logprobs_mode sampling_params session_id session_params stream text
token_ids_logprob token_indices_to_pool top_logprobs_num use_audio_in_video video_config
video_data video_max_dynamic_patch watermark model""".split())
SAMPLING_KEYS = set("""
beam_width custom_params ebnf ebnf_full_assistant frequency_penalty ignore_eos is_normalized
json_schema logit_bias max_new_tokens min_new_tokens min_p n no_stop_trim presence_penalty regex
repetition_penalty sampling_seed skip_special_tokens spaces_between_special_tokens stop
stop_regex stop_regex_max_len stop_regex_strs stop_str_max_len stop_strs stop_token_ids
stream_interval structural_tag temperature top_k top_p watermark""".split())
BODY_KEYS = {  # endpoint -> accepted keys (io_struct fields, minus internal ones)
    "/abort_request": {"rid", "abort_all"},
    "/pause_generation": {"mode"},
    "/continue_generation": {"torch_empty_cache"},
    "/update_weights_from_disk": {"model_path", "load_format", "abort_all_requests",
                                  "weight_version", "is_async", "torch_empty_cache",
                                  "keep_pause", "recapture_cuda_graph", "token_step",
                                  "flush_cache"},
    "/update_weights_from_tensor": {"serialized_named_tensors", "load_format", "flush_cache",
                                    "abort_all_requests", "weight_version", "torch_empty_cache"},
    "/init_weights_update_group": {"master_address", "master_port", "rank_offset", "world_size",
                                   "group_name", "backend"},
    "/update_weights_from_distributed": {"names", "dtypes", "shapes", "group_name", "flush_cache",
                                         "abort_all_requests", "weight_version", "load_format"},
    "/destroy_weights_update_group": {"group_name"},
    "/get_weights_by_name": {"name", "truncate_size"},
    "/release_memory_occupation": {"tags"},
    "/resume_memory_occupation": {"tags"},
    # LoadLoRAAdapterReqInput / UnloadLoRAAdapterReqInput (+ BaseReq's rid, http_worker_ipc)
    "/load_lora_adapter": {"lora_name", "lora_path", "pinned", "lora_id", "rid",
                           "http_worker_ipc"},
    "/unload_lora_adapter": {"lora_name", "lora_id", "rid", "http_worker_ipc"},
}
REQUIRED = {"/update_weights_from_disk": {"model_path"},
            "/update_weights_from_tensor": {"serialized_named_tensors"},
            "/init_weights_update_group": {"master_address", "master_port", "rank_offset",
                                           "world_size"},
            "/update_weights_from_distributed": {"names", "dtypes", "shapes"},
            "/get_weights_by_name": {"name"},
            "/load_lora_adapter": {"lora_name", "lora_path"},
            "/unload_lora_adapter": {"lora_name"}}


@dataclass
class Logged:
    method: str
    path: str
    body: Any
    authorization: str | None


@dataclass
class FakeSGLangServer:
    """``FakeSGLangServer(engine).start()`` -> serves on ``.url`` until ``.stop()``."""

    engine: Any
    host: str = "127.0.0.1"
    port: int = 0
    api_key: str = ""
    startup_delay_s: float = 0.0  # /health_generate answers 503 until then (server starting)
    legacy: bool = False  # an older SGLang: /get_weight_version, and /model_info answers 404
    requests: list[Logged] = field(default_factory=list)
    fail: dict[str, tuple[int, str]] = field(default_factory=dict)  # path -> one-shot answer
    version: str = "default"
    paused: bool = False
    released: bool = False
    in_flight: int = 0
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    # LoRA, as --enable-lora --max-lora-rank --lora-target-modules --max-loaded-loras set it
    enable_lora: bool = False
    max_lora_rank: int = 0  # 0: any rank
    lora_target_modules: list[str] = field(default_factory=lambda: ["all"])
    max_loaded_loras: int | None = None
    loras: dict[str, str] = field(default_factory=dict)  # loaded adapters: name -> path (LRU order)
    lora_cache: dict[str, str] = field(default_factory=dict)  # every name ever loaded -> path
    lora_applied: str | None = None  # the adapter merged into the engine's weights now

    def __post_init__(self) -> None:
        self._aborts = itertools.count(1)
        self._abort_epoch = 0
        self._t0 = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._client: Any = None
        self._deltas: dict[str, dict[str, Any]] = {}  # adapter -> weight name -> fp32 delta
        self._base: dict[str, Any] = {}  # base weights of the layers an adapter changed
        self._lora_users = 0  # requests running with lora_applied

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> FakeSGLangServer:
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="fake-sglang", daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(30)
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop = None

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    async def _serve(self) -> None:
        from slime_core.api import EngineClient

        self._unpaused = asyncio.Event()
        self._unpaused.set()
        self._client = EngineClient(self.engine)  # batches concurrent /generate requests
        self._lora_cond = asyncio.Condition()
        app = web.Application(middlewares=[self._middleware])
        r = app.router
        r.add_route("POST", "/generate", self._generate)
        r.add_route("PUT", "/generate", self._generate)
        for path in ("/health", "/health_generate"):
            r.add_get(path, self._health)
        r.add_get("/get_weight_version", self._get_weight_version)
        for path in ("/server_info", "/get_server_info", "/model_info", "/get_model_info"):
            r.add_get(path, self._info)
        r.add_route("*", "/flush_cache", self._flush_cache)
        r.add_post("/pause_generation", self._pause)
        r.add_post("/continue_generation", self._continue)
        r.add_post("/abort_request", self._abort)
        r.add_post("/update_weights_from_disk", self._from_disk)
        r.add_post("/update_weights_from_tensor", self._from_tensor)
        r.add_post("/get_weights_by_name", self._weights_by_name)
        r.add_post("/init_weights_update_group", self._init_group)
        r.add_post("/update_weights_from_distributed", self._from_distributed)
        r.add_post("/destroy_weights_update_group", self._destroy_group)
        r.add_route("*", "/release_memory_occupation", self._release)
        r.add_route("*", "/resume_memory_occupation", self._resume)
        r.add_post("/load_lora_adapter", self._load_lora)
        r.add_post("/unload_lora_adapter", self._unload_lora)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    # -- plumbing ----------------------------------------------------------------------------
    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = None
        if request.can_read_body:
            raw = await request.text()
            try:
                body = __import__("json").loads(raw) if raw else None
            except ValueError:
                return _error(400, f"request body is not JSON: {raw[:200]!r}")
        auth = request.headers.get("Authorization")
        self.requests.append(Logged(request.method, request.path, body, auth))
        if self.api_key and auth != f"Bearer {self.api_key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        if request.path in self.fail:
            status, text = self.fail.pop(request.path)
            return web.Response(status=status, text=text)
        if request.path in BODY_KEYS:
            obj = body if isinstance(body, dict) else {}
            unknown = set(obj) - BODY_KEYS[request.path]
            missing = REQUIRED.get(request.path, set()) - set(obj)
            if body is not None and not isinstance(body, dict) or unknown or missing:
                return _error(400, f"{request.path}: unknown fields {sorted(unknown)}, "
                                   f"missing fields {sorted(missing)}")
        request["body"] = body
        return await handler(request)

    def _ok(self, message: str) -> web.Response:
        return web.json_response({"success": True, "message": message})

    def _set_version(self, body: dict[str, Any]) -> int:
        if body.get("weight_version") is not None:
            self.version = str(body["weight_version"])
        return int(self.version) if self.version.lstrip("-").isdigit() else 0

    # -- endpoints ---------------------------------------------------------------------------
    async def _health(self, request: web.Request) -> web.Response:
        starting = time.monotonic() - self._t0 < self.startup_delay_s
        return web.Response(status=503 if starting else 200)

    async def _info(self, request: web.Request) -> web.Response:
        if self.legacy and request.path == "/model_info":
            return web.json_response({"detail": "Not Found"}, status=404)
        return web.json_response({"model_path": "fake", "weight_version": self.version,
                                  "is_generation": True, "tp_size": 1, "version": "fake-0.5.23"})

    async def _get_weight_version(self, request: web.Request) -> web.Response:
        if not self.legacy:  # removed in SGLang 0.5.x
            return web.json_response({"detail": "Not Found"}, status=404)
        return web.json_response({"weight_version": self.version})

    async def _generate(self, request: web.Request) -> web.Response:
        body = request["body"]
        if not isinstance(body, dict) or set(body) - GENERATE_KEYS:
            return _error(400, f"/generate: unknown fields "
                               f"{sorted(set(body or {}) - GENERATE_KEYS)}")
        if body.get("stream") or body.get("text") is not None:
            return _error(400, "/generate: streaming and text prompts are not emulated")
        ids = body.get("input_ids")
        sp = {k: v for k, v in (body.get("sampling_params") or {}).items() if v is not None}
        if (not isinstance(ids, list) or not ids or not all(type(t) is int for t in ids)
                or set(sp) - SAMPLING_KEYS):
            return _error(400, f"/generate: bad input_ids or sampling_params {sorted(sp)}")
        if self.released:
            return _error(400, "/generate while memory is released")
        lora = body.get("lora_path")
        if lora is not None and not isinstance(lora, str):
            return _error(400, "/generate: a list of lora_path (batched prompts) is not emulated")
        epoch = self._abort_epoch
        # held here while paused, before taking an adapter: an unload during a pause waits
        # for the adapter's running requests only
        await self._unpaused.wait()
        try:
            if lora:
                await self._resolve_lora(lora)
        except ValueError as exc:  # as http_server.generate_request: _create_error_response
            return web.json_response({"error": {"message": str(exc)}}, status=400)
        await self._acquire_lora(lora or None)
        try:
            return await self._generate_with(body, ids, sp, epoch)
        finally:
            await self._release_lora()

    async def _generate_with(self, body: dict[str, Any], ids: list[int],
                             sp: dict[str, Any], epoch: int) -> web.Response:
        await self._unpaused.wait()
        t0 = time.perf_counter()
        if self._abort_epoch != epoch:  # aborted while waiting (pause)
            out = GenerateOutput([], [], "abort", 0, "")
        else:
            params = SamplingParams(
                temperature=sp.get("temperature", 1.0), top_p=sp.get("top_p", 1.0),
                top_k=sp.get("top_k", -1), max_new_tokens=sp.get("max_new_tokens", 128),
                stop=list(sp.get("stop") or []), stop_token_ids=list(sp.get("stop_token_ids") or []),
                ignore_eos=bool(sp.get("ignore_eos", False)), seed=sp.get("sampling_seed"))
            self.in_flight += 1
            try:
                out = await self._client.generate(ids, params)
            finally:
                self.in_flight -= 1
        reasons: dict[str, dict[str, Any]] = {
            "stop": {"type": "stop", "matched": out.token_ids[-1] if out.token_ids else None},
            "length": {"type": "length", "length": len(out.token_ids)},
            "abort": {"type": "abort", "message": "Abort in waiting queue", "status_code": None,
                      "err_type": None},
        }
        reason = reasons[out.finish_reason]
        meta: dict[str, Any] = {
            "id": body.get("rid") or uuid.uuid4().hex, "finish_reason": reason,
            "prompt_tokens": len(ids), "weight_version": self.version, "num_retractions": 0,
            "reasoning_tokens": 0, "completion_tokens": len(out.token_ids), "cached_tokens": 0,
            "e2e_latency": time.perf_counter() - t0,
        }
        if body.get("return_logprob"):
            meta["input_token_logprobs"] = []
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in
                                             zip(out.log_probs, out.token_ids, strict=True)]
            meta["output_token_logprobs_length"] = len(out.token_ids)
        if body.get("return_routed_experts") and out.routed_experts is not None:
            meta["routed_experts"] = _int32_base64(out.routed_experts)
        return web.json_response({"text": out.text, "output_ids": list(out.token_ids),
                                  "meta_info": meta})

    async def _flush_cache(self, request: web.Request) -> web.Response:
        if self.in_flight:
            return web.Response(status=400, text="Cache not flushed: requests are running.\n")
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details. "
                                 "(When there are running or waiting requests, the operation "
                                 "will not be performed.)\n")

    async def _pause(self, request: web.Request) -> web.Response:
        mode = (request["body"] or {}).get("mode", "abort")
        if mode not in ("abort", "retract", "in_place"):
            return _error(400, f"mode {mode!r}")
        self.paused = True
        self._unpaused.clear()
        if mode == "abort":
            self._abort_all()
        return web.json_response({"message": "Generation paused successfully.", "status": "ok"})

    async def _continue(self, request: web.Request) -> web.Response:
        self.paused = False
        self._unpaused.set()
        return web.json_response({"message": "Generation continued successfully.", "status": "ok"})

    def _abort_all(self) -> None:
        self._abort_epoch = next(self._aborts)
        self.engine.abort()

    async def _abort(self, request: web.Request) -> web.Response:
        if (request["body"] or {}).get("abort_all"):
            self._abort_all()
        return web.Response(status=200)

    async def _from_disk(self, request: web.Request) -> web.Response:
        body = request["body"]
        files = sorted(glob.glob(os.path.join(body["model_path"], "*.safetensors")))
        if not files:
            return web.json_response({"success": False, "num_paused_requests": 0,
                                      "message": f"no *.safetensors in {body['model_path']}"},
                                     status=400)
        from safetensors.torch import load_file

        tensors: dict[str, Any] = {}
        for f in files:
            tensors.update(load_file(f))
        old = self.version
        self._base, self.lora_applied = {}, None  # full weights: what adapters merge into
        version = self._set_version(body)
        try:
            await asyncio.to_thread(self.engine.update_weights, tensors, version)
        except Exception as exc:  # noqa: BLE001 - reported like SGLang: 400 + message
            self.version = old
            return web.json_response({"success": False, "message": str(exc),
                                      "num_paused_requests": 0}, status=400)
        return web.json_response({"success": True, "num_paused_requests": 0,
                                  "message": f"Succeeded to update model weights. Weight version "
                                             f"updated to {self.version}."})

    async def _from_tensor(self, request: web.Request) -> web.Response:
        body = request["body"]
        import torch.multiprocessing  # noqa: F401 - registers the tensor reductions pickle needs

        named = pickle.loads(base64.b64decode(body["serialized_named_tensors"][0], validate=True))
        self._base, self.lora_applied = {}, None  # full weights: what adapters merge into
        version = self._set_version(body)
        await asyncio.to_thread(self.engine.update_weights, dict(named), version)
        return self._ok("Succeeded to update model weights.")

    async def _weights_by_name(self, request: web.Request) -> web.Response:
        # SGLang's LlamaForCausalLM.get_weights_by_name: the parameter's first truncate_size
        # rows as float32 lists; models without it answer an error
        body = request["body"]
        state = getattr(self.engine, "state_dict", None)
        held = state() if callable(state) else getattr(self.engine, "weights", None)
        if held is None:
            return _error(400, "Get parameter by name failed")
        tensor = held.get(body["name"])
        if tensor is None:
            return _error(400, f"Get parameter by name failed: {body['name']}")
        import torch

        rows = tensor.detach()[:int(body.get("truncate_size", 100))]
        return web.json_response(rows.to(torch.float32).tolist())

    async def _init_group(self, request: web.Request) -> web.Response:
        body = request["body"]
        self.groups[body.get("group_name", "weight_update_group")] = body
        return self._ok("Succeeded to initialize custom process group.")

    async def _from_distributed(self, request: web.Request) -> web.Response:
        body = request["body"]
        if body.get("group_name", "weight_update_group") not in self.groups:
            return web.json_response({"success": False, "message": "group not initialized"},
                                     status=400)
        self._set_version(body)  # no tensors move: the emulation has no NCCL peer
        return self._ok("Succeeded to update parameter online.")

    async def _destroy_group(self, request: web.Request) -> web.Response:
        name = (request["body"] or {}).get("group_name", "weight_update_group")
        ok = self.groups.pop(name, None) is not None
        return web.json_response({"success": ok, "message": "destroyed" if ok else "no group"},
                                 status=200 if ok else 400)

    # -- LoRA (SGLang 0.5.17: http_server.py, tokenizer_control_mixin.py, lora_manager.py) ------
    # The stand-in serves one adapter (or the base) at a time, merged into the engine's
    # weights (W0 + lora_alpha / r * B @ A in fp32, cast to the weight's dtype); a request
    # naming another one waits until the running ones finish. SGLang batches requests of
    # different adapters together with its LoRA kernels and never changes the base weights.
    def _lora_answer(self, success: bool, message: str = "",
                     loaded: dict[str, str] | None = None) -> web.Response:
        # LoRAUpdateOutput through msgspec_to_builtins: 200 on success, else 400
        return web.json_response({"rid": None, "http_worker_ipc": None, "success": success,
                                  "error_message": message, "loaded_adapters": loaded},
                                 status=200 if success else 400)

    def _read_adapter(self, name: str, path: str) -> dict[str, Any]:
        """A PEFT adapter directory -> weight name -> fp32 delta, checked as SGLang's
        LoRAConfig and LoRAManager.validate_new_adapter check it."""
        import json

        import torch
        from safetensors.torch import load_file

        with open(os.path.join(path, "adapter_config.json")) as f:
            cfg = json.load(f)
        if cfg.get("use_dora"):
            raise ValueError(f"Failed to load {name} because LoRA serving currently doesn't "
                             "support DoRA adapters")
        rank, targets = int(cfg["r"]), cfg.get("target_modules") or []
        targets = [targets] if isinstance(targets, str) else list(targets)
        allowed = set(self.lora_target_modules)
        if (self.max_lora_rank and rank > self.max_lora_rank) or \
                ("all" not in allowed and not set(targets) <= allowed):
            raise ValueError(
                f"LoRA adapter {name} with rank {rank} is incompatible with the current LoRA "
                "memory pool configuration. Please ensure that the LoRA adapter's rank is "
                "within the configured `--max-lora-rank` and that the target modules are "
                "included in `--lora-target-modules`.")
        files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
        if not files:
            raise FileNotFoundError(f"no adapter_model.safetensors in {path}")
        tensors = load_file(files[0])
        scaling = float(cfg.get("lora_alpha", rank)) / rank
        state = self._state()
        deltas: dict[str, Any] = {}
        for key, a in tensors.items():
            if ".lora_A." not in key:
                continue
            module = key.removeprefix("base_model.model.").split(".lora_A.")[0]
            b = tensors[key.replace(".lora_A.", ".lora_B.")]
            weight = f"{module}.weight"
            if weight not in state:
                raise ValueError(f"{name}: {module} is not a layer of the served model")
            deltas[weight] = scaling * (b.to(torch.float32) @ a.to(torch.float32))
        return deltas

    def _state(self) -> dict[str, Any]:
        state = getattr(self.engine, "state_dict", None)
        if not callable(state):
            raise ValueError("the stand-in serves LoRA adapters only over an engine with "
                             "state_dict() (the core's LocalEngine)")
        return state()

    async def _load_named(self, name: str, path: str) -> dict[str, str]:
        """Load ``name``; ValueError (the message SGLang answers) when it cannot."""
        if name in self.loras:
            raise ValueError(f"Failed to load LoRA adapter {name} because it is already loaded")
        self._deltas[name] = await asyncio.to_thread(self._read_adapter, name, path)
        self.loras[name] = self.lora_cache[name] = path
        while self.max_loaded_loras is not None and len(self.loras) > self.max_loaded_loras:
            lru = next(n for n in self.loras if n != name)
            await self._unload_named(lru)
        return dict(self.loras)

    async def _unload_named(self, name: str) -> None:
        if name not in self.loras:
            raise ValueError(f"LoRA with name {name} does not exist. Loaded LoRAs: "
                             f"{self.loras.keys()}")
        del self.loras[name]
        async with self._lora_cond:  # as SGLang: unload once its running requests finished
            await self._lora_cond.wait_for(
                lambda: self.lora_applied != name or self._lora_users == 0)
        self._deltas.pop(name, None)

    async def _load_lora(self, request: web.Request) -> web.Response:
        body = request["body"]
        if not self.enable_lora:
            return self._lora_answer(False, "LoRA is not enabled. Please set `--enable-lora` "
                                            "to enable LoRA.")
        try:
            return self._lora_answer(True, "", await self._load_named(body["lora_name"],
                                                                      body["lora_path"]))
        except Exception as exc:  # noqa: BLE001 - the backend's answer: success false + loaded
            return self._lora_answer(False, str(exc), dict(self.loras))

    async def _unload_lora(self, request: web.Request) -> web.Response:
        if not self.enable_lora:
            return self._lora_answer(False, "LoRA is not enabled. Please set `--enable-lora` "
                                            "to enable LoRA.")
        try:
            await self._unload_named(request["body"]["lora_name"])
        except ValueError as exc:
            return self._lora_answer(False, str(exc))
        return self._lora_answer(True, "", dict(self.loras))

    async def _resolve_lora(self, name: str) -> None:
        """TokenizerManager._validate_and_resolve_lora: an adapter unloaded since is loaded
        again from where it was loaded from (SGLang's lora_ref_cache)."""
        if not self.enable_lora:
            raise ValueError(f"LoRA adapter '{name}' was requested, but LoRA is not enabled. "
                             "Please launch the server with --enable-lora flag and preload "
                             "adapters using --lora-paths or /load_lora_adapter endpoint.")
        if name in self.loras:
            self.loras[name] = self.loras.pop(name)  # most recently used
            return
        if name not in self.lora_cache:
            raise ValueError(f"Got LoRA adapter that has never been loaded: {name}\n"
                             f"All loaded adapters: {self.lora_cache.keys()}.")
        try:
            await self._load_named(name, self.lora_cache[name])
        except Exception as exc:  # noqa: BLE001 - reported as SGLang does
            raise ValueError(f"Failed to implicitly load LoRA adapter {name}: {exc}") from None

    async def _acquire_lora(self, want: str | None) -> None:
        async with self._lora_cond:
            await self._lora_cond.wait_for(
                lambda: self.lora_applied == want or self._lora_users == 0)
            if self.lora_applied != want:
                await asyncio.to_thread(self._apply_lora, want)
            self._lora_users += 1

    async def _release_lora(self) -> None:
        async with self._lora_cond:
            self._lora_users -= 1
            self._lora_cond.notify_all()

    def _apply_lora(self, want: str | None) -> None:
        """Merge adapter ``want`` (None: the base) into the engine's weights."""
        import torch

        new = self._deltas.get(want or "", {})
        state = None
        for name in new:
            if name not in self._base:  # not changed by any adapter yet: the engine has W0
                state = self._state() if state is None else state
                self._base[name] = state[name].clone()
        out = {}
        for name in set(self._base) | set(new):  # every layer an adapter changed: W0 again
            base = self._base[name]
            w = base.to(torch.float32) + new[name] if name in new else base.to(torch.float32)
            out[name] = w.to(base.dtype)
        if out:
            version = int(self.version) if self.version.lstrip("-").isdigit() else 0
            self.engine.update_weights(out, version)
        self.lora_applied = want

    async def _release(self, request: web.Request) -> web.Response:
        self.released = True
        await asyncio.to_thread(self.engine.sleep)
        return web.json_response(None)

    async def _resume(self, request: web.Request) -> web.Response:
        self.released = False
        await asyncio.to_thread(self.engine.wake_up)
        return web.json_response(None)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"object": "error", "message": message,
                              "type": "Bad Request", "param": None, "code": status}, status=status)


def main(argv: list[str] | None = None) -> None:
    """``sglang.launch_server``-compatible entry: serve a ScriptedEngine until SIGTERM."""
    ap = argparse.ArgumentParser("fake sglang.launch_server")
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--api-key", default="")
    ap.add_argument("--enable-lora", action="store_true")
    ap.add_argument("--max-lora-rank", type=int, default=0)
    ap.add_argument("--lora-target-modules", nargs="*", default=["all"])
    ap.add_argument("--max-loaded-loras", type=int, default=None)
    args, ignored = ap.parse_known_args(argv)
    delay = float(os.environ.get("FAKE_SGLANG_STARTUP_DELAY", "0"))
    if os.environ.get("FAKE_SGLANG_CRASH"):
        raise SystemExit(f"fake sglang: crashing on purpose ({os.environ['FAKE_SGLANG_CRASH']})")
    server = FakeSGLangServer(ScriptedEngine(), host=args.host, port=args.port,
                              api_key=args.api_key, startup_delay_s=delay,
                              enable_lora=args.enable_lora, max_lora_rank=args.max_lora_rank,
                              lora_target_modules=list(args.lora_target_modules),
                              max_loaded_loras=args.max_loaded_loras).start()
    print(f"fake sglang serving {args.model_path} at {server.url}; ignored flags: {ignored}",
          flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    server.stop()
    print("fake sglang: stopped on SIGTERM", flush=True)


if __name__ == "__main__":
    main()


def _int32_base64(record: Any) -> str:
    """A ``RoutedExperts`` (uint8 / int16 ids) as SGLang sends routed experts: base64 of
    little-endian int32."""
    import array
    import base64
    import sys

    small = array.array("B" if record.dtype == "uint8" else "h", record.data)
    wide = array.array("i", small)
    if sys.byteorder != "little":
        wide.byteswap()
    return base64.b64encode(wide.tobytes()).decode("ascii")
