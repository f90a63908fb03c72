"""``data.chat_template_kwargs`` reach every chat-template call; ``data.max_prompt_len`` drops
long training prompts at load (slime's --apply-chat-template-kwargs / --rollout-max-prompt-len).

A real tokenizer (transformers, character level) with a real Jinja chat template that has
Qwen3's ``enable_thinking`` switch; real JSONL files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from slime_core.config import ConfigError
from slime_core.config.eval_datasets import parse_datasets
from slime_core.evaluation.suite import dataset_config
from slime_core.testing import THINKING_CHAT_TEMPLATE, write_char_tokenizer
from slime_std.data import make_jsonl_source, make_reasoning_gym_source
from slime_std.data.sft_chat import chat_loss_mask


@pytest.fixture(scope="module")
def thinking_tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_char_tokenizer(tmp_path_factory.mktemp("thinking_tok"),
                                chat_template=THINKING_CHAT_TEMPLATE)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# -- data.chat_template_kwargs -----------------------------------------------------------------
def test_kwargs_reach_the_template_of_train_and_eval_prompts(make_config, thinking_tok_dir, tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [
        {"prompt": "hi", "label": "1"},
        {"prompt": [{"role": "user", "content": "yo"}], "label": "2"},  # messages: templated too
    ])

    def first_texts(split: str, **data: Any) -> list[str]:
        config = make_config(model={"path": str(thinking_tok_dir)},
                             data={"path": str(path), "eval_path": str(path), "shuffle": False,
                                   "apply_chat_template": True, **data},
                             rollout={"n_samples_per_prompt": 1})
        src = make_jsonl_source(config, split)
        tok = src.encoder.tokenizer
        return [tok.decode(g[0].tokens) for g in src.get_samples(2)]

    assert first_texts("train") == ["<user>hi\n<assistant>", "<user>yo\n<assistant>"]
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    assert first_texts("train", **off) == ["<user>hi\n<assistant><think></think>",
                                           "<user>yo\n<assistant><think></think>"]
    assert first_texts("eval", **off)[0] == "<user>hi\n<assistant><think></think>"


def test_eval_datasets_inherit_the_kwargs(make_config):
    config = make_config(data={"chat_template_kwargs": {"enable_thinking": False}},
                         eval={"datasets": [{"name": "a", "path": "a.jsonl"}]})
    (spec,) = parse_datasets(config.eval.datasets)
    assert dataset_config(config, spec).data.chat_template_kwargs == {"enable_thinking": False}


def test_sft_chat_masks_render_with_the_kwargs(tmp_path):
    from transformers import AutoTokenizer

    # a template whose every rendering reads the keyword (a preamble before the first message)
    template = "{% if preamble is defined %}[{{ preamble }}]{% endif %}" + THINKING_CHAT_TEMPLATE
    tok = AutoTokenizer.from_pretrained(str(write_char_tokenizer(tmp_path, chat_template=template)))
    chat = [{"role": "user", "content": "2+2"}, {"role": "assistant", "content": "4"}]
    ids, mask = chat_loss_mask(tok, chat, template_kwargs={"preamble": "math"})
    assert tok.decode(ids) == "[math]<user>2+2\n<assistant>4\n"
    assert tok.decode([i for i, m in zip(ids, mask, strict=True) if m]) == "4\n"
    ids, _ = chat_loss_mask(tok, chat)
    assert tok.decode(ids) == "<user>2+2\n<assistant>4\n"


@pytest.mark.parametrize("value, words", [
    ({"tokenize": True}, ["data.chat_template_kwargs.tokenize", "set by the framework"]),
    ({"add_generation_prompt": False}, ["data.chat_template_kwargs.add_generation_prompt"]),
    ("enable_thinking=false", ["data.chat_template_kwargs", "table"]),
])
def test_bad_kwargs_fail_at_config_time_naming_the_key(make_config, value, words):
    with pytest.raises((ConfigError, ValueError)) as err:
        make_config(data={"chat_template_kwargs": value})
    assert all(w in str(err.value) for w in words), str(err.value)


# -- data.max_prompt_len ----------------------------------------------------------------------
def lengths_file(tmp_path: Path, lengths: list[int]) -> Path:
    # the character tokenizer: one token per character, so a prompt of n "x" is n tokens
    return write_jsonl(tmp_path / "train.jsonl",
                       [{"prompt": "x" * n, "label": str(i)} for i, n in enumerate(lengths)])


def test_long_prompts_are_dropped_at_load_and_counted(make_config, tiny_tokenizer_dir, tmp_path,
                                                     capsys):
    path = lengths_file(tmp_path, [3, 9, 5, 12, 4, 6])
    config = make_config(model={"path": str(tiny_tokenizer_dir)},
                         data={"path": str(path), "eval_path": str(path), "shuffle": True,
                               "max_prompt_len": 5},
                         rollout={"n_samples_per_prompt": 2})
    src = make_jsonl_source(config, "train")
    err = capsys.readouterr().err
    assert "data.max_prompt_len = 5: dropped 3 of 6 prompts" in err and str(path) in err
    assert "(longest 12)" in err
    assert len(src) == 3 and src.dropped_long_prompts == 3
    # two epochs: only the kept rows, each once per epoch, every sample within the limit
    groups = src.get_samples(6)
    assert sorted(g[0].label for g in groups[:3]) == ["0", "2", "4"]
    assert sorted(g[0].label for g in groups[3:]) == ["0", "2", "4"]
    assert all(len(s.tokens) <= 5 for g in groups for s in g)
    # a prompt of exactly max_prompt_len tokens is kept (slime drops only longer ones)
    assert any(len(g[0].tokens) == 5 for g in groups)
    # resume: the stored position counts kept rows; the same config continues exactly
    state = json.loads(json.dumps(src.state_dict()))
    assert state["num_prompts"] == 3
    nxt = src.get_samples(2)
    again = make_jsonl_source(config, "train")
    again.load_state_dict(state)
    assert [g[0].label for g in again.get_samples(2)] == [g[0].label for g in nxt]
    # a different limit changes the prompts: the old position is refused, naming the key
    wider = make_jsonl_source(make_config(model={"path": str(tiny_tokenizer_dir)},
                                          data={"path": str(path), "max_prompt_len": 9}), "train")
    with pytest.raises(ValueError, match="data.max_prompt_len"):
        wider.load_state_dict(state)
    # the eval split keeps every prompt: it has its own limit, eval.max_prompt_len
    assert len(make_jsonl_source(config, "eval")) == 6
    capsys.readouterr()
    evals = make_jsonl_source(make_config(model={"path": str(tiny_tokenizer_dir)},
                                          data={"path": str(path), "eval_path": str(path)},
                                          eval={"max_prompt_len": 6}), "eval")
    assert len(evals) == 4 and "eval.max_prompt_len = 6: dropped 2 of 6 prompts" in \
        capsys.readouterr().err
    assert len(make_jsonl_source(make_config(model={"path": str(tiny_tokenizer_dir)},
                                             data={"path": str(path)},
                                             eval={"max_prompt_len": 6}), "train")) == 6


def test_the_limit_counts_tokens_after_templating(make_config, tiny_tokenizer_dir, tmp_path):
    path = lengths_file(tmp_path, [2, 4])
    base = {"path": str(path), "max_prompt_len": 12}
    plain = make_jsonl_source(make_config(model={"path": str(tiny_tokenizer_dir)}, data=base), "train")
    assert len(plain) == 2
    # "<user>" + text + "\n<assistant>" adds 18 tokens: both are now too long
    with pytest.raises(ValueError) as err:
        make_jsonl_source(make_config(model={"path": str(tiny_tokenizer_dir)},
                                      data={**base, "apply_chat_template": True}), "train")
    msg = str(err.value)
    assert "data.max_prompt_len = 12 drops all 2 prompts" in msg and str(path) in msg
    assert "shortest is 20 tokens" in msg


def test_reasoning_gym_source_is_filtered_too(make_config, tiny_tokenizer_dir):
    pytest.importorskip("reasoning_gym")
    data = {"source": "reasoning_gym", "task": "basic_arithmetic", "size": 40}
    full = make_reasoning_gym_source(make_config(model={"path": str(tiny_tokenizer_dir)},
                                                 data=data), "train")
    lengths = sorted(len(full.encoder.encode(full._row(i).prompt)[1]) for i in range(40))
    limit = lengths[19]  # about half of them fit
    src = make_reasoning_gym_source(make_config(model={"path": str(tiny_tokenizer_dir)},
                                                data={**data, "max_prompt_len": limit}), "train")
    assert len(src) == sum(n <= limit for n in lengths) < 40
    assert all(len(g[0].tokens) <= limit for g in src.get_samples(len(src)))


def test_negative_limit_is_refused(make_config):
    with pytest.raises((ConfigError, ValueError), match="data.max_prompt_len"):
        make_config(data={"max_prompt_len": -1})
    with pytest.raises((ConfigError, ValueError), match="eval.max_prompt_len"):
        make_config(eval={"max_prompt_len": -1})
