"""On-policy distillation: the teacher, in the rollout engine or in the trainer."""
