"""``core gpu-check`` (added by ``core_accelerators`` through ``slime_register_commands``):
the GPU side of the ray executor on this host, without Ray (needs 2 CUDA devices).

Two processes, one GPU each, run what the trainer ranks and the broadcast transport run, with
the trainer and the engine the config names (``train.backend``, ``rollout.engine``: by default
slime-std's ``torch`` and ``local`` records, taken from the registries like every run does):

1. nccl data parallelism: ``init_data_parallel`` (the executors' loopback store), then one ``train_step`` per rank on its token-balanced
   share of a fixed batch; the first AdamW step stores ``exp_avg = 0.1 * grad``, which must
   equal a single-GPU run on the whole batch;
2. the nccl weight broadcast group (its own group, not the default one): rank 0 packs its
   weights plus one into byte buckets, rank 1 receives and unpacks them;
3. the engine's ``sleep()`` returns its GPU memory and ``wake_up()`` brings it back.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import click

TOLERANCE = {"rtol": 1e-4, "atol_scale": 1e-5}  # fp32 sums in another order, TF32 off


def _config(tmp: Path) -> tuple[Any, Any]:
    """This process's plugin manager (slime_grpo required) and the check's config."""
    from slime_core.api import TINY_QWEN2, get_manager, load_run, write_char_tokenizer

    tok = tmp / "tok"
    if not tok.exists():
        write_char_tokenizer(tok)
    init = ", ".join(f"{k} = {json.dumps(v)}" for k, v in TINY_QWEN2.items())
    toml = tmp / "gpu_check.toml"
    toml.write_text(f"[run]\nrun_dir = {json.dumps(str(tmp / 'run'))}\nloggers = []\n"
                    f"[model]\ntokenizer = {json.dumps(str(tok))}\ninit_config = {{{init}}}\n"
                    'dtype = "float32"\n[train]\nlr = 1e-3\nmicro_batch_tokens = 64\n')
    config = load_run(toml, required=("slime_grpo",))
    return get_manager(), config


def _cuda(manager: Any) -> Any:
    """The ``cuda`` accelerator, built by its record (the default plugin core_accelerators)."""
    return manager.registries.accelerator.get("cuda").factory()


def _batch() -> Any:
    import torch
    from slime_hookspecs import TrainBatch

    g = torch.Generator().manual_seed(0)
    batch = TrainBatch()
    for group in range(6):
        for i in range(4):
            prompt = int(torch.randint(3, 8, (1,), generator=g))
            resp = int(torch.randint(2, 10, (1,), generator=g))
            batch.tokens.append(torch.randint(3, 100, (prompt + resp,), generator=g))
            batch.response_lengths.append(resp)
            batch.loss_masks.append(torch.ones(resp))
            r = float(torch.rand(1, generator=g))
            batch.rewards.append(r)
            batch.raw_rewards.append(r)
            batch.group_indices.append(group)
            batch.sample_indices.append(group * 4 + i)
            batch.rollout_ids.append(0)
    batch.metadata["n_samples_per_prompt"] = 4
    return batch


def _trainer(manager: Any, config: Any, rank: int, world_size: int, accel: Any) -> Any:
    """The trainer of ``train.backend`` (its record's factory, as the executors build it)."""
    record = manager.registries.trainer_backend.get(config.train.backend)
    return record.factory(config, rank, world_size, accel)


def _grads(trainer: Any) -> dict[int, Any]:
    return {i: s["exp_avg"].detach().cpu() for i, s in trainer.optimizer.state_dict()["state"].items()}


def _rank(rank: int, port: int, tmp: str, out: str) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)  # before CUDA initialises
    import torch
    from slime_core.api import (
        broadcast_tensor,
        connect_store,
        init_data_parallel,
        make_buckets,
        new_process_group,
        pack_bucket,
        shard_by_tokens,
        unpack_bucket,
    )

    torch.backends.cuda.matmul.allow_tf32 = False
    manager, config = _config(Path(tmp))
    init_data_parallel("nccl", "127.0.0.1", port, "dp/", rank, 2, 120, None)
    accel = _cuda(manager)
    trainer = _trainer(manager, config, rank, 2, accel)
    batch = _batch()
    shard = shard_by_tokens(batch.group_indices, [len(t) for t in batch.tokens], 2)[rank]
    metrics = trainer.train_step(batch.select(shard), 0)
    torch.save({"grads": _grads(trainer), "metrics": metrics}, Path(out) / f"rank{rank}.pt")

    group = new_process_group("nccl", connect_store("127.0.0.1", port, 2, 120), "bc/", rank, 2,
                      "127.0.0.1", 120)
    weights = {k: v + 1 if rank == 0 else torch.zeros_like(v)
               for k, v in trainer.export_weights().items()}
    received: dict[str, Any] = {}
    for bucket in make_buckets(weights, 1):
        buf, meta = pack_bucket(bucket, torch.device("cuda"))
        broadcast_tensor(group, buf, root=0)
        received.update(unpack_bucket(buf, meta))
    expected = {k: v.detach() + 1 for k, v in trainer.export_weights().items()}
    ok = all(torch.equal(received[k], expected[k]) for k in expected)
    report = {"broadcast_ok": ok, "device": torch.cuda.get_device_name(0)}
    if rank == 0:
        engine = manager.registries.rollout_engine.get(config.rollout.engine).factory(
            config, 0, accel)
        before = torch.cuda.memory_allocated()
        engine.sleep()
        asleep = torch.cuda.memory_allocated()
        engine.wake_up()
        from slime_hookspecs import SamplingParams

        out_ids = engine.generate([[5, 6, 7]], [SamplingParams(max_new_tokens=4, temperature=1.0)])
        report.update(engine_bytes=before - asleep, generated=len(out_ids[0].token_ids))
    torch.save(report, Path(out) / f"report{rank}.pt")


