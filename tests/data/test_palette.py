"""Palettes and pixel datasets (iGPT's data side): grey levels read the digits exactly,
k-means is seeded and recovers well-separated colours, JSON round trips, and the pixel
datasets hold [start] + raster-order ids with the labels kept."""

from __future__ import annotations

import pytest
import torch

from tfam.data import get_dataset
from tfam.data.sources.pixels import downsample, load_pixels
from tfam.data.vision.palette import (
    GreyPalette,
    KMeansPalette,
    load_palette,
    palette_from_dict,
)


def test_grey_palette_reads_the_digits_exactly() -> None:
    images = torch.randint(0, 17, (5, 1, 8, 8), dtype=torch.uint8)
    palette = GreyPalette(17, scale=16)
    ids = palette.encode(images)
    assert ids.shape == (5, 64) and ids.dtype == torch.int64
    # Raster order: row by row, left to right.
    assert ids[2, 8 * 3 + 5] == images[2, 0, 3, 5]
    assert torch.equal(palette.decode(ids, (1, 8, 8)), images)


def test_grey_palette_rounds_to_the_nearest_level() -> None:
    palette = GreyPalette(16, scale=255)
    values = torch.tensor([0, 8, 9, 17, 128, 246, 255], dtype=torch.uint8).view(1, 1, 1, 7)
    ids = palette.encode(values)[0]
    level = 255 / 15
    expected = torch.round(values.double().flatten() / level).long()
    assert torch.equal(ids, expected)
    assert palette.size == 16 and int(ids.max()) == 15


def test_kmeans_palette_is_seeded_and_finds_the_colours() -> None:
    g = torch.Generator().manual_seed(0)
    colours = torch.tensor([[250, 10, 10], [10, 250, 10], [10, 10, 250], [128, 128, 128]])
    which = torch.randint(0, 4, (20, 6, 6), generator=g)
    noise = torch.randint(-3, 4, (20, 6, 6, 3), generator=g)
    images = (colours[which] + noise).clamp(0, 255).to(torch.uint8).permute(0, 3, 1, 2)
    a = KMeansPalette.fit(images, 4, seed=1)
    b = KMeansPalette.fit(images, 4, seed=1)
    assert torch.equal(a.centres, b.centres)
    # Each true colour has a centre within the noise.
    distance = torch.cdist(colours.double(), a.centres)
    assert float(distance.min(dim=1).values.max()) < 3
    ids = a.encode(images)
    decoded = a.decode(ids, (3, 6, 6))
    assert (decoded.int() - images.int()).abs().max() <= 6


def test_palette_json_round_trip(tmp_path) -> None:
    images = torch.randint(0, 256, (4, 3, 5, 5), dtype=torch.uint8)
    for palette in (GreyPalette(16), KMeansPalette.fit(images, 8, seed=0)):
        again = palette_from_dict(palette.to_dict())
        assert type(again) is type(palette)
        assert torch.allclose(again.colours(), palette.colours())
    palette = GreyPalette(17, scale=16)
    palette.save(tmp_path / "palette.json", image_shape=[1, 8, 8])
    loaded, data = load_palette(tmp_path)
    assert data["image_shape"] == [1, 8, 8] and loaded.size == 17
    with pytest.raises(ValueError, match="kind"):
        palette_from_dict({"kind": "rainbow"})


def test_downsample_averages_blocks() -> None:
    images = torch.tensor([[0, 2], [4, 6]], dtype=torch.uint8).view(1, 1, 2, 2)
    assert downsample(images, 2).item() == 3


def test_digits_pixels_dataset() -> None:
    data = load_pixels("digits", "test")
    entry = get_dataset("digits-pixels")
    assert entry.task == "causal-lm" and "sequence-classification" in entry.tasks
    assert len(data) == 360 and data.ids.shape == (360, 65)
    assert data.vocab_size == entry.info.vocab_size == 18
    ids, label = data[0]
    assert ids[0] == 17 and int(ids[1:].max()) <= 16 and 0 <= label < 10
    assert torch.equal(data.palette.decode(ids[None, 1:], (1, 8, 8)), data.images[:1])
    assert data.run_files()["palette.json"]["image_shape"] == [1, 8, 8]


@pytest.mark.requires_data("fashion-mnist")
def test_fashion_mnist_pixels_are_14x14_with_16_levels() -> None:
    data = load_pixels("fashion-mnist", "test")
    assert data.ids.shape == (10000, 197) and data.image_shape == (1, 14, 14)
    assert int(data.ids[:, 1:].max()) <= 15 and data.start_token_id == 16


def test_pixel_augmentation_moves_ids_and_pads_with_black() -> None:
    from tfam.data.vision.augment import BatchAugment

    data = load_pixels("digits", "fit")
    ids = data.ids[:16]
    g = torch.Generator().manual_seed(0)
    moved = data.augment_ids(ids, BatchAugment(padding=1), g)
    assert moved.shape == ids.shape and moved.dtype == ids.dtype
    assert bool((moved[:, 0] == data.start_token_id).all())  # the start token stays
    assert data.black_id == 0 and int(moved[:, 1:].max()) < data.palette.size
    # Each row is its image shifted by (dy, dx) in -1..1, black where the shift uncovered.
    grid, out = ids[:, 1:].view(-1, 8, 8), moved[:, 1:].view(-1, 8, 8)
    shifted = 0
    for a, b in zip(grid, out, strict=True):
        padded = torch.nn.functional.pad(a, (1, 1, 1, 1), value=data.black_id)
        hits = [(dy, dx) for dy in range(3) for dx in range(3)
                if torch.equal(padded[dy : dy + 8, dx : dx + 8], b)]  # fmt: skip
        assert hits, "every row is a crop of its padded image"
        shifted += (1, 1) not in hits
    assert shifted > 8  # most of the 16 moved (a crop at the centre keeps one in nine)
    # A horizontal flip mirrors each row of pixels; no augmentation asked: the same ids.
    flipped = data.augment_ids(ids, BatchAugment(flip=True), torch.Generator().manual_seed(1))
    for a, b in zip(grid, flipped[:, 1:].view(-1, 8, 8), strict=True):
        assert torch.equal(a, b) or torch.equal(a.flip(1), b)
    assert torch.equal(data.augment_ids(ids, BatchAugment(), g), ids)
    with pytest.raises(ValueError, match=r"expected \(B, 65\)"):
        data.augment_ids(ids[:, :10], BatchAugment(padding=1), g)


def test_causal_lm_augments_pixel_sequences_whole() -> None:
    from tfam.data.vision.augment import BatchAugment
    from tfam.training.tasks import task_for

    data = load_pixels("digits", "fit")
    task = task_for("causal-lm", data)
    batch = task.collate([data[i] for i in range(8)])
    out = task.augment(batch, BatchAugment(padding=2), torch.Generator().manual_seed(0), data)
    assert out["input_ids"].shape == batch["input_ids"].shape
    assert torch.equal(out["input_ids"][:, 1:], out["labels"][:, :-1])  # still shifted by one
    assert not torch.equal(out["labels"], batch["labels"])
    assert task.augment(batch, None, torch.Generator(), data) is batch
    cls = task_for("sequence-classification", data)
    cb = cls.collate([data[i] for i in range(8)])
    co = cls.augment(cb, BatchAugment(padding=2), torch.Generator().manual_seed(0), data)
    same = data.augment_ids(cb["input_ids"], BatchAugment(padding=2),
                            torch.Generator().manual_seed(0))  # fmt: skip
    assert torch.equal(co["input_ids"], same)
    assert torch.equal(co["labels"], cb["labels"])
