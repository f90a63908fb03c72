"""Several trainer ranks under the ``local`` executor: one spawned process per rank.

``train.num_ranks > 1`` without Ray (a laptop, a single GPU host, CI): each rank is a process
started with the ``spawn`` method, running the same :class:`TrainerWorker` as a Ray trainer
actor (so it rebuilds the driver's plugin set from the picklable selection, and hooks such as
``slime_trainer_init`` fire in the rank's process, as under Ray). The ranks join one default
``torch.distributed`` group with the accelerator record's backend (gloo on the CPU) through a
store the driver serves on 127.0.0.1 under a random key prefix
(:mod:`~slime_core.runtime.dist_group`). Commands and results travel over pipes with
``torch.multiprocessing``'s pickler, so tensors (exported weights, log-probs) are handed over in
shared memory rather than copied through the pipe.

On a host with several devices of the accelerator, rank ``r`` sees device ``r % count`` only
(its visible-devices variable, e.g. ``CUDA_VISIBLE_DEVICES``), as Ray would assign it. Plugin
objects registered on the driver only do not reach the ranks (as under Ray): the executor
warns about them.
"""

from __future__ import annotations

import os
import secrets
import traceback
from typing import Any

from slime_hookspecs import AcceleratorRecord

from slime_core.executors.trainer_group import TrainerGroup
from slime_core.pluginmgr import PluginSelection

_POLL_S = 0.5


def _rank_main(conn: Any, selection: PluginSelection, config: Any, rank: int, world: int,
               accel_name: str, host: str, port: int, prefix: str) -> None:
    """A rank process: build, report the layout, then answer commands until ``stop``."""
    from slime_core.executors.ray_workers import TrainerWorker

    try:
        worker = TrainerWorker(selection, config, rank, world, accel_name)
        worker.init_dist(host, port, prefix)
        conn.send(("ok", worker.build()))
    except BaseException as exc:  # noqa: BLE001 - reported to the driver, then exit
        conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        return
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the driver is gone
            return
        method, args = message
        if method == "stop":
            conn.send(("ok", None))
            return
        try:
            conn.send(("ok", getattr(worker, method)(*args)))
        except BaseException as exc:  # noqa: BLE001 - the driver raises it with the rank named
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


class RankProcessError(RuntimeError):
    """A trainer rank process failed a command or died."""


class LocalRankGroup(TrainerGroup):
    """``train.num_ranks`` trainer rank processes on this machine, seen as one trainer."""

    def __init__(self, selection: PluginSelection, config: Any, accel_record: AcceleratorRecord,
                 accelerator: Any) -> None:
        import torch.multiprocessing as mp

        from slime_core.runtime.dist_group import StoreServer

        world = int(config.train.num_ranks)
        super().__init__(world)
        timeout = float(config.ray.collective_timeout_s)
        self._server = StoreServer("127.0.0.1", world, timeout)
        prefix = f"slime-local-dp-{secrets.token_hex(16)}/"
        ctx = mp.get_context("spawn")
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        env = accel_record.visible_devices_env
        count = _device_count(accelerator) if env else 0
        try:
            for rank in range(world):
                parent, child = ctx.Pipe()
                proc = ctx.Process(
                    target=_rank_main, name=f"slime-trainer-rank-{rank}", daemon=True,
                    args=(child, selection, config, rank, world, accel_record.name,
                          self._server.host, self._server.port, prefix),
                )
                with _visible_device(env, rank, count):
                    proc.start()
                child.close()
                self.procs.append(proc)
                self.conns.append(parent)
            self.set_layout(self._receive_all("building the trainer ranks"))
        except BaseException:
            self.shutdown()
            raise

    # -- transport -------------------------------------------------------------------------
    def _receive(self, rank: int, what: str) -> Any:
        conn, proc = self.conns[rank], self.procs[rank]
        while not conn.poll(_POLL_S):
            if not proc.is_alive():
                raise RankProcessError(
                    f"{what}: trainer rank {rank} (pid {proc.pid}) died with exit code "
                    f"{proc.exitcode}"
                )
        try:
            status, value = conn.recv()
        except EOFError as exc:
            raise RankProcessError(f"{what}: trainer rank {rank} closed its pipe") from exc
        if status == "error":
            raise RankProcessError(f"{what}: trainer rank {rank} failed: {value}")
        return value

    def _receive_all(self, what: str) -> list[Any]:
        results: list[Any] = []
        first_error: RankProcessError | None = None
        for rank in range(self.world_size):  # read every answer so no pipe is left half-read
            try:
                results.append(self._receive(rank, what))
            except RankProcessError as exc:
                first_error = first_error or exc
                results.append(None)
        if first_error is not None:
            raise first_error
        return results

    def call(self, method: str, args: list[tuple[Any, ...]], what: str) -> list[Any]:
        for conn, a in zip(self.conns, args, strict=True):
            conn.send((method, a))
        return self._receive_all(what)

    def call_rank0(self, method: str, args: tuple[Any, ...], what: str) -> Any:
        self.conns[0].send((method, args))
        return self._receive(0, what)

    def shutdown(self) -> None:
        for conn, proc in zip(self.conns, self.procs, strict=False):
            if proc.is_alive():
                try:
                    conn.send(("stop", ()))
                except (BrokenPipeError, OSError):
                    pass
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        for conn in self.conns:
            conn.close()
        self.procs, self.conns = [], []
        self._server.close()


def _device_count(accelerator: Any) -> int:
    try:
        return int(accelerator.device_count())
    except Exception:  # noqa: BLE001 - no device query: leave visibility alone
        return 0


class _visible_device:
    """Rank ``rank`` sees only device ``rank % count`` while its process starts (spawned
    children read the environment at start)."""

    def __init__(self, env: str | None, rank: int, count: int) -> None:
        self.env, self.value = env, str(rank % count) if env and count > 1 else None
        self.saved: str | None = None

    def __enter__(self) -> None:
        if self.env and self.value is not None:
            self.saved = os.environ.get(self.env)
            if self.saved:  # already restricted: pick from the devices this driver sees
                visible = self.saved.split(",")
                self.value = visible[int(self.value) % len(visible)]
            os.environ[self.env] = self.value

    def __exit__(self, *exc: object) -> None:
        if self.env and self.value is not None:
            if self.saved is None:
                os.environ.pop(self.env, None)
            else:
                os.environ[self.env] = self.saved
