"""Seeing what a run does: traces, rollout dumps and replay, reports, profiling.

Wired into runs by the built-in plugin ``core_observe`` (:mod:`slime_core.builtin.observe_plugin`)
through ordinary hooks only. Modules here import torch and matplotlib inside the functions that
need them, so ``core plugins`` / ``core hooks`` stay light.

* :mod:`~slime_core.observe.trace` -- Chrome trace-event spans (``span(name, **args)`` API);
* :mod:`~slime_core.observe.trace_analysis` -- phase breakdown and slowest samples (``core trace``);
* :mod:`~slime_core.observe.dumps` -- the rollout dump format (``debug.save_rollouts``);
* :mod:`~slime_core.observe.replay` -- training from dumps (``debug.replay_rollouts``);
* :mod:`~slime_core.observe.profiler` -- torch profiler over ``profile.steps``;
* :mod:`~slime_core.observe.report` -- PNG plots and ``report.html`` (``core report``).
"""
