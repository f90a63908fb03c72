"""The ``torch`` trainer backend (plugin ``torch_trainer``): any ``AutoModelForCausalLM`` with
AdamW, its critic and old-actor snapshots, built on the core's trainer kit (``slime_core.api``).

Modules import torch; the plugin module :mod:`slime_std.trainer.plugin` does not.
"""
