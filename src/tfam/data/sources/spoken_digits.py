"""Spoken digits, synthesised offline with eSpeak NG: frames labelled with words and phonemes.

    train = load_split("train", "tag")       # list[Utterance]: held-out voices never appear
    u = train[0]
    u.audio, u.digits, u.voice, u.snr_db      # (samples,) float32 16 kHz, "40712", "en+m3", 10.0
    u.words[0]                                # Segment(start=3391, end=7423, label="4")
    u.frame_words()                           # ["sil", "sil", "4", "4", ...]: one per 10 ms frame
    u.frame_phonemes()                        # ["sil", "en:f", "en:o@", ...]
    voices("speaker")                         # the speaker labels (the training voices)

What is built: utterances of 1-12 random digits, written as numerals separated by spaces so
eSpeak reads every digit as one word in every language (checked: one WORD event per digit, or
the build stops), spoken by :data:`LANGUAGES` x :data:`VARIANTS` voices ("en+m3": a language and
an eSpeak voice variant, male ``m*`` and female ``f*``; 30 voices). Each utterance draws (seeded)
its digits, rate (110-230 words a minute), pitch (30-70) and pitch range (30-80) around the
variant's own, a pause between digits (0-250 ms), silence before and after (100-400 ms), a level
(peak 0.25-0.95) and one noise condition: clean, or white / pink / brown Gaussian noise mixed at
20, 10 or 5 dB by ``tfam.data.audio.mix_at_snr`` (power over the whole utterance, silences
included), the four conditions in turn within each voice. Utterances are made voice by voice in
turn until the audio totals ``hours`` (default :data:`DEFAULT_HOURS`).

Labels: word segments "0".."9" and phoneme segments (eSpeak's mnemonics without stress marks,
prefixed by the language: "en:f", "cmn:tS;h") in 16 kHz samples, from the engine's events
(:mod:`tfam.data.audio.espeak`); every 10 ms frame takes the label at its centre, silence
elsewhere (``tfam.data.audio.frame_labels``). They come from the clean synthesis, so they hold
for the noisy audio too.

Splits. ``tag`` and ``transcribe`` split by voice: in each language one variant is held out
as test and another as val (:func:`held_out_voices`; 5 + 5 voices, male and female mixed), the
other 20 voices train. ``speaker`` uses the 20 training voices only and splits each voice's
utterances 80 / 10 / 10 (seeded) into train / val / test: its test utterances are unheard,
their voices are not.

Storage (``tfam_cache_dir()/spoken-digits-v1``, built once with a progress bar, each file
written atomically): ``audio.npy`` (every utterance's int16 samples, one after another),
``utterances.jsonl`` (one line per utterance: offset, length, digits, voice, settings, segments)
and ``manifest.json`` (the settings, counts, hours, build time, and the sha256 of both files;
written last, so its presence means a complete build). Loading verifies the checksums once per
process; a mismatch or other settings rebuild it, saying why in one line.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from tfam.data.audio.espeak import Segment, synthesize
from tfam.data.sources.cache import tfam_cache_dir
from tfam.fileio import atomic_write_bytes

__all__ = [
    "CORPUS_NAME",
    "DEFAULT_HOURS",
    "LANGUAGES",
    "SNR_LEVELS",
    "SPLITS",
    "TASKS",
    "VARIANTS",
    "Segment",
    "Utterance",
    "build_corpus",
    "corpus_dir",
    "held_out_voices",
    "load_split",
    "read_manifest",
    "voices",
]

CORPUS_NAME = "spoken-digits-v1"
LANGUAGES = ("en", "es", "cmn", "de", "fr")
VARIANTS = ("m1", "m3", "m7", "f1", "f3", "f5")  # eSpeak's voices/!v: three male, three female
SNR_LEVELS: tuple[float | None, ...] = (None, 20.0, 10.0, 5.0)  # None = clean
NOISE_COLOURS = ("white", "pink", "brown")  # power spectrum ~ 1, 1/f, 1/f^2
DEFAULT_HOURS = 2.5
SPLITS = ("train", "val", "test")
TASKS = ("tag", "transcribe", "speaker")
SPEAKER_FRACTIONS = (0.8, 0.1, 0.1)  # train / val / test of each training voice's utterances
SAMPLE_RATE = 16_000
MAX_DIGITS = 12
SILENCE = "sil"

_AUDIO_FILE = "audio.npy"
_INDEX_FILE = "utterances.jsonl"
_MANIFEST_FILE = "manifest.json"
_VERIFIED: set[tuple[str, str]] = set()  # (root, manifest digest) verified in this process


@dataclass
class Utterance:
    """One spoken digit string. ``audio`` (samples,) float32 at 16 kHz, noise mixed in;
    ``words`` one :class:`Segment` per digit ("0".."9"), ``phonemes`` language-prefixed eSpeak
    mnemonics; boundaries in samples; ``snr_db`` None when clean."""

    id: str
    audio: Tensor
    digits: str
    voice: str
    language: str
    snr_db: float | None
    words: list[Segment]
    phonemes: list[Segment]

    def frame_words(self) -> list[str]:
        """The word ("0".."9") or "sil" at each 25 ms / 10 ms frame's centre."""
        from tfam.data.audio import frame_labels

        segments = [(s.start, s.end, s.label) for s in self.words]
        return frame_labels(segments, int(self.audio.shape[-1]), silence=SILENCE)

    def frame_phonemes(self) -> list[str]:
        """The phoneme ("en:f") or "sil" at each 25 ms / 10 ms frame's centre."""
        from tfam.data.audio import frame_labels

        segments = [(s.start, s.end, s.label) for s in self.phonemes]
        return frame_labels(segments, int(self.audio.shape[-1]), silence=SILENCE)


