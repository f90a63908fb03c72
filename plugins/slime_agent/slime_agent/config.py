"""The ``[agent]`` section: which decorated function is the rollout."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AgentSection:
    # the @rollout_entrypoint function: "package.module:function" or "path/to/file.py:function"
    # ("" : off, the run generates as usual)
    entrypoint: str = ""
    timeout_s: float = 0.0  # longest episode in seconds (0: no limit); a late one fails its sample
