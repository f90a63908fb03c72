"""Default plugin ``core_data``: the ``jsonl``, ``parquet`` and ``reasoning_gym`` data sources.

Nothing heavy is imported here (``core plugins`` stays fast); probes only look for modules.
"""

from __future__ import annotations

from slime_hookspecs import DataSourceRecord, hookimpl

from slime_std.data import make_jsonl_source, make_parquet_source, make_reasoning_gym_source
from slime_std.extras import probe


@hookimpl
def slime_register_data_sources() -> list[DataSourceRecord]:
    return [
        DataSourceRecord(
            name="jsonl", factory=make_jsonl_source,
            summary="prompts from data.path / data.eval_path (.jsonl, .json or .parquet)",
        ),
        DataSourceRecord(
            name="parquet", factory=make_parquet_source,
            summary="prompts from a parquet file (pyarrow); same source as jsonl",
            probe=probe("pyarrow", "pyarrow"),
        ),
        DataSourceRecord(
            name="reasoning_gym", factory=make_reasoning_gym_source,
            summary="procedural reasoning-gym tasks (data.task, data.size, data.eval_seed)",
            probe=probe("reasoning_gym"), extra={"eval_split": True},
        ),
    ]
