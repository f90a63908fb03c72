"""Typed records returned by the registration hooks (``slime_register_*``).

A record names one thing a plugin offers (an engine, a loss, a tool ...) and how to build or
call it. The core collects records into registries keyed by ``name``: a duplicate name fails
naming both owners, an unknown name fails listing the valid choices. ``owner`` is filled in by
the core with the registering plugin's name.

``probe`` is an availability check that must be cheap and must not raise: it returns ``None``
when the record can be used here, or a one-line reason (``"torch_npu is not installed"``).
Records whose probe returns a reason are listed as ``unavailable: <reason>`` and a run that
asks for one fails with that reason.

**One factory convention for every record type**: ``factory`` is a *builder*. The core calls
``factory(config, ...)`` (the run's config first, then the context the built object needs: an
engine index, a rank, a data split, a batch's lengths and masks ...) when it builds the
component that uses the record, and afterwards calls only what the factory returned. No
record's factory is itself the per-call function: a policy loss is
``factory(config) -> loss`` and then ``loss(batch, log_probs)``, a filter is
``factory(config) -> keep`` and then ``keep(group)``. Each record type's docstring states the
factory's arguments and how the built object is called.

**Registration where the thing is defined**: :class:`Records` collects a plugin module's
records from decorators on their factories and provides the ``slime_register_*`` hook of each
record type (every record type names its hook in ``hook``)::

    records = Records()

    @records.register(PolicyLossRecord, "my_loss", summary="REINFORCE on the advantages")
    def my_loss(config):
        def loss(batch, log_probs):
            return [-a * lp for a, lp in zip(batch.advantages, log_probs)], {}
        return loss

    slime_register_policy_losses = records.hook(PolicyLossRecord)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from slime_hookspecs.markers import hookimpl


@dataclass
class Record:
    """Common fields of every record."""

    kind: ClassVar[str] = "record"
    hook: ClassVar[str] = ""  # the slime_register_* hook that returns records of this type

    name: str  # what a config names it by (unique per record type)
    factory: Callable[..., Any]  # the builder: factory(config, ...) -> the thing (see the type)
    summary: str = ""  # one line for core plugins info
    probe: Callable[[], str | None] | None = None  # None: usable here, else why not
    owner: str | None = None  # the registering plugin, filled in by the core
    extra: dict[str, Any] = field(default_factory=dict)  # type-specific options (e.g. weighting)
    # the third-party distribution it runs on ("megatron-core", "vllm"): ``core plugins`` shows
    # its installed version next to the plugin, so a bug report says which one ran
    library: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"{type(self).__name__} needs a non-empty string name")
        if not callable(self.factory):
            raise TypeError(f"{type(self).__name__} {self.name!r}: factory is not callable")

    def unavailable_reason(self) -> str | None:
        """The probe's reason, or ``None``; a probe that raises is reported, not propagated."""
        if self.probe is None:
            return None
        try:
            return self.probe()
        except Exception as exc:  # noqa: BLE001 - a probe must never crash a listing
            return f"probe raised {type(exc).__name__}: {exc}"


@dataclass
class RolloutEngineRecord(Record):
    """``factory(config, engine_index, accelerator) -> RolloutEngine`` (one per engine).

    Example::

        @records.register(RolloutEngineRecord, "echo", summary="answers with the prompt")
        def echo_engine(config, engine_index, accelerator):
            return EchoEngine(config)  # implements slime_hookspecs.RolloutEngine

    ``routing_replay``: the engine records the experts a mixture-of-experts model routed each
    token to (``GenerateOutput.routed_experts``) when ``train.routing_replay = "rollout"``; a
    run asking for replay with an engine that does not fails before any model loads.

    ``lora_adapters``: the engine applies weight syncs that carry only a LoRA adapter (what
    ``slime_trainer_weights`` chose), through ``slime_engine_weights`` (merged into its own
    weights, the ``local`` engine) or ``slime_engine_adapter`` (served as an adapter, the
    ``vllm`` engine); a LoRA plugin refuses other engines before any model loads.
    """

    kind: ClassVar[str] = "rollout_engine"
    hook: ClassVar[str] = "slime_register_rollout_engines"
    routing_replay: bool = False  # records GenerateOutput.routed_experts (MoE models)
    lora_adapters: bool = False  # applies adapter-only weight syncs (LoRA runs)


