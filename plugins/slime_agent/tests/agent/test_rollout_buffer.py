"""The rollout-buffer service over real HTTP on 127.0.0.1: auth, jobs and leases, writes and
their checks, complete groups kept together, partial and invalid groups reported."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from slime_agent.buffer.client import RolloutBufferClient
from slime_agent.buffer.server import RolloutBufferServer
from slime_agent.http import HttpError
from slime_hookspecs import Sample, Status


@pytest.fixture
def server():
    srv = RolloutBufferServer(token="tok-123", task_timeout_s=0.5).start()
    yield srv
    srv.stop()


def pending_group(group_index: int, n: int) -> list[dict[str, Any]]:
    return [Sample(group_index=group_index, index=group_index * 10 + k, prompt=f"p{group_index}",
                   tokens=[5, 6, 7], label=str(group_index), rollout_id=0).to_dict()
            for k in range(n)]


def finished(job: dict[str, Any], status: Status = Status.COMPLETED, n_resp: int = 2,
             **fields: Any) -> dict[str, Any]:
    s = Sample.from_dict(dict(job["sample"]))
    if n_resp:
        s.append_response_tokens([9] * n_resp, [-0.5] * n_resp, text="ok")
    s.status = status
    for k, v in fields.items():
        setattr(s, k, v)
    d = s.to_dict()
    d["group_index"], d["index"] = 999, 999  # a worker cannot move a sample to another group
    return d


def started(server: RolloutBufferServer, groups: int, n: int = 2) -> RolloutBufferClient:
    c = RolloutBufferClient(server.url, server.token)
    c.start({"group_size": n, "engine": {"base_url": "http://x"}})
    c.add_prompts([{"instance_id": f"g{i}", "samples": pending_group(i, n)} for i in range(groups)])
    return c


def test_token_required_and_loopback_only(server):
    for token in ("", "nope"):
        with pytest.raises(HttpError) as e:
            RolloutBufferClient(server.url, token).status()
        assert e.value.status == 401 and "bearer token" in e.value.body["message"]
    assert RolloutBufferClient(server.url, "tok-123").status()["success"] is True
    with pytest.raises(ValueError, match="rollout_buffer.host = '0.0.0.0' is not a loopback"):
        RolloutBufferServer(host="0.0.0.0")


def test_groups_are_returned_whole_and_partial_ones_reported(server):
    c = started(server, groups=3)
    jobs = [c.next_job()["job"] for _ in range(6)]
    assert {(j["instance_id"], j["slot"]) for j in jobs} == {
        (f"g{i}", k) for i in range(3) for k in range(2)}
    assert c.next_job()["job"] is None  # everything is leased
    by = {(j["instance_id"], j["slot"]): j for j in jobs}
    # g1 complete, g0 half written, g2 untouched
    for key in (("g1", 1), ("g0", 0), ("g1", 0)):
        c.write(key[0], key[1], [finished(by[key])])
    resp = c.get_rollout_data(2, wait=0.2)
    assert resp["success"] is False  # only one of the two groups asked for is complete
    (group,) = resp["groups"]
    assert group["instance_id"] == "g1"
    samples = [Sample.from_dict(d) for d in group["samples"]]
    assert [s.index for s in samples] == [10, 11] and {s.group_index for s in samples} == {1}
    assert {s.label for s in samples} == {"1"} and all(s.response_length == 2 for s in samples)
    assert samples[0].metadata["instance_id"] == "g1"
    partial = resp["report"]["partial_groups"]
    assert [(p["instance_id"], p["received"], p["expected"]) for p in partial] == [("g0", 1, 2)]
    # the group is complete once its last slot is written
    c.write("g0", 1, [finished(by[("g0", 1)])])
    assert [g["instance_id"] for g in c.get_rollout_data(1)["groups"]] == ["g0"]


def test_bad_writes_are_refused_and_counted(server):
    c = started(server, groups=1)
    job = c.next_job()["job"]
    cases = [
        ({"instance_id": "nope", "slot": 0, "samples": [finished(job)]}, 404, "unknown instance_id"),
        ({"instance_id": "g0", "slot": 5, "samples": [finished(job)]}, 422, "slot: 5 is outside"),
        ({"instance_id": "g0", "slot": job["slot"], "samples": [
            {**finished(job), "loss_mask": [1]}]}, 422, "loss_mask has 1 entries"),
        ({"instance_id": "g0", "slot": job["slot"], "samples": [
            {**finished(job), "colour": "red"}]}, 422, "samples[0]: unknown field(s)"),
        ({"instance_id": "g0", "slot": job["slot"], "samples": [
            finished(job, Status.PENDING)]}, 422, "is not completed, truncated or failed"),
        ({"instance_id": "g0", "slot": job["slot"], "samples": [
            finished(job, n_resp=0)]}, 422, "empty response"),
    ]
    for body, status, needle in cases:
        with pytest.raises(HttpError) as e:
            c.http.post("/buffer/write", body)
        assert e.value.status == status and needle in e.value.body["message"], body
    c.write("g0", job["slot"], [finished(job)])
    with pytest.raises(HttpError) as e:  # the slot is taken
        c.write("g0", job["slot"], [finished(job)])
    assert e.value.status == 409
    rep = c.status()["report"]
    assert rep["stats"]["invalid_writes"] == len(cases) + 1
    assert len(rep["recent_errors"]) == len(cases) + 1, rep["recent_errors"]


def test_expired_and_abandoned_jobs_are_requeued(server):
    c = started(server, groups=1, n=1)
    job = c.next_job()["job"]
    assert c.next_job()["job"] is None
    time.sleep(0.6)  # past the 0.5 s lease
    again = c.next_job()["job"]
    assert (again["instance_id"], again["slot"]) == (job["instance_id"], job["slot"])
    assert c.write(again["instance_id"], 0, [finished(again, Status.ABORTED, n_resp=0)])["requeued"]
    third = c.next_job()["job"]
    assert third is not None and third["instance_id"] == "g0"
    stats = c.status()["report"]["stats"]
    assert stats["requeued_tasks"] == 1 and stats["aborted_writes"] == 1


def test_all_failed_group_is_reported_invalid_once(server):
    c = started(server, groups=1, n=2)
    for _ in range(2):
        job = c.next_job()["job"]
        c.write("g0", job["slot"], [finished(job, Status.FAILED, n_resp=0, error="tool crashed")])
    resp = c.get_rollout_data(1)
    assert resp["groups"] == [] and resp["success"] is False
    assert resp["report"]["invalid_groups"] == [
        {"instance_id": "g0", "reason": "every sample failed", "errors": ["tool crashed"]}]
    assert c.get_rollout_data(1)["report"]["invalid_groups"] == []  # reported once
    assert c.status()["report"]["stats"]["invalid_groups"] == 1


def test_fetch_waits_for_a_worker_thread(server):
    c = started(server, groups=1, n=2)

    def worker() -> None:
        w = RolloutBufferClient(server.url, server.token)
        for _ in range(2):
            job = w.next_job(wait=2)["job"]
            time.sleep(0.2)
            w.write(job["instance_id"], job["slot"], [finished(job)])

    t = threading.Thread(target=worker)
    t.start()
    resp = c.get_rollout_data(1, wait=10)
    t.join()
    assert resp["success"] and len(resp["groups"][0]["samples"]) == 2


def test_stop_tells_workers(server):
    c = started(server, groups=1)
    c.stop()
    assert c.next_job(wait=1) == {"success": True, "job": None, "stopped": True}
