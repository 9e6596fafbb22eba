"""`tfam train --init RUN` across data sets, image sizes and class counts: RUN's architecture
with the new data's facts, the body copied exactly, learned positions resampled (equal to the
resampling helpers), a fresh head for other classes, and one line saying so."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import tfam
import tfam.training
from tfam.layers import resample_pos_embed
from tfam.training.init_weights import load_init_weights, resample_positions_1d


def write_image_folder(root: Path, per_class: int, size: int, seed: int = 0) -> Path:
    """root/<class>/<i>.png: three classes of grey noise, each a different brightness."""
    rng = np.random.default_rng(seed)
    for k, name in enumerate(("shapes_a", "shapes_b", "shapes_c")):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 40, (size, size)) + 80 * k
            Image.fromarray(pixels.astype(np.uint8), mode="L").save(root / name / f"{i}.png")
    return root


pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["--set", "dim=16", "--set", "depth=1", "--set", "heads=2", "--threads", "1"]
QUICK = ["--max-steps", "1", "--batch-size", "8"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A 3-class image folder of 10x10 images (grid 5x5) and a digits run (8x8, grid 4x4)."""
    root = tmp_path_factory.mktemp("init")
    shapes = write_image_folder(root / "shapes", per_class=8, size=10)
    shapes_run, digits_run = root / "shapes_run", root / "digits_run"
    for argv in (
        [
            "--data",
            shapes,
            "--out",
            shapes_run,
            "--set",
            "patch_size=2",
            "--set",
            "position=learned",
        ],
        ["--data", "digits", "--out", digits_run],
    ):
        code = tfam.cli.main([str(a) for a in ["train", "vit", *argv, *TINY, *QUICK, "--quiet"]])
        assert code == 0
    return {"shapes": shapes, "shapes_run": shapes_run, "digits_run": digits_run, "root": root}


@pytest.fixture
def spy(monkeypatch) -> dict:
    """The model each `tfam train` builds, as the trainer holds it before the first step."""
    seen: dict = {}

    class Spy(tfam.training.Trainer):
        def fit(self, resume: bool = False):
            seen["model"] = self.model
            seen["state"] = {k: v.clone() for k, v in self.model.state_dict().items()}
            seen["lines"] = list(self._init_lines)
            return super().fit(resume=resume)

    monkeypatch.setattr(tfam.training, "Trainer", Spy)
    return seen


def fresh_like(model: torch.nn.Module, seed: int = 0) -> dict[str, torch.Tensor]:
    """The weights `tfam train` draws for this config before --init copies anything."""
    values = model.config.to_dict()
    family = values.pop("family")
    torch.manual_seed(seed)
    return tfam.create_model(family, **values).state_dict()


def test_folder_of_3_classes_to_digits(runs, spy, cli, tmp_path: Path) -> None:
    """RUN's architecture (not digits' vit_digits recipe), 8x8 images and 10 classes; the body
    copied exactly, pos_embed resampled 5x5 -> 4x4 as resample_pos_embed does, a fresh head."""
    run = runs["shapes_run"]
    code, out, err = cli(["train", "vit", "--data", "digits", "--init", run, "--out",
                          tmp_path / "t", "--threads", "1", *QUICK])  # fmt: skip
    assert code == 0, err
    model, state = spy["model"], spy["state"]
    c = model.config
    assert (c.dim, c.depth, c.heads, c.patch_size) == (16, 1, 2, (2, 2))  # RUN's
    assert (c.image_size, c.in_channels, c.num_classes) == ((8, 8), 1, 10)  # the data's
    theirs = tfam.from_pretrained(run).state_dict()
    body = [k for k in state if k != "pos_embed" and not k.startswith("head.")]
    for name in body:
        assert torch.equal(state[name], theirs[name]), name
    expected = resample_pos_embed(theirs["pos_embed"], (4, 4), (5, 5), 1)
    assert torch.equal(state["pos_embed"], expected)
    fresh = fresh_like(model)
    assert state["head.weight"].shape == (10, 16)
    assert torch.equal(state["head.weight"], fresh["head.weight"])
    line = (
        f"init: {run} -> {len(body)} tensors copied, pos_embed resampled 5x5 -> 4x4, head reset "
        "(3 -> 10 classes)"
    )
    assert spy["lines"] == [line]
    assert out.count("init:") == 1 and f"{line}\n" in out


