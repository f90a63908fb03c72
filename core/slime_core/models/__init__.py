"""The models kit: what every engine and trainer backend builds its model from.

:mod:`~slime_core.models.loading` (the causal LM and tokenizer of ``config.model``, the dtype
a device trains in), :mod:`~slime_core.models.prompts` (the input checks every engine's
``generate`` makes) and :mod:`~slime_core.models.value` (the Hugging Face critic of a
``CriticSpec``). Plugins reach them through ``slime_core.api``.
"""
