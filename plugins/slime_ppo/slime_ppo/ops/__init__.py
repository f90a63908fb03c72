"""Pure torch ops for PPO with a critic, on slime's per-sample layout (no framework imports).

Per sample: 1-D tensors over the ``T_i`` response tokens (``token_rewards``, ``values``,
``loss_masks``); ``rewards`` is ``[N]``. Typical flow::

    tok_r = kl_in_reward(rewards, kl, loss_masks, kl_coef=kl_coef)
    adv, ret = gae_advantages_and_returns(tok_r, values, loss_masks, gamma=gamma, lam=lam)
    adv = whiten(adv, loss_masks)                     # optional (slime: --normalize-advantages)
    loss, metrics = value_loss(new_values, values, ret, loss_masks, value_clip=0.2,
                               reducer=reducer)   # the algorithm.loss_reducer record's

Conventions are written in each function's docstring and in ``docs/algorithms.md``.
"""

from .gae import gae_advantages_and_returns
from .rewards import kl_in_reward
from .value_loss import VALUE_CLIP, VALUE_LOSS_COEF, Reducer, value_loss
from .whiten import WHITEN_EPS, whiten

__all__ = [
    "VALUE_CLIP",
    "VALUE_LOSS_COEF",
    "WHITEN_EPS",
    "Reducer",
    "gae_advantages_and_returns",
    "kl_in_reward",
    "value_loss",
    "whiten",
]
