"""``core slime-import SCRIPT``: a slime launch script (or flag list) -> this project's TOML."""

from __future__ import annotations

import sys

import click


@click.command("slime-import")
@click.argument("script", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="where to write the TOML (default: SCRIPT with .toml)")
@click.option("--model-path", default=None, help="use this model directory instead of --hf-checkpoint")
@click.option("--source", "sources", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="a file the script sources (e.g. scripts/models/qwen3-4B.sh), read in place of the "
                   "source line naming a file of the same name (else before the script); sourced files are otherwise "
                   "found next to the script or in a directory above it")
@click.option("--set", "sets", multiple=True, metavar="FLAG=VALUE",
              help="give a value to a flag (one the script sets through a shell variable, or "
                   "one to add or override); several values split as on a command line, a JSON "
                   "object or array kept whole")
@click.option("--backend", type=click.Choice(["torch", "megatron"]), default="torch",
              show_default=True,
              help="the trainer backend to write for: megatron (the megatron_backend plugin) also "
                   "translates the parallelism flags (--tensor-model-parallel-size, "
                   "--use-distributed-optimizer, --recompute-*) into [megatron]")
def slime_import(script: str, output: str | None, model_path: str | None, sources: tuple[str, ...],
                 sets: tuple[str, ...], backend: str) -> None:
    """Translate a slime launch script (bash with --flag value arrays, as slime's
    scripts/run-*.sh) or a plain flag list into a config for `core run --config`, and list
    every flag that could not be translated, with the reason."""
    import shlex
    from pathlib import Path

    from slime_compat.importer import (FlagError, parse_script, read_script, render_report,
                                       to_config, write_toml)

    sc = read_script(Path(script), [Path(p) for p in sources])
    for f in sc.sourced:
        click.echo(f"read {f} (sourced)")
    flags = parse_script(sc.text)
    for item in sets:
        key, _, value = item.partition("=")
        # several values as on the command line: --set "eval-prompt-data=aime data/aime.jsonl";
        # a JSON object or array stays whole (shell-style splitting would eat its quotes):
        # --set 'apply-chat-template-kwargs={"enable_thinking": false}'
        words = [value] if value.lstrip()[:1] in ("{", "[") else shlex.split(value)
        flags.append((key.lstrip("-").replace("_", "-"), "\0".join(words) if words else None))
    try:
        result = to_config(flags, model_path=model_path, backend=backend)
    except FlagError as exc:  # a value slime would refuse too: no TOML is written
        raise click.ClickException(f"{script}: {exc}") from None
    out = Path(output) if output else Path(script).with_suffix(".toml")
    write_toml(result.config, out, source=script)
    click.echo(f"wrote {out} ({len(result.mapped)} flags translated, {len(result.dropped)} not)")
    if result.dropped:
        click.echo(render_report(result.dropped))
    for raw in sc.unresolved:
        click.echo(f"note: source {raw}: file not found, its flags are missing (give it with --source FILE)", err=True)
    if result.warnings:
        for w in result.warnings:
            click.echo(f"note: {w}", err=True)
    sys.stdout.flush()
