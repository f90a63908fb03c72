"""What each rank runs in the numerics tests: the megatron backend next to the torch backend.

``compare(rank, world_size, data)`` builds both backends from the same config on every rank
(the torch one unsharded, the megatron one over all ranks as tensor parallelism) and returns,
on every rank, the largest differences of response log-probs, exported weights, and one GRPO
step's loss, grad norm and updated weights.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from mg_support import base_data, copy_batch, grpo_batch, make_config


def _max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


def off_policy(batch: Any, log_probs: list[torch.Tensor]) -> None:
    """Old log-probs away from the current ones, so the PPO ratio differs from 1, some tokens
    clip, and the loss is not ~0 (on-policy GRPO's loss is 0 up to rounding)."""
    g = torch.Generator().manual_seed(3)
    batch.old_log_probs = [lp + 0.3 * torch.randn(lp.shape, generator=g) for lp in log_probs]


def hf_reference(config: Any) -> dict[str, torch.Tensor]:
    from slime_core.api import load_causal_lm

    model = load_causal_lm(config.model, torch.device("cpu"), torch.float32,
                           seed=config.run.seed)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def hf_grads(mg: Any) -> dict[str, torch.Tensor]:
    """The megatron trainer's gradients (as its last step left them: reduced and clipped) in
    HF names and shapes: TP shards gathered over the TP group, experts over the
    expert-parallel group, stages over the pipeline (a collective of every rank)."""
    import torch.distributed as dist
    from megatron_backend import parallel
    from megatron_backend.convert import is_expert, megatron_names, to_hf
    from megatron_backend.gather import gather_experts

    st = mg.stages
    grads = {k: p.grad if p.grad is not None else torch.zeros_like(p)
             for k, p in mg.model.named_parameters()}
    shards: dict[str, list[torch.Tensor]] = {}
    for k, split in megatron_names(mg.layout, st.rank, st.size, parallel.ep_size()).items():
        g = grads[k].contiguous()
        if split is None or parallel.tp_size() == 1:
            shards[k] = [g]
            continue
        shards[k] = [torch.empty_like(g) for _ in range(parallel.tp_size())]
        dist.all_gather(shards[k], g, group=parallel.tp_group())
    if parallel.ep_size() > 1:
        shards = {k: v for k, v in shards.items() if not is_expert(k)}
        shards.update(gather_experts(mg.model, mg.layout, grads))
    mine = to_hf(shards, mg.layout, st.rank, st.size)
    if st.size == 1:
        return mine
    parts: list[Any] = [None] * st.size
    dist.all_gather_object(parts, mine, group=st.group)
    return {k: v for part in parts for k, v in part.items()}


def grad_diff(torch_tr: Any, mg: Any) -> float:
    """The largest difference of any gradient element between the torch trainer's model and
    the megatron trainer's (:func:`hf_grads`), over the torch model's parameters."""
    mine = hf_grads(mg)
    return max(float((p.grad - mine[k]).abs().max()) if p.grad is not None
               else float(mine[k].abs().max())
               for k, p in torch_tr.model.named_parameters())


def compare(rank: int, world_size: int, data: dict[str, Any]) -> dict[str, Any]:
    from megatron_backend.trainer import MegatronTrainer
    from slime_std.trainer.torch_trainer import TorchTrainer

    config = make_config(data)
    ref = hf_reference(config)
    torch_tr = TorchTrainer(config, 0, 1, None)
    mg = MegatronTrainer(config, rank, world_size, None)
    batch = grpo_batch(mg.layout.vocab)
    out: dict[str, Any] = {"dp": (mg.data_parallel_rank, mg.data_parallel_size)}
    exported = mg.export_weights()
    out["export_keys_equal"] = sorted(exported) == sorted(ref)
    out["export_shapes_equal"] = all(exported[k].shape == ref[k].shape for k in ref)
    out["export_exact"] = all(torch.equal(exported[k], ref[k]) for k in ref)
    lps = torch_tr.compute_log_probs(copy_batch(batch), "actor")
    out["logprob_diff"] = _max_diff(lps, mg.compute_log_probs(copy_batch(batch), "actor"))
    off_policy(batch, lps)
    m_torch = torch_tr.train_step(copy_batch(batch), 0)
    m_mg = mg.train_step(copy_batch(batch), 0)
    out["loss"] = (m_torch["train/loss"], m_mg["train/loss"])
    out["pg_loss"] = (m_torch["train/pg_loss"], m_mg["train/pg_loss"])
    out["clipfrac"] = (m_torch["train/pg_clipfrac"], m_mg["train/pg_clipfrac"])
    out["grad_norm"] = (m_torch["train/grad_norm"], m_mg["train/grad_norm"])
    out["grad_diff"] = grad_diff(torch_tr, mg)
    after_t, after_m = torch_tr.export_weights(), mg.export_weights()
    # Adam's first step is about lr * sign(grad): elements whose gradient is rounding noise may
    # move either way, so the updates are compared as a whole (cosine), not element by element
    d_t = torch.cat([(after_t[k] - ref[k]).flatten() for k in sorted(ref)])
    d_m = torch.cat([(after_m[k] - ref[k]).flatten() for k in sorted(ref)])
    out["update_cosine"] = float(torch.nn.functional.cosine_similarity(d_t, d_m, dim=0))
    out["moved"] = float(d_m.abs().max())
    return out


def _train_metrics(m: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in m.items() if not k.startswith("perf/")}


def resume(rank: int, world_size: int, data: dict[str, Any], ckpt: str) -> dict[str, Any]:
    """Train 2 steps, save, train a 3rd; a fresh trainer loads and trains the 3rd: same?"""
    from megatron_backend.trainer import MegatronTrainer

    config = make_config(data)
    a = MegatronTrainer(config, rank, world_size, None)
    vocab = a.layout.vocab
    for step in range(2):
        a.train_step(grpo_batch(vocab, seed=step), step)
    a.save(ckpt)
    saved = {k: v.clone() for k, v in a.export_weights().items()}
    m_a = _train_metrics(a.train_step(grpo_batch(vocab, seed=2), 2))
    w_a = a.export_weights()
    rng_a = torch.rand(3)
    b = MegatronTrainer(config, rank, world_size, None)
    fresh_equal = all(torch.equal(b.export_weights()[k], saved[k]) for k in saved)
    b.load(ckpt)
    m_b = _train_metrics(b.train_step(grpo_batch(vocab, seed=2), 2))
    w_b = b.export_weights()
    rng_b = torch.rand(3)
    return {
        "fresh_differs": not fresh_equal,  # else the test could not tell a load from no load
        "metrics": (m_a, m_b),
        "weights_equal": all(torch.equal(w_a[k], w_b[k]) for k in w_a),
        "rng_equal": bool(torch.equal(rng_a, rng_b)),
        "saved": saved if rank == 0 else None,
    }


def data_parallel(rank: int, world_size: int, data: dict[str, Any]) -> dict[str, Any]:
    """Data parallel over ``world_size`` ranks (with tensor parallelism when ``[megatron]``
    asks): each data-parallel replica trains on its groups; the step must equal the torch
    backend's on the whole batch in one process."""
    from megatron_backend.trainer import MegatronTrainer
    from slime_std.trainer.torch_trainer import TorchTrainer

    config = make_config(data)
    torch_tr = TorchTrainer(config, 0, 1, None)
    mg = MegatronTrainer(config, rank, world_size, None)
    # each data-parallel replica trains on its own groups; its tensor-parallel ranks share them
    dp_rank, dp_size = mg.data_parallel_rank, mg.data_parallel_size
    batch = grpo_batch(mg.layout.vocab, groups=2 * dp_size)
    mine = [i for i, g in enumerate(batch.group_indices) if g % dp_size == dp_rank]
    ref = hf_reference(config)
    off_policy(batch, torch_tr.compute_log_probs(copy_batch(batch), "actor"))
    m_torch = torch_tr.train_step(copy_batch(batch), 0)
    m_mg = mg.train_step(copy_batch(batch).select(mine), 0)
    after_t, after_m = torch_tr.export_weights(), mg.export_weights()
    d_t = torch.cat([(after_t[k] - ref[k]).flatten() for k in sorted(ref)])
    d_m = torch.cat([(after_m[k] - ref[k]).flatten() for k in sorted(ref)])
    return {
        "dp": (mg.data_parallel_rank, mg.data_parallel_size),
        "loss": (m_torch["train/loss"], m_mg["train/loss"]),
        "grad_norm": (m_torch["train/grad_norm"], m_mg["train/grad_norm"]),
        "entropy": (m_torch["train/entropy"], m_mg["train/entropy"]),
        "update_cosine": float(torch.nn.functional.cosine_similarity(d_t, d_m, dim=0)),
        # AdamW's state elements on this rank against the model's (1 each: unsharded)
        "state_share": sum(v.numel() for st in mg.optimizer.state.values()
                           for k, v in st.items() if k == "exp_avg")
        / sum(p.numel() for p in mg.model.parameters()),
    }


PPO_KEYS = ("train/loss", "train/pg_loss", "train/grad_norm", "train/value_loss",
            "train/value_clipfrac", "train/critic_grad_norm", "train/values_mean",
            "train/returns_mean", "train/advantages_mean", "train/explained_variance")


def ppo_data(**sections: dict[str, Any]) -> dict[str, Any]:
    """GAE with a critic; two optimizer steps per rollout and a high critic lr, so the second
    critic step sees values away from the old ones (the value clip engages)."""
    data = base_data(algorithm={"advantage_estimator": "gae"},
                     ppo={"critic_lr": 3e-2, "value_clip": 0.05},
                     train={"num_steps_per_rollout": 2})
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return data


def ppo_compare(rank: int, world_size: int, data: dict[str, Any]) -> dict[str, Any]:
    """One PPO step (GAE, two critic and two actor steps) on the torch backend (one process)
    and on the megatron backend (over every rank): metrics and the critic's values after it."""
    from megatron_backend.trainer import MegatronTrainer
    from slime_ppo import glue
    from slime_std.trainer.torch_trainer import TorchTrainer

    # the critic comes from the train.backend record, so each config names its backend
    one = {**data, "train": {**data["train"], "num_ranks": 1, "backend": "torch"},
           "megatron": {}}
    mg = {**data, "train": {**data["train"], "backend": "megatron"}}
    out: dict[str, Any] = {}
    for backend, d in (("torch", one), ("megatron", mg)):
        cfg = make_config(d, plugins=("slime_ppo",))
        trainer = (TorchTrainer(cfg, 0, 1, None) if backend == "torch"
                   else MegatronTrainer(cfg, rank, world_size, None))
        batch = grpo_batch(260)
        if backend == "torch":
            lps = trainer.compute_log_probs(copy_batch(batch), "actor")
        off_policy(batch, lps)
        m = trainer.train_step(batch, 0)
        critic = glue.STATE.critic
        assert critic is not None
        probe = grpo_batch(260, seed=5)
        out[backend] = {"metrics": {k: m[k] for k in PPO_KEYS if k in m},
                        "values": critic.values(probe.tokens, probe.response_lengths),
                        "critic": type(critic.impl).__name__}
    return out


def ppo_resume(rank: int, world_size: int, data: dict[str, Any], ckpt: str) -> dict[str, Any]:
    """PPO on megatron: 2 steps, save, a 3rd; a fresh trainer loads and trains the 3rd."""
    from megatron_backend.trainer import MegatronTrainer
    from slime_ppo import glue

    config = make_config({**data, "train": {**data["train"], "backend": "megatron"}},
                         plugins=("slime_ppo",))
    a = MegatronTrainer(config, rank, world_size, None)
    for step in range(2):
        a.train_step(grpo_batch(260, seed=step), step)
    a.save(ckpt)
    m_a = _train_metrics(a.train_step(grpo_batch(260, seed=2), 2))
    probe = grpo_batch(260, seed=5)
    v_a = glue.STATE.critic.values(probe.tokens, probe.response_lengths)
    b = MegatronTrainer(config, rank, world_size, None)
    v_fresh = glue.STATE.critic.values(probe.tokens, probe.response_lengths)
    b.load(ckpt)
    m_b = _train_metrics(b.train_step(grpo_batch(260, seed=2), 2))
    v_b = glue.STATE.critic.values(probe.tokens, probe.response_lengths)
    return {"metrics": (m_a, m_b),
            "values_equal": all(torch.equal(x, y) for x, y in zip(v_a, v_b, strict=True)),
            "fresh_differs": not all(torch.equal(x, y)
                                     for x, y in zip(v_a, v_fresh, strict=True))}


def whiten_compare(rank: int, world_size: int, data: dict[str, Any]) -> dict[str, Any]:
    """REINFORCE++ with batch-wide whitening: the advantages and one step of the torch
    backend on one process against the megatron backend over every rank; and the megatron
    advantages when the plugins reduce over the default group (as before the trainer set its
    data-parallel group), which double-counts TP peers."""
    from megatron_backend.trainer import MegatronTrainer
    from slime_core.api import set_data_parallel_group
    from slime_std.trainer.torch_trainer import TorchTrainer

    one = {**data, "train": {**data["train"], "num_ranks": 1}, "megatron": {}}
    torch_cfg = make_config(one)
    torch_tr = TorchTrainer(torch_cfg, 0, 1, None)
    batch = grpo_batch(260)
    off_policy(batch, torch_tr.compute_log_probs(copy_batch(batch), "actor"))
    b_t = copy_batch(batch)
    torch_tr.prepare(b_t)
    m_t = torch_tr.train_step(copy_batch(batch), 0)
    mg = MegatronTrainer(make_config(data), rank, world_size, None)
    set_data_parallel_group(None)  # the default group: what the plugins reduced over before
    b_default = copy_batch(batch)
    mg.prepare(b_default)
    set_data_parallel_group(mg.data_parallel_group)
    b_m = copy_batch(batch)
    mg.prepare(b_m)
    m_m = mg.train_step(copy_batch(batch), 0)
    return {
        "dp": (mg.data_parallel_rank, mg.data_parallel_size),
        "adv_diff": _max_diff(b_t.advantages, b_m.advantages),
        "adv_diff_default_group": _max_diff(b_t.advantages, b_default.advantages),
        "loss": (m_t["train/loss"], m_m["train/loss"]),
        "grad_norm": (m_t["train/grad_norm"], m_m["train/grad_norm"]),
    }


def random_routes(batch: Any, layers: int, top_k: int, experts: int,
                  seed: int = 11) -> list[torch.Tensor]:
    """Per sample ``[len(tokens) - 1, layers, top_k]`` distinct random expert ids (uint8, as
    a rollout's record): mostly not what the routers would pick, so replay shows."""
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(len(t) - 1, layers, experts, generator=g).argsort(-1)[..., :top_k]
            .to(torch.uint8) for t in batch.tokens]


