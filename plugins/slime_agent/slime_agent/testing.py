"""Helpers for tests of agentic runs (slime_agent and the tool plugins built on it).

The tiny test models cannot be made to call a tool, so a test forces the first turn of every
episode (:func:`forced_first_turn_engine`: the real ``local`` engine of slime-std, its first
turn replaced by a given tool call with the model's own log-probs) and checks the real loop
after it (:func:`forced_tool_core_run`: a 2-step ``core run`` on that engine).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def forced_first_turn_engine(name: str, first_turn: Callable[[str], str],
                             summary: str) -> Any:
    """A ``RolloutEngineRecord`` ``name`` for agentic tests: the real local engine whose first
    turn of every episode is forced to ``first_turn(prompt text)`` (e.g. a tool call the tiny
    model cannot yet make), with the model's own log-probs of those ids (``score_tokens``);
    every later turn (a prompt holding a ``<tool_response>``) is the model's real generation."""
    from slime_hookspecs import GenerateOutput, RolloutEngineRecord

    def factory(config: Any, engine_index: int = 0, accelerator: Any = None) -> Any:
        from slime_core.api import get_registries

        engine = get_registries().rollout_engine.get("local").factory(
            config, engine_index, accelerator)
        base = type(engine)

        class ForcedFirstTurn(base):  # type: ignore[valid-type,misc]
            def generate(self, prompts: list[list[int]], params: list[Any]) -> list[Any]:
                tok = self.tokenizer
                outs: list[Any] = [None] * len(prompts)
                real = [i for i, p in enumerate(prompts) if "<tool_response>" in tok.decode(p)]
                forced = [i for i in range(len(prompts)) if i not in real]
                if forced:
                    ids = [tok(first_turn(tok.decode(prompts[i])),
                               add_special_tokens=False)["input_ids"] for i in forced]
                    lps = self.score_tokens(
                        [prompts[i] + x for i, x in zip(forced, ids, strict=True)],
                        [len(x) for x in ids])
                    for i, x, lp in zip(forced, ids, lps, strict=True):
                        outs[i] = GenerateOutput(token_ids=x, log_probs=lp, finish_reason="stop",
                                                 weight_version=self.weight_version(),
                                                 text=tok.decode(x))
                if real:
                    done = super().generate([prompts[i] for i in real], [params[i] for i in real])
                    for i, out in zip(real, done, strict=True):
                        outs[i] = out
                return outs

        engine.__class__ = ForcedFirstTurn  # the loaded engine, its first turns forced
        return engine

    return RolloutEngineRecord(name=name, factory=factory, summary=summary)


def forced_tool_core_run(out_dir: Path, plugins: str, config: Path, engine_dir: Path,
                         engine_module: str, engine: str, overrides: Sequence[str],
                         env: dict[str, str] | None = None,
                         cwd: Path | None = None) -> tuple[list[dict[str, Any]],
                                                          list[dict[str, Any]]]:
    """A 2-step ``core run`` (2 prompts x 2 samples, eval off, one thread, rollouts dumped)
    whose rollout engine ``engine`` is registered by the plugin module ``engine_module`` in
    ``engine_dir`` (e.g. a :func:`forced_first_turn_engine`), plus ``overrides``; the metrics
    rows and the dumped samples. A failed run raises ``AssertionError`` with its stderr."""
    import json
    import os
    import subprocess
    import sys

    dumps = out_dir / "dumps"
    base = [f"run.plugin_modules=['{engine_module}']", "run.num_rollouts=2", "run.name=r",
            f"run.output_dir={out_dir}", "run.num_threads=1", "run.progress=false",
            f"rollout.engine={engine}", "rollout.batch_size=2", "rollout.n_samples_per_prompt=2",
            "eval.interval=0", f"debug.save_rollouts={dumps}"]
    cmd = [sys.executable, "-m", "slime_core", "run", "--plugins", plugins, "--config",
           str(config)]
    for o in [*base, *overrides]:
        cmd += ["-o", o]
    full_env = {**os.environ, **(env or {}),
                "PYTHONPATH": os.pathsep.join([str(engine_dir), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=900)
    if done.returncode != 0:
        raise AssertionError(done.stderr[-4000:])
    rows = [json.loads(line) for line in
            next(out_dir.glob("r-*")).joinpath("metrics.jsonl").read_text().splitlines()]
    samples = [json.loads(line) for f in sorted(dumps.glob("rollout_*.jsonl"))
               for line in f.read_text().splitlines()[1:]]
    return rows, samples
