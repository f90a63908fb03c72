"""The file data source: sample shape, epochs, resume, return buffer, error messages, parquet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slime_hookspecs import DataSource, Sample, Status
from slime_std.data import make_jsonl_source, make_parquet_source


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def rows(n: int) -> list[dict]:
    return [{"prompt": f"q{i}", "label": str(i), "metadata": {"id": i}, "source": "t"} for i in range(n)]


@pytest.fixture
def cfg(make_config, tiny_tokenizer_dir, tmp_path):
    def build(n: int = 7, shuffle: bool = True, n_samples: int = 2, **data):
        path = write_jsonl(tmp_path / "train.jsonl", rows(n))
        return make_config(
            run={"seed": 3},
            model={"path": str(tiny_tokenizer_dir)},
            data={"path": str(path), "shuffle": shuffle, **data},
            rollout={"n_samples_per_prompt": n_samples},
        )
    return build


def key(group: list[Sample]) -> tuple:
    return tuple((s.group_index, s.index, s.prompt, tuple(s.tokens), s.label) for s in group)


def test_groups_have_the_sample_contract(cfg):
    config = cfg(prompt_template="Q: {prompt} A:")
    src = make_jsonl_source(config, "train")
    assert isinstance(src, DataSource)
    assert len(src) == 7
    groups = src.get_samples(3)
    assert [len(g) for g in groups] == [2, 2, 2]
    assert [g[0].group_index for g in groups] == [0, 1, 2]
    assert [s.index for g in groups for s in g] == list(range(6))
    tok = src.encoder.tokenizer
    for g in groups:
        a, b = g
        assert a.prompt == b.prompt and a.prompt.startswith("Q: q") and a.prompt.endswith(" A:")
        assert a.tokens == tok(a.prompt, add_special_tokens=False)["input_ids"]
        assert a.tokens is not b.tokens and a.metadata is not b.metadata
        assert a.label == a.prompt[4:-3]  # label i for prompt "qi"
        assert a.metadata == {"id": int(a.label), "raw": {"source": "t"}}
        assert a.status == Status.PENDING and a.response_length == 0 and a.prompt_length == len(a.tokens)
        assert a.loss_mask == [] and a.rollout_log_probs == [] and a.response == ""
        a.validate()


def test_epoch_wraps_with_a_new_permutation(cfg):
    src = make_jsonl_source(cfg(), "train")
    first = [g[0].label for g in src.get_samples(7)]
    second = [g[0].label for g in src.get_samples(7)]
    assert sorted(first) == sorted(second) == [str(i) for i in range(7)]
    assert first != second  # seed + epoch reshuffles
    assert src.epoch == 2 and src.position == 0
    assert first == [str(i) for i in src.order(0)] and second == [str(i) for i in src.order(1)]


def test_no_shuffle_keeps_file_order(cfg):
    src = make_jsonl_source(cfg(shuffle=False), "train")
    assert [g[0].label for g in src.get_samples(9)] == [str(i % 7) for i in range(9)]


def test_resume_continues_at_the_exact_next_prompt(cfg):
    config = cfg()
    straight = make_jsonl_source(config, "train")
    expected = [key(g) for g in straight.get_samples(3) + straight.get_samples(9)]

    first = make_jsonl_source(config, "train")
    got = [key(g) for g in first.get_samples(3)]
    state = json.loads(json.dumps(first.state_dict()))
    assert state["epoch"] == 0 and state["position"] == 3 and state["next_sample_index"] == 6
    resumed = make_jsonl_source(config, "train")
    resumed.load_state_dict(state)
    got += [key(g) for g in resumed.get_samples(9)]
    assert got == expected


def test_resume_keeps_the_return_buffer(cfg):
    config = cfg()
    src = make_jsonl_source(config, "train")
    g0, g1 = src.get_samples(2)
    g0[0].status = Status.ABORTED
    src.add_samples([g0])
    state = json.loads(json.dumps(src.state_dict()))
    assert state["buffer"][0][0]["status"] == "aborted"
    again = make_jsonl_source(config, "train")
    again.load_state_dict(state)
    back = again.get_samples(2)
    assert key(back[0]) == key(g0) and back[0][0].status == Status.ABORTED
    assert back[1][0].group_index == 2  # then the next fresh prompt


def test_resume_refuses_changed_data(cfg, tmp_path, make_config):
    src = make_jsonl_source(cfg(), "train")
    state = src.state_dict()
    other = make_config(model=dict(path=src.encoder.tokenizer_name),
                        data={"path": str(write_jsonl(tmp_path / "o.jsonl", rows(5)))})
    with pytest.raises(ValueError, match="7 prompts.*has 5"):
        make_jsonl_source(other, "train").load_state_dict(state)


def test_buffer_is_handed_out_first(cfg):
    src = make_jsonl_source(cfg(), "train")
    a, b, c = src.get_samples(3)
    src.add_samples([b, c])
    out = src.get_samples(3)
    assert out[0] == b and out[1] == c and out[2][0].group_index == 3
    assert out[0][0] is b[0]
    assert src.buffer == []


def test_lifo_buffer_filter_and_custom_filter(cfg):
    from slime_core.pluginmgr import SlimePluginManager, UnknownRecordError
    from slime_core.rollout.components import attach_buffer_filter

    manager = SlimePluginManager().load()
    src = make_jsonl_source(cfg(), "train")
    src.config.rollout.buffer_filter = "lifo"  # a record of slime-std's core_filters
    attach_buffer_filter(manager, src.config, src)
    a, b, c = src.get_samples(3)
    src.add_samples([a, b, c])
    out = src.get_samples(2)
    assert out[0] == c and out[1] == b and src.buffer == [a]

    calls = []

    def pick_last(config, rollout_id, buffer, num_groups):
        calls.append((rollout_id, len(buffer), num_groups))
        return None  # abstain: first in, first out

    src.set_buffer_filter(pick_last)
    out = src.get_samples(1, rollout_id=42)
    assert out[0] == a and calls == [(42, 1, 1)]

    src.set_buffer_filter(None)  # first in, first out again
    src.add_samples([b, c])
    assert src.get_samples(1) == [b]

    src.config.rollout.buffer_filter = "nope"
    with pytest.raises(UnknownRecordError, match="nope.*fifo.*lifo"):
        attach_buffer_filter(manager, src.config, src)


def test_eval_split_reads_eval_path_in_order_and_all_at_once(make_config, tiny_tokenizer_dir, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", rows(3))
    held = write_jsonl(tmp_path / "eval.jsonl", rows(5))
    config = make_config(model={"path": str(tiny_tokenizer_dir)},
                         data={"path": str(train), "eval_path": str(held), "shuffle": True},
                         eval={"n_samples_per_prompt": 3})
    src = make_jsonl_source(config, "eval")
    groups = src.get_samples(-1)
    assert [g[0].label for g in groups] == ["0", "1", "2", "3", "4"]
    assert all(len(g) == 3 for g in groups)
    assert [g[0].label for g in src.get_samples(-1)] == ["0", "1", "2", "3", "4"]


def test_chat_template_with_system_prompt_and_tools(make_config, tiny_tokenizer_dir, tmp_path):
    tools = [{"type": "function", "function": {"name": "calc", "parameters": {}}}]
    path = write_jsonl(tmp_path / "chat.jsonl", [
        {"prompt": "hi", "label": "x", "tools": tools},
        {"prompt": [{"role": "user", "content": "yo"}], "label": "y"},
    ])
    config = make_config(
        model={"path": str(tiny_tokenizer_dir)},
        data={"path": str(path), "shuffle": False, "apply_chat_template": True,
              "system_prompt": "be brief", "tools_key": "tools", "prompt_template": "[{prompt}]"},
        rollout={"n_samples_per_prompt": 1},
    )
    src = make_jsonl_source(config, "train")
    (first,), (second,) = src.get_samples(2)
    tok = src.encoder.tokenizer
    assert first.prompt == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "[hi]"}]
    assert tok.decode(first.tokens) == "<system>be brief\n<user>[hi]\n<tools>calc;<assistant>"  # trim_blocks eats the newline
    assert first.metadata["tools"] == tools
    assert tok.decode(second.tokens) == "<system>be brief\n<user>yo\n<assistant>"


def test_malformed_line_names_file_and_line(make_config, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "a"}\n\n{"prompt": "b",\n')
    config = make_config(data={"path": str(path)})
    with pytest.raises(ValueError) as err:
        make_jsonl_source(config, "train")
    msg = str(err.value)
    assert str(path) in msg and "line 3" in msg and "invalid JSON" in msg and "data.path" in msg


def test_missing_input_key_names_key_file_line_and_present_keys(make_config, tmp_path):
    path = write_jsonl(tmp_path / "k.jsonl", [{"prompt": "a"}, {"question": "b", "answer": "1"}])
    config = make_config(data={"path": str(path)})
    with pytest.raises(ValueError) as err:
        make_jsonl_source(config, "train")
    msg = str(err.value)
    assert "'prompt'" in msg and "data.input_key" in msg and str(path) in msg and "line 2" in msg
    assert "['answer', 'question']" in msg


def test_missing_file_names_config_key_and_path(make_config, tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match=r"data\.path: .*nope\.jsonl.*does not exist"):
        make_jsonl_source(make_config(data={"path": str(missing)}), "train")
    with pytest.raises(ValueError, match=r"data\.eval_path is empty"):
        make_jsonl_source(make_config(data={"path": str(missing)}), "eval")


def test_parquet_rows(make_config, tiny_tokenizer_dir, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table({
        "question": ["1+1", "2+2"],
        "answer": [2, 4],
        "metadata": [{"level": 1}, {"level": 2}],
        "kind": ["add", "add"],
    })
    path = tmp_path / "train.parquet"
    pq.write_table(table, path)
    config = make_config(
        model={"path": str(tiny_tokenizer_dir)},
        data={"source": "parquet", "path": str(path), "input_key": "question",
              "label_key": "answer", "shuffle": False},
        rollout={"n_samples_per_prompt": 1},
    )
    src = make_parquet_source(config, "train")
    assert len(src) == 2 and src.file_type == "parquet"
    (a,), (b,) = src.get_samples(2)
    assert (a.prompt, a.label, a.metadata) == ("1+1", 2, {"level": 1, "raw": {"kind": "add"}})
    assert b.label == 4 and src.encoder.tokenizer.decode(b.tokens) == "2+2"


def test_bad_prompt_template_is_named(cfg):
    with pytest.raises(ValueError, match=r"data.prompt_template .*\\boxed\{\{\}\}"):
        make_jsonl_source(cfg(prompt_template="{prompt} in \\boxed{}"), "train")
