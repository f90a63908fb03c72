"""``rollout.max_context_len`` (slime's ``--rollout-max-context-len``): prompt + response stay
within the limit; a prompt that fills it fails its sample, named in the log, and the run goes on."""

from __future__ import annotations

from slime_hookspecs import Status, hookimpl

from tests.conftest import read_metrics


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

    # a limit below the longest prompt: those samples fail, named; the others train
    fail = Lengths()
    cfg["rollout"]["max_context_len"] = prompts[-1]
    cfg["run"] = dict(cfg["run"], run_dir=cfg["run"]["run_dir"] + "_fail")
    run_slime(cfg, [fail])
    failed = [e for p, r, s, e in fail.rows if s == Status.FAILED.value]
    assert failed and all(f"rollout.max_context_len = {prompts[-1]} leaves no room" in e
                          for e in failed)
    assert "rollout.max_context_len" in capfd.readouterr().err