def test_digits_to_a_larger_image_size_and_fewer_classes(runs, spy, cli, tmp_path) -> None:
    """digits (8x8, 10 classes) -> a folder of 12x12 images in 3 classes (grid 6x6)."""
    folder = write_image_folder(tmp_path / "big", per_class=6, size=12)
    run = runs["digits_run"]
    code, out, err = cli(["train", "vit", "--data", folder, "--init", run, "--out",
                          tmp_path / "t", "--threads", "1", *QUICK])  # fmt: skip
    assert code == 0, err
    state, c = spy["state"], spy["model"].config
    assert (c.image_size, c.num_classes, c.dim) == ((12, 12), 3, 16)
    theirs = tfam.from_pretrained(run).state_dict()
    assert torch.equal(state["pos_embed"], resample_pos_embed(theirs["pos_embed"], (6, 6), (4, 4)))
    for name, tensor in state.items():
        if name != "pos_embed" and not name.startswith("head."):
            assert torch.equal(tensor, theirs[name]), name
    assert spy["lines"][0].endswith(
        ", pos_embed resampled 4x4 -> 6x6, head reset (10 -> 3 classes)"
    )


def test_same_classes_other_data_copies_the_head(runs, spy, cli, tmp_path) -> None:
    folder = write_image_folder(tmp_path / "other", per_class=6, size=10, seed=1)
    run = runs["shapes_run"]
    code, _, err = cli(["train", "vit", "--data", folder, "--init", run, "--out",
                        tmp_path / "t", "--threads", "1", *QUICK])  # fmt: skip
    assert code == 0, err
    theirs = tfam.from_pretrained(run).state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in spy["state"].items())
    n = len(theirs)
    assert spy["lines"] == [
        f"init: {run} -> {n} tensors copied, head copied (3 classes of shapes, until trained on "
        "other)"
    ]


def test_set_and_preset_on_top_of_init(runs, spy, cli, tmp_path) -> None:
    """--set changes fields of RUN's config (a second block starts fresh); --preset replaces
    RUN's architecture (vit_digits is 64 wide: RUN's 16-wide tensors are reset)."""
    run = runs["digits_run"]
    code, _, err = cli(["train", "vit", "--data", "digits", "--init", run, "--set", "depth=2",
                        "--out", tmp_path / "a", "--threads", "1", *QUICK])  # fmt: skip
    assert code == 0, err
    assert spy["model"].config.depth == 2 and spy["model"].config.dim == 16
    theirs = tfam.from_pretrained(run).state_dict()
    new = [k for k in spy["state"] if k not in theirs]
    assert new and all(".1." in k for k in new)
    (line,) = spy["lines"]
    assert (
        line == f"init: {run} -> {len(theirs)} tensors copied, encoder.blocks.1 new (not in {run})"
    )

    code, _, err = cli(["train", "vit", "--data", "digits", "--init", run, "--preset",
                        "vit_digits", "--out", tmp_path / "b", *QUICK])  # fmt: skip
    assert code == 0, err
    assert spy["model"].config.dim == 64  # the preset's, not RUN's 16
    assert "reset (shape)" in spy["lines"][0]


def test_init_of_another_family_is_one_line(runs, cli, one_line, tmp_path) -> None:
    code, _, err = cli(["train", "bert", "--task", "sentiment", "--init", runs["digits_run"],
                        "--out", tmp_path / "x"])  # fmt: skip
    line = one_line(err)
    assert code == 2 and "is a 'vit' model, but MODEL is 'bert'" in line


def reference_1d(table: np.ndarray, length: int) -> np.ndarray:
    """Linear resampling with half-pixel centres (align_corners=False), by hand."""
    old = table.shape[0]
    x = np.clip((np.arange(length) + 0.5) * old / length - 0.5, 0, old - 1)
    return np.stack([np.interp(x, np.arange(old), table[:, d]) for d in range(table.shape[1])], 1)


