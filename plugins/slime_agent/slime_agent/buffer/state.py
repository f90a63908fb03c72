"""The rollout buffer's bookkeeping: prompt instances, worker jobs, written trajectories.

One *instance* is a group: the trainer's ``n`` PENDING samples of one prompt (slots
``0..n-1``). Each slot is one *job* for an agent worker. Lifecycle of a slot:
queued -> leased (``GET /task``; the lease lasts ``task_timeout_s``) -> written
(``POST /buffer/write``). An expired lease puts the job back at the front of the queue
(counted as ``requeued_tasks``); a worker that gives up writes status ``aborted`` and its job
is requeued at once. A late write for a slot that is still empty is accepted (first write
wins); a second write of a slot is refused (409).

A group is *complete* when every slot is written; it is then handed to the trainer whole, in
completion order. A complete group whose samples all FAILED is *invalid*: it is removed and
reported once (``invalid_groups`` of the next fetch) so the trainer can replace its prompt;
nothing is dropped without a report. Groups with some but not all slots written are listed as
``partial_groups`` in every report, with their counts and age.

Writes are checked (every field of a :class:`~slime_hookspecs.Sample` against
:data:`slime_agent.schemas.SAMPLE`: ids in 0..2^31-1, and below the task's ``vocab_size``
when the trainer sent one, finite rewards within the task's ``max_abs_reward`` and log-probs
<= 0, no booleans for numbers, at most the task's ``max_context_len`` tokens; its length
invariants, a finished status, a non-empty response unless FAILED; all 422 naming the
field: :func:`check_sample`, which the service runs off its event loop); a refused write is
counted
(``invalid_writes``) and its reason kept in ``recent_errors``. The trainer's own fields of the
slot (``group_index``, ``index``, ``rollout_id``, and ``label`` / ``prompt`` when the worker
left them empty) overwrite the worker's, so the trainer's bookkeeping cannot be broken by a
worker.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

from slime_hookspecs import Sample, SampleInvariantError, Status

from slime_agent import schemas
from slime_agent.validation import RequestError, check, check_reward_bound

_FINISHED = (Status.COMPLETED, Status.TRUNCATED, Status.FAILED)


@dataclass(frozen=True)
class SampleLimits:
    """What the task bounds a written sample by (a snapshot, so samples can be checked off
    the service's event loop while the task changes): ``vocab_size`` (ids below it),
    ``max_abs_reward`` (``rollout.max_abs_reward``; 0: no bound) and ``max_context_len``
    (prompt + response tokens; the model's context or ``rollout.max_context_len``)."""

    vocab_size: int | None = None
    max_abs_reward: float = schemas.DEFAULT_MAX_ABS_REWARD
    max_context_len: int | None = None

    @classmethod
    def of(cls, task: dict[str, Any] | None) -> SampleLimits:
        task = task or {}
        bound = task.get("max_abs_reward")
        return cls(task.get("vocab_size"),
                   schemas.DEFAULT_MAX_ABS_REWARD if bound is None else float(bound),
                   task.get("max_context_len"))


@dataclass(frozen=True)
class WritePlan:
    """A write whose instance and slot were checked: its raw samples and their paths."""

    instance_id: str
    slot: int
    raw: list[dict[str, Any]]
    where: list[str]
    instance: Instance | None = None  # the Instance planned for (a restarted task makes a new one)


def check_sample(d: dict[str, Any], where: str, limits: SampleLimits) -> Sample:
    """A written sample dict as a :class:`Sample`, or :class:`BufferError` (422) naming the
    field: the length cap first (cheap, and it spares the schema walk of a huge sample), the
    schema, ids below the vocabulary, the reward bound, then ``Sample.validate``. Pure: safe
    on any thread."""
    tokens = d.get("tokens")
    cap = limits.max_context_len
    if cap is not None and isinstance(tokens, list) and len(tokens) > cap:
        raise BufferError(f"{where}.tokens: {len(tokens)} tokens (prompt + response) are more "
                          f"than the task's max_context_len {cap} (the model's context, or "
                          "rollout.max_context_len)", param=f"{where}.tokens")
    check(d, schemas.SAMPLE, prefix=where)
    vocab = limits.vocab_size
    if vocab is not None:
        bad = next((i for i, t in enumerate(d.get("tokens", ())) if t >= vocab), None)
        if bad is not None:
            raise BufferError(f"{where}.tokens[{bad}]: {d['tokens'][bad]} is not below the "
                              f"task's vocab_size {vocab}", param=f"{where}.tokens[{bad}]")
    check_reward_bound(d.get("reward"), limits.max_abs_reward, f"{where}.reward")
    try:
        s = Sample.from_dict(d)
        s.validate()
    except (SampleInvariantError, TypeError, ValueError) as exc:
        raise BufferError(f"{where}: {exc}", param=where) from None
    return s


class BufferError(RequestError):
    """A refused request; ``status`` is the HTTP status to answer (422: a field's value)."""

    def __init__(self, message: str, status: int = 422, param: str | None = None) -> None:
        super().__init__(message, status, param)


@dataclass
class Instance:
    instance_id: str
    slots: list[dict[str, Any]]  # the trainer's PENDING samples, one per slot
    created: float = field(default_factory=time.monotonic)
    written: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.slots)


class BufferState:
    """All state of one buffer service (used from its event loop only)."""

    def __init__(self, task_timeout_s: float = 300.0) -> None:
        self.task_timeout_s = float(task_timeout_s)
        self.task: dict[str, Any] | None = None
        self.stopped = False
        self._reset()

    def _reset(self) -> None:
        self.instances: dict[str, Instance] = {}
        self.queue: collections.deque[tuple[str, int]] = collections.deque()
        self.leases: dict[tuple[str, int], float] = {}
        self.ready: collections.deque[str] = collections.deque()
        self.invalid: list[dict[str, Any]] = []
        self.stats: collections.Counter[str] = collections.Counter()
        self.recent_errors: collections.deque[str] = collections.deque(maxlen=20)

    # -- trainer -----------------------------------------------------------------------------
    def start(self, task: dict[str, Any]) -> dict[str, Any]:
        """A new task replaces everything (a restarted trainer re-sends what it still needs)."""
        check(task, schemas.TASK)
        dropped = len(self.instances)
        self._reset()
        self.task = copy.deepcopy(task)
        self.stopped = False
        return {"dropped_instances": dropped}

    def add_instances(self, items: Any) -> int:
        """Queue prompt groups: ``[{"instance_id": str, "samples": [Sample dict, ...]}, ...]``."""
        if self.task is None:
            raise BufferError("no task: POST /start_rollout first", 409)
        check({"instances": items}, schemas.PROMPTS)
        prompt_limits = dataclasses.replace(self.limits(), max_context_len=None)
        new: list[Instance] = []
        for i, item in enumerate(items):
            where = f"instances[{i}]"
            iid = item["instance_id"]
            if iid in self.instances or any(n.instance_id == iid for n in new):
                raise BufferError(f"{where}: instance_id {iid!r} is already queued", 409,
                                  f"{where}.instance_id")
            samples = item["samples"]
            for j, d in enumerate(samples):
                # the trainer's prompts: no length cap here (a prompt that fills the context
                # is the trainer's to refuse, before the model loads)
                check_sample(d, f"{where}.samples[{j}]", prompt_limits)
            new.append(Instance(iid, copy.deepcopy(samples)))
        for inst in new:
            self.instances[inst.instance_id] = inst
            self.queue.extend((inst.instance_id, k) for k in range(inst.size))
        self.stats["instances_added"] += len(new)
        return len(new)

    def take(self, num_groups: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Up to ``num_groups`` complete groups (oldest first) and a report."""
        if type(num_groups) is not int or num_groups < 1:
            raise BufferError("num_groups: must be a positive integer", param="num_groups")
        groups: list[Any] = []
        while self.ready and len(groups) < num_groups:
            inst = self.instances.pop(self.ready.popleft())
            samples = [d for k in range(inst.size) for d in inst.written[k]]
            groups.append({"instance_id": inst.instance_id, "samples": samples})
        self.stats["delivered_groups"] += len(groups)
        report = self.report()
        report.update(requested_groups=num_groups, returned_groups=len(groups),
                      invalid_groups=self.invalid)
        self.invalid = []
        return groups, report

    def report(self) -> dict[str, Any]:
        self.expire()
        now = time.monotonic()
        partial = []
        for inst in self.instances.values():
            got = len(inst.written)
            if 0 < got < inst.size:
                partial.append({
                    "instance_id": inst.instance_id, "received": got, "expected": inst.size,
                    "leased": sum(1 for (i, _) in self.leases if i == inst.instance_id),
                    "age_s": round(now - inst.created, 3),
                })
        return {
            "ready_groups": len(self.ready),
            "open_groups": len(self.instances) - len(self.ready),
            "partial_groups": partial,
            "queued_tasks": len(self.queue),
            "leased_tasks": len(self.leases),
            "stats": dict(self.stats),
            "recent_errors": list(self.recent_errors),
            "task_started": self.task is not None,
        }

    # -- workers -----------------------------------------------------------------------------
    def expire(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for key in [k for k, deadline in self.leases.items() if deadline <= now]:
            del self.leases[key]
            self.queue.appendleft(key)
            self.stats["requeued_tasks"] += 1

    def lease(self, now: float | None = None) -> dict[str, Any] | None:
        """The next job, or ``None`` when the queue is empty."""
        if self.task is None:
            raise BufferError("no task: the trainer has not started one yet", 409)
        now = time.monotonic() if now is None else now
        self.expire(now)
        while self.queue:
            iid, slot = self.queue.popleft()
            inst = self.instances.get(iid)
            if inst is None or slot in inst.written:
                continue  # written late by an expired lease
            self.leases[(iid, slot)] = now + self.task_timeout_s
            self.stats["leased_tasks"] += 1
            return {"instance_id": iid, "slot": slot, "group_size": inst.size,
                    "lease_s": self.task_timeout_s, "sample": copy.deepcopy(inst.slots[slot])}
        return None

    def write(self, body: Any) -> dict[str, Any]:
        """A whole write on the calling thread: :meth:`plan_write`, :func:`check_sample` for
        each sample, :meth:`commit_write` (the service runs the middle step off its loop)."""
        try:
            plan = self.plan_write(body)
            limits = self.limits()
            samples = [check_sample(d, w, limits) for d, w in zip(plan.raw, plan.where, strict=True)]
            return self.commit_write(plan, samples, [x.to_dict() for x in samples])
        except RequestError as exc:
            self.refused(exc)
            raise

    def refused(self, exc: RequestError) -> None:
        """Count a refused write and keep its reason for the reports."""
        self.stats["invalid_writes"] += 1
        self.recent_errors.append(str(exc))

    def limits(self) -> SampleLimits:
        return SampleLimits.of(self.task)

    def plan_write(self, body: Any) -> WritePlan:
        """The cheap checks of a write (its shape, the instance, the slot), on the loop."""
        check(body, schemas.WRITE)
        iid, slot = body["instance_id"], body["slot"]
        inst = self.instances.get(iid)
        if inst is None:
            raise BufferError(f"instance_id: unknown instance_id {iid!r} (never queued, already "
                              "delivered, or from an earlier task)", 404, "instance_id")
        if not slot < inst.size:
            raise BufferError(f"slot: {slot} is outside 0..{inst.size - 1} (the group size of "
                              f"{iid!r})", param="slot")
        if slot in inst.written:
            raise BufferError(f"slot {slot} of {iid!r} is already written", 409, "slot")
        if ("samples" in body) == ("sample" in body):
            raise BufferError("samples: the write needs 'samples' (a non-empty list) or "
                              "'sample', not both", param="samples")
        key = "samples" if "samples" in body else "sample"
        raw = body["samples"] if key == "samples" else [body["sample"]]
        where = [f"samples[{j}]" if key == "samples" else "sample" for j in range(len(raw))]
        return WritePlan(iid, slot, raw, where, inst)

    def commit_write(self, plan: WritePlan, samples: list[Sample],
                     dicts: list[dict[str, Any]]) -> dict[str, Any]:
        """Store a planned write's checked samples (and their ``to_dict()``, made with
        them off the loop), on the loop. The instance and slot are checked again: another
        write may have taken them while the samples were checked."""
        iid, slot, where = plan.instance_id, plan.slot, plan.where
        inst = self.instances.get(iid)
        if inst is None or inst is not plan.instance:
            raise BufferError(f"instance_id: {iid!r} was delivered, or its task restarted, "
                              "while this write was checked", 404, "instance_id")
        if slot in inst.written:
            raise BufferError(f"slot {slot} of {iid!r} is already written", 409, "slot")
        if all(s.status == Status.ABORTED for s in samples):
            self.leases.pop((iid, slot), None)
            self.queue.appendleft((iid, slot))
            self.stats["aborted_writes"] += 1
            return {"accepted": False, "requeued": True}
        for j, s in enumerate(samples):
            if s.status not in _FINISHED:
                raise BufferError(f"{where[j]}.status: {s.status.value!r} is not completed, "
                                  "truncated or failed", param=f"{where[j]}.status")
            if s.response_length == 0 and s.status != Status.FAILED:
                raise BufferError(f"{where[j]}.response_length: empty response (write status "
                                  "'failed' with an 'error' for an episode that produced "
                                  "nothing)", param=f"{where[j]}.response_length")
        own = inst.slots[slot]
        out = []
        for d in dicts:
            for key in ("group_index", "index", "rollout_id"):
                d[key] = own.get(key, d[key])
            if d.get("label") is None:
                d["label"] = own.get("label")
            if not d.get("prompt"):
                d["prompt"] = own.get("prompt", "")
            d["metadata"] = {**own.get("metadata", {}), **d.get("metadata", {}),
                             "instance_id": iid, "slot": slot}
            out.append(d)
        inst.written[slot] = out
        self.leases.pop((iid, slot), None)
        self.stats["written_samples"] += len(out)
        if len(inst.written) == inst.size:
            self._complete(inst)
        return {"accepted": True, "group_complete": len(inst.written) == inst.size}

    def _complete(self, inst: Instance) -> None:
        flat = [d for k in range(inst.size) for d in inst.written[k]]
        if all(d["status"] == Status.FAILED.value for d in flat):
            del self.instances[inst.instance_id]
            errors = sorted({str(d.get("error") or "?") for d in flat})[:5]
            self.invalid.append({"instance_id": inst.instance_id,
                                 "reason": "every sample failed", "errors": errors})
            self.stats["invalid_groups"] += 1
            return
        self.ready.append(inst.instance_id)
        self.stats["complete_groups"] += 1