def replay_exactness(mg: Any, batch: Any) -> dict[str, bool]:
    """One forward of the whole batch on a one-stage megatron trainer, without and with the
    replay of ``batch.routed_experts``: with it, every position but a sample's last routes to
    its record, and the last and the padding to the router's own choice (compared in the
    first MoE layer only: later layers' inputs there depend on the replayed earlier positions)."""
    from megatron_backend.forward import pack
    from megatron_backend.routing import replay_ids

    lay = mg.layout
    lengths = [len(t) for t in batch.tokens]
    width = max(lengths)
    p = pack(batch.tokens, batch.response_lengths, mg.pad_id, mg.device)

    def routed(ids: torch.Tensor | None) -> torch.Tensor:
        replay = mg.routing.replaying(ids) if ids is not None else contextlib.nullcontext()
        with torch.no_grad(), mg.routing.recording(), replay:
            mg.model(p.ids, p.positions, attention_mask=p.mask)
        used = mg.routing.take()  # [width * b, layers, k], sequence-major
        return used.view(width, len(lengths), lay.num_layers, lay.top_k).transpose(0, 1)

    own = routed(None)
    used = routed(replay_ids(batch.routed_experts, lengths, width, lay.num_layers, lay.top_k,
                             mg.device))
    return {
        "recorded": all(torch.equal(used[i, : n - 1], r.long())
                        for i, (n, r) in enumerate(zip(lengths, batch.routed_experts,
                                                       strict=True))),
        "rest_own": all(torch.equal(used[i, n - 1:, 0], own[i, n - 1:, 0])
                        for i, n in enumerate(lengths)),
        "differs_from_own": not torch.equal(used, own),
    }


