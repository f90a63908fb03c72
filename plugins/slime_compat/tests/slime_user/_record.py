"""Test instrumentation: which slime functions ran (one JSON line each, to $SLIME_USER_LOG)."""

import json
import os


def record(name: str, **info) -> None:
    path = os.environ.get("SLIME_USER_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"fn": name, **info}) + "\n")