def run_check(tmp: str | None = None) -> dict[str, Any]:
    import torch
    import torch.multiprocessing as mp
    from slime_core.api import StoreServer

    if torch.cuda.device_count() < 2:
        raise RuntimeError("gpu_check needs 2 CUDA devices")
    tmp = tmp or tempfile.mkdtemp(prefix="slime-gpu-check-")
    out = Path(tmp) / "out"
    out.mkdir(parents=True, exist_ok=True)
    _config(Path(tmp))  # tokenizer written once, before the ranks start
    server = StoreServer("127.0.0.1", 2, 120)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_rank, args=(r, server.port, tmp, str(out))) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    codes = [p.exitcode for p in procs]
    if codes != [0, 0]:
        raise RuntimeError(f"gpu_check: rank exit codes {codes}")
    torch.backends.cuda.matmul.allow_tf32 = False
    manager, config = _config(Path(tmp))
    single = _trainer(manager, config, 0, 1, _cuda(manager))
    ref_metrics = single.train_step(_batch(), 0)
    ref = _grads(single)
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]
    scale = max(float(g.abs().max()) for g in ref.values())
    worst = 0.0
    for r in ranks:
        for i, g in ref.items():
            torch.testing.assert_close(r["grads"][i], g, rtol=TOLERANCE["rtol"],
                                       atol=TOLERANCE["atol_scale"] * scale)
            worst = max(worst, float((r["grads"][i] - g).abs().max()))
    reports = [torch.load(out / f"report{r}.pt", weights_only=False) for r in range(2)]
    if not all(rep["broadcast_ok"] for rep in reports):
        raise RuntimeError("gpu_check: the nccl broadcast delivered other weights")
    if reports[0]["engine_bytes"] <= 0 or reports[0]["generated"] < 1:
        raise RuntimeError(f"gpu_check: engine sleep/wake_up failed: {reports[0]}")
    return {
        "device": reports[0]["device"],
        "grad_max_abs_diff": worst, "grad_scale": scale,
        "grad_norm_dp": ranks[0]["metrics"]["train/grad_norm"],
        "grad_norm_single": ref_metrics["train/grad_norm"],
        "engine_bytes_released_by_sleep": reports[0]["engine_bytes"],
    }


@click.command("gpu-check")
@click.argument("work_dir", required=False, type=click.Path(file_okay=False))
def gpu_check_command(work_dir: str | None) -> None:
    """Data parallelism, the weight broadcast and engine sleep on 2 CUDA devices."""
    try:
        report = run_check(work_dir)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps(report, indent=2))
