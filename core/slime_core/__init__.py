"""slime-core: the runtime of the slime RL post-training framework."""

__version__ = "0.1.0"
