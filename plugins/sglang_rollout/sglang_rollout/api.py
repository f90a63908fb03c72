"""SGLang's native HTTP API as this plugin uses it: endpoints, request bodies, response parsing.

Pure functions (no I/O), so the bodies can be checked against SGLang's own request types
(``sglang.srt.managers.io_struct``) wherever ``sglang`` imports, and the parsers against the
response shapes of ``sglang.srt.managers.tokenizer_manager`` (read for SGLang 0.5.23):

``POST /generate`` answers ``{"text", "output_ids", "meta_info"}`` where ``meta_info`` has
``finish_reason`` (``{"type": "stop", "matched": ...}``, ``{"type": "length", "length": n}``,
``{"type": "abort", "message", "status_code", "err_type"}``), ``weight_version`` (a string),
``prompt_tokens``, ``completion_tokens``, ``cached_tokens`` and, with ``return_logprob``,
``output_token_logprobs``: one ``[logprob, token_id, text_or_null]`` per generated token;
with ``return_routed_experts`` (a server started with ``--enable-return-routed-experts``),
``routed_experts``: base64 of little-endian int32 expert ids, ``(len(prompt) + generated - 1)
x MoE layers x top_k`` in that order (what THUDM/slime reshapes; slime's routing replay,
docs/moe.md).

Log-probs: SGLang's sampler returns ``log_softmax(logits / temperature)`` before top-k/top-p
filtering (greedy: temperature 1), which is the :class:`~slime_hookspecs.SamplingParams`
convention; ``temperature = 0`` is sent as is (SGLang turns it into top_k = 1).

Weight versions are strings in SGLang; slime's are integers, sent as ``str(version)``. A fresh
server reports ``"default"``, read here as ``-1`` (no version synced yet). The current version is
read from ``GET /model_info`` (SGLang 0.5.23 removed ``/get_weight_version``, which slime's pinned
SGLang still has and which is used when ``/model_info`` answers 404).
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass
from typing import Any

from slime_hookspecs import SamplingParams

# endpoint -> HTTP method, as routed by sglang/srt/entrypoints/http_server.py
ENDPOINTS: dict[str, str] = {
    "/generate": "POST",
    "/health_generate": "GET",
    "/model_info": "GET",  # carries "weight_version" (SGLang 0.5.23 has no /get_weight_version)
    "/flush_cache": "POST",
    "/pause_generation": "POST",
    "/continue_generation": "POST",
    "/abort_request": "POST",
    "/update_weights_from_disk": "POST",
    "/update_weights_from_tensor": "POST",
    "/init_weights_update_group": "POST",
    "/update_weights_from_distributed": "POST",
    "/destroy_weights_update_group": "POST",
    "/release_memory_occupation": "POST",
    "/resume_memory_occupation": "POST",
    "/load_lora_adapter": "POST",  # LoRA runs (sglang_rollout.lora)
    "/unload_lora_adapter": "POST",
}

# older SGLang servers (the ones slime pins) answer the weight version here; used after a 404
LEGACY_ENDPOINTS: dict[str, str] = {"/get_weight_version": "GET"}

FINISH_REASONS = ("stop", "length", "abort")
INITIAL_VERSION = "default"  # what SGLang reports before any versioned update


class SGLangResponseError(RuntimeError):
    """A 2xx answer whose body is not what SGLang sends (names URL, endpoint and body)."""


def clip(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more chars)"


# -- requests ---------------------------------------------------------------------------------


def sampling_params_body(params: SamplingParams, skip_special_tokens: bool = True) -> dict[str, Any]:
    """SGLang ``sampling_params`` for one request (empty stop lists are left out)."""
    body: dict[str, Any] = {
        "temperature": float(params.temperature),
        "top_p": float(params.top_p),
        "top_k": int(params.top_k),
        "max_new_tokens": int(params.max_new_tokens),
        "ignore_eos": bool(params.ignore_eos),
        "skip_special_tokens": bool(skip_special_tokens),
        # keep the matched stop string in the text: the token ids include it anyway (slime too)
        "no_stop_trim": True,
        "spaces_between_special_tokens": False,
    }
    if params.stop:
        body["stop"] = list(params.stop)
    if params.stop_token_ids:
        body["stop_token_ids"] = [int(t) for t in params.stop_token_ids]
    if params.seed is not None:
        body["sampling_seed"] = int(params.seed)
    return body


def generate_body(prompt_ids: list[int], params: SamplingParams,
                  skip_special_tokens: bool = True,
                  routed_experts: bool = False, lora_name: str | None = None) -> dict[str, Any]:
    """``POST /generate`` for one prompt given as token ids (never text: no re-tokenization);
    ``routed_experts``: ask for the experts of every token (routing replay); ``lora_name``:
    generate with that loaded LoRA adapter (``lora_path`` takes the adapter's name)."""
    body: dict[str, Any] = {
        "input_ids": [int(t) for t in prompt_ids],
        "sampling_params": sampling_params_body(params, skip_special_tokens),
        "return_logprob": True,
    }
    if routed_experts:
        body["return_routed_experts"] = True
    if lora_name is not None:
        body["lora_path"] = str(lora_name)
    return body


def load_lora_adapter_body(lora_name: str, lora_path: str) -> dict[str, Any]:
    """``POST /load_lora_adapter`` (``LoadLoRAAdapterReqInput``): a PEFT adapter directory the
    server reads, served under ``lora_name`` (not pinned: it may be unloaded)."""
    return {"lora_name": str(lora_name), "lora_path": str(lora_path)}


def unload_lora_adapter_body(lora_name: str) -> dict[str, Any]:
    """``POST /unload_lora_adapter`` (``UnloadLoRAAdapterReqInput``)."""
    return {"lora_name": str(lora_name)}


def version_str(version: int) -> str:
    return str(int(version))


def update_weights_from_disk_body(model_path: str, version: int, load_format: str | None = None,
                                  flush_cache: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"model_path": str(model_path), "weight_version": version_str(version),
                            "flush_cache": bool(flush_cache)}
    if load_format is not None:
        body["load_format"] = load_format
    return body


def update_weights_from_tensor_body(serialized_named_tensors: list[str], version: int,
                                    load_format: str | None = None,
                                    flush_cache: bool = True) -> dict[str, Any]:
    """``serialized_named_tensors``: one base64 ``MultiprocessingSerializer`` payload per TP rank."""
    body: dict[str, Any] = {"serialized_named_tensors": list(serialized_named_tensors),
                            "weight_version": version_str(version),
                            "flush_cache": bool(flush_cache)}
    if load_format is not None:
        body["load_format"] = load_format
    return body


def init_weights_update_group_body(master_address: str, master_port: int, rank_offset: int,
                                   world_size: int, group_name: str = "weight_update_group",
                                   backend: str = "nccl") -> dict[str, Any]:
    return {"master_address": master_address, "master_port": int(master_port),
            "rank_offset": int(rank_offset), "world_size": int(world_size),
            "group_name": group_name, "backend": backend}


def update_weights_from_distributed_body(names: list[str], dtypes: list[Any],
                                         shapes: list[list[int]], version: int,
                                         group_name: str = "weight_update_group",
                                         flush_cache: bool = True,
                                         load_format: str | None = None) -> dict[str, Any]:
    """Announce one broadcast bucket; dtypes may be torch dtypes or names (``bfloat16``)."""
    if not len(names) == len(dtypes) == len(shapes):
        raise ValueError(
            f"update_weights_from_distributed: {len(names)} names, {len(dtypes)} dtypes and "
            f"{len(shapes)} shapes; they must match one to one"
        )
    body: dict[str, Any] = {
        "names": list(names),
        "dtypes": [str(d).replace("torch.", "") for d in dtypes],
        "shapes": [[int(x) for x in s] for s in shapes],
        "group_name": group_name,
        "flush_cache": bool(flush_cache),
        "weight_version": version_str(version),
    }
    if load_format is not None:
        body["load_format"] = load_format
    return body


def destroy_weights_update_group_body(group_name: str = "weight_update_group") -> dict[str, Any]:
    return {"group_name": group_name}


def abort_all_body() -> dict[str, Any]:
    return {"abort_all": True}


def pause_generation_body(mode: str = "abort") -> dict[str, Any]:
    return {"mode": mode}


def continue_generation_body() -> dict[str, Any]:
    return {}


def memory_body(tags: list[str] | None = None) -> dict[str, Any]:
    """``/release_memory_occupation`` and ``/resume_memory_occupation`` (tags: weights, kv_cache)."""
    return {} if tags is None else {"tags": list(tags)}


# -- responses --------------------------------------------------------------------------------


@dataclass
class Generation:
    """One parsed ``/generate`` answer."""

    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str  # stop | length | abort
    weight_version: int | None  # None when the server did not report one
    text: str
    abort_message: str = ""
    abort_status: int | None = None  # set when SGLang aborted the request itself (an error)
    routed_experts: bytes | None = None  # meta_info.routed_experts, base64-decoded int32 ids


def parse_weight_version(where: str, value: Any) -> int:
    """SGLang's weight-version string as slime's integer (``"default"`` -> -1)."""
    if isinstance(value, bool):
        raise SGLangResponseError(f"{where}: weight_version {value!r} is not a version")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        if value == INITIAL_VERSION:
            return -1
        try:
            return int(value)
        except ValueError:
            pass
    raise SGLangResponseError(
        f"{where}: weight_version {value!r} is not an integer version (slime sends str(int); "
        f"{INITIAL_VERSION!r} before the first update)"
    )


def parse_get_weight_version(where: str, data: Any) -> int:
    if not isinstance(data, dict) or "weight_version" not in data:
        raise SGLangResponseError(f"{where}: expected {{\"weight_version\": ...}}, got {clip(repr(data))}")
    return parse_weight_version(where, data["weight_version"])


def parse_lora_update(where: str, data: Any) -> dict[str, str]:
    """A ``LoRAUpdateOutput`` answer (``{"success", "error_message", "loaded_adapters"}``) ->
    the adapters the server holds (name -> path); ``success`` false raises with the answer."""
    if not isinstance(data, dict) or not isinstance(data.get("success"), bool):
        raise _bad(where, "expected a LoRAUpdateOutput object with 'success'", data)
    if not data["success"]:
        raise SGLangResponseError(f"{where}: failed: {data.get('error_message') or '(no message)'}"
                                  f"; body: {clip(repr(data))}")
    loaded = data.get("loaded_adapters")
    if not isinstance(loaded, dict):
        raise _bad(where, "no 'loaded_adapters' object in a successful answer", data)
    return {str(k): str(v) for k, v in loaded.items()}


def _bad(where: str, what: str, data: Any) -> SGLangResponseError:
    return SGLangResponseError(f"{where}: {what}; body: {clip(repr(data))}")


def parse_generate(where: str, data: Any) -> Generation:
    """Token ids, log-probs, finish reason and weight version of one non-streamed answer."""
    if not isinstance(data, dict) or not isinstance(data.get("meta_info"), dict):
        raise _bad(where, "expected an object with 'meta_info'", data)
    meta = data["meta_info"]
    reason = meta.get("finish_reason")
    if not isinstance(reason, dict) or reason.get("type") not in FINISH_REASONS:
        raise _bad(where, f"meta_info.finish_reason must be an object with type in "
                          f"{FINISH_REASONS}, got {reason!r}", data)
    kind = str(reason["type"])
    pairs = meta.get("output_token_logprobs")
    if pairs is None:
        if kind != "abort":
            raise _bad(where, "no meta_info.output_token_logprobs although return_logprob was "
                              "set", data)
        pairs = []  # aborted before any token: nothing to keep
    if not isinstance(pairs, list):
        raise _bad(where, "meta_info.output_token_logprobs is not a list", data)
    ids: list[int] = []
    lps: list[float] = []
    for i, item in enumerate(pairs):
        ok = isinstance(item, (list, tuple)) and len(item) >= 2
        lp, tok = (item[0], item[1]) if ok else (None, None)
        if (not ok or isinstance(lp, bool) or not isinstance(lp, (int, float))
                or isinstance(tok, bool) or not isinstance(tok, int) or math.isnan(lp)):
            raise _bad(where, f"output_token_logprobs[{i}] = {item!r} is not "
                              "[logprob, token_id, text]", data)
        ids.append(tok)
        lps.append(float(lp))
    out_ids = data.get("output_ids")
    if out_ids is not None and list(out_ids) != ids:
        raise _bad(where, f"output_ids ({len(out_ids)} tokens) disagree with "
                          f"output_token_logprobs ({len(ids)} tokens)", data)
    version = meta.get("weight_version")
    try:
        parsed = None if version is None else parse_weight_version(where, version)
    except SGLangResponseError as exc:
        raise _bad(where, str(exc).removeprefix(f"{where}: "), data) from None
    text = data.get("text")
    gen = Generation(token_ids=ids, log_probs=lps, finish_reason=kind, weight_version=parsed,
                     text=text if isinstance(text, str) else "")
    routed = meta.get("routed_experts")
    if routed is not None:
        try:
            if not isinstance(routed, str):
                raise TypeError(type(routed).__name__)
            gen.routed_experts = base64.b64decode(routed.encode("ascii"), validate=True)
        except (TypeError, ValueError, binascii.Error) as exc:
            raise _bad(where, f"meta_info.routed_experts is not base64 text ({exc})",
                       data) from None
    if kind == "abort":
        gen.abort_message = str(reason.get("message") or "")
        status = reason.get("status_code")
        gen.abort_status = int(status) if isinstance(status, int) and status >= 400 else None
    return gen
