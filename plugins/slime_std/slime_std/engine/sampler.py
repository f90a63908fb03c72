"""Token choice for one group of rows that share temperature, top-k, top-p and seed.

Log-prob convention (``SamplingParams``): the returned log-prob of a token is read from
``log_softmax(logits / T)`` over the *full* vocabulary (``T = 1`` when greedy); top-k / top-p
only restrict which token may be chosen. Greedy (``T == 0``) takes the argmax of the logits.

Sampling inverts the CDF: one uniform number per row, a cumulative sum over the (truncated)
probabilities and a binary search. That draws exactly from ``p`` (up to float32 rounding of
the cumulative sum) and costs far less on CPU than drawing one random number per vocabulary
entry (``torch.multinomial``, Gumbel or exponential races), with no host sync. On an
accelerator the full-vocabulary case uses the exponential race instead
(``argmax(p / E)``, ``E ~ Exp(1)`` per entry, also an exact draw from ``p``): there the
cumulative sum over a 150k vocabulary was one scan kernel of ~250 us per decode step, more
than the elementwise race.

``compiled=True`` (``rollout.compile_decode`` on an accelerator) draws the race's noise with
the group's generator as before and runs the rest (fp32 cast, temperature, log-sum-exp, race,
gather) as one ``torch.compile``d function: eagerly that is about eight passes over the
[rows, V] fp32 values each decode step (0.3 ms a step for the anchor's 128 x 152k), compiled
two or three. Same noise, same tokens and log-probs up to float rounding.

``kernel=True`` (``rollout.sample_kernel``, on CUDA with triton by default) runs the race as
one Triton pass over the logits with its noise drawn inside the kernel
(:mod:`slime_std.engine.kernels.race_sample`): no noise tensor, no fp32 copy of the logits. Same
distribution and log-probs; other random numbers, so other tokens for a seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingKey:
    """What decides how a row picks its tokens (rows with equal keys are sampled together)."""

    temperature: float
    top_k: int
    top_p: float
    seed: int | None


class GroupSampler:
    """Picks the next token and its log-prob for the rows of one :class:`SamplingKey`."""

    def __init__(self, key: SamplingKey, generator: torch.Generator | None,
                 race: bool | None = None, compiled: bool = False,
                 kernel: bool = False) -> None:
        """``race``: full-vocabulary draws by the exponential race (None: on accelerators);
        ``compiled``: the race after its noise runs compiled; ``kernel``: the race as the
        Triton kernel (the caller checked that it can run)."""
        self.key = key
        self.race = race
        self.compiled = compiled
        self.kernel = kernel
        self.greedy = key.temperature == 0
        self.temperature = 1.0 if self.greedy else float(key.temperature)
        self.top_k = key.top_k if key.top_k > 0 else 0
        self.top_p = float(key.top_p)
        self.generator = generator

    def __call__(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``logits`` [n, V] -> (token ids [n] long, log-probs [n] float32)."""
        truncated = bool(self.top_k) or self.top_p < 1.0
        race = not (self.greedy or truncated) and (
            self.kernel or (self.race if self.race is not None else logits.device.type != "cpu"))
        if race and self.kernel:
            from slime_std.engine.kernels.race_sample import race_sample

            return race_sample(logits, self.temperature, self.generator)
        if race and self.compiled:
            noise = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
            noise.exponential_(generator=self.generator)
            return _compiled_race()(logits, noise, self.temperature)
        logits = logits.float()
        if self.temperature != 1.0:
            logits = logits / self.temperature
        logp = torch.log_softmax(logits, dim=-1)
        if self.greedy:
            tokens = logits.argmax(dim=-1)
        elif truncated:
            tokens = self._truncated(logp)
        elif race:
            noise = torch.empty_like(logp).exponential_(generator=self.generator)
            tokens = (logp - noise.log_()).argmax(dim=-1)  # argmax p / E, in log space
        else:
            tokens = self._invert(logp.exp(), None)
        return tokens, logp.gather(1, tokens.unsqueeze(1)).squeeze(1)

    def _invert(self, probs: torch.Tensor, kept: torch.Tensor | None) -> torch.Tensor:
        """Index drawn from ``probs`` [n, K] (unnormalised); ``kept`` [n]: how many leading
        entries may be chosen (the rest are zero)."""
        cdf = probs.cumsum(dim=-1)
        u = torch.rand((probs.shape[0], 1), generator=self.generator, device=probs.device,
                       dtype=cdf.dtype)
        # right=True skips zero-width (zero-probability) entries; the clamp catches u * total
        # rounding up to total.
        idx = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(1)
        if kept is None:
            return idx.clamp_(max=probs.shape[1] - 1)
        return torch.minimum(idx, kept - 1)

    def _truncated(self, logp: torch.Tensor) -> torch.Tensor:
        """Sample among the top-k tokens whose preceding cumulative probability is < top_p."""
        vocab = logp.shape[-1]
        k = min(self.top_k, vocab) if self.top_k else vocab
        if k < vocab:
            vals, idx = logp.topk(k, dim=-1)  # sorted, descending
        else:
            vals, idx = logp.sort(dim=-1, descending=True)
        probs = vals.exp()
        kept = torch.full((probs.shape[0],), k, dtype=torch.long, device=probs.device)
        if self.top_p < 1.0:
            # Renormalise over the top-k survivors first (top-k, then top-p, as HF and vLLM).
            probs = probs / probs.sum(dim=-1, keepdim=True)
            drop = (probs.cumsum(dim=-1) - probs) >= self.top_p  # the first token always stays
            probs = probs.masked_fill(drop, 0.0)
            kept = (~drop).sum(dim=-1)
        choice = self._invert(probs, kept)
        return idx.gather(1, choice.unsqueeze(1)).squeeze(1)


def _race(logits: torch.Tensor, noise: torch.Tensor,
          temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The exponential race and the chosen token's log-prob; ``argmax(z - log E)`` equals
    the eager form's ``argmax(log_softmax(z) - log E)`` (they differ by a per-row constant)."""
    z = logits.float()
    if temperature != 1.0:
        z = z / temperature
    tokens = (z - noise.log()).argmax(dim=-1)
    lp = z.gather(1, tokens.unsqueeze(1)).squeeze(1) - torch.logsumexp(z, dim=-1)
    return tokens, lp


_COMPILED: list = []


def _compiled_race():  # noqa: ANN202 (torch.compile's wrapper type)
    """One compiled function per process, compiled on first use (a second row count
    compiles a dynamic-shape version: rows drop as they finish)."""
    if not _COMPILED:
        _COMPILED.append(torch.compile(_race))
    return _COMPILED[0]
