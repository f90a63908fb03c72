"""Seeing what a run does: the default plugins ``core_observe`` (:mod:`.plugin`: traces,
rollout dumps and replay, profiling, ``core trace`` / ``core report``) and ``core_loggers``
(:mod:`.loggers_plugin`: the ``jsonl``, ``tensorboard`` and ``wandb`` loggers).

The loop's own parts stay in the core and are reached through ``slime_core.api``: the trace
recorder (``span``, ``current_tracer``, ...), the rollout dump format (``write_dump``,
``read_dump``, ...). Modules here import torch and matplotlib inside the functions that need
them, so ``core plugins`` / ``core hooks`` stay light.

* :mod:`.trace_analysis` -- phase breakdown and slowest samples (``core trace``);
* :mod:`.replay` -- training from dumps (``debug.replay_rollouts``);
* :mod:`.profiler` -- torch profiler over ``profile.steps``;
* :mod:`.report` -- PNG plots and ``report.html`` (``core report``);
* :mod:`.commands` -- the two commands; :mod:`.config` -- the ``[trace]`` and ``[profile]``
  sections; :mod:`.loggers` -- the metric loggers.
"""
