"""Session recording of the agent API: token ids, log-probs and loss masks of an episode.

A session is one agent episode; it holds one or more *segments*, each a growing token
sequence that becomes one :class:`~slime_hookspecs.Sample`:

* the first request of a segment is rendered by the chat template (``add_generation_prompt``)
  and tokenized: that is the segment's prompt;
* a later request whose messages *extend* the segment's conversation (the same earlier
  messages, in order, followed by new ones; the assistant replies the endpoint produced are
  matched by role only, since clients echo them in their own shape) is a continuation: the
  new messages are rendered as the text after the model's last turn (see
  :func:`slime_agent.chat.continuation_text`) and only that delta is tokenized and
  appended, with loss mask 0, after the model's verbatim ids;
* a request that does not extend the conversation (history rewritten, tools changed, a
  retry of the same messages) starts a new segment; the segments of a session become samples
  sharing ``session_id`` and ``rollout_id``.

Model ids are appended with loss mask 1 and their log-probs. The store is used from one
event loop; each session has an ``asyncio.Lock`` so its requests are applied in order.

Capacity: ``max_sessions`` sessions are kept. A new session at capacity evicts the least
recently used idle one (counted in ``evicted``; finishing it later answers 404 saying so), so
abandoned episodes cannot lock the API; only when every session has a request in flight is
the new one refused (429). Idle sessions also expire after ``ttl_s``. A request without a
session id is *stateless* (:meth:`SessionStore.stateless`): answered, never stored.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import time
from dataclasses import dataclass, field
from typing import Any

from slime_hookspecs import GenerateOutput, Sample, Status

from slime_agent import chat
from slime_agent.validation import RequestError


class SessionError(RequestError):
    """A request the session cannot take; ``status`` is the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message, status, param, code)


@dataclass
class Segment:
    prompt_messages: list[dict[str, Any]]
    tools: list[Any] | None
    tokens: list[int]
    prompt_length: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    assistant_positions: set[int] = field(default_factory=set)
    loss_mask: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    weight_versions: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    finish_reason: str = "stop"
    completions: int = 0


@dataclass
class Plan:
    """What one request will generate from: the prompt ids, and the delta to record."""

    segment: Segment | None  # None: a new segment
    prompt_ids: list[int]
    delta_ids: list[int]
    delta_text: str
    messages: list[dict[str, Any]]
    tools: list[Any] | None


