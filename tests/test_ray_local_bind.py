"""A local Ray instance started as the ray executor starts it listens on loopback only.

Before: GCS, raylet and worker gRPC servers listened on ``::``, and the dashboard agent's and
the autoscaler monitor's Prometheus exporters on ``0.0.0.0`` (no token). The instance runs in
a child process so that it is this test's own, whatever Ray another test module holds; the
child lists the listening TCP sockets of itself and every process it started
(``/proc/<pid>/fd`` inodes matched against ``/proc/net/tcp{,6}``).
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ray

CHILD = r"""
import json, os, socket, time
from slime_core.executors.ray_cluster import start_local_ray
EXPECTED = ("gcs_server", "raylet", "DashboardAgent", "RuntimeEnvAgent", "autoscaler")

def listeners():
    out = {}
    for path, fam in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            rows = open(path).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[3] != "0A":  # LISTEN
                continue
            ip, port = f[1].split(":")
            raw = bytes.fromhex(ip)
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            out[f[9]] = (socket.inet_ntop(fam, raw), int(port, 16))
    return out

def descendants(root):
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                st = open(f"/proc/{d}/stat").read()
            except OSError:
                continue
            children.setdefault(int(st[st.rindex(")") + 2:].split()[1]), []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out

start_local_ray(1)
import ray

@ray.remote
def ping():
    return 1

ray.get(ping.remote())  # a worker process with its own gRPC server

def collect():
    table, found = listeners(), []
    for pid in descendants(os.getpid()):
        try:
            # the whole command line: a long venv path pushes "autoscaler" past any prefix
            name = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            inode = target[8:-1] if target.startswith("socket:[") else None
            if inode in table:
                found.append([pid, name, *table[inode]])
    return found

# the agents and the autoscaler monitor start their exporters after registering, later on
# a loaded machine: wait until every expected server listens (at most 90 s)
time.sleep(3)  # exporters open after their process's own server: give them that much first
deadline = time.time() + 90
while True:
    found = collect()
    names = " ".join(f[1] for f in found)
    if all(p in names for p in EXPECTED) or time.time() > deadline:
        break
    time.sleep(1)
node = ray.util.get_node_ip_address()
ray.shutdown()
print("RESULT " + json.dumps({"node": node, "sockets": found,
                              "env_restored": "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in os.environ}))
"""


def _loopback(addr: str) -> bool:
    ip = ipaddress.ip_address(addr)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def test_local_ray_binds_loopback_only():
    pytest.importorskip("ray")
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=240)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads(line[len("RESULT "):])
    sockets = result["sockets"]
    names = " ".join(s[1] for s in sockets)
    # the servers the issue found on every interface are all there, now on loopback
    for part in ("gcs_server", "raylet", "DashboardAgent", "RuntimeEnvAgent", "autoscaler"):
        assert part in names, sockets
    exposed = [s for s in sockets if not _loopback(s[2])]
    assert not exposed, f"Ray sockets bound beyond loopback: {exposed}"
    assert result["node"] == "127.0.0.1"
    assert result["env_restored"]
