"""The ``torch`` trainer backend: any ``AutoModelForCausalLM``, AdamW, warm-up and decay.

One instance is one rank. Log-probs use the rollout temperature (the engine's convention);
with one optimizer step per rollout the old policy equals the current one, so ``old_log_probs``
are the detached current log-probs and no extra forward pass is spent on them.

Mixture-of-experts models take the fused head too (``slime_core.api.fused_head_unsupported``). With ``train.routing_replay =
"rollout"`` the policy's forwards (log-probs and training, the old-actor snapshot's
too; not the reference's or a teacher's) route every token to ``TrainBatch.routed_experts`` (``slime_core.api.RoutingControl``),
checked against the model's shape first; ``train/routing_replay_agreement`` is the fraction of
replayed expert choices the trainer's routers would have made themselves.

``train.moe_aux_loss_coef`` / ``moe_z_loss_coef`` > 0 (an MoE model): every training
forward keeps the routers' logits (``slime_core.api.RouterCapture``) and adds
``coef x loss`` of the micro-batch's real tokens (padding excluded) to its policy loss, so
the losses take the micro-batch's share as the policy loss does; ``train/moe_aux_loss`` and
``train/moe_z_loss`` are the unweighted values. With routing replay the load term counts the
router's own top-k, not the replayed experts (as megatron-core does; docs/moe.md).
"""

from __future__ import annotations

import contextlib
import os
import random
import time
import warnings
from collections.abc import Mapping
from typing import Any, cast

import torch
from slime_core.api import (
    SKIPPED_STEPS,
    Accumulation,
    GraphCaptureOutOfMemory,
    GraphedDecoder,
    RouterCapture,
    RoutingControl,
    TrainingHealth,
    check_batch_routes,
    check_finite_weights,
    compute_loss,
    config_moe_shape,
    distinct,
    dp_active,
    flat_cat,
    fuse_rms_norms,
    full_masks_supported,
    fused_head_unsupported,
    get_manager,
    graph_budget,
    graphs_settings_conflict,
    load_causal_lm,
    load_tokenizer,
    lr_schedule,
    make_adamw,
    masked_tokens,
    micro_batches,
    needs_ref,
    optimizer_step_bytes,
    prepare_batch,
    prompt_groups,
    ref_model_config,
    ref_update_due,
    resolve_dtype,
    response_log_probs,
    rollout_optimizer_steps,
    set_data_parallel_group,
    shared_micro_batches,
    split_samples,
    teacher_model_config,
    trainable_bytes,
    untie,
)
from slime_hookspecs import Config, TrainBatch
from slime_hookspecs.batch import TENSOR_KEYS

from slime_std.trainer.memory import memory_metrics
from slime_std.trainer.old_actor import OldActor, synced_at_start

REF_FILE = "ref_model.safetensors"  # a checkpoint's reference, when train.ref_update_interval moves it


