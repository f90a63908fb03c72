"""On-policy distillation (``[opd]``) on the megatron backend against the torch backend.

Student: the tiny Llama of ``examples/tiny_arith`` (hidden 128, 4 layers); teacher: a random
tiny Qwen2 over the same vocabulary (hidden 64, 2 layers), so the teacher is built with its own
layout, not the policy's. For TP=1 (this process) and TP=2 (two gloo processes), in trainer
mode (the backend's frozen teacher) and engine mode (teacher log-probs already in the batch),
one train step's advantages and ``train/opd_reverse_kl`` equal the torch backend's within 1e-5.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mg_opd_scenarios import opd_both_modes
from mg_support import base_data, spawn

TOL = 1e-5
STEP_RTOL = 1e-5  # relative: a random teacher's advantages are large (grad norm ~1e3)


def _data(teacher: Path, **sections: dict[str, Any]) -> dict[str, Any]:
    # task reward on: the OPD term is added to GRPO's advantages, so both parts are checked
    return base_data(opd={"enabled": True, "teacher_path": str(teacher), "kl_coef": 1.0,
                          "task_reward": True}, **sections)


def check(results: dict[str, Any]) -> None:
    for mode, r in results.items():
        assert r["teacher_built"] == (mode == "trainer"), (mode, r)
        if mode == "trainer":
            assert r["teacher_hidden"] == 64, r  # the Qwen2 teacher's layout, not the Llama's
        kl_t, kl_m = r["kl"]
        assert kl_t is not None and kl_m is not None, (mode, r)
        assert abs(kl_t) > 0.1, (mode, r)  # a teacher away from the student: a real signal
        assert abs(kl_t - kl_m) < TOL, (mode, r)
        assert r["adv_diff"] < TOL, (mode, r)
        assert r["teacher_diff"] < TOL and r["old_diff"] < TOL, (mode, r)
        for key in ("loss", "grad_norm"):
            a, b = r[key]
            assert abs(a - b) <= STEP_RTOL * max(1.0, abs(a)), (mode, key, r)


def test_opd_tp1_matches_torch_backend(tiny_qwen2: Path) -> None:
    results = opd_both_modes(0, 1, _data(tiny_qwen2))
    print(results)  # the measured differences, for the README
    check(results)


def test_opd_tp2_matches_torch_backend(tiny_qwen2: Path) -> None:
    data = _data(tiny_qwen2, megatron={"tensor_model_parallel_size": 2}, train={"num_ranks": 2})
    for results in spawn(opd_both_modes, 2, data):
        assert results["trainer"]["dp"] == (0, 1)
        check(results)
