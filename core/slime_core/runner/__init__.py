"""The driver loop above the executors: checkpoints, run directories, the one-step-off pipeline."""