def test_learned_1d_positions_are_resampled_to_a_new_length(tmp_path: Path) -> None:
    def gpt(max_positions: int, seed: int) -> torch.nn.Module:
        torch.manual_seed(seed)
        return tfam.create_model("gpt", vocab_size=20, dim=16, depth=1, heads=2,
                                 max_positions=max_positions, position="learned")  # fmt: skip

    source = gpt(8, 0)
    source.save_pretrained(tmp_path)
    table = source.state_dict()["pos_embed"]
    longer = gpt(12, 1)
    (line,) = load_init_weights(longer, str(tmp_path))
    assert line.endswith(", pos_embed resampled 8 -> 12 positions")
    got = longer.state_dict()["pos_embed"]
    assert torch.equal(got, resample_positions_1d(table, 12))
    ref = reference_1d(table.double().numpy(), 12)
    np.testing.assert_allclose(got.double().numpy(), ref, rtol=1e-5, atol=1e-6)
    shorter = gpt(5, 2)
    (line,) = load_init_weights(shorter, str(tmp_path))
    assert line.endswith(", pos_embed cut 8 -> 5 positions")
    assert torch.equal(shorter.state_dict()["pos_embed"], table[:5])
    for name, tensor in shorter.state_dict().items():
        if name != "pos_embed":
            assert torch.equal(tensor, source.state_dict()[name]), name


def test_init_with_another_vocabulary_is_one_line(cli, one_line, tmp_path: Path) -> None:
    """A run on `copy` (20 ids) cannot start kjv-rv (8000 BPE pieces): its embeddings would be
    read for other pieces."""
    run = tmp_path / "copy"
    small = ["--set", "dim=16", "--set", "heads=2", "--set", "ffn_dim=32", "--threads", "1"]
    code, _, err = cli(["train", "transformer", "--data", "copy", "--out", run, *small,
                        "--max-steps", "1", "--quiet"])  # fmt: skip
    assert code == 0, err
    code, _, err = cli(["train", "transformer", "--data", "kjv-rv", "--init", run, "--out",
                        tmp_path / "x", *small])  # fmt: skip
    line = one_line(err)
    assert code == 2 and f"--init '{run}' is invalid for --data kjv-rv" in line
    assert "its vocabulary has 20 tokens, the data's tokenizer 8000" in line


def test_a_run_started_from_init_resumes_with_its_architecture(runs, cli, tmp_path) -> None:
    """--resume does not repeat --init; the model is built as the run was (RUN's width), not
    from the data's recipe (vit_digits), so the checkpoint fits."""
    out = tmp_path / "t"
    argv = ["train", "vit", "--data", "digits", "--out", out, "--threads", "1", "--quiet"]
    code, _, err = cli([*argv, "--init", runs["digits_run"], "--epochs", "1", *QUICK])
    assert code == 0, err
    code, _, err = cli(["train", "vit", "--data", "digits", "--out", out, "--resume"])
    assert code == 0, err
    assert tfam.from_pretrained(out).config.dim == 16


def test_init_with_another_tokenizer_of_the_same_size_is_refused(tmp_path: Path) -> None:
    """Same vocabulary size, other pieces: RUN's embeddings would be read for the wrong ids."""
    from types import SimpleNamespace

    from tfam.cli.train import _check_init_tokenizer

    (tmp_path / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0, "b": 1}}}')
    entry = SimpleNamespace(name="mine")

    class Tok:
        def __init__(self, vocab: dict) -> None:
            self.vocab = vocab

        def to_json(self) -> str:
            import json

            return json.dumps({"model": {"vocab": self.vocab}}, indent=4)

    _check_init_tokenizer(str(tmp_path), Tok({"a": 0, "b": 1}), entry)  # same: accepted
    with pytest.raises(ValueError, match=r"--init '.*' is invalid for --data mine: its tokenizer"):
        _check_init_tokenizer(str(tmp_path), Tok({"a": 1, "b": 0}), entry)


# Every vision family fine-tunes from a digits run onto a folder of 3 classes of 10x10 images.
FAMILY_RUNS = {
    "cnn": ["--set", "hidden_sizes=[8,16]", "--set", "depths=[1,1]", "--set", "embedding_size=8"],
    "deit": TINY[:6],
    "swin": ["--set", "dim=16", "--set", "heads=2", "--set", "depths=[1,1]"],
    "igpt": TINY[:6],
}


