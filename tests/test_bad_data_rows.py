"""Item 7 of issue 17: every bad row of a data file is reported (file:line and why), and
``data.skip_bad_rows`` trains on the rest, logging how many were skipped. Real ``core run``."""

from __future__ import annotations

import json

import pytest

from tests.cli_support import core, tiny_run, write_toml
from tests.conftest import ModelProbe

GOOD = [{"prompt": f"{a}+{a}=", "label": str(2 * a)} for a in range(1, 9)]


def _write_data(path) -> None:
    lines = [json.dumps(r).encode() for r in GOOD[:4]]
    lines += [
        b'{"prompt": "1+1=", "label": ',                      # line 5: invalid JSON
        b'{"prompt": "caf\xe9", "label": "2"}',                # line 6: Latin-1, not UTF-8
        json.dumps({"prompt": "3+3="}).encode(),               # line 7: no label
        json.dumps({"prompt": "4+4=", "label": {"x": 8}}).encode(),  # line 8: dict label
        json.dumps({"prompt": "   ", "label": "0"}).encode(),  # line 9: empty prompt
        json.dumps({"question": "5+5=", "label": "10"}).encode(),  # line 10: no prompt key
        json.dumps({"prompt": "6+6=", "label": "12"}).encode(),  # line 11: another bad one below
        json.dumps({"prompt": "7+7=", "label": ""}).encode(),  # line 12: empty label
    ]
    lines += [json.dumps(r).encode() for r in GOOD[4:]]
    path.write_bytes(b"\n".join(lines) + b"\n")


def test_every_bad_row_is_reported_then_skipped_on_request(tmp_path, tokenizer_dir) -> None:
    data_file = tmp_path / "train.jsonl"
    _write_data(data_file)
    cfg = write_toml(tmp_path / "run.toml",
                     tiny_run(tmp_path, tokenizer_dir, data={"path": str(data_file)}))
    res = core("run", "--config", str(cfg), "--plugins", "slime_grpo")
    assert res.returncode == 1
    err = res.stderr
    assert "Traceback" not in err
    assert "7 bad row(s) of 16" in err and "data.skip_bad_rows" in err
    for line, why in [(5, "invalid JSON"), (6, "invalid UTF-8"), (7, "no label"),
                      (8, "label is a dict"), (9, "empty prompt")]:
        assert f"{data_file}:{line}: {why}" in err, err
    assert "and 2 more" in err

    res = core("run", "--config", str(cfg), "--plugins", "slime_grpo",
               "-o", "data.skip_bad_rows=true")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "skipped 7 bad row(s) of 16 (data.skip_bad_rows)" in res.stderr
    assert f"{data_file}:5: invalid JSON" in res.stderr and "and 2 more" in res.stderr


def test_label_is_not_required_by_a_reward_hook(tmp_path, tokenizer_dir) -> None:
    data_file = tmp_path / "nolabel.jsonl"
    data_file.write_text("".join(json.dumps({"prompt": f"{a}+1="}) + "\n" for a in range(8)))
    (tmp_path / "judge.py").write_text(
        "from slime_hookspecs import hookimpl\n\n"
        "@hookimpl\ndef slime_reward(config, sample):\n    return 0.5\n"
    )
    cfg = write_toml(tmp_path / "run.toml", tiny_run(
        tmp_path, tokenizer_dir, data={"path": str(data_file)}, run={"plugin_modules": ["judge"]}))
    res = core("run", "--config", str(cfg), "--plugins", "slime_grpo",
               env={"PYTHONPATH": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-3000:]


@pytest.mark.parametrize("split", ["path", "eval_path"])
def test_a_bad_data_file_fails_before_any_model_loads(base_config, run_slime, tmp_path,
                                                       split) -> None:
    bad = tmp_path / "bad.jsonl"
    _write_data(bad)
    base_config["data"][split] = str(bad)
    base_config["eval"] = {"interval": 1}
    models = ModelProbe()
    with pytest.raises(ValueError, match=r"7 bad row\(s\) of 16") as refused:
        run_slime(base_config, [models])
    assert f"data.{split} file" in str(refused.value)
    assert models.roles == []  # issue 38: the error came before the trainer and engines
    assert not (tmp_path / "run").exists()
