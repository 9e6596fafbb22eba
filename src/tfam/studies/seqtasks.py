"""The two sequence tasks the ``heads`` and ``no-positions`` studies train on, through tfam's own
families and tasks: translation (the encoder–decoder Transformer, the ``seq2seq`` task) on a
reduced King James -> Reina-Valera budget, and speech frame tagging (the speech family, the
``frame-classification`` task) on the spoken digits; and POS tagging (BERT, the
``token-classification`` task) on the Turkish treebank.

Each ``train_*`` builds the model with the given config fields, trains it ``steps`` AdamW steps
(:func:`tfam.studies.common.train_steps`) on seeded random batches collated by the task, and
scores it on a fixed held-out subset. The ``tiny`` profiles (CI, seconds) use stand-ins that
load in no time: the ``reverse`` symbol task for translation, and :class:`SyntheticFrames`
for speech; their numbers only check the code path.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch
from torch import Tensor

from tfam.studies.common import seeded, train_steps

__all__ = [
    "SyntheticFrames",
    "speech_data",
    "tagging_data",
    "train_speech",
    "train_tagging",
    "train_translation",
    "translation_data",
]


def _spread(n_items: int, n: int) -> list[int]:
    """``n`` indices spread evenly over ``range(n_items)`` (all of them when n >= n_items)."""
    if n >= n_items:
        return list(range(n_items))
    return [round(i * (n_items - 1) / max(1, n - 1)) for i in range(n)]


@functools.lru_cache(maxsize=4)
def translation_data(
    source: str, n_train: int, n_test: int, max_len: int, vocab: int = 8000
) -> tuple[Any, Any] | str:
    """(train, test) :class:`~tfam.data.sources.seq2seq.Seq2SeqDataset` s, or why they are not
    here. ``kjv-rv``: ``n_train`` training verse pairs drawn once (seed 0) from those whose
    English and Spanish fit ``max_len`` tokens, and ``n_test`` verses spread over the held-out
    books (longer ones dropped), tokenized by kjv-rv's joint BPE of ``vocab`` ids (trained once
    and cached: a smaller vocabulary makes the output layer cheaper); ``reverse``: the
    symbol-reversal task (tiny profiles)."""
    from tfam.data.sources.seq2seq import Seq2SeqDataset, load_symbol_task

    if source == "reverse":
        return (load_symbol_task("reverse", "train", size=n_train),
                load_symbol_task("reverse", "test", size=n_test))  # fmt: skip
    if source != "kjv-rv":
        raise ValueError(f"translation source {source!r} is invalid: expected kjv-rv or reverse")
    from tfam.data.sources.seq2seq import kjv_rv_pairs, kjv_rv_tokenizer

    try:
        train_pairs, test_pairs = kjv_rv_pairs("train"), kjv_rv_pairs("test")
        tok = kjv_rv_tokenizer(vocab)
    except FileNotFoundError as err:
        return str(err).splitlines()[0]
    # ~4 characters per BPE token: a cheap pre-filter before encoding, max_len decides.
    short = [(e, s) for _, e, s in train_pairs if max(len(e), len(s)) < 4 * max_len]
    order = torch.randperm(len(short), generator=torch.Generator().manual_seed(0)).tolist()
    with warnings.catch_warnings():  # the dropped long pairs are expected here
        warnings.simplefilter("ignore")
        train = Seq2SeqDataset([short[i] for i in order[: 2 * n_train]], tok,
                               name="kjv-rv:train", max_len=max_len)  # fmt: skip
        test = Seq2SeqDataset([(e, s) for _, e, s in test_pairs], tok, name="kjv-rv:test",
                              max_len=max_len)  # fmt: skip
    train = train._select(list(range(min(n_train, len(train)))), "kjv-rv:train")
    test = test._select(_spread(len(test), n_test), "kjv-rv:test")
    return train, test


def _batches(n_items: int, steps: int, batch: int, gen: torch.Generator) -> Tensor:
    """(steps, batch) random item indices."""
    return torch.randint(0, n_items, (steps, batch), generator=gen)


def _run(model: torch.nn.Module, task: Any, dataset: Any, s: dict[str, Any], seed: int,
         augment: bool = False) -> tuple[list[float], float]:  # fmt: skip
    """Train ``model`` s['steps'] steps of s['batch'] items, the task's mean loss per counted
    label (its ``train_loss`` is a sum)."""
    gen = seeded(seed + 1000)  # batches: apart from the initialisation's draw
    idx = _batches(len(dataset), s["steps"], s["batch"], gen)

    def loss_of(i: int) -> Tensor:
        batch = task.collate([dataset[j] for j in idx[i].tolist()])
        if augment:
            batch = task.augment(batch, None, gen, dataset)
        loss, _ = task.train_loss(model, batch, None)
        return loss / task.count(batch).clamp(min=1)

    return train_steps(model, loss_of, s["steps"], s["lr"])


@torch.no_grad()
def _evaluate(model: torch.nn.Module, task: Any, dataset: Any, batch: int = 64) -> dict[str, float]:
    """The task's metrics (loss, acc, ...) over all of ``dataset``."""
    model.eval()
    total: dict[str, float] = {}
    for start in range(0, len(dataset), batch):
        b = task.collate([dataset[j] for j in range(start, min(len(dataset), start + batch))])
        for k, v in task.eval_sums(model, b).items():
            total[k] = total.get(k, 0.0) + float(v)
    return task.reduce(total)


