"""iGPT end to end on the digits as pixels: `tfam train igpt` pre-trains by next-pixel
prediction (the loss falls) and keeps its palette, `tfam generate RUN` completes held-out
images into a PNG grid, and `--task classify --init RUN` fine-tunes a classifier from it."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch

import tfam
from tfam.models.igpt import complete, features, features_by_layer, mbr_select, region_pool

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["--set", "dim=32", "--set", "depth=1", "--set", "heads=2", "--quiet"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("igpt") / "run"
    argv = ["train", "igpt", "--data", "digits-pixels", "--epochs", "3", "--lr", "3e-3"]
    assert tfam.cli.main([*argv, *TINY, "--out", str(out)]) == 0
    return out


def test_pretraining_loss_falls_and_the_palette_is_kept(pretrained: Path) -> None:
    with open(pretrained / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    val = [float(r["val_loss"]) for r in rows if r.get("val_loss")]
    assert len(val) == 3 and val[-1] < val[0]
    # Uniform over 17 levels is ln 17 = 2.83 nats per pixel; the model does far better.
    assert val[-1] < 2.0
    palette = json.loads((pretrained / "palette.json").read_text())
    assert palette["kind"] == "grey" and palette["image_shape"] == [1, 8, 8]
    model = tfam.from_pretrained(pretrained)
    assert model.config.vocab_size == 18 and model.config.start_token_id == 17


def test_generate_completes_images_into_a_grid(pretrained: Path, cli, tmp_path) -> None:
    out = tmp_path / "grid.png"
    code, stdout, _ = cli(
        ["generate", pretrained, "--images", "3", "--samples", "2", "--seed", "0", "--out", out]
    )
    assert code == 0 and out.stat().st_size > 0
    assert "completed 3 test images of digits-pixels from their top 4 of 8 rows" in stdout
    code, _, err = cli(["generate", pretrained, "--prompt", "x"])
    assert code == 2 and "--prompt is invalid for an image run" in err


def test_completion_keeps_the_prompt_and_is_seeded(pretrained: Path) -> None:
    model = tfam.from_pretrained(pretrained)
    ids = tfam.data.load_dataset("digits-pixels", "test").ids[:2]
    prompt = ids[:, :33]
    a = complete(model, prompt, 64, samples=2, generator=torch.Generator().manual_seed(1))
    b = complete(model, prompt, 64, samples=2, generator=torch.Generator().manual_seed(1))
    assert a.shape == (2, 2, 64) and torch.equal(a, b)
    assert torch.equal(a[:, 0, :32], ids[:, 1:33]) and int(a.max()) < 17


def test_mbr_select_keeps_the_candidate_nearest_the_others() -> None:
    # Row 0: three near 0 and an outlier; the medoid of the L1 distances is the 0.1 one
    # (sums 0.1+0.1+9.9 = 10.1 against 0.2+0.2+9.8 for either neighbour).
    row0 = torch.tensor([[0.0, 0.0], [0.1, 0.0], [0.2, 0.0], [10.0, 0.0]])
    # Row 1: two equal candidates share the least risk (10); the first is kept.
    row1 = torch.tensor([[0.0, 0.0], [3.0, 3.0], [0.0, 0.0], [4.0, 0.0]])
    got = mbr_select(torch.stack([row0, row1]))
    assert got.tolist() == [1, 0]
    # Brute force over both rows and both norms: argmin_i sum_j ||x_i - x_j||_p.
    x = torch.randn(3, 7, 2, 5, generator=torch.Generator().manual_seed(0))
    for p in (1.0, 2.0):
        flat = x.flatten(2).double()
        risk = [
            [sum(float((a - b).abs().pow(p).sum() ** (1 / p)) for b in r) for a in r] for r in flat
        ]
        assert mbr_select(x, p=p).tolist() == [min(range(7), key=r.__getitem__) for r in risk]
    with pytest.raises(ValueError, match=r"candidates have shape \(3,\); expected \(B, N, ...\)"):
        mbr_select(torch.zeros(3))


def test_mbr_completion_is_one_of_its_candidates(pretrained: Path) -> None:
    model = tfam.from_pretrained(pretrained)
    ids = tfam.data.load_dataset("digits-pixels", "test").ids[:2]
    prompt = ids[:, :33]
    colours = torch.linspace(0, 16, 17, dtype=torch.float64).unsqueeze(1)
    got = complete(
        model, prompt, 64, mbr=5, colours=colours, generator=torch.Generator().manual_seed(3)
    )
    # The same generator state draws the same five candidates; the pick is one of them.
    draws = complete(model, prompt, 64, samples=5, generator=torch.Generator().manual_seed(3))
    assert got.shape == (2, 1, 64)
    for i in range(2):
        want = draws[i, mbr_select(colours[draws[i : i + 1]].flatten(2))[0]]
        assert torch.equal(got[i, 0], want)
    assert torch.equal(got[:, 0, :32], ids[:, 1:33])
    with pytest.raises(ValueError, match="mbr=0 is invalid: expected an int >= 1"):
        complete(model, prompt, 64, mbr=0)
    with pytest.raises(ValueError, match="greedy candidates are all the same"):
        complete(model, prompt, 64, mbr=4, greedy=True)


def test_generate_mbr_option(pretrained: Path, cli, tmp_path) -> None:
    out = tmp_path / "grid.png"
    argv = ["generate", pretrained, "--images", "2", "--mbr", "4", "--seed", "0", "--out", out]
    code, stdout, _ = cli(argv)  # one completion an image by default with --mbr
    assert code == 0 and out.stat().st_size > 0
    assert "1 sample each (each the least-risk of 4 candidates)" in stdout
    code, _, err = cli(["generate", pretrained, "--mbr", "0"])
    assert code == 2 and "--mbr 0 is invalid: expected an int >= 1" in err
    code, _, err = cli(["generate", pretrained, "--mbr", "4", "--greedy"])
    assert code == 2 and "--mbr 4 is invalid with --greedy" in err


def test_features_of_a_middle_layer(pretrained: Path) -> None:
    model = tfam.create_model("igpt_digits", dim=16, heads=2, depth=3).eval()
    ids = tfam.data.load_dataset("digits-pixels", "test").ids[:4, :-1]
    f1, f3 = features(model, ids, 1), features(model, ids, 3)
    assert f1.shape == f3.shape == (4, 16) and not torch.allclose(f1, f3)
    # Layer 1's features do not depend on the later blocks.
    with torch.no_grad():
        model.stack.blocks[2].mlp.fc2.weight.add_(1.0)
    torch.testing.assert_close(features(model, ids, 1), f1, rtol=0, atol=0)


def test_fine_tune_a_classifier_from_the_pretrained_run(pretrained: Path, cli, tmp_path) -> None:
    out = tmp_path / "classify"
    argv = ["train", "igpt", "--data", "digits-pixels", "--task", "classify", "--init"]
    argv += [pretrained, "--max-steps", "2", "--out", out]
    code, stdout, _ = cli(argv)
    assert code == 0
    # Every tensor of the pre-trained run but its LM head (the token embedding: the recipe's
    # 2-D RoPE learns no position table; the block's ten, the final norm); the classifier is
    # new.
    assert "-> 12 tensors copied, score new (head 'lm' -> 'sequence')" in stdout, stdout
    assert tfam.from_pretrained(out).config.rope_grid == (8, 8)
    model = tfam.from_pretrained(out)
    assert model.config.head == "sequence" and model.config.num_labels == 10
    assert model.config.dim == 32 and model.config.depth == 1  # --init's architecture
    results = json.loads((out / "results.json").read_text())
    assert math.isfinite(results["test"]["loss"])


def test_features_by_layer_equal_each_layer_run_alone() -> None:
    model = tfam.create_model("igpt_digits", dim=16, heads=2, depth=3).eval()
    ids = tfam.data.load_dataset("digits-pixels", "test").ids[:4, :-1]
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[0, 40:] = False  # a padded row: pooled over its real positions only
    got = features_by_layer(model, ids, [3, 1, 2], attention_mask=mask)
    assert list(got) == [1, 2, 3]
    for layer, value in got.items():
        want = features(model, ids, layer, attention_mask=mask)
        torch.testing.assert_close(value, want, rtol=1e-6, atol=1e-6)
    # The hooks are gone afterwards; a block outside [1, depth] is refused.
    assert all(not b._forward_hooks for b in model.stack.blocks)
    with pytest.raises(
        ValueError, match=r"layers=\[0, 2\] is invalid: expected blocks in \[1, 3\]"
    ):
        features_by_layer(model, ids, [0, 2])


def test_region_pool_means_each_cell_of_the_grid_apart() -> None:
    x = torch.arange(2 * 6 * 2, dtype=torch.float32).view(2, 6, 2)  # a 2 x 3 grid, D = 2
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 0] = False  # a padded position counts in no cell's mean
    got = region_pool(x, mask, (2, 3), (1, 2))  # columns [0, 1] and [2] of both rows
    want_0 = torch.cat([x[0, [0, 1, 3, 4]].mean(0), x[0, [2, 5]].mean(0)])
    want_1 = torch.cat([x[1, [1, 3, 4]].mean(0), x[1, [2, 5]].mean(0)])
    torch.testing.assert_close(got, torch.stack([want_0, want_1]))
    halves = region_pool(x, None, (2, 3), (2, 1))  # the top row, then the bottom row
    torch.testing.assert_close(halves, torch.cat([x[:, :3].mean(1), x[:, 3:].mean(1)], dim=-1))
    torch.testing.assert_close(region_pool(x, None, (2, 3), (1, 1)), x.mean(1))
    for bad in ((0, 1), (3, 1), (1, 4), (2,), (True, 1), 2):
        with pytest.raises(ValueError, match=r"regions=.* is invalid: expected \(rows, columns\)"):
            region_pool(x, mask, (2, 3), bad)
    with pytest.raises(ValueError, match=r"grid=\(3, 3\) is invalid for 6 positions"):
        region_pool(x, mask, (3, 3), (1, 1))


def test_features_by_layer_in_quadrants_average_to_the_whole_image_mean() -> None:
    # [start] + 63 pixels: 64 positions on the 8 x 8 grid (position i predicts pixel i); four
    # quadrants of 16 each, so their mean is the mean over the whole sequence.
    model = tfam.create_model("igpt_digits", dim=16, heads=2, depth=2).eval()
    ids = tfam.data.load_dataset("digits-pixels", "test").ids[:3, :-1]
    whole = features_by_layer(model, ids, [1, 2])
    quads = features_by_layer(model, ids, [1, 2], regions=(2, 2), grid=(8, 8))
    for layer in (1, 2):
        assert quads[layer].shape == (3, 64)
        parts = quads[layer].view(3, 4, 16)
        torch.testing.assert_close(parts.mean(1), whole[layer], rtol=1e-5, atol=1e-6)
        assert not torch.allclose(parts[:, 0], parts[:, 3])
    # Without image_size in the config, the grid must be given.
    with pytest.raises(ValueError, match=r"regions=\(2, 2\) needs the image's grid"):
        features_by_layer(model, ids, [1], regions=(2, 2))
    rope = tfam.create_model("igpt_digits", dim=16, heads=2, depth=1, position="rope", image_size=8)
    got = features_by_layer(rope.eval(), ids, [1], regions=(2, 1))[1]
    assert got.shape == (3, 32)


def test_refit_pretrains_again_on_fit_plus_val(cli, tmp_path) -> None:
    # The pixel splits join (their get_batch gives items, not columns).
    out = tmp_path / "refit"
    argv = ["train", "igpt", "--data", "digits-pixels", "--epochs", "1", "--refit"]
    code, stdout, stderr = cli([*argv, *TINY, "--out", out])
    assert code == 0, stderr
    results = json.loads((out / "results.json").read_text())
    assert results["refit"]["examples"] == 1437 and results["refit"]["steps"] == 23
    assert math.isfinite(results["test"]["loss"])
