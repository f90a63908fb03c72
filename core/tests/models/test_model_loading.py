"""``load_causal_lm`` / ``load_tokenizer`` / ``resolve_dtype``."""

from __future__ import annotations

import pytest
import torch
from slime_core.models.loading import load_causal_lm, load_tokenizer, resolve_dtype


def test_resolve_dtype():
    assert resolve_dtype("auto", torch.device("cpu")) is torch.float32
    assert resolve_dtype("auto", "cuda") is torch.bfloat16
    assert resolve_dtype("bfloat16", "cpu") is torch.bfloat16
    with pytest.raises(ValueError, match="model.dtype"):
        resolve_dtype("fp8", "cpu")


def test_init_config_is_seeded_and_leaves_the_global_rng_alone(engine_config):
    cfg = engine_config()
    state = torch.get_rng_state()
    a = load_causal_lm(cfg.model, "cpu", torch.float32, seed=1)
    assert torch.equal(torch.get_rng_state(), state)
    b = load_causal_lm(cfg.model, "cpu", torch.float32, role="ref", seed=1)
    c = load_causal_lm(cfg.model, "cpu", torch.float32, seed=2)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), name
    assert not all(torch.equal(x, z) for x, z in zip(a.state_dict().values(), c.state_dict().values(), strict=True))
    assert not a.training
    bf16 = load_causal_lm(cfg.model, "cpu", torch.bfloat16, seed=1)
    assert torch.equal(bf16.state_dict()["model.norm.weight"], a.state_dict()["model.norm.weight"].bfloat16())
    assert next(bf16.parameters()).dtype == torch.bfloat16


def test_init_config_needs_a_seed_and_a_model_type(engine_config):
    with pytest.raises(ValueError, match="seed="):
        load_causal_lm(engine_config().model, "cpu", torch.float32)
    cfg = engine_config(model={"init_config": {"vocab_size": 64}})
    with pytest.raises(ValueError, match="model_type"):
        load_causal_lm(cfg.model, "cpu", torch.float32, seed=1)


def test_path_round_trip(engine_config, tmp_path):
    cfg = engine_config()
    model = load_causal_lm(cfg.model, "cpu", torch.float32, seed=1)
    model.save_pretrained(tmp_path / "m")
    loaded = load_causal_lm(engine_config(model={"path": str(tmp_path / "m"), "init_config": {}}).model,
                            "cpu", torch.float32)
    for (name, x), y in zip(model.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(x, y), name


def test_missing_path_names_the_key_and_the_path(engine_config, tmp_path):
    missing = str(tmp_path / "no-such-model")
    cfg = engine_config(model={"path": missing})
    with pytest.raises(FileNotFoundError, match="model.path") as err:
        load_causal_lm(cfg.model, "cpu", torch.float32, seed=1)
    assert missing in str(err.value)
    with pytest.raises(FileNotFoundError, match="model.path"):
        load_tokenizer(engine_config(model={"path": missing, "tokenizer": ""}).model)


def test_nothing_to_build(engine_config):
    cfg = engine_config(model={"init_config": {}})
    with pytest.raises(ValueError, match="model.path .* or model.init_config"):
        load_causal_lm(cfg.model, "cpu", torch.float32, seed=1)


def test_tokenizer_defaults_to_the_model_path(engine_config, tokenizer_dir):
    tok = load_tokenizer(engine_config(model={"path": str(tokenizer_dir), "tokenizer": ""}).model)
    assert tok.eos_token_id == 1
    assert load_tokenizer(engine_config(model={"tokenizer": ""}).model, required=False) is None
    with pytest.raises(ValueError, match="model.tokenizer"):
        load_tokenizer(engine_config(model={"tokenizer": ""}).model)


def test_a_shared_tokenizer_is_loaded_once_until_its_files_change(engine_config, tmp_path):
    import os
    import shutil

    from slime_core.api import write_char_tokenizer

    path = tmp_path / "tok"
    write_char_tokenizer(path)
    model = engine_config(model={"tokenizer": str(path)}).model
    first = load_tokenizer(model, shared=True)
    assert load_tokenizer(model, shared=True) is first
    assert load_tokenizer(model) is not first  # not shared: a load of its own
    # the same files rewritten (a newer tokenizer at the same path): loaded again
    shutil.rmtree(path)
    write_char_tokenizer(path)
    for f in path.iterdir():
        os.utime(f, ns=(1, 1))
    second = load_tokenizer(model, shared=True)
    assert second is not first and second.eos_token_id == first.eos_token_id
