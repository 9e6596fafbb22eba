"""`tfam viz windows`: a Swin run trained for a few steps by `tfam train`, drawn; the windows
it draws are the model's own (found by partitioning token ids)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

import tfam
import tfam.cli
from tfam.layers import WindowPartition
from tfam.viz.windows import window_maps, window_tokens

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def swin_run(tmp_path_factory) -> Path:
    """`tfam train swin --data digits` for 2 steps: the catalog's Swin recipe end to end."""
    out = tmp_path_factory.mktemp("runs") / "swin"
    code = tfam.cli.main(
        ["train", "swin", "--data", "digits", "--max-steps", "2", "--out", str(out)]
    )
    assert code == 0
    return out


def test_viz_windows_writes_a_png(swin_run: Path, tmp_path, capsys) -> None:
    for name, extra in (("a.png", []), ("b.png", ["--block", "2", "--head", "2"]),
                        ("c.png", ["--stage", "2"])):  # fmt: skip
        code = tfam.cli.main(["viz", "windows", str(swin_run), "test:0", "--out",
                              str(tmp_path / name), *extra])  # fmt: skip
        assert code == 0, capsys.readouterr().err
        with Image.open(tmp_path / name) as img:
            assert img.format == "PNG" and img.size[0] > 500
    assert "windows of digits test[0]" in capsys.readouterr().out
    code = tfam.cli.main(["viz", "windows", str(swin_run), "test:0", "--stage", "3"])
    assert code == 2 and "stage=3 is invalid: the model has stages 1..2" in capsys.readouterr().err
    code = tfam.cli.main(["viz", "attention", str(swin_run), "test:0"])
    assert code == 2 and "tfam viz windows" in capsys.readouterr().err


def test_the_maps_are_the_models_windows_and_weights(swin_run: Path) -> None:
    model = tfam.from_pretrained(swin_run)
    x = torch.randn(1, 1, 8, 8)
    maps = window_maps(model, x[0], stage=1, block=2)
    assert maps.grid == (8, 8) and maps.shifted is not None
    # The shifted block rolls by 2: window 0 holds the tokens (2..5, 2..5) of the grid.
    expected = [r * 8 + c for r in range(2, 6) for c in range(2, 6)]
    assert maps.window == 0 and maps.tokens.tolist() == expected
    assert window_tokens(WindowPartition(4, 2), (8, 8))[0].tolist() == expected
    _, weights = model(x, return_attention=True)
    torch.testing.assert_close(maps.weights, weights[1][0].float())
    assert maps.regular.tolist()[0][:5] == [0, 0, 0, 0, 1]