def replay_compare(rank: int, world_size: int, data: dict[str, Any]) -> dict[str, Any]:
    """``train.routing_replay = "rollout"`` on both backends with the same random records:
    replayed log-probs, one GRPO step and the replay agreement; the megatron log-probs
    without replay (how much the replay changed), and the replay's exactness (one stage)."""
    from megatron_backend.trainer import MegatronTrainer
    from slime_std.trainer.torch_trainer import TorchTrainer

    data = {**data, "train": {**data["train"], "routing_replay": "rollout"}}
    config = make_config(data)
    torch_tr = TorchTrainer(config, 0, 1, None)
    mg = MegatronTrainer(config, rank, world_size, None)
    lay = mg.layout
    batch = grpo_batch(lay.vocab)
    batch.routed_experts = random_routes(batch, lay.num_layers, lay.top_k, lay.num_experts)
    out: dict[str, Any] = {}
    if mg.stages.size == 1:
        out.update(replay_exactness(mg, batch))
    lps = torch_tr.compute_log_probs(copy_batch(batch), "actor")
    lps_m = mg.compute_log_probs(copy_batch(batch), "actor")
    plain = copy_batch(batch)
    plain.routed_experts = None
    out["logprob_diff"] = _max_diff(lps, lps_m)
    out["replay_effect"] = _max_diff(lps_m, mg.compute_log_probs(plain, "actor"))
    torch_tr.routing.agreement()  # drop the counts of the log-prob passes above
    mg.routing.agreement()
    off_policy(batch, lps)
    m_torch = torch_tr.train_step(copy_batch(batch), 0)
    m_mg = mg.train_step(copy_batch(batch), 0)
    for key in ("loss", "pg_loss", "grad_norm", "routing_replay_agreement"):
        out[key] = (m_torch[f"train/{key}"], m_mg[f"train/{key}"])
    return out


