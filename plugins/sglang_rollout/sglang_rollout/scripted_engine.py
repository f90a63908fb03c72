"""``ScriptedEngine``: a deterministic rollout engine without a model, for the fake server.

Token ``k`` of a reply is ``(prompt[-1] + k + 1) % vocab`` with log-prob ``-0.1 * (k + 1)``, so
tests know every answer exactly; ``delay_s`` per token makes requests slow enough to abort.
"""

from __future__ import annotations

import time
from typing import Any

from slime_hookspecs import GenerateOutput, SamplingParams


class ScriptedEngine:
    """Deterministic engine: token k of a reply is ``(prompt[-1] + k + 1) % vocab`` with
    log-prob ``-0.1 * (k + 1)``; ``delay_s`` per token; stops on ``stop_token_ids``."""

    def __init__(self, vocab: int = 100, delay_s: float = 0.0) -> None:
        self.vocab, self.delay_s = vocab, delay_s
        self.version = 0
        self.weights: dict[str, Any] = {}
        self.asleep = False
        self._epoch = 0

    def generate(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[GenerateOutput]:
        epoch = self._epoch
        outs = []
        for prompt, sp in zip(prompts, params, strict=True):
            ids: list[int] = []
            reason = "length"
            for k in range(sp.max_new_tokens):
                if self._epoch != epoch:
                    reason = "abort"
                    break
                if self.delay_s:
                    time.sleep(self.delay_s)
                tok = (prompt[-1] + k + 1) % self.vocab
                ids.append(tok)
                if tok in sp.stop_token_ids:
                    reason = "stop"
                    break
            outs.append(GenerateOutput(ids, [-0.1 * (k + 1) for k in range(len(ids))], reason,
                                       self.version, " ".join(map(str, ids))))
        return outs

    def update_weights(self, weights: Any, version: int) -> None:
        self.weights, self.version = dict(weights), int(version)

    def weight_version(self) -> int:
        return self.version

    def abort(self) -> None:
        self._epoch += 1

    def sleep(self) -> None:
        self.asleep = True

    def wake_up(self) -> None:
        self.asleep = False

    def health(self) -> bool:
        return True

    def shutdown(self) -> None:
        pass
