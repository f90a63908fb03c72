"""A reference agent worker for the rollout buffer, and a small chat client for the agent API.

Agent frameworks usually bring their own loop; this one shows the protocol end to end and
serves tests and examples::

    worker = BufferWorker(buffer_url, token, tool_agent_episode({"calculator": calculator}))
    worker.run(stop_event)          # pull a job, run the episode, write the trajectory, repeat

An *episode* is ``episode(job, task) -> list of Sample dicts`` (usually what
``POST /v1/sessions/{id}/finish`` returned). An episode that raises is written as one FAILED
sample carrying the error, so the buffer counts it instead of waiting for the job's lease.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any, Callable

from slime_hookspecs import Sample, Status

from slime_agent.buffer.client import RolloutBufferClient
from slime_agent.http import HttpError, JsonClient

Episode = Callable[[dict[str, Any], dict[str, Any]], list[dict[str, Any]]]


class ChatSession:
    """One session of the agent API: ``complete(messages, ...)`` then ``finish(...)``."""

    def __init__(self, base_url: str, token: str, session_id: str | None = None,
                 model: str = "slime", timeout: float = 300.0) -> None:
        self.http = JsonClient(base_url, token, timeout)
        self.session_id = session_id or f"sess-{uuid.uuid4().hex}"
        self.model = model

    def complete(self, messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
        body = {"model": self.model, "messages": messages, **params}
        return self.http.post("/chat/completions", body,
                              headers={"X-Session-Id": self.session_id})

    def finish(self, **body: Any) -> list[dict[str, Any]]:
        return self.http.post(f"/sessions/{self.session_id}/finish", body)["samples"]


def tool_agent_episode(tools: dict[str, tuple[dict[str, Any], Callable[..., Any]]],
                       max_turns: int | None = None) -> Episode:
    """An episode that chats with the engine and runs tool calls locally.

    ``tools`` maps a name to ``(OpenAI tool schema, fn)``; only those the task lists in
    ``tools`` are offered (all of them when the task lists none). Tool errors become the
    tool message's content (``Error: ...``). The reward is left to the trainer.
    """
    def episode(job: dict[str, Any], task: dict[str, Any]) -> list[dict[str, Any]]:
        engine = task.get("engine") or {}
        if not engine.get("base_url"):
            raise RuntimeError("the task names no engine endpoint (rollout_buffer.serve_engine_api)")
        sample = job["sample"]
        prompt = sample["prompt"]
        messages = list(prompt) if isinstance(prompt, list) else [
            {"role": "user", "content": str(prompt)}]
        offered = [n for n in (task.get("tools") or list(tools)) if n in tools]
        schemas = [tools[n][0] for n in offered]
        sampling = dict(task.get("sampling") or {})
        session = ChatSession(engine["base_url"], engine["token"],
                              f"{job['instance_id']}-{job['slot']}-{uuid.uuid4().hex[:8]}",
                              engine.get("model", "slime"))
        turns = max_turns or int(task.get("max_turns") or 4)
        calls = errors = 0
        for _ in range(turns):
            extra = {"tools": schemas} if schemas else {}
            reply = session.complete(messages, **sampling, **extra)["choices"][0]["message"]
            messages.append(reply)
            if not reply.get("tool_calls"):
                break
            for tc in reply["tool_calls"]:
                calls += 1
                content, ok = _run_tool(tools, offered, tc)
                errors += not ok
                messages.append({"role": "tool", "tool_call_id": tc["id"], "content": content})
        return session.finish(rollout_id=sample.get("rollout_id", -1), metadata={
            "tool_calls": calls, "tool_errors": {"tool_error": errors} if errors else {},
            "turns": sum(1 for m in messages if m.get("role") == "assistant")})

    return episode


def _run_tool(tools: dict[str, Any], offered: list[str], tc: dict[str, Any]) -> tuple[str, bool]:
    name = tc.get("function", {}).get("name")
    if name not in offered:
        return f"Error: unknown tool {name!r}", False
    try:
        args = json.loads(tc["function"].get("arguments") or "{}")
        return str(tools[name][1](**args)), True
    except Exception as exc:  # noqa: BLE001 - the model sees the error
        return f"Error: {exc}", False


class BufferWorker:
    """Pull jobs from the buffer, run ``episode``, write the results back."""

    def __init__(self, buffer_url: str, token: str, episode: Episode, *,
                 poll_s: float = 1.0) -> None:
        self.client = RolloutBufferClient(buffer_url, token)
        self.episode = episode
        self.poll_s = poll_s
        self.done = 0
        self.failed = 0
        self.unwritten = 0  # results the service did not take (refused, or it was gone)
        self.errors: list[str] = []

    def run(self, stop: threading.Event | None = None, max_jobs: int | None = None) -> int:
        """Work until ``stop`` is set, the buffer says stopped, or ``max_jobs`` are done."""
        stop = stop or threading.Event()
        while not stop.is_set() and (max_jobs is None or self.done < max_jobs):
            try:
                resp = self.client.next_job(wait=self.poll_s)
            except HttpError as exc:
                if exc.status == 409:  # no task yet
                    time.sleep(self.poll_s)
                    continue
                raise
            except OSError:  # the service is not up (yet, or any more)
                time.sleep(self.poll_s)
                continue
            if resp.get("stopped"):
                break
            job = resp.get("job")
            if job is None:
                continue
            self._do(job, resp.get("task") or {})
        return self.done

    def _do(self, job: dict[str, Any], task: dict[str, Any]) -> None:
        try:
            samples = self.episode(job, task)
            samples = [s.to_dict() if isinstance(s, Sample) else s for s in samples]
        except Exception as exc:  # noqa: BLE001 - reported to the buffer as a failed sample
            failed = Sample.from_dict(dict(job["sample"]))
            failed.status, failed.error = Status.FAILED, f"episode: {type(exc).__name__}: {exc}"
            samples = [failed.to_dict()]
            self.failed += 1
            self.errors.append(failed.error)
        try:
            self.client.write(job["instance_id"], job["slot"], samples)
        except OSError:
            # the service is gone (the trainer's run ended mid-episode) or unreachable: the
            # result is lost, the job's lease brings it back to another worker if it is not
            self.unwritten += 1
            return
        except HttpError as exc:  # refused (a restarted task forgot the job, a bad sample)
            self.unwritten += 1
            self.errors.append(f"write of {job['instance_id']} slot {job['slot']}: {exc}")
            return
        self.done += 1