@dataclass
class TrainerBackendRecord(Record):
    """``factory(config, rank, world_size, accelerator) -> Trainer`` (one per trainer rank).

    Example::

        @records.register(TrainerBackendRecord, "jax", summary="the policy in JAX")
        def jax_trainer(config, rank, world_size, accelerator):
            return JaxTrainer(config, rank, world_size)  # implements slime_hookspecs.Trainer

    ``critic_factory`` (optional): ``critic_factory(config, model, spec) -> CriticModel``, a
    value model with its optimizer for algorithms that train a critic (slime_ppo), built the
    way this backend builds its policy (same device, dtype and sharding). Called in the
    trainer rank's process, from ``slime_trainer_init`` (``model`` is what that hook
    received, the backend's process groups already exist), with a
    :class:`~slime_hookspecs.protocols.CriticSpec`; it may ask
    ``slime_make_model(config, role="critic")`` first. ``None``: the backend offers no
    critic, and a run that needs one fails naming the backend.

    ``routing_replay``: the backend's policy forward routes every token of a
    mixture-of-experts model to ``TrainBatch.routed_experts`` when ``train.routing_replay =
    "rollout"``; a run asking for replay with a backend that cannot fails before any model
    loads.

    ``router_losses``: the backend adds ``train.moe_aux_loss_coef`` x the router
    load-balancing loss and ``train.moe_z_loss_coef`` x the router z-loss to the policy loss
    and logs ``train/moe_aux_loss`` / ``train/moe_z_loss``; a run with a non-zero coefficient
    and a backend without it fails before any model loads.
    """

    kind: ClassVar[str] = "trainer_backend"
    hook: ClassVar[str] = "slime_register_trainer_backends"
    critic_factory: Callable[..., Any] | None = None  # (config, model, CriticSpec) -> CriticModel
    routing_replay: bool = False  # replays TrainBatch.routed_experts (MoE models)
    router_losses: bool = False  # adds the MoE router losses (train.moe_*_loss_coef)


@dataclass
class AdvantageEstimatorRecord(Record):
    """``factory(config) -> estimate``; ``estimate(batch) -> (advantages, returns)``: per-sample
    1-D lists (``returns`` may be ``None``: then the advantages).

    Built and called once per training step, when no ``slime_compute_advantages``
    implementation answered. ``needs_ref``: the trainer computes the reference log-probs
    (``batch.ref_log_probs``) before calling it. An estimator that needs more (a critic's
    values) computes it itself: ``batch.values`` is set only when a plugin set it. Under data
    parallelism each rank calls it on its share (possibly empty), as for
    ``slime_compute_advantages``.

    Example (each token gets its sample's reward)::

        @records.register(AdvantageEstimatorRecord, "reward_to_go", summary="r on every token")
        def reward_to_go(config):
            def estimate(batch):
                adv = [torch.full(m.shape, float(r)) for r, m in zip(batch.rewards, batch.loss_masks)]
                return adv, adv
            return estimate
    """

    kind: ClassVar[str] = "advantage_estimator"
    hook: ClassVar[str] = "slime_register_advantage_estimators"
    needs_ref: bool = False  # the trainer computes batch.ref_log_probs before the estimator


