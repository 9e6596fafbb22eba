"""attention-text's parts: word units and word-level attention, the causal check, the reversal
alignment, and `tfam viz attention` on the packaged MiniLM (a sentence, --word)."""

import pytest
import torch

from tfam.cli import main
from tfam.studies.attention_text import reversal_alignment, words_of
from tfam.viz.text import future_mass, word_attention, word_units

pytestmark = pytest.mark.usefixtures("one_thread")


def test_words_keep_contractions_and_split_punctuation():
    assert words_of("The animal didn't cross, it was.") == [
        "The", "animal", "didn't", "cross", ",", "it", "was", "."
    ]  # fmt: skip


def test_word_attention_sums_a_words_keys_and_averages_its_queries():
    tokens = ["[CLS]", "did", "##n", "it", "[SEP]"]
    units, labels = word_units(tokens, [None, 0, 0, 1, None])
    assert units == [[0], [1, 2], [3], [4]] and labels == ["[CLS]", "didn", "it", "[SEP]"]
    w = torch.softmax(torch.randn(2, 5, 5, dtype=torch.float64), -1)
    u = word_attention(w, units)
    assert u.shape == (2, 4, 4)
    torch.testing.assert_close(u.sum(-1), torch.ones(2, 4, dtype=torch.float64))
    # "it" -> "didn": the sum over both pieces; "didn" -> "it": the mean of both query rows.
    torch.testing.assert_close(u[:, 2, 1], w[:, 3, 1] + w[:, 3, 2])
    torch.testing.assert_close(u[:, 1, 2], (w[:, 1, 3] + w[:, 2, 3]) / 2)
    with pytest.raises(ValueError, match="cover every token"):
        word_attention(w, [[0], [1, 2]])


def test_future_mass_is_zero_for_causal_maps_only():
    scores = torch.randn(3, 6, 6)
    full = torch.softmax(scores, -1)
    causal = torch.softmax(scores.masked_fill(torch.ones(6, 6).triu(1).bool(), -torch.inf), -1)
    assert future_mass(causal) == 0.0 and future_mass(full) > 0.1


def test_reversal_alignment_counts_the_mirrored_source():
    n = 5
    perfect = torch.zeros(2, n + 1, n)
    perfect[:, torch.arange(n), torch.arange(n - 1, -1, -1)] = 1.0
    assert reversal_alignment(perfect) == 1.0
    diagonal = torch.zeros(2, n + 1, n)
    diagonal[:, torch.arange(n), torch.arange(n)] = 1.0
    assert reversal_alignment(diagonal) == pytest.approx(1 / n)  # only the middle row


@pytest.mark.requires_data("minilm")
def test_viz_attention_draws_minilm_self_attention_and_one_word(tmp_path, capsys):
    sentence = "The animal didn't cross the street because it was too tired."
    out = tmp_path / "it.png"
    assert main(["viz", "attention", "minilm_l6", sentence, "--word", "it",
                 "--out", str(out)]) == 0  # fmt: skip
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert main(["viz", "attention", "minilm_l6", sentence, "--word", "zebra",
                 "--out", str(out)]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--word 'zebra' is not one of the sentence's tokens" in err[0]
