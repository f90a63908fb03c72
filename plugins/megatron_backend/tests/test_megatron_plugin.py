"""The plugin surface: listing, availability, the [megatron] section's checks, hooks, recompute."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from typing import Any

import pytest
import torch
from mg_support import base_data, grpo_batch, make_config
from slime_hookspecs import hookimpl


def test_listing_names_the_backend_without_importing_torch_or_megatron() -> None:
    code = (
        "import sys, io, contextlib, json\n"
        "from slime_core.cli.main import main\n"
        "out = io.StringIO()\n"
        "for args in (['plugins', '--json'], ['plugins', 'info', 'megatron_backend']):\n"
        "    with contextlib.redirect_stdout(out):\n"
        "        try:\n"
        "            main(args)\n"
        "        except SystemExit:\n"
        "            pass\n"
        "assert 'torch' not in sys.modules and 'megatron' not in sys.modules\n"
        "print(out.getvalue())\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    listing = json.loads(res.stdout[: res.stdout.index("\n]") + 2])
    row = next(r for r in listing if r["name"] == "megatron_backend")
    assert row["distribution"] == "slime-megatron-backend" and row["status"] == "active"
    assert row["libraries"] == {"megatron-core": version("megatron-core")}
    assert f"megatron-core {version('megatron-core')}" in res.stdout


def test_a_host_without_megatron_core_lists_it_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner
    from megatron_backend import plugin
    from slime_core.cli.main import cli

    monkeypatch.setattr(plugin, "megatron_core_version", lambda: None)
    res = CliRunner().invoke(cli, ["plugins", "--json"])
    row = next(r for r in json.loads(res.output) if r["name"] == "megatron_backend")
    assert row["status"] == "unavailable"
    assert row["reason"].startswith("megatron-core is not installed (pip install")
    with pytest.raises(RuntimeError, match="trainer backend 'megatron' is unavailable"):
        plugin.make_trainer(None)


@pytest.mark.parametrize(("sections", "message"), [
    ({"megatron": {"context_parallel_size": 2}, "train": {"num_ranks": 2}},
     "megatron.context_parallel_size"),
    ({"megatron": {"tensor_model_parallel_size": 2}, "train": {"num_ranks": 3}},
     "train.num_ranks: 3 is not a multiple"),
    ({"megatron": {"recompute": "some"}}, "megatron.recompute"),
    ({"train": {"ref_update_interval": 5}}, "train.ref_update_interval: 5: a moving reference"),
    ({"train": {"keep_old_actor": True}}, "train.keep_old_actor: the old actor is not"),
    ({"megatron": {"expert_model_parallel_size": 4}, "train": {"num_ranks": 2}},
     "megatron.expert_model_parallel_size: 4 must divide the data-parallel size 2"),
    ({"megatron": {"expert_model_parallel_size": 2, "pipeline_model_parallel_size": 2},
      "train": {"num_ranks": 4}}, "expert parallelism is implemented for one pipeline stage"),
    ({"megatron": {"expert_model_parallel_size": 2, "use_distributed_optimizer": True},
      "train": {"num_ranks": 2}}, "the sharded optimizer does not keep expert gradients"),
])
def test_config_refuses_what_the_backend_cannot_run(sections: dict[str, Any], message: str) -> None:
    data = base_data(**sections)
    data["train"]["backend"] = "megatron"
    with pytest.raises(Exception, match=message):
        make_config(data)


def test_torch_runs_ignore_the_section_and_say_so() -> None:
    with pytest.warns(UserWarning, match=r"megatron.pipeline_model_parallel_size set, but "
                                         r"train.backend = 'torch'"):
        cfg = make_config(base_data(megatron={"pipeline_model_parallel_size": 2}))
    assert cfg.train.backend == "torch" and cfg.megatron.pipeline_model_parallel_size == 2


def test_sequence_parallel_is_refused_on_the_cpu() -> None:
    from megatron_backend.trainer import MegatronTrainer

    cfg = make_config(base_data(megatron={"sequence_parallel": True}))
    with pytest.raises(ValueError, match="sequence_parallel = true needs TransformerEngine"):
        MegatronTrainer(cfg)


class Recorder:
    """Records what the trainer hooks receive; answers slime_make_model for the actor."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.custom: Any = None

    def _rec(self, name: str, **kw: Any) -> None:
        self.calls.append((name, kw))

    @hookimpl
    def slime_make_model(self, config: Any, role: str) -> Any:
        if role != "actor":
            return None
        from megatron_backend.layout import layout_of
        from megatron_backend.model import build_gpt
        from megatron_backend.trainer import hf_config_of

        self.custom = build_gpt(layout_of(hf_config_of(config.model)), torch.float32,
                                config.megatron, torch.device("cpu"))
        return self.custom

    @hookimpl
    def slime_trainer_init(self, config: Any, model: Any) -> None:
        self._rec("init", model=model)

    @hookimpl
    def slime_before_log_prob(self, config: Any, model: Any, role: str) -> None:
        self._rec("log_prob", model=model, role=role)

    @hookimpl
    def slime_before_train_step(self, config: Any, rollout_id: int, step_id: int, model: Any,
                                optimizer: Any, scheduler: Any) -> None:
        self._rec("train_step", model=model, optimizer=optimizer, scheduler=scheduler,
                  step_id=step_id)

    @hookimpl
    def slime_trainer_save(self, config: Any, path: str, rank: int) -> None:
        self._rec("save", path=path, rank=rank)

    @hookimpl
    def slime_trainer_load(self, config: Any, path: str, rank: int) -> None:
        self._rec("load", path=path, rank=rank)


