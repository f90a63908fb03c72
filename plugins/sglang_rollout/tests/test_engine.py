"""SGLangEngine against a real HTTP server on 127.0.0.1 with SGLang's endpoints and shapes."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sglang_rollout.api import SGLangResponseError
from sglang_rollout.engine import SGLangAbortedError
from sglang_rollout.fake_server import ScriptedEngine
from sglang_rollout.http import SGLangConnectionError, SGLangHTTPError
from sglang_rollout.launch import free_port
from slime_hookspecs import SamplingParams, hookimpl


def test_generate_sends_input_ids_and_parses_sglang_answers(fake_server, make_engine) -> None:
    srv = fake_server()
    eng = make_engine([srv.url])
    outs = eng.generate([[1, 2, 3], [40]], [SamplingParams(max_new_tokens=4),
                                            SamplingParams(max_new_tokens=9, stop_token_ids=[43])])
    assert [o.token_ids for o in outs] == [[4, 5, 6, 7], [41, 42, 43]]
    assert outs[0].log_probs == pytest.approx([-0.1, -0.2, -0.3, -0.4])
    assert [o.finish_reason for o in outs] == ["length", "stop"]
    assert all(o.weight_version == -1 for o in outs)  # fresh server: "default"
    gens = [r.body for r in srv.requests if r.path == "/generate"]
    assert sorted(g["input_ids"] for g in gens) == [[1, 2, 3], [40]]
    assert all(g["return_logprob"] is True for g in gens)
    assert eng.generate([], []) == []
    with pytest.raises(ValueError, match="2 prompts but 1 sampling params"):
        eng.generate([[1], [2]], [SamplingParams()])
    with pytest.raises(ValueError, match="prompt 0 is empty"):
        eng.generate([[]], [SamplingParams()])


def test_http_errors_name_url_endpoint_and_body(fake_server, make_engine) -> None:
    srv = fake_server()
    eng = make_engine([srv.url])
    srv.fail["/model_info"] = (500, "scheduler died")
    with pytest.raises(SGLangHTTPError) as err:
        eng.weight_version()
    msg = str(err.value)
    assert srv.url in msg and "GET /model_info" in msg and "HTTP 500" in msg
    assert "scheduler died" in msg
    srv.fail["/generate"] = (200, '{"text": "x", "meta_')
    with pytest.raises(SGLangResponseError) as err:
        eng.generate([[1]], [SamplingParams(max_new_tokens=1)])
    msg = str(err.value)
    assert srv.url in msg and "POST /generate" in msg and "malformed JSON" in msg
    assert '{"text": "x", "meta_' in msg
    srv.fail["/generate"] = (200, json.dumps({"text": "", "meta_info": {"finish_reason": {
        "type": "abort", "message": "input too long", "status_code": 400}}}))
    with pytest.raises(SGLangAbortedError, match="aborted the request itself.*input too long"):
        eng.generate([[1]], [SamplingParams(max_new_tokens=1)])


def test_unreachable_server_fails_at_start_naming_it(make_engine) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SGLangConnectionError, match=f"{url}: GET /model_info failed"):
        make_engine([url])


def test_older_servers_report_the_version_on_get_weight_version(fake_server, make_engine,
                                                                tmp_path) -> None:
    srv = fake_server(legacy=True)
    eng = make_engine([srv.url])
    assert eng.weight_version() == -1
    _write_weights(tmp_path / "v2", 0.5)
    eng.update_weights_from_disk(str(tmp_path / "v2"), 2)
    assert eng.weight_version() == 2
    assert srv.paths().count("/model_info") == 1  # asked once, then remembered
    assert srv.paths()[-1] == "/get_weight_version"


def test_one_url_per_engine(fake_server, make_engine) -> None:
    a, b = fake_server(), fake_server()
    with pytest.raises(ValueError, match=r"lists 2 server\(s\) but rollout.num_engines = 1"):
        make_engine([a.url, b.url], num_engines=1)
    second = make_engine([a.url, b.url], index=1)
    second.generate([[1]], [SamplingParams(max_new_tokens=1)])
    assert "/generate" in b.paths() and "/generate" not in a.paths()


def _generate_in_thread(eng, prompts, params) -> tuple[threading.Thread, list]:
    box: list = []
    t = threading.Thread(target=lambda: box.append(eng.generate(prompts, params)))
    t.start()
    return t, box


def test_abort_ends_sent_and_unsent_requests(fake_server, make_engine) -> None:
    srv = fake_server(ScriptedEngine(delay_s=0.02))
    eng = make_engine([srv.url], max_concurrency=1, abort_retry_s=0.2)
    sp = SamplingParams(max_new_tokens=500)
    t, box = _generate_in_thread(eng, [[1], [2], [3]], [sp, sp, sp])
    deadline = time.monotonic() + 10
    while srv.in_flight == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    eng.abort()
    t.join(20)
    outs = box[0]
    assert [o.finish_reason for o in outs] == ["abort"] * 3
    assert 0 < len(outs[0].token_ids) < 500  # partial reply kept, with its log-probs
    assert len(outs[0].log_probs) == len(outs[0].token_ids)
    assert outs[1].token_ids == outs[2].token_ids == []
    assert srv.paths().count("/generate") == 1  # the other two were never sent
    aborts = [r.body for r in srv.requests if r.path == "/abort_request"]
    assert aborts and all(b == {"abort_all": True} for b in aborts)
    # a later call is not affected
    assert eng.generate([[1]], [SamplingParams(max_new_tokens=2)])[0].finish_reason == "length"


def _write_weights(path: Path, value: float) -> dict[str, Any]:
    import torch
    from safetensors.torch import save_file

    path.mkdir(parents=True)
    w = {"w": torch.full((2, 3), value), "b": torch.arange(3.0)}
    save_file(w, str(path / "model.safetensors"))
    return w


def test_update_from_disk_pauses_flushes_loads_and_checks_the_version(
        fake_server, make_engine, tmp_path) -> None:
    import torch

    srv = fake_server()
    eng = make_engine([srv.url])
    w = _write_weights(tmp_path / "v000003", 1.5)
    srv.requests.clear()
    eng.update_weights_from_disk(str(tmp_path / "v000003"), 3)
    assert srv.paths() == ["/pause_generation", "/flush_cache", "/update_weights_from_disk",
                           "/continue_generation", "/model_info", "/get_weights_by_name",
                           "/get_weights_by_name"]
    assert srv.requests[0].body == {"mode": "abort"}
    assert [r.body for r in srv.requests[-2:]] == [{"name": "b", "truncate_size": 3},
                                                   {"name": "w", "truncate_size": 2}]
    assert eng.weights_checked == 1
    assert srv.requests[2].body == {"model_path": str(tmp_path / "v000003"),
                                    "weight_version": "3", "flush_cache": True}
    assert torch.equal(srv.engine.weights["w"], w["w"]) and srv.engine.version == 3
    assert eng.weight_version() == 3
    assert eng.generate([[1]], [SamplingParams(max_new_tokens=1)])[0].weight_version == 3
    # a failed load keeps the old version and says why, naming server and endpoint
    (tmp_path / "empty").mkdir()
    with pytest.raises(SGLangHTTPError, match=r"POST /update_weights_from_disk answered HTTP 400"
                                              r".*no \*\.safetensors"):
        eng.update_weights(str(tmp_path / "empty"), 4)
    assert srv.paths()[-1] == "/continue_generation"  # resumed even though the update failed
    assert eng.weight_version() == 3


def test_weights_read_back_catch_a_server_that_kept_other_weights(
        fake_server, make_engine, tmp_path) -> None:
    """sglang.check_weights: /model_info agrees, but the tensors the server holds do not."""
    from sglang_rollout.scripted_engine import ScriptedEngine

    class Stale(ScriptedEngine):
        def update_weights(self, weights: Any, version: int) -> None:  # mis-maps: keeps zeros
            super().update_weights({k: v * 0 for k, v in weights.items()}, version)

    srv = fake_server(Stale())
    eng = make_engine([srv.url])
    _write_weights(tmp_path / "v1", 1.5)
    with pytest.raises(RuntimeError, match=r"weights of version 1: b differs from what was sent "
                                           r"\(first rows: server \[0\.0, 0\.0, 0\.0\] != "
                                           r"sent \[0\.0, 1\.0, 2\.0\]\)"):
        eng.update_weights_from_disk(str(tmp_path / "v1"), 1)
    # a server that cannot answer (a model without get_weights_by_name) is not checked again
    srv.fail["/get_weights_by_name"] = (400, "Get parameter by name failed")
    srv.engine = ScriptedEngine()
    eng.update_weights_from_disk(str(tmp_path / "v1"), 2)
    eng.update_weights_from_disk(str(tmp_path / "v1"), 3)
    assert srv.paths().count("/get_weights_by_name") == 2 and eng.weights_checked == 0


def test_weights_read_back_from_a_bf16_server_of_an_fp32_trainer(
        fake_server, make_engine, tmp_path) -> None:
    """rollout.dtype = bfloat16 (or the server's own --dtype): the server holds the sent fp32
    tensors' bf16 rounding, and the check compares with that rounding, not the fp32 values."""
    import torch
    from sglang_rollout.scripted_engine import ScriptedEngine

    class Bf16(ScriptedEngine):
        def update_weights(self, weights: Any, version: int) -> None:
            super().update_weights({k: v.to(torch.bfloat16).float() for k, v in weights.items()},
                                   version)

    _write_weights(tmp_path / "v1", 1 + 2 ** -10)  # 1.0 in bf16
    for keys in ({"rollout": {"dtype": "bfloat16"}}, {"server_args": {"dtype": "bfloat16"}}):
        srv = fake_server(Bf16())
        eng = make_engine([srv.url], **keys)
        eng.update_weights_from_disk(str(tmp_path / "v1"), 1)
        assert eng.weights_checked == 1, keys
    srv = fake_server(Bf16())
    eng = make_engine([srv.url])  # served as sent (model.dtype auto): the rounding is caught
    with pytest.raises(RuntimeError, match=r"w differs from what was sent"):
        eng.update_weights_from_disk(str(tmp_path / "v1"), 1)


def test_before_weights_read_fires_in_the_engine_process(fake_server, make_engine, tmp_path,
                                                         monkeypatch, resolve) -> None:
    """The disk transport's engine side fires the hook, then the server reloads."""
    import slime_core.context as context
    from slime_std.weights.disk import receive

    calls: list[tuple[str, int]] = []

    class Recorder:
        @hookimpl
        def slime_before_weights_read(self, version_dir: str, target_version: int) -> None:
            calls.append((version_dir, target_version))

    manager, _ = resolve({})
    manager.register_object(Recorder(), "recorder")
    monkeypatch.setattr(context, "_MANAGER", manager)
    srv = fake_server()
    eng = make_engine([srv.url], pause_during_weight_update=False)
    _write_weights(tmp_path / "v1", 0.0)
    receive(eng, str(tmp_path / "v1"), 1)
    assert calls == [(str(tmp_path / "v1"), 1)]
    assert "/update_weights_from_disk" in srv.paths()
    assert "/pause_generation" not in srv.paths()


def test_flush_cache_is_retried_while_requests_run(fake_server, make_engine) -> None:
    srv = fake_server()
    eng = make_engine([srv.url], flush_cache_timeout_s=0.6)
    srv.in_flight = 1  # SGLang refuses to flush with requests running
    with pytest.raises(TimeoutError, match=r"/flush_cache kept failing for 0.6 s.*HTTP 400"):
        eng.flush_cache()
    threading.Timer(0.4, lambda: setattr(srv, "in_flight", 0)).start()
    eng.sec.flush_cache_timeout_s = 10
    eng.flush_cache()
    assert srv.paths().count("/flush_cache") >= 3


def test_update_from_tensor_sends_a_payload_sglang_deserializes(fake_server, make_engine) -> None:
    import torch

    srv = fake_server()
    eng = make_engine([srv.url], tp_size=2)
    w = {"layer.weight": torch.randn(4, 4), "layer.bias": torch.randn(4)}
    eng.update_weights(w, 7)
    body = next(r.body for r in srv.requests if r.path == "/update_weights_from_tensor")
    assert len(body["serialized_named_tensors"]) == 2 and body["weight_version"] == "7"
    assert set(srv.engine.weights) == set(w)
    assert all(torch.equal(srv.engine.weights[k], w[k]) for k in w)
    assert eng.weight_version() == 7
    with pytest.raises(TypeError, match="directory or a mapping"):
        eng.update_weights([1, 2], 8)


def test_distributed_update_bodies(fake_server, make_engine) -> None:
    srv = fake_server()
    eng = make_engine([srv.url])
    eng.init_weights_update_group("127.0.0.1", 29511, 1, 2, "g", "gloo")
    assert srv.groups["g"] == {"master_address": "127.0.0.1", "master_port": 29511,
                               "rank_offset": 1, "world_size": 2, "group_name": "g",
                               "backend": "gloo"}
    eng.update_weights_from_distributed(["a"], ["bfloat16"], [[2, 2]], 5, group_name="g")
    assert eng.weight_version() == 5
    eng.destroy_weights_update_group("g")
    with pytest.raises(SGLangHTTPError, match="group not initialized"):
        eng.update_weights_from_distributed(["a"], ["bfloat16"], [[2, 2]], 6, group_name="g")


def test_sleep_and_wake_release_and_resume_memory(fake_server, make_engine) -> None:
    srv = fake_server()
    off = make_engine([srv.url])
    off.sleep()
    off.wake_up()
    assert "/release_memory_occupation" not in srv.paths()  # no memory saver: a no-op
    eng = make_engine([srv.url], enable_sleep=True)
    eng.sleep()
    assert srv.released and srv.engine.asleep
    assert srv.paths()[-2:] == ["/flush_cache", "/release_memory_occupation"]
    with pytest.raises(RuntimeError, match="asleep"):
        eng.generate([[1]], [SamplingParams()])
    eng.wake_up()
    assert not srv.released and srv.paths()[-1] == "/resume_memory_occupation"
    assert eng.generate([[1]], [SamplingParams(max_new_tokens=1)])[0].token_ids == [2]


def test_health_and_shutdown(fake_server, make_engine) -> None:
    srv = fake_server()
    eng = make_engine([srv.url])
    assert eng.health() is True
    srv.fail["/health_generate"] = (503, "")
    assert eng.health() is False
    eng.shutdown()
    eng.shutdown()
    assert eng.health() is False
    with pytest.raises(RuntimeError, match="shut down"):
        eng.generate([[1]], [SamplingParams()])


def test_api_key_is_sent_as_bearer_token(fake_server, make_engine) -> None:
    srv = fake_server(api_key="s3cret")
    with pytest.raises(SGLangHTTPError, match="HTTP 401"):
        make_engine([srv.url])
    eng = make_engine([srv.url], api_key="s3cret")
    eng.generate([[1]], [SamplingParams(max_new_tokens=1)])
    assert srv.requests[-1].authorization == "Bearer s3cret"


def test_router_url_takes_generation_and_servers_keep_control(fake_server, make_engine) -> None:
    server, router = fake_server(), fake_server()
    eng = make_engine([server.url], router_url=router.url)
    eng.generate([[1]], [SamplingParams(max_new_tokens=1)])
    eng.abort()
    assert "/generate" in router.paths() and "/generate" not in server.paths()
    assert "/abort_request" in server.paths() and "/abort_request" not in router.paths()


def test_routed_experts_come_back_as_the_serving_engine_routed(fake_server, resolve,
                                                               tmp_path) -> None:
    """train.routing_replay: every /generate asks for routed experts; SGLang's int32 array
    becomes the compact record, covering the prompt and the generated tokens but the last;
    a wrong array is refused naming the server, the request and the field."""
    import base64

    import torch
    from sglang_rollout.engine import SGLangEngine
    from slime_core.testing import TINY_QWEN3_MOE, build_test_config
    from slime_std.engine.local_engine import LocalEngine

    model = {"init_config": dict(TINY_QWEN3_MOE, initializer_range=0.2)}
    served = LocalEngine(build_test_config(model=model, train={"routing_replay": "rollout"}))
    srv = fake_server(served)
    _, config = resolve({
        "run": {"run_dir": str(tmp_path / "run")}, "model": model,
        "train": {"routing_replay": "rollout"},
        "rollout": {"engine": "sglang", "num_engines": 1}, "sglang": {"urls": [srv.url]},
    })
    eng = SGLangEngine(config, 0)
    try:
        prompt = [5, 6, 7, 8]
        (out,) = eng.generate([prompt], [SamplingParams(max_new_tokens=5, ignore_eos=True,
                                                        seed=3)])
        assert all(r.body.get("return_routed_experts") is True
                   for r in srv.requests if r.path == "/generate")
        rec = out.routed_experts
        assert rec is not None and rec.shape == (len(prompt) + 5 - 1, 2, 2)
        control = served._routing
        with torch.no_grad(), control.recording():
            served._model(input_ids=torch.tensor([prompt + out.token_ids]))
            full = control.take()[:-1]
        got = torch.frombuffer(bytearray(rec.data), dtype=torch.uint8).view(rec.shape)
        assert torch.equal(got.long(), full.long())

        bad = base64.b64encode(torch.full((8 * 4,), 9, dtype=torch.int32).numpy().tobytes())
        srv.fail["/generate"] = (200, json.dumps({"text": "", "output_ids": [1, 2], "meta_info": {
            "finish_reason": {"type": "length", "length": 2},
            "output_token_logprobs": [[-0.1, 1, None], [-0.2, 2, None]],
            "routed_experts": bad.decode()}}))
        with pytest.raises(ValueError, match=r"POST /generate: meta_info.routed_experts \(prompt "
                                             r"of 4 tokens, 2 generated\): 128 bytes of int32 "
                                             r"expert ids, expected 80"):
            eng.generate([prompt], [SamplingParams(max_new_tokens=2)])
        srv.fail["/generate"] = (200, json.dumps({"text": "", "output_ids": [1], "meta_info": {
            "finish_reason": {"type": "length", "length": 1},
            "output_token_logprobs": [[-0.1, 1, None]],
            "routed_experts": base64.b64encode(
                torch.full((4 * 4,), 9, dtype=torch.int32).numpy().tobytes()).decode()}}))
        with pytest.raises(ValueError, match="expert ids span \\[9, 9\\], the model has experts "
                                             "0..7"):
            eng.generate([prompt], [SamplingParams(max_new_tokens=1)])
    finally:
        eng.shutdown()
        served.shutdown()
