"""The text tasks of the trainer: BERT's masking statistics (15% of the maskable tokens, of
those 80% [MASK] / 10% random / 10% unchanged, within binomial tolerances), reproducible from a
torch.Generator and deterministic in evaluation; sequence classification, causal and masked
language modelling add up exactly over micro-batches, ignore padding, and train through the
Trainer on tiny BERT and GPT models; a batch longer than the GPT's context is refused."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

import tfam
from tfam.data.text.tokenizer import CharTokenizer
from tfam.training import (
    CausalLM,
    MaskedLM,
    SequenceClassification,
    Task,
    TokenClassification,
    TrainConfig,
    Trainer,
    load_init_weights,
    mask_tokens,
    task_for,
)
from tfam.training.tasks import IGNORE_INDEX, split_batch

PAD, CLS, SEP, MASK = 0, 1, 2, 3  # the toy vocabulary's special ids
VOCAB = 50
FIRST_WORD = 5  # ids of ordinary tokens: [FIRST_WORD, VOCAB)


pytestmark = pytest.mark.usefixtures("one_thread")


def bert(head: str, num_labels: int = 2, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return tfam.create_model(
        "bert",
        dim=32,
        depth=1,
        heads=2,
        vocab_size=VOCAB,
        max_positions=32,
        head=head,
        num_labels=num_labels,
        pad_token_id=PAD,
    )


def gpt(vocab_size: int = VOCAB, max_positions: int = 32, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return tfam.create_model(
        "gpt", dim=32, depth=1, heads=2, vocab_size=vocab_size, max_positions=max_positions
    )


class Items(torch.utils.data.Dataset):
    """An in-memory text dataset with the attributes the text tasks read."""

    def __init__(self, items: list, **attrs) -> None:
        self.items = items
        for name, value in attrs.items():
            setattr(self, name, value)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        return self.items[i]


def sentences(n: int, seed: int, min_len: int = 2, max_len: int = 12) -> list[torch.Tensor]:
    """[CLS] words [SEP] of random lengths."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        k = int(torch.randint(min_len, max_len + 1, (), generator=g))
        words = torch.randint(FIRST_WORD, VOCAB, (k,), generator=g)
        out.append(torch.cat([torch.tensor([CLS]), words, torch.tensor([SEP])]))
    return out


def mlm_task(**options) -> MaskedLM:
    return MaskedLM(MASK, VOCAB, pad_id=PAD, special_ids=(CLS, SEP), **options)


def as_floats(sums: dict[str, torch.Tensor]) -> dict[str, float]:
    return {k: float(v) for k, v in sums.items()}


def summed(task: Task, model: torch.nn.Module, parts: list[dict]) -> dict[str, float]:
    total: dict[str, float] = {}
    for part in parts:
        for k, v in as_floats(task.eval_sums(model, part)).items():
            total[k] = total.get(k, 0.0) + v
    return total


def assert_same_sums(a: dict[str, float], b: dict[str, float]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-5), (k, a, b)


