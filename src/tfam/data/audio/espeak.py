"""eSpeak NG through ctypes: speech with word and phoneme boundaries, offline.

    from tfam.data.audio.espeak import synthesize
    s = synthesize("4 0 7", voice="en+m3", rate=160, pitch=40, word_gap=5)
    s.audio                    # (samples,) float32 at 16 kHz
    s.words                    # [Segment(start=4312, end=..., label="4"), ...]  (16 kHz samples)
    s.phonemes                 # [Segment(..., label="f"), Segment(..., label="'o@"), ...]

The engine is the ``libespeak-ng.so`` and the ``espeak-ng-data`` directory that the PyPI
package ``espeakng-loader`` bundles (no Debian package, no subprocess). The binding follows
``speak_lib.h`` (API revision 12): ``espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, ...,
espeakINITIALIZE_PHONEME_EVENTS)`` once, a synth callback that collects the int16 samples
(22,050 Hz) and the events: ``espeakEVENT_WORD`` (text position and length of the word),
``espeakEVENT_PHONEME`` (the phoneme's mnemonic in ``id.string``), ``espeakEVENT_END``; each
event's ``sample`` field is its offset in the output, in samples at the engine's rate.

Boundaries: a phoneme runs from its event to the next phoneme (or end) event; pause phonemes
(mnemonics starting with ``_``) are silence and are left out. A word runs from its first
phoneme's start to its last phoneme's end, so the short silences eSpeak leaves before and
between words are not inside any word. Phonemes belong to the word whose WORD event precedes
them. Boundaries are converted to the output rate by ``round(s * 16000 / 22050)``.

The library is process-global and not re-entrant: every call holds one lock, and the engine
is initialised once per process.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "ENGINE_RATE",
    "EspeakError",
    "Segment",
    "Synthesis",
    "espeak_paths",
    "synthesize",
    "variants",
]

ENGINE_RATE = 22_050  # what espeak_Initialize returns for the bundled engine

# speak_lib.h
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_PHONEME_EVENTS = 0x0001
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_EVENT_LIST_TERMINATED, _EVENT_WORD, _EVENT_END, _EVENT_MSG_TERMINATED, _EVENT_PHONEME = (
    0,
    1,
    5,
    6,
    7,
)
_RATE, _PITCH, _RANGE, _WORDGAP = 1, 3, 4, 7  # espeak_PARAMETER


class EspeakError(RuntimeError):
    """The engine is missing or refused a request (one line naming what)."""


@dataclass(frozen=True)
class Segment:
    """A labelled stretch of audio: samples ``start`` (inclusive) to ``end`` (exclusive)."""

    start: int
    end: int
    label: str


@dataclass
class Synthesis:
    """What :func:`synthesize` returns: ``audio`` (samples,) float32 in [-1, 1] at
    ``sample_rate``; ``words`` and ``phonemes`` in order, boundaries in samples at that rate."""

    audio: Tensor
    words: list[Segment]
    phonemes: list[Segment]
    sample_rate: int


class _EventId(ctypes.Union):
    _fields_ = [
        ("number", ctypes.c_int),  # WORD and SENTENCE events
        ("name", ctypes.c_char_p),  # MARK and PLAY events
        ("string", ctypes.c_char * 8),  # PHONEME events: the mnemonic, NUL-terminated if < 8
    ]


class _Event(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),  # characters from the start of the text, 1-based
        ("length", ctypes.c_int),  # the word's length in characters (WORD events)
        ("audio_position", ctypes.c_int),  # milliseconds
        ("sample", ctypes.c_int),  # samples at the engine's rate
        ("user_data", ctypes.c_void_p),
        ("id", _EventId),
    ]


_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event)
)

_LOCK = threading.Lock()
_ENGINE: _Engine | None = None


def espeak_paths() -> tuple[Path, Path]:
    """(the shared library, the ``espeak-ng-data`` directory) of ``espeakng-loader``."""
    try:
        import espeakng_loader
    except ImportError as err:
        raise EspeakError(
            "eSpeak NG is not installed: pip install espeakng-loader (it bundles libespeak-ng)"
        ) from err
    return Path(espeakng_loader.get_library_path()), Path(espeakng_loader.get_data_path())


class _Engine:
    """The loaded library, initialised once; holds the callback alive and what it collects."""

    def __init__(self) -> None:
        library, data = espeak_paths()
        lib = ctypes.CDLL(str(library))
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_SetSynthCallback.argtypes = [_CALLBACK]
        lib.espeak_SetSynthCallback.restype = None
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        lib.espeak_Synth.restype = ctypes.c_int
        rate = lib.espeak_Initialize(
            _AUDIO_OUTPUT_SYNCHRONOUS, 0, str(data).encode(), _INITIALIZE_PHONEME_EVENTS
        )
        if rate != ENGINE_RATE:
            raise EspeakError(
                f"espeak_Initialize({data}) returned {rate}: expected {ENGINE_RATE} Hz"
            )
        self.lib = lib
        self.data = data
        self.chunks: list[np.ndarray] = []
        # (type, text_position, length, sample, mnemonic) per event
        self.events: list[tuple[int, int, int, int, str]] = []
        self.callback = _CALLBACK(self._collect)  # kept referenced: C holds the pointer
        lib.espeak_SetSynthCallback(self.callback)

    def _collect(self, wav, n: int, events) -> int:
        if wav and n > 0:
            self.chunks.append(np.ctypeslib.as_array(wav, (n,)).copy())
        i = 0
        while events[i].type != _EVENT_LIST_TERMINATED:
            e = events[i]
            name = bytes(e.id.string).split(b"\0")[0].decode() if e.type == _EVENT_PHONEME else ""
            self.events.append((e.type, e.text_position, e.length, e.sample, name))
            i += 1
        return 0  # 0 = continue


def _engine() -> _Engine:
    global _ENGINE
    if _ENGINE is None:
        _ENGINE = _Engine()
    return _ENGINE


def variants() -> list[str]:
    """The voice variants eSpeak NG ships (``espeak-ng-data/voices/!v``), e.g. ``m3``, ``f2``."""
    return sorted(p.name for p in (espeak_paths()[1] / "voices" / "!v").iterdir())


def _check_range(name: str, value: int, lo: int, hi: int) -> int:
    if not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name}={value!r} is invalid: expected an int in [{lo}, {hi}]")
    return value


def synthesize(
    text: str,
    voice: str = "en",
    *,
    rate: int = 175,
    pitch: int = 50,
    pitch_range: int = 50,
    word_gap: int = 0,
    sample_rate: int = 16_000,
) -> Synthesis:
    """Speak ``text`` with ``voice`` (a language, or language + variant: ``"en+m3"``).

    ``rate`` in words per minute (80-450; 175 normal), ``pitch`` and ``pitch_range`` 0-100 (50
    normal, relative to the variant's own pitch), ``word_gap`` a pause between words in units
    of 10 ms. The audio is resampled from 22,050 Hz to ``sample_rate`` and every boundary with
    it. Raises :class:`EspeakError` for an unknown voice or a failed synthesis.
    """
    from tfam.data.audio import resample

    _check_range("rate", rate, 80, 450)
    _check_range("pitch", pitch, 0, 100)
    _check_range("pitch_range", pitch_range, 0, 100)
    _check_range("word_gap", word_gap, 0, 1000)
    encoded = text.encode("utf-8")
    with _LOCK:
        engine = _engine()
        lib = engine.lib
        if lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise EspeakError(
                f"eSpeak NG has no voice {voice!r}: expected a language of "
                f"{engine.data / 'lang'} optionally with +variant from voices/!v"
            )
        for parameter, value in ((_RATE, rate), (_PITCH, pitch), (_RANGE, pitch_range)):
            lib.espeak_SetParameter(parameter, value, 0)
        lib.espeak_SetParameter(_WORDGAP, word_gap, 0)
        engine.chunks, engine.events = [], []
        status = lib.espeak_Synth(
            encoded, len(encoded) + 1, 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None
        )
        chunks, events = engine.chunks, engine.events
        engine.chunks, engine.events = [], []
    if status != 0:
        raise EspeakError(f"espeak_Synth({text!r}, voice={voice!r}) failed with status {status}")
    raw = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)
    words, phonemes = _segments(text, events, len(raw))
    audio = torch.from_numpy(raw.astype(np.float32) / 32768.0)
    if sample_rate != ENGINE_RATE:
        audio = resample(audio, ENGINE_RATE, sample_rate).to(torch.float32)

    def scale(s: int) -> int:
        return min(round(s * sample_rate / ENGINE_RATE), audio.shape[-1])

    return Synthesis(
        audio=audio,
        words=[Segment(scale(w.start), scale(w.end), w.label) for w in words],
        phonemes=[Segment(scale(p.start), scale(p.end), p.label) for p in phonemes],
        sample_rate=sample_rate,
    )


def _segments(
    text: str, events: list[tuple[int, int, int, int, str]], num_samples: int
) -> tuple[list[Segment], list[Segment]]:
    """Word and phoneme segments (engine samples) from the event list (see the module doc)."""
    words: list[Segment] = []
    phonemes: list[Segment] = []
    word_label: str | None = None
    word_phonemes: list[Segment] = []

    def close_word() -> None:
        if word_label is None:
            return
        if not word_phonemes:
            raise EspeakError(f"eSpeak NG spoke no phoneme for the word {word_label!r} of {text!r}")
        words.append(Segment(word_phonemes[0].start, word_phonemes[-1].end, word_label))

    # phoneme/end events in order: a phoneme ends where the next one (or the end) begins
    marks = [(sample, name) for kind, _, _, sample, name in events if kind == _EVENT_PHONEME]
    k = 0  # index into marks
    for kind, position, length, sample, name in events:
        if kind == _EVENT_WORD:
            close_word()
            word_label = text[position - 1 : position - 1 + length]  # characters, 1-based
            word_phonemes = []
        elif kind == _EVENT_PHONEME:
            end = marks[k + 1][0] if k + 1 < len(marks) else num_samples
            end = min(end, num_samples)
            k += 1
            if name.startswith("_") or end <= sample:
                continue  # a pause (or an empty phoneme): silence
            segment = Segment(sample, end, name)
            phonemes.append(segment)
            if word_label is not None:
                word_phonemes.append(segment)
    close_word()
    return words, phonemes
