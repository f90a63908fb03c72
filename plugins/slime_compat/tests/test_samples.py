"""slime's Sample view: writes land on the project's sample; slime's None/str conventions."""

import copy
import pickle

from slime_hookspecs import Sample as CoreSample
from slime_hookspecs import Status

from slime_compat.samples import unwrap, wrap


def test_the_shim_serves_slimes_import_names() -> None:
    import slime
    from slime.rollout.filter_hub.base_types import DynamicFilterOutput
    from slime.rollout.rm_hub import async_rm, batched_async_rm  # noqa: F401
    from slime.rollout.sglang_rollout import GenerateState  # noqa: F401
    from slime.utils.http_utils import post  # noqa: F401
    from slime.utils.types import Sample

    assert slime.__slime_compat_shim__ is True
    assert Sample.Status.COMPLETED.value == "completed" and DynamicFilterOutput(keep=False).keep is False


def test_writes_land_on_the_project_sample() -> None:
    from slime.utils.types import Sample

    core = CoreSample(tokens=[1, 2, 3], prompt="1+1=")
    s = wrap(core)
    assert isinstance(s, Sample) and wrap(core) is s  # one view per sample
    assert s.loss_mask is None and s.rollout_log_probs is None and s.rollout_id is None
    s.tokens = s.tokens + [7, 8]
    s.response_length = 2
    s.rollout_log_probs = [-0.5, -0.25]
    s.status = Sample.Status.TRUNCATED
    s.reward = 1.0
    s.weight_versions = ["3"]
    s.multimodal_inputs = {"images": None}  # slime-only field: kept on the view
    assert core.tokens == [1, 2, 3, 7, 8] and core.response_length == 2
    assert core.status is Status.TRUNCATED and core.weight_versions == [3] and s.weight_versions == ["3"]
    out = unwrap(s)
    assert out is core and out.loss_mask == [1, 1]  # slime's unset mask: all trained
    core.validate()
    assert wrap(core).multimodal_inputs == {"images": None}


def test_append_response_tokens_reads_sglang_meta_info() -> None:
    s = wrap(CoreSample(tokens=[5, 6]))
    meta = {"finish_reason": {"type": "length", "length": 2}, "weight_version": "4",
            "prompt_tokens": 2, "cached_tokens": 0}
    s.append_response_tokens(None, tokens=[9, 10], log_probs=[-1.0, -2.0], meta_info=meta, text="ab")
    s.append_response_tokens(None, tokens=[11], trainable=False)
    core = unwrap(s)
    assert core.tokens == [5, 6, 9, 10, 11] and core.loss_mask == [1, 1, 0]
    assert core.rollout_log_probs == [-1.0, -2.0, 0.0] and core.status is Status.TRUNCATED
    assert core.weight_versions == [4] and core.response == "ab"


def test_copies_and_pickles_are_views_of_copies() -> None:
    s = wrap(CoreSample(index=3, metadata={"k": 1}))
    s.teacher_log_probs = [0.1]
    for c in (copy.deepcopy(s), pickle.loads(pickle.dumps(s))):
        assert c is not s and unwrap(c) is not unwrap(s)
        assert c.index == 3 and c.teacher_log_probs == [0.1]
        c.metadata["k"] = 2
        assert s.metadata["k"] == 1