def within(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    """``count`` is within ``sigmas`` standard deviations of a Binomial(n, p)'s mean."""
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


# -- mask_tokens ------------------------------------------------------------------------------
def padded_corpus(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """400 rows of [CLS] words [SEP] padded to 128: ids (400, 128) and the attention mask."""
    rows = sentences(400, seed, min_len=20, max_len=126)
    ids = torch.full((len(rows), 128), PAD)
    real = torch.zeros(ids.shape, dtype=torch.bool)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        real[i, : len(row)] = True
    return ids, real


def test_mask_tokens_chooses_15_percent_then_80_10_10() -> None:
    ids, real = padded_corpus()
    before = torch.get_rng_state()
    inputs, labels = mask_tokens(
        ids,
        mask_token_id=MASK,
        vocab_size=VOCAB,
        generator=torch.Generator().manual_seed(1),
        special_ids=(PAD, CLS, SEP),
        special_mask=~real,
    )
    assert torch.equal(torch.get_rng_state(), before)  # only the given generator draws
    maskable = real & (ids >= FIRST_WORD)
    chosen = labels != IGNORE_INDEX
    n, k = int(maskable.sum()), int(chosen.sum())
    assert n > 25_000  # enough tokens for tight binomial tolerances
    assert within(k, n, 0.15), (k, n)
    # Specials and padding are never chosen nor changed; chosen labels are the original ids.
    assert not (chosen & ~maskable).any()
    assert torch.equal(inputs[~chosen], ids[~chosen])
    assert torch.equal(labels[chosen], ids[chosen])
    # Of the chosen: [MASK] with 0.8, plus a random id that happens to be [MASK] (0.1 / V);
    # unchanged with 0.1, plus a random id equal to the original (0.1 / V); the rest random.
    got, orig = inputs[chosen], ids[chosen]
    masked = int((got == MASK).sum())
    same = int((got == orig).sum())
    other = k - masked - same
    assert within(masked, k, 0.8 + 0.1 / VOCAB), (masked, k)
    assert within(same, k, 0.1 + 0.1 / VOCAB), (same, k)
    assert within(other, k, 0.1 * (1 - 2 / VOCAB)), (other, k)
    # Random ids come from the whole vocabulary, specials included (as BERT's).
    random_ids = got[(got != MASK) & (got != orig)]
    assert set(random_ids.tolist()) == set(range(VOCAB)) - {MASK}


def test_mask_tokens_is_reproducible_from_the_generator() -> None:
    ids, real = padded_corpus(seed=3)

    def run(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        return mask_tokens(
            ids,
            mask_token_id=MASK,
            vocab_size=VOCAB,
            generator=torch.Generator().manual_seed(seed),
            special_ids=(CLS, SEP),
            special_mask=~real,
        )

    a, b, c = run(7), run(7), run(8)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])


def test_mask_tokens_names_bad_arguments() -> None:
    ids = torch.tensor([[5, 6, 7]])
    g = torch.Generator()
    with pytest.raises(ValueError, match=r"mask_token_id=50 is invalid: expected 0 <= id < vocab"):
        mask_tokens(ids, mask_token_id=50, vocab_size=VOCAB, generator=g)
    with pytest.raises(ValueError, match=r"probability=1.5 is invalid"):
        mask_tokens(ids, mask_token_id=MASK, vocab_size=VOCAB, generator=g, probability=1.5)
    with pytest.raises(ValueError, match=r"special_mask has shape \(1, 2\)"):
        mask_tokens(
            ids,
            mask_token_id=MASK,
            vocab_size=VOCAB,
            generator=g,
            special_mask=torch.zeros(1, 2, dtype=torch.bool),
        )
    with pytest.raises(ValueError, match=r"ids has dtype torch.float32"):
        mask_tokens(ids.float(), mask_token_id=MASK, vocab_size=VOCAB, generator=g)


def test_evaluation_masking_is_deterministic_whatever_the_batch() -> None:
    """A row is masked the same way alone or beside others, padded or not: evaluation does
    not depend on batch size, chunking or processes."""
    task = mlm_task()
    rows = sentences(30, seed=4)
    whole = task.eval_mask(task.collate(rows))
    again = task.eval_mask(task.collate(rows))
    assert torch.equal(whole["input_ids"], again["input_ids"])
    assert torch.equal(whole["labels"], again["labels"])
    assert int((whole["labels"] != IGNORE_INDEX).sum()) > 0
    for i in (0, 7, 29):
        alone = task.eval_mask(task.collate([rows[i]]))
        n = len(rows[i])
        assert torch.equal(alone["input_ids"][0], whole["input_ids"][i, :n])
        assert torch.equal(alone["labels"][0], whole["labels"][i, :n])
        assert (whole["labels"][i, n:] == IGNORE_INDEX).all()
    other = mlm_task(eval_seed=1).eval_mask(task.collate(rows))
    assert not torch.equal(other["labels"], whole["labels"])
    model = bert("mlm").eval()
    assert as_floats(task.eval_sums(model, task.collate(rows))) == as_floats(
        task.eval_sums(model, task.collate(rows))
    )


def test_training_masking_draws_from_the_trainer_generator() -> None:
    task = mlm_task()
    batch = task.collate(sentences(20, seed=5))
    a = task.augment(batch, None, torch.Generator().manual_seed(3), None)
    b = task.augment(batch, None, torch.Generator().manual_seed(3), None)
    c = task.augment(batch, None, torch.Generator().manual_seed(4), None)
    assert torch.equal(a["labels"], b["labels"]) and torch.equal(a["input_ids"], b["input_ids"])
    assert not torch.equal(a["labels"], c["labels"])
    assert float(task.count(a)) == float((a["labels"] != IGNORE_INDEX).sum()) > 0
    with pytest.raises(ValueError, match=r"masked-lm batch has no labels"):
        task.count(batch)


# -- the tasks add up over micro-batches and ignore padding -----------------------------------
def classification_items(n: int, seed: int) -> list[tuple[torch.Tensor, int]]:
    # The label is whether the first word is in the upper half of the vocabulary.
    return [(row, int(row[1]) >= (FIRST_WORD + VOCAB) // 2) for row in sentences(n, seed)]


def lm_windows(n: int, seed: int) -> list[torch.Tensor]:
    """Variable-length ids for a causal LM (no [CLS]/[SEP])."""
    return [row[1:-1] for row in sentences(n, seed)]


def cases():
    return {
        "sequence": (
            SequenceClassification(pad_id=PAD),
            bert("sequence", 2),
            classification_items(11, 0),
        ),
        "token": (
            TokenClassification(pad_id=PAD),
            bert("token", 3),
            [
                (row, torch.where(row >= FIRST_WORD, row % 3, IGNORE_INDEX))
                for row in sentences(11, 1)
            ],
        ),
        "causal": (CausalLM(pad_id=PAD), gpt(), lm_windows(11, 2)),
        "masked": (mlm_task(), bert("mlm"), sentences(11, 3)),
    }


@pytest.mark.parametrize("name", ["sequence", "token", "causal", "masked"])
def test_sums_over_micro_batches_equal_the_whole_batch(name: str) -> None:
    task, model, items = cases()[name]
    model.eval()  # no dropout: the same forward for the whole batch and its parts
    batch = task.collate(items)
    if isinstance(task, MaskedLM):
        batch = task.augment(batch, None, torch.Generator().manual_seed(0), None)
    whole = as_floats(task.eval_sums(model, batch))
    parts = split_batch(batch, 3)
    assert len(parts) == 3
    assert_same_sums(summed(task, model, parts), whole)
    # The training loss too: summed over counted units, so the parts add up.
    config = SimpleNamespace(label_smoothing=0.1)
    loss = float(task.train_loss(model, batch, config)[0].detach())
    assert sum(
        float(task.train_loss(model, p, config)[0].detach()) for p in parts
    ) == pytest.approx(loss, rel=1e-5)
    assert whole["count"] == float(task.count(batch))


def padded_wider(task: Task, batch: dict, extra: int) -> dict:
    """The batch with ``extra`` padding columns and one padding row (nothing counted)."""
    out = {}
    for key, value in batch.items():
        if value.ndim == 2:
            fill = {"input_ids": PAD, "attention_mask": False}.get(key, IGNORE_INDEX)
            value = torch.cat([value, torch.full((value.shape[0], extra), fill)], dim=1)
            value = value.to(batch[key].dtype)
        fill = {"input_ids": PAD, "attention_mask": False}.get(key, IGNORE_INDEX)
        row = torch.full((1, *value.shape[1:]), fill).to(value.dtype)
        if key == "attention_mask":
            row[:, 0] = True  # a padding row still has a token to attend to
        out[key] = torch.cat([value, row])
    return out


@pytest.mark.parametrize("name", ["sequence", "token", "causal", "masked"])
def test_padding_never_changes_loss_or_accuracy(name: str) -> None:
    task, model, items = cases()[name]
    model.eval()
    batch = task.collate(items)
    if isinstance(task, MaskedLM):
        batch = task.eval_mask(batch)
    wide = padded_wider(task, batch, extra=5)
    assert wide["input_ids"].shape == (len(items) + 1, batch["input_ids"].shape[1] + 5)
    assert_same_sums(
        as_floats(task.eval_sums(model, wide)), as_floats(task.eval_sums(model, batch))
    )
    # Each row alone, unpadded, gives the same sums as the padded batch.
    rows = [task.collate([item]) for item in items]
    if isinstance(task, MaskedLM):
        rows = [task.eval_mask(r) for r in rows]
    assert_same_sums(summed(task, model, rows), as_floats(task.eval_sums(model, batch)))
    if not isinstance(task, MaskedLM):  # MLM evaluation masks the rows itself (tested above)
        assert_same_sums(
            summed(task, model, split_batch(wide, 4)), as_floats(task.eval_sums(model, batch))
        )


def test_causal_lm_batches_shift_and_pad() -> None:
    task = CausalLM(pad_id=PAD)
    batch = task.collate([torch.tensor([5, 6, 7, 8]), [9, 10]])
    # The last real token of a short row is an input whose label is padding: not counted.
    assert batch["input_ids"].tolist() == [[5, 6, 7], [9, 10, PAD]]
    assert batch["labels"].tolist() == [[6, 7, 8], [10, IGNORE_INDEX, IGNORE_INDEX]]
    assert float(task.count(batch)) == 4.0
    with pytest.raises(ValueError, match=r"an item has 1 ids; a causal-lm item needs at least 2"):
        task.collate([torch.tensor([5])])


def test_causal_lm_refuses_a_batch_longer_than_the_context() -> None:
    task = CausalLM()
    batch = task.collate([torch.arange(FIRST_WORD, FIRST_WORD + 13)])  # 12 inputs
    with pytest.raises(
        ValueError, match=r"12 input tokens per row .* the model's context max_positions=8"
    ):
        task.eval_sums(gpt(max_positions=8), batch)


def test_causal_lm_metrics() -> None:
    tokens = CausalLM()
    assert tokens.metrics == ("loss", "acc", "ppl") and tokens.unit == "tokens"
    out = tokens.reduce({"loss": 6.0, "correct": 1.0, "count": 3.0})
    assert out == pytest.approx({"loss": 2.0, "acc": 1 / 3, "ppl": math.exp(2.0)})
    chars = CausalLM(unit="characters")
    assert chars.metrics == ("loss", "acc", "bpc")
    assert chars.reduce({"loss": 3.0, "correct": 0.0, "count": 3.0})["bpc"] == pytest.approx(
        1 / math.log(2)
    )
    assert math.isinf(tokens.reduce({"loss": 1e4, "correct": 0.0, "count": 1.0})["ppl"])
    with pytest.raises(ValueError, match=r"unit='bytes' is invalid"):
        CausalLM(unit="bytes")


def test_sequence_classification_predicts_probabilities() -> None:
    task = SequenceClassification(pad_id=PAD)
    model = bert("sequence", 3).eval()
    probs = task.predict(model, task.collate(classification_items(4, 9)))
    assert probs.shape == (4, 3)
    torch.testing.assert_close(probs.sum(-1), torch.ones(4))


# -- task_for reads the dataset ----------------------------------------------------------------
def test_task_for_reads_the_dataset_attributes() -> None:
    for task in (SequenceClassification(), CausalLM(), mlm_task()):
        assert isinstance(task, Task)
    wordpiece = SimpleNamespace(
        pad_id=PAD, mask_id=MASK, vocab_size=VOCAB, special_ids=frozenset({PAD, CLS, SEP, MASK})
    )
    mlm = task_for("masked-lm", SimpleNamespace(tokenizer=wordpiece))
    assert isinstance(mlm, MaskedLM)
    assert (mlm.mask_token_id, mlm.vocab_size, mlm.pad_id) == (MASK, VOCAB, PAD)
    assert set(mlm.special_ids) == {PAD, CLS, SEP, MASK}
    own = task_for(
        "masked-lm",
        SimpleNamespace(
            pad_token_id=7, mask_token_id=4, vocab_size=60, cls_token_id=8, sep_token_id=9
        ),
    )
    assert (own.mask_token_id, own.vocab_size, own.pad_id) == (4, 60, 7)
    assert set(own.special_ids) == {4, 7, 8, 9}
    with pytest.raises(ValueError, match=r"task='masked-lm' needs the \[MASK\] id"):
        task_for("masked-lm", SimpleNamespace(pad_token_id=0, vocab_size=10))
    with pytest.raises(ValueError, match=r"needs the vocabulary size"):
        task_for("masked-lm", SimpleNamespace(mask_token_id=3))

    seq = task_for("sequence-classification", SimpleNamespace(pad_token_id=5))
    assert isinstance(seq, SequenceClassification) and seq.pad_id == 5
    chars = task_for("causal-lm", SimpleNamespace(tokenizer=CharTokenizer(list("ab"))))
    assert isinstance(chars, CausalLM) and chars.unit == "characters" and chars.pad_id == 0
    said = task_for("causal-lm", SimpleNamespace(unit="characters", pad_token_id=2))
    assert said.unit == "characters" and said.pad_id == 2
    assert task_for("causal-lm", None).unit == "tokens"


# -- end to end through the Trainer ----------------------------------------------------------
def fit(task: Task, model: torch.nn.Module, train: Items, test: Items, **options):
    config = TrainConfig(
        **{
            "epochs": 4,
            "batch_size": 16,
            "lr": 3e-3,
            "warmup_epochs": 0.5,
            "weight_decay": 0.0,
            "num_workers": 0,
            "quiet": True,
            "tensorboard": False,
            **options,
        }
    )
    trainer = Trainer(model, train, test, config, task=task)
    before = trainer.evaluate_metrics()
    result = trainer.fit()
    return before, result, trainer


def test_causal_lm_learns_a_repeated_string_through_the_trainer() -> None:
    text = "in the beginning was the word. " * 40
    tok = CharTokenizer.train([text])
    ids = torch.tensor(tok.encode(text))
    windows = [ids[i : i + 17] for i in range(0, len(ids) - 17, 5)]
    data = Items(windows, tokenizer=tok, pad_token_id=tok.pad_id, vocab_size=tok.vocab_size)
    task = task_for("causal-lm", data)
    assert task.unit == "characters"
    before, result, trainer = fit(
        task, gpt(tok.vocab_size, 16), data, Items(windows[::7]), epochs=3, lr=1e-2
    )
    after = result.test_metrics
    # A period-31 string: the next character is known from the last few; chance is ~1/16.
    assert after["loss"] < before["loss"] - 1.0, (before, after)
    assert after["acc"] > 0.5 > before["acc"]
    assert after["bpc"] == pytest.approx(after["loss"] / math.log(2))
    assert set(result.history[0]) >= {"train_loss", "train_bpc", "test_bpc", "characters_per_s"}


def test_sequence_classification_trains_through_the_trainer() -> None:
    data = Items(classification_items(192, 0), pad_token_id=PAD)
    test = Items(classification_items(64, 1), pad_token_id=PAD)
    task = task_for("sequence-classification", data)
    before, result, _ = fit(task, bert("sequence", 2), data, test, epochs=6)
    assert result.test_metrics["loss"] < before["loss"] - 0.1, (before, result.test_metrics)
    assert result.test_metrics["acc"] > 0.75, result.test_metrics


def test_masked_lm_trains_through_the_trainer() -> None:
    """Each row repeats one of 8 words: a masked token is its neighbours' word."""
    g = torch.Generator().manual_seed(0)

    def rows(n: int) -> list[torch.Tensor]:
        out = []
        for _ in range(n):
            word = int(torch.randint(FIRST_WORD, FIRST_WORD + 8, (), generator=g))
            k = int(torch.randint(6, 14, (), generator=g))
            out.append(torch.tensor([CLS] + [word] * k + [SEP]))
        return out

    attrs = dict(pad_token_id=PAD, mask_token_id=MASK, vocab_size=VOCAB, special_ids=(CLS, SEP))
    data, test = Items(rows(256), **attrs), Items(rows(64), **attrs)
    task = task_for("masked-lm", data)
    before, result, trainer = fit(task, bert("mlm"), data, test, epochs=5)
    assert result.test_metrics["loss"] < before["loss"] - 1.0, (before, result.test_metrics)
    # Evaluation masks the same tokens every time: the same metrics twice.
    assert trainer.evaluate_metrics() == trainer.evaluate_metrics()


def test_masked_lm_pre_trains_on_a_labelled_text_set_ignoring_its_labels() -> None:
    """`tfam train bert --data sentiment --task mlm`: the set's batches carry one class per
    sentence (B,), which masked-LM drops and replaces by its own per-token labels."""
    from tfam.data.sources.textsets import TextClassDataset, train_wordpiece

    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    g = torch.Generator().manual_seed(0)
    texts = []
    for _ in range(320):
        word = words[int(torch.randint(0, 8, (), generator=g))]
        texts.append(" ".join([word] * int(torch.randint(6, 14, (), generator=g))))
    tok = train_wordpiece(texts, 60)
    train = TextClassDataset(texts[:256], [len(t) % 2 for t in texts[:256]], tok, ("a", "b"))
    test = TextClassDataset(texts[256:], [len(t) % 2 for t in texts[256:]], tok, ("a", "b"))
    assert train.get_batch([0, 1])["labels"].shape == (2,)
    task = task_for("masked-lm", train)
    torch.manual_seed(0)
    model = tfam.create_model("bert", dim=32, depth=1, heads=2, vocab_size=tok.vocab_size,
                              max_positions=128, head="mlm", pad_token_id=tok.pad_id)  # fmt: skip
    before, result, _ = fit(task, model, train, test, epochs=5)
    assert result.test_metrics["loss"] < before["loss"] - 1.0, (before, result.test_metrics)


# -- --init from a preset's pretrained weights ----------------------------------------------
def test_init_from_pretrained_weights_copies_the_encoder_and_says_the_head_is_fresh(
    monkeypatch,
) -> None:
    from tfam.models import registry

    torch.manual_seed(1)
    pretrained = tfam.create_model(
        "bert",
        dim=32,
        depth=1,
        heads=2,
        vocab_size=VOCAB,
        max_positions=32,
        head="none",
        pooler=True,
        pad_token_id=PAD,
    )
    name = "tiny_bert_test_pretrained"
    monkeypatch.setitem(registry.PRETRAINED, name, lambda: pretrained)
    assert tfam.has_pretrained(name)
    model = bert("sequence", 3, seed=2)
    fresh = model.classifier.weight.detach().clone()
    lines = load_init_weights(model, name)
    theirs = pretrained.state_dict()
    mine = model.state_dict()
    for key, tensor in mine.items():
        if not key.startswith("classifier."):
            assert torch.equal(tensor, theirs[key]), key
    assert torch.equal(model.classifier.weight, fresh)
    assert lines == [
        f"init: {name} (pretrained) -> {len(mine) - 2} tensors copied, classifier new "
        "(head 'none' -> 'sequence')"
    ]


def test_init_minilm_l6_loads_the_packaged_weights_into_a_tagger() -> None:
    """``--init minilm_l6``: the packaged all-MiniLM-L6-v2, not the preset's random weights."""
    try:
        minilm = tfam.load_pretrained("minilm_l6")
    except FileNotFoundError as err:
        pytest.skip(f"the packaged MiniLM is not installed: {err}")
    model = tfam.create_model("minilm_l6", head="token", num_labels=17)
    lines = load_init_weights(model, "minilm_l6")
    theirs = minilm.state_dict()
    for key, tensor in model.state_dict().items():
        if not key.startswith("classifier."):
            assert torch.equal(tensor, theirs[key]), key
    (line,) = lines
    assert line.startswith("init: minilm_l6 (pretrained) -> ")
    assert line.endswith(", classifier new (head 'none' -> 'token')")


def test_throughput_units_are_the_task_unit_not_rows():
    """The trainer's <unit>_per_s reads task.units(batch): real tokens or predicted
    characters, not rows."""
    causal = CausalLM(pad_id=0, unit="characters")
    batch = causal.collate([torch.tensor([5, 6, 7, 8]), torch.tensor([5, 6])])
    assert causal.units(batch) == 3 + 1  # predicted characters; padding is not one
    tagger = TokenClassification(pad_id=0)
    batch = tagger.collate([([1, 2, 3], [0, 1, -100]), ([1, 2], [1, 0])])
    assert tagger.units(batch) == 5
