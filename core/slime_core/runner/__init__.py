"""The driver loop above the executors: checkpoints, run directories, training health and the
rollout schedule protocol (the schedules themselves are slime-std's records)."""
