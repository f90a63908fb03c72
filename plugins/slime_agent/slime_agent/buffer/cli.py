"""``core rollout-buffer``: the rollout-buffer service as a process of its own.

Trainers connect with ``data.source = "rollout_buffer"`` and ``rollout_buffer.url`` /
``rollout_buffer.token``; agent workers with the same URL and token.
"""

from __future__ import annotations

import os
import signal
import threading

import click

TOKEN_ENV = "SLIME_ROLLOUT_BUFFER_TOKEN"


@click.command("rollout-buffer")
@click.option("--host", default="127.0.0.1", show_default=True, help="bind address")
@click.option("--port", default=8889, show_default=True, type=int, help="0: any free port")
@click.option("--token", default=None,
              help=f"bearer token (default: ${TOKEN_ENV}, else a random one, printed)")
@click.option("--allow-remote", is_flag=True, help="allow a non-loopback --host")
@click.option("--task-timeout-s", default=300.0, show_default=True, type=float,
              help="a job not written back by then is queued again")
@click.option("--max-body-mb", default=16.0, show_default=True, type=float,
              help="largest request body in MiB (larger: 413)")
@click.option("--header-timeout-s", default=30.0, show_default=True, type=float,
              help="close a connection that sends no complete request for this long")
def rollout_buffer_command(host: str, port: int, token: str | None, allow_remote: bool,
                           task_timeout_s: float, max_body_mb: float,
                           header_timeout_s: float) -> None:
    """Serve the rollout buffer between a trainer and agent workers until interrupted.

    Written samples are bounded by what the trainer's task sends (its
    ``rollout.max_abs_reward``, the model's context)."""
    from slime_agent.buffer.server import RolloutBufferServer

    given = token or os.environ.get(TOKEN_ENV, "")
    try:
        server = RolloutBufferServer(host, port, given, allow_remote=allow_remote,
                                     task_timeout_s=task_timeout_s, max_body_mb=max_body_mb,
                                     header_timeout_s=header_timeout_s).start()
    except (ValueError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"rollout buffer on {server.url}")
    if not given:
        click.echo(f"token: {server.token}  (pass it as rollout_buffer.token or {TOKEN_ENV})")
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    server.stop()
