"""The built-in ``local`` rollout engine and the model loading it shares with the trainer.

Modules import torch; the plugin module :mod:`slime_core.builtin.local_engine_plugin` does not.
"""
