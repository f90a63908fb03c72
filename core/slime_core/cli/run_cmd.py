"""``core run``: resolve plugins and config, then hand over to the driver."""

from __future__ import annotations

import click

from slime_core.cli.options import selection_options
from slime_core.pluginmgr import PluginLoadError, PluginSelection, PluginUsageError


@click.command("run")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="TOML run file.")
@click.option("-o", "--override", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override one config key (repeatable), e.g. -o rollout.temperature=0.7.")
@click.option("--resume", "resume", type=click.Path(file_okay=False), default=None,
              help="Continue the run in RUN_DIR from its last checkpoint.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default=None,
              help="Where components run (overrides run.executor).")
@click.option("--ray-address", default=None, help="Existing Ray cluster (overrides run.ray_address).")
@selection_options
def run_command(config_path: str | None, overrides: tuple[str, ...], resume: str | None,
                executor: str | None, ray_address: str | None, selection: PluginSelection) -> None:
    """Train: rollout, reward, advantages, train, save, sync weights, evaluate."""
    from slime_core.config import ConfigError
    from slime_core.session import resolve

    overrides = tuple(overrides)
    if executor:
        overrides += (f"run.executor={executor}",)
    if ray_address:
        overrides += (f'run.ray_address="{ray_address}"',)
    if resume:
        from slime_core.runner.rundir import resolved_config_path, resume_selection

        try:
            if not config_path:
                config_path = resolved_config_path(resume)
            selection, line = resume_selection(resume, selection)
        except (FileNotFoundError, ValueError) as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(line, err=True)
    if not config_path:
        raise click.UsageError("give --config FILE (or --resume RUN_DIR)")
    try:
        manager, config = resolve(selection, config_path, overrides)
    except PluginUsageError as exc:
        raise click.UsageError(str(exc)) from exc
    except (PluginLoadError, ConfigError) as exc:
        raise click.ClickException(str(exc)) from exc
    except ValueError as exc:  # a plugin's slime_configure refusing the configuration
        raise click.ClickException(f"config {config_path}: {exc}") from exc
    estimators = manager.registries.advantage_estimator
    if len(estimators) == 0:
        raise click.ClickException(
            "no algorithm is installed: no plugin registers an advantage estimator. "
            "Install one (pip install -e plugins/slime_grpo) and select it with "
            "--plugins slime_grpo"
        )
    from slime_core.runner.driver import run_training

    try:
        run_training(manager, config, resume_dir=resume)
    except (ConfigError, KeyError, RuntimeError, ValueError, FileNotFoundError,
            FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError) as exc:
        # a bad input named by its message (missing model directory, existing run directory,
        # unreadable data file...): one line, no traceback
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
