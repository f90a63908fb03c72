"""A real GRPO run with ``rollout.engine = "sglang"`` and ``sglang.urls`` on a CPU host.

The server is the SGLang-shaped HTTP server of :mod:`sglang_rollout.fake_server` running the
core's ``LocalEngine`` (a ~50k-parameter Qwen2), so tokens and log-probs are real: the trainer
recomputes the log-probs of every rollout token, and they must agree with the ones parsed from
``meta_info.output_token_logprobs`` (``train/mismatch_abs_logprob_diff``). That only holds if
token ids and log-probs are paired right and every weight sync reached the server.
"""

from __future__ import annotations

from typing import Any

import pytest


def _server_engine(base_config: dict[str, Any]) -> Any:
    from slime_core.testing import build_test_config
    from slime_std.engine.local_engine import LocalEngine

    cfg = build_test_config(model=dict(base_config["model"]), run={"seed": 99})
    return LocalEngine(cfg, 0)  # other seed: its weights differ until the first sync


@pytest.mark.parametrize("transport, endpoint", [
    ("disk", "/update_weights_from_disk"),
    ("inprocess", "/update_weights_from_tensor"),
])
def test_grpo_run_against_an_sglang_shaped_server(base_config, fake_server, run_in_agreement,
                                                  transport, endpoint) -> None:
    import torch

    engine = _server_engine(base_config)
    srv = fake_server(engine)
    run_dir = run_in_agreement(base_config, srv.url, transport, ("slime_grpo", "sglang_rollout"))
    syncs = [r.body for r in srv.requests if r.path == endpoint]
    assert [b["weight_version"] for b in syncs] == ["0", "1", "2"]
    assert srv.version == "2" and engine.weight_version() == 2
    gens = [r.body for r in srv.requests if r.path == "/generate"]
    assert len(gens) >= 2 * 2 * 4  # steps x prompts x samples
    assert all(g["return_logprob"] is True and g["input_ids"] for g in gens)
    if transport == "disk":
        from safetensors.torch import load_file

        last = sorted((run_dir / "weights").glob("v*"))[-1]
        assert last.name == "v000002" and syncs[-1]["model_path"] == str(last)
        served = engine._live_model().state_dict()
        for name, tensor in load_file(str(last / "model.safetensors")).items():
            assert torch.equal(served[name], tensor), name
