"""Request bodies, response parsing and the [sglang] section, without a server."""

from __future__ import annotations

import pytest
from sglang_rollout import api
from sglang_rollout.config import SGLangSection, normalize_url
from slime_hookspecs import SamplingParams

W = "SGLang server http://h:1: POST /generate"


def test_generate_body_sends_token_ids_and_every_sampling_setting() -> None:
    sp = SamplingParams(temperature=0.7, top_p=0.9, top_k=20, max_new_tokens=12, stop=["\n\n"],
                        stop_token_ids=[7, 9], ignore_eos=True, seed=123)
    body = api.generate_body([5, 6, 7], sp)
    assert body == {
        "input_ids": [5, 6, 7],
        "return_logprob": True,
        "sampling_params": {
            "temperature": 0.7, "top_p": 0.9, "top_k": 20, "max_new_tokens": 12,
            "stop": ["\n\n"], "stop_token_ids": [7, 9], "ignore_eos": True,
            "sampling_seed": 123, "skip_special_tokens": True, "no_stop_trim": True,
            "spaces_between_special_tokens": False,
        },
    }
    assert "text" not in body  # token ids only: never re-tokenized


def test_generate_body_defaults_leave_out_empty_stops_and_seed() -> None:
    sp = api.generate_body([1], SamplingParams(temperature=0.0), skip_special_tokens=False)
    params = sp["sampling_params"]
    assert params["temperature"] == 0.0 and params["top_k"] == -1
    assert params["skip_special_tokens"] is False
    assert not {"stop", "stop_token_ids", "sampling_seed"} & set(params)


def _answer(kind: dict, pairs: list | None, version: object = "4", **extra: object) -> dict:
    meta = {"id": "r", "finish_reason": kind, "prompt_tokens": 3, "weight_version": version,
            "completion_tokens": len(pairs or []), "cached_tokens": 0}
    if pairs is not None:
        meta["output_token_logprobs"] = pairs
    return {"text": "ab", "meta_info": meta, **extra}


@pytest.mark.parametrize("kind", [
    {"type": "stop", "matched": 2}, {"type": "stop", "matched": "\n"},
    {"type": "length", "length": 2},
])
def test_parse_generate_reads_tokens_logprobs_reason_and_version(kind: dict) -> None:
    data = _answer(kind, [[-0.5, 11, None], [-1.25, 2, "x"]], output_ids=[11, 2])
    g = api.parse_generate(W, data)
    assert (g.token_ids, g.log_probs) == ([11, 2], [-0.5, -1.25])
    assert g.finish_reason == kind["type"] and g.weight_version == 4 and g.text == "ab"
    assert g.abort_status is None


def test_parse_generate_abort_without_logprobs_is_an_empty_reply() -> None:
    g = api.parse_generate(W, _answer({"type": "abort", "message": "Abort in waiting queue",
                                       "status_code": None, "err_type": None}, None))
    assert (g.token_ids, g.finish_reason, g.abort_status) == ([], "abort", None)
    assert g.abort_message == "Abort in waiting queue"


def test_parse_generate_flags_an_abort_the_server_chose_with_an_error_status() -> None:
    g = api.parse_generate(W, _answer({"type": "abort", "message": "too long",
                                       "status_code": 400, "err_type": "BadRequestError"}, []))
    assert g.abort_status == 400 and g.abort_message == "too long"


@pytest.mark.parametrize("data, fragment", [
    ([], "expected an object with 'meta_info'"),
    ({"meta_info": {"finish_reason": None}}, "finish_reason"),
    ({"meta_info": {"finish_reason": {"type": "eos"}}}, "finish_reason"),
    (_answer({"type": "stop"}, None), "no meta_info.output_token_logprobs"),
    (_answer({"type": "stop"}, [[None, 3, None]]), "output_token_logprobs[0]"),
    (_answer({"type": "stop"}, [[-1.0, "3", None]]), "output_token_logprobs[0]"),
    (_answer({"type": "stop"}, [[-1.0]]), "output_token_logprobs[0]"),
    (_answer({"type": "stop"}, [[-1.0, 3, None]], output_ids=[4]), "disagree"),
    (_answer({"type": "stop"}, [], version="v2"), "not an integer version"),
])
def test_parse_generate_rejects_bodies_sglang_does_not_send(data: object, fragment: str) -> None:
    with pytest.raises(api.SGLangResponseError) as err:
        api.parse_generate(W, data)
    assert fragment in str(err.value) and W in str(err.value) and "body:" in str(err.value)