class TorchTrainer:
    """One data-parallel rank of the built-in trainer."""

    def __init__(self, config: Config, rank: int = 0, world_size: int = 1,
                 accelerator: Any = None) -> None:
        self.config = config
        self.rank, self.world_size = rank, world_size
        self.data_parallel = dp_active(world_size)
        #: the group data-parallel reductions use: the default one (every rank is a replica)
        self.data_parallel_group: Any = None
        set_data_parallel_group(self.data_parallel_group)
        self.accelerator = accelerator
        self.device = accelerator.device(0) if accelerator is not None else torch.device("cpu")
        self.dtype = resolve_dtype(config.model.dtype, self.device)
        self.pm = get_manager()
        torch.manual_seed(config.run.seed)
        self.model = self._build("actor")
        self.model.train()
        # train.routing_replay: the policy's routers follow the rollout's recorded experts
        self.routing = (RoutingControl(self.model) if config.train.routing_replay == "rollout"
                        else None)
        # train.moe_aux_loss_coef / moe_z_loss_coef: the routers' logits of training forwards
        self.router_capture = (RouterCapture(self.model) if config.train.moe_aux_loss_coef
                               or config.train.moe_z_loss_coef else None)
        if config.train.gradient_checkpointing and hasattr(self.model, "gradient_checkpointing_enable"):
            cast(Any, self.model).gradient_checkpointing_enable()
        # the response log-probs' head step (logprob_head) for the models that allow it
        self.fused_head = bool(config.train.fused_head) and fused_head_unsupported(self.model) is None
        # `is True`: an unresolved "auto" (a config that did not go through slime_configure,
        # where slime_std/fast_path.py resolves it) stays eager
        # with train.cuda_graphs, the graphs' buckets compile the decoder at their own shapes
        # (_graphed_decoder); it compiles in place there where the graphs do not apply
        if config.train.compile is True and config.train.cuda_graphs is not True:
            self._compile_in_place()
        self.ref_model: torch.nn.Module | None = None
        self.teacher_model: torch.nn.Module | None = None  # [opd] mode = "trainer"
        self.old_actor = OldActor(self.model) if config.train.keep_old_actor else None
        tok = load_tokenizer(config.model, shared=True)  # its pad id only
        self.pad_id = int(tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0))
        t = config.train
        # only what trains: a frozen parameter (a LoRA run's base) gets no AdamW state and
        # no fp32 master copy
        self.optimizer = make_adamw(
            [p for p in self.model.parameters() if p.requires_grad], t.master_weights, lr=t.lr, betas=tuple(t.adam_betas),
            eps=t.adam_eps, weight_decay=t.weight_decay,
            # one kernel over every parameter instead of a dozen multi-tensor passes, where
            # the accelerator says torch has it
            fused=bool(getattr(accelerator, "fused_optimizer", False)),
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_schedule(config))
        self.pm.hook.slime_trainer_init(config=config, model=self.model)
        # a plugin may have set weights (even through .data, which the optimizer's version
        # check does not see): its copies of the weights read them again
        reread = getattr(self.optimizer, "reread", None)
        if reread is not None:
            reread()
        # after the plugins' slime_trainer_init: a hook added later would not run on replay
        self.graphed = self._graphed_decoder()

    # -- models --------------------------------------------------------------------------
    def _build(self, role: str) -> torch.nn.Module:
        model = self.pm.hook.slime_make_model(config=self.config, role=role)
        if model is None:
            model_cfg = ref_model_config(self.config) if role == "ref" else self.config.model
            model = load_causal_lm(model_cfg, self.device, self.dtype, role=role,
                                   seed=self.config.run.seed)
        if self.config.train.fused_norm:
            fuse_rms_norms(model)
        return model.to(self.device)

    def _compile_in_place(self) -> None:
        """``train.compile`` without graphs: in place (Module.compile), so parameter names,
        checkpoints and weight export are unchanged; dynamic shapes, since micro-batch shapes
        change every step. With the fused head the decoder is what the trainer calls."""
        cast(Any, self.model.model if self.fused_head else self.model).compile(dynamic=True)

    def _graphed_decoder(self) -> GraphedDecoder | None:
        """``train.cuda_graphs``: the training forward's decoder replayed from CUDA graphs.
        Settings it cannot combine with are errors; a model it does not apply to (no fused
        head, or a mixture of experts, whose routing syncs with the host) trains eagerly, as
        ``train.fused_head`` does for such models, and says so."""
        t = self.config.train
        if t.cuda_graphs is not True:  # (an unresolved "auto" stays off, as train.compile)
            return None
        why = graphs_settings_conflict(t)
        if why is None and self.device.type != "cuda":
            why = f"needs a CUDA device (the trainer is on {self.device.type})"
        if why:
            raise ValueError(f"train.cuda_graphs {why}")
        eager = fused_head_unsupported(self.model)
        # (the built model's own config: no second read of model.path, and a model a plugin
        # built is seen too)
        if eager is None and config_moe_shape(cast(Any, self.model).config) is not None:
            eager = "a mixture-of-experts model (its routing syncs with the host)"
        decoder = cast(torch.nn.Module, cast(Any, self.model).model)
        buckets = 0
        if eager is None:
            # the device module's own properties (torch.cuda, ...), as memory.py reads its peak
            total = int(getattr(torch, self.device.type).get_device_properties(
                self.device).total_memory)
            buckets = graph_budget(decoder, total)
            if buckets == 0:
                eager = (f"one captured shape would keep {trainable_bytes(decoder) / 2**30:.1f} "
                         f"GB of gradient buffers, over 1/8 of the device's {total / 2**30:.0f} GB")
        if eager is not None:
            warnings.warn(f"train.cuda_graphs: not for this model ({eager}); the training "
                          "forward runs eagerly", stacklevel=2)
            if t.compile is True:
                self._compile_in_place()
            return None
        # train.compile: each bucket's decoder compiled at its fixed shapes, then captured
        compiler = _compile_static if t.compile is True else None
        # the pool keeps its activations after the backward, so a capture must leave what the
        # optimizer's step allocates free (its temporaries and fp32 gradient copies; make_adamw
        # made the moment buffers before any capture)
        return GraphedDecoder(decoder, self.pad_id, max_graphs=buckets, compiler=compiler,
                              reserve=lambda: optimizer_step_bytes(self.optimizer))

    def _ref(self) -> torch.nn.Module:
        """The frozen reference: ``model.ref_path``, else the initial policy rebuilt from
        ``model.path`` / ``init_config`` (``init_config`` models are seeded, so they rebuild
        identically); ``train.ref_update_interval`` replaces its weights by the policy's."""
        if self.ref_model is None:
            torch_state = torch.get_rng_state()
            self.ref_model = self._build("ref")
            torch.set_rng_state(torch_state)  # building ref must not shift the sampling stream
            self.ref_model.eval().requires_grad_(False)
        return self.ref_model

    # -- log-probs -------------------------------------------------------------------------
    def _teacher(self) -> torch.nn.Module:
        """The frozen OPD teacher from ``opd.teacher_path`` (or ``slime_make_model(role=
        "teacher")``), built on first use."""
        if self.teacher_model is None:
            model = self.pm.hook.slime_make_model(config=self.config, role="teacher")
            if model is None:
                model = load_causal_lm(teacher_model_config(self.config), self.device,
                                       self.dtype, role="teacher")
            self.teacher_model = model.to(self.device).eval().requires_grad_(False)
        return self.teacher_model

    def compute_log_probs(self, batch: TrainBatch, role: str) -> list[torch.Tensor]:
        if role == "old_actor":
            if self.old_actor is None:
                raise ValueError("old_actor log-probs need train.keep_old_actor = true")
            return self.old_actor.log_probs(
                batch, lambda model, idx: self._score(model, batch, idx, role))
        model = {"ref": self._ref, "teacher": self._teacher}.get(role, lambda: self.model)()
        return self._score(model, batch, list(range(len(batch))), role)

    def _score(self, model: torch.nn.Module, batch: TrainBatch, idx: list[int],
               role: str) -> list[torch.Tensor]:
        """Response log-probs of the samples ``idx`` of ``batch`` under ``model``."""
        self.pm.hook.slime_before_log_prob(config=self.config, model=model, role=role)
        tokens = [batch.tokens[i] for i in idx]
        lengths = [batch.response_lengths[i] for i in idx]
        out: list[torch.Tensor | None] = [None] * len(idx)
        options = self._head_options(model)
        # the policy and its old-actor snapshot (a deep copy: the routers' hooks came with
        # it) replay; the reference and a teacher route on their own
        routes = batch.routed_experts if role in ("actor", "old_actor") else None
        with torch.no_grad():
            for mb in self._plan(tokens, lengths, options["shared_prefix"]):
                lps, _ = response_log_probs(
                    model, [tokens[i] for i in mb], [lengths[i] for i in mb],
                    self.config.rollout.temperature, self.pad_id, **options,
                    **self._replay([idx[i] for i in mb], routes),
                )
                for i, lp in zip(mb, lps, strict=True):
                    out[i] = lp.float().cpu()
        return out  # type: ignore[return-value]

    def _replay(self, idx: list[int], routes: list[Any] | None) -> dict[str, Any]:
        """``response_log_probs``' routing arguments for the samples ``idx`` of a batch whose
        records are ``routes`` (none without train.routing_replay or without records)."""
        if self.routing is None or routes is None:
            return {}
        return {"routing": self.routing, "routes": [routes[i] for i in idx]}

    def _head_options(self, model: torch.nn.Module) -> dict[str, Any]:
        t = self.config.train
        fused = self.fused_head and (model is self.model or fused_head_unsupported(model) is None)
        # The two-pass forward needs the decoder's key/value cache, which transformers turns
        # off under gradient checkpointing. Under train.compile it compiles a second graph
        # (the call with a cache; same values on the CPU, 116 s of compilation for a 2-layer
        # model) whose cost on a GPU run was not measured, so the two are not combined.
        compiled = t.compile is True
        # (routing replay lays its ids out over the right-padded batch: one pass)
        shared = (fused and t.shared_prefix and not compiled and not t.gradient_checkpointing
                  and self.routing is None)
        return {"fused_head": fused, "compile_head": fused and compiled,
                "shared_prefix": shared, "head_kernel": str(t.head_kernel)}

    def _plan(self, tokens: list[torch.Tensor], response_lengths: list[int],
              shared: bool) -> list[list[int]]:
        """Micro-batches of sample indices; with the shared-prefix forward, the plan that
        computes fewer token rows (``shared_micro_batches``). Under ``train.cuda_graphs`` the
        row counts are cut at the graphs' row bucket, which pads them up to it."""
        lengths = [int(len(t)) for t in tokens]
        budget = self.config.train.micro_batch_tokens
        rows = (self.graphed.row_multiple
                if self.graphed is not None and self.graphed.given_up is None else 1)
        if shared and (groups := prompt_groups(tokens, response_lengths)) is not None:
            return shared_micro_batches(lengths, [int(r) for r in response_lengths], groups,
                                        budget, rows)
        return micro_batches(lengths, budget, rows)

    # -- training --------------------------------------------------------------------------
    def prepare(self, batch: TrainBatch) -> None:
        """Tensors, ref/teacher/old log-probs and advantages for a step's batch."""
        if self.routing is not None:
            self._check_routes(batch)
        prepare_batch(self.config, batch, self.compute_log_probs)

    def _check_routes(self, batch: TrainBatch) -> None:
        assert self.routing is not None
        check_batch_routes(batch, self.routing.shape)

    def train_step(self, batch: TrainBatch, rollout_id: int) -> dict[str, float]:
        """All optimizer steps of one rollout; returns averaged metrics."""
        t0 = time.perf_counter()
        if self.old_actor is not None and synced_at_start(self.config, rollout_id):
            self.old_actor.snapshot(rollout_id)  # the weights the engines now generate with
        set_data_parallel_group(self.data_parallel_group)
        # A data-parallel rank may get an empty share (fewer groups than ranks); it still
        # prepares it, so estimators that sum batch statistics over ranks see every rank.
        if len(batch) or self.data_parallel:
            self.prepare(batch)
        metrics = rollout_optimizer_steps(self.pm, self.config, batch, rollout_id,
                                          self._optimizer_step, model=self.model,
                                          optimizer=self.optimizer, scheduler=self.scheduler,
                                          started=t0, health=self._health())
        if self.routing is not None and (agree := self.routing.agreement()) is not None:
            metrics["train/routing_replay_agreement"] = agree
        if self.old_actor is not None:
            metrics["train/old_actor_missing"] = float(self.old_actor.missing)
        metrics.update(memory_metrics(self.optimizer, self.device))
        if ref_update_due(self.config, rollout_id) and needs_ref(self.config):
            self._ref().load_state_dict(self.model.state_dict())
            metrics["train/ref_updated"] = 1.0
        return metrics

    def _health(self) -> TrainingHealth:
        """The non-finite checks of this rank, agreed over its data-parallel group."""
        return TrainingHealth(self.device, self.data_parallel_group, self.data_parallel)

    def _optimizer_step(self, mini: TrainBatch) -> dict[str, float]:
        acc = Accumulation(len(mini), masked_tokens(mini.loss_masks),
                           self.data_parallel, self.device, self.data_parallel_group)
        try:
            return self._accumulate_and_step(mini, acc)
        except GraphCaptureOutOfMemory as e:
            # Nothing was applied yet (a capture is a micro-batch's first forward): redo the
            # step without graphs, in the form train.cuda_graphs = false has (the shared-prefix
            # plan: the one-pass forward that did not fit may not fit eagerly either)
            why = str(e)
        self.graphed = None
        warnings.warn(f"{why}; this run trains without them from here (this optimizer step "
                      "is redone)", stacklevel=2)
        return self._accumulate_and_step(mini, acc.restarted())

    def _accumulate_and_step(self, mini: TrainBatch, acc: Accumulation) -> dict[str, float]:
        if self.graphed is None:
            self.optimizer.zero_grad(set_to_none=True)
        else:  # replayed backwards add into allocated gradients, zeroed in place
            self.graphed.zero_grads(self.model)
        want_entropy_grad = self.config.algorithm.entropy_coef != 0
        options = self._head_options(self.model)
        # router losses read the right-padded batch's routers (one pass, as replay does);
        # the graphs replay the two passes where they can build the attention masks whole
        options["shared_prefix"] = (options["shared_prefix"] and self.router_capture is None
                                    and (self.graphed is None or full_masks_supported(
                                        self.graphed.decoder) is None))
        for mb_idx in self._plan(mini.tokens, mini.response_lengths, options["shared_prefix"]):
            self._micro_batch(mini.select(mb_idx), acc, options, want_entropy_grad)
        metrics, grad_norm = acc.step(self.model, self.optimizer, self.config.train.grad_clip)
        metrics["train/grad_norm"] = grad_norm
        metrics.update(acc.skipped)
        metrics.setdefault(SKIPPED_STEPS, 0.0)
        if acc.applied:  # a skipped step leaves the schedule where it was (as Megatron)
            self.scheduler.step()
        return metrics

    def _micro_batch(self, mb: TrainBatch, acc: Accumulation, options: dict[str, Any],
                     want_entropy_grad: bool) -> None:
        """One micro-batch's forward and backward into the accumulated gradients. Its own
        method so that its loss, log-probs and their autograd graph are gone before the next
        micro-batch's forward: a graph kept alive keeps the parameters' gradient accumulators,
        which the eager head created on the default stream, and a training-graph capture of a
        new bucket reusing them would order the default stream after the capture (a CUDA
        error, found on the 0.5B anchor on an H100)."""
        # summed on the host before the move: no device sync per sample
        mb_tokens = masked_tokens(mb.loss_masks)
        if self.device.type != "cpu":  # batch tensors stay on the host until needed
            _to_device(mb, self.device)
        with self._capturing():
            lps, ents = response_log_probs(
                self.model, mb.tokens, mb.response_lengths, self.config.rollout.temperature,
                self.pad_id, with_entropy=True, entropy_grad=want_entropy_grad, **options,
                **self._replay(list(range(len(mb))), mb.routed_experts),
                decoder=self.graphed,
            )
        if ents is not None and not want_entropy_grad:
            ents = _detached(ents)
        if mb.old_log_probs is None:
            mb.old_log_probs = _detached(lps)
        loss, m, weighting = compute_loss(self.config, mb, lps, ents)
        if self.router_capture is not None:
            loss = loss + self._router_losses(mb.tokens, m)
        acc.backward(loss, m, weighting, len(mb), mb_tokens)

    def _capturing(self) -> Any:
        return (self.router_capture.capturing() if self.router_capture is not None
                else contextlib.nullcontext())

    def _router_losses(self, tokens: list[torch.Tensor], metrics: dict[str, float]) -> torch.Tensor:
        """``coef x loss`` of the router losses of the micro-batch just run (its right-padded
        rows: the real tokens are each row's first ``len(tokens[i])``); their values go to
        ``metrics``."""
        assert self.router_capture is not None
        lengths = torch.tensor([int(len(t)) for t in tokens])
        mask = torch.arange(int(lengths.max())).unsqueeze(0) < lengths.unsqueeze(1)
        aux, z = self.router_capture.losses(mask.to(self.device))
        metrics["train/moe_aux_loss"] = float(aux.detach())
        metrics["train/moe_z_loss"] = float(z.detach())
        t = self.config.train
        return t.moe_aux_loss_coef * aux + t.moe_z_loss_coef * z

    # -- weights and checkpoints -----------------------------------------------------------
    def export_weights(self) -> dict[str, torch.Tensor]:
        """What the engines get: ``slime_trainer_weights`` (e.g. LoRA adapters only), else the
        whole state dict."""
        chosen = self.pm.hook.slime_trainer_weights(config=self.config, model=self.model)
        state = self.model.state_dict() if chosen is None else chosen
        return {k: v.detach() for k, v in state.items()}

    def save(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        if self.rank == 0:  # data-parallel ranks hold identical replicas: rank 0 writes them
            _save_weights(self.export_weights(), os.path.join(path, "model.safetensors"))
            if self.config.train.ref_update_interval and self.ref_model is not None:
                # a moved reference is no longer what a resumed run would rebuild
                _save_weights(self.ref_model.state_dict(), os.path.join(path, REF_FILE))
            torch.save({
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "python_rng": random.getstate(),
                # the device generators (dropout, sampling on the device), from the record
                "device_rng": (self.accelerator.get_rng_state()
                               if self.accelerator is not None else None),
            }, os.path.join(path, "trainer_state.pt"))
        self.pm.hook.slime_trainer_save(config=self.config, path=path, rank=self.rank)

    def load(self, path: str) -> None:
        _load_weights(self.model, os.path.join(path, "model.safetensors"),
                      self.export_weights())
        if os.path.isfile(os.path.join(path, REF_FILE)):
            ref = self._ref()
            _load_weights(ref, os.path.join(path, REF_FILE), ref.state_dict())
        extra = torch.load(os.path.join(path, "trainer_state.pt"), weights_only=False)
        self.optimizer.load_state_dict(extra["optimizer"])
        self.scheduler.load_state_dict(extra["scheduler"])
        torch.set_rng_state(extra["torch_rng"])
        random.setstate(extra["python_rng"])
        self._load_device_rng(path, extra.get("device_rng"))
        self.pm.hook.slime_trainer_load(config=self.config, path=path, rank=self.rank)

    def _load_device_rng(self, path: str, state: Any) -> None:
        """Restore the device generators saved with the checkpoint, when this run has the same
        kind of device (a checkpoint moved between hardware resumes with fresh device RNG)."""
        if state is None or self.accelerator is None:
            return
        try:
            self.accelerator.set_rng_state(state)
        except (RuntimeError, ValueError, TypeError, IndexError) as exc:
            warnings.warn(f"checkpoint {path}: device RNG state not restored ({exc}); the run "
                          "continues with this process's device generators", stacklevel=2)


def _compile_static(module: torch.nn.Module) -> torch.nn.Module:
    """A graph bucket's module compiled for its one shape (no dynamic-shape guards or
    symbolic sizes: inductor specialises every kernel to the bucket)."""
    return cast(torch.nn.Module, torch.compile(module, dynamic=False))


def _to_device(batch: TrainBatch, device: torch.device) -> None:
    """Move a micro-batch's per-sample tensors (advantages, masks, log-probs...) to ``device``.

    One packed copy per key instead of one per sample: a copy from pageable host memory waits
    for the device queue to drain, so per-sample copies issued after the previous micro-batch's
    backward stalled the GPU once per sample (about 1,300 stalls a step on the anchor workload).
    """
    for key in TENSOR_KEYS:
        values = getattr(batch, key)
        if not values or key == "tokens":  # read on the host: response_log_probs pads them there
            continue
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        if len(tensors) != len(values) or len({t.dtype for t in tensors}) != 1 \
                or any(t.dim() != 1 or t.device.type != "cpu" for t in tensors):
            setattr(batch, key, [v.to(device) if isinstance(v, torch.Tensor) else v
                                 for v in values])
            continue
        packed = flat_cat(tensors).to(device)
        setattr(batch, key, split_samples(packed, [int(t.numel()) for t in tensors]))


def _detached(values: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per-sample tensors detached: one operator for the views of one packed tensor."""
    if not any(v.requires_grad for v in values):
        return values
    return split_samples(flat_cat(values).detach(), [int(v.numel()) for v in values])


def _save_weights(tensors: dict[str, torch.Tensor], file: str) -> None:
    """A model's tensors as one safetensors file. A tensor under several names (a tied output
    head) is written once, under its first name, as transformers writes it: loading fills the
    others through the tie (:func:`_load_weights`)."""
    from safetensors.torch import save_file

    state = {k: v.detach().contiguous().cpu() for k, v in distinct(tensors).items()}
    check_finite_weights(state.items(), file)
    save_file(untie(state), file)  # views of one storage that distinct keeps still share it


def _load_weights(module: torch.nn.Module, file: str, expected: Mapping[str, Any]) -> None:
    """Load ``file`` (:func:`_save_weights`) into ``module``. Each name of ``expected`` (what
    the save wrote: the trainer's weights, a LoRA run's adapters) must be in the file or share
    its tensor with a name that is (a tied head). A name the module does not have, or one the
    file lacks, is refused naming the file: a checkpoint of another model."""
    from safetensors.torch import load_file

    state = load_file(file)
    own = module.state_dict()
    # checked before anything is copied: a refused checkpoint leaves the module as it was, for
    # the resume's fallback to the previous one
    unexpected = [k for k in state if k not in own]
    if unexpected:
        raise ValueError(f"checkpoint {file} has tensors this model does not: {unexpected[:5]}")
    present = {k: own[k] for k in state}
    absent = {k: own[k] for k in expected if k not in state}
    # distinct keeps each tensor's first name: an absent name that shares a present one's
    # tensor (the tied head) drops out, what is left the file truly lacks
    lacking = [k for k in distinct({**present, **absent}) if k not in state]
    if lacking:
        raise ValueError(f"checkpoint {file} lacks {len(lacking)} of this model's tensors "
                         f"(e.g. {lacking[:5]}): it was written for another model")
    module.load_state_dict(state, strict=False)  # the names it lacks are the tied or the frozen

