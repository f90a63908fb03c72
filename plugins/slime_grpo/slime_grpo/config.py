"""The keys slime_grpo adds to the core's ``[algorithm]`` section (torch-free).

They keep their names (``algorithm.eps_clip``) and exist while the plugin is active; the core's
section holds only what its loss composition reads (which records, which coefficients). The
plugin also names its records as the defaults of those record keys (:data:`DEFAULTS`).
``gamma``, ``masked_steps`` and ``kl_in_reward_estimator`` are read by slime_ppo too
(:class:`SharedAlgorithmKeys`, the part of this plugin's keys another plugin may rely on): a
PPO run loads both plugins (``--plugins slime_grpo,slime_ppo``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from slime_hookspecs import Config, ConfigSection, KLEstimatorRecord, RecordKey

if TYPE_CHECKING:
    from slime_hookspecs.config import AlgorithmConfig

# the core's record keys get slime_grpo's records as defaults
DEFAULTS = {"advantage_estimator": "grpo", "policy_loss": "ppo",
            "loss_reducer": "seq_mean_token_mean", "kl_estimator": "k1"}


def _need(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{key}: {msg}")


class SharedAlgorithmKeys(Protocol):
    """The keys of slime_grpo's part of ``[algorithm]`` that other plugins read (slime_ppo's GAE
    and its KL in the reward): a public contract, so they keep these names and types. A plugin
    that reads them declares ``slime-grpo`` as a dependency and types ``config.algorithm``
    with this protocol (``slime_ppo.config.algorithm``)."""

    gamma: float  # discount (REINFORCE++, GAE)
    masked_steps: str  # a loss-masked-out position: a discount step ("count") or skipped ("skip")
    kl_in_reward_estimator: str  # KL estimator record of the reward penalty (empty: kl_estimator)


@dataclass
class GRPOAlgorithmKeys:
    count_empty_samples: bool = True  # preset: a sample with no loss-masked token still counts in the seq_* reducers' sample count (verl: false)
    eps_clip: float = 0.2  # PPO clip range of the ratio (lower side; upper: eps_clip_high)
    eps_clip_high: float = 0.0  # 0: same as eps_clip (clip-higher when larger)
    eps_clip_c: float = 0.0  # dual-clip constant (> 1); 0: off (preset; verl: 3.0)
    log_ratio_clamp: float = 0.0  # preset: clamp log(pi/pi_old) to [-x, x] before exp in the ppo and cispo ratios; 0: off (verl: 20)
    kl_in_reward_estimator: str = ""  # KL estimator of the reward penalty (empty: kl_estimator); preset (verl: k1)
    k3_clamp: float = 0.0  # preset: clamp the estimator named k3 to [-x, x]; 0: off (verl: 10)
    low_var_kl_clamp: float = 10.0  # clamp the estimator named low_var_kl to [-x, x]; 0: off
    kl_log_ratio_clamp: float = 0.0  # preset: clamp log(pi/pi_ref) to [-x, x] before exp in k3 / low_var_kl; 0: off (verl: 20)
    normalize_std: bool = True  # GRPO: divide by the group std
    singleton_advantage: str = "zero"  # preset: a group of one sample gets zero (its own baseline) | reward (verl: baseline 0, std 1)
    whiten_reinforce: bool = False  # preset: whiten the reinforce_plus_plus(_baseline) advantages even when whiten_advantages is false (verl: true)
    reinforce_baseline_kl: str = "per_token"  # preset: reinforce_plus_plus_baseline's KL term: per_token (A_t = b - coef kl_t, slime) | cumulative (summed into the return)
    masked_steps: str = "count"  # preset: REINFORCE++ and GAE: a loss-masked-out position is a discount step (count, slime) or skipped (skip, verl)
    gamma: float = 1.0  # discount (REINFORCE++, GAE)
    opsm_delta: float = 0.0  # OPSM threshold (0: off)
    max_response_length: int = 0  # Dr. GRPO constant denominator (0: rollout.max_new_tokens)

    def __post_init__(self) -> None:
        _need(self.eps_clip >= 0, "algorithm.eps_clip", "must be >= 0")
        _need(self.eps_clip_c == 0 or self.eps_clip_c > 1, "algorithm.eps_clip_c",
              "dual clip needs a constant > 1 (0 turns it off)")
        _need(self.singleton_advantage in ("zero", "reward"), "algorithm.singleton_advantage",
              "must be zero or reward")
        _need(self.reinforce_baseline_kl in ("per_token", "cumulative"),
              "algorithm.reinforce_baseline_kl", "must be per_token or cumulative")
        _need(self.masked_steps in ("count", "skip"), "algorithm.masked_steps",
              "must be count or skip")
        for key in ("log_ratio_clamp", "k3_clamp", "low_var_kl_clamp", "kl_log_ratio_clamp"):
            _need(getattr(self, key) >= 0, f"algorithm.{key}", "must be >= 0 (0 turns it off)")
        check_reinforce_whitening(self)

    # defaults per algorithm.numerics preset, the core's record keys included (the field
    # defaults and DEFAULTS are the slime column; a test checks they agree)
    NUMERICS_PRESETS = {
        "slime": {
            "loss_reducer": "seq_mean_token_mean", "count_empty_samples": True,
            "eps_clip_c": 0.0, "log_ratio_clamp": 0.0, "kl_estimator": "k1",
            "kl_in_reward_estimator": "", "k3_clamp": 0.0, "low_var_kl_clamp": 10.0,
            "kl_log_ratio_clamp": 0.0, "singleton_advantage": "zero", "whiten_reinforce": False,
            "reinforce_baseline_kl": "per_token", "masked_steps": "count",
        },
        "verl": {
            "loss_reducer": "token_mean", "count_empty_samples": False,
            "eps_clip_c": 3.0, "log_ratio_clamp": 20.0, "kl_estimator": "low_var_kl",
            "kl_in_reward_estimator": "k1", "k3_clamp": 10.0, "low_var_kl_clamp": 10.0,
            "kl_log_ratio_clamp": 20.0, "singleton_advantage": "reward", "whiten_reinforce": True,
            "reinforce_baseline_kl": "per_token", "masked_steps": "skip",
        },
    }


REINFORCE_ESTIMATORS = ("reinforce_plus_plus", "reinforce_plus_plus_baseline")
# slime's words (slime/utils/arguments.py, the arguments check), quoted in the refusal
SLIME_REINFORCE_REASON = (
    "The 'reinforce_plus_plus' and 'reinforce_plus_plus_baseline' advantage estimators "
    "require advantage normalization. Please add `--normalize-advantages` to your command."
)


def check_reinforce_whitening(algorithm: Any) -> None:
    """Refuse ``reinforce_plus_plus(_baseline)`` on unwhitened returns under
    ``algorithm.numerics = "slime"``, as slime's arguments check refuses to start without
    ``--normalize-advantages``: the returns (a 0/1 reward summed over the tokens) are not
    centred, so every token of a correct response is pushed up and none down.
    ``algorithm.whiten_advantages`` (slime's flag) or ``algorithm.whiten_reinforce`` satisfy
    it; the verl preset whitens them by default. ``algorithm`` is the merged ``[algorithm]``
    section (its core keys may be absent when this part is built alone)."""
    estimator = getattr(algorithm, "advantage_estimator", "")
    if (getattr(algorithm, "numerics", "slime") != "slime"
            or estimator not in REINFORCE_ESTIMATORS
            or getattr(algorithm, "whiten_advantages", False) or algorithm.whiten_reinforce):
        return
    raise ValueError(
        f"algorithm.advantage_estimator: {estimator!r} under algorithm.numerics = \"slime\" "
        f"trains on whitened advantages only, as slime does (\"{SLIME_REINFORCE_REASON}\"); "
        "set algorithm.whiten_advantages = true (slime's --normalize-advantages)"
    )


if TYPE_CHECKING:
    def _shares(keys: GRPOAlgorithmKeys) -> SharedAlgorithmKeys:
        return keys  # mypy: the dataclass has every shared key, with its type

    class GRPOAlgorithm(GRPOAlgorithmKeys, AlgorithmConfig):
        """The type of ``config.algorithm`` while slime_grpo is active: the core's keys
        (:class:`AlgorithmConfig`) plus this plugin's (:class:`GRPOAlgorithmKeys`), the two
        parts the section is merged from at run time. For the type checker only."""


def algorithm(config: Config) -> GRPOAlgorithm:
    """``config.algorithm``, typed with slime_grpo's keys (no copy, no check: the merged
    section has them whenever this plugin is active, which is when its code runs)."""
    return cast("GRPOAlgorithm", config.algorithm)


def algorithm_keys() -> ConfigSection:
    """slime_grpo's part of ``[algorithm]`` (what its ``slime_add_config`` returns)."""
    return ConfigSection(
        name="algorithm", schema=GRPOAlgorithmKeys, extends=True, defaults=dict(DEFAULTS),
        summary="GRPO-family hyper-parameters: clip ranges, KL clamps, discount, presets",
        record_keys={"kl_in_reward_estimator": RecordKey(KLEstimatorRecord, optional=True)},
    )
