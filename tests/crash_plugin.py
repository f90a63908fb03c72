"""A plugin module (``run.plugin_modules = ["tests.crash_plugin"]``) that SIGKILLs its process
at a lifecycle hook: ``SLIME_TEST_CRASH_AT=HOOK:ROLLOUT_ID`` (e.g. ``slime_after_save:2``).

It goes through the ordinary hooks only, so it crashes a run the same way before and after a
change to the driver: the crash-recovery tests fail against the code they were written for.
"""

from __future__ import annotations

import os
import signal

from slime_hookspecs import hookimpl

ENV = "SLIME_TEST_CRASH_AT"


def _maybe_kill(hook: str, rollout_id: int) -> None:
    spec = os.environ.get(ENV, "")
    name, _, at = spec.partition(":")
    if name == hook and at and int(at) == rollout_id:
        os.kill(os.getpid(), signal.SIGKILL)


@hookimpl
def slime_before_train(config, rollout_id):  # noqa: ANN001, ANN201
    _maybe_kill("slime_before_train", rollout_id)


@hookimpl
def slime_before_save(config, rollout_id, path):  # noqa: ANN001, ANN201
    _maybe_kill("slime_before_save", rollout_id)


@hookimpl
def slime_after_save(config, rollout_id, path):  # noqa: ANN001, ANN201
    _maybe_kill("slime_after_save", rollout_id)
