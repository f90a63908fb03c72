"""slime-ppo: PPO with a critic for slime (GAE, clipped value loss, KL in the reward)."""

__version__ = "0.1.0"
