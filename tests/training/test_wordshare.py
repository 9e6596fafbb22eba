"""The words measure of a character GPT (tfam.training.wordshare)."""

from __future__ import annotations

import json
import math

import torch

import tfam
from tfam.data.text.tokenizer import CharTokenizer
from tfam.training import TrainConfig, Trainer
from tfam.training.tasks import CausalLM
from tfam.training.wordshare import (
    complete_words,
    known_word_share,
    sample_word_share,
    text_vocabulary,
    word_share_callbacks,
)

TEXT = "And God said, Let there be light: and there was light. The LORD's word."


def test_words_are_letters_with_inner_apostrophes_compared_without_case() -> None:
    vocab = text_vocabulary(TEXT)
    assert {"and", "god", "said", "light", "lord's", "word"} <= vocab
    assert "," not in vocab and "light:" not in vocab
    # The last word is cut when the sample ends inside it; kept when a space or stop ends it.
    assert complete_words(" said unto the ligh") == ["said", "unto", "the"]
    assert complete_words(" said unto the light.") == ["said", "unto", "the", "light"]


def test_share_counts_known_words_over_all_complete_words() -> None:
    vocab = text_vocabulary(TEXT)
    share, n = known_word_share([" And God sayd, let there be", " lihgt and LIGHT. Th"], vocab)
    # and god sayd let there | lihgt and light (th is cut): 6 of 8 known.
    assert (share, n) == (6 / 8, 8)
    share, n = known_word_share(["ab"], vocab)
    assert math.isnan(share) and n == 0


def _char_gpt(tokenizer: CharTokenizer) -> torch.nn.Module:
    torch.manual_seed(0)
    return tfam.create_model(
        "gpt", vocab_size=tokenizer.vocab_size, max_positions=32, dim=16, depth=1, heads=2
    )


def test_sampling_is_seeded_and_bounded_by_the_context() -> None:
    tok = CharTokenizer(sorted(set(TEXT)))
    model = _char_gpt(tok)
    state = torch.get_rng_state()
    a = sample_word_share(model, tok, TEXT, samples=3, new_chars=100)
    b = sample_word_share(model, tok, TEXT, samples=3, new_chars=100)
    assert torch.equal(state, torch.get_rng_state()), "the run's random state is untouched"
    assert a == b and a["new_chars"] == 32 - len("And God said")
    assert a["example"].startswith("And God said") and len(a["example"]) <= 32
    assert a["words"] == 0 or 0.0 <= a["share"] <= 1.0
    # The text itself scores 1.
    assert known_word_share([TEXT + " "], text_vocabulary(TEXT))[0] == 1.0


class Chars:
    """Windows of a short text, with the text and tokenizer a character corpus carries."""

    def __init__(self, tok: CharTokenizer) -> None:
        self.text, self.tokenizer, self.unit = TEXT, tok, "characters"
        ids = torch.tensor(tok.encode(TEXT))
        self.windows = torch.stack([ids[i : i + 17] for i in range(0, len(ids) - 17, 4)])

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, k: int) -> torch.Tensor:
        return self.windows[k]


def test_a_character_run_prints_and_records_the_share(tmp_path, capsys) -> None:
    tok = CharTokenizer(sorted(set(TEXT)))
    data = Chars(tok)
    task = CausalLM.for_dataset(data)
    callbacks = word_share_callbacks(task, data)
    assert len(callbacks) == 1 and word_share_callbacks(CausalLM(), data) == []
    cfg = TrainConfig(
        epochs=1,
        batch_size=4,
        quiet=True,
        progress=False,
        device="cpu",
        warmup_steps=1,
        num_workers=0,
    )
    Trainer(_char_gpt(tok), data, data, cfg, tmp_path / "r", task=task, callbacks=callbacks).fit()
    record = json.loads((tmp_path / "r" / "results.json").read_text())
    assert record["words"]["prompt"] == "And God said" and record["words"]["samples"] == 8
    assert "generated words found in the training text: " in capsys.readouterr().out
