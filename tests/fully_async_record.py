"""A plugin module (``run.plugin_modules = ["tests.fully_async_record"]``) that appends, for
every step, the group indices it trains on to ``RUN_DIR/trained_groups.jsonl`` (flushed and
fsynced, so a SIGKILL right after leaves the line): the record the fully-async kill tests
check against the checkpoint's buffer and data source."""

from __future__ import annotations

import json
import os
from pathlib import Path

from slime_hookspecs import hookimpl


@hookimpl
def slime_log_rollout(config, rollout_id, samples, metrics):  # noqa: ANN001, ANN201
    line = json.dumps({"step": rollout_id,
                       "groups": sorted({s.group_index for s in samples})})
    with open(Path(config.run.run_dir) / "trained_groups.jsonl", "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())
