"""The trainer toolkit every backend shares: micro-batching, log-prob heads, shared-prefix
forward passes, gradient accumulation, data-parallel reductions, fp32 master weights and the
loss/advantage composition through hooks. Plugins reach it through :mod:`slime_core.api`."""
