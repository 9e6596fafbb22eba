"""The size-from-data rule (tfam.training.autosize): patches, widths, depths and schedules
chosen from image sizes and example counts, and the user's values kept."""

from __future__ import annotations

import math

import pytest

from tfam.data.sources.images import DatasetInfo
from tfam.data.text.dataset import TextDatasetInfo
from tfam.training.autosize import (
    MIN_STEPS,
    plan_schedule,
    size_from_data,
    size_text,
    size_vit,
    vit_patch,
)

SIDES = (8, 28, 32, 40, 64, 224)
EXAMPLES = (50, 140, 500, 1_000, 5_000, 20_000, 50_000)


@pytest.mark.parametrize(
    ("side", "expected"),
    [(8, (8, 1)), (28, (28, 4)), (32, (32, 4)), (40, (40, 5)), (64, (64, 8)), (224, (224, 28)),
     (37, (40, 5)), (99, (96, 12)), (3, (3, 1)), (1000, (256, 32))],
)  # fmt: skip
def test_patch_gives_four_to_eight_patches_per_side(side: int, expected: tuple) -> None:
    resized, patch = vit_patch(side)
    assert (resized, patch) == expected
    assert resized % patch == 0
    assert resized // patch <= 8
    assert resized // patch >= 4 or resized < 4


def test_patch_refuses_an_empty_side() -> None:
    with pytest.raises(ValueError, match="image side 0 is invalid"):
        vit_patch(0)


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("n", EXAMPLES)
def test_vit_sizing_builds_a_model_for_every_size(side: int, n: int) -> None:
    from tfam.models.registry import create_config

    model, resize, reasons = size_vit(side, 3, n)
    assert resize is None  # every listed side has a divisor giving 4..8 patches
    assert model["dim"] % model["heads"] == 0 and model["dim"] % 4 == 0  # sincos2d needs 4 | D
    assert model["dim"] <= {50: 96, 140: 96, 500: 96}.get(n, 256)
    assert f"{side}x{side} images" in reasons[0]
    config = create_config("vit", image_size=side, in_channels=3, num_classes=2, **model)
    assert tuple(config.image_size) == (side, side)


def test_depth_and_width_grow_with_the_examples() -> None:
    sizes = [size_vit(224, 3, n)[0] for n in EXAMPLES]
    depths = [m["depth"] for m in sizes]
    widths = [m["dim"] for m in sizes]
    assert depths == sorted(depths) and widths == sorted(widths)
    assert depths[0] < depths[-1] and widths[0] < widths[-1]
    # Little data regularises: drop path 0.1 below 20k examples.
    assert sizes[0]["drop_path"] == 0.1 and sizes[-1]["drop_path"] < 0.1


def test_width_follows_the_patch_when_it_is_small() -> None:
    grey_small = size_vit(40, 1, 2_000)[0]  # patch 5x5x1 = 25 values
    rgb_large = size_vit(64, 3, 2_000)[0]  # patch 8x8x3 = 192 values
    assert grey_small["dim"] == 64 and rgb_large["dim"] == 128


def test_user_values_win_and_what_follows_from_them_follows() -> None:
    model, _, reasons = size_vit(40, 1, 140, overrides={"dim": 128, "patch_size": 4})
    assert model["dim"] == 128 and model["heads"] == 4 and model["ffn_dim"] == 256
    assert "patch_size" not in model and "patch" not in reasons[0]


def test_a_side_without_divisor_is_resized_and_said() -> None:
    model, resize, reasons = size_vit((37, 40), 1, 140)
    assert resize == 40 and model["patch_size"] == 5
    assert "37x40 images resized to 40x40" in reasons[0]
    model, resize, _ = size_vit((24, 40), 1, 140)
    assert resize is None and model["patch_size"] == (3, 5)


@pytest.mark.parametrize("n", [1, 7, 16, 50, 112, 140, 999, 5_000, 50_000])
@pytest.mark.parametrize("text", [False, True])
def test_schedule_batch_within_the_split_and_at_least_200_steps(n: int, text: bool) -> None:
    values, reasons = plan_schedule(n, width=96, text=text)
    batch, epochs = values["batch_size"], values["epochs"]
    assert 1 <= batch <= n
    steps = epochs * math.ceil(n / batch)
    assert steps >= MIN_STEPS
    assert 10 <= epochs <= 300 or steps >= MIN_STEPS
    assert 0 < values["warmup_epochs"] < epochs
    assert f"batch {batch}, {epochs} epochs = {steps:,} steps" in reasons[0]


def test_schedule_keeps_the_users_batch_and_epochs() -> None:
    values, reasons = plan_schedule(112, width=64, batch_size=8, epochs=3)
    assert "batch_size" not in values and "epochs" not in values
    assert values["warmup_epochs"] == pytest.approx(0.15)
    assert "batch 8, 3 epochs = 42 steps" in reasons[0]


def test_learning_rate_shrinks_for_wide_models() -> None:
    small = plan_schedule(50_000, width=96)[0]["lr"]
    wide = plan_schedule(50_000, width=384)[0]["lr"]
    assert small == 1e-3 and wide < small


@pytest.mark.parametrize("family", ["bert", "gpt", "transformer"])
@pytest.mark.parametrize(("n", "length"), [(50, 16), (1_000, 64), (50_000, 128), (200_000, 600)])
def test_text_sizing_builds_each_family(family: str, n: int, length: int) -> None:
    from tfam.models.registry import create_config

    model, reasons = size_text(family, n, length)
    assert model["max_positions"] >= length and model["max_positions"] >= 32
    assert model["dim"] % model["heads"] == 0
    assert f"up to {length} tokens" in reasons[1]
    config = create_config(family, vocab_size=500, **model)
    assert config.max_positions == model["max_positions"]


def test_text_grows_with_tokens() -> None:
    small = size_text("bert", 100, 32)[0]
    large = size_text("bert", 100_000, 256)[0]
    assert small["depth"] < large["depth"] and small["dim"] < large["dim"]


def test_size_from_data_reads_image_and_text_infos() -> None:
    info = DatasetInfo("photos", 40, 1, ("a", "b"), 255, 140, 0, "")
    sizing = size_from_data("vit", "image-classification", info, 112)
    assert sizing.line.startswith("sized from the data: 40x40 images -> patch 5 (8x8 patches)")
    assert "112 examples -> 4 blocks of width 64" in sizing.line
    assert "batch 16, 143 epochs = 1,001 steps" in sizing.line
    assert sizing.train["label_smoothing"] == 0.1 and sizing.threads == 1

    text = TextDatasetInfo("mine.txt", 300, 800, 0, "", num_labels=None)
    object.__setattr__(text, "max_length", 100)  # the files helper's field, when present
    sizing = size_from_data("gpt", "causal-lm", text, 800, given_train={"epochs": 2})
    assert sizing.model["max_positions"] == 128 and "epochs" not in sizing.train
    assert sizing.threads == 1  # width 128
    assert size_from_data("gpt", "causal-lm", text, 10**6).threads is None  # width 384
    assert "label_smoothing" not in sizing.train
