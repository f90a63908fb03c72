"""The driver loop above the executors: checkpoints, run directories, the rollout schedule protocol (the schedules are slime-std's records), training health."""