@dataclass
class Session:
    id: str
    engine_index: int
    created: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
    segments: list[Segment] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def content_text(content: Any) -> str:
    """A message's content as text: strings as they are, text parts joined, None empty."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict) and p.get("type") == "text":
                parts.append(str(p.get("text", "")))
            else:
                raise SessionError("only text content parts are supported")
        return "".join(parts)
    raise SessionError(f"message content must be a string or a list of text parts, "
                       f"got {type(content).__name__}")


def template_message(m: dict[str, Any]) -> dict[str, Any]:
    """The fields of a message the chat template sees."""
    out: dict[str, Any] = {"role": m["role"], "content": content_text(m.get("content"))}
    for key in ("name", "tool_call_id", "tool_calls"):
        if m.get(key) is not None:
            out[key] = m[key]
    return out


class SessionStore:
    """Sessions by id; see the module docstring."""

    def __init__(self, tokenizer: Any, num_engines: int = 1, max_sessions: int = 4096,
                 ttl_s: float = 3600.0, template_kwargs: dict[str, Any] | None = None) -> None:
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})  # data.chat_template_kwargs
        self.num_engines = max(1, num_engines)
        self.max_sessions = max_sessions
        self.ttl_s = ttl_s
        # least recently used first: a hit moves the session to the end
        self.sessions: collections.OrderedDict[str, Session] = collections.OrderedDict()
        self._gone: collections.OrderedDict[str, str] = collections.OrderedDict()  # id -> why
        self.evicted = 0
        self.expired = 0
        self._next_engine = 0

    def _engine(self) -> int:
        self._next_engine += 1
        return (self._next_engine - 1) % self.num_engines

    def stateless(self) -> Session:
        """A session for one request that is not stored (no id was given)."""
        return Session(id="", engine_index=self._engine())

    def get_or_create(self, session_id: str) -> Session:
        self._expire()
        s = self.sessions.get(session_id)
        if s is None:
            if len(self.sessions) >= self.max_sessions:
                self._evict_one()
            s = Session(id=session_id, engine_index=self._engine())
            self.sessions[session_id] = s
            self._gone.pop(session_id, None)
        self.sessions.move_to_end(session_id)
        s.last_used = time.monotonic()
        return s

    def _evict_one(self) -> None:
        victim = next((k for k, s in self.sessions.items() if not s.lock.locked()), None)
        if victim is None:
            raise SessionError(
                f"all {len(self.sessions)} sessions (agent_api.max_sessions) have a request in "
                "flight; retry when one completes", 429, code="rate_limit_exceeded")
        del self.sessions[victim]
        self.evicted += 1
        self._forget(victim, "was evicted, the least recently used of agent_api.max_sessions = "
                             f"{self.max_sessions} sessions, to make room for a new one")

    def _forget(self, sid: str, why: str) -> None:
        self._gone[sid] = why
        while len(self._gone) > max(self.max_sessions, 1024):
            self._gone.popitem(last=False)

    def get(self, session_id: str) -> Session:
        s = self.sessions.get(session_id)
        if s is None:
            why = self._gone.get(session_id, "finished, expired or never used")
            raise SessionError(f"no session {session_id!r} ({why})", 404, code="session_not_found")
        return s

    def _expire(self) -> None:
        now = time.monotonic()
        for sid in [k for k, s in self.sessions.items()
                    if now - s.last_used > self.ttl_s and not s.lock.locked()]:
            del self.sessions[sid]
            self.expired += 1
            self._forget(sid, f"expired after agent_api.session_ttl_s = {self.ttl_s:g} s idle")

    # -- one request ------------------------------------------------------------------------
    def plan(self, session: Session, messages: list[dict[str, Any]],
             tools: list[Any] | None) -> Plan:
        msgs = [template_message(m) for m in messages]
        seg = session.segments[-1] if session.segments else None
        if seg is not None and self._extends(seg, msgs, tools):
            delta = msgs[len(seg.messages):]
            text = chat.continuation_text(self.tokenizer, seg.messages, delta, tools,
                                          last_token_id=seg.tokens[-1] if seg.tokens else None,
                                          template_kwargs=self.template_kwargs)
            ids = chat.encode(self.tokenizer, text)
            return Plan(seg, seg.tokens + ids, ids, text, msgs, tools)
        text = chat.render_chat(self.tokenizer, msgs, tools, add_generation_prompt=True,
                                template_kwargs=self.template_kwargs)
        ids = chat.encode(self.tokenizer, text)
        return Plan(None, ids, [], "", msgs, tools)

    @staticmethod
    def _extends(seg: Segment, msgs: list[dict[str, Any]], tools: list[Any] | None) -> bool:
        if (tools or None) != (seg.tools or None) or len(msgs) <= len(seg.messages):
            return False
        for i, old in enumerate(seg.messages):
            new = msgs[i]
            if i in seg.assistant_positions:
                if new["role"] != "assistant":
                    return False
            elif new["role"] != old["role"] or new["content"] != old["content"]:
                return False
        return True

    def commit(self, session: Session, plan: Plan, out: GenerateOutput, text: str,
               assistant: dict[str, Any], versions: list[int] | None = None,
               masked: int = 0, mask_earlier: bool = False) -> Segment:
        """Record a finished generation of ``plan`` (``assistant`` is the reply message).

        ``versions``: the weight versions that generated ``out``'s ids, in order (default
        ``out.weight_version``; several when the call was continued across a weight update).
        ``masked``: how many of its first ids came before such an update and are masked
        (``rollout.mask_offpolicy_in_partial_rollout``), with every earlier id of the segment,
        as the fully-async generator masks a continued sample's response. ``mask_earlier``:
        mask every earlier id of the segment, not ``out``'s (a weight update came between
        the session's previous call and this one).
        """
        seg = plan.segment
        if seg is None:
            seg = Segment(prompt_messages=copy.deepcopy(plan.messages), tools=plan.tools,
                          tokens=list(plan.prompt_ids), prompt_length=len(plan.prompt_ids))
            session.segments.append(seg)
        elif plan.delta_ids:
            seg.tokens.extend(plan.delta_ids)
            seg.loss_mask.extend([0] * len(plan.delta_ids))
            seg.log_probs.extend([0.0] * len(plan.delta_ids))
            seg.text.append(plan.delta_text)
        n = len(out.token_ids)
        if len(out.log_probs) != n:
            raise SessionError(f"engine returned {n} tokens but {len(out.log_probs)} log-probs", 500)
        seg.tokens.extend(int(t) for t in out.token_ids)
        if masked or mask_earlier:
            seg.loss_mask = [0] * len(seg.loss_mask)
        masked = min(masked, n)
        seg.loss_mask.extend([0] * masked + [1] * (n - masked))
        seg.log_probs.extend(float(x) for x in out.log_probs)
        for v in (versions if versions is not None else [out.weight_version] if n else []):
            if not seg.weight_versions or seg.weight_versions[-1] != v:
                seg.weight_versions.append(int(v))
        seg.text.append(text)
        seg.finish_reason = out.finish_reason
        seg.completions += 1
        seg.assistant_positions.add(len(plan.messages))
        seg.messages = list(plan.messages) + [template_message(assistant)]
        session.last_used = time.monotonic()
        return seg

    def drop(self, session_id: str) -> None:
        """Forget a session without making samples (``DELETE /v1/sessions/{id}``)."""
        self.get(session_id)
        del self.sessions[session_id]
        self._forget(session_id, "deleted")

    # -- the end of an episode ---------------------------------------------------------------
    def finish(self, session_id: str, reward: Any = None, label: Any = None,
               metadata: dict[str, Any] | None = None, rollout_id: int = -1) -> list[Sample]:
        """The session's segments as samples (removed from the store)."""
        s = self.get(session_id)
        if s.lock.locked():
            raise SessionError(f"session {session_id!r} has a request in flight", 409)
        if not s.segments:
            raise SessionError(f"session {session_id!r} has no completions to finish", 409)
        del self.sessions[session_id]
        self._forget(session_id, "already finished")
        return [self._sample(s, i, seg, reward, label, metadata or {}, rollout_id)
                for i, seg in enumerate(s.segments)]

    @staticmethod
    def _sample(s: Session, i: int, seg: Segment, reward: Any, label: Any,
                metadata: dict[str, Any], rollout_id: int) -> Sample:
        status = {"length": Status.TRUNCATED, "abort": Status.ABORTED}.get(seg.finish_reason,
                                                                          Status.COMPLETED)
        sample = Sample(
            index=i, rollout_id=rollout_id, prompt=copy.deepcopy(seg.prompt_messages),
            tokens=list(seg.tokens), response="".join(seg.text),
            response_length=len(seg.tokens) - seg.prompt_length, label=label, reward=reward,
            loss_mask=list(seg.loss_mask), rollout_log_probs=list(seg.log_probs),
            weight_versions=list(seg.weight_versions), status=status,
            metadata={**copy.deepcopy(metadata), "segment": i, "segments": len(s.segments),
                      "completions": seg.completions, "messages": copy.deepcopy(seg.messages)},
            session_id=s.id,
        )
        sample.validate()
        return sample
