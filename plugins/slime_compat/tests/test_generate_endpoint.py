"""The SGLang-compatible /generate endpoint, over real HTTP on 127.0.0.1."""

import asyncio

import pytest
from slime_hookspecs import GenerateOutput

from slime_compat.server import GenerateServer


class CountingEngine:
    """Answers prompt p with ids [p[-1]+1, ...]; stops early when asked to stop on id 99."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.aborted = 0

    def generate(self, prompts, params):
        self.calls.append(len(prompts))
        outs = []
        for p, sp in zip(prompts, params):
            ids = [p[-1] + 1 + i for i in range(sp.max_new_tokens)]
            stop = [i for i, t in enumerate(ids) if t in sp.stop_token_ids]
            ids = ids[: stop[0] + 1] if stop else ids
            outs.append(GenerateOutput(ids, [-0.5] * len(ids), "stop" if stop else "length", 7,
                                       text="".join(chr(48 + t % 10) for t in ids)))
        return outs

    def abort(self):
        self.aborted += 1


class Tok:
    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]


@pytest.fixture()
def served():
    engine = CountingEngine()
    server = GenerateServer(lambda: [engine], lambda: Tok()).start()
    yield engine, server
    server.stop()


def test_sglang_response_shape(served) -> None:
    from slime.utils.http_utils import post

    engine, server = served
    body = {"input_ids": [1, 2, 3], "return_logprob": True,
            "sampling_params": {"temperature": 1.0, "max_new_tokens": 3, "skip_special_tokens": False,
                                "no_stop_trim": True, "stop": None, "spaces_between_special_tokens": False}}
    out = asyncio.run(post(f"{server.url}/generate", body))
    meta = out["meta_info"]
    assert out["output_ids"] == [4, 5, 6] and out["text"] == "456"
    assert meta["output_token_logprobs"] == [[-0.5, 4, None], [-0.5, 5, None], [-0.5, 6, None]]
    assert meta["finish_reason"] == {"type": "length", "length": 3}
    assert meta["weight_version"] == "7" and meta["prompt_tokens"] == 3 and meta["completion_tokens"] == 3
    body["sampling_params"]["stop_token_ids"] = [5]
    out = asyncio.run(post(f"{server.url}/generate", body))
    assert out["meta_info"]["finish_reason"]["type"] == "stop" and out["output_ids"] == [4, 5]


def test_text_prompts_batches_and_concurrent_requests_are_batched(served) -> None:
    from slime.utils.http_utils import post

    engine, server = served
    sp = {"max_new_tokens": 1}
    out = asyncio.run(post(f"{server.url}/generate", {"text": "ab", "sampling_params": sp}))
    assert out["output_ids"] == [ord("b") + 1] and "output_token_logprobs" not in out["meta_info"]
    many = asyncio.run(post(f"{server.url}/generate", {"input_ids": [[1], [5]], "sampling_params": sp}))
    assert [m["output_ids"] for m in many] == [[2], [6]]

    async def burst():
        return await asyncio.gather(*(post(f"{server.url}/generate", {"input_ids": [i], "sampling_params": sp})
                                      for i in range(8)))

    engine.calls.clear()
    assert [o["output_ids"] for o in asyncio.run(burst())] == [[i + 1] for i in range(8)]
    assert sum(engine.calls) == 8 and len(engine.calls) < 8  # requests reached the engine together


@pytest.mark.parametrize("body, field", [
    ({"input_ids": [1], "sampling_params": {"repetition_penalty": 1.3}}, "repetition_penalty"),
    ({"input_ids": [1], "sampling_params": {"n": 2}}, "n must be 1"),
    ({"input_ids": [1], "sampling_parms": {}}, "unknown fields"),
    ({"input_ids": [], "sampling_params": {}}, "input_ids"),
    ({"input_ids": [1], "stream": True}, "stream"),
    ({"text": "a", "input_ids": [1]}, "exactly one"),
])
def test_refuses_what_it_cannot_honour(served, body, field) -> None:
    import aiohttp

    from slime.utils.http_utils import post

    _, server = served
    with pytest.raises(aiohttp.ClientResponseError) as err:
        asyncio.run(post(f"{server.url}/generate", body))
    assert err.value.status == 400 and field in err.value.message


def test_abort_and_workers(served) -> None:
    from slime.utils.http_utils import get, post

    engine, server = served
    assert asyncio.run(get(f"{server.url}/workers"))["workers"] == [{"url": server.url}]
    asyncio.run(post(f"{server.url}/abort_request", {"abort_all": True}))
    assert engine.aborted == 1
