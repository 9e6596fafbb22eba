"""Speech datasets: utterances as log-mel frames with a label per frame, per utterance, or a
transcript, for the speech family's tasks (frame-classification, utterance-classification,
ctc).

    data = spoken_digits("train", "tag", labels="word")   # SpeechDataset, features cached
    features, labels = data[0]            # (T, 80) normalised log-mel, (T,) frame label ids
    data.lengths, data.classes            # frames per utterance, the label names
    audio_folder("my_words/")             # the user's WAV files, one sub-folder per class
    audio_csv("clips.csv")                # the user's CSV of file,transcript (characters)

Features are computed once per utterance (``tfam.data.audio``: fbank, then per-utterance
normalisation) and kept in memory: two hours of audio are ~720k frames x 80 floats (230 MB).
A training split augments each utterance's frames with SpecAugment (``augment_features``,
applied by the task with the trainer's generator).
"""

from __future__ import annotations

import csv
import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "AUDIO_SUFFIXES",
    "LABEL_KINDS",
    "SPEECH_FILE",
    "SpeechDataset",
    "SpeechInfo",
    "audio_csv",
    "audio_folder",
    "FeatureNorm",
    "feature_norm",
    "features_of",
    "normalized",
    "is_audio_csv",
    "is_audio_folder",
    "spoken_digits",
    "spoken_digits_info",
]

N_MELS = 80
AUDIO_SUFFIXES = (".wav", ".wave")
LABEL_KINDS = ("word", "phoneme")  # what a spoken-digit frame is labelled with (--labels)
SPEECH_FILE = "speech.json"  # what a speech run's outputs mean (its labels, alphabet)
VAL_FRACTION = 0.1  # the user's audio: a seeded holdout for validation
SILENCE = "sil"
DIGIT_WORDS = (SILENCE, *"0123456789")


# How frames are normalised: per utterance (each band mean 0, variance 1 over the utterance) or,
# with a FeatureNorm, by the training split's per-band statistics. Per-utterance normalisation
# removes each recording's long-term spectrum: robust to the channel for what is said (frame
# labels, transcripts), but that spectrum is much of who is speaking, so utterance labels use
# the training set's statistics instead.
FeatureNorm = tuple[tuple[float, ...], tuple[float, ...]]  # (mean, std) per mel band


def features_of(waveform: Tensor, n_mels: int = N_MELS, norm: FeatureNorm | None = None) -> Tensor:
    """(samples,) at 16 kHz -> normalised log-mel frames (T, n_mels): per utterance, or by
    ``norm``'s per-band (mean, std)."""
    from tfam.data.audio import fbank

    return normalized(fbank(waveform, n_mels=n_mels), norm)


def normalized(frames: Tensor, norm: FeatureNorm | None = None) -> Tensor:
    """Log-mel frames (T, n_mels) normalised per utterance (``norm`` None) or as
    (frames - mean) / std with ``norm``'s per-band statistics."""
    from tfam.data.audio import normalize

    if norm is None:
        return normalize(frames)
    mean, std = (torch.tensor(v, dtype=frames.dtype) for v in norm)
    return (frames - mean) / std


def feature_norm(frames: Sequence[Tensor], eps: float = 1e-5) -> FeatureNorm:
    """Per-band mean and standard deviation over every frame of ``frames`` (a training split's
    log-mel frames, before normalisation)."""
    stacked = torch.cat(list(frames)).double()
    mean, std = stacked.mean(dim=0), stacked.std(dim=0).clamp(min=eps)
    return tuple(mean.tolist()), tuple(std.tolist())


