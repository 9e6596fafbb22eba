"""Plug-ins from outside src/: a kernel, a position scheme and a family registered by a module
that tfam finds through the ``tfam.plugins`` entry-point group, run through create_model,
explain, save/load and one `tfam train` step (the scheme chosen by ``--set position=``); a
broken plug-in is one warning line, not a traceback.

The plug-in is installed the way pip installs one (a ``*.dist-info`` folder with an
``entry_points.txt`` beside the module, on sys.path) in a temporary folder, and each check runs
in a fresh interpreter, so the registries of this test process stay as they are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

PLUGIN = '''
"""A tfam plug-in: an attention kernel, a position scheme and a family (with its explain rows
and a preset)."""

import dataclasses
from typing import ClassVar

import torch

from tfam.explain.api import register_family
from tfam.explain.families.vit import ViTExplainer
from tfam.layers.kernels import AttentionKernel, math_attention
from tfam.layers.position import PositionScheme, TokenPositions
from tfam.models.registry import register_preset
from tfam.models.vit import ViT, ViTConfig


class DemoMath(AttentionKernel):
    """The formula written out, under another name."""

    name = "demo_math"

    def attend(self, q, k, v, mask, bias, is_causal, dropout_p, scale, need_weights):
        return math_attention(q, k, v, mask, bias, dropout_p, scale, need_weights, is_causal)


class DemoRandomPosition(PositionScheme):
    """A fixed random table (its own seed: the caller's RNG is not drawn) added to the tokens,
    for a sequence (indexed by position) or a patch grid (the grid it was built for)."""

    name = "demo_random"
    title = "fixed random"
    acts = "tokens"
    domain = "any"

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        g = torch.Generator().manual_seed(1234)
        table = 0.5 * torch.randn(self.rows, self.dim, generator=g)
        self.register_buffer("table", table, persistent=False)

    def values(self, where, table=None):
        if isinstance(where, TokenPositions):
            return self.table[where.query(self.table.device)]
        if tuple(where) != self.grid:
            raise ValueError(f"grid={tuple(where)} is invalid: demo_random serves {self.grid}")
        return self.table[None]

    def describe(self):
        return f"add a fixed random table ({self.rows} x {self.dim}, seed 1234)"


@dataclasses.dataclass
class DemoConfig(ViTConfig):
    family: ClassVar[str] = "demo"


class Demo(ViT):
    """A family of its own (a ViT that mean-pools its patches, without a [CLS] token)."""

    config_class = DemoConfig
    title = "Demo"


register_family("demo")(ViTExplainer)
register_preset(
    "demo_tiny", "demo", "a tiny demo model", image_size=8, patch_size=4, in_channels=1,
    num_classes=10, dim=16, depth=1, heads=2, ffn_dim=32, pool="mean", class_token=False,
    attention="demo_math",
)
'''

CHECKS = """
import sys, tempfile
import torch
import tfam
from tfam.config import ATTENTION_KERNELS, POSITION_SCHEMES
from tfam.models import MODEL_CLASSES
from tfam.plugins import FAILED, LOADED

assert sorted(LOADED) == ["demo"], LOADED
assert "broken" in FAILED, FAILED
assert "demo_math" in ATTENTION_KERNELS and "demo" in MODEL_CLASSES
assert "demo_random" in POSITION_SCHEMES
assert "demo_random" in MODEL_CLASSES["demo"].config_class.position_names()
torch.manual_seed(0)
model = tfam.create_model("demo_tiny").eval()
assert type(model).__name__ == "Demo" and model.config.attention == "demo_math"
table = tfam.explain(model)
assert table.total_params == sum(p.numel() for p in model.parameters()), table.total_params
x = model.example_inputs(2)
with tempfile.TemporaryDirectory() as d:
    model.save_pretrained(d)
    again = tfam.from_pretrained(d)
    assert type(again).__name__ == "Demo"
    assert torch.equal(model(*x), again(*x))
# The plug-in scheme in the plug-in family: built, wired, explained by its own line, trained
# (a gradient reaches every parameter), saved and loaded.
torch.manual_seed(0)
model = tfam.create_model("demo_tiny", position="demo_random").eval()
assert type(model.position).__name__ == "DemoRandomPosition"
x = model.example_inputs(2)
plain = tfam.create_model("demo_tiny", position="none").eval()
plain.load_state_dict(model.state_dict())
assert not torch.allclose(model(*x), plain(*x)), "the scheme adds nothing"
table = tfam.explain(model)
assert table.total_params == sum(p.numel() for p in model.parameters()), table.total_params
assert "fixed random table" in table.to_text(), table.to_text()
model.train()
model(*x).square().mean().backward()
assert all(p.grad is not None for p in model.parameters())
model.eval()
with tempfile.TemporaryDirectory() as d:
    model.save_pretrained(d)
    again = tfam.from_pretrained(d)
    assert again.config.position == "demo_random"
    assert torch.equal(model(*x), again(*x))
print("ok")
"""


def _install(site: Path, name: str, entry: str, module: str | None = None) -> None:
    """What pip leaves for a package with one entry point: the module and its dist-info."""
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[tfam.plugins]\n{entry}\n")
    if module is not None:
        (site / f"{name}.py").write_text(textwrap.dedent(module))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    _install(site, "tfam_demo_plugin", "demo = tfam_demo_plugin", PLUGIN)
    _install(site, "tfam_broken_plugin", "broken = tfam_broken_plugin_missing")
    return site


def _python(site: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(SRC)]))
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_a_plugin_kernel_position_and_family_build_explain_save_and_load(site: Path) -> None:
    done = _python(site, "-c", CHECKS)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    # The broken plug-in beside it: one warning line, no traceback, and tfam went on.
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("tfam: warning: plug-in 'broken' (tfam_broken_plugin_missing)")
    assert "ModuleNotFoundError" in lines[0] and "Traceback" not in done.stderr


def test_tfam_train_trains_a_plugin_family_with_a_plugin_kernel_and_position(
    site: Path, tmp_path
) -> None:
    out = tmp_path / "run"
    train = ["train", "demo", "--data", "digits", "--preset", "demo_tiny", "--max-steps", "1"]
    train += ["--epochs", "1", "--out", str(out), "--quiet", "--set", "position=demo_random"]
    # Then the run is a run like any other: `tfam eval` opens it through the family's class.
    evaluate = ["eval", str(out), "--device", "cpu"]
    script = (
        f"from tfam.cli import main; assert main({train!r}) == 0; assert main({evaluate!r}) == 0"
    )
    done = _python(site, "-c", script, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["family"] == "demo" and config["attention"] == "demo_math"
    assert config["position"] == "demo_random"
    assert (out / "model.safetensors").is_file()
    assert "accuracy:" in done.stdout
