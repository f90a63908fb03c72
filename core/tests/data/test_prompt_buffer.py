"""The prompt buffer every prompt source builds on (``slime_core.data.base``), through a source
held in memory: what a plugin's source gets from ``slime_core.api.PromptDataSource``. The
standard file and reasoning-gym sources are tested in slime-std."""

from __future__ import annotations

import json

import pytest
from slime_core.api import PromptDataSource, PromptRow
from slime_hookspecs import DataSource, Sample, Status


class ListSource(PromptDataSource):
    def __init__(self, config, split, prompts):
        super().__init__(config, split)
        self.rows = [PromptRow(prompt=p, label=str(i)) for i, p in enumerate(prompts)]
        self.apply_max_prompt_len()

    def _num_rows(self) -> int:
        return len(self.rows)

    def _row(self, i: int) -> PromptRow:
        return self.rows[i]


@pytest.fixture
def source(make_config, tiny_tokenizer_dir):
    def build(n: int = 5, shuffle: bool = True, split: str = "train", prompts=None, **data):
        config = make_config(run={"seed": 3}, model={"path": str(tiny_tokenizer_dir)},
                             data={"shuffle": shuffle, **data},
                             rollout={"n_samples_per_prompt": 2})
        return ListSource(config, split, prompts or [f"q{i}" for i in range(n)])
    return build


def key(group: list[Sample]) -> tuple:
    return tuple((s.group_index, s.index, s.prompt, tuple(s.tokens)) for s in group)


def test_groups_epochs_and_the_protocol(source):
    src = source()
    assert isinstance(src, DataSource) and len(src) == 5
    first = src.get_samples(5)
    assert [len(g) for g in first] == [2] * 5
    assert [s.index for g in first for s in g] == list(range(10))
    assert all(g[0].status == Status.PENDING and g[0].tokens for g in first)
    second = src.get_samples(5)
    labels = [g[0].label for g in first], [g[0].label for g in second]
    assert sorted(labels[0]) == sorted(labels[1]) and labels[0] != labels[1]  # a new permutation


def test_eval_split_hands_out_every_prompt_once_in_order(source):
    src = source(split="eval")
    assert [g[0].label for g in src.get_samples(-1)] == [str(i) for i in range(5)]


def test_resume_at_the_next_prompt_with_the_return_buffer(source):
    straight = source()
    expected = [key(g) for g in straight.get_samples(2) + straight.get_samples(4)]
    first = source()
    got = first.get_samples(2)
    first.add_samples([got[1]])
    state = json.loads(json.dumps(first.state_dict()))
    resumed = source()
    resumed.load_state_dict(state)
    back = resumed.get_samples(5)
    assert key(back[0]) == key(got[1])  # the buffered group first
    assert [key(g) for g in back[1:]] == expected[2:]


def test_long_prompts_are_dropped_at_construction(source):
    src = source(prompts=["a", "bbbbbbbb", "c"], max_prompt_len=3, shuffle=False)
    assert len(src) == 2 and src.dropped_long_prompts == 1
    assert [g[0].prompt for g in src.get_samples(2)] == ["a", "c"]
    with pytest.raises(ValueError, match="drops all 1 prompts"):
        source(prompts=["bbbbbbbb"], max_prompt_len=3)


def test_a_buffer_filter_that_takes_too_many_is_named(source):
    src = source()
    src.add_samples(src.get_samples(3))

    def greedy(config, rollout_id, buffer, num_groups):
        return list(buffer)

    src.set_buffer_filter(greedy)
    with pytest.raises(ValueError, match="buffer filter 'greedy' returned 3 groups, asked for at most 2"):
        src.get_samples(2)
