"""slime rollout engine ``sglang``: SGLang servers driven over their native HTTP API.

Import-light: nothing here imports torch, aiohttp or sglang; see :mod:`sglang_rollout.plugin`
(entry point), :mod:`sglang_rollout.engine` (the engine), :mod:`sglang_rollout.api` (request
bodies and response parsing).
"""

__version__ = "0.1.0"
