"""slime-grpo: the GRPO family of advantage estimators and policy losses for slime."""

__version__ = "0.1.0"
