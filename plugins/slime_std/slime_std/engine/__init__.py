"""The ``local`` rollout engine (plugin ``local_engine``): a transformers causal LM in-process
with its own batched decoding loop (fused decoder, static decode, KV cache, sampler).

Modules import torch; the plugin module :mod:`slime_std.engine.plugin` does not.
"""
