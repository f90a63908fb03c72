"""Default plugin ``core_accelerators`` (:mod:`.plugin`): the ``cpu`` and ``cuda`` accelerator
records; the accelerator objects they build are in :mod:`.devices`."""
