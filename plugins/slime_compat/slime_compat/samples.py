"""slime's ``Sample`` as a view of the project's :class:`slime_hookspecs.Sample`.

slime code reads and writes ``sample.tokens``, ``sample.loss_mask``, ``sample.status`` ...; the
view forwards every field both samples share to the project sample, so a write lands where the
core reads it. Differences it translates: slime's ``None`` for an unset ``loss_mask`` /
``rollout_log_probs`` (the project keeps lists: ``[]``), ``weight_versions`` as strings (the
project: ints), ``group_index`` / ``index`` / ``rollout_id`` ``None`` (project: 0, 0, -1).
slime-only fields (``multimodal_inputs``, ``teacher_log_probs``, ``spec_info`` ...) live on the view.
One view per project sample and process (:func:`wrap`), so such fields survive from the
generate function to the reward function to the filters.

``Sample.Status`` is the project's :class:`~slime_hookspecs.Status` (same names and values as
slime's). When the real THUDM/slime is installed the view reports real ``Sample.Status``
members, so comparisons in code importing the real package hold.
"""

from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass
from typing import Any

from slime_hookspecs import Sample as CoreSample
from slime_hookspecs import Status

SHARED = ("group_index", "index", "rollout_id", "prompt", "tokens", "response",
          "response_length", "label", "reward", "loss_mask", "rollout_log_probs",
          "weight_versions", "status", "remove_sample", "metadata", "train_metadata", "session_id")


@dataclass
class SpecInfo:
    spec_accept_token_num: int = 0
    spec_draft_token_num: int = 0
    spec_verify_ct: int = 0
    completion_token_num: int = 0

    def add(self, meta_info: dict[str, Any]) -> None:
        self.spec_accept_token_num += meta_info.get("spec_accept_token_num", 0)
        self.spec_draft_token_num += meta_info.get("spec_draft_token_num", 0)
        self.spec_verify_ct += meta_info.get("spec_verify_ct", 0)
        self.completion_token_num += meta_info.get("completion_tokens", 0)


@dataclass
class PrefixCacheInfo:
    cached_tokens: int = 0
    total_prompt_tokens: int = 0

    def add(self, meta_info: dict[str, Any]) -> None:
        self.cached_tokens += meta_info.get("cached_tokens", 0)
        self.total_prompt_tokens += meta_info.get("prompt_tokens", 0)


def _extras() -> dict[str, Any]:
    return {"multimodal_inputs": None, "multimodal_train_inputs": None,
            "multimodal_train_input_id": None, "apply_chat_template_kwargs": {},
            "rollout_top_p_token_ids": None, "rollout_top_p_token_offsets": None,
            "rollout_routed_experts": None, "teacher_log_probs": None,
            "generate_function_path": None, "custom_rm_path": None,
            "non_generation_time": 0.0, "spec_info": SpecInfo(),
            "prefix_cache_info": PrefixCacheInfo()}


_real_status: Any = None  # real slime's Sample.Status, when that package is what is imported


def set_real_status(enum: Any) -> None:
    global _real_status
    _real_status = enum


_views: dict[int, Sample] = {}


