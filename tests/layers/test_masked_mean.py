"""masked_mean: the one masked mean that BERT's sentence pooling and iGPT's probe share."""

import torch

from tfam.layers.masks import masked_mean
from tfam.models.bert import mean_pool
from tfam.models.igpt import IGPT


def test_masked_mean_averages_real_positions_only_and_gives_zeros_for_an_empty_row() -> None:
    x = torch.arange(3 * 4 * 2, dtype=torch.float32).view(3, 4, 2)
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 0]], dtype=torch.bool)
    got = masked_mean(x, mask)
    torch.testing.assert_close(got[0], x[0].mean(0))
    torch.testing.assert_close(got[1], x[1, [0, 2]].mean(0))
    assert torch.equal(got[2], torch.zeros(2))  # no NaN from 0 / 0
    torch.testing.assert_close(masked_mean(x, None), x.mean(1))
    torch.testing.assert_close(masked_mean(x, mask.long()), got)  # 1/0 masks as True/False
    # BERT's mean pooling and iGPT's are this function.
    torch.testing.assert_close(mean_pool(x, mask), got)
    torch.testing.assert_close(IGPT.mean_pool(x, mask), got)
