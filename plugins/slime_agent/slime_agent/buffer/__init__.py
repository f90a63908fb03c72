"""The rollout-buffer service (slime's Rollout Buffer workflow); see :mod:`.server`."""