# --- voices and splits -------------------------------------------------------------------------


def held_out_voices(
    languages: tuple[str, ...] = LANGUAGES, variants: tuple[str, ...] = VARIANTS
) -> tuple[list[str], list[str]]:
    """(test voices, val voices) for ``tag``/``transcribe``: in language ``i`` the variant
    ``i mod n`` is test and ``(i + n // 2) mod n`` val, so both sets mix male and female."""
    n = len(variants)
    if n < 3:
        raise ValueError(f"variants={variants!r}: need at least 3 (test, val and training)")
    test = [f"{lang}+{variants[i % n]}" for i, lang in enumerate(languages)]
    val = [f"{lang}+{variants[(i + n // 2) % n]}" for i, lang in enumerate(languages)]
    return test, val


def _voice_split(voice: str, settings: dict) -> str:
    test, val = held_out_voices(tuple(settings["languages"]), tuple(settings["variants"]))
    return "test" if voice in test else "val" if voice in val else "train"


def _check(split: str, task: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; valid tasks: {', '.join(TASKS)}")


# --- noise ----------------------------------------------------------------------------------


def _noise(n: int, colour: str, rng: np.random.Generator) -> np.ndarray:
    """``n`` samples of Gaussian noise whose power spectrum falls as 1 / f^k (white k = 0, pink
    1, brown 2), shaped in the frequency domain; scale is arbitrary (mix_at_snr sets it)."""
    white = rng.standard_normal(n)
    k = NOISE_COLOURS.index(colour)
    if k == 0 or n < 2:
        return white
    spectrum = np.fft.rfft(white)
    f = np.fft.rfftfreq(n)
    f[0] = f[1]  # no infinite gain at DC
    spectrum *= f ** (-k / 2)  # amplitude ~ f^(-k/2)  <=>  power ~ f^(-k)
    shaped = np.fft.irfft(spectrum, n)
    return shaped - shaped.mean()


# --- building ---------------------------------------------------------------------------------


def corpus_dir() -> Path:
    """Where the corpus lives: ``tfam_cache_dir() / "spoken-digits-v1"``."""
    return tfam_cache_dir() / CORPUS_NAME


def _settings(hours: float, languages, variants, seed: int) -> dict:
    if not (isinstance(hours, (int, float)) and hours > 0):
        raise ValueError(f"hours={hours!r} is invalid: expected a positive number")
    langs, vars_ = tuple(languages), tuple(variants)
    test, val = held_out_voices(langs, vars_)  # validates the variant count
    return {
        "name": CORPUS_NAME,
        "hours": float(hours),
        "languages": list(langs),
        "variants": list(vars_),
        "seed": int(seed),
        "sample_rate": SAMPLE_RATE,
        "max_digits": MAX_DIGITS,
        "snr_levels": list(SNR_LEVELS),
        "noise_colours": list(NOISE_COLOURS),
        "rate_wpm": [110, 230],
        "pitch": [30, 70],
        "pitch_range": [30, 80],
        "word_gap_10ms": [0, 25],
        "edge_silence_s": [0.1, 0.4],
        "peak": [0.25, 0.95],
        "speaker_fractions": list(SPEAKER_FRACTIONS),
        "test_voices": test,
        "val_voices": val,
    }


def _phoneme_label(language: str, mnemonic: str) -> str:
    return f"{language}:{mnemonic.replace(chr(39), '').replace(',', '')}"  # drop stress marks


def _make_utterance(index: int, voice: str, k: int, settings: dict) -> tuple[np.ndarray, dict]:
    """The ``k``-th utterance of ``voice`` (the corpus's ``index``-th): int16 audio, metadata."""
    rng = np.random.default_rng([settings["seed"], index])
    language = voice.split("+")[0]
    digits = "".join(str(d) for d in rng.integers(0, 10, size=int(rng.integers(1, MAX_DIGITS + 1))))
    params = {
        "rate": int(rng.integers(110, 231)),
        "pitch": int(rng.integers(30, 71)),
        "pitch_range": int(rng.integers(30, 81)),
        "word_gap": int(rng.integers(0, 26)),
    }
    s = synthesize(" ".join(digits), voice, sample_rate=SAMPLE_RATE, **params)
    if [w.label for w in s.words] != list(digits):
        raise RuntimeError(
            f"eSpeak spoke {digits!r} in {voice} as words {[w.label for w in s.words]}: "
            "expected one word per digit"
        )
    lead, tail = (int(rng.uniform(0.1, 0.4) * SAMPLE_RATE) for _ in range(2))
    speech = s.audio.numpy().astype(np.float64)
    audio = np.concatenate([np.zeros(lead), speech, np.zeros(tail)])
    audio *= rng.uniform(0.25, 0.95) / max(np.abs(audio).max(), 1e-9)
    snr_db = SNR_LEVELS[(k + _snr_offset(voice)) % len(SNR_LEVELS)]
    colour = None
    if snr_db is not None:
        from tfam.data.audio import mix_at_snr

        colour = NOISE_COLOURS[int(rng.integers(0, len(NOISE_COLOURS)))]
        noise = _noise(len(audio), colour, rng)
        mixed = mix_at_snr(torch.from_numpy(audio), torch.from_numpy(noise), snr_db)
        audio = mixed.numpy().astype(np.float64)
        peak = np.abs(audio).max()
        if peak > 0.99:  # scaling both together keeps the SNR
            audio *= 0.99 / peak
    pcm = np.clip(np.round(audio * 32767), -32768, 32767).astype(np.int16)
    meta = {
        "id": f"sd{index:06d}",
        "digits": digits,
        "voice": voice,
        "language": language,
        "snr_db": snr_db,
        "noise": colour,
        **params,
        "words": [[w.start + lead, w.end + lead, w.label] for w in s.words],
        "phonemes": [
            [p.start + lead, p.end + lead, _phoneme_label(language, p.label)] for p in s.phonemes
        ],
    }
    return pcm, meta


def _snr_offset(voice: str) -> int:
    """A fixed per-voice start in the cycle of noise conditions (sha256, not Python's hash)."""
    return int(hashlib.sha256(voice.encode()).hexdigest(), 16) % len(SNR_LEVELS)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(root: str | Path | None = None) -> dict | None:
    """The corpus's manifest (settings, counts, hours, checksums), or None when not built."""
    path = Path(root or corpus_dir()) / _MANIFEST_FILE
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _verify(root: Path, manifest: dict) -> str | None:
    """None when every file matches its checksum, else one line saying which does not."""
    key = (str(root.resolve()), hashlib.sha256(json.dumps(manifest).encode()).hexdigest())
    if key in _VERIFIED:
        return None
    for name, digest in manifest.get("sha256", {}).items():
        path = root / name
        if not path.is_file():
            return f"{path} is missing"
        if _sha256(path) != digest:
            return f"{path} does not match its sha256 in {_MANIFEST_FILE} (corrupted or changed)"
    _VERIFIED.add(key)
    return None


def build_corpus(
    root: str | Path | None = None,
    *,
    progress: bool = True,
    hours: float = DEFAULT_HOURS,
    languages: tuple[str, ...] = LANGUAGES,
    variants: tuple[str, ...] = VARIANTS,
    seed: int = 0,
    force: bool = False,
) -> Path:
    """Build the corpus into ``root`` (default :func:`corpus_dir`) unless a verified build with
    the same settings is there; returns ``root``. ``hours`` of audio in all, voices
    ``languages`` x ``variants``. A bad or different build is rebuilt with a one-line warning."""
    root = Path(root or corpus_dir())
    settings = _settings(hours, languages, variants, seed)
    manifest = read_manifest(root)
    if manifest is not None and not force:
        if manifest.get("settings") == settings:
            problem = _verify(root, manifest)
            if problem is None:
                return root
            warnings.warn(f"{CORPUS_NAME}: {problem}; rebuilding", stacklevel=2)
        else:
            warnings.warn(f"{CORPUS_NAME}: {root} holds other settings; rebuilding", stacklevel=2)
    _build(root, settings, progress)
    return root


def _build(root: Path, settings: dict, progress: bool) -> None:
    start = time.perf_counter()
    voice_list = [f"{lang}+{v}" for lang in settings["languages"] for v in settings["variants"]]
    target = settings["hours"] * 3600 * SAMPLE_RATE
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=round(settings["hours"] * 3600), unit="s", desc=f"building {CORPUS_NAME}")
    chunks: list[np.ndarray] = []
    metas: list[dict] = []
    total = 0
    index = 0
    try:
        while total < target:  # voice by voice in turn, so every voice gets its share
            voice = voice_list[index % len(voice_list)]
            pcm, meta = _make_utterance(index, voice, index // len(voice_list), settings)
            meta["offset"], meta["length"] = total, len(pcm)
            chunks.append(pcm)
            metas.append(meta)
            total += len(pcm)
            index += 1
            if bar is not None:
                bar.update(round(total / SAMPLE_RATE) - bar.n)
    finally:
        if bar is not None:
            bar.close()
    _assign_speaker_splits(metas, settings)
    buffer = io.BytesIO()
    np.save(buffer, np.concatenate(chunks), allow_pickle=False)
    root.mkdir(parents=True, exist_ok=True)
    (root / _MANIFEST_FILE).unlink(missing_ok=True)  # no manifest = no complete build
    atomic_write_bytes(root / _AUDIO_FILE, buffer.getvalue())
    lines = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in metas)
    atomic_write_bytes(root / _INDEX_FILE, lines.encode())
    seconds = {split: 0.0 for split in SPLITS}
    for m in metas:
        seconds[_voice_split(m["voice"], settings)] += m["length"] / SAMPLE_RATE
    manifest = {
        "settings": settings,
        "espeakng_loader": _loader_version(),
        "utterances": len(metas),
        "voices": voice_list,
        "hours": round(total / SAMPLE_RATE / 3600, 4),
        "hours_by_voice_split": {k: round(v / 3600, 4) for k, v in seconds.items()},
        "phonemes": sorted({p[2] for m in metas for p in m["phonemes"]}),
        "build_seconds": round(time.perf_counter() - start, 1),
        "sha256": {name: _sha256(root / name) for name in (_AUDIO_FILE, _INDEX_FILE)},
    }
    atomic_write_bytes(root / _MANIFEST_FILE, (json.dumps(manifest, indent=1) + "\n").encode())
    _VERIFIED.add((str(root.resolve()), hashlib.sha256(json.dumps(manifest).encode()).hexdigest()))