@dataclass
class PolicyLossRecord(Record):
    """``factory(config) -> loss``; ``loss(batch, log_probs) -> (pg_losses, metrics)`` on one
    micro-batch.

    ``log_probs``: the current policy's per-sample response log-probs (1-D tensors with
    grad); ``batch``: the micro-batch (``advantages``, ``old_log_probs``, ``loss_masks``, ...).
    ``pg_losses``: one **per-token** loss tensor per sample, *not* reduced and *not* masked:
    the core then applies the mismatch correction (``algorithm.is_correction``), multiplies by
    the loss masks and reduces with the loss reducer; ``metrics``: ``{"train/<name>": float}``.
    Called when no ``slime_loss`` implementation answered and ``train.loss = "policy"``.

    Example (REINFORCE on the advantages)::

        @records.register(PolicyLossRecord, "reinforce", summary="-A log pi")
        def reinforce(config):
            def loss(batch, log_probs):
                pg = [-a * lp for a, lp in zip(batch.advantages, log_probs)]
                return pg, {"train/pg_mean": float(sum(p.detach().sum() for p in pg))}
            return loss
    """

    kind: ClassVar[str] = "policy_loss"
    hook: ClassVar[str] = "slime_register_policy_losses"


@dataclass
class KLEstimatorRecord(Record):
    """``factory(config) -> kl``; ``kl(log_probs, ref_log_probs) -> per-token KL`` (one tensor
    of the same shape, for one sample).

    Example::

        @records.register(KLEstimatorRecord, "abs", summary="|log pi - log pi_ref|")
        def abs_kl(config):
            return lambda log_probs, ref_log_probs: (log_probs - ref_log_probs).abs()
    """

    kind: ClassVar[str] = "kl_estimator"
    hook: ClassVar[str] = "slime_register_kl_estimators"


@dataclass
class ISCorrectionRecord(Record):
    """``factory(config) -> correct``; ``correct(pg_loss, train_log_probs, rollout_log_probs,
    loss_masks) -> (pg_loss, loss_masks, metrics)``: per-sample lists in and out, as
    ``slime_is_correction``.

    Example (token weights exp(train - rollout), capped at ``algorithm.is_kwargs.cap``)::

        @records.register(ISCorrectionRecord, "capped_is", summary="min(ratio, cap)")
        def capped_is(config):
            cap = config.algorithm.is_kwargs.get("cap", 2.0)
            def correct(pg_loss, train_log_probs, rollout_log_probs, loss_masks):
                w = [torch.exp(t - r).clamp(max=cap).detach()
                     for t, r in zip(train_log_probs, rollout_log_probs)]
                return [p * x for p, x in zip(pg_loss, w)], loss_masks, {}
            return correct
    """

    kind: ClassVar[str] = "is_correction"
    hook: ClassVar[str] = "slime_register_is_corrections"


@dataclass
class LossReducerRecord(Record):
    """``factory(config, response_lengths, loss_masks) -> reducer``, built once per batch;
    ``reducer(list_of_per_token_losses) -> scalar``.

    ``extra["weighting"]``: ``"tokens"`` when the reducer is a token mean (micro-batches are
    then weighted by their share of loss-masked tokens), else ``"samples"``.

    Example (sum over every masked token of the batch)::

        @records.register(LossReducerRecord, "token_sum", summary="sum of masked tokens",
                          extra={"weighting": "tokens"})
        def token_sum(config, response_lengths, loss_masks):
            def reduce(losses):  # a list of [T_i] tensors or one packed [sum T_i] tensor
                parts = losses.split(response_lengths) if hasattr(losses, "split") else losses
                return sum((x * m).sum() for x, m in zip(parts, loss_masks))
            return reduce
    """

    kind: ClassVar[str] = "loss_reducer"
    hook: ClassVar[str] = "slime_register_loss_reducers"


@dataclass
class RewardFunctionRecord(Record):
    """``factory(config) -> reward``; ``reward(sample) -> float | dict`` (may be async).

    With ``group = True`` the built callable takes the whole group: ``reward(samples) -> list``.

    ``extra["processes"] = True`` (per-sample records only) promises that the built callable
    is picklable (a module-level function or a ``functools.partial`` of one) and pure: it
    reads the sample and returns the reward, changes nothing and needs no state of the
    process that built it. With ``rollout.reward_processes > 0`` such a reward runs in worker
    processes, on copies of the samples; without the promise it runs on the rollout's thread.

    Example::

        @records.register(RewardFunctionRecord, "says_answer", summary="1 if 'Answer:' appears")
        def says_answer(config):
            return lambda sample: float("Answer:" in sample.response)
    """

    kind: ClassVar[str] = "reward_function"
    hook: ClassVar[str] = "slime_register_reward_functions"
    group: bool = False  # the built reward takes the whole group


