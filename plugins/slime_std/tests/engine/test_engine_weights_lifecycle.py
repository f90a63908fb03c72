"""``LocalEngine`` weight updates, abort from another thread, sleep / shutdown, the plugin."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
import torch
from slime_hookspecs import RolloutEngine, RolloutEngineRecord, SamplingParams

from .conftest import TINY_QWEN2

GREEDY = SamplingParams(temperature=0, max_new_tokens=12, ignore_eos=True)
PROMPTS = [[5, 6, 7], [9], [3, 14, 15, 9, 26]]


def greedy_tokens(engine):
    return [o.token_ids for o in engine.generate(PROMPTS, [GREEDY] * len(PROMPTS))]


def other_weights(engine_config):
    """A full state dict of the same architecture with different values (another seed)."""
    from slime_core.models.loading import load_causal_lm

    cfg = engine_config()
    model = load_causal_lm(cfg.model, "cpu", torch.float32, seed=cfg.run.seed + 100)
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_update_weights_changes_outputs_and_version(make_engine, engine_config):
    engine, twin = make_engine(), make_engine()
    assert engine.weight_version() == 0
    before = greedy_tokens(engine)
    assert greedy_tokens(twin) == before
    new = other_weights(engine_config)
    engine.update_weights(new, version=3)
    assert engine.weight_version() == 3
    after = engine.generate(PROMPTS, [GREEDY] * len(PROMPTS))
    assert [o.token_ids for o in after] != before
    assert {o.weight_version for o in after} == {3}
    # The same payload makes another engine identical (full sync).
    twin.update_weights(new, version=3)
    assert greedy_tokens(twin) == [o.token_ids for o in after]
    for name, value in new.items():
        assert torch.equal(engine._model.state_dict()[name], value), name


def test_update_weights_takes_a_subset(make_engine):
    engine = make_engine()
    w = engine._model.state_dict()["model.layers.1.mlp.down_proj.weight"]
    engine.update_weights({"model.layers.1.mlp.down_proj.weight": torch.zeros_like(w)}, version=1)
    assert engine._model.state_dict()["model.layers.1.mlp.down_proj.weight"].abs().sum() == 0
    assert engine.weight_version() == 1


def test_tied_names_are_written_once_from_the_last_given(make_engine):
    """``lm_head.weight`` is ``model.embed_tokens.weight`` in the tied test model: the two
    names target one tensor, written once (one multi-tensor copy into the same memory twice
    races on a GPU), from the last given, as copying them in turn would leave it."""
    engine = make_engine()
    state = engine._model.state_dict(keep_vars=True)
    assert state["lm_head.weight"] is state["model.embed_tokens.weight"]
    first = torch.full_like(state["lm_head.weight"], 0.25)
    last = torch.full_like(first, -0.5)
    engine.update_weights({"model.embed_tokens.weight": first, "lm_head.weight": last}, 1)
    assert torch.equal(engine._model.get_input_embeddings().weight, last)
    engine.update_weights({"lm_head.weight": first, "model.embed_tokens.weight": last}, 2)
    assert torch.equal(engine._model.get_output_embeddings().weight, last)
    assert engine.weight_version() == 2
    # what the copy is given: one name per tensor (a CPU's copy would hide a second write)
    from slime_std.engine.local_engine import _one_per_target

    both = {"lm_head.weight": first, "model.embed_tokens.weight": last, "model.norm.weight":
            torch.ones_like(state["model.norm.weight"])}
    assert list(_one_per_target(both, state)) == ["model.embed_tokens.weight",
                                                  "model.norm.weight"]


def test_update_weights_rejects_bad_tensors_naming_them(make_engine):
    engine = make_engine()
    before = greedy_tokens(engine)
    good = torch.zeros(32)
    with pytest.raises(ValueError, match=r"'model.layers.0.self_attn.q_proj.weight' has shape \(3, 3\)"):
        engine.update_weights({"model.norm.weight": good,
                               "model.layers.0.self_attn.q_proj.weight": torch.zeros(3, 3)}, version=5)
    with pytest.raises(KeyError, match="'model.nope.weight' is not a parameter"):
        engine.update_weights({"model.nope.weight": good}, version=5)
    with pytest.raises(TypeError, match="mapping"):
        engine.update_weights([good], version=5)
    # Nothing was copied, the version did not move.
    assert engine.weight_version() == 0
    assert greedy_tokens(engine) == before


def test_abort_from_another_thread(make_engine):
    engine = make_engine()
    prompts = PROMPTS + [[1]]
    params = [SamplingParams(max_new_tokens=240, ignore_eos=True)] * len(prompts)
    result = {}

    def work():
        result["outs"] = engine.generate(prompts, params)

    worker = threading.Thread(target=work)
    worker.start()
    while worker.is_alive():
        engine.abort()
        time.sleep(0.005)
    worker.join()
    outs = result["outs"]
    assert {o.finish_reason for o in outs} == {"abort"}
    assert all(len(o.token_ids) < 240 for o in outs)
    assert all(len(o.log_probs) == len(o.token_ids) for o in outs)
    # An abort before a call does not touch it.
    engine.abort()
    out = engine.generate([[5]], [SamplingParams(max_new_tokens=4, ignore_eos=True)])[0]
    assert (len(out.token_ids), out.finish_reason) == (4, "length")


def test_abort_ends_the_remaining_chunks(make_engine):
    engine = make_engine(rollout={"generate_batch_size": 1})
    params = [SamplingParams(max_new_tokens=200, ignore_eos=True)] * 6
    result = {}

    def work():
        result["outs"] = engine.generate([[5]] * 6, params)

    worker = threading.Thread(target=work)
    worker.start()
    while worker.is_alive():
        engine.abort()
        time.sleep(0.005)
    worker.join()
    outs = result["outs"]
    assert {o.finish_reason for o in outs} == {"abort"}
    assert outs[-1].token_ids == []


def test_sleep_wake_shutdown_and_health(make_engine):
    engine = make_engine()
    assert engine.health()
    engine.sleep()  # no-op on CPU
    engine.wake_up()
    assert greedy_tokens(engine)
    engine.shutdown()
    assert not engine.health()
    with pytest.raises(RuntimeError, match="shut down"):
        engine.generate([[1]], [GREEDY])


def test_engine_satisfies_the_protocol(make_engine):
    assert isinstance(make_engine(), RolloutEngine)


def test_plugin_registers_local_lazily(engine_config):
    from slime_std.engine import plugin as local_engine_plugin

    (record,) = local_engine_plugin.slime_register_rollout_engines()
    assert isinstance(record, RolloutEngineRecord) and record.name == "local"
    engine = record.factory(engine_config(), 0, None)
    assert type(engine).__name__ == "LocalEngine"
    code = ("import sys, slime_std.engine.plugin as m; "
            "m.slime_register_rollout_engines(); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_engine_uses_the_accelerator_device(engine_config):
    from slime_std.accelerators.devices import CPUAccelerator
    from slime_std.engine.local_engine import LocalEngine

    engine = LocalEngine(engine_config(), 2, CPUAccelerator())
    assert engine.device == torch.device("cpu")
    assert engine.dtype == torch.float32
    assert next(engine._model.parameters()).dtype == torch.float32
    assert TINY_QWEN2["vocab_size"] == engine.vocab_size


def test_rollout_dtype_serves_the_trainers_weights_rounded(make_engine, engine_config):
    """rollout.dtype = bfloat16 beside fp32 training (rounding to nearest): the engine holds
    bf16 tensors, an fp32 update lands as its bf16 rounding, and it generates what an engine
    whose model is bf16 generates from the same update."""
    from slime_std.engine.local_engine import LocalEngine

    engine = make_engine(rollout={"dtype": "bfloat16", "dtype_rounding": "nearest"})
    assert engine.dtype == torch.bfloat16
    assert {p.dtype for p in engine._model.parameters()} == {torch.bfloat16}
    # the twin rounds to nearest too: an fp32 update would otherwise be rounded at random
    twin = LocalEngine(engine_config(model={"dtype": "bfloat16"},
                                     rollout={"dtype_rounding": "nearest"}))
    new = other_weights(engine_config)  # fp32, as a trainer of model.dtype float32 sends
    engine.update_weights(new, version=1)
    twin.update_weights(new, version=1)
    state = engine._model.state_dict()
    for name, value in new.items():
        assert torch.equal(state[name], value.to(torch.bfloat16)), name
    assert greedy_tokens(engine) == greedy_tokens(twin)
    assert make_engine().dtype == torch.float32  # "" follows model.dtype (auto: fp32 on CPU)


def test_stochastic_rounding_lets_updates_under_bf16_spacing_through(make_engine, engine_config):
    """rollout.dtype_rounding = "stochastic" (the default): an fp32 update far below bf16's
    spacing moves some served weights (to-nearest moves none), each to one of the two bf16
    neighbours of the sent value; the same version and seed serve the same weights."""
    name = "model.layers.1.mlp.down_proj.weight"
    engine = make_engine(rollout={"dtype": "bfloat16"})
    twin = make_engine(rollout={"dtype": "bfloat16"})
    nearest = make_engine(rollout={"dtype": "bfloat16", "dtype_rounding": "nearest"})
    base = engine._model.state_dict()[name].clone()  # bf16: what the engine was loaded with
    sent = base.float() * (1 + 1e-3)  # ~1/8 of a bf16 spacing away from zero
    for e in (engine, twin, nearest):
        e.update_weights({name: sent}, version=5)
    served = engine._model.state_dict()[name].clone()
    assert torch.equal(served, twin._model.state_dict()[name])
    assert torch.equal(nearest._model.state_dict()[name], base)
    away = torch.nextafter(base, base.sign() * float("inf"))  # the other bf16 neighbour
    moved = served != base
    assert bool(((served == base) | (served == away)).all())
    assert 0.05 < moved.float().mean() < 0.25  # ~1/8 of them
    engine.update_weights({name: sent}, version=6)  # another version: other draws
    assert not torch.equal(engine._model.state_dict()[name], served)