class Sample:
    """slime's ``Sample`` (``slime.utils.types.Sample`` when THUDM/slime is not installed)."""

    Status = Status
    SpecInfo = SpecInfo
    PrefixCacheInfo = PrefixCacheInfo

    def __init__(self, _core: CoreSample | None = None, **kwargs: Any) -> None:
        object.__setattr__(self, "_core", _core if _core is not None else CoreSample())
        object.__setattr__(self, "_extra", _extras())
        _register(self)
        for key, value in kwargs.items():
            setattr(self, key, value)

    # -- the forwarding ---------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        core, extra = self.__dict__["_core"], self.__dict__["_extra"]
        if name in SHARED:
            value = getattr(core, name)
            if name in ("loss_mask", "rollout_log_probs"):
                return value if value or core.response_length else None
            if name == "weight_versions":
                return [str(v) for v in value]
            if name == "status":
                return _real_status(value.value) if _real_status is not None else value
            if name == "rollout_id":
                return None if value == -1 else value
            return value
        if name in extra:
            return extra[name]
        raise AttributeError(f"Sample has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        core = self.__dict__["_core"]
        if name in SHARED:
            if name in ("loss_mask", "rollout_log_probs"):
                value = [] if value is None else _plain_list(value)
            elif name == "tokens":
                value = [int(t) for t in _plain_list(value)]
            elif name == "weight_versions":
                value = [int(v) if str(v).lstrip("-").isdigit() else -1 for v in value]
            elif name == "status":
                value = Status(getattr(value, "value", value))
            elif name in ("group_index", "index"):
                value = 0 if value is None else int(value)
            elif name == "rollout_id":
                value = -1 if value is None else int(value)
            elif name == "response_length":
                value = int(value)
            setattr(core, name, value)
        else:
            self.__dict__["_extra"][name] = value

    # -- slime's methods --------------------------------------------------------------------
    def get_reward_value(self, args: Any) -> Any:
        key = getattr(args, "reward_key", None)
        return self.reward if not key else self.reward[key]

    @property
    def effective_response_length(self) -> int:
        mask = self.loss_mask
        return sum(mask) if mask is not None else self.response_length

    def append_response_tokens(self, args: Any = None, *, tokens: Any = None,
                               log_probs: Any = None, trainable: bool = True,
                               meta_info: dict[str, Any] | None = None, text: str | None = None,
                               update_terminal_info: bool = True) -> None:
        """slime's ``append_response_tokens``: appends ids, mask and log-probs, and with SGLang's
        ``meta_info`` sets the status from ``finish_reason`` and records the weight version."""
        core = self.__dict__["_core"]
        ids = [int(t) for t in _plain_list(tokens or [])]
        lps = None if log_probs is None else [float(x) for x in _plain_list(log_probs)]
        if lps is not None and len(lps) != len(ids):
            raise ValueError(f"log_probs length {len(lps)} != tokens length {len(ids)}")
        if ids and trainable and lps is None:
            raise ValueError("trainable response tokens require rollout log probabilities.")
        if ids and not trainable and lps is not None:
            raise ValueError("non-trainable response tokens should not pass rollout log probabilities.")
        if not core.loss_mask and core.response_length:  # slime's None mask: all trained
            core.loss_mask = [1] * core.response_length
        if len(core.rollout_log_probs) != core.response_length:
            if trainable and core.response_length and ids:
                raise ValueError("Cannot append trainable rollout log probabilities to a sample "
                                 "with existing response tokens but no existing rollout_log_probs.")
            core.rollout_log_probs = [0.0] * core.response_length
        core.append_response_tokens(ids, lps, trainable=trainable, text=text or "")
        if meta_info is None or not update_terminal_info or "finish_reason" not in meta_info:
            return
        self.prefix_cache_info.add(meta_info)
        if "weight_version" in meta_info:
            wv = str(meta_info["weight_version"])
            core.weight_versions.append(int(wv) if wv.lstrip("-").isdigit() else -1)
        kind = (meta_info["finish_reason"] or {}).get("type")
        status = {"length": Status.TRUNCATED, "abort": Status.ABORTED, "stop": Status.COMPLETED}
        if kind in status:
            core.status = status[kind]

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in SHARED}
        d["status"] = self.__dict__["_core"].status.value
        d.update({k: v for k, v in self.__dict__["_extra"].items()
                  if k not in ("spec_info", "prefix_cache_info")})
        return d

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Sample:
        return _view_cls(**dict(data))

    def __copy__(self) -> Sample:
        out = _view_cls(copy.copy(self.__dict__["_core"]))
        out.__dict__["_extra"].update(self.__dict__["_extra"])
        return out

    def __deepcopy__(self, memo: dict[int, Any]) -> Sample:
        out = _view_cls(copy.deepcopy(self.__dict__["_core"], memo))
        out.__dict__["_extra"].update(copy.deepcopy(self.__dict__["_extra"], memo))
        return out

    def __reduce__(self) -> Any:  # pickles as (project sample, extras)
        return (_rebuild, (self.__dict__["_core"], self.__dict__["_extra"]))

    def __repr__(self) -> str:
        core = self.__dict__["_core"]
        return (f"Sample(group_index={core.group_index}, index={core.index}, "
                f"status={core.status.name}, response={core.response!r}, reward={core.reward!r})")


