"""The fc-vs-attention taggers' receptive fields, exactly: the per-token MLP's output at a
position depends on that token alone, the windowed MLP's on the k tokens each side; and
``batch`` pads with PAD and -100."""

import torch

from tfam.studies.tagging import IGNORE, PAD, TokenMLP, batch


def changed_positions(model: TokenMLP, ids: torch.Tensor, at: int) -> list[int]:
    other = ids.clone()
    other[0, at] = (other[0, at] + 1) % 10 + 2
    with torch.no_grad():
        diff = (model(ids) - model(other)).abs().amax(-1)[0]
    return [i for i, d in enumerate(diff.tolist()) if d > 0]


def test_token_mlp_sees_the_token_alone_and_the_window_its_neighbours():
    torch.manual_seed(0)
    ids = torch.randint(2, 12, (1, 9))
    assert changed_positions(TokenMLP(12, 4, 8, 3, window=0), ids, 4) == [4]
    assert changed_positions(TokenMLP(12, 4, 8, 3, window=2), ids, 4) == [2, 3, 4, 5, 6]
    assert changed_positions(TokenMLP(12, 4, 8, 3, window=2), ids, 0) == [0, 1, 2]


def test_batch_pads_ids_and_labels():
    ids, labels, mask = batch([([5, 6, 7], [1, 2, 3]), ([8], [4])], pad_to=5)
    assert ids.tolist() == [[5, 6, 7, PAD, PAD], [8, PAD, PAD, PAD, PAD]]
    assert labels[1].tolist() == [4, IGNORE, IGNORE, IGNORE, IGNORE]
    assert mask.sum().item() == 4
