"""On-policy distillation (OPD): the teacher's log-probs of the student's own tokens.

As slime's ``--use-opd`` (Thinking Machines' on-policy distillation): for every response token
``a_t`` the student sampled, ``d_t = log pi_student(a_t | h_t) - log pi_teacher(a_t | h_t)`` is
a one-sample estimate of the reverse KL ``KL(pi_student || pi_teacher)`` at that prefix, and

    A_t <- A_t - opd.kl_coef * d_t

after the advantage estimator (whatever it is; with ``opd.task_reward = false`` the rewards
are zeroed first, so the estimator gives 0 and the signal is distillation alone). The student
log-probs are the trainer's detached log-probs of the policy that generated the batch
(``batch.old_log_probs``, computed before the first optimizer step), as slime's ``log_probs``.
Where ``algorithm.whiten_advantages`` whitens inside the estimator, the OPD term is added after
the whitening (slime adds it before its own normalisation).

Teacher log-probs (``batch.teacher_log_probs``) come from

* ``opd.mode = "trainer"`` (slime's ``megatron`` mode): a frozen teacher model in each trainer
  rank, loaded from ``opd.teacher_path`` (``slime_make_model(role="teacher")`` may supply it),
  computed like the reference model's log-probs;
* ``opd.mode = "engine"`` (slime's ``sglang`` mode): a rollout engine serving the teacher scores
  the token ids with no new tokens (its ``score_tokens`` method) in the rollout manager; the
  values travel in ``sample.train_metadata["teacher_log_probs"]`` into the batch.

Metric ``train/opd_reverse_kl``: the mean over samples of each sample's mean ``d_t`` over its
loss-masked tokens (slime's sum-of-sample-mean), measured on the batch before the update.
"""

from __future__ import annotations

import dataclasses
from typing import Any

TEACHER_KEY = "teacher_log_probs"  # Sample.train_metadata key (engine mode)


def opd_enabled(config: Any) -> bool:
    return "opd" in config and bool(config.opd.enabled) and config.train.loss != "sft"


def teacher_in_trainer(config: Any) -> bool:
    """Whether the trainer computes the teacher's log-probs (``opd.mode = "trainer"``)."""
    return opd_enabled(config) and config.opd.mode == "trainer"


def teacher_in_engine(config: Any) -> bool:
    return opd_enabled(config) and config.opd.mode == "engine"


def teacher_model_config(config: Any) -> Any:
    """``config.model`` pointing at the teacher (same dtype and remote-code setting)."""
    return dataclasses.replace(config.model, path=config.opd.teacher_path, init_config={})


def teacher_config(config: Any) -> Any:
    """A copy of ``config`` whose model is the teacher (to build a teacher engine); routing
    replay off (the teacher only scores tokens: nothing of its routing is replayed, and a
    dense teacher of an MoE student must not be asked for routers)."""
    from slime_core.config.model import Config

    sections = {name: config.section(name) for name in config.sections()}
    train = dataclasses.replace(config.train, routing_replay="off")
    return Config({**sections, "model": teacher_model_config(config), "train": train},
                  config.source, vars(config).get("_replaced"))


def zero_task_rewards(config: Any, batch: Any) -> None:
    """Pure distillation (``opd.task_reward = false``): the estimator sees rewards of 0."""
    if opd_enabled(config) and not config.opd.task_reward:
        batch.rewards = [0.0] * len(batch)


def apply_opd(config: Any, batch: Any) -> None:
    """Add ``-kl_coef * (student - teacher)`` to ``batch.advantages`` (see the module
    docstring); records ``train/opd_reverse_kl`` in ``batch.metadata["metrics"]``."""
    if not opd_enabled(config) or not len(batch):
        return
    import torch

    teacher, student = batch.teacher_log_probs, batch.old_log_probs
    if teacher is None:
        raise ValueError(
            f"opd.enabled with opd.mode={config.opd.mode!r}, but the batch has no "
            "teacher_log_probs (the trainer backend must compute them in trainer mode; the "
            "rollout engine's score_tokens in engine mode)")
    if student is None:
        raise ValueError("opd: the batch has no old_log_probs (the student's log-probs before "
                         "the update); the trainer backend must compute them first")
    coef = float(config.opd.kl_coef)
    advantages, per_sample = [], []
    for i, adv in enumerate(batch.advantages):
        s = student[i].detach().float()
        t = torch.as_tensor(teacher[i], dtype=torch.float32, device=s.device)
        d = s - t
        a = torch.as_tensor(adv, dtype=torch.float32, device=s.device)
        advantages.append((a.expand_as(d) if a.numel() == 1 else a) - coef * d)
        mask = torch.as_tensor(batch.loss_masks[i], dtype=torch.float32, device=s.device)
        n = float(mask.sum())
        if n > 0:
            per_sample.append(float((d * mask).sum()) / n)
    batch.advantages = advantages
    if per_sample:
        metrics = batch.metadata.setdefault("metrics", {})
        metrics["train/opd_reverse_kl"] = sum(per_sample) / len(per_sample)


def build_teacher_engine(manager: Any, config: Any) -> Any:
    """Engine mode: the teacher served by ``opd.engine`` (default ``rollout.engine``), built
    in the rollout manager's process; it must have ``score_tokens`` (the local engine has)."""
    from slime_core.runtime.accelerator import select_accelerator

    name = config.opd.engine or config.rollout.engine
    rec = manager.registries.rollout_engine.get(name)
    accelerator = select_accelerator(manager, config.run.accelerator).factory()
    engine = rec.factory(teacher_config(config), 0, accelerator)
    if not callable(getattr(engine, "score_tokens", None)):
        raise ValueError(
            f"opd.mode = 'engine': rollout engine {name!r} (plugin {rec.owner!r}) has no "
            "score_tokens(sequences, response_lengths, temperature) method; use opd.mode = "
            "'trainer' or an engine that scores token ids")
    return engine


async def score_with_teacher(rollouts: Any, engine: Any, groups: list[list[Any]]) -> None:
    """Engine mode: the teacher's log-probs of every sample's response tokens into
    ``sample.train_metadata["teacher_log_probs"]``."""
    samples = [s for g in groups for s in g]
    if not samples:
        return
    scores = await rollouts._on_caller(  # noqa: SLF001 - the rollout's engine-call thread
        engine.score_tokens, [list(s.tokens) for s in samples],
        [int(s.response_length) for s in samples], float(rollouts.config.rollout.temperature))
    for s, lps in zip(samples, scores, strict=True):
        if len(lps) != s.response_length:
            raise ValueError(f"opd: the teacher engine scored {len(lps)} tokens of sample "
                             f"{s.index}, whose response has {s.response_length}")
        s.train_metadata[TEACHER_KEY] = [float(x) for x in lps]
