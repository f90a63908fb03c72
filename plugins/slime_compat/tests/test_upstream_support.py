"""What THUDM/slime's own modules need from this plugin (README "slime's own examples"):
the shim's ``cp_utils``, filters that never see failed samples, and slime's module-level HTTP
client created when the real package is installed."""

import sys
import types
from types import SimpleNamespace

import pytest
from slime_hookspecs import Sample as CoreSample
from slime_hookspecs import Status

from slime_compat import rollout_side, runtime, shim


def test_cp_utils_is_slimes_single_rank_branch() -> None:
    import torch
    from slime.backends.megatron_utils.cp_utils import all_gather_with_cp, slice_log_prob_with_cp

    t = torch.tensor([0.1, 0.2, 0.3])
    assert all_gather_with_cp(t, 7, 3) is t and slice_log_prob_with_cp(t, 7, 3) is t
    with pytest.raises(AssertionError, match="length mismatch"):
        slice_log_prob_with_cp(t, 7, 2)


def _group() -> list[CoreSample]:
    out = []
    for i, (status, reward) in enumerate([(Status.COMPLETED, 1.0), (Status.FAILED, None),
                                          (Status.COMPLETED, 0.0)]):
        s = CoreSample(tokens=[1, 2], prompt="1+1=", index=i)
        s.status, s.reward = status, reward
        out.append(s)
    return out


def test_dynamic_filter_never_sees_failed_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[float]] = []

    def check(args, samples):  # as slime's check_reward_nonzero_std reads them
        seen.append([float(s.get_reward_value(args)) for s in samples])
        return False

    rt = SimpleNamespace(args=SimpleNamespace(reward_key=None),
                         section=SimpleNamespace(dynamic_sampling_filter_path="x.check"))
    monkeypatch.setattr(rollout_side, "runtime", lambda config: rt)
    monkeypatch.setattr(rollout_side, "load_flag", lambda key, path: check)
    res = rollout_side.dynamic_filter(None, _group())
    assert seen == [[1.0, 0.0]] and res.keep is False
    failed = [s for s in _group() if s.status == Status.FAILED]
    assert rollout_side.dynamic_filter(None, failed).keep is True and len(seen) == 1


def test_real_slime_http_client_is_initialised(monkeypatch: pytest.MonkeyPatch) -> None:
    inits = []
    pkg = {name: types.ModuleType(name) for name in ("slime", "slime.utils", "slime.utils.http_utils")}
    pkg["slime.utils.http_utils"].init_http_client = inits.append
    pkg["slime"].utils = pkg["slime.utils"]
    pkg["slime.utils"].http_utils = pkg["slime.utils.http_utils"]
    for name, mod in pkg.items():
        monkeypatch.setitem(sys.modules, name, mod)
    rt = runtime.Runtime.__new__(runtime.Runtime)
    rt.args = SimpleNamespace(rollout_num_engines=1)
    monkeypatch.setattr(shim, "_mode", "shim")
    rt._init_real_http_client()
    assert inits == []  # the shim's post needs no client
    monkeypatch.setattr(shim, "_mode", "real")
    rt._init_real_http_client()
    assert inits == [rt.args]


def test_views_are_real_slime_samples_when_it_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    import copy
    import pickle
    from dataclasses import dataclass
    from enum import Enum

    from slime_compat import samples

    @dataclass
    class RealSample:  # THUDM/slime's shape: a dataclass whose defaults are class attributes
        class Status(Enum):
            PENDING = "pending"
            COMPLETED = "completed"

        reward: float | None = None
        status: "RealSample.Status" = Status.PENDING
        multimodal_inputs: dict | None = None

    monkeypatch.setattr(samples, "_view_cls", samples._view_cls)
    monkeypatch.setattr(samples, "RealSampleView", samples.RealSampleView)
    monkeypatch.setattr(samples, "_views", {})
    monkeypatch.setattr(samples, "_real_status", None)
    samples.set_real_status(RealSample.Status)
    samples.set_real_sample(RealSample)
    core = CoreSample(tokens=[1, 2], prompt="1+1=")
    core.reward, core.status = 1.0, Status.COMPLETED
    v = samples.wrap(core)
    assert isinstance(v, RealSample) and isinstance(v, samples.Sample)
    # the fields read through to the project's sample, not the dataclass defaults
    assert v.reward == 1.0 and v.status is RealSample.Status.COMPLETED and v.tokens == [1, 2]
    v.multimodal_inputs = {"images": []}
    assert v.multimodal_inputs == {"images": []}
    v.reward = 0.5
    assert core.reward == 0.5 and {v: 1}[v] == 1 and v != samples.wrap(CoreSample(tokens=[1, 2]))
    c = copy.deepcopy(v)
    assert isinstance(c, RealSample) and c.reward == 0.5 and c.multimodal_inputs == {"images": []}
    assert pickle.loads(pickle.dumps(v)).reward == 0.5


def test_reward_dicts_keep_their_numbers() -> None:
    import torch

    # retool's reward_func returns DAPO's result: a score, a bool and the extracted answer
    got = rollout_side._reward_value({"score": -1.0, "acc": False, "pred": "", "t": torch.tensor(2.0)})
    assert got == {"score": -1.0, "acc": 0.0, "t": 2.0}
    assert rollout_side._reward_value(torch.tensor(0.5)) == 0.5 and rollout_side._reward_value(1) == 1