def test_hooks_receive_megatron_objects(tmp_path: Any) -> None:
    from megatron.core.models.gpt import GPTModel
    from megatron_backend.trainer import MegatronTrainer
    from slime_core.api import get_manager

    cfg = make_config(base_data(train={"num_steps_per_rollout": 2},
                                algorithm={"use_kl_loss": True, "kl_loss_coef": 0.01},
                                megatron={"save_hf": False}))
    rec = Recorder()
    get_manager().register_object(rec, "recorder")
    tr = MegatronTrainer(cfg)
    assert tr.model is rec.custom  # the slime_make_model answer is the actor, HF weights loaded
    tr.train_step(grpo_batch(tr.layout.vocab), 0)
    tr.save(str(tmp_path))
    tr.load(str(tmp_path))
    names = [c[0] for c in rec.calls]
    assert names == ["init", "log_prob", "log_prob", "train_step", "train_step", "save", "load"]
    init = rec.calls[0][1]["model"]
    assert isinstance(init, list) and len(init) == 1 and isinstance(init[0], GPTModel)
    assert [c[1]["role"] for c in rec.calls[1:3]] == ["ref", "actor"]
    step = rec.calls[3][1]
    assert step["model"][0] is tr.model and step["optimizer"] is tr.optimizer
    assert step["scheduler"] is tr.scheduler
    assert [c[1]["step_id"] for c in rec.calls[3:5]] == [0, 1]


def test_recompute_modes_map_to_megatron_and_give_the_same_step() -> None:
    from megatron_backend.trainer import MegatronTrainer

    norms = {}
    for mode in ("none", "selective", "full"):
        tr = MegatronTrainer(make_config(base_data(megatron={"recompute": mode})))
        mc = tr.model.config
        assert mc.recompute_granularity == {"none": None, "selective": "selective",
                                            "full": "full"}[mode]
        if mode == "full":
            assert mc.recompute_method == "uniform" and mc.recompute_num_layers == 1
        norms[mode] = tr.train_step(grpo_batch(tr.layout.vocab), 0)["train/grad_norm"]
    assert norms["selective"] == pytest.approx(norms["none"], abs=1e-6)
    assert norms["full"] == pytest.approx(norms["none"], abs=1e-6)
