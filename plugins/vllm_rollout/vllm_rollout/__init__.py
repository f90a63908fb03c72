"""slime plugin ``vllm_rollout``: the ``vllm`` rollout engine on vLLM's offline ``LLM`` engine."""

__version__ = "0.1.0"
