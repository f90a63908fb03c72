"""``core plugins new NAME``: a third-party plugin package that installs and tests itself."""

from __future__ import annotations

import re
from pathlib import Path

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "slime-{dash}"
version = "0.1.0"
description = "A slime plugin: {dash}"
requires-python = ">=3.10"
dependencies = ["slime-hookspecs>=0.1"]

[project.entry-points.slime]
{under} = "{package}.plugin"

[tool.setuptools.packages.find]
include = ["{package}*"]
"""

PLUGIN = '''\
"""slime plugin {under}: registers the reward function ``{under}_length``."""

from __future__ import annotations

from slime_hookspecs import RewardFunctionRecord, Sample, hookimpl


def length_reward(sample: Sample) -> float:
    """1.0 for a response of at most 16 tokens, else 0.0."""
    return 1.0 if sample.response_length <= 16 else 0.0


@hookimpl
def slime_register_reward_functions() -> list[RewardFunctionRecord]:
    return [
        RewardFunctionRecord(
            name="{under}_length",
            factory=lambda config: length_reward,
            summary="1.0 for short responses",
        )
    ]
'''

TEST = '''\
"""Tests of the {under} plugin: the hook is implemented and the reward behaves."""

import pluggy

from slime_hookspecs import PROJECT_NAME, Sample
from slime_hookspecs.specs import SPEC_MODULES

from {package} import plugin


def test_registers_reward() -> None:
    pluggy_manager = pluggy.PluginManager(PROJECT_NAME)
    for mod in SPEC_MODULES:
        pluggy_manager.add_hookspecs(mod)
    pluggy_manager.register(plugin, name="{under}")
    records = [r for rs in pluggy_manager.hook.slime_register_reward_functions() for r in rs]
    assert [r.name for r in records] == ["{under}_length"]
    fn = records[0].factory(None)
    assert fn(Sample(response_length=3, tokens=[1, 2, 3], loss_mask=[1, 1, 1])) == 1.0
    assert fn(Sample(response_length=20, tokens=[0] * 20, loss_mask=[1] * 20)) == 0.0
'''

README = """\
# slime-{dash}

A slime plugin. Install with `pip install -e .`, then `core plugins` lists `{under}`.
Use its reward with `core run ... -o rollout.reward={under}_length`. Test with `pytest`.
"""


def scaffold_plugin(name: str, directory: str | Path = ".") -> Path:
    """Create ``slime-<name>/`` (distribution ``slime-<name>``, package ``slime_<name>``)."""
    base = re.sub(r"^slime[-_]", "", name.strip().lower())
    if not re.fullmatch(r"[a-z][a-z0-9_-]*", base):
        raise ValueError(
            f"plugin name {name!r} must start with a letter and use a-z, 0-9, '-' or '_'"
        )
    dash, under = base.replace("_", "-"), base.replace("-", "_")
    package = f"slime_{under}"
    root = Path(directory) / f"slime-{dash}"
    if root.exists():
        raise FileExistsError(f"{root} already exists")
    fmt = {"dash": dash, "under": under, "package": package}
    (root / package).mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pyproject.toml").write_text(PYPROJECT.format(**fmt))
    (root / "README.md").write_text(README.format(**fmt))
    (root / package / "__init__.py").write_text(f'"""slime plugin {under}."""\n')
    (root / package / "plugin.py").write_text(PLUGIN.format(**fmt))
    (root / "tests" / f"test_{under}.py").write_text(TEST.format(**fmt))
    return root
