"""Built-in plugin ``core_tools``: agentic rollouts.

* config sections ``[tools]``, ``[agent_api]``, ``[rollout_buffer]``;
* tools ``calculator`` and ``python`` (``slime_register_tools``), the ``hermes`` tool parser
  (``slime_register_tool_parsers``), the ``rollout_buffer`` data source (its groups come
  finished: the rollout manager fetches them instead of generating);
* ``slime_run_start`` / ``slime_run_end``: the agent API and the buffer task
  (:mod:`slime_agent.buffer.services`);
* ``slime_generate``: multi-turn generation with tools while ``tools.enabled`` is non-empty
  (``None`` otherwise, so the single-turn default runs);
* ``slime_log_rollout`` / ``slime_log_eval``: the ``tool_*`` metrics;
* ``core rollout-buffer``: the service as a stand-alone process.

Everything heavy (aiohttp, jsonschema, transformers) is imported inside the hooks.
"""

from __future__ import annotations

from typing import Any

from slime_hookspecs import (
    Config,
    ConfigSection,
    DataSourceRecord,
    RecordKey,
    SandboxRecord,
    ToolParserRecord,
    ToolRecord,
    hookimpl,
)


def _tools_on(config: Config) -> bool:
    from slime_agent.sections import section

    return bool(section(config, "tools").enabled)


# names of records in these sections, checked with the config (slime_core.config.names)
RECORD_KEYS: dict[str, dict[str, RecordKey]] = {
    "tools": {
        "enabled": RecordKey(ToolRecord),
        "parser": RecordKey(ToolParserRecord),
        "sandbox": RecordKey(SandboxRecord),
    },
    "agent_api": {"tool_parser": RecordKey(ToolParserRecord)},
    "rollout_buffer": {"prompt_source": RecordKey(DataSourceRecord)},
}


@hookimpl
def slime_add_config(schema: Any) -> list[ConfigSection]:
    from slime_agent.sections import SECTIONS

    return [ConfigSection(name=n, schema=s, summary=doc, record_keys=RECORD_KEYS.get(n, {}))
            for n, s, doc in SECTIONS]


@hookimpl
def slime_register_tools() -> list[ToolRecord]:
    from slime_agent.tools import tool_records

    return tool_records()


@hookimpl
def slime_register_tool_parsers() -> list[ToolParserRecord]:
    from slime_agent.parsers import make_hermes_parser

    return [ToolParserRecord(
        name="hermes", factory=make_hermes_parser,
        summary='Hermes / Qwen: <tool_call>{"name": ..., "arguments": {...}}</tool_call>',
    )]


@hookimpl
def slime_register_data_sources() -> list[DataSourceRecord]:
    from slime_agent.buffer.source import make_rollout_buffer_source

    return [DataSourceRecord(
        name="rollout_buffer", factory=make_rollout_buffer_source,
        summary="finished trajectories from agent workers through the rollout-buffer service "
        "([rollout_buffer]); prompts from rollout_buffer.prompt_source",
    )]


@hookimpl
def slime_run_start(config: Config, run_dir: str) -> None:
    if _tools_on(config):
        from slime_agent.runtime import get_runtime

        get_runtime(config)  # fail now on a wrong tool / parser / sandbox name
    if config.data.source == "rollout_buffer":
        from slime_agent.buffer.services import prepare_services

        prepare_services(config, run_dir)  # workers can start before the first step


@hookimpl
def slime_generate(config: Config, sample: Any, sampling_params: Any, engine: Any) -> Any:
    if not _tools_on(config):
        return None
    from slime_agent.multiturn import generate_with_tools

    return generate_with_tools(config, sample, sampling_params, engine)


@hookimpl
def slime_run_end(config: Config, run_dir: str, status: str) -> None:
    from slime_agent.buffer.services import shutdown_services

    shutdown_services()


@hookimpl
def slime_log_rollout(config: Config, rollout_id: int, samples: list[Any],
                      metrics: dict[str, float]) -> None:
    from slime_agent.metrics import tool_metrics

    metrics.update(tool_metrics(samples, "rollout"))


@hookimpl
def slime_log_eval(config: Config, rollout_id: int, samples: list[Any],
                   metrics: dict[str, float]) -> None:
    from slime_agent.metrics import tool_metrics

    metrics.update(tool_metrics(samples, "eval"))


@hookimpl
def slime_register_commands(cli: Any) -> None:
    from slime_agent.buffer.cli import rollout_buffer_command

    cli.add_command(rollout_buffer_command)