def expert_parallel(rank: int, world_size: int, data: dict[str, Any]) -> dict[str, Any]:
    """Expert parallelism over every rank (each also a data-parallel replica with its own
    groups, as many as makes the ranks' micro-batch counts differ): exported weights, response
    log-probs with and without routing replay (the same random records as the torch backend),
    and one GRPO step (the router's own routing: records of None), against the torch backend
    on the whole batch in one process."""
    from megatron_backend import parallel
    from megatron_backend.trainer import MegatronTrainer
    from slime_core.api import micro_batches
    from slime_std.trainer.torch_trainer import TorchTrainer

    data = {**data, "train": {**data["train"], "routing_replay": "rollout"}}
    config = make_config(data)
    torch_tr = TorchTrainer(config, 0, 1, None)
    mg = MegatronTrainer(config, rank, world_size, None)
    lay = mg.layout
    ref = hf_reference(config)
    exported = mg.export_weights()  # (views of the parameters: compared before the step)
    export = {"export_keys_equal": sorted(exported) == sorted(ref),
              "export_exact": all(torch.equal(exported[k], ref[k]) for k in ref)}
    dp_rank, dp_size = mg.data_parallel_rank, mg.data_parallel_size
    # 3 groups over 2 ranks: rank 0 trains two, rank 1 one (fewer micro-batches: it idles)
    batch = grpo_batch(lay.vocab, groups=3)
    mine = [i for i, g in enumerate(batch.group_indices) if g % dp_size == dp_rank]
    routes = random_routes(batch, lay.num_layers, lay.top_k, lay.num_experts)
    plain = copy_batch(batch)
    replayed = copy_batch(batch)
    replayed.routed_experts = routes
    lps = torch_tr.compute_log_probs(copy_batch(plain), "actor")
    lps_r = torch_tr.compute_log_probs(copy_batch(replayed), "actor")
    lps_m = mg.compute_log_probs(copy_batch(plain).select(mine), "actor")
    lps_mr = mg.compute_log_probs(copy_batch(replayed).select(mine), "actor")
    off_policy(batch, lps)
    batch.routed_experts = [None] * len(batch)  # the routers' own choice
    m_torch = torch_tr.train_step(copy_batch(batch), 0)
    m_mg = mg.train_step(copy_batch(batch).select(mine), 0)
    grads_t = {k: p.grad for k, p in torch_tr.model.named_parameters()}
    after_t, after_m = torch_tr.export_weights(), mg.export_weights()
    d_t = torch.cat([(after_t[k] - ref[k]).flatten() for k in sorted(ref)])
    d_m = torch.cat([(after_m[k] - ref[k]).flatten() for k in sorted(ref)])
    experts = [k for k in sorted(ref) if ".mlp.experts." in k]
    return {
        "dp": (dp_rank, dp_size),
        "ep": (parallel.ep_rank(), parallel.ep_size()),
        "local_experts": sum(1 for k in mg.expert_names if k.endswith("linear_fc1.weight")),
        "micro_batches": len(micro_batches([len(batch.tokens[i]) for i in mine],
                                           mg.config.train.micro_batch_tokens)),
        **export,
        "logprob_diff": _max_diff([lps[i] for i in mine], lps_m),
        "replayed_logprob_diff": _max_diff([lps_r[i] for i in mine], lps_mr),
        "replay_effect": _max_diff(lps_m, lps_mr),
        "loss": (m_torch["train/loss"], m_mg["train/loss"]),
        "pg_loss": (m_torch["train/pg_loss"], m_mg["train/pg_loss"]),
        "grad_norm": (m_torch["train/grad_norm"], m_mg["train/grad_norm"]),
        "entropy": (m_torch["train/entropy"], m_mg["train/entropy"]),
        "update_cosine": float(torch.nn.functional.cosine_similarity(d_t, d_m, dim=0)),
        "grad_diff": grad_diff(torch_tr, mg),  # the step's (reduced, clipped) gradients
        "grad_max": max(float(g.abs().max()) for g in grads_t.values()),
        "experts_moved": min(float((after_m[k] - ref[k]).abs().max()) for k in experts),
    }


