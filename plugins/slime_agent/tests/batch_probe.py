"""A plugin module for test_run.py: writes each train batch to $SLIME_AGENT_PROBE/step_<k>.json."""

import json
import os
from pathlib import Path

from slime_hookspecs import hookimpl


@hookimpl
def slime_rollout_data_postprocess(config, rollout_id, batch):
    out = Path(os.environ["SLIME_AGENT_PROBE"])
    rows = {k: [[float(x) for x in t] for t in getattr(batch, k)]
            for k in ("tokens", "loss_masks", "rollout_log_probs")}
    rows["raw_rewards"] = [float(r) for r in batch.raw_rewards]
    rows["response_lengths"] = [int(n) for n in batch.response_lengths]
    (out / f"step_{rollout_id}.json").write_text(json.dumps(rows))
