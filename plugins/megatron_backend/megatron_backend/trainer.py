"""The ``megatron`` trainer backend: one rank of a tensor-, pipeline- and data-parallel GPTModel.

Mirrors the ``torch`` backend (``slime_std/trainer/torch_trainer.py`` in slime-std) so runs compare value
for value: log-probs are ``log_softmax(logits / T)`` of the full vocabulary (T =
``rollout.temperature``, 1 when greedy) in fp32; advantages and losses come from
``slime_core.api`` (``compute_advantages``, ``compute_loss``), micro-batches from
``micro_batches`` with each micro-batch weighted by its share of the mini-batch; AdamW with
``train.*`` settings, the ``lr_schedule(config)`` warm-up/decay, clipping over the whole model.

The model is built from the ``[model]`` Hugging Face checkpoint (or ``init_config``) and each
rank keeps its TP shard (:mod:`megatron_backend.convert`); ``export_weights`` gathers the shards
back into HF names. Hooks receive Megatron objects as slime passes them: ``model`` is the
list of model chunks (one chunk: no virtual pipeline), ``optimizer`` / ``scheduler`` the
rank's AdamW and LambdaLR.

With ``train.routing_replay = "rollout"`` (a mixture-of-experts model) the policy's forwards
(log-probs and training; not the reference's or a teacher's) route every token to
``TrainBatch.routed_experts`` (:mod:`megatron_backend.routing`, on megatron-core's router),
checked against the model's shape first; ``train/routing_replay_agreement`` is the fraction of
replayed expert choices the routers would have made themselves (over every rank).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch
import torch.distributed as dist
from slime_core.api import (
    SKIPPED_STEPS,
    accelerator_record,
    check_batch_routes,
    compute_loss,
    config_moe_shape,
    get_manager,
    load_causal_lm,
    load_tokenizer,
    lr_schedule,
    masked_tokens,
    micro_batches,
    prepare_batch,
    ref_model_config,
    resolve_dtype,
    rollout_optimizer_steps,
    set_data_parallel_group,
    teacher_model_config,
    to_tensor_list,
)
from slime_hookspecs import TrainBatch

from megatron_backend import checkpoint, cpu_shims, parallel, router_losses
from megatron_backend.convert import is_expert, megatron_names, stage_layers, to_hf, to_megatron
from megatron_backend.forward import causal_mask, from_logits, pack
from megatron_backend.gather import gather_experts, gather_shards, load_local_state, local_state
from megatron_backend.layout import Layout, layout_of
from megatron_backend.model import build_gpt
from megatron_backend.model_list import ModelList
from megatron_backend.optim import Accumulation, health
from megatron_backend.pipeline import StagePass, Stages
from megatron_backend.routing import MegatronRouting, replay_ids
from megatron_backend.zero import make_optimizer


def hf_config_of(model_cfg: Any) -> Any:
    """The transformers config of ``[model]`` (``path`` or ``init_config``)."""
    from transformers import AutoConfig

    if model_cfg.path:
        return AutoConfig.from_pretrained(model_cfg.path,
                                          trust_remote_code=bool(model_cfg.trust_remote_code))
    init = dict(model_cfg.init_config)
    model_type = init.pop("model_type", None)
    if not model_type:
        raise ValueError("model.init_config needs a 'model_type' key (e.g. 'qwen2')")
    return AutoConfig.for_model(model_type, **init)


class MegatronTrainer:
    """One rank (a TP shard of a PP stage of one data-parallel replica) of the backend."""

    def __init__(self, config: Any, rank: int = 0, world_size: int = 1,
                 accelerator: Any = None) -> None:
        self.config = config
        self.mg = config.megatron
        self.rank, self.world_size = rank, world_size
        self.accelerator = accelerator
        self.device = accelerator.device(0) if accelerator is not None else torch.device("cpu")
        on_cpu = self.device.type == "cpu"
        if on_cpu:
            if self.mg.sequence_parallel:
                raise ValueError("megatron.sequence_parallel = true needs TransformerEngine and "
                                 "a GPU; on the CPU set it to false")
            cpu_shims.apply()
        # a single local rank creates the default group itself (under Ray the workers already
        # did): the accelerator record's backend (nccl, hccl, ...), gloo for CPU tensors
        backend = "gloo" if on_cpu else accelerator_record(config).dist_backend
        parallel.ensure_default_group(rank, world_size, backend)
        parallel.init_model_parallel(self.mg)
        #: what the trainer group shards by: ranks of one data-parallel index get the same share
        self.data_parallel_rank = parallel.dp_rank()
        self.data_parallel_size = parallel.dp_size()
        #: Megatron's data-parallel group: what the core's data-parallel helpers reduce over in
        #: this process (slime_core.api.data_parallel_group), so plugins' batch statistics
        #: count the samples of tensor- and pipeline-parallel peers once
        self.data_parallel_group = parallel.dp_group()
        set_data_parallel_group(self.data_parallel_group)
        self.stages = Stages()
        self.dtype = resolve_dtype(config.model.dtype, self.device)
        self.manager = get_manager()
        self._seed(int(config.run.seed), on_cpu)
        self.hf_config = hf_config_of(config.model)
        self.layout: Layout = layout_of(self.hf_config, self.mg.tensor_model_parallel_size,
                                        self.mg.make_vocab_size_divisible_by, parallel.ep_size())
        if parallel.ep_size() > 1 and not self.layout.num_experts:
            raise ValueError(f"megatron.expert_model_parallel_size = {parallel.ep_size()} needs "
                             f"a mixture-of-experts model ({self.layout.family} has no experts)")
        # train.moe_aux_loss_coef / moe_z_loss_coef: megatron's own router losses
        self.router_losses = router_losses.enabled(config.train)
        if self.router_losses and not self.layout.num_experts:
            raise ValueError("train.moe_aux_loss_coef / moe_z_loss_coef: the model has no "
                             "mixture-of-experts layers; set them to 0")
        if self.router_losses and self.stages.size > 1:
            raise ValueError("train.moe_aux_loss_coef / moe_z_loss_coef with "
                             "megatron.pipeline_model_parallel_size > 1 is not implemented")
        if self.router_losses:
            router_losses.reset()
        self.model = self._build("actor")
        st = self.stages
        names = megatron_names(self.layout, st.rank, st.size, parallel.ep_size())
        self.sharded_names = {k for k, split in names.items() if split is not None}
        #: this rank's experts: out of the data-parallel reduction, their norm over the
        #: expert-parallel group (optim.Accumulation.step)
        self.expert_names = {k for k in names if is_expert(k)}
        # this stage's copy of tied embeddings, kept equal to the other stage's
        self.tied_copy = None if not self.layout.tied or st.size == 1 else (
            "embedding.word_embeddings.weight" if st.first else "output_layer.weight")
        self.model.train()
        # train.routing_replay: the policy's routers follow the rollout's recorded experts
        self.routing = self._routing() if config.train.routing_replay == "rollout" else None
        self.models = ModelList([self.model])  # slime's model list: a chunk per virtual stage
        self.ref_model: Any = None
        # [opd] mode = "trainer": the frozen teacher and its own layout, built on first use
        self.teacher_model: Any = None
        self.teacher_layout: Layout | None = None
        self.tokenizer = load_tokenizer(config.model, required=False)
        tok = self.tokenizer
        self.pad_id = 0 if tok is None else int(
            tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0))
        self.optimizer = make_optimizer(self.model, config, config.train.lr,
                                        config.train.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_schedule(config))
        self.manager.hook.slime_trainer_init(config=config, model=self.models)
        # a plugin may have set weights (even through .data, which the optimizer's version
        # check does not see): its copies of the weights read them again
        reread = getattr(self.optimizer, "reread", None)
        if reread is not None:
            reread()

    def _seed(self, seed: int, on_cpu: bool) -> None:
        torch.manual_seed(seed)
        if on_cpu:
            cpu_shims.seed(seed, parallel.tp_rank(), parallel.ep_rank())
        else:
            from megatron.core import tensor_parallel

            tensor_parallel.model_parallel_cuda_manual_seed(seed)

    # -- models ------------------------------------------------------------------------------
    def _build(self, role: str, model_cfg: Any = None, layout: Layout | None = None) -> Any:
        """GPTModel (or the ``slime_make_model`` answer) with this rank's shard of the HF weights
        of ``model_cfg`` (default ``[model]``) in ``layout`` (default the policy's)."""
        model_cfg = self.config.model if model_cfg is None else model_cfg
        layout = self.layout if layout is None else layout
        model = self.manager.hook.slime_make_model(config=self.config, role=role)
        st = self.stages
        if model is None:
            model = build_gpt(layout, self.dtype, self.mg, self.device, st.first, st.last,
                              router_losses.config_kwargs(layout, self.config.train, self.mg)
                              if layout.num_experts else None)
        hf = load_causal_lm(model_cfg, torch.device("cpu"), torch.float32, role=role,
                            seed=self.config.run.seed)
        shard = to_megatron(hf.state_dict(), layout, parallel.tp_rank(), parallel.tp_size(),
                            st.rank, st.size, parallel.ep_rank(), parallel.ep_size())
        del hf
        load_local_state(model, {k: v.to(self.dtype) for k, v in shard.items()})
        return model.to(self.device)

    def _routing(self) -> MegatronRouting:
        """Routing replay on this stage's routers (global layers from the stage's first)."""
        if not self.layout.num_experts:
            raise ValueError("train.routing_replay = 'rollout': the model has no "
                             "mixture-of-experts layers; set train.routing_replay = 'off'")
        first = stage_layers(self.layout, self.stages.rank, self.stages.size).start
        return MegatronRouting(self.model, self.layout.num_layers, self.layout.top_k, first)

    def _replayed(self, tokens: list[torch.Tensor], routes: list[Any] | None) -> Any:
        """The replay of ``routes`` (one micro-batch's records) over the right-padded batch of
        ``tokens``; nothing without train.routing_replay or without records."""
        if self.routing is None or routes is None:
            return contextlib.nullcontext()
        lengths = [int(len(t)) for t in tokens]
        return self.routing.replaying(replay_ids(routes, lengths, max(lengths),
                                                 self.layout.num_layers, self.layout.top_k,
                                                 self.device))

    def _ref(self) -> Any:
        """The frozen reference: ``model.ref_path``, else the initial policy rebuilt from
        ``[model]``."""
        if self.ref_model is None:
            state = torch.get_rng_state()
            self.ref_model = self._build("ref", ref_model_config(self.config))
            torch.set_rng_state(state)  # building ref must not shift the sampling stream
            self.ref_model.eval().requires_grad_(False)
        return self.ref_model

    def _teacher(self) -> tuple[Any, Layout]:
        """The frozen OPD teacher (``[opd] mode = "trainer"``) and its layout: a GPTModel of the
        teacher's own architecture from ``opd.teacher_path`` (or ``slime_make_model(role=
        "teacher")``), TP-sharded and split into stages as the policy is."""
        if self.teacher_model is None or self.teacher_layout is None:
            cfg = teacher_model_config(self.config)
            # the teacher may differ from the student in size (same vocabulary): its own
            # layout, checked for this TP size like the policy's
            layout = layout_of(hf_config_of(cfg), self.mg.tensor_model_parallel_size,
                               self.mg.make_vocab_size_divisible_by, parallel.ep_size())
            state = torch.get_rng_state()
            model = self._build("teacher", cfg, layout)
            torch.set_rng_state(state)  # as for ref: building must not shift the sampling stream
            self.teacher_model = model.eval().requires_grad_(False)
            self.teacher_layout = layout
        return self.teacher_model, self.teacher_layout

    # -- log-probs ---------------------------------------------------------------------------
    def compute_log_probs(self, batch: TrainBatch, role: str) -> list[torch.Tensor]:
        if role == "teacher":  # its own architecture, so its own layout
            model, layout = self._teacher()
        else:
            model, layout = (self._ref() if role == "ref" else self.model), self.layout
        self.manager.hook.slime_before_log_prob(config=self.config, model=ModelList([model]),
                                           role=role)
        tokens = to_tensor_list(batch.tokens, torch.long)
        out: list[torch.Tensor | None] = [None] * len(batch)
        # the policy replays the rollout's routing; the reference and a teacher route alone
        routes = batch.routed_experts if role == "actor" else None
        with torch.no_grad():
            for mb in self._plan([int(len(x)) for x in tokens]):
                if not mb:  # expert parallelism: a peer still has a micro-batch
                    self._idle_pass(model, layout.hidden)
                    continue
                mb_tokens = [tokens[i] for i in mb]
                p = pack(mb_tokens, [batch.response_lengths[i] for i in mb], self.pad_id,
                         self.device)
                with self._replayed(mb_tokens, None if routes is None else
                                    [routes[i] for i in mb]):
                    logits = self._stage_pass(model, layout.hidden).forward(p.ids, p.positions,
                                                                            p.mask)
                if logits is None:  # not the last pipeline stage
                    continue
                lps, _ = from_logits(logits, p, self.config.rollout.temperature,
                                     layout.vocab, padded_vocab=layout.padded_vocab)
                for i, lp in zip(mb, lps, strict=True):
                    out[i] = lp.float().cpu()
        # the last stage's answer on every stage (the trainer group reads the first)
        return self.stages.broadcast_from_last(out)  # type: ignore[no-any-return]

    def _plan(self, lengths: list[int]) -> list[list[int]]:
        """Micro-batches of sample indices (``train.micro_batch_tokens``). With expert
        parallelism every forward and backward holds the token dispatcher's all-to-alls, which
        every rank of the expert group must join: a rank with fewer micro-batches than a peer
        (shorter or fewer samples, an empty share) ends its plan with empty ones
        (:meth:`_idle_pass`)."""
        plan = micro_batches(lengths, self.config.train.micro_batch_tokens)
        if parallel.ep_size() > 1:
            n = torch.tensor([len(plan)], dtype=torch.long, device=self.device)
            dist.all_reduce(n, op=dist.ReduceOp.MAX, group=parallel.ep_group())
            plan += [[] for _ in range(int(n.item()) - len(plan))]
        return plan

    def _idle_pass(self, model: Any, hidden: int | None = None) -> None:
        """This rank's part of an expert group's micro-batch when it has none: the forward of
        one pad token, and under autograd a backward of zero (the dispatcher's all-to-alls run
        again backwards). Nothing reaches a log-prob, a loss or a metric; gradients gain 0."""
        ids = torch.full((1, 1), self.pad_id, dtype=torch.long, device=self.device)
        positions = torch.zeros((1, 1), dtype=torch.long, device=self.device)
        sp = self._stage_pass(model, hidden)
        if self.router_losses and torch.is_grad_enabled():  # the pad token adds no loss
            router_losses.set_share(0.0, self.device)
        out = sp.forward(ids, positions, causal_mask(1, self.device))
        if self.router_losses:
            router_losses.take_metrics(self.layout, self.mg)  # (not counted)
        if torch.is_grad_enabled():
            if out is not None:
                (out.float().sum() * 0.0).backward()
            sp.backward()

    def _stage_pass(self, model: Any, hidden: int | None = None) -> StagePass:
        return StagePass(self.stages, model, self.layout.hidden if hidden is None else hidden,
                         self.dtype)

    # -- training ----------------------------------------------------------------------------
    def prepare(self, batch: TrainBatch) -> None:
        """Tensors, ref/teacher/old log-probs and advantages for a step's batch."""
        if self.routing is not None:
            self._check_routes(batch)
        prepare_batch(self.config, batch, self.compute_log_probs)

    def _check_routes(self, batch: TrainBatch) -> None:
        shape = config_moe_shape(self.hf_config)
        assert shape is not None  # the routing exists: the model has experts
        check_batch_routes(batch, shape)

    def train_step(self, batch: TrainBatch, rollout_id: int) -> dict[str, float]:
        """All optimizer steps of one rollout; returns averaged metrics."""
        t0 = time.perf_counter()
        set_data_parallel_group(self.data_parallel_group)
        if len(batch) or self.data_parallel_size > 1:
            self.prepare(batch)
        metrics = rollout_optimizer_steps(self.manager, self.config, batch, rollout_id,
                                          self._optimizer_step, model=self.models,
                                          optimizer=self.optimizer, scheduler=self.scheduler,
                                          started=t0, health=health(self.device))
        if self.routing is not None:  # a collective: every rank counts its replayed choices
            agree = self.routing.agreement(self.device)
            if agree is not None:
                metrics["train/routing_replay_agreement"] = agree
        return metrics

    def _optimizer_step(self, mini: TrainBatch) -> dict[str, float]:
        self.optimizer.zero_grad(set_to_none=True)
        acc = Accumulation(len(mini), masked_tokens(mini.loss_masks), self.device)
        want_entropy_grad = self.config.algorithm.entropy_coef != 0
        for mb_idx in self._plan([int(len(t)) for t in mini.tokens]):
            if not mb_idx:  # expert parallelism: a peer still has a micro-batch
                self._idle_pass(self.model)
                continue
            mb = mini.select(mb_idx)
            mb_tokens = masked_tokens(mb.loss_masks)
            if self.device.type != "cpu":
                _to_device(mb, self.device)
            p = pack(mb.tokens, mb.response_lengths, self.pad_id, self.device)
            sp = self._stage_pass(self.model)
            # the replay spans the backward too: full recomputation routes again there
            pad = ({"padding_mask": router_losses.padding_mask(mb.tokens, p.ids.shape[1],
                                                               self.device)}
                   if self.router_losses else {})
            with self._replayed(mb.tokens, mb.routed_experts):
                logits = sp.forward(p.ids, p.positions, p.mask, **pad)
                if logits is not None:  # the last pipeline stage: the loss
                    lps, ents = from_logits(logits, p, self.config.rollout.temperature,
                                            self.layout.vocab, with_entropy=True,
                                            entropy_grad=want_entropy_grad,
                                            padded_vocab=self.layout.padded_vocab)
                    if ents is not None and not want_entropy_grad:
                        ents = [e.detach() for e in ents]
                    if mb.old_log_probs is None:
                        mb.old_log_probs = [lp.detach() for lp in lps]
                    loss, m, weighting = compute_loss(self.config, mb, lps, ents)
                    if self.router_losses:  # their gradients at the micro-batch's share
                        m.update(router_losses.take_metrics(self.layout, self.mg))
                        router_losses.set_share(mb_tokens / acc.total_tokens
                                                if weighting == "tokens"
                                                else len(mb) / acc.total_samples, self.device)
                    acc.backward(loss, m, weighting, len(mb), mb_tokens)
                sp.backward()
        metrics, grad_norm = acc.step(dict(self.model.named_parameters()), self.sharded_names,
                                      self.optimizer, self.config.train.grad_clip,
                                      self.stages, self.tied_copy, self.expert_names)
        metrics["train/grad_norm"] = grad_norm
        metrics.update(acc.skipped)
        metrics.setdefault(SKIPPED_STEPS, 0.0)
        if acc.applied:  # a skipped step leaves the schedule where it was
            self.scheduler.step()
        return metrics

    # -- weights and checkpoints -------------------------------------------------------------
    def export_weights(self) -> dict[str, torch.Tensor]:
        """The full policy in HF names and shapes; a collective over the TP group when TP > 1
        and over the expert-parallel group when EP > 1 (every rank gets the full dict)."""
        st = self.stages
        if parallel.tp_size() == 1:
            shards = {k: [v] for k, v in local_state(self.model).items()}
        else:
            shards = gather_shards(self.model, self.layout, st.rank, st.size,
                                   float(self.mg.export_bucket_mb))
        if parallel.ep_size() > 1:  # every expert under its global number
            shards = {k: v for k, v in shards.items() if not is_expert(k)}
            shards.update(gather_experts(self.model, self.layout))
        mine = to_hf(shards, self.layout, st.rank, st.size)
        if st.size == 1:
            return mine
        parts: list[Any] = [None] * st.size
        dist.all_gather_object(parts, {k: v.cpu() for k, v in mine.items()}, group=st.group)
        merged: dict[str, torch.Tensor] = {}
        for part in parts:
            merged.update(part)
        if self.layout.tied:  # one tensor, as transformers' state_dict() shares it
            merged["lm_head.weight"] = merged["model.embed_tokens.weight"]
        return merged

    def save(self, path: str) -> None:
        checkpoint.save(self, path)
        self.manager.hook.slime_trainer_save(config=self.config, path=path, rank=self.rank)

    def load(self, path: str) -> None:
        checkpoint.load(self, path)
        self.manager.hook.slime_trainer_load(config=self.config, path=path, rank=self.rank)


def _to_device(batch: TrainBatch, device: torch.device) -> None:
    from slime_hookspecs.batch import TENSOR_KEYS

    for key in TENSOR_KEYS:
        values = getattr(batch, key)
        if values and key != "tokens":
            setattr(batch, key, [v.to(device) if isinstance(v, torch.Tensor) else v
                                 for v in values])
