"""The entry-point module: registration through pluggy, the probe's messages, light import."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pluggy
import pytest

from sandbox_k8s import client as k8s_client
from sandbox_k8s import plugin
from slime_hookspecs.records import SandboxRecord

REPO = Path(__file__).resolve().parents[3]


def test_registers_the_k8s_record_through_pluggy():
    from slime_hookspecs.specs import registration

    pm = pluggy.PluginManager("slime")
    pm.add_hookspecs(registration)
    pm.register(plugin, name="sandbox_k8s")
    (records,) = pm.hook.slime_register_sandboxes()
    (record,) = records
    assert isinstance(record, SandboxRecord)
    assert record.kind == "sandbox" and record.name == "k8s"
    assert record.factory is plugin.make_sandbox and record.probe is plugin.probe
    assert record.summary


def test_import_of_plugin_module_does_not_import_kubernetes():
    code = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(REPO / 'hookspecs')!r}, {str(REPO / 'plugins' / 'sandbox_k8s')!r}]
        import sandbox_k8s.plugin as p
        rec, = p.slime_register_sandboxes()
        rec.unavailable_reason()
        sb = rec.factory(None, namespace="x", run_id="r")  # building is lazy too
        heavy = sorted(m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes."))
        assert not heavy, heavy
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@pytest.fixture()
def no_config(monkeypatch, tmp_path):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    monkeypatch.setattr(k8s_client, "SERVICE_ACCOUNT_TOKEN", str(tmp_path / "no-token"))
    return tmp_path


def test_probe_without_the_kubernetes_package(monkeypatch):
    real = plugin.importlib.util.find_spec

    def find_spec(name, *args):
        return None if name == "kubernetes" else real(name, *args)

    monkeypatch.setattr(plugin.importlib.util, "find_spec", find_spec)
    assert plugin.probe() == "kubernetes client is not installed (pip install slime-sandbox-k8s)"


def test_probe_without_configuration(no_config):
    pytest.importorskip("kubernetes")
    assert plugin.probe() == "no Kubernetes configuration found (KUBECONFIG / in-cluster)"


def test_probe_with_missing_kubeconfig_file(no_config, monkeypatch):
    pytest.importorskip("kubernetes")
    monkeypatch.setenv("KUBECONFIG", str(no_config / "absent.yaml"))
    assert plugin.probe() == plugin.NOT_CONFIGURED


def test_probe_with_kubeconfig(no_config, monkeypatch):
    pytest.importorskip("kubernetes")
    cfg = no_config / "kubeconfig.yaml"
    cfg.write_text("apiVersion: v1\nkind: Config\n")
    monkeypatch.setenv("KUBECONFIG", f"{no_config / 'absent'}:{cfg}")
    assert plugin.probe() is None
    assert k8s_client.config_source() == f"kubeconfig:{cfg}"


def test_probe_with_home_kubeconfig(no_config):
    pytest.importorskip("kubernetes")
    (no_config / ".kube").mkdir()
    (no_config / ".kube" / "config").write_text("apiVersion: v1\n")
    assert plugin.probe() is None


def test_probe_in_cluster(no_config, monkeypatch):
    pytest.importorskip("kubernetes")
    token = no_config / "token"
    token.write_text("t")
    monkeypatch.setattr(k8s_client, "SERVICE_ACCOUNT_TOKEN", str(token))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert plugin.probe() == plugin.NOT_CONFIGURED  # host without port is not in-cluster
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    assert plugin.probe() is None
    assert k8s_client.config_source() == "in-cluster"


def test_record_reports_the_probe_reason(no_config):
    pytest.importorskip("kubernetes")
    (record,) = plugin.slime_register_sandboxes()
    assert record.unavailable_reason() == plugin.NOT_CONFIGURED


def test_factory_merges_config_section_and_options():
    from dataclasses import dataclass

    @dataclass
    class Section:
        namespace: str = "tools"
        image: str = "busybox:1.36"
        cpu_limit: str = "2"

    class Config:
        sandbox_k8s = Section()

    sb = plugin.make_sandbox(Config(), image="python:3.12-alpine", run_id="r1")
    assert sb.options.namespace == "tools"
    assert sb.options.image == "python:3.12-alpine"  # options win over the section
    assert sb.options.cpu_limit == "2" and sb.options.run_id == "r1"
    assert plugin.make_sandbox(None).options.namespace == "default"


def test_sandbox_satisfies_the_protocol():
    from slime_hookspecs.protocols import Sandbox

    assert isinstance(plugin.make_sandbox(None, run_id="r"), Sandbox)


def test_factory_rejects_unknown_options_listing_valid_ones():
    with pytest.raises(TypeError, match="unknown option.*imag.*choose from: .*image"):
        plugin.make_sandbox(None, imag="x")
