"""``data_source_path``: a slime data-source class (``cls(args)``) as the project's DataSource.

slime's sources hand out groups of slime ``Sample`` (``get_samples(num_samples)`` counts
groups, as here), take back aborted ones (``add_samples``) and persist with
``save(rollout_id)`` / ``load(rollout_id)`` under ``args.save``; checkpoints here store the
rollout id in the data-source state and call ``save`` / ``load`` with it when the class has them.

slime's sources hold prompt text (already chat-templated when slime's ``--apply-chat-template``
is on) and slime's generate tokenizes it; the project's engines take token ids, so a sample
without tokens gets ``tokenizer.encode(prompt, add_special_tokens=False)``, slime's call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slime_hookspecs import Sample

from slime_compat.functions import load_flag
from slime_compat.runtime import runtime
from slime_compat.samples import unwrap, wrap


class SlimeDataSource:
    def __init__(self, inner: Any, tokenizer: Callable[[], Any] | None = None) -> None:
        self.inner = inner
        self.tokenizer = tokenizer  # loaded on first use (the rollout manager's process)
        self.handed = 0  # get_samples calls, as a stand-in for slime's rollout id

    def get_samples(self, num_groups: int) -> list[list[Sample]]:
        self.handed += 1
        groups = [[unwrap(s) for s in g] for g in self.inner.get_samples(num_groups)]
        for g in groups:
            for s in g:
                if not s.tokens and isinstance(s.prompt, str) and self.tokenizer is not None:
                    s.tokens = [int(t) for t in self.tokenizer().encode(
                        s.prompt, add_special_tokens=False)]
        return groups

    def add_samples(self, groups: list[list[Sample]]) -> None:
        self.inner.add_samples([[wrap(s) for s in g] for g in groups])

    def state_dict(self) -> dict[str, Any]:
        if hasattr(self.inner, "save"):
            self.inner.save(self.handed)
        return {"slime_rollout_id": self.handed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.handed = int(state.get("slime_rollout_id", 0))
        if hasattr(self.inner, "load"):
            self.inner.load(self.handed)

    def __len__(self) -> int:
        return len(self.inner) if hasattr(self.inner, "__len__") else 10**9


def make(config: Any, split: str) -> SlimeDataSource | None:
    if split != "train":  # slime's data source serves training prompts only
        return None
    rt = runtime(config)
    cls = load_flag("data_source_path", rt.section.data_source_path)
    return SlimeDataSource(cls(rt.args), rt.tokenizer)
