"""The agent API on its own: ``python -m slime_agent.serve --config run.toml``.

Loads the run's plugins and config exactly as ``core run`` does, builds the configured
rollout engines (``rollout.engine``, ``rollout.num_engines``) on the configured accelerator,
and serves :class:`~slime_agent.api.AgentApiServer` with ``[agent_api]`` until SIGINT /
SIGTERM. Nothing is trained and no run directory is made: this is for developing an agent
against the model, or for serving episodes to workers of a trainer elsewhere. The first line
printed is ``agent API on <url>``; the token follows when it was generated.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

TOKEN_ENV = "SLIME_AGENT_API_TOKEN"


def build(config_path: str | None, overrides: list[str]) -> Any:
    """The server (not started) for a config file and ``-o key=value`` overrides."""
    import os

    from slime_core.api import accelerator_record, get_registries, load_run, load_tokenizer

    from slime_agent.api import AgentApiServer, require_chat_template

    if os.environ.get(TOKEN_ENV) and not any(o.startswith("agent_api.token=") for o in overrides):
        overrides = [*overrides, f"agent_api.token={os.environ[TOKEN_ENV]}"]
    config = load_run(config_path, overrides, required=["core_tools"])  # [agent_api]
    tokenizer = load_tokenizer(config.model)
    require_chat_template(tokenizer)  # before the engines load the model
    accelerator = accelerator_record(config).factory()
    rec = get_registries().rollout_engine.get(config.rollout.engine)
    engines = [rec.factory(config, i, accelerator) for i in range(config.rollout.num_engines)]
    return AgentApiServer.from_config(config, engines, tokenizer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slime_agent.serve",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="the run's TOML file")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help="as `core run -o` (e.g. agent_api.port=8000)")
    args = parser.parse_args(argv)
    try:
        server = build(args.config, args.override).start()
    except (ValueError, RuntimeError, KeyError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"agent API on {server.url}", flush=True)
    if server.token_generated:
        print(f"token: {server.token}  (pass it as agent_api.token or {TOKEN_ENV})", flush=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
