"""Cross-attention alignment: the weights are the model's, the plot labels them with tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import tfam
from tfam.viz import cross_attention, plot_alignment


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return tfam.create_model(
        "transformer", dim=16, depth=2, heads=2, ffn_dim=32, vocab_size=20, max_positions=16
    ).eval()


def test_cross_attention_is_the_models(model) -> None:
    src = torch.tensor([5, 6, 7, 8, 2])
    tgt = torch.tensor([1, 9, 10])
    w = cross_attention(model, src, tgt, layer=-1)
    assert w.shape == (2, 3, 5)  # (H, Lt, Ls)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3))
    with torch.no_grad():
        _, attn = model(src[None], tgt[None], return_attention=True)
    torch.testing.assert_close(w, attn["cross"][1][0].float())
    torch.testing.assert_close(cross_attention(model, src, tgt, layer=0), attn["cross"][0][0])
    with pytest.raises(ValueError, match="layer=2 is invalid: the decoder has 2 blocks"):
        cross_attention(model, src, tgt, layer=2)


def test_plot_alignment_panels_and_labels(model, tmp_path: Path) -> None:
    src = torch.tensor([5, 6, 7, 2])
    tgt = torch.tensor([1, 9, 10])
    w = cross_attention(model, src, tgt)
    src_tokens, tgt_tokens = ["a", "b", "c", "<eos>"], ["x", "y", "<eos>"]
    out = tmp_path / "sub" / "align.png"
    fig = plot_alignment(w, src_tokens, tgt_tokens, out, layer_name="decoder block 2/2")
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["head 1", "head 2", "mean of 2 heads"]
    for ax in panels:
        assert [t.get_text() for t in ax.get_xticklabels()] == src_tokens
        assert [t.get_text() for t in ax.get_yticklabels()] == tgt_tokens
        (image,) = ax.get_images()
        assert image.get_array().shape == (3, 4)  # target rows x source columns
    mean = np.asarray(panels[-1].get_images()[0].get_array())
    np.testing.assert_allclose(mean, w.mean(0).numpy(), rtol=1e-6)
    with Image.open(out) as png:
        assert png.format == "PNG" and png.size[0] > 300 and png.size[1] > 150
    with pytest.raises(ValueError, match="3 target x 4 source tokens"):
        plot_alignment(w, src_tokens[:-1], tgt_tokens)
