"""``core run --executor ray`` attached to a Ray cluster started outside the run.

The test starts a head node with ``ray start --head --block`` (127.0.0.1, its own port and
temp dir, token authentication with a token of its own), runs ``core run`` in another process
against it with ``-o run.ray_address=...``, and stops the head by ending the ``ray start``
process it started (``ray stop`` would stop every Ray instance of the machine, other users'
included).

The run's plugin set reaches the workers two ways, both checked:

* installed distributions (``slime_grpo``, the core's built-ins): the cluster's workers run
  the head's Python, where they are installed, as on a real node;
* a plugin module that is *not* installed and not on the workers' path
  (``slime_attach_probe``, in a directory only the driver's ``PYTHONPATH`` names), shipped
  with the job by ``ray.runtime_env = {py_modules = [...]}``: every worker process imports
  it from Ray's runtime-resources copy (its marker records the file it was imported from),
  and the run uses its reward function, so a worker without it fails the run.

Select with ``-m ray``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from tests.cli_support import ROOT, write_toml
from tests.conftest import ARITH, read_metrics

pytestmark = pytest.mark.ray

PROBE = '''
"""Plugin module shipped to the workers by ray.runtime_env (the attach test)."""
import os
from pathlib import Path

from slime_hookspecs import RewardFunctionRecord, hookimpl

MARKS = Path({marks!r})
(MARKS / f"probe-{{os.getpid()}}").write_text(str(Path(__file__).resolve()))


def _reward(config):
    def reward(sample):
        text = sample.response or ""
        return sum(c.isdigit() for c in text) / len(text) if text else 0.0
    return reward


@hookimpl
def slime_register_reward_functions():
    return [RewardFunctionRecord(name="probe_digits", factory=_reward,
                                 summary="digit fraction, from the shipped probe module")]
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(token_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_", "SLIME_")) and k != "PYTHONPATH"}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_path),
               RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")  # this machine only: bind 127.0.0.1
    return env


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory):
    """A head node of 4 CPUs started by ``ray start``: (address, token path, process)."""
    pytest.importorskip("ray")
    tmp_path = tmp_path_factory.mktemp("head")
    token = tmp_path / "token"
    token.write_text(secrets.token_hex(32))
    # Ray's socket paths must stay short (AF_UNIX): a temp dir right under /tmp
    temp_dir = tempfile.mkdtemp(prefix="slr")
    port = _free_port()
    ray_bin = Path(sys.executable).with_name("ray")
    proc = subprocess.Popen(
        [str(ray_bin), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
         "--port", str(port), "--num-cpus", "4", "--include-dashboard", "false",
         "--temp-dir", temp_dir, "--disable-usage-stats"],
        env=_env(token), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True)
    try:
        yield f"127.0.0.1:{port}", token, proc
    finally:
        proc.send_signal(signal.SIGTERM)  # --block: the command stops what it started
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_core_run_on_a_cluster_started_outside_the_run(head, tmp_path: Path,
                                                       tokenizer_dir: Path) -> None:
    address, token, proc = head
    marks = tmp_path / "marks"
    marks.mkdir()
    shipped = tmp_path / "shipped"
    (shipped / "slime_attach_probe").mkdir(parents=True)
    (shipped / "slime_attach_probe" / "__init__.py").write_text(
        textwrap.dedent(PROBE.format(marks=str(marks))))
    from slime_core.testing import TINY_QWEN2

    run_dir = tmp_path / "run"
    cfg = write_toml(tmp_path / "run.toml", {
        "run": {"num_rollouts": 2, "run_dir": str(run_dir), "progress": False,
                "loggers": ["jsonl"], "num_threads": 1, "save_interval": 2,
                "plugin_modules": ["slime_attach_probe"]},
        "model": {"tokenizer": str(tokenizer_dir), "init_config": dict(TINY_QWEN2)},
        "data": {"path": str(ARITH / "train.jsonl")},
        "rollout": {"batch_size": 2, "n_samples_per_prompt": 4, "max_new_tokens": 6,
                    "reward": "probe_digits"},
        "train": {"lr": 1e-3},
        "weights": {"transport": "ray", "verify": True},
        "ray": {"runtime_env": {"py_modules": [str(shipped / "slime_attach_probe")]},
                "startup_timeout_s": 600},
    })
    env = {**_env(token), "PYTHONPATH": f"{shipped}{os.pathsep}{ROOT}"}  # the driver only
    res = subprocess.run(
        [sys.executable, "-m", "slime_core", "run", "--plugins", "slime_grpo", "--config",
         str(cfg), "--executor", "ray", "-o", f'run.ray_address="{address}"'],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-6000:]
    m = read_metrics(run_dir)
    assert [x["step"] for x in m] == [1, 2]
    assert all(x["perf/weight_sync_verified"] == 1.0 and "rollout/reward_mean" in x for x in m)
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_000002"

    # the driver imported the probe from its own directory; trainer rank, engine and rollout
    # manager each from the copy Ray shipped to the node
    where = {int(p.name.split("-")[1]): p.read_text() for p in marks.glob("probe-*")}
    origin = str((shipped / "slime_attach_probe" / "__init__.py").resolve())
    workers = {pid: f for pid, f in where.items() if f != origin}
    assert origin in where.values()
    assert len(workers) >= 3, where
    assert all("runtime_resources" in f for f in workers.values()), workers

    # the cluster was not the run's: it is still up after the run
    assert proc.poll() is None
    plugins = json.loads((run_dir / "plugins.json").read_text())
    assert "slime_grpo" in json.dumps(plugins)


def test_wrong_token_is_refused(head, tmp_path: Path) -> None:
    """The head started above authenticates its callers: another token cannot connect."""
    address, token, _ = head
    wrong = tmp_path / "wrong"
    wrong.write_text(secrets.token_hex(32))
    code = (f"import ray; ray.init(address={address!r}, logging_level='ERROR'); "
            "print('CONNECTED')")
    res = subprocess.run([sys.executable, "-c", code], env=_env(wrong), cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert "CONNECTED" not in res.stdout and res.returncode != 0
    assert "auth" in (res.stdout + res.stderr).lower()
