"""Plugin module for ``tests/test_accelerator_record.py``: the ``fakedev`` accelerator record.

``fakedev`` runs on the CPU but shares nothing else with the built-in ``cpu`` record: its own
name, torch device type label (``fakedev``), torch.distributed backend (``fakedev_ccl``, a
third-party backend registered with ``torch.distributed.Backend.register_backend`` exactly as
torch_npu registers ``hccl``; it builds a gloo group underneath), Ray resource (``FAKEDEV``),
visible-devices variable and a priority above ``cuda`` (so ``accelerator = "auto"`` picks it).

Everything the framework asks of it is written down, one JSON line per event, into
``$SLIME_TEST_FAKEDEV_DIR/<pid>.jsonl`` (Ray workers are other processes, so a file is the
only way back): every ``device()`` call with its caller, every ``fakedev_ccl`` group built,
and, in processes where ``$SLIME_TEST_FAKEDEV_SPY`` is set (the Ray workers), every
``torch.distributed.init_process_group`` call and every gloo/nccl group constructed directly
through ``torch.distributed`` rather than through the record's backend.

Loaded in Ray workers through ``run.plugin_modules = ["tests.accel_plugin"]``; torch is imported
only when the accelerator is built.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from slime_hookspecs import AcceleratorRecord, hookimpl

NAME = "fakedev"
BACKEND = "fakedev_ccl"
RESOURCE = "FAKEDEV"
VISIBLE_ENV = "FAKEDEV_VISIBLE_DEVICES"
DIR_ENV = "SLIME_TEST_FAKEDEV_DIR"
SPY_ENV = "SLIME_TEST_FAKEDEV_SPY"


def record(event: str, **fields: Any) -> None:
    out = os.environ.get(DIR_ENV)
    if not out:
        return
    line = json.dumps({"event": event, "pid": os.getpid(), **fields}, default=str)
    with open(os.path.join(out, f"{os.getpid()}.jsonl"), "a") as fh:
        fh.write(line + "\n")


def _caller(depth: int = 2) -> str:
    frame = sys._getframe(depth)
    return f"{frame.f_globals.get('__name__', '?')}.{frame.f_code.co_qualname}"


def _ray_assigned() -> dict[str, float] | None:
    """The resources Ray gave this actor (None outside a Ray worker)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    ctx = ray.get_runtime_context()
    if ctx.get_actor_id() is None:
        return None
    return dict(ctx.get_assigned_resources())


# -- the torch.distributed backend ----------------------------------------------------------

_ORIGINAL: dict[str, Any] = {}


def _create_group(store: Any, rank: int, size: int, timeout: Any) -> Any:
    """Creator of ``fakedev_ccl`` groups: a gloo group on loopback, recorded."""
    import torch.distributed as dist

    gloo = _ORIGINAL.get("ProcessGroupGloo", dist.ProcessGroupGloo)
    opts = gloo._Options()
    opts._devices = [gloo.create_device(hostname="127.0.0.1")]
    opts._timeout = timeout
    record("process_group", backend=BACKEND, rank=rank, size=size, caller=_caller())
    return gloo(store, rank, size, opts)


def register_backend() -> None:
    import torch.distributed as dist

    if not hasattr(dist.Backend, BACKEND.upper()):  # once per process
        dist.Backend.register_backend(BACKEND, _create_group, devices=["cpu"])


def install_spies() -> None:
    """Record every default-group init and every gloo/nccl group built around the record."""
    import torch.distributed as dist

    if _ORIGINAL:
        return
    init = dist.init_process_group

    def spy_init(*args: Any, **kwargs: Any) -> Any:
        backend = kwargs.get("backend", args[0] if args else None)
        record("init_process_group", backend=str(backend), caller=_caller())
        return init(*args, **kwargs)

    _ORIGINAL["init_process_group"] = init
    dist.init_process_group = spy_init
    for cls_name in ("ProcessGroupGloo", "ProcessGroupNCCL"):
        cls = getattr(dist, cls_name, None)
        if cls is None:  # the CPU build of torch has no NCCL
            continue
        _ORIGINAL[cls_name] = cls

        class Spy(cls):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, _name: str = cls_name, **kwargs: Any) -> None:
                record("direct_group", cls=_name, caller=_caller())
                super().__init__(*args, **kwargs)

        Spy.__name__ = cls_name
        setattr(dist, cls_name, Spy)


# -- the accelerator ------------------------------------------------------------------------


class FakeDevAccelerator:
    """CPU underneath; every call recorded."""

    device_type = NAME

    def __init__(self) -> None:
        register_backend()
        if os.environ.get(SPY_ENV):
            install_spies()
        record("accelerator", assigned=_ray_assigned(), visible=os.environ.get(VISIBLE_ENV),
               caller=_caller())

    def device_count(self) -> int:
        return 1

    def device(self, index: int = 0) -> Any:
        import torch

        record("device", index=index, caller=_caller())
        return torch.device("cpu")

    def memory_stats(self) -> dict[str, float]:
        record("memory_stats", caller=_caller())
        return {"fakedev_gb": 0.0}

    def empty_cache(self) -> None:
        record("empty_cache", caller=_caller())

    def get_rng_state(self) -> Any:
        record("get_rng_state", caller=_caller())
        return None

    def set_rng_state(self, state: Any) -> None:
        record("set_rng_state", caller=_caller())


@hookimpl
def slime_register_accelerators() -> list[AcceleratorRecord]:
    return [AcceleratorRecord(
        name=NAME, factory=FakeDevAccelerator, summary="test device: the CPU under its own names",
        device_type=NAME, dist_backend=BACKEND, ray_resource=RESOURCE,
        visible_devices_env=VISIBLE_ENV, priority=1000,
    )]
