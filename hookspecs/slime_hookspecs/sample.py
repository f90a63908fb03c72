"""The ``Sample``: one prompt and one response, as every component sees it.

Invariants (checked by :meth:`Sample.validate`):

* ``tokens`` holds the prompt ids followed by the response ids, so
  ``len(tokens) == prompt_length + response_length``;
* ``len(loss_mask) == response_length`` (1 = trained, 0 = masked, e.g. tool observations);
* ``len(rollout_log_probs) == response_length`` when log-probs are present (masked tokens carry
  0.0, they are never trained);
* ``response`` is for humans and rewards only: training always uses ``tokens``;
* ``rollout_routed_experts``, when present, covers ``len(tokens) - 1`` positions (the experts
  a mixture-of-experts model routed every token but the last to; see
  :mod:`slime_hookspecs.routing`).
"""

from __future__ import annotations

import copy
import enum
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from slime_hookspecs.routing import RoutedExperts


class Status(str, enum.Enum):
    """Where a sample is in its life."""

    PENDING = "pending"
    COMPLETED = "completed"  # stopped on EOS / stop string / stop token
    TRUNCATED = "truncated"  # hit max_new_tokens
    ABORTED = "aborted"  # cancelled (surplus of dynamic sampling, shutdown); may be resumed
    FAILED = "failed"  # generation or reward raised; ``error`` says why


class SampleInvariantError(ValueError):
    """A sample whose lengths disagree (see the module docstring)."""


