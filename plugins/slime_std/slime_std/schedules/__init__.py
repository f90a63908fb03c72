"""Default plugin ``rollout_schedules`` (:mod:`.plugin`): the three rollout schedules that
``run.rollout_mode`` names, each a :class:`slime_hookspecs.RolloutScheduleRecord` whose
factory builds the driver's :class:`slime_core.api.RolloutSchedule`:

* :mod:`.sync` -- ``sync``: step k's rollout is generated when step k starts;
* :mod:`.one_step_off` -- ``one_step_off`` (also ``run.async_rollout = true``): step k+1's
  rollout is generated while step k trains;
* :mod:`.fully_async` -- ``fully_async``: the engines generate continuously into a bounded
  buffer; its generator (:mod:`.streaming`) is the record's ``rollout_side``, built where the
  rollout manager runs.

The hook timing of each is one table in ``docs/executors.md``.
"""
