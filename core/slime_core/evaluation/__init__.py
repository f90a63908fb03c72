"""Evaluation on several datasets (``[[eval.datasets]]``): specs, the composite eval source,
per-dataset sampling and metrics (accuracy, pass@k, lengths, truncation)."""
