"""``rollout.max_context_len`` (slime's ``--rollout-max-context-len``): prompt + response stay
within the limit; a prompt that fills it is a bad row, named when the data loads, before any
model does (issue 38); ``data.skip_bad_rows`` trains on the others."""

from __future__ import annotations

import pytest
from slime_hookspecs import Status, hookimpl

from tests.conftest import ModelProbe, read_metrics


class Lengths:
    def __init__(self) -> None:
        self.rows: list[tuple[int, int, str, str]] = []  # prompt, response, status, error

    @hookimpl
    def slime_log_rollout(self, config, rollout_id, samples, metrics):
        self.rows += [(len(s.tokens) - s.response_length, s.response_length, s.status.value,
                       s.error or "") for s in samples]


def test_prompt_and_response_stay_within_the_context_limit(base_config, run_slime, capfd) -> None:
    probe = Lengths()
    cfg = dict(base_config, data=dict(base_config["data"], eval_path=""))
    run_slime(dict(cfg, run=dict(cfg["run"], num_rollouts=1,
                                 run_dir=cfg["run"]["run_dir"] + "_probe")), [probe])
    prompts = sorted({p for p, *_ in probe.rows})
    assert len(prompts) >= 2, "the tiny prompts should differ in length"
    limit = prompts[-1] + 2  # the longest prompt has room for 2 tokens, shorter ones more
    rec = Lengths()
    cfg["rollout"] = dict(cfg["rollout"], max_context_len=limit, max_new_tokens=6)
    rows = read_metrics(run_slime(cfg, [rec]))
    assert len(rows) == 2
    for prompt, response, status, _ in rec.rows:
        assert prompt + response <= limit
    assert any(p == prompts[-1] and r == 2 and s == Status.TRUNCATED.value
               for p, r, s, _ in rec.rows), "the longest prompt was not cut at the limit"

    # a limit the longest prompts fill: refused when the data loads, named by file and line,
    # before any model is built
    models = ModelProbe()
    cfg["rollout"]["max_context_len"] = prompts[-1]
    cfg["run"] = dict(cfg["run"], run_dir=cfg["run"]["run_dir"] + "_fail")
    with pytest.raises(ValueError, match=r"bad row\(s\)") as refused:
        run_slime(cfg, [models])
    assert models.roles == []
    msg = str(refused.value)
    assert f"leaves no room for a response within rollout.max_context_len = {prompts[-1]}" in msg
    assert "train.jsonl:" in msg and "data.skip_bad_rows" in msg
    # data.skip_bad_rows: the other prompts train, none fails at generation
    skip = Lengths()
    cfg["data"] = dict(cfg["data"], skip_bad_rows=True)
    run_slime(cfg, [skip])
    assert skip.rows and all(p < prompts[-1] and s != Status.FAILED.value
                             for p, _, s, _ in skip.rows)
    assert "skipped" in capfd.readouterr().err


def test_a_prompt_longer_than_the_model_context_is_refused_at_load(base_config, run_slime,
                                                                  tmp_path) -> None:
    data = tmp_path / "long.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n'
                    '{"prompt": "' + "1+" * 200 + '1=", "label": "201"}\n')
    cfg = dict(base_config, data={"path": str(data)})
    models = ModelProbe()
    with pytest.raises(ValueError) as refused:
        run_slime(cfg, [models])
    assert models.roles == []
    assert f"{data}:2: prompt of" in str(refused.value)
    assert "the model's max_position_embeddings = 256" in str(refused.value)
