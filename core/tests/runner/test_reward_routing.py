"""Per-row reward routing (``metadata.rm_type``): one data file mixes tasks."""

from __future__ import annotations

import json


def test_a_mixed_task_file_routes_each_row(tmp_path) -> None:
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager
    from slime_core.rollout.manager import RolloutManager
    from slime_core.testing import build_test_config, write_char_tokenizer
    from slime_hookspecs import GenerateOutput, Status
    from transformers import AutoTokenizer

    tok_dir = write_char_tokenizer(tmp_path / "tok")
    tok = AutoTokenizer.from_pretrained(tok_dir)
    # prompt -> (row, what the "model" answers, expected reward)
    rows = {
        "q1": ({"label": "C", "metadata": {"rm_type": "gpqa"}}, "the answer is (C)", 1.0),
        "q2": ({"label": "42", "metadata": {"rm_type": "dapo"}}, "Answer: 41", -1.0),
        "q3": ({"label": "eiffel tower", "metadata": {"rm_type": "f1"}}, "the tower", 2 / 3),
        "q4": ({"label": "7"}, "7", 1.0),  # no rm_type: the configured reward (exact)
        "q5": ({"label": "7", "metadata": {"rm_type": "exact"}}, "8", 0.0),
        "q6": ({"label": "7", "metadata": {"rm_type": "nope"}}, "7", None),  # unknown: fails
    }
    data = tmp_path / "mixed.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, **row}) + "\n" for p, (row, _, _) in rows.items()))

    class Engine:
        def generate(self, prompts, params):
            return [GenerateOutput(token_ids=[5], log_probs=[-0.1], finish_reason="stop",
                                   weight_version=0, text=rows[tok.decode(p)][1])
                    for p in prompts]

        def weight_version(self) -> int:
            return 0

        def abort(self) -> None:
            pass

    manager = SlimePluginManager(PluginSelection(autoload=False)).load()
    set_manager(manager)
    config = build_test_config(model={"tokenizer": str(tok_dir)},
                               data={"path": str(data), "shuffle": False},
                               rollout={"reward": "exact", "batch_size": 6,
                                        "n_samples_per_prompt": 1})
    source = manager.registries.data_source.get("jsonl").factory(config, "train")
    rollouts = RolloutManager(config, [Engine()], source, None)
    samples = {s.prompt: s for s in rollouts.rollout(0).samples()}
    assert set(samples) == set(rows)
    for prompt, (_, _, want) in rows.items():
        got = samples[prompt]
        if want is None:
            assert got.status == Status.FAILED
            assert "metadata.rm_type 'nope'" in got.error and "gpqa" in got.error, got.error
        else:
            assert got.status != Status.FAILED, got.error
            assert abs(got.reward - want) < 1e-9, (prompt, got.reward)