def train_translation(
    data: tuple[Any, Any], s: dict[str, Any], seed: int, **fields: Any
) -> dict[str, float]:
    """tfam's encoder–decoder (post-norm, as the paper) with config ``fields`` (heads,
    position, ...) trained on ``data``'s train split; scored on its test split: teacher-forced
    loss and token accuracy, and chrF (sacreBLEU) of greedy translations of the first
    s['decode'] test sentences."""
    from tfam.models import create_model
    from tfam.training.tasks.seq2seq import Seq2Seq

    train, test = data
    tok = train.tokenizer
    seeded(seed)
    config = dict(vocab_size=tok.vocab_size, dim=s["dim"], depth=s["depth"],
                  ffn_dim=4 * s["dim"], dropout=0.0, max_positions=s["max_len"],
                  pad_token_id=tok.pad_id, bos_token_id=tok.bos_id, eos_token_id=tok.eos_id)  # fmt: skip
    model = create_model("transformer", **{**config, **fields})
    task = Seq2Seq.for_dataset(train)
    losses, secs = _run(model, task, train, s, seed)
    metrics = _evaluate(model, task, test)
    out = {"loss": metrics["loss"], "acc": metrics["acc"], "train_loss": losses[-1],
           "train_seconds": secs, "parameters": sum(p.numel() for p in model.parameters())}  # fmt: skip
    out["chrf"] = _chrf(model, task, test, s["decode"])
    return out


@torch.no_grad()
def _chrf(model: torch.nn.Module, task: Any, test: Any, n: int) -> float:
    """chrF of greedy translations of the first ``n`` test sentences against their references."""
    import sacrebleu

    tok = test.tokenizer
    items = [test[i] for i in range(min(n, len(test)))]
    special = {tok.pad_id, tok.bos_id, tok.eos_id}
    hyps: list[str] = []
    for start in range(0, len(items), 64):
        chunk = items[start : start + 64]
        out = task.predict(model, task.collate(chunk))
        for row in out.tolist():
            ids = row[1:]
            ids = ids[: ids.index(tok.eos_id)] if tok.eos_id in ids else ids
            hyps.append(tok.decode([t for t in ids if t not in special]))
    refs = [test.pairs[i][1] for i in range(len(items))]
    return float(sacrebleu.CHRF().corpus_score(hyps, [refs]).score)


