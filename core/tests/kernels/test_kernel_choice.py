"""Which implementation a kernel setting picks, and the error when Triton is asked for where it
cannot run (what a CPU install sees: no CUDA, usually no triton)."""

from __future__ import annotations

import pytest
import torch
from slime_core import kernels


@pytest.fixture
def no_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def test_auto_and_torch_keep_the_torch_path_on_a_cpu(no_interpreter: None) -> None:
    cpu = torch.device("cpu")
    assert kernels.choose("auto", cpu, "train.head_kernel") is False
    assert kernels.choose("torch", cpu, "train.head_kernel") is False
    assert kernels.choose("sdpa", cpu, "rollout.decode_attention") is False


def test_no_programmatic_dependent_launch_off_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    # a CPU tensor (also under the interpreter, which has no launch control) never asks for it
    assert kernels.pdl_supported("cpu") is False
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert kernels.pdl_supported("cpu") is False


def test_triton_where_it_cannot_run_names_the_key(no_interpreter: None) -> None:
    with pytest.raises(RuntimeError, match=r"train\.head_kernel = \"triton\" needs a CUDA"):
        kernels.choose("triton", "cpu", "train.head_kernel")


def test_the_head_with_kernel_auto_equals_the_torch_functions_on_a_cpu(
        no_interpreter: None) -> None:
    from slime_core.trainkit.logprob_head import head_log_probs

    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=False)
    hidden = torch.randn(5, 8)
    target = torch.randint(0, 50, (5,))
    a, _ = head_log_probs(hidden, head, target, 1.0, kernel="auto")
    b, _ = head_log_probs(hidden, head, target, 1.0, kernel="torch")
    assert torch.equal(a, b)


@pytest.mark.parametrize(("section", "key", "bad"), [("train", "head_kernel", "cuda"),
                                                     ("rollout", "decode_attention", "flash")])
def test_config_refuses_unknown_kernel_names(make_config, section: str, key: str,
                                             bad: str) -> None:
    with pytest.raises(Exception, match=rf"{section}\.{key}"):
        make_config(**{section: {key: bad}})
