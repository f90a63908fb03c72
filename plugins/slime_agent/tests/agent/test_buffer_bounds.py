"""Issue 38, items 1-3: the rollout buffer is bounded, over real HTTP on 127.0.0.1.

Found from outside: a reward of ``1e308`` passed every check (and turned the group's
advantages into NaN); a 50 MB body was read whole and parsed on the service's only event
loop, answered (422) after 9-20 s while ``/health`` waited 8-12 s; a 2,000,000-token sample
was accepted for a model whose context is 128 tokens; a client that never finished its
headers kept its connection for an hour.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from slime_agent import schemas
from slime_agent.buffer.client import RolloutBufferClient
from slime_agent.buffer.server import RolloutBufferServer
from slime_hookspecs import Sample, Status

TOKEN = "tok"


@pytest.fixture
def server():
    srv = RolloutBufferServer(token=TOKEN).start()
    yield srv
    srv.stop()


def started(srv: RolloutBufferServer, **task: Any) -> tuple[RolloutBufferClient, dict[str, Any]]:
    c = RolloutBufferClient(srv.url, TOKEN)
    c.start({"group_size": 1, **task})
    pending = Sample(group_index=0, index=0, prompt="p", tokens=[5, 6, 7], rollout_id=0)
    c.add_prompts([{"instance_id": "g0", "samples": [pending.to_dict()]}])
    return c, c.next_job()["job"]


def finished(job: dict[str, Any], n: int = 2, reward: Any = 1.0) -> dict[str, Any]:
    s = Sample.from_dict(dict(job["sample"]))
    s.append_response_tokens([9] * n, [-0.5] * n, text="ok")
    s.status, s.reward = Status.COMPLETED, reward
    return s.to_dict()


def post(srv: RolloutBufferServer, path: str, body: Any, timeout: float = 60.0) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(srv.url + path, data=data, method="POST",
                                 headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def health(srv: RolloutBufferServer) -> bool:
    with urllib.request.urlopen(srv.url + "/health", timeout=60) as r:  # generous
        return json.loads(r.read())["success"] is True


def head(path: str, length: int | None = None, chunked: bool = False) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {TOKEN}",
             "Content-Type: application/json"]
    lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def status_of(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    sock.settimeout(60)
    resp = http.client.HTTPResponse(sock)
    resp.begin()
    return resp.status, json.loads(resp.read())


# -- item 1: the reward bound ------------------------------------------------------------------

@pytest.mark.parametrize(("reward", "field"), [
    (1e308, "samples[0].reward"),
    (-2e6, "samples[0].reward"),  # beyond the default bound, 1e6
    ({"acc": 1.0, "len": 1e308}, "samples[0].reward.len"),
    (10**400, "samples[0].reward"),  # a JSON integer no float holds
])
def test_a_reward_beyond_the_bound_is_refused_like_nan(server, reward, field):
    c, job = started(server)
    status, body = post(server, "/buffer/write",
                        {"instance_id": "g0", "slot": 0, "samples": [finished(job, reward=reward)]})
    assert status == 422 and body["field"] == field, body
    assert "rollout.max_abs_reward" in body["message"] or "beyond any float" in body["message"]
    assert c.get_rollout_data(1)["groups"] == []
    assert c.status()["report"]["stats"]["invalid_writes"] == 1


def test_the_tasks_bound_applies_and_zero_means_none(server):
    c, job = started(server, max_abs_reward=10.0)
    status, body = post(server, "/buffer/write",
                        {"instance_id": "g0", "slot": 0, "sample": finished(job, reward=11.0)})
    assert status == 422 and body["field"] == "sample.reward"
    assert "rollout.max_abs_reward = 10" in body["message"]
    c, job = started(server, max_abs_reward=0)
    c.write("g0", 0, [finished(job, reward=1e308)])
    assert c.get_rollout_data(1)["groups"][0]["samples"][0]["reward"] == 1e308


def test_the_default_bound_is_the_configs():
    from slime_core.config.sections import RolloutSection

    assert schemas.DEFAULT_MAX_ABS_REWARD == RolloutSection().max_abs_reward


# -- item 3: the length cap --------------------------------------------------------------------

def test_a_sample_longer_than_the_context_is_refused_naming_it(server):
    c, job = started(server, max_context_len=8)  # 3 prompt tokens
    status, body = post(server, "/buffer/write",
                        {"instance_id": "g0", "slot": 0, "samples": [finished(job, n=6)]})
    assert status == 422 and body["field"] == "samples[0].tokens", body
    assert "9 tokens" in body["message"] and "max_context_len 8" in body["message"]
    c.write("g0", 0, [finished(job, n=5)])  # 8 tokens fit
    assert len(c.get_rollout_data(1)["groups"]) == 1


def test_the_source_sends_the_models_context_and_the_reward_bound(agent_config, tmp_path):
    from slime_agent.buffer.source import RolloutBufferSource

    class NoPrompts:
        def get_samples(self, n: int) -> list[Any]:
            return []

    cfg = agent_config(rollout={"max_abs_reward": 5.0})
    src = RolloutBufferSource(cfg, NoPrompts())
    try:
        src.start(None, context_length=128)
        assert src.server.state.task["max_context_len"] == 128
        assert src.server.state.task["max_abs_reward"] == 5.0
        cfg = agent_config(rollout={"max_context_len": 64})
        src.config = cfg
        src.start(None, context_length=128)  # rollout.max_context_len wins
        assert src.server.state.task["max_context_len"] == 64
    finally:
        src.close()


# -- item 2: bounded bodies, a loop that is never held, headers that must finish -----------------

def test_a_50_mb_body_is_refused_with_413_from_its_content_length(server):
    started(server)
    big = 50 * 1024 * 1024
    with socket.create_connection((server._server.host, server._server.port)) as sock:
        sock.sendall(head("/buffer/write", big) + b"x" * (1 << 20))  # 1 MiB of the 50 sent
        status, body = status_of(sock)
    assert status == 413 and "rollout_buffer.max_body_mb = 16" in body["message"], body
    # a plain client that sends the whole body gets the 413 too (the rest is discarded)
    status, body = post(server, "/buffer/write", b"{" + b" " * big + b"}")
    assert status == 413 and "Content-Length 52428802" in body["message"]
    assert health(server)
    assert RolloutBufferClient(server.url, TOKEN).status()["report"]["stats"]["invalid_writes"] == 2


def test_a_streamed_body_is_refused_once_it_grows_past_the_limit():
    srv = RolloutBufferServer(token=TOKEN, max_body_mb=1).start()
    try:
        started(srv)
        chunk = b" " * (256 << 10)
        with socket.create_connection((srv._server.host, srv._server.port)) as sock:
            sock.sendall(head("/buffer/write", chunked=True))  # no Content-Length
            for sent in range(1, 41):  # up to 10 MiB, until the service answers
                sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                if readable(sock, 0.05):
                    break
            status, body = status_of(sock)
        assert status == 413 and "rollout_buffer.max_body_mb = 1" in body["message"], body
        assert "so far" in body["message"]
        assert sent < 40  # answered while the body was still streaming
        assert health(srv)
    finally:
        srv.stop()


def readable(sock: socket.socket, timeout_s: float) -> bool:
    """Whether ``sock`` has something to read within ``timeout_s`` (poll, not select: a long
    test session's descriptors can pass select()'s limit of 1024)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(timeout_s * 1000))


