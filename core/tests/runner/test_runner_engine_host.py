"""``CallerThreadHost``: the event loop runs on a helper thread, the engine calls it queues run
on the calling thread in submission order, and errors reach the right side."""

from __future__ import annotations

import asyncio
import threading

import pytest
from slime_core.runner.engine_host import CallerThreadHost


def test_calls_run_on_the_calling_thread_while_the_loop_runs_elsewhere() -> None:
    host = CallerThreadHost()
    caller = threading.get_ident()
    seen: list[tuple[str, int]] = []

    def engine_call(tag: str) -> str:
        seen.append((tag, threading.get_ident()))
        return tag.upper()

    async def episode() -> list[str]:
        loop_thread = threading.get_ident()
        assert loop_thread != caller
        # concurrent requests: all queued, served one at a time in submission order
        return await asyncio.gather(*(host.call(engine_call, t) for t in ("a", "b", "c")))

    assert host.run(episode) == ["A", "B", "C"]
    assert [t for t, _ in seen] == ["a", "b", "c"]
    assert {ident for _, ident in seen} == {caller}


def test_an_engine_error_reaches_the_coroutine_and_a_loop_error_the_caller() -> None:
    host = CallerThreadHost()

    def broken() -> None:
        raise RuntimeError("engine 0 died")

    async def handles_it() -> str:
        try:
            await host.call(broken)
        except RuntimeError as exc:
            return f"caught: {exc}"
        return "not raised"

    assert host.run(handles_it) == "caught: engine 0 died"

    async def fails() -> None:
        await host.call(lambda: None)
        raise ValueError("bad sample")

    with pytest.raises(ValueError, match="bad sample"):
        host.run(fails)
