"""OpenAI's wire format for the agent API: errors, refused parameters, answers, SSE chunks.

The agent API answers what OpenAI's own clients parse: ``chat.completion`` objects, or with
``stream: true`` a ``text/event-stream`` of ``chat.completion.chunk`` objects ended by
``data: [DONE]``; errors as ``{"error": {"message", "type", "param", "code"}}``. Parameters an
OpenAI client may send that the engines cannot honour are refused by name (never silently
ignored) unless they carry their no-op value; see :data:`UNSUPPORTED`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from slime_agent.sessions import SessionError


def openai_error(status: int, message: str, param: str | None = None,
                 code: str | None = None) -> dict[str, Any]:
    kind = {401: "authentication_error", 403: "permission_error",
            429: "rate_limit_error"}.get(status,
                                         "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


# name -> (is the value a no-op?, why the server cannot do anything else)
UNSUPPORTED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "n": (lambda v: v in (None, 1), "only n = 1 is supported (one completion per request; "
          "send n requests)"),
    "top_logprobs": (lambda v: v in (None, 0), "the engines return the sampled token's "
                     "log-prob only; use logprobs: true with top_logprobs 0"),
    "response_format": (lambda v: v is None or v.get("type") == "text",
                        "only response_format {'type': 'text'} is supported: the engines "
                        "cannot constrain decoding to JSON"),
    "tool_choice": (lambda v: v in (None, "auto", "none"), "only tool_choice 'auto' and "
                    "'none' are supported: the engines cannot force a tool call"),
    "parallel_tool_calls": (lambda v: v in (None, True), "parallel_tool_calls false is not "
                            "supported: every call the model writes is returned"),
    "frequency_penalty": (lambda v: not v, "penalties are not supported (they would change "
                          "the sampled distribution away from the policy being trained)"),
    "presence_penalty": (lambda v: not v, "penalties are not supported (they would change "
                         "the sampled distribution away from the policy being trained)"),
    "logit_bias": (lambda v: not v, "logit_bias is not supported (it would change the "
                   "sampled distribution away from the policy being trained)"),
    "store": (lambda v: not v, "stored completions are not supported"),
    "service_tier": (lambda v: v in (None, "auto", "default"), "service tiers are not supported"),
    "modalities": (lambda v: v in (None, ["text"]), "only the text modality is supported"),
    "audio": (lambda v: v is None, "audio output is not supported"),
    "prediction": (lambda v: v is None, "predicted outputs are not supported"),
    "web_search_options": (lambda v: v is None, "web search is not supported"),
    "reasoning_effort": (lambda v: v is None, "reasoning_effort is not supported"),
    "verbosity": (lambda v: v is None, "verbosity is not supported"),
    "functions": (lambda v: v is None, "the deprecated 'functions' is not supported; use "
                  "'tools'"),
    "function_call": (lambda v: v is None, "the deprecated 'function_call' is not supported; "
                      "use 'tools'"),
}


def refuse_unsupported(body: dict[str, Any]) -> None:
    for name, (ok, why) in UNSUPPORTED.items():
        if name in body and not ok(body[name]):
            raise SessionError(f"{name}: {body[name]!r} is not supported: {why}", 400, name,
                               "unsupported_value")


def token_logprobs(tokenizer: Any, ids: list[int], log_probs: list[float]) -> dict[str, Any]:
    """``choices[].logprobs`` of OpenAI: one entry per generated token (no alternatives)."""
    content = []
    for t, lp in zip(ids, log_probs, strict=True):
        text = tokenizer.decode([int(t)], skip_special_tokens=False)
        content.append({"token": text, "logprob": float(lp), "bytes": list(text.encode()),
                        "top_logprobs": []})
    return {"content": content, "refusal": None}


class Answer:
    """One finished generation, in either wire shape."""

    def __init__(self, model: str, message: dict[str, Any], finish: str,
                 prompt_tokens: int, completion_tokens: int, logprobs: dict[str, Any] | None,
                 session_id: str | None, weight_version: int) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model, self.message, self.finish = model, message, finish
        self.logprobs = logprobs
        self.usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}
        self.extra = {"session_id": session_id, "weight_version": weight_version}

    def completion(self) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion", "created": self.created,
                "model": self.model,
                "choices": [{"index": 0, "message": self.message, "finish_reason": self.finish,
                             "logprobs": self.logprobs}],
                "usage": self.usage, **self.extra}

    def chunks(self, include_usage: bool) -> list[dict[str, Any]]:
        """The answer as SSE chunks: role, content (+ tool calls, log-probs), finish, usage."""
        def chunk(delta: dict[str, Any], finish: str | None = None,
                  logprobs: Any = None) -> dict[str, Any]:
            out = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                   "model": self.model, "choices": [{"index": 0, "delta": delta,
                                                     "logprobs": logprobs,
                                                     "finish_reason": finish}], **self.extra}
            if include_usage:
                out["usage"] = None
            return out

        body: dict[str, Any] = {}
        if self.message.get("content") is not None:
            body["content"] = self.message["content"]
        if self.message.get("tool_calls"):
            body["tool_calls"] = [{"index": k, **tc}
                                  for k, tc in enumerate(self.message["tool_calls"])]
        out = [chunk({"role": "assistant", "content": ""})]
        if body:
            out.append(chunk(body, logprobs=self.logprobs))
        out.append(chunk({}, self.finish))
        if include_usage:
            last = chunk({})
            last["choices"], last["usage"] = [], self.usage
            out.append(last)
        return out


def sse(data: Any) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()
