"""slime's agent SDK: ``@rollout_entrypoint`` makes an async agent function the rollout.

See ``plugins/slime_agent/README.md``. Import from here in agent code; nothing heavy loads.
"""

from slime_agent.entrypoint import PARAMETERS, EntryPoint, load_entrypoint, rollout_entrypoint

__all__ = ["PARAMETERS", "EntryPoint", "load_entrypoint", "rollout_entrypoint"]