@dataclass
class DataSourceRecord(Record):
    """``factory(config, split) -> DataSource`` (split is ``"train"`` or ``"eval"``).

    Example::

        @records.register(DataSourceRecord, "csv", summary="prompt,label rows")
        def csv_source(config, split):
            path = config.data.eval_path if split == "eval" else config.data.path
            return CsvSource(path, seed=config.run.seed)  # implements slime_hookspecs.DataSource

    ``extra["eval_split"]``: ``True`` when the source makes its eval split itself, without
    ``data.eval_path`` (reasoning-gym's held-out tasks); the run then evaluates on it.
    """

    kind: ClassVar[str] = "data_source"
    hook: ClassVar[str] = "slime_register_data_sources"


@dataclass
class FilterRecord(Record):
    """``factory(config) -> fn``; ``stage`` says which config key may name it and how ``fn``
    is called:

    * ``"dynamic_sampling"`` (``rollout.dynamic_sampling_filter``): ``fn(group) -> FilterResult``
    * ``"buffer"`` (``rollout.buffer_filter``): ``fn(rollout_id, buffer, num_groups) -> list of
      groups`` (removing them from ``buffer``)
    * ``"sample"`` (``rollout.sample_filter``): ``fn(groups) -> None`` (sets ``remove_sample``)

    Example (a dynamic-sampling filter)::

        @records.register(FilterRecord, "some_correct", stage="dynamic_sampling",
                          summary="drop groups without a correct sample")
        def some_correct(config):
            return lambda group: FilterResult(keep=any(s.reward for s in group),
                                              reason="none_correct")
    """

    kind: ClassVar[str] = "filter"
    hook: ClassVar[str] = "slime_register_filters"
    stage: str = "dynamic_sampling"  # dynamic_sampling | buffer | sample

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.stage not in ("dynamic_sampling", "buffer", "sample"):
            raise ValueError(
                f"filter {self.name!r}: stage {self.stage!r} is not one of "
                "dynamic_sampling, buffer, sample"
            )


@dataclass
class WeightTransportRecord(Record):
    """``factory(config, accelerator) -> WeightTransport`` (one per run, trainer side).

    ``engine_side(config, engine) -> object`` (optional): the transport's part that runs in
    the engine's process, built there once per engine from this record, the first time the
    trainer side calls it. The trainer side calls its methods with
    ``slime_core.api.call_engine_side(config, engine, name, method, *args)`` for each engine
    it was given in ``send``: directly for an engine of the local executor (same process),
    through the engine actor's one generic entry ``weight_transport_call(name, method,
    *args)`` under the ray executor (``handle.weight_transport_call.remote(...)`` when the
    call must not block, e.g. while rank 0 broadcasts). The actor finds the record in its own
    registry, so the plugin must be loaded in every worker (an entry point, or
    ``run.plugin_modules``). Arguments and results must be picklable; the object lives as
    long as the engine's process (a restarted engine actor builds a new one, so state it
    keeps, such as a delta base, must be optional).

    Example::

        class S3EngineSide:
            def __init__(self, config, engine):
                self.engine = engine

            def load(self, url, version):  # runs in the engine's process
                self.engine.update_weights(fetch(url), version)

        records.add(WeightTransportRecord(
            name="s3", factory=lambda config, accelerator: S3Transport(config),
            engine_side=S3EngineSide, summary="versions through a bucket"))

        # S3Transport.send(weights, version, engines), after uploading to url:
        #     for e in engines:
        #         call_engine_side(self.config, e, "s3", "load", url, version)
    """

    kind: ClassVar[str] = "weight_transport"
    hook: ClassVar[str] = "slime_register_weight_transports"
    # (config, engine) -> the object whose methods run in the engine's process; None: the
    # transport needs nothing there (it calls the engine's own methods, e.g. update_weights)
    engine_side: Callable[[Any, Any], Any] | None = None


