"""`tfam convert`: tiny models written to tmp_path, converted both ways, checked by output.

The subcommand is driven through its own ``register``/``run`` on a bare parser, the way the
``tfam`` dispatcher calls it.
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import tfam  # noqa: E402
from tfam.cli import convert  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models: one intra-op thread avoids thread hand-off costs on a loaded machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tfam")
    convert.register(p.add_subparsers())
    return p


def tfam_cli(*argv: str) -> int:
    args = parser().parse_args(["convert", *argv])
    return args.func(args)


def randomized(module: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) / max(p[0].numel(), 4) ** 0.5)
    return module


def hf_config(**values: object) -> transformers.ViTConfig:
    base = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        image_size=(24, 16),
        patch_size=(8, 4),
        num_channels=3,
        num_labels=5,
        layer_norm_eps=1e-6,
    )
    base.update(values)
    return transformers.ViTConfig(**base)


def test_help_shows_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parser().parse_args(["convert", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "tfam convert tfam-to-hf runs/digits hf/digits" in text
    assert "tfam convert hf-to-tfam" in text


@pytest.mark.parametrize("kind", ["classification", "model_with_pooler", "model_no_pooler"])
def test_hf_to_tfam(tmp_path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    """An HF directory (save_pretrained) -> a tfam directory loadable by tfam.from_pretrained,
    whose outputs equal the HF model's."""
    torch.manual_seed(0)
    cfg = hf_config()
    if kind == "classification":
        hf = transformers.ViTForImageClassification(cfg)
    else:
        hf = transformers.ViTModel(cfg, add_pooling_layer=kind == "model_with_pooler")
    randomized(hf).eval().save_pretrained(tmp_path / "hf")

    assert tfam_cli("hf-to-tfam", str(tmp_path / "hf"), str(tmp_path / "tfam")) == 0
    out = capsys.readouterr().out
    assert "check: max |diff|" in out and "(ok," in out
    model = tfam.from_pretrained(tmp_path / "tfam")
    x = torch.randn(2, 3, 24, 16)
    with torch.no_grad():
        ours = model(x)
        ref = hf(pixel_values=x)
    if kind == "classification":
        assert model.config.num_classes == 5
        theirs = ref.logits
    elif kind == "model_with_pooler":
        assert model.config.representation_size == 32 and model.config.num_classes == 0
        theirs = ref.pooler_output
    else:
        assert model.config.representation_size is None and model.config.num_classes == 0
        theirs = ref.last_hidden_state[:, 0]
    assert (ours - theirs).abs().max().item() < 1e-5


def test_tfam_to_hf_and_back(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tfam run directory -> HF (class names from preprocess.json) -> tfam: same weights."""
    torch.manual_seed(1)
    model = randomized(
        tfam.create_model(
            "vit",
            image_size=8,
            patch_size=2,
            in_channels=1,
            num_classes=3,
            dim=16,
            depth=2,
            heads=2,
        )
    ).eval()
    run_dir = tmp_path / "run"
    model.save_pretrained(run_dir)
    preprocess = {"dataset": "toy", "classes": ["a", "b", "c"], "image_size": [8, 8]}
    (run_dir / "preprocess.json").write_text(json.dumps(preprocess))

    assert tfam_cli("tfam-to-hf", str(run_dir), str(tmp_path / "hf")) == 0
    assert "(ViTForImageClassification)" in capsys.readouterr().out
    hf = transformers.ViTForImageClassification.from_pretrained(
        tmp_path / "hf", local_files_only=True
    ).eval()
    assert hf.config.id2label == {0: "a", 1: "b", 2: "c"}
    x = torch.randn(4, 1, 8, 8)
    with torch.no_grad():
        assert (model(x) - hf(pixel_values=x).logits).abs().max().item() < 1e-5

    assert (
        tfam_cli("hf-to-tfam", str(tmp_path / "hf"), str(tmp_path / "back"), "--no-fused-qkv") == 0
    )
    back = tfam.from_pretrained(tmp_path / "back")
    assert back.config.fused_qkv is False
    assert json.loads((tmp_path / "back" / "preprocess.json").read_text()) == preprocess
    with torch.no_grad():
        assert torch.equal(back.blocks[1].mhsa.v_proj.weight, model.blocks[1].mhsa.qkv.weight[32:])
        assert (back(x) - model(x)).abs().max().item() < 1e-5


def test_failing_check_returns_1(tmp_path, monkeypatch, capsys) -> None:
    """The check compares what was written against the source: break the written copy and
    the command fails."""
    torch.manual_seed(2)
    randomized(transformers.ViTForImageClassification(hf_config())).save_pretrained(tmp_path / "hf")
    real_save = tfam.models.ViT.save_pretrained

    def corrupting_save(self, directory):
        with torch.no_grad():
            self.head.bias.add_(1.0)
        return real_save(self, directory)

    monkeypatch.setattr(tfam.models.ViT, "save_pretrained", corrupting_save)
    assert tfam_cli("hf-to-tfam", str(tmp_path / "hf"), str(tmp_path / "tfam")) == 1
    assert "FAILED" in capsys.readouterr().out


def test_bad_input(tmp_path) -> None:
    torch.manual_seed(3)
    with pytest.raises(FileNotFoundError, match="config.json not found"):
        tfam_cli("hf-to-tfam", str(tmp_path / "nothing"), str(tmp_path / "out"))

    tfam.create_model(
        "vit", image_size=8, patch_size=4, in_channels=1, num_classes=2, dim=8, depth=1, heads=2
    ).save_pretrained(tmp_path / "tfam")
    with pytest.raises(ValueError, match="tfam model directory; use `tfam convert tfam-to-hf`"):
        tfam_cli("hf-to-tfam", str(tmp_path / "tfam"), str(tmp_path / "out"))
    with pytest.raises(ValueError, match="OUT_DIR=.* must differ from SRC"):
        tfam_cli("tfam-to-hf", str(tmp_path / "tfam"), str(tmp_path / "tfam"))

    mim = transformers.ViTForMaskedImageModeling(
        hf_config(image_size=16, patch_size=4, encoder_stride=4)
    )
    mim.save_pretrained(tmp_path / "mim")
    with pytest.raises(ValueError, match="architectures=\\['ViTForMaskedImageModeling'\\]"):
        tfam_cli("hf-to-tfam", str(tmp_path / "mim"), str(tmp_path / "out"))
    with pytest.raises(ValueError, match="Hugging Face directory; use `tfam convert hf-to-tfam`"):
        tfam_cli("tfam-to-hf", str(tmp_path / "mim"), str(tmp_path / "out"))

    # an HF directory missing weights is refused, not filled with random ones
    from safetensors.torch import load_file, save_file

    hf_dir = tmp_path / "partial"
    transformers.ViTForImageClassification(hf_config()).save_pretrained(hf_dir)
    weights = load_file(str(hf_dir / "model.safetensors"))
    del weights["classifier.weight"]
    save_file(weights, str(hf_dir / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match="does not hold every weight.*classifier.weight"):
        tfam_cli("hf-to-tfam", str(hf_dir), str(tmp_path / "out"))

    pooled = tfam.create_model(
        "vit",
        image_size=8,
        patch_size=4,
        in_channels=1,
        num_classes=0,
        dim=8,
        depth=1,
        heads=2,
        pool="mean",
    )
    pooled.save_pretrained(tmp_path / "mean")
    with pytest.raises(ValueError, match="pool='mean' cannot be converted"):
        tfam_cli("tfam-to-hf", str(tmp_path / "mean"), str(tmp_path / "out"))
