"""share_layers (ALBERT's cross-layer sharing): one block applied at every depth."""

import pytest
import torch

import tfam
from tfam.config import BaseConfig
from tfam.layers.block import TransformerStack


def test_one_block_at_every_depth_counts_once():
    torch.manual_seed(0)
    own = TransformerStack(BaseConfig(dim=16, heads=2, depth=3))
    torch.manual_seed(0)
    shared = TransformerStack(BaseConfig(dim=16, heads=2, depth=3, share_layers=True))
    assert all(b is shared.blocks[0] for b in shared.blocks)
    per_block = sum(p.numel() for p in own.blocks[0].parameters())
    assert sum(p.numel() for p in own.parameters()) == 3 * per_block
    assert sum(p.numel() for p in shared.parameters()) == per_block
    # Three applications of the one block, in order.
    x = torch.randn(2, 5, 16)
    y = x
    for _ in range(3):
        y, _ = shared.blocks[0](y)
    out, _ = shared(x)
    torch.testing.assert_close(out, y)


def test_a_shared_model_saves_loads_and_explain_refuses_in_one_line(tmp_path):
    m = tfam.create_model("gpt", vocab_size=20, max_positions=8, dim=16, depth=3, heads=2,
                          share_layers=True).eval()  # fmt: skip
    m.save_pretrained(tmp_path)
    back = tfam.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, 20, (2, 8))
    torch.testing.assert_close(back(ids), m(ids), rtol=0, atol=0)
    assert back.config.share_layers is True
    assert sum(p.numel() for p in back.parameters()) == sum(p.numel() for p in m.parameters())
    with pytest.raises(ValueError, match="share_layers=True") as err:
        tfam.explain(m)
    assert len(str(err.value).splitlines()) == 1
    with pytest.raises(ValueError, match="share_layers"):
        BaseConfig(dim=16, heads=2, share_layers="yes")
