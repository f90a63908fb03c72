"""slime's hook API: markers, hook specifications, data contracts, records and protocols.

Importing this package never imports torch.
"""

from __future__ import annotations

from slime_hookspecs.batch import TrainBatch
from slime_hookspecs.config import Config
from slime_hookspecs.markers import (
    DEFAULT_ENTRY_POINT_GROUP,
    ENTRY_POINT_GROUP,
    PROJECT_NAME,
    hookimpl,
    hookspec,
)
from slime_hookspecs.protocols import (
    Accelerator,
    CriticLossFn,
    CriticModel,
    CriticSpec,
    DataSource,
    EngineAdapter,
    ExecResult,
    FinishedGroupSource,
    GenerateOutput,
    Logger,
    RolloutEngine,
    RolloutResult,
    Sandbox,
    Trainer,
    WeightTransport,
)
from slime_hookspecs.records import (
    AcceleratorRecord,
    AdvantageEstimatorRecord,
    ConfigSection,
    DataSourceRecord,
    FilterRecord,
    FilterResult,
    ISCorrectionRecord,
    KLEstimatorRecord,
    LoggerRecord,
    LossReducerRecord,
    PolicyLossRecord,
    Record,
    RecordKey,
    Records,
    RewardFunctionRecord,
    RolloutEngineRecord,
    RolloutScheduleRecord,
    SandboxRecord,
    ToolParserRecord,
    ToolRecord,
    TrainerBackendRecord,
    WeightTransportRecord,
)
from slime_hookspecs.routing import RoutedExperts
from slime_hookspecs.sample import Sample, SampleInvariantError, Status
from slime_hookspecs.sampling import SamplingParams

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_ENTRY_POINT_GROUP",
    "ENTRY_POINT_GROUP",
    "PROJECT_NAME",
    "Accelerator",
    "AcceleratorRecord",
    "AdvantageEstimatorRecord",
    "Config",
    "CriticLossFn",
    "CriticModel",
    "CriticSpec",
    "ConfigSection",
    "DataSource",
    "DataSourceRecord",
    "EngineAdapter",
    "ExecResult",
    "FilterRecord",
    "FilterResult",
    "FinishedGroupSource",
    "GenerateOutput",
    "ISCorrectionRecord",
    "KLEstimatorRecord",
    "Logger",
    "LoggerRecord",
    "LossReducerRecord",
    "PolicyLossRecord",
    "Record",
    "RecordKey",
    "Records",
    "RewardFunctionRecord",
    "RolloutEngine",
    "RolloutEngineRecord",
    "RolloutScheduleRecord",
    "RolloutResult",
    "RoutedExperts",
    "Sample",
    "SampleInvariantError",
    "SamplingParams",
    "Sandbox",
    "SandboxRecord",
    "Status",
    "ToolParserRecord",
    "ToolRecord",
    "Trainer",
    "TrainBatch",
    "TrainerBackendRecord",
    "WeightTransport",
    "WeightTransportRecord",
    "hookimpl",
    "hookspec",
]
