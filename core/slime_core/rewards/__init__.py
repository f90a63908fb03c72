"""The reward machinery the core runs: which record scores a sample (:mod:`.routing`, by
``metadata.rm_type`` through the registry), the checks every reward value passes
(:mod:`.validate`), and the scalar a reward stands for (:mod:`.scalar`).

The reward functions themselves are records; the standard ones (``exact``, ``math``, ``dapo``,
``remote``, ...) are the default plugin ``core_rewards`` of slime-std.
"""