@dataclass
class AcceleratorRecord(Record):
    """One kind of device; ``factory() -> Accelerator`` (see :class:`~.protocols.Accelerator`).

    The static fields are what placement needs without building the accelerator: the torch
    device type, the torch.distributed backend, the Ray resource name and the environment
    variable that restricts visible devices. ``accelerator = "auto"`` picks the available
    record with the highest ``priority``.

    Example::

        records.add(AcceleratorRecord(
            name="xpu", factory=XpuAccelerator, device_type="xpu", dist_backend="xccl",
            ray_resource="XPU", visible_devices_env="ZE_AFFINITY_MASK", priority=5,
            probe=lambda: None if xpu_present() else "no Intel GPU found"))
    """

    kind: ClassVar[str] = "accelerator"
    hook: ClassVar[str] = "slime_register_accelerators"
    device_type: str = "cpu"  # torch device type
    dist_backend: str = "gloo"  # torch.distributed backend
    ray_resource: str = "CPU"  # the Ray resource an actor asks for
    visible_devices_env: str | None = None  # e.g. CUDA_VISIBLE_DEVICES
    priority: int = 0  # run.accelerator = "auto" picks the available record with the highest
    # The device replays captured graphs (torch's graph capture): the ``auto`` fast-path keys
    # turn graph capture and the compiled steps on only where this is True.
    graph_capture: bool = False


@dataclass
class SandboxRecord(Record):
    """``factory(config, **options) -> Sandbox`` (an async context manager).

    Example (``tools.sandbox_options`` arrive as keyword arguments)::

        @records.register(SandboxRecord, "docker", summary="tool code in a container")
        def docker_sandbox(config, image="python:3.11-slim", **options):
            return DockerSandbox(image, **options)  # implements slime_hookspecs.Sandbox

    ``extra["limits_report"]``: optional ``() -> {limit: how it is enforced here}``, printed
    as notes by ``core plugins check`` when the sandbox is usable.
    """

    kind: ClassVar[str] = "sandbox"
    hook: ClassVar[str] = "slime_register_sandboxes"