class SyntheticFrames(torch.utils.data.Dataset):
    """A stand-in for the spoken digits in tiny profiles: ``n`` utterances of ``frames``
    frames (n_mels features), each a run of segments of 4-12 frames; a segment of class c is
    class c's random prototype plus noise. Items ``(features (T, n_mels), labels (T,))``."""

    def __init__(self, n: int, frames: int, n_mels: int, classes: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        protos = torch.randn(classes, n_mels, generator=torch.Generator().manual_seed(0))
        self.items = []
        for _ in range(n):
            labels = torch.empty(frames, dtype=torch.int64)
            t = 0
            while t < frames:
                width = int(torch.randint(4, 13, (1,), generator=gen))
                labels[t : t + width] = int(torch.randint(0, classes, (1,), generator=gen))
                t += width
            feats = protos[labels] + torch.randn(frames, n_mels, generator=gen)
            self.items.append((feats, labels))
        self.num_labels, self.n_mels = classes, n_mels

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        return self.items[i]


@functools.lru_cache(maxsize=2)
def speech_data(source: str, n_test: int) -> tuple[Any, Any] | str:
    """(train, test) frame-tagging data: ``spoken-digits`` (the word or silence at each 10 ms
    frame; test = ``n_test`` utterances spread over the held-out voices), or ``synthetic``
    (:class:`SyntheticFrames`, tiny profiles); a string says why the corpus is not here."""
    if source == "synthetic":
        return (SyntheticFrames(32, 48, 8, 5, seed=1), SyntheticFrames(n_test, 48, 8, 5, seed=2))
    if source != "spoken-digits":
        raise ValueError(
            f"speech source {source!r} is invalid: expected spoken-digits or synthetic"
        )
    from tfam.data.sources.speech import spoken_digits

    try:
        train = spoken_digits("train", "frame-classification")
        test = spoken_digits("test", "frame-classification")
    except (FileNotFoundError, RuntimeError, ImportError) as err:
        return str(err).splitlines()[0]
    return train, test.subset(_spread(len(test), n_test))


def train_speech(
    data: tuple[Any, Any], s: dict[str, Any], seed: int, **fields: Any
) -> dict[str, float]:
    """tfam's speech encoder (head 'frames', its default truncated attention and 2x
    subsampling) with config ``fields``, trained on frame tagging (SpecAugment on the spoken
    digits' training split, as the family's recipe); frame accuracy on the test subset."""
    from tfam.models import create_model
    from tfam.training.tasks.audio import FrameClassification

    train, test = data
    seeded(seed)
    config = dict(dim=s["dim"], depth=s["depth"], ffn_dim=4 * s["dim"], dropout=0.0,
                  n_mels=train.n_mels, num_labels=_num_labels(train))  # fmt: skip
    model = create_model("speech", **{**config, **fields})
    task = FrameClassification()
    losses, secs = _run(model, task, train, s, seed, augment=hasattr(train, "augment_features"))
    metrics = _evaluate(model, task, test, batch=32)
    return {"loss": metrics["loss"], "acc": metrics["acc"], "train_loss": losses[-1],
            "train_seconds": secs, "parameters": sum(p.numel() for p in model.parameters())}  # fmt: skip


def _num_labels(ds: Any) -> int:
    return int(getattr(ds, "num_labels", 0) or len(ds.classes))


@functools.lru_cache(maxsize=2)
def tagging_data(source: str, n_train: int, n_test: int) -> tuple[Any, Any] | str:
    """(train, test) POS tagging: ``turkish-pos`` (the Turkish treebank's coarse tags, WordPiece
    ids of the packaged MiniLM; the first ``n_train`` training sentences, ``n_test`` spread
    over its test split), or ``synthetic`` (tiny profiles: random ids whose tag is the id
    before them, mod 5). A string says why the treebank is not here."""
    if source == "synthetic":
        return _synthetic_tags(n_train, 1), _synthetic_tags(n_test, 2)
    if source != "turkish-pos":
        raise ValueError(f"tagging source {source!r} is invalid: expected turkish-pos or synthetic")
    from tfam.data.sources.treebank import load_turkish_pos

    try:
        train, test = load_turkish_pos("train"), load_turkish_pos("test")
    except (FileNotFoundError, ImportError) as err:
        return str(err).splitlines()[0]
    return _Items(train, range(min(n_train, len(train)))), _Items(test, _spread(len(test), n_test))


class _Items(torch.utils.data.Dataset):
    """Items ``keep`` of a tagging dataset, with its vocabulary and label count."""

    def __init__(self, ds: Any, keep: Any) -> None:
        self.items = [ds[i] for i in keep]
        self.vocab_size = int(ds.tokenizer.vocab_size)
        self.num_labels = int(ds.num_labels)
        self.pad_token_id = int(getattr(ds, "pad_token_id", 0))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Any:
        return self.items[i]


def _synthetic_tags(n: int, seed: int) -> _Items:
    """Random ids 4..19 (L = 6..12) tagged with (previous id) mod 5 (-100 on the first): a tag
    that needs the order. Tiny profiles only."""
    gen = torch.Generator().manual_seed(seed)
    items = []
    for _ in range(n):
        length = int(torch.randint(6, 13, (1,), generator=gen))
        ids = torch.randint(4, 20, (length,), generator=gen)
        labels = torch.full((length,), -100, dtype=torch.int64)
        labels[1:] = ids[:-1] % 5
        items.append((ids, labels))
    out = _Items.__new__(_Items)
    out.items, out.vocab_size, out.num_labels, out.pad_token_id = items, 20, 5, 0
    return out


def train_tagging(
    data: tuple[Any, Any], s: dict[str, Any], seed: int, **fields: Any
) -> dict[str, float]:
    """tfam's BERT (head 'token') with config ``fields`` trained on tagging; token accuracy on
    the test sentences."""
    from tfam.models import create_model
    from tfam.training.tasks.token_classification import TokenClassification

    train, test = data
    seeded(seed)
    config = dict(vocab_size=train.vocab_size, dim=s["dim"], depth=s["depth"], heads=s["heads"],
                  ffn_dim=4 * s["dim"], dropout=0.0, attn_dropout=0.0, head="token",
                  num_labels=train.num_labels, max_positions=s["tag_max_len"],
                  pad_token_id=train.pad_token_id)  # fmt: skip
    model = create_model("bert", **{**config, **fields})
    task = TokenClassification(pad_id=train.pad_token_id)
    ts = {**s, "steps": s["tag_steps"]}
    losses, secs = _run(model, task, train, ts, seed)
    metrics = _evaluate(model, task, test)
    return {"loss": metrics["loss"], "acc": metrics["acc"], "train_loss": losses[-1],
            "train_seconds": secs, "parameters": sum(p.numel() for p in model.parameters())}  # fmt: skip
