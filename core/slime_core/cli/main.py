"""Entry point of the ``core`` command."""

from __future__ import annotations

import sys

import click

from slime_core.cli.hooks_cmd import hooks_command
from slime_core.cli.plugins_cmd import plugins_group
from slime_core.cli.run_cmd import run_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="slime-core", prog_name="core")
def cli() -> None:
    """slime: pluggable LLM reinforcement-learning post-training.

    \b
    core run --config examples/tiny_arith/grpo.toml --plugins slime_grpo
    core plugins [--all]        installed plugins and their status
    core hooks [NAME]           every hook and who implements it
    """


cli.add_command(plugins_group)
cli.add_command(hooks_command)
cli.add_command(run_command)


def _add_plugin_commands() -> None:
    """Let plugins add commands (``slime_register_commands``) unless help is all that's asked."""
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager

    try:
        manager = SlimePluginManager(PluginSelection.from_cli()).load()
    except Exception:  # noqa: BLE001 - the subcommand reloads and reports the error properly
        return
    manager.hook.slime_register_commands.call_historic(kwargs={"cli": cli})


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("plugins", "hooks", "run", "--version"):
        _add_plugin_commands()
    cli.main(args=args, prog_name="core")


if __name__ == "__main__":
    main()
