"""What the loop itself needs to be seen: traces, rollout dumps, rollout metrics.

The plugins that wire them into runs (traces, dumps and replay, profiling, ``core trace``,
``core report``, the metric loggers) are the default plugins ``core_observe`` and
``core_loggers`` (``slime_std.observe``); they reach these modules through ``slime_core.api``.

* :mod:`~slime_core.observe.trace` -- Chrome trace-event spans (``span(name, **args)`` API);
* :mod:`~slime_core.observe.dumps` -- the rollout dump format (``debug.save_rollouts``);
* :mod:`~slime_core.observe.rollout_metrics` -- the ``rollout/*`` metrics of a step's samples.
"""
