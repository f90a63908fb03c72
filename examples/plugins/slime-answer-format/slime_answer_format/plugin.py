"""Entry-point module of the ``answer_format`` plugin (kept light: no heavy imports)."""

from __future__ import annotations

import re
from typing import Any

from slime_hookspecs import RewardFunctionRecord, Sample, hookimpl

BOXED = re.compile(r"\\boxed\{[^{}]+\}")


def format_reward(sample: Sample) -> float:
    """1.0 if the response contains ``\\boxed{...}``, else 0.0."""
    return 1.0 if BOXED.search(sample.response) else 0.0


@hookimpl
def slime_register_reward_functions() -> list[RewardFunctionRecord]:
    return [RewardFunctionRecord(
        name="answer_format", factory=lambda config: format_reward,
        summary="1.0 when the response holds a \\boxed{} answer",
    )]


@hookimpl
def slime_register_commands(cli: Any) -> None:
    import click

    @cli.command("answer-format")
    @click.argument("text")
    def answer_format(text: str) -> None:
        """Print the format reward of TEXT."""
        click.echo(format_reward(Sample(response=text)))
