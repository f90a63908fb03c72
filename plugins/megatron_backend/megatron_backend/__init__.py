"""slime-megatron-backend: the ``megatron`` trainer backend on megatron-core's GPTModel."""

__version__ = "0.1.0"
