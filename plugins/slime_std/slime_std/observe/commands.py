"""``core trace RUN_DIR`` and ``core report RUN_DIR`` (added by ``core_observe`` through
``slime_register_commands``); matplotlib is imported only when a report is drawn."""

from __future__ import annotations

import json

import click


@click.command("trace")
@click.argument("run_dir", type=click.Path(exists=True))
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=0),
              help="how many of the slowest samples to list")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def trace_command(run_dir: str, top: int, as_json: bool) -> None:
    """Phase breakdown and slowest samples of a run's trace.json."""
    from slime_std.observe.trace_analysis import (
        TraceFileError,
        format_summary,
        load_trace,
        summarize,
        summary_json,
        trace_path,
    )

    try:
        summary = summarize(load_trace(run_dir))
    except TraceFileError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(summary_json(summary, top), indent=2))
    else:
        click.echo(format_summary(summary, top, str(trace_path(run_dir))))


@click.command("report")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="output directory (default RUN_DIR/report)")
def report_command(run_dir: str, out_dir: str | None) -> None:
    """PNG plots of metrics.jsonl and a one-page report.html (config, plugins, phases)."""
    from slime_core.api import MissingExtraError

    from slime_std.observe.report import ReportError, write_report

    try:
        rep = write_report(run_dir, out_dir)
    except (ReportError, MissingExtraError) as exc:
        raise click.ClickException(str(exc)) from exc
    for p in rep.pngs:
        click.echo(f"wrote {p}")
    click.echo(f"wrote {rep.html}")
