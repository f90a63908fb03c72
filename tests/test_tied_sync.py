"""A tied model's weight sync: the embedding shared with the output head travels once, and the
engine's head still follows the trainer's (its model is tied the same way)."""

from __future__ import annotations

from typing import Any

import torch
from slime_hookspecs import hookimpl

from tests.conftest import read_metrics


class Seen:
    """The names each sync delivers to the engine, and the engine's model."""

    def __init__(self) -> None:
        self.names: list[list[str]] = []
        self.model: Any = None

    @hookimpl
    def slime_engine_weights(self, config: Any, model: Any, weights: Any, version: int) -> None:
        self.names.append(list(weights))
        self.model = model


def test_a_tied_embedding_is_sent_once_and_the_engine_head_follows(base_config,
                                                                   run_slime) -> None:
    base_config["weights"] = {"verify": True}  # each sync: engine digest == trainer digest
    seen = Seen()
    run_dir = run_slime(base_config, [seen])
    model = seen.model
    assert model.lm_head.weight is model.model.embed_tokens.weight  # the engine is tied too
    assert len(seen.names) == 3
    for names in seen.names:
        assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names
    unique = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    rows = read_metrics(run_dir)
    assert rows[-1]["perf/weight_sync_verified"] == 1.0
    assert rows[-1]["perf/weight_sync_bytes"] == sum(unique.values())
    assert sum(unique.values()) < sum(t.numel() * t.element_size()
                                      for t in model.state_dict().values())


def test_an_untied_model_sends_every_tensor(base_config, run_slime) -> None:
    base_config["model"]["init_config"]["tie_word_embeddings"] = False
    base_config["weights"] = {"verify": True}
    seen = Seen()
    run_slime(base_config, [seen])
    model = seen.model
    assert set(seen.names[-1]) == set(model.state_dict())
    assert not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