def _assign_speaker_splits(metas: list[dict], settings: dict) -> None:
    """Within each training voice, a seeded shuffle of its utterances cut 80 / 10 / 10."""
    rng = np.random.default_rng([settings["seed"], 1])
    by_voice: dict[str, list[dict]] = {}
    for m in metas:
        m["speaker_split"] = None
        if _voice_split(m["voice"], settings) == "train":
            by_voice.setdefault(m["voice"], []).append(m)
    for group in by_voice.values():
        order = rng.permutation(len(group))
        n = len(group)
        # at least one val and one test utterance per voice once it has three
        n_val = max(round(SPEAKER_FRACTIONS[1] * n), 1 if n >= 3 else 0)
        n_test = max(round(SPEAKER_FRACTIONS[2] * n), 1 if n >= 3 else 0)
        n_train = n - n_val - n_test
        for rank, i in enumerate(order):
            split = "train" if rank < n_train else "val" if rank < n_train + n_val else "test"
            group[i]["speaker_split"] = split


def _loader_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("espeakng-loader")
    except PackageNotFoundError:
        return "unknown"


# --- loading ----------------------------------------------------------------------------------


def _ready(root: str | Path | None) -> tuple[Path, dict]:
    """The corpus root and its verified manifest, building the default corpus when absent."""
    if root is None:
        root = build_corpus()
        manifest = read_manifest(root)
    else:
        root = Path(root)
        manifest = read_manifest(root)
        if manifest is None:
            build_corpus(root)
            manifest = read_manifest(root)
        else:
            problem = _verify(root, manifest)
            if problem is not None:
                s = manifest["settings"]
                warnings.warn(f"{CORPUS_NAME}: {problem}; rebuilding", stacklevel=3)
                build_corpus(
                    root,
                    hours=s["hours"],
                    languages=tuple(s["languages"]),
                    variants=tuple(s["variants"]),
                    seed=s["seed"],
                    force=True,
                )
                manifest = read_manifest(root)
    assert manifest is not None
    return root, manifest


