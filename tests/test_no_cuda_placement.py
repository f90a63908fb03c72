"""A search of the code for CUDA: nothing outside accelerator records decides placement by it.

Every ``cuda`` / ``nccl`` / ``GPU`` in the code of ``core/`` and ``plugins/`` (comments and
docstrings left out: they decide nothing) must be on the allow-list below with the reason it
is not a placement decision. Not searched: the accelerator records themselves (they are where
CUDA belongs), tests, docs, and the GPU-only check ``gpu_check.py``. An allow-list entry that no
longer matches anything in a file that still exists fails too, so the list stays honest.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEARCHED = ("core", "plugins")
NOT_SEARCHED = {
    "plugins/slime_std/slime_std/accelerators/plugin.py": "the cpu and cuda accelerator records",
    "plugins/slime_std/slime_std/accelerators/devices.py": "the cpu and cuda accelerators (torch.cuda calls)",
    "plugins/ascend_npu/ascend_npu/plugin.py": "the npu accelerator record",
    "plugins/slime_std/slime_std/accelerators/gpu_check.py": "GPU-only check (core gpu-check), run by hand on 2 CUDA devices",
}
PATTERN = re.compile(r"(?i:cuda|nccl)|\bGPU\b|num_gpus")

# (path, fragment of the code line, why it does not decide placement)
ALLOWED: list[tuple[str, str, str]] = [
    ("core/slime_core/kernels/__init__.py", 'return kind == "cuda" or',
     "whether a Triton kernel can run on the device the tensors are already on: a capability "
     "check, not a placement"),
    ("core/slime_core/kernels/__init__.py", 'needs a CUDA device and an importable triton',
     "the error text of that capability check"),
    ("core/slime_core/kernels/__init__.py", "from triton.language.extra import cuda as tl_cuda",
     "Triton's device-side launch-control intrinsics (gdc_wait): a capability check"),
    ("core/slime_core/kernels/__init__.py", 'hasattr(tl_cuda, "gdc_wait")',
     "whether this triton has programmatic dependent launch: a capability check"),
    ("core/slime_core/kernels/__init__.py", "torch.cuda.get_device_capability(index)",
     "the device the tensors are on has programmatic dependent launch (Hopper on)"),
    ("core/slime_core/kernels/__init__.py", 'return (device.type == "cuda" and',
     "reads where the tensors already are; chooses a launch mode, not a placement"),
    ("core/slime_core/kernels/__init__.py", "else torch.cuda.current_device()",
     "the index of a tensor's device given as plain 'cuda'; places nothing"),
    ("plugins/slime_std/slime_std/engine/kernels/decode_attention.py", "tl.extra.cuda.gdc_wait()",
     "a Triton intrinsic inside the kernel (wait for the kernel before); places nothing"),
    ("plugins/slime_std/slime_std/engine/kernels/decode_attention.py", "tl.extra.cuda.gdc_launch_dependents()",
     "a Triton intrinsic inside the kernel (release the next launch); places nothing"),
    ("core/slime_core/executors/placement.py", '!= "GPU"',
     "Ray spells its GPU resource num_gpus: the record's ray_resource is translated, not chosen"),
    ("core/slime_core/executors/placement.py", 'if "GPU" in self.devices',
     "same translation of the record's ray_resource into Ray's num_gpus option"),
    ("core/slime_core/executors/placement.py", 'opts["num_gpus"]',
     "same translation of the record's ray_resource into Ray's num_gpus option"),
    ("core/slime_core/executors/ray_workers.py", '("CPU", "GPU")',
     "Ray sets CUDA_VISIBLE_DEVICES for GPU itself; other resources get the record's variable"),
    ("core/slime_core/runtime/dist_group.py", "NCCL_SOCKET_IFNAME",
     "keeps nccl's sockets on loopback when it is the record's backend; sets nothing else"),
    ("core/slime_core/runtime/dist_group.py", 'backend == "nccl"',
     "builds the group for the backend the record named (nccl), chosen by the caller"),
    ("core/slime_core/runtime/dist_group.py", "ProcessGroupNCCL",
     "same: the nccl group, built only when the record's backend is nccl"),
    ("plugins/slime_std/slime_std/fast_path.py", '"rollout.cuda_graphs"',
     "the rollout.cuda_graphs key's name; its value comes from the record's graph_capture"),
    ("core/slime_core/runner/rundir.py", '("rollout", "cuda_graphs")',
     "the rollout.cuda_graphs key's name in the keys a resume may change"),
    ("plugins/slime_compat/slime_compat/importer.py", "slime's nccl broadcast",
     "the text of slime-import's note on slime's --update-weight-transport nccl; decides nothing"),
    ("plugins/slime_std/slime_std/observe/config.py", "cuda_time_total",
     "profiler table sort keys (names of torch profiler columns)"),
    ("plugins/slime_std/slime_std/observe/profiler.py", "torch.cuda.is_available()",
     "adds the CUDA profiler activity when CUDA exists; profiles, places nothing"),
    ("plugins/slime_std/slime_std/observe/profiler.py", "ProfilerActivity.CUDA",
     "same profiler activity"),
    ("plugins/sglang_rollout/sglang_rollout/tensors.py", ".is_cuda",
     "CUDA tensors need SGLang's IPC reduction patch; reacts to where tensors are"),
    ("plugins/sglang_rollout/sglang_rollout/engine.py", 'backend: str = "nccl"',
     "SGLang's own weight-update group (SGLang runs on CUDA only); not slime placement"),
    ("plugins/sglang_rollout/sglang_rollout/api.py", 'backend: str = "nccl"',
     "the same SGLang HTTP API default"),
    ("plugins/sglang_rollout/sglang_rollout/launch.py", "nccl_port",
     "SGLang's --nccl-port server flag"),
    ("plugins/sglang_rollout/sglang_rollout/launch.py", "--nccl-port",
     "SGLang's --nccl-port server flag"),
    ("plugins/sglang_rollout/sglang_rollout/launch.py", "PYTORCH_CUDA_ALLOC_CONF",
     "removes an allocator setting from SGLang's child environment"),
    ("plugins/sglang_rollout/sglang_rollout/servers.py", "nccl_port",
     "SGLang's --nccl-port server flag"),
    ("plugins/sglang_rollout/sglang_rollout/fake_server.py", "recapture_cuda_graph",
     "a field of SGLang's API that the stand-in server accepts"),
    ("plugins/sglang_rollout/sglang_rollout/probe.py", "cuda",
     "availability probe of the SGLang engine (it needs CUDA): reports, places nothing"),
    ("plugins/sglang_rollout/sglang_rollout/probe.py", "CUDA",
     "the probe's unavailable reason"),
    ("plugins/vllm_rollout/vllm_rollout/plugin.py", "[cuda]",
     "install hint naming the package extra"),
    ("plugins/sglang_rollout/sglang_rollout/plugin.py", "tensors or NCCL",
     "the record's summary text"),
    ("plugins/slime_std/slime_std/trainer/plugin.py", "bf16 on GPU",
     "the record's summary text (the dtype follows the device the record gave)"),
    ("plugins/slime_std/slime_std/weights/plugin.py", "gloo/nccl",
     "the record's summary text"),
    ("core/slime_core/runtime/dist_group.py", "neither gloo, nccl",
     "error message"),
    ("core/slime_core/config/sections.py", '("CPU", "GPU")',
     "ray.resources validation: refuses Ray's built-in names as custom resources"),
    ("core/slime_core/config/sections.py", '"CPU and GPU are device amounts',
     "help text of the per-role node resources"),
    ("core/slime_core/executors/placement.py", '{"CPU", "GPU", resource}',
     "per-role node resources: refuses Ray's device names (and the record's) as labels"),
    ("plugins/megatron_backend/megatron_backend/cpu_shims.py", "torch.cuda.current_device",
     "the CPU shim replacing Megatron's CUDA assumption (applied only on the CPU)"),
    ("plugins/megatron_backend/megatron_backend/cpu_shims.py", "_CUDA_RNG_STATE_TRACKER",
     "the CPU shim of Megatron's RNG tracker (Megatron's own attribute names)"),
    ("plugins/megatron_backend/megatron_backend/cpu_shims.py", "cuda_dtoh_point",
     "the CPU shim of the alltoall token dispatcher's CUDA stream host copy (EP on gloo)"),
    ("plugins/megatron_backend/megatron_backend/cpu_shims.py", "cuda_dtoh_stream",
     "the CPU shim's placeholder for the dispatcher's CUDA stream (EP on gloo)"),
    ("plugins/megatron_backend/megatron_backend/cpu_shims.py", "_cuda_rng_state",
     "the CPU shim of Megatron's RNG get/set functions (Megatron's names)"),
    ("plugins/megatron_backend/megatron_backend/checkpoint.py", "get_cuda_rng_tracker",
     "Megatron's RNG tracker API, saved with every rank's checkpoint"),
    ("plugins/megatron_backend/megatron_backend/trainer.py", "model_parallel_cuda_manual_seed",
     "Megatron's seeding API on a device (the CPU path seeds through the shims)"),
    ("plugins/megatron_backend/megatron_backend/trainer.py", '"a GPU; on the CPU set it to false"',
     "error message (sequence parallel needs TransformerEngine)"),
    ("core/slime_core/runtime/process_settings.py", "torch.backends.cuda.enable_cudnn_sdp",
     "run.cudnn_attention: torch's process-wide SDPA backend switch (a no-op off CUDA)"),
    ("plugins/slime_std/slime_std/engine/kernels/decode_attention.py", "get_device_properties(index).multi_processor_count",
     "the Triton kernel's launch shape: column splits per multiprocessor (Triton runs on CUDA)"),
    ("plugins/slime_std/slime_std/engine/kernels/decode_attention.py", 'if device.type == "cuda" else 16',
     "the same launch shape under Triton's CPU interpreter (a fixed count of 16)"),
    ("plugins/slime_compat/slime_compat/args.py", '"num_gpus_per_node": 0',
     "slime's attribute names on the args namespace slime code reads"),
    ("plugins/slime_compat/slime_compat/args.py", "rollout_num_gpus",
     "slime's attribute names on the args namespace slime code reads"),
    ("plugins/slime_compat/slime_compat/importer.py", "_GPU = ",
     "slime-import's reason text for dropped GPU-layout flags"),
    ("core/slime_core/config/sections.py", "Ray detects GPUs",
     "the same validation's error message"),
    ("plugins/slime_std/slime_std/engine/local_engine.py", "cuda_graphs",
     "optional CUDA-graph decoding, only when the record's device is already cuda"),
    ("plugins/slime_std/slime_std/engine/static_decode.py", "torch.cuda",
     "CUDA-graph capture/replay, entered only on a cuda device (rollout.cuda_graphs)"),
    ("plugins/slime_std/slime_std/engine/static_decode.py", "max-autotune-no-cudagraphs",
     "the name of inductor's mode for rollout.compile_autotune (the graph is captured here)"),
    ("core/slime_core/config/sections.py", "cuda_graphs",
     "the rollout.cuda_graphs option (used only on a cuda device, see local_engine.py)"),
    ("core/slime_core/runner/rundir.py", '("train", "cuda_graphs")',
     "the train.cuda_graphs key's name in the keys a resume may change"),
    ("plugins/slime_std/slime_std/fast_path.py", '"train.cuda_graphs"',
     "the train.cuda_graphs key's name; its value comes from the record's graph_capture"),
    ("core/slime_core/trainkit/graphed_decoder.py", "torch.cuda.CUDAGraph()",
     "CUDA-graph capture of the training decoder (train.cuda_graphs), entered only on a cuda "
     "device the trainer is already on"),
    ("core/slime_core/trainkit/graphed_decoder.py", "cuda_graph_capture",
     "the same capture (its forward and backward graphs), one at a time in the process"),
    ("core/slime_core/trainkit/capture.py", "torch.cuda",
     "cuda_graph_capture: the capture lock and stream of a CUDA graph whose tensors are "
     "already on a cuda device (train.cuda_graphs, rollout.cuda_graphs)"),
    ("core/slime_core/api.py", "cuda_graph_capture",
     "the export of that capture (the engine's decode graphs take it)"),
    ("plugins/slime_std/slime_std/engine/static_decode.py", "cuda_graph_capture",
     "the decode graph's capture, entered only on a cuda device (rollout.cuda_graphs)"),
    ("plugins/slime_std/slime_std/engine/local_engine.py",
     'overlapping and self.device.type == "cuda"',
     "the engine's own stream under an overlapping schedule, where the engine's device is "
     "already cuda"),
    ("plugins/slime_std/slime_std/engine/local_engine.py",
     "torch.cuda.Stream(self.device, priority=-1)",
     "that stream, on the engine's (cuda) device"),
    ("plugins/slime_std/slime_std/engine/local_engine.py", "torch.cuda.current_stream(self.device)",
     "the caller's stream that the engine's stream is ordered against"),
    ("plugins/slime_std/slime_std/engine/local_engine.py", "torch.cuda.stream(self._stream)",
     "the engine's stream entered for a generate call"),
    ("core/slime_core/trainkit/graphed_decoder.py", "torch.cuda.Stream()",
     "the same capture's warm-up stream"),
    ("core/slime_core/trainkit/graphed_decoder.py", "torch.cuda.current_stream()",
     "the same capture's warm-up, ordered against the current stream"),
    ("core/slime_core/trainkit/graphed_decoder.py", "torch.cuda.stream(side)",
     "the same capture's warm-up stream"),
    ("core/slime_core/trainkit/graphed_decoder.py", 'device.type == "cuda"',
     "the same capture's memory pool, for tensors already on a cuda device"),
    ("core/slime_core/trainkit/graphed_decoder.py", "torch.cuda.graph_pool_handle()",
     "the same capture's memory pool"),
    ("core/slime_core/trainkit/graphed_decoder.py", "torch.cuda.empty_cache()",
     "the eager cache returned before a capture, and the graphs' pool after a failed one, "
     "on a cuda device the capture runs on"),
    ("core/slime_core/trainkit/graphed_decoder.py", "train.cuda_graphs",
     "the key's name in the capture's messages"),
    ("core/slime_core/trainkit/graphed_decoder.py", "_cuda_free_bytes",
     "the free memory after a capture (GraphedDecoder's reserve check), read on the cuda "
     "device the capture ran on"),
    ("core/slime_core/trainkit/graphed_decoder.py", "torch.cuda.mem_get_info(device)",
     "that free memory, from the driver of the capture's cuda device"),
    ("plugins/slime_std/slime_std/trainer/torch_trainer.py", "cuda_graphs",
     "train.cuda_graphs: the key and its messages"),
    ("plugins/slime_std/slime_std/trainer/torch_trainer.py", 'self.device.type != "cuda"',
     "refuses train.cuda_graphs off a cuda device (the record's device): a capability check"),
    ("plugins/slime_std/slime_std/trainer/torch_trainer.py", "needs a CUDA device",
     "that check's error message"),
]


def searched_files(root: Path = ROOT) -> list[Path]:
    out = []
    for top in SEARCHED:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root)
            parts = rel.parts
            if "tests" in parts or any(p.startswith(".") or p in ("build", "venv") or
                                       p.endswith(".egg-info") for p in parts):
                continue
            if rel.as_posix() not in NOT_SEARCHED:
                out.append(path)
    return out


def code_lines(source: str) -> dict[int, str]:
    """Line number -> the line as written, for lines with code; comments cut off, docstrings
    left out."""
    docstring_lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                docstring_lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    comment_at: dict[int, int] = {}
    with_code: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comment_at[tok.start[0]] = tok.start[1]
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                              tokenize.ENDMARKER) and tok.start[0] not in docstring_lines:
            with_code.update(range(tok.start[0], tok.end[0] + 1))
    lines = source.splitlines()
    return {n: lines[n - 1][:comment_at.get(n)] for n in sorted(with_code)}


def findings(root: Path = ROOT) -> list[tuple[str, int, str]]:
    found = []
    for path in searched_files(root):
        rel = path.relative_to(root).as_posix()
        for n, line in sorted(code_lines(path.read_text()).items()):
            if PATTERN.search(line):
                found.append((rel, n, line))
    return found


def test_code_lines_leave_out_comments_and_docstrings() -> None:
    src = '"""cuda here"""\nx = 1  # cuda\ndef f():\n    """nccl"""\n    return "cuda"\n'
    hits = [line.strip() for line in code_lines(src).values() if PATTERN.search(line)]
    assert hits == ['return "cuda"']


def test_a_hard_coded_device_is_found(tmp_path: Path) -> None:
    (tmp_path / "core" / "pkg").mkdir(parents=True)
    (tmp_path / "core" / "pkg" / "m.py").write_text(
        '"""Runs on CUDA."""\nimport torch\n\n\ndef place(m):  # not on cuda\n'
        '    return m.to(torch.device("cuda"))\n')
    (tmp_path / "core" / "pkg" / "tests").mkdir()
    (tmp_path / "core" / "pkg" / "tests" / "t.py").write_text('x = "cuda"\n')
    assert findings(tmp_path) == [("core/pkg/m.py", 6, '    return m.to(torch.device("cuda"))')]


def test_no_code_decides_placement_by_cuda() -> None:
    assert searched_files(), "nothing searched: wrong root?"
    unexplained = []
    used: set[int] = set()
    for rel, n, line in findings():
        hits = [i for i, (p, frag, _) in enumerate(ALLOWED)
                if p == rel and frag in line]
        used.update(hits)
        if not hits:
            unexplained.append(f"{rel}:{n}: {line.strip()}")
    assert not unexplained, (
        "CUDA-specific code outside accelerator records (take it from the selected "
        "AcceleratorRecord, or allow-list it in tests/test_no_cuda_placement.py with a "
        "reason):\n" + "\n".join(unexplained))
    stale = [f"{p}: {frag!r}" for i, (p, frag, _) in enumerate(ALLOWED)
             if i not in used and (ROOT / p).exists()]
    assert not stale, "allow-list entries that match nothing any more:\n" + "\n".join(stale)
