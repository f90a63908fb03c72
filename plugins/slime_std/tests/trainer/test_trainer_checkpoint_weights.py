"""The torch trainer's checkpoint weights: a tied output head is written once and filled through
the tie when loaded; a file that lacks one of the model's tensors, or holds one the model does
not have, is refused naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from slime_core.context import set_manager
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_core.testing import TINY_QWEN2, build_test_config, write_char_tokenizer
from slime_std.trainer.torch_trainer import TorchTrainer

HEAD, EMBED = "lm_head.weight", "model.embed_tokens.weight"


def _config(tmp_path: Path, **train: Any) -> Any:
    set_manager(SlimePluginManager(PluginSelection(autoload=False)).load())
    tok = write_char_tokenizer(tmp_path / "tok")
    return build_test_config(model={"init_config": TINY_QWEN2, "tokenizer": str(tok)},
                             run={"accelerator": "cpu"}, train=train)


def _moved(trainer: TorchTrainer) -> None:
    """Weights no fresh trainer has, so a load that drops any of them shows."""
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(torch.randn_like(p))


def _saved(config: Any, where: Path) -> tuple[TorchTrainer, Path, dict[str, torch.Tensor]]:
    """A trainer with moved weights, its checkpoint in ``where``, the weights file and what it
    holds."""
    trainer = TorchTrainer(config)
    _moved(trainer)
    trainer.save(str(where))
    file = where / "model.safetensors"
    return trainer, file, load_file(str(file))


def test_a_tied_head_is_written_once_and_comes_back_through_the_tie(tmp_path: Path) -> None:
    config = _config(tmp_path)
    saved, _, written = _saved(config, tmp_path / "ck")
    assert EMBED in written and HEAD not in written
    assert sorted(written) == sorted(set(saved.model.state_dict()) - {HEAD})

    loaded = TorchTrainer(config)
    loaded.load(str(tmp_path / "ck"))
    state = loaded.model.state_dict()
    for name, tensor in saved.model.state_dict().items():
        assert torch.equal(state[name], tensor), name
    model: Any = loaded.model  # a transformers model: still tied after the load
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight


def test_a_checkpoint_with_the_head_written_twice_still_loads(tmp_path: Path) -> None:
    """Checkpoints written before the head was written once hold both names."""
    config = _config(tmp_path)
    saved, file, state = _saved(config, tmp_path / "ck")
    save_file({**state, HEAD: state[EMBED].clone()}, str(file))
    loaded = TorchTrainer(config)
    loaded.load(str(tmp_path / "ck"))
    assert torch.equal(loaded.model.state_dict()[HEAD], saved.model.state_dict()[HEAD])


def test_a_checkpoint_that_lacks_a_tensor_is_refused_naming_the_file(tmp_path: Path) -> None:
    config = _config(tmp_path)
    _, file, state = _saved(config, tmp_path / "ck")
    del state["model.norm.weight"]
    save_file(state, str(file))
    trainer = TorchTrainer(config)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    with pytest.raises(ValueError, match=r"lacks 1 of this model's tensors.*model\.norm\.weight"
                       ) as err:
        trainer.load(str(tmp_path / "ck"))
    assert str(file) in str(err.value)
    # nothing copied: a resume falls back to the previous checkpoint from an untouched model
    assert all(torch.equal(v, before[k]) for k, v in trainer.model.state_dict().items())


def test_a_checkpoint_with_a_tensor_the_model_lacks_is_refused(tmp_path: Path) -> None:
    config = _config(tmp_path)
    TorchTrainer(config).save(str(tmp_path / "ck"))
    file = tmp_path / "ck" / "model.safetensors"
    save_file({**load_file(str(file)), "model.layers.9.mlp.up_proj.weight": torch.zeros(2, 2)},
              str(file))
    with pytest.raises(ValueError, match=r"has tensors this model does not.*layers\.9"):
        TorchTrainer(config).load(str(tmp_path / "ck"))


def test_a_moved_reference_is_checked_the_same_way(tmp_path: Path) -> None:
    config = _config(tmp_path, ref_update_interval=1)
    saved = TorchTrainer(config)
    saved._ref()  # built when first needed; a checkpoint writes it once it exists
    saved.save(str(tmp_path / "ck"))
    ref_file = tmp_path / "ck" / "ref_model.safetensors"
    assert HEAD not in load_file(str(ref_file))
    TorchTrainer(config).load(str(tmp_path / "ck"))  # whole: loads
    state = load_file(str(ref_file))
    del state["model.norm.weight"]
    save_file(state, str(ref_file))
    with pytest.raises(ValueError, match=r"ref_model\.safetensors lacks 1"):
        TorchTrainer(config).load(str(tmp_path / "ck"))