def _selected(meta: dict, split: str, task: str, settings: dict) -> bool:
    if task == "speaker":
        return meta["speaker_split"] == split
    return _voice_split(meta["voice"], settings) == split


def load_split(split: str, task: str, *, root: str | Path | None = None) -> list[Utterance]:
    """The utterances of ``split`` ("train", "val", "test") for ``task``: "tag" and
    "transcribe" split by voice (test = the held-out voices, never heard in training),
    "speaker" by utterance within the training voices. Builds the corpus on first use."""
    _check(split, task)
    root, manifest = _ready(root)
    settings = manifest["settings"]
    audio = np.load(root / _AUDIO_FILE, mmap_mode="r")
    out = []
    with open(root / _INDEX_FILE, encoding="utf-8") as f:
        for line in f:
            m = json.loads(line)
            if not _selected(m, split, task, settings):
                continue
            pcm = np.asarray(audio[m["offset"] : m["offset"] + m["length"]], dtype=np.float32)
            out.append(
                Utterance(
                    id=m["id"],
                    audio=torch.from_numpy(pcm / 32768.0),
                    digits=m["digits"],
                    voice=m["voice"],
                    language=m["language"],
                    snr_db=m["snr_db"],
                    words=[Segment(s, e, label) for s, e, label in m["words"]],
                    phonemes=[Segment(s, e, label) for s, e, label in m["phonemes"]],
                )
            )
    return out


def voices(task: str, *, root: str | Path | None = None) -> list[str]:
    """The voices a task trains on, sorted: for "speaker" its label set (the training voices)."""
    _check("train", task)
    _, manifest = _ready(root)
    s = manifest["settings"]
    return sorted(v for v in manifest["voices"] if _voice_split(v, s) == "train")