def test_weight_versions_are_strings_of_ints_and_default_reads_minus_one() -> None:
    assert api.parse_get_weight_version("x", {"weight_version": "default"}) == -1
    assert api.parse_get_weight_version("x", {"weight_version": "12"}) == 12
    for bad in ({"weight_version": True}, {"weight_version": "1.5"}, {"version": "1"}, None):
        with pytest.raises(api.SGLangResponseError, match="x: "):
            api.parse_get_weight_version("x", bad)


def test_weight_update_bodies() -> None:
    assert api.update_weights_from_disk_body("/w/v000003", 3) == {
        "model_path": "/w/v000003", "weight_version": "3", "flush_cache": True}
    assert api.update_weights_from_disk_body("/w", 1, load_format="safetensors")["load_format"] == "safetensors"
    assert api.update_weights_from_tensor_body(["AAA", "AAA"], 2) == {
        "serialized_named_tensors": ["AAA", "AAA"], "weight_version": "2", "flush_cache": True}
    assert api.init_weights_update_group_body("10.0.0.1", 29500, 1, 3) == {
        "master_address": "10.0.0.1", "master_port": 29500, "rank_offset": 1, "world_size": 3,
        "group_name": "weight_update_group", "backend": "nccl"}
    import torch

    body = api.update_weights_from_distributed_body(
        ["a", "b"], [torch.bfloat16, "float32"], [(2, 3), [4]], 5)
    assert body == {"names": ["a", "b"], "dtypes": ["bfloat16", "float32"],
                    "shapes": [[2, 3], [4]], "group_name": "weight_update_group",
                    "flush_cache": True, "weight_version": "5"}
    with pytest.raises(ValueError, match="2 names, 1 dtypes and 2 shapes"):
        api.update_weights_from_distributed_body(["a", "b"], ["x"], [[1], [2]], 1)
    assert api.abort_all_body() == {"abort_all": True}
    assert api.pause_generation_body("retract") == {"mode": "retract"}
    assert api.memory_body() == {} and api.memory_body(["kv_cache"]) == {"tags": ["kv_cache"]}


@pytest.mark.parametrize("raw, url", [
    ("127.0.0.1:30000", "http://127.0.0.1:30000"),
    ("http://gpu-3:8000/", "http://gpu-3:8000"),
    ("https://[::1]:443", "https://[::1]:443"),
])
def test_server_addresses_are_normalized(raw: str, url: str) -> None:
    assert normalize_url(raw) == url


@pytest.mark.parametrize("raw", ["gpu-3", "ftp://h:1", "http://h:1/generate", "http://:80"])
def test_bad_server_addresses_fail_naming_the_key(raw: str) -> None:
    with pytest.raises(ValueError, match=r"sglang\.urls"):
        SGLangSection(urls=[raw])


@pytest.mark.parametrize("kw, key", [
    ({"urls": ["h:1", "http://h:1"]}, "sglang.urls"),
    ({"launch_router": True}, "sglang.launch_router"),
    ({"tp_size": 0}, "sglang.tp_size"),
    ({"pause_mode": "stop"}, "sglang.pause_mode"),
    ({"request_timeout_s": 0}, "sglang.request_timeout_s"),
    ({"max_concurrency": 0}, "sglang.max_concurrency"),
    ({"mem_fraction_static": 1.5}, "sglang.mem_fraction_static"),
])
def test_section_rejects_bad_values_naming_the_key(kw: dict, key: str) -> None:
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        SGLangSection(**kw)
