"""``SGLangEngine``: the ``sglang`` rollout engine, one SGLang server per engine.

Implements :class:`slime_hookspecs.RolloutEngine` over SGLang's native HTTP API
(:mod:`sglang_rollout.api`), the way slime drives SGLang:

* generation: one ``POST /generate`` per prompt with ``input_ids`` and ``return_logprob``, at
  most ``sglang.max_concurrency`` in flight, through ``sglang.router_url`` when set;
* abort: ``POST /abort_request {"abort_all": true}`` to the engine's own server; requests of a
  running ``generate`` call that were not sent yet finish ``abort`` without being sent, and
  abort is re-sent every ``abort_retry_s`` while aborted requests are still out (a request can
  reach the server just after an abort; slime retries for the same reason);
* weights: ``/update_weights_from_disk`` (the core's ``disk`` transport calls
  :meth:`update_weights_from_disk`), ``/update_weights_from_tensor`` (tensors of a colocated
  trainer, :meth:`update_weights` with a mapping), ``/init_weights_update_group`` +
  ``/update_weights_from_distributed`` (bodies; the trainer broadcasts), each with
  ``weight_version``, wrapped in ``/pause_generation`` + ``/flush_cache`` ...
  ``/continue_generation`` as slime does, then checked with ``/model_info``
  (``/get_weight_version`` on older SGLang) and, with ``sglang.check_weights``, by reading the
  first rows of a few tensors back (``/get_weights_by_name``, :mod:`.weight_check`);
* memory: ``/release_memory_occupation`` / ``/resume_memory_occupation`` for ``sleep`` /
  ``wake_up`` when ``sglang.enable_sleep`` (launched servers then get ``--enable-memory-saver``);
* health: ``GET /health_generate`` answering 200;
* LoRA runs (a plugin answers ``slime_engine_adapter``): launched servers get SGLang's LoRA
  flags, each sync (disk or tensors) is served as a new adapter through
  ``/load_lora_adapter`` and the previous one unloaded, and every ``/generate`` names the
  current one in ``lora_path`` (:mod:`sglang_rollout.lora`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from slime_core.api import (
    check_generate_inputs,
    engine_adapter,
    record_from_int32,
    replay_shape,
    rollout_dtype,
)
from slime_hookspecs import GenerateOutput, SamplingParams

from sglang_rollout import api
from sglang_rollout.config import SGLangSection, section_of
from sglang_rollout.http import LoopThread, ServerClient, SGLangHTTPError
from sglang_rollout.launch import served_dtype
from sglang_rollout.lora import ServedAdapter, launch_flags
from sglang_rollout.servers import Servers

log = logging.getLogger(__name__)


class SGLangAbortedError(RuntimeError):
    """SGLang aborted a request on its own (an error status, not an abort we asked for)."""


class SGLangEngine:
    """``SGLangEngine(config, engine_index, accelerator)``; see the module docstring."""

    def __init__(self, config: Any, engine_index: int = 0, accelerator: Any = None) -> None:
        self.config = config
        self.engine_index = engine_index
        self.sec: SGLangSection = section_of(config)
        self._loop = LoopThread(f"sglang-engine-{engine_index}")
        self._aborts = itertools.count(1)
        self._abort_epoch = 0
        self._asleep = False
        self._closed = False
        # train.routing_replay: ask every /generate for the experts it routed to, read with
        # the model's MoE shape (from its config: the weights are the server's)
        self._moe = replay_shape(config, "sglang")
        self._version_endpoint = "/model_info"
        self._can_check = True  # until the server cannot answer /get_weights_by_name
        self.weights_checked = 0  # updates whose tensors were read back and matched
        self.adapter: ServedAdapter | None = None  # LoRA runs: the adapter served
        try:
            spec = engine_adapter(config)
            extra: list[str] = []
            if spec is not None:
                extra = launch_flags(spec)  # refuses targets SGLang cannot adapt, first
                self.adapter = ServedAdapter(spec, engine_index, self.sec.lora_dir)
            self.servers = Servers(config, self.sec, engine_index, self._loop, extra)
            self.url = self.servers.url
            self.server = ServerClient(self.url, self.sec.api_key)
            gen_url = self.sec.router_url or self.url
            self.generator = ServerClient(gen_url, self.sec.api_key)
            self._version = self.weight_version()  # also: the server answers at all
        except BaseException:
            self.shutdown()
            raise

    # -- generation ------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[GenerateOutput]:
        """One output per prompt, from ``/generate`` answers (see :func:`api.parse_generate`)."""
        epoch = self._abort_epoch  # an abort() from now on ends this call
        # the shared checks; vocabulary, context and stop strings are the server's to judge
        prompts = check_generate_inputs(prompts, params)
        if not prompts:
            return []
        self._check_awake()
        return self._loop.run(self._generate_all(prompts, params, epoch))

    async def _generate_all(self, prompts: list[list[int]], params: list[SamplingParams],
                            epoch: int) -> list[GenerateOutput]:
        sem = asyncio.Semaphore(self.sec.max_concurrency)
        tasks = [asyncio.ensure_future(self._generate_one(p, sp, epoch, sem))
                 for p, sp in zip(prompts, params, strict=True)]
        watcher = asyncio.ensure_future(self._re_abort(tasks, epoch))
        try:
            return list(await asyncio.gather(*tasks))
        finally:
            watcher.cancel()
            for t in tasks:
                t.cancel()

    async def _generate_one(self, prompt: list[int], sp: SamplingParams, epoch: int,
                            sem: asyncio.Semaphore) -> GenerateOutput:
        async with sem:
            if self._abort_epoch != epoch:  # aborted before it was sent
                return GenerateOutput([], [], "abort", self._version, "")
            lora = self.adapter.name_for(self._version) if self.adapter is not None else None
            body = api.generate_body(prompt, sp, self.sec.skip_special_tokens,
                                     routed_experts=self._moe is not None, lora_name=lora)
            _, data = await self.generator.call("POST", "/generate", body,
                                                self.sec.request_timeout_s)
        where = f"SGLang server {self.generator.url}: POST /generate"
        gen = api.parse_generate(where, data)
        if gen.abort_status is not None and self._abort_epoch == epoch:
            raise SGLangAbortedError(
                f"{where}: the server aborted the request itself (status {gen.abort_status}): "
                f"{gen.abort_message or '(no message)'}"
            )
        version = self._version if gen.weight_version is None else gen.weight_version
        if self.adapter is not None and self.adapter.version is not None:
            version = self.adapter.version  # the server's own version is its base model's
        routed = None
        if self._moe is not None and gen.token_ids:
            if gen.routed_experts is None:
                raise api.SGLangResponseError(
                    f"{where}: no meta_info.routed_experts although return_routed_experts was "
                    "set (start the server with --enable-return-routed-experts)")
            routed = record_from_int32(
                gen.routed_experts, len(prompt) + len(gen.token_ids) - 1, self._moe,
                f"{where}: meta_info.routed_experts (prompt of {len(prompt)} tokens, "
                f"{len(gen.token_ids)} generated)")
        return GenerateOutput(gen.token_ids, gen.log_probs, gen.finish_reason, version, gen.text,
                              routed_experts=routed)

    async def _re_abort(self, tasks: Sequence[asyncio.Future[Any]], epoch: int) -> None:
        while self._abort_epoch == epoch:
            await asyncio.sleep(0.05)
        while not all(t.done() for t in tasks):
            await asyncio.sleep(self.sec.abort_retry_s)
            if not all(t.done() for t in tasks):
                await self._post_abort()

    async def _post_abort(self) -> None:
        try:
            # bounded by the health timeout: abort() runs on the rollout's event loop
            await self.server.call("POST", "/abort_request", api.abort_all_body(),
                                   self.sec.health_timeout_s * 4)
        except Exception as exc:  # noqa: BLE001 - best effort, as slime; generate reports failures
            log.warning("abort on %s failed: %s", self.url, exc)

    def abort(self) -> None:
        """End the running ``generate`` calls: unsent requests finish ``abort`` at once, sent
        ones when SGLang aborts them (keeping their tokens so far)."""
        self._abort_epoch = next(self._aborts)
        if not self._closed:
            self._loop.run(self._post_abort())

    # -- weights ---------------------------------------------------------------------------
    def update_weights(self, weights: Any, version: int) -> None:
        """A directory path -> :meth:`update_weights_from_disk`; a mapping name -> tensor ->
        :meth:`update_weights_from_tensor` (the server must be on this host: colocated).

        In a LoRA run ``weights`` is the adapter (the trainer's names); it is served as a new
        SGLang LoRA adapter instead (:mod:`sglang_rollout.lora`)."""
        if self.adapter is not None and isinstance(weights, Mapping):
            self._load_adapter(weights, version)
        elif isinstance(weights, (str, os.PathLike)):
            self.update_weights_from_disk(str(weights), version)
        elif isinstance(weights, Mapping):
            from sglang_rollout.tensors import serialize_named_tensors

            self.update_weights_from_tensor(
                serialize_named_tensors(weights, self.sec.tp_size), version)
            self._check_weights(version, weights)
        else:
            raise TypeError(
                f"sglang engine {self.engine_index}: update_weights takes a directory or a "
                f"mapping of name -> tensor, got {type(weights).__name__}"
            )

    def update_weights_from_disk(self, version_dir: str, version: int,
                                 load_format: str | None = None) -> None:
        """The server reloads ``version_dir`` (safetensors files; the model config is the one
        it was started with). The core's ``disk`` transport fires ``slime_before_weights_read``
        in this process before it calls this. In a LoRA run the directory holds the adapter:
        it is served as a new adapter (:meth:`update_weights`)."""
        if self.adapter is not None:
            from sglang_rollout.lora import read_version_dir

            self._load_adapter(read_version_dir(version_dir, version), version)
            return
        body = api.update_weights_from_disk_body(version_dir, version, load_format)
        self._weight_update("/update_weights_from_disk", body, version)
        if self.sec.check_weights and self._can_check:
            from sglang_rollout.weight_check import tensors_from_dir

            self._check_weights(version, tensors_from_dir(version_dir))

    def update_weights_from_tensor(self, serialized_named_tensors: list[str], version: int,
                                   load_format: str | None = None) -> None:
        body = api.update_weights_from_tensor_body(serialized_named_tensors, version, load_format)
        self._weight_update("/update_weights_from_tensor", body, version)

    def init_weights_update_group(self, master_address: str, master_port: int, rank_offset: int,
                                  world_size: int, group_name: str = "weight_update_group",
                                  backend: str = "nccl") -> Any:
        if self.adapter is not None:
            raise RuntimeError(
                f"sglang engine {self.engine_index}: a LoRA run serves each sync as an SGLang "
                "LoRA adapter loaded from a directory; the broadcast transport writes into "
                "the base model's weights instead: use weights.transport = disk or inprocess")
        body = api.init_weights_update_group_body(master_address, master_port, rank_offset,
                                                  world_size, group_name, backend)
        return self._call("POST", "/init_weights_update_group", body)

    def update_weights_from_distributed(self, names: list[str], dtypes: list[Any],
                                        shapes: list[list[int]], version: int,
                                        group_name: str = "weight_update_group",
                                        load_format: str | None = None) -> None:
        """Announce one bucket that the trainer then broadcasts in ``group_name``; no pause here
        (the caller brackets all buckets with :meth:`pause_generation` / ...)."""
        body = api.update_weights_from_distributed_body(names, dtypes, shapes, version,
                                                        group_name, True, load_format)
        self._call("POST", "/update_weights_from_distributed", body)
        self._version = int(version)

    def destroy_weights_update_group(self, group_name: str = "weight_update_group") -> Any:
        return self._call("POST", "/destroy_weights_update_group",
                          api.destroy_weights_update_group_body(group_name))

    def _load_adapter(self, weights: Mapping[str, Any], version: int) -> None:
        assert self.adapter is not None
        with self._paused():
            self.adapter.load(lambda endpoint, body: self._call("POST", endpoint, body),
                              f"SGLang server {self.url}", weights, version)
        self._version = int(version)

    def _weight_update(self, endpoint: str, body: dict[str, Any], version: int) -> None:
        with self._paused():
            self._call("POST", endpoint, body)
        got = self.weight_version()
        if got != int(version):
            raise RuntimeError(f"SGLang server {self.url}: POST {endpoint} succeeded but "
                               f"GET {self._version_endpoint} reports {got}, not {version}")

    def _check_weights(self, version: int, sent: Mapping[str, Any]) -> None:
        """Compare the first rows of a few tensors the server now holds with ``sent``
        (:mod:`sglang_rollout.weight_check`); a difference raises naming the tensor."""
        if not (self.sec.check_weights and self._can_check and sent):
            return
        from sglang_rollout.weight_check import compare, expected_rows, pick_names, truncate_size

        served = served_dtype(self.sec, rollout_dtype(self.config))
        expected = {n: (truncate_size(sent[n]), expected_rows(sent[n], served))
                    for n in pick_names(sent)}

        def fetch(name: str, size: int) -> Any:
            return self._call("POST", "/get_weights_by_name",
                              {"name": name, "truncate_size": size})

        try:
            why = compare(version, fetch, expected)
        except (SGLangHTTPError, api.SGLangResponseError) as exc:
            self._can_check = False
            log.warning("sglang engine %d: cannot read weights back from %s (%s); "
                        "sglang.check_weights is skipped from now on", self.engine_index,
                        self.url, api.clip(str(exc)))
            return
        if why is not None:
            raise RuntimeError(f"SGLang server {self.url}: {why}")
        self.weights_checked += 1

    def weight_version(self) -> int:
        """The server's version: ``GET /model_info`` (``/get_weight_version`` on older SGLang);
        in a LoRA run, once an adapter is served, the version that adapter holds."""
        if self.adapter is not None and self.adapter.version is not None:
            self._version = self.adapter.version
            return self._version
        timeout = self.sec.health_timeout_s * 4
        try:
            data = self._call("GET", self._version_endpoint, None, timeout)
        except SGLangHTTPError as exc:
            if exc.status != 404 or self._version_endpoint != "/model_info":
                raise
            self._version_endpoint = "/get_weight_version"
            data = self._call("GET", self._version_endpoint, None, timeout)
        self._version = api.parse_get_weight_version(
            f"SGLang server {self.url}: GET {self._version_endpoint}", data)
        return self._version

    # -- generation control ------------------------------------------------------------------
    def pause_generation(self) -> None:
        self._call("POST", "/pause_generation", api.pause_generation_body(self.sec.pause_mode))

    def continue_generation(self) -> None:
        self._call("POST", "/continue_generation", api.continue_generation_body())

    def flush_cache(self) -> None:
        """``/flush_cache`` until it succeeds (SGLang refuses while requests are queued)."""
        deadline = time.monotonic() + self.sec.flush_cache_timeout_s
        while True:
            try:
                self._call("POST", "/flush_cache", None, parse="text")
                return
            except SGLangHTTPError as exc:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"SGLang server {self.url}: /flush_cache kept failing for "
                                       f"{self.sec.flush_cache_timeout_s:g} s; last: {exc}") from exc
            time.sleep(0.5)

    @contextmanager
    def _paused(self) -> Iterator[None]:
        if not self.sec.pause_during_weight_update:
            yield
            return
        self.pause_generation()
        try:
            self.flush_cache()
            yield
        finally:
            self.continue_generation()

    # -- lifecycle ---------------------------------------------------------------------------
    def health(self) -> bool:
        if self._closed or not self.servers.alive():
            return False
        return self._loop.run(self.server.ok("GET", "/health_generate", self.sec.health_timeout_s))

    def sleep(self) -> None:
        """Release GPU memory (weights and KV cache); a no-op unless ``sglang.enable_sleep``."""
        if not self.sec.enable_sleep or self._asleep:
            return
        self.flush_cache()
        self._call("POST", "/release_memory_occupation", api.memory_body())
        self._asleep = True

    def wake_up(self) -> None:
        if not self.sec.enable_sleep or not self._asleep:
            return
        self._call("POST", "/resume_memory_occupation", api.memory_body())
        self._asleep = False

    def shutdown(self) -> None:
        """Leave the router, stop launched processes, close the HTTP session; idempotent."""
        if self._closed:
            return
        self._closed = True
        servers = getattr(self, "servers", None)
        try:
            if servers is not None:
                servers.stop()
        finally:
            for name in ("server", "generator"):
                client = getattr(self, name, None)
                if client is not None:
                    try:
                        self._loop.run(client.close(), timeout=10)
                    except Exception:  # noqa: BLE001 - closing a dead session is not an error
                        pass
            self._loop.close()
            if self.adapter is not None:
                self.adapter.close()

    # -- helpers -----------------------------------------------------------------------------
    def _check_awake(self) -> None:
        if self._closed:
            raise RuntimeError(f"sglang engine {self.engine_index} was shut down")
        if self._asleep:
            raise RuntimeError(f"sglang engine {self.engine_index} is asleep (memory released); "
                               "call wake_up() before generating")

    def _call(self, method: str, endpoint: str, body: dict[str, Any] | None = None,
              timeout: float | None = None, parse: str = "json") -> Any:
        if self._closed:
            raise RuntimeError(f"sglang engine {self.engine_index} was shut down")
        t = self.sec.control_timeout_s if timeout is None else timeout
        _, data = self._loop.run(self.server.call(method, endpoint, body, t, parse))
        if isinstance(data, dict) and data.get("success") is False:
            raise api.SGLangResponseError(f"SGLang server {self.url}: {method} {endpoint} "
                                          f"reported failure: {api.clip(repr(data))}")
        return data