@dataclass
class ToolRecord(Record):
    """A tool the model may call; ``factory(config) -> callable(**arguments) -> str``
    (may be async). ``parameters`` is the JSON schema of the arguments, as in OpenAI tools.

    Example::

        records.add(ToolRecord(
            name="lookup", factory=lambda config: lambda key: TABLE.get(key, "unknown"),
            description="look a key up in the table",
            parameters={"type": "object", "properties": {"key": {"type": "string"}},
                        "required": ["key"]}))
    """

    kind: ClassVar[str] = "tool"
    hook: ClassVar[str] = "slime_register_tools"
    description: str = ""  # shown to the model (default: summary)
    # JSON schema of the arguments, as in OpenAI tools
    parameters: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )

    def schema(self) -> dict[str, Any]:
        """The OpenAI / Hermes tool description of this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description or self.summary,
                "parameters": self.parameters,
            },
        }


@dataclass
class LoggerRecord(Record):
    """``factory(config, run_dir) -> Logger``.

    Example::

        @records.register(LoggerRecord, "stdout", summary="one line per step")
        def stdout_logger(config, run_dir):
            return PrintLogger()  # implements slime_hookspecs.Logger: log(metrics, step), close()
    """

    kind: ClassVar[str] = "logger"
    hook: ClassVar[str] = "slime_register_loggers"


@dataclass
class ToolParserRecord(Record):
    """``factory(config, tokenizer) -> parser``; ``parser(text) -> (content, calls, errors)``.

    Example (a model that never calls tools)::

        @records.register(ToolParserRecord, "none", summary="no tool calls")
        def no_calls(config, tokenizer):
            return lambda text: (text, [], [])
    """

    kind: ClassVar[str] = "tool_parser"
    hook: ClassVar[str] = "slime_register_tool_parsers"


@dataclass
class RolloutScheduleRecord(Record):
    """``factory(config, args) -> RolloutSchedule`` (one per run, in the driver's process):
    how each step's rollout is produced (``run.rollout_mode`` names one; the protocol the
    driver calls is ``slime_core.api.RolloutSchedule``). ``args`` is a
    ``slime_core.api.ScheduleArgs``: what the driver lends the schedule (``rollout(step)``
    generates now, ``submit(step)`` starts a rollout and returns its future, ``prepare``,
    ``source_state``, ``before``/``after`` firing ``slime_before_rollout`` /
    ``slime_after_rollout``, ``num_rollouts``, ``batch_size``, and ``rollout_side()``).

    ``rollout_side(config, rollouts) -> object`` (optional): the schedule's part that runs
    where the rollout manager runs (``rollouts``: that process's ``RolloutManager``), built
    there once per run, the first time the driver side calls ``args.rollout_side()``. Under
    the local executor that call returns the object itself; under the ray executor a handle
    whose method calls run in the rollout manager actor, which finds this record in its own
    registry (so the plugin must be loaded in every worker), through its one generic entry
    ``rollout_side_call(name, method, *args)``. Arguments and results must be picklable; a
    call that returns a ``RolloutResult`` (or a tuple that starts with one) gets
    ``rollout/engine_restarts`` there under ``run.fault_tolerance``.

    ``check(config) -> None`` (optional): called in the driver's process at start-up, before
    any component is built: raise ``ValueError`` naming the keys of a configuration the
    schedule cannot run (e.g. a staleness bound below what it produces), or warn. The core
    then applies ``run.max_staleness`` with the bound of a schedule that never overlaps
    (``weights.update_interval - 1``); a schedule that generates while the trainer trains
    refuses a lower bound itself.

    Example (each step's rollout generated when the step starts)::

        class Now:
            overlaps = False

            def __init__(self, config, args):
                self.args = args

            def take(self, step, version):
                self.args.prepare(step)
                self.args.before(step)
                result = self.args.rollout(step)
                self.args.after(step, result)
                return result, {}
            # before_weight_sync, after_weight_sync, before_eval, checkpoint, after_save,
            # read_checkpoint, stop: see slime_core.api.RolloutSchedule

        records.add(RolloutScheduleRecord(name="now", factory=Now, summary="generate at each step"))
    """

    kind: ClassVar[str] = "rollout_schedule"
    hook: ClassVar[str] = "slime_register_rollout_schedules"
    # (config, rollouts) -> the object whose methods run in the rollout manager's process;
    # None: the schedule needs nothing there
    rollout_side: Callable[[Any, Any], Any] | None = None
    # (config) -> None: refuses (ValueError) or warns about a config at start-up
    check: Callable[[Any], None] | None = None


RECORD_TYPES: tuple[type[Record], ...] = (
    RolloutEngineRecord,
    TrainerBackendRecord,
    AdvantageEstimatorRecord,
    PolicyLossRecord,
    KLEstimatorRecord,
    ISCorrectionRecord,
    LossReducerRecord,
    RewardFunctionRecord,
    DataSourceRecord,
    FilterRecord,
    WeightTransportRecord,
    AcceleratorRecord,
    SandboxRecord,
    ToolRecord,
    ToolParserRecord,
    LoggerRecord,
    RolloutScheduleRecord,
)


R = TypeVar("R", bound=Record)
F = TypeVar("F", bound=Callable[..., Any])


class Records:
    """The records of one plugin module, each registered where its factory is defined.

    ``@records.register(RecordType, name, **fields)`` on a factory builds the record (the
    decorated function is its ``factory``, returned unchanged); ``records.add(record)`` adds
    one built elsewhere. ``records.hook(RecordType)`` is that record type's ``slime_register_*``
    implementation: assign it to the hook's name in the plugin module
    (``slime_register_policy_losses = records.hook(PolicyLossRecord)``). A name added twice
    for one record type fails at once, naming it.
    """

    def __init__(self) -> None:
        self._records: list[Record] = []

    def add(self, record: R) -> R:
        for other in self._records:
            if type(other) is type(record) and other.name == record.name:
                raise ValueError(f"{record.kind.replace('_', ' ')} {record.name!r} is "
                                 "registered twice in this module")
        self._records.append(record)
        return record

    def register(self, record_type: type[Record], name: str, **fields: Any) -> Callable[[F], F]:
        def decorate(factory: F) -> F:
            self.add(record_type(name=name, factory=factory, **fields))
            return factory

        return decorate

    def of(self, record_type: type[R]) -> list[R]:
        """The records of ``record_type``, in registration order."""
        return [r for r in self._records if type(r) is record_type]  # type: ignore[misc]

    def hook(self, record_type: type[R]) -> Callable[[], list[R]]:
        """The ``record_type.hook`` implementation returning this module's records of it."""

        def register_records() -> list[R]:
            return self.of(record_type)

        register_records.__name__ = register_records.__qualname__ = record_type.hook
        register_records.__doc__ = f"This module's {record_type.__name__} records."
        # where the plugin wrote ``records.hook(...)``, for ``core hooks`` (the function's own
        # code lives here, in slime_hookspecs)
        caller = sys._getframe(1)
        register_records.slime_source = (caller.f_code.co_filename,  # type: ignore[attr-defined]
                                         caller.f_lineno)
        return hookimpl(register_records)


@dataclass
class FilterResult:
    """Answer of a dynamic-sampling filter: keep the group or drop it, with a reason."""

    keep: bool  # False drops the group
    reason: str = ""  # counted in the rollout metrics of dropped groups


@dataclass(frozen=True)
class RecordKey:
    """Declares that a config key's value names a record (or, for a list, several).

    The core resolves such names against the registries when it resolves the config, before
    any model loads: an unknown name fails naming the key, the value, where it was set, the
    choices and the plugin that would provide it.

    * ``record``: the record type the name must resolve to (``RolloutEngineRecord``, ...);
    * ``optional``: the empty string turns the feature off (``algorithm.is_correction = ""``);
    * ``special``: values that are not record names (``run.accelerator = "auto"``);
    * ``stage``: filters only: the ``FilterRecord.stage`` the named filter must serve.
    """

    record: type[Record]
    optional: bool = False
    special: tuple[str, ...] = ()
    stage: str | None = None


@dataclass
class ConfigSection:
    """A typed configuration section contributed by ``slime_add_config``.

    ``schema`` is a dataclass type; its fields (with type hints and defaults) are the keys of
    the TOML table ``[name]``. ``record_keys`` maps the keys whose values name records to
    their :class:`RecordKey` (see there: the names are checked before the run starts).

    ``extends=True`` adds the schema's keys to a section another plugin contributes (an
    algorithm plugin's hyper-parameters in the core's ``[algorithm]``), under the same names
    (``algorithm.eps_clip``); they exist only while the extending plugin is active. The
    resolved section object has every part's keys; each part's ``__post_init__`` runs on it;
    a part's ``NUMERICS_PRESETS`` class attribute (``{preset: {key: value}}``) adds to the
    section's presets. ``defaults`` (extensions only) gives keys of the extended section a new
    default, e.g. the record the plugin registers as the default advantage estimator. A key
    contributed twice, or given two different defaults, fails naming both plugins.

    Example::

        @dataclass
        class MyLossKeys:
            my_margin: float = 0.1  # the margin of the my_loss policy loss

        @hookimpl
        def slime_add_config(schema):
            return ConfigSection(name="algorithm", schema=MyLossKeys, extends=True,
                                 defaults={"policy_loss": "my_loss"})
    """

    name: str
    schema: type
    summary: str = ""
    owner: str | None = None
    record_keys: dict[str, RecordKey] = field(default_factory=dict)
    extends: bool = False
    defaults: dict[str, Any] = field(default_factory=dict)