def unread_bytes(server_port: int, client_port: int) -> int:
    """Bytes the service has not yet read from the connection (its socket's receive queue,
    from ``/proc/net/tcp``)."""
    with open("/proc/net/tcp", encoding="ascii") as fh:
        for line in fh.readlines()[1:]:
            fields = line.split()
            local, remote = fields[1], fields[2]
            if (int(local.split(":")[1], 16) == server_port
                    and int(remote.split(":")[1], 16) == client_port):
                return int(fields[4].split(":")[1], 16)
    raise AssertionError("the connection is not in /proc/net/tcp")


def test_health_answers_while_a_large_body_is_in_flight_and_while_it_is_checked(server):
    c, job = started(server)
    sample = finished(job, n=300_000)
    data = json.dumps({"instance_id": "g0", "slot": 0, "samples": [sample]}).encode()
    assert len(data) < 16 << 20
    port = server._server.port
    with socket.create_connection((server._server.host, port)) as slow:
        # a body arriving slowly: all of it but its last byte
        slow.sendall(head("/buffer/write", len(data)) + data[:-1])
        assert health(server)
        for _ in range(6000):  # until the service has read all it got (at most a minute)
            if unread_bytes(port, slow.getsockname()[1]) == 0:
                break
            time.sleep(0.01)
        # the last byte: the service parses and checks 300k tokens now, off its loop, so
        # /health is answered before the write is
        slow.sendall(data[-1:])
        assert health(server)
        assert not readable(slow, 0), "the write was answered before /health: was it checked on the loop?"
        status, body = status_of(slow)
    assert status == 200 and body["accepted"] is True, body
    (group,) = c.get_rollout_data(1)["groups"]
    assert len(group["samples"][0]["tokens"]) == 300_003


def test_a_client_that_never_finishes_its_headers_is_closed():
    srv = RolloutBufferServer(token=TOKEN, header_timeout_s=0.5).start()
    try:
        with socket.create_connection((srv._server.host, srv._server.port)) as sock:
            sock.sendall(b"POST /buffer/write HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no blank line
            sock.settimeout(60)  # generous: the server closes it after 0.5 s
            try:
                assert sock.recv(1) == b""
            except ConnectionResetError:
                pass
        assert health(srv)
    finally:
        srv.stop()


def test_body_settings_are_checked(agent_config):
    with pytest.raises(ValueError, match="rollout_buffer.max_body_mb"):
        agent_config(rollout_buffer={"max_body_mb": 0})
    with pytest.raises(ValueError, match="rollout_buffer.header_timeout_s"):
        agent_config(rollout_buffer={"header_timeout_s": 0})