def router_loss_compare(rank: int, world_size: int, data: dict[str, Any]) -> dict[str, Any]:
    """One GRPO step with ``train.moe_aux_loss_coef`` / ``moe_z_loss_coef`` on both backends
    (megatron-core's own router losses against ``slime_core.moe.losses``): loss, grad norm,
    the logged router losses and the routers' gradients (before clipping: grad_clip 0)."""
    from megatron_backend.trainer import MegatronTrainer
    from slime_std.trainer.torch_trainer import TorchTrainer

    data = {**data, "train": {**data["train"], "grad_clip": 0.0}}
    config = make_config(data)
    torch_tr = TorchTrainer(config, 0, 1, None)
    mg = MegatronTrainer(config, rank, world_size, None)
    batch = grpo_batch(mg.layout.vocab)
    off_policy(batch, torch_tr.compute_log_probs(copy_batch(batch), "actor"))
    m_torch = torch_tr.train_step(copy_batch(batch), 0)
    m_mg = mg.train_step(copy_batch(batch), 0)
    grads_m = hf_grads(mg)
    routers = [k for k, _ in torch_tr.model.named_parameters() if k.endswith("mlp.gate.weight")]
    out: dict[str, Any] = {k: (m_torch.get(f"train/{k}"), m_mg.get(f"train/{k}"))
                           for k in ("loss", "grad_norm", "moe_aux_loss", "moe_z_loss")}
    params = dict(torch_tr.model.named_parameters())
    out["router_grad_diff"] = max(float((params[k].grad - grads_m[k]).abs().max())
                                  for k in routers)
    out["router_grad_max"] = max(float(params[k].grad.abs().max()) for k in routers)
    out["per_layer_aux"] = _per_layer_aux(torch_tr, batch)
    return out


def _per_layer_aux(torch_tr: Any, batch: Any) -> float:
    """megatron's logged load-balancing value computed from a fresh copy of the torch model
    (the weights before the step): the mean over layers of each layer's transformers form,
    micro-batches at their sample share (the seq_mean_token_mean reduction)."""
    from slime_core.api import (
        RouterCapture,
        load_causal_lm,
        micro_batches,
        right_pad,
        router_losses,
    )

    model = load_causal_lm(torch_tr.config.model, torch.device("cpu"), torch.float32,
                           seed=torch_tr.config.run.seed)
    capture = RouterCapture(model)
    total = 0.0
    plan = micro_batches([len(t) for t in batch.tokens], torch_tr.config.train.micro_batch_tokens)
    with torch.no_grad():
        for mb in plan:
            ids, attn = right_pad([batch.tokens[i] for i in mb])
            with capture.capturing():
                model(input_ids=ids, attention_mask=attn)
            layers = list(capture.taken)
            per = [float(router_losses([lg], attn, capture.top_k)[0]) for lg in layers]
            total += sum(per) / len(per) * len(mb) / len(batch)
    return total
