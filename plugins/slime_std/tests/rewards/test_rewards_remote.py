"""The remote reward against real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from slime_hookspecs import Sample
from slime_std.rewards import RemoteRewardError, make_remote_reward


class Server:
    """A loopback HTTP server; ``answers`` is a list of (status, body) replayed in order
    (the last one repeats); every request body is kept in ``seen``."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.seen: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.seen.append(json.loads(body))
                i = min(len(outer.seen), len(outer.answers)) - 1
                status, text = outer.answers[i]
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/reward"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def reward(make_config, url, **kw):
    return make_remote_reward(make_config(rollout={"reward_kwargs": {
        "url": url, "timeout": 2, "retries": 3, "backoff": 0.01, **kw}}))


def run(fn, s):
    return asyncio.run(fn(s))


S = Sample(prompt="1+1=", response="2", label="2", metadata={"task": "add"})


def test_posts_the_sample_and_reads_the_reward(make_config):
    with Server([(200, '{"reward": 0.75}')]) as srv:
        fn = reward(make_config, srv.url)
        assert inspect.iscoroutinefunction(fn)
        assert run(fn, S) == 0.75
    assert srv.seen == [{"prompt": "1+1=", "response": "2", "label": "2", "metadata": {"task": "add"}}]


def test_bare_number_and_dict_reward(make_config):
    with Server([(200, "1")]) as srv:
        assert run(reward(make_config, srv.url), S) == 1.0
    with Server([(200, '{"reward": {"acc": 1, "fmt": 0.5}}')]) as srv:
        assert run(reward(make_config, srv.url), S) == {"acc": 1.0, "fmt": 0.5}


def test_retries_until_the_server_recovers(make_config):
    with Server([(500, "boom"), (503, "busy"), (200, '{"reward": 1.0}')]) as srv:
        assert run(reward(make_config, srv.url), S) == 1.0
    assert len(srv.seen) == 3


def test_gives_up_after_retries_naming_url_and_answer(make_config):
    with Server([(502, "bad gateway")]) as srv:
        with pytest.raises(RemoteRewardError) as err:
            run(reward(make_config, srv.url, retries=2), S)
    assert len(srv.seen) == 3
    assert srv.url in str(err.value) and "HTTP 502" in str(err.value) and "bad gateway" in str(err.value)


def test_garbage_answer_fails_at_once(make_config):
    with Server([(200, "<html>oops</html>")]) as srv:
        with pytest.raises(RemoteRewardError, match="non-JSON.*oops") as err:
            run(reward(make_config, srv.url), S)
    assert srv.url in str(err.value) and len(srv.seen) == 1
    with Server([(200, '{"score": 1}')]) as srv:
        with pytest.raises(RemoteRewardError, match="without a 'reward' key.*score"):
            run(reward(make_config, srv.url), S)
    with Server([(400, "bad request")]) as srv:
        with pytest.raises(RemoteRewardError, match="HTTP 400"):
            run(reward(make_config, srv.url), S)
    assert len(srv.seen) == 1


def test_connection_refused_is_retried_then_named(make_config):
    with Server([(200, "1")]) as srv:
        url = srv.url
    with pytest.raises(RemoteRewardError, match="failed 2 attempt"):
        run(reward(make_config, url, retries=1), S)


def test_url_is_required(make_config):
    with pytest.raises(ValueError, match="rollout.reward_kwargs.url"):
        make_remote_reward(make_config())
