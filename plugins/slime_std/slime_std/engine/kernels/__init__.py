"""Triton kernels of the local engine's decode hot path: decode attention against the static
KV cache and the sampler's race. Each has a torch reference it must match and is used only
where ``slime_core.api.choose_kernel`` allows it; nothing here imports triton at module import
time."""