_view_cls: type = Sample  # what wrap() builds: Sample, or RealSampleView with THUDM/slime


class RealSampleView(Sample):
    """Placeholder until :func:`set_real_sample` rebuilds it over the real class."""


def set_real_sample(real_cls: type) -> None:
    """Make the views instances of THUDM/slime's ``Sample`` too, so that slime code checking
    ``isinstance(sample, Sample)`` (its tracing, retool's and search-r1's rewards) accepts them.

    The real class is a dataclass whose field defaults are class attributes; they would
    shadow the forwarding (``__getattr__`` runs only when lookup fails), so field names are
    forwarded in ``__getattribute__``. Identity equality and hashing, as for the shim's views
    (the dataclass would compare field tuples and make views unhashable)."""
    global _view_cls, RealSampleView

    class _View(Sample, real_cls):  # type: ignore[misc, valid-type]
        __hash__ = object.__hash__
        __eq__ = object.__eq__
        Status = getattr(real_cls, "Status", Status)

        def __getattribute__(self, name: str) -> Any:
            if name in SHARED:
                return Sample.__getattr__(self, name)
            if not name.startswith("_"):
                extra = object.__getattribute__(self, "__dict__").get("_extra", {})
                if name in extra:
                    return extra[name]
            return object.__getattribute__(self, name)

    _View.__name__ = _View.__qualname__ = "RealSampleView"  # pickle finds it by this name
    _View.__module__ = __name__
    RealSampleView = _View  # type: ignore[misc]  # the module's class is replaced at run time by design (pickle finds it by name)
    _view_cls = _View


def _rebuild(core: CoreSample, extra: dict[str, Any]) -> Sample:
    view = wrap(core)
    view.__dict__["_extra"].update(extra)
    return view


def _register(view: Sample) -> None:
    core = view.__dict__["_core"]
    key = id(core)
    _views[key] = view
    weakref.finalize(core, _views.pop, key, None)


def _plain_list(value: Any) -> list[Any]:
    return value.tolist() if hasattr(value, "tolist") else list(value)


def wrap(core: CoreSample) -> Sample:
    """The (one) slime view of ``core`` in this process."""
    if isinstance(core, Sample):
        return core
    view = _views.get(id(core))
    if view is not None and view.__dict__["_core"] is core:
        return view
    return _view_cls(core)


def unwrap(sample: Any) -> CoreSample:
    """The project sample behind a view (a project sample passes through), made valid:
    slime's unset loss mask becomes all ones, a missing log-prob list stays empty."""
    if isinstance(sample, CoreSample):
        core = sample
    elif isinstance(sample, Sample):
        core = sample.__dict__["_core"]
    else:
        raise TypeError(f"expected a slime Sample, got {type(sample).__name__}")
    if not core.loss_mask and core.response_length:
        core.loss_mask = [1] * core.response_length
    if core.rollout_log_probs and len(core.rollout_log_probs) != core.response_length:
        raise ValueError(f"sample {core.index}: {len(core.rollout_log_probs)} rollout_log_probs "
                         f"for response_length {core.response_length}")
    return core


def wrap_groups(groups: list[list[CoreSample]]) -> list[list[Sample]]:
    return [[wrap(s) for s in g] for g in groups]


def unwrap_any(value: Any) -> Any:
    """Views -> project samples through lists (slime's ``Sample | list[Sample]`` shapes)."""
    if isinstance(value, list):
        return [unwrap_any(v) for v in value]
    return unwrap(value)
