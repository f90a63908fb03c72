"""Sample invariants, serialisation and the torch-free import of the hook API."""

from __future__ import annotations

import subprocess
import sys

import pytest

from slime_hookspecs import (
    FilterRecord,
    RewardFunctionRecord,
    Sample,
    SampleInvariantError,
    SamplingParams,
    Status,
    ToolRecord,
    TrainBatch,
)


def _prompt() -> Sample:
    return Sample(group_index=2, index=5, prompt="1+1=", tokens=[7, 8, 9], label="2")


def test_append_keeps_invariants_for_multi_turn() -> None:
    s = _prompt()
    s.append_response_tokens([1, 2], [-0.1, -0.2], text="ab", weight_version=3)
    s.append_response_tokens([30, 31, 32], trainable=False, text="<obs>")
    s.append_response_tokens([4], [-0.4], text="c", weight_version=4)
    assert s.tokens == [7, 8, 9, 1, 2, 30, 31, 32, 4]
    assert s.prompt_length == 3 and s.response_length == 6
    assert s.loss_mask == [1, 1, 0, 0, 0, 1]
    assert s.rollout_log_probs == [-0.1, -0.2, 0.0, 0.0, 0.0, -0.4]
    assert s.response_tokens == [1, 2, 30, 31, 32, 4]
    assert s.weight_versions == [3, 4]
    assert s.response == "ab<obs>c"
    s.validate()


def test_trainable_tokens_need_log_probs_of_same_length() -> None:
    s = _prompt()
    with pytest.raises(SampleInvariantError, match="need their rollout log-probs"):
        s.append_response_tokens([1, 2])
    with pytest.raises(SampleInvariantError, match="2 tokens but 1 log-probs"):
        s.append_response_tokens([1, 2], [-0.1])


def test_validate_names_the_broken_invariant() -> None:
    s = _prompt()
    s.response_length = 2
    s.loss_mask = [1]
    with pytest.raises(SampleInvariantError, match="loss_mask has 1 entries, response_length is 2"):
        s.validate()
    s.loss_mask = [1, 1]
    s.rollout_log_probs = [0.0]
    with pytest.raises(SampleInvariantError, match="rollout_log_probs has 1 entries"):
        s.validate()
    s.response_length = 9
    with pytest.raises(SampleInvariantError, match="outside 0..3"):
        s.validate()


def test_to_dict_from_dict_round_trip() -> None:
    s = _prompt()
    s.append_response_tokens([1], [-0.5], text="2")
    s.status = Status.COMPLETED
    s.metadata["k"] = [1, 2]
    d = s.to_dict()
    assert d["status"] == "completed"
    back = Sample.from_dict(d)
    assert back == s
    with pytest.raises(ValueError, match=r"unknown Sample field\(s\) \['bogus'\]"):
        Sample.from_dict({**d, "bogus": 1})


def test_sampling_params_validation() -> None:
    assert SamplingParams(temperature=0).temperature == 0
    for bad in ({"temperature": -1}, {"top_p": 0}, {"top_k": 0}, {"max_new_tokens": 0}):
        with pytest.raises(ValueError):
            SamplingParams(**bad)
    assert SamplingParams().replace(top_k=5).top_k == 5


def test_train_batch_validate_and_select() -> None:
    b = TrainBatch(tokens=[[1, 2, 3], [4, 5]], response_lengths=[2, 1],
                   loss_masks=[[1, 1], [1]], rewards=[1.0, 0.0])
    b.validate()
    assert b.select([1]).response_lengths == [1]
    b.loss_masks = [[1], [1]]
    with pytest.raises(ValueError, match=r"TrainBatch.loss_masks\[0\] has length 1, response length is 2"):
        b.validate()
    with pytest.raises(KeyError):
        b["nope"] = 1


def test_records_validate_and_probe_never_raises() -> None:
    with pytest.raises(ValueError):
        RewardFunctionRecord(name="", factory=lambda c: None)
    with pytest.raises(TypeError):
        RewardFunctionRecord(name="x", factory=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stage 'later'"):
        FilterRecord(name="f", factory=lambda: None, stage="later")

    def boom() -> str | None:
        raise RuntimeError("probe bug")

    rec = RewardFunctionRecord(name="x", factory=lambda c: None, probe=boom)
    assert rec.unavailable_reason() == "probe raised RuntimeError: probe bug"
    tool = ToolRecord(name="calc", factory=lambda c: None, description="adds",
                      parameters={"type": "object", "properties": {"a": {"type": "number"}}})
    assert tool.schema()["function"]["name"] == "calc"


def test_import_does_not_pull_torch() -> None:
    code = "import sys, slime_hookspecs, slime_hookspecs.specs; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_to_dict_is_asdict_with_whole_list_copies():
    """``to_dict`` copies as ``dataclasses.asdict`` does (nothing shared with the sample), with
    the per-token lists copied whole (the rollout buffer stores every written sample's)."""
    import json
    from dataclasses import asdict

    from slime_hookspecs import RoutedExperts

    s = Sample(group_index=1, index=2, prompt=[{"role": "user", "content": "hi"}],
               tokens=[1, 2], label={"a": [1]}, metadata={"m": {"n": 1}}, rollout_id=0)
    s.append_response_tokens([3, 4], [-0.5, -0.25], text="ok", weight_version=2)
    s.status, s.reward = Status.TRUNCATED, {"acc": 1.0}
    d = s.to_dict()
    assert d == {**asdict(s), "status": s.status.value}
    d["tokens"].append(9)
    d["metadata"]["m"]["n"] = 5
    assert s.tokens == [1, 2, 3, 4] and s.metadata == {"m": {"n": 1}}  # copies, not views
    # routing replay's record (docs/moe.md): JSON-ready
    s.rollout_routed_experts = RoutedExperts(shape=(3, 1, 2), dtype="uint8", data=bytes(6))
    d = s.to_dict()
    assert d["rollout_routed_experts"] == s.rollout_routed_experts.to_dict()
    assert Sample.from_dict(json.loads(json.dumps(d))).rollout_routed_experts == \
        s.rollout_routed_experts
