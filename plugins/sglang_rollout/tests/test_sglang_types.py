"""The plugin's requests and parsers checked against SGLang's own code (sglang 0.5.23).

Runs where ``sglang`` is installed; elsewhere it is skipped. ``sglang`` cannot be installed
beside this project's CPU torch in the normal way (it pins a CUDA torch), so CI builds a
throwaway venv with ``pip install --no-deps sglang==0.5.23`` plus the light packages its
modules import (``tests/sglang_venv.sh``) and runs this file with that venv's python.

One stand-in is needed there: ``sglang.srt.managers.io_struct`` imports, through its model
configs, ``torchvision.transforms`` (internvl_utils.py), and PyPI's torchvision wheels are
CUDA builds whose ``_C.so`` links ``libtorch_cuda.so``, absent from ``torch 2.13.0+cpu``, so
``import torchvision`` fails ("operator torchvision::nms does not exist"). When it does, this
module serves ``torchvision`` as empty stub modules, after transformers has recorded that
torchvision is unavailable. Only image preprocessing constants come from it; nothing checked
here touches it.

What is checked, all with SGLang's code: every endpoint exists in SGLang's FastAPI app with the
method the engine uses; every request body validates as the endpoint's request type the way
FastAPI validates it (pydantic), with no key SGLang would silently ignore; ``/generate`` bodies
pass SGLang's JSON contract check and build a ``SamplingParams`` that normalizes and verifies; the tensor payload is read back
by ``MultiprocessingSerializer.deserialize``; answers built from SGLang's finish-reason classes
and logprob formatting parse; the launch command parses with ``ServerArgs.add_cli_args``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import sys
import types
from typing import Any

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip("sglang is not installed here (tests/sglang_venv.sh builds an env that has it)",
                allow_module_level=True)


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _StubModule(f"{self.__name__}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self


class _TorchvisionStub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        mod = _StubModule(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module: Any) -> None:
        pass


def _import_sglang() -> Any:
    import transformers.utils.import_utils  # noqa: F401 - records torchvision's absence first

    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - see the module docstring
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        sys.meta_path.insert(0, _TorchvisionStub())
    return importlib.import_module("sglang.srt.managers.io_struct")


io = _import_sglang()

from pydantic import TypeAdapter  # noqa: E402
from sglang_rollout import api  # noqa: E402
from sglang_rollout.config import SGLangSection  # noqa: E402
from sglang_rollout.launch import server_command  # noqa: E402
from sglang_rollout.tensors import serialize_named_tensors  # noqa: E402
from slime_hookspecs import SamplingParams  # noqa: E402


def _fields(tp: type) -> set[str]:
    if dataclasses.is_dataclass(tp):
        return {f.name for f in dataclasses.fields(tp)}
    return set(tp.__struct_fields__)  # msgspec.Struct


def validate(tp: type, body: dict[str, Any]) -> Any:
    """As FastAPI does for a JSON body (pydantic), plus: no key SGLang would ignore."""
    unknown = set(json.loads(json.dumps(body))) - _fields(tp)
    assert not unknown, f"{tp.__name__} has no field(s) {sorted(unknown)}"
    return TypeAdapter(tp).validate_python(json.loads(json.dumps(body)))


def test_every_endpoint_exists_with_the_method_used() -> None:
    from fastapi.routing import APIRoute
    from sglang.srt.entrypoints.http_server import app

    routes: dict[str, set[str]] = {}
    for r in app.routes:
        if isinstance(r, APIRoute):
            routes.setdefault(r.path, set()).update(r.methods)
    for path, method in api.ENDPOINTS.items():
        assert method in routes.get(path, set()), f"{method} {path} not routed by SGLang"


@pytest.mark.parametrize("sp", [
    SamplingParams(),
    SamplingParams(temperature=0.0, max_new_tokens=3),
    SamplingParams(temperature=0.6, top_p=0.95, top_k=40, stop=["</s>", "\n\n"],
                   stop_token_ids=[2, 7], ignore_eos=True, seed=2**40),
])
def test_generate_body(sp: SamplingParams, tokenizer_dir) -> None:
    from sglang.srt.entrypoints.api_contract import generate_contract_error
    from sglang.srt.sampling.sampling_params import SamplingParams as SGLSamplingParams
    from transformers import AutoTokenizer

    body = api.generate_body([3, 1, 4, 1, 5], sp)
    assert generate_contract_error(json.loads(json.dumps(body))) is None
    req = validate(io.GenerateReqInput, body)
    req.normalize_batch_and_arguments()
    assert req.input_ids == [3, 1, 4, 1, 5] and req.return_logprob is True and req.is_single
    sampling = json.loads(json.dumps(body["sampling_params"]))
    assert not set(sampling) - _fields(SGLSamplingParams)
    params = SGLSamplingParams(**sampling)  # as TokenizerManager builds it, then normalizes
    params.normalize(AutoTokenizer.from_pretrained(str(tokenizer_dir)))
    params.verify(vocab_size=1000)
    assert params.max_new_tokens == sp.max_new_tokens
    assert params.sampling_seed == sp.seed and params.ignore_eos == sp.ignore_eos
    assert params.stop_strs == list(sp.stop)
    assert params.stop_token_ids == (set(sp.stop_token_ids) or None)
    assert params.top_k == (1 if sp.temperature == 0 else sp.top_k if sp.top_k > 0 else 1 << 30)


def test_weight_and_control_bodies() -> None:
    disk = validate(io.UpdateWeightFromDiskReqInput, api.update_weights_from_disk_body("/w/v1", 1))
    assert (disk.model_path, disk.weight_version, disk.flush_cache) == ("/w/v1", "1", True)
    group = validate(io.InitWeightsUpdateGroupReqInput,
                     api.init_weights_update_group_body("10.1.1.1", 29500, 1, 9, "g", "nccl"))
    assert (group.master_port, group.rank_offset, group.world_size) == (29500, 1, 9)
    dist = validate(io.UpdateWeightsFromDistributedReqInput,
                    api.update_weights_from_distributed_body(["a"], ["torch.bfloat16"], [[2, 3]],
                                                             4, "g"))
    assert (dist.dtypes, dist.shapes, dist.weight_version) == (["bfloat16"], [[2, 3]], "4")
    assert validate(io.DestroyWeightsUpdateGroupReqInput,
                    api.destroy_weights_update_group_body("g")).group_name == "g"
    assert validate(io.AbortReq, api.abort_all_body()).abort_all is True
    for mode in ("abort", "retract", "in_place"):
        assert validate(io.PauseGenerationReqInput, api.pause_generation_body(mode)).mode == mode
    validate(io.ContinueGenerationReqInput, api.continue_generation_body())
    for tp in (io.ReleaseMemoryOccupationReqInput, io.ResumeMemoryOccupationReqInput):
        assert validate(tp, api.memory_body()).tags is None
        assert validate(tp, api.memory_body(["weights"])).tags == ["weights"]


def test_tensor_payload_reads_back_with_sglangs_deserializer() -> None:
    import torch
    from sglang.srt.utils.common import MultiprocessingSerializer

    w = {"model.embed_tokens.weight": torch.randn(5, 3), "lm_head.bias": torch.randn(5)}
    body = api.update_weights_from_tensor_body(serialize_named_tensors(w, tp_size=2), 3)
    req = validate(io.UpdateWeightsFromTensorReqInput, body)
    assert len(req.serialized_named_tensors) == 2 and isinstance(req.serialized_named_tensors[1], bytes)
    named = MultiprocessingSerializer.deserialize(body["serialized_named_tensors"][1])
    assert [n for n, _ in named] == list(w)
    assert all(torch.equal(t, w[n]) for n, t in named)


def test_answers_built_like_sglang_parse() -> None:
    from sglang.srt.managers.schedule_batch import (
        FINISH_ABORT,
        FINISH_LENGTH,
        FINISH_MATCHED_STR,
        FINISH_MATCHED_TOKEN,
    )
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    pairs = TokenizerManager.detokenize_logprob_tokens(None, [-0.25, -1.5], [17, 2], False)
    for reason, kind in [(FINISH_MATCHED_TOKEN(2), "stop"), (FINISH_MATCHED_STR("\n"), "stop"),
                         (FINISH_LENGTH(2), "length"), (FINISH_ABORT(), "abort")]:
        answer = json.loads(json.dumps({
            "text": "x\n", "output_ids": [17, 2],
            "meta_info": {"id": "r", "finish_reason": reason.to_json(), "prompt_tokens": 4,
                          "weight_version": "default", "output_token_logprobs": pairs}}))
        g = api.parse_generate("sglang", answer)
        assert (g.token_ids, g.log_probs, g.finish_reason) == ([17, 2], [-0.25, -1.5], kind)
        assert g.weight_version == -1 and g.abort_status is None
    aborted = FINISH_ABORT("too long", 400, "BadRequestError").to_json()
    g = api.parse_generate("sglang", {"text": "", "meta_info": {"finish_reason": aborted}})
    assert g.abort_status == 400 and g.token_ids == []


def test_launch_command_parses_as_sglang_server_args() -> None:
    from sglang.srt.server_args import ServerArgs

    sec = SGLangSection(tp_size=2, base_gpu_id=2, api_key="k", enable_sleep=True,
                        mem_fraction_static=0.6, server_args={"chunked_prefill_size": 2048,
                                                              "enable_metrics": True})
    cmd = server_command(sec, model_path="/models/qwen", port=31000, nccl_port=31001,
                         engine_index=1, seed=5, tokenizer_path="/tok", trust_remote_code=True)
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    ns = parser.parse_args(cmd[3:])
    assert (ns.model_path, ns.host, ns.port, ns.nccl_port) == ("/models/qwen", "127.0.0.1", 31000, 31001)
    assert (ns.tp_size, ns.base_gpu_id, ns.random_seed) == (2, 4, 6)
    assert ns.skip_server_warmup and ns.enable_memory_saver and ns.trust_remote_code
    assert (ns.api_key, ns.mem_fraction_static, ns.chunked_prefill_size) == ("k", 0.6, 2048)
    assert ns.tokenizer_path == "/tok" and ns.enable_metrics


def test_lora_bodies_answers_and_launch_flags() -> None:
    """LoRA runs (``sglang_rollout.lora``): the load/unload bodies validate as SGLang's request
    types, ``lora_path`` on ``/generate`` as ``GenerateReqInput``'s, an answer built as SGLang
    builds it parses, and the LoRA launch flags parse (checked as ``ServerArgs`` checks them)."""
    from types import SimpleNamespace

    from sglang.srt.server_args import ServerArgs
    from sglang.srt.utils.msgspec_utils import msgspec_to_builtins
    from sglang_rollout.lora import launch_flags

    load = validate(io.LoadLoRAAdapterReqInput, api.load_lora_adapter_body("slime-v3", "/a/v3"))
    assert (load.lora_name, load.lora_path, load.pinned) == ("slime-v3", "/a/v3", False)
    assert validate(io.UnloadLoRAAdapterReqInput,
                    api.unload_lora_adapter_body("slime-v2")).lora_name == "slime-v2"
    gen = validate(io.GenerateReqInput, api.generate_body([3, 1], SamplingParams(),
                                                          lora_name="slime-v3"))
    gen.normalize_batch_and_arguments()
    assert gen.lora_path == "slime-v3"
    answer = json.loads(json.dumps(msgspec_to_builtins(io.LoRAUpdateOutput(
        success=True, error_message="", loaded_adapters={"slime-v3": "/a/v3"}))))
    assert api.parse_lora_update("sglang", answer) == {"slime-v3": "/a/v3"}
    failed = json.loads(json.dumps(msgspec_to_builtins(io.LoRAUpdateOutput(
        success=False, error_message="LoRA is not enabled."))))
    with pytest.raises(api.SGLangResponseError, match="failed: LoRA is not enabled"):
        api.parse_lora_update("sglang", failed)

    spec = SimpleNamespace(rank=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                    "gate_proj", "up_proj", "down_proj"])
    for targets, expected in [(spec.target_modules, set(spec.target_modules)),
                              (["all-linear"], {"all"})]:
        spec.target_modules = targets
        cmd = server_command(SGLangSection(), model_path="/m", port=31000, nccl_port=31001,
                             engine_index=0, seed=1, extra_args=launch_flags(spec))
        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        ns = parser.parse_args(cmd[3:])
        assert ns.enable_lora and ns.max_lora_rank == 16
        assert set(ns.lora_target_modules) == expected
        assert (ns.max_loras_per_batch, ns.max_loaded_loras) == (2, 2)
