"""A saved model is verified on load, and damage gets one clear error naming the file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import tfam
from tfam.models.base import CONFIG_NAME, WEIGHTS_NAME


@pytest.fixture()
def saved(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    model = tfam.create_model(
        "vit", image_size=8, patch_size=4, in_channels=1, num_classes=3, dim=8, depth=1, heads=2
    )
    return model.save_pretrained(tmp_path / "model")


def test_flipped_bytes_fail_the_checksum(saved: Path) -> None:
    path = saved / WEIGHTS_NAME
    data = bytearray(path.read_bytes())
    for i in range(len(data) - 64, len(data)):  # the last 64 bytes: tensor data, not header
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"{WEIGHTS_NAME} fails its checksum"):
        tfam.from_pretrained(saved)


def test_truncated_weights_are_named(saved: Path) -> None:
    path = saved / WEIGHTS_NAME
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match=rf"{WEIGHTS_NAME} cannot be read as safetensors"):
        tfam.from_pretrained(saved)


@pytest.mark.parametrize(
    "text,message",
    [
        ("{not json", r"config.json is not valid JSON"),
        ("[1, 2]", r"config.json holds a JSON list, not an object"),
        ('{"family": "vit", "dim": "wide"}', r"config.json: dim='wide' is invalid"),
        ('{"family": "vit", "colour": 1}', r"config.json: 'colour' is not a field of ViTConfig"),
    ],
)
def test_bad_config_json_is_named(saved: Path, text: str, message: str) -> None:
    (saved / CONFIG_NAME).write_text(text)
    with pytest.raises(ValueError, match=message):
        tfam.from_pretrained(saved)


def test_config_that_disagrees_with_the_weights(saved: Path) -> None:
    config = json.loads((saved / CONFIG_NAME).read_text())
    config["num_classes"] = 5
    (saved / CONFIG_NAME).write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config.json disagrees with .*model.safetensors.*head"):
        tfam.from_pretrained(saved)


def test_a_failed_save_keeps_the_previous_files(saved: Path, monkeypatch) -> None:
    before = {n: (saved / n).read_bytes() for n in (CONFIG_NAME, WEIGHTS_NAME)}
    model = tfam.from_pretrained(saved)
    with torch.no_grad():
        model.head.weight.add_(1.0)

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        model.save_pretrained(saved)
    monkeypatch.undo()
    assert {n: (saved / n).read_bytes() for n in before} == before
    assert sorted(p.name for p in saved.iterdir()) == sorted(before), "no temp file left behind"
    tfam.from_pretrained(saved)  # still loads and verifies