@dataclass
class Sample:
    """One rollout sample; slime's fields, torch-free so it pickles and serialises cheaply."""

    group_index: int = 0  # the prompt's group (the samples of one prompt share it)
    index: int = 0  # the sample's number, unique within its data source
    rollout_id: int = -1  # the step that generated it
    prompt: str | list[dict[str, Any]] = ""  # text, or chat messages with data.apply_chat_template
    tokens: list[int] = field(default_factory=list)  # prompt ids then response ids
    response: str = ""  # decoded response, for rewards and humans (training uses tokens)
    response_length: int = 0  # response ids at the end of tokens
    label: Any = None  # what the reward checks against (data.label_key)
    reward: float | dict[str, float] | None = None  # a dict needs rollout.reward_key
    loss_mask: list[int] = field(default_factory=list)  # per response token: 1 trained, 0 masked
    rollout_log_probs: list[float] = field(default_factory=list)  # the engine's, per response token
    weight_versions: list[int] = field(default_factory=list)  # weight version of each generation call
    status: Status = Status.PENDING  # see Status
    remove_sample: bool = False  # kept in the rollout, left out of the loss (sample filters)
    metadata: dict[str, Any] = field(default_factory=dict)  # the data row's metadata; free for plugins
    train_metadata: dict[str, Any] = field(default_factory=dict)  # for training-side plugins
    session_id: str | None = None  # agent API session that produced it (multi-turn)
    error: str | None = None  # why it FAILED
    # MoE models with train.routing_replay = "rollout": the engine's top-k expert ids of every
    # token but the last, every MoE layer (slime_hookspecs.routing); None when not recorded
    rollout_routed_experts: RoutedExperts | None = None

    # -- derived -------------------------------------------------------------------------
    @property
    def prompt_length(self) -> int:
        """Number of prompt tokens at the head of ``tokens``."""
        return len(self.tokens) - self.response_length

    @property
    def prompt_tokens(self) -> list[int]:
        return self.tokens[: self.prompt_length]

    @property
    def response_tokens(self) -> list[int]:
        return self.tokens[self.prompt_length :]

    @property
    def done(self) -> bool:
        return self.status in (Status.COMPLETED, Status.TRUNCATED, Status.FAILED)

    # -- mutation that keeps the invariants ----------------------------------------------
    def append_response_tokens(
        self,
        token_ids: list[int],
        log_probs: list[float] | None = None,
        *,
        trainable: bool = True,
        text: str = "",
        weight_version: int | None = None,
    ) -> None:
        """Append tokens to the response, keeping every length invariant.

        Model tokens are appended with ``trainable=True`` and their rollout log-probs; tool or
        observation tokens with ``trainable=False`` get loss mask 0 and log-prob 0.0. The caller
        passes ids, never text to re-tokenize: multi-turn prompts are built by appending ids.
        """
        token_ids = [int(t) for t in token_ids]
        if log_probs is None:
            if trainable and token_ids:
                raise SampleInvariantError("trainable tokens need their rollout log-probs")
            log_probs = [0.0] * len(token_ids)
        if len(log_probs) != len(token_ids):
            raise SampleInvariantError(
                f"{len(token_ids)} tokens but {len(log_probs)} log-probs appended to sample "
                f"{self.index}"
            )
        if self.rollout_log_probs is None or (
            len(self.rollout_log_probs) != self.response_length
        ):
            raise SampleInvariantError(
                f"sample {self.index} has {self.response_length} response tokens but "
                f"{len(self.rollout_log_probs or [])} rollout log-probs"
            )
        self.tokens.extend(token_ids)
        self.response_length += len(token_ids)
        self.loss_mask.extend([1 if trainable else 0] * len(token_ids))
        self.rollout_log_probs.extend(float(x) for x in log_probs)
        self.response += text
        if weight_version is not None and trainable and token_ids:
            if not self.weight_versions or self.weight_versions[-1] != weight_version:
                self.weight_versions.append(int(weight_version))

    def validate(self) -> None:
        """Raise :class:`SampleInvariantError` naming the first broken invariant."""
        where = f"sample group={self.group_index} index={self.index}"
        if self.response_length < 0 or self.response_length > len(self.tokens):
            raise SampleInvariantError(
                f"{where}: response_length {self.response_length} outside 0..{len(self.tokens)}"
            )
        if len(self.loss_mask) != self.response_length:
            raise SampleInvariantError(
                f"{where}: loss_mask has {len(self.loss_mask)} entries, "
                f"response_length is {self.response_length}"
            )
        if self.rollout_log_probs and len(self.rollout_log_probs) != self.response_length:
            raise SampleInvariantError(
                f"{where}: rollout_log_probs has {len(self.rollout_log_probs)} entries, "
                f"response_length is {self.response_length}"
            )
        if any(m not in (0, 1) for m in self.loss_mask):
            raise SampleInvariantError(f"{where}: loss_mask values must be 0 or 1")
        routed = self.rollout_routed_experts
        if routed is not None and routed.shape[0] != len(self.tokens) - 1:
            raise SampleInvariantError(
                f"{where}: rollout_routed_experts covers {routed.shape[0]} positions, "
                f"expected len(tokens) - 1 = {len(self.tokens) - 1}"
            )

    # -- serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (status as its string value); a copy that shares nothing with the
        sample, as ``dataclasses.asdict`` makes it, but the id and log-prob lists are copied
        whole rather than element by element (``asdict`` took 5 s for a 1.3M-token sample)."""
        d: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _FLAT_LISTS and type(value) is list:
                d[f.name] = list(value)  # ints and floats: nothing inside to copy
            elif f.name == "rollout_routed_experts":
                d[f.name] = None if value is None else value.to_dict()
            else:
                d[f.name] = _plain(value)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        """Inverse of :meth:`to_dict`; unknown keys fail naming them."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown Sample field(s) {unknown}; valid: {sorted(known)}")
        kwargs = dict(data)
        if "status" in kwargs:
            kwargs["status"] = Status(kwargs["status"])
        for key in _FLAT_LISTS:
            if key in kwargs and kwargs[key] is not None:
                kwargs[key] = list(kwargs[key])
        routed = kwargs.get("rollout_routed_experts")
        if isinstance(routed, dict):
            kwargs["rollout_routed_experts"] = RoutedExperts.from_dict(routed)
        return cls(**kwargs)


#: the per-token lists of a sample: numbers only
_FLAT_LISTS = ("tokens", "loss_mask", "rollout_log_probs", "weight_versions")


def _plain(value: Any) -> Any:
    """``value`` as ``dataclasses.asdict`` copies a field's value: dataclasses as dicts,
    lists, tuples and dicts rebuilt, everything else deep-copied."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*[_plain(v) for v in value])
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_plain(k), _plain(v)) for k, v in value.items())
    return copy.deepcopy(value)