@pytest.fixture(scope="module")
def family_runs(runs, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    done = {}
    for family, sets in FAMILY_RUNS.items():
        data = "digits-pixels" if family == "igpt" else "digits"
        out = root / family
        argv = ["train", family, "--data", data, "--out", out, *sets, *QUICK, "--threads", "1"]
        assert tfam.cli.main([str(a) for a in [*argv, "--quiet"]]) == 0
        done[family] = out
    return done


@pytest.mark.parametrize("family", sorted(FAMILY_RUNS))
def test_every_vision_family_fine_tunes_from_digits(family, family_runs, runs, spy, cli, tmp_path):
    """The body copied exactly (CNN BatchNorm statistics and Swin's relative bias tables too:
    the window is the same), DeiT's positions resampled 4x4 -> 5x5 behind its two prefix
    tokens, a fresh head for 3 classes; iGPT keeps the digits' palette (values 0..16, read from
    the folder's 0..255) and 8x8 images, so every tensor, its next-pixel head too, is copied."""
    run = family_runs[family]
    code, out, err = cli(["train", family, "--data", runs["shapes"], "--init", run, "--out",
                          tmp_path / "t", "--threads", "1", *QUICK])  # fmt: skip
    assert code == 0, err
    model, state = spy["model"], spy["state"]
    theirs = tfam.from_pretrained(run).state_dict()
    head = [k for k in state if k.startswith("head")] if family != "igpt" else []
    for name, tensor in state.items():
        if name not in head and name != "pos_embed":
            assert torch.equal(tensor, theirs[name]), name
    fresh = fresh_like(model)
    for name in head:
        assert state[name].shape[0] == 3 and torch.equal(state[name], fresh[name]), name
    (line,) = spy["lines"]
    if family == "igpt":
        assert line == f"init: {run} -> {len(state)} tensors copied"
        palette = json.loads((tmp_path / "t" / "palette.json").read_text())
        assert palette["scale"] == 16 and palette["image_shape"] == [1, 8, 8]
        assert "12x12" not in out and "10x10 -> 8x8 images, 17 grey levels of 0..16" in out
        return
    modules = ", ".join(dict.fromkeys(k.rsplit(".", 1)[0] for k in head))  # head, head_dist
    assert line == f"init: {run} -> {len(state) - len(head) - (family == 'deit')} tensors " + (
        f"copied, pos_embed resampled 4x4 -> 5x5, {modules}" if family == "deit" else
        f"copied, {modules}") + " reset (10 -> 3 classes)"  # fmt: skip
    if family == "cnn":
        assert any(k.endswith("running_var") for k in state)  # BatchNorm statistics, copied
    if family == "swin":
        assert any(k.endswith("bias_provider.table") for k in state)
    if family == "deit":
        expected = resample_pos_embed(theirs["pos_embed"], (5, 5), (4, 4), 2)
        assert torch.equal(state["pos_embed"], expected)


def test_an_igpt_palette_for_other_images_is_one_line(family_runs, cli, one_line, tmp_path):
    folder = tmp_path / "colour"
    for name in ("a", "b"):
        (folder / name).mkdir(parents=True)
        for i in range(2):
            pixels = np.full((8, 8, 3), 60 * i, dtype=np.uint8)
            Image.fromarray(pixels, mode="RGB").save(folder / name / f"{i}.png")
    code, _, err = cli(["train", "igpt", "--data", folder, "--init", family_runs["igpt"],
                        "--out", tmp_path / "x"])  # fmt: skip
    line = one_line(err)
    assert code == 2 and f"--init {str(family_runs['igpt'])!r} is invalid for --data" in line
    assert "its palette (17 grey levels of 0..16) is for 1-channel images" in line
    assert "the folder's images have 3 channels" in line
    code, _, err = cli(["train", "cnn", "--data", folder, "--init", family_runs["swin"],
                        "--out", tmp_path / "y"])  # fmt: skip
    assert code == 2 and "is a 'swin' model, but MODEL is 'cnn'" in one_line(err)
