"""The rollout buffer against hostile and malformed requests, over real HTTP on 127.0.0.1.

Issue 17, items 9-11: ``wait=nan`` spun a core forever; deep JSON and ``num_groups=nan`` were
500s; string / huge / negative token ids, string and NaN rewards, infinite log-probs and
booleans were accepted and handed to the trainer; ``num_groups=2.7`` was read as 2. Now a
body that is not JSON is a 400 and every bad field a 422 naming it, and nothing refused
reaches ``get_rollout_data``.
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from slime_agent import schemas
from slime_agent.buffer.client import RolloutBufferClient
from slime_agent.buffer.server import RolloutBufferServer
from slime_agent.validation import check
from slime_hookspecs import Sample, Status


@pytest.fixture
def server():
    srv = RolloutBufferServer(token="tok").start()
    yield srv
    srv.stop()


def raw(srv: RolloutBufferServer, method: str, path: str, data: bytes | None = None,
        timeout: float = 10.0) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(srv.url + path, data=data, method=method,
                                 headers={"Authorization": "Bearer tok"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def started(srv: RolloutBufferServer, **task: Any) -> tuple[RolloutBufferClient, dict[str, Any]]:
    c = RolloutBufferClient(srv.url, "tok")
    c.start({"group_size": 1, **task})
    pending = Sample(group_index=0, index=0, prompt="p", tokens=[5, 6, 7], rollout_id=0)
    c.add_prompts([{"instance_id": "g0", "samples": [pending.to_dict()]}])
    return c, c.next_job()["job"]


def finished(job: dict[str, Any]) -> dict[str, Any]:
    s = Sample.from_dict(dict(job["sample"]))
    s.append_response_tokens([9, 10], [-0.5, -0.25], text="ok")
    s.status, s.reward = Status.COMPLETED, 1.0
    return s.to_dict()


def test_wait_nan_is_refused_without_spinning(server):
    c, _ = started(server)
    t0, cpu0 = time.monotonic(), time.process_time()
    for path in ("/get_rollout_data?num_groups=1&wait=nan", "/get_rollout_data?wait=NaN",
                 "/get_rollout_data?wait=inf", "/get_rollout_data?wait=1e999",
                 "/get_rollout_data?wait=-1", "/task?wait=nan"):
        status, body = raw(server, "GET", path, timeout=5)
        assert status == 422 and body["field"] == "wait", (path, body)
        assert body["message"].startswith("wait: ")
    status, body = raw(server, "POST", "/get_rollout_data", b'{"num_groups": 1, "wait": NaN}')
    assert status == 422 and body["field"] == "wait" and "not a finite number" in body["message"]
    assert time.monotonic() - t0 < 5
    time.sleep(1.0)  # a spinning wait loop would burn this second on the server's thread
    assert time.process_time() - cpu0 < 0.8
    assert c.status()["success"] is True


@pytest.mark.parametrize(("query", "needle"), [
    ("num_groups=nan", "num_groups: 'nan' is not of type 'integer'"),
    ("num_groups=2.7", "num_groups: 2.7 is not of type 'integer'"),
    ("num_groups=true", "num_groups: True is not of type 'integer'"),
    ("num_groups=0", "num_groups: 0 is less than the minimum of 1"),
    ("num_groups=1&colour=red", "unknown field(s)"),
])
def test_fetch_parameters_are_validated(server, query, needle):
    started(server)
    status, body = raw(server, "GET", f"/get_rollout_data?{query}")
    assert status == 422 and needle in body["message"], body


def test_deep_json_and_bad_bodies_are_4xx(server):
    deep = b'{"instances": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    status, body = raw(server, "POST", "/prompts", deep)
    assert status == 400 and "nested deeper than 64" in body["message"]
    medium = b'{"group_size": 1, "task_kwargs": ' + b'{"a": ' * 500 + b"1" + b"}" * 501
    status, body = raw(server, "POST", "/start_rollout", medium)
    assert status == 400 and body["message"].startswith("task_kwargs.a.a.a")
    for data in (b"{nope", b"", b"[1, 2]", "{\"a\": \"\udcff\"}".encode("utf-8", "surrogatepass")):
        status, body = raw(server, "POST", "/start_rollout", data)
        assert status == 400 and body["success"] is False, (data, body)
    status, body = raw(server, "POST", "/start_rollout", b'{"group_size": 2.0}')
    assert status == 422 and body["field"] == "group_size"
    status, body = raw(server, "POST", "/start_rollout", b'{"group_size": true}')
    assert status == 422 and body["field"] == "group_size"


BAD_FIELDS = [
    ("tokens", ["5", "6", "7", "9", "10"], "samples[0].tokens[0]: '5' is not an integer"),
    ("tokens", [5, 6, 7, 9, 10**15], "samples[0].tokens[4]: 1000000000000000 is outside"),
    ("tokens", [5, 6, 7, 9, -7], "samples[0].tokens[4]: -7 is outside"),
    ("tokens", [5, 6, 7, 9, True], "samples[0].tokens[4]: True is not an integer"),
    ("tokens", [5, 6, 7, 9, 10.0], "samples[0].tokens[4]: 10.0 is not an integer"),
    ("reward", "high", "samples[0].reward: 'high' is not valid"),
    ("reward", True, "samples[0].reward: True is not valid"),
    ("reward", {"acc": "x"}, "samples[0].reward"),
    ("loss_mask", [True, True], "samples[0].loss_mask[0]: True is not an integer"),
    ("loss_mask", [1, 2], "samples[0].loss_mask[1]: 2 is outside"),
    ("rollout_log_probs", [-0.5, 3.0], "samples[0].rollout_log_probs[1]: 3.0 is outside"),
    ("response_length", 2.0, "samples[0].response_length: 2.0 is not of type 'integer'"),
    ("status", "done", "samples[0].status: 'done' is not one of"),
    ("remove_sample", 1, "samples[0].remove_sample: 1 is not of type 'boolean'"),
    ("group_index", 2**70, "samples[0].group_index"),
    ("weight_versions", [False], "samples[0].weight_versions[0]: False is not an integer"),
    # routing replay's record (5 tokens: 4 positions)
    ("rollout_routed_experts", {"shape": [4, 1, 1], "dtype": "int32", "data": ""},
     "samples[0].rollout_routed_experts"),
    ("rollout_routed_experts", {"shape": [3, 1, 1], "dtype": "uint8", "data": "AAAA"},
     "samples[0]: sample group=0 index=0: rollout_routed_experts covers 3 positions, expected "
     "len(tokens) - 1 = 4"),
    ("rollout_routed_experts", {"shape": [4, 1, 1], "dtype": "uint8", "data": "AAAA"},
     "samples[0]: RoutedExperts of shape (4, 1, 1) and dtype uint8 needs 4 bytes, got 3"),
]


@pytest.mark.parametrize(("key", "value", "needle"), BAD_FIELDS)
def test_bad_sample_fields_are_refused_with_422(server, key, value, needle):
    c, job = started(server)
    d = {**finished(job), key: value}
    status, body = raw(server, "POST", "/buffer/write", json.dumps(
        {"instance_id": job["instance_id"], "slot": job["slot"], "samples": [d]}).encode())
    assert status == 422 and needle in body["message"], body
    assert body["field"].startswith("samples[0]")
    # nothing reached the trainer, and the slot is still open for a good write
    assert c.get_rollout_data(1)["groups"] == []
    c.write(job["instance_id"], job["slot"], [finished(job)])
    (group,) = c.get_rollout_data(1)["groups"]
    assert group["samples"][0]["tokens"] == [5, 6, 7, 9, 10]


@pytest.mark.parametrize(("literal", "key", "value", "where"), [
    (b"NaN", "reward", "@@", "reward"),
    (b"Infinity", "reward", "@@", "reward"),
    (b"1e999", "reward", {"acc": "@@"}, "reward.acc"),  # valid JSON, read as inf
    (b"-Infinity", "rollout_log_probs", [-0.5, "@@"], "rollout_log_probs[1]"),
    (b"NaN", "metadata", {"deep": [{"x": "@@"}]}, "metadata.deep[0].x"),  # any-typed fields too
])
def test_non_finite_numbers_are_refused(server, literal, key, value, where):
    c, job = started(server)
    d = finished(job)
    d[key] = value
    data = json.dumps({"instance_id": "g0", "slot": 0, "samples": [d]}).encode()
    status, body = raw(server, "POST", "/buffer/write", data.replace(b'"@@"', literal))
    assert status == 422 and "not a finite number" in body["message"], body
    assert body["field"] == f"samples[0].{where}"
    assert c.get_rollout_data(1)["groups"] == []
    assert c.status()["report"]["stats"]["invalid_writes"] == 1


def test_token_ids_are_checked_against_the_tasks_vocabulary(server):
    c, job = started(server, vocab_size=10)
    status, body = raw(server, "POST", "/buffer/write", json.dumps(
        {"instance_id": "g0", "slot": 0, "samples": [finished(job)]}).encode())
    assert status == 422 and body["field"] == "samples[0].tokens[4]"
    assert "not below the task's vocab_size 10" in body["message"]


def test_prompts_and_writes_refuse_unknown_and_missing_keys(server):
    c, job = started(server)
    status, body = raw(server, "POST", "/prompts", json.dumps({"instances": [
        {"instance_id": "g1", "samples": [{"tokens": [1], "prompt": 7}]}]}).encode())
    assert status == 422 and body["message"].startswith("instances[0].samples[0].prompt")
    status, body = raw(server, "POST", "/buffer/write", json.dumps(
        {"instance_id": "g0", "slot": 0}).encode())
    assert status == 422 and "samples" in body["message"]
    status, body = raw(server, "POST", "/buffer/write", json.dumps(
        {"instance_id": "g0", "slot": 0, "sample": finished(job), "extra": 1}).encode())
    assert status == 422 and "unknown field(s)" in body["message"]


def test_the_job_workers_receive_matches_its_schema(server):
    c, _ = started(server, engine={"base_url": "http://127.0.0.1:1/v1", "token": "t"})
    c.http.post("/prompts", {"instances": [{"instance_id": "g1", "samples": [
        Sample(tokens=[1, 2], prompt=[{"role": "user", "content": "hi"}]).to_dict()]}]})
    resp = c.next_job()
    check(resp, schemas.JOB_RESPONSE)
    check(resp["job"]["sample"], schemas.SAMPLE)
    assert resp["job"]["instance_id"] == "g1" and resp["task"]["group_size"] == 1
    check(c.next_job(), schemas.JOB_RESPONSE)  # nothing left: job and task are null


def test_sample_schema_lists_every_sample_field():
    assert set(schemas.SAMPLE["properties"]) == {f.name for f in dataclasses.fields(Sample)}
