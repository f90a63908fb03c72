"""The driver loop and the rollout manager."""