@dataclass(frozen=True)
class SpeechInfo:
    """The facts of a speech dataset for one task: what the model's config must be
    (``n_mels``, ``num_labels``, ``head``) and what its outputs mean (``classes``: frame or
    utterance labels; ``alphabet`` and ``separator``: CTC's symbols, blank excluded)."""

    name: str
    task: str
    head: str
    num_labels: int
    classes: tuple[str, ...] = ()
    alphabet: tuple[str, ...] = ()
    separator: str = ""
    n_mels: int = N_MELS
    train_size: int = 0
    test_size: int = 0
    description: str = ""
    labels: str = ""  # the spoken digits' frame labels: "word" or "phoneme"
    norm: FeatureNorm | None = None  # None: per utterance; else the training split's statistics

    def run_file(self) -> dict[str, Any]:
        """What a run keeps in speech.json for predict and eval."""
        return {
            "task": self.task,
            "data": self.name,
            "head": self.head,
            "classes": list(self.classes),
            "alphabet": list(self.alphabet),
            "separator": self.separator,
            "n_mels": self.n_mels,
            "labels": self.labels,
            "norm": None if self.norm is None else {"mean": self.norm[0], "std": self.norm[1]},
        }


class SpeechDataset(torch.utils.data.Dataset):
    """Utterances as frames: item ``i`` is ``(features (T, n_mels), label)``, the label an
    int (utterance), a long tensor (T,) (frames) or (U,) (a transcript's symbol ids 1..K-1).
    ``lengths``: frames per utterance (token batches bucket by it); ``snr_db``, ``voices``:
    per utterance, where known (the spoken digits)."""

    # What an item is, whatever the task counts (a frame tagger's loss counts frames): the
    # "N train / M val ..." line of tfam train says utterances.
    item_noun = "utterances"

    def __init__(
        self,
        features: Sequence[Tensor],
        labels: Sequence[Any],
        info: SpeechInfo,
        *,
        augment: bool = False,
        snr_db: Sequence[float | None] = (),
        voices: Sequence[str] = (),
        texts: Sequence[str] = (),
    ) -> None:
        self.features = list(features)
        self.labels = list(labels)
        self.info = info
        self.lengths = torch.tensor([f.shape[0] for f in self.features], dtype=torch.int64)
        self.classes = list(info.classes)
        self.alphabet = list(info.alphabet)
        self.separator = info.separator
        self.n_mels = info.n_mels
        self.augment = augment
        self.snr_db = list(snr_db)
        self.voices = list(voices)
        self.texts = list(texts)

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, i: int) -> tuple[Tensor, Any]:
        return self.features[i], self.labels[i]

    def get_batch(self, indices: Tensor) -> list[tuple[Tensor, Any]]:
        return [self[int(i)] for i in indices]

    def subset(self, keep: Sequence[int]) -> SpeechDataset:
        """The utterances ``keep`` (the benchmark's per-SNR tables)."""
        pick = lambda xs: [xs[i] for i in keep] if xs else []  # noqa: E731
        return SpeechDataset(
            pick(self.features), pick(self.labels), self.info, augment=self.augment,
            snr_db=pick(self.snr_db), voices=pick(self.voices), texts=pick(self.texts),
        )  # fmt: skip

    def augment_features(self, features: Tensor, generator: torch.Generator) -> Tensor:
        """SpecAugment on a training split (else as is): two time masks of up to 20 frames,
        and two frequency masks of up to a quarter of the bands; one of up to an eighth for
        utterance classification, whose label (a speaker) lives in the spectrum's shape that
        wide frequency masks remove (speaker recognisers mask up to ~10 of 80 channels)."""
        if not self.augment:
            return features
        from tfam.data.audio import spec_augment

        if self.info.task == "utterance-classification":
            freq_masks, freq_width = 1, max(1, self.n_mels // 8)
        else:
            freq_masks, freq_width = 2, min(27, self.n_mels // 4)
        return spec_augment(
            features, freq_masks=freq_masks, freq_width=freq_width, time_width=20,
            generator=generator,
        )  # fmt: skip

    def run_files(self) -> dict[str, dict[str, Any]]:
        """speech.json: what the run's outputs mean (classes or alphabet), for predict."""
        return {SPEECH_FILE: self.info.run_file()}

    def __repr__(self) -> str:
        return f"SpeechDataset({self.info.name!r}, {len(self)} utterances, task={self.info.task})"


# -- the spoken digits ---------------------------------------------------------------------------
_SPOKEN_TASKS = {
    "frame-classification": "tag",
    "utterance-classification": "speaker",
    "ctc": "transcribe",
}
_CACHE: dict[tuple[str, str, str], tuple[list[Any], list[Tensor], list[Any]]] = {}


def _utterances(
    split: str, corpus_task: str, root: Any = None
) -> tuple[list[Any], list[Tensor], list[Any]]:
    """The corpus's utterances of a split, their log-mel frames (not yet normalised) and (tag)
    their frame labels (words, phonemes), computed once per process; the samples are then
    dropped (the frames hold what training needs)."""
    key = (split, corpus_task, str(root))
    if key not in _CACHE:
        from tfam.data.sources.spoken_digits import load_split

        utts = load_split(split, corpus_task, root=root)
        from tfam.data.audio import fbank

        feats = [fbank(u.audio, n_mels=N_MELS) for u in utts]
        frames = [(u.frame_words(), u.frame_phonemes()) if corpus_task == "tag" else None
                  for u in utts]  # fmt: skip
        for u in utts:
            u.audio = u.audio[:0]
        _CACHE[key] = (utts, feats, frames)
    return _CACHE[key]


def _phonemes(root: Any = None) -> tuple[str, ...]:
    """The phoneme labels of the tag corpus (every split: the label set is the corpus's, so a
    held-out voice's phoneme is never outside it), silence first."""
    from tfam.data.sources.spoken_digits import load_split

    seen: set[str] = set()
    for split in ("train", "val", "test"):
        for u in load_split(split, "tag", root=root):
            seen.update(s.label for s in u.phonemes)
    return (SILENCE, *sorted(seen - {SILENCE}))


def spoken_digits_info(task: str, labels: str | None = None, root: Any = None) -> SpeechInfo:
    """The facts of the spoken digits for ``task`` (a speech task name) and, for tagging,
    ``labels`` ("word": the digit or silence; "phoneme")."""
    kind = labels or "word"
    if kind not in LABEL_KINDS:
        raise ValueError(f"labels={labels!r} is invalid: expected one of {', '.join(LABEL_KINDS)}")
    base = "spoken digits (eSpeak NG, 5 languages x 6 voices, noise at 20/10/5 dB)"
    if task == "utterance-classification":
        from tfam.data.sources.spoken_digits import voices

        names = tuple(voices("speaker", root=root))
        return SpeechInfo("spoken-digits", task, "utterance", len(names), classes=names,
                          description=f"{base}: who is speaking ({len(names)} training voices; "
                          "test = their held-out utterances)")  # fmt: skip
    if task == "ctc":
        return SpeechInfo("spoken-digits", task, "ctc", 11, alphabet=tuple("0123456789"),
                          separator=" ", description=f"{base}: the digit string (CTC; test = "
                          "held-out voices)")  # fmt: skip
    if task != "frame-classification":
        raise ValueError(f"task={task!r} is invalid for spoken-digits: expected one of "
                         f"{', '.join(_SPOKEN_TASKS)}")  # fmt: skip
    classes = DIGIT_WORDS if kind == "word" else _phonemes(root)
    return SpeechInfo("spoken-digits", task, "frames", len(classes), classes=classes,
                      labels=kind, description=f"{base}: the {kind} or silence at every 10 ms "
                      "frame (test = held-out voices)")  # fmt: skip


def spoken_digits(
    split: str, task: str, labels: str | None = None, *, root: Any = None
) -> SpeechDataset:
    """A split ("train", "val", "test") of the spoken digits for a speech task, features
    cached in memory; the training split is augmented (SpecAugment)."""
    info = spoken_digits_info(task, labels, root)
    utts, raw, frames = _utterances(split, _SPOKEN_TASKS[task], root)
    if task == "utterance-classification":  # who is speaking: keep each voice's spectrum
        train_frames = _utterances("train", _SPOKEN_TASKS[task], root)[1]
        info = dataclasses.replace(info, norm=feature_norm(train_frames))
    feats = [normalized(f, info.norm) for f in raw]
    if task == "utterance-classification":
        index = {v: i for i, v in enumerate(info.classes)}
        targets: list[Any] = [index[u.voice] for u in utts]
    elif task == "ctc":
        targets = [torch.tensor([int(d) + 1 for d in u.digits], dtype=torch.int64) for u in utts]
    else:
        index = {c: i for i, c in enumerate(info.classes)}
        targets = []
        for u, f, (words, phonemes) in zip(utts, feats, frames, strict=True):
            names = words if info.labels == "word" else phonemes
            ids = torch.tensor([index[n] for n in names], dtype=torch.int64)
            if ids.shape[0] != f.shape[0]:
                raise ValueError(
                    f"spoken-digits utterance {u.id}: {ids.shape[0]} frame labels for "
                    f"{f.shape[0]} frames of features; the corpus and the features disagree"
                )
            targets.append(ids)
    return SpeechDataset(
        feats, targets, info, augment=split == "train", snr_db=[u.snr_db for u in utts],
        voices=[u.voice for u in utts], texts=[" ".join(u.digits) for u in utts],
    )  # fmt: skip


# -- the user's audio ---------------------------------------------------------------------------
def _audio_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES)


def is_audio_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder with sub-folders holding WAV files (one per class)."""
    path = Path(path)
    if not path.is_dir():
        return False
    return any(d.is_dir() and _audio_files(d) for d in path.iterdir())


def _csv_header(path: Path) -> list[str]:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return [h.strip().lower() for h in next(csv.reader(f), [])]
    except (OSError, UnicodeDecodeError):
        return []


def is_audio_csv(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a CSV file whose header names ``file`` and ``transcript``."""
    path = Path(path)
    return (
        path.is_file()
        and path.suffix.lower() == ".csv"
        and {"file", "transcript"} <= set(_csv_header(path))
    )


def _holdout(n: int, seed: int, groups: Sequence[int] | None = None) -> list[bool]:
    """Which of ``n`` items are validation: a seeded 10% (at least one when n >= 2), per group
    (class) when given, so every class keeps training examples."""
    g = torch.Generator().manual_seed(seed)
    val = [False] * n
    by_group: dict[int, list[int]] = {}
    for i in range(n):
        by_group.setdefault(groups[i] if groups is not None else 0, []).append(i)
    for members in by_group.values():
        if len(members) < 2:
            continue
        k = max(1, round(VAL_FRACTION * len(members)))
        for j in torch.randperm(len(members), generator=g)[:k].tolist():
            val[members[j]] = True
    return val


@dataclass
class _UserAudio:
    """Loaded once per path: the features, labels and split of each file."""

    features: list[Tensor]
    labels: list[Any]
    val: list[bool]
    info: SpeechInfo
    texts: list[str] = field(default_factory=list)


_USER_CACHE: dict[tuple[str, str, int], _UserAudio] = {}


def _load_user(kind: str, path: Path, seed: int, build: Callable[[], _UserAudio]) -> _UserAudio:
    key = (kind, str(path.resolve()), seed)
    if key not in _USER_CACHE:
        _USER_CACHE[key] = build()
    return _USER_CACHE[key]


def _split_of(data: _UserAudio, split: str) -> SpeechDataset:
    if split not in ("train", "val"):
        raise ValueError(f"split={split!r} is invalid for your audio: expected train or val")
    keep = [i for i, v in enumerate(data.val) if v == (split == "val")]
    pick = lambda xs: [xs[i] for i in keep] if xs else []  # noqa: E731
    return SpeechDataset(
        pick(data.features), pick(data.labels), data.info, augment=split == "train",
        texts=pick(data.texts),
    )  # fmt: skip


def audio_folder(path: str | os.PathLike, split: str = "train", *, seed: int = 0) -> SpeechDataset:
    """The user's WAV files, one sub-folder per class (utterance classification): ``train`` or
    ``val`` (a seeded, class-stratified 10% holdout). A file that is not audio, or is empty or
    silent, is one ``AudioError`` line naming it."""
    root = Path(path).expanduser()

    def build() -> _UserAudio:
        from tfam.data.audio import load_audio

        classes = sorted(d.name for d in root.iterdir() if d.is_dir() and _audio_files(d))
        if not classes:
            raise ValueError(
                f"{root} holds no sub-folder of WAV files: an audio folder has one sub-folder "
                "of .wav files per class"
            )
        from tfam.data.audio import fbank

        raw, labels = [], []
        for k, name in enumerate(classes):
            for file in _audio_files(root / name):
                raw.append(fbank(load_audio(file), n_mels=N_MELS))
                labels.append(k)
        val = _holdout(len(raw), seed, labels)
        # One label per recording: normalised by the training part's statistics (FeatureNorm).
        norm = feature_norm([f for f, v in zip(raw, val, strict=True) if not v])
        feats = [normalized(f, norm) for f in raw]
        info = SpeechInfo(
            str(root), "utterance-classification", "utterance", len(classes),
            classes=tuple(classes), train_size=len(feats), norm=norm,
            description=f"audio folder {root}: {len(feats)} WAV files in {len(classes)} classes "
            f"({VAL_FRACTION:.0%} stratified holdout for validation, seeded)",
        )  # fmt: skip
        return _UserAudio(feats, labels, val, info)

    return _split_of(_load_user("folder", root, seed, build), split)


def audio_csv(path: str | os.PathLike, split: str = "train", *, seed: int = 0) -> SpeechDataset:
    """The user's CSV of ``file,transcript`` (paths relative to the CSV's folder) for CTC
    transcription over the transcripts' characters (the alphabet, space included): ``train``
    or ``val`` (a seeded 10% holdout). Bad rows and bad audio are one line naming them."""
    csv_path = Path(path).expanduser()

    def build() -> _UserAudio:
        from tfam.data.audio import load_audio

        rows = []
        with open(csv_path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            names = {(h or "").strip().lower(): h for h in reader.fieldnames or []}
            for line, row in enumerate(reader, start=2):
                file = (row.get(names.get("file", ""), "") or "").strip()
                text = " ".join((row.get(names.get("transcript", ""), "") or "").split())
                if not file or not text:
                    raise ValueError(
                        f"{csv_path}:{line}: expected a file and a non-empty transcript"
                    )
                rows.append((csv_path.parent / file, text))
        if not rows:
            raise ValueError(f"{csv_path} holds no rows of file,transcript")
        alphabet = tuple(sorted({ch for _, text in rows for ch in text}))
        index = {ch: i + 1 for i, ch in enumerate(alphabet)}
        feats = [features_of(load_audio(file)) for file, _ in rows]
        targets = [torch.tensor([index[ch] for ch in text], dtype=torch.int64) for _, text in rows]
        info = SpeechInfo(
            str(csv_path), "ctc", "ctc", len(alphabet) + 1, alphabet=alphabet, separator="",
            train_size=len(rows),
            description=f"audio CSV {csv_path}: {len(rows)} WAV files with transcripts, "
            f"{len(alphabet)} characters ({VAL_FRACTION:.0%} holdout for validation, seeded)",
        )  # fmt: skip
        texts = [text for _, text in rows]
        return _UserAudio(feats, targets, _holdout(len(rows), seed), info, texts)

    return _split_of(_load_user("csv", csv_path, seed, build), split)
